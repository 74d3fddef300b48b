"""x86's instruction tables: AVX-512, AVX2 and scalar, each as float32 (``ISAS``), integer
(``INT_ISAS``: AVX-512 VNNI's ``vpdpbusd``, AVX2's widening dot and its dot of pre-widened weights) and
bfloat16 (``BF16_ISAS``: operand loads, AVX512-BF16's ``vdpbf16ps``) tables of ``codegen.instr``'s
operations, each variant's three registered with the emitter (``codegen.instr.register_tables``).
``available_isas`` / ``resolve_isa`` choose among them by this CPU's flags (``cpu_flags``); ``named_isa``
names one on any CPU (planning and generating for it), ``require_cpu`` checks this CPU before a kernel is
built.
"""
from __future__ import annotations

import os
from functools import lru_cache

from ...codegen.instr import (
    BF16_MEANINGS,
    BF16_PRELUDE,
    MEMORY_MEANINGS,
    SCALAR,
    TABLES,
    Instr,
    Isa,
    IsaTables,
    bf16_table,
    int_table,
    register_tables,
    table,
    tables,
)
from ..registry import target_of_isa
from .packed_c import HELPERS, PACKED

AVX512 = Isa(
    name="avx512", lanes=16, registers=32, vector_type="__m512", mask_type="__mmask16", index_type="__m512i",
    cpu_flags=("avx512f",),
    compile_flags=("-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq", "-mavx2", "-mfma"),
    prelude="#include <immintrin.h>\n",
    ops=table(
        zero="_mm512_setzero_ps()",
        load="_mm512_loadu_ps({p})",
        load_mask="_mm512_maskz_loadu_ps({m}, {p})",
        store="_mm512_storeu_ps({p}, {v})",
        store_mask="_mm512_mask_storeu_ps({p}, {m}, {v})",
        broadcast="_mm512_set1_ps({s})",
        fma="_mm512_fmadd_ps({a}, {b}, {c})",
        add="_mm512_add_ps({a}, {b})",
        max="_mm512_max_ps({a}, {b})",
        min="_mm512_min_ps({a}, {b})",
        fma_mask="_mm512_mask3_fmadd_ps({a}, {b}, {c}, {m})",
        gather="_mm512_i32gather_ps({idx}, {p}, 4)",
        gather_mask="_mm512_mask_i32gather_ps(_mm512_setzero_ps(), {m}, {idx}, {p}, 4)",
        scatter_mask="_mm512_mask_i32scatter_ps({p}, {m}, {idx}, {v}, 4)",
        hsum="_mm512_reduce_add_ps({v})",
        mask_bits="((__mmask16)({s}))",
        mask_count="((__mmask16)((1u << ({n})) - 1u))",
        stride_index="_mm512_mullo_epi32(_mm512_set1_epi32({s}), "
                     "_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))",
        index_load="_mm512_loadu_si512((const void *)({p}))",
    ),
)

