"""How each ONNX compute node becomes a loopopt op: one small function per op type (``LOWERINGS``).

A lowering reads the node's attributes and what is known of its inputs (shape, dtype, and the
values of constants such as weights, scales and zero points) and returns a ``Lowering``: the
loopopt op, and how to call its kernel on the node's inputs and turn the kernel's output into
the node's outputs (MatMul's 1-D operands and broadcast batch). ``FUSED`` lowers the nodes of
the ``loopopt.qdq`` domain that ``qdq.fuse`` makes of DequantizeLinear -> Conv/MatMul/Gemm
(-> QuantizeLinear) patterns. What the op model cannot express yet raises ``NotSupported`` with
the attribute or value, e.g. ``not supported: Conv input 'x' of dtype float64 (float kernels
are float32)``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from ..kernel import Kernel
from ..layout import Layout
from ..ops import AUTO_PADS, Conv1d, Conv2d, Conv3d, ConvNd, Gemm, Matmul, Op, auto_pad
from ..quant import PARAM_NAMES, QuantSpec, check_quant_params, symmetric_zero_point

Inputs = Sequence[np.ndarray | None]


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


def _same(array: np.ndarray) -> np.ndarray:
    return array


def _one(array: np.ndarray) -> list[np.ndarray]:
    return [array]


@dataclass(frozen=True)
class Lowering:
    """A node as a loopopt op, and how its kernel runs the node: the kernel's first array is
    ``activation(inputs[0])``, the rest and the quantization parameters are ``constants(inputs)``
    (the node's other inputs: weights, bias, scales), and ``result`` makes the kernel's output the
    node's outputs."""

    op: Op
    constants: Callable[[Inputs], tuple[list[np.ndarray], dict]]
    activation: Callable[[np.ndarray], np.ndarray] = _same
    result: Callable[[np.ndarray], list[np.ndarray]] = _one
    note: str = ""    # what the importer does around the kernel (batch folded into the rows, ...)

    def input_layout(self, order: tuple[int, ...] | None) -> str | None:
        """The format tag of the kernel's first input stored with its axes in ``order`` (the memory
        order of the node's input, which reaches the kernel as it is; None: the logical order, as a
        model's input arrives), or None (the node reshapes its input first)."""
        letters = self.op.tensor(self.op.inputs[0]).letters
        if self.activation is not _same or (order is not None and len(order) != len(letters)):
            return None
        return letters if order is None else "".join(letters[axis] for axis in order)

    def output_order(self, kernel: Kernel) -> tuple[int, ...] | None:
        """The memory order of the node's output axes as the kernel returns it (a view of its storage
        in a permutation layout), or None (the logical order, or a blocked layout copied back)."""
        return _axes(kernel.schedule.layout_of(self.op.output)) if self.result is _one else None

    def input_order(self, kernel: Kernel) -> tuple[int, ...] | None:
        """The memory order of the node's first input axes that the kernel reads as it is (its storage
        in a permutation layout; another order is packed on each call), or None (a blocked layout, or
        the node reshapes its input first)."""
        return _axes(kernel.schedule.layout_of(self.op.inputs[0])) if self.activation is _same else None

    def call(self, kernel: Kernel, inputs: Inputs) -> list[np.ndarray]:
        """The node's outputs for ``inputs``: one call of ``kernel``."""
        arrays, params = self.constants(inputs)
        return self.result(run_kernel(kernel, self.activation(inputs[0]), *arrays, **params))

    def bind(self, kernel: Kernel, inputs: Inputs) -> Callable[..., list[np.ndarray]]:
        """The node's outputs as a function of its first input (and of the residual a kernel with
        ``add_residual`` adds), every other input the constant of ``inputs`` (checked and packed once:
        ``Kernel.with_constants``); ``last_call``, ``storage``, ``held`` and ``move`` as the kernel's call
        has them; ``over_residual``: whether a call may write the output over the residual it is given."""
        arrays, params = self.constants(inputs)
        call = kernel.with_constants(*(np.ascontiguousarray(a) for a in arrays), **params)

        def bound(x: np.ndarray, *residual: np.ndarray, over_residual: bool = False) -> list[np.ndarray]:
            return self.result(call(self.activation(x), *residual, over_residual=over_residual))

        def move(buffer: np.ndarray) -> None:
            call.move(buffer)
            bound.storage = call.storage     # type: ignore[attr-defined]

        bound.last_call = call.last_call     # type: ignore[attr-defined]
        bound.storage = call.storage         # type: ignore[attr-defined]
        bound.held, bound.move = call.held, move     # type: ignore[attr-defined]
        bound.over_residual = kernel.generated.output_over_residual   # type: ignore[attr-defined]
        return bound


def _axes(layout: Layout) -> tuple[int, ...] | None:
    """The logical axes of a permutation layout, outer to inner in memory; None for a blocked one."""
    if any(block for _, block in layout.order):
        return None
    return tuple(layout.letters.index(letter) for letter, _ in layout.order)


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


Floats = tuple[str, ...]     # float dtype names
FLOAT32: Floats = ("float32",)       # the float dtypes the host's kernels take


def _float(node: onnx.NodeProto, values: Sequence[Value | None], floats: Floats) -> str:
    """The one float dtype of the node's inputs, one of ``floats``; NotSupported naming an input of
    another dtype."""
    for index, value in enumerate(values):
        if value is not None and (value.dtype.name not in floats or value.dtype != values[0].dtype):
            one = ", the inputs of one dtype" if len(floats) > 1 else ""
            raise NotSupported(f"{node.op_type} input {node.input[index]!r} of dtype {value.dtype} "
                               f"(float kernels are {' or '.join(floats)}{one})")
    return values[0].dtype.name


# ---------------------------------------------------------------- convolutions

CONV_ATTRIBUTES = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                   "pads": None, "strides": None}


