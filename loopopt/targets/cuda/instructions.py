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

The int8 entries (``mma.sync.m16n8k32`` on every pair of s8 and u8 operands -> s32) take the stored
integers as they are: 32 bytes a tile row like the 16-bit entries, so ``ldmatrix`` loads them with the
same lane addresses and the fragments land where ``m16n8k32`` wants them (PTX ISA, "Matrix Fragments
for mma.m16n8k32": each 32-bit register holds four consecutive ``k``, as ``m16n8k16`` holds two). Their
``ones`` template fills an A or B fragment with the integer 1, so that one more product sums the other
operand's rows (a quantized kernel's activation sums, ``tensor_printer``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace


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
    # An asynchronous instruction's statements around a pipeline step's products (none: synchronous).
    publish: str = ""      # after a step's copies landed, before the barrier: visible to the instruction
    begin: str = ""        # before a step's products
    end: str = ""          # after them: the step's products form one group
    retire: str = ""       # after the next step's copies are issued: every group but the last done
    drain: str = ""        # before the epilogue: every group done
    ones_a: str = ""       # {a} <- the integer 1 in every element (integer entries)
    ones_b: str = ""
    # The accumulator elements one thread holds of the fragment's columns chunk {chunk} of {columns}, for
    # a store from registers, in pairs of consecutive columns: a loop opening ``{`` that defines lo_e
    # (the first's index in {acc}; lo_e + 1 the second's), lo_row and lo_col (the first's place in the
    # m x n fragment; the second's column lo_col + 1); empty where fragments go through shared memory.
    elements: str = ""
    # The same elements row by row (a quantized epilogue's work per output pixel, once a row): ``rows``
    # opens a loop ``{`` over the thread's rows of a fragment defining lo_row; ``pairs``, inside it, one
    # over the row's pairs of consecutive columns defining lo_col and lo_e (the first's index in {acc}).
    rows: str = ""
    pairs: str = ""
    # Operands from one base (``rebase`` declares it once, before a loop; ``load_rebased`` is load_a's and
    # load_b's spelling from it, {name} and {units}: the tile's offset from the shared memory's start in
    # 16-byte units): a wgmma descriptor as the base's plus the offset, constant where the buffer is (a
    # specialized kernel's consumers unrolled over the ring)
    rebase: str = ""
    load_rebased: str = ""


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
    row_elements: int      # elements of shared memory per input tile row (k and its padding)
    element_bytes: int     # bytes per input element
    tile: str              # #define LO_TILE(row, col): an element's offset in its input tile
    cuda: FragmentCode
    scalar: FragmentCode
    lanes: int = 32        # the threads that issue it together: a warp, or a warpgroup of four
    tile_alignment: int = 128       # bytes each tile's start is aligned to (a swizzle's repeat)
    group_sync: str = "__syncwarp();"   # the lanes of one instruction meet (the epilogue's scratch)
    host_header: str = ""  # what the host emulation defines for the scalar spelling

    @property
    def fragment_elements(self) -> int:
        return self.m * self.n

    @property
    def a_tile_elements(self) -> int:
        """Elements of shared memory per ``m x k`` tile of A."""
        return self.m * self.row_elements

    @property
    def b_tile_elements(self) -> int:
        """Elements of shared memory per ``n x k`` tile of B."""
        return self.n * self.row_elements

    @property
    def row_bytes(self) -> int:
        """Bytes of shared memory per input tile row."""
        return self.row_elements * self.element_bytes

    @property
    def integer(self) -> bool:
        """Whether it multiplies stored integers into int32 sums (a quantized op's entries)."""
        return self.accumulator == "int32"

    @property
    def asynchronous(self) -> bool:
        """Whether its products run behind the issuing threads (``wgmma.mma_async``)."""
        return bool(self.cuda.end)

    def runs_on(self, arch: str) -> bool:
        """Whether ``arch`` (``sm_XY``) has it: an ``sm_XYa`` entry only that exact architecture."""
        if self.arch.endswith("a"):
            return arch == self.arch[:-1]
        return int(arch[3:]) >= int(self.arch[3:])


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
        store=each.format(count=m * n) + f"{{ptr}}[lo_e / {n} * {{ld}} + lo_e % {n}] = {{acc}}[lo_e];",
        ones_a=each.format(count=m * k) + "{a}[lo_e] = 1;" if accumulator == "int" else "",
        ones_b=each.format(count=n * k) + "{b}[lo_e] = 1;" if accumulator == "int" else "")