AVX2 = Isa(
    name="avx2", lanes=8, registers=16, vector_type="__m256", mask_type="__m256i", index_type="__m256i",
    cpu_flags=("avx2", "fma"),
    compile_flags=("-mavx2", "-mfma"),
    prelude="""#include <immintrin.h>
/* AVX2 has no mask registers: a mask is a vector whose set lanes are all ones. */
static inline __m256i lo_avx2_mask_bits(unsigned bits) {
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), lane_bit), lane_bit);
}
/* AVX2 has no scatter: store the masked lanes one by one, in lane order. */
static inline void lo_avx2_scatter(float *p, __m256i mask, __m256i idx, __m256 v) {
    int m[8], i[8]; float x[8];
    _mm256_storeu_si256((__m256i *)m, mask); _mm256_storeu_si256((__m256i *)i, idx); _mm256_storeu_ps(x, v);
    for (int j = 0; j < 8; ++j) if (m[j]) p[i[j]] = x[j];
}
static inline float lo_avx2_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
""",
    ops=table(
        zero="_mm256_setzero_ps()",
        load="_mm256_loadu_ps({p})",
        load_mask="_mm256_maskload_ps({p}, {m})",
        store="_mm256_storeu_ps({p}, {v})",
        store_mask="_mm256_maskstore_ps({p}, {m}, {v})",
        broadcast="_mm256_set1_ps({s})",
        fma="_mm256_fmadd_ps({a}, {b}, {c})",
        add="_mm256_add_ps({a}, {b})",
        max="_mm256_max_ps({a}, {b})",
        min="_mm256_min_ps({a}, {b})",
        fma_mask="_mm256_blendv_ps({c}, _mm256_fmadd_ps({a}, {b}, {c}), _mm256_castsi256_ps({m}))",
        gather="_mm256_i32gather_ps({p}, {idx}, 4)",
        gather_mask="_mm256_mask_i32gather_ps(_mm256_setzero_ps(), {p}, {idx}, _mm256_castsi256_ps({m}), 4)",
        scatter_mask="lo_avx2_scatter({p}, {m}, {idx}, {v})",
        hsum="lo_avx2_hsum({v})",
        mask_bits="lo_avx2_mask_bits({s})",
        mask_count="lo_avx2_mask_bits((1u << ({n})) - 1u)",
        stride_index="_mm256_mullo_epi32(_mm256_set1_epi32({s}), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))",
        index_load="_mm256_loadu_si256((const __m256i *)({p}))",
    ) | {"fma_memory": Instr("lo_avx2_fma_memory({a}, {p}, {c})", MEMORY_MEANINGS["fma_memory"]),
         "broadcast_here": Instr("lo_avx2_broadcast_here({s})", MEMORY_MEANINGS["broadcast_here"])},
    # one vfmadd231ps with its memory operand: written with the intrinsic, GCC keeps the vector in a
    # register (and spills an accumulator of a 7x16 block, 14 accumulators and two weight vectors);
    # a broadcast made where it is written (volatile: not hoisted out of the loops): a fused epilogue's
    # clip bound written with the intrinsic is held in a register across the whole nest, a 17th beside such
    # a block's, and GCC 12 spilled two of its accumulators in the reduction loop (ResNet-18's 3x3/2
    # 256->512 conv with its ReLU, 2 threads: 0.91 ms against 0.65 without the ReLU, AMD EPYC Zen 3)
    helpers={"fma_memory": """static inline __m256 lo_avx2_fma_memory(__m256 a, const float *p, __m256 c) {
    __asm__("vfmadd231ps %[p], %[a], %[c]" : [c] "+x"(c) : [a] "x"(a), [p] "m"(*(const __m256 *)p));
    return c;
}
""", "broadcast_here": """static inline __m256 lo_avx2_broadcast_here(float s) {
    __m256 v;
    __asm__ volatile("vbroadcastss %[s], %[v]" : [v] "=x"(v) : [s] "m"(s));
    return v;
}
"""},
)




# --- integer tables (quantized kernels) ------------------------------------------------------
# The same operation names as the float tables, meaning int32 lanes (wrapping arithmetic), plus
# byte loads widened to int32 and the 4-way u8 x s8 dot product of vpdpbusd. Masks and index
# vectors are shared with the float table of the same ISA.

_WORD = "_mm_cvtsi128_si32(_mm_loadu_si32({p}))"     # the 4 bytes at p as an int, at any byte address

