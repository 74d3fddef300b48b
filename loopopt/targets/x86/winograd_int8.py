"""C of int8 Winograd F(2x2, 3x3) (``loopopt.winograd_int8``): three stages in one module.

Every value is an integer and every stage exact (the range argument is in ``loopopt.winograd_int8``):

1. ``lo_input_transform``: ``V[t][p][c] = (B^T d B)[t]`` of the zero-point-shifted 4x4 activation tile
   ``d = x - zx`` of tile ``p``, int16 (|V| <= 4 * 255); the activations are read from a padded NHWC
   buffer whose padding holds the zero point, so padding taps are ``d = 0``. A loop over the channels
   with int16 arithmetic, vectorized by the compiler.
2. ``lo_gemm``: per tile position ``t``, ``M[t][p][k] = sum_c V[t][p][c] * U[t][c][k]`` in int32 on pairs
   of int16 channels: ``vpdpwssd`` (AVX-512 VNNI), ``vpmaddwd`` + ``vpaddd`` (AVX2), or two int32
   products (scalar). ``U`` (the filter transform scaled by 2 per axis, integers) is packed as
   ``[t][c / 2][k][2]`` so that one vector load holds the channel pairs of ``lanes`` output channels; a
   ``rows x vectors`` block of ``M`` stays in registers over the channels.
3. ``lo_output_transform``: ``Y' = A^T M A`` per tile and channel (int32; ``Y' = 4 acc`` exactly),
   ``acc = Y' >> 2``, then the epilogue of the direct int8 kernels: bias, scales, requantization, into
   the NHWC output (the tiles' rows and columns past the output are not stored).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from ...codegen import cprint
from .isa import INT_ISAS

TILE = 2                            # m of F(m x m, 3 x 3)
SPAN = TILE + 2                     # input tile side
POSITIONS = SPAN * SPAN             # tile positions t of the batched GEMM
LANES = {"avx512": 16, "avx2": 8, "scalar": 1}           # int32 lanes of a GEMM accumulator
CHANNEL_ALIGN = 32                  # input channels padded to whole 512-bit vectors of int16
BLOCKS = {"avx512": (6, 4), "avx2": (4, 2), "scalar": (4, 1)}   # default GEMM block: rows x vectors
TEMPORARIES = {"avx512": 1, "avx2": 2, "scalar": 1}   # the broadcast pair (and AVX2's vpmaddwd product)
# the other GEMM blocks (rows, channels) lo.tune measures (the default first): no spills with GCC 12
TUNE_BLOCKS = {"avx512": ((7, 48), (12, 32), (4, 64)), "avx2": ((3, 24), (6, 8)), "scalar": ()}

# Lavin & Gray's F(2x2, 3x3) matrices; G's halves are scaled out (2G is an integer matrix, so the
# transformed filter is 4 times theirs and so is the output transform's result)
BT = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))
G2 = ((2, 0, 0), (1, 1, 1), (1, -1, 1), (0, 0, 2))
AT = ((1, 1, 1, 0), (0, 1, -1, -1))
SCALE = 4                           # Y' = A^T [(2G) g (2G)^T . B^T d B] A = 4 * the direct sum

VECTOR_C = {
    "avx512": """\
typedef __m512i lo_vec;
static inline lo_vec lo_zero(void) { return _mm512_setzero_si512(); }
static inline lo_vec lo_pair(const int16_t *p) { return _mm512_set1_epi32(*(const int32_t *)p); }
static inline lo_vec lo_load(const int16_t *p) { return _mm512_loadu_si512((const void *)p); }
/* vpdpwssd written out: GCC 12 copies each accumulator through another register (and spills some)
 * around _mm512_dpwssd_epi32 in a register block; the asm ties the accumulator to its register */
static inline lo_vec lo_dot(lo_vec c, lo_vec a, lo_vec b) {
    __asm__("vpdpwssd %2, %1, %0" : "+v"(c) : "v"(a), "vm"(b));
    return c;
}
static inline void lo_store(int32_t *p, lo_vec v) { _mm512_storeu_si512((void *)p, v); }
""",
    "avx2": """\
