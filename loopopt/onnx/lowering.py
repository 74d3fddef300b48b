"""How each ONNX compute node becomes a loopopt op: one small function per op type (``LOWERINGS``).

A lowering reads the node's attributes and what is known of its inputs (shape, dtype, and the
values of constants such as weights, scales and zero points) and returns a ``Lowering``: the
loopopt op, and how to call its kernel on the node's inputs and turn the kernel's output into
the node's outputs (reshapes, a batch loop, Gemm's ``alpha``/``beta * C``). What the op model
cannot express yet raises ``NotSupported`` with the attribute or value, e.g.
``not supported: pads=[1, 0, 0, 1] (asymmetric padding)``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from ..kernel import Kernel
from ..ops import Conv2d, Matmul, Op
from ..quant import PARAM_NAMES, QuantSpec, check_quant_params, symmetric_zero_point

Call = Callable[[Kernel, Sequence[np.ndarray]], list[np.ndarray]]


class NotSupported(Exception):
    """A node the op model cannot express yet; the message names the attribute or value."""

    def __init__(self, reason: str):
        super().__init__(f"not supported: {reason}")
        self.reason = reason


@dataclass(frozen=True)
class Value:
    """What is known of one node input: its shape and dtype, and its data when constant
    (an initializer at prepare time; every input at run time)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    data: np.ndarray | None = None


@dataclass(frozen=True)
class Lowering:
    """A node as a loopopt op, and how its kernel runs the node (``call(kernel, inputs)``)."""

    op: Op
    call: Call
    note: str = ""    # what the importer does around the kernel (batch loop, transposes, alpha/beta)


def run_kernel(kernel: Kernel, *arrays: np.ndarray, **params) -> np.ndarray:
    """``kernel`` on C-contiguous copies of ``arrays`` where needed (transposes, broadcast batches)."""
    return kernel(*(np.ascontiguousarray(a) for a in arrays), **params)


def attributes(node: onnx.NodeProto, known: dict[str, object]) -> dict[str, object]:
    """The node's attributes over the defaults ``known``; an attribute loopopt does not know
    raises NotSupported."""
    values = dict(known)
    for attribute in node.attribute:
        if attribute.name not in known:
            raise NotSupported(f"attribute {attribute.name} of {node.op_type}")
        value = helper.get_attribute_value(attribute)
        values[attribute.name] = value.decode() if isinstance(value, bytes) else value
    return values


def _input(values: Sequence[Value | None], index: int) -> Value | None:
    return values[index] if index < len(values) else None


def _float32(node: onnx.NodeProto, values: Sequence[Value | None]) -> None:
    for index, value in enumerate(values):
        if value is not None and value.dtype != np.float32:
            raise NotSupported(f"{node.op_type} input {node.input[index]!r} of dtype {value.dtype} "
                               "(float kernels are float32)")


# ---------------------------------------------------------------- convolutions

CONV_ATTRIBUTES = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                   "pads": None, "strides": None}


@dataclass(frozen=True)
class ConvGeometry:
    """A 1-D or 2-D ONNX convolution as a Conv2d's constructor arguments (1-D: height 1)."""

    kwargs: dict
    spatial: int      # the node's spatial rank (1 or 2)


def _same_pads(size: int, kernel: int, stride: int, dilation: int, mode: str) -> tuple[int, int]:
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + (kernel - 1) * dilation + 1 - size)
    small, large = total // 2, total - total // 2
    return (small, large) if mode == "SAME_UPPER" else (large, small)


