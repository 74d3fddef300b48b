"""Inputs and exact references of quantized kernel calls, for verification and timing.

``random_call`` makes the quantized arrays and calibrated parameters of one call;
``reference_output`` is quant.py's exact output for them (requantized or int32 bit for bit,
or dequantized float32) and ``tolerance`` the bound a float32 output must meet.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .ops import Op
from .quant import (
    add_bias,
    dequantize,
    dequantize_output,
    quantize,
    quantize_binary,
    quantize_ternary,
    requantize_output,
)


def random_call(op: Op, seed: int = 0) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Quantized arrays ``[xq, wq(, b)]`` and the call's parameters, calibrated from
    ``op.random_inputs(seed)`` as the op's QuantSpec says (``_quantized``: activations asymmetric, so
    with a zero point that is not the dtype's middle; an int32 output takes no scales, its int32 bias
    has the scale the others' would have)."""
    spec = op.quant
    floats = op.random_inputs(seed)
    x, w = (floats[t] for t in op.inputs)
    (xq, sx, zx), (wq, sw, zw) = _quantized(spec, x, w, op.weight_channel_axis if spec.per_channel else None)
    scales: dict[str, Any] = dict(x_scale=sx, w_scale=sw)
    params: dict[str, Any] = dict(x_zero_point=zx, w_zero_point=zw) | (scales if spec.scaled else {})
    arrays = [xq, wq]
    if op.bias:
        b = floats[op.bias_tensor]
        if spec.dequantized:
            arrays.append(b)
        else:
            scale = np.float64(sx) * np.broadcast_to(np.asarray(sw, np.float64), (op.channels,))
            arrays.append(np.rint(b / scale).astype(np.int32))
    if spec.requantized:
        # the output's range, block by block (quantize only depends on the minimum and maximum)
        bias = arrays[2] if len(arrays) > 2 else None
        low, high = np.float32(np.inf), np.float32(-np.inf)
        for rows in op.reference_blocks():
            y = _dequantized(op, op.integer_accumulators(xq[rows], wq, zx, zw), scales, bias)
            low, high = min(low, y.min()), max(high, y.max())
        _, params["y_scale"], params["y_zero_point"] = quantize(np.array([low, high]), spec.output)
    return arrays, params


def _quantized(spec, x: np.ndarray, w: np.ndarray, axis: int | None) -> tuple[tuple, tuple]:
    """``(xq, x_scale, x_zero_point), (wq, w_scale, w_zero_point)``: ``quantize`` (activations
    asymmetric), ternary weights ``quantize_ternary``, binary activations and weights
    ``quantize_binary``; weights per channel along ``axis`` unless it is None."""
    if spec.binary:
        return quantize_binary(x), quantize_binary(w, axis=axis)
    xq = quantize(x, spec.activation, symmetric=False)
    if spec.ternary:
        return xq, quantize_ternary(w, axis=axis)
    return xq, quantize(w, spec.weight, axis=axis, symmetric=spec.weight_symmetric)


def _dequantized(op: Op, acc: np.ndarray, params: dict[str, Any], bias) -> np.ndarray:
    scale = np.float64(params["x_scale"]) * np.asarray(params["w_scale"], np.float64)
    b = None if bias is None else (bias if op.quant.dequantized else
                                   np.asarray(bias, np.float64) * np.broadcast_to(scale, (op.channels,)))
    return dequantize_output(acc, params["x_scale"], params["w_scale"], b, axis=op.output_channel_axis)


def reference_output(op: Op, arrays: list[np.ndarray], params: dict[str, Any]) -> np.ndarray:
    """The exact output of quant.py for a call: requantized or int32 bit for bit, or dequantized
    float32."""
    acc = op.integer_accumulators(arrays[0], arrays[1], params["x_zero_point"], params["w_zero_point"])
    bias = arrays[2] if len(arrays) > 2 else None
    if op.quant.requantized:
        return requantize_output(acc, params["x_scale"], params["w_scale"], params["y_scale"],
                                 params["y_zero_point"], op.quant.output, bias, axis=op.output_channel_axis)
    if not op.quant.scaled:
        return add_bias(acc, bias, axis=op.output_channel_axis)
    return _dequantized(op, acc, params, bias)


def tolerance(op: Op, arrays: list[np.ndarray], params: dict[str, Any],
              dequantize_in_loop: bool) -> np.ndarray:
    """Elementwise bound of a float32 output: a few float32 roundings of each term (integer
    accumulation), or the float summation bound of ``measure.tolerance`` (dequantize-on-the-fly)."""
    eps = np.finfo(np.float32).eps
    per_channel = np.ndim(params["w_scale"])
    xd = np.abs(dequantize(arrays[0], params["x_scale"], params["x_zero_point"]))
    wd = np.abs(dequantize(arrays[1], params["w_scale"], params["w_zero_point"],
                           axis=op.weight_channel_axis if per_channel else None))
    magnitude = op.reference(xd, wd)
    bias = 0.0
    if len(arrays) > 2:
        shape = [1] * magnitude.ndim
        shape[op.output_channel_axis] = -1
        bias = np.abs(arrays[2]).astype(np.float64).reshape(shape)
    outputs = max(1, int(np.prod(op.tensor(op.output).shape)))
    reduction = max(1, op.macs // outputs) if dequantize_in_loop else 1
    return (2 * reduction + 4) * eps * (magnitude + bias) + 1e-30
