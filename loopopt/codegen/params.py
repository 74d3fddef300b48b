"""The parameters of a generated kernel function, as codegen declares them, and its index type.

Codegen produces one ``KernelParam`` per C parameter; the C signature, the cffi
declaration and the kernel's argument binding are all rendered from them, so nothing
reads C text back.

Loop variables, dims and offsets are C ``int`` unless an index may exceed 2^31 - 1; then
they are all ``ptrdiff_t`` (``index_ctype``). Vector gathers and strided lanes take 32-bit
lane indices: ``check_lane_indices`` refuses those that may not fit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ..schedule import Schedule, ScheduleError
from .instr import SCALAR

INT_MAX = 2**31 - 1
WIDE_INDEX = "ptrdiff_t"


@dataclass(frozen=True)
class KernelParam:
    """One C parameter: a pointer to ``ctype`` elements (read-only if ``const``) or a scalar; ``aliased``:
    a pointer a call may give the memory of another ``aliased`` parameter (declared without ``restrict``)."""

    name: str
    ctype: str
    pointer: bool = True
    const: bool = False
    aliased: bool = False

    def declaration(self, restrict: bool = True) -> str:
        """The C declaration, e.g. ``const float *restrict I`` or ``int lo_zx``."""
        if not self.pointer:
            return f"{self.ctype} {self.name}"
        restricted = "restrict " if restrict and not self.aliased else ""
        return f"{'const ' if self.const else ''}{self.ctype} *{restricted}{self.name}"


def signature(function: str, params: tuple[KernelParam, ...], restrict: bool = True) -> str:
    """``void function(params...)``."""
    return f"void {function}({', '.join(p.declaration(restrict) for p in params)})"


def scalar(name: str, ctype: str) -> KernelParam:
    """A by-value parameter."""
    return KernelParam(name, ctype, pointer=False)


def storage_elements(schedule: Schedule, tensor: str) -> int:
    """Elements of ``tensor`` in its schedule layout (blocked dims padded)."""
    return math.prod(schedule.layout_of(tensor).storage_shape(schedule.op.tensor(tensor).shape))


@lru_cache(maxsize=1024)
def index_ctype(schedule: Schedule) -> str:
    """``int``, or ``ptrdiff_t`` if twice the largest extent or array may exceed ``INT_MAX``: loop
    extents, op dims, every tensor in its schedule layout and, for a quantized op, its workspace
    tables (the compensation table, at most one entry per output element, and the
    activation sums). Twice: dead lanes and partial tiles compute indices up to one tile (at most
    an extent) past an array."""
    op = schedule.op
    sizes = [loop.extent for loop in schedule.loops] + [extent for _, extent in op.dims]
    sizes += [storage_elements(schedule, t) for t in op.tensors]
    if op.quant is not None:
        # a compensation entry per output channel and class (or weight batch): at most the output's size
        sizes += [math.prod(op.tensor(op.output).shape), op.output_positions]
    return "int" if 2 * max(sizes) <= INT_MAX else WIDE_INDEX


def check_lane_indices(schedule: Schedule, tensor: str, kind: str, stride: int, lanes: int) -> None:
    """ScheduleError if the 32-bit lane indices of a vector access of ``tensor`` may overflow: a
    gather indexes it from its start, strided lanes reach ``stride * (lanes - 1)``."""
    if kind == "gather":
        size = storage_elements(schedule, tensor)
        if 2 * size > INT_MAX:
            raise ScheduleError(f"vectorizing {schedule.vector_loop.name!r} gathers {tensor}, whose {size} "
                                f"elements are too many for the 32-bit lane indices of vector gathers "
                                f"(at most {INT_MAX // 2}); vectorize a loop along which {tensor} is "
                                f"contiguous, strided or constant, or use isa={SCALAR.name!r}")
    elif kind == "strided" and stride * (lanes - 1) > INT_MAX:
        raise ScheduleError(f"vectorizing {schedule.vector_loop.name!r} reads {tensor} with a stride of "
                            f"{stride} elements, too large for the 32-bit lane indices of {lanes} lanes "
                            f"(at most {INT_MAX // (lanes - 1)}); vectorize another loop or use "
                            f"isa={SCALAR.name!r}")
