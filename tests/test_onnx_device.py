"""``prepare(model, device=...)`` on a GPU's plan, run without one: every kernel the host emulation of its
CUDA kernel (``emulated_device``, chosen here explicitly), the glue nodes on numpy as the array module,
against onnxruntime; the schedules' sources (a tuning log's trial of the device, else the search's first
candidate); the refusals. The same models on the GPU: ``tests/test_onnx_gpu.py``."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_models import conv_pool_gemm, expected, float16_model, model, residual_net

import loopopt as lo
from loopopt.onnx import backend
from loopopt.onnx.device import emulated_device
from loopopt.onnx.device_kernels import FUSING, RANKED
from loopopt.onnx.device_rep import DEVICE_ARRAYS, DEVICE_KERNEL, HOST
from loopopt.targets import registry
from loopopt.targets.base import TargetUnavailableError

DEVICE = emulated_device()
RNG = np.random.default_rng(11)
TOLERANCE = {np.float32: 1e-4, np.float16: 2e-2}     # relative to the output's largest magnitude


def _input(proto, dtype) -> np.ndarray:
    shape = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    return RNG.standard_normal(shape).astype(dtype)


def _check(proto, dtype) -> backend.LoopoptRep:
    """The model prepared strictly on the emulated GPU, its output checked against onnxruntime's."""
    rep = backend.prepare(proto, device=DEVICE, strict=True)
    x = _input(proto, dtype)
    out, peer = rep.run([x])[0], expected(proto, [x])[0]
    assert out.dtype == peer.dtype == dtype
    scale = float(np.abs(peer).max())
    np.testing.assert_allclose(out.astype(np.float64), peer, atol=TOLERANCE[dtype] * scale)
    return rep


def _bias_through_identity(proto):
    """``proto`` with the Conv's bias read through an Identity of its initializer (as PyTorch's exporter
    shares equal initializers, e.g. folded batch norms' zero biases)."""
    conv = next(node for node in proto.graph.node if node.op_type == "Conv")
    proto.graph.node.insert(0, helper.make_node("Identity", [conv.input[2]], ["shared_bias"], name="share"))
    conv.input[2] = "shared_bias"
    return proto


def test_a_small_model_runs_every_node_on_the_device():
    rep = _check(_bias_through_identity(conv_pool_gemm()), np.float32)
    engines = {step.node: step.engine for step in rep.plan.steps}
    assert "share" not in engines      # a constant: bound with the Conv's weights at prepare
    assert engines["conv"] == engines["fc"] == DEVICE_KERNEL
    assert set(engines.values()) == {DEVICE_KERNEL, DEVICE_ARRAYS} and not rep.fallbacks()
    for node in ("conv", "fc"):
        assert rep.lowered[node].source.startswith(f"{RANKED}, rank 0 by the cost model: gpu_")
        assert rep.lowered[node].isa == "sm_90"


@pytest.mark.slow
def test_a_float16_residual_network_on_the_device():
    """Conv + bias + Relu, MaxPool, a basic block with its residual Add, a depthwise Conv + Clip, a 1x1
    Conv + Add, GlobalAveragePool, Flatten, Gemm in float16; batch 2, 9x11: the tensor-core kernels take
    the Relu and the residual Add in their epilogue, the depthwise kernel's Clip runs after it. (float32
    here: the small model above; both on the GPU: test_onnx_gpu.py.)"""
    rep = _check(float16_model(residual_net()), np.float16)
    assert not rep.fallbacks()
    assert "fused epilogue: + residual, then Clip(low=0.0" in rep.lowered["body2"].note
    assert rep.lowered["body2"].absorbed == ("Add_6", "Relu_7")
    assert rep.lowered["body2"].source.startswith((RANKED, FUSING))
    assert rep.lowered["depthwise"].source.startswith(f"{RANKED}, rank 0 by the cost model: gpu_depthwise")
    assert {step.node: step.engine for step in rep.plan.steps}["Clip_9"] == DEVICE_ARRAYS


