"""Reference implementations of one Conv2d layer (or matrix multiply) for the benchmarks.

PyTorch (oneDNN for fp32, the ``x86`` quantized engine for int8; ``torch.matmul``) and
onnxruntime (``Conv``, ``QLinearConv``, ``MatMul``), each set up for one thread count and
returned as a ``Case``: a zero-argument call (the timed part) and a function that turns its
result into a numpy array in the logical NCHW layout, for verification.
Both libraries are optional (``pip install -e '.[bench]'``); a builder raises
``PeerUnavailable`` with an install hint when its library cannot be imported.

onnxruntime's sessions take ``loopopt.onnx.peer.session_options`` (its exact int8 kernels on every
CPU, like loopopt's). On several threads onnxruntime's intra-op threads do not spin after a call
(``ORT_NO_SPIN``): the benchmarks interleave the implementations' calls, and a spinning onnxruntime
thread took a core from the next call (the 2-thread AMX kernel of VGG conv5_1 int8: 4 ms of that
thread's CPU time during each 0.6 ms call that followed an onnxruntime call, 0.03 ms without
spinning; 2 cores).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import numpy as np

from loopopt.onnx.peer import session_options

INSTALL_HINT = "pip install -e '.[bench]'"
ORT_NO_SPIN = ("session.intra_op.allow_spinning", "0")    # onnxruntime's session option, several threads


class PeerUnavailable(RuntimeError):
    """A peer library is not installed (or cannot be imported)."""


@dataclass
class LayerData:
    """One layer's inputs in float32 and quantized, with the references peers are checked against.

    Quantization (the same for every int8 implementation): activations uint8 per tensor
    (asymmetric), weights int8 per output channel (symmetric), bias int32 with scale
    ``x_scale * w_scale[k]``, output uint8 with the range of the float reference output.
    """

    op: Any                      # the float32 lo.Conv2d
    x: np.ndarray
    w: np.ndarray
    b: np.ndarray
    reference: np.ndarray        # float64 O[N,K,OH,OW]
    xq: np.ndarray
    x_scale: np.float32
    x_zero_point: np.uint8
    wq: np.ndarray
    w_scale: np.ndarray
    w_zero_point: np.ndarray
    bq: np.ndarray               # int32
    y_scale: np.float32
    y_zero_point: np.uint8
    reference_q: np.ndarray      # exact uint8 output (loopopt.quant's bit-exact contract)
    reference_deq: np.ndarray    # float32 output of the exact accumulators, dequantized (+ float bias)

    @classmethod
    def make(cls, op, seed: int = 0) -> "LayerData":
        import loopopt as lo
        from loopopt.quant import dequantize_output, qconv2d_accumulators, requantize_output
        inputs = op.random_inputs(seed)
        x, w, b = inputs["I"], inputs["W"], inputs["B"]
        reference = op.reference(x, w, b)
        xq, x_scale, x_zero_point = lo.quantize(x, "uint8")
        wq, w_scale, w_zero_point = lo.quantize(w, "int8", axis=0, symmetric=True)
        bq = np.rint(b.astype(np.float64) / (np.float64(x_scale) * w_scale)).astype(np.int32)
        _, y_scale, y_zero_point = lo.quantize(reference, "uint8")
        acc = qconv2d_accumulators(xq, wq, x_zero_point, w_zero_point, stride=op.stride, padding=op.padding,
                                   dilation=op.dilation, groups=op.groups)
        reference_q = requantize_output(acc, x_scale, w_scale, y_scale, y_zero_point, "uint8", bias_i32=bq)
        return cls(op, x, w, b, reference, xq, x_scale, x_zero_point, wq, w_scale, w_zero_point, bq,
                   y_scale, y_zero_point, reference_q, dequantize_output(acc, x_scale, w_scale, b))

    def quant_params(self, requantized: bool = True) -> dict[str, Any]:
        """Keyword arguments of a quantized kernel call (names as in ONNX QLinearConv); the output's
        scale and zero-point only for a requantized (uint8) output."""
        params = dict(x_scale=self.x_scale, x_zero_point=self.x_zero_point, w_scale=self.w_scale,
                      w_zero_point=self.w_zero_point)
        return params | (dict(y_scale=self.y_scale, y_zero_point=self.y_zero_point) if requantized else {})

    def check(self, y: np.ndarray, output: str) -> tuple[bool, str]:
        """Compare an output with its reference: (ok, what is wrong or ''). ``output`` is ``fp32``
        (the float conv), ``uint8`` (requantized) or ``dequantized`` (int8 inputs, float32 output)."""
        want = {"fp32": self.reference, "uint8": self.reference_q, "dequantized": self.reference_deq}[output]
        if y.shape != want.shape:
            return False, f"output shape {y.shape}, expected {want.shape}"
        error = float(np.max(np.abs(y.astype(np.float64) - want)))
        if output == "uint8":  # rounding of the requantization may differ by an LSB between libraries
            return error <= 2, "" if error <= 2 else f"off by up to {error:.0f} LSB"
        bound = 1e-4 * float(np.max(np.abs(want))) + 1e-5
        return error <= bound, "" if error <= bound else f"max error {error:.3g} > {bound:.3g}"


@dataclass
class Case:
    """A peer ready to run: ``run()`` is one timed call, ``output(result)`` its NCHW numpy output."""

    run: Callable[[], Any]
    output: Callable[[Any], np.ndarray]
    note: str = ""


def _import(module: str):
    try:
        return importlib.import_module(module)
    except Exception as err:  # ImportError, or a broken binary wheel
        raise PeerUnavailable(f"{module.split('.')[0]} not installed ({type(err).__name__}: {err}): "
                              f"{INSTALL_HINT}") from None


# --- PyTorch -------------------------------------------------------------------------------------

def torch_fp32(data: LayerData, threads: int, channels_last: bool) -> Case:
    """``torch.nn.functional.conv2d`` under ``no_grad``, NCHW or channels_last (oneDNN unless noted)."""
    torch = _import("torch")
    torch.set_num_threads(threads)
    op, fmt = data.op, torch.channels_last if channels_last else torch.contiguous_format
    x = torch.from_numpy(data.x).contiguous(memory_format=fmt)
    w = torch.from_numpy(data.w).contiguous(memory_format=fmt)
    b = torch.from_numpy(data.b)
    args = (op.stride, op.padding, op.dilation, op.groups)
    backend = _torch_backend(torch, x, w, b, op)

    def run():
        with torch.no_grad():
            return torch.nn.functional.conv2d(x, w, b, *args)
    return Case(run, lambda y: y.contiguous().numpy(), f"backend {backend}")


def _torch_backend(torch, x, w, b, op) -> str:
    """The convolution backend PyTorch picks (Mkldnn = oneDNN; Slow2d = im2col + MKL GEMM)."""
    try:
        backend = torch._C._select_conv_backend(x, w, b, list(op.stride), list(op.padding), list(op.dilation),
                                                False, [0, 0], op.groups)
        return str(backend).rsplit(".", 1)[-1]
    except Exception:  # a private function: absent in other versions
        return "?"


def torch_int8(data: LayerData, threads: int) -> Case:
    """``torch.ao.nn.quantized.Conv2d`` on the x86 engine: channels-last quint8 in, qint8 per-channel
    weights, quint8 out, with exactly the benchmark's quantized values and scales."""
    torch = _import("torch")
    qnn = _import("torch.ao.nn.quantized")
    torch.set_num_threads(threads)
    torch.backends.quantized.engine = "x86"
    op = data.op
    qx = torch._make_per_tensor_quantized_tensor(torch.from_numpy(data.xq), float(data.x_scale),
                                                 int(data.x_zero_point))
    qx = qx.contiguous(memory_format=torch.channels_last)
    qw = torch._make_per_channel_quantized_tensor(
        torch.from_numpy(data.wq), torch.from_numpy(data.w_scale.astype(np.float64)),
        torch.from_numpy(data.w_zero_point.astype(np.int64)), 0)
    conv = qnn.Conv2d(op.in_channels, op.out_channels, op.kernel_size, stride=op.stride, padding=op.padding,
                      dilation=op.dilation, groups=op.groups, bias=True)
    # PyTorch takes a float bias and quantizes it with scale x_scale * w_scale[k]: give it bq back.
    bias = data.bq.astype(np.float64) * np.float64(data.x_scale) * data.w_scale
    conv.set_weight_bias(qw, torch.from_numpy(bias.astype(np.float32)))
    conv.scale, conv.zero_point = float(data.y_scale), int(data.y_zero_point)

    def run():
        with torch.no_grad():
            return conv(qx)
    return Case(run, lambda y: y.int_repr().contiguous().numpy())


