"""The stored best schedule of every catalog layer passes the reference test, on its own layer
(every SIMD ISA here) and on random small convolutions it was not written for (every ISA)."""
import pytest
from helpers import HYPOTHESIS, ISAS, check, conv_ops, rotated
from hypothesis import given, settings
from hypothesis import strategies as st

import loopopt as lo
from loopopt.schedule_file import list_schedules

LAYER_SCHEDULES = [name for name in list_schedules() if name in lo.list_layers()]
SIMD_ISAS = [isa for isa in ISAS if isa != "scalar"]                 # scalar: on the small convs below
QUICK_LAYERS = ("resnet50.conv1", "resnet50.conv2_x", "mobilenetv2.block2.depthwise")  # 7x7, 3x3, depthwise


def test_the_benchmarked_layers_have_stored_schedules():
    for layer in ("resnet50.conv2_x", "resnet50.conv3_x", "resnet50.conv4_x", "resnet50.conv2_x.reduce",
                  "resnet50.conv1", "mobilenetv1.block3.depthwise", "mobilenetv2.block2.depthwise",
                  "mobilenetv2.block2.project"):
        assert layer in LAYER_SCHEDULES


@pytest.mark.parametrize("layer, isa", rotated(LAYER_SCHEDULES, SIMD_ISAS, quick=QUICK_LAYERS))
def test_best_schedule_on_its_layer(layer, isa):
    schedule = lo.load_schedule(layer, lo.get_layer(layer))
    assert schedule.register_block_at is not None
    check(schedule, isa)


@pytest.mark.slow
@pytest.mark.parametrize("layer", LAYER_SCHEDULES)
@settings(max_examples=4, **HYPOTHESIS)
@given(data=st.data())
def test_best_schedule_applies_to_any_conv(layer, data):
    op = data.draw(conv_ops())
    check(lo.load_schedule(layer, op), data.draw(st.sampled_from(ISAS)))
