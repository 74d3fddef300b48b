"""Elementwise and view nodes in numpy, on whatever layout their inputs are stored in.

A kernel's output reaches the next node as a logical view of its storage (channels-last, say), and
numpy's elementwise functions keep that memory order, so Relu, Clip, Add, Sub, Mul, Div,
DequantizeLinear and QuantizeLinear neither transpose nor copy back to the logical layout;
Flatten, Reshape and Identity are views where numpy can make one. ``ELEMENTWISE`` maps an op type
to a builder of the node's function ``run(inputs, reuse) -> outputs`` (``reuse``: the first input's
buffer may be overwritten, as nothing else reads it); a builder's ``threads`` (by keyword): the
model's, which the compiled loops (DequantizeLinear, QuantizeLinear, the lookups, float32 Relu and
same-shape Add/Sub/Mul/Div on numpy arrays) run on where their arrays are large enough
(``threaded_c.threads_for``), numpy's own functions on one. A builder raises ``NotSupported`` for what it
leaves to onnx.reference (an integer Div, per-axis quantization, ...), with the reason.
Quantization follows onnx.reference's arithmetic step by step, so the outputs are the same bits.
A DequantizeLinear -> Relu/Clip -> QuantizeLinear chain of an 8-bit tensor is a function of its 256
values: the plan runs it as one lookup in the table those steps give (``lookup_table``, ``lookup``);
one of two 8-bit tensors of one shape (a quantized residual block's DequantizeLinear of both, Add,
Relu, QuantizeLinear) a function of their 65,536 pairs, one ``pair_lookup``, or the same steps'
arithmetic compiled where the host target has it and it gives that table (``pair_computed``,
``pair_arith.py``). A MaxPool inside a chain of one tensor, or at its end, runs on its 8-bit values and
maps them through the table as it stores them (``PoolRunner.map_through``).
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from types import ModuleType

import numpy as np
import onnx

from ..buffers import KeptArray, memory_axes
from ..layout import rotation
from ..targets.float_map import float_map
from ..targets.pair_program import PairArith
from ..targets.registry import host_target
from ..targets.threaded_c import threads_for
from .lowering import NotSupported, Value, attributes
from .pair_arith import computed_pair
from .plan import KERNEL, NUMPY, BoundCalls, Calling, Step

Run = Callable[[Sequence[np.ndarray | None], bool], list[np.ndarray]]
Builder = Callable[..., Run]     # (node, values, opset, xp=numpy, threads=1) -> the node's run

INTEGER_RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def _float_inputs(node: onnx.NodeProto, values: Sequence[Value | None], count: int) -> None:
    """NotSupported unless the first ``count`` inputs are known and of one float dtype."""
    given = [v for v in values[:count] if v is not None]
    if len(given) < count or len({v.dtype for v in given}) != 1 or given[0].dtype.kind != "f":
        dtypes = ", ".join(str(v.dtype) if v else "unknown" for v in values[:count])
        raise NotSupported(f"{node.op_type} of dtypes {dtypes} (float inputs of one dtype)")


def _out(x: np.ndarray, reuse: bool) -> np.ndarray | None:
    return x if reuse else None


def relu(node: onnx.NodeProto, values: Sequence[Value | None], opset: int, xp: ModuleType = np,
         threads: int = 1) -> Run:
    """Relu on arrays of the array module ``xp`` (numpy; CuPy on a GPU: ``device_rep``), as the builders
    below; a numpy float32 array stored in one contiguous run by the compiled loop (``float_map``) on
    up to ``threads`` threads."""
    attributes(node, {})
    _float_inputs(node, values, 1)
    loops = float_map(host_target().vector_flags()) if xp is np else None
    calls = BoundCalls(lambda x, y: loops.bound_relu(x, y, threads_for(x.size, threads)))
    kept = KeptArray()

    def run(inputs: Sequence[np.ndarray | None], reuse: bool) -> list[np.ndarray]:
        x = inputs[0]
        flat = memory_order(x) if loops is not None and x.dtype == np.float32 else None
        if flat is None:
            return [xp.maximum(x, 0, out=_out(x, reuse))]
        out = x if reuse else kept.like(x, x.dtype)             # the same memory order
        calls(flat, flat if reuse else memory_order(out))
        return [out]

    return Calling(run, calls, (kept,))


def clip(node: onnx.NodeProto, values: Sequence[Value | None], opset: int, xp: ModuleType = np,
         threads: int = 1) -> Run:
    """Clip: bounds as inputs (opset 11+) or attributes ``min``/``max`` (before); a missing one unbounded.
    The bounds are host constants, taken as scalars of the input's dtype."""
    attrs = attributes(node, {"min": None, "max": None})
    _float_inputs(node, values, 1)

    def run(inputs: Sequence[np.ndarray | None], reuse: bool) -> list[np.ndarray]:
        x, low, high = inputs[0], attrs["min"], attrs["max"]
        if opset >= 11:
            low, high = (inputs[i] if i < len(inputs) else None for i in (1, 2))
        if low is None and high is None:
            return [x if reuse else x.copy()]
        scalar = x.dtype.type
        if low is not None and high is not None:      # one pass
            return [xp.clip(x, scalar(low), scalar(high), out=_out(x, reuse))]
        if low is not None:
            x = xp.maximum(x, scalar(low), out=_out(x, reuse))
            reuse = True      # x is now a buffer of this node's own
        if high is not None:
            x = xp.minimum(x, scalar(high), out=_out(x, reuse))
        return [x]

    return run


