"""The search loop of ``lo.tune``: pick the next candidate, measure it in isolation, log it.

Candidates come from the search space (``space.candidates``) ranked best first (``rank``).
The first BROAD trials take the best-ranked candidate of each not yet tried register block
shape (pixels x channels), so the search starts broad; later trials
mostly try neighbours of the fastest trial so far (candidates that differ from it in one
knob, the best-ranked of them, picked at random among the first few), and now and then
(``EXPLORE``) the best-ranked untried candidate. The walk is seeded, and depends only on the
measured results, so a rerun with the same log replays the logged trials (without measuring
them) and continues where the earlier run stopped.
"""
from __future__ import annotations

import concurrent.futures
import random
import time
from collections.abc import Sequence
from concurrent.futures import Executor

from ..codegen.isa import resolve_isa
from ..codegen.tiles import check_amx_cpu
from ..machine import machine_profile
from ..ops import Op
from ..progress import Progress
from ..schedule import ScheduleError
from ..schedule_file import schedule_from_toml
from .executor import IsolatedExecutor, TrialTimeout, WorkerDied
from .log import TuningLog
from .rank import Ranker
from .rank import rank as heuristic
from .result import Trial, TuneResult
from .space import Candidate, candidates
from .trial import Outcome, Task, here, run_trial

BROAD = 8                  # the first trials each take a new block shape
EXPLORE = 0.2              # share of later trials that take the best-ranked untried candidate
NEIGHBOURS = 3             # a neighbour is picked at random among the best-ranked this many
GRACE = 10.0               # s a future may take beyond the trial timeout (the executor's own kill)
REASONS = 600              # characters of failure reasons quoted in an error


class TuneError(ValueError):
    """A search that cannot start or found nothing (names the op and why)."""


def _block(candidate: Candidate) -> tuple:
    return candidate.knobs.pixel_block, candidate.knobs.channel_block


def _differs_once(a: Candidate, b: Candidate) -> bool:
    ka, kb = a.knobs.as_dict(), b.knobs.as_dict()
    return sum(ka[name] != kb[name] for name in ka) == 1


class Walk:
    """Which candidate to try next, given the results so far (seeded)."""

    def __init__(self, ranked: Sequence[Candidate], broad: int, seed: int):
        self.ranked, self.broad, self.rng = list(ranked), broad, random.Random(seed)
        self.tried: set[int] = set()
        self.blocks: set[tuple] = set()
        self.results: list[tuple[float, int]] = []      # (seconds, index) of verified trials

    def next(self) -> tuple[int, Candidate] | None:
        """The next (index, candidate) to try, or None when every candidate was tried."""
        untried = [i for i in range(len(self.ranked)) if i not in self.tried]
        if not untried:
            return None
        index = self._pick(untried)
        self.tried.add(index)
        self.blocks.add(_block(self.ranked[index]))
        return index, self.ranked[index]

    def _pick(self, untried: list[int]) -> int:
        fresh = [i for i in untried if _block(self.ranked[i]) not in self.blocks]
        if len(self.tried) < self.broad or not self.results or self.rng.random() < EXPLORE:
            return (fresh or untried)[0]
        best = self.ranked[min(self.results)[1]]
        near = [i for i in untried if _differs_once(self.ranked[i], best)]
        return self.rng.choice(near[:NEIGHBOURS]) if near else untried[0]

    def observe(self, index: int, seconds: float | None) -> None:
        if seconds is not None:
            self.results.append((seconds, index))

    def forget(self, index: int) -> None:
        """A candidate that turned out not to be a trial (refused, or a duplicate schedule)."""
        self.blocks.discard(_block(self.ranked[index]))