def test_a_logged_trial_of_the_device_runs_the_node(tmp_path):
    """The tuning log's trial keyed by the device runs the node; a trial of another GPU is not taken."""
    from loopopt.onnx.graph import known_values
    from loopopt.onnx.lowering import Value, lower
    from loopopt.tune import TuningLog
    from loopopt.tune.trial import Outcome
    proto = conv_pool_gemm()
    gemm = proto.graph.node[-1]
    known = known_values(proto)
    known["f"] = Value((2, 4), np.dtype(np.float32))
    op = lower(gemm, [known[name] for name in gemm.input]).op
    rules = registry.target("cuda").search_rules()
    second = rules.rank(rules.candidates(op, DEVICE.isa))[1]
    timing = lo.Timing(median=1e-5, min=1e-5, iqr=0.0, repeats=3, gflops=1.0, percent_of_peak=1.0,
                       peak_gflops=100.0, verified=True, max_error=0.0)
    log = tmp_path / "gpu.db"
    with TuningLog(log) as tuning_log:
        for fingerprint, seconds in ((DEVICE.fingerprint, 1e-5), ("another GPU (sm_90)", 1e-6)):
            outcome = Outcome("ok", replace(timing, min=seconds), "", "host", fingerprint, "nvcc")
            tuning_log.append(op, lo.to_toml(second.schedule), second.knobs.as_dict(), {}, DEVICE.isa, 1,
                              0.01, outcome)
    rep = backend.prepare(proto, device=DEVICE, log=log)
    assert rep.lowered["fc"].source == f"tuning log {log} ({DEVICE.fingerprint})"
    assert lo.to_toml(rep.lowered["fc"].schedule) == lo.to_toml(second.schedule)
    x = _input(proto, np.float32)
    np.testing.assert_allclose(rep.run([x])[0], expected(proto, [x])[0], rtol=1e-4, atol=1e-5)


def _softmax_after_conv(dtype=TensorProto.FLOAT) -> object:
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Softmax", ["c"], ["y"], axis=1, name="softmax")]
    weights = helper.make_tensor("w", dtype, [2, 2, 1, 1], [0.5, -1.0, 2.0, 0.25])
    return model(nodes, [("x", dtype, [1, 2, 3, 3])], [("y", dtype, [1, 2, 3, 3])], [weights])


def test_nodes_the_device_cannot_run_are_refused_or_run_on_the_host():
    proto = _softmax_after_conv(TensorProto.DOUBLE)
    refusal = (r"node conv \(Conv\) cannot run on host emulation of NVIDIA H200 \(sm_90\): Conv input 'x' of "
               r"dtype float64 \(float kernels are float32 or float16")
    with pytest.raises(NotImplementedError, match=refusal):
        backend.prepare(proto, device=DEVICE, strict=True)
    rep = backend.prepare(proto, device=DEVICE)
    assert [(step.node, step.engine) for step in rep.fallbacks()] == [("conv", HOST), ("softmax", HOST)]
    assert "float64" in rep.lowered["conv"].reason
    assert rep.fallbacks()[1].reason == "no implementation of Softmax on device arrays"
    x = _input(proto, np.float64)          # onnxruntime has no float64 Conv
    np.testing.assert_allclose(rep.run([x])[0], ReferenceEvaluator(proto).run(None, {"x": x})[0], rtol=1e-12)
    with pytest.raises(NotImplementedError, match=r"node softmax \(Softmax\) cannot run on .*: no "
                                                  r"implementation of Softmax on device arrays"):
        backend.prepare(_softmax_after_conv(), device=DEVICE, strict=True)


def test_the_gpu_device_needs_a_gpu_and_takes_no_cpu_options():
    if backend.supports_device("CUDA"):
        pytest.skip("a GPU is here: tests/test_onnx_gpu.py runs on it")
    with pytest.raises(TargetUnavailableError, match="running cuda kernels needs CuPy and an NVIDIA GPU"):
        backend.prepare(conv_pool_gemm(), device="CUDA")
    with pytest.raises(ValueError, match="tune, threads and isa choose the CPU's kernels; on host emulation"):
        backend.prepare(conv_pool_gemm(), device=DEVICE, threads=2)
