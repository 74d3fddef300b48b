"""Where each tensor's items (elements or cache lines) live in one shared item space.

At element granularity every element of every tensor is its own item. At line
granularity each tensor is stored in its schedule layout starting on a boundary of
``max(64, line_size)`` bytes, so no line holds two tensors. ``item = base +
(offset * element_bytes >> shift)`` covers both (element: ``element_bytes = 1``,
``shift = 0``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..schedule import Schedule

GRANULARITIES = ("element", "line")
ALIGNMENT = 64


@dataclass(frozen=True)
class TensorItems:
    """The item range of one tensor."""

    name: str
    base: int            # first item
    count: int           # items of the tensor
    element_bytes: int   # bytes per element (1 at element granularity: one element is one item)
    shift: int           # log2(line_size) at line granularity, else 0


@dataclass(frozen=True)
class ItemSpace:
    """The trace's tensors in access order (input 0, input 1, output) and the total item count."""

    granularity: str
    line_size: int
    tensors: tuple[TensorItems, ...]

    @property
    def size(self) -> int:
        """Items in the space, alignment gaps included (ids run from 0 to size - 1)."""
        last = self.tensors[-1]
        return last.base + last.count


def element_bytes(op, tensor: str) -> int:
    """Storage bytes of one element of ``tensor``: 4 for float32, 1 for quantized inputs, the output
    dtype's size for a quantized output (float32 and int32: 4, uint8 and int8: 1)."""
    quant = getattr(op, "quant", None)
    if quant is None:
        return 4
    if tensor == op.output:
        return np.dtype(quant.output).itemsize
    return 1


def check_granularity(granularity: str, line_size: int, op) -> None:
    """ValueError naming the bad value if the granularity or line size is not allowed."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity={granularity!r} is not supported: use 'element' or 'line'")
    largest = max(element_bytes(op, t) for t in op.tensors)
    if (isinstance(line_size, bool) or not isinstance(line_size, int) or line_size < largest
            or line_size & (line_size - 1)):
        raise ValueError(f"line_size={line_size!r} is not allowed: it must be a power of two >= the "
                         f"largest element size ({largest} bytes), e.g. 64")


def item_space(schedule: Schedule, granularity: str = "element", line_size: int = 64) -> ItemSpace:
    """The item ranges of the schedule's tensors at ``granularity``."""
    op = schedule.op
    check_granularity(granularity, line_size, op)
    tensors, base = [], 0
    for name in op.tensors:
        elements = math.prod(schedule.layout_of(name).storage_shape(op.tensor(name).shape))
        if granularity == "element":
            tensors.append(TensorItems(name, base, elements, 1, 0))
        else:
            size = element_bytes(op, name)
            align = max(ALIGNMENT, line_size) // line_size
            base = -(-base // align) * align
            tensors.append(TensorItems(name, base, -(-elements * size // line_size), size,
                                       line_size.bit_length() - 1))
        base += tensors[-1].count
    return ItemSpace(granularity, line_size, tuple(tensors))


def check_capacity(capacity: int, what: str = "capacity_lines") -> int:
    """ValueError naming the value unless ``capacity`` (a count of items, sets or ways) is a
    positive integer."""
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity <= 0:
        raise ValueError(f"{what}={capacity!r} is not allowed: it must be a positive integer")
    return int(capacity)
