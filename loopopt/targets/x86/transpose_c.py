"""x86's whole 16 x 16 tile of 4-byte elements for the transposes of ``targets/transpose.py`` on
AVX-512: 16 row loads, four rounds of shuffles (32-bit and 64-bit unpacks, then two of 128-bit lane
shuffles), 16 column stores."""
from __future__ import annotations

from functools import cache

from ..transpose import Transpose, portable_transpose, source
from .isa import AVX512, ISAS, available_isas

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


@cache
def x86_transpose() -> Transpose:
    """The AVX-512 tiles where this CPU runs AVX-512, else the portable loops with the best ISA's flags."""
    best = available_isas()[0]
    if best == AVX512.name:
        return Transpose(*source(TILE4, PRELUDE), AVX512.compile_flags, "avx512")
    return portable_transpose(ISAS[best].compile_flags)
