"""A conv's im2col tiles as TMA boxes of its N-D tensors (``stage(tensor, at, engine="tma")`` where the
input is no 2-D matrix: ``tma.operand`` hands it here).

For one filter tap and one channel slice, a wgmma tile of a conv's activations is a rectangle of output
pixels (``gpu_wmma``'s pixel box: the block's rows tile ``n, oh, ow`` as a box, ``pixel_box``), which
is a *tiled-mode* box of the input stored channels last, ``[N, H, W, C]``: its start coordinates are
``(n0, oh0*stride + kh*dilation - pad_top, ow0*stride + kw*dilation - pad_left, c0)``, its
``elementStrides`` the conv's strides, and the copy engine fills what lies outside the tensor (the
padding, negative or past the edge, and the channels' tail) with zeros. The weights' tile, output
channels by a channel slice at one tap of ``[K, KH, KW, C]``, is a box of one tap. A box's elements land
in shared memory in row-major order, the channels innermost: row ``r`` of the tile is the ``r``-th pixel
of the rectangle in ``n, oh, ow`` order, which is the order of the block's rows (the epilogue's row
mapping is the same schedule's), so the tile is the one ``wgmma``'s descriptors read.

The box is read off the schedule: the tensor's storage coordinates of each row and column of a tile,
evaluated at a few tile positions, must be a row-major box (a ScheduleError names the tensor and what
breaks it: a row order that is no box, a stride over TMA's 8, a box over 256 along a dim, rows not on
16 bytes). The host emulation copies through the same coordinates, strides and zero fill
(``host``): a wrong start coordinate, stride or a missing fill misses the reference without a GPU.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ...expr import Const, Expr, Var
from ...schedule import Schedule, ScheduleError
from .instructions import MatrixInstruction

MAX_BOX = 256               # elements of a TMA box along one dim
MAX_ELEMENT_STRIDE = 8      # TMA's elementStrides
# CUtensorMapDataType: FLOAT16, BFLOAT16, UINT8 (the int8 entries copy the stored bytes as they are)
MAP_TYPES = {"float16": 6, "bfloat16": 9, "int8": 0, "uint8": 0}
_SWIZZLE_ENUM = {32: 1, 64: 2, 128: 3}
_L2_PROMOTION_128B = 2


@dataclass(frozen=True)
class PixelBox:
    """An input copied in boxes of its N-D storage (dims innermost first): ``extents``, element
    ``strides`` (the innermost 1), a box of ``counts`` elements each ``steps`` apart along each dim
    (``elementStrides``), a tile's first element at ``start`` (expressions of the kernel's loops)."""

    tensor: str
    extents: tuple[int, ...]
    strides: tuple[int, ...]
    counts: tuple[int, ...]
    steps: tuple[int, ...]
    start: tuple[Expr, ...]
    element_bytes: int
    dtype: str
    swizzle_bytes: int
    slices: int = 1         # a cluster's multicast: 2-D boxes only (``tma.TmaOperand``)

    @property
    def rank(self) -> int:
        return len(self.extents)

    @property
    def tile_bytes(self) -> int:
        """The bytes of a tile, which its buffer's barrier expects."""
        return math.prod(self.counts) * self.element_bytes

    @property
    def map_name(self) -> str:
        return f"lo_map_{self.tensor}"

    def _list(self, values: tuple[int, ...], suffix: str) -> str:
        return ", ".join(f"{v}{suffix}" for v in values)

    def encode(self) -> str:
        """The launcher's statement building the tensor map (an error code on failure)."""
        name, rank = self.map_name, self.rank
        box = tuple(c * s for c, s in zip(self.counts, self.steps))     # traversed: counts x steps
        strides = tuple(s * self.element_bytes for s in self.strides[1:])
        return (f"    lo_tensor_map {name}; {{ const unsigned long long lo_dims[{rank}] = "
                f"{{{self._list(self.extents, 'ull')}}}, lo_strides[{rank - 1}] = "
                f"{{{self._list(strides, 'ull')}}}; const unsigned lo_box[{rank}] = "
                f"{{{self._list(box, 'u')}}}, lo_unit[{rank}] = {{{self._list(self.steps, 'u')}}}; "
                f"if (lo_encode(&{name}, {MAP_TYPES[self.dtype]}, {rank}, (void *) {self.tensor}, lo_dims, "
                f"lo_strides, lo_box, lo_unit, 0, {_SWIZZLE_ENUM[self.swizzle_bytes]}, "
                f"{_L2_PROMOTION_128B}, 0) != 0) return (int) cudaErrorInvalidValue; }}")

    def host_map(self) -> str:
        """The host emulation's description of the tensor (what the map holds)."""
        fields = ", ".join(f"{{{self._list(values, '')}}}"
                           for values in (self.extents, self.strides, self.counts, self.steps))
        base = self.tensor if self.element_bytes == 2 else f"(const unsigned char *) {self.tensor}"
        return (f"const lo_box_map {self.map_name} = {{{base}, {self.rank}, {fields}, "
                f"{self.swizzle_bytes}}};")

    def issue(self, dst: str, barrier: str, device: bool) -> str:
        """The statement copying the tile at ``dst`` on ``barrier``."""
        coordinates = ", ".join(f"(int) ({e.to_c()})" for e in self.start)
        if device:
            return f"lo_tma_{self.rank}d({dst}, &{self.map_name}, {coordinates}, {barrier});"
        return (f"lo_tma_nd(lo_smem_h, {dst}, &{self.map_name}, (const long []) {{{coordinates}}}, "
                f"{barrier});")


