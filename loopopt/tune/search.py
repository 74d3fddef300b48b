"""The search loop of ``lo.tune``: pick the next candidate, measure it in isolation, log it.

Candidates come from the search space of the ISA's target (``Target.search_rules()``), ordered by
the guide (``guide``: the rules' heuristic ``rank`` for all, the kernel model for its shortlist,
refitted to the measured trials as they come in; "best-ranked" below is in that order). The first
BROAD trials take the
best-ranked candidate of each kind not yet tried (ISA and weight format: AMX tiles, a ternary op's
``i2_s``, ``tl1`` and ``tl2``), then of each not yet tried register block shape (pixels x channels,
the dim the pixels run along, the cache block), so the search starts broad; later trials mostly
try neighbours of the fastest trial so far (candidates
that differ from it in one knob, the best-ranked of them, picked at random among the first few),
and now and then (``EXPLORE``) the best-ranked untried candidate. The walk is seeded, and depends
only on the measured results, so a rerun with the same log replays the logged trials (without
measuring them) and continues where the earlier run stopped (with several trials in flight, on a
cluster, the results come in the order they finish, and a rerun may take other paths).

Trials in flight: as many as the executor's slots (``cluster.runner``); each finished trial is
logged and numbered when it finishes, and a trial past its timeout (plus ``GRACE``) is cancelled
and recorded as ``timeout``.
"""
from __future__ import annotations

import concurrent.futures
import os
import random
import time
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from ..machine import fingerprint
from ..ops import Op
from ..progress import Progress
from ..schedule import ScheduleError
from ..schedule_file import to_toml
from ..targets import Target
from ..targets.registry import target as named_target
from ..targets.registry import target_of_isa
from ..targets.search import Candidate, Ranker, SearchRules
from .algorithms import Alternative, alternatives, rebuild, refusals, selected, share
from .cluster import Runner, outcome, runner
from .guide import Guide, shortlist
from .log import TuningLog
from .ranked import RankedResult, UntimedSearchError, ranked_search
from .result import EXHAUSTED, Trial, TuneResult
from .trial import Task, here

BROAD = 8                  # the first trials each take a new block shape
EXPLORE = 0.2              # share of later trials that take the best-ranked untried candidate
NEIGHBOURS = 3             # a neighbour is picked at random among the best-ranked this many
SCORED_NEIGHBOURS = 6      # neighbours of the best trial scored by the kernel model when considered
GRACE = 10.0               # s a future may take beyond the trial timeout (the executor's own kill)
FAR_BEHIND = 4.0           # an algorithm this many times slower than the best so far gets no more trials
REASONS = 600              # characters of failure reasons quoted in an error


class TuneError(ValueError):
    """A search that cannot start or found nothing (names the op and why)."""


KIND = 2                   # the leading fields of a block shape that name its kind: ISA, weight format


def _block(candidate: Candidate) -> tuple:
    """A candidate's block shape: ISA, weight format (None: one byte per weight), pixels, channels, the
    position dim along which the pixels run (None: the default, x86's ``Roles.pixel``) and the cache
    block of the reduction channels (None: a kind without one), which no single-knob step of the
    walk changes (the outer loops change with it)."""
    knobs = candidate.knobs
    fields = knobs.as_dict()
    return (candidate.isa, fields.get("weight_format"), knobs.pixel_block, knobs.channel_block,
            fields.get("pixel"), fields.get("cache_block"))


def _differs_once(a: Candidate, b: Candidate) -> bool:
    """Candidates of one kind (register block or AMX tiles) that differ in exactly one knob."""
    ka, kb = a.knobs.as_dict(), b.knobs.as_dict()
    return ka.keys() == kb.keys() and sum(ka[name] != kb[name] for name in ka) == 1


