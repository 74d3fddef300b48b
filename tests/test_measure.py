"""measure / measure_all: noise verdict, repeat budget, interleaving, end-to-end timing, progress.

Times are never asserted: the budget tests run on a fake clock that each kernel run advances."""
import importlib
import math
from collections import Counter
from dataclasses import replace

import pytest

import loopopt as lo
from loopopt import dataflows
from loopopt.compare import Comparison, Row
from loopopt.measure import (
    END_TO_END,
    KERNEL_ONLY,
    MAX_REPEATS,
    Timing,
    interleaved_order,
    noise_verdict,
    repeat_count,
)

OP = lo.Matmul(8, 16, 8)
measure = importlib.import_module("loopopt.measure")     # the module (lo.measure is the function)


@pytest.fixture(scope="module")
def kernels():
    return [lo.Schedule(OP).compile(), dataflows.tiled(OP).compile(),
            dataflows.output_stationary(OP).compile()]


def test_noise_verdict_from_synthetic_times():
    steady = [1.00, 1.01, 0.99, 1.00, 1.02, 1.00]
    assert noise_verdict(steady, 0.05) == ""
    assert noise_verdict(steady, None) == ""
    spread = [1.0, 1.0, 1.5, 2.0, 1.0, 2.2]
    assert noise_verdict(spread, 0.0).startswith("IQR 7") and "limit 10%" in noise_verdict(spread, 0.0)
    busy = noise_verdict(steady, 0.6)
    assert busy == "other processes used 60% of the CPU (limit 25%)"
    assert noise_verdict(spread, 0.6).count(";") == 1
    assert noise_verdict([5.0], None) == ""                    # one run: no spread to judge


def test_repeat_count_fits_the_budget():
    assert repeat_count(0.1, 1.0) == 10
    assert repeat_count(0.4, 1.0) == 2
    assert repeat_count(30.0, 1.0) == 1                          # a run longer than the budget: timed once
    assert repeat_count(1e-7, 1.0) == MAX_REPEATS


def test_interleaved_order():
    assert interleaved_order([2, 2, 2], 2) == [0, 1, 2, 1, 2, 0]
    assert interleaved_order([3, 1], 2) == [0, 1, 0, 0]
    order = interleaved_order([7, 200, 1], 5)
    assert Counter(order) == {0: 7, 1: 200, 2: 1}
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        interleaved_order([1], 0)


def logged(monkeypatch, kernel, log: list, name) -> None:
    run = kernel.run
    monkeypatch.setattr(kernel, "run", lambda buffers: (log.append(name), run(buffers)))


def test_measure_all_interleaves_the_kernels(kernels, monkeypatch):
    log = []
    for index, kernel in enumerate(kernels):
        logged(monkeypatch, kernel, log, index)
    timings = lo.measure_all(kernels, repeats=4, rounds=2, verify_output=False)
    warmups, timed = log[:3], log[3:]
    assert warmups == [0, 1, 2]
    assert timed == [0, 0, 1, 1, 2, 2, 1, 1, 2, 2, 0, 0]
    assert [t.repeats for t in timings] == [4, 4, 4] and all(len(t.times) == 4 for t in timings)
    assert len({t.other_cpu_share for t in timings}) == 1       # one noise sample for the whole session


