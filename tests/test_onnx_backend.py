"""loopopt.onnx.backend: whole models against onnxruntime (or onnx.reference), random Conv and MatMul
nodes against onnx.reference, strict mode, and bad input."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import tiers
from hypothesis import strategies as st
from onnx import TensorProto, helper, shape_inference
from onnx.reference import ReferenceEvaluator
from onnx_models import (
    expected,
    model,
    pooled_stem,
    quantized,
    quantized_model,
    requantized_chain,
    residual_net,
    small_cnn,
    transformer_block,
)

import loopopt as lo
from loopopt.onnx import backend
from loopopt.onnx.exact import exact_output
from loopopt.onnx.graph import static_input_shapes
from loopopt.onnx.kernels import default_schedule, stationary_schedule
from loopopt.onnx.plan import KERNEL, NUMPY
from loopopt.tune import choice
from loopopt.tune.choice import first_reading

RNG = np.random.default_rng(3)


def _x(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def test_small_cnn_runs_every_conv_and_gemm_on_kernels():
    proto = small_cnn()
    rep = backend.prepare(proto, strict=True)
    assert sorted(rep.lowered) == ["conv1", "depthwise", "fc", "pointwise"]
    assert all(node.on_kernel and node.source.startswith("default first choice of the search: ")
               for name, node in rep.lowered.items() if name != "conv1")
    # the image's 3 channels read as they arrive, NCHW (the first choice's channels-last twin)
    assert rep.lowered["conv1"].source.startswith("default best-ranked candidate reading NCHW as its input "
                                                  "arrives (rank 1): ")
    assert rep.lowered["conv1"].schedule.layout_of("I").tag == "NCHW"
    assert "groups=8" in repr(rep.lowered["depthwise"].op)
    assert "unroll kh:3,kw:3" in rep.lowered["depthwise"].source           # its taps unrolled
    x = _x(2, 3, 9, 11)
    np.testing.assert_allclose(rep.run([x])[0], expected(proto, [x])[0], rtol=1e-4, atol=1e-5)
    compiled = len(rep.kernels)
    rep.run({"x": _x(2, 3, 9, 11)})
    assert len(rep.kernels) == compiled == 4     # built once per shape, at prepare


def test_a_bias_shared_through_an_identity_is_bound_at_prepare():
    """PyTorch's exporter shares equal initializers through Identity nodes: the Identity's output is a
    constant, bound with the Conv's weights (no step of its own) and the Relu after it fused."""
    proto = small_cnn()
    conv = next(node for node in proto.graph.node if node.name == "conv1")
    proto.graph.node.insert(0, helper.make_node("Identity", [conv.input[2]], ["shared_bias"], name="share"))
    conv.input[2] = "shared_bias"
    rep = backend.prepare(proto, strict=True)
    steps = [step.node for step in rep.plan.steps]
    assert "share" not in steps and "Relu_2" not in steps
    x = _x(2, 3, 9, 11)
    np.testing.assert_allclose(rep.run([x])[0], expected(proto, [x])[0], rtol=1e-4, atol=1e-5)


