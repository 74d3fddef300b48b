"""x86's C of the tap dot and i2_s features (``codegen.instr.PACKED_MEANINGS``) and of AVX-512's byte map
(``BYTE_MAP_MEANINGS``): the integer tables' entries (``PACKED``, by variant) and the file-scope helpers
they call (``HELPERS``).

Tap dots (``codegen/taps.py``): a window of 64 (AVX2: 32) activation bytes spread into dot groups with a
dword permute and a byte shuffle (AVX-512: one ``vpermb`` where the compiler targets AVX512-VBMI), phase
groups zipped back in order. i2_s weights (``codegen/ternary.py``): 16 bytes broadcast to the 128-bit
lanes and shifted (a whole dot vector), or each lane's 32 bits gathered and shifted. s16 weights
(``codegen/wide.py``, AVX2 only: ``codegen.instr.WIDE_MEANINGS``): the broadcast group's bytes split into
the int16 pairs (a0, a2) and (a1, a3), each multiply-added with ``vpmaddwd`` from the weights' block.
"""
from __future__ import annotations

AVX512_C = """\
/* the 64 weights e .. e + 63 (e a multiple of 64) as bytes: one 16-byte load in each 128-bit lane,
 * lane L shifted by 2 L bits */
static inline __m512i lo_i2s_vector(const uint8_t *p, ptrdiff_t e) {
    const __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)(p + (e >> 2))));
    const __m512i t = _mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 2, 2, 4, 4, 6, 6));
    return _mm512_sub_epi8(_mm512_and_si512(t, _mm512_set1_epi8(3)), _mm512_set1_epi8(1));
}
/* lane j: the 32 bits holding element e[j], shifted so that its code is in bits 0-1 (lanes off in m: 0) */
static inline __m512i lo_i2s_gather(const uint8_t *p, __m512i e, __mmask16 m) {
    const __m512i at = _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(e, 6), 4),
                                       _mm512_and_si512(e, _mm512_set1_epi32(15)));
    const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, at, (const void *)p, 1);
    return _mm512_srlv_epi32(v, _mm512_and_si512(_mm512_srli_epi32(e, 3), _mm512_set1_epi32(6)));
}
"""

AVX2_C = """\
/* the 32 weights e .. e + 31 (e a multiple of 32) as bytes: one 16-byte load in both 128-bit lanes,
 * shifted by s and s + 2 bits (s = 0 for the first half of a block, 4 for the second) */
static inline __m256i lo_i2s_vector(const uint8_t *p, ptrdiff_t e) {
    const __m256i v = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(const void *)(p + ((e >> 6) << 4))));
    const __m256i s = _mm256_add_epi64(_mm256_set1_epi64x((e >> 3) & 6), _mm256_setr_epi64x(0, 0, 2, 2));
    const __m256i t = _mm256_srlv_epi64(v, s);
    return _mm256_sub_epi8(_mm256_and_si256(t, _mm256_set1_epi8(3)), _mm256_set1_epi8(1));
}
static inline __m256i lo_i2s_gather(const uint8_t *p, __m256i e, __m256i m) {
    const __m256i at = _mm256_or_si256(_mm256_slli_epi32(_mm256_srli_epi32(e, 6), 4),
                                       _mm256_and_si256(e, _mm256_set1_epi32(15)));
    const __m256i v = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)(const void *)p,
                                                  at, m, 1);
    return _mm256_srlv_epi32(v, _mm256_and_si256(_mm256_srli_epi32(e, 3), _mm256_set1_epi32(6)));
}
"""

# from each lane's gathered bits: one weight per int32 lane, or a dot group of 4 bytes
UNPACK_C = """\
static inline {v} lo_i2s_lanes(const uint8_t *p, {v} e, {m} m) {{
    return {x}_sub_epi32({x}_and_si{bits}(lo_i2s_gather(p, e, m), {x}_set1_epi32(3)), {x}_set1_epi32(1));
}}
static inline {v} lo_i2s_groups(const uint8_t *p, {v} e, {m} m) {{
    return {x}_sub_epi8({x}_and_si{bits}(lo_i2s_gather(p, e, m), {x}_set1_epi32(0x03030303)),
                        {x}_set1_epi8(1));
}}
"""