def binary(function: np.ufunc) -> Builder:
    """Add, Sub, Mul or Div of two float inputs of one dtype, numpy broadcasting (ONNX's, from opset 7);
    two numpy float32 arrays of one shape stored in one contiguous run in one order by the compiled loop
    (``float_map``) on up to ``threads`` threads."""

    def build(node: onnx.NodeProto, values: Sequence[Value | None], opset: int, xp: ModuleType = np,
              threads: int = 1) -> Run:
        attributes(node, {})
        if opset < 7:
            raise NotSupported(f"{node.op_type} of opset {opset} (its broadcast attribute; opset 7 on)")
        _float_inputs(node, values, 2)
        on = getattr(xp, function.__name__)       # the function of ``xp``
        loops = float_map(host_target().vector_flags()) if xp is np else None
        calls = BoundCalls(lambda a, b, y: loops.bound_binary(function.__name__, a, b, y,
                                                              threads_for(a.size, threads)))
        kept = KeptArray()

        def run(inputs: Sequence[np.ndarray | None], reuse: bool) -> list[np.ndarray]:
            a, b = inputs
            same = (loops is not None and a.dtype == np.float32 and a.shape == b.shape
                    and a.strides == b.strides)
            flat, other = (memory_order(a), memory_order(b)) if same else (None, None)
            if flat is None or other is None:
                into = reuse and a.shape == np.broadcast_shapes(a.shape, b.shape)
                return [on(a, b, out=a if into else None)]
            out = a if reuse else kept.like(a, a.dtype)             # a's memory order
            calls(flat, other, flat if reuse else memory_order(out))
            return [out]

        return Calling(run, calls, (kept,))

    return build


def flatten(node: onnx.NodeProto, values: Sequence[Value | None], opset: int, xp: ModuleType = np,
            threads: int = 1) -> Run:
    """Flatten as a view where the array's own ``reshape`` makes one (any array module ``xp``; so are
    Reshape and Identity)."""
    axis = int(attributes(node, {"axis": 1})["axis"])

    def run(inputs: Sequence[np.ndarray | None], reuse: bool) -> list[np.ndarray]:
        x = inputs[0]
        cut = axis % x.ndim if axis < 0 else axis
        return [x.reshape(math.prod(x.shape[:cut]), math.prod(x.shape[cut:]))]

    return run


def reshape(node: onnx.NodeProto, values: Sequence[Value | None], opset: int, xp: ModuleType = np,
            threads: int = 1) -> Run:
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


def identity(node: onnx.NodeProto, values: Sequence[Value | None], opset: int, xp: ModuleType = np,
             threads: int = 1) -> Run:
    attributes(node, {})
    return lambda inputs, reuse: [inputs[0]]


def concat(node: onnx.NodeProto, values: Sequence[Value | None], opset: int, xp: ModuleType = np,
           threads: int = 1) -> Run:
    """Concat of arrays of ``xp`` along ``axis`` (a negative one from the end)."""
    axis = int(attributes(node, {"axis": None})["axis"])
    return lambda inputs, reuse: [xp.concatenate([a for a in inputs if a is not None], axis=axis)]