def operand(schedule: Schedule, tensor: str, ins: MatrixInstruction, row_loop: str, k_loop: str,
            rows: int, slices: tuple[str, ...], columns: int, swizzle: int) -> PixelBox:
    """``tensor``'s tiles of ``rows`` rows (``row_loop``) by ``columns`` (``k_loop``, the k-slices
    ``slices`` ``ins.k`` apart) as boxes of its storage; ScheduleError naming what TMA cannot copy."""
    op, where = schedule.op, f"stage({tensor!r}, engine='tma')"
    layout, info = schedule.layout_of(tensor), op.tensor(tensor)
    if any(block for _, block in layout.order):
        raise ScheduleError(f"{where}: TMA copies boxes of a tensor stored dim by dim; {tensor} is stored "
                            f"{layout.tag} (blocked)")
    logical = dict(zip(info.letters, op.index(tensor)))
    index = [logical[letter] for letter, _ in reversed(layout.order)]          # innermost first
    if index[0] != Var(op.reduction_channel_dim):
        raise ScheduleError(f"{where}: TMA's boxes need the reduction channel {op.reduction_channel_dim!r} "
                            f"innermost; {tensor} is stored {layout.tag}")
    extents = tuple(reversed(layout.storage_shape(info.shape)))
    if extents[0] * ins.element_bytes % 16:
        raise ScheduleError(f"{where}: TMA needs each row of {tensor} on 16 bytes; it has {extents[0]} "
                            f"channels ({extents[0] * ins.element_bytes} bytes): use a multiple of "
                            f"{16 // ins.element_bytes} channels")
    strides = tuple(math.prod(extents[:d]) for d in range(len(extents)))
    coordinates = [e.substitute(schedule.dim_values) for e in index]
    counts, steps = _box(schedule, tensor, coordinates, row_loop, k_loop, rows, slices, columns, ins.k)
    for dim, (count, step) in enumerate(zip(counts, steps)):
        along = f"{where}: a tile of {tensor} is a box of {count} elements {step} apart along its dim " \
                f"{layout.order[-1 - dim][0]!r}"
        if step > MAX_ELEMENT_STRIDE:
            raise ScheduleError(f"{along}; TMA's elements are at most {MAX_ELEMENT_STRIDE} apart: a conv of "
                                f"stride {step} keeps engine='threads'")
        if count * step > MAX_BOX:
            raise ScheduleError(f"{along}; TMA's boxes span at most {MAX_BOX} elements: choose a smaller "
                                f"block_m")
    origin = {name: Const(0) for name in (row_loop, k_loop, *slices)}
    return PixelBox(tensor, extents, strides, counts, steps,
                    tuple(e.substitute(origin) for e in coordinates), ins.element_bytes, ins.operands[0],
                    swizzle)


