"""A float32 conv's weights stream from DRAM in the AVX2 ranking (``rank.stream_seconds``): in a model they
were last read a run ago, behind the other layers' weights, while its activations were just written. So on
two threads a layer whose weights outgrow L2 splits its output channels (each thread reads half the
weights) rather than its positions (each thread reads all of them)."""
import dataclasses

import pytest

import loopopt as lo
from loopopt import machine
from loopopt.machine import Cache
from loopopt.targets.search import Candidate
from loopopt.targets.x86 import rank
from loopopt.targets.x86.space import Knobs, Roles
from loopopt.tune.choice import first_choice

ZEN3_CACHES = (Cache("L1", 32 << 10, 8, 64, 1), Cache("L2", 512 << 10, 8, 64, 1),
               Cache("L3", 32 << 20, 16, 64, 2))
ZEN3_GBS = {"L1": 161.9, "L2": 85.4, "L3": 68.7, "DRAM": 20.7}    # the AMD EPYC Zen 3's profile, one core
ZEN3_PEAKS = {"float32": {"avx2": 103.7}, "int8": {"avx2": 208.9}}
STRIDE_2 = lo.Conv2d(512, 512, 3, stride=2, padding=1, height=14, width=14)   # ResNet-50's: 9.4 MB


@pytest.fixture
def zen3_profile(recorded_profile, monkeypatch):
    """The recorded profile with the caches, bandwidths and AVX2 peaks of the 2-core AMD EPYC Zen 3."""
    bandwidth = {level: dataclasses.replace(recorded_profile.bandwidth[level], gbs=gbs)
                 for level, gbs in ZEN3_GBS.items()}
    profile = dataclasses.replace(recorded_profile, caches=ZEN3_CACHES, bandwidth=bandwidth, peaks=ZEN3_PEAKS)
    monkeypatch.setitem(machine._profiles, machine.profile_path(), profile)
    for figures in (rank._caches, rank._peak, rank._operands):
        figures.cache_clear()
    yield profile
    for figures in (rank._caches, rank._peak, rank._operands):
        figures.cache_clear()


def test_a_float_convs_weights_stream_at_drams_bandwidth_and_its_activations_at_the_levels(zen3_profile):
    """Read once each (the channel blocks outermost, the input within half of L2 per block): the weights'
    bytes at DRAM's bandwidth, the input's at L3's (it fits half of L3); an int8 conv's both at L3's."""
    op = lo.Conv2d(256, 256, 3, padding=1, height=14, width=14)
    knobs = Knobs(4, 16, ("kh", "kw", "c"), ("n", "k_o", "oh", "ow_o"), "packed")
    weights, source = 256 * 256 * 9 * 4, 256 * 14 * 14 * 4
    assert rank.streamed_inputs(op, knobs, 256 << 10) == [(source, 0), (weights, 0)]
    expected = source / (ZEN3_GBS["L3"] * 1e9) + weights / (ZEN3_GBS["DRAM"] * 1e9)
    assert rank.stream_seconds(Candidate(op, "avx2", knobs), 256 << 10) == pytest.approx(expected)
    quantized = lo.Conv2d(256, 256, 3, padding=1, height=14, width=14, quant=lo.QuantSpec())
    both = (source + weights) / 4 / (ZEN3_GBS["L3"] * 1e9)
    assert rank.stream_seconds(Candidate(quantized, "avx2", knobs), 256 << 10) == pytest.approx(both)


def test_weights_read_first_are_the_parallel_loops_passes_on_as_many_threads_and_the_first_pass_else():
    """A pass over the weights per iteration of an outer loop that does not index them when they do not fit:
    the parallel loop's iterations on two threads read them first each; a loop's passes on one thread read
    them again (from the level beyond L2 that the first pass left them in)."""
    weights = 512 * 512 * 9 * 4
    positions = Knobs(4, 16, ("kh", "kw", "c"), ("n", "ow_o", "k_o", "c_o", "oh"), "packed", 256, (), "ow_o")
    assert rank.streamed_inputs(STRIDE_2, positions, 256 << 10, threads=2)[1] == (2 * weights, 0)
    assert rank.streamed_inputs(STRIDE_2, positions, 256 << 10)[1] == (weights, weights)
    rows = Knobs(4, 16, ("kh", "kw", "c"), ("n", "oh", "ow_o", "k_o"), "packed")     # 7 rows x 2 pixel blocks
    assert rank.streamed_inputs(STRIDE_2, rows, 256 << 10)[1] == (weights, 13 * weights)


