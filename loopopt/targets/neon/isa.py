"""NEON instruction tables (AArch64 Advanced SIMD, 128-bit vectors): the x86 tables' operation names
and meanings (``codegen.instr.MEANINGS``, ``INT_MEANINGS``), so the same emitter prints NEON C from the
same schedules.

fp32 kernels have 4 lanes (``float32x4_t``, ``vfmaq_f32``); integer kernels 4 int32 lanes
(``int32x4_t``), their ``dot`` the u8 x s8 4-way dot product ``vusdotq_s32`` (FEAT_I8MM), the same
meaning as x86's ``vpdpbusd``, for uint8 activations; int8 activations feed ``dot_s8``, the s8 x s8
``vdotq_s32`` (FEAT_DotProd), unshifted (``codegen.quantized.has_signed_dot``); bfloat16 operands are
widened to fp32 lanes. NEON has no mask registers and no gather or scatter: a mask is a
``uint32x4_t`` whose set lanes are all ones (``vbslq`` selects by it), and masked loads and stores,
gathers and scatters are small static inline helpers of the prelude that touch only the lanes they
name, lane by lane (as AVX2's scatter does).
"""
from __future__ import annotations

from dataclasses import replace

from ...codegen.instr import (
    BF16_MEANINGS,
    BF16_PRELUDE,
    F16_MEANINGS,
    INT_MEANINGS,
    MEANINGS,
    PACKED_MEANINGS,
    SHARED_OPS,
    SIGNED_DOT_MEANINGS,
    Instr,
    Isa,
    IsaTables,
    register_tables,
)
from .packed import ENTRIES as PACKED
from .packed import I2S_HELPERS

NAME = "neon"
LANES = 4
REGISTERS = 32          # v0-v31
# every NEON kernel is built for this architecture level: Armv8.6-A has the dot product (FEAT_DotProd),
# the int8 matrix multiplies and usdot (FEAT_I8MM), bf16 and fp16 arithmetic
ARCH_FLAGS = ("-march=armv8.6-a+i8mm+dotprod+bf16+fp16",)
FLOAT_FEATURES = ("asimd",)                   # /proc/cpuinfo "Features" of an AArch64 core
INT_FEATURES = ("asimd", "asimddp", "i8mm")   # usdot: FEAT_I8MM
BF16_DOT_FEATURES = ("bf16",)                 # the bf16 table's pair dot (bfmlalb/bfmlalt): FEAT_BF16

PRELUDE = """#include <arm_neon.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
/* NEON has no mask registers: a mask is a vector whose set lanes are all ones. */
static inline uint32x4_t lo_neon_mask_bits(unsigned bits) {
    const uint32_t lane_bit[4] = {1u, 2u, 4u, 8u};
    return vtstq_u32(vdupq_n_u32(bits), vld1q_u32(lane_bit));
}
static inline int32x4_t lo_neon_lanes(void) {
    const int32_t lane[4] = {0, 1, 2, 3};
    return vld1q_s32(lane);
}
/* Masked loads read, and masked stores write, only the lanes the mask sets. */
static inline float32x4_t lo_neon_load_mask(const float *p, uint32x4_t mask) {
    uint32_t m[4]; float x[4];
    vst1q_u32(m, mask);
    for (int j = 0; j < 4; ++j) x[j] = m[j] ? p[j] : 0.0f;
    return vld1q_f32(x);
}
static inline void lo_neon_store_mask(float *p, uint32x4_t mask, float32x4_t v) {
    uint32_t m[4]; float x[4];
    vst1q_u32(m, mask); vst1q_f32(x, v);
    for (int j = 0; j < 4; ++j) if (m[j]) p[j] = x[j];
}
/* NEON has no gather or scatter: lane by lane, masked-off lanes untouched. */
static inline float32x4_t lo_neon_gather(const float *p, int32x4_t idx, uint32x4_t mask) {
    uint32_t m[4]; int32_t i[4]; float x[4];
    vst1q_u32(m, mask); vst1q_s32(i, idx);
    for (int j = 0; j < 4; ++j) x[j] = m[j] ? p[i[j]] : 0.0f;
    return vld1q_f32(x);
}
static inline void lo_neon_scatter(float *p, uint32x4_t mask, int32x4_t idx, float32x4_t v) {
    uint32_t m[4]; int32_t i[4]; float x[4];
    vst1q_u32(m, mask); vst1q_s32(i, idx); vst1q_f32(x, v);
    for (int j = 0; j < 4; ++j) if (m[j]) p[i[j]] = x[j];
}
"""

