"""Pooling kernels (``pool.PoolSchedule``) as generated C: one function per op, every extent a
constant, channels-last output. Per output position the taps inside the input are counted
from the position (no guard in the tap loops), and each block of ``lanes`` channels is reduced in a
local array over the taps: with the block a constant and the channels contiguous, the compiler holds
the block in vector registers (``Target.vector_flags``: x86's AVX-512, four zmm registers of float32
or 8-bit lanes for the default block) and the combine is a vector max or add. Where every tap of a
window of at most ``UNROLLED_TAPS`` is inside the input (all positions but the borders), the taps are
unrolled at constant offsets into one variable per channel, so the channel loop vectorizes with no
array in memory (the same combines in the same order). A max keeps the larger
of the two (``a > b ? a : b``: exact, NaN inputs aside); an average sums in float32 in tap order and
divides by the count of the taps inside the input (or the padded input: ``count_include_pad``).
A max whose input is stored channels-first (an NCHW conv's output) reads it as it is: per output row
and block of channels, each channel's input row is reduced over the outer dims' taps (whole contiguous
rows), the block is transposed (``Transpose.static_source``: the host's tile loops) and each output
position is reduced over the last dim's taps as above. ResNet's stem MaxPool (64x112x112 NCHW, 3x3/2)
on an AMD EPYC Zen 3 (AVX2), one thread, medians of 40 interleaved calls under chrt -f 10: float32 227
-> 193 us (transposed channels-last first: 294-359 us; on an NHWC input 113 us), uint8 57 us
(transposed first: 197 us; NHWC 39 us).
The rows (an image's output positions of one index of the first spatial dim) are split over the threads a call
gives (``threaded_c.threaded``: contiguous chunks claimed as they go; one thread calls the serial loop
itself): ``PoolKernel.threads_for`` takes one thread per ``threaded_c.MIN_CHUNK`` input elements, at most one
per row. A float32 3x3/2 MaxPool of 64x112x112 (ResNet's), channels-last, Xeon (AMX) under chrt -f: 1 thread
171-178 us, 2 threads 82-84 us (in a whole-model run the step had taken 0.32-0.35 ms on one thread and on two;
onnxruntime's 0.28 -> 0.15-0.18 ms); its uint8 twin 30 -> 33 us on one thread (the rows' loop), 19 us on two.
A max of 8-bit values mapped through an 8-bit table (a QDQ ResNet's stem DequantizeLinear -> Relu -> MaxPool
-> QuantizeLinear) looks up the maxima of its interior positions by a target's byte map where it gives one
(``Target.pool_byte_map``: x86's VBMI permutes), else one load from the table each: uint8 64x112x112,
3x3/2, AMD EPYC Zen 4, one thread, medians of 100 interleaved calls: NHWC 123 us with the loads, 23-27 us
mapped (14-17 us without a table); channels-first 141 -> 35-36 us (31 us).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from functools import cache, partial

import numpy as np

from ..cbuild import compile_c
from ..codegen.cprint import block, for_loop, nest
from ..openmp import OPENMP_FLAG
from ..ops import Window
from ..pool import PoolSchedule
from .threaded_c import HEADER, THREADS_PARAM, threaded, threads_for
from .transpose import C_TYPES as TRANSPOSE_TYPES
from .transpose import Transpose

FUNCTION = "lo_pool"
C_TYPES = {"float32": "float", "uint8": "unsigned char", "int8": "signed char"}
LOWEST = {"float32": "-INFINITY", "uint8": "0", "int8": "-128"}
UNROLLED_TAPS = 16     # a window of at most this many taps is unrolled where all are inside the input
MAPPED = ("uint8", "int8")      # the tables a byte map looks up (``PoolSchedule.table``)
MAP_CALL = ("lo_bytemap_serial((const unsigned char *)table, (const unsigned char *){src}, "
            "(unsigned char *)({dst}), {n});")      # a byte map's one-thread loop (``bytemap.SERIAL``)


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


def _interior(windows: Sequence[Window]) -> str:
    """The C condition that every tap of ``windows`` falls inside the input (no tap is cut off)."""
    return " && ".join(f"{w.tap_dim}_lo == 0 && {w.tap_dim}_hi == {w.taps}" for w in windows)


def _unrolled(schedule: PoolSchedule, windows: Sequence[Window], steps: Sequence[int], index: str,
              store: str) -> list[str]:
    """Where every tap of ``windows`` is inside the input (``_interior``) and they are at most
    ``UNROLLED_TAPS``: the combine of ``in[offset + index]`` over the taps in order (an offset of ``steps``
    elements a tap of each window) in one variable ``m``, then ``store`` (a format of ``m``); the loop over
    ``index`` then vectorizes with the combine in registers."""
    op = schedule.op
    accumulator = C_TYPES[op.dtype] if op.kind == "max" else "float"
    lines = [f"{accumulator} m = {LOWEST[op.dtype] if op.kind == 'max' else '0.0f'};"]
    for taps in itertools.product(*(range(w.taps) for w in windows)):
        value = f"in[{sum(t * w.dilation * step for t, w, step in zip(taps, windows, steps))} + {index}]"
        lines.append(f"m = {value} > m ? {value} : m;" if op.kind == "max" else f"m = m + {value};")
    return lines + [store.format("m")]


def _stored(schedule: PoolSchedule, value: str) -> str:
    """What is stored of a reduced ``value``: a max (through the table: ``table[bits]``), or a sum over
    its count."""
    if schedule.op.kind != "max":
        return f"{value} / count"
    return f"table[(unsigned char){value}]" if schedule.table else value


def _fits_unrolled(windows: Sequence[Window]) -> bool:
    return bool(windows) and math.prod(w.taps for w in windows) <= UNROLLED_TAPS


def _tap_index(window: Window, taps: bool) -> str:
    """The input index of ``window``'s tap (``taps``), or of its first tap."""
    index = f"i{window.out_dim[1:]}"
    return f"{index} + {window.tap_dim} * {window.dilation}" if taps else index