_HEADER = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cuda_pipeline.h>"
_PADDED_ROW = 16 + 8       # WMMA tiles: 8 halves of padding after each row against bank conflicts
_HALF_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16"}
_SHORT = {"float16": "f16", "bfloat16": "bf16"}


def _wmma(dtype: str, arch: str) -> MatrixInstruction:
    """WMMA ``m16n16k16`` on 16-bit ``dtype`` inputs, float32 sums."""
    half, short = _HALF_TYPES[dtype], _SHORT[dtype]
    return MatrixInstruction(
        name=f"wmma_m16n16k16_{short}_f32", m=16, n=16, k=16, operands=(dtype, dtype), accumulator="float32",
        arch=arch, header="#include <mma.h>\n" + _HEADER, row_elements=_PADDED_ROW, element_bytes=2,
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
# Rows of 32 bytes whose two 16-byte halves (``mask + 1`` elements each) swap on every other group of
# four rows: the rows one ldmatrix phase reads hit all 32 banks, and it is wgmma's 32-byte swizzle (the
# address's bit 4 XOR its bit 7) of a tile starting on 256 bytes.
_SWIZZLE = ("#define LO_TILE(row, col) ((row) * {row} + "
            "((((col) >> {shift}) ^ (((row) >> 2) & 1)) << {shift}) + ((col) & {mask}))")


def _swizzled_32b(k: int) -> str:
    """The 32-byte swizzle of rows of ``k`` elements (32 bytes: 16 halves or 32 bytes of int8)."""
    half = k // 2           # elements in 16 bytes
    return _SWIZZLE.format(row=k, shift=half.bit_length() - 1, mask=half - 1)


_ONES = "for (int lo_e = 0; lo_e < 4; ++lo_e) {{{f}}}[lo_e] = 0x01010101u;"   # four int8 1s a register


def _mma(name: str, k: int, operands: tuple[str, str], ptx_types: str, element: str,
         scalar: FragmentCode) -> MatrixInstruction:
    """``mma.sync.m16n8k<k>`` twice (a 16 x 16 x ``k`` fragment) on ``ldmatrix`` loads of swizzled tiles."""
    integer = scalar.accumulator == "int"
    half = k // 2           # elements in 16 bytes
    return MatrixInstruction(
        name=name, m=16, n=16, k=k, operands=operands, accumulator="int32" if integer else "float32",
        arch="sm_80", header=_HEADER + _MMA_MACROS + _MMA_OP.format(shape=f"m16n8k{k}", types=ptx_types,
                                                                    c="r" if integer else "f"),
        row_elements=k, element_bytes=32 // k, tile=_swizzled_32b(k),
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
            store="LO_MMA_STORE({ptr}, {ld}, {acc});",
            ones_a=_ONES.format(f="a") if integer else "", ones_b=_ONES.format(f="b") if integer else ""),
        scalar=scalar)


MMA_F16_F32 = _mma("mma_m16n8k16_f16_f32", 16, ("float16", "float16"), "f32.f16.f16.f32", "__half",
                   _scalar(16, 16, 16))
MMA_BF16_F32 = _mma("mma_m16n8k16_bf16_f32", 16, ("bfloat16", "bfloat16"), "f32.bf16.bf16.f32",
                    "__nv_bfloat16", _scalar(16, 16, 16))