INT_PRELUDE = """/* int32 lanes (integer kernels, and dequantizing float ones): words at any byte address. */
static inline int32_t lo_neon_word(const void *p) { int32_t w; memcpy(&w, p, 4); return w; }
static inline int32x4_t lo_neon_load_mask_s32(const void *p, uint32x4_t mask) {
    uint32_t m[4]; int32_t x[4];
    vst1q_u32(m, mask);
    for (int j = 0; j < 4; ++j) x[j] = m[j] ? lo_neon_word((const char *)p + 4 * j) : 0;
    return vld1q_s32(x);
}
static inline void lo_neon_store_mask_s32(void *p, uint32x4_t mask, int32x4_t v) {
    uint32_t m[4]; int32_t x[4];
    vst1q_u32(m, mask); vst1q_s32(x, v);
    for (int j = 0; j < 4; ++j) if (m[j]) memcpy((char *)p + 4 * j, &x[j], 4);
}
/* lane j = the word at byte address p + scale * idx_j, where the mask sets lane j, else 0 */
static inline int32x4_t lo_neon_gather_s32(const void *p, int32x4_t idx, uint32x4_t mask, int scale) {
    uint32_t m[4]; int32_t i[4], x[4];
    vst1q_u32(m, mask); vst1q_s32(i, idx);
    for (int j = 0; j < 4; ++j) x[j] = m[j] ? lo_neon_word((const char *)p + (ptrdiff_t)scale * i[j]) : 0;
    return vld1q_s32(x);
}
static inline void lo_neon_scatter_s32(void *p, uint32x4_t mask, int32x4_t idx, int32x4_t v) {
    uint32_t m[4]; int32_t i[4], x[4];
    vst1q_u32(m, mask); vst1q_s32(i, idx); vst1q_s32(x, v);
    for (int j = 0; j < 4; ++j) if (m[j]) memcpy((char *)p + 4 * (ptrdiff_t)i[j], &x[j], 4);
}
/* 4 bytes widened to int32 lanes (exactly 4 read) */
static inline int32x4_t lo_neon_load_u8(const void *p) {
    const uint8x8_t b = vreinterpret_u8_s32(vdup_n_s32(lo_neon_word(p)));
    return vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(b))));
}
static inline int32x4_t lo_neon_load_s8(const void *p) {
    const int8x8_t b = vreinterpret_s8_s32(vdup_n_s32(lo_neon_word(p)));
    return vmovl_s16(vget_low_s16(vmovl_s8(b)));
}
/* the masked lanes' bytes only, widened */
static inline int32x4_t lo_neon_load_u8_mask(const void *p, uint32x4_t mask) {
    uint32_t m[4]; int32_t x[4];
    vst1q_u32(m, mask);
    for (int j = 0; j < 4; ++j) x[j] = m[j] ? ((const uint8_t *)p)[j] : 0;
    return vld1q_s32(x);
}
static inline int32x4_t lo_neon_load_s8_mask(const void *p, uint32x4_t mask) {
    uint32_t m[4]; int32_t x[4];
    vst1q_u32(m, mask);
    for (int j = 0; j < 4; ++j) x[j] = m[j] ? ((const int8_t *)p)[j] : 0;
    return vld1q_s32(x);
}
/* the low byte of each lane to 4 consecutive bytes */
static inline void lo_neon_store_narrow(void *p, int32x4_t v) {
    const uint8x8_t b = vmovn_u16(vcombine_u16(vmovn_u32(vreinterpretq_u32_s32(v)), vdup_n_u16(0)));
    const uint32_t w = vget_lane_u32(vreinterpret_u32_u8(b), 0);
    memcpy(p, &w, 4);
}
static inline void lo_neon_store_narrow_mask(void *p, uint32x4_t mask, int32x4_t v) {
    uint32_t m[4]; int32_t x[4];
    vst1q_u32(m, mask); vst1q_s32(x, v);
    for (int j = 0; j < 4; ++j) if (m[j]) ((uint8_t *)p)[j] = (uint8_t)x[j];
}
static inline void lo_neon_store_bytes(void *p, int32x4_t v, int n) {
    uint8_t b[16];
    vst1q_s32((int32_t *)(void *)b, v);
    memcpy(p, b, (size_t)n);
}
"""



def _ops(meanings: dict[str, str], **templates: str) -> dict[str, Instr]:
    """Table entries: each template with the meaning of its operation's name."""
    return {name: Instr(text, meanings[name]) for name, text in templates.items()}


