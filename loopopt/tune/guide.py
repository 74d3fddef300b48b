"""The order in which a search measures candidates: the kernel model, refitted as trials come in.

The kernel model (``lo.kernel_model``) predicts a schedule's time from what its generated kernel
executes. Measured on this project's Xeon (2 cores shared with other work): without its memory term
it takes 13-60 ms on a random candidate and 22-121 ms on the heuristic's best ones (larger, unrolled
register blocks: more sites to count), with it (a reuse-distance profile per candidate) 0.2-1.4 s,
about what compiling and timing the candidate costs; x86's ranking heuristic (``targets/x86/rank.py``,
the target's ``SearchRules.rank``) takes about
50 us, and a search space holds up to about 13,500 candidates. So the heuristic orders them all, and
the kernel model without its memory term scores the heuristic's best ``shortlist(picks)`` (24, and
one more per candidate the walk has picked: about 10 s in a search of 64 trials; it depends on the
walk's progress, not on the budget, so a resumed search with another budget walks the same path) and
the neighbours the walk considers, when it considers them; scored candidates come first, by their
fitted time, the others after them in the heuristic's order. A scored candidate's time is the kernel
model's plus the heuristic's ``stream_seconds`` (its operands from beyond L2) and ``strided_seconds``
(plain weight rows a channel row apart, from L2): the memory terms the kernel model without traffic
leaves out, cheap enough for every candidate; times the share of the work the busiest thread has
(``Traits.imbalance`` over the threads: a parallel loop whose iterations do not split evenly), the
model's part times ``Traits.tail`` (a partial block of a padded window); before any trial a candidate
is predicted by the geometric mean of that time and the heuristic's (``Guide.prior``). Each
verified trial refits the prediction (``fit.Fit`` over ``FEATURES``: the prior's scale, and weights
on the heuristic's time and on what the model prices poorly, where the measurements side with
them), and the untried candidates are reordered by it. The target's rules may price a family of
candidates with their own model (``SearchRules.families``, ``own_seconds``): x86's AMX candidates get
the tile model's time (``targets/x86/tile_model.py``: the kernel model has no costs for tiles); their
trials are fitted apart from the SIMD ones (one model's bias says nothing of the other's; the fit of the SIMD
trials, applied to the AMX candidates' times, had put those of VGG conv5_1 int8 at 0.001-0.04 ms in
a one-thread search and at 1e7-1e12 ms in a two-thread one), and count in the Spearman figure. A
table-lookup candidate of a ternary op (``tl1``, ``tl2``: the model has no costs for table builds
and lookups) or a binary op's (XNOR + popcount) counts the heuristic's time (x86's ``rank.LUT_SHARE`` or
``rank.BINARY_RATE`` of the int8 dot peak, scaled by its block) as its model time, with the feature
``unpriced`` set, and records no ``model_seconds`` (it is left out of the Spearman figure).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..model import core_costs, kernel_model
from ..schedule import ScheduleError
from ..targets.search import KERNEL, SHAPE_FEATURES, Candidate, SearchRules, Traits
from .fit import Fit

MIN_SHORTLIST = 24         # the heuristic's best scored by the kernel model before the first pick
SHORTLIST_PER_PICK = 1     # and more of them after each pick
SMALLEST = 1e-3            # resource ratios below this count as this (log features stay finite)
BLEND = 0.5                # weight of the heuristic's log time in the prior prediction (the model's: 1 - it)
# What the refit weighs (``features``): the log of the prior prediction (``Guide.prior``: the prior's
# feature), the log of the heuristic's time, the share of the modelled time that is memory terms
# (``memory_seconds``), plain weights of a block that is part of the channels (rows a channel row
# apart), a cache block of the reduction channels, an innermost reduction loop not unrolled
# (``Traits.rolled``), the logs of the kernel model's load, latency and issue cycles over its vector
# cycles (AMX: 1), a candidate no model prices (table lookups), and the shape of a register-blocked
# candidate's nest (``targets.search.SHAPE_FEATURES``; 0 for the others), which neither model prices
# in full. What the target's rules say of a candidate (``Traits``) comes from ``SearchRules.traits``.
FEATURES = ("model", "heuristic", "stream", "strided", "cache_block", "rolled", "load", "latency", "issue",
            "unpriced", *SHAPE_FEATURES)


@dataclass(frozen=True)
class Price:
    """The kernel model's figures of a candidate: its time (inf: the schedule refuses it) and the
    cycles of its load ports, latency chains and front end over those of its vector units."""

    seconds: float
    load: float = 1.0
    latency: float = 1.0
    issue: float = 1.0


Model = Callable[[Candidate], "Price | None"]


def price(candidate: Candidate, rules: SearchRules) -> Price | None:
    """The kernel model's price of a candidate, without its memory term; the rules' own model's time
    for a candidate of another family (x86: an AMX candidate's, the tile model's); None for what no
    model has costs for (``rules.unpriced``: table lookups, binary kernels)."""
    family = rules.family(candidate)
    if rules.unpriced(candidate) or (family == KERNEL and core_costs(candidate.isa) is None):
        return None
    try:
        if family != KERNEL:
            return Price(rules.own_seconds(candidate))
        model = kernel_model(candidate.schedule, candidate.isa, traffic=False)
    except ScheduleError:
        return Price(math.inf)
    cycles = model.resources
    vector = max(cycles["vector"], 1.0)
    return Price(model.predicted_seconds, cycles["load"] / vector, cycles["latency"] / vector,
                 cycles["issue"] / vector)


def memory_seconds(candidate: Candidate) -> float:
    """The heuristic's memory terms that the kernel model without traffic leaves out: operands streamed
    from beyond L2 (``stream_seconds``) and strided weight rows from L2 (``strided_seconds``)."""
    figures = candidate.figures
    return figures.get("stream_seconds", 0.0) + figures.get("strided_seconds", 0.0)


def shortlist(picks: int) -> int:
    """How many of the heuristic's best candidates are scored once the walk picked ``picks``."""
    return MIN_SHORTLIST + SHORTLIST_PER_PICK * picks


