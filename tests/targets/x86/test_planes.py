"""Plane candidates (``space.plane_candidates``): a float depthwise conv on its NCHW planes, lanes along
the output positions, a block of channels x positions in registers across the taps. Each drawn
candidate agrees with the reference over odd sizes, tails, stride, dilation, per-side padding, channel
multipliers and batch; the ranking prices them below the channels-last first choice, and the default
for an input arriving NCHW takes one where the packing it saves pays for it."""
import numpy as np
import pytest
from helpers import ISAS, tiers
from hypothesis import strategies as st

import loopopt as lo
from loopopt.onnx.kernels import default_schedule
from loopopt.targets.x86.rank import out_of_order
from loopopt.targets.x86.space import Knobs, has_planes, plane_candidates
from loopopt.tune import choice

SIMD_ISAS = [isa for isa in ISAS if isa != "scalar"]


def planes_match_the_reference(isa, data):
    channels, multiplier = data.draw(st.integers(1, 12)), data.draw(st.integers(1, 2))
    kh, kw = data.draw(st.integers(1, 5)), data.draw(st.integers(2, 5))
    stride, dilation = data.draw(st.integers(1, 2)), data.draw(st.sampled_from([1, 1, 2]))
    padding = tuple((data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) for _ in range(2))
    op = lo.Conv2d(channels, channels * multiplier, (kh, kw), stride=(data.draw(st.integers(1, 2)), stride),
                   padding=padding, dilation=(1, dilation), groups=channels,
                   batch=data.draw(st.integers(1, 2)),
                   height=data.draw(st.integers(max(1, kh - sum(padding[0])), 9)),
                   width=data.draw(st.integers(max(1, dilation * (kw - 1) + 1 - sum(padding[1])), 40)),
                   bias=data.draw(st.booleans()))
    assert has_planes(op, isa)
    found = plane_candidates(op, isa)
    candidate = found[data.draw(st.integers(0, len(found) - 1))]
    assert candidate.schedule.layout_of("I").tag == "NCHW" and candidate.schedule.layout_of("O").tag == "NCHW"
    inputs = op.random_inputs(data.draw(st.integers(0, 9)))
    kernel = candidate.schedule.compile(isa)
    want = op.reference(*inputs.values())
    np.testing.assert_allclose(kernel(*inputs.values()), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


test_planes_match_the_reference_quick, test_planes_match_the_reference = tiers(
    planes_match_the_reference, 1, 4, isas=SIMD_ISAS, data=st.data())


def test_planes_are_float_depthwise_convs_on_simd_only():
    depthwise = lo.Conv2d(8, 8, 3, padding=1, groups=8, height=6, width=6)
    quant = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="uint8")
    assert has_planes(depthwise, "avx2") and not has_planes(depthwise, "scalar")
    assert not has_planes(lo.Conv2d(8, 8, 3, padding=1, groups=8, height=6, width=6, quant=quant), "avx2")
    assert not has_planes(lo.Conv2d(8, 8, 3, padding=1, groups=4, height=6, width=6), "avx2")   # 2 in a group
    assert not has_planes(lo.Conv2d(8, 8, (3, 1), padding=(1, 0), groups=8, height=6, width=6), "avx2")
    knobs = Knobs(6, 4, ("c", "kh", "kw"), ("n", "k_o", "oh", "ow_o"), "planes")
    assert out_of_order(depthwise, knobs, channels_first=True) == 0         # NCHW's order
    assert out_of_order(depthwise, knobs) == 1                             # channels-last's: k_o before oh


@pytest.mark.slow                                    # ranks the space, builds 55 candidates: 1 s
def test_the_default_reads_nchw_where_the_packing_it_saves_pays(recorded_profile):
    op = lo.Conv2d(32, 32, 5, padding=2, groups=32, height=28, width=28)
    choice._chosen.clear(), choice._ranked.clear()          # ranked with the recorded profile
    isa = "avx512"          # the recorded profile's Xeon's ISA, on any CPU (on AVX2, packing to NHWC pays)
    first, _, _ = default_schedule(op, isa=isa)
    assert first.layout_of("I").tag == "NHWC"
    schedule, source, _ = default_schedule(op, isa=isa, arrives="NCHW")
    assert schedule.layout_of("I").tag == "NCHW" and "weights planes" in source
    candidate, rank = choice.first_reading(op, "NCHW", isa)
    assert rank >= choice.READING_WINDOW          # below the window: within the packing it saves
    first_seconds = choice.first_choice(op, isa).figures["predicted_seconds"]
    assert first_seconds < candidate.figures["predicted_seconds"] <= first_seconds + choice.packing_seconds(
        op, choice.first_choice(op, isa), {"I": "NCHW"})
    choice._chosen.clear(), choice._ranked.clear()          # not kept for tests on the measured profile


@pytest.mark.slow
@pytest.mark.parametrize("isa", SIMD_ISAS[:1])
def test_an_nchw_call_packs_nothing(isa):
    op = lo.Conv2d(16, 16, 3, padding=1, groups=16, height=7, width=20)
    candidate = plane_candidates(op, isa)[0]
    kernel = candidate.schedule.compile(isa)
    inputs = op.random_inputs(0)
    assert kernel.generated.read_ahead.get("I", 0) == 0
    packed = kernel._pack("I", inputs["I"])
    assert np.shares_memory(packed, inputs["I"])                   # the caller's array, read in place