TAPS_AVX512 = (
    "/* Input bytes b < 64 from column s of a row of n columns (p: its column s): p[b] where\n"
    "   0 <= s + b < n and b < span, else the byte f. A window whose span lies in the row is one\n"
    "   load (its bytes past the span may lie past the row: the tensor has 64 readable bytes\n"
    "   after its end); the others a byte-masked load of the row's bytes only. */\n"
    "static inline __m512i lo_tap_window(const void *p, long s, long n, long span, int f) {\n"
    "    if (s >= 0 && s + span <= n) return _mm512_loadu_si512(p);\n"
    "    const long lo = s < 0 ? -s : 0, hi = n - s < span ? n - s : span;\n"
    "    const __mmask64 m = hi <= lo ? 0 : (~0ULL >> (64 - (hi - lo))) << lo;\n"
    "    return _mm512_mask_loadu_epi8(_mm512_set1_epi8((char)f), m, p);\n"
    "}\n"
    "/* The dot groups of window v: one byte permute (vpermb) where the compiler targets AVX512-VBMI,\n"
    "   else a dword permute, then a byte shuffle within 128-bit lanes. */\n"
    "static inline __m512i lo_tap_spread(__m512i v, __m512i dwords, __m512i bytes, __m512i picks) {\n"
    "#ifdef __AVX512VBMI__\n"
    "    (void)dwords; (void)bytes;\n"
    "    return _mm512_permutexvar_epi8(picks, v);\n"
    "#else\n"
    "    (void)picks;\n"
    "    return _mm512_shuffle_epi8(_mm512_permutexvar_epi32(dwords, v), bytes);\n"
    "#endif\n"
    "}\n")

TAPS_AVX2 = (
    "/* Input bytes b < 32 from column s of a row of n columns (p: its column s): p[b] where\n"
    "   0 <= s + b < n and b < span, else the byte f. A window whose span lies in the row is one\n"
    "   load (its bytes past the span may lie past the row: the tensor has 32 readable bytes\n"
    "   after its end); the others blend the fill into a load of the row's bytes, those of a window\n"
    "   that starts before the row loaded from the row's start and moved into place through a\n"
    "   stack buffer (the load never starts before the row). */\n"
    "static inline __m256i lo_tap_window(const void *p, long s, long n, long span, int f) {\n"
    "    if (s >= 0 && s + span <= n) return _mm256_loadu_si256((const __m256i *)p);\n"
    "    const __m256i fill = _mm256_set1_epi8((char)f);\n"
    "    const long lo = s < 0 ? -s : 0, hi = n - s < span ? n - s : span;\n"
    "    if (hi <= lo) return fill;\n"
    "    __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)((const unsigned char *)p + lo));\n"
    "    if (lo > 0) {\n"
    "        unsigned char b[64];\n"
    "        _mm256_storeu_si256((__m256i *)(void *)b, fill);\n"
    "        _mm256_storeu_si256((__m256i *)(void *)(b + 32), v);\n"
    "        v = _mm256_loadu_si256((const __m256i *)(const void *)(b + 32 - lo));\n"
    "    }\n"
    "    const __m256i at = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17,\n"
    "                                        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);\n"
    "    const __m256i in = _mm256_andnot_si256(_mm256_cmpgt_epi8(_mm256_set1_epi8((char)lo), at),\n"
    "                                           _mm256_cmpgt_epi8(_mm256_set1_epi8((char)hi), at));\n"
    "    return _mm256_blendv_epi8(fill, v, in);\n"
    "}\n")

