"""Elementwise and view nodes in numpy, on whatever layout their inputs are stored in.

A kernel's output reaches the next node as a logical view of its storage (channels-last, say), and
numpy's elementwise functions keep that memory order, so Relu, Clip, Add, Sub, Mul, Div,
DequantizeLinear and QuantizeLinear neither transpose nor copy back to the logical layout;
Flatten, Reshape and Identity are views where numpy can make one. ``ELEMENTWISE`` maps an op type
to a builder of the node's function ``run(inputs, reuse) -> outputs`` (``reuse``: the first input's
buffer may be overwritten, as nothing else reads it). A builder raises ``NotSupported`` for what it
leaves to onnx.reference (an integer Div, per-axis quantization, ...), with the reason.
Quantization follows onnx.reference's arithmetic step by step, so the outputs are the same bits.
A DequantizeLinear -> Relu/Clip -> QuantizeLinear chain of an 8-bit tensor is a function of its 256
values: the plan runs it as one lookup in the table those steps give (``lookup_table``, ``lookup``).
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import onnx

from ..targets.registry import host_target
from .lowering import NotSupported, Value, attributes
from .plan import NUMPY, Step

Run = Callable[[Sequence[np.ndarray | None], bool], list[np.ndarray]]
Builder = Callable[[onnx.NodeProto, Sequence[Value | None], int], Run]

INTEGER_RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def _float_inputs(node: onnx.NodeProto, values: Sequence[Value | None], count: int) -> None:
    """NotSupported unless the first ``count`` inputs are known and of one float dtype."""
    given = [v for v in values[:count] if v is not None]
    if len(given) < count or len({v.dtype for v in given}) != 1 or given[0].dtype.kind != "f":
        dtypes = ", ".join(str(v.dtype) if v else "unknown" for v in values[:count])
        raise NotSupported(f"{node.op_type} of dtypes {dtypes} (float inputs of one dtype)")


def _out(x: np.ndarray, reuse: bool) -> np.ndarray | None:
    return x if reuse else None


def relu(node: onnx.NodeProto, values: Sequence[Value | None], opset: int) -> Run:
    attributes(node, {})
    _float_inputs(node, values, 1)
    return lambda inputs, reuse: [np.maximum(inputs[0], 0, out=_out(inputs[0], reuse))]


def clip(node: onnx.NodeProto, values: Sequence[Value | None], opset: int) -> Run:
    """Clip: bounds as inputs (opset 11+) or attributes ``min``/``max`` (before); a missing one unbounded."""
    attrs = attributes(node, {"min": None, "max": None})
    _float_inputs(node, values, 1)

    def run(inputs: Sequence[np.ndarray | None], reuse: bool) -> list[np.ndarray]:
        x, low, high = inputs[0], attrs["min"], attrs["max"]
        if opset >= 11:
            low, high = (inputs[i] if i < len(inputs) else None for i in (1, 2))
        if low is None and high is None:
            return [x if reuse else x.copy()]
        if low is not None and high is not None:      # one pass
            return [np.clip(x, np.asarray(low, x.dtype), np.asarray(high, x.dtype), out=_out(x, reuse))]
        if low is not None:
            x = np.maximum(x, np.asarray(low, x.dtype), out=_out(x, reuse))
            reuse = True      # x is now a buffer of this node's own
        if high is not None:
            x = np.minimum(x, np.asarray(high, x.dtype), out=_out(x, reuse))
        return [x]

    return run


def binary(function: np.ufunc) -> Builder:
    """Add, Sub, Mul or Div of two float inputs of one dtype, numpy broadcasting (ONNX's, from opset 7)."""

    def build(node: onnx.NodeProto, values: Sequence[Value | None], opset: int) -> Run:
        attributes(node, {})
        if opset < 7:
            raise NotSupported(f"{node.op_type} of opset {opset} (its broadcast attribute; opset 7 on)")
        _float_inputs(node, values, 2)

        def run(inputs: Sequence[np.ndarray | None], reuse: bool) -> list[np.ndarray]:
            a, b = inputs
            into = reuse and a.shape == np.broadcast_shapes(a.shape, b.shape)
            return [function(a, b, out=a if into else None)]

        return run

    return build


def flatten(node: onnx.NodeProto, values: Sequence[Value | None], opset: int) -> Run:
    axis = int(attributes(node, {"axis": 1})["axis"])

    def run(inputs: Sequence[np.ndarray | None], reuse: bool) -> list[np.ndarray]:
        x = inputs[0]
        cut = axis % x.ndim if axis < 0 else axis
        return [x.reshape(math.prod(x.shape[:cut]), math.prod(x.shape[cut:]))]

    return run


def reshape(node: onnx.NodeProto, values: Sequence[Value | None], opset: int) -> Run:
    """Reshape: a 0 in the shape copies the input's dim (unless ``allowzero``), a -1 is inferred."""
    allow_zero = bool(attributes(node, {"allowzero": 0})["allowzero"])
    if opset < 5:
        raise NotSupported(f"Reshape of opset {opset} (the shape as an attribute; opset 5 and later)")

    def run(inputs: Sequence[np.ndarray | None], reuse: bool) -> list[np.ndarray]:
        x, shape = inputs[0], [int(d) for d in inputs[1]]
        if not allow_zero:
            shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
        return [x.reshape(shape)]

    return run


def identity(node: onnx.NodeProto, values: Sequence[Value | None], opset: int) -> Run:
    attributes(node, {})
    return lambda inputs, reuse: [inputs[0]]


def _per_tensor(node: onnx.NodeProto, values: Sequence[Value | None]) -> None:
    """NotSupported unless the node's scale and zero point are known and one per tensor."""
    attrs = attributes(node, {"axis": 1, "block_size": 0, "saturate": 1})
    if attrs["block_size"]:
        raise NotSupported(f"{node.op_type} with block_size={attrs['block_size']} (per tensor only)")
    for value in values[1:3]:
        if value is not None and math.prod(value.shape) != 1:
            raise NotSupported(f"{node.op_type} with a scale or zero point of shape {value.shape} "
                               "(per tensor)")
    if values[1] is None:
        raise NotSupported(f"{node.op_type} with a scale of unknown shape")


def _scalar(array: np.ndarray) -> np.ndarray:
    return array.reshape(())


def dequantize_linear(node: onnx.NodeProto, values: Sequence[Value | None], opset: int) -> Run:
    """``(x - zero_point) * scale`` per tensor, in onnx.reference's arithmetic."""
    _per_tensor(node, values)
    x = values[0]
    if x is None or x.dtype not in (*INTEGER_RANGES, np.dtype(np.int32)):
        raise NotSupported(f"DequantizeLinear of dtype {x.dtype if x else 'unknown'} (uint8, int8, int32)")

    def formula(q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None) -> np.ndarray:
        shifted = q.astype(np.float32)
        if zero is not None:      # in place where the difference is float32 (an 8-bit zero point)
            into = shifted if np.result_type(shifted, zero) == shifted.dtype else None
            shifted = np.subtract(shifted, _scalar(zero), out=into)
        into = shifted if np.result_type(shifted, scale) == shifted.dtype else None
        return np.multiply(shifted, _scalar(scale), out=into).astype(scale.dtype, copy=False)

    return lambda inputs, reuse: [formula(*(*inputs, None)[:3])]


def quantize_linear(node: onnx.NodeProto, values: Sequence[Value | None], opset: int) -> Run:
    """``saturate(rint(x / scale) + zero_point)`` per tensor, to uint8 or int8, in float32 in place:
    onnx.reference's result wherever ``x / scale`` fits in int32 (beyond, its int32 cast overflows;
    here it saturates)."""
    _per_tensor(node, values)
    zero = values[2] if len(values) > 2 else None
    if values[0] is None or values[0].dtype.kind != "f" or (zero and zero.dtype not in INTEGER_RANGES):
        raise NotSupported(f"QuantizeLinear from {values[0].dtype if values[0] else 'unknown'} to "
                           f"{zero.dtype if zero else 'uint8'} (float to uint8 or int8)")
    dtype = np.dtype(np.uint8) if zero is None else zero.dtype
    low, high = INTEGER_RANGES[dtype]

    def run(inputs: Sequence[np.ndarray | None], reuse: bool) -> list[np.ndarray]:
        x, scale, zero = (*inputs, None)[:3]
        rounded = np.divide(x, _scalar(scale), out=_out(x, reuse))
        np.rint(rounded, out=rounded)
        if zero is not None:
            rounded += _scalar(zero)
        return [np.clip(rounded, low, high, out=rounded).astype(dtype)]

    return run


ELEMENTWISE: dict[str, Builder] = {
    "Relu": relu,
    "Clip": clip,
    "Add": binary(np.add),
    "Sub": binary(np.subtract),
    "Mul": binary(np.multiply),
    "Div": binary(np.divide),
    "Flatten": flatten,
    "Reshape": reshape,
    "Identity": identity,
    "DequantizeLinear": dequantize_linear,
    "QuantizeLinear": quantize_linear,
}

# the op types whose outputs may be views of their inputs (their buffers are not their own)
VIEWS = ("Flatten", "Reshape", "Identity")


LOOKUP_BETWEEN = ("Relu", "Clip")     # what a lookup chain may hold between its Dequantize and Quantize


def memory_order(array: np.ndarray) -> np.ndarray | None:
    """``array``'s elements as a 1-D view in the order they lie in memory, or None where they do
    not fill one contiguous run (a strided slice)."""
    order = np.argsort(array.strides, kind="stable")[::-1]      # the axes outer to inner in memory
    stored = array.transpose(order)
    return stored.reshape(-1) if stored.flags.c_contiguous else None


def lookup(table: np.ndarray) -> Run:
    """An 8-bit tensor mapped through ``table`` (indexed by each element's bit pattern), in the
    input's memory order, by the host target's compiled byte lookup (``Target.byte_map``); in place
    where the input's buffer may be overwritten."""
    byte_map, bits = host_target().byte_map(), np.ascontiguousarray(table).view(np.uint8)

    def run(inputs: Sequence[np.ndarray | None], reuse: bool) -> list[np.ndarray]:
        q = inputs[0]
        flat = memory_order(q)
        if flat is None:
            q, reuse = np.ascontiguousarray(q), True
            flat = q.reshape(-1)
        out = q if reuse else np.empty_like(q, dtype=table.dtype)       # the same memory order
        byte_map(bits, flat.view(np.uint8), memory_order(out).view(np.uint8))
        return [out.view(table.dtype)]

    return run


def lookup_table(chain: Sequence[tuple[Run, list[np.ndarray | None]]], dtype: np.dtype) -> np.ndarray:
    """What ``chain`` (each step's run and its inputs after the first) gives for each of the 256 values
    of an 8-bit ``dtype``, indexed by bit pattern: the steps' own arithmetic, so the same bits."""
    values = np.arange(256, dtype=np.uint8).view(dtype)
    for run, rest in chain:
        values = run([values, *rest], False)[0]
    return values


def fuse_lookups(steps: list[Step], constants: dict[str, np.ndarray], dtypes: dict[str, np.dtype],
                 outputs: Sequence[str]) -> list[Step]:
    """``steps`` with each DequantizeLinear -> (Relu | Clip)* -> QuantizeLinear chain of numpy steps
    on an 8-bit input (``dtypes``: what is known of the values' dtypes) whose other inputs are
    ``constants`` and whose inner values nothing else reads replaced by one ``lookup`` step."""
    readers = Counter(name for step in steps for name in step.inputs if name)
    producer = {name: step for step in steps for name in step.outputs}
    private = lambda name: readers[name] == 1 and name not in outputs
    fused: dict[str, Step] = {}       # the last step of a chain -> its lookup step
    for step in steps:
        if step.op_type != "QuantizeLinear" or step.engine != NUMPY:
            continue
        chain = [step]
        while (chain[0].inputs[0] in producer and private(chain[0].inputs[0])
               and producer[chain[0].inputs[0]].op_type in LOOKUP_BETWEEN + ("DequantizeLinear",)
               and producer[chain[0].inputs[0]].engine == NUMPY and chain[0].op_type != "DequantizeLinear"):
            chain.insert(0, producer[chain[0].inputs[0]])
        source = chain[0].inputs[0]
        if (chain[0].op_type != "DequantizeLinear" or dtypes.get(source) not in INTEGER_RANGES
                or any(n and n not in constants for s in chain for n in s.inputs[1:])):
            continue
        table = lookup_table([(s.run, [constants[n] if n else None for n in s.inputs[1:]]) for s in chain],
                             dtypes[source])
        fused[step.node] = Step(step.node, " -> ".join(s.op_type for s in chain), (source,), step.outputs,
                                lookup(table), NUMPY, owns_outputs=True)
        for inner in chain[:-1]:
            fused[inner.node] = None
    return [fused.get(step.node, step) for step in steps if fused.get(step.node, step) is not None]
