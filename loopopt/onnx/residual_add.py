"""A QOperator residual block's float tail in one pass: DequantizeLinear of an 8-bit value, Add of a float32
residual and the Relu after it (``fuse_residual_adds``).

A QOperator ResNet keeps its shortcut in float32: each block's last QLinearConv output is dequantized,
added to the float residual, passed through Relu, and the result is both the next block's residual and,
quantized, its input. Step by step that is three passes over a float32 tensor of the block's size
(the dequantized value written, then read and written again by Add and by Relu), on ResNet-50 int8
(224x224, AMD EPYC Zen 3, one thread, each step's minimum of 9 rounds summed) 1.7 ms of DequantizeLinear
(20 steps), 1.0 ms of Add and 0.5 ms of Relu of a 76 ms run; the fused step reads the codes and the
residual and writes the sum once (``LinearQuant.dequantize_add``: the same float32 operations, each
rounded, so the same bits), over the residual's buffer where nothing reads it after
(``Step.overwrites``): those steps 4.9 -> 2.4 ms by median on one thread, 4.0 -> 1.6 ms on two (fused and
unfused plans alternating in one process, 21 runs each).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from ..buffers import KeptArray, memory_axes
from ..targets.registry import host_target
from ..targets.threaded_c import threads_for
from .elementwise import INTEGER_RANGES, memory_order
from .lowering import Value
from .plan import NUMPY, BoundCalls, Calling, Step

FUSED = "DequantizeLinear -> Add"       # the fused step's op type (" -> Relu" where it holds one)


def _scale_and_zero(step: Step, constants: Mapping[str, np.ndarray]) -> tuple[float, float] | None:
    """A DequantizeLinear step's float32 scale and zero point as floats where both are scalar constants
    (no zero point: 0), else None."""
    scale = constants.get(step.inputs[1]) if len(step.inputs) > 1 else None
    zero = constants.get(step.inputs[2]) if len(step.inputs) > 2 and step.inputs[2] else np.zeros(1)
    if scale is None or zero is None or scale.size != 1 or zero.size != 1 or scale.dtype != np.float32:
        return None
    return float(scale.reshape(())), float(zero.reshape(()))


def _same_order(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays of one shape lie in memory in one order of their axes."""
    return a.shape == b.shape and memory_axes(a) == memory_axes(b)


def residual_add(dequantize: Step, add: Step, relu: Step | None, zero: float, scale: float,
                 constants: Mapping[str, np.ndarray], threads: int) -> Calling:
    """The fused step's run over ``(codes, residual)``: ``LinearQuant.dequantize_add`` on up to ``threads``
    threads where both lie in one memory order, each in one run (a kernel's output and the float stream
    it joins: in every ResNet measured); else the three steps' own runs in turn (the same values)."""
    kept = KeptArray()
    loops = {dtype: host_target().linear_quant(dtype) for dtype in INTEGER_RANGES}
    calls = BoundCalls(lambda q, r, y: loops[q.dtype].bound_dequantize_add(
        q, r, y, zero, scale, relu is not None, threads_for(q.size, threads)))
    side = add.inputs.index(dequantize.outputs[0])          # where the Add reads the dequantized value

    def stepwise(q: np.ndarray, r: np.ndarray) -> list[np.ndarray]:
        x = dequantize.run([q, *(constants.get(n) if n else None for n in dequantize.inputs[1:])], False)[0]
        y = add.run([x, r] if side == 0 else [r, x], False)[0]
        return [y] if relu is None else relu.run([y], True)

    def run(inputs: Sequence[np.ndarray | None], reuse: bool) -> list[np.ndarray]:
        q, r = inputs
        codes, floats = memory_order(q), memory_order(r)
        if codes is None or floats is None or r.dtype != np.float32 or not _same_order(q, r):
            return stepwise(q, r)
        out = r if reuse else kept.like(r, np.float32)          # the residual's memory order
        calls(codes, floats, floats if reuse else memory_order(out))
        return [out]

    return Calling(run, calls, (kept,))


def fuse_residual_adds(steps: list[Step], constants: Mapping[str, np.ndarray], known: Mapping[str, Value],
                       outputs: Sequence[str], threads: int = 1) -> list[Step]:
    """``steps`` with each numpy Add of a float32 value and a DequantizeLinear of an 8-bit value (per
    tensor, constant float32 scale) that nothing else reads, and the Relu after the Add where it alone
    reads the sum, replaced by one step (``residual_add``) where the Add or its Relu was, reading the
    codes and the residual and writing over the residual where the plan lets it (``Step.overwrites``)."""
    readers = Counter(name for step in steps for name in step.inputs if name)
    private = lambda name: readers[name] == 1 and name not in outputs
    producer = {name: step for step in steps for name in step.outputs}
    replaced: dict[str, Step | None] = {}
    for add in steps:
        if add.op_type != "Add" or add.engine != NUMPY or len(add.inputs) != 2:
            continue
        found = [(producer.get(name), other) for name, other in (add.inputs, add.inputs[::-1])]
        found = [(step, other) for step, other in found
                 if step is not None and step.op_type == "DequantizeLinear" and step.engine == NUMPY
                 and step.node not in replaced and private(step.outputs[0])
                 and known.get(step.inputs[0]) is not None and known[step.inputs[0]].dtype in INTEGER_RANGES
                 and known.get(other) is not None and known[other].dtype == np.float32
                 and known[other].shape == known[step.inputs[0]].shape
                 and _scale_and_zero(step, constants) is not None]
        if not found:
            continue
        dequantize, residual = found[0]
        scale, zero = _scale_and_zero(dequantize, constants)
        after = [s for s in steps if add.outputs[0] in s.inputs]
        relu = after[0] if (len(after) == 1 and after[0].op_type == "Relu" and after[0].engine == NUMPY
                            and private(add.outputs[0])) else None
        last = relu or add
        run = residual_add(dequantize, add, relu, zero, scale, constants, threads)
        replaced[dequantize.node] = replaced[add.node] = None
        replaced[last.node] = Step(last.node, FUSED + (" -> Relu" if relu else ""),
                                   (dequantize.inputs[0], residual), last.outputs, run, NUMPY,
                                   owns_outputs=True, overwrites=1, last_call=run.last_call,
                                   holders=run.holders)
    return [replaced.get(step.node, step) for step in steps if replaced.get(step.node, step) is not None]
