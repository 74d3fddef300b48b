"""x86's computed pair lookups (``targets/pair_program.py``) in AVX2 and AVX-512 intrinsics. AVX2: 32 pairs
a step, each eight codes widened to int32 and converted to float32 (exact), the program's operations one
``vaddps`` / ``vsubps`` / ``vmulps`` / ``vmaxps`` each (a Relu's maximum with the constant first, so a NaN
stays, as numpy's), then ``quant_c.py``'s shorter requantization (a division, a conversion rounding to
nearest even, the zero point added in int32, the packs' saturation for the clamp); the tail through
zero-padded copies. AVX-512: the same on 16 codes a vector, 64 pairs a step, the four vectors narrowed by
``vpackssdw`` and ``vpackuswb`` / ``vpacksswb`` and put back in order by one ``vpermd``. Every operation is
the IEEE one of the steps it stands for, so the same bits as their table wherever the quotient is a number
within int32; the ONNX backend checks that on all 65,536 pairs before it uses one (``onnx/pair_arith.py``).
200,704 pairs (ResNet-18's first residual add), AMD EPYC Zen 3, one thread: the AVX2 host's pair lookup
(the portable loop) 127-140 us, an AVX2 gather of the table 107 us, the computed Add -> Relu ->
QuantizeLinear 62 us with ``vroundps`` and float clamps, 48-50 us as here. 802,816 pairs (ResNet-50's
first), AMD EPYC Zen 4, one thread, medians of 200 interleaved calls: the AVX-512 host's pair lookup
(``vpgatherdd``) 621 us, the AVX2 program 201 us, the AVX-512 one 145 us (with ``vpmovusdb`` narrowing
instead of the packs: 163 us).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..pair_program import SERIAL, PairArith, PairProgram
from .isa import AVX2, AVX512, available_isas, cpu_flags
from .quant_c import INLINE, quantize_helpers

AVX512_BW = ("avx512bw",)       # the byte packs
AVX512_HELPERS = """#include <immintrin.h>
#include <string.h>
{inline} __m512i lo_requantize16(__m512 x, __m512 scale, __m512i zero)
{{
    return _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_div_ps(x, scale)), zero);
}}

{inline} __m512i lo_pack64(__m512i w0, __m512i w1, __m512i w2, __m512i w3)
{{
    __m512i packed = {pack}(_mm512_packs_epi32(w0, w1), _mm512_packs_epi32(w2, w3));
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
                                    packed);
}}
"""


@dataclass(frozen=True)
class Vectors:
    """One ISA's float32 vectors in a program's C: the type (``vector``), the intrinsics' prefix, the
    lanes, the load of ``lanes`` codes into an ``__m128i``, the store of ``4 * lanes`` bytes (``{}``: the
    packed vector), and ``helpers(out)``: the C of ``lo_requantize<lanes>`` and ``lo_pack<4 lanes>`` for
    the output dtype ``out``."""

    vector: str
    prefix: str
    lanes: int
    load: str
    store: str
    helpers: Callable[[np.dtype], str]


AVX2_VECTORS = Vectors("__m256", "_mm256", 8, "_mm_loadl_epi64", "_mm256_storeu_si256((__m256i *)dst, {})",
                       quantize_helpers)
AVX512_PACKS = {np.dtype(np.uint8): "_mm512_packus_epi16", np.dtype(np.int8): "_mm512_packs_epi16"}
AVX512_VECTORS = Vectors("__m512", "_mm512", 16, "_mm_loadu_si128", "_mm512_storeu_si512(dst, {})",
                         lambda out: AVX512_HELPERS.format(inline=INLINE, pack=AVX512_PACKS[np.dtype(out)]))
WIDEN = {np.dtype(np.uint8): "cvtepu8_epi32", np.dtype(np.int8): "cvtepi8_epi32"}


def _operand(operand: tuple[str, int]) -> str:
    kind, index = operand
    return f"v{index}" if kind == "value" else f"k[{index}]"


def pair_source(program: PairProgram, isa: Vectors) -> str:
    """The C of ``program``'s one-thread loop (``pair_program.SERIAL``) in ``isa``'s intrinsics: ``4 *
    lanes`` pairs a step, the tail through zero-padded copies."""
    vector, prefix, lanes, step = isa.vector, isa.prefix, isa.lanes, 4 * isa.lanes
    lines = [f"    {vector} v{k} = {prefix}_cvtepi32_ps({prefix}_{WIDEN[np.dtype(dtype)]}({isa.load}("
             f"(const __m128i *)({name} + at))));"
             for k, (name, dtype) in enumerate(zip("ab", program.sources))]
    lines += [f"    {vector} v{index} = {prefix}_{kind}_ps({_operand(lhs)}, {_operand(rhs)});"
              for index, (kind, lhs, rhs) in enumerate(program.ops, start=2)]
    quantized = ", ".join(f"lo_requantize{lanes}(lo_program{lanes}(a, b, {lanes * j}, k), "
                          f"k[{program.scale}], zero)" for j in range(4))
    body = "\n".join(lines)
    return f"""{isa.helpers(program.out)}
{INLINE} {vector} lo_program{lanes}(const unsigned char *a, const unsigned char *b, int at, const {vector} *k)
{{
{body}
    return v{program.result};
}}

{INLINE} void lo_program{step}(const unsigned char *a, const unsigned char *b, unsigned char *dst,
                           const {vector} *k)
{{
    const {vector}i zero = {prefix}_cvttps_epi32(k[{program.zero}]);
    {isa.store.format(f"lo_pack{step}({quantized})")};
}}

{SERIAL}
{{
    {vector} k[{len(program.constants)}];
    for (int j = 0; j < {len(program.constants)}; ++j)
        k[j] = {prefix}_set1_ps(constants[j]);
    long i = 0;
    for (; i + {step} <= n; i += {step})
        lo_program{step}(a + i, b + i, dst + i, k);
    if (i < n) {{
        unsigned char ta[{step}] = {{0}}, tb[{step}] = {{0}}, td[{step}];
        memcpy(ta, a + i, (size_t)(n - i));
        memcpy(tb, b + i, (size_t)(n - i));
        lo_program{step}(ta, tb, td, k);
        memcpy(dst + i, td, (size_t)(n - i));
    }}
}}
"""


def avx2_pair_arith(program: PairProgram) -> PairArith:
    """``program`` compiled in AVX2 intrinsics (a CPU with AVX2)."""
    return PairArith(program, pair_source(program, AVX2_VECTORS), AVX2.compile_flags, "avx2 intrinsics")


def avx512_pair_arith(program: PairProgram) -> PairArith:
    """``program`` compiled in AVX-512 intrinsics (a CPU with AVX-512 F and BW)."""
    return PairArith(program, pair_source(program, AVX512_VECTORS), AVX512.compile_flags, "avx512 intrinsics")


def x86_pair_arith(program: PairProgram) -> PairArith | None:
    """The computed pair of the widest ISA this CPU runs: ``avx512_pair_arith`` on AVX-512 (measured on an
    AMD EPYC Zen 4), ``avx2_pair_arith`` on AVX2 (on a Zen 3), else None."""
    best = available_isas()[0]
    if best == AVX512.name and set(AVX512_BW) <= cpu_flags():
        return avx512_pair_arith(program)
    return avx2_pair_arith(program) if best == AVX2.name else None