# the int8 tiles hold the stored bytes (unsigned char); the host reads each as its operand's type
_BYTES = {"int8": ("s8", "(signed char) "), "uint8": ("u8", "")}


def _mma_int8(a: str, b: str) -> MatrixInstruction:
    """``mma.sync.m16n8k32`` on ``a`` x ``b`` bytes (int8 or uint8 each) into int32 sums."""
    (ptx_a, cast_a), (ptx_b, cast_b) = _BYTES[a], _BYTES[b]
    short = ptx_a if a == b == "int8" else ptx_a + ptx_b
    return _mma(f"mma_m16n8k32_{short}_s32", 32, (a, b), f"s32.{ptx_a}.{ptx_b}.s32", "unsigned char",
                _scalar(16, 16, 32, "unsigned char", cast_a, cast_b, "int"))


MMA_INT8 = {(a, b): _mma_int8(a, b) for a in _BYTES for b in _BYTES}


# wgmma.mma_async m64nNk16 (sm_90a) through inline PTX: a warpgroup's 128 threads issue it together;
# A (64 x 16) and B (N x 16) are read by the tensor cores from shared memory through 64-bit matrix
# descriptors (PTX ISA, "Matrix Descriptor Format": start address >> 4 in bits 0-13, the leading
# byte offset >> 4 in 16-29 (unused by a K-major swizzled tile: 1), the stride byte offset >> 4 in
# 32-45 (between groups of eight rows: 256 bytes here), the layout type in 62-63 (3: 32-byte swizzle)).
# Both tiles are K-major (imm-trans 0), laid out by _swizzled_32b(16). The accumulator: N/2 floats per
# thread, warp w of the group holding rows 16 w + l / 4 and + 8 (l its lane), columns 8 c + 2 (l % 4)
# and + 1 of each group c of eight columns ("Matrix Fragments for wgmma.mma_async .m64nNk16").
WGMMA_N = (64, 128, 256)     # the widths the presets and the search use
SWIZZLE_MODES = {32: 3, 64: 2, 128: 1}      # a descriptor's layout type of each swizzle width (bytes)


def _descriptor(width: int = 32) -> str:
    """``LO_DESCRIPTOR(address)`` of K-major tiles in the ``width``-byte swizzle: rows of ``width``
    bytes, eight rows (``8 x width`` bytes) apart from the next eight."""
    return (f"#define LO_DESCRIPTOR(address) ((((unsigned long long) (address) & 0x3FFFF) >> 4) "
            f"| (1ull << 16) | ((unsigned long long) ({8 * width} >> 4) << 32) "
            f"| ({SWIZZLE_MODES[width]}ull << 62))")


_DESCRIPTOR = _descriptor()


def _wgmma_macros(accumulator: str = "float") -> str:
    """The device macros of every wgmma entry (``accumulator``: the C type of its sums)."""
    return _DESCRIPTOR + r"""
#define LO_LANE ((int) (threadIdx.x & 127))
#define LO_DESC(p) LO_DESCRIPTOR(__cvta_generic_to_shared(p))
#define LO_GROUP_SYNC() asm volatile("bar.sync %0, 128;" \
    :: "r"(1 + (int) (threadIdx.x + blockDim.x * threadIdx.y) / 128) : "memory")
#define LO_WGMMA_STORE(p, ld, d, n) _Pragma("unroll") for (int lo_c = 0; lo_c < (n) / 8; ++lo_c) \
    _Pragma("unroll") for (int lo_r = 0; lo_r < 2; ++lo_r) { \
    """ + accumulator + r""" *lo_row = (p) + (LO_LANE / 32 * 16 + LO_LANE % 32 / 4 + 8 * lo_r) * (ld) \
        + 8 * lo_c + 2 * (LO_LANE % 4); \
    lo_row[0] = (d)[4 * lo_c + 2 * lo_r]; lo_row[1] = (d)[4 * lo_c + 2 * lo_r + 1]; }"""


