"""The kernels that run lowered nodes: a schedule per op compiled once per op signature (shape,
options, quantization). The schedule is the tuning log's best when a log has one, else the default:
the tune search's first choice (``tune.choice.first_choice``: the candidate the search ranks first,
without measuring), or ``dataflows.output_stationary`` for an op whose search space has no
candidate (e.g. no outer loop to split over the threads); where the first choice would store the
activations in another layout than the one they arrive in, the best-ranked candidate that reads them
as they arrive (``tune.choice.first_reading``); the source says which. A kernel whose epilogue adds a
residual (a fused shortcut Add) takes the choices ranked as kernels that read one (``residual=True``).
With ``tune_trials`` the cache tunes each distinct op first (``lo.tune``, its trials appended to the
log, so a later prepare with the same log measures nothing again and one without ``tune`` reads the
results), one line on stderr per op."""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..dataflows import output_stationary
from ..kernel import Kernel
from ..ops import Op
from ..schedule import Schedule
from ..schedule_file import SCHEDULE_ALGORITHMS
from ..tune import RankedResult, TuneError, best_trial, tune
from ..tune.choice import arriving_layouts, first_choice, first_reading
from ..tune.log import logged_count, signature
from ..tune.ranked import UntimedSearchError
from ..tune.result import describe

if TYPE_CHECKING:
    from .epilogues import Chain

DEFAULT = "default"                                 # the start of a default schedule's source
RANKED = f"{DEFAULT} first choice of the search"    # + its knobs
READING = f"{DEFAULT} best-ranked candidate reading"  # + the layout, its rank and knobs
FALLBACK = f"{DEFAULT} output_stationary"            # + why the search had no candidate


def stationary_schedule(op: Op, threads: int = 1) -> Schedule:
    """An output block (8 positions x 16 channels, clamped to the op) in vector registers across
    the whole reduction, channels-last (``dataflows.output_stationary``); with ``threads > 1`` the
    outermost loop of extent > 1, where its extent is >= ``threads``, it carries no reduction and it is
    not the vectorized one (an op of one output block: its channels), runs in parallel."""
    schedule = output_stationary(op)
    if threads > 1:
        for name in schedule.loop_names:
            loop = schedule.loop(name)
            if loop.extent > 1:
                if loop.extent >= threads and not schedule.dims_of(name) & op.reduction_dims \
                        and not loop.vectorized:
                    schedule = schedule.parallel(name)
                break
    return schedule


def logged_best(op: Op, log: str | os.PathLike, threads: int = 1,
                isa: str | None = None) -> tuple[Schedule, str] | None:
    """The fastest verified schedule of ``op`` in the tuning log on this machine and ``threads`` (and
    ``isa`` if given), with the ISA it was measured on (an AMX trial's schedule must be compiled for
    AMX); None if none. A loop nest only (``SCHEDULE_ALGORITHMS``): a node's kernel is one schedule,
    whose reuse and traffic the report analyses; a Winograd plan in the log is not taken."""
    best = best_trial(op, log=log, threads=threads, isa=isa, algorithms=SCHEDULE_ALGORITHMS)
    return None if best is None else (best.to_schedule(op, f"tuning log {os.fspath(log)}"), best.isa)


def default_schedule(op: Op, threads: int = 1, isa: str = "auto", arrives: str | None = None,
                     operands: Mapping[str, str] | None = None,
                     residual: bool = False) -> tuple[Schedule, str, str]:
    """The default schedule of ``op`` (the search's first choice, else ``stationary_schedule``), its
    source (which one, with the chosen knobs) and the ISA to compile it for (an AMX choice: x86's tile
    variant). ``arrives``: the layout (a format tag) the first input arrives in; ``operands``: the
    layouts other inputs given with each call arrive in (an attention's second operand), by name; where
    the first choice stores them otherwise, the best-ranked candidate that stores them so
    (``first_reading``), if any. ``residual``: chosen as a kernel that adds a residual (the caller adds
    the step)."""
    first = {op.inputs[0]: arrives} if arrives is not None else {}
    wanted = arriving_layouts(op, first | dict(operands or {}))
    chosen = first_choice(op, isa, threads, residual)
    if chosen is None:
        return (stationary_schedule(op, threads), f"{FALLBACK} (the search space has no candidate for "
                f"{threads} thread(s))", isa)
    reading = None
    if any(chosen.schedule.layout_of(tensor).tag != tag for tensor, tag in wanted.items()):
        reading = first_reading(op, wanted, isa, threads, residual)
    if reading is not None:
        candidate, rank = reading
        layouts = (f"{arrives} as its input arrives" if not operands else
                   ", ".join(f"{tensor} {tag}" for tensor, tag in wanted.items()) + " as they arrive")
        return (candidate.schedule, f"{READING} {layouts} (rank {rank}): "
                f"{describe(candidate.knobs.as_dict(), candidate.isa)}", candidate.isa)
    return chosen.schedule, f"{RANKED}: {describe(chosen.knobs.as_dict(), chosen.isa)}", chosen.isa


@dataclass(frozen=True)
class Compiled:
    """A kernel, the schedule it was compiled from, and where that schedule came from."""

    kernel: Kernel
    schedule: Schedule
    source: str     # "tuning log FILE", or RANKED or FALLBACK and what they chose


