"""The analytical reuse engine: exactly the trace engine's histograms from representative blocks."""
from __future__ import annotations

from collections import Counter
from unittest import mock

import numpy as np
import pytest
from helpers import GRANULARITIES, lru_stack, python_trace, reuse_schedules, rotated, tiers
from hypothesis import strategies as st

from loopopt.analysis import analytical, reuse
from loopopt.analysis.analytical import Analyzer, choose_engine
from loopopt.analysis.items import item_space
from loopopt.ops import Conv2d, Matmul
from loopopt.quant import QuantSpec
from loopopt.schedule import Schedule


def analytical_equals_trace_and_brute_force(schedule, granularity_line, simulate_below):
    """Split into blocks down to ``simulate_below`` accesses, the analytical engine's histograms equal the
    trace engine's and the pure-Python LRU stack's."""
    granularity, line_size = granularity_line
    with mock.patch.object(analytical, "SIMULATE_BELOW", simulate_below):
        got = reuse(schedule, granularity, line_size, engine="analytical")
    expected = reuse(schedule, granularity, line_size, engine="trace")
    np.testing.assert_array_equal(got.counts, expected.counts)
    trace = python_trace(schedule, granularity, line_size)
    distances = lru_stack([item for _, item in trace])
    for tensor in expected.tensors:
        assert got.histogram(tensor) == expected.histogram(tensor)
        assert got.histogram(tensor) == Counter(d for (name, _), d in zip(trace, distances) if name == tensor)


test_analytical_equals_trace_and_brute_force_quick, test_analytical_equals_trace_and_brute_force = tiers(
    analytical_equals_trace_and_brute_force, 1, 7,
    reuse_schedules(), st.sampled_from(GRANULARITIES), st.sampled_from([0, 64]))


LAYERS = {
    "naive": Schedule(Conv2d(8, 32, 3, padding=1, height=24, width=20)),
    "tiled, partial ow": Schedule(Conv2d(8, 32, 3, padding=1, height=24, width=20)).tile(ow=8, k=16),
    "strided, NHWC": Schedule(Conv2d(8, 16, 3, stride=2, padding=1, height=30, width=30))
    .layout("I", "NHWC").layout("O", "NHWC").layout("W", "HWIO"),
    "blocked, reordered": Schedule(Conv2d(16, 16, 3, padding=1, height=16, width=16)).tile(k=8)
    .reorder("oh", "k_o").layout("I", "NCHW16c").layout("W", "OIHW16i16o"),
    "quantized": Schedule(Conv2d(8, 16, 3, padding=1, height=16, width=16, quant=QuantSpec(output="uint8"))),
    "matmul tiled": Schedule(Matmul(48, 40, 32)).tile(i=8, j=16),
}
QUICK_LAYERS = ("tiled, partial ow", "strided, NHWC", "quantized")


@pytest.mark.parametrize("schedule, granularity", rotated(LAYERS, ["line", "element"], quick=QUICK_LAYERS))
@pytest.mark.slow
def test_representative_blocks_are_few_and_exact(schedule, granularity):
    """On layers with repetition the engine has less work than the trace and stays exact."""
    space = item_space(schedule, granularity)
    analyzer = Analyzer(schedule, space)
    counts = analyzer.histograms()
    np.testing.assert_array_equal(counts, reuse(schedule, granularity, engine="trace").counts)
    assert analyzer.plan and analyzer.cost() < 4 * schedule.op.macs
    assert analyzer.cost() == pytest.approx(analyzer.simulated + analytical.TOUCH_COST * analyzer.touched
                                            + analytical.BLOCK_OVERHEAD * analyzer.blocks)


@pytest.mark.slow
def test_work_does_not_grow_with_a_repeating_loop():
    """Four times the output channels: the same representative blocks are simulated."""
    work = []
    for channels in (16, 64):
        schedule = Schedule(Conv2d(4, channels, 3, padding=1, height=32, width=32))
        analyzer = Analyzer(schedule, item_space(schedule, "line"))
        np.testing.assert_array_equal(analyzer.histograms(), reuse(schedule, "line", engine="trace").counts)
        work.append(analyzer.simulated)
    assert work[0] == work[1]


@pytest.mark.slow
def test_auto_picks_the_engine():
    small = Schedule(Matmul(4, 4, 4))
    assert reuse(small).engine == "trace"
    layer = LAYERS["naive"]
    space = item_space(layer, "line")
    with mock.patch.object(analytical, "AUTO_TRACE_BELOW", 0):
        assert choose_engine(layer, space)[0] == "analytical"
        profile = reuse(layer, "line")
    assert profile.engine == "analytical"
    assert profile.misses(8) == reuse(layer, "line", engine="trace").misses(8)


def test_analytical_refuses_a_huge_layer():
    with pytest.raises(ValueError, match="analytical engine .* limit"):
        reuse(Schedule(Conv2d(512, 512, 3, padding=1, batch=8, height=56, width=56)), engine="analytical")