def _box(schedule: Schedule, tensor: str, coordinates: list[Expr], row_loop: str, k_loop: str, rows: int,
         slices: tuple[str, ...], columns: int, k: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The counts and element strides of the box a tile is (innermost first), checked at the first
    tile, the second iteration of every loop and the last (ScheduleError where a tile is no box)."""
    loops = [loop for loop in schedule.loops if loop.name not in (row_loop, k_loop, *slices)]
    positions = [{loop.name: 0 for loop in loops}, {loop.name: min(1, loop.extent - 1) for loop in loops},
                 {loop.name: loop.extent - 1 for loop in loops}]
    shapes = {_box_at(tensor, _reader(coordinates, position, row_loop, k_loop, slices, k), rows, columns)
              for position in positions}
    if len(shapes) > 1:
        raise ScheduleError(f"stage({tensor!r}, engine='tma'): the tiles of {tensor} are boxes of different "
                            f"shapes")
    return shapes.pop()


def _reader(coordinates: list[Expr], position: dict[str, int], row_loop: str, k_loop: str,
            slices: tuple[str, ...], k: int) -> Callable[[int, int], tuple[int, ...]]:
    """The storage coordinates of a tile's ``(row, column)`` at ``position`` (the other loops' values)."""
    def read(row: int, column: int) -> tuple[int, ...]:
        env = {**position, row_loop: row, k_loop: column % k,
               **{s: column // k if n == 0 else 0 for n, s in enumerate(slices)}}
        return tuple(int(e.evaluate(env)) for e in coordinates)
    return read


def _box_at(tensor: str, read: Callable[[int, int], tuple[int, ...]], rows: int,
            columns: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The counts and element strides of the box whose coordinates ``read`` gives, row-major over the
    tile's rows with its columns innermost; ScheduleError where they are no box."""
    where, first = f"stage({tensor!r}, engine='tma')", read(0, 0)
    counts, steps = [columns], [1]
    for dim in range(1, len(first)):
        values = sorted({read(r, 0)[dim] for r in range(rows)})
        counts.append(len(values))
        steps.append(values[1] - values[0] if len(values) > 1 else 1)
    if math.prod(counts[1:]) != rows:
        raise ScheduleError(f"{where}: a tile's {rows} rows are not a box of {tensor}: they take "
                            f"{' x '.join(map(str, counts[:0:-1]))} coordinates; tile the conv's output "
                            f"pixels as gpu_wmma's pixel boxes do")
    outer = tuple(counts[:0:-1])          # outermost first, as the rows run
    for row in range(rows):
        for column in (0, columns - 1):
            place = [column, *reversed(_unravel(row, outer))]     # innermost first
            expected = tuple(f + p * s for f, p, s in zip(first, place, steps))
            if read(row, column) != expected:
                raise ScheduleError(f"{where}: a tile's {rows} rows are not a box of {tensor} (row {row} "
                                    f"reads {read(row, column)}, the box {expected}): tile the conv's "
                                    f"output pixels as gpu_wmma's pixel boxes do")
    return tuple(counts), tuple(steps)


def _unravel(index: int, shape: tuple[int, ...]) -> list[int]:
    """``index`` as row-major coordinates in ``shape`` (outermost first)."""
    place = []
    for size in reversed(shape):
        place.append(index % size)
        index //= size
    return place[::-1]


# --- device code -------------------------------------------------------------------------------
DEVICE = "".join(
    f"""
static __device__ __forceinline__ void lo_tma_{rank}d(void *dst, const lo_tensor_map *map, {
        ', '.join(f'int c{d}' for d in range(rank))}, unsigned long long *bar)
{{
    asm volatile("cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {{{', '.join(f'%{d + 2}' for d in range(rank))}}}], [%{rank + 2}];"
                 :: "r"(LO_SHARED(dst)), "l"((unsigned long long) map), {
        ', '.join(f'"r"(c{d})' for d in range(rank))}, "r"(LO_SHARED(bar))
                 : "memory");
}}""" for rank in (3, 4, 5))


def host(element_bytes: int) -> str:
    """The host emulation's N-D box copy of ``element_bytes``-byte elements (2: float16 and bfloat16,
    held as float; 1: int8 bytes)."""
    return _HOST.format(t="float" if element_bytes == 2 else "unsigned char", size=element_bytes,
                        zero="0.0f" if element_bytes == 2 else "0")


_HOST = r"""
typedef struct {{ const {t} *base; int rank; long extents[5], strides[5]; int counts[5], steps[5];
                 int swizzle; }} lo_box_map;
/* the box at start (innermost first) of an N-D tensor into shared memory at dst, row-major with the
   innermost dim fastest, each element at the byte address the hardware swizzles, zero outside */
static void lo_tma_nd({t} *smem, {t} *dst, const lo_box_map *map, const long *start, long *count)
{{
    long total = 1;
    for (int d = 0; d < map->rank; ++d) total *= map->counts[d];
    for (long e = 0; e < total; ++e) {{
        long rest = e, offset = 0;
        int inside = 1;
        for (int d = 0; d < map->rank; ++d) {{
            const long at = start[d] + rest % map->counts[d] * map->steps[d];
            rest /= map->counts[d];
            inside = inside && at >= 0 && at < map->extents[d];
            offset += at * map->strides[d];
        }}
        long byte = (long) (dst - smem) * {size} + e * {size};
        byte ^= (byte >> 7 & (map->swizzle / 16 - 1)) << 4;
        smem[byte / {size}] = inside ? map->base[offset] : {zero};
    }}
    *count -= total * {size};
}}"""
