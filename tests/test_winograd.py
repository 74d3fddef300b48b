"""Winograd F(2x2,3x3) and F(4x4,3x3): the transform matrices exact in float64, the compiled
pipeline within its error bound of the float64 reference, measure's report, refused ops."""
import numpy as np
import pytest
from helpers import HYPOTHESIS, tiers, winograd_convs
from hypothesis import given, settings
from hypothesis import strategies as st

import loopopt as lo
from loopopt import winograd
from loopopt.reference import conv_reference

SMALL = lo.Conv2d(6, 8, 3, padding=1, height=7, width=5)      # the CLI's --conv 6,8,3,7x5,padding=1


def _args(op: lo.Conv2d, seed: int = 1) -> list[np.ndarray]:
    inputs = op.random_inputs(seed)
    return [inputs[t] for t in op.call_tensors]


def _reference(op: lo.Conv2d, args: list[np.ndarray]) -> np.ndarray:
    pads = tuple((w.pad, w.pad_end) for w in op.windows)
    return conv_reference(*args, padding=pads)


@settings(max_examples=30, **HYPOTHESIS)
@given(winograd_convs(), st.sampled_from(winograd.TILES))
def test_transforms_are_exact_in_float64(op, m):
    """Lavin & Gray's matrices: Winograd in float64 is direct convolution up to float64 rounding."""
    args = _args(op)
    expected = _reference(op, args)
    assert np.abs(winograd.winograd64(op, m, *args) - expected).max() <= 1e-11 * (1 + np.abs(expected).max())


def _check_kernel(op: lo.Conv2d, m: int) -> None:
    args = _args(op)
    kernel = lo.dataflows.winograd(op, m=m).compile()
    error = np.abs(kernel(*args) - _reference(op, args))
    bound = winograd.error_bound(op, m, *args)
    assert np.all(error <= bound), float((error - bound).max())
    # the bound is a worst case (F(4x4): up to a few % of the largest output); the error itself stays
    # far below the 1e-3 of the largest output
    assert error.max() <= 1e-4 * max(1.0, np.abs(_reference(op, args)).max())


@pytest.mark.slow
@pytest.mark.parametrize("m", (4, 2))
def test_winograd_kernel_small(m):
    """Odd sizes (tails of tiles), asymmetric padding, 17 channels, batch 2, bias."""
    _check_kernel(lo.Conv2d(17, 5, 3, padding=((0, 1), (2, 1)), bias=True, batch=2, height=7, width=9), m)


def _random_kernel(op, m):
    _check_kernel(op, m)


test_winograd_kernels_quick, test_winograd_kernels = tiers(
    _random_kernel, 1, 6, winograd_convs(), st.sampled_from(winograd.TILES))


@pytest.mark.slow
def test_measure_reports_algorithm_and_error():
    timing = lo.measure(lo.dataflows.winograd(SMALL, m=4).compile(), repeats=2, budget=0.01)
    assert timing.verified and timing.algorithm == "winograd F(4x4,3x3)"
    assert 0 < timing.relative_error < 1e-5 and "winograd F(4x4,3x3): median" in str(timing)
    assert "of the largest output" in str(timing)


@pytest.mark.parametrize("op, m, message", [
    (lo.Conv2d(4, 4, 3, stride=2), 4, "stride=1 on both spatial dims, got stride=(2, 2)"),
    (lo.Conv2d(4, 4, 3, dilation=(1, 2)), 4, "dilation=1 on both spatial dims, got dilation=(1, 2)"),
    (lo.Conv2d(4, 4, 5), 2, "kernel_size=3 on both spatial dims, got kernel_size=(5, 5)"),
    (lo.Conv2d(4, 4, 3, groups=2), 4, "groups=1, got groups=2"),
    (lo.Conv1d(4, 4, 3, length=8), 4, "2-D convolution"),
    (lo.Matmul(4, 4, 4), 4, "2-D convolution"),
    (lo.Conv2d(4, 4, 3, dtype="bfloat16"), 4, "dtype float32, got dtype='bfloat16'"),
    (lo.Conv2d(4, 4, 3, quant=lo.QuantSpec()), 4, "int8 winograd is F(2x2,3x3) only (m=2), got m=4"),
    (lo.Conv2d(4, 4, 3), 3, "m (output tile size) must be one of (2, 4), got 3"),
])
def test_refused(op, m, message):
    with pytest.raises(winograd.WinogradError, match=message.replace("(", r"\(").replace(")", r"\)")):
        lo.dataflows.winograd(op, m=m)