# The host's meaning of one wgmma from the descriptors alone: element (row, k) of an operand lies at
# byte start + row / 8 * stride + row % 8 * width + bytes * k, width the swizzle's row (32, 64 or 128
# bytes for layout types 3, 2, 1), whose 16-byte chunk bits are XORed with the address's bits from bit
# 7: a tile that the copies laid out otherwise than the descriptor says reads wrong values here.
def _wgmma_host(element: str = "float", accumulator: str = "float", k: int = 16, value_a: str = "",
                value_b: str = "") -> str:
    """The host emulation's ``lo_operand``/``lo_wgmma`` of tiles of ``element`` (one per stored
    element: 2 bytes of a 16-bit entry's, 1 of an int8 entry's, read as ``value_a``/``value_b``)."""
    t, acc, size = element, accumulator, 32 // k
    scaled, offset, index = (f" * {size}", f"{size} * k", f"at / {size}") if size > 1 else ("", "k", "at")
    return _DESCRIPTOR + f"""
#define LO_DESC(p) LO_DESCRIPTOR(((p) - lo_smem_h){scaled})
static {t} lo_operand(const {t} *smem, unsigned long long d, int row, int k)
{{
    unsigned start = (unsigned) (d & 0x3FFF) << 4, stride = (unsigned) (d >> 32 & 0x3FFF) << 4;
    unsigned width = 16u << (4 - (unsigned) (d >> 62));
    unsigned at = start + row / 8 * stride + row % 8 * width + {offset};
    at ^= (at >> 7 & (width / 16 - 1)) << 4;
    return smem[{index}];
}}
static void lo_wgmma({acc} *acc, const {t} *smem, unsigned long long da, unsigned long long db, int n)
{{
    for (int r = 0; r < 64; ++r)
        for (int c = 0; c < n; ++c)
            for (int q = 0; q < {k}; ++q)
                acc[r * n + c] += {value_a}lo_operand(smem, da, r, q) * {value_b}lo_operand(smem, db, c, q);
}}"""


def _asm(statement: str) -> str:
    return f'asm volatile("{statement};" ::: "memory");'


def _wgmma_macro(n: int, types: str, k: int = 16) -> str:
    """``LO_WGMMA(d, da, db)``: ``d`` (n / 2 sums) += A(da) x B(db), both K-major, ``types`` the
    instruction's ``dtype.atype.btype`` (``f32.f16.f16``, ``s32.s8.s8``, ...; float operands take the
    scale and transpose immediates, integer ones none)."""
    regs = n // 2
    integer = types.startswith("s32")
    outputs = ", ".join(f'"+{"r" if integer else "f"}"((d)[{r}])' for r in range(regs))
    accumulators = ", ".join(f"%{r}" for r in range(regs))
    immediates = "" if integer else ", 1, 1, 0, 0"
    return (f'#define LO_WGMMA(d, da, db) asm volatile("{{ .reg .pred p; setp.ne.b32 p, %{regs + 2}, 0; '
            f'wgmma.mma_async.sync.aligned.m64n{n}k{k}.{types} {{{accumulators}}}, %{regs}, '
            f'%{regs + 1}, '
            f'p{immediates}; }}" : {outputs} : "l"(da), "l"(db), "r"(1))')


_WGMMA_STEPS = dict(publish=_asm("fence.proxy.async.shared::cta"),
                    begin=_asm("wgmma.fence.sync.aligned"), end=_asm("wgmma.commit_group.sync.aligned"),
                    retire=_asm("wgmma.wait_group.sync.aligned 1"),
                    drain=_asm("wgmma.wait_group.sync.aligned 0"))


