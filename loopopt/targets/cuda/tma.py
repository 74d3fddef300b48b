"""The tensor memory accelerator (TMA, ``sm_90``) as the copy engine of a staged operand
(``stage(tensor, at, engine="tma")``): what it can copy, and the code that drives it.

A tensor-core tile is ``rows x k`` elements of one input (``rows`` the instruction's ``m`` or ``n``,
``k`` its depth) in the 32-byte swizzle that ``wgmma``'s descriptors read. Where the input is a 2-D
tensor stored row by row with the reduction channel contiguous (a Matmul's or Gemm's operand in the
layout ``gpu_wmma`` gives it, or with its rows padded to whole blocks of that channel: ``padded_rows``)
and the tile's rows and columns are consecutive rows and columns of it,
that tile is one TMA box: ``cp.async.bulk.tensor.2d`` with a tensor map of the tensor (built in the
launcher through ``cuTensorMapEncodeTiled``, found with ``cudaGetDriverEntryPointByVersion``: no
``-lcuda``), box ``k x rows``, the same 32-byte swizzle, zero fill outside the tensor (its tails). One
thread issues a pipeline step's boxes after ``mbarrier.arrive.expect_tx`` of their bytes on the
step's barrier (one per buffer of the ring); every thread waits on that barrier's phase before the
step's products. A conv's im2col tiles are boxes of its N-D tensors where ``gpu_wmma`` tiles its
output pixels as boxes (``pixel_boxes``); other gathers keep the threads' ``cp.async``.

The host emulation runs the same steps: the box copy writes each element at the byte address the
hardware's swizzle gives (bits 4-6 XORed with bits 7-9, as wide as the swizzle), and the barrier
counts the bytes it expects against those copied: a step whose count is off poisons its buffer
(NaN), so a wrong box, swizzle or byte count fails the verification without a GPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...expr import Const, Expr, Var, linear_terms
from ...layout import Layout
from ...schedule import SWIZZLE_WIDTHS, Schedule, ScheduleError
from . import pixel_boxes
from .instructions import MatrixInstruction

SWIZZLE_BYTES = 32          # the tiles' swizzle (_swizzled_32b): CU_TENSOR_MAP_SWIZZLE_32B
_SWIZZLE_ENUM = {32: 1, 64: 2, 128: 3}          # CUtensorMapSwizzle
_L2_PROMOTION_128B = 2
MAX_BOX = 256               # elements of a TMA box along one dim


@dataclass(frozen=True)
class TmaOperand:
    """An input whose tiles TMA copies: a ``rows x cols`` tensor (``cols`` contiguous) read in boxes of
    ``box_rows x box_cols``, a tile's first element at row ``y`` and column ``x`` (expressions of the
    kernel's loops)."""

    tensor: str
    rows: int
    cols: int
    box_rows: int
    box_cols: int
    element_bytes: int
    dtype: str
    y: Expr
    x: Expr
    slices: int = 1     # boxes of box_rows a tile: the blocks of a cluster copy one each (``cluster.py``)
    swizzle: int = 0    # the tiles' swizzle in bytes (``Schedule.swizzle``); 0: SWIZZLE_BYTES

    @property
    def swizzle_bytes(self) -> int:
        return self.swizzle or SWIZZLE_BYTES

    @property
    def box_bytes(self) -> int:
        return self.box_rows * self.box_cols * self.element_bytes

    @property
    def tile_bytes(self) -> int:
        """The bytes of a tile, which its buffer's barrier expects."""
        return self.box_bytes * self.slices

    @property
    def map_name(self) -> str:
        return f"lo_map_{self.tensor}"

    @property
    def rank(self) -> int:
        return 2

    def issue(self, dst: str, barrier: str, device: bool) -> str:
        """The statement copying the tile at ``dst`` on ``barrier`` (one box)."""
        coordinates = f"(int) ({self.x.to_c()}), (int) ({self.y.to_c()})"
        if device:
            return f"lo_tma_2d({dst}, &{self.map_name}, {coordinates}, {barrier});"
        return (f"lo_tma_2d(lo_smem_h, {dst}, &{self.map_name}, {coordinates}, {self.box_rows}, "
                f"{self.box_cols}, {barrier});")

    def encode(self) -> str:
        """The launcher's statement building this operand's tensor map (returns an error code on
        failure: a base address not on 16 bytes, say)."""
        name = self.map_name
        return (f"    lo_tensor_map {name}; {{ const unsigned long long lo_dims[2] = {{{self.cols}ull, "
                f"{self.rows}ull}}, lo_strides[1] = {{{self.cols * self.element_bytes}ull}}; "
                f"const unsigned lo_box[2] = {{{self.box_cols}u, {self.box_rows}u}}, "
                f"lo_unit[2] = {{1u, 1u}}; "
                f"if (lo_encode(&{name}, {pixel_boxes.MAP_TYPES[self.dtype]}, 2, (void *) {self.tensor}, "
                f"lo_dims, "
                f"lo_strides, lo_box, lo_unit, 0, {_SWIZZLE_ENUM[self.swizzle_bytes]}, "
                f"{_L2_PROMOTION_128B}, 0) "
                f"!= 0) return (int) cudaErrorInvalidValue; }}")

    def host_map(self) -> str:
        """The host emulation's description of the tensor (what the map holds)."""
        base = self.tensor if self.element_bytes == 2 else f"(const unsigned char *) {self.tensor}"
        return (f"const lo_tensor_map {self.map_name} = {{{base}, {self.rows}, {self.cols}, "
                f"{self.swizzle_bytes}}};")