NEON = Isa(
    name=NAME, lanes=LANES, registers=REGISTERS, vector_type="float32x4_t", mask_type="uint32x4_t",
    index_type="int32x4_t",
    cpu_flags=FLOAT_FEATURES, compile_flags=ARCH_FLAGS, prelude=PRELUDE + INT_PRELUDE,
    ops=_ops(
        MEANINGS,
        zero="vdupq_n_f32(0.0f)",
        load="vld1q_f32({p})",
        load_mask="lo_neon_load_mask({p}, {m})",
        store="vst1q_f32({p}, {v})",
        store_mask="lo_neon_store_mask({p}, {m}, {v})",
        broadcast="vdupq_n_f32({s})",
        fma="vfmaq_f32({c}, {a}, {b})",
        add="vaddq_f32({a}, {b})",
        max="vmaxq_f32({a}, {b})",
        min="vminq_f32({a}, {b})",
        fma_mask="vbslq_f32({m}, vfmaq_f32({c}, {a}, {b}), {c})",
        gather="lo_neon_gather({p}, {idx}, vdupq_n_u32(~0u))",
        gather_mask="lo_neon_gather({p}, {idx}, {m})",
        scatter_mask="lo_neon_scatter({p}, {m}, {idx}, {v})",
        hsum="vaddvq_f32({v})",
        mask_bits="lo_neon_mask_bits({s})",
        mask_count="lo_neon_mask_bits((1u << ({n})) - 1u)",
        stride_index="vmulq_n_s32(lo_neon_lanes(), (int32_t)({s}))",
        index_load="vld1q_s32((const int32_t *)({p}))",
    ),
)


def _beside_floats(vector_type: str, features: tuple[str, ...], prelude: str, meanings: dict[str, str],
                   **templates: str) -> Isa:
    """Another table of this variant: its own lanes' entries, the float table's masks and index vectors."""
    return Isa(name=NAME, lanes=LANES, registers=REGISTERS, vector_type=vector_type, mask_type=NEON.mask_type,
               index_type=NEON.index_type, cpu_flags=features, compile_flags=ARCH_FLAGS, prelude=prelude,
               ops={name: NEON.ops[name] for name in SHARED_OPS} | _ops(meanings, **templates))


NEON_INT = replace(_beside_floats(
    "int32x4_t", INT_FEATURES, NEON.prelude, INT_MEANINGS | SIGNED_DOT_MEANINGS | PACKED_MEANINGS, **PACKED,
    zero="vdupq_n_s32(0)",
    load="vld1q_s32((const int32_t *)(const void *)({p}))",
    load_mask="lo_neon_load_mask_s32((const void *)({p}), {m})",
    store="vst1q_s32((int32_t *)(void *)({p}), {v})",
    store_mask="lo_neon_store_mask_s32((void *)({p}), {m}, {v})",
    broadcast="vdupq_n_s32((int32_t)({s}))",
    broadcast_word="vdupq_n_s32(lo_neon_word((const void *)({p})))",
    fma="vmlaq_s32({c}, {a}, {b})",
    fma_mask="vbslq_s32({m}, vmlaq_s32({c}, {a}, {b}), {c})",
    sub="vsubq_s32({a}, {b})",
    gather="lo_neon_gather_s32((const void *)({p}), {idx}, vdupq_n_u32(~0u), 4)",
    gather_mask="lo_neon_gather_s32((const void *)({p}), {idx}, {m}, 4)",
    scatter_mask="lo_neon_scatter_s32((void *)({p}), {m}, {idx}, {v})",
    hsum="vaddvq_s32({v})",
    load_u8="lo_neon_load_u8((const void *)({p}))",
    load_s8="lo_neon_load_s8((const void *)({p}))",
    load_u8_mask="lo_neon_load_u8_mask((const void *)({p}), {m})",
    load_s8_mask="lo_neon_load_s8_mask((const void *)({p}), {m})",
    gather_b="lo_neon_gather_s32((const void *)({p}), {idx}, vdupq_n_u32(~0u), 1)",
    gather_b_mask="lo_neon_gather_s32((const void *)({p}), {idx}, {m}, 1)",
    extend_u8="vandq_s32({v}, vdupq_n_s32(255))",
    extend_s8="vshrq_n_s32(vshlq_n_s32({v}, 24), 24)",
    flip="veorq_s32({v}, vdupq_n_s32((int32_t)0x80808080u))",
    dot="vusdotq_s32({c}, vreinterpretq_u8_s32({a}), vreinterpretq_s8_s32({b}))",
    dot_mask="vbslq_s32({m}, vusdotq_s32({c}, vreinterpretq_u8_s32({a}), vreinterpretq_s8_s32({b})), "
             "{c})",
    dot_s8="vdotq_s32({c}, vreinterpretq_s8_s32({a}), vreinterpretq_s8_s32({b}))",
    dot_s8_mask="vbslq_s32({m}, vdotq_s32({c}, vreinterpretq_s8_s32({a}), vreinterpretq_s8_s32({b})), {c})",
    to_float="vcvtq_f32_s32({v})",
    store_narrow="lo_neon_store_narrow((void *)({p}), {v})",
    store_narrow_mask="lo_neon_store_narrow_mask((void *)({p}), {m}, {v})",
    # saturating narrows (exact: the lanes are in range): a's 4 bytes, then b's, c's and d's
    pack_u8="vreinterpretq_s32_u8(vcombine_u8("
            "vqmovn_u16(vcombine_u16(vqmovun_s32({a}), vqmovun_s32({b}))), "
            "vqmovn_u16(vcombine_u16(vqmovun_s32({c}), vqmovun_s32({d})))))",
    pack_s8="vreinterpretq_s32_s8(vcombine_s8("
            "vqmovn_s16(vcombine_s16(vqmovn_s32({a}), vqmovn_s32({b}))), "
            "vqmovn_s16(vcombine_s16(vqmovn_s32({c}), vqmovn_s32({d})))))",
    store_bytes="lo_neon_store_bytes((void *)({p}), {v}, {n})",
), helpers={"i2_s": I2S_HELPERS})