@pytest.mark.slow
def test_stage_schedules_are_replaceable():
    op = lo.Conv2d(3, 4, 3, padding=1, height=5, width=6)
    plan = lo.dataflows.winograd(op, m=2)
    gemm = plan.schedules["gemm"]
    swapped = plan.with_stage("gemm", lo.Schedule(gemm.op))
    assert swapped.schedules["gemm"] != gemm and plan.schedules["gemm"] is gemm
    args = _args(op)
    error = np.abs(swapped.compile()(*args) - _reference(op, args))
    assert np.all(error <= winograd.error_bound(op, 2, *args))
    with pytest.raises(ValueError, match="no stage 'filter'"):
        plan.with_stage("filter", gemm)
    with pytest.raises(ValueError, match="must be a Schedule of Matmul"):
        plan.with_stage("gemm", plan.schedules["input_rows"])
    moved = plan.with_stage("input_cols", lo.Schedule(plan.schedules["input_cols"].op).layout("V", "NABHWC"))
    with pytest.raises(ValueError, match="tensor V passes between stages and must keep its default layout"):
        moved.compile()


@pytest.mark.slow
def test_compare_shows_winograd_next_to_direct():
    op = SMALL
    table = lo.compare(op, [lo.dataflows.output_stationary(op), lo.dataflows.winograd(op, m=4)],
                       names=["direct", "winograd"], reuse=False, progress=False, budget=0.01, rounds=1)
    direct, wino = table.rows
    assert direct.verified and wino.verified and wino.algorithm == "winograd F(4x4,3x3)"
    assert direct.predicted_ms is not None and wino.predicted_ms is None
    assert 0 < direct.relative_error < 1e-5 and 0 < wino.relative_error < 1e-5
    assert "err/max" in str(table) and "winograd" in table.ranking()


@pytest.mark.slow
def test_tune_tries_winograd_and_says_which_algorithm_won(tmp_path):
    op = lo.Conv2d(16, 32, 3, padding=1, height=12, width=12)
    log = str(tmp_path / "tune.db")
    result = lo.tune(op, trials=4, budget=0.02, progress=False, log=log, algorithms=("direct", "winograd"))
    fastest = result.by_algorithm()
    assert set(fastest) == {"direct", "winograd"}
    assert [t.knobs.get("plan") for t in result.trials[:2]] == [None, "winograd F(4x4,3x3)"]   # direct first
    won = min(fastest, key=lambda name: fastest[name].seconds)
    assert result.algorithm == won and f"algorithm: {won} won" in str(result)
    assert isinstance(result.best, lo.Schedule) == (won == "direct")     # the winner, whatever it is
    assert "winograd F(4x4,3x3)" in result.table() and result.to_dict()["algorithm"] == won
    assert lo.to_toml(lo.best_schedule(op, log=log)) == lo.to_toml(result.best)
    again = lo.tune(op, trials=4, budget=0.02, progress=False, log=log, algorithms=("direct", "winograd"))
    assert all(t.logged for t in again.trials)


@pytest.mark.slow
def test_tune_skips_winograd_where_it_does_not_apply():
    op = lo.Conv2d(4, 16, 3, stride=2, height=9, width=9)
    result = lo.tune(op, trials=1, budget=0.02, progress=False, algorithms=("direct", "winograd"))
    assert result.algorithm == "direct" and "stride=1" in result.skipped["winograd"]
    assert "winograd not tried: winograd F(4x4,3x3) takes stride=1" in str(result)
    with pytest.raises(lo.TuneError, match=r"none of the algorithms \('winograd',\) can be tried.*stride=1"):
        lo.tune(op, trials=1, progress=False, algorithms=("winograd",))


@pytest.mark.slow
def test_cli_compare_takes_winograd_rows(capsys, tmp_path):
    from loopopt.cli import main
    conv = ["--conv", "6,8,3,7x5,padding=1", "--quiet", "--no-reuse"]
    status = main(["compare", *conv, "--schedules", "output_stationary,winograd4", "--json",
                   "--plot", str(tmp_path / "cmp.png")])
    out = capsys.readouterr().out
    assert status == 0 and '"algorithm": "winograd F(4x4,3x3)"' in out and (tmp_path / "cmp.png").exists()
    status = main(["compare", "--conv", "6,8,3,7,stride=2", "--quiet", "--schedules", "winograd2"])
    err = capsys.readouterr().err
    assert status == 2 and "--schedules winograd2: winograd F(2x2,3x3) takes stride=1" in err
