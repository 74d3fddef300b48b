"""Pooling nodes (MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool): as loopopt kernels
(``pool.Pool`` ops, ``PoolSchedule`` compiled per input shape: ``PoolRunner``), and, for what the op
model refuses (an input dtype other than float32/uint8/int8, an average of 8-bit values, a window
entirely in the padding, more than 3 spatial dims), as whole-array numpy reductions over the window's
taps.

In numpy each tap of the window is one strided slice of the input (MaxPool: of the unpadded input,
into the output positions it reaches; AveragePool: of the padded input), combined with ``np.maximum``
or summed (MaxPool one spatial dim at a time: a 3x3 window is 3 + 3 vectorized passes). ``POOLS``
maps an op type to a function of the node's input and attributes; a node outside what both handle
(MaxPool's ``Indices`` output, ``storage_order``; in numpy also AveragePool with ``ceil_mode``) runs
on onnx.reference, and ``unsupported`` says why.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from types import ModuleType

import numpy as np
import onnx
from onnx import helper

from ..buffers import ALIGNMENT, aligned_empty
from ..ops import auto_pad
from ..pool import STAGED_BYTES, Pool, PoolSchedule
from ..targets.pool_c import PoolKernel
from .plan import KERNEL, NUMPY, REFERENCE, BoundCalls

POOL_ATTRIBUTES = {"auto_pad": "NOTSET", "ceil_mode": 0, "count_include_pad": 0, "dilations": None,
                   "kernel_shape": None, "pads": None, "storage_order": 0, "strides": None}


Geometry = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[tuple[int, int], ...]]


def _geometry(sizes: tuple[int, ...], attributes: dict) -> Geometry:
    """Kernel, strides, dilations and per-side pads ``((begin, end), ...)`` of a pooling node on an
    input of spatial ``sizes``."""
    spatial = len(sizes)
    kernel = tuple(attributes["kernel_shape"])
    strides = tuple(attributes["strides"] or (1,) * spatial)
    dilations = tuple(attributes["dilations"] or (1,) * spatial)
    mode = attributes["auto_pad"]
    if mode != "NOTSET":
        pads = auto_pad(mode, sizes, kernel, strides, dilations)
    else:
        flat = tuple(attributes["pads"] or (0,) * (2 * spatial))
        pads = tuple(zip(flat[:spatial], flat[spatial:]))
    return kernel, strides, dilations, pads


def _windows(spatial: tuple[int, ...], attributes: dict) -> tuple[Geometry, list[int]]:
    """A pooling node's geometry (``_geometry``) on an input of ``spatial`` sizes, and its output's."""
    kernel, strides, dilations, pads = geometry = _geometry(spatial, attributes)
    ceil = bool(attributes["ceil_mode"])
    return geometry, [_output_size(n, k, s, d, p, ceil)
                      for n, k, s, d, p in zip(spatial, kernel, strides, dilations, pads)]


def _output_size(size: int, k: int, s: int, d: int, pad: tuple[int, int], ceil: bool) -> int:
    """ONNX's output size along one dim; with ``ceil_mode`` a last window must start inside the input
    or its leading pad."""
    span = size + pad[0] + pad[1] - d * (k - 1) - 1
    out = (math.ceil(span / s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= size + pad[0]:
        out -= 1
    return out


def _taps(x: np.ndarray, attributes: dict, fill: float, xp: ModuleType = np):
    """The padded input's strided slice for each tap of the window, channels-last: ``x`` is
    ``(N, spatial..., C)`` (a channels-last view of the node's input; the taps then read whole
    rows of channels, and the output of a channels-last kernel is read without a transpose)."""
    (kernel, strides, dilations, pads), sizes = _windows(x.shape[1:-1], attributes)
    # pad past the end as far as the last window reaches (ceil_mode may reach beyond the given pad)
    ends = [max(p[1], (o - 1) * s + d * (k - 1) + 1 - n - p[0])
            for n, k, s, d, p, o in zip(x.shape[1:-1], kernel, strides, dilations, pads, sizes)]
    padded = xp.pad(x, [(0, 0)] + [(p[0], e) for p, e in zip(pads, ends)] + [(0, 0)], constant_values=fill)
    for tap in np.ndindex(*kernel):
        window = [slice(t * d, t * d + (o - 1) * s + 1, s)
                  for t, d, s, o in zip(tap, dilations, strides, sizes)]
        yield (slice(None), *window, slice(None)), padded


def _tap_ranges(x: np.ndarray, attributes: dict):
    """The output's shape and, for each tap of the window, the output positions whose tap falls inside
    the unpadded input and the strided slice of the input it reads there, channels-last (``x`` as in
    ``_taps``); a tap inside the pads for every output is left out."""
    (kernel, strides, dilations, pads), sizes = _windows(x.shape[1:-1], attributes)
    shape = (x.shape[0], *sizes, x.shape[-1])
    taps = []
    for tap in np.ndindex(*kernel):
        outs, ins = [slice(None)], [slice(None)]
        for n, t, s, d, p, o in zip(x.shape[1:-1], tap, strides, dilations, pads, sizes):
            offset = t * d - p[0]                  # the input index output 0 reads at this tap
            first, last = max(0, -(offset // s)), min(o - 1, (n - 1 - offset) // s)
            if first > last:
                break
            outs.append(slice(first, last + 1))
            ins.append(slice(first * s + offset, last * s + offset + 1, s))
        else:
            taps.append(((*outs, slice(None)), (*ins, slice(None))))
    return shape, taps


def _channels_last(x: np.ndarray) -> np.ndarray:
    return x.transpose(0, *range(2, x.ndim), 1)


def _channels_first(x: np.ndarray) -> np.ndarray:
    return x.transpose(0, x.ndim - 1, *range(1, x.ndim - 1))


def max_pool(x: np.ndarray, attributes: dict, xp: ModuleType = np) -> np.ndarray:
    """MaxPool, returned as a channels-last array viewed in the logical (N, C, spatial...) order. The
    maximum over a box is the maximum along each spatial dim in turn (``_max_along``, the outermost
    first: its taps read whole rows, and a stride shrinks what the next dim's passes read): 3 + 3
    passes for a 3x3 window instead of 9, the first of each a copy. ResNet-18's stem pool (64 channels,
    112x112, stride 2) ran 1.49-1.64 ms with 9 passes and 1.04-1.06 ms so, interleaved, on this
    project's shared Xeon with AMX. ``xp``: the array module of ``x`` (numpy; CuPy on a GPU), as for the
    pools below."""
    last = _channels_last(x)
    kernel, strides, dilations, pads = _geometry(last.shape[1:-1], attributes)
    begins, ends = zip(*pads)
    for axis in range(len(kernel)):
        one = dict(attributes, auto_pad="NOTSET", kernel_shape=_only(kernel, axis, 1),
                   strides=_only(strides, axis, 1), dilations=_only(dilations, axis, 1),
                   pads=_only(begins, axis, 0) + _only(ends, axis, 0))
        last = _max_along(last, one, xp)
    return _channels_first(last)


def _only(values: Sequence[int], axis: int, other: int) -> list[int]:
    """``values`` with every entry but ``axis``'s replaced by ``other``."""
    return [value if dim == axis else other for dim, value in enumerate(values)]


