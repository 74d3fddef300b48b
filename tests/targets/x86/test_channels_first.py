"""Register blocks reading their first input channels-first (``Knobs.activations``,
``space.activation_choices``): a float op of one group with few reduction channels (an image) has each
register block also on its NCHW input. Each drawn candidate agrees with the reference over odd sizes,
tails, stride, dilation, per-side padding and batch; each is ranked as its channels-last twin,
right after it, so the first choice stays channels-last and ``first_reading`` finds the twin where the
input arrives NCHW."""
import numpy as np
import pytest
from helpers import ISAS, tiers
from hypothesis import strategies as st

import loopopt as lo
from loopopt.targets.x86 import rank
from loopopt.targets.x86.space import FEW_CHANNELS, activation_choices, candidates
from loopopt.tune import choice

SIMD_ISAS = [isa for isa in ISAS if isa != "scalar"]


def channels_first_blocks_match_the_reference(isa, data):
    channels = data.draw(st.integers(1, FEW_CHANNELS))
    kh, kw = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    dilation = data.draw(st.sampled_from([1, 1, 2]))
    padding = tuple((data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) for _ in range(2))
    op = lo.Conv2d(channels, data.draw(st.integers(1, 40)), (kh, kw),
                   stride=(data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))), padding=padding,
                   dilation=(1, dilation), batch=data.draw(st.integers(1, 2)),
                   height=data.draw(st.integers(max(1, kh - sum(padding[0])), 9)),
                   width=data.draw(st.integers(max(1, dilation * (kw - 1) + 1 - sum(padding[1])), 30)),
                   bias=data.draw(st.booleans()))
    found = [c for c in candidates(op, isa) if c.knobs.activations == "first"]
    candidate = found[data.draw(st.integers(0, len(found) - 1))]
    assert candidate.schedule.layout_of("I").tag == "NCHW" and candidate.schedule.layout_of("O").tag == "NHWC"
    inputs = op.random_inputs(data.draw(st.integers(0, 9)))
    want = op.reference(*inputs.values())
    got = candidate.schedule.compile(isa)(*inputs.values())
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


test_channels_first_blocks_match_the_reference_quick, test_channels_first_blocks_match_the_reference = tiers(
    channels_first_blocks_match_the_reference, 1, 4, isas=SIMD_ISAS, data=st.data())


def test_only_float_ops_with_few_channels_read_channels_first():
    stem = lo.Conv2d(3, 32, 3, stride=2, padding=1, height=16, width=16)
    quant = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="uint8")
    assert activation_choices(stem) == ("last", "first")
    assert activation_choices(lo.Conv2d(FEW_CHANNELS + 1, 32, 3, height=8, width=8)) == ("last",)
    assert activation_choices(lo.Conv2d(3, 32, 3, height=8, width=8, quant=quant)) == ("last",)  # dot groups
    assert activation_choices(lo.Conv2d(4, 4, 3, groups=4, height=8, width=8)) == ("last",)  # a gather a lane
    assert activation_choices(lo.Matmul(8, 16, 3)) == ("last",)        # its logical layout is channels-last


@pytest.mark.slow
def test_the_twin_ranks_right_after_its_channels_last_candidate(recorded_profile):
    op = lo.Conv2d(3, 32, 3, stride=2, padding=1, height=32, width=32)
    ranked = rank.rank(candidates(op, "avx512"))
    first, twin = ranked[:2]
    assert first.knobs.activations == "last" and twin.knobs.activations == "first"
    assert twin.figures == first.figures and twin.knobs.as_dict()["activations"] == "first"
    choice._chosen.clear(), choice._ranked.clear()          # ranked with the recorded profile
    assert choice.first_choice(op).knobs.activations == "last"
    reading, position = choice.first_reading(op, "NCHW")
    assert reading.knobs.activations == "first" and position == 1
