"""Dot groups along a window's taps: ``vpdpbusd`` over 4 consecutive filter taps of one channel.

A quantized conv with few input channels per group (a depthwise conv has one, a stem three) fills
the u8 x s8 dot instruction poorly with input channels. Its filter taps along a window can fill it
instead: with the vector loop running over output positions along that window (a conv's ``ow``),
lane ``j`` of a vector at output position ``p`` multiplies the input columns ``col + s*j + d*t``
(``t < 4``; ``col = p*s - pad + tap*d``, ``s`` the window's stride, ``d`` its dilation) with the 4
weights of taps ``tap .. tap + 3`` of its channel, one 4-byte group broadcast to every lane.

A schedule selects it (``find``) with

* the window's tap dim (at most 4 taps) or the inner loop of its split by 4 as the innermost
  reduction loop of a register block, with only output loops between it and the vectorized loop;
* the vectorized loop running over consecutive output positions of that window;
* the activations stored with that window's input axis innermost and unblocked (e.g. ``NCHW``);
* the weights unit-stride along the taps, and where the taps are not a multiple of 4 that tap dim
  blocked by a multiple of 4 (``OIHW4w``: zero-padded, so a group's missing taps weigh 0);
* ``s <= 4`` and ``s + d <= 5``: the groups of 4 neighbouring lanes lie in 16 input bytes.

The kernel loads a window of input bytes from column ``col`` (4 bytes per int32 lane: 64 on AVX-512),
moves each 128-bit lane's 16 bytes into place with one dword permute (the 4 lanes of 128-bit lane
``q`` start at byte ``4*q*s``, a dword boundary) and picks the groups with one byte shuffle. Bytes
at columns outside the input row ``[0, size)`` read as the activation's zero (a window whose used
bytes lie in the row is one plain load, which may read up to a window past the activations'
end, ``read_ahead``; the others: a byte-masked load of the row's bytes on AVX-512, on AVX2 the fill
blended into a load from the window's column or, where it starts before the row, from the row's start,
also within ``read_ahead``), so taps in the padding add nothing to the products: the window's padding guard is
applied per byte (``TapDot.guard`` is not a lane mask), and the integer plan (compensation over
the valid taps) is that of any other dot.

Phases: where the lanes' groups would start 4 input bytes apart (``phases``: stride 2 with the lanes
2 output positions apart, stride 1 with 4; unit dilation), a window holds those groups as loaded. A
block's ``P = 4 / stride`` consecutive vectors of outputs along the window (a phase group, ``P * lanes``
outputs from a multiple of that) then run as ``P`` phases instead: phase ``q``'s accumulator holds
outputs ``P*j + q`` in lane ``j`` while the reduction runs, its operand the window from output ``q``'s
first column, with no permute; after the reduction ``interleave`` puts the outputs back in order
(``log2 P`` rounds of two-vector zips, ``P * log2 P`` instructions per group), before the epilogue or
store. mobilenetv2.block2.depthwise (stride 2, 56 columns): 12 window loads, 12 ``vpermb`` and 12
``vpdpbusd`` per output row and channel become 12 loads, 12 ``vpdpbusd`` and 2 ``vpermt2d``. A window
is loaded as one plain load where the taps of the lanes whose outputs are used lie in the row
(``TapDot.span``: the zero-weighted 4th tap of a group of 3 taps is not counted, so the last outputs
of a row need no byte-masked load).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from ..expr import Var
from ..ops import Window
from ..schedule import Schedule
from . import cprint
from .instr import Isa
from .vector import proves_step

GROUP = 4              # taps per int32 lane of vpdpbusd
LANE_BYTES = 16        # bytes of a 128-bit lane: the reach of the byte shuffle
PHASED_STRIDES = (1, 2)  # strides whose tap dots run in phase groups (``phases``)
# The variant's integer table prints it (``codegen.instr.PACKED_MEANINGS``: ``tap_spread``, ``zip_low``,
# ``zip_high``; its ``helpers["taps"]`` define ``lo_tap_window``, a window of 4 bytes per int32 lane
# from a column, bytes outside the row filled, and ``lo_tap_spread`` where its ``tap_spread`` calls it).

@dataclass(frozen=True)
class TapDot:
    """A dot loop along ``window``'s taps; ``guard`` indexes ``Schedule.guards``: the window's
    padding guard, applied per byte by the window load (None for an unpadded window)."""

    loop: str
    window: Window
    guard: Optional[int]

    def span(self, lanes: int, step: int = 0) -> int:
        """Input bytes the taps of ``lanes`` lanes reach from the first one's first column, the lanes
        ``step`` columns apart (default: the window's stride); a group's zero-padded taps past the
        window's last one (their weights are 0) are left out."""
        used = min(GROUP, self.window.taps)
        return (lanes - 1) * (step or self.window.stride) + (used - 1) * self.window.dilation + 1


def fits(window: Window) -> bool:
    """The groups of 4 neighbouring lanes lie in one 128-bit lane's 16 bytes, each starting on a dword."""
    s, d = window.stride, window.dilation
    return s <= GROUP and (GROUP - 1) * (s + d) + 1 <= LANE_BYTES


@lru_cache(maxsize=1024)
def find(schedule: Schedule, lanes: int) -> Optional[TapDot]:
    """The tap dot of ``schedule`` on a target of ``lanes`` int32 lanes (module docstring), or None."""
    op, vec = schedule.op, schedule.vector_loop
    if lanes not in (8, 16) or vec is None or schedule.register_block_at is None:
        return None
    out_vars = schedule.offset(op.output).variables()
    reductions = [loop for loop in schedule.loops[:-1] if loop.name not in out_vars]
    if vec.name not in out_vars or not reductions:
        return None
    loop = reductions[-1]
    window = next((w for w in op.windows if schedule.dims_of(loop.name) == {w.tap_dim}), None)
    if window is None or loop.unroll or loop.parallel or not fits(window) or not _groups(schedule, loop.name,
                                                                                         window):
        return None
    source, weights = op.inputs
    if not (schedule.dims_of(vec.name) == {window.out_dim} and _activations_by_column(schedule, window)
            and _steps(schedule, schedule.value(window.out_dim), vec.name, f"{vec.name} + 1 < {vec.extent}")
            and _steps(schedule, schedule.offset(weights), loop.name, f"{loop.name} + 1 < {loop.extent}")):
        return None
    guard = _padding_guard(schedule, window)
    others = [i for i, g in enumerate(schedule.guards) if loop.name in g.expr.variables() and i != guard]
    if any(i >= len(schedule.partial_guards) for i in others):
        return None              # another window's padding guard depends on the taps
    return TapDot(loop.name, window, guard)


def _groups(schedule: Schedule, name: str, window: Window) -> bool:
    """Loop ``name`` runs over the window's taps in groups of 4 starting at multiples of 4 (the tap
    dim itself with at most 4 taps, or the inner loop of its split by 4), and a group reaching past
    the last tap reads zero-padded weights."""
    split = next((r for r in schedule.relations if getattr(r, "inner", None) == name), None)
    whole = name == window.tap_dim and window.taps <= GROUP
    if not (whole or (split is not None and split.parent == window.tap_dim and split.factor == GROUP)):
        return False
    op = schedule.op
    weights = op.inputs[1]
    letter = op.tensor(weights).letters[op.index(weights).index(Var(window.tap_dim))]
    return window.taps % GROUP == 0 or schedule.layout_of(weights).block(letter) % GROUP == 0


def _activations_by_column(schedule: Schedule, window: Window) -> bool:
    """The activations' storage has the window's input axis innermost and unblocked (unit stride)."""
    op = schedule.op
    source = op.inputs[0]
    axis = next((a for a, e in enumerate(op.index(source)) if e == window.input_index), None)
    if axis is None:
        return False
    letter = op.tensor(source).letters[axis]
    layout = schedule.layout_of(source)
    return layout.order[-1] == (letter, 0) and layout.block(letter) == 1


def _steps(schedule: Schedule, value, loop: str, where: str) -> bool:
    """``value`` grows by exactly 1 per iteration of ``loop`` wherever ``where`` holds."""
    return proves_step(schedule, value, loop, 1, where)


def _padding_guard(schedule: Schedule, window: Window) -> Optional[int]:
    """The index in ``schedule.guards`` of ``window``'s padding guard (None: not padded)."""
    if not window.padded:
        return None
    padded = [w for w in schedule.op.windows if w.padded]
    return len(schedule.partial_guards) + padded.index(window)


def column(schedule: Schedule, tap: TapDot, bindings: dict) -> str:
    """C of the input column of the first lane's first tap, at the loops' ``bindings``."""
    return tap.window.input_index.substitute(schedule.dim_values).substitute(bindings).to_c()


def operand(ints: Isa, tap: TapDot, ref: str, col: str, fill: str, valid: int) -> str:
    """C of a dot operand of the integer table ``ints``'s lanes: the groups of the window of input bytes
    from element ``ref`` (at column ``col``), bytes outside the row filled with the byte of C int
    ``fill`` (in the first ``valid`` lanes' groups; the other lanes' products are not used)."""
    lanes = ints.lanes
    s, d = tap.window.stride, tap.window.dilation
    window = f"lo_tap_window(&{ref}, {col}, {tap.window.size}, {tap.span(valid)}, {fill})"
    dwords = ", ".join(str(q * s + i) for q in range(lanes // GROUP) for i in range(GROUP))
    groups = [sum((j * s + t * d) << (8 * t) for t in range(GROUP)) for j in range(GROUP)]
    indices = ", ".join(f"0x{p:08x}" for p in groups * (lanes // GROUP))
    # the byte permute reads the window's bytes directly: lane j's group starts at byte j * s
    picks = ", ".join(f"0x{p + (j // GROUP) * GROUP * s * 0x01010101:08x}"
                      for j, p in enumerate(groups * (lanes // GROUP)))
    return ints.tap_spread(v=window, dwords=dwords, bytes=indices, picks=picks)


def phases(tap: TapDot, ints: Isa) -> int:
    """How many consecutive vectors of outputs a phase group of ``tap`` on the integer table ``ints``
    takes (module docstring, "Phases"): ``4 / stride`` where the lanes of each phase then step by 4 input
    bytes (unit dilation, a stride in ``PHASED_STRIDES``) and the table zips vectors, else 1 (each
    vector spread on its own)."""
    s, d = tap.window.stride, tap.window.dilation
    return GROUP // s if "zip_low" in ints.ops and d == 1 and s in PHASED_STRIDES else 1


def phase_operand(tap: TapDot, ref: str, col: str, fill: str, valid: int) -> str:
    """C of a dot operand of one phase (lane ``j``: the group of input bytes ``col + 4j .. + 3``):
    the window of input bytes from element ``ref`` at column ``col`` as it is, no permute (bytes
    outside the row filled in the first ``valid`` lanes' groups, as ``operand``)."""
    return f"lo_tap_window(&{ref}, {col}, {tap.window.size}, {tap.span(valid, GROUP)}, {fill})"


def interleave(ints: Isa, names: list[str]) -> list[str]:
    """C statements that turn the phase accumulators ``names`` (``names[q]`` lane ``j``: output
    ``len(names) * j + q`` of the group) into consecutive vectors (``names[i]`` lane ``j``: output
    ``lanes * i + j``): ``log2(len(names))`` rounds of two-vector zips (``zip_low``, ``zip_high``)."""
    vector = ints.vector_type
    lines: list[str] = []

    def merged(parts: list[str]) -> list[str]:
        if len(parts) == 1:
            return parts
        evens, odds = merged(parts[0::2]), merged(parts[1::2])     # outputs 2i and 2i + 1
        result = []
        for even, odd in zip(evens, odds):
            low, high = f"lo_z{len(lines)}a", f"lo_z{len(lines)}b"
            lines.append(f"const {vector} {low} = {ints.zip_low(a=even, b=odd)}, "
                         f"{high} = {ints.zip_high(a=even, b=odd)};")
            result += [low, high]
        return result

    final = merged(list(names))
    moves = [f"{name} = {value};" for name, value in zip(names, final)]
    return cprint.block("", lines + moves)


def zips(count: int) -> int:
    """Zips (``zip_low`` or ``zip_high``, each making one vector) of ``interleave`` on ``count`` phase
    accumulators."""
    return count * (count.bit_length() - 1)


def helpers(ints: Isa) -> str:
    """The C helpers of the tap dot operands of the integer table ``ints``."""
    return ints.helpers["taps"]


def read_ahead(lanes: int) -> int:
    """Bytes past their end at which a tap dot kernel of ``lanes`` int32 lanes may read the activations:
    a whole window (``lo_tap_window``'s one load where the groups lie in the row)."""
    return GROUP * lanes
