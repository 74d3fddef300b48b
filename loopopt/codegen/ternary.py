"""Ternary weights in the ``i2_s`` format: 2 bits per weight, packed in ``prepare``, unpacked in registers.

``Schedule.weight_format("i2_s")`` stores the ternary weights (-1, 0, +1) of a quantized op as
2-bit codes ``w + 1`` (0, 1, 2) over the weights' flat storage order (the schedule's layout,
blocked dims zero-padded, so padding weights are 0): element ``e`` lives in block ``e // 64``
(16 bytes), byte ``e % 16`` of it, bits ``2 * ((e % 64) // 16)``. A byte thus holds the elements
``i, i + 16, i + 32, i + 48`` of its block (bitnet.cpp's i2_s interleaves the same way, in blocks
of 128), so a 512-bit vector of 64 weights is one 16-byte load broadcast to the four 128-bit
lanes, a shift of each lane by 0, 2, 4, 6 bits, an AND with 3 and a byte subtraction of 1;
AVX2 takes 32 weights from one 16-byte load the same way (the variant's vector helpers and table
entries print it: ``Isa.helpers["i2_s"]``, ``codegen.instr.PACKED_MEANINGS``; x86's in
``targets/x86/packed_c.py``).

The kernel sees signed weights again (the ``-1`` in registers), so the integer plan, the
compensation and the epilogue are those of symmetric int8 weights and the sums are exact.
Every access kind has a form: whole dot vectors (4 weights per lane, the fast path above when
isl proves each vector starts on a 64- (AVX2: 32-) element boundary), single dot groups (4
weights, one 32-bit read and a shift), per-lane gathers of groups or of single weights (the
byte index and shift computed per lane), and a scalar accessor everywhere else.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..expr import Expr
from ..schedule import Schedule
from .instr import Isa

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

def helpers(ints: Isa) -> str:
    """The C helpers of an i2_s kernel of the integer table ``ints`` (file scope): the scalar accessors,
    and the variant's vector ones (its ``helpers["i2_s"]``: ``lo_i2s_vector``, a whole dot vector of 4
    weights per lane from an aligned element; ``lo_i2s_lanes`` and ``lo_i2s_groups``, the weight or the
    dot group of each lane's element, lanes off in the mask 0)."""
    return "#include <string.h>\n" + SCALAR_C + ints.helpers.get("i2_s", "")


def element(tensor: str, offset: str) -> str:
    """C of the weight at element ``offset`` (an int)."""
    return f"lo_i2s({tensor}, {offset})"


def reference(schedule: Schedule, tensor: str, offset: str) -> str:
    """C of the element of ``tensor`` at storage ``offset``: ``tensor[offset]``, or the i2_s accessor."""
    return element(tensor, offset) if packed(schedule, tensor) else f"{tensor}[{offset}]"


def operand(ints: Isa, kind: str, dot: bool, fast: bool, tensor: str, offset: str, lanes: str,
            mask: str | None) -> str:
    """A vector of i2_s weights of the integer table ``ints``: dot groups (bytes, 4 per lane) if ``dot``,
    else one weight per int32 lane. ``kind`` is the access kind along the vector loop, ``offset`` lane
    0's element, ``lanes`` an int32 vector of every lane's element (C), ``fast`` the aligned whole-vector
    load."""
    if kind == "broadcast":
        value = f"lo_i2s_group({tensor}, {offset})" if dot else element(tensor, offset)
        vector = ints.broadcast(s=value)
        return ints.sub_one_bytes(v=vector) if dot else vector
    if dot and fast:
        return f"lo_i2s_vector({tensor}, {offset})"
    return f"lo_i2s_{'groups' if dot else 'lanes'}({tensor}, {lanes}, {mask or ints.mask_all()})"


def element_lanes(ints: Isa, kind: str, offset: str, index: str) -> str:
    """An int32 vector of the element each lane reads: ``index`` (a gather's absolute offsets, or a
    strided access's lane steps added to ``offset``), or ``offset + j`` for a contiguous access."""
    if kind == "gather":
        return index
    return ints.offset_index(s=offset, idx=index if kind == "strided" else ints.iota())
