"""The cuda target's kernels on an NVIDIA GPU (``-m gpu``; skipped with the reason where there is none):
numerics against the reference, device arrays without copies, timing with CUDA events."""
import numpy as np
import pytest
from helpers import needs

import loopopt as lo
from loopopt.dataflows import GPU_PRESETS
from loopopt.measure import verify
from loopopt.targets.cuda import device

pytestmark = pytest.mark.gpu


needs_gpu = needs(device.cupy)

OPS = [lo.Conv2d(8, 12, 3, stride=2, padding=(1, 2), dilation=2, groups=2, height=13, width=11, batch=2),
       lo.Conv2d(3, 20, 5, padding=2, height=17, width=19, batch=3),
       lo.Conv2d(16, 40, 1, height=7, width=9, bias=False),
       lo.Matmul(37, 45, 13), lo.Matmul(8, 9, 10, batch=(3,)), lo.Gemm(30, 20, 7, alpha=0.5, beta=2.0)]


@needs_gpu
@pytest.mark.parametrize("preset", list(GPU_PRESETS))
@pytest.mark.parametrize("op", OPS, ids=repr)
def test_presets_match_the_reference_on_the_gpu(op, preset):
    ok, error = verify(GPU_PRESETS[preset](op).compile(target="cuda"), seed=3)
    assert ok, error


@needs_gpu
@pytest.mark.parametrize("op", OPS, ids=repr)
def test_an_outer_reduction_loop_adds_to_the_output_set_by_the_init_pass(op):
    first = op.dim_names[0]
    reduction = next(d for d in op.dim_names if d in op.reduction_dims)
    kernel = lo.Schedule(op).reorder(reduction, first).bind(first, "thread.x").compile(target="cuda")
    assert not kernel.printed.final
    assert verify(kernel, seed=5)[0]


@needs_gpu
@pytest.mark.parametrize("op", OPS[:4], ids=repr)
def test_a_stage_with_thread_guards_outside_it_matches_the_reference(op):
    """The first output dim's partial guard lies outside the stage: every thread reaches the barriers."""
    first, channel = op.dim_names[0], op.reduction_channel_dim
    outputs = [d for d in op.dim_names if d not in op.reduction_dims and d != first]
    schedule = (lo.Schedule(op).split(first, 7).split(channel, 2)
                .reorder(f"{first}_o", f"{first}_i", *outputs, f"{channel}_o")
                .bind(f"{first}_o", "block.x").bind(f"{first}_i", "thread.x")
                .stage(op.inputs[1], f"{channel}_o"))
    assert verify(schedule.compile(target="cuda"), seed=9)[0]


@needs_gpu
def test_device_arrays_are_used_without_copies_and_give_the_numpy_result():
    cp = device.cupy()
    op = lo.Conv2d(8, 16, 3, padding=1, height=10, width=12, batch=2)
    kernel = GPU_PRESETS["gpu_tiled"](op).compile(target="cuda")
    inputs = [op.random_inputs(1)[t] for t in op.call_tensors]
    on_device = kernel(*(cp.asarray(a) for a in inputs))
    assert isinstance(on_device, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(on_device), kernel(*inputs))
    torch = pytest.importorskip("torch")
    tensors = [torch.as_tensor(a, device="cuda") for a in inputs]
    np.testing.assert_array_equal(cp.asnumpy(kernel(*tensors)), kernel(*inputs))
    with pytest.raises(ValueError, match="has shape"):
        kernel(tensors[0][:1], *tensors[1:])
    with pytest.raises(TypeError, match="dtype float64"):
        kernel(tensors[0].double(), *tensors[1:])


@needs_gpu
def test_measure_times_with_cuda_events_against_the_ffma_peak():
    kernel = GPU_PRESETS["gpu_tiled"](lo.Matmul(256, 256, 256)).compile(target="cuda")
    timing = lo.measure(kernel, repeats=5)
    assert timing.verified and timing.repeats == 5
    assert timing.peak_gflops == pytest.approx(device.ffma_peak_gflops())
    assert 0 < timing.percent_of_peak < 100
