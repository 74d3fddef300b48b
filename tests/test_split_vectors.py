"""x86 ranking on a machine that runs its widest vectors as two halves (``rank.split_vectors``): a native
dot block's cache block of the reduction costs it more than it gains there, as on an emulated dot."""
from dataclasses import replace

import pytest

import loopopt as lo
from loopopt import machine
from loopopt.targets.x86 import rank
from loopopt.targets.x86.rank import split_vectors
from loopopt.tune import choice
from loopopt.tune.choice import first_choice

QUANT = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="uint8")
LAYER = lo.Conv2d(512, 512, 3, padding=1, height=7, width=7, quant=QUANT)   # ResNet's int8 3x3 at 7x7


@pytest.fixture
def fresh_choices():
    """The first choices ranked in this test, not kept for the others (cached per op, not per profile)."""
    choice._chosen.clear(), choice._ranked.clear()
    yield
    choice._chosen.clear(), choice._ranked.clear()


def with_float_peak(monkeypatch, profile: machine.MachineProfile, isa: str, peak: float) -> None:
    """Rank with ``profile`` but ``isa``'s float32 peak ``peak``."""
    peaks = {**profile.peaks, "float32": {**profile.peaks["float32"], isa: peak}}
    monkeypatch.setitem(machine._profiles, machine.profile_path(), replace(profile, peaks=peaks))
    for figures in (rank._caches, rank._peak, rank._operands):
        figures.cache_clear()
    choice._chosen.clear(), choice._ranked.clear()


def test_split_vectors_rank_a_dot_block_without_a_cache_block_first(recorded_profile, monkeypatch,
                                                                    fresh_choices):
    assert not split_vectors("avx512") and not split_vectors("avx2")     # the Xeon: avx512 twice avx2's
    whole = first_choice(LAYER, "avx512")
    assert whole.knobs.weights == "dot" and whole.knobs.cache_block       # its weights in L1
    with_float_peak(monkeypatch, recorded_profile, "avx512", recorded_profile.peaks["float32"]["avx2"])
    assert split_vectors("avx512") and not split_vectors("avx2")          # e.g. AMD Zen 4: as avx2's
    halves = first_choice(LAYER, "avx512")
    assert halves.knobs.weights == "dot" and not halves.knobs.cache_block
    assert (halves.knobs.pixel_block, halves.knobs.channel_block) == (whole.knobs.pixel_block,
                                                                      whole.knobs.channel_block)
