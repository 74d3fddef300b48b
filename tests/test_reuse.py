"""Reuse-distance analyzer: course example, engine vs brute force, cache simulators, model, bad input."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from loopopt.analysis import CacheLevel, Machine, comparison_row, reuse, reuse_distances, simulate_caches
from loopopt.analysis.items import item_space
from loopopt.ops import Conv2d, Matmul
from loopopt.schedule import Schedule, ScheduleError


def test_course_example():
    assert reuse_distances("ABCABBACDB") == [math.inf] * 3 + [2, 2, 0, 1, 2, math.inf, 3]


def lru_stack(trace):
    """Independent oracle: stack distance as the number of distinct items since the last use."""
    last, out = {}, []
    for t, item in enumerate(trace):
        out.append(len(set(trace[last[item] + 1:t])) if item in last else math.inf)
        last[item] = t
    return out


def python_trace(schedule, granularity, line_size):
    """(tensor, item) of every access, by enumerating the loops in Python."""
    space = item_space(schedule, granularity, line_size)
    names = [loop.name for loop in schedule.loops]
    offsets = [(t, schedule.offset(t.name)) for t in space.tensors]
    trace = []
    for values in itertools.product(*(range(loop.extent) for loop in schedule.loops)):
        env = dict(zip(names, values))
        if all(g.evaluate(env) for g in schedule.guards):
            for t, off in offsets[:2] + offsets[2:] * 2:
                trace.append((t.name, t.base + (off.evaluate(env) * t.element_bytes >> t.shift)))
    return trace


def lru_misses(lines, sets, ways):
    """Independent set-associative LRU simulator (line x -> set x % sets)."""
    cache, misses = [[] for _ in range(sets)], 0
    for line in lines:
        ways_list = cache[line % sets]
        if line in ways_list:
            ways_list.remove(line)
        else:
            misses += 1
            if len(ways_list) == ways:
                ways_list.pop(0)
        ways_list.append(line)
    return misses


@st.composite
def schedules(draw):
    if draw(st.booleans()):
        op = Matmul(draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 5)))
        tags = {}
    else:
        groups = draw(st.sampled_from([1, 2]))
        op = Conv2d(groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2)),
                    draw(st.integers(1, 3)), stride=draw(st.integers(1, 2)), padding=draw(st.integers(0, 1)),
                    groups=groups, height=draw(st.integers(3, 5)), width=draw(st.integers(3, 5)))
        tags = {"I": ["NCHW", "NHWC", "NCHW2c"], "W": ["OIHW", "HWIO", "OIHW2i2o"], "O": ["NCHW", "NHWC", "NCHW4c"]}
    s = Schedule(op)
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["split", "tile", "reorder", "layout"]))
        try:
            if kind == "tile":
                loops = draw(st.lists(st.sampled_from(s.loop_names), min_size=1, max_size=2, unique=True))
                s = s.tile(**{name: draw(st.integers(1, 3)) for name in loops})
            elif kind == "split":
                s = s.split(draw(st.sampled_from(s.loop_names)), draw(st.integers(1, 3)))
            elif kind == "reorder":
                names = draw(st.permutations(s.loop_names))
                s = s.reorder(*names)
            elif tags:
                tensor = draw(st.sampled_from(sorted(tags)))
                s = s.layout(tensor, draw(st.sampled_from(tags[tensor])))
        except ScheduleError:
            pass
    return s


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedules(), st.sampled_from([("element", 64), ("line", 16), ("line", 64)]))
def test_engine_matches_brute_force(schedule, granularity_line):
    granularity, line_size = granularity_line
    trace = python_trace(schedule, granularity, line_size)
    profile = reuse(schedule, granularity, line_size)
    expected = lru_stack([item for _, item in trace])
    assert expected == reuse_distances([item for _, item in trace])
    for tensor in profile.tensors:
        want: dict = {}
        for (name, _), d in zip(trace, expected):
            if name == tensor:
                want[d] = want.get(d, 0) + 1
        assert profile.histogram(tensor) == want
    assert profile.accesses == len(trace)
    for capacity in (1, 2, 5, 17):
        assert profile.misses(capacity) == sum(d >= capacity for d in expected)


@settings(max_examples=25, deadline=None)
@given(schedules(), st.sampled_from([(1, 4), (2, 2), (4, 1), (3, 2)]))
def test_caches_match_simulator(schedule, geometry):
    sets, ways = geometry
    lines = [item for _, item in python_trace(schedule, "line", 16)]
    simulated = simulate_caches(schedule, [geometry, (1, sets * ways)], 16).sum(axis=1)
    assert simulated[0] == lru_misses(lines, sets, ways)
    fully = lru_misses(lines, 1, sets * ways)
    assert simulated[1] == fully == reuse(schedule, "line", 16).misses(sets * ways)


def test_hierarchy_sanity():
    s = Schedule(Conv2d(8, 8, 3, padding=1, height=8, width=8)).tile(ow=4, k=4)
    profile = reuse(s, "line")
    machine = Machine(256, (CacheLevel("L1", 1024, 2), CacheLevel("L2", 4096, 4), CacheLevel("L3", 16384, 4)))
    h = profile.hierarchy(machine)
    assert [lv.name for lv in h.levels] == ["registers", "L1", "L2", "L3", "DRAM"]
    assert h.levels[0].accesses == profile.accesses
    for upper, lower in zip(h.levels, h.levels[1:]):
        assert lower.accesses == upper.misses <= upper.accesses
    assert h.levels[-1].accesses == profile.cold()          # footprint fits in L3
    assert h.dram_bytes == profile.cold() * 64
    assert h.levels[1].set_assoc_misses is not None and h.levels[3].set_assoc_misses is None
    assert h.energy_pj > h.compute_energy_pj > 0
    assert h.energy_pj < profile.hierarchy(machine, energy={"DRAM": 1e4}).energy_pj
    assert "L1" in profile.summary(machine) and "DRAM" in h.table()
    capacities, ratios = profile.miss_ratio_curve()
    assert np.all(np.diff(ratios) <= 0) and ratios[-1] == profile.cold() / profile.accesses
    assert Machine.detect().caches
    row = comparison_row(profile, machine=machine, set_associative=True)
    assert row["accesses"] == profile.accesses and row["dram_bytes"] == h.dram_bytes
    assert row["L1_conflict_misses"] == h.levels[1].conflict_misses and "time_s" not in row


def test_quantized_element_sizes():
    from loopopt.quant import QuantSpec
    op = Conv2d(4, 4, 1, height=4, width=4, quant=QuantSpec(output="uint8"))
    space = item_space(Schedule(op), "line", 16)
    assert [t.count for t in space.tensors] == [4, 1, 4]


@pytest.mark.parametrize("kwargs, message", [
    ({"granularity": "word"}, "granularity='word'"),
    ({"granularity": "line", "line_size": 48}, "line_size=48"),
    ({"granularity": "line", "line_size": 2}, "line_size=2"),
    ({"engine": "magic"}, "engine='magic'"),
])
def test_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        reuse(Schedule(Matmul(2, 2, 2)), **kwargs)


def test_bad_capacity_and_huge_layer():
    profile = reuse(Schedule(Matmul(2, 2, 2)))
    for bad in (0, -3):
        with pytest.raises(ValueError, match=f"capacity_lines={bad}"):
            profile.misses(bad)
    with pytest.raises(ValueError, match="ways=0"):
        simulate_caches(Schedule(Matmul(2, 2, 2)), [(4, 0)])
    with pytest.raises(ValueError, match="limit"):
        reuse(Schedule(Conv2d(512, 512, 3, padding=1, batch=8, height=56, width=56)))