typedef __m256i lo_vec;
static inline lo_vec lo_zero(void) { return _mm256_setzero_si256(); }
static inline lo_vec lo_pair(const int16_t *p) { return _mm256_set1_epi32(*(const int32_t *)p); }
static inline lo_vec lo_load(const int16_t *p) {
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}
static inline lo_vec lo_dot(lo_vec c, lo_vec a, lo_vec b) {
    return _mm256_add_epi32(c, _mm256_madd_epi16(a, b));
}
static inline void lo_store(int32_t *p, lo_vec v) { _mm256_storeu_si256((__m256i *)(void *)p, v); }
""",
    "scalar": """\
typedef struct { int32_t lo, hi; } lo_vec;        /* one lane: a pair of int16 widened */
static inline lo_vec lo_zero(void) { lo_vec v = {0, 0}; return v; }
static inline lo_vec lo_pair(const int16_t *p) { lo_vec v = {p[0], p[1]}; return v; }
static inline lo_vec lo_load(const int16_t *p) { return lo_pair(p); }
static inline lo_vec lo_dot(lo_vec c, lo_vec a, lo_vec b) { c.lo += a.lo * b.lo + a.hi * b.hi; return c; }
static inline void lo_store(int32_t *p, lo_vec v) { *p = v.lo; }
""",
}

CTYPES = {"uint8": "uint8_t", "int8": "int8_t", "int32": "int32_t", "float32": "float"}


@dataclass(frozen=True)
class Int8WinogradShape:
    """The extents of the pipeline's buffers: batch, channels, input and output sizes, tiles, pads,
    the GEMM's int32 lanes and register block (``rows`` tiles x ``vectors`` vectors of channels)."""

    n: int
    c: int
    k: int
    h: int
    w: int
    oh: int
    ow: int
    ph: int
    pw: int
    lanes: int
    rows: int
    vectors: int

    @property
    def th(self) -> int:
        return -(-self.oh // TILE)

    @property
    def tw(self) -> int:
        return -(-self.ow // TILE)

    @property
    def tiles(self) -> int:
        return self.n * self.th * self.tw

    @property
    def cpad(self) -> int:
        return -(-self.c // CHANNEL_ALIGN) * CHANNEL_ALIGN

    @property
    def kpad(self) -> int:
        return -(-self.k // self.lanes) * self.lanes

    @property
    def activations_shape(self) -> tuple[int, ...]:
        """The padded NHWC activations: every tile's 4x4 window lies inside."""
        return (self.n, self.th * TILE + 2, self.tw * TILE + 2, self.cpad)

    @property
    def filter_shape(self) -> tuple[int, ...]:
        return (POSITIONS, self.cpad // 2, self.kpad, 2)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """``V[t][p][c]``, int16."""
        return (POSITIONS, self.tiles, self.cpad)

    @property
    def product_shape(self) -> tuple[int, ...]:
        """``M[t][p][k]``, int32."""
        return (POSITIONS, self.tiles, self.kpad)


def _combination(row: tuple[int, ...], terms: list[str]) -> str:
    """C of ``sum row[i] * terms[i]`` for a row of 0 / +-1 coefficients."""
    text = ""
    for coefficient, term in zip(row, terms):
        if coefficient:
            sign = "-" if coefficient < 0 else ("+" if text else "")
            text += f" {sign} {term}" if text else f"{sign}{term}"
    return text


_loop = partial(cprint.for_loop, "ptrdiff_t")      # the stages' loops run over ptrdiff_t


def _input_transform(s: Int8WinogradShape, activation: str) -> list[str]:
    rows, cols = s.activations_shape[1:3]
    d = [[f"d{i}{j}" for j in range(SPAN)] for i in range(SPAN)]
    loads = [f"const int16_t {d[i][j]} = (int16_t)(x[{(i * cols + j) * s.cpad} + c] - lo_zx);"
             for i in range(SPAN) for j in range(SPAN)]
    rowwise = [f"const int16_t r{a}{j} = (int16_t)({_combination(BT[a], [d[i][j] for i in range(SPAN)])});"
               for a in range(SPAN) for j in range(SPAN)]
    stores = [f"v[{(a * SPAN + b) * s.tiles * s.cpad}] = "
              f"(int16_t)({_combination(BT[b], [f'r{a}{j}' for j in range(SPAN)])});"
              for a in range(SPAN) for b in range(SPAN)]
    tile = [f"const {CTYPES[activation]} *restrict x = "
            f"X + ((n * {rows} + {TILE} * th) * {cols} + {TILE} * tw) * {s.cpad};",
            f"int16_t *restrict v0 = V + ((n * {s.th} + th) * {s.tw} + tw) * {s.cpad};",
            *cprint.block(_loop("c", s.cpad), ["int16_t *restrict v = v0 + c;", *loads, *rowwise, *stores])]
    signature = (f"void lo_input_transform(const {CTYPES[activation]} *restrict X, int16_t *restrict V, "
                 "int lo_zx)")
    return [signature, *cprint.block("", _tiles(s, tile))]


def _tiles(s: Int8WinogradShape, body: list[str]) -> list[str]:
    """``body`` in the loops over the images and their tiles (one level, the loops collapsed)."""
    return [_loop("n", s.n), _loop("th", s.th), *cprint.block(_loop("tw", s.tw), body)]


def _gemm_block(s: Int8WinogradShape, rows: int, vectors: int) -> list[str]:
    """A static function: ``rows`` tiles x ``vectors`` vectors of output channels of ``M`` over all
    channel pairs."""
    acc = [[f"a{r}_{j}" for j in range(vectors)] for r in range(rows)]
    step = 2 * s.lanes
    pair = [f"const int16_t *restrict uc = u + c2 * {2 * s.kpad};",
            *(f"const lo_vec b{j} = lo_load(uc + {j * step});" for j in range(vectors)),
            *(f"{{ const lo_vec x = lo_pair(v + {r * s.cpad} + 2 * c2); "
              + " ".join(f"{acc[r][j]} = lo_dot({acc[r][j]}, x, b{j});" for j in range(vectors)) + " }"
              for r in range(rows))]
    body = [*(f"lo_vec {', '.join(f'{a} = lo_zero()' for a in row)};" for row in acc),
            *cprint.block(_loop("c2", s.cpad // 2), pair),
            *(f"lo_store(m + {r * s.kpad + j * s.lanes}, {acc[r][j]});"
              for r in range(rows) for j in range(vectors))]
    return [f"static inline void lo_block_{rows}_{vectors}(const int16_t *restrict v, "
            "const int16_t *restrict u, int32_t *restrict m)", *cprint.block("", body)]


def _split(extent: int, block: int) -> list[tuple[int, int]]:
    """``(start, size)`` of the blocks covering ``extent``: whole blocks, then one shorter block."""
    whole = extent // block * block
    return ([(0, block)] if whole else []) + ([(whole, extent - whole)] if extent > whole else [])


def gemm_blocks(s: Int8WinogradShape) -> list[tuple[int, int]]:
    """The ``(rows, vectors)`` register blocks the GEMM uses (the tails' too)."""
    vectors = s.kpad // s.lanes
    return sorted({(r, j) for _, r in _split(s.tiles, s.rows) for _, j in _split(vectors, s.vectors)})


def _gemm_runs(s: Int8WinogradShape) -> list[tuple[int, int, int, int, int, int]]:
    """The GEMM's runs of one register block (whole blocks, then the tails): the output channel loop
    ``kb`` (begin, end, step), the first tile ``p`` and the block's tiles and vectors."""
    vectors = s.kpad // s.lanes
    return [(k0 * s.lanes, (k0 + (vectors - k0) // j * j) * s.lanes, j * s.lanes, p0, r, j)
            for k0, j in _split(vectors, s.vectors) for p0, r in _split(s.tiles, s.rows)]


def _gemm(s: Int8WinogradShape) -> list[str]:
    body = []
    for begin, end, step, p0, r, j in _gemm_runs(s):
        rows = f"for (ptrdiff_t p = {p0}; p + {r} <= {s.tiles}; p += {r})"
        call = (f"lo_block_{r}_{j}(v + p * {s.cpad}, u + kb * 2, m + p * {s.kpad} + kb);")
        body += [_loop("kb", end, begin, step), *cprint.staircase([rows, call])]
    position = [f"const int16_t *restrict v = V + t * {s.tiles * s.cpad};",
                f"const int16_t *restrict u = U + t * {s.cpad * s.kpad};",
                f"int32_t *restrict m = M + t * {s.tiles * s.kpad};", *body]
    return ["void lo_gemm(const int16_t *restrict V, const int16_t *restrict U, int32_t *restrict M)",
            *cprint.block("", cprint.block(_loop("t", POSITIONS), position))]


def _epilogue(spec, bias: bool) -> list[str]:
    """C storing ``acc`` of channel ``k`` to ``*y``, as the direct kernels' epilogue computes it."""
    if spec.dequantized:
        return [f"*y = (float)acc * lo_mult[k]{' + B[k]' if bias else ''};"]
    lines = ["acc += B[k];"] if bias else []
    if not spec.scaled:
        return lines + ["*y = acc;"]
    return lines + ["float q = __builtin_rintf((float)acc * lo_mult[k]);",
                    "q = q < lo_low ? lo_low : (q > lo_high ? lo_high : q);",
                    f"*y = ({CTYPES[spec.output]})((int)q + lo_zy);"]


def _output_transform(s: Int8WinogradShape, spec, bias: bool) -> list[str]:
    out, b = CTYPES[spec.output], "float" if spec.dequantized else "int32_t"
    m = [[f"m{a}{j}" for j in range(SPAN)] for a in range(SPAN)]
    loads = [f"const int {m[a][j]} = mk[{(a * SPAN + j) * s.tiles * s.kpad}];"
             for a in range(SPAN) for j in range(SPAN)]
    rowwise = [f"const int z{r}{j} = {_combination(AT[r], [m[a][j] for a in range(SPAN)])};"
               for r in range(TILE) for j in range(SPAN)]
    stores = []
    for r in range(TILE):
        for q in range(TILE):
            value = _combination(AT[q], [f"z{r}{j}" for j in range(SPAN)])
            stores += cprint.block(f"if ({r} < rows && {q} < cols)", [
                f"int acc = ({value}) >> 2;       /* exact: a multiple of {SCALE} */",
                f"{out} *restrict y = Y + {(r * s.ow + q) * s.k} + k;", *_epilogue(spec, bias)])
    clamp = []
    if spec.requantized:
        info = np.iinfo(spec.output)
        clamp = [f"const float lo_low = (float)({int(info.min)} - lo_zy), "
                 f"lo_high = (float)({int(info.max)} - lo_zy);"]
    channel = ["const int32_t *restrict mk = M + k;", *loads, *rowwise, *stores]
    tile = [f"static inline __attribute__((always_inline)) void lo_output_tile(const int32_t *restrict M, "
            f"{out} *restrict Y, const {b} *restrict B, const float *restrict lo_mult, int lo_zy, "
            "const int rows, const int cols)",
            *cprint.block("", [*clamp, *cprint.block(_loop("k", s.k), channel)])]
    output = [f"const int32_t *restrict mp = M + ((n * {s.th} + th) * {s.tw} + tw) * {s.kpad};",
              f"{out} *restrict y = Y + ((n * {s.oh} + {TILE} * th) * {s.ow} + {TILE} * tw) * {s.k};",
              f"const int rows = {s.oh} - {TILE} * (int)th, cols = {s.ow} - {TILE} * (int)tw;",
              *cprint.staircase([f"if (rows >= {TILE} && cols >= {TILE})",
                                 f"lo_output_tile(mp, y, B, lo_mult, lo_zy, {TILE}, {TILE});"]),
              "else lo_output_tile(mp, y, B, lo_mult, lo_zy, rows, cols);"]
    signature = (f"void lo_output_transform(const int32_t *restrict M, {out} *restrict Y, "
                 f"const {b} *restrict B, const float *restrict lo_mult, int lo_zy)")
    return tile + [signature, *cprint.block("", _tiles(s, output))]


def pseudocode(s: Int8WinogradShape, isa: str) -> list[str]:
    """The three stages' loops on ``isa`` as pseudo-code lines (``Int8WinogradPlan.pseudocode``), each
    stage function's loops with the loop of the block function it calls inside them."""
    lines = [f"# int8 Winograd F(2x2,3x3) (targets/x86/winograd_int8.py) on {isa}: three stages, the GEMM on "
             f"int16 pairs in blocks of {s.rows} tiles x {s.vectors} x {s.lanes} output channels",
             f"# lo_input_transform: V = B^T (X - zx) B per {SPAN} x {SPAN} input tile (int16)",
             f"for n in 0..{s.n}:", f"  for th in 0..{s.th}:", f"    for tw in 0..{s.tw}:",
             f"      for c in 0..{s.cpad}:", "        V[.., tile, c] = B^T d B",
             f"# lo_gemm: M[t] = V[t] U[t] for each of the {POSITIONS} tile positions (int32)",
             f"for t in 0..{POSITIONS}:"]
    for begin, end, step, p0, r, j in _gemm_runs(s):
        lines += [f"  for kb in {begin}..{end} step {step}:",
                  f"    for p in {p0}..{s.tiles} step {r}:    # whole blocks: p + {r} <= {s.tiles}",
                  f"      for c2 in 0..{s.cpad // 2}:    # lo_block_{r}_{j}: the channel pairs",
                  f"        M[t, p.., kb..] += V[t, p.., c pair] x U[t, c pair, kb..]    # {r} x {j} "
                  f"accumulators"]
    return lines + [f"# lo_output_transform: Y = epilogue((A^T M A) >> {SCALE.bit_length() - 1}) per "
                    f"{TILE} x {TILE} output tile",
                    f"for n in 0..{s.n}:", f"  for th in 0..{s.th}:", f"    for tw in 0..{s.tw}:",
                    f"      for k in 0..{s.k}:    # lo_output_tile", "        Y[n, .., k] = epilogue(..)"]


def cdef(spec) -> str:
    """The cffi declarations of the three stage functions."""
    out, b = CTYPES[spec.output], "float" if spec.dequantized else "int32_t"
    return (f"void lo_input_transform(const {CTYPES[spec.activation]} *X, int16_t *V, int lo_zx);\n"
            "void lo_gemm(const int16_t *V, const int16_t *U, int32_t *M);\n"
            f"void lo_output_transform(const int32_t *M, {out} *Y, const {b} *B, const float *lo_mult, "
            "int lo_zy);\n")


def generate_winograd_int8(description: str, s: Int8WinogradShape, spec, bias: bool, isa: str) -> str:
    """The C source of the three stages for the shape ``s`` on ``isa`` (headed by ``description``)."""
    header = (f"/* loopopt int8 Winograd F(2x2,3x3) (codegen/winograd_int8.py) for {description}\n"
              f" * isa: {isa}, GEMM on int16 pairs, {s.rows} tiles x {s.vectors} x {s.lanes} channels "
              f"per block */")
    lines = [header, "#include <stdint.h>", "#include <stddef.h>"]
    if isa != "scalar":
        lines.append("#include <immintrin.h>")
    lines += [VECTOR_C[isa]]
    lines += _input_transform(s, spec.activation) + [""]
    for rows, vectors in gemm_blocks(s):
        lines += _gemm_block(s, rows, vectors) + [""]
    lines += _gemm(s) + [""] + _output_transform(s, spec, bias) + [""]
    return "\n".join(lines)


def compile_flags(isa: str) -> tuple[str, ...]:
    """The integer ISA's flags (``vpdpwssd`` is AVX-512 VNNI, which the AVX-512 integer table asks for)."""
    return INT_ISAS[isa].compile_flags
