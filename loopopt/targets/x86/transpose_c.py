"""x86's whole 16 x 16 tiles for the transposes of ``targets/transpose.py``. Of 4-byte elements: on
AVX-512 16 row loads, four rounds of shuffles (32-bit and 64-bit unpacks, then two of 128-bit lane
shuffles), 16 column stores; on AVX2 four 8 x 8 tiles of 8 row loads, three rounds of shuffles (32-bit
unpacks, 64-bit ``shufps``, 128-bit lane permutes) and 8 column stores each. Of bytes (both): 16 row
loads of 16 bytes, four rounds of byte unpacks of rows ``j`` and ``j + 8`` (the perfect shuffle, four
times a transpose of 16 x 16), 16 column stores."""
from __future__ import annotations

from functools import cache

from ..transpose import Transpose, portable_transpose
from .isa import AVX2, AVX512, ISAS, available_isas

PRELUDE = """#include <immintrin.h>
static inline void lo_tile16(const unsigned int *src, long cols, unsigned int *dst, long rows)
{
    __m512i r[16], t[16];
    for (int i = 0; i < 16; ++i)
        r[i] = _mm512_loadu_si512(src + i * cols);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 16; i += 8)
        for (int j = 0; j < 4; ++j) {
            t[i + j] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0x88);
            t[i + j + 4] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0xdd);
        }
    for (int j = 0; j < 8; ++j) {
        r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
    }
    for (int i = 0; i < 16; ++i)
        _mm512_storeu_si512(dst + i * rows, r[i]);
}

"""
TILE4 = "lo_tile16(src + r0 * cols + c0, cols, dst + c0 * rows + r0, rows);"
AVX2_PRELUDE = """#include <immintrin.h>
static inline void lo_tile8(const unsigned int *src, long cols, unsigned int *dst, long rows)
{
    __m256 r[8], t[8];
    for (int i = 0; i < 8; ++i)
        r[i] = _mm256_loadu_ps((const float *)(src + i * cols));
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int j = 0; j < 4; ++j) {
        _mm256_storeu_ps((float *)(dst + j * rows), _mm256_permute2f128_ps(r[j], r[j + 4], 0x20));
        _mm256_storeu_ps((float *)(dst + (j + 4) * rows), _mm256_permute2f128_ps(r[j], r[j + 4], 0x31));
    }
}

"""
BYTE_PRELUDE = """#include <emmintrin.h>
static inline void lo_tile16_bytes(const unsigned char *src, long cols, unsigned char *dst, long rows)
{
    __m128i r[16], t[16];
    for (int i = 0; i < 16; ++i)
        r[i] = _mm_loadu_si128((const __m128i *)(src + i * cols));
    for (int round = 0; round < 4; ++round) {
        for (int j = 0; j < 8; ++j) {
            t[2 * j] = _mm_unpacklo_epi8(r[j], r[j + 8]);
            t[2 * j + 1] = _mm_unpackhi_epi8(r[j], r[j + 8]);
        }
        for (int i = 0; i < 16; ++i)
            r[i] = t[i];
    }
    for (int i = 0; i < 16; ++i)
        _mm_storeu_si128((__m128i *)(dst + i * rows), r[i]);
}

"""
TILE1 = "lo_tile16_bytes(src + r0 * cols + c0, cols, dst + c0 * rows + r0, rows);"
AVX2_TILE4 = """for (long h = 0; h < 16; h += 8)
                        for (long v = 0; v < 16; v += 8)
                            lo_tile8(src + (r0 + h) * cols + c0 + v, cols,
                                     dst + (c0 + v) * rows + r0 + h, rows);"""


@cache
def x86_transpose() -> Transpose:
    """The AVX-512 tiles where this CPU runs AVX-512, the AVX2 ones where it runs AVX2 (the byte tiles on
    either), else the portable loops with the best ISA's flags."""
    best = available_isas()[0]
    if best == AVX512.name:
        return Transpose(AVX512.compile_flags, "avx512", {4: TILE4, 1: TILE1}, PRELUDE + BYTE_PRELUDE)
    if best == AVX2.name:
        return Transpose(AVX2.compile_flags, "avx2", {4: AVX2_TILE4, 1: TILE1}, AVX2_PRELUDE + BYTE_PRELUDE)
    return portable_transpose(ISAS[best].compile_flags)
