"""Each whole-model runtime in its own worker process, as a user runs one runtime and not two.

A ``Worker`` starts once, prepares its model once (loopopt's ``backend.prepare`` or onnxruntime's
``InferenceSession``, with the thread count given, and onnxruntime's int8 mode: ``loopopt.onnx.peer``)
and then times one ``run`` of its own per request, on the inputs the parent sent it when it started.
``interleave`` runs the workers' rounds in turn (round i: each worker once, in order), so all of them
share the machine's noise, and returns every worker's times and the outputs of the first (warm-up)
round, which the parent compares. In one process, libgomp's spinning threads and onnxruntime's pool
fought over the cores (2-thread runs at 0.03-0.25x); here a runtime's threads only meet the other's
while they wait to sleep, which ``SETTLE`` seconds between two calls let them do.

Under ``Worker.realtime`` the machine's other processes cannot preempt a timed run, except another
process's real-time threads of the same priority (another benchmark under ``chrt -f``): one that holds a
core leaves a two-thread run one core, and its second thread starts only when the first blocks (an AMD
EPYC Zen 3 VM, 2 cores: a worker woke 2.2-2.5 ms late, after its master's whole share; MobileNetV2 fp32
on two threads 8-24 ms by median against 7-10 in the undisturbed rounds). ``interleave`` reads how long
other processes' real-time threads ran during each round (``others_realtime_ns``) and times a round
they ran in again, up to ``RETRIES`` times, so that both runtimes are timed as a user of the machine sees
them; it says how many rounds were so disturbed.
"""
from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from peers import ORT_NO_SPIN

from loopopt.onnx.peer import EXACT, config_entries, session_options

RUNTIMES = ("loopopt", "onnxruntime")
SETTLE = 0.05        # seconds between two workers' calls: longer than libgomp's spin before it sleeps
REALTIME_PRIORITY = 10   # ``Worker.realtime``'s SCHED_FIFO priority
RETRIES = 3          # a round another process's real-time threads ran in is timed again at most so often
WARM_RUNS = 2        # untimed runs of each worker after its warm-up round: loopopt's plan shares its buffers
                     # after its first run and runs its steps one by one in the next two (``plan.Plan``: two
                     # runs in the shared memory show the repeats), so its first timed run would be its second
                     # or third, 1.1-1.3x a later one (ResNet-50 int8, AMD EPYC Zen 3)
REALTIME_POLICIES = (os.SCHED_FIFO, os.SCHED_RR)
SCHEDSTAT = "/proc/self/schedstat"     # where Linux says how long a thread ran
KERNEL_THREAD = 0x00200000    # PF_KTHREAD in a thread's flags (/proc/.../stat): the kernel's own threads


@dataclass(frozen=True)
class Contender:
    """What one worker runs: ``runtime`` (one of ``RUNTIMES``) on the model at ``path`` with ``threads``
    threads; for loopopt, ``log`` and ``tune`` as ``backend.prepare`` takes them and ``share``: whether its
    plan shares its steps' buffers by liveness (``Plan.share``; False: each its own); ``env``: environment
    variables set in its process only (e.g. ``OMP_WAIT_POLICY``); for onnxruntime, ``ort_int8``: its int8
    mode (``loopopt.onnx.peer.INT8_MODES``), and ``ort_spinning``: whether its intra-op threads spin
    after a call (its default; False: ``peers.ORT_NO_SPIN``)."""

    name: str
    runtime: str
    path: Path
    threads: int
    log: str | None = None
    tune: int = 0
    env: dict[str, str] = field(default_factory=dict)
    ort_int8: str = EXACT
    ort_spinning: bool = True
    share: bool = True

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise ValueError(f"runtime {self.runtime!r} is not known; one of {', '.join(RUNTIMES)}")
        config_entries(self.ort_int8)        # an unknown int8 mode is refused here, not in the worker


def realtime_threads(pid: int | str = "self", priority: int = REALTIME_PRIORITY) -> None:
    """Every thread of process ``pid`` (and those it starts later) under ``SCHED_FIFO`` at ``priority``
    (root on Linux): the machine's other work no longer preempts its timed runs (it keeps the 5% of the
    CPU that the kernel's real-time throttling leaves). PermissionError if not allowed."""
    for thread in os.listdir(f"/proc/{pid}/task"):
        os.sched_setscheduler(int(thread), os.SCHED_FIFO, os.sched_param(priority))


def _prepared(contender: Contender) -> tuple[Callable[[dict], list[np.ndarray]], list[str]]:
    """The contender's run (inputs -> outputs) and the nodes it leaves to onnx.reference."""
    if contender.runtime == "onnxruntime":
        import onnxruntime
        options = session_options(contender.threads, contender.ort_int8)
        if not contender.ort_spinning:
            options.add_session_config_entry(*ORT_NO_SPIN)
        session = onnxruntime.InferenceSession(str(contender.path), options,
                                               providers=["CPUExecutionProvider"])
        return (lambda inputs: session.run(None, inputs)), []
    from loopopt.onnx import backend
    rep = backend.prepare(str(contender.path), strict=True, threads=contender.threads, log=contender.log,
                          tune=contender.tune)
    rep.plan.share = contender.share
    fallbacks = [f"{step.node} ({step.op_type}: {step.reason})" for step in rep.fallbacks()]
    return rep.run, fallbacks


