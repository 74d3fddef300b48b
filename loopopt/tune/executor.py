"""An executor whose calls run in worker processes, each call with a timeout.

``IsolatedExecutor`` is a ``concurrent.futures.Executor``: ``submit(fn, *args)`` runs
``fn(*args)`` in a worker process (``python -m loopopt.tune.worker``; the function and its
arguments travel pickled over a socket, so they must be importable by name). A call that
kills its worker (a segfault, ``os.abort``) fails its future with ``WorkerDied`` naming the
signal, one that runs past ``timeout`` seconds with ``TrialTimeout`` after its worker is killed;
either way a fresh worker takes the next call. An exception raised by ``fn`` comes back as
``WorkerError`` with its type and message. Workers are started with this process's
``sys.path`` and environment, one per ``max_workers``, in a session of their own (a Ctrl-C on the
terminal interrupts this process, not them: it decides), and stop when the executor shuts down
(``cancel_futures=True``: at once, calls in flight too) or when this process dies (their socket
closes).
"""
from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from multiprocessing.connection import Connection
from typing import Any

STOP = None                # what the queue hands a dispatcher thread to end it


class WorkerDied(RuntimeError):
    """The worker process died while running a call."""


class TrialTimeout(TimeoutError):
    """A call ran past the executor's timeout; its worker was killed."""


class WorkerError(RuntimeError):
    """The called function raised in the worker (its type and message)."""


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


class _Worker:
    """One worker process and the parent's end of its socket."""

    def __init__(self):
        parent, child = socket.socketpair()
        paths = [p or os.getcwd() for p in sys.path]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        self.process = subprocess.Popen([sys.executable, "-m", "loopopt.tune.worker", str(child.fileno())],
                                        pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        child.close()
        self.connection = Connection(parent.detach())

    def call(self, fn: Callable, args: tuple, kwargs: dict, timeout: float) -> Any:
        """``fn(*args, **kwargs)`` in the worker; WorkerDied, TrialTimeout or WorkerError on failure."""
        try:
            self.connection.send((fn, args, kwargs))
            ready = self.connection.poll(timeout)
            answer = self.connection.recv() if ready else None
        except (EOFError, OSError):
            self.process.wait()
            raise WorkerDied(f"the worker process {_exit_reason(self.process.returncode)}") from None
        if answer is None:
            self.stop()
            raise TrialTimeout(f"no result within {timeout:g} s; the worker was killed")
        kind, value = answer
        if kind == "raised":
            raise WorkerError(value)
        return value

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """Kill the worker (it was started by this executor): a call in flight fails with WorkerDied."""
        if self.alive:
            self.process.kill()

    def stop(self) -> None:
        """End the worker and close the socket."""
        self.kill()
        self.process.wait()
        self.connection.close()


class IsolatedExecutor(Executor):
    """Runs each submitted call in a worker process, with ``timeout`` seconds per call."""

    def __init__(self, timeout: float = 300.0, max_workers: int = 1):
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"max_workers must be an integer >= 1, got {max_workers!r}")
        self.timeout, self.max_workers = timeout, max_workers
        self._queue: queue.Queue = queue.Queue()
        self._threads = [threading.Thread(target=self._dispatch, args=(slot,), daemon=True)
                         for slot in range(max_workers)]
        self._workers: list[_Worker | None] = [None] * max_workers     # each dispatcher thread's worker
        self._shutdown = self._cancelled = False
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> Future:
        if self._shutdown:
            raise RuntimeError("cannot submit to an IsolatedExecutor after shutdown")
        future: Future = Future()
        self._queue.put((future, fn, args, kwargs))
        return future

    def _dispatch(self, slot: int) -> None:
        worker: _Worker | None = None
        while (item := self._queue.get()) is not STOP:
            future, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue
            if worker is None or not worker.alive:
                worker = self._workers[slot] = _Worker()
            if self._cancelled:          # shutdown(cancel_futures=True) came as this call started
                worker.kill()
            try:
                future.set_result(worker.call(fn, args, kwargs, self.timeout))
            except (WorkerDied, TrialTimeout, WorkerError) as err:
                future.set_exception(err)
        if worker is not None:
            worker.stop()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the workers once the calls submitted are done; ``cancel_futures``: now, the pending
        calls cancelled and those in flight ended (their workers killed: they fail with WorkerDied)."""
        self._shutdown = True
        if cancel_futures:
            self._cancelled = True
            while not self._queue.empty():
                item = self._queue.get_nowait()
                if item is not STOP:
                    item[0].cancel()
            for worker in self._workers:
                if worker is not None:
                    worker.kill()
        for _ in self._threads:
            self._queue.put(STOP)
        if wait:
            for thread in self._threads:
                thread.join()
