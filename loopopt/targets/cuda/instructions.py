"""The matrix instructions ``Schedule.tensorize`` maps three loops onto: for each, its fragment
shape (``m x n x k``), its operands' element types, the architecture it needs, and two code templates
of the same operations on fragments: ``cuda`` (the warp-wide instruction) and ``scalar`` (its meaning
as plain C loops over one fragment's elements, which the host emulation compiles and runs).

A fragment operation's template is formatted with ``acc``/``a``/``b`` (fragment expressions),
``ptr`` (the shared-memory tile of its first element) and ``ld`` (the row length of the accumulator
tile it is stored to). The input tiles are ``m x k`` (A) and ``n x k`` (B, i.e. B column-major)
elements laid out by the entry's ``tile`` macro, ``LO_TILE(row, col)``: the element's offset in its
tile, which the kernel's copies write through and the loads read through (padded rows for WMMA; for
``mma.sync`` rows of 32 bytes whose two 16-byte halves swap on every other group of four rows, so the
eight rows one ``ldmatrix`` phase reads hit all 32 banks, without padding). The accumulator is
stored row-major ``m x n`` (float32, or int32 for the int8 entries).

The int8 entries (``mma.sync.m16n8k32`` s8 x s8 and u8 x s8 -> s32) take the stored integers as they
are: 32 bytes a tile row like the 16-bit entries, so ``ldmatrix`` loads them with the same lane
addresses and the fragments land where ``m16n8k32`` wants them (PTX ISA, "Matrix Fragments for
mma.m16n8k32": each 32-bit register holds four consecutive ``k``, as ``m16n8k16`` holds two).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FragmentCode:
    """One spelling of an instruction's fragment operations (see the module docstring)."""

    element: str           # the C type of the shared-memory tiles' elements
    accumulator: str       # the C type of a stored accumulator element
    declare_a: str         # {name}, {count}: an array of A fragments
    declare_b: str
    declare_acc: str
    fill: str              # {acc} = 0
    load_a: str            # {a} <- the input tile {ptr}
    load_b: str
    mma: str               # {acc} += {a} x {b}
    store: str             # tile {ptr}, {ld} (accumulator elements) <- {acc}


@dataclass(frozen=True)
class MatrixInstruction:
    """A warp-wide matrix multiply-accumulate: ``acc[m x n] += a[m x k] @ b[k x n]``."""

    name: str
    m: int
    n: int
    k: int
    operands: tuple[str, str]   # the element types of a and b (the op's dtype, or its QuantSpec's)
    accumulator: str
    arch: str              # the oldest architecture that has it (sm_XY)
    header: str            # what the CUDA source includes (and defines) for it
    tile_elements: int     # elements of shared memory per input tile (m x k and its padding)
    element_bytes: int     # bytes per input element
    tile: str              # #define LO_TILE(row, col): an element's offset in its input tile
    cuda: FragmentCode
    scalar: FragmentCode

    @property
    def fragment_elements(self) -> int:
        return self.m * self.n

    @property
    def tile_bytes(self) -> int:
        return self.tile_elements * self.element_bytes

    @property
    def integer(self) -> bool:
        """Whether it multiplies stored integers into int32 sums (a quantized op's entries)."""
        return self.accumulator == "int32"


_WMMA = "nvcuda::wmma::"
_FRAGMENT = f"{_WMMA}fragment<{_WMMA}{{role}}, 16, 16, 16, {{type}}{{layout}}> {{{{name}}}}[{{{{count}}}}];"


def _wmma_declaration(role: str, element: str, layout: str = "") -> str:
    return _FRAGMENT.format(role=role, type=element, layout=f", {_WMMA}{layout}" if layout else "")