def memory_order(array: np.ndarray) -> np.ndarray | None:
    """``array``'s elements as a 1-D view in the order they lie in memory, or None where they do
    not fill one contiguous run (a strided slice)."""
    if array.flags.c_contiguous:
        return array.reshape(-1)
    stored = array.transpose(memory_axes(array))
    return stored.reshape(-1) if stored.flags.c_contiguous else None


def _flat(q: np.ndarray, reuse: bool) -> tuple[np.ndarray, np.ndarray, bool]:
    """``q`` (copied where its elements do not fill one contiguous run), its elements in memory order,
    and whether its buffer may be overwritten."""
    flat = memory_order(q)
    if flat is None:
        q = np.ascontiguousarray(q)
        return q, q.reshape(-1), True
    return q, flat, reuse


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


def _constant_scale_and_zero(values: Sequence[Value | None]) -> tuple[float, float] | None:
    """A per-tensor node's scale and zero point as floats (no zero point: 0) where both are constants
    of the model, else None (a compiled call binds them once)."""
    scale, zero = values[1], (values[2] if len(values) > 2 else None)
    if scale is None or scale.data is None or (zero is not None and zero.data is None):
        return None
    return float(_scalar(scale.data)), 0.0 if zero is None else float(_scalar(zero.data))


def dequantize_linear(node: onnx.NodeProto, values: Sequence[Value | None], opset: int,
                      threads: int = 1) -> Run:
    """``(x - zero_point) * scale`` per tensor, in onnx.reference's arithmetic: compiled C loops
    (``targets/linear_quant.py``) for 8-bit values and a constant float32 scale, into a buffer kept from
    run to run; else numpy."""
    _per_tensor(node, values)
    x = values[0]
    if x is None or x.dtype not in (*INTEGER_RANGES, np.dtype(np.int32)):
        raise NotSupported(f"DequantizeLinear of dtype {x.dtype if x else 'unknown'} (uint8, int8, int32)")

    constant = _constant_scale_and_zero(values)
    if x.dtype in INTEGER_RANGES and values[1].dtype == np.float32 and constant is not None:
        loops, (scale, zero) = host_target().linear_quant(x.dtype), constant
        calls = BoundCalls(lambda q, y: loops.bound_dequantize(q, y, zero, scale,
                                                               threads_for(q.size, threads)))
        kept = KeptArray()

        def compiled(inputs: Sequence[np.ndarray | None], reuse: bool) -> list[np.ndarray]:
            q, flat, _ = _flat(inputs[0], False)
            out = kept.like(q, np.float32)           # the same memory order
            calls(flat, memory_order(out))
            return [out]

        return Calling(compiled, calls, (kept,))

    def formula(q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None) -> np.ndarray:
        shifted = q.astype(np.float32)
        if zero is not None:      # in place where the difference is float32 (an 8-bit zero point)
            into = shifted if np.result_type(shifted, zero) == shifted.dtype else None
            shifted = np.subtract(shifted, _scalar(zero), out=into)
        into = shifted if np.result_type(shifted, scale) == shifted.dtype else None
        return np.multiply(shifted, _scalar(scale), out=into).astype(scale.dtype, copy=False)

    return lambda inputs, reuse: [formula(*(*inputs, None)[:3])]


ROTATED_ROWS = 64     # the most rows (channels) a quantize stores rotated: its C holds a tile of 128 columns


@lru_cache(maxsize=64)
def rotated(axes: tuple[int, ...], order: tuple[int, ...] | None,
            shape: tuple[int, ...]) -> tuple[int, int, int] | None:
    """How an array of ``shape`` stored with its axes in the order ``axes`` is stored in ``order`` (outer
    to inner) as ``(batch, rows, cols)`` matrices transposed (``layout.rotation``; NCHW to NHWC: ``(N, C,
    H*W)``), where it is one of at most ``ROTATED_ROWS`` rows; else None (``order`` None, the same order,
    or another change)."""
    if order is None or sorted(order) != sorted(axes):
        return None
    turn = rotation(tuple(axes.index(axis) for axis in order), tuple(shape[axis] for axis in axes))
    return turn if turn is not None and turn[1] <= ROTATED_ROWS else None