# spatial rank -> the op class and the names of its size arguments
CONVS = {1: (Conv1d, ("length",)), 2: (Conv2d, ("height", "width")),
         3: (Conv3d, ("depth", "height", "width"))}


@dataclass(frozen=True)
class ConvGeometry:
    """An ONNX convolution as the constructor arguments of Conv1d, Conv2d or Conv3d."""

    kwargs: dict
    spatial: int          # the node's spatial rank

    def op(self, quant: QuantSpec | None = None, dtype: str = "float32") -> ConvNd:
        """The loopopt op; NotSupported with the op model's reason if it refuses the shape."""
        try:
            return CONVS[self.spatial][0](**self.kwargs, quant=quant, dtype=dtype)
        except ValueError as error:   # e.g. a kernel larger than the padded input
            raise NotSupported(str(error)) from error


def conv_geometry(node: onnx.NodeProto, x: Value, w: Value, bias: bool) -> ConvGeometry:
    """Shapes and attributes of a Conv-like node (Conv, ConvInteger, QLinearConv, a fused QDQ Conv)."""
    attrs = attributes(node, CONV_ATTRIBUTES)
    if len(x.shape) != len(w.shape) or len(x.shape) < 3:
        raise NotSupported(f"{node.op_type} input of shape {x.shape} with weights {w.shape}")
    spatial = len(x.shape) - 2
    if spatial not in CONVS:
        raise NotSupported(f"{node.op_type} with {spatial} spatial dims (1-D, 2-D and 3-D convolutions)")
    kernel, sizes = list(w.shape[2:]), list(x.shape[2:])
    if attrs["kernel_shape"] is not None and list(attrs["kernel_shape"]) != kernel:
        raise NotSupported(f"kernel_shape={list(attrs['kernel_shape'])} differs from the weights' {kernel}")
    strides = list(attrs["strides"] or [1] * spatial)
    dilations = list(attrs["dilations"] or [1] * spatial)
    mode = attrs["auto_pad"]
    if mode in AUTO_PADS:
        pairs = [tuple(p) for p in auto_pad(mode, sizes, kernel, strides, dilations)]
    elif mode == "NOTSET":
        pads = list(attrs["pads"] or [0] * 2 * spatial)
        pairs = [(pads[a], pads[a + spatial]) for a in range(spatial)]
    else:
        raise NotSupported(f"auto_pad={mode!r}")
    group = int(attrs["group"])
    n, c = x.shape[:2]
    if w.shape[1] * group != c:
        raise NotSupported(f"weights {w.shape} with group={group} for {c} input channels")
    kwargs = dict(in_channels=c, out_channels=w.shape[0], kernel_size=tuple(kernel), stride=tuple(strides),
                  padding=tuple(pairs), dilation=tuple(dilations), groups=group, bias=bias, batch=n,
                  **dict(zip(CONVS[spatial][1], sizes)))
    return ConvGeometry(kwargs, spatial)


