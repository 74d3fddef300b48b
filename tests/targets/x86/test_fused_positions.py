"""Register blocks along fused positions (``space.fused_pixel``): on AVX2 a pointwise conv's two spatial
dims (one tap, stride 1, no padding along each) run as one loop, ``oh_ow``, so a block of positions runs on
across rows, as one GEMM over them. Each drawn candidate agrees with the reference over odd sizes, tails
(blocks that do not divide the positions), groups, dilation, bias, batch and threads; the ops and ISAs that
get none; and the ranking's first choice for ResNet-50's 2048->512 1x1 conv at 7x7."""
import numpy as np
import pytest
from helpers import ISAS, tiers
from hypothesis import strategies as st

import loopopt as lo
from loopopt.targets.search import Candidate
from loopopt.targets.x86 import rank
from loopopt.targets.x86.space import FUSED_ISAS, Knobs, candidates, fused_pixel, pixel_dims
from loopopt.tune.choice import first_choice

FUSING = [isa for isa in ISAS if isa in FUSED_ISAS]
needs_fusing = pytest.mark.skipif(not FUSING, reason="no ISA of FUSED_ISAS on this CPU")


def fused_blocks_match_the_reference(isa, data):
    groups = data.draw(st.sampled_from([1, 1, 2, 3]))
    op = lo.Conv2d(groups * data.draw(st.integers(1, 12)), groups * data.draw(st.integers(1, 14)), 1,
                   dilation=data.draw(st.sampled_from([1, 2])), groups=groups,
                   batch=data.draw(st.integers(1, 2)), height=data.draw(st.integers(2, 9)),
                   width=data.draw(st.integers(2, 9)), bias=data.draw(st.booleans()))
    threads = data.draw(st.integers(1, 2))
    found = [c for c in candidates(op, isa, threads) if c.knobs.pixel == "oh_ow"]
    candidate = found[data.draw(st.integers(0, len(found) - 1))]
    kernel = candidate.schedule.compile(isa)
    kernel.set_threads(threads if candidate.knobs.parallel else 1)
    inputs = op.random_inputs(data.draw(st.integers(0, 9)))
    want = op.reference(*inputs.values())
    np.testing.assert_allclose(kernel(*inputs.values()), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


test_fused_blocks_match_the_reference_quick, test_fused_blocks_match_the_reference = tiers(
    fused_blocks_match_the_reference, 2, 12, isas=FUSING or ["avx2"], marks=(needs_fusing,), data=st.data())


def test_only_a_pointwise_conv_fuses_its_positions_and_only_on_avx2():
    assert fused_pixel(lo.Conv2d(8, 8, 1, height=7, width=5)) == "oh_ow"
    assert fused_pixel(lo.Conv2d(8, 8, 1, dilation=2, batch=2, height=3, width=3)) == "oh_ow"
    assert fused_pixel(lo.Conv2d(8, 8, 1, stride=2, height=8, width=8)) is None      # rows skip positions
    assert fused_pixel(lo.Conv2d(8, 8, 1, padding=1, height=8, width=8)) is None     # padded rows
    assert fused_pixel(lo.Conv2d(8, 8, (1, 3), height=8, width=8)) is None           # a window of taps
    assert fused_pixel(lo.Conv2d(8, 8, 1, height=1, width=8)) is None                # one row only
    assert fused_pixel(lo.Matmul(8, 16, 32)) is None
    op = lo.Conv2d(8, 8, 1, height=7, width=7)
    assert pixel_dims(op, "avx2") == [None, "oh_ow"] and pixel_dims(op, "avx512") == [None]
    assert not any(c.knobs.pixel for c in candidates(op, "avx512"))


def test_fused_positions_are_priced_as_the_loops_they_fuse(recorded_profile):
    """The fused loop's extent is the positions'; its outer loop visits the output in the order the rows'
    loops would (``out_of_order``), and reads the input as they do (``streamed_bytes``)."""
    op = lo.Conv2d(256, 1024, 1, height=14, width=14)
    rows = Knobs(4, 16, ("kh", "kw", "c"), ("n", "k_o", "oh", "ow_o"), "packed")
    fused = Knobs(4, 16, ("kh", "kw", "c"), ("n", "k_o", "oh_ow_o"), "packed", pixel="oh_ow")
    assert rank.outer_extents(op, fused) == {"n": 1, "oh_ow_o": 49, "k_o": 64}
    assert rank.out_of_order(op, fused) == rank.out_of_order(op, rows) == 2
    assert rank.streamed_bytes(op, fused, 1 << 18) == rank.streamed_bytes(op, rows, 1 << 18)
    assert Candidate(op, "avx2", fused).schedule.loop("oh_ow_o").extent == 49


@pytest.mark.slow
def test_resnet50s_2048_to_512_conv_at_7x7_runs_its_49_positions_as_one_dim(recorded_profile):
    """Along the 7-wide rows every AVX2 block of two or more channel vectors leaves a partial block per row;
    along the 49 fused positions 5x16 blocks leave one of 4 positions (``rank.pixel_edges``): 5x16 along the
    fused positions ran 0.80-0.81x the time of the rows' 4x16 (1 thread) on an AMD EPYC Zen 3."""
    first = first_choice(lo.Conv2d(2048, 512, 1, height=7, width=7), "avx2").knobs
    assert first.pixel == "oh_ow" and first.pixel_block * first.channel_block // 8 >= 8, first
