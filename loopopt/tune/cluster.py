"""Where trials run: this machine's isolated workers, any ``concurrent.futures.Executor``, or a Dask
cluster.

``runner(executor, timeout)`` turns what ``lo.tune(executor=...)`` was given into a ``Runner``:
the executor to submit to, the function it runs per trial and how many trials to keep in flight.

* None: an ``IsolatedExecutor(timeout)`` of this process (one worker process, one trial at a time; a
  search of a device target's kernels: one per core, each compiling, one timing at a time).
* An ``IsolatedExecutor``: ``run_trial`` in its worker processes, ``max_workers`` trials in flight.
* A ``dask.distributed.Client`` (recognised by its ``get_executor`` and ``nthreads`` methods, so
  Dask is not imported here): its ``concurrent.futures`` view, ``client.get_executor(pure=False)``
  (every trial a new task, never a cached result), one trial in flight per worker thread.
* Any other ``concurrent.futures.Executor``: its ``_max_workers`` trials in flight (the standard
  pools' attribute; 1 if it has none).

On a Dask worker or another executor's worker, a trial runs ``run_isolated``: the trial in a
child process of that worker thread with the timeout (a crashing or hanging kernel leaves the cluster
worker alive, and the outcome is ``crashed`` or ``timeout``, recorded on that host). Compiles
run in parallel; timings take the host's measurement lock (``trial.measuring_alone``), so each
host times one kernel at a time. A cluster worker that dies itself comes back as Dask's
``KilledWorker`` (after the scheduler's ``allowed-failures`` retries): a ``crashed`` trial.

``dask_client(address)`` connects to a scheduler for ``loopopt tune --scheduler ADDRESS``
(``"local"``: a ``LocalCluster`` of worker processes on this machine), within a timeout.
"""
from __future__ import annotations

import concurrent.futures
import difflib
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from .executor import IsolatedExecutor, TrialTimeout, WorkerDied, WorkerError
from .trial import Outcome, Task, here, run_trial

LOCAL = "local"               # the scheduler address of a LocalCluster on this machine
CONNECT_TIMEOUT = 10.0        # s to reach a scheduler


class SchedulerError(ValueError):
    """A Dask scheduler that cannot be used: Dask is not installed, or the address is unreachable."""


@dataclass(frozen=True)
class Runner:
    """An executor to submit trials to, what to submit, and how many trials to keep in flight."""

    executor: Executor
    call: Callable[..., Outcome]
    slots: int
    own: bool              # created for this search: shut down at its end

    def submit(self, task: Task, timeout: float) -> Future:
        args = (task,) if self.call is run_trial else (task, timeout)
        return self.executor.submit(self.call, *args)


def _is_dask_client(executor: Any) -> bool:
    return callable(getattr(executor, "get_executor", None)) and callable(getattr(executor, "nthreads", None))


def runner(executor: Any, timeout: float, workers: int = 1) -> Runner:
    """The ``Runner`` of what ``lo.tune(executor=...)`` was given (module docstring; None: ``workers``
    worker processes); a TypeError names anything else."""
    if executor is None:
        return Runner(IsolatedExecutor(timeout, workers), run_trial, workers, own=True)
    if isinstance(executor, IsolatedExecutor):
        return Runner(executor, run_trial, executor.max_workers, own=False)
    if _is_dask_client(executor):
        threads = sum(executor.nthreads().values())
        return Runner(executor.get_executor(pure=False), run_isolated, max(1, threads), own=False)
    if isinstance(executor, Executor):
        return Runner(executor, run_isolated, max(1, getattr(executor, "_max_workers", 1)), own=False)
    raise TypeError(f"executor must be a concurrent.futures.Executor or a dask.distributed.Client, got "
                    f"{type(executor).__name__}")


_local = threading.local()


def _isolated(timeout: float) -> IsolatedExecutor:
    """This thread's isolated executor for trials with ``timeout``: a worker thread runs its trials
    one after another in its own child process, which stays until this process ends."""
    executors = _local.__dict__.setdefault("executors", {})
    if timeout not in executors:
        executors[timeout] = IsolatedExecutor(timeout)
    return executors[timeout]


def run_isolated(task: Task, timeout: float) -> Outcome:
    """``run_trial(task)`` in a child process of this (worker) process, with ``timeout``."""
    return outcome(_isolated(timeout).submit(run_trial, task), timeout)


def _host(address: str) -> str:
    return (urlsplit(address).hostname or address) if "://" in address else address


def failed(error: BaseException, timeout: float) -> Outcome:
    """The outcome of a trial whose future failed with ``error`` (no result came back)."""
    if isinstance(error, WorkerDied):
        return here("crashed", str(error))
    if isinstance(error, (TrialTimeout, concurrent.futures.TimeoutError)):
        return here("timeout", str(error) or f"no result within {timeout:g} s")
    if isinstance(error, WorkerError):
        return here("error", str(error))
    worker = getattr(error, "last_worker", None)          # Dask's KilledWorker
    if worker is not None:
        address = getattr(worker, "address", str(worker))
        return replace(here("crashed", f"the cluster worker {address} died while running the trial "
                                       f"({type(error).__name__})"), host=_host(address))
    return here("error", f"{type(error).__name__}: {error}")


def outcome(future: Future, timeout: float, wait: float | None = None) -> Outcome:
    """The outcome of a trial's ``future`` (waiting ``wait`` seconds at most; None: until done)."""
    try:
        return future.result(timeout=wait)
    except concurrent.futures.CancelledError:
        return here("timeout", f"no result within {timeout:g} s; the trial was cancelled")
    except Exception as error:        # whatever the executor (e.g. a cluster) reports: a failed trial
        return failed(error, timeout)


def _check_address(address: str) -> None:
    """Refuse a scheduler address without a host and port (``lcoal``) before any Client exists: a
    Client that fails to start on it would hang the exit while it closes (``Client.__del__``)."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        port = parts.port
    except ValueError:             # a port that is not a number
        port = None
    if parts.scheme != "inproc" and (not parts.hostname or port is None):
        close = difflib.get_close_matches(address, [LOCAL], n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise SchedulerError(f"the Dask scheduler address {address!r} has no host and port: {hint}give "
                             f"tcp://HOST:PORT, or 'local' for a cluster on this machine")


@contextmanager
def dask_client(address: str, timeout: float | None = None) -> Iterator[Any]:
    """A ``dask.distributed.Client`` of the scheduler at ``address`` (e.g. ``tcp://host:8786``;
    ``"local"``: a ``LocalCluster`` of one single-threaded worker process per CPU of this machine),
    closed (and the local cluster stopped) on exit. ``SchedulerError`` when Dask is not installed or
    the scheduler does not answer within ``timeout`` seconds (default ``CONNECT_TIMEOUT``)."""
    timeout = CONNECT_TIMEOUT if timeout is None else timeout
    try:
        from dask import distributed
    except ImportError as err:
        raise SchedulerError(f"a Dask scheduler needs dask.distributed ({err}): "
                             f"pip install -e '.[distributed]'") from None
    if address != LOCAL:
        _check_address(address)
    if address == LOCAL:
        with distributed.LocalCluster(processes=True, n_workers=os.cpu_count() or 1, threads_per_worker=1,
                                      dashboard_address=None) as cluster, \
                distributed.Client(cluster, timeout=timeout) as client:
            yield client
        return
    try:
        client = distributed.Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as err:
        raise SchedulerError(f"cannot reach the Dask scheduler at {address!r} within {timeout:g} s "
                             f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
                             f"; give its address as tcp://HOST:PORT, or 'local' for a cluster on this "
                             f"machine") from None
    with client:
        yield client
