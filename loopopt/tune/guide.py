"""The order in which a search measures candidates: the kernel model, refitted as trials come in.

The kernel model (``lo.kernel_model``) predicts a schedule's time from what its generated kernel
executes. Measured on this project's Xeon (2 cores shared with other work): without its memory term
it takes 13-60 ms on a random candidate and 22-121 ms on the heuristic's best ones (larger, unrolled
register blocks: more sites to count), with it (a reuse-distance profile per candidate) 0.2-1.4 s,
about what compiling and timing the candidate costs; the ranking heuristic (``rank.py``) takes about
50 us, and a search space holds up to about 13,500 candidates. So the heuristic orders them all, and
the kernel model without its memory term scores the heuristic's best ``shortlist(picks)`` (24, and
one more per candidate the walk has picked: about 10 s in a search of 64 trials; it depends on the
walk's progress, not on the budget, so a resumed search with another budget walks the same path) and
the neighbours the walk considers, when it considers them; scored candidates come first, by their
fitted time, the others after them in the heuristic's order. A scored candidate's time is the kernel
model's plus the heuristic's ``stream_seconds`` (its operands from beyond L2: the memory term the
kernel model leaves out, cheap enough for every candidate). Each verified trial refits the
prediction (``fit.Fit``: the model's scale, and a blend with the heuristic where the measurements
side with it), and the untried candidates are reordered by it. An AMX candidate's model time is the
tile model's (``tile_model``: the kernel model has no costs for tiles); its trials are fitted apart
from the SIMD ones (``FAMILIES``: one model's bias says nothing of the other's; the fit of the SIMD
trials, applied to the AMX candidates' times, had put those of VGG conv5_1 int8 at 0.001-0.04 ms in a
one-thread search and at 1e7-1e12 ms in a two-thread one), and count in the Spearman figure. A
table-lookup candidate of a ternary op (``tl1``, ``tl2``: the model has no costs for table builds and
lookups) counts the heuristic's time (``rank.LUT_SHARE`` of the int8 dot peak, scaled by its block)
as its model time in the order, is left out of the fit and the Spearman figure, and records no
``model_seconds``.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from ..model import CORE_COSTS, kernel_model
from ..schedule import ScheduleError
from .fit import Fit
from .space import Candidate
from .tile_model import tile_time

MIN_SHORTLIST = 24         # the heuristic's best scored by the kernel model before the first pick
SHORTLIST_PER_PICK = 1     # and more of them after each pick
FAMILIES = ("kernel", "tiles")   # the models, each with its own fit: the kernel model, the tile model

Model = Callable[[Candidate], "float | None"]


def model_seconds(candidate: Candidate) -> float | None:
    """The kernel model's time of a candidate, without its memory term; an AMX candidate's the tile
    model's (inf if the schedule refuses it; None for what neither has costs for: table lookups)."""
    if candidate.table_lookup or (candidate.isa not in CORE_COSTS and candidate.isa != "amx"):
        return None
    try:
        if candidate.isa == "amx":
            return tile_time(candidate.schedule).predicted_seconds
        return kernel_model(candidate.schedule, candidate.isa, traffic=False).predicted_seconds
    except ScheduleError:
        return math.inf


def family(candidate: Candidate) -> str:
    """Which model prices a candidate, and so which fit corrects it: ``"tiles"`` or ``"kernel"``."""
    return "tiles" if candidate.isa == "amx" else "kernel"


def shortlist(picks: int) -> int:
    """How many of the heuristic's best candidates are scored once the walk picked ``picks``."""
    return MIN_SHORTLIST + SHORTLIST_PER_PICK * picks


class Guide:
    """The candidates of one search (``ranked``: the heuristic's order, each with its
    ``predicted_seconds``), the kernel model's scores of some of them, and the fit."""

    def __init__(self, ranked: Sequence[Candidate], model: Model = model_seconds):
        self.candidates = list(ranked)
        self.model = model
        self.scores: dict[int, float | None] = {}
        self.samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in FAMILIES}
        self.fits = {name: Fit() for name in FAMILIES}

    def score_best(self, count: int) -> None:
        """Score the heuristic's best ``count`` candidates (those not scored yet)."""
        for index in range(min(count, len(self.candidates))):
            self.score(index)

    def heuristic(self, index: int) -> float:
        return self.candidates[index].figures["predicted_seconds"]

    def score(self, index: int) -> float | None:
        """The kernel model's time of candidate ``index`` (computed once; None: not modelled)."""
        if index not in self.scores:
            self.scores[index] = self.model(self.candidates[index])
        return self.scores[index]

    def modelled(self, index: int) -> float | None:
        """The kernel model's time of candidate ``index`` plus the heuristic's time of its operands
        from beyond L2 (``stream_seconds``); None: not modelled."""
        model = self.score(index)
        return None if model is None else model + self.candidates[index].figures.get("stream_seconds", 0.0)

    def fitted(self, index: int) -> float:
        """The fitted time of candidate ``index`` (scoring it if it was not); a candidate the model
        does not price has the heuristic's time in place of the model's."""
        model, heuristic = self.modelled(index), self.heuristic(index)
        fit = self.fits[family(self.candidates[index])]
        return fit.predict(heuristic if model is None else model, heuristic)

    def order(self, indices: Iterable[int]) -> list[int]:
        """``indices`` best first: the scored by fitted time, then the others in the heuristic's order."""
        indices = list(indices)
        scored = sorted((i for i in indices if i in self.scores), key=lambda i: (self.fitted(i), i))
        return scored + sorted(i for i in indices if i not in self.scores)

    def observe(self, index: int, seconds: float | None) -> None:
        """A trial of candidate ``index`` measured ``seconds`` (None: failed); refit on verified trials."""
        model = self.modelled(index)
        if seconds is not None and model is not None and math.isfinite(model):
            name = family(self.candidates[index])
            self.samples[name].append((model, self.heuristic(index), seconds))
            self.fits[name] = Fit.of(self.samples[name])

    def figures(self, index: int) -> dict[str, float]:
        """What a trial of candidate ``index`` records: the heuristic's figures, ``model_seconds``
        (the kernel model, if it prices the candidate) and ``fitted_seconds`` (the refitted
        prediction it was picked by)."""
        model = self.score(index)
        return {**self.candidates[index].figures, **({} if model is None else {"model_seconds": model}),
                "fitted_seconds": self.fitted(index)}