def quantize_linear(node: onnx.NodeProto, values: Sequence[Value | None], opset: int,
                    threads: int = 1, order: tuple[int, ...] | None = None) -> Run:
    """``saturate(rint(x / scale) + zero_point)`` per tensor, to uint8 or int8, in float32 (compiled C
    loops, ``targets/linear_quant.py``, for float32 values and a constant float32 scale, into a buffer
    kept from run to run; else numpy, in place): onnx.reference's
    result wherever ``x / scale`` fits in int32 (beyond, its int32 cast overflows; here it saturates).
    ``order``: the output's axes, outer to inner in memory, that its readers store it in (the plan's: a
    model's NCHW input quantized NHWC for the first conv); the compiled loops write it so where the
    input's memory order turns into it by matrices of up to ``ROTATED_ROWS`` rows transposed
    (``rotated``: ``LinearQuant.rotated``), else in the input's memory order (the readers pack it)."""
    _per_tensor(node, values)
    zero = values[2] if len(values) > 2 else None
    if values[0] is None or values[0].dtype.kind != "f" or (zero and zero.dtype not in INTEGER_RANGES):
        raise NotSupported(f"QuantizeLinear from {values[0].dtype if values[0] else 'unknown'} to "
                           f"{zero.dtype if zero else 'uint8'} (float to uint8 or int8)")
    dtype = np.dtype(np.uint8) if zero is None else zero.dtype
    low, high = INTEGER_RANGES[dtype]
    constant = _constant_scale_and_zero(values)
    if values[0].dtype == np.float32 and values[1].dtype == np.float32 and constant is not None:
        loops, (scale, zero_point) = host_target().linear_quant(dtype), constant

        def bind(x: np.ndarray, q: np.ndarray) -> tuple[Callable[..., None], tuple]:
            """The call quantizing ``x`` (batch, rows, cols) into ``q`` (batch, cols, rows)."""
            batch, rows, cols = x.shape
            used = threads_for(x.size, threads)
            if rows == 1 or cols == 1:
                return loops.bound_quantize(x.reshape(-1), q.reshape(-1), scale, zero_point, used)
            return loops.rotated(rows).bound(x.reshape(-1), q.reshape(-1), scale, zero_point, batch, cols,
                                             used)

        calls = BoundCalls(bind)
        kept = KeptArray()

        def compiled(inputs: Sequence[np.ndarray | None], reuse: bool) -> list[np.ndarray]:
            x, flat, _ = _flat(inputs[0], False)
            turn = rotated(tuple(memory_axes(x)), order, x.shape) if order is not None else None
            out = kept.like(x, dtype, None if turn is None else order)   # else the same memory order
            batch, rows, cols = turn or (1, 1, x.size)
            calls(flat.reshape(batch, rows, cols), memory_order(out).reshape(batch, cols, rows))
            return [out]

        return Calling(compiled, calls, (kept,))

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


LOOKUP_BETWEEN = ("Relu", "Clip")     # unary steps a lookup chain may hold between Dequantize and Quantize
LOOKUP_COMBINING = ("Add", "Sub", "Mul")   # binary steps of a pair lookup's two dequantized values


def lookup(table: np.ndarray, threads: int = 1) -> Calling:
    """An 8-bit tensor mapped through ``table`` (indexed by each element's bit pattern), in the
    input's memory order, by the host target's compiled byte lookup (``Target.byte_map``) on up to
    ``threads`` threads; in place where the input's buffer may be overwritten, else into a buffer kept
    from run to run."""
    byte_map, bits = host_target().byte_map(), np.ascontiguousarray(table).view(np.uint8)
    calls = BoundCalls(lambda src, dst: byte_map.bound(bits, dst, threads_for(dst.size, threads), src=src))
    kept = KeptArray()

    def run(inputs: Sequence[np.ndarray | None], reuse: bool) -> list[np.ndarray]:
        q, flat, reuse = _flat(inputs[0], reuse)
        out = q if reuse else kept.like(q, table.dtype)       # the same memory order
        calls(flat.view(np.uint8), (flat if reuse else memory_order(out)).view(np.uint8))
        return [out.view(table.dtype)]

    return Calling(run, calls, (kept,))