AVX512_INT = Isa(
    name="avx512", lanes=16, registers=32, vector_type="__m512i", mask_type="__mmask16", index_type="__m512i",
    cpu_flags=("avx512f", "avx512bw", "avx512vl", "avx512_vnni"),
    compile_flags=AVX512.compile_flags + ("-mavx512vnni",),
    prelude=AVX512.prelude,
    ops=int_table(
        AVX512,
        zero="_mm512_setzero_si512()",
        load="_mm512_loadu_si512((const void *)({p}))",
        load_mask="_mm512_maskz_loadu_epi32({m}, (const void *)({p}))",
        store="_mm512_storeu_si512((void *)({p}), {v})",
        store_mask="_mm512_mask_storeu_epi32((void *)({p}), {m}, {v})",
        broadcast="_mm512_set1_epi32((int)({s}))",
        broadcast_word=f"_mm512_set1_epi32((int)({_WORD}))",
        fma="_mm512_add_epi32({c}, _mm512_mullo_epi32({a}, {b}))",
        fma_mask="_mm512_mask_add_epi32({c}, {m}, {c}, _mm512_mullo_epi32({a}, {b}))",
        sub="_mm512_sub_epi32({a}, {b})",
        gather="_mm512_i32gather_epi32({idx}, (const void *)({p}), 4)",
        gather_mask="_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), {m}, {idx}, (const void *)({p}), 4)",
        scatter_mask="_mm512_mask_i32scatter_epi32((void *)({p}), {m}, {idx}, {v}, 4)",
        hsum="_mm512_reduce_add_epi32({v})",
        load_u8="_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)({p})))",
        load_s8="_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)({p})))",
        load_u8_mask="_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8({m}, (const void *)({p})))",
        load_s8_mask="_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8({m}, (const void *)({p})))",
        gather_b="_mm512_i32gather_epi32({idx}, (const void *)({p}), 1)",
        gather_b_mask="_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), {m}, {idx}, "
                      "(const void *)({p}), 1)",
        extend_u8="_mm512_and_si512({v}, _mm512_set1_epi32(255))",
        extend_s8="_mm512_srai_epi32(_mm512_slli_epi32({v}, 24), 24)",
        flip="_mm512_xor_si512({v}, _mm512_set1_epi32((int)0x80808080u))",
        dot="_mm512_dpbusd_epi32({c}, {a}, {b})",
        dot_mask="_mm512_mask_dpbusd_epi32({c}, {m}, {a}, {b})",
        to_float="_mm512_cvtepi32_ps({v})",
        store_narrow="_mm_storeu_si128((__m128i *)({p}), _mm512_cvtepi32_epi8({v}))",
        store_narrow_mask="_mm512_mask_cvtepi32_storeu_epi8((void *)({p}), {m}, {v})",
        # two saturating packs (exact: the lanes are in range) leave 128-bit lane l's dwords a_l b_l c_l d_l
        pack_u8="_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, "
                "11, 15), _mm512_packus_epi16(_mm512_packs_epi32({a}, {b}), _mm512_packs_epi32({c}, {d})))",
        pack_s8="_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, "
                "11, 15), _mm512_packs_epi16(_mm512_packs_epi32({a}, {b}), _mm512_packs_epi32({c}, {d})))",
        store_bytes="_mm512_mask_storeu_epi8((void *)({p}), (__mmask64)(~0ULL >> (64 - ({n}))), {v})",
        map_bytes="lo_map_bytes({v}, {p})",
        **PACKED["avx512"],
    ),
    helpers=HELPERS["avx512"],
)

