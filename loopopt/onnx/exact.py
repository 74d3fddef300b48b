"""The exact output of a quantized ONNX node, and how two runtimes' integer outputs compare with it.

``exact_output(node, inputs)``: for ConvInteger and MatMulInteger the int32 accumulators
``sum (x - x_zero_point) * (w - w_zero_point)``; for QLinearConv, QLinearMatMul and the fused QDQ
nodes with a quantized output, the accumulators plus the int32 bias times
``x_scale * w_scale / y_scale`` (the scales as stored, float32) as an exact real number,
rounded half to even, plus ``y_zero_point``, saturated. The accumulators come from
onnx.reference's Conv (the node's own attributes) or numpy's matmul on the zero-point-shifted
values in float64, exact because every partial sum is an integer far below 2**53; a rounding
near a tie is settled with fractions. Nothing of loopopt's kernels, its lowering or its float32
requantization contract (``quant.requantize_output``) is used, so the reference can say which
of two runtimes that differ by one step is right.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator

from .lowering import FUSED_DOMAIN


@dataclass(frozen=True)
class Layout:
    """Where a quantized node keeps its operands: input indices (None: the node has no such input),
    the kind of product and, for a Gemm, whether B is transposed."""

    x: int
    w: int
    x_zero: int
    w_zero: int
    scales: tuple[int, int, int, int] | None = None   # x_scale, w_scale, y_scale, y_zero_point
    bias: int | None = None
    product: str = "conv"                               # "conv", "matmul" or "gemm"


INTEGER = dict(x=0, w=1, x_zero=2, w_zero=3)
QLINEAR = dict(x=0, w=3, x_zero=2, w_zero=5, scales=(1, 4, 6, 7))
LAYOUTS = {
    ("", "ConvInteger"): Layout(**INTEGER),
    ("", "MatMulInteger"): Layout(**INTEGER, product="matmul"),
    ("", "QLinearConv"): Layout(**QLINEAR, bias=8),
    ("", "QLinearMatMul"): Layout(**QLINEAR, product="matmul"),
    (FUSED_DOMAIN, "QDQConv"): Layout(**QLINEAR, bias=8),
    (FUSED_DOMAIN, "QDQMatMul"): Layout(**QLINEAR, product="matmul"),
    (FUSED_DOMAIN, "QDQGemm"): Layout(**QLINEAR, bias=8, product="gemm"),
}
TIE = 1e-6     # a float64 value this close to a half-integer is rounded exactly


def _layout(node: onnx.NodeProto) -> Layout | None:
    return LAYOUTS.get(("" if node.domain == "ai.onnx" else node.domain, node.op_type))


def _get(inputs: Sequence[np.ndarray | None], index: int | None) -> np.ndarray | None:
    return inputs[index] if index is not None and index < len(inputs) else None


def _along(values: np.ndarray | None, axis: int, ndim: int) -> np.ndarray:
    """A scalar or per-channel parameter shaped to broadcast along ``axis`` of an ``ndim`` array."""
    array = np.zeros(()) if values is None else np.asarray(values)
    if array.size <= 1:
        return array.reshape(())
    shape = [1] * ndim
    shape[axis] = -1
    return array.reshape(shape)


def _transposed_b(node: onnx.NodeProto, layout: Layout) -> bool:
    return layout.product == "gemm" and any(a.name == "transB" and a.i for a in node.attribute)


def accumulators(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None]) -> np.ndarray:
    """The exact int64 ``sum (x - zx) * (w - zw)`` (+ the int32 bias) of a quantized node."""
    layout = _layout(node)
    x, w = inputs[layout.x], inputs[layout.w]
    trans_b = _transposed_b(node, layout)
    w_axis = 0 if layout.product == "conv" or trans_b else w.ndim - 1
    xs = x.astype(np.float64) - _along(_get(inputs, layout.x_zero), 0, x.ndim)
    ws = w.astype(np.float64) - _along(_get(inputs, layout.w_zero), w_axis, w.ndim)
    if layout.product == "conv":
        conv = helper.make_node("Conv", ["x", "w"], ["y"])
        conv.attribute.extend(node.attribute)
        acc = ReferenceEvaluator(conv).run(None, {"x": xs, "w": ws})[0]
    else:
        acc = np.matmul(xs, ws.T if trans_b else ws)
    acc = np.rint(acc).astype(np.int64)
    bias = _get(inputs, layout.bias)
    if bias is not None:
        acc = acc + _along(np.reshape(bias, -1), 1 if layout.product == "conv" else acc.ndim - 1, acc.ndim)
    return acc


def exact_output(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None]) -> np.ndarray | None:
    """The exact output of a quantized node on ``inputs`` (see the module); None if the node is not one
    with an integer output (a fused node with a float output, any float node)."""
    layout = _layout(node)
    if layout is None:
        return None
    if layout.scales is None:
        return accumulators(node, inputs).astype(np.int32)
    x_scale, w_scale, y_scale, y_zero = (_get(inputs, i) for i in layout.scales)
    if y_zero is None:
        return None
    acc = accumulators(node, inputs)
    channel_axis = 1 if layout.product == "conv" else acc.ndim - 1
    multiplier = (np.float64(np.float32(x_scale)) *
                  _along(np.asarray(w_scale, np.float32).astype(np.float64), channel_axis, acc.ndim))
    return requantize_exactly(acc, multiplier, np.float32(y_scale), y_zero)


def requantize_exactly(acc: np.ndarray, multiplier: np.ndarray, y_scale: np.float32,
                       y_zero: np.ndarray) -> np.ndarray:
    """``saturate(round_half_even(acc * multiplier / y_scale) + y_zero)`` in the zero point's dtype, the
    product exact (``multiplier``: float64 products of two float32 scales, themselves exact)."""
    info = np.iinfo(y_zero.dtype)
    zero = int(y_zero)
    value = acc * (multiplier / np.float64(y_scale))
    rounded = np.rint(value)
    in_range = (value > info.min - zero - 1) & (value < info.max - zero + 1)
    near = np.argwhere(in_range & (np.abs(value - np.floor(value) - 0.5) < TIE))
    if near.size:
        factor = np.broadcast_to(multiplier, acc.shape)
        for index in map(tuple, near):
            exact = Fraction(int(acc[index])) * Fraction(float(factor[index])) / Fraction(float(y_scale))
            rounded[index] = round(exact)          # Fraction rounds half to even
    return np.clip(rounded + zero, info.min, info.max).astype(y_zero.dtype)


@dataclass(frozen=True)
class IntegerCheck:
    """loopopt's and onnxruntime's outputs of one quantized node against each other and against the
    exact reference: the largest difference in steps of the output (LSB), how many elements differ, and
    of those, on how many each runtime has the exact value."""

    elements: int
    max_lsb: int
    differing: int
    loopopt_exact: int
    onnxruntime_exact: int

    def __str__(self) -> str:
        text = f"max abs(loopopt - onnxruntime) {self.max_lsb} LSB"   # no '|': a markdown table cell
        if not self.differing:
            return f"{text}, all {self.elements} elements equal"
        return (f"{text}; {self.differing} of {self.elements} elements differ: loopopt exact on "
                f"{self.loopopt_exact}, onnxruntime exact on {self.onnxruntime_exact}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def total(cls, checks: Sequence[IntegerCheck]) -> IntegerCheck:
        """The checks of several nodes as one: elements and counts summed, the largest difference."""
        return cls(sum(c.elements for c in checks), max((c.max_lsb for c in checks), default=0),
                   sum(c.differing for c in checks), sum(c.loopopt_exact for c in checks),
                   sum(c.onnxruntime_exact for c in checks))


def integer_check(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None], loopopt: np.ndarray,
                  onnxruntime: np.ndarray) -> IntegerCheck | None:
    """How loopopt's and onnxruntime's outputs of ``node`` on ``inputs`` compare with each other and with
    ``exact_output``; None if the node has no integer output."""
    exact = exact_output(node, inputs)
    if exact is None:
        return None
    ours, theirs, right = (np.asarray(a).astype(np.int64) for a in (loopopt, onnxruntime, exact))
    if not ours.shape == theirs.shape == right.shape:
        raise ValueError(f"node {node.name}: output shapes differ: loopopt {ours.shape}, onnxruntime "
                         f"{theirs.shape}, exact {right.shape}")
    differ = ours != theirs
    return IntegerCheck(int(ours.size), int(np.abs(ours - theirs).max(initial=0)), int(differ.sum()),
                        int((differ & (ours == right)).sum()), int((differ & (theirs == right)).sum()))
