"""How each ONNX compute node becomes a loopopt op: one small function per op type (``LOWERINGS``).

A lowering reads the node's attributes and what is known of its inputs (shape, dtype, and the
values of constants such as weights, scales and zero points) and returns a ``Lowering``: the
loopopt op, and how to call its kernel on the node's inputs and turn the kernel's output into
the node's outputs (reshapes, broadcasting, a batch loop). What the op model
cannot express yet raises ``NotSupported`` with the attribute or value, e.g.
``not supported: Conv with 4 spatial dims (1-D to 3-D convolutions)``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from ..kernel import Kernel
from ..ops import Conv2d, Conv3d, ConvNd, Gemm, Matmul, Op, auto_pad
from ..quant import QuantSpec, check_quant_params, symmetric_zero_point

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
    """A 1-D, 2-D or 3-D ONNX convolution as a Conv2d's (1-D: height 1) or Conv3d's constructor
    arguments."""

    kwargs: dict
    spatial: int      # the node's spatial rank (1, 2 or 3)


def conv_geometry(node: onnx.NodeProto, x: Value, w: Value, bias: bool) -> ConvGeometry:
    """Shapes and attributes of a Conv-like node (Conv, ConvInteger, QLinearConv) as Conv2d's."""
    attrs = attributes(node, CONV_ATTRIBUTES)
    if len(x.shape) != len(w.shape) or len(x.shape) < 3:
        raise NotSupported(f"{node.op_type} input of shape {x.shape} with weights {w.shape}")
    spatial = len(x.shape) - 2
    if spatial > 3:
        raise NotSupported(f"{node.op_type} with {spatial} spatial dims (1-D to 3-D convolutions)")
    kernel = list(w.shape[2:])
    if attrs["kernel_shape"] is not None and list(attrs["kernel_shape"]) != kernel:
        raise NotSupported(f"kernel_shape={list(attrs['kernel_shape'])} differs from the weights' {kernel}")
    strides = list(attrs["strides"] or [1] * spatial)
    dilations = list(attrs["dilations"] or [1] * spatial)
    mode = attrs["auto_pad"]
    if mode in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        pairs = list(auto_pad(mode, x.shape[2:], kernel, strides, dilations))
    elif mode == "NOTSET":
        pads = list(attrs["pads"] or [0] * 2 * spatial)
        pairs = [(pads[a], pads[a + spatial]) for a in range(spatial)]
    else:
        raise NotSupported(f"auto_pad={mode!r}")
    group = int(attrs["group"])
    n, c = x.shape[:2]
    if w.shape[1] * group != c:
        raise NotSupported(f"weights {w.shape} with group={group} for {c} input channels")
    lead = [1] if spatial == 1 else []     # a 1-D convolution is a 2-D one of height 1 (quantized too)
    size = lead + list(x.shape[2:])
    padding = tuple([(0, 0)] * len(lead) + pairs)
    kwargs = dict(in_channels=c, out_channels=w.shape[0], kernel_size=tuple(lead + kernel),
                  stride=tuple(lead + strides), padding=padding,
                  dilation=tuple(lead + dilations), groups=group, bias=bias, batch=n,
                  **dict(zip(("depth", "height", "width")[3 - len(size):], size)))
    return ConvGeometry(kwargs, spatial)


def _conv_op(geometry: ConvGeometry, quant: QuantSpec | None = None) -> ConvNd:
    try:
        return (Conv3d if geometry.spatial == 3 else Conv2d)(**geometry.kwargs, quant=quant)
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


