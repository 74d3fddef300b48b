"""Algorithm selection in lo.tune and loopopt compare: direct, implicit GEMM, im2col, Winograd."""
import concurrent.futures
import json
import tomllib

import pytest

import loopopt as lo
from loopopt.cli import main
from loopopt.measure import Timing, verify
from loopopt.schedule_file import SCHEDULE_ALGORITHMS
from loopopt.tune import TuneError, TuningLog
from loopopt.tune.algorithms import ALGORITHMS, alternatives, refusals, selected, share
from loopopt.tune.trial import here
from loopopt.winograd import WinogradPlan, from_name

CONV = lo.Conv2d(4, 16, 3, padding=1, height=6, width=6)        # Winograd applies
STRIDED = lo.Conv2d(4, 16, 3, stride=2, height=9, width=9)      # Winograd does not


def test_selected_names_and_errors():
    assert selected("auto") == ALGORITHMS and selected(("winograd", "direct")) == ("direct", "winograd")
    assert selected("im2col") == ("im2col",)
    allowed = "'direct', 'implicit_gemm', 'im2col', 'winograd'"
    with pytest.raises(ValueError, match=f"unknown algorithm.*'fft'.*{allowed}"):
        selected(("direct", "fft"))
    with pytest.raises(ValueError, match=r"\(none given\)"):
        selected(())


def test_refusals_say_why_an_algorithm_does_not_apply():
    why = refusals(lo.Matmul(8, 16, 8), ALGORITHMS, "avx512", 1)
    assert why["direct"] == "" and "GEMM already" in why["implicit_gemm"] and "GEMM already" in why["im2col"]
    assert why["winograd"]                 # not a 3x3 conv
    threaded = refusals(CONV, ALGORITHMS, "avx512", 2)
    assert "one-thread" in threaded["im2col"] and "one thread, not 2" in threaded["winograd"]
    assert refusals(CONV, ALGORITHMS, "avx512", 1) == dict.fromkeys(ALGORITHMS, "")


def test_share_keeps_half_for_the_direct_search():
    sizes = {"implicit_gemm": 6, "im2col": 5, "winograd": 2}
    assert share(64, sizes) == {"implicit_gemm": 6, "im2col": 5, "winograd": 2}
    assert share(16, sizes) == {"implicit_gemm": 2, "im2col": 2, "winograd": 2}
    assert share(4, sizes) == {"implicit_gemm": 1, "im2col": 1, "winograd": 0}
    assert share(1, sizes) == dict.fromkeys(sizes, 0)
    assert share(5, sizes, direct=False) == {"implicit_gemm": 2, "im2col": 2, "winograd": 1}