def conv_geometry(node: onnx.NodeProto, x: Value, w: Value, bias: bool) -> ConvGeometry:
    """Shapes and attributes of a Conv-like node (Conv, ConvInteger, QLinearConv) as Conv2d's."""
    attrs = attributes(node, CONV_ATTRIBUTES)
    if len(x.shape) != len(w.shape) or len(x.shape) < 3:
        raise NotSupported(f"{node.op_type} input of shape {x.shape} with weights {w.shape}")
    spatial = len(x.shape) - 2
    if spatial > 2:
        raise NotSupported(f"{node.op_type} with {spatial} spatial dims (only 1-D and 2-D convolutions)")
    kernel = list(w.shape[2:])
    if attrs["kernel_shape"] is not None and list(attrs["kernel_shape"]) != kernel:
        raise NotSupported(f"kernel_shape={list(attrs['kernel_shape'])} differs from the weights' {kernel}")
    strides = list(attrs["strides"] or [1] * spatial)
    dilations = list(attrs["dilations"] or [1] * spatial)
    mode = attrs["auto_pad"]
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        pairs = [_same_pads(x.shape[2 + a], kernel[a], strides[a], dilations[a], mode)
                 for a in range(spatial)]
    elif mode in ("NOTSET", "VALID"):
        pads = list(attrs["pads"] or [0] * 2 * spatial) if mode == "NOTSET" else [0] * 2 * spatial
        pairs = [(pads[a], pads[a + spatial]) for a in range(spatial)]
    else:
        raise NotSupported(f"auto_pad={mode!r}")
    if any(begin != end for begin, end in pairs):
        raise NotSupported(f"pads={[p[0] for p in pairs] + [p[1] for p in pairs]} (asymmetric padding)")
    group = int(attrs["group"])
    n, c = x.shape[:2]
    if w.shape[1] * group != c:
        raise NotSupported(f"weights {w.shape} with group={group} for {c} input channels")
    lead = [1] if spatial == 1 else []     # a 1-D convolution is a 2-D one of height 1
    size = lead + list(x.shape[2:])
    kwargs = dict(in_channels=c, out_channels=w.shape[0], kernel_size=tuple(lead + kernel),
                  stride=tuple(lead + strides), padding=tuple([0] * len(lead) + [p[0] for p in pairs]),
                  dilation=tuple(lead + dilations), groups=group, bias=bias, batch=n,
                  height=size[0], width=size[1])
    return ConvGeometry(kwargs, spatial)


def _conv_op(geometry: ConvGeometry, quant: QuantSpec | None = None) -> Conv2d:
    try:
        return Conv2d(**geometry.kwargs, quant=quant)
    except ValueError as error:   # e.g. a kernel larger than the padded input
        raise NotSupported(str(error)) from error


def _as_2d(array: np.ndarray, geometry: ConvGeometry) -> np.ndarray:
    return array[:, :, None, :] if geometry.spatial == 1 else array


def _from_2d(array: np.ndarray, geometry: ConvGeometry) -> np.ndarray:
    return array[:, :, 0, :] if geometry.spatial == 1 else array


