"""The stored best schedule of every catalog layer passes the reference test, on its own layer
(every SIMD ISA here; every stored file, fp32 and int8, of every CPU's directory, whichever CPU runs
the tests) and on random small convolutions it was not written for (every ISA)."""
import pytest
from helpers import HYPOTHESIS, INT_ISAS, ISAS, check, check_quantized, conv_ops, rotated
from hypothesis import given, settings
from hypothesis import strategies as st

import loopopt as lo
from loopopt.schedule_file import list_schedules, schedule_dirs

LAYER_SCHEDULES = [name for name in list_schedules() if name in lo.list_layers()]
SIMD_ISAS = [isa for isa in ISAS if isa != "scalar"]                 # scalar: on the small convs below
QUICK_LAYERS = ("resnet50.conv1", "resnet50.conv2_x", "mobilenetv2.block2.depthwise")  # 7x7, 3x3, depthwise
INT8 = ".int8"
INT8_SPEC = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="uint8")
STORED_FILES = {f"{path.parent.name}/{path.stem}": path for directory in schedule_dirs()[:1]
                for path in sorted(directory.rglob("*.toml"))
                if path.stem.removesuffix(INT8) in lo.list_layers()}


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
@pytest.mark.optimized_build     # GCC 12 at -O1: 17 CPU-s in its combiner on conv4_x.int8's kernel, -O3: 1 s
@pytest.mark.parametrize("path", STORED_FILES.values(), ids=STORED_FILES.keys())
def test_every_cpus_stored_schedule_on_its_layer(path):
    """Every stored file, also those the lookup does not serve on this CPU (another CPU's directory,
    ``schedules/<cpu key>/``, or the generic file a directory of this CPU overrides)."""
    name = path.stem
    op = lo.get_layer(name.removesuffix(INT8))
    if name.endswith(INT8):
        check_quantized(lo.load_schedule(path, op.with_quant(INT8_SPEC)), INT_ISAS[0])   # AVX-512 needs VNNI
    else:
        check(lo.load_schedule(path, op), ISAS[0])


@pytest.mark.slow
@pytest.mark.parametrize("layer", LAYER_SCHEDULES)
@settings(max_examples=4, **HYPOTHESIS)
@given(data=st.data())
def test_best_schedule_applies_to_any_conv(layer, data):
    op = data.draw(conv_ops())
    check(lo.load_schedule(layer, op), data.draw(st.sampled_from(ISAS)))
