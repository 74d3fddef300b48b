"""``lo.tune`` where its target cannot time kernels here (``Target.timing_refusal``, e.g. NEON kernels under
an emulator): the search's candidates ranked by the kernel model on the target's modelled core (a
family the kernel model does not count, by the rules' own model, ``SearchRules.own_seconds``), the
best-ranked built together (``Target.compile_many``) and verified against the reference where they run
(the emulator); the best verified one wins. Nothing is timed: the result says so and shows predicted
times only, and no trial goes into the tuning log (its trials are timed ones)."""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..measure import verify
from ..model import kernel_model
from ..ops import Op
from ..schedule import Schedule, ScheduleError
from ..targets.base import Target
from ..targets.search import KERNEL, Candidate, SearchRules
from ..units import duration

VERIFIED = 4        # the best-ranked candidates built and verified at most (``trials`` fewer)


class UntimedSearchError(RuntimeError):
    """No candidate of an untimed search could be priced or verified; says why."""


@dataclass(frozen=True)
class RankedCandidate:
    """One candidate of an untimed search: its place in the kernel model's ranking (from 1), knobs, the
    model's predicted seconds, and whether it verified (None: not built)."""

    rank: int
    knobs: dict[str, Any]
    description: str
    predicted_seconds: float
    verified: bool | None = None
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "knobs": self.knobs, "description": self.description,
                "predicted_s": self.predicted_seconds, "verified": self.verified, "error": self.error}


@dataclass
class RankedResult:
    """What ``lo.tune`` returns for a target that cannot time kernels here: ``best`` (the best-ranked
    candidate that verified), every priced candidate in the model's order, ``not_timed`` (why nothing was
    timed), and ``skipped`` (why the other algorithms were not tried)."""

    op: Op
    isa: str
    threads: int
    best: Schedule
    candidates: list[RankedCandidate]
    not_timed: str
    refused: int = 0
    elapsed: float = 0.0
    skipped: dict[str, str] = field(default_factory=dict)
    log_note: str = ""

    algorithm = "direct"           # the only algorithm searched untimed

    @property
    def winner(self) -> RankedCandidate:
        return next(c for c in self.candidates if c.verified)

    @property
    def winner_label(self) -> str:
        return f"rank {self.winner.rank}"

    def provenance(self) -> str:
        """How the winner was found (what a saved schedule's description records): no time."""
        best = self.winner
        return (f"Found by loopopt tune without timing ({self.not_timed}): rank {best.rank} of "
                f"{len(self.candidates)} by the kernel model, {best.description}, predicted "
                f"{duration(best.predicted_seconds)} on the modelled core, verified; {self.threads} "
                f"thread(s), {self.isa}")

    def table(self) -> str:
        """The built candidates and the next few, one line each: rank, predicted time, verification."""
        built = [c for c in self.candidates if c.verified is not None]
        shown = self.candidates[:len(built) + 3]
        lines = [f"{'rank':>4}  {'model':>10}  {'verified':<12}  candidate"]
        for c in shown:
            status = "not built" if c.verified is None else "ok" if c.verified else "FAILED"
            lines.append(f"{c.rank:>4}  {duration(c.predicted_seconds):>10}  {status:<12}  {c.description}")
        if len(self.candidates) > len(shown):
            lines.append(f"      ... {len(self.candidates) - len(shown)} more, ranked and not built")
        return "\n".join(lines)

    def __str__(self) -> str:
        best = self.winner
        built = sum(c.verified is not None for c in self.candidates)
        passed = sum(bool(c.verified) for c in self.candidates)
        lines = [f"not timed: {self.not_timed}",
                 f"ranked {len(self.candidates)} candidates of {self.op!r} on {self.isa} ({self.threads} "
                 f"thread(s)) by the predicted time on the modelled core (the kernel model's, or the search "
                 f"rules' own for a kernel it does not count); built the best "
                 f"{built} and verified them where they run ({passed} verified)",
                 f"best: rank {best.rank}, {best.description}: predicted {duration(best.predicted_seconds)} "
                 f"(a prediction, not a measurement)"]
        lines += [f"{name} not tried: {why}" for name, why in self.skipped.items()]
        return "\n".join(lines + ([self.log_note] if self.log_note else []))

    def to_dict(self) -> dict[str, Any]:
        return {"op": repr(self.op), "isa": self.isa, "threads": self.threads, "timed": False,
                "not_timed": self.not_timed, "best": self.winner.to_dict(), "refused": self.refused,
                "elapsed_s": self.elapsed, "skipped": self.skipped, "log": self.log_note or None,
                "candidates": [c.to_dict() for c in self.candidates]}


def ranked_search(op: Op, isa: str, threads: int, chosen: Target, rules: SearchRules,
                  space: Sequence[Candidate], trials: int, not_timed: str, log: str | None = None,
                  skipped: dict[str, str] | None = None) -> RankedResult:
    """The untimed search (module docstring) of ``space`` (``rules``' candidates of ``op`` on ``isa``):
    every candidate priced by the kernel model (ties in ``rules``' order), the best ``min(trials,
    VERIFIED)`` built at once and verified on ``threads`` threads."""
    start = time.perf_counter()
    priced, refused = [], 0
    for candidate in rules.rank(space):
        try:
            priced.append((_predicted(rules, candidate), candidate))
        except (ScheduleError, ValueError):
            refused += 1
    if not priced:
        raise UntimedSearchError(f"no candidate of {op!r} could be priced by the kernel model ({refused} "
                                 f"refused), and nothing can be timed here: {not_timed}")
    priced.sort(key=lambda pair: pair[0])
    top = [candidate for _, candidate in priced[:min(trials, VERIFIED)]]
    checks = [_verified(kernel, threads) for kernel in chosen.compile_many([c.schedule for c in top], isa)]
    ranked = [RankedCandidate(number, candidate.knobs.as_dict(), rules.describe(candidate.knobs.as_dict()),
                              seconds, *(checks[number - 1] if number <= len(checks) else (None, "")))
              for number, (seconds, candidate) in enumerate(priced, 1)]
    if not any(ok for ok, _ in checks):
        errors = "; ".join(dict.fromkeys(error for _, error in checks))
        raise UntimedSearchError(f"none of the {len(checks)} best-ranked candidates of {op!r} verified "
                                 f"({errors})")
    note = ""
    if log is not None:
        note = f"the tuning log {log} was not written: it holds timed trials, and nothing was timed"
    best = top[next(i for i, (ok, _) in enumerate(checks) if ok)].schedule
    return RankedResult(op, isa, threads, best, ranked, not_timed, refused, time.perf_counter() - start,
                        dict(skipped or {}), note)


def _predicted(rules: SearchRules, candidate: Candidate) -> float:
    """The kernel model's seconds of ``candidate`` without the memory traffic, or its family's own model's
    (``SearchRules.own_seconds``)."""
    if rules.family(candidate) != KERNEL:
        return rules.own_seconds(candidate)
    return kernel_model(candidate.schedule, candidate.isa, traffic=False).predicted_seconds


def _verified(kernel, threads: int) -> tuple[bool, str]:
    """Whether ``kernel`` on ``threads`` threads agrees with the reference, and why not."""
    kernel.set_threads(threads)
    try:
        ok, error = verify(kernel)
    except RuntimeError as err:          # the run failed (e.g. the emulator's runner exited)
        return False, str(err)
    return ok, "" if ok else f"max abs error {error:.3g} beyond the tolerance"