def lower_conv(node: onnx.NodeProto, values: Sequence[Value | None], floats: Floats = FLOAT32) -> Lowering:
    """ONNX Conv (inputs X, W, optional B) as a Conv1d, Conv2d or Conv3d of its float dtype (one of
    ``floats``)."""
    x, w, b = values[0], values[1], _input(values, 2)
    dtype = _float(node, values, floats)
    geometry = conv_geometry(node, x, w, b is not None)
    return Lowering(geometry.op(dtype=dtype), lambda inputs: ([a for a in inputs[1:3] if a is not None], {}))


@dataclass(frozen=True)
class Quantization:
    """The zero-point and scale inputs of a quantized node as a QuantSpec and the kernel's
    quantization parameters (``params(inputs)``: ONNX parameter names, a missing optional zero
    point as 0)."""

    spec: QuantSpec
    params: Callable[[Inputs], dict]


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


def _bias(values: Sequence[Value | None], index: int | None, output: np.dtype) -> Callable | None:
    """How the kernel's bias comes from the node's inputs (None: no bias): input ``index`` as given, or
    for a float output an int32 bias dequantized as DequantizeLinear does (``b * scale`` in float32, the
    scale at input ``index + 1``; a fused QDQ node)."""
    if index is None or _input(values, index) is None:
        return None
    if output == np.float32 and np.issubdtype(values[index].dtype, np.integer):   # scale per tensor or column
        return lambda inputs: inputs[index].astype(np.float32) * np.asarray(inputs[index + 1], np.float32)
    return lambda inputs: inputs[index]


def _quantized_conv(node: onnx.NodeProto, values: Sequence[Value | None], weights: int,
                    names: dict[int, str], output: np.dtype, bias: int | None) -> Lowering:
    """A quantized Conv-like node: activations input 0, weights input ``weights``, parameters
    ``names``, the bias at input ``bias`` (None: no bias input)."""
    x, w = values[0], values[weights]
    bias_of = _bias(values, bias, output)
    geometry = conv_geometry(node, x, w, bias_of is not None)
    quant = quantization(node, values, w.shape[0], weights, names, output)
    return Lowering(geometry.op(quant.spec), lambda inputs: (
        [inputs[weights]] + ([bias_of(inputs)] if bias_of else []), quant.params(inputs)))


