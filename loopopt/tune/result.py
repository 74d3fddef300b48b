"""What ``lo.tune`` returns: the best schedule, its timing and every trial of the search."""
from __future__ import annotations

import math
import os
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..measure import Timing
from ..ops import Op
from ..schedule_file import AnySchedule
from ..targets.registry import target_of_isa
from ..units import duration, in_unit, json_units, time_unit
from .algorithms import label
from .fit import spearman, spearman_undefined

CONVERGED = 0.02           # the best rate gained less than this share over the last third of the trials
JUDGED = 6                 # trials a search needs before it says whether it converged
EXHAUSTED = "every candidate was tried"    # TuneResult.stopped of a search that tried the whole space


@dataclass(frozen=True)
class Convergence:
    """Whether a search converged: ``gain`` is the share by which the best rate grew over the last third
    of the trials (from trial ``since`` on); ``converged`` is None where there were too few trials to say."""

    converged: bool | None
    gain: float | None
    since: int
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return {"converged": self.converged, "gain_last_third": self.gain, "since_trial": self.since,
                "verdict": self.verdict}


@dataclass(frozen=True)
class Trial:
    """One measured candidate, in the order the search tried it (``number`` from 1).

    ``logged``: taken from the tuning log (measured by an earlier run on this machine), not
    measured again. ``seconds`` is the figure the search ranks by: the minimum time of a
    verified run (the one least disturbed by other processes), None for a failed trial."""

    number: int
    schedule: str                  # TOML
    knobs: dict[str, Any]
    model: dict[str, float]
    status: str
    timing: Timing | None
    error: str
    logged: bool = False
    elapsed: float = 0.0           # seconds from the search's start to the trial's end

    @property
    def seconds(self) -> float | None:
        return self.timing.min if self.status == "ok" else None

    @property
    def algorithm(self) -> str:
        """``direct``, ``implicit_gemm``, ``im2col`` or ``winograd`` (``tune.algorithms``)."""
        return label(self.knobs)

    def to_dict(self) -> dict[str, Any]:
        timing = self.timing
        return {"number": self.number, "algorithm": self.algorithm, "status": self.status,
                "error": self.error, "logged": self.logged, "elapsed_s": self.elapsed,
                "knobs": self.knobs, "model": self.model, "schedule": self.schedule,
                "timing": None if timing is None else {
                    "median_s": timing.median, "min_s": timing.min, "iqr_s": timing.iqr,
                    "repeats": timing.repeats, "rate": timing.gflops,
                    "percent_of_peak": timing.percent_of_peak,
                    "verified": timing.verified, "noisy": timing.noisy, "noise": timing.noise}}


