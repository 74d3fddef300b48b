"""The cuda target's int8 and bfloat16 tensor-core kernels on an NVIDIA GPU (``-m gpu``; skipped with the
reason where there is none): quantized convs and matmuls on ``mma.sync.m16n8k32`` (int8 and uint8
activations, every output kind, split-K on int32) bit for bit against quant.py's reference, bfloat16
on ``m16n8k16`` and WMMA within the float32 tolerance, and ``measure(..., graph=True)``."""
import pytest
from test_cuda_gpu import needs_gpu

import loopopt as lo
from loopopt.dataflows import gpu_mma, gpu_wmma
from loopopt.measure import GRAPH, checked

pytestmark = pytest.mark.gpu

SPECS = [lo.QuantSpec(activation="uint8", output="uint8"), lo.QuantSpec(activation="int8", output="int32"),
         lo.QuantSpec(activation="uint8", per_channel=False, output="float32"),
         lo.QuantSpec(activation="int8", output="int8")]
SHAPES = [lo.Conv2d(24, 40, 3, stride=2, padding=(1, 2), dilation=2, height=13, width=11, batch=2),
          lo.Conv2d(3, 20, 5, padding=2, height=17, width=19, batch=3),
          lo.Conv2d(64, 64, 3, padding=1, height=14, width=14, batch=4), lo.Matmul(300, 260, 200),
          lo.Matmul(37, 45, 13)]
SMALL = {"block_m": 32, "block_n": 48, "warps_m": 2, "warps_n": 3, "depth": 96}
VARIANTS = {"mma": lambda op: gpu_mma(op), "mma small": lambda op: gpu_mma(op, **SMALL),
            "mma stages=2": lambda op: gpu_mma(op, stages=2, depth=32),
            "mma split_k=3": lambda op: gpu_mma(op, **SMALL, split_k=3)}


def _cases():
    """Each shape under each spec with one of the unsplit variants in turn, and split-K on int32."""
    unsplit = [v for v in VARIANTS if "split_k" not in v]
    for i, shape in enumerate(SHAPES):
        for j, spec in enumerate(SPECS):
            chosen = [unsplit[(i + j) % len(unsplit)]] + (["mma split_k=3"] if spec.output == "int32" else [])
            for variant in chosen:
                yield pytest.param(type(shape)(**shape.arguments, quant=spec), variant,
                                   id=f"{shape!r}-{spec.activation}-{spec.output}-{variant}")


@needs_gpu
@pytest.mark.parametrize("op, variant", list(_cases()))
def test_int8_kernels_match_the_reference_bit_for_bit_on_the_gpu(op, variant):
    ok, error, _ = checked(VARIANTS[variant](op).compile(target="cuda"), seed=11)
    assert ok, error


@needs_gpu
@pytest.mark.parametrize("make", [gpu_mma, gpu_wmma])
@pytest.mark.parametrize("shape", SHAPES, ids=repr)
def test_bfloat16_kernels_match_the_reference_on_the_gpu(shape, make):
    op = type(shape)(**shape.arguments | {"dtype": "bfloat16"})
    ok, error, _ = checked(make(op).compile(target="cuda"), seed=11)
    assert ok, error


@needs_gpu
def test_measure_in_a_cuda_graph_names_its_scope_and_verifies():
    op = lo.Matmul(512, 512, 512, quant=lo.QuantSpec(activation="int8", output="int32"))
    timing = lo.measure(gpu_mma(op).compile(target="cuda"), repeats=5, graph=True)
    assert timing.verified and timing.scope == GRAPH and GRAPH in str(timing) and timing.unit == "GOP/s"
    assert 0 < timing.percent_of_peak < 100