def _max_along(last: np.ndarray, attributes: dict, xp: ModuleType) -> np.ndarray:
    """The channels-last MaxPool of ``last`` (``attributes`` explicit, any window): each tap's maximum
    taken into the output positions it reaches inside the input (no padded copy); a tap that reaches
    every output position starts the output as a copy, else it starts at the dtype's lowest value."""
    shape, taps = _tap_ranges(last, attributes)
    first = next((read for window, read in taps if last[read].shape == shape), None)
    if first is None:
        out = xp.full(shape, -np.inf if last.dtype.kind == "f" else np.iinfo(last.dtype).min, last.dtype)
    else:
        out = xp.empty(shape, last.dtype)
        xp.copyto(out, last[first])
    for window, read in taps:
        if read is not first:
            xp.maximum(out[window], last[read], out=out[window])
    return out


def average_pool(x: np.ndarray, attributes: dict, xp: ModuleType = np) -> np.ndarray:
    """AveragePool, returned as ``max_pool`` returns its output."""
    total = count = None
    ones = xp.ones((1, *x.shape[2:], 1), x.dtype)
    counted = float(attributes["count_include_pad"])     # a pad counts 1 or 0 in the divisor
    for (window, padded), (_, mask) in zip(_taps(_channels_last(x), attributes, 0.0, xp),
                                           _taps(ones, attributes, counted, xp)):
        total = padded[window].copy() if total is None else total + padded[window]
        count = mask[window].copy() if count is None else count + mask[window]
    return _channels_first((total / count).astype(x.dtype))