AVX2_INT = Isa(
    name="avx2", lanes=8, registers=16, vector_type="__m256i", mask_type="__m256i", index_type="__m256i",
    cpu_flags=AVX2.cpu_flags, compile_flags=AVX2.compile_flags,
    prelude=AVX2.prelude + (
        "/* u8 x s8 -> s32 dot of 4 without saturation: widen each byte to 16 bits, then vpmaddwd. */\n"
        "static inline __m256i lo_avx2_dpbusd(__m256i c, __m256i a, __m256i b) {\n"
        "    const __m256i even = _mm256_set1_epi16(0x00ff);\n"
        "    const __m256i a_even = _mm256_and_si256(a, even), a_odd = _mm256_srli_epi16(a, 8);\n"
        "    const __m256i b_even = _mm256_srai_epi16(_mm256_slli_epi16(b, 8), 8), "
        "b_odd = _mm256_srai_epi16(b, 8);\n"
        "    return _mm256_add_epi32(c, _mm256_add_epi32(_mm256_madd_epi16(a_even, b_even), "
        "_mm256_madd_epi16(a_odd, b_odd)));\n"
        "}\n"
        "static inline int lo_avx2_hsum_epi32(__m256i v) {\n"
        "    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));\n"
        "    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));\n"
        "    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));\n"
        "    return _mm_cvtsi128_si32(s);\n"
        "}\n"
        "/* The low byte of each int32 lane to 8 consecutive bytes (vpshufb within halves, then vpermd). */\n"
        "static inline void lo_avx2_store_narrow(void *p, __m256i v) {\n"
        "    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, "
        "-1, -1, -1, -1,\n"
        "                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, "
        "-1, -1, -1, -1);\n"
        "    const __m256i t = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(v, pick), "
        "_mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));\n"
        "    _mm_storel_epi64((__m128i *)p, _mm256_castsi256_si128(t));\n"
        "}\n"
        "static inline void lo_avx2_store_narrow_mask(void *p, __m256i mask, __m256i v) {\n"
        "    int m[8], x[8];\n"
        "    _mm256_storeu_si256((__m256i *)m, mask); _mm256_storeu_si256((__m256i *)x, v);\n"
        "    for (int j = 0; j < 8; ++j) if (m[j]) ((unsigned char *)p)[j] = (unsigned char)x[j];\n"
        "}\n"
        "static inline void lo_avx2_store_bytes(void *p, __m256i v, int n) {\n"
        "    unsigned char b[32];\n"
        "    _mm256_storeu_si256((__m256i *)(void *)b, v);\n"
        "    __builtin_memcpy(p, b, (unsigned long)n);\n"
        "}\n"
        "/* AVX2 has no scatter: store the masked int32 lanes one by one, in lane order. */\n"
        "static inline void lo_avx2_scatter_epi32(void *p, __m256i mask, __m256i idx, __m256i v) {\n"
        "    int m[8], i[8], x[8];\n"
        "    _mm256_storeu_si256((__m256i *)m, mask); _mm256_storeu_si256((__m256i *)i, idx); "
        "_mm256_storeu_si256((__m256i *)x, v);\n"
        "    for (int j = 0; j < 8; ++j) if (m[j]) ((int *)p)[i[j]] = x[j];\n"
        "}\n"
    ),
    ops=int_table(
        AVX2,
        zero="_mm256_setzero_si256()",
        load="_mm256_loadu_si256((const __m256i *)(const void *)({p}))",
        load_mask="_mm256_maskload_epi32((const int *)(const void *)({p}), {m})",
        store="_mm256_storeu_si256((__m256i *)(void *)({p}), {v})",
        store_mask="_mm256_maskstore_epi32((int *)(void *)({p}), {m}, {v})",
        broadcast="_mm256_set1_epi32((int)({s}))",
        broadcast_word=f"_mm256_set1_epi32((int)({_WORD}))",
        fma="_mm256_add_epi32({c}, _mm256_mullo_epi32({a}, {b}))",
        fma_mask="_mm256_blendv_epi8({c}, _mm256_add_epi32({c}, _mm256_mullo_epi32({a}, {b})), {m})",
        sub="_mm256_sub_epi32({a}, {b})",
        gather="_mm256_i32gather_epi32((const int *)(const void *)({p}), {idx}, 4)",
        gather_mask="_mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)(const void *)({p}), "
                    "{idx}, {m}, 4)",
        scatter_mask="lo_avx2_scatter_epi32((void *)({p}), {m}, {idx}, {v})",
        hsum="lo_avx2_hsum_epi32({v})",
        load_u8="_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)({p})))",
        load_s8="_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)({p})))",
        load_u8_mask="_mm256_and_si256(_mm256_mask_i32gather_epi32(_mm256_setzero_si256(), "
                     "(const int *)(const void *)({p}), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), {m}, 1), "
                     "_mm256_set1_epi32(255))",
        load_s8_mask="_mm256_srai_epi32(_mm256_slli_epi32(_mm256_mask_i32gather_epi32("
                     "_mm256_setzero_si256(), (const int *)(const void *)({p}), "
                     "_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), {m}, 1), 24), 24)",
        gather_b="_mm256_i32gather_epi32((const int *)(const void *)({p}), {idx}, 1)",
        gather_b_mask="_mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)(const void *)({p}), "
                      "{idx}, {m}, 1)",
        extend_u8="_mm256_and_si256({v}, _mm256_set1_epi32(255))",
        extend_s8="_mm256_srai_epi32(_mm256_slli_epi32({v}, 24), 24)",
        flip="_mm256_xor_si256({v}, _mm256_set1_epi32((int)0x80808080u))",
        dot="lo_avx2_dpbusd({c}, {a}, {b})",
        dot_mask="_mm256_blendv_epi8({c}, lo_avx2_dpbusd({c}, {a}, {b}), {m})",
        dot_s16="lo_avx2_dot_s16({c}, {a}, {b})",
        dot_s16_mask="_mm256_blendv_epi8({c}, lo_avx2_dot_s16({c}, {a}, {b}), {m})",
        s16_block_mask="(_mm256_testz_si256({m}, {m}) ? lo_s16_zero : {p})",
        to_float="_mm256_cvtepi32_ps({v})",
        store_narrow="lo_avx2_store_narrow((void *)({p}), {v})",
        store_narrow_mask="lo_avx2_store_narrow_mask((void *)({p}), {m}, {v})",
        pack_u8="_mm256_permutevar8x32_epi32(_mm256_packus_epi16(_mm256_packs_epi32({a}, {b}), "
                "_mm256_packs_epi32({c}, {d})), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))",
        pack_s8="_mm256_permutevar8x32_epi32(_mm256_packs_epi16(_mm256_packs_epi32({a}, {b}), "
                "_mm256_packs_epi32({c}, {d})), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))",
        store_bytes="lo_avx2_store_bytes((void *)({p}), {v}, {n})",
        **PACKED["avx2"],
    ),
    helpers=HELPERS["avx2"],
)

