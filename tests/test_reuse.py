"""Reuse-distance analyzer: course example, engine vs brute force, cache simulators, model, bad input."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from helpers import GRANULARITIES, lru_stack, python_trace, reuse_schedules, tiers
from hypothesis import strategies as st

from loopopt.analysis import CacheLevel, Machine, comparison_row, reuse, reuse_distances, simulate_caches
from loopopt.analysis.items import item_space
from loopopt.ops import Conv2d, Matmul
from loopopt.schedule import Schedule


def test_course_example():
    assert reuse_distances("ABCABBACDB") == [math.inf] * 3 + [2, 2, 0, 1, 2, math.inf, 3]


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


def engine_matches_brute_force(schedule, granularity_line):
    """The trace engine's histograms and LRU misses equal the pure-Python LRU stack's."""
    granularity, line_size = granularity_line
    trace = python_trace(schedule, granularity, line_size)
    profile = reuse(schedule, granularity, line_size, engine="trace")
    expected = lru_stack([item for _, item in trace])
    assert expected == reuse_distances([item for _, item in trace])
    for tensor in profile.tensors:
        want = Counter(d for (name, _), d in zip(trace, expected) if name == tensor)
        assert profile.histogram(tensor) == want
    assert profile.accesses == len(trace)
    for capacity in (1, 2, 5, 17):
        assert profile.misses(capacity) == sum(d >= capacity for d in expected)


test_engine_matches_brute_force_quick, test_engine_matches_brute_force = tiers(
    engine_matches_brute_force, 5, 26, reuse_schedules(), st.sampled_from(GRANULARITIES))


def caches_match_simulator(schedule, geometry):
    """Set-associative and fully associative misses equal an independent LRU simulator's."""
    sets, ways = geometry
    lines = [item for _, item in python_trace(schedule, "line", 16)]
    simulated = simulate_caches(schedule, [geometry, (1, sets * ways)], 16).sum(axis=1)
    assert simulated[0] == lru_misses(lines, sets, ways)
    fully = lru_misses(lines, 1, sets * ways)
    assert simulated[1] == fully == reuse(schedule, "line", 16, engine="trace").misses(sets * ways)


test_caches_match_simulator_quick, test_caches_match_simulator = tiers(
    caches_match_simulator, 2, 20, reuse_schedules(), st.sampled_from([(1, 4), (2, 2), (4, 1), (3, 2)]))


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
    assert ratios[7] == pytest.approx(profile.misses(capacities[7]) / profile.accesses)
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
