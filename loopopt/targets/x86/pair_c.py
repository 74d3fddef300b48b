"""x86's computed pair lookups (``targets/pair_program.py``) in AVX2 intrinsics: 32 pairs a step, each
eight codes widened to int32 and converted to float32 (exact), the program's operations one ``vaddps`` /
``vsubps`` / ``vmulps`` / ``vmaxps`` each (a Relu's maximum with the constant first, so a NaN stays, as
numpy's), then ``quant_c.py``'s shorter requantization (a division, a conversion rounding to nearest even,
the zero point added in int32, the packs' saturation for the clamp); the tail through zero-padded copies.
Every operation is the IEEE one of the steps it stands for, so the same bits as their table wherever the
quotient is a number within int32; the ONNX backend checks that on all 65,536 pairs before it uses one
(``onnx/pair_arith.py``). 200,704 pairs (ResNet-18's first residual add), AMD EPYC Zen 3, one thread: the
AVX2 host's pair lookup (the portable loop) 127-140 us, an AVX2 gather of the table 107 us, the computed
Add -> Relu -> QuantizeLinear 62 us with ``vroundps`` and float clamps, 48-50 us as here.
"""
from __future__ import annotations

import numpy as np

from ..pair_program import SERIAL, PairArith, PairProgram
from .isa import AVX2, available_isas
from .quant_c import INLINE, quantize_helpers

INTRINSICS = {"add": "_mm256_add_ps", "sub": "_mm256_sub_ps", "mul": "_mm256_mul_ps", "max": "_mm256_max_ps"}
WIDEN = {np.dtype(np.uint8): "_mm256_cvtepu8_epi32", np.dtype(np.int8): "_mm256_cvtepi8_epi32"}


def _operand(operand: tuple[str, int]) -> str:
    kind, index = operand
    return f"v{index}" if kind == "value" else f"k[{index}]"


def avx2_pair_source(program: PairProgram) -> str:
    """The C of ``program``'s one-thread loop (``pair_program.SERIAL``) in AVX2 intrinsics."""
    lines = [f"    __m256 v{k} = _mm256_cvtepi32_ps({WIDEN[np.dtype(dtype)]}(_mm_loadl_epi64("
             f"(const __m128i *)({name} + at))));"
             for k, (name, dtype) in enumerate(zip("ab", program.sources))]
    for index, (kind, lhs, rhs) in enumerate(program.ops, start=2):
        lines.append(f"    __m256 v{index} = {INTRINSICS[kind]}({_operand(lhs)}, {_operand(rhs)});")
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


def avx2_pair_arith(program: PairProgram) -> PairArith:
    """``program`` compiled in AVX2 intrinsics (a CPU with AVX2)."""
    return PairArith(program, avx2_pair_source(program), AVX2.compile_flags, "avx2 intrinsics")


def x86_pair_arith(program: PairProgram) -> PairArith | None:
    """``avx2_pair_arith`` where AVX2 is the widest ISA this CPU runs (measured there), else None."""
    return avx2_pair_arith(program) if available_isas()[0] == AVX2.name else None