PACKED = {
    "avx512": dict(
        mask_all="(__mmask16)0xffff",
        iota="_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)",
        offset_index="_mm512_add_epi32(_mm512_set1_epi32((int)({s})), {idx})",
        sub_one_bytes="_mm512_sub_epi8({v}, _mm512_set1_epi8(1))",
        tap_spread="lo_tap_spread({v}, _mm512_setr_epi32({dwords}), _mm512_setr_epi32({bytes}), "
                   "_mm512_setr_epi32({picks}))",
        zip_low="_mm512_permutex2var_epi32({a}, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, "
                "5, 21, 6, 22, 7, 23), {b})",
        zip_high="_mm512_permutex2var_epi32({a}, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, "
                 "13, 29, 14, 30, 15, 31), {b})",
    ),
    "avx2": dict(
        mask_all="_mm256_set1_epi32(-1)",
        iota="_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)",
        offset_index="_mm256_add_epi32(_mm256_set1_epi32((int)({s})), {idx})",
        sub_one_bytes="_mm256_sub_epi8({v}, _mm256_set1_epi8(1))",
        tap_spread="_mm256_shuffle_epi8(_mm256_permutevar8x32_epi32({v}, _mm256_setr_epi32({dwords})), "
                   "_mm256_setr_epi32({bytes}))",
        zip_low="_mm256_permute2x128_si256(_mm256_unpacklo_epi32({a}, {b}), "
                "_mm256_unpackhi_epi32({a}, {b}), 0x20)",
        zip_high="_mm256_permute2x128_si256(_mm256_unpacklo_epi32({a}, {b}), "
                 "_mm256_unpackhi_epi32({a}, {b}), 0x31)",
    ),
}

MAP_AVX512 = """\
/* byte i of v through the 256-byte table t: vpermi2b over the table's low and high 128 bytes, picked by
 * the byte's top bit (AVX512-VBMI); without VBMI one byte at a time. The empty asm keeps the table's
 * four loads at each use: hoisted out of the nest they would hold four registers a register block's
 * accumulators need (spilled in its reduction loop). */
static inline __m512i lo_map_bytes(__m512i v, const uint8_t *t) {
#ifdef __AVX512VBMI__
    __asm__ volatile("" : "+r"(t));
    const __m512i low = _mm512_permutex2var_epi8(_mm512_loadu_si512((const void *)t), v,
                                                 _mm512_loadu_si512((const void *)(t + 64)));
    const __m512i high = _mm512_permutex2var_epi8(_mm512_loadu_si512((const void *)(t + 128)), v,
                                                  _mm512_loadu_si512((const void *)(t + 192)));
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), low, high);
#else
    uint8_t b[64] __attribute__((aligned(64)));
    _mm512_store_si512((void *)b, v);
    for (int i = 0; i < 64; ++i)
        b[i] = t[b[i]];
    return _mm512_load_si512((const void *)b);
#endif
}
"""

WIDE_AVX2 = """\
/* u8 x s16 -> s32 dot of 4 (codegen/wide.py): the bytes of a as (a0, a2) and (a1, a3) pairs, the block
 * at p as each lane's (w0, w2) and then (w1, w3) pairs, each multiplied from memory. One asm does both
 * products and sums: the two halves are read at 0 and 32 bytes from one address register (two asms of
 * one product each made GCC keep an address per half, spilling an accumulator of a 3x3 conv's 3x32
 * block and reloading address offsets every step), through one temporary, and the compiler cannot hold
 * a block's halves in registers across a row of accumulators. */
static inline __m256i lo_avx2_dot_s16(__m256i c, __m256i a, const int16_t *p) {
    const __m256i even = _mm256_and_si256(a, _mm256_set1_epi16(0x00ff)), odd = _mm256_srli_epi16(a, 8);
    __m256i t;
    __asm__("vpmaddwd (%2), %3, %1\\n\\tvpaddd %1, %0, %0\\n\\tvpmaddwd 32(%2), %4, %1\\n\\tvpaddd %1, %0, %0"
            : "+x"(c), "=&x"(t) : "r"(p), "x"(even), "x"(odd), "m"(*(const __m256i (*)[2])(const void *)p));
    return c;
}
"""

HELPERS = {
    "avx512": {"taps": TAPS_AVX512, "i2_s": AVX512_C + UNPACK_C.format(v="__m512i", m="__mmask16", x="_mm512",
                                                                      bits=512), "map": MAP_AVX512},
    "avx2": {"taps": TAPS_AVX2, "i2_s": AVX2_C + UNPACK_C.format(v="__m256i", m="__m256i", x="_mm256",
                                                                bits=256), "s16": WIDE_AVX2},
}
