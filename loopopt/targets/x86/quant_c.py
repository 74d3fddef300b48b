"""x86's QuantizeLinear of float32 values in AVX2 intrinsics (``linear_quant``'s quantize loop): 32 values a
step, each ``x / scale`` (``vdivps``: a division, as onnx.reference rounds), ``vroundps`` to nearest (ties to
even, as ``rintf``), plus the zero point, clamped to the 8-bit range, a NaN made 0 (as the portable loop's
cast makes it), narrowed by saturating packs; the tail through a zero-padded copy, so every element goes
through the same instructions. Each is one IEEE operation of the portable loop's, so the same bits.
GCC's vectorization of the portable loop widens and narrows through many shuffles: 150,528 values (a
3x224x224 model input) 58 us, these 20-25 us (AMD EPYC Zen 3, one thread, minimum of 300 calls).

``quantize_helpers`` is the C of that step (``lo_quantize8``: eight floats to int32; ``lo_pack32``: four such
to 32 bytes in order, saturating) and of a shorter one (``lo_requantize8``: ``x / scale`` converted to int32
by ``vcvtps2dq``, rounding to nearest even, plus an int32 zero point, the packs' saturation the clamp: the
same result wherever ``x / scale`` is a number within int32; past it or NaN the conversion gives INT_MIN)
that the computed pair lookups (``pair_c.py``) end in, checked on every pair.
"""
from __future__ import annotations

from functools import cache

import numpy as np

from ..linear_quant import C_TYPES, RANGES, LinearQuant, linear_quant, quantize_serial
from .isa import AVX2, ISAS, available_isas

INLINE = "static inline __attribute__((always_inline))"


def quantize_helpers(dtype: np.dtype) -> str:
    """The C of ``lo_quantize8``, ``lo_requantize8`` and ``lo_pack32`` for the 8-bit ``dtype``."""
    pack = "_mm256_packus_epi16" if np.dtype(dtype) == np.uint8 else "_mm256_packs_epi16"
    return f"""#include <immintrin.h>
#include <string.h>
{INLINE} __m256i lo_quantize8(__m256 x, __m256 scale, __m256 zero, __m256 low, __m256 high)
{{
    __m256 r = _mm256_round_ps(_mm256_div_ps(x, scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_add_ps(r, zero);
    __m256 ordered = _mm256_cmp_ps(r, r, _CMP_ORD_Q);
    r = _mm256_min_ps(_mm256_max_ps(r, low), high);
    return _mm256_cvttps_epi32(_mm256_and_ps(r, ordered));
}}

{INLINE} __m256i lo_requantize8(__m256 x, __m256 scale, __m256i zero)
{{
    return _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_div_ps(x, scale)), zero);
}}

{INLINE} __m256i lo_pack32(__m256i w0, __m256i w1, __m256i w2, __m256i w3)
{{
    __m256i packed = {pack}(_mm256_packs_epi32(w0, w1), _mm256_packs_epi32(w2, w3));
    return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}}
"""


def avx2_quantize_loop(dtype: np.dtype) -> str:
    """The C of ``linear_quant``'s one-thread quantize loop for the 8-bit ``dtype`` in AVX2 intrinsics."""
    c_type, (low, high) = C_TYPES[np.dtype(dtype)], RANGES[np.dtype(dtype)]
    step = "lo_pack32({})".format(", ".join(
        f"lo_quantize8(_mm256_loadu_ps(from + {8 * k}), s, z, lo, hi)" for k in range(4)))
    return f"""{quantize_helpers(dtype)}
{INLINE} void lo_quantize32(const float *from, {c_type} *to, __m256 s, __m256 z, __m256 lo, __m256 hi)
{{
    _mm256_storeu_si256((__m256i *)to, {step});
}}

{quantize_serial(c_type)}
{{
    const __m256 s = _mm256_set1_ps(scale), z = _mm256_set1_ps(zero);
    const __m256 lo = _mm256_set1_ps({low}.0f), hi = _mm256_set1_ps({high}.0f);
    long i = 0;
    for (; i + 32 <= n; i += 32)
        lo_quantize32(x + i, q + i, s, z, lo, hi);
    if (i < n) {{
        float from[32] = {{0}};
        {c_type} to[32];
        memcpy(from, x + i, (size_t)(n - i) * sizeof(float));
        lo_quantize32(from, to, s, z, lo, hi);
        memcpy(q + i, to, (size_t)(n - i));
    }}
}}
"""


@cache
def avx2_linear_quant(dtype: np.dtype, flags: tuple[str, ...] = AVX2.compile_flags) -> LinearQuant:
    """The loops of the 8-bit ``dtype`` with the quantize loop in AVX2 intrinsics, the others built with
    ``flags`` (a CPU with AVX2; ``flags`` those of its widest ISA)."""
    return LinearQuant(np.dtype(dtype), flags, avx2_quantize_loop(dtype), "avx2 intrinsics")


def x86_linear_quant(dtype: np.dtype) -> LinearQuant:
    """The quantize and dequantize loops of the 8-bit ``dtype`` on this CPU: the quantize loop in AVX2
    intrinsics wherever it has AVX2 (an AVX-512 CPU too: GCC's AVX-512 vectorization of the portable loop
    is slower, AMD EPYC Zen 4, one thread, medians of 150 interleaved calls: 802,816 values 169 us against
    113 us, a rotated 3x224x224 input 43 against 31), the dequantize loops built with the widest ISA's flags
    (AVX-512's there: dequantize 58 us against AVX2's 63, dequantize and add 96 against 116); else the
    portable loops."""
    best = available_isas()[0]
    if AVX2.name in available_isas():
        return avx2_linear_quant(np.dtype(dtype), ISAS[best].compile_flags)
    return linear_quant(np.dtype(dtype), ISAS[best].compile_flags)