SCALAR_INT = Isa(name="scalar", lanes=1, registers=16, vector_type="int", mask_type="unsigned",
                 index_type="int", cpu_flags=(), compile_flags=(), prelude="", ops={})

INT_ISAS: dict[str, Isa] = {isa.name: isa for isa in (AVX512_INT, AVX2_INT, SCALAR_INT)}


# --- bfloat16 tables -----------------------------------------------------------------------
# bf16 operands stored as uint16 bit patterns, accumulated in the float table's float32 lanes: either
# widened to float32 (a shift by 16; any ISA) and multiply-added with the float table's ``fma``, or,
# on AVX-512 with AVX512-BF16, consumed in pairs along the reduction by ``vdpbf16ps`` (``dot``), each
# int32 lane holding two consecutive bf16 (the lower address in the low half). Masks and index vectors
# are the float table's.

VBMI_FLAGS = {"avx512": ("avx512vbmi", "-mavx512vbmi")}   # per ISA: the CPU flag and the compile flag
BF16_DOT_FLAGS = ("avx512_bf16",)           # /proc/cpuinfo flag of vdpbf16ps, beyond the table's


_WIDEN512 = "_mm512_castsi512_ps(_mm512_slli_epi32({}, 16))"
_WIDEN256 = "_mm256_castsi256_ps(_mm256_slli_epi32({}, 16))"

