"""The analytical reuse engine: exactly the trace engine's histograms from representative blocks."""
from __future__ import annotations

from collections import Counter
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from loopopt.analysis import analytical, reuse
from loopopt.analysis.analytical import Analyzer, choose_engine
from loopopt.analysis.items import item_space
from loopopt.ops import Conv2d, Matmul
from loopopt.quant import QuantSpec
from loopopt.schedule import Schedule, ScheduleError
from test_reuse import lru_stack, python_trace

GRANULARITIES = [("element", 64), ("line", 16), ("line", 64)]


@st.composite
def small_schedules(draw):
    """Tiny convs (padding, stride, groups) and matmuls under splits, partial tiles, reorders,
    fusions and layouts."""
    if draw(st.booleans()):
        op = Matmul(draw(st.integers(1, 6)), draw(st.integers(1, 6)), draw(st.integers(1, 6)))
        tags = {"A": ["MK", "KM"], "B": ["KN", "NK", "KN4n"]}
    else:
        groups = draw(st.sampled_from([1, 1, 2]))
        op = Conv2d(groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3)), draw(st.integers(1, 3)),
                    stride=draw(st.integers(1, 2)), padding=draw(st.integers(0, 2)), groups=groups,
                    batch=draw(st.integers(1, 2)), height=draw(st.integers(3, 7)), width=draw(st.integers(3, 7)))
        tags = {"I": ["NCHW", "NHWC", "NCHW2c"], "W": ["OIHW", "HWIO", "OIHW2i2o"], "O": ["NCHW", "NHWC", "NCHW4c"]}
    s = Schedule(op)
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["split", "tile", "reorder", "fuse", "layout"]))
        names = s.loop_names
        try:
            if kind == "tile":
                picked = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
                s = s.tile(**{name: draw(st.integers(1, 4)) for name in picked})
            elif kind == "split":
                s = s.split(draw(st.sampled_from(names)), draw(st.integers(2, 4)))
            elif kind == "reorder":
                s = s.reorder(*draw(st.permutations(names)))
            elif kind == "fuse" and len(names) > 1:
                pos = draw(st.integers(0, len(names) - 2))
                s = s.fuse(names[pos], names[pos + 1])
            elif kind == "layout":
                tensor = draw(st.sampled_from(sorted(tags)))
                s = s.layout(tensor, draw(st.sampled_from(tags[tensor])))
        except ScheduleError:
            pass
    return s


def analyze(schedule, granularity, line_size, simulate_below=0):
    """The analytical histograms with regions down to ``simulate_below`` accesses split into blocks."""
    with mock.patch.object(analytical, "SIMULATE_BELOW", simulate_below):
        profile = reuse(schedule, granularity, line_size, engine="analytical")
    assert profile.engine == "analytical"
    return profile


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_schedules(), st.sampled_from(GRANULARITIES), st.sampled_from([0, 64]))
def test_analytical_equals_trace(schedule, granularity_line, simulate_below):
    granularity, line_size = granularity_line
    expected = reuse(schedule, granularity, line_size, engine="trace")
    got = analyze(schedule, granularity, line_size, simulate_below)
    np.testing.assert_array_equal(got.counts, expected.counts)
    for tensor in expected.tensors:
        assert got.histogram(tensor) == expected.histogram(tensor)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_schedules(), st.sampled_from(GRANULARITIES))
def test_analytical_matches_brute_force(schedule, granularity_line):
    granularity, line_size = granularity_line
    trace = python_trace(schedule, granularity, line_size)
    distances = lru_stack([item for _, item in trace])
    profile = analyze(schedule, granularity, line_size)
    for tensor in profile.tensors:
        assert profile.histogram(tensor) == Counter(d for (name, _), d in zip(trace, distances) if name == tensor)


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


@pytest.mark.parametrize("name", sorted(LAYERS))
@pytest.mark.parametrize("granularity", ["element", "line"])
def test_representative_blocks_are_few_and_exact(name, granularity):
    """On layers with repetition the engine has less work than the trace and stays exact."""
    schedule = LAYERS[name]
    space = item_space(schedule, granularity)
    analyzer = Analyzer(schedule, space)
    counts = analyzer.histograms()
    np.testing.assert_array_equal(counts, reuse(schedule, granularity, engine="trace").counts)
    assert analyzer.plan and analyzer.cost() < 4 * schedule.op.macs
    assert analyzer.cost() == pytest.approx(analyzer.simulated + analytical.TOUCH_COST * analyzer.touched
                                            + analytical.BLOCK_OVERHEAD * analyzer.blocks)


def test_work_does_not_grow_with_a_repeating_loop():
    """Four times the output channels: the same representative blocks are simulated."""
    work = []
    for channels in (16, 64):
        schedule = Schedule(Conv2d(4, channels, 3, padding=1, height=32, width=32))
        analyzer = Analyzer(schedule, item_space(schedule, "line"))
        np.testing.assert_array_equal(analyzer.histograms(), reuse(schedule, "line", engine="trace").counts)
        work.append(analyzer.simulated)
    assert work[0] == work[1]


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
