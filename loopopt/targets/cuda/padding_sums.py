"""The padding of a quantized conv whose activations TMA copies (``pixel_boxes``): the copy engine fills
what lies outside the input with 0 (its only fills are zero and NaN), where the exact sum wants the
activations' zero point ``zx`` (``quantized``: the threads' copies fill the padding with it). An output
pixel's sums ``P`` then miss ``zx * O[k, pixel]``, ``O`` the sum of channel ``k``'s weights at the taps
that fell outside the input; the epilogue adds it back, in int32 as the rest:

    acc = P + zx * O[k, pixel] + lo_comp[k],    O = T[k] - (the weights' sum over the taps inside).

Along each window the taps inside are an interval ``[a, b)`` of its taps (the input position
``o * stride - pad + t * dilation`` grows with ``t``; ``lo_first_tap``, ``lo_end_tap``), so a pixel's taps
inside are a box of taps. The table (``table``, made per call beside the weights' sums ``T``, on the
host or the device) holds ``O`` for every box and channel, the channels fastest: ``lo_taps[box][k]``,
the box numbered by its intervals (``a <= b``: ``(taps + 1) (taps + 2) / 2`` a window, ``pairs``), so a
border pixel's term is one read a channel (consecutive channels: consecutive words), where a prefix
table of the sums took ``2^d + 1``. The epilogue works a pixel out once for all its channels (``row``:
``lo_edge``, the taps inside and the box ``lo_box``) and reads the table only for a border pixel
(``outside``); a pixel whose taps are all inside (the ``interior`` positions are constants of the op)
has ``O`` = 0.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from ...codegen.params import KernelParam
from ...expr import Expr, Var
from ...ops import Op, Window
from ...schedule import Schedule

TABLE = "lo_taps"           # the kernel parameter of the table of the sums outside each box of taps


def compensated(schedule: Schedule) -> bool:
    """Whether ``schedule``'s kernel adds the padding's weights back: a quantized conv with padding whose
    activations TMA copies."""
    op = schedule.op
    return (op.quant is not None and op.inputs[0] in schedule.tma_staged
            and any(window.padded for window in op.windows))


def parameter() -> KernelParam:
    return KernelParam(TABLE, "int32_t", const=True)


def pairs(taps: int) -> int:
    """The intervals ``[a, b)`` of a window's ``taps`` taps, ``0 <= a <= b <= taps``."""
    return (taps + 1) * (taps + 2) // 2


def shape(op: Op) -> tuple[int, ...]:
    """The table's shape: each window's intervals of taps (``pairs``), then the output channels."""
    return (*(pairs(window.taps) for window in op.windows), op.channels)


def table(op: Op, weights: Any, xp: ModuleType) -> Any:
    """The table (int32) of ``weights``' sums outside each box of taps (``shape``), the logical weights
    with the output channels first (``quantized.channels_first``; ``xp``'s arrays: numpy, or CuPy for
    device weights)."""
    index = list(op.index(op.inputs[1]))
    index[0], index[op.weight_channel_axis] = index[op.weight_channel_axis], index[0]
    taps = [index.index(Var(window.tap_dim)) for window in op.windows]
    others = tuple(axis for axis in range(1, len(index)) if axis not in taps)
    sums = weights.astype(np.int64).sum(axis=others)        # channels x the taps in axis order
    sums = sums.transpose(0, *(1 + sorted(taps).index(axis) for axis in taps))     # in window order
    total = sums.reshape(sums.shape[0], -1).sum(axis=1)
    inside = xp.zeros((sums.shape[0], *(window.taps + 1 for window in op.windows)), dtype=np.int64)
    for axis in range(1, sums.ndim):
        sums = sums.cumsum(axis=axis)
    inside[(slice(None), *(slice(1, None) for _ in taps))] = sums      # prefix sums: taps below each corner
    for axis, window in enumerate(op.windows, start=1):    # corner b minus corner a: each interval's
        starts, ends = zip(*((a, b) for a in range(window.taps + 1) for b in range(a, window.taps + 1)))
        inside = inside.take(xp.asarray(ends), axis=axis) - inside.take(xp.asarray(starts), axis=axis)
    outside = total.reshape(-1, *(1 for _ in taps)) - inside
    return xp.ascontiguousarray(xp.moveaxis(outside, 0, -1)).astype(np.int32)


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
    outside a window's ``interior`` (a border pixel), the taps inside the input along each window
    (``lo_a``, ``lo_b``) and their box's number in the table (``lo_box``)."""
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
    box = "0"
    for n, window in enumerate(windows):     # interval [a, b): a (2 taps + 3 - a) / 2 + b - a
        interval = f"lo_a{n} * ({2 * window.taps + 3} - lo_a{n}) / 2 + lo_b{n} - lo_a{n}"
        box = interval if box == "0" else f"({box}) * {pairs(window.taps)} + {interval}"
    return (f"const int {positions}; const int lo_edge = {' || '.join(border) or '0'}; "
            + " ".join(taps) + f" const int lo_box = {box};")


def outside(op: Op, channel: str) -> str:
    """The C expression of ``O`` of the output element of channel ``channel`` at a border pixel ``row``
    declared: the weights of its taps outside, one read of the table."""
    return f"{TABLE}[lo_box * {op.channels} + ({channel})]"