def _scalar(m: int, n: int, k: int, element: str = "float", value_a: str = "", value_b: str = "",
            accumulator: str = "float") -> FragmentCode:
    """The host spelling of an ``m x n x k`` fragment: A's ``m x k`` elements row by row, B's as ``k``
    rows of ``n``, the accumulator's ``m x n`` row by row, held as ``accumulator`` values (the tiles'
    ``element`` read as ``value_a``/``value_b``: a cast, or as they are)."""
    each = "for (int lo_e = 0; lo_e < {count}; ++lo_e) "
    zero = "0" if accumulator == "int" else "0.0f"
    return FragmentCode(
        element=element, accumulator=accumulator,
        declare_a=f"{accumulator} {{name}}[{{count}}][{m * k}];",
        declare_b=f"{accumulator} {{name}}[{{count}}][{n * k}];",
        declare_acc=f"{accumulator} {{name}}[{{count}}][{m * n}];",
        fill=each.format(count=m * n) + f"{{acc}}[lo_e] = {zero};",
        load_a=each.format(count=m * k) + f"{{a}}[lo_e] = {value_a}{{ptr}}[LO_TILE(lo_e / {k}, lo_e % {k})];",
        load_b=each.format(count=n * k) + f"{{b}}[lo_e] = {value_b}{{ptr}}[LO_TILE(lo_e % {n}, lo_e / {n})];",
        mma=(each.format(count=m * n) + f"for (int lo_q = 0; lo_q < {k}; ++lo_q) "
             f"{{acc}}[lo_e] += {{a}}[lo_e / {n} * {k} + lo_q] * {{b}}[lo_q * {n} + lo_e % {n}];"),
        store=each.format(count=m * n) + f"{{ptr}}[lo_e / {n} * {{ld}} + lo_e % {n}] = {{acc}}[lo_e];")


_HEADER = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cuda_pipeline.h>"
_PADDED_ROW = 16 + 8       # WMMA tiles: 8 halves of padding after each row against bank conflicts
_HALF_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16"}


def _wmma(dtype: str, arch: str) -> MatrixInstruction:
    """WMMA ``m16n16k16`` on 16-bit ``dtype`` inputs, float32 sums."""
    half = _HALF_TYPES[dtype]
    short = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    return MatrixInstruction(
        name=f"wmma_m16n16k16_{short}_f32", m=16, n=16, k=16, operands=(dtype, dtype), accumulator="float32",
        arch=arch, header="#include <mma.h>\n" + _HEADER, tile_elements=16 * _PADDED_ROW, element_bytes=2,
        tile=f"#define LO_TILE(row, col) ((row) * {_PADDED_ROW} + (col))",
        cuda=FragmentCode(
            element=half, accumulator="float",
            declare_a=_wmma_declaration("matrix_a", half, "row_major"),
            declare_b=_wmma_declaration("matrix_b", half, "col_major"),
            declare_acc=_wmma_declaration("accumulator", "float"),
            fill=f"{_WMMA}fill_fragment({{acc}}, 0.0f);",
            load_a=f"{_WMMA}load_matrix_sync({{a}}, {{ptr}}, {_PADDED_ROW});",
            load_b=f"{_WMMA}load_matrix_sync({{b}}, {{ptr}}, {_PADDED_ROW});",
            mma=f"{_WMMA}mma_sync({{acc}}, {{a}}, {{b}}, {{acc}});",
            store=f"{_WMMA}store_matrix_sync({{ptr}}, {{acc}}, {{ld}}, {_WMMA}mem_row_major);"),
        scalar=_scalar(16, 16, 16))


WMMA_F16_F32 = _wmma("float16", "sm_70")
WMMA_BF16_F32 = _wmma("bfloat16", "sm_80")

# mma.sync.m16n8k16 through inline PTX: a 16 x 16 x 16 fragment is two of them (n = 0..7, 8..15).
# A: four 32-bit registers per lane (ldmatrix.x4 of the tile's four 8 x 8 quarters: lane l gives
# row l % 16, column (l / 16) * 8); B (the n x k tile): four registers, lane l gives row (l % 8) +
# (l / 16) * 8, column (l / 8 % 2) * 8, so registers 0-1 are the first n-half's k 0-15 and 2-3 the
# second's; the accumulator: eight values, lane l holding rows l / 4 and l / 4 + 8, columns
# 2 (l % 4) and 2 (l % 4) + 1 of each n-half (PTX ISA, "Matrix Fragments for mma.m16n8k16"; the
# m16n8k32 integer fragments have the same byte layout, four int8 to a register).
_MMA_MACROS = r"""
#define LO_LANE ((int) (threadIdx.x & 31))
#define LO_LDSM_X4(r, p) asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" \
    : "=r"((r)[0]), "=r"((r)[1]), "=r"((r)[2]), "=r"((r)[3]) \
    : "r"((unsigned) __cvta_generic_to_shared(p)))
#define LO_MMA_STORE(p, ld, d) for (int lo_h = 0; lo_h < 2; ++lo_h) for (int lo_r = 0; lo_r < 2; ++lo_r) { \
    int lo_o = (LO_LANE / 4 + 8 * lo_r) * (ld) + 8 * lo_h + 2 * (LO_LANE % 4); \
    (p)[lo_o] = (d)[4 * lo_h + 2 * lo_r]; (p)[lo_o + 1] = (d)[4 * lo_h + 2 * lo_r + 1]; }"""
