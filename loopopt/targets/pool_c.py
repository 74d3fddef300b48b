"""Pooling kernels (``pool.PoolSchedule``) as generated C: one function per op, every extent a
constant, channels-last input and output. Per output position the taps inside the input are counted
from the position (no guard in the tap loops), and each block of ``lanes`` channels is reduced in a
local array over the taps: with the block a constant and the channels contiguous, the compiler holds
the block in vector registers (``Target.vector_flags``: x86's AVX-512, four zmm registers of float32
or 8-bit lanes for the default block) and the combine is a vector max or add. A max keeps the larger
of the two (``a > b ? a : b``: exact, NaN inputs aside); an average sums in float32 in tap order and
divides by the count of the taps inside the input (or the padded input: ``count_include_pad``).
The rows (an image's output positions of one index of the first spatial dim) are split over the threads
a call gives (``threaded_c.threaded``: contiguous ranges; one thread calls the serial loop itself):
``PoolKernel.threads_for`` takes one thread per ``threaded_c.MIN_CHUNK`` input elements, at most one per
row. A float32 3x3/2 MaxPool of 64x112x112 (ResNet's), channels-last, Xeon (AMX) under chrt -f: 1 thread
171-178 us, 2 threads 82-84 us (in a whole-model run the step had taken 0.32-0.35 ms on one thread and
on two; onnxruntime's 0.28 -> 0.15-0.18 ms); its uint8 twin 30 -> 33 us on one thread (the rows' loop),
19 us on two.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from ..cbuild import compile_c
from ..codegen.cprint import block, for_loop, nest
from ..openmp import OPENMP_FLAG
from ..ops import Window
from ..pool import PoolSchedule
from .threaded_c import HEADER, THREADS_PARAM, threaded, threads_for
from .transpose import Transpose

FUNCTION = "lo_pool"
C_TYPES = {"float32": "float", "uint8": "unsigned char", "int8": "signed char"}
LOWEST = {"float32": "-INFINITY", "uint8": "0", "int8": "-128"}


def _bounds(window: Window, include_pad: bool) -> list[str]:
    """C lines after the loop of ``window.out_dim``: its first input index ``i<dim>`` (of tap 0), and the
    taps inside the input, ``<tap>_lo`` to ``<tap>_hi`` (and with ``include_pad``, ``<tap>_span``: those
    inside the padded input, the average's count)."""
    index, tap, d = f"i{window.out_dim[1:]}", window.tap_dim, window.dilation
    lines = [f"const long {index} = {window.out_dim} * {window.stride} - {window.pad};",
             f"const long {tap}_lo = {index} < 0 ? ({d - 1} - {index}) / {d} : 0;",
             f"const long {tap}_end = ({window.size + d - 1} - {index}) / {d};",
             f"const long {tap}_hi = {tap}_end < {window.taps} ? {tap}_end : {window.taps};"]
    if include_pad:
        padded = window.size + window.pad_end
        lines += [f"const long {tap}_reach = ({padded + d - 1} - {index}) / {d};",
                  f"const long {tap}_span = {tap}_reach < {window.taps} ? {tap}_reach : {window.taps};"]
    return lines


def _offset(terms: list[tuple[str, int]]) -> str:
    """A row-major offset: ``terms`` are (index expression, extent) pairs, the first outermost."""
    offset = terms[0][0]
    for expr, extent in terms[1:]:
        offset = f"({offset}) * {extent} + {expr}"
    return offset


def _channel_block(schedule: PoolSchedule, lanes: int) -> list[str]:
    """The reduction of the ``lanes`` channels from ``c_o`` over the taps inside the input, stored."""
    op = schedule.op
    c_type, channels = C_TYPES[op.dtype], op.channels
    init = LOWEST[op.dtype] if op.kind == "max" else "0.0f"
    combine = "in[c_i] > acc[c_i] ? in[c_i] : acc[c_i]" if op.kind == "max" else "acc[c_i] + in[c_i]"
    finish = "acc[c_i]" if op.kind == "max" else "acc[c_i] / count"
    lane_loop = for_loop("int", "c_i", lanes)
    position = _offset([("n", op.batch)] + [(f"i{w.out_dim[1:]} + {w.tap_dim} * {w.dilation}", w.size)
                                            for w in op.windows])
    taps = [for_loop("long", w.tap_dim, f"{w.tap_dim}_hi", f"{w.tap_dim}_lo") for w in op.windows]
    reduce = [f"const {c_type} *in = x + ({position}) * {channels} + c_o;",
              *block(lane_loop, [f"acc[c_i] = {combine};"])]
    return [f"{c_type} acc[{lanes}];",
            *block(lane_loop, [f"acc[c_i] = {init};"]),
            *nest(taps, reduce),
            *block(lane_loop, [f"out[c_o + c_i] = {finish};"])]


def source(schedule: PoolSchedule, function: str = FUNCTION) -> str:
    """The C of ``schedule``'s kernel: ``void function(const T *x, T *y)`` over channels-last arrays."""
    op, lanes = schedule.op, schedule.lanes
    c_type = C_TYPES[op.dtype]
    full, tail = divmod(op.channels, lanes)
    position = _offset([("n", op.batch)] + [(w.out_dim, w.out) for w in op.windows])
    body = [f"{c_type} *out = y + ({position}) * {op.channels};"]
    if op.kind == "average":
        counted = [f"({w.tap_dim}_span)" if op.count_include_pad else f"({w.tap_dim}_hi - {w.tap_dim}_lo)"
                   for w in op.windows]
        body.append(f"const float count = (float)({' * '.join(counted)});")
    if full:
        body += block(for_loop("long", "c_o", full * lanes, step=lanes), _channel_block(schedule, lanes))
    if tail:
        body += block("", [f"const long c_o = {full * lanes};", *_channel_block(schedule, tail)],
                      note=f" /* the last {tail} channel(s) */")
    first, *others = op.windows
    for window in reversed(others):
        body = block(for_loop("long", window.out_dim, window.out),
                     _bounds(window, op.count_include_pad) + body)
    row = [f"const long n = lo_row / {first.out}, {first.out_dim} = lo_row % {first.out};",
           *_bounds(first, op.count_include_pad)]
    body = block(for_loop("long", "lo_row", "lo_end", "lo_begin"), row + body)
    notes = "\n".join(f"/* {text} */" for text in (str(op), *schedule.pseudocode().splitlines()))
    rows = (f"static void {function}_rows(const {c_type} *restrict x, {c_type} *restrict y, long lo_begin, "
            "long lo_end)")
    call = f"{function}_rows(x, y, lo_begin, lo_end)"
    return "\n".join([notes, *block(rows, body), threaded(_declaration(schedule, function)[:-1], call, 1)])


def _declaration(schedule: PoolSchedule, function: str) -> str:
    c_type = C_TYPES[schedule.op.dtype]
    return f"void {function}(const {c_type} *x, {c_type} *y, long n, {THREADS_PARAM});"


class PoolKernel:
    """A compiled pool: ``kernel(x, out=None)`` on a logical ``(N, C, spatial...)`` array, returning the
    logical view of a channels-last output (``out``: that channels-last buffer to write, shape ``(N,
    spatial..., C)``); an input stored otherwise than channels-last is copied into it first (a contiguous
    NCHW one by ``transpose``: each image's C x spatial matrix transposed). ``source``: its C; ``name``:
    how it was built."""

    def __init__(self, schedule: PoolSchedule, source: str, module, function: str, flags: tuple[str, ...],
                 transpose: Transpose):
        op = schedule.op
        self._transpose, self._matrix = transpose, (op.batch, op.channels, int(np.prod(op.sizes)))
        self.schedule, self.source, self.dtype = schedule, source, np.dtype(op.dtype)
        self._ffi, self._function = module.ffi, getattr(module.lib, function)
        self._array = f"{C_TYPES[op.dtype]}[]"
        self.out_shape = (op.batch, *op.output_sizes, op.channels)
        self.rows = op.batch * op.windows[0].out     # what the threads split: images x first output dim
        rank = len(op.input_shape)
        self._to_last, self._to_logical = (0, *range(2, rank), 1), (0, rank - 1, *range(1, rank - 1))
        self.name = f"generated C ({' '.join(flags) or 'no vector flags'})"

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None, threads: int = 1) -> np.ndarray:
        out = np.empty(self.out_shape, self.dtype) if out is None else out
        function, arguments = self.bound(self.channels_last(x), out, threads)
        function(*arguments)
        return self.logical(out)

    def channels_last(self, x: np.ndarray) -> np.ndarray:
        """``x`` checked, as the channels-last array the kernel reads (copied where stored otherwise)."""
        op = self.schedule.op
        if x.shape != op.input_shape or x.dtype != self.dtype:
            raise ValueError(f"the input of the {op} must be {self.dtype} of shape {op.input_shape}, got "
                             f"{x.dtype} {x.shape}")
        last = x.transpose(self._to_last)      # (a view: np.moveaxis costs more than a small pool)
        if x.flags.c_contiguous and not last.flags.c_contiguous:
            staged = np.empty(last.shape, self.dtype)
            self._transpose(x, staged, *self._matrix)
            return staged
        return last if last.flags.c_contiguous else np.ascontiguousarray(last)

    def threads_for(self, threads: int) -> int:
        """How many of ``threads`` threads a call takes: one per ``threaded_c.MIN_CHUNK`` input elements,
        at most one per row (``rows``), at least one."""
        return min(threads_for(int(np.prod(self.schedule.op.input_shape)), threads), self.rows)

    def bound(self, last: np.ndarray, out: np.ndarray, threads: int = 1) -> tuple[Callable[..., None], tuple]:
        """The C function and its arguments on the channels-last input ``last`` and output ``out``, on up
        to ``threads`` threads (``threads_for``) (checked; the arguments hold both arrays: a caller may
        repeat the call)."""
        if out.shape != self.out_shape or out.dtype != self.dtype or not out.flags.c_contiguous:
            raise ValueError(f"out must be a contiguous {self.dtype} array of shape {self.out_shape} "
                             f"(channels-last), got {out.dtype} {out.shape}")
        buffer = self._ffi.from_buffer
        return self._function, (buffer(self._array, last), buffer(self._array, out, require_writable=True),
                                self.rows, self.threads_for(threads))

    def logical(self, out: np.ndarray) -> np.ndarray:
        """The channels-last output ``out`` as the logical view ``(N, C, spatial...)``."""
        return out.transpose(self._to_logical)


@cache
def pool_kernels(schedules: tuple[PoolSchedule, ...], flags: tuple[str, ...],
                 transpose: Transpose) -> list[PoolKernel]:
    """The kernels of ``schedules``, built with ``flags`` from one C file (one compile), once per process;
    ``transpose`` copies their NCHW inputs channels-last."""
    functions = [f"{FUNCTION}_{index}" for index in range(len(schedules))]
    sources = [source(schedule, function) for schedule, function in zip(schedules, functions)]
    cdef = "\n".join(_declaration(schedule, function) for schedule, function in zip(schedules, functions))
    module = compile_c("\n".join(["#include <math.h>", HEADER, *sources]), cdef, (*flags, OPENMP_FLAG),
                       (OPENMP_FLAG,))
    return [PoolKernel(schedule, text, module, function, flags, transpose)
            for schedule, text, function in zip(schedules, sources, functions)]
