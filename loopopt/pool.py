"""Pooling as an op: a max or mean reduction of each channel over a sliding window (ONNX's MaxPool,
AveragePool, GlobalMaxPool, GlobalAveragePool; PyTorch's max_pool/avg_pool).

``Pool`` is the computation: its iteration domain is the box of ``n, c``, the output positions and
the window's taps, minus the taps that fall into the padding (``domain``, an isl set; ``access_maps``:
``I[n, c, o*s - p + t*d, ...]`` and ``O[n, c, o, ...]``), its statement ``O = max(O, I)`` or
``O += I`` then ``O /= count``. Padding follows ONNX: MaxPool pads with -inf (the padded taps never
win, so they are left out), AveragePool divides by the taps inside the input
(``count_include_pad=False``) or inside the padded input (``True``); ``ceil_mode`` adds a last window
that starts inside the input or its leading pad. ``reference`` computes it in numpy from the padded
input. ``PoolSchedule`` is how a kernel runs it: channels-last output, the output positions outer,
the taps, and the channels innermost in blocks of ``lanes`` held in vector registers; its input stored
channels-last, or (a max) channels-first as a conv may hand it on: each block's rows then reduced over
the outer dims' taps first (contiguous rows), transposed, and reduced over the last dim's taps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import islpy as isl
import numpy as np

from .ops import STATEMENT, Window

KINDS = ("max", "average")
DTYPES = ("float32", "uint8", "int8")
OUT_DIMS = {1: ("ow",), 2: ("oh", "ow"), 3: ("od", "oh", "ow")}
TAP_DIMS = {1: ("kw",), 2: ("kh", "kw"), 3: ("kd", "kh", "kw")}
LAYOUTS = {1: "NWC", 2: "NHWC", 3: "NDHWC"}     # the kernels' storage layout (channels-last)
FIRST_LAYOUTS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}     # an input stored channels-first (the logical order)
VECTOR_BYTES = 256          # the default channel block: four 64-byte vectors
STAGED_BYTES = 1 << 16      # a channels-first block's rows staged on the stack, at most (twice: transposed)


def _ints(value: int | tuple[int, ...] | list[int], spatial: int, name: str, least: int) -> tuple[int, ...]:
    """``value`` as one int per spatial dim, each at least ``least``; ValueError naming it otherwise."""
    values = (value,) * spatial if isinstance(value, int) else tuple(value)
    if len(values) != spatial or not all(isinstance(v, (int, np.integer)) and v >= least for v in values):
        raise ValueError(f"{name}={value!r}: needs {spatial} integer(s) >= {least} (one per spatial dim)")
    return tuple(int(v) for v in values)


@dataclass(frozen=True)
class Pool:
    """A ``kind`` ("max" or "average") pool of ``channels`` channels of ``batch`` inputs of spatial
    ``sizes`` (1 to 3 dims) over a window of ``kernel`` taps, with ONNX's ``strides``, ``dilations``,
    per-side ``pads`` (``((begin, end), ...)``, or one int for every side), ``ceil_mode`` and
    ``count_include_pad``; ``dtype`` float32, or uint8/int8 for a max (exact)."""

    kind: str
    channels: int
    sizes: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...] | int = 1
    dilations: tuple[int, ...] | int = 1
    pads: tuple[tuple[int, int], ...] | int = 0
    ceil_mode: bool = False
    count_include_pad: bool = False
    batch: int = 1
    dtype: str = "float32"
    windows: tuple[Window, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r}: a pool is one of {', '.join(KINDS)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r}: a pool's input is one of {', '.join(DTYPES)}")
        if self.kind == "average" and self.dtype != "float32":
            raise ValueError(f"an average pool of {self.dtype} needs ONNX's rounding of the mean "
                             "(QLinearAveragePool), which is not built: only float32 averages")
        sizes = self.sizes if isinstance(self.sizes, (tuple, list)) else (self.sizes,)
        spatial = len(sizes)
        if spatial not in OUT_DIMS:
            raise ValueError(f"sizes={self.sizes!r}: pools of 1 to 3 spatial dims, got {spatial}")
        fixed = {"sizes": _ints(sizes, spatial, "sizes", 1),
                 "kernel": _ints(self.kernel, spatial, "kernel", 1),
                 "strides": _ints(self.strides, spatial, "strides", 1),
                 "dilations": _ints(self.dilations, spatial, "dilations", 1),
                 "channels": _ints(self.channels, 1, "channels", 1)[0],
                 "batch": _ints(self.batch, 1, "batch", 1)[0],
                 "ceil_mode": bool(self.ceil_mode), "count_include_pad": bool(self.count_include_pad)}
        pads = self.pads
        pairs = ((pads, pads),) * spatial if isinstance(pads, int) else tuple(tuple(p) for p in pads)
        if len(pairs) != spatial or not all(len(p) == 2 and min(p) >= 0 for p in pairs):
            raise ValueError(f"pads={pads!r}: needs one (begin, end) pair of integers >= 0 per spatial dim "
                             f"({spatial})")
        fixed["pads"] = tuple((int(b), int(e)) for b, e in pairs)
        for name, value in fixed.items():
            object.__setattr__(self, name, value)
        windows = tuple(self._window(axis) for axis in range(spatial))
        object.__setattr__(self, "windows", windows)
        for window in windows:
            if window.out < 1:
                raise ValueError(f"the window along {window.out_dim} ({window.taps} taps, dilation "
                                 f"{window.dilation}) is larger than its padded input ({window.size} + "
                                 f"pads {window.pad}, {window.pad_end})")
            if not all(any(0 <= o * window.stride - window.pad + t * window.dilation < window.size
                           for t in range(window.taps)) for o in range(window.out)):
                raise ValueError(f"pads {self.pads} leave a window along {window.out_dim} entirely in the "
                                 f"padding (every window needs a tap inside the input)")

    def _window(self, axis: int) -> Window:
        """The sliding window of spatial dim ``axis``: ONNX's output size (with ``ceil_mode``, rounded up
        while the last window starts inside the input or its leading pad)."""
        size, k, s, d = self.sizes[axis], self.kernel[axis], self.strides[axis], self.dilations[axis]
        begin, end = self.pads[axis]
        span = size + begin + end - d * (k - 1) - 1
        out = (math.ceil(span / s) if self.ceil_mode else span // s) + 1 if span >= 0 else 0
        if self.ceil_mode and out > 0 and (out - 1) * s >= size + begin:
            out -= 1
        spatial = len(self.sizes)
        return Window(OUT_DIMS[spatial][axis], TAP_DIMS[spatial][axis], out, k, s, begin, d, size, end)

    @property
    def output_sizes(self) -> tuple[int, ...]:
        return tuple(window.out for window in self.windows)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The input's logical shape ``(N, C, spatial...)``."""
        return (self.batch, self.channels, *self.sizes)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (self.batch, self.channels, *self.output_sizes)

    @property
    def layout(self) -> str:
        """The storage layout of the kernels' output, and of their input by default (a format tag:
        channels-last)."""
        return LAYOUTS[len(self.sizes)]

    @property
    def first_layout(self) -> str:
        """The channels-first storage layout a max pool's kernel may read its input in (the logical order)."""
        return FIRST_LAYOUTS[len(self.sizes)]

    @property
    def dims(self) -> tuple[tuple[str, int], ...]:
        """The loops of the statement: ``n``, ``c``, the output positions, then the taps (reductions)."""
        return (("n", self.batch), ("c", self.channels), *((w.out_dim, w.out) for w in self.windows),
                *((w.tap_dim, w.taps) for w in self.windows))

    @property
    def reduction_dims(self) -> frozenset[str]:
        return frozenset(w.tap_dim for w in self.windows)

    @cached_property
    def domain(self) -> isl.Set:
        """``{ S[dims] : box, and every tap inside the input }`` (padded taps do not exist)."""
        box = [f"0 <= {name} < {extent}" for name, extent in self.dims]
        inside = [f"0 <= {w.input_index.to_isl()} < {w.size}" for w in self.windows]
        names = ", ".join(name for name, _ in self.dims)
        return isl.Set(f"{{ {STATEMENT}[{names}] : {' and '.join(box + inside)} }}")

    @cached_property
    def instances(self) -> int:
        """Statement instances: (output element, tap inside the input) pairs, the combines a kernel does."""
        return int(self.domain.count_val().to_python())

    @cached_property
    def access_maps(self) -> dict[str, isl.Map]:
        """The input's and the output's accesses, maps from ``domain`` to their logical index spaces."""
        names = ", ".join(name for name, _ in self.dims)
        reads = ", ".join(w.input_index.to_isl() for w in self.windows)
        writes = ", ".join(w.out_dim for w in self.windows)
        return {tensor: isl.Map(f"{{ {STATEMENT}[{names}] -> {tensor}[n, c, {index}] }}").intersect_domain(
            self.domain) for tensor, index in (("I", reads), ("O", writes))}

    def __str__(self) -> str:
        geometry = (f"{'x'.join(map(str, self.kernel))} window, stride {self.strides}, dilation "
                    f"{self.dilations}, pads {self.pads}")
        extras = ", ceil_mode" * self.ceil_mode + ", count_include_pad" * self.count_include_pad
        return (f"{self.kind} pool of {self.batch}x{self.channels}x{'x'.join(map(str, self.sizes))} "
                f"{self.dtype}: {geometry}{extras}")

    def reference(self, x: np.ndarray) -> np.ndarray:
        """The pool of ``x`` (logical ``(N, C, spatial...)``) in numpy: each tap's strided slice of the input
        padded (with the dtype's lowest value for a max, zeros for a sum) as far as the last window
        reaches, combined in float64 for an average (then rounded to float32)."""
        x = np.asarray(x)
        if x.shape != self.input_shape or x.dtype != np.dtype(self.dtype):
            raise ValueError(f"the input of {self} must be {self.dtype} of shape {self.input_shape}, got "
                             f"{x.dtype} {x.shape}")
        ends = [max(w.pad_end, (w.out - 1) * w.stride + w.dilation * (w.taps - 1) + 1 - w.size - w.pad)
                for w in self.windows]
        widths = [(0, 0), (0, 0)] + [(w.pad, end) for w, end in zip(self.windows, ends)]
        lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        if self.kind == "max":
            padded = np.pad(x, widths, constant_values=lowest)
            return np.max(np.stack([padded[self._tap(tap)] for tap in np.ndindex(*self.kernel)]), axis=0)
        padded = np.pad(x.astype(np.float64), widths)
        inside = np.pad(np.ones(self.sizes), widths[2:])
        if self.count_include_pad:      # the pads count, not what ceil_mode reaches beyond them
            inside = np.pad(np.ones([w.size + w.pad + w.pad_end for w in self.windows]),
                            [(0, end - w.pad_end) for w, end in zip(self.windows, ends)])
        total = sum(padded[self._tap(tap)] for tap in np.ndindex(*self.kernel))
        count = sum(inside[self._tap(tap)[2:]] for tap in np.ndindex(*self.kernel))
        return (total / count).astype(np.float32)

    def _tap(self, tap: tuple[int, ...]) -> tuple[slice, ...]:
        """The slice of the padded input that ``tap`` reads for every output position."""
        return (slice(None), slice(None), *(slice(t * w.dilation, t * w.dilation + (w.out - 1) * w.stride + 1,
                                                  w.stride) for t, w in zip(tap, self.windows)))