AVX512_BF16 = Isa(
    name="avx512", lanes=16, registers=32, vector_type="__m512i", mask_type="__mmask16", index_type="__m512i",
    cpu_flags=("avx512f", "avx512bw", "avx512vl"),
    compile_flags=AVX512.compile_flags + ("-mavx512bf16",),
    prelude=AVX512.prelude + BF16_PRELUDE,
    ops=bf16_table(
        AVX512,
        value="lo_bf16({s})",
        # the bits into the high half of each lane (a masked vpbroadcastw, which can read memory)
        broadcast="_mm512_castsi512_ps(_mm512_maskz_set1_epi16((__mmask32)0xAAAAAAAAu, (short)({s})))",
        load=_WIDEN512.format("_mm512_cvtepu16_epi32(_mm256_loadu_si256("
                              "(const __m256i *)(const void *)({p})))"),
        load_mask=_WIDEN512.format("_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16({m}, "
                                   "(const void *)({p})))"),
        gather=_WIDEN512.format("_mm512_i32gather_epi32({idx}, (const void *)({p}), 2)"),
        gather_mask=_WIDEN512.format("_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), {m}, {idx}, "
                                     "(const void *)({p}), 2)"),
        pair_zero="_mm512_setzero_si512()",
        broadcast_pair="_mm512_set1_epi32(_mm_cvtsi128_si32(_mm_loadu_si32((const void *)({p}))))",
        load_pairs="_mm512_loadu_si512((const void *)({p}))",
        load_pairs_mask="_mm512_maskz_loadu_epi32({m}, (const void *)({p}))",
        gather_pairs="_mm512_i32gather_epi32({idx}, (const void *)({p}), 2)",
        gather_pairs_mask="_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), {m}, {idx}, "
                          "(const void *)({p}), 2)",
        dot="_mm512_dpbf16_ps({c}, (__m512bh)({a}), (__m512bh)({b}))",
        dot_mask="_mm512_mask_dpbf16_ps({c}, {m}, (__m512bh)({a}), (__m512bh)({b}))",
    ),
    mnemonics={"dot": "vdpbf16ps"},
)

AVX2_BF16 = Isa(
    name="avx2", lanes=8, registers=16, vector_type="__m256i", mask_type="__m256i", index_type="__m256i",
    cpu_flags=AVX2.cpu_flags, compile_flags=AVX2.compile_flags, prelude=AVX2.prelude + BF16_PRELUDE,
    ops=bf16_table(
        AVX2,
        value="lo_bf16({s})",
        broadcast="_mm256_castsi256_ps(_mm256_and_si256(_mm256_set1_epi16((short)({s})), "
                  "_mm256_set1_epi32((int)0xFFFF0000u)))",
        load=_WIDEN256.format("_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)({p})))"),
        load_mask=_WIDEN256.format("_mm256_mask_i32gather_epi32(_mm256_setzero_si256(), "
                                   "(const int *)(const void *)({p}), "
                                   "_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), {m}, 2)"),
        gather=_WIDEN256.format("_mm256_i32gather_epi32((const int *)(const void *)({p}), {idx}, 2)"),
        gather_mask=_WIDEN256.format("_mm256_mask_i32gather_epi32(_mm256_setzero_si256(), "
                                     "(const int *)(const void *)({p}), {idx}, {m}, 2)"),
    ),
)

SCALAR_BF16 = Isa(name="scalar", lanes=1, registers=16, vector_type="uint16_t", mask_type="unsigned",
                  index_type="int", cpu_flags=(), compile_flags=(), prelude=BF16_PRELUDE,
                  ops={"value": Instr("lo_bf16({s})", BF16_MEANINGS["value"])})

BF16_ISAS: dict[str, Isa] = {isa.name: isa for isa in (AVX512_BF16, AVX2_BF16, SCALAR_BF16)}
ISAS: dict[str, Isa] = {isa.name: isa for isa in (AVX512, AVX2, SCALAR)}
for _name in ISAS:                  # the emitter finds a variant's tables by its name (codegen.instr.tables)
    register_tables(IsaTables(ISAS[_name], INT_ISAS[_name], BF16_ISAS[_name]))


def table_variant(isa: str, integer: bool = False) -> str:
    """The variant whose tables describe kernels of ``isa``, on any CPU: another target's registered
    variant as it is, ``"auto"`` or an x86 one through ``named_isa`` (the kernel's target checks where
    it runs)."""
    return isa if isa in TABLES and isa not in ISAS else named_isa(isa, integer)


# --- selection: which tables this CPU runs ----------------------------------------------------

ISA_PREFERENCE = ("avx512", "avx2", "scalar")
TILE_ISA = "amx"     # the tile variant: quantized and bf16 ops on AMX tiles, chosen explicitly


