"""x86's 8-bit table lookup (``targets/bytemap.py``) on AVX-512 VBMI: 64 bytes a step, each looked up
in the table's low and high 128 bytes (``vpermi2b`` over two registers each) and picked by its top bit
(``vpmovb2m``); the tail under a byte mask. Its pair lookup on AVX-512F: 16 pairs a step, each the
aligned 32-bit word of the table that holds its byte (``vpgatherdd``, never past the table's end),
shifted down to that byte and narrowed (``vpmovdb``); the tail by the portable loop's statement."""
from __future__ import annotations

from functools import cache

from ..bytemap import PAIR_SERIAL, SERIAL, ByteMap, PairMap, portable_byte_map, portable_pair_map
from .isa import AVX512, VBMI_FLAGS, available_isas, cpu_flags

VBMI_FLAGS_OF = AVX512.compile_flags + (VBMI_FLAGS[AVX512.name][1],)
VBMI_SOURCE = f"""#include <immintrin.h>
static inline __m512i lo_map64(__m512i x, __m512i t0, __m512i t1, __m512i t2, __m512i t3)
{{
    __m512i low = _mm512_permutex2var_epi8(t0, x, t1), high = _mm512_permutex2var_epi8(t2, x, t3);
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(x), low, high);
}}

{SERIAL}
{{
    __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
    __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
    long i = 0;
    for (; i + 64 <= n; i += 64)
        _mm512_storeu_si512(dst + i, lo_map64(_mm512_loadu_si512(src + i), t0, t1, t2, t3));
    if (i < n) {{
        __mmask64 tail = (__mmask64)((1ULL << (n - i)) - 1);
        __m512i x = _mm512_maskz_loadu_epi8(tail, src + i);
        _mm512_mask_storeu_epi8(dst + i, tail, lo_map64(x, t0, t1, t2, t3));
    }}
}}
"""


@cache
def x86_byte_map() -> ByteMap:
    """The VBMI lookup where this CPU runs AVX-512 with VBMI (``$LOOPOPT_HIDE_CPU_FLAGS`` hides it),
    else the portable loop."""
    if AVX512.name in available_isas() and VBMI_FLAGS[AVX512.name][0] in cpu_flags():
        return ByteMap(VBMI_SOURCE, VBMI_FLAGS_OF, "avx512 vbmi")
    return portable_byte_map()

GATHER_SOURCE = f"""#include <immintrin.h>
{PAIR_SERIAL}
{{
    const __m512i three = _mm512_set1_epi32(3);
    long i = 0;
    for (; i + 16 <= n; i += 16) {{
        __m512i high = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(a + i)));
        __m512i low = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b + i)));
        __m512i index = _mm512_or_si512(_mm512_slli_epi32(high, 8), low);
        __m512i words = _mm512_i32gather_epi32(_mm512_srli_epi32(index, 2), (const void *)table, 4);
        __m512i shift = _mm512_slli_epi32(_mm512_and_si512(index, three), 3);
        _mm_storeu_si128((__m128i *)(dst + i), _mm512_cvtepi32_epi8(_mm512_srlv_epi32(words, shift)));
    }}
    for (; i < n; ++i)
        dst[i] = table[(unsigned)a[i] << 8 | b[i]];
}}
"""


@cache
def x86_pair_map() -> PairMap:
    """The AVX-512 gather lookup where this CPU runs AVX-512 (``$LOOPOPT_HIDE_CPU_FLAGS`` hides it),
    else the portable loop."""
    if AVX512.name in available_isas():
        return PairMap(GATHER_SOURCE, AVX512.compile_flags, "avx512 gather")
    return portable_pair_map()