@pytest.mark.slow
def test_resnet50s_stride_2_conv_splits_its_output_channels_over_two_threads(zen3_profile):
    """With the positions split (``ow_o``, the first choice before) both threads read all 9.4 MB of weights;
    with the channel blocks split each reads half, and the input (401 KB, beyond half of L2) again per block
    from L3. Kernel-only with the caches flushed before each call, 2 threads, on the AMD EPYC Zen 3: the
    channel split 0.896x the time of the position split in two runs (1853 / 2292 against 2067 / 2559 us)."""
    first = first_choice(STRIDE_2, "avx2", 2).knobs
    assert first.parallel == f"{Roles.of(STRIDE_2, first.pixel).channel}_o", first


POINTWISE = lo.Conv2d(1024, 256, 1, height=14, width=14)      # ResNet-50's: 802 KB of activations


def test_activations_read_again_are_priced_at_the_level_the_first_read_left_them_in(zen3_profile):
    """``reread_seconds``: the activations' second figure of ``streamed_inputs`` at that level's bandwidth (L3
    here), times the scatter: a pass per channel block where they outgrow half of L2; weights read again
    (a pass per row) are not in it."""
    channels = Knobs(5, 16, ("kh", "kw", "c"), ("n", "k_o", "oh", "ow_o"), "packed")
    candidate = Candidate(POINTWISE, "avx2", channels)
    again = 15 * 1024 * 14 * 14 * 4 / (ZEN3_GBS["L3"] * 1e9)
    assert rank.reread_seconds(candidate, 256 << 10) == pytest.approx(again)
    assert rank.reread_seconds(candidate, 256 << 10, 1.5) == pytest.approx(1.5 * again)
    rows = Knobs(4, 16, ("kh", "kw", "c"), ("n", "oh", "ow_o", "k_o"), "packed")
    assert rank.streamed_inputs(STRIDE_2, rows, 256 << 10)[1][1] > 0
    assert rank.reread_seconds(Candidate(STRIDE_2, "avx2", rows), 256 << 10) == 0


@pytest.mark.parametrize("threads", [1, 2])
def test_on_two_threads_the_activations_read_again_overlap_the_compute_and_on_one_they_add_to_it(zen3_profile,
                                                                                               threads):
    """A channel split of ResNet-50's 1x1 1024->256 conv at 14x14 reads its activations again per channel
    block: on two threads that time overlaps the busiest thread's compute (the longer of the two counts), on
    one it adds to it, as every read from beyond L2 does."""
    split = "k_o" if threads > 1 else None
    knobs = Knobs(5, 16, ("kh", "kw", "c"), ("n", "k_o", "oh", "ow_o"), "packed", 0, (), split)
    candidate = Candidate(POINTWISE, "avx2", knobs, threads=threads)
    figures = rank.figures(candidate)
    peak = ZEN3_PEAKS["float32"]["avx2"] * 1e9
    compute = POINTWISE.flops / (peak * figures["efficiency"]) / threads      # 16 channel blocks: even
    again = rank.reread_seconds(candidate, 256 << 10) / threads
    memory = (figures["stream_seconds"] + figures["strided_seconds"]) / threads
    assert 0 < again < compute
    expected = max(compute, again) + memory - again if threads > 1 else compute + memory
    assert figures["predicted_seconds"] == pytest.approx(expected)


@pytest.mark.slow
def test_resnet50s_1x1_conv_at_14x14_keeps_16_channel_blocks_on_two_threads(zen3_profile):
    """Priced as added time, the activations read again per channel block put 2x32 blocks first on two
    threads (half the passes of 16-channel ones); overlapping the compute, 5x16 (in ResNet-50 on the AMD EPYC
    Zen 3, two threads, the step 0.91-1.02x main's time in its five places, 0.96x in sum)."""
    assert first_choice(POINTWISE, "avx2", 2).knobs.channel_block == 16
