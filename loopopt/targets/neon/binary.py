"""NEON's binary XNOR + popcount variant (the kernel: ``targets/binary.py``): 2 uint64 lanes per
``uint64x2_t``, ``veorq_u64``, and ``cnt``: ``vcntq_u8`` counts the bits of each byte, three pairwise
widening adds (``vpaddlq_u8``, ``_u16``, ``_u32``) sum each lane's 8 byte counts."""
from __future__ import annotations

from ..binary import BinaryVariant, Ops, Popcount
from .isa import NEON_INT

POPCOUNT = "cnt"
CNT_C = """\
/* popcount of each uint64 lane: cnt's 16 byte counts, summed pairwise to the 2 lanes */
static inline uint64x2_t lo_popcount(const uint64x2_t v) {
    return vpaddlq_u32(vpaddlq_u16(vpaddlq_u8(vcntq_u8(vreinterpretq_u8_u64(v)))));
}
"""

VARIANT = BinaryVariant(
    NEON_INT, 2,
    Ops("uint64x2_t", "vdupq_n_u64(0)", "vld1q_u64((const uint64_t *)(const void *)({p}))",
        "vdupq_n_u64((uint64_t)({s}))", "veorq_u64({a}, {b})", "vaddq_u64({a}, {b})",
        "vst1q_u64((uint64_t *)(void *)({p}), {v})"),
    {POPCOUNT: Popcount(CNT_C)}, (4, 4), ("#include <arm_neon.h>",))