def test_residual_net_runs_on_kernels_and_numpy_and_matches():
    """Every node of a ResNet/MobileNetV2-shaped net off onnx.reference, each Relu, Clip and Add fused
    into the Conv before it (``onnx.epilogues``), its output onnxruntime's and every intermediate value
    onnx.reference's; the plan's buffers reused across runs: a second run on other inputs right, and
    the first run's output kept; after three runs (the second and third in the shared memory) every step
    after the stem (which reads the model's input) repeats its C call, the pools' and the Flatten view's
    too, right on other inputs again."""
    proto = residual_net()
    rep = backend.prepare(proto, strict=True)
    assert rep.fallbacks() == []
    engines = {step.op_type: step.engine for step in rep.plan.steps}
    assert engines == {"Conv": KERNEL, "Gemm": KERNEL, "MaxPool": KERNEL, "GlobalAveragePool": KERNEL,
                       "Flatten": NUMPY}
    fused = {name: node.absorbed for name, node in rep.lowered.items() if node.absorbed}
    labels = {node.name: node.op_type for node in rep.prepared.graph.node}
    assert {name: tuple(labels[n] for n in nodes) for name, nodes in fused.items()} == {
        "stem": ("Relu",), "body1": ("Relu",), "body2": ("Add", "Relu"), "depthwise": ("Clip",),
        "project": ("Add",)}
    assert "fused epilogue: + residual, then Clip(low=0.0, high=None)" in str(rep.lowered["body2"])
    steps = {step.node: step for step in rep.plan.steps}
    assert steps["body2"].inputs[-1] == "p" and steps["body2"].outputs == ("ar",)
    # the shortcut adds write over their residual, which only earlier kernels read (ResNet's as
    # onnxruntime's Sum-fused conv): checked by the runs and the intermediate values below
    assert [step.node for step in rep.plan.steps if step.overwrites and step.reuse] == ["body2", "project"]
    x = _x(2, 3, 9, 11)
    first = rep.run([x])[0]
    np.testing.assert_allclose(first, expected(proto, [x])[0], rtol=1e-4, atol=1e-5)
    kept = first.copy()
    x2 = _x(2, 3, 9, 11)
    np.testing.assert_allclose(rep.run([x2])[0], expected(proto, [x2])[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(first, kept)          # the kernels' reused buffers: outputs copied out
    np.testing.assert_allclose(rep.run([x2])[0], expected(proto, [x2])[0], rtol=1e-4, atol=1e-5)
    order = [step.node for step in rep.plan.steps]
    assert [order[r.start:r.stop] for r in rep.plan.repeats.values()] == [order[1:]]
    assert order[0] == "stem" and "GlobalAveragePool" in order[-3] and "Flatten" in order[-2]
    np.testing.assert_array_equal(rep.run([x])[0], kept)
    np.testing.assert_allclose(rep.run([x2])[0], expected(proto, [x2])[0], rtol=1e-4, atol=1e-5)
    reference = ReferenceEvaluator(proto).run(None, {"x": x}, intermediate=True)
    values = rep.values([x])
    for name in ("sr", "p", "b1r", "ar", "dr", "m", "f"):
        np.testing.assert_allclose(values[name], reference[name], rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("quant_format", ["QOperator", "QDQ"])
def test_quantized_residual_net_matches_onnxruntime(quant_format, tmp_path):
    """The residual net quantized by onnxruntime (QLinearConv, or DequantizeLinear -> Conv ->
    QuantizeLinear groups) runs with no node on onnx.reference; its quantized values agree with
    onnxruntime's within one step."""
    proto = quantized(residual_net(), tmp_path, quant_format)
    rep = backend.prepare(proto, strict=True)
    assert rep.fallbacks() == []
    x = _x(2, 3, 9, 11)
    got, want = rep.run([x])[0], expected(proto, [x])[0]
    np.testing.assert_allclose(got, want, atol=0.05)
    values = rep.values([x])
    names = [n.output[0] for n in proto.graph.node if n.op_type in ("QuantizeLinear", "QLinearConv")]
    ours = [values[n] for n in names if n in values]
    theirs = expected(_with_outputs(proto, [n for n in names if n in values]), [x])
    assert len(ours) >= 5
    assert all(np.abs(a.astype(int) - b.astype(int)).max() <= 1 for a, b in zip(ours, theirs))


@pytest.mark.slow
def test_int8_convs_read_the_pools_output_in_place(tmp_path):
    """A quantized ResNet stem (QOperator): its 8-bit pool (DequantizeLinear -> Relu -> MaxPool ->
    QuantizeLinear, one step) writes a buffer placed as a kernel's output (64-byte aligned, zeros after
    it), so the int8 convs after it, whose kernels read a little past the end of their input
    (``Generated.read_ahead``), read it in place (in the shared memory after the first run too: its
    tail carved as an allocation's end) and repeat their C calls after three runs, with the pool's; later
    runs give the per-step path's bits. (The pool's buffer was a plain ``np.empty``: ResNet-50's two
    convs after the pool packed a copy of it on every run.)"""
    proto = quantized(pooled_stem(), tmp_path, "QOperator")
    rep = backend.prepare(proto, strict=True)
    inputs = [_x(2, 3, 9, 11) for _ in range(4)]
    for x in inputs[:3]:
        rep.run([x])
    steps = rep.plan.steps
    pool = next(i for i, step in enumerate(steps) if "MaxPool" in step.op_type)
    assert steps[pool].op_type.endswith("MaxPool -> QuantizeLinear")
    assert {steps[pool + 1].node, steps[pool + 2].node} == {"down_quant", "body_quant"}
    assert all(rep.lowered[name].on_kernel for name in ("down_quant", "body_quant"))
    assert any(r.start <= pool and pool + 3 <= r.stop for r in rep.plan.repeats.values())
    got = rep.run([inputs[3]])[0]
    np.testing.assert_array_equal(got, rep.values([inputs[3]])["y"])


def _with_outputs(proto: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """``proto`` with the values ``names`` as its outputs."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    del copy.graph.output[:]
    copy.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.UINT8, None) for n in names)
    return copy


@pytest.mark.slow
def test_transformer_block_matches():
    proto = transformer_block()
    rep = backend.prepare(proto, strict=True)
    x = _x(1, 5, 12)
    np.testing.assert_allclose(rep.run([x])[0], expected(proto, [x])[0], rtol=1e-4, atol=1e-5)
    assert {n.node for n in rep.lowered.values() if n.on_kernel} == {
        "q", "k", "v", "scores", "context", "out_proj", "ffn_up", "ffn_down"}
    assert repr(rep.lowered["scores"].op) == "Matmul(m=5, n=5, k=6, batch=(1, 2))"   # 2 heads, one kernel
    assert repr(rep.lowered["q"].op) == "Matmul(m=5, n=12, k=12)"
    assert rep.lowered["q"].note == "batch (1,) folded into the rows"


def test_quantized_model_within_one_lsb():
    proto = quantized_model()
    rep = backend.prepare(proto, strict=True)
    assert rep.lowered["qconv"].op.quant.output == "uint8" and rep.lowered["qconv"].op.quant.per_channel
    assert rep.lowered["qmatmul"].op.quant.weight_symmetric
    x = _x(1, 3, 8, 10)
    got, want = rep.run([x]), expected(proto, [x])
    for g, w in zip(got[:2], want[:2]):
        assert g.dtype == w.dtype == np.uint8
        assert np.abs(g.astype(int) - w.astype(int)).max() <= 1
    kept = [g.copy() for g in got]
    again = rep.run([x])                                  # the int8 kernels' buffers reused
    rep.run([_x(1, 3, 8, 10)])
    for g, a, k in zip(got, again, kept):
        np.testing.assert_array_equal(g, k)               # not aliased to a later run's buffers
        np.testing.assert_array_equal(a, k)


def test_lookup_and_int8_kernel_steps_repeat_their_calls():
    """After three runs (the second and third in the shared memory), the ReLU6 lookup on conv1's output
    (its storage, whatever conv1 read), conv2 reading it in place and the DequantizeLinear of conv2's
    output (into a buffer it keeps) repeat their C calls; each later run on other inputs gives the
    per-step path's bits (``rep.values``) and onnxruntime's within 1 LSB."""
    proto = requantized_chain()
    rep = backend.prepare(proto, strict=True)
    inputs = [_x(1, 3, 9, 11) for _ in range(6)]
    for x in inputs[:3]:
        rep.run([x])
    order = [step.node for step in rep.plan.steps]
    repeated = [order[r.start:r.stop] for r in rep.plan.repeats.values()]
    assert repeated == [["relu6", "conv2", "DequantizeLinear_6"]]
    for x in inputs[3:]:
        got = rep.run([x])[0]
        np.testing.assert_array_equal(got, rep.values([x])["y"])
        scale = 0.04
        assert np.abs(got - expected(proto, [x])[0]).max() <= scale * 1.001


def _conv_case(draw) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    spatial = draw(st.sampled_from([1, 2, 3]))
    groups = draw(st.sampled_from([1, 2, 3]))
    c, k = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(spatial)]
    dilation = [draw(st.integers(1, 2)) for _ in range(spatial)]
    stride = [draw(st.integers(1, 3)) for _ in range(spatial)]
    pads = [draw(st.integers(0, 2)) for _ in range(2 * spatial)]
    extra = 5 if spatial < 3 else 2
    size = [(kk - 1) * dd + 1 + draw(st.integers(0, extra)) for kk, dd in zip(kernel, dilation)]
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]))
    bias = draw(st.booleans())
    attrs = dict(group=groups, dilations=dilation, strides=stride, auto_pad=auto_pad)
    if auto_pad == "NOTSET":
        attrs["pads"] = pads
    n = draw(st.integers(1, 2))
    arrays = [_x(n, c, *size), _x(k, c // groups, *kernel)] + ([_x(k)] if bias else [])
    names = ["x", "w", "b"][:len(arrays)]
    proto = model([helper.make_node("Conv", names, ["y"], name="conv", **attrs)],
                  [(nm, TensorProto.FLOAT, list(a.shape)) for nm, a in zip(names, arrays)],
                  [("y", TensorProto.FLOAT, None)])
    return proto, arrays


def _check_conv_node(data):
    """Conv nodes of 1 to 3 spatial dims, any pads (asymmetric too) or auto_pad, strides, dilations,
    groups, bias, batch: strict mode runs every one on a kernel."""
    proto, arrays = _conv_case(data.draw)
    want = ReferenceEvaluator(proto).run(None, dict(zip("xwb", arrays)))[0]
    got = backend.prepare(proto, strict=True).run(arrays)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


test_conv_node_quick, test_conv_node_slow = tiers(_check_conv_node, 3, 20, st.data())


def _check_matmul_node(data):
    draw = data.draw
    m, n, k = (draw(st.integers(1, 9)) for _ in range(3))
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    a_shape = [*draw(st.sampled_from([batch, batch[1:], [1] * len(batch)])), m, k]
    b_shape = [*draw(st.sampled_from([batch, batch[1:]])), k, n]
    if draw(st.booleans()):
        a_shape = [k]
    elif draw(st.booleans()):
        b_shape = [k]
    a, b = _x(*a_shape), _x(*b_shape)
    got = backend.run_node(helper.make_node("MatMul", ["a", "b"], ["y"]), [a, b], strict=True)[0]
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-4, atol=1e-5)


test_matmul_node_quick, test_matmul_node_slow = tiers(_check_matmul_node, 2, 20, st.data())


def test_default_is_output_stationary_when_the_search_space_has_no_candidate():
    a, b = _x(1, 4), _x(4, 8)      # no outer loop of 2 iterations to split over 2 threads
    proto = model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
                  [("a", TensorProto.FLOAT, [1, 4]), ("b", TensorProto.FLOAT, [4, 8])],
                  [("y", TensorProto.FLOAT, None)])
    rep = backend.prepare(proto, strict=True, threads=2)
    assert rep.lowered["mm"].source == ("default output_stationary (the search space has no candidate for "
                                        "2 thread(s))")
    # atol (also below): four float32 products summed in another order than numpy's differ by ~1e-7,
    # all of a sum that may cancel to ~4e-3 (random inputs: 1.7e-5 relative, failing rtol alone, in one
    # quick-tier run of main c8581d4 on the Zen 3 VM)
    np.testing.assert_allclose(rep.run([a, b])[0], a @ b, rtol=1e-5, atol=1e-6)


def test_default_schedule_reads_its_input_as_it_arrives():
    """Where the first choice would store the activations in another layout than the one they arrive
    in, the default is the best-ranked candidate (same ISA) that reads them as they are, if one is
    ranked high enough; a layout the first choice reads already changes nothing."""
    quant = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="uint8")
    op = lo.Conv2d(96, 96, 3, stride=2, padding=1, groups=96, bias=True, height=112, width=112, quant=quant)
    first, first_source, _ = default_schedule(op)
    assert default_schedule(op, arrives=first.layout_of("I").tag)[1] == first_source
    other = "NCHW" if first.layout_of("I").tag == "NHWC" else "NHWC"
    schedule, source, isa = default_schedule(op, arrives=other)
    reading = first_reading(op, other)
    if reading is None:
        assert source == first_source
    else:
        assert schedule.layout_of("I").tag == other and reading[0].schedule is schedule
        assert source.startswith(f"default best-ranked candidate reading {other} as its input arrives (rank ")


def test_default_schedule_reads_a_per_call_operand_as_it_arrives(recorded_profile):
    """An attention's second operand comes with each call, row-major: the default stores it so (a
    candidate the heuristic ties with the packed first choice) rather than packing it on every call."""
    op = lo.Matmul(128, 128, 64, batch=(12,))
    choice._chosen.clear(), choice._ranked.clear()          # ranked with the recorded profile
    first, _, _ = default_schedule(op)
    assert first.layout_of("B").tag != "BKN"                                   # packed panels
    schedule, source, _ = default_schedule(op, operands={"B": "BKN"})
    assert schedule.layout_of("B").tag == "BKN" and schedule.layout_of("A").tag == "BMK"
    assert source.startswith("default best-ranked candidate reading B BKN as they arrive (rank ")
    assert first_reading(op, {"B": "BKN"})[0].schedule is schedule
    with pytest.raises(ValueError, match=r"'X' is not an input of Matmul.*: its inputs are A, B"):
        default_schedule(op, operands={"X": "BKN"})
    with pytest.raises(ValueError, match=r"layout 'BKQ' is not a valid format tag for B"):
        default_schedule(op, operands={"B": "BKQ"})
    choice._chosen.clear(), choice._ranked.clear()          # not kept for tests on the measured profile


def test_default_schedule_of_a_kernel_that_adds_a_residual(recorded_profile):
    """A Conv whose fused epilogue adds a residual gets the choice ranked as a kernel that reads one:
    ResNet-50's 64->256 1x1 conv at 56x56 visits its 3.2 MB output (and residual) in memory order."""
    wide = lo.Conv2d(64, 256, 1, bias=True, height=56, width=56)
    assert "outer n,oh,k_o,ow_o" in default_schedule(wide, isa="avx512")[1]
    assert "outer n,oh,ow_o,k_o" in default_schedule(wide, isa="avx512", residual=True)[1]


def test_gemm_node_transposes_alpha_beta():
    a, b, c = _x(6, 3), _x(5, 6), _x(1, 5)
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=0.25, beta=-2.0)
    got = backend.run_node(node, [a, b, c], strict=True)[0]
    np.testing.assert_allclose(got, 0.25 * a.T @ b.T - 2 * c, rtol=1e-5, atol=1e-5)


def _double_conv(batch="1") -> onnx.ModelProto:
    """A float64 Conv: the kernels are float32, so the op model cannot take it."""
    return model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv64")],
                 [("x", TensorProto.DOUBLE, [batch, 2, 4, 4]), ("w", TensorProto.DOUBLE, [3, 2, 2, 2])],
                 [("y", TensorProto.DOUBLE, None)])


MISSING = r"node conv64 \(Conv\) .*not supported: Conv input 'x' of dtype float64"


def test_strict_names_the_node_and_what_is_missing():
    with pytest.raises(NotImplementedError, match=MISSING):
        backend.prepare(_double_conv(1), strict=True)
    rep = backend.prepare(_double_conv("N"), strict=True)   # shapes, so the lowering, come with the run
    with pytest.raises(NotImplementedError, match=MISSING):
        rep.run([np.zeros((1, 2, 4, 4)), np.zeros((3, 2, 2, 2))])


def test_not_strict_runs_an_unsupported_node_on_the_reference():
    proto, x, w = _double_conv(1), RNG.standard_normal((1, 2, 4, 4)), RNG.standard_normal((3, 2, 2, 2))
    rep = backend.prepare(proto)
    assert not rep.lowered["conv64"].on_kernel and "float64" in rep.lowered["conv64"].reason
    assert "onnx.reference" in str(rep.lowered["conv64"])
    assert [(f.node, f.engine) for f in rep.fallbacks()] == [("conv64", "onnx.reference")]
    assert "float64" in rep.fallbacks()[0].reason and set(rep.profile([x, w], runs=1)) == {"conv64"}
    want = ReferenceEvaluator(proto).run(None, {"x": x, "w": w})[0]
    np.testing.assert_allclose(rep.run([x, w])[0], want, rtol=1e-12)


def test_dynamic_shapes_are_fixed_by_the_first_inputs():
    proto = model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
                  [("a", TensorProto.FLOAT, ["N", 4]), ("b", TensorProto.FLOAT, [4, 3])],
                  [("y", TensorProto.FLOAT, ["N", 3])])
    with pytest.raises(ValueError, match=r"input 'a' has a dynamic dim 'N' at axis 0"):
        static_input_shapes(proto)
    rep = backend.prepare(proto, strict=True)
    assert rep.lowered == {}                       # nothing to build before the shapes are known
    a, b = _x(7, 4), _x(4, 3)
    np.testing.assert_allclose(rep.run([a, b])[0], a @ b, rtol=1e-5, atol=1e-6)
    assert repr(rep.lowered["mm"].op) == "Matmul(m=7, n=3, k=4)"


