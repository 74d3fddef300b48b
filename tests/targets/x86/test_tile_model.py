"""The tile model of AMX candidates (loopopt/targets/x86/tile_model.py) and how the search orders them: the
loads priced at the level that holds their operand, the rows a kernel really computes, the busiest
thread's blocks and bytes on two threads, AMX trials fitted apart from the SIMD ones, AMX candidates
ranked first where they win, and none on a CPU without AMX (an AMD Zen 4). The model and the ranking run
on any CPU (the recorded profile's AMX peaks; ``amx_cpu``: an AMX CPU's flags); only a search runs
the kernels."""
import pytest
from helpers import needs_amx

import loopopt as lo
from loopopt.targets.registry import target
from loopopt.targets.search import Candidate
from loopopt.targets.x86 import isa, tile_model, tiles
from loopopt.targets.x86.rank import rank
from loopopt.targets.x86.space import TileKnobs, candidates
from loopopt.targets.x86.tile_model import cold_seconds, load_seconds, thread_share, tile_time
from loopopt.tune import choice
from loopopt.tune.choice import first_choice
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


@pytest.fixture
def amx_cpu(monkeypatch, recorded_profile):
    """The recorded profile's Xeon with AMX (its CPU flags, whatever this CPU's), its choices made afresh
    and not kept for other tests."""
    xeon = frozenset(tiles.AMX_INT.cpu_flags + isa.ISAS["avx2"].cpu_flags)
    monkeypatch.setattr(isa, "cpu_flags", lambda: xeon)
    monkeypatch.setattr(tiles, "cpu_flags", lambda: xeon)
    choice._chosen.clear(), choice._ranked.clear()
    yield
    choice._chosen.clear(), choice._ranked.clear()


def _tiles(op, pixels, channels, channels_outer=True, parallel=None):
    return Candidate(op, "amx", TileKnobs(pixels, channels, channels_outer, parallel)).schedule


def test_two_threads_time_one_thread_and_the_weights_it_reads(recorded_profile):     # its AMX peaks
    """ResNet-18's int8 layers at 7x7 on 2 threads (load-independent: blocks and bytes per thread): an
    even share of the blocks either way; a pixel split reads all 2.4 MB of the 512-channel 3x3 layer's
    weights on each thread, a channel split half, so it is predicted faster (the two tied when the
    model priced one core); on one thread the split changes nothing."""
    down = lo.Conv2d(256, 512, 3, stride=2, padding=1, height=14, width=14, quant=QUANT)
    for split in ("pixels", "channels"):
        assert thread_share(tiles.tile_plan(_tiles(down, 16, 16, True, split)), 2) == 0.5
    assert thread_share(tiles.tile_plan(_tiles(down, 16, 16, True)), 2) == 1
    layer = lo.Conv2d(512, 512, 3, padding=1, height=7, width=7, quant=QUANT)
    pixels, channels = _tiles(layer, 32, 32, True, "pixels"), _tiles(layer, 32, 32, True, "channels")
    assert tile_time(pixels, 1) == tile_time(channels, 1)
    split_pixels, split_channels = tile_time(pixels, 2), tile_time(channels, 2)
    assert split_pixels.dots == split_channels.dots == pytest.approx(tile_time(pixels, 1).dots / 2)
    assert split_channels.loads < split_pixels.loads / 2       # half the weights, from L2 instead of L3
    assert split_channels.predicted_seconds < split_pixels.predicted_seconds


@pytest.mark.slow
def test_tile_model_counts_the_rows_and_loads_the_kernel_runs(recorded_profile):
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
@pytest.mark.parametrize("threads", [1, 2])
def test_amx_candidates_rank_first_where_they_win(threads, amx_cpu):
    op = lo.Conv2d(128, 128, 3, padding=1, height=14, width=14, quant=QUANT)
    ranked = rank(candidates(op, "avx512", threads, tiles=True))
    assert ranked[0].isa == "amx"
    assert ranked[0].figures["predicted_seconds"] == tile_time(ranked[0].schedule, threads).predicted_seconds
    assert ranked[0].knobs.parallel is None if threads == 1 else ranked[0].knobs.parallel in tiles.SPLITS


@pytest.mark.slow     # ranks the layer's whole space twice (3.8 s)
def test_resnet18_int8_layer_at_7x7_splits_its_channels_over_two_threads(amx_cpu):
    layer = lo.Conv2d(512, 512, 3, padding=1, height=7, width=7, quant=QUANT)
    chosen = first_choice(layer, "auto", 2)
    assert chosen.isa == "amx" and chosen.knobs.parallel == "channels" and chosen.threads == 2
    assert first_choice(layer, "auto", 1).knobs.parallel is None


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