BF16_GATHER = """/* bf16 lanes widened to float32: the masked lanes' elements only */
static inline float32x4_t lo_neon_bf16_gather(const uint16_t *p, int32x4_t idx, uint32x4_t mask) {
    uint32_t m[4]; int32_t i[4]; float x[4];
    vst1q_u32(m, mask); vst1q_s32(i, idx);
    for (int j = 0; j < 4; ++j) x[j] = m[j] ? lo_bf16(p[i[j]]) : 0.0f;
    return vld1q_f32(x);
}
"""

BF16_DOT = """/* the bf16 pair dot: bfmlalt (the odd, high halves) then bfmlalb (the even, low halves), each a
   fused multiply-add of the widened values that honours the FPCR (round to nearest, denormals kept) */
static inline float32x4_t lo_neon_bf16_dot(float32x4_t c, int32x4_t a, int32x4_t b) {
    const bfloat16x8_t x = vreinterpretq_bf16_s32(a), y = vreinterpretq_bf16_s32(b);
    return vbfmlalbq_f32(vbfmlaltq_f32(c, x, y), x, y);
}
"""
# NEON's pair dot keeps denormals (x86's vdpbf16ps flushes them): the x86 meaning otherwise
DOT_MEANINGS = {
    "dot": "lane j = (c_j + a_hi_j * b_hi_j) + a_lo_j * b_lo_j of the bf16 pairs of lane j (float32: "
           "products exact, each sum rounded to nearest even; denormal operands and results kept)",
    "dot_mask": BF16_MEANINGS["dot_mask"],
}

# bfloat16 operands: widened to fp32 lanes (vshll by 16) for vfmaq_f32, or, where the reduction runs in
# pairs, int32 lanes of two bf16 each (the lower address in the low half) for the pair dot
NEON_BF16 = _beside_floats(
    "int32x4_t", FLOAT_FEATURES, NEON.prelude + BF16_PRELUDE + BF16_GATHER + BF16_DOT,
    BF16_MEANINGS | DOT_MEANINGS,
    value="lo_bf16({s})",
    broadcast="vdupq_n_f32(lo_bf16({s}))",
    load="vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)(const void *)({p})), 16))",
    load_mask="lo_neon_bf16_gather((const uint16_t *)(const void *)({p}), lo_neon_lanes(), {m})",
    gather="lo_neon_bf16_gather((const uint16_t *)(const void *)({p}), {idx}, vdupq_n_u32(~0u))",
    gather_mask="lo_neon_bf16_gather((const uint16_t *)(const void *)({p}), {idx}, {m})",
    pair_zero="vdupq_n_s32(0)",
    broadcast_pair="vdupq_n_s32(lo_neon_word((const void *)({p})))",
    load_pairs=NEON_INT.ops["load"].template,
    load_pairs_mask=NEON_INT.ops["load_mask"].template,
    gather_pairs="lo_neon_gather_s32((const void *)({p}), {idx}, vdupq_n_u32(~0u), 2)",
    gather_pairs_mask="lo_neon_gather_s32((const void *)({p}), {idx}, {m}, 2)",
    dot="lo_neon_bf16_dot({c}, {a}, {b})",
    dot_mask="vbslq_f32({m}, lo_neon_bf16_dot({c}, {a}, {b}), {c})",
)
NEON_BF16 = replace(NEON_BF16, mnemonics={"dot": "bfmlalt + bfmlalb"})

