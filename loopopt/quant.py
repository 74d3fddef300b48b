"""Quantization: the spec of a quantized op, calibration helpers and exact references.

Conventions are those of ONNX ``QuantizeLinear``/``DequantizeLinear``/``QLinearConv``
(and PyTorch's quantized conv): ``real = scale * (q - zero_point)``, quantization
``q = saturate(round_half_to_even(x / scale) + zero_point)`` in float32.

The references here define the contract of DESIGN.md "Quantization": integer
accumulators are exact (computed in int64, checked to fit int32) and requantized
outputs are specified operation by operation so that generated C kernels can
match them bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .reference import Pads, PerDim, conv_reference, matmul_reference

if TYPE_CHECKING:
    from .activation import Clip

ACTIVATIONS = ("uint8", "int8")
WEIGHTS = ("int8", "uint8")
TERNARY = "ternary"                  # weights in {-1, 0, +1}, given as int8, symmetric (zero point 0)
BINARY = "binary"                    # activations and weights in {-1, +1}, given as int8 (zero point 0)
WEIGHT_KINDS = WEIGHTS + (TERNARY, BINARY)
BINARY_OUTPUTS = ("float32", "int32")
OUTPUTS = ("float32", "uint8", "int8", "int32")
PARAM_NAMES = ("x_scale", "x_zero_point", "w_scale", "w_zero_point", "y_scale", "y_zero_point")


def symmetric_zero_point(dtype: str) -> int:
    """The zero point of symmetric quantization to ``dtype``: 0 for int8 (and ternary weights), 128
    for uint8 (the middle of its range, as ``quantize(..., symmetric=True)`` and ONNX Runtime's
    symmetric uint8 use)."""
    return 128 if dtype == "uint8" else 0


@dataclass(frozen=True)
class QuantSpec:
    """How an op is quantized (the ONNX ``QLinearConv``/``ConvInteger`` type constraints).

    ``activation``: ``"uint8"`` or ``"int8"``, any zero point in its range (per tensor).
    ``weight``: ``"int8"`` or ``"uint8"``, per output channel if ``per_channel``; with
    ``weight_symmetric`` the weight zero point is ``symmetric_zero_point(weight)`` (0 for int8,
    128 for uint8), else any value in range. ``"ternary"``: values in {-1, 0, +1} given as int8
    (BitNet b1.58), zero point 0 (so ``weight_symmetric`` must stay True), a scale per tensor or
    per output channel; stored one byte per weight, or 2 bits with ``Schedule.weight_format("i2_s")``.
    ``activation="binary", weight="binary"`` (always together): values in {-1, +1} given as int8,
    zero points 0, output ``"int32"`` or ``"float32"``; the kernel packs them to bits (XNOR +
    popcount, ``targets/binary.py``).
    ``output``: dequantized ``"float32"``, requantized ``"uint8"``/``"int8"``, or ``"int32"``: the
    raw accumulators ``sum (x - zx) * (w - zw[k])``
    (+ an int32 bias if the op has one), no scales (ONNX ``ConvInteger``/``MatMulInteger``).
    """

    activation: str = "uint8"
    per_channel: bool = True
    weight_symmetric: bool = True
    output: str = "float32"
    weight: str = "int8"

    def __post_init__(self) -> None:
        for name, allowed in (("activation", ACTIVATIONS + (BINARY,)), ("weight", WEIGHT_KINDS),
                              ("output", OUTPUTS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"QuantSpec: {name}={getattr(self, name)!r} is not supported; "
                                 f"allowed: {', '.join(map(repr, allowed))}")
        for name in ("per_channel", "weight_symmetric"):
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"QuantSpec: {name}={value!r} must be a bool (True or False)")
        if (self.activation == BINARY) != (self.weight == BINARY):
            raise ValueError(f"QuantSpec: binary activations and weights go together (XNOR + popcount); got "
                             f"activation={self.activation!r}, weight={self.weight!r}")
        if self.binary and self.output not in BINARY_OUTPUTS:
            raise ValueError(f"QuantSpec: a binary op's output is 'int32' or 'float32', not {self.output!r}")
        if self.weight in (TERNARY, BINARY) and not self.weight_symmetric:
            raise ValueError(f"QuantSpec: weight={self.weight!r} is symmetric (zero point 0); "
                             f"weight_symmetric=False is not allowed with it")

    def __repr__(self) -> str:
        # int8 weights (the default) are not named, so specs made before the weight field existed keep
        # their signature (kernel headers, tuning logs)
        weight = f", weight={self.weight!r}" if self.weight != "int8" else ""
        return (f"QuantSpec(activation={self.activation!r}, per_channel={self.per_channel!r}, "
                f"weight_symmetric={self.weight_symmetric!r}, output={self.output!r}{weight})")

    @property
    def activation_dtype(self) -> np.dtype:
        """Storage dtype of the quantized activations as given (binary: int8)."""
        return np.dtype("int8" if self.activation == BINARY else self.activation)

    @property
    def weight_dtype(self) -> np.dtype:
        """Storage dtype of the quantized weights as given (ternary, binary: int8)."""
        return np.dtype("int8" if self.weight in (TERNARY, BINARY) else self.weight)

    @property
    def binary(self) -> bool:
        """True if activations and weights are binary (values -1, +1)."""
        return self.weight == BINARY

    @property
    def ternary(self) -> bool:
        """True if the weights are ternary (values -1, 0, +1)."""
        return self.weight == TERNARY

    @property
    def requantized(self) -> bool:
        """True if the output is requantized to uint8/int8."""
        return self.output in ("uint8", "int8")

    @property
    def dequantized(self) -> bool:
        """True if the output is dequantized float32 (the only output with a float bias)."""
        return self.output == "float32"

    @property
    def scaled(self) -> bool:
        """True if a call takes scales: every output but the raw int32 accumulators."""
        return self.output != "int32"

    @property
    def bias_dtype(self) -> np.dtype:
        """float32 for a float32 output; int32 otherwise (scale ``sx * sw[k]``, or raw for int32)."""
        return np.dtype(np.float32 if self.dequantized else np.int32)

    @property
    def parameters(self) -> tuple[str, ...]:
        """The parameters a call takes (ONNX names): the zero points, the scales unless the output is
        int32, and ``y_scale``/``y_zero_point`` for a requantized output."""
        names = {"x_zero_point", "w_zero_point"}
        if self.scaled:
            names |= {"x_scale", "w_scale"}
        if self.requantized:
            names |= {"y_scale", "y_zero_point"}
        return tuple(n for n in PARAM_NAMES if n in names)


def _qrange(dtype: np.dtype | str) -> tuple[int, int]:
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


def _channel_shape(ndim: int, axis: int | None, channels: int) -> tuple[int, ...]:
    """Shape that broadcasts a per-channel vector along ``axis`` of an ``ndim`` array."""
    if axis is None:
        return ()
    shape = [1] * ndim
    shape[axis] = channels
    return tuple(shape)


def _norm_axis(axis: int | None, ndim: int) -> int | None:
    if axis is None:
        return None
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis={axis} is out of range for an array with {ndim} dimensions")
    return axis % ndim


def quantize_linear(array: Any, scale: Any, zero_point: Any, axis: int | None = None) -> np.ndarray:
    """ONNX ``QuantizeLinear``: ``saturate(rint(float32(x) / scale) + zero_point)``.

    The storage dtype is the dtype of ``zero_point`` (uint8 or int8). With ``axis``,
    ``scale`` and ``zero_point`` are 1-D and apply along that axis of ``array``.
    """
    x = np.asarray(array, dtype=np.float32)
    zp = np.asarray(zero_point)
    if zp.dtype not in (np.uint8, np.int8):
        raise TypeError(f"zero_point dtype {zp.dtype} must be uint8 or int8")
    axis = _norm_axis(axis, x.ndim)
    shape = _channel_shape(x.ndim, axis, np.size(scale))
    s = np.asarray(scale, dtype=np.float32).reshape(shape)
    q = np.rint(x / s) + zp.astype(np.float32).reshape(shape)
    lo, hi = _qrange(zp.dtype)
    return np.clip(q, lo, hi).astype(zp.dtype)


def quantize(array: Any, dtype: str, axis: int | None = None,
             symmetric: bool | None = None) -> tuple[np.ndarray, Any, Any]:
    """Min/max calibration then ``quantize_linear``: returns ``(q, scale, zero_point)``.

    ``dtype`` is ``"uint8"`` (default asymmetric) or ``"int8"`` (default symmetric).
    Per tensor if ``axis`` is None (scalar ``np.float32`` scale, scalar zero-point),
    else per channel along ``axis`` (1-D scale and zero-point). The range always
    includes 0, so real zero is exactly representable.

    * asymmetric (ONNX ``DynamicQuantizeLinear``): ``rmin = min(0, min x)``,
      ``rmax = max(0, max x)``, ``scale = (rmax - rmin) / (qmax - qmin)``,
      ``zero_point = saturate(rint(qmin - rmin / scale))``.
    * symmetric (ONNX Runtime quantization tool, range [-127, 127]):
      ``scale = max|x| / 127``, ``zero_point = 0`` for int8 and 128 for uint8.
      (PyTorch's default observer uses ``max|x| / 127.5``; any positive scale is
      accepted by the kernels, so parameters can be brought across either way.)

    A channel that is all zero gets ``scale = 1``, never 0. Scales are computed in
    float32 as ONNX does.
    """
    if dtype not in ACTIVATIONS:
        raise ValueError(f"quantize: dtype={dtype!r} is not supported; allowed: 'uint8', 'int8'")
    x = np.asarray(array, dtype=np.float32)
    if not np.all(np.isfinite(x)):
        raise ValueError("quantize: array contains non-finite values (nan or inf)")
    if x.size == 0:
        raise ValueError("quantize: array is empty")
    if symmetric is None:
        symmetric = dtype == "int8"
    axis = _norm_axis(axis, x.ndim)
    reduce_axes = tuple(i for i in range(x.ndim) if i != axis)
    rmin = np.minimum(x.min(axis=reduce_axes), np.float32(0))
    rmax = np.maximum(x.max(axis=reduce_axes), np.float32(0))
    qmin, qmax = _qrange(dtype)
    if symmetric:
        scale = np.maximum(-rmin, rmax) / np.float32(127)
        zp = np.full(scale.shape, 0 if dtype == "int8" else 128, dtype=np.float32)
    else:
        scale = (rmax - rmin) / np.float32(qmax - qmin)
    scale = np.where(scale > 0, scale, np.float32(1)).astype(np.float32)
    if not symmetric:
        zp = np.clip(np.rint(np.float32(qmin) - rmin / scale), qmin, qmax)
    zero_point = zp.astype(dtype)
    q = quantize_linear(x, scale, zero_point, axis)
    if axis is None:
        return q, np.float32(scale), zero_point[()]
    return q, scale, zero_point


def quantize_ternary(array: Any, axis: int | None = None) -> tuple[np.ndarray, Any, Any]:
    """BitNet b1.58's absmean quantization to ternary weights: ``scale = mean |w|`` (per tensor, or
    per channel along ``axis``), ``q = clip(rint(w / scale), -1, 1)`` as int8; returns
    ``(q, scale, zero_point)`` like ``quantize`` (zero point 0). An all-zero channel gets scale 1."""
    return _absmean(array, axis, "quantize_ternary", lambda x: np.clip(np.rint(x), -1, 1))


def quantize_binary(array: Any, axis: int | None = None) -> tuple[np.ndarray, Any, Any]:
    """Binary quantization (XNOR-Net): ``q = +1 where x >= 0 else -1`` as int8, ``scale = mean |x|``
    per tensor or per channel along ``axis``; returns ``(q, scale, zero_point)`` (zero point 0)."""
    return _absmean(array, axis, "quantize_binary", lambda x: np.where(x >= 0, 1, -1))


def _absmean(array: Any, axis: int | None, what: str, levels) -> tuple[np.ndarray, Any, Any]:
    """``levels(x / scale)`` as int8 with ``scale = mean |x|`` (1 where that is 0), zero point 0."""
    x = np.asarray(array, dtype=np.float32)
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"{what}: array is empty or contains non-finite values (nan or inf)")
    axis = _norm_axis(axis, x.ndim)
    reduce_axes = tuple(i for i in range(x.ndim) if i != axis)
    scale = np.abs(x).mean(axis=reduce_axes, dtype=np.float64).astype(np.float32)
    scale = np.where(scale > 0, scale, np.float32(1)).astype(np.float32)
    shape = _channel_shape(x.ndim, axis, np.size(scale))
    q = levels(x / scale.reshape(shape)).astype(np.int8)
    if axis is None:
        return q, np.float32(scale), np.int8(0)
    return q, scale, np.zeros(scale.shape, np.int8)


def dequantize(q: np.ndarray, scale: Any, zero_point: Any, axis: int | None = None) -> np.ndarray:
    """ONNX ``DequantizeLinear``: float32 ``(q - zero_point) * scale`` (per channel: ``axis``)."""
    q = np.asarray(q)
    axis = _norm_axis(axis, q.ndim)
    shape = _channel_shape(q.ndim, axis, np.size(scale))
    s = np.asarray(scale, dtype=np.float32).reshape(shape)
    zp = np.asarray(zero_point, dtype=np.int32).reshape(shape)
    return (q.astype(np.int32) - zp).astype(np.float32) * s


@dataclass(frozen=True, eq=False)
class QuantParams:
    """Validated, normalized quantization parameters of one kernel call.

    Weight parameters are always arrays of length K (broadcast when per tensor); ``w_scale``
    and ``x_scale`` are None for an int32 output, ``y_scale``/``y_zero_point`` None unless the
    output is requantized; ``bias`` is None when no bias was given, else a length-K array of
    ``spec.bias_dtype``.
    """

    x_scale: np.float32 | None
    x_zero_point: np.int32
    w_scale: np.ndarray | None
    w_zero_point: np.ndarray
    y_scale: np.float32 | None = None
    y_zero_point: np.int32 | None = None
    bias: np.ndarray | None = None


def _check_scale(name: str, value: Any, size: int | None) -> np.ndarray:
    """float32 array of shape (size,) (or () if size is None) with finite positive values."""
    arr = np.asarray(value)
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"{name} must be a real number or array of them, got dtype {arr.dtype}")
    arr = _check_shape(name, arr.astype(np.float32), size)
    bad = ~(np.isfinite(arr) & (arr > 0))
    if np.any(bad):
        raise ValueError(f"{name}={float(arr[bad].flat[0])} is invalid: "
                         f"scales must be finite and > 0 (as float32)")
    return arr


def _check_zero_point(name: str, value: Any, size: int | None, dtype: str | np.dtype,
                      required: tuple[int, str] | None = None) -> np.ndarray:
    """int32 array of shape (size,) (or ()) with values in the range of ``dtype`` (and equal to
    ``required[0]``, for the reason ``required[1]``, if given). A byte-typed zero point must have
    ``dtype`` itself (ONNX: a zero point has its tensor's type); wider integers are taken by value."""
    arr = np.asarray(value)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be an integer or integer array, got dtype {arr.dtype}")
    if arr.dtype.itemsize == 1 and arr.dtype != np.dtype(dtype):
        raise TypeError(f"{name} has dtype {arr.dtype} but applies to {dtype} values: pass it as {dtype} "
                        f"(a zero point has its tensor's dtype) or as a Python int")
    arr = _check_shape(name, arr.astype(np.int64), size)
    lo, hi = _qrange(dtype)
    bad = (arr < lo) | (arr > hi)
    if np.any(bad):
        raise ValueError(f"{name}={int(arr[bad].flat[0])} is out of range for {dtype} "
                         f"(allowed {lo}..{hi})")
    if required is not None and np.any(arr != required[0]):
        value, why = required
        raise ValueError(f"{name}={int(arr[arr != value].flat[0])} must be {value}: {why}")
    return arr.astype(np.int32)


def _check_shape(name: str, arr: np.ndarray, size: int | None) -> np.ndarray:
    if size is None:
        if arr.size != 1:
            raise ValueError(f"{name} has shape {arr.shape}; "
                             f"a per-tensor parameter must be a scalar")
        return arr.reshape(())
    if arr.shape != (size,):
        raise ValueError(f"{name} has shape {arr.shape}; a per-channel parameter must have "
                         f"shape ({size},), one value per output channel")
    return arr


def _check_dtype(what: str, array: Any, spec: QuantSpec, field: str) -> None:
    """TypeError unless ``array`` (if given) has the storage dtype of ``spec.<field>``."""
    expected = getattr(spec, f"{field}_dtype")
    if array is not None and np.asarray(array).dtype != expected:
        raise TypeError(f"{what} dtype {np.asarray(array).dtype} does not match "
                        f"QuantSpec({field}={getattr(spec, field)!r}): expected {expected}")


def check_values(what: str, array: np.ndarray, allowed: tuple[int, ...]) -> None:
    """ValueError naming the first value of ``array`` outside ``allowed`` and its index."""
    bad = np.argwhere(~np.isin(array, allowed))
    if bad.size:
        index = tuple(int(i) for i in bad[0])
        names = {(-1, 0, 1): "ternary weights must be -1, 0 or +1",
                 (-1, 1): f"binary {what}s must be -1 or +1"}
        raise ValueError(f"{names[allowed]}: {what}{list(index)} = {int(array[index])} "
                         f"({len(bad)} value(s) outside)")


def _check_given(spec: QuantSpec, values: dict[str, Any]) -> None:
    """ValueError naming the parameters ``spec`` requires that are missing, or those it refuses."""
    kind = {"float32": "is dequantized", "int32": "is the raw int32 accumulators (no scales)"}
    what = f"output={spec.output!r} {kind.get(spec.output, 'is requantized')}"
    wanted = spec.parameters
    missing = [n for n in wanted if values[n] is None]
    if missing:
        raise ValueError(f"{what}: {' and '.join(missing)} {'are' if len(missing) > 1 else 'is'} required "
                         f"(a call takes {', '.join(wanted)})")
    extra = [f"{n}={values[n]!r}" for n in values if values[n] is not None and n not in wanted]
    if extra:
        raise ValueError(f"{what}: {' and '.join(extra)} must not be given")


def check_quant_params(spec: QuantSpec, k_channels: int, x_scale: Any = None, x_zero_point: Any = None,
                       w_scale: Any = None, w_zero_point: Any = None, y_scale: Any = None,
                       y_zero_point: Any = None, *, xq: np.ndarray | None = None,
                       wq: np.ndarray | None = None, bias: Any = None) -> QuantParams:
    """Validate the parameters of a quantized kernel call against ``spec``.

    ``k_channels`` is the number of output channels K (matmul: columns N). The parameters
    ``spec.parameters`` names are required, the others must be None (an int32 output takes
    only the zero points). Optional ``xq``/``wq``/``bias`` are checked too: ``xq`` must have
    the activation dtype, ``wq`` the weight dtype, ``bias`` length K of an integer dtype
    fitting int32 (uint8/int8/int32 output) or a floating dtype (float32 output).
    Raises ValueError for bad values/shapes/combinations, TypeError for bad dtypes.
    """
    _check_dtype("input", xq, spec, "activation")
    _check_dtype("weight", wq, spec, "weight")
    if wq is not None and spec.weight in (TERNARY, BINARY):
        check_values("weight", np.asarray(wq), (-1, 0, 1) if spec.ternary else (-1, 1))
    if xq is not None and spec.binary:
        check_values("input", np.asarray(xq), (-1, 1))
    _check_given(spec, dict(zip(PARAM_NAMES, (x_scale, x_zero_point, w_scale, w_zero_point, y_scale,
                                              y_zero_point), strict=True)))
    w_size = k_channels if spec.per_channel else None
    sx = sw = sy = zy = None
    if spec.scaled:
        sx = np.float32(_check_scale("x_scale", x_scale, None))
        sw = np.broadcast_to(_check_scale("w_scale", w_scale, w_size), (k_channels,)).copy()
    zx = _check_zero_point("x_zero_point", x_zero_point, None, spec.activation_dtype,
                           (0, "QuantSpec(activation='binary')") if spec.binary else None)
    symmetric = None
    if spec.weight_symmetric:
        symmetric = (symmetric_zero_point(spec.weight),
                     f"QuantSpec(weight={spec.weight!r}, weight_symmetric=True)")
    zw = _check_zero_point("w_zero_point", w_zero_point, w_size, spec.weight_dtype, symmetric)
    if spec.requantized:
        sy = np.float32(_check_scale("y_scale", y_scale, None))
        zy = np.int32(_check_zero_point("y_zero_point", y_zero_point, None, spec.output))
    return QuantParams(x_scale=sx, x_zero_point=np.int32(zx), w_scale=sw,
                       w_zero_point=np.broadcast_to(zw, (k_channels,)).copy(),
                       y_scale=sy, y_zero_point=zy,
                       bias=None if bias is None else _check_bias(spec, bias, k_channels))


def check_call(spec: QuantSpec, k_channels: int, what: str, arrays: list,
               params: dict[str, Any]) -> QuantParams:
    """The validated parameters of a kernel call ``kernel(*arrays, **params)`` of the quantized op
    ``what`` (its repr, for the messages): ``params`` named as ``PARAM_NAMES`` (TypeError for another
    name, ValueError for a missing one), then ``check_quant_params`` on them and ``arrays`` (``xq, wq[,
    bias]``); a requantized output's multipliers must be normal float32 (``requant_multiplier``)."""
    unknown = sorted(set(params) - set(PARAM_NAMES))
    if unknown:
        raise TypeError(f"unknown quantization parameter(s) {', '.join(unknown)}; "
                        f"the names are {', '.join(PARAM_NAMES)} (as in ONNX QLinearConv)")
    missing = [n for n in spec.parameters if params.get(n) is None]
    if missing:
        raise ValueError(f"{what} is quantized: pass {', '.join(missing)} "
                         f"(kernel(x, w, b, {', '.join(f'{n}=...' for n in spec.parameters)}))")
    qp = check_quant_params(spec, k_channels, *(params.get(n) for n in PARAM_NAMES),
                            xq=arrays[0] if arrays else None, wq=arrays[1] if len(arrays) > 1 else None,
                            bias=arrays[2] if len(arrays) > 2 else None)
    if qp.y_scale is not None:
        requant_multiplier(qp.x_scale, qp.w_scale, qp.y_scale)   # raises if not a normal float32
    return qp


def clip_multiplier(clip_scale: Any) -> np.float32:
    """The float32 reciprocal of ``clip_scale`` (a float32) that ``Schedule.clip_quantized`` multiplies by."""
    return np.float32(1.0 / np.float64(np.float32(clip_scale)))


def clip_requantized(y: np.ndarray, y_scale: Any, y_zero_point: Any, clip: Clip, clip_scale: Any,
                     clip_zero_point: Any) -> np.ndarray:
    """The outputs of a kernel with ``Schedule.clip_quantized(clip)`` from its requantized outputs ``y``:
    ``saturate(rint(clip((y - y_zero_point) * y_scale) * clip_multiplier(clip_scale)) + clip_zero_point)``,
    each step rounded to float32. ONNX's DequantizeLinear -> Clip -> QuantizeLinear divides by the scale
    instead, the same wherever no quotient lies within a rounding of a half (the ONNX backend checks
    every value of a node's ``y`` at prepare before it fuses them)."""
    info = np.iinfo(y.dtype)
    values = (y.astype(np.float32) - np.float32(y_zero_point)) * np.float32(y_scale)
    clipped = clip.apply(values).astype(np.float32)
    quantized = np.rint(clipped * clip_multiplier(clip_scale)) + np.float32(clip_zero_point)
    return np.clip(quantized, info.min, info.max).astype(y.dtype)


def output_multipliers(spec: QuantSpec, qp: QuantParams, k_channels: int) -> np.ndarray | None:
    """The float32 multiplier of each output channel in the epilogue: ``requant_multiplier`` for a
    requantized output, ``sx * sw[k]`` for a float32 one, None for int32."""
    if spec.requantized:
        mult = np.broadcast_to(requant_multiplier(qp.x_scale, qp.w_scale, qp.y_scale), (k_channels,))
        return np.ascontiguousarray(mult, dtype=np.float32)
    if spec.scaled:
        return (np.float64(qp.x_scale) * qp.w_scale.astype(np.float64)).astype(np.float32)
    return None


def _check_bias(spec: QuantSpec, bias: Any, k_channels: int) -> np.ndarray:
    b = np.asarray(bias)
    if not spec.dequantized:
        if not np.issubdtype(b.dtype, np.integer):
            raise TypeError(f"bias dtype {b.dtype} does not match output={spec.output!r}: an integer "
                            f"output takes an int32 bias (requantized: scale x_scale * w_scale)")
        lo, hi = _qrange(np.int32)
        if b.size and (b.min() < lo or b.max() > hi):
            raise ValueError(f"bias values {b.min()}..{b.max()} do not fit int32")
    elif not np.issubdtype(b.dtype, np.floating):
        raise TypeError(f"bias dtype {b.dtype} does not match output='float32': "
                        f"a dequantized output takes a float32 bias")
    if b.shape != (k_channels,):
        raise ValueError(f"bias has shape {b.shape}; expected ({k_channels},)")
    return b.astype(spec.bias_dtype)


def _to_int32(acc: np.ndarray, what: str) -> np.ndarray:
    lo, hi = _qrange(np.int32)
    if acc.size and (acc.min() < lo or acc.max() > hi):
        raise OverflowError(f"{what} range {acc.min()}..{acc.max()} does not fit int32")
    return acc.astype(np.int32)


def qconv2d_accumulators(xq: np.ndarray, wq: np.ndarray, x_zero_point: Any, w_zero_point: Any,
                         stride: PerDim = 1, padding: Pads = 0, dilation: PerDim = 1,
                         groups: int = 1) -> np.ndarray:
    """Exact int32 ``acc[N,K,*OS] = sum((x - zx) * (w - zw[k]))`` of a quantized convolution
    (1, 2 or 3 spatial dims; ``padding`` per dim or per side, as ``reference.conv_reference``).

    ``xq[N,C,*S]``, ``wq[K,C/groups,*T]``; ``w_zero_point`` scalar or length K.
    Padding contributes 0 (padded x equals zx). Raises OverflowError if a sum does
    not fit int32.
    """
    k = wq.shape[0]
    xs = np.asarray(xq, dtype=np.int64) - np.int64(x_zero_point)
    zw = np.broadcast_to(np.asarray(w_zero_point, dtype=np.int64).reshape(-1), (k,))
    ws = np.asarray(wq, dtype=np.int64) - zw.reshape((k,) + (1,) * (wq.ndim - 1))
    acc = conv_reference(xs, ws, None, stride=stride, padding=padding, dilation=dilation, groups=groups,
                         acc_dtype=np.int64)
    return _to_int32(acc, "conv accumulator")


def qmatmul_accumulators(aq: np.ndarray, bq: np.ndarray, a_zero_point: Any, b_zero_point: Any,
                         trans_a: bool = False, trans_b: bool = False) -> np.ndarray:
    """Exact int32 ``acc[..., i, j] = sum_k (a[..., i, k] - za) * (b[..., k, j] - zb[j])`` (``a``, ``b``
    transposed in their last two axes when ``trans_a`` / ``trans_b``).

    ``b_zero_point`` is a scalar or has one value per output column j.
    """
    column_axis = bq.ndim - 2 if trans_b else bq.ndim - 1
    n = bq.shape[column_axis]
    a = np.asarray(aq, dtype=np.int64) - np.int64(a_zero_point)
    zb = np.broadcast_to(np.asarray(b_zero_point, dtype=np.int64).reshape(-1), (n,))
    b = np.asarray(bq, dtype=np.int64) - zb.reshape((n,) + (1,) * (bq.ndim - 1 - column_axis))
    return _to_int32(matmul_reference(a, b, np.int64, trans_a, trans_b), "matmul accumulator")


def qcontraction_accumulators(product, xq: np.ndarray, wq: np.ndarray, x_zero_point: Any,
                              w_zero_point: Any, channel_axis: int) -> np.ndarray:
    """Exact int32 ``acc = sum (x - zx) * (w - zw[k])`` of any two-input contraction whose float64
    reference is ``product(x, w)`` (exact: integer sums far below 2**53), the channel ``k`` along the
    weights' ``channel_axis`` (``w_zero_point`` scalar or one per channel)."""
    shape = [1] * np.ndim(wq)
    shape[channel_axis] = -1
    zw = np.broadcast_to(np.asarray(w_zero_point, dtype=np.int64).reshape(-1), (np.shape(wq)[channel_axis],))
    x = np.asarray(xq, dtype=np.int64) - np.int64(x_zero_point)
    w = np.asarray(wq, dtype=np.int64) - zw.reshape(shape)
    return _to_int32(np.rint(product(x, w)).astype(np.int64), "contraction accumulator")


def dequantize_output(acc: np.ndarray, x_scale: Any, w_scale: Any, bias_f32: Any = None,
                      axis: int = 1) -> np.ndarray:
    """Float32 ``acc * sx * sw[k] (+ bias[k])``, channel k along ``axis``.

    ``axis`` is 1 for conv (NCHW), -1 for matmul. Computed in float64 and rounded
    to float32 once: kernels match it within float32 rounding, not bit for bit.
    """
    acc = np.asarray(acc)
    axis = _norm_axis(axis, acc.ndim)
    shape = _channel_shape(acc.ndim, axis, acc.shape[axis])
    sw = np.broadcast_to(np.asarray(w_scale, dtype=np.float64).reshape(-1), (acc.shape[axis],))
    y = acc.astype(np.float64) * (np.float64(x_scale) * sw.reshape(shape))
    if bias_f32 is not None:
        y = y + np.asarray(bias_f32, dtype=np.float32).astype(np.float64).reshape(shape)
    return y.astype(np.float32)


def requant_multiplier(x_scale: Any, w_scale: Any, y_scale: Any) -> np.ndarray:
    """``m[k] = float32((float64(sx) * float64(sw[k])) / float64(sy))``, a float32 array.

    The scales are first taken as float32 (their stored type). Raises ValueError if
    some ``m[k]`` is not a finite normal float32 (kernels may flush denormals).
    """
    sx, sw, sy = (np.asarray(s, dtype=np.float32).astype(np.float64)
                  for s in (x_scale, w_scale, y_scale))
    m = np.atleast_1d((sx * sw) / sy).astype(np.float32)
    bad = ~(np.isfinite(m) & (m >= np.finfo(np.float32).tiny))
    if np.any(bad):
        raise ValueError(f"requantization multiplier x_scale*w_scale/y_scale={float(m[bad][0])} "
                         f"is not a finite normal positive float32")
    return m


def add_bias(acc: np.ndarray, bias_i32: Any = None, axis: int = 1) -> np.ndarray:
    """int32 ``acc + bias[k]``, channel k along ``axis`` (the int32 output of ``ConvInteger`` /
    ``MatMulInteger``, plus a bias if given). TypeError unless ``acc`` is int32, OverflowError if
    a sum leaves int32."""
    acc = np.asarray(acc)
    if acc.dtype != np.int32:
        raise TypeError(f"accumulators must be int32, got {acc.dtype}")
    if bias_i32 is None:
        return acc
    axis = _norm_axis(axis, acc.ndim)
    shape = _channel_shape(acc.ndim, axis, acc.shape[axis])
    return _to_int32(acc.astype(np.int64) + np.asarray(bias_i32, dtype=np.int64).reshape(shape),
                     "accumulator + bias")


def requantize_output(
acc: np.ndarray, x_scale: Any, w_scale: Any, y_scale: Any,
                      y_zero_point: Any, out_dtype: str, bias_i32: Any = None,
                      axis: int = 1) -> np.ndarray:
    """Requantize int32 accumulators to ``out_dtype`` (uint8/int8), channel k along ``axis``.

    Exactly, in this order (generated kernels must match bit for bit):

    1. ``a = acc + bias[k]`` in int32 (OverflowError if the sum leaves int32);
    2. ``m[k] = requant_multiplier(x_scale, w_scale, y_scale)`` (float32);
    3. ``p = float32(a) * m[k]``: int32 -> float32 rounds to nearest even, then one
       float32 multiply (no fused multiply-add);
    4. ``r = rint(p)``: round half to even;
    5. ``q = clamp(r + zy, qmin, qmax)`` exactly (saturating even beyond int32;
       equivalently clamp ``p`` to ``[qmin - zy, qmax - zy]`` in float32 before rounding).
    """
    a = add_bias(acc, bias_i32, axis)
    axis = _norm_axis(axis, a.ndim)
    k = a.shape[axis]
    shape = _channel_shape(a.ndim, axis, k)
    m = np.broadcast_to(requant_multiplier(x_scale, w_scale, y_scale), (k,)).reshape(shape)
    p = a.astype(np.float32) * m
    r = np.rint(p).astype(np.float64) + np.float64(int(y_zero_point))
    lo, hi = _qrange(out_dtype)
    return np.clip(r, lo, hi).astype(out_dtype)


def quant_error(reference_f32: np.ndarray, approx: np.ndarray) -> dict[str, float]:
    """Error of ``approx`` against ``reference_f32``: ``max_abs``, ``rel_l2``, ``sqnr_db``.

    ``rel_l2 = ||approx - ref|| / ||ref||``, ``sqnr_db = 10 log10(sum ref^2 / sum err^2)``
    (inf when the error is zero), computed in float64.
    """
    ref = np.asarray(reference_f32, dtype=np.float64)
    app = np.asarray(approx, dtype=np.float64)
    if ref.shape != app.shape:
        raise ValueError(f"quant_error: shapes differ: reference {ref.shape}, approx {app.shape}")
    err = app - ref
    signal, noise = float(np.sum(ref * ref)), float(np.sum(err * err))
    with np.errstate(divide="ignore"):
        rel = np.sqrt(noise / signal) if signal else (0.0 if noise == 0 else np.inf)
        sqnr = 10 * np.log10(signal / noise) if noise else np.inf
    return {"max_abs": float(np.max(np.abs(err), initial=0.0)), "rel_l2": float(rel),
            "sqnr_db": float(sqnr)}
