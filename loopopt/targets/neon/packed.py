"""NEON's C of the optional byte features of an integer table (``codegen.instr.PACKED_MEANINGS``) and
of i2_s ternary weights (``codegen/ternary.py``'s format: element ``e`` is the 2 bits at
``2 * (e % 64 // 16)`` of byte ``e % 16`` of block ``e // 64``, holding ``w + 1``).

A whole dot vector is 16 weights (4 int32 lanes of 4 bytes); aligned on 16 elements they are bytes
0-15 of one block at one shift: one 16-byte load, a shift, an AND with 3 and a byte subtraction of 1.
NEON has no gather: the per-lane forms read each lane's 32 bits at its element's byte, lane by lane
(lanes off in the mask read nothing and are 0 before unpacking), as x86's gathers do.
"""
from __future__ import annotations

I2S_HELPERS = """\
/* the 16 weights e .. e + 15 (e a multiple of 16) as bytes: bytes 0-15 of their block, one shift */
static inline int32x4_t lo_i2s_vector(const uint8_t *p, ptrdiff_t e) {
    const uint8x16_t v = vshlq_u8(vld1q_u8(p + ((e >> 6) << 4)), vdupq_n_s8((int8_t)-((e >> 3) & 6)));
    return vreinterpretq_s32_s8(vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(3))), vdupq_n_s8(1)));
}
/* lane j: the 32 bits at element e[j]'s byte, shifted so that its code is in bits 0-1 (lanes off in m: 0) */
static inline int32x4_t lo_i2s_gather(const uint8_t *p, int32x4_t e, uint32x4_t m) {
    uint32_t on[4], x[4]; int32_t at[4];
    vst1q_u32(on, m); vst1q_s32(at, e);
    for (int j = 0; j < 4; ++j) {
        uint32_t u = 0;
        if (on[j]) memcpy(&u, p + (((at[j] >> 6) << 4) | (at[j] & 15)), 4);
        x[j] = u >> ((at[j] >> 3) & 6);
    }
    return vreinterpretq_s32_u32(vld1q_u32(x));
}
static inline int32x4_t lo_i2s_lanes(const uint8_t *p, int32x4_t e, uint32x4_t m) {
    return vsubq_s32(vandq_s32(lo_i2s_gather(p, e, m), vdupq_n_s32(3)), vdupq_n_s32(1));
}
static inline int32x4_t lo_i2s_groups(const uint8_t *p, int32x4_t e, uint32x4_t m) {
    const int8x16_t codes = vreinterpretq_s8_s32(vandq_s32(lo_i2s_gather(p, e, m), vdupq_n_s32(0x03030303)));
    return vreinterpretq_s32_s8(vsubq_s8(codes, vdupq_n_s8(1)));
}
"""

# the integer table's entries of the optional byte features (codegen.instr.PACKED_MEANINGS); NEON's tap
# spread is one tbl (vqtbl1q_u8: byte i = byte picks_i of v), although codegen/taps.py plans tap dots for
# 8 or 16 lanes only, so NEON kernels (4 lanes) do not use it
ENTRIES = dict(
    mask_all="vdupq_n_u32(~0u)",
    iota="lo_neon_lanes()",
    offset_index="vaddq_s32(vdupq_n_s32((int32_t)({s})), {idx})",
    sub_one_bytes="vreinterpretq_s32_s8(vsubq_s8(vreinterpretq_s8_s32({v}), vdupq_n_s8(1)))",
    tap_spread="vreinterpretq_s32_u8(vqtbl1q_u8(vreinterpretq_u8_s32({v}), "
               "vreinterpretq_u8_s32((int32x4_t){{{picks}}})))",
    zip_low="vzip1q_s32({a}, {b})",
    zip_high="vzip2q_s32({a}, {b})",
)