# bfdot and bfmmla (FEAT_BF16 without FEAT_EBF16: the FPCR is ignored): each product and sum rounded to
# odd (truncated, the last bit set where inexact; overflow to infinity), denormal operands, products and
# sums flushed to zero (tininess before rounding). Not the reference's round to nearest: the unit
# roundoff of the sums is 2^-23, twice the pair entry's, so only the opt-in variant BFDOT_NAME uses bfdot
BF16_ROUND_TO_ODD = ("each product and sum of float32 rounded to odd; denormal operands, products and "
                     "sums flushed to zero")
BFDOT_ROUNDOFF = 2.0 ** -23              # the unit roundoff of a sum rounded to odd
BFDOT = Instr("vbfdotq_f32({c}, vreinterpretq_bf16_s32({a}), vreinterpretq_bf16_s32({b}))",
              f"lane j = c_j + (a_lo_j * b_lo_j + a_hi_j * b_hi_j) of the bf16 pairs of lane j "
              f"({BF16_ROUND_TO_ODD})")
BFMMLA = Instr("vbfmmlaq_f32({c}, vreinterpretq_bf16_s32({a}), vreinterpretq_bf16_s32({b}))",
               f"lane 2r+q = bfdot(bfdot(c_(2r+q), pair 2r of a, pair 2q of b), pair 2r+1 of a, pair 2q+1 "
               f"of b): c + the 2x2 block A @ B^T of the 2x4 bf16 rows of a and b, two bfdot steps "
               f"({BF16_ROUND_TO_ODD})")
BFDOT_NAME = "neon_bfdot"
NEON_BFDOT = replace(NEON_BF16, name=BFDOT_NAME, prelude=NEON.prelude + BF16_PRELUDE + BF16_GATHER,
                     mnemonics={"dot": "bfdot"}, ops=NEON_BF16.ops | {
    "dot": BFDOT, "dot_mask": Instr(f"vbslq_f32({{m}}, {BFDOT.template}, {{c}})", BF16_MEANINGS["dot_mask"])})

F16_GATHER = """/* half lanes widened to float32: the masked lanes' elements only */
static inline float32x4_t lo_neon_f16_gather(const uint16_t *p, int32x4_t idx, uint32x4_t mask) {
    uint32_t m[4]; int32_t i[4]; uint16_t x[4];
    vst1q_u32(m, mask); vst1q_s32(i, idx);
    for (int j = 0; j < 4; ++j) x[j] = m[j] ? p[i[j]] : 0;
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x)));
}
static inline float lo_f16(uint16_t b) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(b))), 0);
}
"""

# float16 (FEAT_FP16 storage; float32 arithmetic, the reference's meaning): halves widened by
# vcvt_f32_f16 and multiply-added in float32 lanes with the float table's fma
NEON_F16 = _beside_floats(
    "uint16x4_t", FLOAT_FEATURES, NEON.prelude + F16_GATHER, F16_MEANINGS,
    value="lo_f16({s})",
    broadcast="vdupq_n_f32(lo_f16({s}))",
    load="vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(const void *)({p}))))",
    load_mask="lo_neon_f16_gather((const uint16_t *)(const void *)({p}), lo_neon_lanes(), {m})",
    gather="lo_neon_f16_gather((const uint16_t *)(const void *)({p}), {idx}, vdupq_n_u32(~0u))",
    gather_mask="lo_neon_f16_gather((const uint16_t *)(const void *)({p}), {idx}, {m})",
)

TABLES = register_tables(IsaTables(NEON, NEON_INT, NEON_BF16, NEON_F16))
# the opt-in variant whose bf16 pair dots are bfdot (the other kernels: neon's)
BFDOT_TABLES = register_tables(IsaTables(replace(NEON, name=BFDOT_NAME), replace(NEON_INT, name=BFDOT_NAME),
                                         NEON_BFDOT, replace(NEON_F16, name=BFDOT_NAME)))