def _wgmma_entry(name: str, n: int, k: int, operands: tuple[str, str], types: str, element: str,
                 host: FragmentCode, host_header: str) -> MatrixInstruction:
    """``wgmma.mma_async`` m64n``n``k``k`` (``types``: its PTX types) on K-major tiles of 32-byte rows
    (``element``: their C type on the device), float32 or int32 sums (``host``: its scalar spelling)."""
    accumulator = host.accumulator
    integer = accumulator == "int"
    return MatrixInstruction(
        name=name, m=64, n=n, k=k, operands=operands, accumulator="int32" if integer else "float32",
        arch="sm_90a", header=_HEADER + "\n" + _wgmma_macros(accumulator) + "\n" + _wgmma_macro(n, types, k),
        row_elements=k, element_bytes=32 // k, tile=_swizzled_32b(k), lanes=128, tile_alignment=256,
        group_sync="LO_GROUP_SYNC();", host_header=host_header,
        cuda=FragmentCode(
            element=element, accumulator=accumulator,
            declare_a="unsigned long long {name}[{count}];",
            declare_b="unsigned long long {name}[{count}];",
            declare_acc=f"{accumulator} {{name}}[{{count}}][{n // 2}];",
            fill=f"for (int lo_e = 0; lo_e < {n // 2}; ++lo_e) {{acc}}[lo_e] = {'0' if integer else '0.0f'};",
            load_a="{a} = LO_DESC({ptr});",
            load_b="{b} = LO_DESC({ptr});",
            rebase="const unsigned long long lo_d0 = LO_DESC(lo_smem_h);",
            load_rebased="{name} = lo_d0 + {units};",
            mma="LO_WGMMA({acc}, {a}, {b});",
            store=f"LO_WGMMA_STORE({{ptr}}, {{ld}}, {{acc}}, {n});",
            elements="for (int lo_e = {columns} / 2 * ({chunk}); lo_e < {columns} / 2 * ({chunk} + 1); "
                     "lo_e += 2) {{ const int lo_row = LO_LANE / 32 * 16 + LO_LANE % 32 / 4 "
                     "+ 8 * (lo_e % 4 / 2); "
                     "const int lo_col = 8 * (lo_e / 4) + 2 * (LO_LANE % 4);",
            rows="for (int lo_half = 0; lo_half < 2; ++lo_half) { "
                 "const int lo_row = LO_LANE / 32 * 16 + LO_LANE % 32 / 4 + 8 * lo_half;",
            pairs=f"for (int lo_c = 0; lo_c < {n // 8}; ++lo_c) {{ const int lo_col = 8 * lo_c "
                  f"+ 2 * (LO_LANE % 4); const int lo_e = 4 * lo_c + 2 * lo_half;",
            **_WGMMA_STEPS),
        scalar=host)


def _wgmma_scalar(n: int, element: str, accumulator: str) -> FragmentCode:
    """The host spelling of a wgmma fragment: the products through the descriptors (``lo_wgmma``)."""
    each = f"for (int lo_e = 0; lo_e < {64 * n}; ++lo_e) "
    return FragmentCode(
        element=element, accumulator=accumulator,
        declare_a="unsigned long long {name}[{count}];",
        declare_b="unsigned long long {name}[{count}];",
        declare_acc=f"{accumulator} {{name}}[{{count}}][{64 * n}];",
        fill=each + f"{{acc}}[lo_e] = {'0' if accumulator == 'int' else '0.0f'};",
        load_a="{a} = LO_DESC({ptr});",
        load_b="{b} = LO_DESC({ptr});",
        mma=f"lo_wgmma({{acc}}, lo_smem_h, {{a}}, {{b}}, {n});",
        store=each + f"{{ptr}}[lo_e / {n} * {{ld}} + lo_e % {n}] = {{acc}}[lo_e];",
        elements=f"for (int lo_q = 0; lo_q < 64 * {{columns}}; lo_q += 2) {{{{ const int lo_row = lo_q / "
                 f"{{columns}}; const int lo_col = ({{chunk}}) * {{columns}} + lo_q % {{columns}}; "
                 f"const int lo_e = lo_row * {n} + lo_col;",
        rows="for (int lo_row = 0; lo_row < 64; ++lo_row) {",
        pairs=f"for (int lo_col = 0; lo_col < {n}; lo_col += 2) {{ const int lo_e = lo_row * {n} + lo_col;")