def _check(trials: int, seconds: float | None, threads: int, budget: float, timeout: float) -> None:
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be an integer >= 1, got {trials!r}")
    if seconds is not None and not seconds > 0:
        raise ValueError(f"seconds must be > 0 (or None: no time limit), got {seconds!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    if not budget > 0:
        raise ValueError(f"budget must be > 0 seconds, got {budget!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")


def _evaluate(executor: Executor, task: Task, timeout: float) -> Outcome:
    """The outcome of ``task`` on ``executor``; a worker that dies or hangs is a failed trial."""
    future = executor.submit(run_trial, task)
    try:
        return future.result(timeout=timeout + GRACE)
    except WorkerDied as err:
        return here("crashed", str(err))
    except (TrialTimeout, concurrent.futures.TimeoutError) as err:
        future.cancel()
        return here("timeout", str(err) or f"no result within {timeout:g} s")
    except Exception as err:          # whatever the executor (e.g. a cluster) reports: a failed trial
        return here("error", f"{type(err).__name__}: {err}")


def tune(op: Op, trials: int = 64, seconds: float | None = None, threads: int = 1, isa: str = "auto",
         log: str | None = None, executor: Executor | None = None, progress: bool = True, seed: int = 0, *,
         budget: float = 0.2, timeout: float = 300.0, rank: Ranker = heuristic) -> TuneResult:
    """Search the fastest verified schedule of ``op`` within ``trials`` measured candidates and
    ``seconds`` of wall-clock time (None: no limit), for ``threads`` threads on ``isa``.

    Each trial compiles, verifies and times one candidate (``budget`` seconds of timed runs) on
    ``executor`` (default: an ``IsolatedExecutor``, one worker process, ``timeout`` seconds per
    trial), one at a time; crashes, hangs and wrong results are failed trials. With ``log`` (a
    file path) every trial is appended to that SQLite tuning log, and candidates already in it
    for this op, ISA, thread count and machine are taken from it instead of measured again.
    ``rank`` orders the candidates (default: the built-in heuristic); ``progress`` shows a
    progress bar on stderr."""
    _check(trials, seconds, threads, budget, timeout)
    if isa == "amx":
        check_amx_cpu()
    else:
        isa = resolve_isa(isa, integer=op.quant is not None)
    space = candidates(op, isa, threads)
    if not space:
        raise TuneError(f"no candidate schedule for {op!r} with {threads} threads: no outer loop of the "
                        f"register-blocked schedules has {threads} iterations to split over threads"
                        if threads > 1 else f"no candidate schedule for {op!r}")
    machine_profile()                 # measured once here, not by each worker
    walk = Walk(rank(space), BROAD, seed)
    tuning_log = TuningLog(log) if log is not None else None
    known = {t.schedule: t for t in tuning_log.trials(op, isa, threads)} if tuning_log else {}
    own = executor is None
    executor = IsolatedExecutor(timeout) if own else executor
    start, done, refusals, seen = time.perf_counter(), [], [], set()
    bar = Progress(trials, progress)
    stopped = ""
    try:
        while len(done) < trials:
            if seconds is not None and time.perf_counter() - start >= seconds:
                stopped = f"time limit of {seconds:g} s reached"
                break
            picked = walk.next()
            if picked is None:
                stopped = "every candidate was tried"
                break
            index, candidate = picked
            try:
                toml = candidate.toml
            except ScheduleError as err:
                refusals.append(str(err))
                walk.forget(index)
                continue
            if toml in seen:
                walk.forget(index)
                continue
            seen.add(toml)
            trial = _trial(len(done) + 1, candidate, toml, known.get(toml), executor, budget, timeout,
                           threads, tuning_log)
            done.append(trial)
            walk.observe(index, trial.seconds)
            bar.update(len(done), _progress_label(op, done))
    finally:
        if own:
            executor.shutdown()
        if tuning_log is not None:
            tuning_log.close()
    return _result(op, isa, threads, done, refusals, time.perf_counter() - start, log, stopped)


def _trial(number: int, candidate: Candidate, toml: str, logged, executor: Executor, budget: float,
           timeout: float, threads: int, tuning_log: TuningLog | None) -> Trial:
    """Trial ``number``: taken from the log when ``logged``, else measured (and logged)."""
    knobs, model = candidate.knobs.as_dict(), candidate.figures
    if logged is not None:
        return Trial(number, toml, knobs, model, logged.status, logged.timing, logged.error, logged=True)
    task = Task(candidate.op, toml, candidate.isa, threads, budget)
    outcome = _evaluate(executor, task, timeout)
    if tuning_log is not None:
        tuning_log.append(candidate.op, toml, knobs, model, candidate.isa, threads, budget, outcome)
    return Trial(number, toml, knobs, model, outcome.status, outcome.timing, outcome.error)


def _progress_label(op: Op, done: list[Trial]) -> str:
    ok = [t for t in done if t.seconds is not None]
    if not ok:
        return f"{len(done)} trials, none verified yet"
    best = min(ok, key=lambda t: t.seconds)
    rate = op.flops / best.seconds / 1e9
    return f"best {rate:.1f} {best.timing.unit} = {100 * rate / best.timing.peak_gflops:.0f}% of peak"


def _result(op: Op, isa: str, threads: int, done: list[Trial], refusals: list[str], elapsed: float,
            log: str | None, stopped: str) -> TuneResult:
    if not done:
        reasons = "; ".join(dict.fromkeys(refusals))
        raise TuneError(f"no legal candidate for {op!r}: the schedule refused all {len(refusals)} candidates "
                        f"({reasons[:REASONS]})" if refusals else
                        f"no trial of {op!r} ran: {stopped}")
    ok = [t for t in done if t.seconds is not None]
    if not ok:
        errors = "; ".join(dict.fromkeys(f"{t.status}: {t.error}" for t in done))
        raise TuneError(f"all {len(done)} trials of {op!r} failed ({errors[:REASONS]})"
                        + (f"; they are in the tuning log {log}" if log else ""))
    best = min(ok, key=lambda t: t.seconds)
    isa = best.knobs.get("isa", isa)          # an AMX candidate may win a search on the best SIMD ISA
    return TuneResult(op, isa, threads, schedule_from_toml(best.schedule, op), best.timing, done,
                      len(refusals), elapsed, log, stopped, best.number)