def global_pool(reduce: str) -> Callable[..., np.ndarray]:
    """A global pool: the array module's ``reduce`` (``max``, ``mean``) over every spatial dim, kept as
    size-1 dims."""
    return lambda x, attributes, xp=np: getattr(xp, reduce)(x, axis=tuple(range(2, x.ndim)),
                                                            keepdims=True).astype(x.dtype)


POOLS: dict[str, Callable[..., np.ndarray]] = {     # (x, attributes, xp=numpy) -> the pooled array
    "MaxPool": max_pool,
    "AveragePool": average_pool,
    "GlobalMaxPool": global_pool("max"),
    "GlobalAveragePool": global_pool("mean"),
}


def pool_attributes(node: onnx.NodeProto) -> dict:
    """A pooling node's attributes over ``POOL_ATTRIBUTES``."""
    given = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return POOL_ATTRIBUTES | {k: v.decode() if isinstance(v, bytes) else v for k, v in given.items()}


def _node_refusal(rank: int, attributes: dict, outputs: Sequence[str]) -> str | None:
    """Why neither the kernels nor numpy run a pooling node on an input of ``rank`` dims, or None."""
    if rank < 3:
        return f"input of rank {rank} (pooling needs N, C and a spatial dim)"
    if len([o for o in outputs if o]) > 1:
        return "the Indices output"
    if attributes.get("storage_order"):
        return "storage_order=1"
    return None


def unsupported(op_type: str, x: np.ndarray, attributes: dict, outputs: Sequence[str]) -> str | None:
    """Why ``POOLS[op_type]`` does not run this node on ``x`` (an array, or what is known of one: its
    ``shape`` and ``dtype``), or None; onnx.reference runs it then."""
    refusal = _node_refusal(len(x.shape), attributes, outputs)
    if refusal is not None:
        return refusal
    if x.dtype.kind not in "fiu":
        return f"input dtype {x.dtype}"
    if op_type == "AveragePool" and attributes.get("ceil_mode"):
        return "AveragePool with ceil_mode=1"
    if op_type == "AveragePool" and x.dtype.kind != "f":
        return f"AveragePool of dtype {x.dtype}"
    return None


def selects_elements(op_type: str, shape: Sequence[int] | None, attributes: dict,
                     outputs: Sequence[str]) -> bool:
    """Whether each output of the pooling node is one of its input elements (a GlobalMaxPool, or a
    MaxPool without Indices, dilation or ceil_mode whose pads are narrower than its window, so every
    window reads an input element): a non-decreasing elementwise ``f`` then commutes with it,
    ``f(pool(x)) == pool(f(x))``. ``shape``: the input's, None if unknown."""
    if len([o for o in outputs if o]) != 1 or shape is None or len(shape) < 3:
        return False
    if op_type == "GlobalMaxPool":
        return True
    if op_type != "MaxPool" or attributes["ceil_mode"] or attributes["storage_order"]:
        return False
    kernel, _, dilations, pads = _geometry(tuple(shape[2:]), attributes)
    return all(d == 1 for d in dilations) and all(max(p) < k for k, p in zip(kernel, pads))


def pool_op(op_type: str, shape: Sequence[int], dtype: np.dtype, attributes: dict) -> Pool:
    """The loopopt op of a pooling node on an input of ``shape`` and ``dtype``; ValueError saying why
    where the op model refuses it."""
    sizes = tuple(shape[2:])
    kind = "max" if "Max" in op_type else "average"
    if op_type.startswith("Global"):
        return Pool(kind, shape[1], sizes, sizes, batch=shape[0], dtype=str(np.dtype(dtype)))
    kernel, strides, dilations, pads = _geometry(sizes, attributes)
    return Pool(kind, shape[1], sizes, kernel, strides, dilations, pads, bool(attributes["ceil_mode"]),
                bool(attributes["count_include_pad"]), shape[0], str(np.dtype(dtype)))


