"""Kernels of quantized ops: called with ONNX ``QLinearConv`` parameter names.

``kernel(xq, wq, b, x_scale=, x_zero_point=, w_scale=, w_zero_point=, y_scale=, y_zero_point=)``
(``y_*`` only for a requantized output). ``prepare`` validates the parameters with
``quant.check_quant_params``, packs the arrays into the schedule's layouts and computes
the per-channel terms (multipliers, and the weight compensation table when the schedule
says ``compensation("packed")``) outside the timed ``run``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .buffers import aligned_copy, aligned_zeros
from .build import Buffers, Kernel
from .codegen.quantized import QuantPlan, parameters, tensor_type, weight_compensation, borders
from .ops import Conv2d
from .quant import QuantParams, check_quant_params, requant_multiplier

PAD_BYTES = 64    # readable bytes after every packed array (dot groups and byte gathers read ahead)
PARAM_NAMES = ("x_scale", "x_zero_point", "w_scale", "w_zero_point", "y_scale", "y_zero_point")


def channels(op) -> int:
    """Number of output channels K (matmul: columns N) that per-channel parameters run over."""
    return op.out_channels if isinstance(op, Conv2d) else op.n




class QuantizedKernel(Kernel):
    """A compiled schedule of a quantized op (integer or dequantize-on-the-fly arithmetic)."""

    def __init__(self, schedule, generated, module, plan: QuantPlan):
        super().__init__(schedule, generated, module)
        self.plan = plan

    @property
    def workspace_bytes(self) -> int:
        op = self.op
        size = lambda t: int(np.prod(self.schedule.layout_of(t).storage_shape(op.tensor(t).shape)))
        out = size(op.output) * (4 + (np.dtype(op.quant.output).itemsize if self.plan.integer else 0))
        return sum(size(t) for t in op.inputs) + out

    def check_params(self, arrays: tuple, params: dict[str, Any]) -> QuantParams:
        """Validated parameters of one call (ValueError/TypeError naming the bad value)."""
        unknown = sorted(set(params) - set(PARAM_NAMES))
        if unknown:
            raise TypeError(f"unknown quantization parameter(s) {', '.join(unknown)}; "
                            f"the names are {', '.join(PARAM_NAMES)} (as in ONNX QLinearConv)")
        missing = [n for n in PARAM_NAMES[:4] if params.get(n) is None]
        if missing:
            raise ValueError(f"{self.op!r} is quantized: pass {', '.join(missing)} "
                             f"(kernel(x, w, b, x_scale=..., x_zero_point=..., w_scale=..., w_zero_point=...))")
        bias = arrays[2] if len(arrays) > 2 else None
        qp = check_quant_params(self.op.quant, channels(self.op), *(params.get(n) for n in PARAM_NAMES),
                                xq=arrays[0] if arrays else None, wq=arrays[1] if len(arrays) > 1 else None,
                                bias=bias)
        if qp.y_scale is not None:
            requant_multiplier(qp.x_scale, qp.w_scale, qp.y_scale)   # raises if not a normal float32
        return qp

    def prepare(self, *arrays: np.ndarray, **params: Any) -> Buffers:
        """Validate, pack into the schedule's layouts, precompute per-channel terms."""
        op, plan = self.op, self.plan
        args = self.generated.arguments
        given = self._given(arrays)
        has_bias = getattr(op, "bias", False)
        for tensor, array in zip(args, given):
            if not isinstance(array, np.ndarray):
                raise TypeError(f"{tensor} must be a numpy array, got {type(array).__name__}")
        qp = self.check_params(tuple(given), params)
        storage: dict[str, np.ndarray] = {}
        for tensor, array in zip(op.inputs, given):
            shape = op.tensor(tensor).shape
            if array.shape != shape:
                raise ValueError(f"{tensor} has shape {array.shape}; {op!r} expects {shape}")
            storage[tensor] = self.schedule.layout_of(tensor).to_storage(array, PAD_BYTES)
        if has_bias:
            storage["B"] = qp.bias
        out_shape = self.schedule.layout_of(op.output).storage_shape(op.tensor(op.output).shape)
        storage[op.output] = aligned_zeros(out_shape, np.int32 if plan.integer else np.float32)
        values = self._parameter_values(qp, given[1], out_shape)
        storage.update({k: v for k, v in values.items() if isinstance(v, np.ndarray)})
        cast = lambda t, a: self._ffi.cast(f"{t} *", self._ffi.from_buffer(a))
        pointers = [cast(tensor_type(self.schedule, plan, t), storage[t]) for t in args]
        for decl in parameters(self.schedule, plan):
            ctype, name = decl.replace("const ", "").replace("restrict ", "").rsplit(" ", 1)
            name = name.lstrip("*")
            value = values[name]
            pointers.append(cast(ctype.rstrip(" *"), value) if isinstance(value, np.ndarray) else value)
        return Buffers(storage, tuple(pointers))

    def _parameter_values(self, qp: QuantParams, wq: np.ndarray, out_shape) -> dict[str, Any]:
        op, spec, plan = self.op, self.op.quant, self.plan
        k = channels(op)
        if not plan.integer:
            # the vector loop may load a whole vector of per-channel parameters past the last channel
            return {"lo_zw": aligned_copy(qp.w_zero_point.astype(np.int32), PAD_BYTES),
                    "lo_wscale": aligned_copy(qp.w_scale.astype(np.float32), PAD_BYTES),
                    "lo_xscale": float(qp.x_scale), "lo_zx": int(qp.x_zero_point)}
        if spec.requantized:
            mult = np.broadcast_to(requant_multiplier(qp.x_scale, qp.w_scale, qp.y_scale), (k,))
        else:
            mult = (np.float64(qp.x_scale) * qp.w_scale.astype(np.float64)).astype(np.float32)
        rc, cc = borders(op).shape
        if plan.compensation == "packed":
            comp = weight_compensation(op, wq, qp.w_zero_point)
        else:
            comp = np.zeros(k * rc * cc, dtype=np.int32)
        if plan.activation_sums:
            if isinstance(op, Conv2d):
                xsum = np.zeros(op.batch * op.groups * op.out_height * op.out_width, dtype=np.int32)
            else:
                xsum = np.zeros(op.m, dtype=np.int32)
        else:
            xsum = np.zeros(1, dtype=np.int32)
        return {"Y": np.zeros(out_shape, dtype=spec.output), "lo_zw": qp.w_zero_point.astype(np.int32),
                "lo_mult": np.ascontiguousarray(mult, dtype=np.float32), "lo_comp": comp, "lo_xsum": xsum,
                "lo_zx": int(qp.x_zero_point), "lo_zy": int(qp.y_zero_point or 0)}

    def output(self, buffers: Buffers) -> np.ndarray:
        """The output of the last run in the op's logical layout (float32 or uint8/int8)."""
        op = self.op
        stored = buffers.arrays["Y" if self.plan.integer else op.output]
        return self.schedule.layout_of(op.output).from_storage(stored, op.tensor(op.output).shape)

    def accumulators(self, buffers: Buffers) -> np.ndarray:
        """The raw int32 products ``P`` of the last run (before compensation), logical layout."""
        op = self.op
        return self.schedule.layout_of(op.output).from_storage(buffers.arrays[op.output], op.tensor(op.output).shape)

    def __call__(self, *arrays: np.ndarray, **params: Any) -> np.ndarray:
        buffers = self.prepare(*arrays, **params)
        self.run(buffers)
        return self.output(buffers)


