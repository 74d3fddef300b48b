"""The tile model of AMX candidates (loopopt/targets/x86/tile_model.py) and how the search orders them: the
loads priced at the level that holds their operand, the rows a kernel really computes, AMX trials
fitted apart from the SIMD ones, AMX candidates ranked first where they win, and none on a CPU without
AMX (an AMD Zen 4)."""
import pytest
from helpers import needs_amx

import loopopt as lo
from loopopt.targets.registry import target
from loopopt.targets.search import Candidate
from loopopt.targets.x86 import tile_model, tiles
from loopopt.targets.x86.rank import rank
from loopopt.targets.x86.space import TileKnobs, candidates
from loopopt.targets.x86.tile_model import cold_seconds, load_seconds, tile_time
from loopopt.tune.guide import Guide, Price

QUANT = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="uint8")
VGG = lo.Conv2d(512, 512, 3, padding=1, height=19, width=19, quant=QUANT)     # SSD300's conv5_1, int8
GB = 1e9


def test_loads_come_from_the_level_that_holds_their_set(monkeypatch):
    levels = (("L1", 24e3, 300 * GB), ("L2", 1e6, 150 * GB), ("DRAM", float("inf"), 10 * GB))
    monkeypatch.setattr(tile_model, "_levels", lambda: levels)
    assert load_seconds(3e6, 20e3) == pytest.approx(3e6 / (300 * GB))          # within half of L1
    assert load_seconds(3e6, 1e6) == pytest.approx(3e6 * (0.024 / 300 + 0.976 / 150) / GB)
    assert load_seconds(3e6, 4e6) == pytest.approx(3e6 * (0.25 / 150 + 0.75 / 10) / GB)   # a quarter in L2
    assert cold_seconds(5e5, 9e5) == 0                                        # the call stays in L2
    assert cold_seconds(5e5, 2e6) == pytest.approx(5e5 / (10 * GB))          # its inputs come from DRAM


def _tiles(op, pixels, channels, channels_outer=True):
    return Candidate(op, "amx", TileKnobs(pixels, channels, channels_outer)).schedule


@pytest.mark.slow
@needs_amx
def test_tile_model_counts_the_rows_and_loads_the_kernel_runs():
    # 19 x 19 pixels numbered over the 21-wide padded rows (TileShape.wide): 397 numbers, 13 blocks
    # of 32 pixels (26 tiles of 16 rows) or 25 of 16
    assert tiles.TileShape.of(VGG).pixels == 18 * 21 + 19
    wide, narrow = tile_time(_tiles(VGG, 32, 32)), tile_time(_tiles(VGG, 16, 32))
    assert wide.dots == pytest.approx(narrow.dots * 26 / 25) and wide.epilogue == narrow.epilogue
    assert wide.loads < narrow.loads                                    # 2 x 2 tiles: one load per dot
    assert wide.predicted_seconds > VGG.flops / (lo.peak_gflops("amx", "int8") * 1e9)
    # pixels outside: every pixel block reads all 2.4 MB of weights again, from beyond half of L2
    assert tile_time(_tiles(VGG, 32, 32, False)).loads > wide.loads


def test_amx_trials_are_fitted_apart_from_the_simd_ones():
    op = lo.Conv2d(16, 32, 3, padding=1, height=6, width=20, quant=QUANT)
    simd = [Candidate(op, "avx512", c.knobs, (("predicted_seconds", 1e-3 * (i + 1)),))
            for i, c in enumerate(candidates(op, "avx512")[:4])]
    amx = Candidate(op, "amx", TileKnobs(32, 32, True), (("predicted_seconds", 5e-4),))
    guide = Guide([amx, *simd], target("x86").search_rules(),
                  model=lambda c: Price(c.figures["predicted_seconds"]))
    guide.score_best(5)
    for index in (1, 2, 3):                      # the SIMD kernels ran 10x slower than their model
        guide.observe(index, 10 * guide.heuristic(index))
    assert guide.fitted(4) == pytest.approx(10 * guide.heuristic(4), rel=1e-6)
    assert guide.fitted(0) == pytest.approx(5e-4)                       # the AMX one: its model's time
    assert guide.order([4, 0]) == [0, 4]


@pytest.mark.slow     # the AMX candidates' order is also pinned by tests/targets/x86/test_search_rules.py
@needs_amx
@pytest.mark.parametrize("threads", [1, 2])
def test_amx_candidates_rank_first_where_they_win(threads):
    op = lo.Conv2d(128, 128, 3, padding=1, height=14, width=14, quant=QUANT)
    ranked = rank(candidates(op, "avx512", threads, tiles=True))
    assert ranked[0].isa == "amx"
    assert ranked[0].figures["predicted_seconds"] == tile_time(ranked[0].schedule).predicted_seconds
    assert ranked[0].knobs.parallel is None if threads == 1 else ranked[0].knobs.parallel in tiles.SPLITS


def test_no_amx_candidates_on_a_cpu_without_amx(monkeypatch, recorded_profile):
    zen4 = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx2", "fma", "avx512_bf16"}
    monkeypatch.setattr(tiles, "cpu_flags", lambda: zen4)
    op = lo.Conv2d(32, 32, 3, padding=1, height=8, width=8, quant=QUANT)
    for threads in (1, 2):
        ranked = rank(candidates(op, "avx512", threads, tiles=True))
        assert ranked and all(c.isa == "avx512" for c in ranked)
        assert ranked[0].knobs.weights in ("dot", "taps")                # the VNNI dot loops lead


@pytest.mark.slow
@needs_amx
def test_a_two_thread_int8_search_measures_parallel_amx_first():
    op = lo.Conv2d(128, 128, 3, padding=1, height=14, width=14, quant=QUANT)
    result = lo.tune(op, trials=2, threads=2, budget=0.02, progress=False, algorithms="direct")
    first = result.trials[0]
    assert first.knobs["isa"] == "amx" and first.knobs["parallel"] in tiles.SPLITS and first.timing.verified
    assert first.model["model_seconds"] == pytest.approx(first.model["predicted_seconds"])
