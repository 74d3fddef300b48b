"""A depthwise 2-D convolution read by its roles, as the cuda depthwise family and its preset see it.

An op is depthwise when its statement is in a convolution's form (``Op.windows``) with two windows
(rows, then columns), one position dim (the batch), and one channel per group: ``groups`` equal to
the output channels and a reduction over input channels (``reduction_channel_dim``) of extent 1. A
``Conv2d(C, C, ..., groups=C)`` is one, and so is any ``Contraction`` written in that form, e.g.
``O[n,k,y,x] += I[n,k+c,y+r-1,x+s-1] * W[k,c,r,s]``: the kernels and the preset read the dims, sizes,
strides, pads and dilations from the roles, never from a class's attributes. The one definition of a
thread's channel vector (``vector``: 16 bytes of the op's element type) lives here, where the preset
(``dataflows``) and the kernel family (``targets/cuda/depthwise.py``) both may import it.
"""
from __future__ import annotations

from dataclasses import dataclass

from .ops import Op, Window
from .schedule import ScheduleError

VECTOR_BYTES = 16            # one load of a thread's channels
ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
FAMILY = "the cuda depthwise kernels (gpu_depthwise)"


@dataclass(frozen=True)
class DepthwiseRoles:
    """The dims of a depthwise op by role: ``batch`` (the one position dim), ``channel`` (the output
    channels, one a group), ``reduction`` (over a group's one input channel), the ``rows`` and
    ``columns`` windows (their out, tap, size, stride, pad and dilation)."""

    op: Op
    batch: str
    channel: str
    reduction: str
    rows: Window
    columns: Window

    @classmethod
    def of(cls, op: Op) -> DepthwiseRoles:
        """The roles of ``op``; ScheduleError naming what it misses (``missing``)."""
        missing = cls.missing(op)
        if missing:
            raise ScheduleError(missing)
        return cls(op, op.position_dims[0], op.channel_dim, op.reduction_channel_dim, *op.windows)

    @staticmethod
    def missing(op: Op) -> str | None:
        """Why ``op`` is no depthwise convolution of a float type the kernels take, in one line; None if
        it is one."""
        windows, positions = op.windows, op.position_dims
        if len(windows) != 2:
            return (f"{op!r} has {len(windows)} sliding windows; {FAMILY} take a convolution of 2 (rows and "
                    f"columns) of one channel per group")
        if len(positions) != 1:
            return f"{op!r} has position dims {positions}; {FAMILY} take one (the batch)"
        inputs = op.groups * op.extent(op.reduction_channel_dim)
        if not op.groups == op.channels == inputs:
            return (f"{op!r} has groups={op.groups} for {inputs} input and {op.channels} output channels; "
                    f"{FAMILY} take groups == in_channels == out_channels (one channel per group)")
        if op.quant is not None or op.dtype not in ELEMENT_BYTES:
            return (f"{op!r} is {op.quant or op.dtype}; {FAMILY} take {', '.join(ELEMENT_BYTES)} "
                    f"(float32 sums)")
        return None

    @property
    def batches(self) -> int:
        return self.op.extent(self.batch)

    @property
    def channels(self) -> int:
        return self.op.channels

    @property
    def vector(self) -> int:
        """Channels of one 16-byte load of the op's input: 8 float16/bfloat16, 4 float32."""
        return VECTOR_BYTES // ELEMENT_BYTES[self.op.dtype]

    @property
    def layouts(self) -> dict[str, str]:
        """The layout tags the kernels read: the input's and the output's channels (the input's: the axis
        of the reduction over them) last after the batch, rows and columns (2-D: ``NHWC``), the weights'
        taps, then their input and output channel (``HWIO``)."""
        image = (self.batch, self.rows.out_dim, self.columns.out_dim)
        (source, weights), output = self.op.inputs, self.op.output
        taps = (self.rows.tap_dim, self.columns.tap_dim)
        return {source: self._tag(source, (*image, self.reduction)),
                output: self._tag(output, (*image, self.channel)),
                weights: self._tag(weights, (*taps, self.reduction, self.channel))}

    def _tag(self, tensor: str, dims: tuple[str, ...]) -> str:
        """The letters of ``tensor``'s axes that read ``dims``, in that order."""
        letters = self.op.tensor(tensor).letters
        return "".join(letters[self.op.axis(tensor, dim)] for dim in dims)