def _serve(connection: Any, contender: Contender) -> None:
    """The worker process: take the inputs, prepare, say so, then answer each request with one timed run."""
    inputs = connection.recv()
    try:
        start = time.perf_counter()
        run, fallbacks = _prepared(contender)
        connection.send(("ready", time.perf_counter() - start, fallbacks))
    except Exception as error:  # noqa: BLE001  (the parent raises it with the contender named)
        connection.send(("failed", f"{type(error).__name__}: {error}", []))
        return
    while (request := connection.recv()) is not None:
        start = time.perf_counter()
        outputs = run(inputs)
        elapsed = time.perf_counter() - start
        connection.send((elapsed, [np.asarray(o) for o in outputs] if request == "outputs" else None))


class Worker:
    """One contender in its own (spawned) process, prepared once: ``prepare_s``, ``fallbacks``, and
    ``run(outputs=False) -> (seconds, outputs or None)``. Close it (or use ``with``) to end the process."""

    def __init__(self, contender: Contender, inputs: dict[str, np.ndarray]):
        self.contender = contender
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        saved = {name: os.environ.get(name) for name in contender.env}
        os.environ.update(contender.env)          # the child starts with the parent's environment
        try:
            self._process = context.Process(target=_serve, args=(child, contender), daemon=True)
            self._process.start()
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name)
                else:
                    os.environ[name] = value
        child.close()
        try:   # through the connection, not as an argument of the process: spawn writes its arguments
            self._connection.send(inputs)     # while it holds the pipe's other end, so a worker that ends
        except BrokenPipeError:               # before reading large ones would leave start() waiting
            pass                              # the worker ended: _answer says so
        status, self.prepare_s, self.fallbacks = self._answer()
        if status == "failed":
            self.close()
            raise RuntimeError(f"{contender.name} failed to prepare {contender.path.name}: {self.prepare_s}")

    @property
    def pid(self) -> int | None:
        """The worker process's id."""
        return self._process.pid

    def realtime(self, priority: int = REALTIME_PRIORITY) -> None:
        """Every thread of the worker (and those it starts later) under ``SCHED_FIFO`` at ``priority``
        (``realtime_threads``)."""
        realtime_threads(self.pid, priority)

    def run(self, outputs: bool = False) -> tuple[float, list[np.ndarray] | None]:
        """Seconds of one run in the worker (and its outputs if asked)."""
        self._connection.send("outputs" if outputs else "run")
        return self._answer()

    def _answer(self) -> Any:
        """The worker's next message; RuntimeError naming it if its process ended instead."""
        try:
            return self._connection.recv()
        except EOFError:
            self._process.join(timeout=30)
            raise RuntimeError(f"the {self.contender.name} worker on {self.contender.path.name} ended "
                               f"(exit code {self._process.exitcode})") from None

    def close(self) -> None:
        if self._process.is_alive():
            self._connection.send(None)
            self._process.join(timeout=30)
        self._connection.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Rounds(NamedTuple):
    """What ``interleave`` timed: each worker's seconds, the outputs of its warm-up round, how many timings
    of a round were discarded because another process's real-time threads ran in it (``disturbed``), and
    how many of the rounds kept were still so after ``RETRIES`` retries (``kept_disturbed``); both None
    where /proc cannot say."""

    times: list[list[float]]
    outputs: list[list[np.ndarray]]
    disturbed: int | None
    kept_disturbed: int | None


def others_realtime_ns(exclude: Collection[int]) -> int | None:
    """Nanoseconds that the real-time threads (SCHED_FIFO, SCHED_RR) of the machine's processes other than
    ``exclude`` (pids) have run so far, the kernel's own threads left out; None where /proc has no
    scheduler statistics (not Linux)."""
    if not os.path.exists(SCHEDSTAT):
        return None
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) in exclude:
            continue
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                task = Path(f"/proc/{pid}/task/{tid}")
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()    # after the command name
                if int(fields[38]) in REALTIME_POLICIES and not int(fields[6]) & KERNEL_THREAD:
                    total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue                          # the process or thread ended meanwhile
    return total


def interleave(workers: Sequence[Worker], rounds: int) -> Rounds:
    """Each worker's seconds over ``rounds`` rounds (round i runs every worker once, in order, ``SETTLE``
    seconds apart), after one warm-up round whose outputs are returned, one list per worker, and
    ``WARM_RUNS`` untimed rounds. A round that other processes' real-time threads ran in
    (``others_realtime_ns``) is timed again, up to ``RETRIES`` times (the last one kept)."""
    outputs = []
    for worker in workers:
        outputs.append(worker.run(outputs=True)[1])
        time.sleep(SETTLE)
    for _ in range(WARM_RUNS):
        for worker in workers:
            worker.run()
            time.sleep(SETTLE)
    ours = {os.getpid(), *(worker.pid for worker in workers)}
    times: list[list[float]] = [[] for _ in workers]
    disturbed = kept = 0
    for _ in range(rounds):
        for attempt in range(RETRIES + 1):
            before = others_realtime_ns(ours)
            seconds = []
            for worker in workers:
                seconds.append(worker.run()[0])
                time.sleep(SETTLE)
            after = others_realtime_ns(ours)
            if before is None or after is None or after == before:
                break
            disturbed += attempt < RETRIES
            kept += attempt == RETRIES
        for kept_times, second in zip(times, seconds):
            kept_times.append(second)
    known = os.path.exists(SCHEDSTAT)
    return Rounds(times, outputs, disturbed if known else None, kept if known else None)