def _channel_block(schedule: PoolSchedule, lanes: int, windows: Sequence[Window] | None = None,
                   tap: Callable[[bool], str] | None = None, steps: Sequence[int] = (),
                   mapped: bool = False) -> list[str]:
    """The reduction of the ``lanes`` channels from ``c_o`` over the taps inside the input of ``windows``
    (default: all the op's), stored; ``tap(True)``: the C pointer to a tap's first channel (default: in
    the channels-last input; ``tap(False)``: the first tap's) and ``steps``: how far a tap of each window
    moves it. Where every tap is inside the input, the taps unrolled (``_unrolled``); ``mapped``: their
    maxima then looked up in an 8-bit table by the byte map the C file defines (``MAP_CALL``)."""
    op = schedule.op
    c_type, channels = C_TYPES[op.dtype], op.channels
    if windows is None or tap is None:
        windows = op.windows
        steps = [channels * math.prod(op.sizes[axis + 1:]) for axis in range(len(op.sizes))]

        def tap(taps: bool) -> str:
            position = _offset([("n", op.batch)] + [(_tap_index(w, taps), w.size) for w in op.windows])
            return f"x + ({position}) * {channels} + c_o"

    init = LOWEST[op.dtype] if op.kind == "max" else "0.0f"
    combine = "in[c_i] > acc[c_i] ? in[c_i] : acc[c_i]" if op.kind == "max" else "acc[c_i] + in[c_i]"
    finish = _stored(schedule, "acc[c_i]")
    lane_loop = for_loop("int", "c_i", lanes)
    taps = [for_loop("long", w.tap_dim, f"{w.tap_dim}_hi", f"{w.tap_dim}_lo") for w in windows]
    reduce = [f"const {c_type} *in = {tap(True)};", *block(lane_loop, [f"acc[c_i] = {combine};"])]
    general = [f"{c_type} acc[{lanes}];",
               *block(lane_loop, [f"acc[c_i] = {init};"]),
               *nest(taps, reduce),
               *block(lane_loop, [f"out[c_o + c_i] = {finish};"])]
    if not _fits_unrolled(windows):
        return general
    if schedule.table:      # the maxima vectorized into acc, then each looked up (a loop of its own)
        lookup = ([MAP_CALL.format(src="acc", dst="out + c_o", n=lanes)] if mapped
                  else block(lane_loop, [f"out[c_o + c_i] = {finish};"]))
        unrolled = [f"const {c_type} *in = {tap(False)};", f"{c_type} acc[{lanes}];",
                    *block(lane_loop, _unrolled(schedule, windows, steps, "c_i", "acc[c_i] = {};")), *lookup]
    else:
        unrolled = [f"const {c_type} *in = {tap(False)};",
                    *block(lane_loop, _unrolled(schedule, windows, steps, "c_i",
                                                f"out[c_o + c_i] = {_stored(schedule, '{}')};"))]
    return [*block(f"if ({_interior(windows)})", unrolled), *block("else", general)]