# --- inputs and references of quantized calls ---------------------------------------------------

def random_call(op, seed: int = 0) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Quantized arrays ``[xq, wq(, b)]`` and the call's parameters, calibrated from
    ``op.random_inputs(seed)`` with ``quant.quantize`` as the op's QuantSpec says."""
    from .quant import quantize
    spec = op.quant
    floats = op.random_inputs(seed)
    x, w = (floats[t] for t in op.inputs)
    xq, sx, zx = quantize(x, spec.activation)
    axis = (0 if isinstance(op, Conv2d) else 1) if spec.per_channel else None
    wq, sw, zw = quantize(w, "int8", axis=axis, symmetric=spec.weight_symmetric)
    params: dict[str, Any] = dict(x_scale=sx, x_zero_point=zx, w_scale=sw, w_zero_point=zw)
    arrays = [xq, wq]
    acc = accumulators(op, xq, wq, zx, zw)
    if getattr(op, "bias", False):
        b = floats["B"]
        if spec.requantized:
            scale = np.float64(sx) * np.broadcast_to(np.asarray(sw, np.float64), (channels(op),))
            arrays.append(np.rint(b / scale).astype(np.int32))
        else:
            arrays.append(b)
    if spec.requantized:
        y = _dequantized(op, acc, params, arrays[2] if len(arrays) > 2 else None)
        _, params["y_scale"], params["y_zero_point"] = quantize(y, spec.output)
    return arrays, params