def lower_conv(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX Conv (inputs X, W, optional B) as a float32 Conv2d."""
    x, w, b = values[0], values[1], _input(values, 2)
    _float32(node, values)
    geometry = conv_geometry(node, x, w, b is not None)
    op = _conv_op(geometry)

    def call(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        arrays = [_as_2d(inputs[0], geometry), _as_2d(inputs[1], geometry), *inputs[2:3]]
        return [_from_2d(run_kernel(kernel, *arrays), geometry)]

    return Lowering(op, call, "1-D as height 1" if geometry.spatial == 1 else "")


@dataclass(frozen=True)
class Quantization:
    """The zero-point and scale inputs of a quantized node as a QuantSpec and the kernel's
    quantization parameters (``params(inputs)``: ONNX parameter names, a missing optional zero
    point as 0)."""

    spec: QuantSpec
    params: Callable[[Sequence[np.ndarray | None]], dict]


# input index -> the kernel's parameter name
QLINEAR_PARAMS = {1: "x_scale", 2: "x_zero_point", 4: "w_scale", 5: "w_zero_point", 6: "y_scale",
                  7: "y_zero_point"}
INTEGER_PARAMS = {2: "x_zero_point", 3: "w_zero_point"}       # ConvInteger, MatMulInteger
PER_CHANNEL = ("w_scale", "w_zero_point")


def _scalar_or_channels(node: onnx.NodeProto, name: str, value: Value, channels: int) -> None:
    size = int(np.prod(value.shape))
    if size not in (1, channels) or (size > 1 and max(value.shape) != size):
        raise NotSupported(f"{node.op_type} {name} of shape {value.shape} (one per tensor"
                           + (f" or per output channel, {channels})" if channels > 1 else ")"))


def quantization(node: onnx.NodeProto, values: Sequence[Value | None], channels: int, weights: int,
                 names: dict[int, str], output: np.dtype) -> Quantization:
    """QuantSpec and kernel parameters of a quantized node whose activations are input 0, weights
    input ``weights`` and parameters the inputs ``names``; ``output`` is the node's output dtype."""
    x, w = values[0], values[weights]
    dtypes = {"x_zero_point": x.dtype, "w_zero_point": w.dtype}
    given = {name: _input(values, i) for i, name in names.items()}
    for index, name in names.items():
        if given[name] is not None:
            _scalar_or_channels(node, node.input[index], given[name], channels if name in PER_CHANNEL else 1)
    per_channel = any(given.get(n) is not None and int(np.prod(given[n].shape)) > 1 for n in PER_CHANNEL)
    w_zero = given["w_zero_point"]
    w_zero_data = np.zeros(1, w.dtype) if w_zero is None else w_zero.data
    try:
        centre = symmetric_zero_point(str(w.dtype))
        symmetric = w_zero_data is not None and bool(np.all(w_zero_data == centre))
        spec = QuantSpec(activation=str(x.dtype), weight=str(w.dtype), per_channel=per_channel,
                         weight_symmetric=symmetric, output=str(output))
    except ValueError as error:
        raise NotSupported(f"{node.op_type} with {error}") from error

    def params(inputs: Sequence[np.ndarray | None]) -> dict:
        named = {}
        for index, name in names.items():
            array = inputs[index] if index < len(inputs) else None
            array = np.zeros((), dtypes[name]) if array is None else np.asarray(array)
            named[name] = array.reshape(-1) if array.size > 1 else array.reshape(())
        return named

    constants = [None if v is None else v.data for v in values]
    if all(given[n] is None or given[n].data is not None for n in given):
        try:   # what the constants say, checked as the kernel will check them
            every = {name: None for name in PARAM_NAMES} | params(constants)
            check_quant_params(spec, channels, **every, xq=np.zeros(1, x.dtype),
                               wq=np.zeros(1, w.dtype))
        except (ValueError, TypeError) as error:
            raise NotSupported(f"{node.op_type} with {error}") from error
    return Quantization(spec, params)


def _quantized_conv(node: onnx.NodeProto, values: Sequence[Value | None], weights: int,
                    names: dict[int, str], output: np.dtype, bias: int | None) -> Lowering:
    """A quantized Conv-like node: activations input 0, weights input ``weights``, parameters
    ``names``, an int32 bias at input ``bias`` (None: no bias input)."""
    x, w = values[0], values[weights]
    has_bias = bias is not None and _input(values, bias) is not None
    geometry = conv_geometry(node, x, w, has_bias)
    quant = quantization(node, values, w.shape[0], weights, names, output)
    op = _conv_op(geometry, quant.spec)

    def call(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        arrays = [_as_2d(inputs[0], geometry), _as_2d(inputs[weights], geometry)]
        arrays += [inputs[bias]] if has_bias else []
        return [_from_2d(run_kernel(kernel, *arrays, **quant.params(inputs)), geometry)]

    return Lowering(op, call, "1-D as height 1" if geometry.spatial == 1 else "")


def lower_conv_integer(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX ConvInteger (x, w, optional zero points) as a quantized Conv2d with a raw int32 output."""
    return _quantized_conv(node, values, 1, INTEGER_PARAMS, np.dtype(np.int32), None)


def lower_qlinear_conv(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX QLinearConv as a quantized Conv2d with a requantized uint8/int8 output (int32 bias)."""
    return _quantized_conv(node, values, 3, QLINEAR_PARAMS, values[7].dtype, 8)


# ---------------------------------------------------------------- matrix multiplies


@dataclass(frozen=True)
class MatmulShape:
    """An ONNX MatMul's operands as a batch of 2-D products: 1-D operands promoted as numpy does,
    batch dims broadcast; the importer loops the batch over one Matmul kernel."""

    m: int
    n: int
    k: int
    batch: tuple[int, ...]
    a_vector: bool
    b_vector: bool

    @classmethod
    def of(cls, node: onnx.NodeProto, a: tuple[int, ...], b: tuple[int, ...]) -> MatmulShape:
        a_vector, b_vector = len(a) == 1, len(b) == 1
        a2 = (1, *a) if a_vector else a
        b2 = (*b, 1) if b_vector else b
        if not a or not b or a2[-1] != b2[-2]:
            raise NotSupported(f"{node.op_type} of shapes {a} and {b} (inner dims differ)")
        try:
            batch = np.broadcast_shapes(a2[:-2], b2[:-2])
        except ValueError as error:
            raise NotSupported(f"{node.op_type} of shapes {a} and {b}: {error}") from error
        return cls(a2[-2], b2[-1], a2[-1], tuple(batch), a_vector, b_vector)

    def run(self, product: Callable[[np.ndarray, np.ndarray], np.ndarray], a: np.ndarray,
            b: np.ndarray) -> np.ndarray:
        """``product`` (one 2-D kernel call) over the broadcast batch, shaped as ONNX MatMul's output."""
        a2 = a[None, :] if self.a_vector else a
        b2 = b[:, None] if self.b_vector else b
        a_b = np.broadcast_to(a2, (*self.batch, self.m, self.k)).reshape(-1, self.m, self.k)
        b_b = np.broadcast_to(b2, (*self.batch, self.k, self.n)).reshape(-1, self.k, self.n)
        out = np.stack([product(x, y) for x, y in zip(a_b, b_b)]).reshape(*self.batch, self.m, self.n)
        if self.a_vector:
            out = out[..., 0, :]
        return out[..., 0] if self.b_vector else out

    @property
    def note(self) -> str:
        return f"batch loop of {int(np.prod(self.batch))}" if self.batch else ""


def lower_matmul(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX MatMul (numpy semantics) as a float32 Matmul, looped over the broadcast batch."""
    attributes(node, {})
    _float32(node, values)
    shape = MatmulShape.of(node, values[0].shape, values[1].shape)
    op = Matmul(shape.m, shape.n, shape.k)

    def call(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [shape.run(lambda a, b: run_kernel(kernel, a, b), inputs[0], inputs[1])]

    return Lowering(op, call, shape.note)


def _quantized_matmul(node: onnx.NodeProto, values: Sequence[Value | None], weights: int,
                      names: dict[int, str], output: np.dtype) -> Lowering:
    """A quantized MatMul-like node (B, input ``weights``: its columns are the channels, so a
    per-column scale or zero point is per channel), looped over the broadcast batch."""
    attributes(node, {})
    shape = MatmulShape.of(node, values[0].shape, values[weights].shape)
    quant = quantization(node, values, shape.n, weights, names, output)
    op = Matmul(shape.m, shape.n, shape.k, quant=quant.spec)

    def call(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        params = quant.params(inputs)
        return [shape.run(lambda a, b: run_kernel(kernel, a, b, **params), inputs[0], inputs[weights])]

    return Lowering(op, call, shape.note)


def lower_matmul_integer(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX MatMulInteger (a, b, optional zero points) as a quantized Matmul with a raw int32 output."""
    return _quantized_matmul(node, values, 1, INTEGER_PARAMS, np.dtype(np.int32))


def lower_qlinear_matmul(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX QLinearMatMul as a quantized Matmul with a requantized uint8/int8 output."""
    return _quantized_matmul(node, values, 3, QLINEAR_PARAMS, values[7].dtype)


GEMM_ATTRIBUTES = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0,
                   "broadcast": 0}   # opset < 7: C broadcasts only when set; numpy broadcasting covers both


def lower_gemm(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX Gemm ``alpha * A' @ B' + beta * C`` as a float32 Matmul on the transposed operands;
    ``alpha`` and ``beta * C`` are applied to the kernel's output."""
    attrs = attributes(node, GEMM_ATTRIBUTES)
    _float32(node, values)
    a, b, c = values[0].shape, values[1].shape, _input(values, 2)
    if len(a) != 2 or len(b) != 2:
        raise NotSupported(f"Gemm of shapes {a} and {b} (2-D operands)")
    trans_a, trans_b = bool(attrs["transA"]), bool(attrs["transB"])
    (m, k), (k2, n) = (a[::-1] if trans_a else a), (b[::-1] if trans_b else b)
    if k != k2:
        raise NotSupported(f"Gemm of shapes {a} and {b} with transA={int(trans_a)}, transB={int(trans_b)}")
    op = Matmul(m, n, k)
    alpha, beta = np.float32(attrs["alpha"]), np.float32(attrs["beta"])

    def call(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        y = run_kernel(kernel, inputs[0].T if trans_a else inputs[0], inputs[1].T if trans_b else inputs[1])
        if alpha != 1:
            y = alpha * y
        if len(inputs) > 2 and inputs[2] is not None and beta != 0:
            y = y + beta * inputs[2]
        return [y.astype(np.float32)]

    steps = [s for s, on in (("A transposed", trans_a), ("B transposed", trans_b),
                             ("alpha after the kernel", alpha != 1),
                             ("beta * C after the kernel", c is not None)) if on]
    return Lowering(op, call, ", ".join(steps))


Lower = Callable[[onnx.NodeProto, Sequence[Value | None]], Lowering]

LOWERINGS: dict[str, Lower] = {
    "Conv": lower_conv,
    "ConvInteger": lower_conv_integer,
    "QLinearConv": lower_qlinear_conv,
    "MatMul": lower_matmul,
    "MatMulInteger": lower_matmul_integer,
    "QLinearMatMul": lower_qlinear_matmul,
    "Gemm": lower_gemm,
}


def lower(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """The lowering of a compute node (``node.op_type`` in ``LOWERINGS``); NotSupported if the op
    model cannot express it."""
    return LOWERINGS[node.op_type](node, values)
