"""Quantized weights pre-widened to int16 (``Schedule.weight_format("s16")``) for an emulated dot.

AVX2 has no ``vpdpbusd``: its integer table emulates the 4-byte dot by widening both operands to
16 bits and multiply-adding pairs with ``vpmaddwd`` (``lo_avx2_dpbusd``), so every weight vector is
widened again on every step. In ``s16`` the weights are widened once, when ``prepare`` packs them:
the int8 weights in their storage order (a dot layout: 4 reduction elements a lane, 8 lanes a
vector, e.g. ``OIHW8o4i``) are cut into blocks of 32 elements, and element ``e`` of a block (lane
``j = e // 4``, group element ``q = e % 4``) becomes the int16 at ``16 * (q % 2) + 2 * j + q // 2``
of the block's 32: the first 32 bytes hold each lane's pair ``(w0, w2)``, the next its ``(w1, w3)``.
The kernel multiplies them straight from memory by the broadcast group's bytes ``(a0, a2)`` and
``(a1, a3)`` (an AND and a shift of the broadcast, shared by the block's row): the variant's
``dot_s16`` entry (``codegen.instr.WIDE_MEANINGS``). Products and sums are those of the byte dot:
exact. Twice the weights' bytes; the compensation, the plan and the epilogue are unchanged.

Where the weights are read as whole, aligned dot vectors (the fast path) the operand is a pointer
to the block; every other read of them (a kernel-computed compensation, a scalar nest) goes through
the scalar accessor ``lo_s16``. Other vector reads are refused (``check``).
"""
from __future__ import annotations

import numpy as np

from ..schedule import Schedule, ScheduleError
from . import ternary
from .instr import Isa

BLOCK = 32           # int8 elements of one dot vector: 8 lanes of 4 (AVX2)
ZERO = "lo_s16_zero"  # a block of zero weights (a guarded load's operand where its guard fails)

SCALAR_C = f"""\
/* s16 weights (codegen/wide.py): element e of the int8 storage order is the int16 at
 * (e & ~31) | (e & 1) << 4 | (e & 31) >> 2 << 1 | (e >> 1 & 1). */
static inline int lo_s16(const int16_t *p, ptrdiff_t e) {{
    return p[(e & ~(ptrdiff_t)31) | (e & 1) << 4 | (e & 31) >> 2 << 1 | (e >> 1 & 1)];
}}
static const int16_t {ZERO}[{BLOCK}] __attribute__((aligned(32), unused));
"""


def wide(schedule: Schedule, tensor: str) -> bool:
    """True iff ``tensor`` is the op's weights and the schedule stores them as s16."""
    return schedule.weight_format_mode == "s16" and tensor == schedule.op.inputs[1]


def elements(stored: int) -> int:
    """int16 elements of ``stored`` weights in s16 (whole blocks)."""
    return -(-stored // BLOCK) * BLOCK


def pack_s16(stored: np.ndarray) -> np.ndarray:
    """The s16 array of int8 weights in their storage layout (flattened in C order), zero-padded to
    whole blocks."""
    flat = np.zeros(elements(stored.size), dtype=np.int16)
    flat[:stored.size] = np.asarray(stored, dtype=np.int8).reshape(-1)
    return np.ascontiguousarray(flat.reshape(-1, 8, 2, 2).transpose(0, 3, 1, 2)).reshape(-1)


def unpack_s16(packed: np.ndarray, stored: int) -> np.ndarray:
    """The int8 weights of ``stored`` elements packed by ``pack_s16`` (its inverse)."""
    blocks = np.asarray(packed, dtype=np.int16).reshape(-1, 2, 8, 2).transpose(0, 2, 3, 1)
    return blocks.reshape(-1)[:stored].astype(np.int8)


def helpers(ints: Isa) -> str:
    """The C helpers of an s16 kernel of the integer table ``ints``: the scalar accessor, the zero block
    and the variant's dot (its ``helpers["s16"]``)."""
    return SCALAR_C + ints.helpers["s16"]


def reference(schedule: Schedule, tensor: str, offset: str) -> str:
    """C of the element of ``tensor`` at storage ``offset``: the s16 accessor, else ``ternary.reference``."""
    if wide(schedule, tensor):
        return f"lo_s16({tensor}, {offset})"
    return ternary.reference(schedule, tensor, offset)


def check(schedule: Schedule, ints: Isa, dot_loop: str | None, tap: bool) -> None:
    """ScheduleError unless the kernel can read s16 weights: a dot loop along the reduction (not a tap
    dot) on an integer table with ``dot_s16``."""
    fmt = "weight_format('s16')"
    if "dot_s16" not in ints.ops:
        raise ScheduleError(f"{fmt}: isa {ints.name!r} has no int16-weight dot; it runs on an emulated dot "
                            f"(AVX2's): use weight_format('int8') here")
    if dot_loop is None or tap:
        raise ScheduleError(f"{fmt}: the weights are read by a dot loop of 4 reduction elements (split the "
                            f"reduction channels by 4, innermost, weights in a layout such as OIHW8o4i); "
                            f"this schedule has {'a tap dot' if tap else 'none'}")


def operand(schedule: Schedule, ints: Isa, dot_loop: str, kind: str, stride: int, ref: str,
            mask: str | None) -> str:
    """The s16 weight operand of a dot along the vector loop: a pointer to the block whose first element
    is lane 0's group (``ref``, the element as an int16 array's), which must start whole, aligned dot
    vectors of the table's lanes; under a ``mask``, the zero block where it has no lane set (a channel
    block's vector past the last channels, beyond the weights)."""
    lanes = ints.lanes
    if not (kind == "strided" and stride == ternary.GROUP
            and ternary.vectors_aligned(schedule, dot_loop, lanes)):
        raise ScheduleError(f"weight_format('s16'): the weights must be read as whole dot vectors of "
                            f"{lanes} lanes x {ternary.GROUP}, each starting on {lanes * ternary.GROUP} "
                            f"elements (a layout such as OIHW{lanes}o{ternary.GROUP}i, the vector loop over "
                            f"its {lanes}o); here they are {kind} along it")
    return ints.s16_block_mask(p=f"&{ref}", m=mask) if mask else f"&{ref}"
