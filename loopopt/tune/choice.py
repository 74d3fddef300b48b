"""The search's first choice, without measuring: a good schedule for an op that was never tuned.

``first_choice(op)`` is the candidate of the search space (``SearchRules.candidates`` of the ISA's target)
that its ranking heuristic (``SearchRules.rank``) puts first, as ``lo.tune`` orders the space before its first
trial, and whose schedule builds. So a quantized op gets the dot-product loop and packed weights where its ISA
has them (with ``isa="auto"``, AMX tiles where the CPU has AMX and the heuristic puts them first), a depthwise
one its unrolled taps, a layer whose weights outgrow L2 the channel block loop outside the rows. The kernel
model that reorders the search's shortlist is left out: on ResNet-18's layers it takes 0.1-0.5 s per candidate
on this project's shared 2-core Xeon, about what compiling one costs, while ranking the whole space (up to
about 47,000 candidates, figures computed once per distinct block and loop order) takes 0.05-1 s. No compile,
no measurement; the choice is cached per op signature, ISA, thread count and residual in the process
(``loopopt.onnx`` asks once per distinct shape of a model). ``residual=True`` ranks the candidates as kernels
that add a residual of the output's shape (``Candidate.residual``; the caller adds ``Schedule.add_residual``):
a model's fused shortcut Add, read where each block is stored.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from ..layout import Layout
from ..machine import machine_profile
from ..ops import Op
from ..targets.base import Target
from ..targets.registry import target_of_isa
from ..targets.search import Candidate, SearchRules
from .log import signature

Key = tuple[str, str, int, bool, bool]     # op signature, ISA, threads, auto, residual
_chosen: dict[Key, Candidate | None] = {}
_ranked: dict[Key, list[Candidate]] = {}
READING_WINDOW = 40     # how far down the ranking ``first_reading`` looks


def first_choice(op: Op, isa: str = "auto", threads: int = 1, residual: bool = False) -> Candidate | None:
    """The candidate the ranking heuristic puts first for ``op`` on ``isa`` ("auto": the best this CPU
    has, AMX tiles included where it has them; a named one on any CPU, ranked with the machine profile's
    peak of it) with ``threads`` threads (``residual``: as a kernel that
    adds a residual), or None when the search space has none whose schedule builds (e.g. no outer loop
    to split over ``threads``)."""
    target, isa, auto, key = _resolved(op, isa, threads, residual)
    if key not in _chosen:
        rules = target.search_rules()
        space = _space(rules, op, isa, threads, auto, residual)
        first = rules.best(space)
        if first is not None and not first.builds:
            first = next((c for c in _ranking(key, rules, space) if c.builds), None)
        _chosen[key] = first
    return _chosen[key]


def first_reading(op: Op, layout: str | Mapping[str, str], isa: str = "auto",
                  threads: int = 1, residual: bool = False) -> tuple[Candidate, int] | None:
    """The best-ranked candidate that stores ``op``'s inputs in the layouts they arrive in (``layout``:
    the first input's format tag, or a tag per input name) and runs on the first choice's ISA, and its
    rank; None if none does. It is looked for within the first ``READING_WINDOW``, and, where every
    input arrives in its logical layout (a caller's numpy array, NCHW or row-major), further down while
    the predicted time stays within the first choice's plus the packing the first choice would do on
    each call (``packing_seconds``): a depthwise conv's plane candidates read NCHW (ranked 112th for the
    240-channel 5x5 layer at 28x28, predicted 0.154 ms against 0.111 ms and 0.061 ms of packing). The
    ONNX backend takes it where the first choice would read its input in another layout than the one
    it arrives in (a conversion per call); a layer whose second operand comes with each call
    (attention's) where it would pack that one. ``residual``: ranked as kernels that add a residual."""
    first = first_choice(op, isa, threads, residual)
    if first is None:
        return None
    wanted = arriving_layouts(op, layout)
    ranked = ranking(op, isa, threads, residual)
    logical = all(tag == op.tensor(tensor).letters for tensor, tag in wanted.items())
    budget = first.figures["predicted_seconds"] + packing_seconds(op, first, wanted) if logical else 0.0
    for rank, candidate in enumerate(ranked):
        if rank >= READING_WINDOW and candidate.figures["predicted_seconds"] > budget:
            break
        if (candidate.isa == first.isa and candidate.builds
                and all(candidate.schedule.layout_of(t).tag == tag for t, tag in wanted.items())):
            return candidate, rank
    return None


def ranking(op: Op, isa: str = "auto", threads: int = 1, residual: bool = False) -> list[Candidate]:
    """``op``'s search space on ``isa`` with ``threads`` threads in the ranking heuristic's order, best
    first, those whose schedule does not build included (ranked once per op signature, ISA, thread count
    and residual in the process; ``residual``: as kernels that add a residual)."""
    target, isa, auto, key = _resolved(op, isa, threads, residual)
    rules = target.search_rules()
    space = _space(rules, op, isa, threads, auto, residual) if key not in _ranked else []
    return _ranking(key, rules, space)


def arriving_layouts(op: Op, layout: str | Mapping[str, str]) -> dict[str, str]:
    """``first_reading``'s ``layout`` as a format tag per input name; a ValueError names a tensor that is
    not an input of ``op`` or a malformed tag."""
    wanted = {op.inputs[0]: layout} if isinstance(layout, str) else dict(layout)
    for tensor, tag in wanted.items():
        if tensor not in op.inputs:
            raise ValueError(f"{tensor!r} is not an input of {op!r}: its inputs are {', '.join(op.inputs)}")
        Layout.parse(tag, op.tensor(tensor).letters, tensor)
    return wanted


def packing_seconds(op: Op, candidate: Candidate, arriving: Mapping[str, str]) -> float:
    """The time ``candidate``'s kernel takes on each call to pack the inputs that arrive in the layouts
    ``arriving`` (by name) where it stores them otherwise: each read and written once at the bandwidth
    of the cache level that holds them (L3 where they fit half of it, else DRAM; the machine profile).
    The 240-channel depthwise layer's NCHW -> NHWC packing: 0.061 ms predicted, 0.05-0.1 ms measured
    (``targets/transpose.py``'s AVX-512 tiles, shared Xeon with AMX)."""
    moved = [tensor for tensor, tag in arriving.items() if candidate.schedule.layout_of(tensor).tag != tag]
    size = 1 if op.quant is not None else 4               # as a caller gives them: 8-bit codes, else float32
    nbytes = size * sum(math.prod(op.tensor(t).shape) for t in moved)
    profile = machine_profile()
    l3 = profile.cache_size("L3")
    level = "L3" if 2 * nbytes <= l3 and "L3" in profile.bandwidth else "DRAM"
    return 2 * nbytes / (profile.bandwidth[level].gbs * 1e9)


def _resolved(op: Op, isa: str, threads: int, residual: bool) -> tuple[Target, str, bool, Key]:
    """The target of ``isa``, the ISA it names for ``op`` (on any machine: a named one need not run
    here), whether it was "auto" (the best ISA: the target's other kernels compete, as in lo.tune) and
    the cache key of the choice."""
    target = target_of_isa(isa)
    resolved, auto = target.variant(isa, integer=op.quant is not None), isa == "auto"
    return target, resolved, auto, (signature(op), resolved, threads, auto, residual)


def _space(rules: SearchRules, op: Op, isa: str, threads: int, auto: bool, residual: bool) -> list[Candidate]:
    """The search space of ``op``, its candidates ranked as kernels that add a residual if ``residual``."""
    space = rules.candidates(op, isa, threads, auto)
    return [replace(c, residual=True) for c in space] if residual else space


def _ranking(key: Key, rules, space: list[Candidate]) -> list[Candidate]:
    """The ranked search space of ``key`` (ranked once per op signature, ISA and thread count)."""
    if key not in _ranked:
        _ranked[key] = rules.rank(space)
    return _ranked[key]