def _log(value: float) -> float:
    return math.log(max(value, SMALLEST))


class Guide:
    """The candidates of one search (``ranked``: the heuristic's order, each with its
    ``predicted_seconds``) under a target's search ``rules`` on ``threads`` threads, the prices of
    some of them (``model``; None: ``price``, the kernel model or the rules' own) and the fit of each
    of the rules' ``families``."""

    def __init__(self, ranked: Sequence[Candidate], rules: SearchRules, model: Model | None = None,
                 threads: int = 1):
        self.candidates = list(ranked)
        self.rules, self.threads = rules, threads
        self.model = model or (lambda candidate: price(candidate, rules))
        self.scores: dict[int, Price | None] = {}
        self.known: dict[int, tuple[float, ...]] = {}
        self._traits: dict[int, Traits] = {}
        families = rules.families
        self.samples: dict[str, list[tuple[tuple[float, ...], float]]] = {name: [] for name in families}
        self.sampled: dict[str, list[int]] = {name: [] for name in families}     # their candidates
        self.fits = {name: Fit() for name in families}

    def score_best(self, count: int) -> None:
        """Score the heuristic's best ``count`` candidates (those not scored yet)."""
        for index in range(min(count, len(self.candidates))):
            self.score(index)

    def traits(self, index: int) -> Traits:
        """What the rules say of candidate ``index`` besides its times (computed once)."""
        if index not in self._traits:
            self._traits[index] = self.rules.traits(self.candidates[index], self.threads)
        return self._traits[index]

    def heuristic(self, index: int) -> float:
        return self.candidates[index].figures["predicted_seconds"]

    def score(self, index: int) -> Price | None:
        """The kernel model's price of candidate ``index`` (computed once; None: not modelled)."""
        if index not in self.scores:
            self.scores[index] = self.model(self.candidates[index])
        return self.scores[index]

    def modelled(self, index: int) -> float | None:
        """The kernel model's time of candidate ``index`` times its ``Traits.tail`` (x86: a partial block
        of a padded window, which the model prices too low) plus the heuristic's memory terms
        (``memory_seconds``), times its busiest thread's share of them (``Traits.imbalance`` over the
        threads: the time of that thread, as the heuristic's); a family's own model's time (x86's tile
        model: the busiest thread's already) as it is; None: not modelled."""
        model = self.score(index)
        if model is None:
            return None
        candidate, traits = self.candidates[index], self.traits(index)
        if self.rules.family(candidate) != KERNEL:
            return model.seconds
        return (model.seconds * traits.tail + memory_seconds(candidate)) * traits.imbalance / self.threads

    def prior(self, index: int) -> float:
        """The prediction of candidate ``index`` before any trial (the fit's prior): the geometric mean
        of its ``modelled`` time and the heuristic's, ``BLEND`` weighing the heuristic's (the
        heuristic's alone where the model does not price it; inf: the schedule refuses it).
        Measured by ``benchmarks/bench_rank.py`` over 14 searches of 32 trials on a shared machine
        (convs, depthwise, 1x1, GEMM, GEMV), the refitted prediction each trial was picked by had a
        median Spearman of +0.64 with the blend and +0.52 with the model alone."""
        modelled, heuristic = self.modelled(index), self.heuristic(index)
        if modelled is None:
            return heuristic
        if not math.isfinite(modelled):
            return math.inf
        return math.exp((1 - BLEND) * math.log(modelled) + BLEND * math.log(heuristic))

    def features(self, index: int) -> tuple[float, ...]:
        """The ``FEATURES`` of candidate ``index`` (scoring it if it was not); a candidate the model
        does not price has the heuristic's time in place of the prior's."""
        if index not in self.known:
            model, traits = self.score(index), self.traits(index)
            heuristic = self.heuristic(index)
            if model is None:
                self.known[index] = ((math.log(heuristic), math.log(heuristic)) + (0.0,) * 7 + (1.0,)
                                     + traits.shape)
            else:
                modelled, prior = self.modelled(index), self.prior(index)
                memory = memory_seconds(self.candidates[index])
                self.known[index] = (
                    math.log(prior) if math.isfinite(prior) else math.inf, math.log(heuristic),
                    memory / modelled if math.isfinite(modelled) else 0.0, float(traits.strided),
                    float(traits.cache_block), float(traits.rolled),
                    _log(model.load), _log(model.latency), _log(model.issue), 0.0) + traits.shape
        return self.known[index]

    def fitted(self, index: int) -> float:
        """The fitted time of candidate ``index`` (scoring it if it was not)."""
        return self.fits[self.rules.family(self.candidates[index])].predict(self.features(index))

    def order(self, indices: Iterable[int]) -> list[int]:
        """``indices`` best first: the scored by fitted time, then the others in the heuristic's order."""
        indices = list(indices)
        scored = sorted((i for i in indices if i in self.scores), key=lambda i: (self.fitted(i), i))
        return scored + sorted(i for i in indices if i not in self.scores)

    def observe(self, index: int, seconds: float | None) -> None:
        """A trial of candidate ``index`` measured ``seconds`` (None: failed); refit on verified trials."""
        features = self.features(index)
        if seconds is not None and math.isfinite(features[0]):
            name = self.rules.family(self.candidates[index])
            self.samples[name].append((features, seconds))
            self.sampled[name].append(index)
            self.fits[name] = Fit.of(self.samples[name])

    def held_out(self) -> dict[int, float]:
        """Each verified trial's candidate predicted by the fit to all the other verified trials of its
        family (leave one out): the final fit's prediction of a trial it was not fitted to."""
        predicted = {}
        for name, samples in self.samples.items():
            for position, index in enumerate(self.sampled[name]):
                fit = Fit.of(samples[:position] + samples[position + 1:])
                predicted[index] = fit.predict(samples[position][0])
        return predicted

    def figures(self, index: int) -> dict[str, float]:
        """What a trial of candidate ``index`` records: the heuristic's figures, ``model_seconds``
        (the kernel model, if it prices the candidate) and ``fitted_seconds`` (the refitted
        prediction it was picked by)."""
        model = self.score(index)
        priced = {} if model is None else {"model_seconds": model.seconds}
        return {**self.candidates[index].figures, **priced, "fitted_seconds": self.fitted(index)}