def _staged_block(schedule: PoolSchedule, lanes: int, mapped: bool = False) -> list[str]:
    """A channels-first input's block of ``lanes`` channels from ``c_o``: each channel's row of the last
    input dim reduced over the outer dims' taps into ``stage`` (whole contiguous rows; unrolled where all
    are inside the input), the block transposed into ``staged`` (``lo_transpose_<size>``: a row of
    ``lanes`` channels per input position), and each output position of the last dim reduced over its
    taps (``_channel_block``, ``mapped`` as there) and stored."""
    op = schedule.op
    *outer, last = op.windows
    c_type, width = C_TYPES[op.dtype], last.size

    def position(taps: bool) -> str:
        return _offset([("n", op.batch), ("c_o + c_i", op.channels)] + [(_tap_index(w, taps), w.size)
                                                                        for w in outer])

    element = for_loop("long", "i", width)
    taps = [for_loop("long", w.tap_dim, f"{w.tap_dim}_hi", f"{w.tap_dim}_lo") for w in outer]
    row = f"{c_type} *row = stage + c_i * {width};"
    general = [row, *block(element, [f"row[i] = {LOWEST[op.dtype]};"]),
               *nest(taps, [f"const {c_type} *in = x + ({position(True)}) * {width};",
                            *block(element, ["row[i] = in[i] > row[i] ? in[i] : row[i];"])])]
    rows = block(for_loop("int", "c_i", lanes), general)
    if _fits_unrolled(outer):
        steps = [math.prod(op.sizes[axis + 1:]) for axis in range(len(outer))]
        unrolled = [row, f"const {c_type} *in = x + ({position(False)}) * {width};",
                    *block(element, _unrolled(schedule, outer, steps, "i", "row[i] = {};"))]
        rows = [*block(f"if ({_interior(outer)})", block(for_loop("int", "c_i", lanes), unrolled)),
                *block("else", rows)]
    size = np.dtype(op.dtype).itemsize
    cast = TRANSPOSE_TYPES[size]
    out = _offset([("n", op.batch)] + [(w.out_dim, w.out) for w in op.windows])

    def tap(taps: bool) -> str:
        return f"staged + ({_tap_index(last, taps)}) * {lanes}"

    return [*rows,
            f"lo_transpose_{size}((const {cast} *)stage, ({cast} *)staged, 1, {lanes}, {width});",
            *block(for_loop("long", last.out_dim, last.out),
                   [*_bounds(last, False),
                    f"{C_TYPES[schedule.out_dtype]} *out = y + ({out}) * {op.channels};",
                    *_channel_block(schedule, lanes, (last,), tap, (lanes,), mapped)])]


def _blocks(schedule: PoolSchedule, reduce: Callable[[PoolSchedule, int], list[str]]) -> list[str]:
    """The loop over the channel blocks of ``lanes`` and the last block of the remainder, each ``reduce``d."""
    op, lanes = schedule.op, schedule.lanes
    full, tail = divmod(op.channels, lanes)
    body = []
    if full:
        body += block(for_loop("long", "c_o", full * lanes, step=lanes), reduce(schedule, lanes))
    if tail:
        body += block("", [f"const long c_o = {full * lanes};", *reduce(schedule, tail)],
                      note=f" /* the last {tail} channel(s) */")
    return body


def _rows(schedule: PoolSchedule, body: list[str], windows: Sequence[Window]) -> list[str]:
    """``body`` inside the loops of ``windows``' output dims, the first of them (with the images) the loop
    of rows ``[lo_begin, lo_end)`` that the threads split (the images alone without ``windows``)."""
    include_pad = schedule.op.count_include_pad
    if not windows:
        return block(for_loop("long", "lo_row", "lo_end", "lo_begin"), ["const long n = lo_row;", *body])
    first, *others = windows
    for window in reversed(others):
        body = block(for_loop("long", window.out_dim, window.out), _bounds(window, include_pad) + body)
    row = [f"const long n = lo_row / {first.out}, {first.out_dim} = lo_row % {first.out};",
           *_bounds(first, include_pad)]
    return block(for_loop("long", "lo_row", "lo_end", "lo_begin"), row + body)


