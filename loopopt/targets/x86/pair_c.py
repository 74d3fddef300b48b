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

import numpy as np

from ..pair_program import OPS, SERIAL, PairArith, PairProgram
from .isa import AVX2, AVX512, available_isas, cpu_flags
from .quant_c import INLINE, quantize_helpers

INTRINSICS = {kind: f"_mm256_{kind}_ps" for kind in OPS}
WIDEN = {np.dtype(np.uint8): "_mm256_cvtepu8_epi32", np.dtype(np.int8): "_mm256_cvtepi8_epi32"}
INTRINSICS512 = {kind: f"_mm512_{kind}_ps" for kind in OPS}
AVX512_BW = ("avx512bw",)       # the byte packs
WIDEN512 = {np.dtype(np.uint8): "_mm512_cvtepu8_epi32", np.dtype(np.int8): "_mm512_cvtepi8_epi32"}


def _operand(operand: tuple[str, int]) -> str:
    kind, index = operand
    return f"v{index}" if kind == "value" else f"k[{index}]"


def _operations(program: PairProgram, vector: str, intrinsics: dict[str, str]) -> list[str]:
    """C lines computing ``program``'s values ``v2``... from ``v0``, ``v1`` and the constants ``k``, in
    vectors of type ``vector`` with the ``intrinsics`` of its operations."""
    return [f"    {vector} v{index} = {intrinsics[kind]}({_operand(lhs)}, {_operand(rhs)});"
            for index, (kind, lhs, rhs) in enumerate(program.ops, start=2)]


def avx2_pair_source(program: PairProgram) -> str:
    """The C of ``program``'s one-thread loop (``pair_program.SERIAL``) in AVX2 intrinsics."""
    lines = [f"    __m256 v{k} = _mm256_cvtepi32_ps({WIDEN[np.dtype(dtype)]}(_mm_loadl_epi64("
             f"(const __m128i *)({name} + at))));"
             for k, (name, dtype) in enumerate(zip("ab", program.sources))]
    lines += _operations(program, "__m256", INTRINSICS)
    quantized = ", ".join(f"lo_requantize8(lo_program8(a, b, {8 * j}, k), k[{program.scale}], zero)"
                          for j in range(4))
    body = "\n".join(lines)
    return f"""{quantize_helpers(program.out)}
{INLINE} __m256 lo_program8(const unsigned char *a, const unsigned char *b, int at, const __m256 *k)
{{
{body}
    return v{program.result};
}}

{INLINE} void lo_program32(const unsigned char *a, const unsigned char *b, unsigned char *dst,
                           const __m256 *k)
{{
    const __m256i zero = _mm256_cvttps_epi32(k[{program.zero}]);
    _mm256_storeu_si256((__m256i *)dst, lo_pack32({quantized}));
}}

{SERIAL}
{{
    __m256 k[{len(program.constants)}];
    for (int j = 0; j < {len(program.constants)}; ++j)
        k[j] = _mm256_set1_ps(constants[j]);
    long i = 0;
    for (; i + 32 <= n; i += 32)
        lo_program32(a + i, b + i, dst + i, k);
    if (i < n) {{
        unsigned char ta[32] = {{0}}, tb[32] = {{0}}, td[32];
        memcpy(ta, a + i, (size_t)(n - i));
        memcpy(tb, b + i, (size_t)(n - i));
        lo_program32(ta, tb, td, k);
        memcpy(dst + i, td, (size_t)(n - i));
    }}
}}
"""


def avx512_pair_source(program: PairProgram) -> str:
    """The C of ``program``'s one-thread loop (``pair_program.SERIAL``) in AVX-512 intrinsics."""
    lines = [f"    __m512 v{k} = _mm512_cvtepi32_ps({WIDEN512[np.dtype(dtype)]}(_mm_loadu_si128("
             f"(const __m128i *)({name} + at))));"
             for k, (name, dtype) in enumerate(zip("ab", program.sources))]
    lines += _operations(program, "__m512", INTRINSICS512)
    body = "\n".join(lines)
    pack = "_mm512_packus_epi16" if np.dtype(program.out) == np.uint8 else "_mm512_packs_epi16"
    requantized = ", ".join(f"lo_requantize16(lo_program16(a, b, {16 * j}, k), k[{program.scale}], zero)"
                            for j in range(4))
    return f"""#include <immintrin.h>
#include <string.h>
{INLINE} __m512 lo_program16(const unsigned char *a, const unsigned char *b, int at, const __m512 *k)
{{
{body}
    return v{program.result};
}}

{INLINE} __m512i lo_requantize16(__m512 x, __m512 scale, __m512i zero)
{{
    return _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_div_ps(x, scale)), zero);
}}

{INLINE} __m512i lo_pack64(__m512i w0, __m512i w1, __m512i w2, __m512i w3)
{{
    __m512i packed = {pack}(_mm512_packs_epi32(w0, w1), _mm512_packs_epi32(w2, w3));
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
                                    packed);
}}

{INLINE} void lo_program64(const unsigned char *a, const unsigned char *b, unsigned char *dst,
                           const __m512 *k)
{{
    const __m512i zero = _mm512_cvttps_epi32(k[{program.zero}]);
    _mm512_storeu_si512(dst, lo_pack64({requantized}));
}}

{SERIAL}
{{
    __m512 k[{len(program.constants)}];
    for (int j = 0; j < {len(program.constants)}; ++j)
        k[j] = _mm512_set1_ps(constants[j]);
    long i = 0;
    for (; i + 64 <= n; i += 64)
        lo_program64(a + i, b + i, dst + i, k);
    if (i < n) {{
        unsigned char ta[64] = {{0}}, tb[64] = {{0}}, td[64];
        memcpy(ta, a + i, (size_t)(n - i));
        memcpy(tb, b + i, (size_t)(n - i));
        lo_program64(ta, tb, td, k);
        memcpy(dst + i, td, (size_t)(n - i));
    }}
}}
"""


def avx2_pair_arith(program: PairProgram) -> PairArith:
    """``program`` compiled in AVX2 intrinsics (a CPU with AVX2)."""
    return PairArith(program, avx2_pair_source(program), AVX2.compile_flags, "avx2 intrinsics")


def avx512_pair_arith(program: PairProgram) -> PairArith:
    """``program`` compiled in AVX-512 intrinsics (a CPU with AVX-512 F and BW)."""
    return PairArith(program, avx512_pair_source(program), AVX512.compile_flags, "avx512 intrinsics")


def x86_pair_arith(program: PairProgram) -> PairArith | None:
    """The computed pair of the widest ISA this CPU runs: ``avx512_pair_arith`` on AVX-512 (measured on an
    AMD EPYC Zen 4), ``avx2_pair_arith`` on AVX2 (on a Zen 3), else None."""
    best = available_isas()[0]
    if best == AVX512.name and set(AVX512_BW) <= cpu_flags():
        return avx512_pair_arith(program)
    return avx2_pair_arith(program) if best == AVX2.name else None
