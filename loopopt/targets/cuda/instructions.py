"""The matrix instructions ``Schedule.tensorize`` maps three loops onto: for each, its fragment
shape (``m x n x k``), its element types, the architecture it needs, and two code templates of the
same operations on fragments: ``cuda`` (the warp-wide instruction) and ``scalar`` (its meaning as
plain C loops over one fragment's elements, which the host emulation compiles and runs).

A fragment operation's template is formatted with ``acc``/``a``/``b`` (fragment expressions),
``ptr`` (the shared-memory tile of its first element) and ``ld`` (the row length of the float32
tile the accumulator is stored to). The input tiles are ``m x k`` (A) and ``n x k`` (B, i.e. B
column-major) halves laid out by the entry's ``tile`` macro, ``LO_TILE(row, col)``: the element's
offset in its tile, which the kernel's copies write through and the loads read through (padded rows
for WMMA; for ``mma.sync`` rows of 32 bytes whose two 16-byte halves swap on every other group of
four rows, so the eight rows one ``ldmatrix`` phase reads hit all 32 banks, without padding). The
accumulator is stored row-major ``m x n`` (float32).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FragmentCode:
    """One spelling of an instruction's fragment operations (see the module docstring)."""

    half: str              # the element type of the inputs
    declare_a: str         # {name}, {count}: an array of A fragments
    declare_b: str
    declare_acc: str
    fill: str              # {acc} = 0
    load_a: str            # {a} <- the input tile {ptr}
    load_b: str
    mma: str               # {acc} += {a} x {b}
    store: str             # tile {ptr}, {ld} (float) <- {acc}


@dataclass(frozen=True)
class MatrixInstruction:
    """A warp-wide matrix multiply-accumulate: ``acc[m x n] += a[m x k] @ b[k x n]``."""

    name: str
    m: int
    n: int
    k: int
    inputs: str            # the op dtype it multiplies
    accumulator: str
    arch: str              # the oldest architecture that has it (sm_XY)
    header: str            # what the CUDA source includes (and defines) for it
    tile_elements: int     # halves of shared memory per input tile (m x k and its padding)
    tile: str              # #define LO_TILE(row, col): an element's offset in its input tile
    cuda: FragmentCode
    scalar: FragmentCode

    @property
    def fragment_elements(self) -> int:
        return self.m * self.n


_WMMA = "nvcuda::wmma::"
_FRAGMENT = f"{_WMMA}fragment<{_WMMA}{{role}}, 16, 16, 16, {{type}}{{layout}}> {{{{name}}}}[{{{{count}}}}];"


def _wmma_declaration(role: str, element: str, layout: str = "") -> str:
    return _FRAGMENT.format(role=role, type=element, layout=f", {_WMMA}{layout}" if layout else "")


_EACH = "for (int lo_e = 0; lo_e < 256; ++lo_e) "


def _scalar(load_a: str, load_b: str) -> FragmentCode:
    """The host spelling of a 16 x 16 x 16 fragment: its 256 elements row by row (B: k rows of n),
    loaded by ``load_a``/``load_b`` (the element ``lo_e``'s offset in the tile ``{ptr}``)."""
    return FragmentCode(
        half="float",
        declare_a="float {name}[{count}][256];",
        declare_b="float {name}[{count}][256];",
        declare_acc="float {name}[{count}][256];",
        fill=_EACH + "{acc}[lo_e] = 0.0f;",
        load_a=_EACH + "{a}[lo_e] = {ptr}[" + load_a + "];",
        load_b=_EACH + "{b}[lo_e] = {ptr}[" + load_b + "];",
        mma=(_EACH + "for (int lo_q = 0; lo_q < 16; ++lo_q) "
             "{acc}[lo_e] += {a}[lo_e / 16 * 16 + lo_q] * {b}[lo_q * 16 + lo_e % 16];"),
        store=_EACH + "{ptr}[lo_e / 16 * {ld} + lo_e % 16] = {acc}[lo_e];")