@dataclass(frozen=True)
class PoolSchedule:
    """How a kernel runs ``op``: output stored channels-last (``op.layout``), input stored in
    ``input_layout`` (``op.layout``, the default, or for a max ``op.first_layout``), the loops ``n``, the
    output positions, ``c_o`` (channel blocks), the taps inside the input, and ``c_i``: ``lanes``
    channels held in vector registers across the taps (default: ``VECTOR_BYTES`` of them; a last block
    of the remainder). A channels-first input's block of rows (``lanes`` x the last input dim, at most
    ``STAGED_BYTES``; default lanes as many as fit, up to ``VECTOR_BYTES``) is reduced over the outer
    dims' taps, then transposed, then reduced over the last dim's taps. ``table``: the dtype (float32,
    uint8 or int8) of a table of 256 entries that each max of 8-bit values is mapped through as it is
    stored (indexed by its bit pattern: the ONNX backend's lookup of a non-decreasing chain, which
    commutes with the max), the output of that dtype; empty: none."""

    op: Pool
    lanes: int = 0
    input_layout: str = ""
    table: str = ""

    def __post_init__(self) -> None:
        op, itemsize = self.op, np.dtype(self.op.dtype).itemsize
        layout = self.input_layout or op.layout
        if layout not in (op.layout, op.first_layout):
            raise ValueError(f"input_layout={self.input_layout!r}: the input of a {len(op.sizes)}-D pool is "
                             f"stored {op.layout} or {op.first_layout}")
        first = layout == op.first_layout
        if first and op.kind != "max":
            raise ValueError(f"input_layout={layout!r}: an average reads its input {op.layout} (only a max "
                             "pool reduces channels-first rows)")
        if self.table and (self.table not in DTYPES or op.kind != "max" or op.dtype == "float32"):
            raise ValueError(f"table={self.table!r}: a max of 8-bit values maps through a table of one of "
                             f"{', '.join(DTYPES)}, not a {op.kind} of {op.dtype}")
        row = op.sizes[-1] * itemsize
        most = VECTOR_BYTES // itemsize
        if first:
            most = max(1, min(most, STAGED_BYTES // row))
        lanes = self.lanes or max(1, min(op.channels, most))
        if not isinstance(lanes, (int, np.integer)) or lanes < 1:
            raise ValueError(f"lanes={self.lanes!r}: the channel block needs an integer >= 1")
        if first and lanes * row > STAGED_BYTES:
            raise ValueError(f"lanes={lanes}: a channels-first block of rows ({lanes} x {op.sizes[-1]} "
                             f"{op.dtype}) must fit {STAGED_BYTES} bytes")
        object.__setattr__(self, "lanes", int(lanes))
        object.__setattr__(self, "input_layout", layout)

    @property
    def out_dtype(self) -> str:
        """The output's dtype: the table's, else the input's."""
        return self.table or self.op.dtype

    @property
    def channels_first(self) -> bool:
        """Whether the input is stored channels-first (``op.first_layout``)."""
        return self.input_layout == self.op.first_layout

    @property
    def loops(self) -> tuple[tuple[str, int, str], ...]:
        """The nest, outermost first: (name, extent, note)."""
        op, lanes = self.op, self.lanes
        blocks, tail = divmod(op.channels, lanes)
        block_note = f"{blocks} block(s) of {lanes}" + (f" and one of {tail}" if tail else "")
        *outer, last = op.windows
        if self.channels_first:
            return (("n", op.batch, ""), *((w.out_dim, w.out, "") for w in outer),
                    ("c_o", blocks + bool(tail), block_note + "; its rows staged, transposed after the taps"),
                    *((w.tap_dim, w.taps, "taps inside the input: whole input rows") for w in outer),
                    (last.out_dim, last.out, "over the transposed rows"),
                    (last.tap_dim, last.taps, "taps inside the input"),
                    ("c_i", lanes, "vector: contiguous channels"))
        return (("n", op.batch, ""), *((w.out_dim, w.out, "") for w in op.windows),
                ("c_o", blocks + bool(tail), block_note),
                *((w.tap_dim, w.taps, "taps inside the input") for w in op.windows),
                ("c_i", lanes, "vector: contiguous channels"))

    def pseudocode(self) -> str:
        """The nest as text, one loop a line."""
        body = ("O[n, c, o...] = " + (f"table[max over taps of I]   # {self.table}" if self.table else
                                      "max over taps of I" if self.op.kind == "max" else
                                      "sum over taps of I / count"))
        return "\n".join([f"{'  ' * depth}for {name} in 0..{extent}" + (f"   # {note}" if note else "")
                          for depth, (name, extent, note) in enumerate(self.loops)]
                         + [f"{'  ' * len(self.loops)}{body}   # {self.stored}"])

    @property
    def stored(self) -> str:
        """The storage of the input and output: one layout, or ``input -> output``."""
        return self.op.layout if not self.channels_first else f"{self.input_layout} -> {self.op.layout}"

    def compile(self, target: str | None = None):
        """The kernel of this schedule on ``target`` (default: the host's; ``Target.pool_kernels``)."""
        from .targets import registry

        return (registry.host_target() if target is None else registry.target(target)).pool_kernels([self])[0]