class KernelCache:
    """Compiled kernels by op signature, for one backend rep (``log``: a tuning log to take the
    best schedules from; ``threads``: the thread count they are chosen and built for;
    ``tune_trials``: tune each distinct op with that many trials first, into ``log``)."""

    def __init__(self, log: str | os.PathLike | None = None, threads: int = 1, isa: str = "auto",
                 tune_trials: int = 0):
        if isinstance(tune_trials, bool) or not isinstance(tune_trials, int) or tune_trials < 0:
            raise ValueError(f"tune must be a number of trials per op (an integer >= 0), got {tune_trials!r}")
        if tune_trials and log is None:
            raise ValueError(f"tune={tune_trials} needs log=: the tuning log that keeps the trials (a later "
                             "prepare with the same log reads them)")
        self.log, self.threads, self.isa, self.tune_trials = log, threads, isa, tune_trials
        self._compiled: dict[tuple[str, str], Compiled] = {}
        self._tuned: set[str] = set()       # signatures of the ops tuned (or found in the log) by this cache

    def __len__(self) -> int:
        """How many kernels have been compiled."""
        return len(self._compiled)

    def schedule(self, op: Op, arrives: str | None = None,
                 residual: bool = False) -> tuple[Schedule, str, str]:
        """The schedule ``op`` runs with, its source and the ISA to compile it for (``arrives``: the
        layout its first input arrives in; ``residual``: its kernel adds one; see ``default_schedule``)."""
        if self.tune_trials and signature(op) not in self._tuned:
            self._tune(op)
        isa = None if self.isa == "auto" else self.isa
        best = logged_best(op, self.log, self.threads, isa) if self.log is not None else None
        if best is not None:
            return best[0], f"tuning log {os.fspath(self.log)}", best[1]
        return default_schedule(op, self.threads, self.isa, arrives, residual=residual)

    def _tune(self, op: Op) -> None:
        """``lo.tune`` of ``op`` (loop nests only: what a node's kernel runs) into the log, and its line on
        stderr; an op with ``tune_trials`` or more trials in the log already is not searched again (the
        search would only replay them, after ranking its whole space); a search that finds no schedule
        says why, and the op keeps its default."""
        self._tuned.add(signature(op))
        start = time.perf_counter()
        logged = logged_count(op, self.log, self.threads, None if self.isa == "auto" else self.isa,
                              SCHEDULE_ALGORITHMS)
        said = (f"{logged} trials already in the log, nothing measured" if logged >= self.tune_trials
                else self._search(op))
        print(f"tune op {len(self._tuned)} {op!r}: {said} ({time.perf_counter() - start:.0f} s)",
              file=sys.stderr, flush=True)

    def _search(self, op: Op) -> str:
        """Tune ``op`` into the log; what came of it, in words."""
        try:
            result = tune(op, trials=self.tune_trials, threads=self.threads, isa=self.isa,
                          log=os.fspath(self.log), progress=False, algorithms=SCHEDULE_ALGORITHMS)
        except (TuneError, UntimedSearchError) as error:
            return f"no schedule found, the default runs it: {error}"
        if isinstance(result, RankedResult):      # a target that cannot time here: nothing logged
            return f"not timed here ({result.not_timed}), the default runs it"
        return f"best {result.timing.min * 1e3:.3f} ms on {result.isa} of {len(result.trials)} trials"

    def get(self, op: Op, arrives: str | None = None, chain: Chain | None = None) -> Compiled:
        """The compiled kernel of ``op`` whose first input arrives in the layout ``arrives`` (None: the
        logical one), with the epilogue of ``chain`` if given (``epilogues``), compiled on the first
        request for its signature, schedule and epilogue."""
        schedule, source, isa = self.schedule(op, arrives, chain is not None and bool(chain.residual))
        if chain is not None:
            schedule = chain.apply(schedule)
        key = (signature(op), source, str(chain.epilogue) if chain is not None else "")
        if key not in self._compiled:
            kernel = schedule.compile(isa)
            kernel.hold_weights = True     # the model's weights are constants: packed on the first run, kept
            if schedule.parallel_loop is not None:
                kernel.set_threads(self.threads)
            self._compiled[key] = Compiled(kernel, schedule, source)
        return self._compiled[key]


@dataclass(frozen=True)
class LoweredNode:
    """How one compute node ran: its loopopt op and schedule, or the reason it ran on the reference."""

    node: str
    op_type: str
    op: Op | None = None
    schedule: Schedule | None = None
    source: str = ""          # where the schedule came from
    isa: str = ""             # what the kernel was compiled for
    note: str = ""            # what the importer does around the kernel
    reason: str = ""          # why the node ran on onnx.reference (non-strict mode only)
    absorbed: tuple[str, ...] = ()   # a fused QDQ group: the original nodes it stands for

    @property
    def on_kernel(self) -> bool:
        return self.op is not None

    def __str__(self) -> str:
        if not self.on_kernel:
            return f"{self.node} ({self.op_type}): onnx.reference, not supported: {self.reason}"
        extra = f"; {self.note}" if self.note else ""
        absorbed = f"; absorbs {', '.join(self.absorbed)}" if self.absorbed else ""
        return f"{self.node} ({self.op_type}): {self.op!r}, {self.source} schedule{extra}{absorbed}"
