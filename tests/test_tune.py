"""lo.tune: the search finds verified schedules, survives crashing and hanging candidates, logs every
trial in SQLite (resumable, also after kill -9), refuses bad input and foreign logs; loopopt tune."""
import concurrent.futures
import json
import math
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
import pytest
from helpers import needs_amx
from json_schemas import check

import loopopt as lo
from loopopt.cli import main
from loopopt.machine import Cache
from loopopt.measure import Timing, verify
from loopopt.schedule_file import schedule_from_toml
from loopopt.targets.registry import target
from loopopt.targets.search import Candidate
from loopopt.targets.x86.isa import bf16_dot_available, resolve_isa
from loopopt.targets.x86.lut_c import check_lut_on
from loopopt.targets.x86.rank import (
    DOT_LIVE,
    L2_FIT,
    MASKED,
    RELOAD,
    SCATTERED_RELOAD,
    STORE,
    TAIL,
    activation_lines_per_set,
    best,
    chains,
    channel_tail,
    conflict_lines,
    imbalance,
    l2_fit,
    out_of_order,
    output_fits,
    rank,
    reload_steps,
    residual_seconds,
    rolled,
    spills_accumulators,
    streamed_bytes,
    streams_in_any_order,
    strided_seconds,
    tail,
    tight_spare,
    weights_stay_in_l1,
)
from loopopt.targets.x86.space import Knobs, candidates, channel_panel, in_panels, is_table_lookup
from loopopt.tune import IsolatedExecutor, Trial, TuneError, TuningLog, TuningLogError, WorkerDied
from loopopt.tune.choice import first_choice
from loopopt.tune.fit import MIN_TRIALS, Fit, spearman, spearman_undefined
from loopopt.tune.guide import FEATURES, SMALLEST, Guide, Price
from loopopt.tune.trial import here
from loopopt.units import time_unit

ROOT = Path(__file__).resolve().parent.parent
BUDGET = 0.02          # seconds of timed runs per candidate: the tests check behaviour, not speed
QUANT = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="uint8")
X86 = target("x86").search_rules()

OPS = {
    "conv": lo.Conv2d(5, 24, 3, stride=2, padding=1, height=11, width=9),
    "conv-1x3-dilated": lo.Conv2d(8, 16, (1, 3), padding=(0, 2), dilation=2, height=6, width=10),
    "depthwise": lo.Conv2d(16, 16, 3, padding=1, groups=16, height=7, width=7),
    "grouped": lo.Conv2d(8, 12, 3, groups=2, height=6, width=6),
    "matmul": lo.Matmul(7, 40, 19),
    "quantized-conv": lo.Conv2d(12, 20, 3, padding=1, height=6, width=7, quant=QUANT),
    "quantized-matmul": lo.Matmul(5, 24, 10, quant=lo.QuantSpec()),
    "conv1d-same": lo.Conv1d(6, 20, 4, padding="same", length=23),
    "conv3d-asymmetric": lo.Conv3d(4, 16, 3, stride=(1, 2, 1), padding=((1, 0), 1, (0, 1)), depth=4, height=7,
                                   width=5),
    "matmul-batched-transposed": lo.Matmul(6, 40, 11, batch=(2,), trans_a=True, trans_b=True),
    "gemm-scaled": lo.Gemm(6, 40, 11, trans_b=True, alpha=0.5, beta=2.0, c_shape=(40,)),
    "quantized-matmul-transposed": lo.Matmul(5, 24, 10, trans_a=True, trans_b=True, quant=QUANT),
}


def rows(log: Path) -> list[tuple]:
    with sqlite3.connect(log) as connection:
        return connection.execute("SELECT status, error, schedule FROM trials ORDER BY id").fetchall()


QUICK_OPS = ("conv",)     # the quick tier; every op in the full suite


@pytest.mark.parametrize("name", [name if name in QUICK_OPS else pytest.param(name, marks=pytest.mark.slow)
                                  for name in OPS])
def test_finds_a_verified_schedule(name):
    op = OPS[name]
    result = lo.tune(op, trials=3, budget=BUDGET, progress=False, algorithms="direct")
    assert len(result.trials) == 3 and [t.number for t in result.trials] == [1, 2, 3]
    assert result.timing.verified and result.best.op is op
    assert result.timing.min == min(t.seconds for t in result.trials if t.seconds is not None)
    ok, _ = verify(result.best.compile(result.isa))
    assert ok
    assert all(t.model["predicted_seconds"] > 0 for t in result.trials)
    # the kernel model prices every SIMD candidate, the tile model every AMX one
    assert all(t.model["model_seconds"] > 0 for t in result.trials)
    # the figure's contract, whatever the machine's noise makes of 3 trials: a value in [-1, 1], or
    # None with the reason (fewer than 3 modelled trials, or model or measured times all tied)
    rho, why = result.model_spearman, result.model_spearman_undefined
    assert (rho is None) == (why is not None)
    assert rho is None or -1 <= rho <= 1
    assert (f"Spearman {rho:+.3f}" if rho is not None else why) in str(result)


@pytest.mark.slow
def test_table_plot_and_dict(tmp_path):
    result = lo.tune(OPS["matmul"], trials=3, budget=BUDGET, progress=False)
    assert result.table().count("\n") >= 3 and "*" in result.table()
    assert result.plot(tmp_path / "tune.png").stat().st_size > 0
    data = result.to_dict()
    assert len(data["trials"]) == 3
    assert data["best"]["schedule"] == lo.to_toml(result.best, algorithm=result.algorithm)   # says what it is
    curve = result.best_so_far()
    assert curve == sorted(curve)
    assert result.first_within(1.0).number == result.best_number
    assert result.first_within(1e-9).number == next(t.number for t in result.trials if t.seconds is not None)
    assert [t.elapsed for t in result.trials] == sorted(t.elapsed for t in result.trials)
    assert 0 < result.trials[-1].elapsed <= result.elapsed
    assert curve[-1] == pytest.approx(OPS["matmul"].flops / result.timing.min / 1e9)


@pytest.mark.slow
def test_resume_skips_measured_candidates_and_best_schedule(tmp_path):
    log = tmp_path / "tune.db"
    op = OPS["depthwise"]
    first = lo.tune(op, trials=2, budget=BUDGET, log=log, progress=False, algorithms="direct")
    second = lo.tune(op, trials=3, budget=BUDGET, log=log, progress=False, algorithms="direct")
    assert [t.logged for t in second.trials] == [True, True, False]
    assert [t.schedule for t in second.trials[:2]] == [t.schedule for t in first.trials]
    assert len(rows(log)) == 3
    assert lo.best_schedule(op, log=log).steps == second.best.steps
    assert lo.best_schedule(OPS["grouped"], log=log) is None
    assert lo.best_schedule(op, log=log, threads=2) is None
    best = lo.best_trial(op, log=log)               # the trial record: schedule, ISA, timing
    assert (best.isa, best.timing.min, best.to_schedule(op).steps) == (second.isa, second.timing.min,
                                                                        second.best.steps)
    assert lo.best_trial(op, log=log, threads=2) is None


@pytest.mark.slow
@pytest.mark.skipif("avx512" not in lo.available_isas(), reason="needs AVX-512 next to AVX2")
def test_best_trial_rebuilds_the_winner_on_the_isa_it_ran(tmp_path):
    log, op = tmp_path / "tune.db", OPS["matmul"]
    lo.tune(op, trials=2, isa="avx2", budget=BUDGET, log=log, progress=False, algorithms="direct")
    avx2 = lo.best_trial(op, log=log)
    assert avx2.isa == "avx2"                       # best_schedule alone would compile it for AVX-512
    kernel = avx2.to_schedule(op).compile(avx2.isa)
    assert kernel.isa == "avx2" and verify(kernel)[0]
    lo.tune(op, trials=2, isa="avx512", budget=BUDGET, log=log, progress=False, algorithms="direct")
    with TuningLog(log, readonly=True) as tuning_log:
        fastest = min((t for t in tuning_log.trials(op) if t.status == "ok"), key=lambda t: t.timing.min)
    best = lo.best_trial(op, log=log)
    assert (best.isa, best.timing.min) == (fastest.isa, fastest.timing.min)
    assert lo.best_trial(op, log=log, isa="avx2").isa == "avx2"
    assert lo.best_schedule(op, log=log).steps == best.to_schedule(op).steps


