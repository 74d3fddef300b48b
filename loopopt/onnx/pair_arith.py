"""A pair lookup's steps as arithmetic (``targets/pair_program.py``): a chain of DequantizeLinear of two
8-bit values (per-tensor float32 scales, constant zero points), Relu, Add/Sub/Mul of two of its values and
a last QuantizeLinear, as the ``PairProgram`` of the same float32 operations, compiled by the host target
(``Target.pair_arith``). The plan runs it in place of the lookup in the chain's table only where it gives
that table's every byte (checked on all 65,536 pairs at prepare); other chains (a Clip, whose bounds may
be attributes, other dtypes) and targets without one look the table up.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..targets.pair_program import Operand, PairArith, PairProgram
from ..targets.registry import host_target
from .plan import Step

QUANTIZED = (np.dtype(np.uint8), np.dtype(np.int8))
COMBINING = {"Add": "add", "Sub": "sub", "Mul": "mul"}


def _scale_and_zero(step: Step, constants: Mapping[str, np.ndarray]) -> tuple[float, float, np.dtype] | None:
    """A Dequantize/QuantizeLinear step's constant float32 scale and 8-bit zero point (0 and uint8 where
    it has none) per tensor, or None."""
    names = (*step.inputs, "", "")[1:3]
    scale, zero = (constants.get(name) if name else None for name in names)
    if scale is None or scale.dtype != np.float32 or scale.size != 1:
        return None
    if names[1] and (zero is None or zero.dtype not in QUANTIZED or zero.size != 1):
        return None
    return float(scale.reshape(())), 0.0 if zero is None else float(zero.reshape(())), \
        np.dtype(np.uint8) if zero is None else zero.dtype


def pair_program(chain: Sequence[Step], sources: Sequence[str], dtypes: Sequence[np.dtype],
                 constants: Mapping[str, np.ndarray]) -> PairProgram | None:
    """The ``PairProgram`` of a pair lookup's ``chain`` (``elementwise._chain``: its steps in order, from
    the two 8-bit ``sources`` of ``dtypes``), or None where a step is not one it computes."""
    values: dict[str, Operand] = {name: ("value", k) for k, name in enumerate(sources)}
    ops: list[tuple[str, Operand, Operand]] = []
    numbers: list[float] = []

    def constant(number: float) -> Operand:
        numbers.append(number)
        return ("constant", len(numbers) - 1)

    def append(kind: str, lhs: Operand, rhs: Operand) -> Operand:
        ops.append((kind, lhs, rhs))
        return ("value", len(ops) + 1)

    *inner, last = chain
    for step in inner:
        if step.op_type == "DequantizeLinear":
            quant = _scale_and_zero(step, constants)
            if quant is None or step.inputs[0] not in values:
                return None
            shifted = append("sub", values[step.inputs[0]], constant(quant[1]))
            values[step.outputs[0]] = append("mul", shifted, constant(quant[0]))
        elif step.op_type == "Relu":
            values[step.outputs[0]] = append("max", constant(0.0), values[step.inputs[0]])
        elif step.op_type in COMBINING and len(step.inputs) == 2:
            values[step.outputs[0]] = append(COMBINING[step.op_type], values[step.inputs[0]],
                                             values[step.inputs[1]])
        else:
            return None
    quant = _scale_and_zero(last, constants) if last.op_type == "QuantizeLinear" else None
    if quant is None or last.inputs[0] not in values or values[last.inputs[0]][0] != "value":
        return None
    scale, zero = constant(quant[0]), constant(quant[1])
    return PairProgram(tuple(np.dtype(d) for d in dtypes), tuple(ops), values[last.inputs[0]][1], scale[1],
                       zero[1], quant[2], tuple(numbers))


def computed_pair(chain: Sequence[Step], sources: Sequence[str], dtypes: Sequence[np.dtype],
                  constants: Mapping[str, np.ndarray], table: np.ndarray) -> PairArith | None:
    """The host target's compiled ``pair_program`` of ``chain`` where it has one and it gives ``table``
    (the chain's lookup table, ``elementwise.lookup_table``) on every pair, else None."""
    program = pair_program(chain, sources, dtypes, constants)
    arith = None if program is None else host_target().pair_arith(program)
    if arith is None or not np.array_equal(arith.table().view(np.uint8), table.view(np.uint8)):
        return None
    return arith