def operand(schedule: Schedule, tensor: str, ins: MatrixInstruction, row_loop: str, k_loop: str,
            rows: int, guards: list[str], slices: tuple[str, ...] = ()) -> TmaOperand | pixel_boxes.PixelBox:
    """``tensor`` staged by TMA in ``schedule`` (tiles of ``rows`` rows along ``row_loop`` and ``ins.k``
    columns along ``k_loop``; in a wider swizzle, ``Schedule.swizzle``, the columns of the k-slices
    ``slices`` too, ``ins.k`` apart: a step's row); a conv's N-D tensor as boxes of pixels
    (``pixel_boxes``); ScheduleError naming what TMA cannot copy."""
    op, where = schedule.op, f"stage({tensor!r}, engine='tma')"
    if not ins.asynchronous:
        raise ScheduleError(f"{where} fills the tiles that wgmma's descriptors read; {ins.name} loads its "
                            f"tiles through the threads: stage with engine='threads' or tensorize onto a "
                            f"wgmma entry")
    layout = schedule.layout_of(tensor)
    info = op.tensor(tensor)
    logical = dict(zip(info.letters, op.index(tensor)))
    padded = padded_rows(layout)
    index = [logical[letter] for letter, block in layout.order[:2 if padded else None]]
    plain = (len(index) == 2 and all(isinstance(e, Var) for e in index)
             and (len(layout.order) == len(info.letters) or padded)
             and index[1] == Var(op.reduction_channel_dim))
    width = schedule.tile_swizzle
    if not plain and len(layout.order) > 2:      # a conv's tensor: its tiles as boxes of pixels
        return pixel_boxes.operand(schedule, tensor, ins, row_loop, k_loop, rows, slices,
                                   width // ins.element_bytes, width)
    if not plain:
        raise ScheduleError(f"{where}: TMA copies boxes of a 2-D tensor stored row by row with the reduction "
                            f"channel {op.reduction_channel_dim!r} contiguous; {tensor} is stored "
                            f"{layout.tag} at [{', '.join(e.to_c() for e in index)}] (a layout with "
                            f"{op.reduction_channel_dim!r} last would do; an im2col gather keeps "
                            f"engine='threads')")
    row_count, cols = storage_rows(layout, info.shape)
    row_bytes = cols * ins.element_bytes
    if row_bytes % 16:
        raise ScheduleError(f"{where}: TMA needs each row of {tensor} on 16 bytes; its rows are {cols} "
                            f"elements ({row_bytes} bytes): pad them to a multiple of "
                            f"{16 // ins.element_bytes}")
    if rows > MAX_BOX:
        raise ScheduleError(f"{where}: a tile of {rows} rows is over a TMA box's {MAX_BOX}")
    r_expr, c_expr = (schedule.dim_values[e.name] for e in index)
    try:
        consecutive = along(r_expr, c_expr, row_loop, k_loop) and all(
            linear_terms(c_expr, frozenset([s]))[0].get(s) == ins.k and s not in r_expr.variables()
            for s in slices)
    except ValueError:
        consecutive = False
    if not consecutive:
        columns = ", ".join((k_loop, *slices))
        raise ScheduleError(f"{where}: a tile's rows ({row_loop}) and columns ({columns}) "
                            f"are not consecutive rows and columns of {tensor} ({r_expr.to_c()}, "
                            f"{c_expr.to_c()})")
    inside = {k_loop} | {loop.name for loop in schedule.loops[schedule.position(schedule.stages[0][1]) + 1:]
                         if schedule.dims_of(loop.name) & op.reduction_dims}
    for guard in schedule.guards:
        names = guard.expr.variables()
        if guard.to_c() in guards and names & inside and not c_expr.variables() <= names:
            raise ScheduleError(f"{where}: the guard {guard.to_c()} skips columns inside a tile, which TMA "
                                f"copies whole (it zero-fills only outside {tensor}): split the reduction "
                                f"by multiples of {ins.k}")
    return TmaOperand(tensor, row_count, cols, rows, width // ins.element_bytes, ins.element_bytes,
                      ins.operands[0],
                      r_expr.substitute({row_loop: Const(0)}),
                      c_expr.substitute({name: Const(0) for name in (k_loop, *slices)}),
                      swizzle=0 if width == SWIZZLE_WIDTHS[0] else width)


def padded_rows(layout: Layout) -> bool:
    """Whether ``layout`` stores a 2-D tensor row by row with its columns blocked innermost (``NK64k``:
    each row's columns padded with zeros to whole blocks): TMA reads it as rows of the padded length, so
    that a block of 64 float16 columns puts every row on whole 128-byte L2 lines."""
    order = layout.order
    return len(order) == 3 and order[0][1] == 0 and order[1][1] == 0 and order[2][1] > 0 \
        and order[1][0] == order[2][0] != order[0][0]


def storage_rows(layout: Layout, shape: tuple[int, ...]) -> tuple[int, int]:
    """The rows of a 2-D tensor of logical ``shape`` stored in ``layout`` (row by row, or in
    ``padded_rows``) and the elements a row takes: a padded row's blocks, zeros past the tensor's
    columns that TMA reads as columns."""
    rows, *row = layout.storage_shape(shape)
    return rows, math.prod(row)


def along(r_expr: Expr, c_expr: Expr, row_loop: str, column_loop: str) -> bool:
    """Whether ``row_loop`` steps a 2-D tensor's row index ``r_expr`` by one and ``column_loop`` its
    column index ``c_expr`` by one, each leaving the other index alone (consecutive rows and columns of
    a tile are consecutive rows and columns of the tensor)."""
    try:
        return (linear_terms(r_expr, frozenset([row_loop]))[0].get(row_loop) == 1
                and linear_terms(c_expr, frozenset([column_loop]))[0].get(column_loop) == 1
                and column_loop not in r_expr.variables() and row_loop not in c_expr.variables())
    except ValueError:
        return False


# --- device code -------------------------------------------------------------------------------
DEVICE = r"""
typedef struct { alignas(128) unsigned long long opaque[16]; } lo_tensor_map;   /* CUtensorMap */
#define LO_SHARED(p) ((unsigned) __cvta_generic_to_shared(p))
static __device__ __forceinline__ void lo_barriers_init(unsigned long long *bar, int count)
{
    for (int i = 0; i < count; ++i)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(LO_SHARED(bar + i)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
static __device__ __forceinline__ void lo_empty_init(unsigned long long *bar, int count, int arrivals)
{   /* a buffer is free once its readers arrived (a cluster's blocks, a specialized kernel's consumers) */
    for (int i = 0; i < count; ++i)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(LO_SHARED(bar + i)), "r"(arrivals)
                     : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
static __device__ __forceinline__ void lo_expect(unsigned long long *bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(LO_SHARED(bar)), "r"(bytes)
                 : "memory");
}
static __device__ __forceinline__ void lo_wait(unsigned long long *bar, unsigned parity)
{
    unsigned done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(LO_SHARED(bar)), "r"(parity) : "memory");
}
static __device__ __forceinline__ void lo_tma_2d(void *dst, const lo_tensor_map *map, int x, int y,
                                                 unsigned long long *bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3}], [%4];"
                 :: "r"(LO_SHARED(dst)), "l"((unsigned long long) map), "r"(x), "r"(y), "r"(LO_SHARED(bar))
                 : "memory");
}"""

LAUNCHER = r"""typedef int (*lo_encode_tiled)(lo_tensor_map *, int, unsigned, void *,
                              const unsigned long long *, const unsigned long long *, const unsigned *,
                              const unsigned *, int, int, int, int);
static lo_encode_tiled lo_encoder(void)
{   /* cuTensorMapEncodeTiled from the driver, through the runtime: no -lcuda */
    static lo_encode_tiled encode = 0;
    if (!encode) {
        cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **) &encode, 12000,
                                             cudaEnableDefault, &found) != cudaSuccess
            || found != cudaDriverEntryPointSuccess)
            encode = 0;
    }
    return encode;
}"""

ENCODER = ("    const lo_encode_tiled lo_encode = lo_encoder(); if (!lo_encode) return (int) "
           "cudaErrorSymbolNotFound;")

# --- the host emulation's meaning of the same calls ----------------------------------------------
def host(element_bytes: int) -> str:
    """The host emulation's TMA of tiles of ``element_bytes``-byte elements (2: float16 and bfloat16,
    held as float; 1: int8 bytes)."""
    element, zero, poison = ("float", "0.0f", "NAN") if element_bytes == 2 else ("unsigned char", "0", "0x5A")
    return _HOST.format(t=element, size=element_bytes, zero=zero, poison=poison)


_HOST = r"""
typedef struct {{ const {t} *base; long rows, cols; int swizzle; }} lo_tensor_map;
static void lo_expect(long *count, long bytes) {{ *count += bytes; }}
/* the box at (x, y) of a 2-D tensor of {size}-byte elements into shared memory at dst, each element at the
   byte address the hardware swizzles (bits 4.. XOR bits 7..), zero outside the tensor */
static void lo_tma_2d({t} *smem, {t} *dst, const lo_tensor_map *map, long x, long y, int rows, int cols,
                      long *count)
{{
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {{
            long at = (long) (dst - smem) * {size} + (long) (r * cols + c) * {size};
            at ^= (at >> 7 & (map->swizzle / 16 - 1)) << 4;
            long row = y + r, col = x + c;
            int inside = row >= 0 && row < map->rows && col >= 0 && col < map->cols;
            smem[at / {size}] = inside ? map->base[row * map->cols + col] : {zero};
        }}
    *count -= (long) rows * cols * {size};
}}
/* a step's barrier: its buffer is poisoned ({poison}) unless the bytes copied are the bytes expected */
static void lo_wait(long *count, {t} *buffer, long elements)
{{
    if (*count != 0)
        for (long e = 0; e < elements; ++e) buffer[e] = {poison};
    *count = 0;
}}"""