_HEADER = "#include <cuda_fp16.h>\n#include <cuda_pipeline.h>"
_PADDED_ROW = 16 + 8       # WMMA tiles: 8 halves of padding after each row against bank conflicts
WMMA_F16_F32 = MatrixInstruction(
    name="wmma_m16n16k16_f16_f32", m=16, n=16, k=16, inputs="float16", accumulator="float32", arch="sm_70",
    header="#include <mma.h>\n" + _HEADER, tile_elements=16 * _PADDED_ROW,
    tile=f"#define LO_TILE(row, col) ((row) * {_PADDED_ROW} + (col))",
    cuda=FragmentCode(
        half="__half",
        declare_a=_wmma_declaration("matrix_a", "__half", "row_major"),
        declare_b=_wmma_declaration("matrix_b", "__half", "col_major"),
        declare_acc=_wmma_declaration("accumulator", "float"),
        fill=f"{_WMMA}fill_fragment({{acc}}, 0.0f);",
        load_a=f"{_WMMA}load_matrix_sync({{a}}, {{ptr}}, {_PADDED_ROW});",
        load_b=f"{_WMMA}load_matrix_sync({{b}}, {{ptr}}, {_PADDED_ROW});",
        mma=f"{_WMMA}mma_sync({{acc}}, {{a}}, {{b}}, {{acc}});",
        store=f"{_WMMA}store_matrix_sync({{ptr}}, {{acc}}, {{ld}}, {_WMMA}mem_row_major);"),
    scalar=_scalar("LO_TILE(lo_e / 16, lo_e % 16)", "LO_TILE(lo_e % 16, lo_e / 16)"))

# mma.sync.m16n8k16 through inline PTX: a 16 x 16 x 16 fragment is two of them (n = 0..7, 8..15).
# A: four 32-bit registers per lane (ldmatrix.x4 of the tile's four 8 x 8 quarters: lane l gives
# row l % 16, column (l / 16) * 8); B (the n x k tile): four registers, lane l gives row (l % 8) +
# (l / 16) * 8, column (l / 8 % 2) * 8, so registers 0-1 are the first n-half's k 0-15 and 2-3 the
# second's; the accumulator: eight floats, lane l holding rows l / 4 and l / 4 + 8, columns
# 2 (l % 4) and 2 (l % 4) + 1 of each n-half (PTX ISA, "Matrix Fragments for mma.m16n8k16").
_MMA_MACROS = r"""
#define LO_LANE ((int) (threadIdx.x & 31))
#define LO_LDSM_X4(r, p) asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" \
    : "=r"((r)[0]), "=r"((r)[1]), "=r"((r)[2]), "=r"((r)[3]) \
    : "r"((unsigned) __cvta_generic_to_shared(p)))
#define LO_MMA_16816(d, a, b0, b1) asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 " \
    "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};" \
    : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3]) \
    : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"(b0), "r"(b1))
#define LO_MMA_STORE(p, ld, d) for (int lo_h = 0; lo_h < 2; ++lo_h) for (int lo_r = 0; lo_r < 2; ++lo_r) { \
    float *lo_row = (p) + (LO_LANE / 4 + 8 * lo_r) * (ld) + 8 * lo_h + 2 * (LO_LANE % 4); \
    lo_row[0] = (d)[4 * lo_h + 2 * lo_r]; lo_row[1] = (d)[4 * lo_h + 2 * lo_r + 1]; }"""
MMA_F16_F32 = MatrixInstruction(
    name="mma_m16n8k16_f16_f32", m=16, n=16, k=16, inputs="float16", accumulator="float32", arch="sm_80",
    header=_HEADER + _MMA_MACROS, tile_elements=16 * 16,
    tile="#define LO_TILE(row, col) ((row) * 16 + ((((col) >> 3) ^ (((row) >> 2) & 1)) << 3) + ((col) & 7))",
    cuda=FragmentCode(
        half="__half",
        declare_a="unsigned {name}[{count}][4];",
        declare_b="unsigned {name}[{count}][4];",
        declare_acc="float {name}[{count}][8];",
        fill="for (int lo_e = 0; lo_e < 8; ++lo_e) {acc}[lo_e] = 0.0f;",
        load_a="LO_LDSM_X4({a}, {ptr} + LO_TILE(LO_LANE % 16, LO_LANE / 16 * 8));",
        load_b="LO_LDSM_X4({b}, {ptr} + LO_TILE(LO_LANE % 8 + LO_LANE / 16 * 8, LO_LANE / 8 % 2 * 8));",
        mma="LO_MMA_16816({acc}, {a}, {b}[0], {b}[1]); LO_MMA_16816({acc} + 4, {a}, {b}[2], {b}[3]);",
        store="LO_MMA_STORE({ptr}, {ld}, {acc});"),
    scalar=_scalar("LO_TILE(lo_e / 16, lo_e % 16)", "LO_TILE(lo_e % 16, lo_e / 16)"))

INSTRUCTIONS = {i.name: i for i in (WMMA_F16_F32, MMA_F16_F32)}


def instruction(name: str) -> MatrixInstruction:
    """The table's entry ``name``; ValueError naming the known ones."""
    if name not in INSTRUCTIONS:
        raise ValueError(f"unknown matrix instruction {name!r}; known: {', '.join(INSTRUCTIONS)}")
    return INSTRUCTIONS[name]