def _pair_step(bind: Callable[..., tuple[Callable[..., None], tuple]], dtype: np.dtype) -> Calling:
    """The step of a C function of two 8-bit tensors of one shape into one of ``dtype`` (``bind(a, b,
    dst)`` over their bytes in the first's memory order gives the call: the second copied into that order
    where it is stored otherwise); into the first's buffer where it may be overwritten, else into a
    buffer kept from run to run. (The copy of the second is new memory on each run: a plan does not
    repeat a call whose copy it would skip.)"""
    calls = BoundCalls(bind)
    kept = KeptArray()

    def run(inputs: Sequence[np.ndarray | None], reuse: bool) -> list[np.ndarray]:
        (a, flat, reuse), b = _flat(inputs[0], reuse), inputs[1]
        if b.strides != a.strides:            # b copied into a's memory order
            b, stored = np.empty_like(a, dtype=b.dtype), b
            b[...] = stored
        out = a if reuse else kept.like(a, dtype)
        calls(flat.view(np.uint8), memory_order(b).view(np.uint8), memory_order(out).view(np.uint8))
        return [out.view(dtype)]

    return Calling(run, calls, (kept,))


def pair_lookup(table: np.ndarray, threads: int = 1) -> Calling:
    """Two 8-bit tensors of one shape mapped through ``table`` (65,536 entries, indexed by the first's
    bit pattern times 256 plus the second's) by the host target's compiled pair lookup
    (``Target.pair_map``) on up to ``threads`` threads (``_pair_step``)."""
    pair_map, bits = host_target().pair_map(), np.ascontiguousarray(table).view(np.uint8)
    return _pair_step(lambda a, b, dst: pair_map.bound(bits, dst, threads_for(dst.size, threads), a=a, b=b),
                      table.dtype)


def pair_computed(arith: PairArith, threads: int = 1) -> Calling:
    """Two 8-bit tensors of one shape through ``arith`` (a pair lookup's steps as arithmetic:
    ``pair_arith``) on up to ``threads`` threads (``_pair_step``)."""
    program = arith.program
    return _pair_step(lambda a, b, dst: arith.bound(a.view(program.sources[0]), b.view(program.sources[1]),
                                                    dst.view(program.out), threads_for(dst.size, threads)),
                      program.out)


def lookup_table(steps: Sequence[Step], sources: Sequence[str], dtypes: Sequence[np.dtype],
                 constants: Mapping[str, np.ndarray]) -> np.ndarray:
    """What ``steps`` (in order, their inputs ``sources`` or earlier steps' outputs or ``constants``) give
    for every combination of the 8-bit ``sources``' values (of ``dtypes``), indexed by their bit patterns
    (the first's times 256 plus the second's): the steps' own arithmetic, so the same bits."""
    patterns = np.arange(256, dtype=np.uint8)
    grids = [patterns] if len(sources) == 1 else [np.repeat(patterns, 256), np.tile(patterns, 256)]
    values = {name: grid.view(dtype) for name, grid, dtype in zip(sources, grids, dtypes)}
    for step in steps:
        if step.selects:        # a pool taken before the lookup: the identity here
            values[step.outputs[0]] = values[step.inputs[0]]
            continue
        computed = step.run([values[n] if n in values else constants[n] if n else None for n in step.inputs],
                            False)
        values.update(zip(step.outputs, computed))
    return values[steps[-1].outputs[0]]


def non_decreasing(table: np.ndarray, dtype: np.dtype) -> bool:
    """Whether ``table`` (a ``lookup`` table of an 8-bit ``dtype``) maps a larger value never to a
    smaller one: a lookup that commutes with taking maxima."""
    values = np.arange(256, dtype=np.uint8).view(dtype)
    ordered = table[np.argsort(values, kind="stable")]
    return bool(np.all(ordered[1:] >= ordered[:-1]))