def source(schedule: PoolSchedule, function: str = FUNCTION, mapped: bool = False) -> str:
    """The C of ``schedule``'s kernel: ``void function(const T *x, T *y)`` over its input and output
    layouts (a channels-first input's block transposed by ``lo_transpose_<size>``, which the C file
    defines: ``Transpose.static_source``); ``mapped``: an 8-bit table's lookups of the maxima of the
    positions whose taps are all inside the input by the byte map the C file defines (``MAP_CALL``)."""
    op = schedule.op
    reduce = partial(_staged_block if schedule.channels_first else _channel_block, mapped=mapped)
    c_type = C_TYPES[op.dtype]
    if schedule.channels_first:
        width = schedule.lanes * op.sizes[-1]
        body = _rows(schedule, _blocks(schedule, reduce), op.windows[:-1])
        body = [f"{c_type} stage[{width}], staged[{width}];", *body]
    else:
        position = _offset([("n", op.batch)] + [(w.out_dim, w.out) for w in op.windows])
        body = [f"{C_TYPES[schedule.out_dtype]} *out = y + ({position}) * {op.channels};"]
        if op.kind == "average":
            counted = [f"({w.tap_dim}_span)" if op.count_include_pad else f"({w.tap_dim}_hi - {w.tap_dim}_lo)"
                       for w in op.windows]
            body.append(f"const float count = (float)({' * '.join(counted)});")
        body = _rows(schedule, body + _blocks(schedule, reduce), op.windows)
    notes = "\n".join(f"/* {text} */" for text in (str(op), *schedule.pseudocode().splitlines()))
    out_type = C_TYPES[schedule.out_dtype]
    table = f"const {out_type} *restrict table, " if schedule.table else ""
    rows = (f"static void {function}_rows(const {c_type} *restrict x, {out_type} *restrict y, {table}"
            "long lo_begin, long lo_end)")
    call = f"{function}_rows(x, y, {'table, ' if table else ''}lo_begin, lo_end)"
    return "\n".join([notes, *block(rows, body), threaded(_declaration(schedule, function)[:-1], call, 1)])


def _declaration(schedule: PoolSchedule, function: str) -> str:
    c_type, out_type = C_TYPES[schedule.op.dtype], C_TYPES[schedule.out_dtype]
    table = f"const {out_type} *table, " if schedule.table else ""
    return f"void {function}(const {c_type} *x, {out_type} *y, {table}long n, {THREADS_PARAM});"