class Walk:
    """Which candidate to try next, given the results so far (seeded); the order of the candidates
    is the guide's (the refitted kernel model)."""

    def __init__(self, guide: Guide, broad: int, seed: int):
        self.guide, self.broad, self.rng = guide, broad, random.Random(seed)
        self.tried: set[int] = set()
        self.blocks: set[tuple] = set()
        self.results: list[tuple[float, int]] = []      # (seconds, index) of verified trials

    def candidate(self, index: int) -> Candidate:
        return self.guide.candidates[index]

    def next(self) -> tuple[int, Candidate] | None:
        """The next (index, candidate) to try, or None when every candidate was tried."""
        self.guide.score_best(shortlist(len(self.tried)))
        untried = self.guide.order(i for i in range(len(self.guide.candidates)) if i not in self.tried)
        if not untried:
            return None
        index = self._pick(untried)
        self.tried.add(index)
        self.blocks.add(_block(self.candidate(index)))
        return index, self.candidate(index)

    def _pick(self, untried: list[int]) -> int:
        fresh = [i for i in untried if _block(self.candidate(i)) not in self.blocks]
        if len(self.tried) < self.broad or not self.results or self.rng.random() < EXPLORE:
            kinds = {block[:KIND] for block in self.blocks}
            new = [i for i in fresh if _block(self.candidate(i))[:KIND] not in kinds]
            return (new or fresh or untried)[0]
        best = self.candidate(min(self.results)[1])
        near = [i for i in untried if _differs_once(self.candidate(i), best)]
        for index in near[:SCORED_NEIGHBOURS]:
            self.guide.score(index)
        near = self.guide.order(near)
        return self.rng.choice(near[:NEIGHBOURS]) if near else untried[0]

    def observe(self, index: int, seconds: float | None) -> None:
        self.guide.observe(index, seconds)
        if seconds is not None:
            self.results.append((seconds, index))

    def forget(self, index: int) -> None:
        """A candidate that turned out not to be a trial (refused, or a duplicate schedule)."""
        self.blocks.discard(_block(self.candidate(index)))


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


@dataclass(frozen=True)
class _InFlight:
    """A trial submitted and not finished yet."""

    index: int
    candidate: Candidate
    toml: str
    model: dict[str, float]
    deadline: float          # perf_counter time after which the search gives up on it


