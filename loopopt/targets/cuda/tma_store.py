"""A persistent kernel's outputs stored by the tensor memory accelerator (``Schedule.persistent``): each
consumer warpgroup writes its fragment, a chunk of 128 bytes of columns at a time (32 float32, 64 of a
16-bit output: ``output_types``), into one of two staging buffers of its own in shared memory (64 rows of
128 bytes in the 128-byte swizzle, so the pairs of columns a warp writes hit every bank), and one thread
of it stores the chunk as one box of a tensor map of the output
(``cp.async.bulk.tensor.2d.global.shared``, clipped to the output: its tails need no guard). The store
runs behind the warpgroup, which goes on to its next chunk and to the next tile's products; before it
overwrites a buffer, the issuing thread waits until at most one store still reads the staging
(``cp.async.bulk.wait_group.read 1``), and the warpgroup meets on its named barrier before and after the
writes (with ``fence.proxy.async`` between the writes and the store).

It applies where the output is a 2-D row-major matrix whose fragment rows and columns are
consecutive rows and columns of it (a Matmul's or Gemm's, without ``split_k``, whose rows are 16-byte
multiples) and the staging fits beside the ring; elsewhere the consumers store from registers.

The host emulation writes the same swizzled bytes and copies each chunk's box out of them, clipped to
the output: a staging address or box coordinate off by one misses the reference without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...expr import Const, Expr, Var
from ...schedule import Schedule
from . import output_types
from .output_types import ROW_BYTES, OutputType
from .tma import along

CHUNK_ROWS = 64             # a wgmma fragment's rows
CHUNK_BYTES = CHUNK_ROWS * ROW_BYTES     # a staged chunk: 64 rows of one 128-byte swizzled row each
BUFFERS = 2                 # staging buffers a consumer warpgroup
ALIGNMENT = 1024            # a 128-byte-swizzled box's shared-memory alignment
_SWIZZLE_128B, _L2_PROMOTION_128B = 3, 2     # CUtensorMapSwizzle, CUtensorMapL2promotion


@dataclass(frozen=True)
class StoredOutput:
    """The output as a ``rows x cols`` matrix of ``kind``, a fragment's first element at row ``y`` and
    column ``x`` (expressions of the kernel's loops other than the fragment's own)."""

    tensor: str
    rows: int
    cols: int
    y: Expr
    x: Expr
    kind: OutputType

    @property
    def columns(self) -> int:
        """Columns of a chunk."""
        return self.kind.chunk_columns

    @property
    def map_name(self) -> str:
        return f"lo_map_{self.tensor}"

    def encode(self) -> str:
        """The launcher's statement building the output's tensor map (boxes of a chunk)."""
        return (f"    lo_tensor_map {self.map_name}; {{ const unsigned long long lo_dims[2] = "
                f"{{{self.cols}ull, {self.rows}ull}}, lo_strides[1] = {{{self.cols * self.kind.size}ull}}; "
                f"const unsigned lo_box[2] = {{{self.columns}u, {CHUNK_ROWS}u}}, lo_unit[2] = {{1u, 1u}}; "
                f"if (lo_encode(&{self.map_name}, "
                f"{self.kind.map_type}, 2, {self.tensor}, lo_dims, lo_strides, lo_box, lo_unit, 0, "
                f"{_SWIZZLE_128B}, "
                f"{_L2_PROMOTION_128B}, 0) != 0) return (int) cudaErrorInvalidValue; }}")

    def host_map(self) -> str:
        return f"const lo_store_map {self.map_name} = {{{self.tensor}, {self.rows}, {self.cols}}};"

    def store(self, src: str, chunk: str) -> str:
        """The statement storing the chunk ``chunk`` of the fragment staged at ``src``."""
        x, y = f"(int) ({self.x.to_c()}) + {self.columns} * ({chunk})", f"(int) ({self.y.to_c()})"
        return f"lo_tma_store_2d(&{self.map_name}, {x}, {y}, {src});"


def output(schedule: Schedule, row_loop: str, column_loop: str, columns: int) -> StoredOutput | None:
    """The output of ``schedule`` as TMA stores it, fragments of ``columns`` columns along
    ``column_loop`` and 64 rows along ``row_loop``; None where it cannot (see the module docstring)."""
    op, kind = schedule.op, output_types.of(schedule)
    if op.quant is not None or schedule.split_k_loop or columns % kind.chunk_columns:
        return None
    layout, info = schedule.layout_of(op.output), op.tensor(op.output)
    logical = dict(zip(info.letters, op.index(op.output)))
    index = [logical[letter] for letter, block in layout.order]
    if len(index) != 2 or len(layout.order) != len(info.letters) \
            or not all(isinstance(e, Var) for e in index):
        return None
    rows, cols = layout.storage_shape(info.shape)
    r_expr, c_expr = (schedule.dim_values[e.name] for e in index)
    if not along(r_expr, c_expr, row_loop, column_loop) or cols * kind.size % 16:
        return None
    return StoredOutput(op.output, rows, cols, r_expr.substitute({row_loop: Const(0)}),
                        c_expr.substitute({column_loop: Const(0)}), kind)


def staged(buffer: str, row: str, column: str, size: int) -> str:
    """The element offset of element (``row``, ``column``) of a chunk of ``size``-byte elements in staging
    buffer ``buffer``: 128-byte rows whose 16-byte parts are XORed with the row's low three bits (the
    128-byte swizzle)."""
    columns, part = ROW_BYTES // size, 16 // size
    return (f"({buffer}) * {CHUNK_ROWS * columns} + ({row}) * {columns} "
            f"+ ((({column}) / {part}) ^ (({row}) % 8)) * {part} + ({column}) % {part}")


# --- device code -------------------------------------------------------------------------------
DEVICE = r"""
static __device__ __forceinline__ void lo_tma_store_2d(const lo_tensor_map *map, int x, int y,
                                                       const void *src)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"((unsigned long long) map), "r"(x), "r"(y), "r"(LO_SHARED(src)) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
#define LO_STORES_READ_BUT(n) asm volatile("cp.async.bulk.wait_group.read " #n ";" ::: "memory")
#define LO_STORES_DONE() asm volatile("cp.async.bulk.wait_group 0;" ::: "memory")"""

def host(kind: OutputType) -> str:
    """The host emulation's store of a staged chunk of ``kind`` elements."""
    t, columns, part = kind.host, kind.chunk_columns, 16 // kind.size
    return f"""
typedef struct {{ {t} *base; long rows, cols; }} lo_store_map;
/* a staged chunk (64 rows of 128 swizzled bytes) into the output at (x, y), clipped to it */
static void lo_tma_store_2d(const lo_store_map *map, long x, long y, const {t} *src)
{{
    for (int r = 0; r < 64; ++r)
        for (int c = 0; c < {columns}; ++c) {{
            long row = y + r, col = x + c;
            if (row >= 0 && row < map->rows && col >= 0 && col < map->cols)
                map->base[row * map->cols + col] =
                    src[r * {columns} + ((c / {part}) ^ (r % 8)) * {part} + c % {part}];
        }}
}}"""
