"""QDQ-format models on fused quantized kernels (loopopt.onnx.qdq), the exact integer reference of
quantized nodes (loopopt.onnx.exact) and the per-node integer check of the report."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_models import expected, model, qdq_model, quantized_model

from loopopt.onnx import backend
from loopopt.onnx.exact import IntegerCheck, exact_output, integer_check
from loopopt.onnx.report import model_report
from loopopt.quant import qconv2d_accumulators

RNG = np.random.default_rng(11)


def _x(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _dequantized(q: np.ndarray, scale, zero) -> np.ndarray:
    return (q.astype(np.float64) - np.float64(zero)) * np.float64(scale)


def test_qdq_groups_run_fused():
    proto = qdq_model()
    rep = backend.prepare(proto, strict=True)
    conv, matmul, gemm = (rep.lowered[name] for name in ("conv", "matmul", "gemm"))
    assert (conv.op_type, matmul.op_type, gemm.op_type) == ("QDQConv", "QDQMatMul", "QDQGemm")
    assert conv.absorbed == ("DequantizeLinear_1", "DequantizeLinear_2", "DequantizeLinear_3", "conv",
                             "QuantizeLinear_5")
    assert conv.op.quant.output == "uint8" and conv.op.quant.per_channel and conv.op.bias
    assert matmul.op.quant.output == "float32" and matmul.absorbed[-1] == "matmul"   # no QuantizeLinear
    assert repr(gemm.op).startswith("Conv2d(120, 4, kernel_size=(1, 1)") and gemm.op.quant.output == "uint8"
    assert "DequantizeLinear_7" in gemm.absorbed and "DequantizeLinear_7" in matmul.absorbed   # shared
    assert not any(n.op_type == "DequantizeLinear" for n in rep.prepared.graph.node)
    assert "absorbs DequantizeLinear_1" in str(conv)
    x = _x(1, 3, 8, 10)
    cq, m, gq = rep.run([x])
    want = expected(proto, [x])
    assert cq.dtype == want[0].dtype == np.uint8 and np.abs(cq.astype(int) - want[0]).max() <= 1
    # downstream of cq, against references on loopopt's own cq (one step of cq moves them)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in proto.graph.initializer}
    f = _dequantized(cq.reshape(1, -1), inits["cs"], inits["cz"])
    wm = inits["wm"].astype(np.float64) * inits["wms"].astype(np.float64)
    np.testing.assert_allclose(m, f @ wm, rtol=1e-5, atol=1e-6)
    gemm_node = next(n for n in rep.prepared.graph.node if n.name == "gemm")
    inputs = [cq.reshape(1, -1) if n == "fq" else inits.get(n) for n in gemm_node.input]
    assert np.array_equal(gq, exact_output(gemm_node, inputs))


def test_a_float_result_read_elsewhere_keeps_its_quantize_linear():
    """The conv's float result is a graph output: the group fuses without its QuantizeLinear, with a
    dequantized float32 output and its int32 bias dequantized by the bias' scale; the QuantizeLinear
    runs on its own."""
    proto = qdq_model(float_conv_output=True)
    rep = backend.prepare(proto, strict=True)
    conv = rep.lowered["conv"]
    assert conv.op.quant.output == "float32" and conv.absorbed[-1] == "conv"
    assert next(n for n in rep.prepared.graph.node if n.name == "conv").input[9] == "bcs"
    x = _x(1, 3, 8, 10)
    got, want = rep.run([x]), ReferenceEvaluator(proto).run(None, {"x": x})
    np.testing.assert_allclose(got[3], want[3], rtol=1e-5, atol=1e-5)
    assert np.abs(got[0].astype(int) - want[0]).max() <= 1


def test_a_group_that_cannot_fuse_runs_unfused_and_says_why():
    proto = qdq_model(bias_scale=1.5)     # the conv bias is not at the accumulators' scale
    rep = backend.prepare(proto, strict=True)
    conv = rep.lowered["conv"]
    assert conv.op_type == "Conv" and conv.op.quant is None and "bias scale" in rep.skipped["conv"]
    assert "not fused with its DequantizeLinear inputs: the bias scale" in conv.note
    x = _x(1, 3, 8, 10)
    got, want = rep.run([x])[0], expected(proto, [x])[0]
    assert np.abs(got.astype(int) - want).max() <= 1


@pytest.mark.slow
def test_report_checks_integer_outputs_against_onnxruntime_and_the_exact_reference():
    pytest.importorskip("onnxruntime")
    for proto, quantized in ((quantized_model(), ("qconv", "qmatmul")), (qdq_model(), ("conv", "gemm"))):
        report = model_report(proto, reuse=False, budget=0.01)
        checks = {n.lowered.node: n.integer for n in report.nodes if n.integer is not None}
        assert sorted(checks) == sorted(quantized)
        for check in checks.values():
            assert check.max_lsb <= 1 and check.elements > 0
            assert check.loopopt_exact + check.onnxruntime_exact <= check.differing
        data = report.to_dict()
        assert data["integer_check"]["elements"] == sum(c.elements for c in checks.values())
        assert "integer outputs vs onnxruntime" in report.table()
    assert "conv absorbs DequantizeLinear_1" in report.table()


@pytest.mark.slow
def test_quantize_static_qdq_model_matches_onnxruntime(tmp_path):
    """A float model built with onnx.helper, quantized by onnxruntime in QDQ format: every Conv and
    MatMul runs fused, each within one step of onnxruntime's output on the same inputs."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    w1 = (RNG.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (RNG.standard_normal((4, 8, 1, 1)) * 0.3).astype(np.float32)
    wm = (RNG.standard_normal((80, 6)) * 0.1).astype(np.float32)
    arrays = {"w1": w1, "b1": _x(8), "w2": w2, "wm": wm, "shape": np.array([1, 80], np.int64)}
    inits = [onnx.numpy_helper.from_array(a, n) for n, a in arrays.items()]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], strides=[2, 2], name="conv2"),
             helper.make_node("Reshape", ["c2", "shape"], ["f"]),
             helper.make_node("MatMul", ["f", "wm"], ["y"], name="fc")]
    float_path, qdq_path = tmp_path / "float.onnx", tmp_path / "qdq.onnx"
    onnx.save(model(nodes, [("x", TensorProto.FLOAT, [1, 3, 8, 10])], [("y", TensorProto.FLOAT, [1, 6])],
                    inits, opset=21), float_path)

    class Calibration(quantization.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": _x(1, 3, 8, 10)} for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    quantization.quantize_static(str(float_path), str(qdq_path), Calibration(),
                                 quant_format=quantization.QuantFormat.QDQ, per_channel=True,
                                 activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8)
    rep = backend.prepare(qdq_path, strict=True)
    assert {n.op_type for n in rep.lowered.values()} == {"QDQConv", "QDQMatMul"}
    report = model_report(qdq_path, reuse=False, budget=0.01)
    assert len([n for n in report.nodes if n.integer is not None]) == 3
    assert all(n.integer.max_lsb <= 1 for n in report.nodes if n.integer is not None)