def accumulators(op, xq, wq, x_zero_point, w_zero_point) -> np.ndarray:
    """quant.py's exact int32 accumulators of ``op``."""
    from .quant import qconv2d_accumulators, qmatmul_accumulators
    if isinstance(op, Conv2d):
        return qconv2d_accumulators(xq, wq, x_zero_point, w_zero_point, op.stride, op.padding,
                                    op.dilation, op.groups)
    return qmatmul_accumulators(xq, wq, x_zero_point, w_zero_point)


def _axis(op) -> int:
    return 1 if isinstance(op, Conv2d) else -1


def _dequantized(op, acc, params, bias) -> np.ndarray:
    from .quant import dequantize_output
    scale = np.float64(params["x_scale"]) * np.asarray(params["w_scale"], np.float64)
    b = None if bias is None else (bias if op.quant.output == "float32" else
                                   np.asarray(bias, np.float64) * np.broadcast_to(scale, (channels(op),)))
    return dequantize_output(acc, params["x_scale"], params["w_scale"], b, axis=_axis(op))


def reference_output(op, arrays: list[np.ndarray], params: dict[str, Any]) -> np.ndarray:
    """The exact output of quant.py for a call: requantized bit for bit, or dequantized float32."""
    from .quant import requantize_output
    acc = accumulators(op, arrays[0], arrays[1], params["x_zero_point"], params["w_zero_point"])
    bias = arrays[2] if len(arrays) > 2 else None
    if op.quant.requantized:
        return requantize_output(acc, params["x_scale"], params["w_scale"], params["y_scale"],
                                 params["y_zero_point"], op.quant.output, bias, axis=_axis(op))
    return _dequantized(op, acc, params, bias)


def tolerance(op, arrays: list[np.ndarray], params: dict[str, Any], dequantize: bool) -> np.ndarray:
    """Elementwise bound of a float32 output: a few float32 roundings of each term (integer
    accumulation), or the float summation bound of ``measure.tolerance`` (dequantize-on-the-fly)."""
    from .quant import dequantize as deq
    eps = np.finfo(np.float32).eps
    axis = 0 if isinstance(op, Conv2d) else 1
    xd = np.abs(deq(arrays[0], params["x_scale"], params["x_zero_point"]))
    wd = np.abs(deq(arrays[1], params["w_scale"], params["w_zero_point"], axis=axis if np.ndim(params["w_scale"]) else None))
    magnitude = op.reference(xd, wd)
    bias = 0.0
    if len(arrays) > 2:
        bias = np.abs(arrays[2]).astype(np.float64).reshape((-1, 1, 1) if isinstance(op, Conv2d) else (-1,))
    reduction = max(1, op.macs // max(1, int(np.prod(op.tensor(op.output).shape)))) if dequantize else 1
    return (2 * reduction + 4) * eps * (magnitude + bias) + 1e-30