def _chain(last: Step, steps: Sequence[Step], constants: Mapping[str, np.ndarray],
           known: Mapping[str, Value], private: Callable[[str], bool]) -> tuple[list[Step], list[str]] | None:
    """The steps a lookup runs in place of ``last`` (a QuantizeLinear, or a MaxPool: ``Step.selects``) and
    the numpy steps before it, in order, and the 8-bit values they start from (one or two); None where
    they do not make one: a DequantizeLinear of each source, then Relu/Clip, a MaxPool (``Step.selects``;
    one source only) and Add/Sub/Mul of two values, none of them read by anything else, every other input
    a scalar constant."""
    producer = {name: step for step in steps for name in step.outputs}
    members, pending = {last.node: last}, [last]
    while pending:
        step = pending.pop()
        combining = step.op_type in LOOKUP_COMBINING
        for index, name in enumerate(step.inputs):
            if index > 0 and not combining:
                if name and (name not in constants or constants[name].size != 1):
                    return None
            elif step.op_type == "DequantizeLinear":
                if name not in known or known[name].dtype not in INTEGER_RANGES:
                    return None
            else:
                before = producer.get(name)
                fits = (before is not None and private(name)
                        and (before.selects or (before.engine == NUMPY and before.op_type in (
                            *LOOKUP_BETWEEN, *LOOKUP_COMBINING, "DequantizeLinear"))))
                if not fits:
                    return None
                members[before.node] = before
                pending.append(before)
    chain = [step for step in steps if step.node in members]
    sources = list(dict.fromkeys(step.inputs[0] for step in chain if step.op_type == "DequantizeLinear"))
    shapes = {known[name].shape if name in known else None for name in (*sources, last.outputs[0])}
    if len(sources) > 2 or (len(sources) == 2 and (len(shapes) != 1 or None in shapes
                                                   or any(step.selects for step in chain))):
        return None
    return chain, sources


def _pair(chain: Sequence[Step], sources: Sequence[str], dtypes: Sequence[np.dtype],
          constants: Mapping[str, np.ndarray], table: np.ndarray, threads: int) -> Calling:
    """A pair chain's step: its arithmetic where the host target computes it and it gives ``table``
    (``pair_arith.computed_pair``), else the lookup in ``table``."""
    arith = computed_pair(chain, sources, dtypes, constants, table)
    return pair_lookup(table, threads) if arith is None else pair_computed(arith, threads)


def fuse_lookups(steps: list[Step], constants: dict[str, np.ndarray], known: Mapping[str, Value],
                 outputs: Sequence[str], threads: int = 1) -> list[Step]:
    """``steps`` with each chain of numpy steps that ends in a QuantizeLinear and starts from
    DequantizeLinear steps of one or two 8-bit values (``_chain``; ``known``: what is known of the
    values' shapes and dtypes) replaced by one ``lookup`` or pair step (``_pair``): a quantized
    activation (DequantizeLinear -> Relu -> QuantizeLinear) or residual Add (DequantizeLinear of
    both operands -> Add -> Relu -> QuantizeLinear). A chain of one value may hold a MaxPool
    (``Step.selects``) where its table is non-decreasing: the pool then runs on the 8-bit values and
    maps each max through the table in its kernel's store, as max(f(x)) == f(max(x)) for such an f.
    So does a MaxPool whose output others read too (a QOperator ResNet's stem pool, also its first
    block's shortcut) with the chain before it: DequantizeLinear -> Relu -> MaxPool as one pool of the
    8-bit values into the float values, through the table of the steps before it."""
    readers = Counter(name for step in steps for name in step.inputs if name)
    private = lambda name: readers[name] == 1 and name not in outputs
    fused: dict[str, Step | None] = {}       # the last step of a chain -> its lookup step; the others -> None
    quantizes = [s for s in steps if s.op_type == "QuantizeLinear" and s.engine == NUMPY]
    ends = quantizes + [s for s in steps if s.selects]       # chains ending in a QuantizeLinear claim first
    for step in ends:
        found = None if step.node in fused else _chain(step, steps, constants, known, private)
        if found is None:
            continue
        chain, sources = found
        dtypes = [known[name].dtype for name in sources]
        table = lookup_table(chain, sources, dtypes, constants)
        selects = [s for s in chain if s.selects]
        if selects:
            if len(selects) > 1 or not non_decreasing(table, dtypes[0]):
                continue
            selects[0].selects(table)
            run, last_call, engine, holders = selects[0].run, selects[0].last_call, KERNEL, selects[0].holders
        else:
            looked = lookup(table, threads) if len(sources) == 1 else _pair(chain, sources, dtypes, constants,
                                                                            table, threads)
            run, last_call, engine, holders = looked, looked.last_call, NUMPY, looked.holders
        name = " -> ".join(s.op_type for s in chain)
        fused[step.node] = Step(step.node, name, tuple(sources), step.outputs, run, engine, owns_outputs=True,
                                last_call=last_call, holders=holders)
        fused.update((inner.node, None) for inner in chain[:-1])
    return [fused.get(step.node, step) for step in steps if fused.get(step.node, step) is not None]