def test_exact_requantization_rounds_ties_to_even_and_saturates():
    a = np.array([[1, 3, 5, 7, 9, 11, 255, 0]], np.uint8).T            # (8, 1)
    b = np.array([[1]], np.int8)
    node = helper.make_node("QLinearMatMul", [str(i) for i in range(8)], ["y"])
    half, one = np.float32(0.5), np.float32(1)
    got = exact_output(node, [a, half, np.uint8(0), b, one, np.int8(0), one, np.int8(0)])
    assert got.ravel().tolist() == [0, 2, 2, 4, 4, 6, 127, 0]           # 255 * 0.5 = 127.5 saturates


def test_exact_qlinear_conv_against_fractions():
    """Grouped, strided, dilated, asymmetrically padded QLinearConv with per-channel weights and a bias:
    every element against a Fraction computation of the same accumulators."""
    x = RNG.integers(0, 256, (2, 4, 7, 6), dtype=np.uint8)
    w = RNG.integers(-128, 128, (6, 2, 3, 2), dtype=np.int8)
    bias = RNG.integers(-3000, 3000, 6, dtype=np.int32)
    sx, sy = np.float32(0.013), np.float32(0.21)
    sw = (RNG.random(6) * 0.01 + 0.001).astype(np.float32)
    zx, zw, zy = np.uint8(131), np.zeros(6, np.int8), np.int8(-3)
    attrs = dict(group=2, strides=[2, 1], dilations=[1, 2], pads=[1, 0, 0, 2])
    node = helper.make_node("QLinearConv", [str(i) for i in range(9)], ["y"], **attrs)
    got = exact_output(node, [x, sx, zx, w, sw, zw, sy, zy, bias])
    acc = qconv2d_accumulators(x, w, zx, zw, stride=(2, 1), padding=((1, 0), (0, 2)), dilation=(1, 2),
                               groups=2)
    assert got.shape == acc.shape and got.dtype == np.int8
    for index in np.ndindex(*acc.shape):
        k = index[1]
        real = Fraction(int(acc[index]) + int(bias[k])) * Fraction(float(sx)) * Fraction(float(sw[k])) \
            / Fraction(float(sy))
        assert got[index] == min(127, max(-128, round(real) + int(zy))), index