def _wgmma(n: int, dtype: str = "float16") -> MatrixInstruction:
    """``wgmma.mma_async`` m64n``n``k16 on 16-bit ``dtype`` inputs, float32 sums."""
    short = _SHORT[dtype]
    return _wgmma_entry(f"wgmma_m64n{n}k16_{short}_f32", n, 16, (dtype, dtype), f"f32.{short}.{short}",
                        _HALF_TYPES[dtype], _wgmma_scalar(n, "float", "float"), _wgmma_host())


# wgmma m64nNk32 on int8 bytes: 32 bytes of k a row as the 16-bit entries' 16 halves, so the same
# descriptors, swizzles and TMA boxes; s32 sums in the f32 fragment layout. Only the products whose
# activations' sums no instruction needs (weights of zero point 0: symmetric int8) take it: the
# activations s8 or u8, the weights s8 (``quantized.check``).
WGMMA_INT8_TYPES = (("int8", "int8"), ("uint8", "int8"))


def _wgmma_int8(n: int, a: str, b: str) -> MatrixInstruction:
    """``wgmma.mma_async`` m64n``n``k32 on ``a`` x ``b`` bytes into int32 sums (wrapping, no satfinite)."""
    (ptx_a, cast_a), (ptx_b, cast_b) = _BYTES[a], _BYTES[b]
    short = ptx_a if a == b == "int8" else ptx_a + ptx_b
    return _wgmma_entry(f"wgmma_m64n{n}k32_{short}_s32", n, 32, (a, b), f"s32.{ptx_a}.{ptx_b}",
                        "unsigned char", _wgmma_scalar(n, "unsigned char", "int"),
                        _wgmma_host("unsigned char", "int", 32, f"(int) {cast_a}", f"(int) {cast_b}"))


def with_swizzle(entry: MatrixInstruction, width: int) -> MatrixInstruction:
    """A wgmma ``entry`` whose descriptors read tiles in the ``width``-byte swizzle (``Schedule.swizzle``:
    rows of a whole pipeline step's ``width`` bytes, the k-slices 32 bytes apart in each row), its tiles
    aligned to the swizzle's repeat of eight rows."""
    if width == 32:
        return entry
    return replace(entry, header=entry.header.replace(_DESCRIPTOR, _descriptor(width)),
                   host_header=entry.host_header.replace(_DESCRIPTOR, _descriptor(width)),
                   row_elements=width // entry.element_bytes, tile_alignment=8 * width)


WGMMA_F16_F32 = {n: _wgmma(n) for n in WGMMA_N}
WGMMA_BF16_F32 = {n: _wgmma(n, "bfloat16") for n in WGMMA_N}
WGMMA_INT8 = {types: {n: _wgmma_int8(n, *types) for n in WGMMA_N} for types in WGMMA_INT8_TYPES}
INSTRUCTIONS = {i.name: i for i in (WMMA_F16_F32, MMA_F16_F32, WMMA_BF16_F32, MMA_BF16_F32,
                                    *MMA_INT8.values(), *WGMMA_F16_F32.values(), *WGMMA_BF16_F32.values(),
                                    *(e for entries in WGMMA_INT8.values() for e in entries.values()))}


def instruction(name: str) -> MatrixInstruction:
    """The table's entry ``name``; ValueError naming the known ones."""
    if name not in INSTRUCTIONS:
        raise ValueError(f"unknown matrix instruction {name!r}; known: {', '.join(INSTRUCTIONS)}")
    return INSTRUCTIONS[name]