# --- onnxruntime ---------------------------------------------------------------------------------

def _ort_node_session(node, inputs: list[tuple[str, np.ndarray]], feed: np.ndarray, out_shape: tuple,
                      out_type: int, threads: int):
    """An in-memory one-node model: ``feed`` is the graph input ``x``, ``inputs`` the initializers,
    the output ``y``; the call runs it with ``threads`` intra-op threads."""
    onnx = _import("onnx")
    ort = _import("onnxruntime")
    from onnx import helper, numpy_helper
    x_info = helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(feed.dtype), feed.shape)
    y_info = helper.make_tensor_value_info("y", out_type, out_shape)
    initializer = [numpy_helper.from_array(np.asarray(a), name) for name, a in inputs]
    graph = helper.make_graph([node], f"{node.op_type}_layer", [x_info], [y_info], initializer=initializer)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 8)   # opset 17's IR, accepted by older runtimes too
    onnx.checker.check_model(model)
    options = session_options(threads)
    options.inter_op_num_threads = 1
    if threads > 1:
        options.add_session_config_entry(*ORT_NO_SPIN)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, {"x": feed})[0]


def _ort_session(data: LayerData, threads: int, node_type: str, inputs: list[tuple[str, np.ndarray]],
                 feed: np.ndarray, out_type: int):
    """A one-node convolution model of ``data``'s layer (``node_type``: Conv or QLinearConv)."""
    from onnx import helper
    op = data.op
    (ph, pw), (kh, kw) = op.padding, op.kernel_size
    node = helper.make_node(node_type, ["x"] + [name for name, _ in inputs], ["y"], kernel_shape=[kh, kw],
                            strides=list(op.stride), pads=[ph, pw, ph, pw], dilations=list(op.dilation),
                            group=op.groups)
    return _ort_node_session(node, inputs, feed, data.reference.shape, out_type, threads)


