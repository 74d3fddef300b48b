"""Quantized ops on the cuda target's int8 matrix instructions: which ``QuantSpec`` they run (all of
them), the kernel's parameters beyond its tensors, its epilogue (the CPU kernels' arithmetic,
``quant.py``), and the per-channel values a call computes from its parameters, on the host or on the
device (``tensor_printer`` says how the sums are made exact).

A call is ``kernel(xq, wq, b, x_zero_point=..., ...)`` as on the CPU (ONNX ``QLinearConv`` names). The
stored bytes are multiplied as they are (``mma.sync`` takes int8 or uint8 on either side; ternary and
binary values are int8 bytes), the padding taps and reduction tails of the activations' tiles holding
the activations' zero point ``zx`` and the weights' tails 0, so that over the ``D`` reduction
positions the tiles span (``reduction_span``)

    acc = sum (x - zx) * (w - zw[k]) = P - zw[k] * S + lo_comp[k],
    lo_comp[k] = -zx * T[k] + D * zx * zw[k] (+ the int32 bias of an integer output),

with ``P`` the tensor cores' sum of the stored products, ``T[k]`` the sum of channel ``k``'s stored
weights and ``S`` the sum of the activations' tile over the output's row (the *activation sums*, made
by the tensor cores too, against a fragment of ones; only where ``zw`` may be nonzero:
``needs_activation_sums``). The kernel takes ``lo_comp``, ``lo_zw`` (with the sums), ``lo_mult``
(``quant.output_multipliers``), a dequantized output's float32 bias, ``lo_zx`` (the tiles' fill) and
``lo_zy``; everything is int32 arithmetic that wraps, exact because the true sum fits int32. Where TMA
copies a conv's activations (pixel boxes) its padding holds 0, not ``zx``: the kernel also takes a
table of the weights' sums outside each box of taps and adds ``zx`` times the weights at a border
pixel's taps outside (``padding_sums``).
"""
from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numpy as np

from ...codegen.params import KernelParam, scalar
from ...codegen.quantized import C_TYPES
from ...kernel import Kernel
from ...ops import Op
from ...quant import (
    QuantParams,
    QuantSpec,
    check_call,
    check_values,
    output_multipliers,
    symmetric_zero_point,
)
from ...schedule import Schedule, ScheduleError
from . import device, padding_sums
from .instructions import MatrixInstruction


def check(schedule: Schedule, entry: MatrixInstruction) -> QuantSpec:
    """The op's QuantSpec; ScheduleError unless ``entry`` is an int8 one and the outputs are without a
    fused epilogue (clip, add_residual)."""
    op, spec = schedule.op, schedule.op.quant
    if not entry.integer:
        raise ScheduleError(f"{op!r} is quantized; tensorize it onto an int8 entry "
                            f"(mma_m16n8k32_s8_s32, mma_m16n8k32_u8s8_s32, ...), not {entry.name}")
    if entry.asynchronous and needs_activation_sums(spec):
        raise ScheduleError(f"{entry.name} reads both operands from shared memory, so it has no fragment of "
                            f"ones for the activation sums that {spec} needs (weights of a nonzero zero "
                            f"point); wgmma takes symmetric int8 weights: use gpu_mma for these")
    if schedule.fused_epilogue is not None:
        step = "clip" if schedule.epilogue is not None else "add_residual"
        raise ScheduleError(f"{step} ({schedule.fused_epilogue}) applies to float outputs; {op!r} is "
                            f"quantized (a requantized output saturates to its range)")
    return spec


def needs_activation_sums(spec: QuantSpec) -> bool:
    """Whether the weights' zero point may be nonzero (asymmetric, or uint8 weights: 128 when
    symmetric), so that the kernel sums the activations (``S``) for its term."""
    return not spec.weight_symmetric or symmetric_zero_point(spec.weight_dtype.name) != 0


def reduction_span(schedule: Schedule) -> int:
    """``D``: the reduction positions the kernel's tiles span for one output, tails included (the
    product of the extents of the loops over the reduction)."""
    reduction = schedule.op.reduction_dims
    return math.prod(loop.extent for loop in schedule.loops if schedule.dims_of(loop.name) & reduction)


def tensors(op: Op) -> tuple[str, ...]:
    """The tensors the kernel takes: the inputs, the bias of a dequantized output (an integer output's
    is in ``lo_comp``), the output."""
    bias = (op.bias_tensor,) if op.bias and op.quant.dequantized else ()
    return (*op.inputs, *bias, op.output)