class FakeClock:
    """A clock that only kernel runs advance, by ``step`` seconds each."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("seconds, expected", [(3.0, 1), (0.25, 4), (0.001, MAX_REPEATS)])
def test_budget_bounds_the_number_of_runs(kernels, monkeypatch, seconds, expected):
    clock, kernel, run = FakeClock(seconds), kernels[0], kernels[0].run
    monkeypatch.setattr(measure, "_clock", clock)

    def slow_run(buffers):
        clock.now += clock.step
        run(buffers)
    monkeypatch.setattr(kernel, "run", slow_run)
    timing = lo.measure(kernel, budget=1.0, verify_output=False, progress=False)
    assert timing.repeats == expected and timing.median == pytest.approx(seconds)


def test_long_measurements_show_progress_only_when_asked(kernels, monkeypatch, capsys):
    clock, kernel, run = FakeClock(0.5), kernels[0], kernels[0].run
    monkeypatch.setattr(measure, "_clock", clock)
    monkeypatch.setattr(kernel, "run",
                        lambda buffers: (setattr(clock, "now", clock.now + clock.step), run(buffers)))
    lo.measure(kernel, budget=4.0, verify_output=False, progress=True)      # 8 runs of 0.5 s: a long one
    assert "8/8" in capsys.readouterr().err
    lo.measure(kernel, budget=4.0, verify_output=False, progress=False)
    assert capsys.readouterr().err == ""
    lo.measure(kernel, budget=1.0, verify_output=False, progress=True)      # 2 runs: too short to report
    assert capsys.readouterr().err == ""


def test_end_to_end_times_packing_and_the_default_does_not(kernels, monkeypatch):
    kernel, calls = kernels[1], []
    prepare = kernel.prepare
    monkeypatch.setattr(kernel, "prepare", lambda *a, **k: (calls.append(1), prepare(*a, **k))[1])
    default = lo.measure(kernel, repeats=3, warmup=1, verify_output=False)
    assert len(calls) == 1 and not default.end_to_end and KERNEL_ONLY in str(default)
    calls.clear()
    whole = lo.measure(kernel, repeats=3, warmup=1, end_to_end=True)
    assert len(calls) == 1 + 3 + 1          # warm-up, timed runs, verification
    assert whole.end_to_end and whole.verified and END_TO_END in str(whole)


def test_measure_refuses_a_schedule_and_bad_arguments(kernels):
    with pytest.raises(TypeError, match=r"got a Schedule; call \.compile\(\) first"):
        lo.measure(lo.Schedule(OP))
    with pytest.raises(ValueError, match="budget must be > 0"):
        lo.measure(kernels[0], budget=0)
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        lo.measure(kernels[0], repeats=True)


def test_timing_and_table_flag_noise():
    noisy = Timing(2e-3, 1e-3, 1e-3, 5, 1.0, 1.0, 100.0, True, 0.0, noisy=True, other_cpu_share=0.5,
                   noise="other processes used 50% of the CPU (limit 25%)")
    assert str(noisy).endswith("; NOISY: other processes used 50% of the CPU (limit 25%)")
    assert "NOISY" not in str(Timing(2e-3, 1e-3, 1e-5, 5, 1.0, 1.0, 100.0, True, 0.0))
    rows = [Row("a", "avx2", 2.0, 1.9, 0.1, 5, 1.0, 1.0, True, 0.0),
            Row("b", "avx2", 1.0, 0.9, 0.5, 5, 2.0, 2.0, True, 0.0, True,
                "IQR 50% of the median (limit 10%)")]
    table = Comparison(OP, rows, {}, 100.0, rounds=5)
    text = str(table)
    assert "NOISY" in text.splitlines()[5] and "WARNING: noisy timings (b: IQR 50% of the median" in text
    assert "ranking by median (b < a) may not hold" in text and table.ranking() == ["b", "a"]
    rows[0].noisy, rows[0].noise = True, "other processes used 60% of the CPU (limit 25%)"
    rows[1].noise = "IQR 50% of the median (limit 10%); other processes used 60% of the CPU (limit 25%)"
    assert ("(other processes used 60% of the CPU (limit 25%); b: IQR 50% of the median (limit 10%)): "
            "the ranking" in str(table))
    for row in rows:
        row.noisy, row.noise = False, ""
    assert "ranking by interleaved median: b < a" in str(table) and "WARNING" not in str(table)
    assert KERNEL_ONLY in str(table).splitlines()[1]


def test_a_microsecond_timing_reads_in_microseconds_and_an_unknown_relative_error_is_left_out():
    """Times show three significant digits (not "median 0.000 ms"); a timing read back from a tuning log
    has no relative error, and its line does not print "nan of the largest output"."""
    timing = Timing(median=5.4e-6, min=5.12e-6, iqr=1.2e-7, repeats=1000, gflops=10.0, percent_of_peak=5.0,
                    peak_gflops=200.0, verified=True, max_error=1.41e-4, relative_error=2e-7)
    text = str(timing)
    assert "median 5.40 us (min 5.12 us, IQR 120 ns, n=1000;" in text
    assert "verified (max error 1.41e-04, 2.0e-07 of the largest output)" in text
    logged = replace(timing, relative_error=math.nan)
    assert "verified (max error 1.41e-04)" in str(logged) and "nan" not in str(logged)


def test_a_table_of_microsecond_kernels_shows_its_times_in_microseconds():
    """The compare table's time columns take the unit of the fastest median: three digits, not 0.003 ms."""
    rows = [Row("a", "avx2", 0.0054, 0.0051, 0.00012, 9, 1.0, 1.0, True, 0.0, predicted_ms=0.0031),
            Row("b", "avx2", 0.123, 0.120, 0.004, 9, 1.0, 1.0, True, 0.0)]
    lines = str(Comparison(OP, rows, {}, 100.0, rounds=5)).splitlines()
    head = lines[2].split()
    assert head[2:4] == ["median", "us"] and "IQR us" in lines[2] and "model us" in lines[2]
    a, b = lines[4].split(), lines[5].split()
    assert (a[2], a[3], b[2], b[3]) == ("5.40", "0.12", "123", "4.00") and "3.10" in a