def test_integer_check_counts_which_runtime_is_exact():
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    a, b = np.array([[1, 2], [3, 4]], np.uint8), np.array([[1, 0], [0, 1]], np.int8)   # exact: a itself
    ours, theirs = a.astype(np.int32), a.astype(np.int32) + np.array([[0, 1], [0, 0]], np.int32)
    theirs[1, 1] -= 1
    ours[1, 1] -= 2        # both wrong on [1, 1]; onnxruntime wrong on [0, 1]
    check = integer_check(node, [a, b], ours, theirs)
    assert check == IntegerCheck(elements=4, max_lsb=1, differing=2, loopopt_exact=1, onnxruntime_exact=0)
    assert str(check) == ("max abs(loopopt - onnxruntime) 1 LSB; 2 of 4 elements differ: loopopt exact on 1, "
                          "onnxruntime exact on 0")
    assert integer_check(helper.make_node("MatMul", ["a", "b"], ["y"]), [a, b], ours, theirs) is None


def test_a_fused_node_that_does_not_lower_at_run_time_runs_as_its_nodes():
    """C of a dynamic shape: the group fuses at prepare, its lowering refuses C's run-time shape (a bias
    per column only); not strict, the group runs as its original nodes on onnx.reference; strict names
    the node."""
    inits = [onnx.numpy_helper.from_array(a, n) for n, a in (
        ("sa", np.float32(0.1)), ("za", np.uint8(7)), ("w", RNG.integers(-127, 128, (5, 3), dtype=np.int8)),
        ("sw", np.float32(0.02)), ("zw", np.int8(0)))]
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["af"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wf"]),
             helper.make_node("Gemm", ["af", "wf", "c"], ["y"], name="gemm")]
    proto = model(nodes, [("a", TensorProto.UINT8, [2, 5]), ("c", TensorProto.FLOAT, ["M", "N"])],
                  [("y", TensorProto.FLOAT, [2, 3])], inits, opset=21)
    a, c = RNG.integers(0, 256, (2, 5), dtype=np.uint8), _x(2, 3)
    rep = backend.prepare(proto)
    assert "gemm" not in rep.lowered and rep.groups["gemm"].node.op_type == "QDQGemm"
    got = rep.run([a, c])[0]
    gemm = rep.lowered["gemm"]
    assert not gemm.on_kernel and "C of shape (2, 3)" in gemm.reason and gemm.absorbed[-1] == "gemm"
    np.testing.assert_array_equal(got, ReferenceEvaluator(proto).run(None, {"a": a, "c": c})[0])
    with pytest.raises(NotImplementedError, match=r"node gemm \(QDQGemm\) cannot run.*C of shape \(2, 3\)"):
        backend.prepare(proto, strict=True).run([a, c])