class PoolKernel:
    """A compiled pool: ``kernel(x, out=None)`` on a logical ``(N, C, spatial...)`` array, returning the
    logical view of a channels-last output (``out``: that channels-last buffer to write, shape ``(N,
    spatial..., C)``); an input stored otherwise than the schedule's input layout is copied into it
    first (a contiguous NCHW one into channels-last by ``transpose``: each image's C x spatial matrix
    transposed). ``source``: its C; ``name``: how it was built."""

    def __init__(self, schedule: PoolSchedule, source: str, module, function: str, flags: tuple[str, ...],
                 transpose: Transpose):
        op = schedule.op
        self._transpose, self._matrix = transpose, (op.batch, op.channels, int(np.prod(op.sizes)))
        self.schedule, self.source, self.dtype = schedule, source, np.dtype(op.dtype)
        self.out_dtype = np.dtype(schedule.out_dtype)
        self._ffi, self._function = module.ffi, getattr(module.lib, function)
        self._array, self._out_array = f"{C_TYPES[op.dtype]}[]", f"{C_TYPES[schedule.out_dtype]}[]"
        self.out_shape = (op.batch, *op.output_sizes, op.channels)
        # what the threads split: images x the first output dim (a channels-first input's: of the outer dims)
        split = op.windows[:-1] if schedule.channels_first else op.windows
        self.rows = op.batch * (split[0].out if split else 1)
        rank = len(op.input_shape)
        self._to_last, self._to_logical = (0, *range(2, rank), 1), (0, rank - 1, *range(1, rank - 1))
        self.name = f"generated C ({' '.join(flags) or 'no vector flags'})"

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None, threads: int = 1,
                 table: np.ndarray | None = None) -> np.ndarray:
        out = np.empty(self.out_shape, self.out_dtype) if out is None else out
        function, arguments = self.bound(self.stored(x), out, threads, table)
        function(*arguments)
        return self.logical(out)

    def stored(self, x: np.ndarray) -> np.ndarray:
        """``x`` checked, as the array the kernel reads in its input layout (copied where stored
        otherwise)."""
        op = self.schedule.op
        if x.shape != op.input_shape or x.dtype != self.dtype:
            raise ValueError(f"the input of the {op} must be {self.dtype} of shape {op.input_shape}, got "
                             f"{x.dtype} {x.shape}")
        if self.schedule.channels_first:
            return x if x.flags.c_contiguous else np.ascontiguousarray(x)
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

    def bound(self, stored: np.ndarray, out: np.ndarray, threads: int = 1,
              table: np.ndarray | None = None) -> tuple[Callable[..., None], tuple]:
        """The C function and its arguments on the input ``stored`` (as ``stored`` returns it) and the
        channels-last output ``out`` (and the schedule's ``table``: 256 contiguous entries of the output's
        dtype), on up to ``threads`` threads (``threads_for``) (checked; the arguments hold the arrays: a
        caller may repeat the call)."""
        if out.shape != self.out_shape or out.dtype != self.out_dtype or not out.flags.c_contiguous:
            raise ValueError(f"out must be a contiguous {self.out_dtype} array of shape {self.out_shape} "
                             f"(channels-last), got {out.dtype} {out.shape}")
        mapped = table is not None and table.shape == (256,) and table.dtype == self.out_dtype
        if bool(self.schedule.table) != (table is not None) or (table is not None and not (
                mapped and table.flags.c_contiguous)):
            wanted = f"256 contiguous {self.out_dtype}" if self.schedule.table else "no table"
            raise ValueError(f"table: the kernel of {self.schedule.op} takes {wanted}, got "
                             f"{'none' if table is None else f'{table.dtype} {table.shape}'}")
        buffer = self._ffi.from_buffer
        tables = (buffer(self._out_array, table),) if table is not None else ()
        return self._function, (buffer(self._array, stored),
                                buffer(self._out_array, out, require_writable=True), *tables,
                                self.rows, self.threads_for(threads))

    def logical(self, out: np.ndarray) -> np.ndarray:
        """The channels-last output ``out`` as the logical view ``(N, C, spatial...)``."""
        return out.transpose(self._to_logical)


@cache
def pool_kernels(schedules: tuple[PoolSchedule, ...], flags: tuple[str, ...], transpose: Transpose,
                 byte_map: tuple[str, tuple[str, ...]] | None = None) -> list[PoolKernel]:
    """The kernels of ``schedules``, built with ``flags`` from one C file (one compile), once per process;
    ``transpose`` copies their NCHW inputs channels-last, and its loops (``static_source``) transpose the
    blocks of the kernels that read a channels-first input; ``byte_map`` (the C source of a lookup of bytes
    in a table, ``bytemap.ByteMap``'s, and its flags, added to the build) looks up the maxima of the
    kernels that map them through an 8-bit table (``PoolSchedule.table``), in place of a load of each from
    the table."""
    functions = [f"{FUNCTION}_{index}" for index in range(len(schedules))]
    mapped = [byte_map is not None and schedule.table in MAPPED for schedule in schedules]
    sources = [source(*made) for made in zip(schedules, functions, mapped)]
    cdef = "\n".join(_declaration(schedule, function) for schedule, function in zip(schedules, functions))
    staging = [transpose.static_source] if any(schedule.channels_first for schedule in schedules) else []
    lookup, lookup_flags = byte_map if byte_map is not None and any(mapped) else ("", ())
    files = ["#include <math.h>", HEADER, *staging, *([lookup] if lookup else []), *sources]
    built = tuple(dict.fromkeys((*flags, *lookup_flags)))
    module = compile_c("\n".join(files), cdef, (*built, OPENMP_FLAG), (OPENMP_FLAG,))
    return [PoolKernel(schedule, text, module, function, flags, transpose)
            for schedule, text, function in zip(schedules, sources, functions)]