def test_alternatives_are_labelled_presets_first_without_duplicates():
    gemm = alternatives(CONV, "implicit_gemm", "avx2")
    assert gemm[0].knobs == {"algorithm": "implicit_gemm", "m": 8, "k": 8}
    assert all(c.knobs["m"] * (c.knobs["k"] // 8) + c.knobs["k"] // 8 + 1 <= 16 for c in gemm)  # registers
    cols = alternatives(CONV, "im2col", "avx512")
    assert cols[0].knobs == {"algorithm": "im2col", "m": 64} and len({c.schedule for c in cols}) == len(cols)
    assert len(cols) < 5                   # m=64, 128 and 256 clamp to the 36 output positions
    assert [c.schedule for c in alternatives(CONV, "winograd", "avx512")] == \
        ["winograd F(4x4,3x3)", "winograd F(2x2,3x3)"]


@pytest.mark.slow
def test_tune_labels_every_trial_and_says_which_algorithm_won(tmp_path):
    log = str(tmp_path / "tune.db")
    result = lo.tune(CONV, trials=8, budget=0.01, progress=False, log=log)
    labels = [t.algorithm for t in result.trials]
    # the direct search's first candidate (the yardstick), then each other algorithm's preset in turn
    assert labels[:4] == ["direct", "implicit_gemm", "im2col", "winograd"] and set(labels[4:]) == {"direct"}
    assert len(result.trials) == 8 and not result.skipped
    fastest = result.by_algorithm()
    assert set(fastest) == set(ALGORITHMS) and list(fastest)[0] == result.algorithm
    margins = result.margins()
    assert margins[result.algorithm] == 1.0 and all(m >= 1.0 for m in margins.values())
    assert f"algorithm: {result.algorithm} won" in str(result) and "faster than" in str(result)
    assert "implicit_gemm preset, m=8, k=16" in result.table() or "implicit_gemm preset" in result.table()
    data = json.loads(json.dumps(result.to_dict(), default=str))
    assert data["algorithm"] == result.algorithm and data["trials"][1]["algorithm"] == "implicit_gemm"
    assert data["by_algorithm"][result.algorithm]["times_winner"] == 1.0
    best = lo.best_schedule(CONV, log=log)
    assert lo.to_toml(best) == lo.to_toml(result.best)     # the log's best is the winner, any algorithm


@pytest.mark.slow
def test_tune_subset_and_skipped():
    result = lo.tune(STRIDED, trials=2, budget=0.01, progress=False, algorithms=("im2col", "winograd"))
    assert [t.algorithm for t in result.trials] == ["im2col"]   # its blocks all clamp to the 16 outputs
    assert "stride=1" in result.skipped["winograd"] and result.algorithm == "im2col"
    assert "winograd not tried" in str(result)
    few = lo.tune(STRIDED, trials=1, budget=0.01, progress=False)
    assert [t.algorithm for t in few.trials] == ["direct"]
    assert "no trial left of the 1 trials" in few.skipped["implicit_gemm"]
    with pytest.raises(ValueError, match="unknown algorithm"):
        lo.tune(CONV, trials=1, progress=False, algorithms=("gemm",))
    with pytest.raises(TuneError, match=r"none of the algorithms \('implicit_gemm',\) can be tried on "
                                        "Matmul.*implicit_gemm: an op without windows"):
        lo.tune(lo.Matmul(8, 16, 8), trials=1, progress=False, algorithms="implicit_gemm")


@pytest.mark.slow
def test_cli_tune_takes_algorithms(capsys):
    status = main(["tune", "--conv", "4,16,3,6,padding=1", "--trials", "2", "--budget", "0.01",
                   "--algorithms", "direct,im2col", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert status == 0 and [t["algorithm"] for t in data["trials"]] == ["direct", "im2col"]
    assert set(data["by_algorithm"]) == {"direct", "im2col"}
    status = main(["tune", "--conv", "4,16,3,6", "--trials", "1", "--algorithms", "direct,fft"])
    err = capsys.readouterr().err
    assert status == 2 and "--algorithms: unknown algorithm(s) 'fft'" in err and "'winograd'" in err


@pytest.mark.slow
def test_cli_compare_shows_each_algorithm(capsys):
    conv = ["--conv", "4,16,3,9,stride=2", "--quiet", "--no-reuse"]
    status = main(["compare", *conv, "--algorithms", "im2col,winograd,direct", "--json"])
    data = json.loads(capsys.readouterr().out)
    rows = data["rows"]
    assert status == 0 and [r["name"] for r in rows] == ["direct: preset output_stationary", "im2col: preset"]
    assert all(r["verified"] and r["relative_error"] is not None and r["rate"] > 0 for r in rows)
    assert "stride=1" in data["skipped"]["winograd"]
    status = main(["compare", *conv, "--algorithms", "--schedules", "naive"])
    assert status == 2 and "does not combine with --schedules" in capsys.readouterr().err
    status = main(["compare", *conv, "--log", "tune.db"])
    assert status == 2 and "--log goes with --algorithms" in capsys.readouterr().err
    status = main(["compare", *conv, "--algorithms", "gemm"])
    assert status == 2 and "--algorithms: unknown algorithm(s) 'gemm'" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_compare_takes_each_algorithms_best_from_the_log(capsys, tmp_path):
    conv = ["--conv", "4,16,3,6,padding=1", "--quiet", "--no-reuse"]
    status = main(["compare", *conv, "--algorithms"])
    out = capsys.readouterr().out
    assert status == 0 and all(name in out for name in ("direct: preset output_stationary",
                                                               "implicit_gemm: preset", "im2col: preset",
                                                               "winograd: default plan F(4x4,3x3)"))
    log = str(tmp_path / "tune.db")
    lo.tune(CONV, trials=4, budget=0.01, progress=False, log=log, algorithms=("direct", "winograd"))
    status = main(["compare", *conv, "--algorithms", "direct,winograd,im2col", "--log", log])
    out = capsys.readouterr().out
    assert status == 0 and "direct: best of log" in out
    assert "winograd: best of log, winograd F(4x4,3x3)" in out
    assert "im2col: preset" in out                 # not in the log: its preset
    layer = ["--layer", "resnet50.conv2_x", "--quiet", "--no-reuse"]
    status = main(["compare", *layer, "--algorithms", "direct"])
    assert status == 0 and "direct: stored schedule resnet50.conv2_x" in capsys.readouterr().out


def _timing(seconds: float) -> Timing:
    return Timing(median=seconds, min=seconds, iqr=0.0, repeats=3, gflops=1.0, percent_of_peak=1.0,
                  peak_gflops=100.0, verified=True, max_error=0.0)


class AlgorithmTimedExecutor(concurrent.futures.Executor):
    """A fake measurement: each trial 'takes' the seconds of its algorithm (``seconds``, by the schedule
    or plan name its candidates compile), a direct schedule 1 ms."""

    def __init__(self, seconds: dict[str, float]):
        self.seconds = {c.schedule: s for name, s in seconds.items()
                        for c in alternatives(CONV, name, "avx2")}

    def submit(self, fn, /, *args, **kwargs):
        future = concurrent.futures.Future()
        future.set_result(here("ok", "", _timing(self.seconds.get(args[0].schedule, 1e-3))))
        return future


FAR_BEHIND_TIMES = {"implicit_gemm": 10e-3, "im2col": 1.5e-3, "winograd": 0.5e-3}   # 20x, 3x behind


def test_an_algorithm_far_behind_gets_no_more_trials():
    """Every algorithm's first candidate in turn; one 4x or more slower than the best so far gets no more
    trials, and the result says so."""
    result = lo.tune(CONV, trials=6, isa="avx2", executor=AlgorithmTimedExecutor(FAR_BEHIND_TIMES),
                     progress=False, algorithms=("implicit_gemm", "im2col", "winograd"))
    order = [t.algorithm for t in result.trials]
    assert order == ["implicit_gemm", "im2col", "winograd", "im2col", "winograd"]
    why = ("its fastest (trial 1) was 20.0x slower than the best so far (winograd, trial 3); its other 1 "
           "candidate(s) were not tried")
    assert result.cut == {"implicit_gemm": why} and result.to_dict()["cut"] == result.cut
    assert f"implicit_gemm stopped early: {why}" in str(result)


@pytest.mark.slow
def test_a_mixed_search_gives_the_trials_of_an_algorithm_far_behind_to_the_direct_search():
    """One direct trial first (the yardstick), then the others in turn; the cut one's trial goes to direct."""
    result = lo.tune(CONV, trials=16, isa="avx2", executor=AlgorithmTimedExecutor(FAR_BEHIND_TIMES),
                     progress=False)
    order = [t.algorithm for t in result.trials]
    assert order[:4] == ["direct", "implicit_gemm", "im2col", "winograd"] and len(order) == 16
    assert (order.count("implicit_gemm"), order.count("im2col"), order.count("winograd")) == (1, 2, 2)
    assert result.cut["implicit_gemm"].endswith("its other 1 candidate(s) went to the direct search")


def test_best_trial_is_the_logged_winner_whatever_its_algorithm(tmp_path):
    """A logged Winograd trial faster than the schedules: best_trial and best_schedule give its plan;
    with algorithms=SCHEDULE_ALGORITHMS (what the ONNX backend asks for) the fastest loop nest."""
    log, direct = tmp_path / "tune.db", lo.dataflows.output_stationary(CONV)
    name = "winograd F(2x2,3x3), GEMM 7x48"
    with TuningLog(log) as tuning_log:
        tuning_log.append(CONV, lo.to_toml(direct), {}, {}, "avx2", 1, 0.01, here("ok", "", _timing(2e-3)))
        tuning_log.append(CONV, name, {"algorithm": "winograd", "plan": name}, {}, "avx2", 1, 0.01,
                          here("ok", "", _timing(1e-3)))
    best = lo.best_trial(CONV, log=log)
    assert (best.algorithm, best.timing.min) == ("winograd", 1e-3)
    plan = lo.best_schedule(CONV, log=log)
    assert isinstance(plan, WinogradPlan) and (plan.m, plan.gemm_rows, plan.gemm_cols) == (2, 7, 48)
    assert lo.best_schedule(CONV, log=log, algorithms=SCHEDULE_ALGORITHMS) == direct
    assert lo.best_trial(CONV, log=log, algorithms="im2col") is None


@pytest.mark.slow
def test_tune_saves_its_winner_a_winograd_plan_too(tmp_path, capsys):
    """loopopt tune --save writes the measured winner: here a Winograd-only search, whose winner is a
    plan; the file says so, and loads and compiles back into a verified kernel."""
    path = tmp_path / "wino.toml"
    conv = ["--conv", "4,16,3,6,padding=1", "--budget", "0.01", "--trials", "2", "--json"]
    assert main(["tune", *conv, "--algorithms", "winograd", "--save", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["algorithm"] == "winograd" and data["best"]["schedule"].startswith('name = "schedule"')
    document = tomllib.loads(path.read_text())
    assert document["algorithm"] == "winograd" and "winograd" in document["description"]
    plan = lo.load_schedule(path, CONV)
    trial = next(t for t in data["trials"] if t["number"] == data["best_trial"])
    assert lo.to_toml(plan) == lo.to_toml(from_name(CONV, trial["knobs"]["plan"]))
    assert verify(plan.compile())[0]


@pytest.mark.slow
def test_tune_saves_the_winner_of_a_mixed_search(tmp_path, capsys):
    """Whichever algorithm wins (the machine decides), --save writes that trial's schedule or plan."""
    path = tmp_path / "best.toml"
    assert main(["tune", "--conv", "4,16,3,6,padding=1", "--budget", "0.01", "--trials", "8", "--json",
                 "--save", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    fastest = min((t for t in data["trials"] if t["status"] == "ok"), key=lambda t: t["timing"]["min_s"])
    assert data["best_trial"] == fastest["number"] and data["algorithm"] == fastest["algorithm"]
    assert tomllib.loads(path.read_text())["algorithm"] == fastest["algorithm"]
    loaded = lo.load_schedule(path, CONV)
    assert lo.to_toml(loaded, algorithm=fastest["algorithm"]) == data["best"]["schedule"]