_MMA_OP = r"""
#define LO_MMA(d, a, b0, b1) asm volatile("mma.sync.aligned.{shape}.row.col.{types} " \
    "{{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};" \
    : "+{c}"((d)[0]), "+{c}"((d)[1]), "+{c}"((d)[2]), "+{c}"((d)[3]) \
    : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"(b0), "r"(b1))"""
# 32-byte rows, their 16-byte halves swapped on every other group of four rows (``mask + 1`` elements a half)
_SWIZZLE = ("#define LO_TILE(row, col) ((row) * {row} + "
            "((((col) >> {shift}) ^ (((row) >> 2) & 1)) << {shift}) + ((col) & {mask}))")


def _mma(name: str, k: int, operands: tuple[str, str], ptx_types: str, element: str,
         scalar: FragmentCode) -> MatrixInstruction:
    """``mma.sync.m16n8k<k>`` twice (a 16 x 16 x ``k`` fragment) on ``ldmatrix`` loads of swizzled tiles."""
    integer = scalar.accumulator == "int"
    half = k // 2           # elements in 16 bytes
    return MatrixInstruction(
        name=name, m=16, n=16, k=k, operands=operands, accumulator="int32" if integer else "float32",
        arch="sm_80", header=_HEADER + _MMA_MACROS + _MMA_OP.format(shape=f"m16n8k{k}", types=ptx_types,
                                                                    c="r" if integer else "f"),
        tile_elements=16 * k, element_bytes=32 // k,
        tile=_SWIZZLE.format(row=k, shift=half.bit_length() - 1, mask=half - 1),
        cuda=FragmentCode(
            element=element, accumulator=scalar.accumulator,
            declare_a="unsigned {name}[{count}][4];",
            declare_b="unsigned {name}[{count}][4];",
            declare_acc=f"{scalar.accumulator} {{name}}[{{count}}][8];",
            fill=f"for (int lo_e = 0; lo_e < 8; ++lo_e) {{acc}}[lo_e] = {'0' if integer else '0.0f'};",
            load_a=f"LO_LDSM_X4({{a}}, {{ptr}} + LO_TILE(LO_LANE % 16, LO_LANE / 16 * {half}));",
            load_b=(f"LO_LDSM_X4({{b}}, {{ptr}} + LO_TILE(LO_LANE % 8 + LO_LANE / 16 * 8, "
                    f"LO_LANE / 8 % 2 * {half}));"),
            mma="LO_MMA({acc}, {a}, {b}[0], {b}[1]); LO_MMA({acc} + 4, {a}, {b}[2], {b}[3]);",
            store="LO_MMA_STORE({ptr}, {ld}, {acc});"),
        scalar=scalar)


MMA_F16_F32 = _mma("mma_m16n8k16_f16_f32", 16, ("float16", "float16"), "f32.f16.f16.f32", "__half",
                   _scalar(16, 16, 16))
MMA_BF16_F32 = _mma("mma_m16n8k16_bf16_f32", 16, ("bfloat16", "bfloat16"), "f32.bf16.bf16.f32",
                    "__nv_bfloat16", _scalar(16, 16, 16))
# the int8 tiles hold the stored bytes (unsigned char); the host reads each as its operand's type
MMA_S8_S32 = _mma("mma_m16n8k32_s8_s32", 32, ("int8", "int8"), "s32.s8.s8.s32", "unsigned char",
                  _scalar(16, 16, 32, "unsigned char", "(signed char) ", "(signed char) ", "int"))
MMA_U8S8_S32 = _mma("mma_m16n8k32_u8s8_s32", 32, ("uint8", "int8"), "s32.u8.s8.s32", "unsigned char",
                    _scalar(16, 16, 32, "unsigned char", "", "(signed char) ", "int"))

INSTRUCTIONS = {i.name: i for i in (WMMA_F16_F32, MMA_F16_F32, WMMA_BF16_F32, MMA_BF16_F32, MMA_S8_S32,
                                    MMA_U8S8_S32)}


def instruction(name: str) -> MatrixInstruction:
    """The table's entry ``name``; ValueError naming the known ones."""
    if name not in INSTRUCTIONS:
        raise ValueError(f"unknown matrix instruction {name!r}; known: {', '.join(INSTRUCTIONS)}")
    return INSTRUCTIONS[name]