def parameters(schedule: Schedule) -> tuple[KernelParam, ...]:
    """Every parameter of ``schedule``'s kernel, in order: ``tensors(op)`` then the per-channel arrays
    (and the padding's table where TMA zero-fills it, ``padding_sums``) and the zero points."""
    op = schedule.op
    spec = op.quant
    types = {op.inputs[0]: C_TYPES[spec.activation_dtype.name], op.inputs[1]: C_TYPES[spec.weight_dtype.name],
             op.output: C_TYPES[spec.output], op.bias_tensor: "float"}
    params = [KernelParam(t, types[t], const=t != op.output) for t in tensors(op)]
    params.append(KernelParam("lo_comp", "int32_t", const=True))
    if needs_activation_sums(spec):
        params.append(KernelParam("lo_zw", "int32_t", const=True))
    if spec.scaled:
        params.append(KernelParam("lo_mult", "float", const=True))
    if padding_sums.compensated(schedule):
        params.append(padding_sums.parameter())
    params.append(scalar("lo_zx", "int"))
    if spec.requantized:
        params.append(scalar("lo_zy", "int"))
    return tuple(params)


def store(op: Op, out: str, sums: str, channel: str, bias: str, share: str | None,
          activation_sums: str | None = None) -> str:
    """The statement storing the int32 ``sums`` (``P``; on TMA pixel boxes with the padding's term
    added, ``padding_sums``) of one output element ``out`` of channel ``channel`` (``bias``: a
    dequantized output's bias element; ``activation_sums``: its ``S``, where the op needs them); under
    split-K, ``share`` is the share's number and the sums are added (``LO_ADD``), the first share
    bringing ``lo_comp``."""
    spec = op.quant
    comp = f"lo_comp[{channel}]"
    comp = comp if share is None else f"({share} == 0 ? {comp} : 0)"
    total = f"(unsigned) {sums} + (unsigned) {comp}"                # int32 sums, wrapping as quant.py's
    if activation_sums is not None:
        total += f" - (unsigned) lo_zw[{channel}] * (unsigned) {activation_sums}"
    exact = f"(int) ({total})"
    if share is not None:
        return f"LO_ADD({out}, {exact});"
    if spec.output == "int32":
        return f"{out} = {exact};"
    scaled = f"(float) {exact} * lo_mult[{channel}]"
    if spec.dequantized:
        return f"{out} = {scaled}{f' + {bias}' if bias else ''};"
    low, high = np.iinfo(spec.output).min, np.iinfo(spec.output).max
    return (f"{{ const float lo_p = fminf(fmaxf({scaled}, (float) ({low} - lo_zy)), "
            f"(float) ({high} - lo_zy)); "
            f"{out} = ({C_TYPES[spec.output]}) ((int) rintf(lo_p) + lo_zy); }}")


def channels_first(schedule: Schedule, stored_weights: Any) -> Any:
    """The weights in their logical layout with the output channels first, from the weights in their
    storage layout, a numpy or a device (CuPy) array alike (a blocked layout's padding is zero)."""
    op = schedule.op
    weights = op.inputs[1]
    logical = schedule.layout_of(weights).logical_view(stored_weights, op.tensor(weights).shape)
    return logical.swapaxes(op.weight_channel_axis, 0)


def channel_values(schedule: Schedule, qp: QuantParams, stored_weights: Any,
                   xp: ModuleType) -> dict[str, Any]:
    """The per-channel arrays and zero points of a call by parameter name (``xp``'s arrays: numpy, or
    CuPy where the weights are on the device): ``lo_comp`` (module docstring, with ``T[k]`` the sum of
    each output channel's weights), ``lo_zw``, ``lo_mult``, a dequantized output's float32 bias, the
    padding's table where TMA zero-fills it (``padding_sums``), ``lo_zx`` and ``lo_zy``."""
    op, spec = schedule.op, schedule.op.quant
    weights = channels_first(schedule, stored_weights)
    totals = weights.reshape(op.channels, -1).sum(axis=1, dtype=np.int64)
    zx, zw = np.int64(qp.x_zero_point), qp.w_zero_point.astype(np.int64)
    known = reduction_span(schedule) * zx * zw
    if qp.bias is not None and not spec.dequantized:
        known = known + qp.bias.astype(np.int64)
    comp = xp.asarray(known) - zx * totals
    values: dict[str, Any] = {"lo_comp": ((comp + 2**31) % 2**32 - 2**31).astype(np.int32)}  # int32 wraps
    if needs_activation_sums(spec):
        values["lo_zw"] = xp.asarray(qp.w_zero_point.astype(np.int32))
    if qp.bias is not None and spec.dequantized:
        values[op.bias_tensor] = xp.asarray(qp.bias.astype(np.float32))
    mult = output_multipliers(spec, qp, op.channels)
    if mult is not None:
        values["lo_mult"] = xp.asarray(mult)
    if padding_sums.compensated(schedule):
        values[padding_sums.TABLE] = padding_sums.table(op, weights, xp)
    values["lo_zx"] = int(qp.x_zero_point)
    values["lo_zy"] = int(qp.y_zero_point or 0)
    return values