def crash(task):
    """A candidate whose worker dies (what a segfaulting kernel does to it)."""
    os.abort()


def hang(task):
    """A candidate whose kernel never returns."""
    time.sleep(600)


HANG_TIMEOUT = 2.0     # seconds: the hanging call's executor; a call that never returns is past any timeout


class FaultyExecutor(IsolatedExecutor):
    """The second trial crashes its worker, the third hangs past the timeout. The real trials run with the
    default timeout (no load makes them time out); the hanging one in an executor of its own with
    ``HANG_TIMEOUT``, so that the test does not wait out a timeout long enough for a real trial."""

    def __init__(self):
        super().__init__()
        self.hangs = IsolatedExecutor(timeout=HANG_TIMEOUT)
        self.calls = 0

    def submit(self, fn, /, *args, **kwargs):
        self.calls += 1
        if self.calls == 3:
            return self.hangs.submit(hang, *args, **kwargs)
        return super().submit(crash if self.calls == 2 else fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.hangs.shutdown(wait, cancel_futures=cancel_futures)
        super().shutdown(wait, cancel_futures=cancel_futures)


@pytest.mark.slow
def test_crashing_and_hanging_candidates_are_failed_trials(tmp_path):
    log = tmp_path / "tune.db"
    executor = FaultyExecutor()
    try:
        result = lo.tune(OPS["matmul"], trials=4, budget=BUDGET, log=log, executor=executor, progress=False)
    finally:
        executor.shutdown()
    assert [t.status for t in result.trials] == ["ok", "crashed", "timeout", "ok"]
    assert "SIGABRT" in result.trials[1].error and f"{HANG_TIMEOUT:g} s" in result.trials[2].error
    assert result.best_number in (1, 4) and result.timing.verified
    assert [r[0] for r in rows(log)] == ["ok", "crashed", "timeout", "ok"]


def logged_so_far(log) -> list:
    """The rows of a log that a running search may not have created yet (none until its table exists)."""
    try:
        return rows(log) if log.exists() else []
    except sqlite3.OperationalError:          # the file is there, its trials table not yet
        return []


@pytest.mark.slow
def test_kill_9_mid_search_keeps_the_logged_trials(tmp_path):
    log = tmp_path / "tune.db"
    script = (f"import loopopt as lo; lo.tune(lo.Matmul(7, 40, 19), trials=60, budget={BUDGET}, "
              f"log={str(log)!r}, progress=False)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(logged_so_far(log)) < 2:
            time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    logged = rows(log)
    assert len(logged) >= 2
    resumed = lo.tune(lo.Matmul(7, 40, 19), trials=len(logged) + 1, budget=BUDGET, log=log, progress=False)
    assert [t.logged for t in resumed.trials] == [True] * len(logged) + [False]
    assert [t.schedule for t in resumed.trials[:-1]] == [r[2] for r in logged]
    assert len(rows(log)) == len(logged) + 1


@pytest.mark.parametrize("content, message", [
    (b"this is not a database, but a file someone keeps" * 100, "cannot be used"),
    ("foreign", "not a loopopt tuning log"),
    ("schema 2", "schema version 2"),
])
def test_corrupt_or_foreign_log_is_refused_and_left_alone(tmp_path, content, message):
    log = tmp_path / "log.db"
    if isinstance(content, bytes):
        log.write_bytes(content)
    else:
        with sqlite3.connect(log) as connection:
            if content == "foreign":
                connection.execute("CREATE TABLE measurements (x REAL)")
            else:
                connection.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                connection.execute("INSERT INTO meta VALUES ('application', 'loopopt tuning log'), "
                                   "('schema', '2')")
        connection.close()
    before = log.read_bytes()
    with pytest.raises(TuningLogError, match=message) as info:
        lo.tune(OPS["matmul"], trials=1, budget=BUDGET, log=log, progress=False)
    assert str(log) in str(info.value) and log.read_bytes() == before
    with pytest.raises(TuningLogError, match=message):
        lo.best_schedule(OPS["matmul"], log=log)


def test_bad_input_is_refused():
    op = OPS["matmul"]
    for kwargs, message in (({"trials": 0}, "trials must be an integer >= 1, got 0"),
                            ({"seconds": 0}, "seconds must be > 0"),
                            ({"threads": 0}, "threads must be an integer >= 1"),
                            ({"isa": "avx9"}, "unknown isa 'avx9'")):
        with pytest.raises(ValueError, match=message):
            lo.tune(op, **kwargs)
    with pytest.raises(TypeError, match="concurrent.futures.Executor or a dask.distributed.Client, got str"):
        lo.tune(op, trials=1, executor="tcp://scheduler:8786", progress=False)
    with pytest.raises(TuneError, match="64 iterations to split over threads"):
        lo.tune(op, threads=64, progress=False)
    with pytest.raises(TuningLogError, match="does not exist"):
        lo.best_schedule(op, log="/nonexistent/tune.db")


def test_space_follows_the_op_roles():
    depthwise = candidates(OPS["depthwise"].with_quant(QUANT), "avx512")
    assert {c.knobs.weights for c in depthwise} == {"plain", "taps"}   # one channel per group: dots on taps
    taps = next(c for c in depthwise if c.knobs.weights == "taps").schedule
    assert dict(taps.layouts)["W"] == "OIHW4w" and taps.vector_loop.name == "ow_i"
    quantized = candidates(OPS["quantized-conv"], "avx512")
    dot = next(c for c in quantized if c.knobs.weights == "dot")
    assert dict(dot.schedule.layouts)["W"].endswith("16o4i") and dot.schedule.loop("c_i").extent == 4
    parallel = candidates(OPS["conv"], "avx512", threads=2)
    assert parallel and all(c.schedule.parallel_loop.name == c.knobs.parallel for c in parallel[:20])
    matmul = candidates(lo.Matmul(8, 64, 600), "avx512")
    assert {c.knobs.cache_block for c in matmul} == {0, 64, 128, 256, 512}
    shares = candidates(lo.Matmul(8, 64, 768), "avx512")     # its halves and quarters too: no partial block
    assert {c.knobs.cache_block for c in shares} == {0, 64, 128, 192, 256, 384, 512}
    bf16 = lo.Conv2d(8, 16, 3, padding=1, height=6, width=6, dtype="bfloat16")
    pairs = [c for c in candidates(bf16, "avx512") if c.isa == "avx512" and c.knobs.weights == "dot"]
    assert bool(pairs) == bf16_dot_available("avx512")     # vdpbf16ps where this CPU runs it
    if pairs:
        pair = pairs[0].schedule
        assert dict(pair.layouts)["W"].endswith("16o2i") and pair.loop("c_i").extent == 2
        assert "dpbf16_ps" in pair.compile("avx512").source
    odd = lo.Conv2d(7, 16, 3, padding=1, height=6, width=6, dtype="bfloat16")    # half a pair: widened
    assert "dot" not in {c.knobs.weights for c in candidates(odd, "avx512") if c.isa == "avx512"}


def test_blocks_run_along_the_dim_of_the_longest_window():
    tall, isa = lo.Conv2d(3, 16, (3, 1), padding=(1, 0), height=6, width=5), resolve_isa("auto")   # 7x1-like
    assert {c.knobs.pixel for c in candidates(tall, isa)} == {None, "oh"}
    block = next(c for c in candidates(tall, isa) if c.knobs.pixel == "oh")
    assert block.schedule.loop("oh_i").extent == block.knobs.pixel_block and "oh_o" in block.knobs.outer
    assert block.knobs.as_dict()["pixel"] == "oh" and "pixel" not in candidates(tall, isa)[0].knobs.as_dict()
    assert verify(block.schedule.compile(isa))[0]
    for op in (lo.Conv2d(3, 16, (1, 3), padding=(0, 1), height=6, width=5), OPS["conv"]):    # 1x3, 3x3
        assert {c.knobs.pixel for c in candidates(op, isa)} == {None}                      # ow only


@pytest.mark.slow
def test_cli_tune_json_and_save(tmp_path, capsys):
    saved, log = tmp_path / "best.toml", tmp_path / "tune.db"
    status = main(["tune", "--matmul", "8,16,8", "--trials", "2", "--budget", str(BUDGET), "--json", "--log",
                   str(log), "--save", str(saved)])
    out, err = capsys.readouterr()
    data = json.loads(out)
    check("tune", data, rate="GFLOP/s")
    assert status == 0 and err == "" and len(data["trials"]) == 2 and data["saved"] == str(saved)
    assert data["provenance"]["fingerprint"] == lo.machine_profile().fingerprint
    assert "model_spearman" in data and all("model_seconds" in t["model"] for t in data["trials"])
    op = lo.Matmul(8, 16, 8)
    assert lo.load_schedule(str(saved), op).steps == lo.best_schedule(op, log).steps
    status = main(["tune", "--matmul", "8,16,8", "--trials", "1", "--log", str(tmp_path)])
    assert status == 2 and "is a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["tune", "--matmul", "8,16,8", "--trials", "0"])
    assert info.value.code == 2 and "must be an integer >= 1" in capsys.readouterr().err


@pytest.mark.slow
@needs_amx
def test_amx_candidates_join_the_int8_search(tmp_path):
    op = lo.Conv2d(40, 24, 3, padding=1, height=6, width=20, quant=lo.QuantSpec())
    tiles = [c for c in candidates(op, "avx512", tiles=True) if c.isa == "amx"]
    assert len(tiles) == 8 and candidates(op, "amx") == tiles
    # 2 threads: the 8 with the pixel blocks split over them and the 4 of 16-channel blocks with the
    # channel blocks split (24 channels make one 32-channel block)
    parallel = candidates(op, "amx", threads=2)
    assert len(parallel) == 12 and {c.knobs.parallel for c in parallel} == {"pixels", "channels"}
    assert all(c.schedule.parallel_loop is not None for c in parallel)
    assert not [c for c in candidates(op, "avx512") if c.isa == "amx"]     # isa="avx512" asked: no tiles
    bf16 = lo.Conv2d(40, 24, 3, padding=1, height=6, width=20, dtype="bfloat16")
    # bf16: each of the 8 blocks with taps and with gathered patches (720 bytes in 12 K-steps, 18 by taps)
    bf16_tiles = [c for c in candidates(bf16, "avx512", tiles=True) if c.isa == "amx"]
    assert sorted(c.knobs.patches for c in bf16_tiles) == [False] * 8 + [True] * 8
    result = lo.tune(op, trials=1, isa="amx", budget=BUDGET, progress=False)
    assert result.isa == "amx" and result.timing.verified
    assert all(t.knobs["isa"] == "amx" and t.model["predicted_seconds"] > 0 for t in result.trials)
    assert "AMX tiles, " in result.table()
    saved = lo.save_schedule(result.best, tmp_path / "tiles.toml", isa=result.isa)
    assert 'isa = "amx"' in saved.read_text()
    ok, _ = verify(result.best.compile(result.isa))
    assert ok
    result = lo.tune(op, trials=1, threads=2, isa="amx", budget=BUDGET, progress=False)
    kernel = result.best.compile(result.isa)
    kernel.set_threads(2)
    assert result.timing.verified and "split over threads" in result.table() and verify(kernel)[0]


def test_no_amx_candidates_where_the_tiles_refuse():
    depthwise = lo.Conv2d(8, 8, 3, groups=8, height=5, width=5, quant=lo.QuantSpec())
    float32 = lo.Conv2d(8, 8, 3, height=5, width=5)
    assert candidates(depthwise, "amx") == [] and candidates(float32, "amx") == []


def test_fit_corrects_the_model_scale_and_sides_with_the_measurements():
    rng = np.random.default_rng(0)
    model, heuristic = rng.uniform(1e-4, 1e-3, 12), rng.uniform(1e-4, 1e-3, 12)
    strided = rng.integers(0, 2, 12)
    features = [(math.log(m), math.log(h), float(s)) for m, h, s in zip(model, heuristic, strided)]
    few = [((math.log(1e-3), math.log(2e-3), 0.0), 5e-3)] * (MIN_TRIALS - 1)
    assert Fit.of([]) == Fit() and Fit().predict(few[0][0]) == pytest.approx(1e-3)   # the model as it is
    assert Fit.of(few).weights == () and Fit.of(few).predict(few[0][0]) == pytest.approx(5e-3)   # its scale
    scaled = Fit.of(list(zip(features, 3 * model)))                        # the model, 3 times too fast
    assert scaled.predict((math.log(1e-3), math.log(5e-4), 1.0)) == pytest.approx(3e-3, rel=1e-6)
    assert scaled.weights == pytest.approx((1, 0, 0), abs=1e-9)
    sided = Fit.of(list(zip(features, 2 * heuristic)))                     # the heuristic was right
    assert sided.weights[1] > 0.5 > abs(sided.weights[0])
    predicted = [sided.predict(f) for f in features]
    assert spearman(predicted, heuristic) > 0.9 > spearman(model, heuristic)
    slowed = Fit.of(list(zip(features, model * np.where(strided, 2.0, 1.0))))    # strided weights: 2x
    assert slowed.weights[2] == pytest.approx(math.log(2), rel=0.2)
    assert Fit().predict((math.inf, 0.0, 0.0)) == math.inf                 # a refused schedule
    assert Fit(0.0, (1000.0, 0.0, 0.0)).predict((1.0, 0.0, 0.0)) == math.inf   # beyond float: inf, no error
    flat = [((f[0], f[1], 1.0 + 1e-12 * i), t) for i, (f, t) in enumerate(zip(features, model))]
    assert abs(Fit.of(flat).weights[2]) < 1e-6          # rounding noise in a constant feature: no weight


def test_guide_prices_the_thread_imbalance_and_features_of_each_candidate():
    op = lo.Matmul(7, 40, 19)                               # i_o of 7 pixel blocks of 1 split over 2 threads
    found = [c for c in rank(candidates(op, "avx512", threads=2)) if c.knobs.parallel == "i_o"]
    uneven = next(c for c in found if c.knobs.pixel_block == 1)          # 7 rows: 4 and 3, 8/7 of even
    assert imbalance(uneven, 2) == pytest.approx(8 / 7) and imbalance(uneven, 1) == 1
    # the heuristic's time on 2 threads: the busiest thread's 4 of 7 rows, half the operands' time
    [alone] = rank([replace(uneven, threads=1, model=())])
    memory = alone.figures["stream_seconds"] + alone.figures["strided_seconds"]
    compute = alone.figures["predicted_seconds"] - memory
    assert uneven.threads == 2
    assert uneven.figures["predicted_seconds"] == pytest.approx((compute * 8 / 7 + memory) / 2)
    guide = Guide([uneven], X86, model=lambda c: Price(1e-3, load=0.5, latency=2.0, issue=0.0), threads=2)
    stream = uneven.figures["stream_seconds"]
    assert guide.modelled(0) == pytest.approx((1e-3 + stream) * 8 / 7 / 2)       # the busiest thread's 4 of 7
    features = dict(zip(FEATURES, guide.features(0), strict=True))
    prior = math.sqrt(guide.modelled(0) * uneven.figures["predicted_seconds"])    # BLEND 0.5: geometric mean
    assert guide.prior(0) == pytest.approx(prior) and features["model"] == pytest.approx(math.log(prior))
    assert features["load"] == pytest.approx(math.log(0.5))
    assert features["latency"] == pytest.approx(math.log(2))
    assert features["issue"] == pytest.approx(math.log(SMALLEST)) and features["unpriced"] == 0
    # the nest's shape: a block of 1 row, the places of its outer loops (0 outermost, 1 innermost, -1
    # absent), the reduction k alone
    outer = uneven.knobs.outer
    assert features["pixels"] == 0
    assert features["channels"] == pytest.approx(math.log(uneven.knobs.channel_block))
    assert features["pixel_loop"] == outer.index("i_o") / (len(outer) - 1) and len(outer) > 1
    assert features["channel_loop"] == (outer.index("j_o") / (len(outer) - 1) if "j_o" in outer else -1)
    assert features["cache_loop"] == -1 and features["channels_order"] == 1
    unpriced = Guide([uneven], X86, model=lambda c: None)               # a table lookup: the heuristic's time
    assert unpriced.fitted(0) == pytest.approx(uneven.figures["predicted_seconds"])
    assert dict(zip(FEATURES, unpriced.features(0), strict=True))["unpriced"] == 1
    assert "model_seconds" not in unpriced.figures(0)


def test_ranking_sees_rolled_loops_partial_blocks_and_scattered_outer_loops(recorded_profile):
    conv = lo.Conv2d(64, 64, 3, padding=1, height=12, width=12)

    def knobs(pb, reduction, unroll, outer=("n", "oh", "ow_o", "k_o"), cache_block=0):
        return Candidate(conv, "avx512", Knobs(pb, 32, reduction, outer, "packed", cache_block, unroll))
    assert not rolled(knobs(4, ("kh", "kw", "c"), (("c", 4),)))
    assert rolled(knobs(4, ("kh", "kw", "c"), (("kw", 3),)))            # c, innermost, still steps
    assert not rolled(knobs(4, ("kh", "c", "kw"), (("kw", 3),))) and rolled(knobs(4, ("kh", "c", "kw"), ()))
    assert not rolled(knobs(4, ("kh", "kw", "c"), (("c_i", 4),), ("n", "oh", "c_o", "ow_o", "k_o"), 32))
    assert tail(knobs(4, ("kh", "kw", "c"), ())) == 1                    # 12 columns in blocks of 4
    assert tail(knobs(5, ("kh", "kw", "c"), ())) == pytest.approx((15 / 12) ** TAIL)
    partial_channels = Knobs(4, 48, ("kh", "kw", "c"), ("n", "oh", "ow_o", "k_o"), "packed")
    partial = Candidate(conv, "avx512", partial_channels)
    assert channel_tail(partial) == pytest.approx(MASKED * (96 / 64) ** TAIL)
    assert channel_tail(knobs(5, ("kh", "kw", "c"), ())) == 1            # 64 channels in blocks of 32
    packed = knobs(4, ("kh", "kw", "c"), (("c", 4),))
    plain = Candidate(conv, "avx512", replace(packed.knobs, weights="plain"))
    tied = rank([plain, packed])                                        # no conflict: the same prediction
    assert tied[0].figures["predicted_seconds"] == tied[1].figures["predicted_seconds"]
    assert [c.knobs.weights for c in tied] == ["packed", "plain"]
    assert best([plain, packed]).knobs == packed.knobs
    gemm = lo.Matmul(12, 64, 64)                          # no window: partial rows cost their lanes only
    assert tail(Candidate(gemm, "avx512", Knobs(5, 32, ("k",), ("i_o", "j_o"), "packed"))) == 1
    assert out_of_order(conv, Knobs(4, 32, ("c",), ("n", "oh", "ow_o", "k_o"), "packed")) == 0
    assert out_of_order(conv, Knobs(4, 32, ("c",), ("n", "k_o", "ow_o", "oh"), "packed")) == 3
    assert out_of_order(conv, Knobs(4, 32, ("c",), ("n", "ow_o", "oh", "k_o"), "packed")) == 1


@pytest.mark.slow
def test_avx2_blocks_fit_its_sixteen_registers(recorded_profile):
    """AVX2's 16 vector registers hold half the accumulators and spares of AVX-512's 32 (``chains``,
    ``tight_spare``), and on AVX2 a padded window's partial pixel block costs its unused positions only
    (``PIXEL_TAIL``): ResNet-50's 1024->256 1x1 conv at 14x14 takes a block of several vectors with
    registers to spare, not 14x8 (a broadcast per multiply-add, none spare: 3.4x the time on Zen 3)."""
    assert (chains("avx512"), tight_spare("avx512"), chains("avx2"), tight_spare("avx2")) == (16, 4, 8, 2)
    conv = lo.Conv2d(64, 64, 3, padding=1, height=12, width=12)
    partial = Knobs(5, 16, ("kh", "kw", "c"), ("n", "oh", "ow_o", "k_o"), "packed")
    assert tail(Candidate(conv, "avx2", partial)) == 1
    assert tail(Candidate(conv, "avx512", partial)) == pytest.approx((15 / 12) ** TAIL)
    chosen = best(candidates(lo.Conv2d(1024, 256, 1, height=14, width=14), "avx2")).knobs
    vectors = chosen.channel_block // 8
    assert vectors >= 2 and 16 - chosen.pixel_block * vectors - vectors - 1 >= tight_spare("avx2"), chosen


def test_a_requantizing_dot_block_keeps_its_accumulators_in_registers(recorded_profile):
    """MobileNetV2's 64->384 1x1 conv at 14x14 (u8 x s8, requantized to u8): the ranking took a 7x48
    block, whose 21 accumulators GCC 12 partly stores to the stack on every step of its reduction loop;
    the chosen block now keeps at most ``DOT_LIVE``, and with its weight vectors and a broadcast they
    fit the 32 zmm registers."""
    conv = lo.Conv2d(64, 384, 1, height=14, width=14, quant=QUANT, bias=True)
    chosen = first_choice(conv, "avx512")
    vectors = -(-chosen.knobs.channel_block // 16)
    accumulators = chosen.knobs.pixel_block * vectors
    assert chosen.knobs.weights == "dot" and accumulators <= DOT_LIVE and accumulators + vectors + 1 <= 32

    def block(op, pixels, channels, unroll):
        return Candidate(op, "avx512", Knobs(pixels, channels, ("kh", "kw", "c"), ("n", "oh", "ow_o", "k_o"),
                                             "dot", 0, unroll))
    assert spills_accumulators(block(conv, 7, 48, (("c_o", 4),)), 21)          # 16 dot steps, 4 unrolled
    assert not spills_accumulators(block(conv, 5, 64, (("c_o", 4),)), 20)
    whole = lo.Conv2d(24, 144, 1, height=56, width=56, quant=QUANT, bias=True)  # 6 dot steps, all unrolled
    assert not spills_accumulators(block(whole, 7, 48, (("c_o", 6),)), 21)
    assert spills_accumulators(block(whole, 7, 48, (("c_o", 3),)), 21)
    fp32 = lo.Conv2d(64, 384, 1, height=14, width=14)
    assert not spills_accumulators(Candidate(fp32, "avx512", Knobs(7, 48, ("kh", "kw", "c"),
                                                                   ("n", "oh", "ow_o", "k_o"), "packed")), 21)


def test_strided_weights_cost_where_their_rows_conflict_in_the_caches():
    l1 = Cache("L1", 48 << 10, 12, 64, 1)                   # 64 sets of 12 ways: a way is 4 KB
    assert conflict_lines(l1, 12 << 10, 256, 2) == 2 * 12    # rows 12 KB apart: every row in the same 2 sets
    assert conflict_lines(l1, 256, 256, 2) == 16 * 2 * 12    # 256 B apart: 16 row starts per way
    assert conflict_lines(l1, 64, 1000, 1) == 64 * 12        # contiguous: the whole cache
    gemm = lo.Matmul(384, 3072, 768)                          # 12 KB weight rows, 9.4 MB of weights
    plain = Knobs(8, 32, ("k",), ("j_o", "i_o"), "plain")
    assert strided_seconds(gemm, plain, 768) > 0
    assert strided_seconds(gemm, Knobs(8, 32, ("k",), ("j_o", "i_o"), "packed"), 768) == 0
    assert strided_seconds(lo.Matmul(64, 64, 64), plain, 64) == 0          # rows 256 B apart, all in L1
    down = lo.Matmul(384, 768, 3072)                                          # 3 KB rows: past the prefetcher
    assert strided_seconds(down, Knobs(8, 32, ("k",), ("j_o", "i_o"), "plain"), 384) > 0    # they fit L2


def test_activation_rows_a_way_apart_keep_a_weight_panel_out_of_l1():
    xeon, zen4 = Cache("L1", 48 << 10, 12, 64, 1), Cache("L1", 32 << 10, 8, 64, 1)     # 4 KB ways
    gemm = lo.Matmul(512, 1024, 1024)                  # A's rows 4 KB apart: 8 rows, 8 lines in each set
    assert activation_lines_per_set(gemm, 8, 256, None, 64) == 8
    assert activation_lines_per_set(gemm, 3, None, None, 64) == 3
    panel = Knobs(8, 32, ("k",), ("k_o", "j_o", "i_o"), "packed", 256)
    for l1 in (xeon, zen4):
        assert not weights_stay_in_l1(gemm, panel, 256 * 32 * 4, l1)             # 8 ways + 8 rows
    assert not weights_stay_in_l1(gemm, replace(panel, cache_block=128), 16 << 10, xeon)  # 4 + 8: none spare
    assert weights_stay_in_l1(gemm, replace(panel, pixel_block=3), 256 * 32 * 4, xeon)        # 8 + 3, 1 spare
    attention = lo.Matmul(128, 128, 64, batch=(12,))    # 256-byte rows, contiguous: one line a set
    assert activation_lines_per_set(attention, 8, None, None, 64) == 1
    assert weights_stay_in_l1(attention, Knobs(8, 32, ("k",), ("b", "i_o", "j_o"), "packed"), 8 << 10, zen4)
    pointwise = lo.Conv2d(1024, 256, 1, height=14, width=14)   # channels-last: 4 KB a position
    assert activation_lines_per_set(pointwise, 7, 128, None, 64) == 7
    three = lo.Conv2d(1024, 256, 3, padding=1, height=14, width=14)           # overlapping rows: not counted
    assert activation_lines_per_set(three, 7, 128, None, 64) == 0


def test_spearman_of_known_orders():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486833)   # a tie shares its mean rank
    assert spearman([1, 2], [1, 2]) is None and spearman([5, 5, 5], [1, 2, 3]) is None
    assert spearman_undefined([1, 2], [1, 2]) == "2 pairs, 3 needed"
    assert spearman_undefined([5, 5, 5], [1, 2, 3]) == ("the first values all tie, so there is no order "
                                                        "to compare")
    assert spearman_undefined([1, 2, 3], [2, 2, 2]).startswith("the second values all tie")
    assert spearman_undefined([1, 2, 3], [3, 1, 2]) is None
    assert -1 <= spearman([0.1, 0.7, 0.3, 0.9, 0.2], [1e-9, 7e-9, 3e-9, 9e-9, 2e-9]) <= 1   # never 1 + 2e-16
    with pytest.raises(ValueError, match="paired values, got 3 and 2"):
        spearman([1, 2, 3], [1, 2])


def test_guide_reorders_the_untried_candidates_by_the_measured_trials(recorded_profile):
    # 16 output channels: blocks of whole channels lead the ranking (24 would leave every block partial,
    # its ``channel_tail`` a factor of the heuristic that none of the fit's features follows)
    ranked = rank(candidates(OPS["conv-1x3-dilated"], "avx512"))[:60]
    heuristic = [c.figures["predicted_seconds"] for c in ranked]
    # a wrong model, wrong enough that the prior (its blend with the heuristic) reverses the heuristic
    guide = Guide(ranked, X86, model=lambda c: Price(1e-12 / c.figures["predicted_seconds"] ** 3))
    guide.score_best(60)
    before = guide.order(range(60))
    assert before == sorted(range(60), key=lambda i: (guide.prior(i), i))    # the prior's order: a wrong one
    assert spearman([heuristic[i] for i in before], range(60)) < -0.8
    measured = before[::6]                         # trials spread over the order, their times following
    for index in measured:                         # the heuristic
        guide.observe(index, 2 * heuristic[index])
    after = guide.order(i for i in before if i not in measured)
    assert spearman([heuristic[i] for i in after], range(len(after))) > 0.9
    assert guide.figures(after[0])["fitted_seconds"] == pytest.approx(guide.fitted(after[0]))


def test_held_out_predictions_leave_each_trial_out_of_its_fit():
    ranked = rank(candidates(OPS["conv"], "avx512"))[:12]
    measured = {i: (1 + i % 5) * 1e-4 for i in range(12)}

    def held(times):
        guide = Guide(ranked, X86, model=lambda c: Price(c.figures["predicted_seconds"]))
        for index, seconds in times.items():
            guide.observe(index, seconds)
        return guide.held_out()

    first = held(measured)
    assert sorted(first) == list(range(12))
    changed = held({**measured, 3: 1.0})           # trial 3 measured 1000x slower
    assert changed[3] == pytest.approx(first[3])   # its own prediction does not see its time
    assert any(changed[i] != pytest.approx(first[i]) for i in range(12) if i != 3)    # the others' do


LARGE = lo.Conv2d(512, 512, 3, padding=1, height=7, width=7)    # ResNet-18's last layers: 9.4 MB of weights


def test_streamed_bytes_count_the_weights_again_per_row_when_they_outgrow_the_cache():
    weights, source = 512 * 512 * 9 * 4, 512 * 7 * 7 * 4
    rows_outside = Knobs(4, 32, ("c", "kh", "kw"), ("n", "oh", "k_o", "ow_o"), "plain")
    rows_inside = Knobs(7, 32, ("c", "kh", "kw"), ("n", "ow_o", "k_o", "oh"), "plain")
    assert streamed_bytes(LARGE, rows_outside, 1 << 20) == 7 * weights + source
    assert streamed_bytes(LARGE, rows_inside, 1 << 20) == weights + source
    assert streamed_bytes(LARGE, rows_outside, 16 << 20) == weights + source    # all weights fit


@pytest.mark.slow
def test_first_choice_is_the_search_order_without_measuring(recorded_profile):
    large = first_choice(LARGE)
    assert large.knobs.outer.index("k_o") < large.knobs.outer.index("oh")   # a channel block's weights stay
    assert first_choice(LARGE) is large                                     # ranked once per shape
    quantized = first_choice(OPS["quantized-conv"])
    assert quantized.isa == "amx" or quantized.knobs.weights == "dot"       # AMX tiles or the VNNI dot loop
    assert first_choice(OPS["depthwise"]).knobs.unroll
    assert first_choice(lo.Matmul(1, 8, 4), threads=2) is None              # no loop to split over 2 threads
    narrow = lo.Conv2d(32, 128, 3, padding=1, height=7, width=7)   # 7x48 blocks: 2 whole, 1 of 32 of 48
    chosen = first_choice(narrow, "avx512").knobs
    assert 128 % chosen.channel_block == 0 and chosen.weights == "packed"   # no partial block; packed rows
    wide = lo.Conv2d(64, 512, 3, padding=1, height=7, width=7)   # 7x48: 10 whole blocks, 1 of 32 of 48
    assert first_choice(wide, "avx512").knobs.channel_block == 32          # masked code on every block


def test_a_pointwise_conv_unrolls_its_input_channels(recorded_profile):
    pointwise = lo.Conv2d(64, 64, 1, height=14, width=14)     # kh, kw of extent 1 go outside the channels
    chosen = first_choice(pointwise, "avx512")
    assert chosen.knobs.reduction == ("kh", "kw", "c") and not rolled(chosen)


def test_a_kernel_that_adds_a_residual_visits_a_large_output_in_its_memory_order(recorded_profile):
    # ResNet-50's 64->256 1x1 conv at 56x56: 3.2 MB of output (and of residual), beyond half of L2
    wide = lo.Conv2d(64, 256, 1, height=56, width=56)
    alone, shortcut = first_choice(wide, "avx512"), first_choice(wide, "avx512", residual=True)
    assert out_of_order(wide, alone.knobs) > 0 and "residual_seconds" not in alone.figures   # weights in L1
    assert out_of_order(wide, shortcut.knobs) == 0 and shortcut.figures["residual_seconds"] > 0
    assert (shortcut.knobs.pixel_block, shortcut.knobs.channel_block) == (alone.knobs.pixel_block,
                                                                          alone.knobs.channel_block)
    narrow = Knobs(7, 48, ("c", "kh", "kw"), ("n", "oh", "k_o", "ow_o"), "packed")
    assert residual_seconds(lo.Conv2d(256, 1024, 1, height=14, width=14), narrow) == 0   # 0.8 MB: it fits


def test_partial_sums_reloaded_out_of_order_from_beyond_l2_cost_more(recorded_profile):
    """GEMM 512x1024x1024 (2 MB of output, beyond half of L2): a cache-blocked order that visits the output
    out of its memory order (the rows' loop inside the panels') reloads each block's partial sums from
    beyond L2 a row apart (``reload_steps``: ``SCATTERED_RELOAD`` times ``RELOAD``), so 256-deep panels
    with the rows' loop outside rank before 512-deep ones with it inside, the default's order before."""
    gemm = lo.Matmul(512, 1024, 1024)
    inside = Knobs(8, 32, ("k",), ("k_o", "j_o", "i_o"), "packed", 512, (("k_i", 4),))
    outside = replace(inside, outer=("k_o", "i_o", "j_o"), cache_block=256)
    assert out_of_order(gemm, inside) == 1 and out_of_order(gemm, outside) == 0
    assert reload_steps(gemm, inside) == SCATTERED_RELOAD * RELOAD and reload_steps(gemm, outside) == RELOAD
    assert reload_steps(gemm, replace(inside, cache_block=None)) == STORE
    fits = lo.Conv2d(1024, 512, 1, height=14, width=14)           # 0.4 MB of output: within half of L2
    assert reload_steps(fits, Knobs(5, 64, ("kh", "kw", "c"), ("n", "c_o", "k_o", "oh", "ow_o"), "packed",
                                    512)) == RELOAD
    ranked = rank([Candidate(gemm, "avx512", inside), Candidate(gemm, "avx512", outside)])
    assert ranked[0].knobs == outside


def test_a_large_gemm_runs_its_rows_past_l2_resident_channel_panels(recorded_profile):
    """GEMM 512x1024x1024 (4 MB of packed weights, 2 MB of output, both beyond half of L2): the search has
    its packed-weights blocks also in 128-channel panels (512 KB, a quarter of L2), the whole reduction at
    once; a panel's re-reads of A stream in order (no pass counted), each output is stored once, so the
    panels rank before the 256-deep cache blocks that reload the partial sums. An op whose output fits
    has them too where its weights do not (2048->512 1x1 at 14x14: 4 MB, 0.4 MB of output); ops whose
    weights fit, quantized, windowed or bfloat16 ops have none."""
    gemm = lo.Matmul(512, 1024, 1024)
    assert channel_panel(gemm, 32) == channel_panel(gemm, 64) == 128
    cached = Knobs(8, 32, ("k",), ("k_o", "i_o", "j_o"), "packed", 256, (("k_i", 4),))
    panelled = in_panels(gemm, replace(cached, cache_block=0, unroll=(("k", 4),)), 128)
    assert panelled.outer == ("j_o_o", "i_o", "j_o_i")
    assert streamed_bytes(gemm, panelled, 1 << 20) == streamed_bytes(gemm, cached, 1 << 20) == 6 << 20
    ranked = rank([Candidate(gemm, "avx512", cached), Candidate(gemm, "avx512", panelled)])
    assert ranked[0].knobs == panelled
    panels = [c.knobs for c in candidates(gemm, "avx512") if c.knobs.channel_panel]
    assert panels and all(k.weights == "packed" and not k.cache_block for k in panels)
    assert not any(c.knobs.channel_panel for c in candidates(gemm, "avx512", threads=2))
    assert channel_panel(lo.Conv2d(2048, 512, 1, height=14, width=14), 32) == 64     # 512 KB
    for op in (lo.Conv2d(1024, 256, 1, height=14, width=14), lo.Matmul(512, 1024, 1024, quant=QUANT),
               lo.Conv2d(512, 512, 3, padding=1, height=28, width=28),
               lo.Matmul(512, 1024, 1024, dtype="bfloat16")):
        assert channel_panel(op, 32) == 0, op


def test_a_channel_panel_of_avx2_float_blocks_reads_its_weights_from_l2_at_its_bandwidth_share(
        recorded_profile):
    """ResNet-50-shaped 2048->512 1x1 at 14x14: on AVX2 a channel panel's float block is priced by
    ``l2_weight_share`` alone (``l2_fit`` 1), the same block without panels reading its weights from L2 at
    ``L2_FIT``, and AVX-512's panels (not measured) at ``L2_FIT`` too."""
    op = lo.Conv2d(2048, 512, 1, height=14, width=14)
    avx2 = [c for c in candidates(op, "avx2") if c.knobs.weights == "packed" and not c.knobs.cache_block]
    panel = next(c for c in avx2 if c.knobs.channel_panel)
    plain = next(c for c in avx2 if not c.knobs.channel_panel
                 and (c.knobs.pixel_block, c.knobs.channel_block) == (panel.knobs.pixel_block,
                                                                      panel.knobs.channel_block))
    assert l2_fit(panel) == 1.0 and l2_fit(plain) == L2_FIT < 1.0
    assert l2_fit(next(c for c in candidates(op, "avx512") if c.knobs.channel_panel)) == L2_FIT


def test_weights_of_few_positions_stream_once_where_the_output_fits(recorded_profile):
    """MobileNetV2's 320->1280 1x1 conv at 7x7 (1.6 MB of weights, 0.25 MB of output): the output fits half
    of L2, so visiting it out of order costs the streams nothing, and the channel block loop outside the
    rows (each block's weights read once) ranks before it inside them (the weights read once a row)."""
    heavy = lo.Conv2d(320, 1280, 1, height=7, width=7)
    assert output_fits(heavy) and not output_fits(lo.Conv2d(64, 256, 1, height=56, width=56))
    assert streams_in_any_order(heavy)
    assert not streams_in_any_order(lo.Conv2d(576, 160, 1, height=7, width=7))          # weights fit L2 too
    assert not streams_in_any_order(lo.Conv2d(128, 256, 3, stride=2, padding=1, height=28, width=28))  # taps
    per_row = Knobs(7, 32, ("kh", "kw", "c"), ("n", "ow_o", "c_o", "oh", "k_o"), "packed", 256, (("c_i", 4),))
    once = replace(per_row, outer=("n", "ow_o", "k_o", "c_o", "oh"))
    assert out_of_order(heavy, once) == 1 and out_of_order(heavy, per_row) == 0
    ranked = rank([Candidate(heavy, "avx512", per_row), Candidate(heavy, "avx512", once)])
    assert ranked[0].knobs == once
    assert ranked[0].figures["stream_seconds"] == ranked[1].figures["stream_seconds"]    # no scatter counted


class ModelTimedExecutor(concurrent.futures.Executor):
    """A fake measurement with a known order: each trial 'takes' the kernel model's time of its schedule."""

    def submit(self, fn, /, *args, **kwargs):
        task = args[0]
        schedule = schedule_from_toml(task.schedule, task.op)
        seconds = lo.kernel_model(schedule, task.isa, traffic=False).predicted_seconds
        timing = Timing(seconds, seconds, 0.0, 1, 1.0, 1.0, 100.0, True, 0.0)
        future = concurrent.futures.Future()
        future.set_result(here("ok", "", timing))
        return future


def test_search_reports_the_spearman_of_model_and_measured_time(capsys):
    op = OPS["matmul"]
    result = lo.tune(op, trials=6, executor=ModelTimedExecutor(), progress=False, algorithms="direct")
    assert result.model_spearman == pytest.approx(1)
    assert all(t.model["model_seconds"] == t.seconds for t in result.trials)
    assert result.to_dict()["model_spearman"] == pytest.approx(1)
    assert "model vs measured: Spearman +1.000 over 6 verified trials" in str(result)
    # the order the search picked by: the model's time with memory terms, refitted as trials came in
    ranking = spearman([t.model["fitted_seconds"] for t in result.trials], [t.seconds for t in result.trials])
    assert result.ranking_spearman == pytest.approx(ranking)
    assert result.to_dict()["ranking_spearman"] == pytest.approx(ranking)
    assert f"the prediction each trial was picked by: {ranking:+.3f}" in str(result)
    held = [(t.model["held_out_seconds"], t.seconds) for t in result.trials]    # the final fit, left out
    assert result.fit_spearman == pytest.approx(spearman(*zip(*held)))
    assert result.to_dict()["fit_spearman"] == pytest.approx(result.fit_spearman)
    assert f"the final fit, each trial left out of it: {result.fit_spearman:+.3f}" in str(result)
    assert f"model {time_unit(result.timing.min)[0]}" in result.table()     # in the unit of the best time


def die_with_the_worker(*args):
    """A trial whose cluster worker process dies (a node lost mid-trial)."""
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.fixture(scope="module")
def dask_cluster():
    """A LocalCluster of 2 worker processes, 1 thread each; a worker that dies fails its task at once
    (no retries on other workers)."""
    distributed = pytest.importorskip("dask.distributed")
    import dask
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1,
                                     dashboard_address=None) as cluster:
        yield cluster


def table_schema(log: Path) -> list[tuple]:
    with sqlite3.connect(log) as connection:
        return connection.execute("PRAGMA table_info(trials)").fetchall()


@pytest.mark.slow           # a LocalCluster takes 3-4 s to start, its trials a few s more
def test_dask_cluster_search_logs_the_same_schema_and_a_verified_best(tmp_path, dask_cluster):
    from dask.distributed import Client
    log, local = tmp_path / "cluster.db", tmp_path / "local.db"
    op = OPS["conv"]
    with Client(dask_cluster) as client:
        client.wait_for_workers(2)
        result = lo.tune(op, trials=4, budget=BUDGET, log=log, executor=client, progress=False,
                         algorithms="direct")
    assert len(result.trials) == 4 and all(t.status == "ok" for t in result.trials)
    assert verify(result.best.compile(result.isa))[0]
    lo.tune(op, trials=1, budget=BUDGET, log=local, progress=False, algorithms="direct")
    assert table_schema(log) == table_schema(local)
    with sqlite3.connect(log) as connection:
        hosts = {r[0] for r in connection.execute("SELECT host FROM trials")}
    assert hosts == {socket.gethostname()}                 # the workers' host, recorded by each trial
    assert lo.best_schedule(op, log=log).steps == result.best.steps


@pytest.mark.slow
def test_a_dask_worker_dying_mid_trial_is_a_failed_trial(tmp_path, dask_cluster):
    from dask.distributed import Client

    class Dying(Client):
        calls = 0

        def submit(self, fn, *args, **kwargs):
            Dying.calls += 1
            return super().submit(die_with_the_worker if Dying.calls == 2 else fn, *args, **kwargs)

    log = tmp_path / "tune.db"
    with Dying(dask_cluster) as client:
        client.wait_for_workers(2)
        result = lo.tune(OPS["matmul"], trials=3, budget=BUDGET, log=log, executor=client, progress=False)
    statuses = [t.status for t in result.trials]
    assert sorted(statuses) == ["crashed", "ok", "ok"]
    crashed = result.trials[statuses.index("crashed")]
    assert "died while running the trial" in crashed.error
    assert sorted(r[0] for r in rows(log)) == ["crashed", "ok", "ok"] and result.timing.verified


@pytest.mark.slow
def test_any_executor_runs_trials_in_flight_each_in_a_child_process(tmp_path):
    log = tmp_path / "tune.db"
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        result = lo.tune(OPS["conv"], trials=4, budget=BUDGET, log=log, executor=pool, progress=False,
                         algorithms="direct")
    assert [t.number for t in result.trials] == [1, 2, 3, 4] and result.timing.verified
    assert [r[0] for r in rows(log)] == [t.status for t in result.trials]


def test_walk_neighbours_are_of_one_kind():
    """A register-block candidate and an AMX candidate are never neighbours (their knobs differ in kind)."""
    from loopopt.targets.search import Candidate
    from loopopt.targets.x86.space import TileKnobs
    from loopopt.tune.search import _differs_once
    op = lo.Conv2d(16, 32, 3, padding=1, height=6, width=20, quant=lo.QuantSpec())
    simd = candidates(op, "avx512")[0]
    tiles = [Candidate(op, "amx", TileKnobs(32, 32, outer)) for outer in (True, False)]
    assert not _differs_once(simd, tiles[0]) and _differs_once(tiles[0], tiles[1])


def test_no_amx_candidates_for_a_contraction_the_tiles_do_not_compute():
    op = lo.Contraction("C[i,j] += A[k,i] * B[k,j]", {"i": 5, "j": 7, "k": 9}, dtype="bfloat16")
    assert [c for c in candidates(op, "avx512") if c.isa == "amx"] == []


TERNARY = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="int32",
                       weight="ternary")


