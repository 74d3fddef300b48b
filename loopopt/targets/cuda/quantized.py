"""Quantized ops on the cuda target's int8 matrix instructions: which ``QuantSpec`` they run, the
kernel's parameters beyond its tensors, its epilogue (the CPU kernels' arithmetic, ``quant.py``), and
the per-channel values a call computes from its parameters (``tensor_printer`` says how the sums are
made exact).

A call is ``kernel(xq, wq, b, x_zero_point=..., ...)`` as on the CPU (ONNX ``QLinearConv`` names). The
kernel takes ``lo_comp[k] = -zx * T[k]`` (``T[k]``: the sum of channel ``k``'s weights), plus the
int32 bias for an integer output (a dequantized output adds its float32 bias in the epilogue),
``lo_mult[k]`` (``quant.output_multipliers``), ``lo_zx`` (the tiles' fill) and ``lo_zy``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...codegen.params import KernelParam, scalar
from ...codegen.quantized import C_TYPES
from ...kernel import Kernel
from ...ops import Op
from ...quant import QuantSpec, check_call, output_multipliers
from ...schedule import Schedule, ScheduleError
from .instructions import MatrixInstruction


def check(schedule: Schedule, entry: MatrixInstruction) -> QuantSpec:
    """The op's QuantSpec; ScheduleError unless ``entry`` is an int8 one and the weights are symmetric
    (zero point 0) and the outputs without a fused epilogue (clip, add_residual)."""
    op, spec = schedule.op, schedule.op.quant
    if not entry.integer:
        raise ScheduleError(f"{op!r} is quantized; tensorize it onto an int8 entry "
                            f"(mma_m16n8k32_s8_s32, mma_m16n8k32_u8s8_s32), not {entry.name}")
    if not spec.weight_symmetric:
        raise ScheduleError(f"{op!r} has asymmetric weights; the cuda target's int8 kernels take symmetric "
                            f"int8 weights (zero point 0): QuantSpec(weight_symmetric=True)")
    if schedule.fused_epilogue is not None:
        step = "clip" if schedule.epilogue is not None else "add_residual"
        raise ScheduleError(f"{step} ({schedule.fused_epilogue}) applies to float outputs; {op!r} is "
                            f"quantized (a requantized output saturates to its range)")
    return spec


def tensors(op: Op) -> tuple[str, ...]:
    """The tensors the kernel takes: the inputs, the bias of a dequantized output (an integer output's
    is in ``lo_comp``), the output."""
    bias = (op.bias_tensor,) if op.bias and op.quant.dequantized else ()
    return (*op.inputs, *bias, op.output)


def parameters(op: Op) -> tuple[KernelParam, ...]:
    """Every parameter of the kernel, in order: ``tensors(op)`` then the per-channel arrays and the
    zero points."""
    spec = op.quant
    types = {op.inputs[0]: C_TYPES[spec.activation], op.inputs[1]: C_TYPES[spec.weight_dtype.name],
             op.output: C_TYPES[spec.output], op.bias_tensor: "float"}
    params = [KernelParam(t, types[t], const=t != op.output) for t in tensors(op)]
    params.append(KernelParam("lo_comp", "int32_t", const=True))
    if spec.scaled:
        params.append(KernelParam("lo_mult", "float", const=True))
    params.append(scalar("lo_zx", "int"))
    if spec.requantized:
        params.append(scalar("lo_zy", "int"))
    return tuple(params)


def store(op: Op, out: str, sums: str, channel: str, bias: str, share: str | None) -> str:
    """The statement storing the int32 ``sums`` of one output element ``out`` of channel ``channel``
    (``bias``: a dequantized output's bias element); under split-K, ``share`` is the share's number
    and the sums are added (``LO_ADD``), the first share bringing ``lo_comp``."""
    spec = op.quant
    comp = f"lo_comp[{channel}]" if share is None else f"({share} == 0 ? lo_comp[{channel}] : 0)"
    exact = f"(int) ((unsigned) {sums} + (unsigned) {comp})"     # the int32 sum, wrapping as quant.py's
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


def call_values(kernel: Kernel, arrays: tuple, params: dict[str, Any]) -> dict[str, Any]:
    """The values of one call ``kernel(xq, wq[, b], **params)`` by parameter name, on the host: the
    inputs in their storage layouts, the output's storage (zeros of the output type), ``lo_comp``,
    ``lo_mult`` and the zero points (ValueError/TypeError naming a bad array or parameter)."""
    op, schedule = kernel.op, kernel.schedule
    given = kernel._given(arrays)
    for tensor, array in zip(op.call_tensors, given):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{tensor} must be a numpy array, got {type(array).__name__}")
        if tensor in op.inputs and array.shape != op.tensor(tensor).shape:
            raise ValueError(f"{tensor} has shape {array.shape}; {op!r} expects {op.tensor(tensor).shape}")
    qp = check_call(op.quant, op.channels, repr(op), list(given), params)
    values: dict[str, Any] = {t: schedule.layout_of(t).to_storage(a) for t, a in zip(op.inputs, given)}
    weights = np.asarray(given[1], dtype=np.int64)
    totals = np.moveaxis(weights, op.weight_channel_axis, 0).reshape(op.channels, -1).sum(axis=1)
    comp = -np.int64(qp.x_zero_point) * totals
    if qp.bias is not None and not op.quant.dequantized:
        comp = comp + qp.bias.astype(np.int64)
    values["lo_comp"] = ((comp + 2**31) % 2**32 - 2**31).astype(np.int32)   # int32 arithmetic wraps
    if qp.bias is not None and op.quant.dequantized:
        values[op.bias_tensor] = qp.bias.astype(np.float32)
    mult = output_multipliers(op.quant, qp, op.channels)
    if mult is not None:
        values["lo_mult"] = mult
    values["lo_zx"] = int(qp.x_zero_point)
    values["lo_zy"] = int(qp.y_zero_point or 0)
    shape = schedule.layout_of(op.output).storage_shape(op.tensor(op.output).shape)
    values[op.output] = np.zeros(shape, dtype=op.quant.output)
    return values
