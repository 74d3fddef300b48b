"""One trial: compile a candidate schedule, verify and time it (what a worker process runs).

A ``Task`` travels to the worker (pickled: the op, the schedule as TOML, ISA, threads, timing
budget) and an ``Outcome`` comes back: the ``Timing``, or why there is none, with the worker's
host, machine fingerprint and compiler. Statuses: ``ok`` (verified), ``wrong`` (timed, but the
output differs from the reference), ``error`` (the schedule did not compile or the kernel
raised), and, decided by the search when the worker gives no answer, ``crashed`` and ``timeout``.
"""
from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass

from ..atomic import host_lock
from ..machine import fingerprint, kernel_compiler
from ..measure import Timing, measure
from ..ops import Op
from ..schedule_file import schedule_from_toml
from ..winograd import from_name

STATUSES = ("ok", "wrong", "error", "crashed", "timeout")
MEASURE_LOCK = "loopopt-measure.lock"     # in the temporary directory: one per host


@dataclass(frozen=True)
class Task:
    """What a worker needs to measure one candidate."""

    op: Op
    schedule: str          # TOML (schedule_file.to_toml), or a Winograd algorithm's name
    isa: str
    threads: int
    budget: float          # seconds of timed runs (lo.measure's budget)

    def __getstate__(self) -> dict:
        # a fresh copy of the op: cached isl objects do not pickle
        return {**self.__dict__, "op": self.op.with_quant(self.op.quant)}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)


@dataclass(frozen=True)
class Outcome:
    """The result of a trial: its status, timing (None unless timed) and what went wrong."""

    status: str
    timing: Timing | None
    error: str
    host: str
    fingerprint: str
    compiler: str


def here(status: str, error: str, timing: Timing | None = None) -> Outcome:
    """An outcome recorded on this machine."""
    return Outcome(status, timing, error, socket.gethostname(), fingerprint(), kernel_compiler())


def measuring_alone() -> contextlib.AbstractContextManager[None]:
    """Hold this host's measurement lock (``atomic.host_lock``): trials on one host time their kernels
    one at a time, whichever worker process runs them, while others compile."""
    return host_lock(MEASURE_LOCK)


def run_trial(task: Task) -> Outcome:
    """Compile ``task``'s schedule (or Winograd plan, ``winograd.from_name``), time it with
    ``lo.measure`` (verified against the reference; one measurement at a time on this host) and
    say how it went; a failure of any kind is an
    ``error`` outcome with its reason."""
    try:
        plan = from_name(task.op, task.schedule)
        kernel = (plan or schedule_from_toml(task.schedule, task.op)).compile(task.isa)
        if task.threads > 1:
            kernel.set_threads(task.threads)
        with measuring_alone():
            timing = measure(kernel, budget=task.budget, progress=False)
    except Exception as err:         # the trial's failure is its result: the search goes on
        first = str(err).splitlines()[0] if str(err) else ""
        return here("error", f"{type(err).__name__}: {first}")
    if not timing.verified:
        return here("wrong", f"output differs from the reference (max error {timing.max_error:.3g})", timing)
    return here("ok", "", timing)
