"""The cuda target's depthwise family on an NVIDIA GPU (``-m gpu``; skipped with the reason where there is
none): float16, bfloat16 and float32 depthwise convs of every guard kind (stride, dilation, asymmetric
padding, channel tails, batch > 1, bias, a 3x5 filter) against the op's reference, and a MobileNetV2
layer in a CUDA graph."""
import itertools

import pytest
from test_cuda_gpu import needs_gpu

import loopopt as lo
from loopopt.dataflows import gpu_depthwise
from loopopt.measure import checked

pytestmark = pytest.mark.gpu

OPS = [lo.Conv2d(13, 13, 3, stride=2, padding=((1, 0), (2, 1)), groups=13, batch=3, height=11, width=9,
                 dtype="float16"),
       lo.Conv2d(24, 24, 3, padding=2, dilation=2, groups=24, batch=2, height=10, width=13, dtype="float16"),
       lo.Conv2d(20, 20, 3, stride=2, padding=1, groups=20, batch=2, height=9, width=9, dtype="bfloat16"),
       lo.Conv2d(10, 10, (3, 5), padding=(1, 2), groups=10, batch=2, height=7, width=12, dtype="float32"),
       lo.Conv2d(96, 96, 3, stride=2, padding=1, groups=96, bias=False, batch=4, height=112, width=112,
                 dtype="float16")]
KNOBS = [{"run": 3, "threads_w": 2}, {"run": 4}, {"run": 8, "threads_c": 5}]


@needs_gpu
@pytest.mark.parametrize("op, knobs", list(itertools.product(OPS, KNOBS)), ids=str)
def test_depthwise_kernels_match_the_reference_on_the_gpu(op, knobs):
    kernel = gpu_depthwise(op, **knobs).compile(target="cuda")
    assert kernel.build.spill_bytes == 0
    ok, error, _ = checked(kernel, seed=7)
    assert ok, error


@needs_gpu
def test_a_mobilenet_depthwise_layer_runs_in_a_graph():
    op = lo.Conv2d(144, 144, 3, padding=1, groups=144, bias=False, batch=32, height=56, width=56,
                   dtype="float16")
    kernel = gpu_depthwise(op).compile(target="cuda")
    assert kernel.build.spill_bytes == 0
    timing = lo.measure(kernel, budget=0.1, graph=True)
    assert timing.graph and timing.verified
