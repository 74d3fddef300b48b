"""The search's first choice, without measuring: a good schedule for an op that was never tuned.

``first_choice(op)`` is the candidate of the search space (``SearchRules.candidates`` of the ISA's target)
that its ranking heuristic (``SearchRules.rank``) puts first, as ``lo.tune`` orders the space before its first
trial, and whose schedule builds. So a quantized op gets the dot-product loop and packed weights where its ISA
has them (with ``isa="auto"``, AMX tiles where the CPU has AMX and the heuristic puts them first), a depthwise
one its unrolled taps, a layer whose weights outgrow L2 the channel block loop outside the rows. The kernel
model that reorders the search's shortlist is left out: on ResNet-18's layers it takes 0.1-0.5 s per candidate
on this project's shared 2-core Xeon, about what compiling one costs, while ranking the whole space (up to
about 47,000 candidates, figures computed once per distinct block and loop order) takes 0.05-1 s. No compile,
no measurement; the choice is cached per op signature, ISA and thread count in the process (``loopopt.onnx``
asks once per distinct shape of a model).
"""
from __future__ import annotations

from collections.abc import Mapping

from ..ops import Op
from ..schedule import ScheduleError
from ..targets.registry import target_of_isa
from ..targets.search import Candidate
from .log import signature

_chosen: dict[tuple[str, str, int, bool], Candidate | None] = {}
_ranked: dict[tuple[str, str, int, bool], list[Candidate]] = {}
READING_WINDOW = 40     # how far down the ranking ``first_reading`` looks


def first_choice(op: Op, isa: str = "auto", threads: int = 1) -> Candidate | None:
    """The candidate the ranking heuristic puts first for ``op`` on ``isa`` ("auto": the best this CPU
    has, AMX tiles included where it has them) with ``threads`` threads, or None when the search
    space has none whose schedule builds (e.g. no outer loop to split over ``threads``)."""
    auto = isa == "auto"                # the best ISA: the target's other kernels compete, as in lo.tune
    target = target_of_isa(isa)
    isa = target.resolve_isa(isa, integer=op.quant is not None)
    key = (signature(op), isa, threads, auto)
    if key not in _chosen:
        rules = target.search_rules()
        space = rules.candidates(op, isa, threads, auto)
        first = rules.best(space)
        if first is not None and not _builds(first):
            first = next((c for c in _ranking(key, rules, space) if _builds(c)), None)
        _chosen[key] = first
    return _chosen[key]


def first_reading(op: Op, layout: str | Mapping[str, str], isa: str = "auto",
                  threads: int = 1) -> tuple[Candidate, int] | None:
    """The best-ranked candidate (within the first ``READING_WINDOW``) that stores ``op``'s inputs in the
    layouts they arrive in (``layout``: the first input's format tag, or a tag per input name) and runs on
    the first choice's ISA, and its rank; None if none does. The ONNX backend takes it where the first
    choice would read its input in another layout than the one it arrives in (a conversion per call);
    a layer whose second operand comes with each call (attention's) where it would pack that one."""
    first = first_choice(op, isa, threads)
    if first is None:
        return None
    wanted = {op.inputs[0]: layout} if isinstance(layout, str) else dict(layout)
    auto = isa == "auto"
    target = target_of_isa(isa)
    isa = target.resolve_isa(isa, integer=op.quant is not None)
    rules = target.search_rules()
    key = (signature(op), isa, threads, auto)
    ranked = _ranking(key, rules, rules.candidates(op, isa, threads, auto) if key not in _ranked else [])
    for rank, candidate in enumerate(ranked[:READING_WINDOW]):
        if (candidate.isa == first.isa and _builds(candidate)
                and all(candidate.schedule.layout_of(t).tag == tag for t, tag in wanted.items())):
            return candidate, rank
    return None


def _ranking(key: tuple[str, str, int, bool], rules, space: list[Candidate]) -> list[Candidate]:
    """The ranked search space of ``key`` (ranked once per op signature, ISA and thread count)."""
    if key not in _ranked:
        _ranked[key] = rules.rank(space)
    return _ranked[key]


def _builds(candidate: Candidate) -> bool:
    try:
        return candidate.schedule is not None
    except ScheduleError:
        return False
