"""The stored best schedule of every catalog layer passes the reference test, on its own layer
(every SIMD ISA here) and on random small convolutions it was not written for (every ISA)."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import loopopt as lo
from loopopt.schedule_file import list_schedules
from strategies import conv_ops
from test_kernels import ISAS, check

LAYER_SCHEDULES = [name for name in list_schedules() if name in lo.list_layers()]


def test_the_benchmarked_layers_have_stored_schedules():
    for layer in ("resnet50.conv2_x", "resnet50.conv3_x", "resnet50.conv4_x", "resnet50.conv2_x.reduce",
                  "resnet50.conv1", "mobilenetv1.block3.depthwise", "mobilenetv2.block2.depthwise",
                  "mobilenetv2.block2.project"):
        assert layer in LAYER_SCHEDULES


@pytest.mark.parametrize("layer", LAYER_SCHEDULES)
@pytest.mark.parametrize("isa", [isa for isa in ISAS if isa != "scalar"])  # scalar: on small convs below
def test_best_schedule_on_its_layer(layer, isa):
    schedule = lo.load_schedule(layer, lo.get_layer(layer))
    assert schedule.register_block_at is not None
    check(schedule, isa)


@pytest.mark.parametrize("layer", LAYER_SCHEDULES)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_best_schedule_applies_to_any_conv(layer, data):
    op = data.draw(conv_ops())
    check(lo.load_schedule(layer, op), data.draw(st.sampled_from(ISAS)))
