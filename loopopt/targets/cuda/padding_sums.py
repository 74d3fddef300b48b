"""The padding of a quantized conv whose activations TMA copies (``pixel_boxes``): the copy engine fills
what lies outside the input with 0 (its only fills are zero and NaN), where the exact sum wants the
activations' zero point ``zx`` (``quantized``: the threads' copies fill the padding with it). An output
pixel's sums ``P`` then miss ``zx * O[k, pixel]``, ``O`` the sum of channel ``k``'s weights at the taps
that fell outside the input; the epilogue adds it back, in int32 as the rest:

    acc = P + zx * O[k, pixel] + lo_comp[k],    O = T[k] - (the weights' sum over the taps inside).

Along each window the taps inside are an interval ``[first, end)`` of its taps (the input position
``o * stride - pad + t * dilation`` grows with ``t``; ``lo_first_tap``, ``lo_end_tap``), so a pixel's taps
inside are a box of taps, whose weights' sum a prefix table per channel gives in ``2^d`` reads
(inclusion-exclusion over the box's corners): ``lo_taps[k][a][b] = sum_{kh < a, kw < b} sum_c
w[k, c, kh, kw]``, one entry more than the taps each way (``table``, made per call beside the weights'
sums ``T``, on the host or the device). The epilogue works a pixel out once for all its channels
(``row``: ``lo_edge`` and the taps inside) and reads the table only for a border pixel (``outside``); a
pixel whose taps are all inside (the ``interior`` positions are constants of the op) has ``O`` = 0.
"""
from __future__ import annotations

import itertools
import math
from types import ModuleType
from typing import Any

import numpy as np

from ...codegen.params import KernelParam
from ...expr import Expr, Var
from ...ops import Op, Window
from ...schedule import Schedule

TABLE = "lo_taps"           # the kernel parameter of the prefix table


def compensated(schedule: Schedule) -> bool:
    """Whether ``schedule``'s kernel adds the padding's weights back: a quantized conv with padding whose
    activations TMA copies."""
    op = schedule.op
    return (op.quant is not None and op.inputs[0] in schedule.tma_staged
            and any(window.padded for window in op.windows))


def parameter() -> KernelParam:
    return KernelParam(TABLE, "int32_t", const=True)


def shape(op: Op) -> tuple[int, ...]:
    """The prefix table's shape: the output channels by one more than each window's taps."""
    return (op.channels, *(window.taps + 1 for window in op.windows))


def table(op: Op, weights: Any, xp: ModuleType) -> Any:
    """The prefix table (int32) of ``weights``, the logical weights with the output channels first
    (``quantized.channels_first``; ``xp``'s arrays: numpy, or CuPy for device weights)."""
    index = list(op.index(op.inputs[1]))
    index[0], index[op.weight_channel_axis] = index[op.weight_channel_axis], index[0]
    taps = [index.index(Var(window.tap_dim)) for window in op.windows]
    others = tuple(axis for axis in range(1, len(index)) if axis not in taps)
    sums = weights.astype(np.int64).sum(axis=others)        # channels x the taps in axis order
    sums = sums.transpose(0, *(1 + sorted(taps).index(axis) for axis in taps))     # in window order
    for axis in range(1, sums.ndim):
        sums = sums.cumsum(axis=axis)
    out = xp.zeros(shape(op), dtype=np.int64)
    out[(slice(None), *(slice(1, None) for _ in taps))] = sums
    return out.astype(np.int32)


def helpers(device: bool) -> str:
    """``lo_first_tap`` and ``lo_end_tap``: along a window of ``taps`` taps ``d`` apart whose first tap
    reads input position ``v``, the first tap inside an input of ``size`` and the end of those inside."""
    qualifier = "static __device__ __forceinline__" if device else "static"
    return (f"{qualifier} int lo_first_tap(int v, int d, int taps)\n"
            f"{{ const int t = v >= 0 ? 0 : (d - 1 - v) / d; return t < taps ? t : taps; }}\n"
            f"{qualifier} int lo_end_tap(int v, int d, int taps, int size)\n"
            f"{{ const int u = size - 1 - v; const int t = u < 0 ? 0 : u / d + 1; "
            f"return t < taps ? t : taps; }}")


def interior(window: Window) -> tuple[int, int]:
    """The first and last output positions along ``window`` all of whose taps read inside the input."""
    return (-(-window.pad // window.stride),
            (window.size - 1 + window.pad - (window.taps - 1) * window.dilation) // window.stride)


def row(op: Op, dim_values: dict[str, Expr]) -> str:
    """The C statements of an output pixel at the position ``dim_values`` gives each window's output dim
    (expressions of the kernel's loops), once for all its channels: ``lo_edge``, whether the pixel is
    outside a window's ``interior`` (a border pixel), and the taps inside the input along each window
    (``lo_a``, ``lo_b``)."""
    windows = op.windows
    positions = ", ".join(f"lo_o{n} = (int) ({Var(window.out_dim).substitute(dim_values).to_c()})"
                          for n, window in enumerate(windows))
    border = []
    for n, window in enumerate(windows):
        first, last = interior(window)
        border += [f"lo_o{n} < {first}"] if first > 0 else []
        border += [f"lo_o{n} > {last}"] if last < window.out - 1 else []
    taps = [f"const int lo_v{n} = lo_o{n} * {window.stride} - {window.pad}, "
            f"lo_a{n} = lo_first_tap(lo_v{n}, {window.dilation}, {window.taps}), "
            f"lo_b{n} = lo_end_tap(lo_v{n}, {window.dilation}, {window.taps}, {window.size});"
            for n, window in enumerate(windows)]
    return (f"const int {positions}; const int lo_edge = {' || '.join(border) or '0'}; "
            + " ".join(taps))


def outside(op: Op, channel: str) -> str:
    """The C expression of ``O`` of the output element of channel ``channel`` at a border pixel ``row``
    declared: the weights of its taps outside, from the prefix table."""
    ends = [window.taps + 1 for window in op.windows]

    def entry(corner: tuple[str, ...]) -> str:
        return (f"{TABLE}[({channel}) * {math.prod(ends)} + "
                + " + ".join(f"{c} * {math.prod(ends[n + 1:])}" if n + 1 < len(ends) else c
                             for n, c in enumerate(corner)) + "]")

    corners = itertools.product(*((f"lo_b{n}", f"lo_a{n}") for n in range(len(ends))))
    inside = " ".join(f"{'-' if sum(c.startswith('lo_a') for c in corner) % 2 else '+'} {entry(corner)}"
                      for corner in corners)
    last = f"{TABLE}[({channel}) * {math.prod(ends)} + {math.prod(ends) - 1}]"
    return f"({last} - ({inside.removeprefix('+ ')}))"