@dataclass
class TuneResult:
    """The outcome of a search: ``best`` (the fastest verified trial's schedule, whatever its algorithm:
    a Schedule, or a Winograd plan; either compiles with ``.compile(isa)`` and saves with
    ``save_schedule``), its ``timing``, and ``trials`` (every candidate measured, or taken from the log,
    in order); ``refused`` counts candidates the schedule rejected (not trials), ``elapsed`` the
    search's wall-clock seconds; ``skipped`` says why an algorithm was not tried."""

    op: Op
    isa: str
    threads: int
    best: AnySchedule
    timing: Timing
    trials: list[Trial]
    refused: int = 0
    elapsed: float = 0.0
    log: str | None = None
    stopped: str = ""                           # why the search ended
    best_number: int = field(default=0)
    skipped: dict[str, str] = field(default_factory=dict)
    cut: dict[str, str] = field(default_factory=dict)     # algorithm -> why it got no more trials

    @property
    def convergence(self) -> Convergence:
        """Whether the search converged: "converged" where the best rate gained under ``CONVERGED`` over
        the last third of the trials (or every candidate was tried), else "still improving" with the
        advice to run more trials; no verdict with fewer than ``JUDGED`` trials."""
        curve, count = self.best_so_far(), len(self.trials)
        since = count - count // 3 + 1                    # the first trial of the last third
        if self.stopped == EXHAUSTED:
            return Convergence(True, None, since, f"converged: {EXHAUSTED}")
        if count < JUDGED:
            return Convergence(None, None, since, f"too few trials ({count}, fewer than {JUDGED}) to say "
                                                  f"whether the search converged")
        before, final = curve[since - 2], curve[-1]
        if before is None:
            return Convergence(False, None, since, f"still improving: no verified trial before trial "
                                                   f"{since}; run more trials")
        gain = final / before - 1
        growth = f"the best gained {100 * gain:.1f}% over the last third of the trials ({since}-{count})"
        if gain < CONVERGED:
            return Convergence(True, gain, since, f"converged: {growth}, under {100 * CONVERGED:.0f}%")
        return Convergence(False, gain, since, f"still improving: {growth}; run more trials (with the same "
                                               f"log a rerun resumes)")

    @property
    def algorithm(self) -> str:
        """The algorithm that won (``best``'s)."""
        return self.winner_trial.algorithm

    @property
    def winner_trial(self) -> Trial:
        """The fastest verified trial of any algorithm."""
        return min((t for t in self.trials if t.seconds is not None), key=lambda t: t.seconds)

    @property
    def winner_label(self) -> str:
        """The winner in a few words: its trial."""
        return f"trial {self.best_number}"

    def provenance(self) -> str:
        """How the winner was found and its time (what a saved schedule's description records)."""
        rate = self.op.flops / self.timing.min / 1e9
        what = describe(self.winner_trial.knobs, self.isa)
        what = what if what.startswith(self.algorithm) else f"{self.algorithm} ({what})"
        return (f"Found by loopopt tune in {len(self.trials)} trials: {what}, min "
                f"{duration(self.timing.min)}, {rate:.1f} {self.timing.unit} on {self.threads} thread(s), "
                f"{self.isa}")

    def by_algorithm(self) -> dict[str, Trial]:
        """The fastest verified trial of each algorithm tried, fastest first."""
        fastest: dict[str, Trial] = {}
        for t in sorted((t for t in self.trials if t.seconds is not None), key=lambda t: t.seconds):
            fastest.setdefault(t.algorithm, t)
        return fastest

    def margins(self) -> dict[str, float]:
        """How many times slower each algorithm's fastest trial is than the winner's (the winner: 1.0)."""
        best = self.winner_trial.seconds
        return {name: t.seconds / best for name, t in self.by_algorithm().items()}

    def _algorithm_line(self) -> str:
        fastest, margins = self.by_algorithm(), self.margins()
        if len(fastest) < 2 and not self.skipped and not self.cut:
            return ""
        (first, best), *rest = fastest.items()
        others = ", ".join(f"{margins[name]:.2f}x faster than {name} (trial {r.number}, min "
                           f"{duration(r.seconds)})" for name, r in rest)
        skipped = "".join(f"; {name} not tried: {why}" for name, why in self.skipped.items())
        cut = "".join(f"; {name} stopped early: {why}" for name, why in self.cut.items())
        return (f"\nalgorithm: {first} won (trial {best.number}, min {duration(best.seconds)})"
                + (f", {others}" if others else "") + skipped + cut)

    def best_so_far(self) -> list[float | None]:
        """After each trial, the best rate (G(FL)OP/s of the minimum time) found so far."""
        best: float | None = None
        curve = []
        for trial in self.trials:
            if trial.seconds is not None:
                rate = self.op.flops / trial.seconds / 1e9
                best = rate if best is None else max(best, rate)
            curve.append(best)
        return curve

    @property
    def failed(self) -> list[Trial]:
        return [t for t in self.trials if t.status != "ok"]

    def first_within(self, fraction: float) -> Trial:
        """The first trial at least ``fraction`` as fast as the best (by minimum time): its ``number``
        and ``elapsed`` say how soon the search got within that fraction of its result."""
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
        return next(t for t in self.trials
                    if t.seconds is not None and self.timing.min / t.seconds >= fraction)

    @property
    def model_spearman(self) -> float | None:
        """Spearman's rank correlation between the kernel model's time (``model_seconds``) and the
        measured minimum time over the verified trials that have a model time (the direct search's:
        register blocks priced by the kernel model, AMX tiles by the tile model; not table lookups nor
        the other algorithms); None where ``model_spearman_undefined`` says why."""
        pairs = self._modelled()
        return spearman(*zip(*pairs)) if pairs else None

    @property
    def ranking_spearman(self) -> float | None:
        """Spearman's rank correlation between the prediction each trial was picked by
        (``fitted_seconds``: the model's time with the heuristic's memory terms and the thread
        imbalance, refitted to the trials measured before it) and the measured minimum time over the
        verified trials that have a model time (as ``model_spearman``); None with fewer than 3."""
        pairs = self._modelled("fitted_seconds")
        return spearman(*zip(*pairs)) if pairs else None

    @property
    def fit_spearman(self) -> float | None:
        """Spearman's rank correlation between the search's final fit out of sample (each trial
        predicted by the refit to all the other verified trials: ``held_out_seconds``) and the
        measured minimum time over the verified trials that have a model time; None with fewer than 3."""
        pairs = self._modelled("held_out_seconds")
        return spearman(*zip(*pairs)) if pairs else None

    @property
    def model_spearman_undefined(self) -> str | None:
        """Why ``model_spearman`` is None (too few verified trials with a model time, or the model's
        or the measured times all tie), or None where the figure is defined."""
        pairs = self._modelled()
        return spearman_undefined(*zip(*pairs)) if pairs else "no verified trial has a model time"

    def _modelled(self, figure: str = "model_seconds") -> list[tuple[float, float]]:
        return [(t.model[figure], t.seconds) for t in self.trials
                if t.seconds is not None and "model_seconds" in t.model and figure in t.model
                and math.isfinite(t.model[figure])]

    def _model_line(self) -> str:
        rho, modelled = self.model_spearman, f"{len(self._modelled())} verified trials with a model time"
        ranking = self.ranking_spearman
        picked = "" if ranking is None else f"; the prediction each trial was picked by: {ranking:+.3f}"
        fit = self.fit_spearman
        picked += "" if fit is None else f"; the final fit, each trial left out of it: {fit:+.3f}"
        return (f"model vs measured: Spearman {rho:+.3f} over {modelled}{picked}" if rho is not None
                else f"model vs measured: no Spearman figure ({modelled}: {self.model_spearman_undefined})")

    def table(self) -> str:
        """Every trial: status, time (in the unit of the fastest, ``units.time_unit``), rate, % of peak,
        the knobs; the best is marked with *."""
        unit = self.timing.unit
        name, scale = time_unit(self.timing.min)
        lines = [f"{'#':>4}  {'status':8} {'min ' + name:>9} {unit:>8} {'% peak':>6} {'model ' + name:>9}  "
                 f"{'algorithm':13} candidate"]
        for t in self.trials:
            mark = "*" if t.number == self.best_number else " "
            what = describe(t.knobs, self.isa) + (" (log)" if t.logged else "")
            if t.timing is not None and t.status == "ok":
                rate = self.op.flops / t.timing.min / 1e9
                percent = 100 * rate / t.timing.peak_gflops
                figures = f"{in_unit(t.timing.min, scale):>9} {rate:8.1f} {percent:6.1f}"
            else:
                figures = f"{'-':>9} {'-':>8} {'-':>6}"
            model = t.model.get("model_seconds")
            model = f"{in_unit(model, scale) if model is not None else '-':>9}"
            lines.append(f"{t.number:>3}{mark}  {t.status:8} {figures} {model}  {t.algorithm:13} {what}")
            if t.error:
                lines.append(f"{'':14}{t.error}")
        return "\n".join(lines)

    def __str__(self) -> str:
        rate = self.op.flops / self.timing.min / 1e9
        return (f"tuned {self.op!r} on {self.isa}, {self.threads} thread(s): {len(self.trials)} trials "
                f"({len(self.failed)} failed, {self.refused} candidates refused by the schedule) in "
                f"{self.elapsed:.1f} s{'; ' + self.stopped if self.stopped else ''}\n"
                f"best (trial {self.best_number}, {self.algorithm}): min {duration(self.timing.min)}, "
                f"{rate:.1f} {self.timing.unit} = {100 * rate / self.timing.peak_gflops:.1f}% of peak; "
                f"{self.timing}\n"
                f"search: {self.convergence.verdict}\n"
                + self._model_line() + self._algorithm_line())

    def to_dict(self) -> dict[str, Any]:
        from ..schedule_file import to_toml
        best = next(t for t in self.trials if t.number == self.best_number)
        return {"op": repr(self.op), "units": json_units(self.op), "isa": self.isa, "threads": self.threads,
                "elapsed_s": self.elapsed,
                "refused": self.refused, "log": self.log, "stopped": self.stopped,
                "best_trial": self.best_number, "model_spearman": self.model_spearman,
                "ranking_spearman": self.ranking_spearman, "fit_spearman": self.fit_spearman,
                "algorithm": self.algorithm, "skipped": self.skipped, "cut": self.cut,
                "convergence": self.convergence.to_dict(),
                "by_algorithm": {name: {"trial": t.number, "min_s": t.seconds, "times_winner": margin}
                                 for (name, t), margin in zip(self.by_algorithm().items(),
                                                              self.margins().values())},
                "best": {"schedule": to_toml(self.best, algorithm=self.algorithm),
                         **best.to_dict()["timing"]},
                "trials": [t.to_dict() for t in self.trials]}

    def plot(self, path: str | os.PathLike) -> Path:
        """Write ``figure()`` as a PNG to ``path``."""
        path = Path(path)
        self.figure().savefig(path, dpi=120)
        return path

    def figure(self):
        """Each trial's rate (of its minimum time) against the trial number, coloured by its algorithm,
        the best so far and this machine's peak, failed trials marked at 0; the caption says whether
        the search converged (a matplotlib Figure)."""
        from ..plot import CAPTION_WIDTH, WINOGRAD_NOTE, Figure, caption, legend_outside, palette
        unit = self.timing.unit
        fig = Figure(figsize=(8, 4.5), layout="constrained")
        ax = fig.subplots()
        ok = [t for t in self.trials if t.seconds is not None]
        algorithms = list(dict.fromkeys(t.algorithm for t in ok))
        for name, shade in zip(algorithms, palette(len(algorithms))):
            mine = [t for t in ok if t.algorithm == name]
            ax.scatter([t.number for t in mine], [self.op.flops / t.seconds / 1e9 for t in mine], s=18,
                       color=shade, label=name, zorder=3)
        curve = [(t.number, b) for t, b in zip(self.trials, self.best_so_far()) if b is not None]
        ax.step(*zip(*curve), where="post", color="black", linewidth=1, label="best so far")
        failed = [t.number for t in self.failed]
        if failed:
            ax.scatter(failed, [0] * len(failed), marker="x", color="black", label="failed trial")
        peak = self.timing.peak_gflops
        ax.axhline(peak, color="grey", linestyle="--", linewidth=1, label=f"peak {peak:.0f} {unit}")
        ax.set_ylim(0, 1.1 * max([peak] + [b for _, b in curve]))
        ax.set_xlim(0.5, len(self.trials) + 0.5)
        ax.set_xlabel("trial")
        ax.set_ylabel(f"{unit} of the trial's minimum time")
        notes = [f"search: {self.convergence.verdict}"]
        if "winograd" in algorithms:
            notes.append(WINOGRAD_NOTE.removeprefix("* "))
        caption(ax, "\n".join(textwrap.wrap(f"tune {self.op!r}", CAPTION_WIDTH)),
                "higher is faster; where the black line goes flat, more trials stopped paying", *notes)
        legend_outside(ax)
        return fig


def describe(k: dict, isa: str) -> str:
    """A trial's knobs in a few words: a Winograd trial's plan, a GEMM-form preset's block, or a direct
    candidate's as the search rules of ``isa``'s target say."""
    if "plan" in k:
        return k["plan"]
    if "algorithm" in k:
        return f"{k['algorithm']} preset, " + ", ".join(f"{n}={v}" for n, v in k.items() if n != "algorithm")
    return target_of_isa(isa).search_rules().describe(k)