HIDE_FLAGS_VARIABLE = "LOOPOPT_HIDE_CPU_FLAGS"


def visible_flags(flags: frozenset[str]) -> frozenset[str]:
    """``flags`` less those named in ``$LOOPOPT_HIDE_CPU_FLAGS`` (comma or space separated): loopopt
    then acts as on a CPU without them, e.g. ``amx_tile,amx_int8,amx_bf16`` for a CPU without AMX."""
    return flags - frozenset(os.environ.get(HIDE_FLAGS_VARIABLE, "").replace(",", " ").split())


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags of this machine (from /proc/cpuinfo, less the hidden ones: see
    ``visible_flags``; empty if unreadable)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return visible_flags(frozenset(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return frozenset()


def available_isas() -> tuple[str, ...]:
    """ISAs this CPU can run, best first (``scalar`` always)."""
    return tuple(name for name in ISA_PREFERENCE if set(ISAS[name].cpu_flags) <= cpu_flags())


def available_int_isas() -> tuple[str, ...]:
    """ISAs this CPU can run integer (quantized) kernels on, best first (AVX-512 needs VNNI)."""
    return tuple(name for name in ISA_PREFERENCE if set(INT_ISAS[name].cpu_flags) <= cpu_flags())


def bf16_dot_available(isa: str) -> bool:
    """Whether ``isa``'s bf16 table has ``dot`` (vdpbf16ps) and this CPU runs it (flag avx512_bf16); another
    target's variant: as its target says (``Target.bf16_dot``)."""
    if isa in TABLES and isa not in ISAS:
        return target_of_isa(isa).bf16_dot(isa)
    table = tables(isa).bf16
    return table is not None and "dot" in table.ops and set(BF16_DOT_FLAGS) <= cpu_flags()


def byte_permute_flags(isa: str) -> tuple[str, ...]:
    """The compile flags of a kernel with byte permutes (a tap dot, ``codegen/taps.py``; a byte map,
    ``map_bytes``) on ``isa`` on this CPU: AVX512-VBMI's where it has it (``lo_tap_spread`` is then one
    byte permute, ``lo_map_bytes`` two; their C is the same either way)."""
    cpu, flag = VBMI_FLAGS.get(isa, (None, None))
    return (flag,) if cpu in cpu_flags() else ()


def named_isa(isa: str, integer: bool = False) -> str:
    """The x86 ISA ``isa`` names, on any CPU: ``auto`` the best this CPU runs (``integer``: for quantized
    kernels), a named one as it is (planning, pseudo-code, the kernel model and generated C need no CPU
    feature; building a kernel does: ``require_cpu``); an unknown one is a ValueError."""
    if isa == "auto":
        return (available_int_isas() if integer else available_isas())[0]
    if isa not in ISAS:
        raise ValueError(f"unknown isa {isa!r}: choose one of 'auto', {', '.join(map(repr, ISA_PREFERENCE))}")
    return isa


def require_cpu(isa: str, integer: bool = False) -> None:
    """ValueError naming the CPU features the x86 ISA ``isa`` needs that this CPU lacks, if any
    (``integer``: for quantized kernels, e.g. AVX-512 needs VNNI)."""
    tables, available = (INT_ISAS, available_int_isas()) if integer else (ISAS, available_isas())
    if isa not in available:
        missing = sorted(set(tables[isa].cpu_flags) - cpu_flags())
        raise ValueError(f"isa {isa!r} needs CPU features {', '.join(missing)} that this CPU lacks"
                         f"{' for integer kernels' if integer else ''}; available: {', '.join(available)}")


def resolve_isa(isa: str, integer: bool = False) -> str:
    """``named_isa`` that this CPU runs: ``auto`` becomes the best available ISA; an unknown or
    unsupported one is a ValueError.

    ``integer``: for a quantized kernel (the integer tables, e.g. AVX-512 needs VNNI)."""
    name = named_isa(isa, integer)
    require_cpu(name, integer)
    return name
