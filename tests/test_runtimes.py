"""benchmarks/runtimes.py's interleaved rounds: another process's real-time threads seen, and the rounds they
ran in timed again."""
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import runtimes  # noqa: E402

needs_proc = pytest.mark.skipif(not os.path.exists(runtimes.SCHEDSTAT), reason="no /proc schedstat")


class FakeWorker:
    """A worker whose runs take no time: ``run`` returns its count of runs so far as the seconds."""

    def __init__(self, pid: int):
        self.pid, self.runs = pid, 0

    def run(self, outputs: bool = False):
        self.runs += 1
        return float(self.runs), ([self.runs] if outputs else None)


def _busy_realtime(ready, go, done) -> None:
    """A child: under SCHED_FIFO (lowest priority), say so, then run ~3 ms when told, say so, then sleep."""
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    ready.set()
    go.wait()
    end = time.perf_counter() + 0.003
    while time.perf_counter() < end:
        pass
    done.set()
    time.sleep(5)


@needs_proc
def test_others_realtime_ns_counts_another_process_real_time_thread(monkeypatch):
    """The child's real-time run is counted, and not when its pid is excluded. /proc is listed as holding
    only this process and the child, so other processes' real-time threads (another test, a benchmark
    under chrt on the machine) cannot change the counts."""
    import multiprocessing
    context = multiprocessing.get_context("spawn")
    ready, go, done = context.Event(), context.Event(), context.Event()
    child = context.Process(target=_busy_realtime, args=(ready, go, done), daemon=True)
    child.start()
    listdir = os.listdir
    monkeypatch.setattr(runtimes.os, "listdir", lambda path: [str(os.getpid()), str(child.pid)]
                        if path == "/proc" else listdir(path))
    try:
        if not ready.wait(timeout=30) or not child.is_alive():
            pytest.skip("this process may not make a SCHED_FIFO thread")
        before = runtimes.others_realtime_ns({os.getpid()})
        excluded = runtimes.others_realtime_ns({os.getpid(), child.pid})
        go.set()
        assert done.wait(timeout=30)
        assert runtimes.others_realtime_ns({os.getpid()}) - before >= 2_000_000    # its ~3 ms seen
        assert runtimes.others_realtime_ns({os.getpid(), child.pid}) == excluded == 0   # not when it is ours
    finally:
        child.kill()
        child.join()


def test_interleave_times_a_disturbed_round_again(monkeypatch):
    monkeypatch.setattr(runtimes, "SETTLE", 0.0)
    samples = iter([0, 5] + [5] * 100)         # the first round's first try disturbed, none after it
    monkeypatch.setattr(runtimes, "others_realtime_ns", lambda exclude: next(samples))
    workers = [FakeWorker(1), FakeWorker(2)]
    rounds = runtimes.interleave(workers, 3)
    assert rounds.outputs == [[1], [1]]
    first = 2 + runtimes.WARM_RUNS              # the run after the warm-up and the untimed ones
    assert rounds.times == [[first + 1.0, first + 2.0, first + 3.0]] * 2   # run `first` was the disturbed try
    assert (rounds.disturbed, rounds.kept_disturbed) == (1, 0)


def test_interleave_keeps_a_round_disturbed_on_every_try(monkeypatch):
    monkeypatch.setattr(runtimes, "SETTLE", 0.0)
    clock = iter(range(1000))                   # another real-time thread runs all the time
    monkeypatch.setattr(runtimes, "others_realtime_ns", lambda exclude: next(clock))
    workers = [FakeWorker(1)]
    rounds = runtimes.interleave(workers, 2)
    tries = runtimes.RETRIES + 1
    assert len(rounds.times[0]) == 2 and workers[0].runs == 1 + runtimes.WARM_RUNS + 2 * tries
    assert (rounds.disturbed, rounds.kept_disturbed) == (2 * runtimes.RETRIES, 2)


def test_interleave_says_nothing_where_proc_cannot(monkeypatch, tmp_path):
    monkeypatch.setattr(runtimes, "SETTLE", 0.0)
    monkeypatch.setattr(runtimes, "SCHEDSTAT", str(tmp_path / "no-schedstat"))
    assert runtimes.others_realtime_ns(set()) is None
    rounds = runtimes.interleave([FakeWorker(1)], 2)
    first = 2 + runtimes.WARM_RUNS
    assert rounds.times == [[float(first), float(first + 1)]]
    assert (rounds.disturbed, rounds.kept_disturbed) == (None, None)


def test_interleave_times_no_worker_before_its_warm_runs(monkeypatch):
    """The first timed run of each worker follows its warm-up run and ``WARM_RUNS`` untimed ones: loopopt's
    plan runs step by step in its first two runs, so its second run is not timed."""
    monkeypatch.setattr(runtimes, "SETTLE", 0.0)
    monkeypatch.setattr(runtimes, "others_realtime_ns", lambda exclude: 0)
    workers = [FakeWorker(1), FakeWorker(2)]
    rounds = runtimes.interleave(workers, 2)
    first = 2 + runtimes.WARM_RUNS
    assert runtimes.WARM_RUNS >= 2
    assert rounds.outputs == [[1], [1]]
    assert rounds.times == [[float(first), float(first + 1)]] * 2
