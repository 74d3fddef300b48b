"""Ternary weights in the ``i2_s`` format: 2 bits per weight, packed in ``prepare``, unpacked in registers.

``Schedule.weight_format("i2_s")`` stores the ternary weights (-1, 0, +1) of a quantized op as
2-bit codes ``w + 1`` (0, 1, 2) over the weights' flat storage order (the schedule's layout,
blocked dims zero-padded, so padding weights are 0): element ``e`` lives in block ``e // 64``
(16 bytes), byte ``e % 16`` of it, bits ``2 * ((e % 64) // 16)``. A byte thus holds the elements
``i, i + 16, i + 32, i + 48`` of its block (bitnet.cpp's i2_s interleaves the same way, in blocks
of 128), so a 512-bit vector of 64 weights is one 16-byte load broadcast to the four 128-bit
lanes, a shift of each lane by 0, 2, 4, 6 bits, an AND with 3 and a byte subtraction of 1;
AVX2 takes 32 weights from one 16-byte load the same way.

The kernel sees signed weights again (the ``-1`` in registers), so the integer plan, the
compensation and the epilogue are those of symmetric int8 weights and the sums are exact.
Every access kind has a form: whole dot vectors (4 weights per lane, the fast path above when
isl proves each vector starts on a 64- (AVX2: 32-) element boundary), single dot groups (4
weights, one 32-bit read and a shift), per-lane gathers of groups or of single weights (the
byte index and shift computed per lane), and a scalar accessor everywhere else.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..expr import Expr
from ..schedule import Schedule

BLOCK = 64           # elements per packed block
BLOCK_BYTES = 16     # bytes per packed block
GROUP = 4            # weights of one dot group (one byte lane each)


def packed(schedule: Schedule, tensor: str) -> bool:
    """True iff ``tensor`` is the op's weights and the schedule stores them as i2_s."""
    return schedule.weight_format_mode == "i2_s" and tensor == schedule.op.inputs[1]