def call_values(kernel: Kernel, arrays: tuple, params: dict[str, Any]) -> dict[str, Any]:
    """The values of one call ``kernel(xq, wq[, b], **params)`` on numpy arrays by parameter name, on
    the host: the inputs in their storage layouts, the output's storage (zeros of the output type) and
    ``channel_values`` (ValueError/TypeError naming a bad array or parameter)."""
    op, schedule = kernel.op, kernel.schedule
    given = kernel._given(arrays)
    for tensor, array in zip(op.call_tensors, given):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{tensor} must be a numpy array, got {type(array).__name__}")
        if tensor in op.inputs and array.shape != op.tensor(tensor).shape:
            raise ValueError(f"{tensor} has shape {array.shape}; {op!r} expects {op.tensor(tensor).shape}")
    qp = check_call(op.quant, op.channels, repr(op), list(given), params)
    values: dict[str, Any] = {t: schedule.layout_of(t).to_storage(a) for t, a in zip(op.inputs, given)}
    values |= channel_values(schedule, qp, values[op.inputs[1]], np)
    shape = schedule.layout_of(op.output).storage_shape(op.tensor(op.output).shape)
    values[op.output] = np.zeros(shape, dtype=op.quant.output)
    return values


def device_call_values(kernel: Kernel, arrays: tuple, params: dict[str, Any],
                       xp: ModuleType) -> dict[str, Any]:
    """The values of one call on device arrays (``device.on_device``; ``xp``: CuPy), with no copy of the
    tensors: ``xq`` and ``wq`` in their storage layouts as given, ``T[k]`` summed on the device, the
    output allocated there; the bias (small) may be a host or a device array. Ternary and binary
    values are checked on the device (ValueError naming the first bad one)."""
    op, schedule, spec = kernel.op, kernel.schedule, kernel.op.quant
    given = kernel._given(arrays)
    stored = {}
    for tensor, array in zip(op.inputs, given):
        stored[tensor] = device.device_array(array, xp)
        wanted = schedule.layout_of(tensor).storage_shape(op.tensor(tensor).shape)
        if tuple(stored[tensor].shape) != wanted:
            raise ValueError(f"{tensor} has shape {tuple(stored[tensor].shape)}; {op!r} takes device arrays "
                             f"in their storage layout, {wanted}")
    bias = given[2] if len(given) > 2 else None
    if bias is not None and device.on_device(bias):
        bias = xp.asnumpy(device.device_array(bias, xp))
    checked = [None, None] + ([bias] if bias is not None else [])
    qp = check_call(spec, op.channels, repr(op), checked, params)
    for tensor, dtype in zip(op.inputs, (spec.activation_dtype, spec.weight_dtype)):
        if stored[tensor].dtype != dtype:
            raise TypeError(f"{tensor} has dtype {stored[tensor].dtype}; {op!r} takes {dtype} ({spec})")
    if spec.ternary or spec.binary:
        _check_values_on_device(op, stored, xp)
    values = dict(stored) | channel_values(schedule, qp, stored[op.inputs[1]], xp)
    shape = schedule.layout_of(op.output).storage_shape(op.tensor(op.output).shape)
    values[op.output] = xp.empty(shape, dtype=spec.output)
    return values


def _check_values_on_device(op: Op, stored: dict[str, Any], xp: ModuleType) -> None:
    """ValueError unless ternary weights are -1, 0, +1 and binary ones (and binary activations) -1, +1;
    the arrays are copied to the host only to name a bad value."""
    checks = [(op.inputs[1], (-1, 0, 1) if op.quant.ternary else (-1, 1))]
    if op.quant.binary:
        checks.append((op.inputs[0], (-1, 1)))
    for tensor, allowed in checks:
        if bool(xp.any(~xp.isin(stored[tensor], xp.asarray(allowed, dtype=np.int8)))):
            check_values("weight" if tensor == op.inputs[1] else "input", xp.asnumpy(stored[tensor]), allowed)
