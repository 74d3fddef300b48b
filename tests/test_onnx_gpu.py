"""``prepare(model, device="CUDA")`` on an NVIDIA GPU (``python -m pytest -q -m gpu tests/test_onnx_gpu.py``;
skipped with the reason without CuPy and a GPU): the small models of test_onnx_device.py in float32 and
float16, and benchmarks/bench_onnx.py's ResNet-18 in float16 at 32x32, every node on the GPU, against
onnxruntime's CPU output."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import needs
from onnx_models import conv_pool_gemm, expected, float16_model, residual_net

from loopopt.onnx import backend
from loopopt.onnx.device_rep import DEVICE_KERNEL, HOST
from loopopt.targets.cuda import device

pytestmark = pytest.mark.gpu
needs_gpu = needs(device.cupy)

TOLERANCE = {np.float32: 1e-4, np.float16: 2e-2}     # relative to the output's largest magnitude
MODELS = {"conv_pool_gemm": conv_pool_gemm, "residual_net": residual_net}


def _check(proto: onnx.ModelProto, dtype, seed: int = 0) -> backend.DeviceRep:
    """``proto`` prepared strictly on the GPU, its output checked against onnxruntime's on the CPU."""
    rep = backend.prepare(proto, device="CUDA", strict=True)
    shape = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    out, peer = rep.run([x])[0], expected(proto, [x])[0]
    assert isinstance(out, np.ndarray) and out.dtype == peer.dtype == dtype
    scale = TOLERANCE[dtype] * float(np.abs(peer).max())
    np.testing.assert_allclose(out.astype(np.float64), peer, atol=scale)
    np.testing.assert_allclose(rep.run([x])[0].astype(np.float64), peer, atol=scale)     # a second run
    assert not rep.fallbacks() and HOST not in {step.engine for step in rep.plan.steps}
    return rep


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_small_models_run_on_the_gpu(name, dtype):
    proto = MODELS[name]() if dtype == np.float32 else float16_model(MODELS[name]())
    rep = _check(proto, dtype)
    assert all(node.isa == device.arch() for node in rep.lowered.values())


@needs_gpu
def test_resnet18_float16_runs_on_the_gpu(tmp_path):
    """bench_onnx.py's ResNet-18 (random weights, batch norm folded on export), batch 1, 32x32, in float16."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import bench_onnx
    torch.manual_seed(0)
    net = bench_onnx.resnet18(torch).eval()
    path = tmp_path / "resnet18.onnx"
    torch.onnx.export(net, (torch.randn(1, 3, 32, 32),), str(path), opset_version=bench_onnx.OPSET,
                      dynamo=False, input_names=["x"])
    rep = _check(float16_model(onnx.load(str(path))), np.float16)
    kernels = [step for step in rep.plan.steps if step.engine == DEVICE_KERNEL]
    assert len(kernels) == 21      # 20 Convs and the Gemm
    assert any("fused epilogue: + residual" in node.note for node in rep.lowered.values())