class _Search:
    """One search's state: the walk, the trials done (numbered as they finish) and those in flight."""

    def __init__(self, op: Op, isa: str, threads: int, budget: float, timeout: float, walk: Walk, run: Runner,
                 tuning_log: TuningLog | None, bar: Progress, start: float, machine: str):
        self.op, self.threads, self.budget, self.timeout, self.start = op, threads, budget, timeout, start
        self.isa, self.machine = isa, machine        # machine: the log's key of where the kernels run
        self.walk, self.run, self.tuning_log, self.bar = walk, run, tuning_log, bar
        self.known = ({t.schedule: t for t in tuning_log.trials(op, isa, threads, machine)} if tuning_log
                      else {})
        self.done: list[Trial] = []
        self.in_flight: dict[Future, _InFlight] = {}
        self.refusals: list[str] = []
        self.seen: set[str] = set()
        self.stopped = ""
        self.candidate_of: dict[int, int] = {}      # trial number -> candidate index (the direct search's)
        self.cut: dict[str, str] = {}              # algorithm -> why its remaining candidates were not tried

    def search(self, trials: int, seconds: float | None) -> None:
        """Start trials and collect them until ``trials`` ended, ``seconds`` passed or none is left."""
        while True:
            self._start(trials, seconds)
            if not self.in_flight:
                return
            self._collect()

    def _start(self, trials: int, seconds: float | None) -> None:
        """Start trials (or take them from the log) while a slot, the trial budget and time are left."""
        while (not self.stopped and len(self.in_flight) < self.run.slots
               and len(self.done) + len(self.in_flight) < trials):
            if seconds is not None and time.perf_counter() - self.start >= seconds:
                self.stopped = f"time limit of {seconds:g} s reached"
                return
            picked = self.walk.next()
            if picked is None:
                self.stopped = EXHAUSTED
                return
            index, candidate = picked
            try:
                toml = to_toml(candidate.schedule)
            except ScheduleError as err:
                self.refusals.append(str(err))
                self.walk.forget(index)
                continue
            if toml in self.seen:
                self.walk.forget(index)
                continue
            self.seen.add(toml)
            model = self.walk.guide.figures(index)
            logged = self.known.get(toml)
            if logged is not None:
                self._record(index, Trial(len(self.done) + 1, toml, candidate.knobs.as_dict(), model,
                                          logged.status, logged.timing, logged.error, logged=True))
                continue
            future = self.run.submit(Task(candidate.op, toml, candidate.isa, self.threads, self.budget),
                                     self.timeout)
            self.in_flight[future] = _InFlight(index, candidate, toml, model,
                                               time.perf_counter() + self.timeout + GRACE)

    def _collect(self) -> None:
        """Wait until a trial in flight ends (or one passes its deadline); log and record those that did."""
        wait = max(0.0, min(t.deadline for t in self.in_flight.values()) - time.perf_counter())
        finished, _ = concurrent.futures.wait(self.in_flight, timeout=wait,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
        now = time.perf_counter()
        for future, trial in list(self.in_flight.items()):
            if future in finished:
                result = outcome(future, self.timeout)
            elif trial.deadline <= now:
                future.cancel()
                result = here("timeout", f"no result within {self.timeout + GRACE:g} s; the search gave up")
            else:
                continue
            result = replace(result, fingerprint=self.machine)
            del self.in_flight[future]
            knobs, candidate = trial.candidate.knobs.as_dict(), trial.candidate
            if self.tuning_log is not None:
                self.tuning_log.append(candidate.op, trial.toml, knobs, trial.model, candidate.isa,
                                       self.threads, self.budget, result)
            self._record(trial.index, Trial(len(self.done) + 1, trial.toml, knobs, trial.model, result.status,
                                            result.timing, result.error))

    def _record(self, index: int, trial: Trial) -> None:
        trial = replace(trial, elapsed=time.perf_counter() - self.start)
        self.done.append(trial)
        self.candidate_of[trial.number] = index
        self.walk.observe(index, trial.seconds)
        self.bar.update(len(self.done), _progress_label(self.op, self.done))

    def alternative_trials(self, trials: list[Alternative], seconds: float | None) -> None:
        """Measure each candidate of another algorithm than ``direct`` as one trial, one after the
        other (taken from the log when it has them), until ``seconds``; an algorithm whose fastest
        trial is ``FAR_BEHIND`` times slower than the best so far gets no more (``cut`` says so, and
        its trials go to the direct search)."""
        left = {a.algorithm: sum(t.algorithm == a.algorithm for t in trials) for a in trials}
        for alternative in trials:
            if seconds is not None and time.perf_counter() - self.start >= seconds:
                self.stopped = f"time limit of {seconds:g} s reached"
                return
            name = alternative.algorithm
            behind = self._behind(name)
            if behind:
                given = "went to the direct search" if self.walk.guide.candidates else "were not tried"
                self.cut.setdefault(name, f"{behind}; its other {left[name]} candidate(s) {given}")
                continue
            left[name] -= 1
            self.seen.add(alternative.schedule)
            logged = self.known.get(alternative.schedule)
            if logged is None:
                result = outcome(self.run.submit(Task(self.op, alternative.schedule, self.isa, self.threads,
                                                      self.budget), self.timeout), self.timeout)
                result = replace(result, fingerprint=self.machine)
                if self.tuning_log is not None:
                    self.tuning_log.append(self.op, alternative.schedule, alternative.knobs, {}, self.isa,
                                           self.threads, self.budget, result)
                status, timing, error = result.status, result.timing, result.error
            else:
                status, timing, error = logged.status, logged.timing, logged.error
            self.done.append(Trial(len(self.done) + 1, alternative.schedule, alternative.knobs, {}, status,
                                   timing, error, logged=logged is not None,
                                   elapsed=time.perf_counter() - self.start))
            self.bar.update(len(self.done), _progress_label(self.op, self.done))

    def _behind(self, algorithm: str) -> str:
        """How far ``algorithm``'s fastest trial is behind the best trial so far, where it is at least
        ``FAR_BEHIND`` times slower ("" otherwise, or before both have a verified trial)."""
        ok = [t for t in self.done if t.seconds is not None]
        own = [t for t in ok if t.algorithm == algorithm]
        if not own:
            return ""
        best, fastest = min(ok, key=lambda t: t.seconds), min(own, key=lambda t: t.seconds)
        ratio = fastest.seconds / best.seconds
        if ratio < FAR_BEHIND:
            return ""
        return (f"its fastest (trial {fastest.number}) was {ratio:.1f}x slower than the best so far "
                f"({best.algorithm}, trial {best.number})")

    def held_out(self) -> list[Trial]:
        """The trials done, each verified trial of the direct search with the final fit's prediction of
        it from the other trials (``held_out_seconds``: ``Guide.held_out``)."""
        held = self.walk.guide.held_out()
        return [replace(t, model={**t.model, "held_out_seconds": held[self.candidate_of[t.number]]})
                if self.candidate_of.get(t.number) in held else t for t in self.done]

    def abandon(self) -> None:
        """Cancel the trials in flight (the search ends early: an error or an interrupt)."""
        for future in self.in_flight:
            future.cancel()


def tune(op: Op, trials: int = 64, seconds: float | None = None, threads: int = 1, isa: str = "auto",
         log: str | None = None, executor: Any = None, progress: bool = True, seed: int = 0, *,
         budget: float = 0.2, timeout: float = 300.0, rank: Ranker | None = None,
         algorithms: str | tuple[str, ...] = "auto", target: str | Target | None = None
         ) -> TuneResult | RankedResult:
    """Search the fastest verified schedule of ``op`` within ``trials`` measured candidates and
    ``seconds`` of wall-clock time (None: no limit), for ``threads`` threads on ``isa``.

    Each trial compiles, verifies and times one candidate (``budget`` seconds of timed runs) in a
    worker process with ``timeout`` seconds; crashes, hangs and wrong results are failed trials.
    ``executor``: None (one worker process of this machine, one trial at a time), any
    ``concurrent.futures.Executor`` or a ``dask.distributed.Client`` (trials in flight on its
    workers, one timing at a time per host, recorded as they finish; see ``cluster``). With
    ``log`` (a file path) every trial is appended to that SQLite tuning log, and candidates
    already in it for this op, ISA, thread count and machine are taken from it instead of
    measured again. ``rank`` orders the candidates first (None: the target's heuristic,
    ``SearchRules.rank``), the kernel model reorders its best, refitted to the measured trials
    (``guide``); ``progress`` shows a progress bar on stderr. ``algorithms``: ``"auto"`` (every one
    that applies) or a subset of
    ``"direct"``, ``"implicit_gemm"``, ``"im2col"``, ``"winograd"`` (``tune.algorithms``): the other
    algorithms' few candidates are measured first, sharing ``trials`` with the direct search
    (``algorithms.share``); ``skipped`` says why one was not tried, and the result which algorithm
    won and by how much (``TuneResult.algorithm``, ``by_algorithm``). ``target``: search that target's
    kernels (``"cuda"``: ``isa`` is then its variant, ``"auto"`` the device's); None: the target ``isa``
    belongs to. A target whose kernels run on a device (a GPU) says first, in one line, when there is
    none here; its candidates compile in parallel (a worker process per core) and are timed one at a
    time, and the log keys its trials by the device (``Target.fingerprint``). A target that cannot time
    its kernels here (``Target.timing_refusal``: NEON under an emulator) gets a ``RankedResult``
    instead (``tune/ranked.py``): its candidates ranked by the kernel model, the best ``min(trials, 4)``
    built and verified, nothing timed and nothing logged."""
    _check(trials, seconds, threads, budget, timeout)
    wanted = selected(algorithms)
    auto = isa == "auto"                      # the best ISA: the target's other kernels compete (AMX tiles)
    chosen = target_of_isa(isa) if target is None else named_target(target)
    chosen.require_device()
    isa = chosen.resolve_isa(isa, integer=op.quant is not None)
    rules = chosen.search_rules()
    not_timed = chosen.timing_refusal()
    if not_timed is not None:
        return _untimed(op, isa, threads, chosen, rules, auto, trials, not_timed, log, wanted)
    why = refusals(op, wanted, isa, threads)
    skipped = {name: reason for name, reason in why.items() if reason}
    pool = {name: alternatives(op, name, isa) for name in wanted if name != "direct" and not why[name]}
    given = share(trials, {name: len(found) for name, found in pool.items()}, "direct" in wanted)
    for name, count in given.items():
        if not count:
            skipped[name] = f"no trial left of the {trials} trials (the direct search keeps at least half)"
    if "direct" not in wanted and not any(given.values()):
        raise TuneError(f"none of the algorithms {wanted} can be tried on {op!r}: "
                        + "; ".join(f"{name}: {why}" for name, why in skipped.items()))
    space = rules.candidates(op, isa, threads, auto) if "direct" in wanted else []
    if "direct" in wanted and not space:
        raise TuneError(f"no candidate schedule for {op!r} with {threads} threads: no outer loop of the "
                        f"register-blocked schedules has {threads} iterations to split over threads"
                        if threads > 1 else f"no candidate schedule for {op!r}")
    start = time.perf_counter()
    chosen.prepare_timing()           # the peaks measured once here, not by each worker
    walk = Walk(Guide((rank or rules.rank)(space), rules, threads=threads), BROAD, seed)
    run = runner(executor, timeout, (os.cpu_count() or 1) if chosen.has_device else 1)
    tuning_log = None
    try:
        tuning_log = TuningLog(log) if log is not None else None
        state = _Search(op, isa, threads, budget, timeout, walk, run, tuning_log, Progress(trials, progress),
                        start, chosen.fingerprint() or fingerprint())
        try:
            if space and pool:     # the direct search's best-ranked candidate, the others' yardstick
                state.search(1, seconds)
            state.alternative_trials(_in_turn([found[:given[a]] for a, found in pool.items()]), seconds)
            if space:
                state.search(trials, seconds)
        finally:
            state.abandon()
    finally:
        if run.own:            # its workers stop now: a trial still in flight was abandoned
            run.executor.shutdown(cancel_futures=True)
        if tuning_log is not None:
            tuning_log.close()
    return _result(op, isa, threads, state.held_out(), state.refusals, time.perf_counter() - start, log,
                   state.stopped, skipped, state.cut)


def _untimed(op: Op, isa: str, threads: int, chosen: Target, rules: SearchRules, auto: bool, trials: int,
             not_timed: str, log: str | None, wanted: tuple[str, ...]) -> RankedResult:
    """The search of a target that cannot time kernels here: ranked by the kernel model, the best
    verified, nothing timed (``ranked.py``); the direct search only."""
    if "direct" not in wanted:
        raise TuneError(f"the algorithms {wanted} are not searched where nothing is timed ({not_timed}): "
                        f"ask for 'direct'")
    space = rules.candidates(op, isa, threads, auto)
    if not space:
        raise TuneError(f"no candidate schedule for {op!r} with {threads} threads on {isa}")
    why = refusals(op, wanted, isa, threads)
    skipped = {name: why[name] or "not searched where nothing is timed"
               for name in wanted if name != "direct"}
    try:
        return ranked_search(op, isa, threads, chosen, rules, space, trials, not_timed, log, skipped)
    except UntimedSearchError as err:
        raise TuneError(str(err)) from None


def _in_turn(lists: list[list[Alternative]]) -> list[Alternative]:
    """The first candidate of each algorithm, then the second of each, ... (the presets first, so every
    algorithm is measured before any gets a second trial)."""
    deepest = max(map(len, lists), default=0)
    return [row[depth] for depth in range(deepest) for row in lists if depth < len(row)]


def _progress_label(op: Op, done: list[Trial]) -> str:
    ok = [t for t in done if t.seconds is not None]
    if not ok:
        return f"{len(done)} trials, none verified yet"
    best = min(ok, key=lambda t: t.seconds)
    rate = op.flops / best.seconds / 1e9
    return f"best {rate:.1f} {best.timing.unit} = {100 * rate / best.timing.peak_gflops:.0f}% of peak"


def _result(op: Op, isa: str, threads: int, done: list[Trial], refusals: list[str], elapsed: float,
            log: str | None, stopped: str, skipped: dict[str, str], cut: dict[str, str]) -> TuneResult:
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
    return TuneResult(op, isa, threads, rebuild(op, best.schedule, best.knobs, "trial"), best.timing, done,
                      len(refusals), elapsed, log, stopped, best.number, skipped, cut)
