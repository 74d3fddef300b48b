"""How each tensor access behaves along the vectorized loop, decided with isl.

For a vector of ``lanes`` consecutive iterations of the innermost loop ``v``, an
access is ``broadcast`` (same element in every lane), ``contiguous`` (lane j at
offset base + j), ``strided`` (base + j*s) or ``gather`` (anything else: per-lane
offsets). A kind is chosen only if isl proves it for every pair of neighbouring
lanes of every vector in the loop box, so the fast forms are always correct.

isl proves the kinds with floor division: a contiguous or strided vector's lanes are addressed from
lane 0's element even where lane 0 is in the padding and the others are not (a stride along a
spatially blocked axis), so that element's offset is written exact in C (``exact_offset``).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from ..expr import Const, Expr, Var, exact_in_c
from ..schedule import Schedule

AccessKindName = Literal["broadcast", "contiguous", "strided", "gather"]


FROM_LANE_ZERO = ("contiguous", "strided")      # kinds whose lanes are addressed from lane 0's element


@dataclass(frozen=True)
class AccessKind:
    """``kind`` in broadcast/contiguous/strided/gather; ``stride`` in elements for strided."""

    kind: AccessKindName
    stride: int = 0

    def __str__(self) -> str:
        return f"strided({self.stride})" if self.kind == "strided" else self.kind


def classify(schedule: Schedule, tensor: str, lanes: int) -> AccessKind:
    """The vector access kind of ``tensor`` along the schedule's vectorized loop."""
    return classify_offset(schedule, schedule.offset(tensor), lanes)


@lru_cache(maxsize=4096)
def classify_offset(schedule: Schedule, offset: Expr, lanes: int) -> AccessKind:
    """The vector access kind of a storage ``offset`` (over the loops) along the vectorized loop."""
    vec = schedule.vector_loop
    if vec is None:
        raise ValueError("the schedule has no vectorized loop")
    if vec.name not in offset.variables():
        return AccessKind("broadcast")
    if vec.extent == 1 or lanes == 1:
        return AccessKind("contiguous")
    zero = {loop.name: 0 for loop in schedule.loops}
    step = offset.evaluate({**zero, vec.name: 1}) - offset.evaluate(zero)
    if _holds_everywhere(schedule, offset, lanes, step):
        if step == 0:
            return AccessKind("broadcast")
        return AccessKind("contiguous") if step == 1 else AccessKind("strided", step)
    return AccessKind("gather")


def _holds_everywhere(schedule: Schedule, offset: Expr, lanes: int, step: int) -> bool:
    """True iff offset(v+1) - offset(v) == step for neighbouring lanes of every vector."""
    vec = schedule.vector_loop
    neighbours = f"{vec.name} + 1 < {vec.extent} and ({vec.name} mod {lanes}) < {lanes - 1}"
    return proves_step(schedule, offset, vec.name, step, neighbours)


def proves_step(schedule: Schedule, offset: Expr, loop: str, step: int, where: str) -> bool:
    """True iff isl proves ``offset(loop + 1) - offset(loop) == step`` at every iteration of the
    loop box where the isl constraint ``where`` holds."""
    nxt = offset.substitute({loop: Var(loop) + Const(1)})
    return schedule.iterations(where, f"({nxt.to_isl()}) - ({offset.to_isl()}) != {step}").is_empty()


@lru_cache(maxsize=4096)
def exact_offset(schedule: Schedule, offset: Expr) -> str:
    """C of storage ``offset`` (in the loops or the op's dims), exact where C's truncating ``/`` and
    ``%`` are not, somewhere in the loop box (``expr.exact_in_c``): for an element that other
    elements are addressed from even where it is in the padding (lane 0 of a contiguous or strided
    vector, an operand base)."""
    def least_inexact(numerator: Expr, divisor: int) -> int | None:
        value = numerator.substitute(schedule.dim_values)
        return schedule.least(value, f"({value.to_isl()}) mod {divisor} != 0")
    return exact_in_c(offset, least_inexact).to_c()