def ort_fp32(data: LayerData, threads: int) -> Case:
    """onnxruntime ``Conv`` (float32, weights and bias as initializers)."""
    onnx = _import("onnx")
    run = _ort_session(data, threads, "Conv", [("W", data.w), ("B", data.b)], data.x, onnx.TensorProto.FLOAT)
    return Case(run, lambda y: y)


def ort_int8(data: LayerData, threads: int) -> Case:
    """onnxruntime ``QLinearConv``: uint8 x int8 per-channel weights, int32 bias, uint8 out."""
    onnx = _import("onnx")
    inputs = [("x_scale", np.float32(data.x_scale)), ("x_zero_point", np.uint8(data.x_zero_point)),
              ("w", data.wq), ("w_scale", data.w_scale.astype(np.float32)),
              ("w_zero_point", data.w_zero_point.astype(np.int8)),
              ("y_scale", np.float32(data.y_scale)), ("y_zero_point", np.uint8(data.y_zero_point)),
              ("B", data.bq)]
    run = _ort_session(data, threads, "QLinearConv", inputs, data.xq, onnx.TensorProto.UINT8)
    return Case(run, lambda y: y)


Builder = Callable[[LayerData, int], Case]
FP32_PEERS: tuple[tuple[str, Builder], ...] = (
    ("PyTorch NCHW", partial(torch_fp32, channels_last=False)),
    ("PyTorch NHWC", partial(torch_fp32, channels_last=True)),
    ("onnxruntime Conv", ort_fp32),
)
INT8_PEERS: tuple[tuple[str, Builder], ...] = (
    ("PyTorch x86 NHWC", torch_int8),
    ("onnxruntime QLinearConv", ort_int8),
)


# --- matrix multiply ------------------------------------------------------------------------------

def torch_matmul(a: np.ndarray, b: np.ndarray, threads: int) -> Case:
    """``torch.matmul`` of float32 ``a @ b`` (MKL / oneDNN GEMM) under ``no_grad``."""
    torch = _import("torch")
    torch.set_num_threads(threads)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)

    def run():
        with torch.no_grad():
            return torch.matmul(ta, tb)
    return Case(run, lambda y: y.numpy())


def ort_matmul(a: np.ndarray, b: np.ndarray, threads: int) -> Case:
    """onnxruntime ``MatMul`` of float32 ``a @ b`` (``b`` an initializer, as a layer's weights)."""
    onnx = _import("onnx")
    from onnx import helper
    node = helper.make_node("MatMul", ["x", "B"], ["y"])
    run = _ort_node_session(node, [("B", b)], a, (a.shape[0], b.shape[1]), onnx.TensorProto.FLOAT, threads)
    return Case(run, lambda y: y)


MatmulBuilder = Callable[[np.ndarray, np.ndarray, int], Case]
MATMUL_PEERS: tuple[tuple[str, MatmulBuilder], ...] = (
    ("PyTorch matmul", torch_matmul),
    ("onnxruntime MatMul", ort_matmul),
)