class PoolRunner:
    """A pooling node's run on an input array: its loopopt kernel (one per input shape and dtype, given
    at prepare by ``adopt`` or built on the first run of a shape, writing a channels-last buffer of its
    own that the next run overwrites), else ``POOLS`` where the op model refuses the input (``refusal``
    says why), else None: onnx.reference runs it (``unsupported``). A pool that selects elements may map
    each through a table (``map_through``: a lookup chain's, of 256 entries), in its kernel's store."""

    def __init__(self, op_type: str, attributes: dict, outputs: Sequence[str], threads: int = 1):
        self.op_type, self.attributes, self.outputs = op_type, attributes, tuple(outputs)
        self.threads = threads      # the model's: the kernel's rows split over up to this many
        self._kernels: dict[tuple, tuple[PoolKernel, np.ndarray, BoundCalls]] = {}
        self._last: BoundCalls | None = None      # the calls of the kernel the last run ran on
        self._ran: tuple | None = None            # the key of that kernel (``held``)
        self.table: np.ndarray | None = None      # what each max of 8-bit values is mapped through

    def map_through(self, table: np.ndarray) -> None:
        """Map each output (a max of 8-bit inputs) through ``table`` (256 entries, indexed by its bit
        pattern) from now on: set before the kernels are built (``adopt``)."""
        self.table = np.ascontiguousarray(table)

    def schedule(self, shape: Sequence[int], dtype: np.dtype, first: bool = False) -> PoolSchedule | str:
        """The kernel's schedule for an input of ``shape`` and ``dtype``, or why it does not run it;
        ``first``: the input arrives stored channels-first (its logical order), which a max whose rows fit
        the kernel's staging (``pool.STAGED_BYTES``) reads as it is."""
        refusal = _node_refusal(len(shape), self.attributes, self.outputs)
        if refusal is not None:
            return refusal
        try:
            op = pool_op(self.op_type, shape, dtype, self.attributes)
        except ValueError as error:
            return f"the loopopt kernel refuses it: {error}"
        reads_first = first and op.kind == "max" and op.sizes[-1] * np.dtype(dtype).itemsize <= STAGED_BYTES
        table = "" if self.table is None else str(self.table.dtype)
        try:
            return PoolSchedule(op, input_layout=op.first_layout if reads_first else op.layout, table=table)
        except ValueError as error:
            return f"the loopopt kernel refuses it: {error}"

    def engine(self, x: np.ndarray) -> tuple[str, str]:
        """What runs ``x`` (an array, or what is known of one: its ``shape`` and ``dtype``) and, where it
        is not the kernel, why."""
        found = self.schedule(x.shape, x.dtype)
        if not isinstance(found, str):
            return KERNEL, ""
        refusal = unsupported(self.op_type, x, self.attributes, self.outputs)
        return (NUMPY, found) if refusal is None else (REFERENCE, refusal)

    def adopt(self, kernel: PoolKernel) -> None:
        """Run inputs of ``kernel``'s op with it, into a buffer of its own, placed as a kernel's output
        buffer is (``buffers.aligned_empty``: 64-byte aligned, 64 zero bytes after it), so that a kernel
        that reads a little past the end of its input reads the pool's output in place (``zeros_follow``)."""
        op = kernel.schedule.op
        calls = BoundCalls(lambda x, out: kernel.bound(x, out, self.threads, self.table))
        out = aligned_empty(kernel.out_shape, kernel.out_dtype, ALIGNMENT)
        self._kernels[op.input_shape, kernel.dtype] = (kernel, out, calls)

    def __call__(self, x: np.ndarray) -> np.ndarray | None:
        """The pool of ``x`` (the kernel's output buffer, as its logical view), or None: the reference
        runs it."""
        key = (x.shape, x.dtype)
        self._last = None
        if key not in self._kernels:
            schedule = self.schedule(x.shape, x.dtype)
            if isinstance(schedule, str):
                if unsupported(self.op_type, x, self.attributes, self.outputs) is not None:
                    return None
                pooled = POOLS[self.op_type](x, self.attributes)
                return pooled if self.table is None else self.table[pooled.view(np.uint8)]
            self.adopt(schedule.compile())
        kernel, out, calls = self._kernels[key]
        calls(kernel.stored(x), out)
        self._last, self._ran = calls, key
        return kernel.logical(out)

    def held(self) -> tuple[np.ndarray, int] | None:
        """The output buffer of the kernel the last run ran on and the zero bytes after it (``adopt``);
        None where no kernel ran."""
        return None if self._last is None else (self._kernels[self._ran][1], ALIGNMENT)

    def move(self, buffer: np.ndarray) -> None:
        """Write that kernel's output into ``buffer`` from now on (``held``'s shape and dtype, followed by
        as many zero bytes: ``onnx.arena``)."""
        kernel, _, calls = self._kernels[self._ran]
        self._kernels[self._ran] = (kernel, buffer, calls)

    def last_call(self) -> tuple[Callable[..., None], tuple] | None:
        """The last run's C call, where a kernel ran it (``Step.last_call``)."""
        return None if self._last is None else self._last.last_call()