def lower_conv_integer(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX ConvInteger (inputs x, w, optional x_zero_point, w_zero_point) as a quantized Conv2d
    with a raw int32 output."""
    x, w = values[0], values[1]
    geometry = conv_geometry(node, x, w, False)
    quant = quantization(node, values, INTEGER_INPUTS, w.shape[0], "int32")
    op = _conv_op(geometry, quant.spec)

    def call(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        arrays = [_as_2d(inputs[0], geometry), _as_2d(inputs[1], geometry)]
        return [_from_2d(run_kernel(kernel, *arrays, **quant.params(inputs)), geometry)]

    return Lowering(op, call, "1-D as height 1" if geometry.spatial == 1 else "")


@dataclass(frozen=True)
class QLinear:
    """The scale and zero-point inputs of a quantized node, as the kernel's quantization parameters."""

    spec: QuantSpec
    params: Callable[[Sequence[np.ndarray]], dict]


# input index of the data (x, w) and of each of the kernel's parameters, by the kernel's names
QLINEAR_INPUTS = {"x": 0, "x_scale": 1, "x_zero_point": 2, "w": 3, "w_scale": 4, "w_zero_point": 5,
                  "y_scale": 6, "y_zero_point": 7}
INTEGER_INPUTS = {"x": 0, "w": 1, "x_zero_point": 2, "w_zero_point": 3}   # zero points optional (0)


def _scalar_or_channels(node: onnx.NodeProto, name: str, value: Value, channels: int) -> None:
    size = int(np.prod(value.shape))
    if size not in (1, channels) or (size > 1 and max(value.shape) != size):
        raise NotSupported(f"{node.op_type} {name} of shape {value.shape} (one per tensor or per "
                           f"output channel, {channels})")


def quantization(node: onnx.NodeProto, values: Sequence[Value | None], inputs: dict[str, int],
                 channels: int, output: str) -> QLinear:
    """QuantSpec and kernel parameters of a quantized node whose inputs ``inputs`` places (QLinearConv /
    QLinearMatMul: ``QLINEAR_INPUTS``; ConvInteger / MatMulInteger: ``INTEGER_INPUTS``, a zero point
    left out is 0). Weight parameters are per tensor or per output channel, the others per tensor."""
    x, w = values[inputs["x"]], values[inputs["w"]]
    places = {name: index for name, index in inputs.items() if name not in ("x", "w")}
    given = {name: _input(values, index) for name, index in places.items()}
    for name, value in given.items():
        if value is not None:
            _scalar_or_channels(node, node.input[inputs[name]], value, channels if name[0] == "w" else 1)
    per_channel = any(v is not None and int(np.prod(v.shape)) > 1 for n, v in given.items() if n[0] == "w")
    w_zero = given["w_zero_point"]
    zw = np.zeros(1, w.dtype) if w_zero is None else w_zero.data
    symmetric = zw is not None and bool(np.all(zw == symmetric_zero_point(str(w.dtype))))
    try:
        spec = QuantSpec(activation=str(x.dtype), per_channel=per_channel, weight_symmetric=symmetric,
                         output=output, weight=str(w.dtype))
    except ValueError as error:
        raise NotSupported(f"{node.op_type} with {error}") from error
    dtypes = {"x_zero_point": x.dtype, "w_zero_point": w.dtype}

    def params(arrays: Sequence[np.ndarray | None]) -> dict:
        present = lambda i: i < len(arrays) and arrays[i] is not None
        named = {name: np.asarray(arrays[i]) if present(i) else np.zeros((), dtypes[name])
                 for name, i in places.items()}
        return {name: (a.reshape(-1) if a.size > 1 else a.reshape(())) for name, a in named.items()}

    constants = [v.data if v is not None else None for v in values]
    if all(given[name] is None or given[name].data is not None for name in given):
        try:   # what the constants say, checked as the kernel will (e.g. a zero point out of range)
            check_quant_params(spec, channels, **params(constants), xq=np.zeros(1, x.dtype),
                               wq=np.zeros(1, w.dtype))
        except (ValueError, TypeError) as error:
            raise NotSupported(f"{node.op_type} with {error}") from error
    return QLinear(spec, params)


def lower_qlinear_conv(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX QLinearConv as a quantized Conv2d with a requantized uint8/int8 output."""
    x, w, bias = values[0], values[3], _input(values, 8)
    geometry = conv_geometry(node, x, w, bias is not None)
    quant = quantization(node, values, QLINEAR_INPUTS, w.shape[0], str(values[7].dtype))
    op = _conv_op(geometry, quant.spec)

    def call(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        arrays = [_as_2d(inputs[0], geometry), _as_2d(inputs[3], geometry), *inputs[8:9]]
        return [_from_2d(run_kernel(kernel, *arrays, **quant.params(inputs)), geometry)]

    return Lowering(op, call, "1-D as height 1" if geometry.spatial == 1 else "")


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

    @property
    def items(self) -> int:
        """Products in the broadcast batch."""
        return int(np.prod(self.batch))

    def operands(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``a`` and ``b`` promoted and broadcast to ``[items, m, k]`` and ``[items, k, n]``."""
        a2 = a[None, :] if self.a_vector else a
        b2 = b[:, None] if self.b_vector else b
        return (np.broadcast_to(a2, (*self.batch, self.m, self.k)).reshape(-1, self.m, self.k),
                np.broadcast_to(b2, (*self.batch, self.k, self.n)).reshape(-1, self.k, self.n))

    def output(self, products: np.ndarray) -> np.ndarray:
        """The ``[items, m, n]`` products shaped as ONNX MatMul's output."""
        out = products.reshape(*self.batch, self.m, self.n)
        if self.a_vector:
            out = out[..., 0, :]
        return out[..., 0] if self.b_vector else out

    def run(self, product: Callable[[np.ndarray, np.ndarray], np.ndarray], a: np.ndarray,
            b: np.ndarray) -> np.ndarray:
        """``product`` (one 2-D kernel call) over the broadcast batch, shaped as ONNX MatMul's output."""
        return self.output(np.stack([product(x, y) for x, y in zip(*self.operands(a, b))]))

    @property
    def note(self) -> str:
        return f"batch loop of {self.items}" if self.batch else ""


def lower_matmul(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX MatMul (numpy semantics) as a float32 Matmul with one batch dim over the broadcast batch
    (the operands broadcast to it; none for a single product): one kernel call."""
    attributes(node, {})
    _float32(node, values)
    shape = MatmulShape.of(node, values[0].shape, values[1].shape)
    batched = shape.items > 1
    op = Matmul(shape.m, shape.n, shape.k, batch=(shape.items,) if batched else ())

    def call(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        a, b = shape.operands(inputs[0], inputs[1])
        return [shape.output(run_kernel(kernel, *((a, b) if batched else (a[0], b[0]))))]

    return Lowering(op, call, f"batch dims {shape.batch} broadcast into one" if batched else "")


def lower_matmul_integer(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX MatMulInteger (inputs A, B, optional a_zero_point, b_zero_point) as a quantized Matmul
    with a raw int32 output (B's columns are the channels), batch looped; a zero point per row of A
    is not supported (the kernel takes one per tensor)."""
    attributes(node, {})
    shape = MatmulShape.of(node, values[0].shape, values[1].shape)
    quant = quantization(node, values, INTEGER_INPUTS, shape.n, "int32")
    op = Matmul(shape.m, shape.n, shape.k, quant=quant.spec)

    def call(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        params = quant.params(inputs)
        return [shape.run(lambda a, b: run_kernel(kernel, a, b, **params), inputs[0], inputs[1])]

    return Lowering(op, call, shape.note)


def lower_qlinear_matmul(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX QLinearMatMul as a quantized Matmul (B's columns are the channels), batch looped."""
    attributes(node, {})
    shape = MatmulShape.of(node, values[0].shape, values[3].shape)
    quant = quantization(node, values, QLINEAR_INPUTS, shape.n, str(values[7].dtype))
    op = Matmul(shape.m, shape.n, shape.k, quant=quant.spec)

    def call(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        params = quant.params(inputs)
        return [shape.run(lambda a, b: run_kernel(kernel, a, b, **params), inputs[0], inputs[3])]

    return Lowering(op, call, shape.note)


GEMM_ATTRIBUTES = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0,
                   "broadcast": 0}   # opset < 7: C broadcasts only when set; numpy broadcasting covers both


def lower_gemm(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX Gemm ``alpha * A' @ B' + beta * C`` as a float32 lo.Gemm: the transposes, ``alpha`` and
    ``beta * C`` (broadcast) in the kernel; a scalar C is passed as shape (1,)."""
    attrs = attributes(node, GEMM_ATTRIBUTES)
    _float32(node, values)
    a, b, c = values[0].shape, values[1].shape, _input(values, 2)
    if len(a) != 2 or len(b) != 2:
        raise NotSupported(f"Gemm of shapes {a} and {b} (2-D operands)")
    trans_a, trans_b = bool(attrs["transA"]), bool(attrs["transB"])
    (m, k), (k2, n) = (a[::-1] if trans_a else a), (b[::-1] if trans_b else b)
    if k != k2:
        raise NotSupported(f"Gemm of shapes {a} and {b} with transA={int(trans_a)}, transB={int(trans_b)}")
    c_shape = None if c is None else (tuple(c.shape) or (1,))
    try:
        op = Gemm(m, n, k, trans_a=trans_a, trans_b=trans_b, alpha=float(np.float32(attrs["alpha"])),
                  beta=float(np.float32(attrs["beta"])), c_shape=c_shape)
    except ValueError as error:   # a C that does not broadcast to (m, n)
        raise NotSupported(str(error)) from error

    def call(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        arrays = list(inputs[:2]) + ([np.reshape(inputs[2], c_shape)] if c_shape is not None else [])
        return [run_kernel(kernel, *arrays)]

    return Lowering(op, call, "")


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