def test_a_wide_ternary_gemv_has_table_lookup_candidates_of_8_column_blocks_first():
    """A GEMV with more outputs than a register block may hold (LLM decode shapes) still has tl1 and tl2
    candidates (the op form is probed with one column block), and the ranking puts 8 column blocks
    (256 channels: 8 weight rows streamed at once) first."""
    op = lo.Matmul(1, 2050, 64, quant=TERNARY)
    lut = [c for c in candidates(op, "avx512") if is_table_lookup(c)]
    assert {c.knobs.weight_format for c in lut} == {"tl1", "tl2"}
    assert sorted({c.knobs.channel_block for c in lut}) == [32, 64, 96, 128, 256]
    assert all(check_lut_on(c.schedule, "avx512") is None for c in lut)
    assert rank(lut)[0].knobs.channel_block == 256


@pytest.mark.slow
@pytest.mark.parametrize("op", [lo.Conv2d(12, 40, 3, padding=1, height=5, width=7, quant=TERNARY),
                                lo.Matmul(1, 70, 45, quant=TERNARY)], ids=["conv", "gemv"])
def test_ternary_search_tries_every_weight_format(op):
    """The first trials of a ternary op's search take one candidate of each weight format (i2_s
    register blocks, tl1 and tl2 table lookups), each verified and labelled by its format."""
    isa = lo.available_isas()[0]
    space = candidates(op, isa)
    assert {c.knobs.as_dict()["weight_format"] for c in space} == {"i2_s", "tl1", "tl2"}
    lut = [c.knobs for c in space if is_table_lookup(c)]
    assert all(k.channel_block % 32 == 0 or k.channel_block == op.channels for k in lut)
    assert all(k.pixel_block * -(-k.channel_block // 32) <= 16 for k in lut)          # accumulators
    depthwise = lo.Conv2d(16, 16, 3, groups=16, padding=1, height=5, width=5, quant=TERNARY)
    blocks = [c for c in candidates(depthwise, isa) if is_table_lookup(c)]   # 16 column blocks: one position
    assert blocks and all(c.knobs.pixel_block == 1 and check_lut_on(c.schedule, isa) is None for c in blocks)
    threaded = [c for c in candidates(op, isa, threads=2) if is_table_lookup(c)]
    assert threaded and all(c.knobs.parallel and check_lut_on(c.schedule, isa) is None for c in threaded)
    result = lo.tune(op, trials=3, isa=isa, budget=BUDGET, progress=False, algorithms="direct")
    formats = sorted(t.knobs["weight_format"] for t in result.trials if t.status == "ok")
    assert formats == ["i2_s", "tl1", "tl2"]
    assert result.timing.verified and verify(result.best.compile(result.isa))[0]
    assert all("model_seconds" not in t.model and t.model["predicted_seconds"] > 0
               for t in result.trials if t.knobs["weight_format"] != "i2_s")
    table = result.table()
    assert "tl1 table lookup, " in table and "tl2 table lookup, " in table and "i2_s weights dot" in table


@pytest.mark.slow
def test_two_thread_search_measures_parallel_table_lookups():
    """With 2 threads, the tl1 and tl2 trials split a loop between the table build and the register
    block over the threads (the column blocks: 3 of 32 channels), each verified exact on 2 threads
    (a conv's threaded table lookups are checked in test_ternary_search_tries_every_weight_format)."""
    op = lo.Matmul(1, 70, 45, quant=TERNARY)
    isa = lo.available_isas()[0]
    result = lo.tune(op, trials=3, threads=2, isa=isa, budget=BUDGET, progress=False, algorithms="direct")
    lut = [t for t in result.trials if t.knobs["weight_format"] in ("tl1", "tl2")]
    assert sorted(t.knobs["weight_format"] for t in lut) == ["tl1", "tl2"]
    assert all(t.status == "ok" and t.knobs["parallel"] == f"{op.channel_dim}_o" for t in lut)
    for trial in lut:
        schedule = schedule_from_toml(trial.schedule, op)
        assert schedule.parallel_loop.name == trial.knobs["parallel"]
        kernel = schedule.compile(isa)
        kernel.set_threads(2)
        assert "omp parallel for" in kernel.source and verify(kernel)[0]
    assert ", parallel " in result.table()


@pytest.mark.slow
def test_a_worker_whose_parent_went_away_ends_quietly(tmp_path):
    """The parent closes its end (it was killed) while the worker runs a call: the worker's answer meets
    a broken socket and it exits with status 0 and nothing on stderr (no BrokenPipeError traceback)."""
    parent, child = socket.socketpair()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen([sys.executable, "-m", "loopopt.tune.worker", str(child.fileno())],
                              pass_fds=(child.fileno(),), env=env, stderr=subprocess.PIPE, text=True)
    child.close()
    connection = Connection(parent.detach())
    connection.send((time.sleep, (2.0,), {}))       # the parent goes away while the worker sleeps
    connection.close()
    _, err = worker.communicate(timeout=120)
    assert worker.returncode == 0 and err == ""


def test_shutdown_with_cancel_futures_ends_the_call_in_flight():
    """What an interrupted search does: its executor's calls in flight end at once (their workers are
    killed), instead of the search waiting for them."""
    executor = IsolatedExecutor(timeout=600)
    future = executor.submit(time.sleep, 600)
    deadline = time.monotonic() + 120
    while not future.running() and time.monotonic() < deadline:
        time.sleep(0.05)
    executor.shutdown(cancel_futures=True)
    with pytest.raises(WorkerDied, match="killed by SIGKILL"):
        future.result(timeout=60)


def test_a_damaged_log_is_named_in_one_line_with_every_finding(tmp_path, capsys):
    """SQLite's integrity findings span lines and rows ("*** in database main ***\\nPage 2: ..."): the
    error joins them in one line, which the command prints whole (not cut at the first line)."""
    log = tmp_path / "tune.db"
    TuningLog(log).close()
    data = bytearray(log.read_bytes())
    page = 4096                                   # the second page: the meta table's b-tree
    data[page + 5:page + 13] = bytes(b ^ 0xA5 for b in data[page + 5:page + 13])
    log.write_bytes(data)
    with pytest.raises(TuningLogError) as info:
        TuningLog(log)
    message = str(info.value)
    assert "\n" not in message and "; Page 2" in message and message.endswith("; it was left as it is")
    assert main(["tune", "--matmul", "8,16,8", "--trials", "1", "--log", str(log)]) == 2
    assert capsys.readouterr().err == f"loopopt: error: {message}\n"


@pytest.mark.slow      # a CLI subprocess and a Dask import each
@pytest.mark.parametrize("address", ["lcoal", "tcp://host:port", "tcp://:8786"])
def test_a_scheduler_address_without_host_and_port_is_refused_before_any_client(address):
    """A mistyped --scheduler is one line and status 2, before a Dask Client exists (one that failed to
    start would print an 'Exception ignored in Client.__del__' traceback while the exit waits for it)."""
    pytest.importorskip("dask.distributed")
    from loopopt.tune.cluster import SchedulerError, dask_client
    with pytest.raises(SchedulerError, match=f"address '{address}' has no host and port: "
                                             f"{'did you mean .local.. ' if address == 'lcoal' else ''}give"):
        with dask_client(address):
            pass
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "loopopt.cli", "tune", "--matmul", "8,16,8", "--trials", "1",
                           "--scheduler", address], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2 and done.stderr.startswith("loopopt: error: the Dask scheduler address")
    assert done.stderr.count("\n") == 1 and "Exception ignored" not in done.stderr


def _result_of(seconds: list[float | None], stopped: str = "") -> lo.TuneResult:
    """A TuneResult of trials that took ``seconds`` (None: failed) of the matmul, without measuring."""
    timings = [None if s is None else Timing(s, s, 0.0, 1, 1.0, 1.0, 100.0, True, 0.0) for s in seconds]
    trials = [Trial(n, "", {}, {}, "ok" if t else "error", t, "") for n, t in enumerate(timings, 1)]
    best = min((t for t in trials if t.seconds), key=lambda t: t.seconds)
    return lo.TuneResult(OPS["matmul"], "avx2", 1, lo.Schedule(OPS["matmul"]), best.timing, trials,
                         stopped=stopped, best_number=best.number)


def test_the_search_says_whether_it_converged():
    """Converged: the best gained under 2% over the last third of the trials; else still improving."""
    flat = _result_of([4e-3, 2e-3, 1.01e-3, 1e-3, 1e-3, 3e-3, 1e-3, 2e-3, 1.005e-3])
    assert flat.convergence.converged and flat.convergence.since == 7
    assert "search: converged: the best gained 0.0% over the last third of the trials (7-9)" in str(flat)
    rising = _result_of([None, 4e-3, 3e-3, 3e-3, 2e-3, 3e-3, 1e-3, 1e-3, 1e-3])
    assert rising.convergence.converged is False and rising.convergence.gain == pytest.approx(1.0)
    assert rising.to_dict()["convergence"]["verdict"].startswith("still improving: the best gained 100.0% "
                                                                 "over the last third of the trials (7-9); "
                                                                 "run more trials")
    assert _result_of([None] * 6 + [1e-3]).convergence.verdict.startswith("still improving: no verified")
    assert _result_of([1e-3] * 5).convergence.converged is None
    assert _result_of([1e-3] * 2, stopped="every candidate was tried").convergence.converged
