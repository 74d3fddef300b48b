"""x86's 8-bit table lookup (``targets/bytemap.py``) on AVX-512 VBMI: 64 bytes a step, each looked up
in the table's low and high 128 bytes (``vpermi2b`` over two registers each) and picked by its top bit
(``vpmovb2m``); the tail under a byte mask. On AVX2: 32 bytes a step, looked up in each 16-byte row of
the table (``vpshufb`` by the low nibble) where the byte minus 16 times the row, plus 0x70 with unsigned
saturation, keeps its top bit clear (the byte is in that row; ``vpshufb`` zeroes the others), the rows'
results or-ed; the tail by the portable loop's statement. 200,704 bytes (a 64x56x56 activation) on an
AMD EPYC Zen 3, one thread, medians of 100 interleaved calls (the two cores shared): portable loop 96 us,
AVX2 56 us; 802,816 bytes 337 -> 213 us. Its pair lookup on AVX-512F: 16 pairs a step, each the
aligned 32-bit word of the table that holds its byte (``vpgatherdd``, never past the table's end),
shifted down to that byte and narrowed (``vpmovdb``); the tail by the portable loop's statement."""
from __future__ import annotations

from functools import cache

from ..bytemap import PAIR_SERIAL, SERIAL, ByteMap, PairMap, portable_byte_map, portable_pair_map
from .isa import AVX2, AVX512, VBMI_FLAGS, available_isas, cpu_flags

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


AVX2_SOURCE = f"""#include <immintrin.h>
{SERIAL}
{{
    __m256i rows[16];
    for (int h = 0; h < 16; ++h)
        rows[h] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(table + 16 * h)));
    const __m256i bias = _mm256_set1_epi8(0x70), row = _mm256_set1_epi8(16);
    long i = 0;
    for (; i + 32 <= n; i += 32) {{
        __m256i x = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i even = _mm256_setzero_si256(), odd = _mm256_setzero_si256();
        for (int h = 0; h < 16; h += 2) {{
            even = _mm256_or_si256(even, _mm256_shuffle_epi8(rows[h], _mm256_adds_epu8(x, bias)));
            x = _mm256_sub_epi8(x, row);
            odd = _mm256_or_si256(odd, _mm256_shuffle_epi8(rows[h + 1], _mm256_adds_epu8(x, bias)));
            x = _mm256_sub_epi8(x, row);
        }}
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_or_si256(even, odd));
    }}
    for (; i < n; ++i)
        dst[i] = table[src[i]];
}}
"""


@cache
def x86_vbmi_byte_map() -> ByteMap | None:
    """The VBMI lookup where this CPU runs AVX-512 with VBMI (``$LOOPOPT_HIDE_CPU_FLAGS`` hides it), else
    None."""
    if AVX512.name in available_isas() and VBMI_FLAGS[AVX512.name][0] in cpu_flags():
        return ByteMap(VBMI_SOURCE, VBMI_FLAGS_OF, "avx512 vbmi")
    return None


@cache
def x86_byte_maps() -> tuple[ByteMap, ...]:
    """Every 8-bit lookup this CPU runs, best first: the VBMI one (``x86_vbmi_byte_map``), the AVX2 one
    where it runs AVX2, the portable loop."""
    vbmi = x86_vbmi_byte_map()
    found = [] if vbmi is None else [vbmi]
    if AVX2.name in available_isas():
        found.append(ByteMap(AVX2_SOURCE, AVX2.compile_flags, "avx2 pshufb"))
    return (*found, portable_byte_map())


def x86_byte_map() -> ByteMap:
    """The fastest 8-bit lookup this CPU runs (``x86_byte_maps``' first)."""
    return x86_byte_maps()[0]


def x86_pool_byte_map() -> ByteMap | None:
    """``x86_vbmi_byte_map`` (``Target.pool_byte_map``: 64 bytes by two two-register byte permutes and a
    blend, after its table's four loads from L1); without VBMI None: each byte loaded from the table
    (AVX2's lookup sets sixteen rows up a call; not measured in a pool)."""
    return x86_vbmi_byte_map()


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