@pytest.mark.parametrize("inputs, error, message", [
    ([], ValueError, r"takes 1 input\(s\) \['x'\], got 0"),
    ({"z": np.zeros(1)}, ValueError, r"unknown: \['z'\], missing: \['x'\]"),
    ([np.zeros((2, 3, 9, 11))], TypeError, r"input 'x' has dtype float64; the model declares float32"),
    ([np.zeros((2, 3, 9, 12), np.float32)], ValueError,
     r"input 'x' has shape \(2, 3, 9, 12\).*axis 3 must be 11"),
    ([np.zeros((3, 9, 11), np.float32)], ValueError,
     r"input 'x' has shape \(3, 9, 11\); the model declares 4 dims"),
])
def test_bad_inputs_are_named(inputs, error, message):
    with pytest.raises(error, match=message):
        backend.prepare(small_cnn()).run(inputs)


def test_bad_models_are_refused(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not an onnx model at all")
    with pytest.raises(ValueError, match=r"junk.onnx is not an ONNX model"):
        backend.prepare(junk)
    newer = small_cnn()
    newer.opset_import[0].version = onnx.defs.onnx_opset_version() + 1
    with pytest.raises(ValueError, match=r"imports opset \d+ of the default domain.*runs opsets up to"):
        backend.prepare(newer)
    unknown = small_cnn()
    unknown.graph.node[1].op_type = "NoSuchOp"
    with pytest.raises(ValueError, match=r"not a valid ONNX model: .*NoSuchOp"):
        backend.prepare(unknown)
    with pytest.raises(ValueError, match=r"device 'TPU' is not supported; loopopt runs on CPU, CUDA"):
        backend.prepare(small_cnn(), device="TPU")
    assert backend.supports_device("CPU") and not backend.supports_device("TPU")


def _integers(dtype, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape, dtype=dtype)


def _check_integer_node(data):
    """ConvInteger (1-D or 2-D) / MatMulInteger (batched or not) with uint8 or int8 operands, any zero
    points (per tensor, or per output channel for the weights, or absent): exact int32 against
    ``exact.exact_output`` (itself checked against onnx.reference where that takes the case), each on
    one kernel of its own rank (a 1-D ConvInteger on a Conv1d, a batched MatMulInteger on a Matmul
    with batch dims)."""
    draw = data.draw
    x_type, w_type = (draw(st.sampled_from([np.uint8, np.int8])) for _ in range(2))
    conv = draw(st.booleans())
    if conv:
        c, k = draw(st.integers(1, 4)), draw(st.integers(1, 5))
        if draw(st.booleans()):
            x, w = _integers(x_type, 1, c, 5, 4), _integers(w_type, k, c, 3, 2)
            node, op = dict(op_type="ConvInteger", pads=[1, 0, 0, 1]), "Conv2d"   # asymmetric
        else:
            x, w = _integers(x_type, 2, c, 7), _integers(w_type, k, c, 3)
            node, op = dict(op_type="ConvInteger", pads=[2, 1], strides=[2]), "Conv1d"
    else:
        m, n, kk = (draw(st.integers(1, 6)) for _ in range(3))
        batch = draw(st.sampled_from([[], [2], [1, 3]]))
        x, w, k = _integers(x_type, *batch, m, kk), _integers(w_type, *batch, kk, n), n
        node, op = dict(op_type="MatMulInteger"), f"batch={tuple(batch)}" if batch else "Matmul"
    zero_points = draw(st.sampled_from(["absent", "tensor", "channel"]))
    arrays = [x, w]
    if zero_points != "absent":
        arrays += [_integers(x_type), _integers(w_type, k) if zero_points == "channel" else _integers(w_type)]
    names = ["x", "w", "xz", "wz"][:len(arrays)]
    op_type = node.pop("op_type")
    nd = helper.make_node(op_type, names, ["y"], name="integer", **node)
    inputs = [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
              for nm, a in zip(names, arrays)]
    graph = helper.make_graph([nd], "g", inputs, [helper.make_empty_tensor_value_info("y")])
    opsets = [helper.make_opsetid("", 17)]
    proto = shape_inference.infer_shapes(helper.make_model(graph, opset_imports=opsets))
    want = exact_output(nd, arrays)
    if op != "Conv1d":   # onnx.reference's ConvInteger takes a per-channel zero point of 2-D weights only
        assert np.array_equal(want, ReferenceEvaluator(proto).run(None, dict(zip(names, arrays)))[0])
    rep = backend.prepare(proto, strict=True)
    got = rep.run(arrays)[0]
    assert got.dtype == np.int32 and np.array_equal(got, want)
    assert op in repr(rep.lowered["integer"].op) and rep.lowered["integer"].note == ""


test_integer_node_quick, test_integer_node_slow = tiers(_check_integer_node, 2, 20, st.data())


def _conv_relu() -> onnx.ModelProto:
    """A 3x3 Conv (8 -> 16 channels, 6x6) named ``conv`` and a Relu."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"])]
    return model(nodes, [("x", TensorProto.FLOAT, [1, 8, 6, 6])], [("y", TensorProto.FLOAT, None)],
                 [onnx.numpy_helper.from_array(_x(16, 8, 3, 3), "w")])


@pytest.mark.slow
def test_prepare_tunes_each_op_into_the_log_and_resumes(tmp_path, capsys):
    """``prepare(tune=2, log=...)``: the conv tuned with 2 trials into the log (one line on stderr),
    run with the log's best; again: the trials taken from the log, none measured twice; a prepare
    without ``tune`` reads the log."""
    import sqlite3
    proto = _conv_relu()
    log = tmp_path / "tune.db"
    x = _x(1, 8, 6, 6)
    for tune in (2, 2, 0):
        rep = backend.prepare(proto, strict=True, tune=tune, log=log)
        assert rep.lowered["conv"].source == f"tuning log {log}"
        np.testing.assert_allclose(rep.run([x])[0], expected(proto, [x])[0], rtol=1e-4, atol=1e-5)
        with sqlite3.connect(log) as db:
            assert db.execute("select count(*) from trials").fetchone() == (2,)
        lines = capsys.readouterr().err.splitlines()
        assert len([line for line in lines if line.startswith("tune op 1 Conv2d(8, 16")]) == (tune > 0)


def test_prepare_with_every_op_in_the_log_searches_nothing(tmp_path, monkeypatch, capsys):
    """``prepare(tune=1, log=...)`` where the log holds a trial of every op: no search space is built or
    ranked (the x86 ranking of a ResNet-18 took 12 s, the kernel model on its shortlist 24 s), the
    logged schedule runs, and the op's line says so."""
    from loopopt.onnx.graph import known_values
    from loopopt.onnx.lowering import lower
    from loopopt.targets.registry import host_target
    from loopopt.tune import TuningLog
    from loopopt.tune.trial import here
    proto, x = _conv_relu(), _x(1, 8, 6, 6)
    known = known_values(proto)
    op = lower(proto.graph.node[0], [known[name] for name in proto.graph.node[0].input]).op
    logged = lo.dataflows.output_stationary(op)
    timing = lo.Timing(median=1e-3, min=1e-3, iqr=0.0, repeats=3, gflops=1.0, percent_of_peak=1.0,
                       peak_gflops=100.0, verified=True, max_error=0.0)
    log = tmp_path / "tune.db"
    with TuningLog(log) as tuning_log:
        tuning_log.append(op, lo.to_toml(logged), {}, {}, lo.available_isas()[0], 1, 0.01,
                          here("ok", "", timing))

    def no_search(self):
        raise AssertionError("prepare built a search space for an op the log has")

    monkeypatch.setattr(type(host_target()), "search_rules", no_search)
    rep = backend.prepare(proto, strict=True, tune=1, log=log)
    assert rep.lowered["conv"].source == f"tuning log {log}"      # its schedule, the Relu fused
    np.testing.assert_allclose(rep.run([x])[0], expected(proto, [x])[0], rtol=1e-4, atol=1e-5)
    line = capsys.readouterr().err.splitlines()[-1]
    assert line.startswith("tune op 1 Conv2d(8, 16") and "1 trials already in the log, nothing measured" \
        in line


def test_prepare_refuses_tune_without_a_log():
    with pytest.raises(ValueError, match="tune=2 needs log=: the tuning log that keeps the trials"):
        backend.prepare(small_cnn(), tune=2)
    with pytest.raises(ValueError, match=r"tune must be .* \(an integer >= 0\), got -1"):
        backend.prepare(small_cnn(), tune=-1, log="unused.db")


def test_stationary_schedule_keeps_the_vectorized_loop_serial():
    """The fallback schedule on two threads: an op of one output block (a 1x1 image, 8 channels: its only
    loop of extent > 1 the vectorized channels) stays on one thread (it raised ScheduleError, parallel and
    vectorized); a larger one runs its outer positions in parallel."""
    one = stationary_schedule(lo.Conv2d(1, 8, 1, height=1, width=1), threads=2)
    assert one.parallel_loop is None and one.vector_loop is not None
    rows = stationary_schedule(lo.Conv2d(1, 8, 1, height=4, width=4), threads=2)
    assert rows.parallel_loop is not None and not rows.parallel_loop.vectorized
