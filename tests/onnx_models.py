"""Small ONNX models built with onnx.helper for the backend, CLI and conformance tests (no downloads),
and the expected outputs of a model: onnxruntime's (``peer.session_options``: exact int8 products) when it
is installed, else onnx.reference's."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from loopopt.onnx.peer import session_options

OPSET = 17
RNG = np.random.default_rng(7)


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _weights(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def model(nodes, inputs, outputs, initializers=(), opset: int = OPSET) -> onnx.ModelProto:
    """A checked model of ``nodes``; ``inputs``/``outputs`` are ``(name, elem_type, shape)`` (an output
    of shape None gets its type from shape inference)."""
    graph = helper.make_graph(
        nodes, "test", [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(*o) if o[2] is not None else helper.make_empty_tensor_value_info(o[0])
         for o in outputs], list(initializers))
    opsets = [helper.make_opsetid("", opset)]
    result = shape_inference.infer_shapes(helper.make_model(graph, opset_imports=opsets))
    onnx.checker.check_model(result)
    return result


def small_cnn(batch: int = 2) -> onnx.ModelProto:
    """Conv 3->8 (3x3, pad 1) + Relu, depthwise Conv (stride 2) + Relu, a 1x1 Conv with groups 2,
    global average pool, Gemm 8 -> 5 (transB)."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], group=8, strides=[2, 2], pads=[1, 1, 1, 1],
                         name="depthwise"),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], group=2, name="pointwise"),
        helper.make_node("GlobalAveragePool", ["c3"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fb"], ["y"], transB=1, alpha=0.5, name="fc"),
    ]
    inits = [_init("w1", _weights(8, 3, 3, 3)), _init("b1", _weights(8)), _init("w2", _weights(8, 1, 3, 3)),
             _init("w3", _weights(8, 4, 1, 1)), _init("b3", _weights(8)), _init("fc", _weights(5, 8)),
             _init("fb", _weights(5))]
    return model(nodes, [("x", TensorProto.FLOAT, [batch, 3, 9, 11])], [("y", TensorProto.FLOAT, [batch, 5])],
                 inits)


def transformer_block(tokens: int = 5, width: int = 12, heads: int = 2) -> onnx.ModelProto:
    """Self-attention (Q, K, V projections, per-head QK^T and softmax(.)V as batched MatMuls, output
    projection, residual, LayerNormalization) and a ReLU feed-forward with a residual."""
    d = width // heads
    shape = _init("heads", np.array([1, tokens, heads, d], np.int64))
    flat = _init("flat", np.array([1, tokens, width], np.int64))
    nodes = [helper.make_node("MatMul", ["x", f"w{t}"], [t], name=t) for t in "qkv"]
    for t in "qkv":
        nodes += [helper.make_node("Reshape", [t, "heads"], [f"{t}h"]),
                  helper.make_node("Transpose", [f"{t}h"], [f"{t}t"], perm=[0, 2, 1, 3])]
    nodes += [
        helper.make_node("Transpose", ["kt"], ["ktt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["qt", "ktt"], ["scores"], name="scores"),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["attn"], axis=-1),
        helper.make_node("MatMul", ["attn", "vt"], ["ctx"], name="context"),
        helper.make_node("Transpose", ["ctx"], ["ctxt"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctxt", "flat"], ["merged"]),
        helper.make_node("MatMul", ["merged", "wo"], ["proj"], name="out_proj"),
        helper.make_node("Add", ["x", "proj"], ["res1"]),
        helper.make_node("LayerNormalization", ["res1", "gamma", "beta"], ["ln"], axis=-1),
        helper.make_node("MatMul", ["ln", "w_up"], ["up"], name="ffn_up"),
        helper.make_node("Relu", ["up"], ["act"]),
        helper.make_node("MatMul", ["act", "w_down"], ["down"], name="ffn_down"),
        helper.make_node("Add", ["ln", "down"], ["y"]),
    ]
    inits = [_init(n, _weights(width, width)) for n in ("wq", "wk", "wv", "wo")]
    inits += [shape, flat, _init("scale", np.float32(1 / np.sqrt(d))),
              _init("gamma", np.ones(width, np.float32)), _init("beta", np.zeros(width, np.float32)),
              _init("w_up", _weights(width, 2 * width)),
              _init("w_down", _weights(2 * width, width))]
    return model(nodes, [("x", TensorProto.FLOAT, [1, tokens, width])],
                 [("y", TensorProto.FLOAT, [1, tokens, width])], inits)


def quantized_model() -> onnx.ModelProto:
    """QuantizeLinear (uint8), QLinearConv (int8 per-channel weights, int32 bias, uint8 output),
    Flatten, QLinearMatMul (int8 per-column weights, uint8 output), DequantizeLinear; outputs the
    two quantized tensors and the dequantized result."""
    wc = RNG.integers(-127, 128, (6, 3, 3, 3), dtype=np.int8)
    wm = RNG.integers(-127, 128, (6 * 4 * 5, 7), dtype=np.int8)
    u8, i8 = np.uint8, np.int8
    inits = [
        _init("xs", np.float32(0.02)), _init("xz", u8(128)), _init("wc", wc),
        _init("wcs", (RNG.random(6) * 0.01 + 0.005).astype(np.float32)), _init("wcz", np.zeros(6, i8)),
        _init("cs", np.float32(0.05)), _init("cz", u8(10)),
        _init("bc", RNG.integers(-500, 500, 6, dtype=np.int32)),
        _init("wm", wm), _init("wms", (RNG.random(7) * 0.002 + 0.001).astype(np.float32)),
        _init("wmz", np.zeros(7, i8)), _init("ms", np.float32(0.1)), _init("mz", u8(100)),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("QLinearConv", ["xq", "xs", "xz", "wc", "wcs", "wcz", "cs", "cz", "bc"], ["cq"],
                         pads=[1, 1, 1, 1], strides=[2, 2], name="qconv"),
        helper.make_node("Flatten", ["cq"], ["fq"]),
        helper.make_node("QLinearMatMul", ["fq", "cs", "cz", "wm", "wms", "wmz", "ms", "mz"], ["yq"],
                         name="qmatmul"),
        helper.make_node("DequantizeLinear", ["yq", "ms", "mz"], ["y"]),
    ]
    return model(nodes, [("x", TensorProto.FLOAT, [1, 3, 8, 10])],
                 [("cq", TensorProto.UINT8, [1, 6, 4, 5]), ("yq", TensorProto.UINT8, [1, 7]),
                  ("y", TensorProto.FLOAT, [1, 7])],
                 inits, opset=20)   # onnx.reference implements (De)QuantizeLinear from opset 19; from opset
    # 21 onnxruntime's exact int8 rewrite (loopopt.onnx.peer) no longer reaches QLinearMatMul


def requantized_chain(channels: int = 32) -> onnx.ModelProto:
    """QuantizeLinear (uint8), QLinearConv 3->``channels`` 1x1, DequantizeLinear -> Clip(0, 6) ->
    QuantizeLinear (a ReLU6 on a scale of its own: one lookup), QLinearConv 1x1 ``channels``->``channels``,
    DequantizeLinear: a MobileNetV2 int8 block's pattern, on a 1x3x9x11 input."""
    u8, i8 = np.uint8, np.int8
    weights = {"w1": RNG.integers(-127, 128, (channels, 3, 1, 1), dtype=i8),
               "w2": RNG.integers(-127, 128, (channels, channels, 1, 1), dtype=i8)}
    inits = [_init("xs", np.float32(0.02)), _init("xz", u8(128)), _init("cs", np.float32(0.05)),
             _init("cz", u8(10)), _init("b1", RNG.integers(-500, 500, channels, dtype=np.int32)),
             _init("low", np.float32(0.0)), _init("high", np.float32(6.0)), _init("rs", np.float32(0.03)),
             _init("rz", u8(0)), _init("ys", np.float32(0.04)), _init("yz", u8(100))]
    for name, w in weights.items():
        inits += [_init(name, w), _init(f"{name}s", (RNG.random(channels) * 0.01 + 0.005).astype(np.float32)),
                  _init(f"{name}z", np.zeros(channels, i8))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("QLinearConv", ["xq", "xs", "xz", "w1", "w1s", "w1z", "cs", "cz", "b1"], ["cq"],
                              name="conv1"),
             helper.make_node("DequantizeLinear", ["cq", "cs", "cz"], ["c"]),
             helper.make_node("Clip", ["c", "low", "high"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "rs", "rz"], ["rq"], name="relu6"),
             helper.make_node("QLinearConv", ["rq", "rs", "rz", "w2", "w2s", "w2z", "ys", "yz"], ["yq"],
                              name="conv2"),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    return model(nodes, [("x", TensorProto.FLOAT, [1, 3, 9, 11])],
                 [("y", TensorProto.FLOAT, [1, channels, 9, 11])], inits, opset=21)


def expected(proto: onnx.ModelProto, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The model's outputs by onnxruntime (``peer.session_options``) if installed, else by onnx.reference."""
    names = [i.name for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}]
    feeds = dict(zip(names, inputs))
    try:
        import onnxruntime
    except ImportError:
        return list(ReferenceEvaluator(proto).run(None, feeds))
    oldest = onnx.ModelProto()      # the IR version its opsets need: an older onnxruntime reads it
    oldest.CopyFrom(proto)
    oldest.ir_version = helper.find_min_ir_version_for(list(proto.opset_import), ignore_unknown=True)
    session = onnxruntime.InferenceSession(oldest.SerializeToString(), session_options(),
                                           providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def qdq_model(bias_scale: float = 1.0, float_conv_output: bool = False) -> onnx.ModelProto:
    """A QDQ-format model (as quantize_static(..., quant_format=QDQ) writes them): QuantizeLinear
    (uint8); DequantizeLinear of it, of int8 per-channel weights and of an int32 bias -> Conv (pads 1,
    stride 2) -> QuantizeLinear; Flatten of that; one DequantizeLinear of it read by a MatMul (int8
    per-column weights, no QuantizeLinear: float output "m") and by a Gemm (transB, int32 bias) ->
    QuantizeLinear. ``bias_scale`` scales the conv bias' DequantizeLinear scale away from
    x_scale * w_scale (1: equal); ``float_conv_output``: the conv's float result is a graph output
    too (so its QuantizeLinear cannot be absorbed)."""
    u8, i8 = np.uint8, np.int8
    xs, cs = np.float32(0.02), np.float32(0.05)
    wcs = (RNG.random(6) * 0.01 + 0.005).astype(np.float32)
    wgs = (RNG.random(4) * 0.002 + 0.001).astype(np.float32)
    inits = [
        _init("xs", xs), _init("xz", u8(128)), _init("cs", cs), _init("cz", u8(10)),
        _init("wc", RNG.integers(-127, 128, (6, 3, 3, 3), dtype=i8)), _init("wcs", wcs),
        _init("wcz", np.zeros(6, i8)), _init("bc", RNG.integers(-500, 500, 6, dtype=np.int32)),
        _init("bcs", xs * wcs * np.float32(bias_scale)),
        _init("wm", RNG.integers(-127, 128, (120, 7), dtype=i8)),
        _init("wms", (RNG.random(7) * 0.002 + 0.001).astype(np.float32)), _init("wmz", np.zeros(7, i8)),
        _init("wg", RNG.integers(-127, 128, (4, 120), dtype=i8)), _init("wgs", wgs),
        _init("wgz", np.zeros(4, i8)),
        _init("bg", RNG.integers(-2000, 2000, 4, dtype=np.int32)), _init("bgs", cs * wgs),
        _init("gs", np.float32(0.1)), _init("gz", u8(100)),
    ]
    dq = lambda q, s, z, out, **axis: helper.make_node("DequantizeLinear", [q, s, z], [out], **axis)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        dq("xq", "xs", "xz", "xf"), dq("wc", "wcs", "wcz", "wcf", axis=0), dq("bc", "bcs", "", "bcf", axis=0),
        helper.make_node("Conv", ["xf", "wcf", "bcf"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv"),
        helper.make_node("QuantizeLinear", ["c", "cs", "cz"], ["cq"]),
        helper.make_node("Flatten", ["cq"], ["fq"]),
        dq("fq", "cs", "cz", "ff"), dq("wm", "wms", "wmz", "wmf", axis=1),
        helper.make_node("MatMul", ["ff", "wmf"], ["m"], name="matmul"),
        dq("wg", "wgs", "wgz", "wgf", axis=0), dq("bg", "bgs", "", "bgf", axis=0),
        helper.make_node("Gemm", ["ff", "wgf", "bgf"], ["g"], transB=1, name="gemm"),
        helper.make_node("QuantizeLinear", ["g", "gs", "gz"], ["gq"]),
    ]
    outputs = [("cq", TensorProto.UINT8, [1, 6, 4, 5]), ("m", TensorProto.FLOAT, [1, 7]),
               ("gq", TensorProto.UINT8, [1, 4])]
    outputs += [("c", TensorProto.FLOAT, [1, 6, 4, 5])] if float_conv_output else []
    return model(nodes, [("x", TensorProto.FLOAT, [1, 3, 8, 10])], outputs, inits, opset=21)


def residual_net() -> onnx.ModelProto:
    """A ResNet-18-shaped stem and basic block and a MobileNetV2 inverted residual (expansion 1), small,
    on small_cnn's input with its first Conv and its Gemm (the same kernels): Conv 3->8 (3x3) + Relu,
    MaxPool 3x3/2; Conv 8->8 + Relu, Conv 8->8, Add of the block's input, Relu; depthwise Conv 3x3 +
    Clip(0, 6), Conv 1x1 8->8, Add; GlobalAveragePool, Flatten, Gemm 8->5."""
    conv = lambda x, w, y, **attrs: helper.make_node("Conv", [x, w, f"{w}_b"], [y], name=w, **attrs)
    nodes = [
        conv("x", "stem", "s", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["s"], ["sr"]),
        helper.make_node("MaxPool", ["sr"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        conv("p", "body1", "b1", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["b1"], ["b1r"]),
        conv("b1r", "body2", "b2", pads=[1, 1, 1, 1]), helper.make_node("Add", ["b2", "p"], ["a"]),
        helper.make_node("Relu", ["a"], ["ar"]),
        conv("ar", "depthwise", "d", pads=[1, 1, 1, 1], group=8),
        helper.make_node("Clip", ["d", "zero", "six"], ["dr"]),
        conv("dr", "project", "j"), helper.make_node("Add", ["j", "ar"], ["m"]),
        helper.make_node("GlobalAveragePool", ["m"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fc_b"], ["y"], transB=1, alpha=0.5, name="fc"),
    ]
    shapes = {"stem": (8, 3, 3, 3), "body1": (8, 8, 3, 3), "body2": (8, 8, 3, 3), "depthwise": (8, 1, 3, 3),
              "project": (8, 8, 1, 1), "fc": (5, 8)}
    inits = [_init("zero", np.float32(0)), _init("six", np.float32(6))]
    inits += [t for name, shape in shapes.items() for t in (_init(name, _weights(*shape)),
                                                            _init(f"{name}_b", _weights(shape[0])))]
    return model(nodes, [("x", TensorProto.FLOAT, [2, 3, 9, 11])], [("y", TensorProto.FLOAT, [2, 5])],
                 inits, opset=21)


def pooled_stem() -> onnx.ModelProto:
    """A ResNet stem whose pool only convs read, small: Conv 3->8 (3x3) + Relu, MaxPool 3x3/2, then a
    downsample Conv 8->8 (1x1) and a body Conv 8->8 (3x3) + Relu both reading the pool, Added."""
    conv = lambda x, w, y, **attrs: helper.make_node("Conv", [x, w, f"{w}_b"], [y], name=w, **attrs)
    nodes = [
        conv("x", "stem", "s", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["s"], ["sr"]),
        helper.make_node("MaxPool", ["sr"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        conv("p", "down", "d"), conv("p", "body", "b", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["b"], ["br"]), helper.make_node("Add", ["d", "br"], ["y"]),
    ]
    shapes = {"stem": (8, 3, 3, 3), "down": (8, 8, 1, 1), "body": (8, 8, 3, 3)}
    inits = [t for name, shape in shapes.items() for t in (_init(name, _weights(*shape)),
                                                           _init(f"{name}_b", _weights(shape[0])))]
    return model(nodes, [("x", TensorProto.FLOAT, [2, 3, 9, 11])], [("y", TensorProto.FLOAT, None)],
                 inits, opset=21)


def quantized(proto: onnx.ModelProto, folder, quant_format: str = "QOperator") -> onnx.ModelProto:
    """``proto``'s Conv and MatMul nodes quantized by onnxruntime's ``quantize_static`` (uint8
    activations, int8 per-channel weights, calibrated on 4 random inputs) in ``quant_format``
    (QOperator or QDQ), as benchmarks/bench_onnx.py quantizes its models; written to ``folder``."""
    from onnxruntime import quantization

    shape = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    name = proto.graph.input[0].name
    inputs = iter([{name: RNG.standard_normal(shape).astype(np.float32)} for _ in range(4)])

    class Reader(quantization.CalibrationDataReader):
        def get_next(self):
            return next(inputs, None)

    source, target = f"{folder}/model.onnx", f"{folder}/model.{quant_format}.onnx"
    onnx.save(proto, source)
    quantization.quantize_static(source, target, Reader(), quant_format=getattr(quantization.QuantFormat,
                                                                                quant_format),
                                 op_types_to_quantize=["Conv", "MatMul"], per_channel=True,
                                 activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8)
    return onnx.load(target)


def float16_model(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with its float32 initializers, inputs and outputs in float16 (shapes inferred again)."""
    half = onnx.ModelProto()
    half.CopyFrom(proto)
    for index, tensor in enumerate(half.graph.initializer):
        array = numpy_helper.to_array(tensor)
        if array.dtype == np.float32:
            halves = numpy_helper.from_array(array.astype(np.float16), tensor.name)
            half.graph.initializer[index].CopyFrom(halves)
    for value in (*half.graph.input, *half.graph.output):
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            value.type.tensor_type.elem_type = TensorProto.FLOAT16
    del half.graph.value_info[:]
    result = shape_inference.infer_shapes(half)
    onnx.checker.check_model(result)
    return result


def conv_pool_gemm(batch: int = 2, height: int = 5, width: int = 7) -> onnx.ModelProto:
    """A ResNet stem in small: Conv 3->4 (3x3, pad 1) + bias + Relu, MaxPool 3x3/2 (pad 1), a residual Add of
    the pool's output to itself through a Mul by 0.5, GlobalAveragePool, Flatten, Gemm 4 -> 3 (transB)."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["p", "half"], ["h"]), helper.make_node("Add", ["p", "h"], ["a"]),
        helper.make_node("GlobalAveragePool", ["a"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fb"], ["y"], transB=1, name="fc"),
    ]
    inits = [_init("w", _weights(4, 3, 3, 3)), _init("b", _weights(4)), _init("half", np.float32(0.5)),
             _init("fc", _weights(3, 4)), _init("fb", _weights(3))]
    return model(nodes, [("x", TensorProto.FLOAT, [batch, 3, height, width])],
                 [("y", TensorProto.FLOAT, [batch, 3])], inits)