def packed_bytes(elements: int) -> int:
    """Bytes of ``elements`` weights in i2_s (whole blocks)."""
    return -(-elements // BLOCK) * BLOCK_BYTES


def pack_i2s(stored: np.ndarray) -> np.ndarray:
    """The i2_s bytes of int8 ternary weights in their storage layout (flattened in C order)."""
    flat = np.asarray(stored, dtype=np.int8).reshape(-1)
    codes = np.ones(packed_bytes(flat.size) * 4, dtype=np.uint8)     # padding elements: code 1 (weight 0)
    codes[:flat.size] = (flat + 1).astype(np.uint8)
    blocks = codes.reshape(-1, 4, BLOCK_BYTES)                         # [block, field, byte]
    shifts = (2 * np.arange(4, dtype=np.uint8)).reshape(1, 4, 1)
    return np.bitwise_or.reduce(blocks << shifts, axis=1).astype(np.uint8).reshape(-1)


def unpack_i2s(packed_array: np.ndarray, elements: int) -> np.ndarray:
    """The int8 weights of ``elements`` i2_s-packed ones (the inverse of ``pack_i2s``)."""
    blocks = np.asarray(packed_array, dtype=np.uint8).reshape(-1, 1, BLOCK_BYTES)
    shifts = (2 * np.arange(4, dtype=np.uint8)).reshape(1, 4, 1)
    codes = ((blocks >> shifts) & 3).reshape(-1)
    return (codes[:elements].astype(np.int16) - 1).astype(np.int8)


@lru_cache(maxsize=1024)
def aligned(schedule: Schedule, offset: Expr, where: str, multiple: int) -> bool:
    """True iff isl proves ``offset`` a multiple of ``multiple`` at every iteration where ``where``
    (an isl constraint over the loops) holds."""
    return schedule.iterations(where, f"({offset.to_isl()}) mod {multiple} != 0").is_empty()


def groups_aligned(schedule: Schedule, dot_loop: str) -> bool:
    """Every dot group of the weights starts on a multiple of 4 elements (so its 4 codes share one
    32-bit read at one shift)."""
    return aligned(schedule, schedule.offset(schedule.op.inputs[1]), f"{dot_loop} = 0", GROUP)


def vectors_aligned(schedule: Schedule, dot_loop: str, lanes: int) -> bool:
    """Every dot vector of the weights (``lanes`` groups along the vector loop) starts on a multiple
    of ``4 * lanes`` elements: the fast path's one 16-byte load."""
    vec = schedule.vector_loop.name
    return aligned(schedule, schedule.offset(schedule.op.inputs[1]),
                   f"{dot_loop} = 0 and {vec} mod {lanes} = 0", GROUP * lanes)


# --- C ----------------------------------------------------------------------------------------------

SCALAR_C = """\
/* i2_s ternary weights (codegen/ternary.py): element e is 2 bits of byte (e / 64) * 16 + e % 16, at
 * bit 2 * (e % 64 / 16), holding w + 1. */
static inline int lo_i2s(const uint8_t *p, ptrdiff_t e) {
    return (int)((p[((e >> 6) << 4) | (e & 15)] >> ((e >> 3) & 6)) & 3) - 1;
}
/* the codes (w + 1) of the 4 weights e .. e + 3 (e a multiple of 4) in the 4 bytes of an int */
static inline int lo_i2s_group(const uint8_t *p, ptrdiff_t e) {
    uint32_t u;
    memcpy(&u, p + (((e >> 6) << 4) | (e & 15)), 4);
    return (int)((u >> ((e >> 3) & 6)) & 0x03030303u);
}
"""

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


@dataclass(frozen=True)
class PackedForms:
    """One SIMD variant's C for i2_s weights: ``helpers`` defines ``lo_i2s_vector`` (an aligned whole
    dot vector), ``lo_i2s_lanes`` and ``lo_i2s_groups`` (per lane: one weight, or a dot group's 4
    codes as bytes minus 1, of the elements of an int32 vector, lanes off in a mask left 0 before
    unpacking); the templates: ``splat`` (``{s}`` in every int32 lane), ``minus_one`` (1 subtracted
    from each byte of ``{v}``), ``add`` (``{a} + {b}`` lane-wise), ``lane_numbers`` (lane j: j) and
    ``all_lanes`` (a mask of every lane)."""

    helpers: str
    splat: str
    minus_one: str
    add: str
    lane_numbers: str
    all_lanes: str


def _x86_forms(helpers: str, x: str, mask_all: str, lane_numbers: str) -> PackedForms:
    return PackedForms(helpers, f"{x}_set1_epi32((int)({{s}}))", f"{x}_sub_epi8({{v}}, {x}_set1_epi8(1))",
                       f"{x}_add_epi32({{a}}, {{b}})", lane_numbers, mask_all)


FORMS: dict[str, PackedForms] = {
    "avx512": _x86_forms(AVX512_C + UNPACK_C.format(v="__m512i", m="__mmask16", x="_mm512", bits=512),
                         "_mm512", "(__mmask16)0xffff",
                         "_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)"),
    "avx2": _x86_forms(AVX2_C + UNPACK_C.format(v="__m256i", m="__m256i", x="_mm256", bits=256),
                       "_mm256", "_mm256_set1_epi32(-1)", "_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)"),
}


def register_forms(isa: str, forms: PackedForms) -> None:
    """Give SIMD variant ``isa`` (of a target's own tables) its i2_s C."""
    FORMS[isa] = forms


def helpers(isa: str) -> str:
    """The C helpers of an i2_s kernel on ``isa`` (file scope)."""
    return "#include <string.h>\n" + SCALAR_C + (FORMS[isa].helpers if isa in FORMS else "")


def element(tensor: str, offset: str) -> str:
    """C of the weight at element ``offset`` (an int)."""
    return f"lo_i2s({tensor}, {offset})"


def reference(schedule: Schedule, tensor: str, offset: str) -> str:
    """C of the element of ``tensor`` at storage ``offset``: ``tensor[offset]``, or the i2_s accessor."""
    return element(tensor, offset) if packed(schedule, tensor) else f"{tensor}[{offset}]"


def operand(isa: str, kind: str, dot: bool, fast: bool, tensor: str, offset: str, lanes: str,
            mask: str | None) -> str:
    """A vector of i2_s weights on ``isa``: dot groups (bytes, 4 per lane) if ``dot``, else one weight
    per int32 lane. ``kind`` is the access kind along the vector loop, ``offset`` lane 0's element,
    ``lanes`` an int32 vector of every lane's element (C), ``fast`` the aligned whole-vector load."""
    forms = FORMS[isa]
    if kind == "broadcast":
        value = f"lo_i2s_group({tensor}, {offset})" if dot else element(tensor, offset)
        vector = forms.splat.format(s=value)
        return forms.minus_one.format(v=vector) if dot else vector
    if dot and fast:
        return f"lo_i2s_vector({tensor}, {offset})"
    return f"lo_i2s_{'groups' if dot else 'lanes'}({tensor}, {lanes}, {mask or forms.all_lanes})"


def element_lanes(isa: str, kind: str, offset: str, index: str) -> str:
    """An int32 vector of the element each lane reads: ``index`` (a gather's absolute offsets, or a
    strided access's lane steps added to ``offset``), or ``offset + j`` for a contiguous access."""
    forms = FORMS[isa]
    if kind == "gather":
        return index
    steps = index if kind == "strided" else forms.lane_numbers
    return forms.add.format(a=forms.splat.format(s=offset), b=steps)