def lower_conv_integer(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX ConvInteger (x, w, optional zero points) as a quantized ConvNd with a raw int32 output."""
    return _quantized_conv(node, values, 1, INTEGER_PARAMS, np.dtype(np.int32), None)


def lower_qlinear_conv(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX QLinearConv as a quantized ConvNd with a requantized uint8/int8 output (int32 bias)."""
    return _quantized_conv(node, values, 3, QLINEAR_PARAMS, values[7].dtype, 8)


# ---------------------------------------------------------------- matrix multiplies


@dataclass(frozen=True)
class MatmulShape:
    """An ONNX MatMul's operands (numpy semantics: 1-D operands promoted, batch dims broadcast) as one
    Matmul: with a 2-D B the batch folds into A's rows; else the kernel takes the batch dims (operands
    broadcast to them)."""

    m: int
    n: int
    k: int
    batch: tuple[int, ...]
    a_vector: bool
    b_vector: bool
    b_batched: bool

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
        return cls(a2[-2], b2[-1], a2[-1], tuple(batch), a_vector, b_vector, len(b2) > 2)

    @property
    def rows(self) -> int:
        """Rows of the kernel's A: the batch folds into them when B has no batch dims."""
        return self.m * (1 if self.b_batched else int(np.prod(self.batch)))

    def op(self, quant: QuantSpec | None = None, dtype: str = "float32") -> Matmul:
        """The loopopt op (NotSupported with the op model's reason if it refuses the shape)."""
        try:
            return Matmul(self.rows, self.n, self.k, batch=self.batch if self.b_batched else (), quant=quant,
                          dtype=dtype, out_dtype=dtype)   # ONNX's output type: a float16 kernel stores it
        except (ValueError, TypeError) as error:
            raise NotSupported(str(error)) from error

    def left(self, a: np.ndarray) -> np.ndarray:
        """A as the op takes it (a vector promoted; the batch broadcast, or folded into the rows)."""
        a2 = a[None, :] if self.a_vector else a
        if self.b_batched:
            return np.broadcast_to(a2, (*self.batch, self.m, self.k))
        return a2.reshape(self.rows, self.k)

    def right(self, b: np.ndarray) -> np.ndarray:
        """B as the op takes it."""
        b2 = b[:, None] if self.b_vector else b
        return np.broadcast_to(b2, (*self.batch, self.k, self.n)) if self.b_batched else b2

    def result(self, out: np.ndarray) -> list[np.ndarray]:
        """The kernel's output shaped as ONNX MatMul's output."""
        out = out.reshape(*self.batch, self.m, self.n)
        if self.a_vector:
            out = out[..., 0, :]
        return [out[..., 0] if self.b_vector else out]

    @property
    def note(self) -> str:
        return f"batch {self.batch} folded into the rows" if self.batch and not self.b_batched else ""


def lower_matmul(node: onnx.NodeProto, values: Sequence[Value | None],
                 floats: Floats = FLOAT32) -> Lowering:
    """ONNX MatMul (numpy semantics) as a Matmul of its float dtype (of ``floats``; see MatmulShape)."""
    attributes(node, {})
    dtype = _float(node, values, floats)
    shape = MatmulShape.of(node, values[0].shape, values[1].shape)
    return Lowering(shape.op(dtype=dtype), lambda inputs: ([shape.right(inputs[1])], {}), shape.left,
                    shape.result, shape.note)


def _quantized_matmul(node: onnx.NodeProto, values: Sequence[Value | None], weights: int,
                      names: dict[int, str], output: np.dtype) -> Lowering:
    """A quantized MatMul-like node (B, input ``weights``: its columns are the channels, so a
    per-column scale or zero point is per channel)."""
    attributes(node, {})
    shape = MatmulShape.of(node, values[0].shape, values[weights].shape)
    quant = quantization(node, values, shape.n, weights, names, output)
    return Lowering(shape.op(quant.spec),
                    lambda inputs: ([shape.right(inputs[weights])], quant.params(inputs)),
                    shape.left, shape.result, shape.note)


def lower_matmul_integer(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX MatMulInteger (a, b, optional zero points) as a quantized Matmul with a raw int32 output."""
    return _quantized_matmul(node, values, 1, INTEGER_PARAMS, np.dtype(np.int32))


def lower_qlinear_matmul(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """ONNX QLinearMatMul as a quantized Matmul with a requantized uint8/int8 output."""
    return _quantized_matmul(node, values, 3, QLINEAR_PARAMS, values[7].dtype)


GEMM_ATTRIBUTES = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0,
                   "broadcast": 0}   # opset < 7: C broadcasts only when set; numpy broadcasting covers both


def lower_gemm(node: onnx.NodeProto, values: Sequence[Value | None], floats: Floats = FLOAT32) -> Lowering:
    """ONNX Gemm ``alpha * A' @ B' + beta * C`` as a Gemm of its float dtype (of ``floats``) called
    ``kernel(A, B, C)`` (a scalar C as shape (1,))."""
    attrs = attributes(node, GEMM_ATTRIBUTES)
    dtype = _float(node, values, floats)
    a, b, c = values[0].shape, values[1].shape, _input(values, 2)
    if len(a) != 2 or len(b) != 2:
        raise NotSupported(f"Gemm of shapes {a} and {b} (2-D operands)")
    trans_a, trans_b = bool(attrs["transA"]), bool(attrs["transB"])
    (m, k), (k2, n) = (a[::-1] if trans_a else a), (b[::-1] if trans_b else b)
    if k != k2:
        raise NotSupported(f"Gemm of shapes {a} and {b} with transA={int(trans_a)}, transB={int(trans_b)}")
    c_shape = None if c is None else (c.shape or (1,))
    try:
        op = Gemm(m, n, k, trans_a=trans_a, trans_b=trans_b, alpha=float(attrs["alpha"]),
                  beta=float(attrs["beta"]), c_shape=c_shape, dtype=dtype, out_dtype=dtype)
    except (ValueError, TypeError) as error:
        raise NotSupported(f"Gemm with {error}") from error
    return Lowering(op, lambda inputs: ([inputs[1]] + ([np.reshape(inputs[2], c_shape)] if c_shape else []),
                                        {}))


# ---------------------------------------------------------------- fused QDQ patterns

FUSED_DOMAIN = "loopopt.qdq"
# The inputs of a fused node, in QLinearConv's order: x, x_scale, x_zero_point, w, w_scale, w_zero_point,
# y_scale, y_zero_point (both empty: a float output), bias (int32; a float output: int32 with its scale
# as input 9, or float32).
FLOAT_PARAMS = {1: "x_scale", 2: "x_zero_point", 4: "w_scale", 5: "w_zero_point"}


def _fused_output(values: Sequence[Value | None]) -> tuple[dict[int, str], np.dtype]:
    """The parameters and output dtype of a fused node: requantized if it has a y_zero_point, else float32."""
    y = _input(values, 7)
    return (FLOAT_PARAMS, np.dtype(np.float32)) if y is None else (QLINEAR_PARAMS, y.dtype)


def lower_qdq_conv(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """DequantizeLinear (x, w, bias) -> Conv (-> QuantizeLinear) as a quantized ConvNd (requantized, or
    dequantized float32 without the QuantizeLinear)."""
    names, output = _fused_output(values)
    return _quantized_conv(node, values, 3, names, output, 8)


def lower_qdq_matmul(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """DequantizeLinear (a, b) -> MatMul (-> QuantizeLinear) as a quantized Matmul."""
    return _quantized_matmul(node, values, 3, *_fused_output(values))


def lower_qdq_gemm(node: onnx.NodeProto, values: Sequence[Value | None]) -> Lowering:
    """DequantizeLinear (A, B, C) -> Gemm (-> QuantizeLinear), alpha = 1, not transA, C (if any) a
    per-column bias with beta = 1: a quantized Matmul, or with C a quantized 1x1 Conv2d over a batch
    of m (a quantized Matmul has no bias)."""
    attrs = attributes(node, GEMM_ATTRIBUTES)
    names, output = _fused_output(values)
    a, b, c = values[0].shape, values[3].shape, _input(values, 8)
    trans_b = bool(attrs["transB"])
    if len(a) != 2 or len(b) != 2 or attrs["transA"]:
        raise NotSupported(f"a quantized Gemm of shapes {a} and {b} with transA={attrs['transA']} "
                           "(2-D operands, transA=0)")
    (m, k), (k2, n) = a, (b[::-1] if trans_b else b)
    if k != k2:
        raise NotSupported(f"Gemm of shapes {a} and {b} with transB={int(trans_b)}")
    if attrs["alpha"] != 1 or (c is not None and attrs["beta"] != 1):
        raise NotSupported(f"a quantized Gemm with alpha={attrs['alpha']}, beta={attrs['beta']} (1 and 1)")
    if c is not None and c.shape not in ((n,), (1, n)):
        raise NotSupported(f"a quantized Gemm's C of shape {c.shape} (a bias per column: ({n},) or (1, {n}))")
    bias_of = _bias(values, 8, output)
    quant = quantization(node, values, n, 3, names, output)
    try:
        op = (Matmul(m, n, k, trans_b=trans_b, quant=quant.spec) if bias_of is None else
              Conv2d(k, n, 1, bias=True, batch=m, height=1, width=1, quant=quant.spec))
    except (ValueError, TypeError) as error:
        raise NotSupported(str(error)) from error
    if bias_of is None:
        return Lowering(op, lambda inputs: ([inputs[3]], quant.params(inputs)))

    def constants(inputs: Inputs) -> tuple[list[np.ndarray], dict]:
        w = inputs[3] if trans_b else inputs[3].T
        return [w.reshape(n, k, 1, 1), np.reshape(bias_of(inputs), n)], quant.params(inputs)

    return Lowering(op, constants, lambda x: x.reshape(m, k, 1, 1), lambda out: [out.reshape(m, n)],
                    "as a 1x1 Conv2d over a batch of m (for the bias)")


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


FUSED: dict[str, Lower] = {
    "QDQConv": lower_qdq_conv,
    "QDQMatMul": lower_qdq_matmul,
    "QDQGemm": lower_qdq_gemm,
}

TABLES = {"": LOWERINGS, "ai.onnx": LOWERINGS, FUSED_DOMAIN: FUSED}


def lowerable(node: onnx.NodeProto) -> bool:
    """True if ``node`` is a compute node: an op type of ``LOWERINGS``, or a fused node (``FUSED``)."""
    return node.op_type in TABLES.get(node.domain, {})


FLOAT_LOWERINGS = {"Conv": lower_conv, "MatMul": lower_matmul, "Gemm": lower_gemm}


def lower(node: onnx.NodeProto, values: Sequence[Value | None], floats: Floats = FLOAT32) -> Lowering:
    """The lowering of a compute node (``lowerable``); NotSupported if the op model cannot express it.
    ``floats``: the float dtypes the kernels take (a float node of another: NotSupported naming it)."""
    if TABLES[node.domain] is LOWERINGS and node.op_type in FLOAT_LOWERINGS:
        return FLOAT_LOWERINGS[node.op_type](node, values, floats)
    return TABLES[node.domain][node.op_type](node, values)
