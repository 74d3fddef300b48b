"""A matrix product read by its roles, as the cuda GEMV family and its preset see it.

An op is a matrix product when its statement has no sliding window, one position dim (the ``rows``:
no batch), the output channels (``outputs``), one reduction dim, two inputs (the activations, read at
the rows and the reduction, then the weights, read at the outputs and the reduction) and neither a bias
nor scales. A ``Matmul`` (transposed operands too) is one, and so is any ``Contraction`` written in that
form, e.g. ``C[i,j] += A[i,k] * W[j,k]``: the kernels and the preset read the dims, sizes and layout
letters from the roles, never from a class's attributes.
"""
from __future__ import annotations

from dataclasses import dataclass

from .expr import Var
from .ops import Op
from .schedule import ScheduleError

FAMILY = "the cuda GEMV kernels (a loop bound to a warp axis without tensorize)"


@dataclass(frozen=True)
class GemvRoles:
    """The dims of a matrix product by role: ``rows`` (the one position dim), ``outputs`` (the output
    channels) and ``reduction``; ``activations`` and ``weights``, the inputs by role."""

    op: Op
    rows: str
    outputs: str
    reduction: str

    @staticmethod
    def missing(op: Op) -> str | None:
        """Why ``op`` is no matrix product the family takes, in one line; None if it is one."""
        if op.windows:
            return f"{op!r} has {len(op.windows)} sliding windows; {FAMILY} take a matrix product (none)"
        if op.bias or op.scales is not None:
            return (f"{op!r} adds a bias or scales its sums; {FAMILY} take a plain matrix product (use "
                    f"gpu_mma for the others)")
        if len(op.position_dims) != 1:
            return (f"{op!r} has position dims {op.position_dims}; {FAMILY} take one (the rows): a batched "
                    f"product (a loop per batch) is not in them")
        if len(op.reduction_dims) != 1 or len(op.inputs) != 2:
            return (f"{op!r} reduces over {sorted(op.reduction_dims)} with inputs {op.inputs}; {FAMILY} take "
                    f"one reduction dim over two inputs")
        rows, outputs, reduction = op.position_dims[0], op.channel_dim, next(iter(op.reduction_dims))
        for tensor, dims in zip(op.inputs, ((rows, reduction), (outputs, reduction)), strict=True):
            index = op.index(tensor)
            if len(index) != 2 or {e.name for e in index if isinstance(e, Var)} != set(dims):
                read = ",".join(e.to_c() for e in index)
                return (f"{op!r} reads {tensor}[{read}]; {FAMILY} take the activations at "
                        f"({rows}, {reduction}) and the weights at ({outputs}, {reduction}) in some order")
        return None

    @classmethod
    def of(cls, op: Op) -> GemvRoles:
        """The roles of ``op``; ScheduleError naming what it misses (``missing``)."""
        problem = cls.missing(op)
        if problem is None:
            return cls(op, op.position_dims[0], op.channel_dim, *op.reduction_dims)
        raise ScheduleError(problem)

    @property
    def activations(self) -> str:
        return self.op.inputs[0]

    @property
    def weights(self) -> str:
        return self.op.inputs[1]

    @property
    def m(self) -> int:
        """The rows."""
        return self.op.extent(self.rows)

    @property
    def n(self) -> int:
        """The outputs of a row."""
        return self.op.extent(self.outputs)

    @property
    def k(self) -> int:
        """The products summed into an output."""
        return self.op.extent(self.reduction)

    def layouts(self, vector: int) -> dict[str, str]:
        """The layout tags the kernels read, ``vector`` inputs in 16 bytes: the weights' outputs, then their
        reduction in blocks of ``vector`` (a Matmul's ``NK{vector}k``), the activations' rows, then their
        reduction likewise (``MK{vector}k``), the output's rows, then outputs (``MN``)."""
        return {self.weights: self._blocked(self.weights, self.outputs, vector),
                self.activations: self._blocked(self.activations, self.rows, vector),
                self.op.output: "".join(self._letter(self.op.output, d) for d in (self.rows, self.outputs))}

    def _blocked(self, tensor: str, outer: str, vector: int) -> str:
        """``tensor``'s tag: ``outer``'s letter, the reduction's, then its blocks of ``vector``."""
        reduction = self._letter(tensor, self.reduction)
        return f"{self._letter(tensor, outer)}{reduction}{vector}{reduction.lower()}"

    def _letter(self, tensor: str, dim: str) -> str:
        """The letter of ``tensor``'s axis that reads ``dim``."""
        return self.op.tensor(tensor).letters[self.op.axis(tensor, dim)]
