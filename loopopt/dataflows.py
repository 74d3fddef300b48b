"""Dataflow presets: functions ``(op, **knobs) -> Schedule`` built only from Schedule primitives.

A dataflow (Sze et al., Eyeriss taxonomy) is a loop order plus the operand that stays in
the innermost storage. On a CPU the innermost storage is the vector registers and L1:
the operand whose index does not change across the innermost loops is reused from there.
Tile factors are clamped to the loop extents, so every preset applies to any convolution
(1, 2 or 3 spatial dims, odd sizes, groups, depthwise) and, where meaningful, to a Matmul.
The presets name a convolution's loops through its roles: ``outs`` are the windows' output
positions (2-D: ``oh, ow``), ``taps`` their filter taps (``kh, kw``), the last output
position (``ow``) is "the output column", ``channel_dim`` the output channels (``k``),
``reduction_channel_dim`` the input channels (``c``) and the other output dims the positions
(``n``); the docstrings spell a Conv2d's names.
"""
from __future__ import annotations

import difflib
import itertools
import math
from collections.abc import Callable, Sequence
from functools import cache

from .depthwise_roles import DepthwiseRoles
from .expr import Var
from .gemv_roles import GemvRoles
from .layout import moved_last
from .ops import Op
from .schedule import Schedule, ScheduleError, block_limit, matrix_instruction
from .winograd import AnyPlan, plan

LANES = 16


def _fit(schedule: Schedule, loop: str, factor: int) -> int:
    """``factor`` clamped to 1..extent of ``loop``."""
    return max(1, min(int(factor), schedule.loop(loop).extent))


def _tile(schedule: Schedule, **factors: int) -> Schedule:
    return schedule.tile(**{name: _fit(schedule, name, f) for name, f in factors.items()})


def _channels_last(schedule: Schedule) -> Schedule:
    """Activations and output with their channels innermost (2-D: ``NHWC``), weights ordered taps,
    input channels, output channels (``HWIO``)."""
    op = schedule.op
    source, weights = op.inputs
    letters = op.tensor(weights).letters
    channel_axes = (op.index(weights).index(Var(op.reduction_channel_dim)), op.weight_channel_axis)
    order = [a for a in range(len(letters)) if a not in channel_axes] + list(channel_axes)
    tags = {source: moved_last(op.tensor(source).letters, len(_positions(op))),
            weights: "".join(letters[a] for a in order),
            op.output: moved_last(op.tensor(op.output).letters, op.output_channel_axis)}
    for tensor, tag in tags.items():
        schedule = schedule.layout(tensor, tag)
    return schedule


def activations_last(op: Op) -> dict[str, str]:
    """Layout tags of the activations and the output with their channels innermost (2-D: ``NHWC``)."""
    source = op.inputs[0]
    axis = op.axis(source, op.reduction_channel_dim)
    return {source: moved_last(op.tensor(source).letters, axis),
            op.output: moved_last(op.tensor(op.output).letters, op.output_channel_axis)}


def _outs(op: Op) -> tuple[str, ...]:
    """A convolution's output position loops (2-D: ``oh, ow``)."""
    return tuple(w.out_dim for w in op.windows)


def _taps(op: Op) -> tuple[str, ...]:
    """A convolution's filter tap loops (2-D: ``kh, kw``)."""
    return tuple(w.tap_dim for w in op.windows)


def _positions(op: Op) -> tuple[str, ...]:
    """A convolution's output loops that are neither channels nor window positions (2-D: ``n``)."""
    outs = _outs(op)
    return tuple(d for d in op.dim_names
                 if d not in op.reduction_dims and d != op.channel_dim and d not in outs)


def _gemm(op: Op) -> bool:
    """An op without sliding windows (a Matmul): the presets take their GEMM form ``i, j, k``."""
    return not op.windows


def _gemm_dims(op: Op) -> tuple[str, str, str, str]:
    """The GEMM form's dims: rows ``i`` (the last output dim but the channels), columns ``j`` (the
    channels), the reduction ``k`` over input channels, and the first reduction dim (where a register
    block of outputs holds across the whole reduction). Matmul: ``i, j, k, k``."""
    outputs = [d for d in op.dim_names if d not in op.reduction_dims and d != op.channel_dim]
    first = next(d for d in op.dim_names if d in op.reduction_dims)
    return (outputs or [op.channel_dim])[-1], op.channel_dim, op.reduction_channel_dim, first


def _conv_only(op: Op, preset: str) -> Op:
    if _gemm(op):
        raise ValueError(f"{preset} applies to a convolution only, got {op!r}")
    return op


def naive(op: Op) -> Schedule:
    """The textbook nest ``n, k, oh, ow, c, kh, kw`` (Matmul: ``i, j, k``), scalar.

    Only the output element stays innermost (one accumulator over the reduction); the
    input window and the weights stream with the largest strides of the default layouts.
    """
    return Schedule(op)


def interchanged(op: Op) -> Schedule:
    """Loop interchange: the output column (Matmul: ``j``) runs innermost, vectorized.

    Conv2d order ``n, k, c, kh, kw, oh, ow``: one weight stays in a register (broadcast)
    while unit-stride rows of input and output stream through L1, as in the course's
    interchange example. Matmul order ``i, k, j``: ``A[i,k]`` stays in a register.
    """
    schedule = Schedule(op)
    if _gemm(op):
        _, cols, red, _ = _gemm_dims(op)
        return schedule.reorder(red, cols).vectorize(cols)
    return schedule.reorder(op.reduction_channel_dim, *_taps(op), *_outs(op)).vectorize(_outs(op)[-1])


def tiled(op: Op, k: int = 16, c: int = 16, ow: int = 16, i: int = 32, j: int = 64) -> Schedule:
    """Loop tiling for L1: blocks of output channels, input channels and output columns.

    Conv2d order ``n, k_o, oh, ow_o, c_o, kh, kw, k_i, c_i, ow_i``: a ``k x c`` block of
    weights and a ``c x ow`` strip of input are reused from L1 across the block; the
    output columns ``ow_i`` are the vector lanes. Matmul: ``i_o, j_o, k_o, i_i, k_i, j_i``
    with tiles ``i x k`` of A and ``k x j`` of B held in L1.
    """
    schedule = Schedule(op)
    if _gemm(op):
        rows, cols, red, _ = _gemm_dims(op)
        return _tile(schedule, **{rows: i, red: k, cols: j}).vectorize(f"{cols}_i")
    column = _outs(op)[-1]
    schedule = _tile(schedule, **{op.channel_dim: k, op.reduction_channel_dim: c, column: ow})
    return schedule.vectorize(f"{column}_i")


def output_stationary(op: Op, k: int = LANES, ow: int = 8, j: int = LANES, i: int = 8) -> Schedule:
    """Output stationary: an ``ow x k`` block of outputs stays in vector registers.

    Order ``n, k_o, oh, ow_o, c, kh, kw, ow_i, k_i`` in channels-last layouts: the whole
    reduction ``c, kh, kw`` runs around the register block (``register_block("c")``), so
    each output is set and stored once while inputs are broadcast and weights stream from L1.
    Matmul: an ``i x j`` block of C in registers over the full ``k`` loop.
    """
    schedule = Schedule(op)
    if _gemm(op):
        rows, cols, _, first = _gemm_dims(op)
        return _tile(schedule, **{rows: i, cols: j}).vectorize(f"{cols}_i").register_block(first)
    schedule = _tile(schedule, **{_outs(op)[-1]: ow, op.channel_dim: k})
    schedule = _channels_last(schedule.vectorize(f"{op.channel_dim}_i"))
    return schedule.register_block(op.reduction_channel_dim)


def weight_stationary(op: Op, k: int = LANES, j: int = LANES) -> Schedule:
    """Weight stationary: a vector of weights stays in a register while all outputs pass.

    Order ``k_o, c, kh, kw, n, oh, ow, k_i`` in channels-last layouts: the weights
    ``W[k_o-block, c, kh, kw]`` do not change over the ``n, oh, ow`` sweep, so each weight
    is fetched once; partial sums of the outputs are re-read and re-written for every
    ``(c, kh, kw)``. Matmul: ``j_o, k, i, j_i`` keeps a vector of B in a register.
    """
    schedule = Schedule(op)
    if _gemm(op):
        rows, cols, red, _ = _gemm_dims(op)
        schedule = _tile(schedule, **{cols: j})
        return schedule.reorder(f"{cols}_o", red, rows).vectorize(f"{cols}_i")
    channel = op.channel_dim
    schedule = _tile(schedule, **{channel: k})
    schedule = schedule.reorder(f"{channel}_o", op.reduction_channel_dim, *_taps(op), *_positions(op),
                                *_outs(op))
    return _channels_last(schedule.vectorize(f"{channel}_i"))


def input_stationary(op: Op, k: int = LANES, j: int = LANES) -> Schedule:
    """Input stationary: one input element stays in a register (broadcast) across all output channels.

    Order ``n, c, oh, ow, kh, kw, k_o, k_i`` in channels-last layouts: the input element
    ``I[n, c, ih, iw]`` is fixed over the innermost ``k`` loops and reused by every
    output channel of its group (depthwise convolutions have only one, so no reuse).
    Matmul: ``i, k, j_o, j_i`` keeps ``A[i,k]`` in a register across the row of B.
    """
    schedule = Schedule(op)
    if _gemm(op):
        _, cols, red, _ = _gemm_dims(op)
        schedule = _tile(schedule, **{cols: j}).reorder(red, f"{cols}_o")
        return schedule.vectorize(f"{cols}_i")
    channel = op.channel_dim
    schedule = _tile(schedule, **{channel: k})
    schedule = schedule.reorder(*_positions(op), op.reduction_channel_dim, *_outs(op), *_taps(op),
                                f"{channel}_o")
    return _channels_last(schedule.vectorize(f"{channel}_i"))


def _gemm_view(op: Op) -> Schedule:
    """A conv as ``O[m, k] += I2col[m, r] * W[k, r]``: loops ``m = (n, oh, ow)``, ``k``,
    ``r = (c, kh, kw)`` (the loops as the op's roles name them)."""
    schedule = Schedule(op).reorder(*_positions(op), *_outs(op), op.channel_dim)
    schedule = _fused(schedule, _positions(op) + _outs(op), "m")
    return _fused(schedule, (op.reduction_channel_dim,) + _taps(op), "r")


def _fused(schedule: Schedule, loops: tuple[str, ...], name: str) -> Schedule:
    """``loops`` (adjacent, outer to inner, at least two) fused one by one into a loop called
    ``name`` (the intermediate loops are called by their parts, e.g. ``n_oh``)."""
    fused = loops[0]
    for position, loop in enumerate(loops[1:], start=2):
        inner = name if position == len(loops) else f"{fused}_{loop}"
        schedule, fused = schedule.fuse(fused, loop, inner), inner
    return schedule


def implicit_gemm(op: Op, m: int = 8, k: int = LANES) -> Schedule:
    """Implicit GEMM (iGEMM): the conv as a GEMM with M = N*OH*OW, N = K, K = C*KH*KW.

    The loops ``n, oh, ow`` fuse into ``m`` and ``c, kh, kw`` into ``r``; the GEMM is
    register-blocked as ``m_o, k_o, r, m_i, k_i`` in channels-last layouts, so an
    ``m x k`` block of outputs stays in registers (output stationary at the GEMM level)
    and the im2col row is read straight from the input, never materialized.
    Matmul: the same register-blocked GEMM over ``i, j, k``.
    """
    if _gemm(op):
        return output_stationary(op, i=m, j=k)
    schedule = _tile(_gemm_view(_conv_only(op, "implicit_gemm")), **{"m": m, op.channel_dim: k})
    return _channels_last(schedule.vectorize(f"{op.channel_dim}_i")).register_block("r")


def im2col(op: Op, m: int = 64) -> Schedule:
    """im2col + GEMM (Caffe's lowering) in the order the GEMM on the im2col matrix runs.

    The schedule system has no materialized buffers, so the ``(C*KH*KW) x (N*OH*OW)``
    im2col matrix is not copied: this is the loop order of ``O[k, m] += W[k, r] * col[r, m]``
    (``k, r, m_o, m_i`` in the default NCHW/OIHW layouts) over the im2col index space,
    reading ``col[r, m]`` from the input through the im2col index. The weight
    ``W[k, r]`` stays in a register while a row of ``m`` outputs streams (vector lanes).
    """
    schedule = _gemm_view(_conv_only(op, "im2col")).reorder(op.channel_dim, "r", "m")
    return _tile(schedule, m=m).vectorize("m_i")


def winograd(op: Op, m: int | None = None, gemm_rows: int | None = None,
             gemm_cols: int | None = None) -> AnyPlan:
    """Winograd F(m x m, 3 x 3) of a 2-D conv with a 3x3 kernel, stride 1, dilation 1, groups 1.

    float32 (``m`` 4, the default, or 2): not one Schedule but a pipeline of five ops, each with its
    own Schedule (input transform in two passes, a batched GEMM over the ``(m+2)**2`` tile positions
    register-blocked ``gemm_rows x gemm_cols``, default 7 x 64, output transform in two passes with
    the bias), see ``loopopt.winograd``; ``.compile()`` gives a kernel ``lo.measure`` times and
    verifies against its own error bound. Quantized (``m`` 2, the default): the exact int8
    F(2x2,3x3) pipeline of ``loopopt.winograd_int8``, bit for bit the direct kernels' output. Not in
    ``PRESETS`` (whose presets return one Schedule)."""
    return plan(op, m, gemm_rows, gemm_cols)


class UnknownPresetError(KeyError):
    """A preset name that ``PRESETS`` does not have; the message names the closest and all known ones."""

    def __str__(self) -> str:
        return str(self.args[0])


def table_lookup(op: Op, fmt: str = "tl1", pixels: int = 4, channels: int = 64, pixel: str | None = None,
                 order: tuple[str, ...] | None = None) -> Schedule:
    """Ternary weights by table lookup (``weight_format(fmt)``, ``"tl1"`` or ``"tl2"``) with a register
    block of ``pixels`` output positions x ``channels`` output channels (a multiple of 32 below the
    channel count; at least the channel count: all of them, unsplit).

    Conv2d order ``n, k_o, oh, ow_o, kh, kw, c, ow_i, k_i``, channels-last activations and output:
    the block stays in registers across the reduction (``register_block`` on its first loop) while
    each input pixel's tables and each column block's indices are loaded once per step. Matmul:
    ``i_o, j_o, k, i_i, j_i``. ``pixel``: the output dim blocked (default the output column, a
    Matmul's rows); ``order``: the loops outside the block, outermost first (default the nest's
    order, the reduction after the other loops, its input channels last).
    """
    pixel = pixel or (_outs(op)[-1] if op.windows else _gemm_dims(op)[0])
    channel = op.channel_dim
    schedule = Schedule(op)
    for tensor, tag in activations_last(op).items():
        schedule = schedule.layout(tensor, tag)
    split = channels < op.channels           # else the whole channel loop is in the block
    schedule = _tile(schedule, **{pixel: pixels, **({channel: channels} if split else {})})
    block = (f"{pixel}_i", f"{channel}_i" if split else channel)
    if order is None:
        rest = [name for name in schedule.loop_names if name not in block]
        reduction = [n for n in rest if n in op.reduction_dims]
        reduction.sort(key=lambda n: n == op.reduction_channel_dim)
        order = (*(n for n in rest if n not in op.reduction_dims), *reduction)
    first = next(name for name in order if name in op.reduction_dims)
    return schedule.reorder(*order, *block).register_block(first).weight_format(fmt)


class Presets(dict[str, Callable[..., Schedule]]):
    """A dict of presets by name whose missing names raise UnknownPresetError with a suggestion."""

    def __missing__(self, name: str) -> Callable[..., Schedule]:
        close = difflib.get_close_matches(str(name), self, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownPresetError(f"unknown dataflow preset {name!r}{hint} (known: {', '.join(self)})")


PRESETS = Presets({f.__name__: f for f in (naive, interchanged, tiled, output_stationary, weight_stationary,
                                           input_stationary, implicit_gemm, im2col)})


# --- GPU presets: bound schedules for the cuda target (``s.compile(target="cuda")``) -------------------

def gpu_rows(op: Op) -> tuple[str, str, tuple[str, ...]]:
    """The output dims a GPU preset maps onto threads: ``x`` the last output dim (along which the
    output is contiguous in its default layout: ``ow``, a Matmul's ``j``), ``y`` the output channels
    (``k``; a Matmul's rows ``i``), and the other output dims (``n, oh``) outermost."""
    outputs = [d for d in op.dim_names if d not in op.reduction_dims]
    x = outputs[-1]
    y = op.channel_dim if op.channel_dim != x else (outputs[:-1] or [x])[-1]
    return x, y, tuple(d for d in outputs if d not in (x, y))


def _bound_blocks(schedule: Schedule, loops: list[str], axis: str) -> Schedule:
    """``loops`` (adjacent, outer to inner) fused into one bound to ``axis`` (none: unchanged)."""
    if not loops:
        return schedule
    if len(loops) > 1:
        schedule = _fused(schedule, tuple(loops), "_".join(loops))
    return schedule.bind("_".join(loops), axis)


def gpu_naive(op: Op, threads: int = 128) -> Schedule:
    """One GPU thread per output: the last output dim (``ow``; Matmul ``j``) split into blocks of
    ``threads`` threads (``thread.x``), every other output dim and those blocks fused into
    ``block.x``; each thread runs the whole reduction (``c, kh, kw``) of its output, in a register."""
    x = gpu_rows(op)[0]
    outputs = [d for d in op.dim_names if d not in op.reduction_dims and d != x]
    schedule = Schedule(op).split(x, _fit(Schedule(op), x, threads))
    reduction = [d for d in op.dim_names if d in op.reduction_dims]
    schedule = schedule.reorder(*outputs, f"{x}_o", f"{x}_i", *reduction)
    return _bound_blocks(schedule, [*outputs, f"{x}_o"], "block.x").bind(f"{x}_i", "thread.x")


def _gpu_tiles(op: Op, threads_x: int, threads_y: int, regs_x: int, regs_y: int,
               depth: int = 0) -> tuple[Schedule, list[str]]:
    """``gpu_tiled``'s bound nest and its reduction loops; ``depth`` > 0: the input channels (a
    Matmul's ``k``) split by ``depth``, their outer loop first among the reduction loops."""
    x, y, rest = gpu_rows(op)
    schedule = Schedule(op)
    tx, ty = _fit(schedule, x, threads_x), _fit(schedule, y, threads_y)
    rx = max(1, min(regs_x, -(-schedule.loop(x).extent // tx)))
    ry = max(1, min(regs_y, -(-schedule.loop(y).extent // ty)))
    schedule = schedule.split(x, tx * rx).split(f"{x}_i", tx).split(y, ty * ry).split(f"{y}_i", ty)
    reduction = [d for d in op.dim_names if d in op.reduction_dims]
    channel = op.reduction_channel_dim
    if depth and channel in reduction:
        schedule = schedule.split(channel, _fit(schedule, channel, depth))
        reduction = [f"{channel}_o"] + [f"{channel}_i" if d == channel else d for d in reduction]
    schedule = schedule.reorder(*rest, f"{y}_o", f"{x}_o", f"{y}_i_i", f"{x}_i_i", *reduction,
                                f"{y}_i_o", f"{x}_i_o")
    schedule = _bound_blocks(schedule, list(rest), "block.z")
    schedule = (schedule.bind(f"{y}_o", "block.y").bind(f"{x}_o", "block.x")
                .bind(f"{y}_i_i", "thread.y").bind(f"{x}_i_i", "thread.x"))
    return (schedule.register_block(reduction[0]) if reduction else schedule), reduction


def gpu_tiled(op: Op, threads_x: int = 16, threads_y: int = 16, regs_x: int = 4, regs_y: int = 4) -> Schedule:
    """A block-tiled SIMT kernel: a block of ``threads_y x threads_x`` threads computes a tile of
    ``regs_y * threads_y`` output channels (``k``; Matmul rows ``i``) by ``regs_x * threads_x`` output
    columns (``ow``; Matmul ``j``), each thread a ``regs_y x regs_x`` register block of outputs whose
    threads interleave (neighbouring threads take neighbouring columns, so loads and stores coalesce).
    The tiles are ``block.x`` (columns) and ``block.y`` (channels); the other output dims (``n, oh``)
    fuse into ``block.z``. Each thread runs the reduction with its accumulators in registers."""
    return _gpu_tiles(op, threads_x, threads_y, regs_x, regs_y)[0]


def gpu_staged(op: Op, threads_x: int = 16, threads_y: int = 16, regs_x: int = 4, regs_y: int = 4,
               depth: int = 8) -> Schedule:
    """``gpu_tiled`` with the input channels (Matmul ``k``) in steps of ``depth``: at each step the
    block's threads copy the tiles of the inputs that the step reads into shared memory (``stage``),
    and every thread's products read them from there. An input whose index is not affine in the
    tile's loops (a grouped conv's activations: their channel follows the output channel's group) is
    not staged and is read from device memory."""
    schedule, reduction = _gpu_tiles(op, threads_x, threads_y, regs_x, regs_y, depth)
    for tensor in op.inputs if reduction else ():
        try:
            schedule = schedule.stage(tensor, reduction[0])
        except ScheduleError:
            if _affine_box(schedule, tensor, reduction[0]):
                raise
    return schedule


def _affine_box(schedule: Schedule, tensor: str, at: str) -> bool:
    """Whether ``tensor``'s index is affine in the loops a stage at ``at`` covers."""
    try:
        schedule.staged_box(tensor, at)
    except ScheduleError:
        return False
    return True


GPU_PRESETS = Presets({f.__name__: f for f in (gpu_naive, gpu_tiled, gpu_staged)})


# --- tensor-core presets: float16 ops on the cuda target's matrix instructions -------------------------

L2_LINE_BYTES = 128        # an L2 cache line: a TMA box row of 128 bytes starting inside one reads two
WMMA = "wmma_m16n16k16_f16_f32"
MMA = "mma_m16n8k16_f16_f32"
# the entries each op's element types run on (Schedule.operand_dtype of its inputs), WMMA then mma.sync
TENSOR_ENTRIES = {("float16", "float16"): (WMMA, MMA),
                  ("bfloat16", "bfloat16"): ("wmma_m16n16k16_bf16_f32", "mma_m16n8k16_bf16_f32"),
                  ("int8", "int8"): (None, "mma_m16n8k32_s8_s32"),
                  ("int8", "uint8"): (None, "mma_m16n8k32_s8u8_s32"),
                  ("uint8", "int8"): (None, "mma_m16n8k32_u8s8_s32"),
                  ("uint8", "uint8"): (None, "mma_m16n8k32_u8u8_s32")}


def tensor_entry(op: Op, wmma: bool = False) -> str:
    """The matrix instruction ``op``'s inputs run on: its mma.sync entry, or with ``wmma`` its WMMA one
    (ScheduleError naming the types that have none)."""
    schedule = Schedule(op)
    types = tuple(schedule.operand_dtype(t) for t in op.inputs)
    entry = TENSOR_ENTRIES.get(types, (None, None))[0 if wmma else 1]
    if entry is None:
        kinds = ", ".join(f"{a} x {b}" for (a, b), entries in TENSOR_ENTRIES.items()
                          if entries[0 if wmma else 1])
        raise ScheduleError(f"{op!r} multiplies {types[0]} by {types[1]}; the cuda target's "
                            f"{'WMMA' if wmma else 'mma.sync'} entries take {kinds}")
    return entry


def _reduction_channel_last(schedule: Schedule) -> Schedule:
    """Each input stored with the axis its reduction channel (``c``; a Matmul's ``k``) indexes
    innermost, the output with its channels innermost: the tiles' rows are then runs of 16 bytes in
    device memory (NCHW -> NHWC, OIHW -> OHWI, a Matmul's KN -> NK)."""
    op = schedule.op
    innermost = {t: op.reduction_channel_dim for t in op.inputs} | {op.output: op.channel_dim}
    for tensor, dim in innermost.items():
        letters = op.tensor(tensor).default_layout
        axis = next((a for a, e in enumerate(op.index(tensor)) if e == Var(dim)), None)
        if axis is not None and axis != len(letters) - 1:
            schedule = schedule.layout(tensor, moved_last(letters, axis))
    return schedule


def _fragments(extent: int, size: int = 16) -> int:
    """The fragments of ``size`` elements that cover ``extent``."""
    return -(-extent // size)


def clamp_tile(extent: int, block: int, warps: int, size: int) -> tuple[int, int]:
    """A tile of about ``block`` rows of fragments of ``size`` over ``warps`` warps, clamped to a loop
    of ``extent``: (the block's rows, a multiple of ``size`` x warps; the warps), a shorter loop taking
    fewer warps and a block of its extent rounded up to them."""
    fragments = _fragments(extent, size)
    warps = max(1, min(warps, fragments))
    per_warp = -(-min(max(1, block // size), fragments) // warps)
    return size * warps * per_warp, warps


def _split_tile(schedule: Schedule, loop: str, block: int, warps: int,
                size: int) -> tuple[Schedule, list[str]]:
    """``loop`` as blocks of about ``block`` (``clamp_tile``), warps, fragments and the ``size`` of a
    fragment: the four loops' names, outer to inner."""
    block, warps = clamp_tile(schedule.loop(loop).extent, block, warps, size)
    schedule = schedule.split(loop, block).split(f"{loop}_i", block // warps).split(f"{loop}_i_i", size)
    return schedule, [f"{loop}_o", f"{loop}_i_o", f"{loop}_i_i_o", f"{loop}_i_i_i"]


@cache
def pixel_box(extents: tuple[int, ...], block: int, rows: int) -> tuple[int, ...]:
    """A block's ``block`` rows as a box over loops of ``extents`` (a conv's ``n, oh, ow``), row-major:
    the inner sizes powers of two, each ``rows`` consecutive rows (a wgmma tile) a box too; the box
    whose blocks cover the fewest iterations past the loops' ends, then the widest inner sizes (the
    ResNet convs' at 128 rows: 56 x 56 -> 2 x 8 x 8, 28 x 28 -> 8 x 4 x 4, 14 x 14 -> 32 x 2 x 2)."""
    def tile_is_box(sizes: tuple[int, ...]) -> bool:
        inner = 1
        for size in reversed(sizes):
            if inner * size >= rows:
                return rows % inner == 0 and size % (rows // inner) == 0
            inner *= size
        return False

    powers = [[2 ** e for e in range(9) if 2 ** e <= block_limit(extent)] for extent in extents[1:]]
    found = []
    for inner in itertools.product(*powers):
        first, left = divmod(block, math.prod(inner))
        sizes = (first, *inner)
        if not left and 1 <= first <= block_limit(extents[0]) and tile_is_box(sizes):
            covered = math.prod(-(-e // b) * b for e, b in zip(extents, sizes))
            found.append((covered, tuple(-b for b in reversed(inner)), sizes))
    return min(found)[2]


def _pixel_tile(schedule: Schedule, dims: Sequence[str], block: int, warps: int,
                size: int) -> tuple[Schedule, list[str]]:
    """``dims`` (a conv's output pixels) tiled as ``_split_tile`` tiles one loop, a block's rows a
    ``pixel_box`` of them (its pixels a TMA box of the input, ``stage(engine="tma")``); the same four
    loops ``m_o`` (blocks), ``m_i_o`` (warps), ``m_i_i_o`` (fragments), ``m_i_i_i``."""
    extents = tuple(schedule.loop(d).extent for d in dims)
    block, warps = clamp_tile(math.prod(extents), block, warps, size)
    for dim, factor in zip(dims, pixel_box(extents, block, size)):
        schedule = schedule.split(dim, factor)
    schedule = schedule.reorder(*(f"{d}_o" for d in dims), *(f"{d}_i" for d in dims))
    schedule = _fused(_fused(schedule, tuple(f"{d}_o" for d in dims), "m_o"),
                      tuple(f"{d}_i" for d in dims), "m_i")
    schedule = schedule.split("m_i", block // warps).split("m_i_i", size)
    return schedule, ["m_o", "m_i_o", "m_i_i_o", "m_i_i_i"]


def _matrix_dims(op: Op, preset: str) -> tuple[list[str], list[str]]:
    """The output dims of ``op`` as an implicit GEMM's M (those the first input moves with) and N;
    ScheduleError where either is empty (not rows x columns)."""
    first = op.inputs[0]
    reads = {v for e in op.index(first) for v in e.variables()}
    outputs = [d for d in op.dim_names if d not in op.reduction_dims]
    m_dims, n_dims = [d for d in outputs if d in reads], [d for d in outputs if d not in reads]
    if not m_dims or not n_dims:
        raise ScheduleError(f"{preset}: {op!r} is not a matrix product: every output dim moves "
                            f"{'' if m_dims else 'no '}input {first} (a grouped conv's or a batched "
                            f"matmul's inputs share output dims), so no tile of outputs is rows x columns")
    return m_dims, n_dims


def gpu_wmma(op: Op, block_m: int = 128, block_n: int = 128, warps_m: int = 2, warps_n: int = 4,
             depth: int = 32, instruction: str | None = None, stages: int | None = None,
             split_k: int = 1, engine: str = "threads") -> Schedule:
    """A float16, bfloat16 or quantized op on tensor cores (``tensorize`` onto ``instruction``, by
    default the WMMA entry of its types, ``tensor_entry``) as an implicit GEMM: M the output dims the
    first input moves with (a conv's ``n, oh, ow``, fused; a Matmul's ``i``), N the other output dims
    (``k``; ``j``), K the reduction channels (``c``; ``k``) with the other reduction dims (``kh, kw``)
    outside. A block computes ``block_m x block_n`` outputs (at most: a smaller N takes a smaller
    tile) with ``warps_m x warps_n`` warps (``warp.y``, ``warp.x``), each holding its ``block_m/warps_m
    x block_n/warps_n`` outputs as 16 x 16 fragments (a dim shorter than its tile takes a tile of its
    extent rounded up to 16 x the warps); at each step of ``depth`` reduction channels (a multiple of
    the instruction's ``k``) both inputs' tiles are gathered into shared memory (``stage``: the
    im2col, zero at padding; a ring of ``stages`` buffers) and the fragments multiply them.
    ``split_k`` > 1: the steps (``kh, kw`` and the channel steps, fused) are shared out among that many
    blocks along ``block.z`` (``Schedule.split_k``), for shapes whose output tiles launch too few
    blocks. ``engine``: who copies the tiles (``Schedule.stage``): the threads, or ``"tma"``, the tensor
    memory accelerator (a wgmma ``instruction``'s operands: a Matmul's 2-D ones; a conv's, its block's
    rows then a ``pixel_box`` of output pixels, ``_pixel_tile``)."""
    if split_k < 1:
        raise ScheduleError(f"gpu_wmma: split_k={split_k!r}; choose 1 (no split) or more blocks per tile")
    instruction = instruction or tensor_entry(op, wmma=True)
    entry = matrix_instruction(instruction, "gpu_wmma")
    if depth % entry.k:
        raise ScheduleError(f"gpu_wmma: depth={depth!r} is not a multiple of {instruction}'s k ({entry.k})")
    schedule = _reduction_channel_last(Schedule(op))
    m_dims, n_dims = _matrix_dims(op, "gpu_wmma")
    channel = op.reduction_channel_dim
    others = [d for d in op.dim_names if d in op.reduction_dims and d != channel]
    schedule = schedule.reorder(*m_dims, *n_dims, *others, channel)
    pixels = engine == "tma" and len(m_dims) > 1      # TMA copies a block's pixels as one box
    for dims, name in ((m_dims, "m"), (n_dims, "n")):
        if len(dims) > 1 and not (pixels and name == "m"):
            schedule = _fused(schedule, tuple(dims), name)
    m, n = (dims[0] if len(dims) == 1 else name for dims, name in ((m_dims, "m"), (n_dims, "n")))
    schedule, (m_block, m_warp, m_frag, i) = (
        _pixel_tile(schedule, m_dims, block_m, warps_m, entry.m) if pixels
        else _split_tile(schedule, m, block_m, warps_m, entry.m))
    schedule, (n_block, n_warp, n_frag, j) = _split_tile(schedule, n, block_n, warps_n, entry.n)
    depth = min(depth, _fragments(schedule.loop(channel).extent, entry.k) * entry.k)
    schedule = schedule.split(channel, depth).split(f"{channel}_i", entry.k)
    c_step, c_inner, k = f"{channel}_o", f"{channel}_i_o", f"{channel}_i_i"
    schedule = schedule.reorder(m_block, n_block, m_warp, n_warp, *others, c_step, c_inner, m_frag, n_frag,
                                i, j, k)
    schedule = (schedule.bind(m_block, "block.x").bind(n_block, "block.y")
                .bind(m_warp, "warp.y").bind(n_warp, "warp.x").tensorize(i, j, k, instruction))
    if split_k > 1:
        steps = "steps" if others else c_step
        if others:
            schedule = _fused(schedule, (*others, c_step), steps)
        share = -(-schedule.loop(steps).extent // split_k)
        # a 16-bit output takes no atomic adds: the tile's last block adds the shares (split_reduce.py)
        reduce = "atomic" if op.out_dtype == "float32" else "last"
        schedule = schedule.split(steps, share).split_k(f"{steps}_o", reduce)
        c_step = f"{steps}_i"
    return (schedule.stage(op.inputs[0], c_step, stages, engine)
            .stage(op.inputs[1], c_step, stages, engine))


def gpu_mma(op: Op, block_m: int = 128, block_n: int = 128, warps_m: int = 2, warps_n: int = 4,
            depth: int | None = None, stages: int = 4, split_k: int = 1, engine: str = "threads") -> Schedule:
    """``gpu_wmma`` on ``mma.sync`` (the entry of the op's types, ``tensor_entry``: ``m16n8k16`` for
    float16 and bfloat16, ``m16n8k32`` for int8 and uint8 x int8; ``ldmatrix`` from XOR-swizzled tiles
    without padding) with a four-buffer ring of staged tiles; ``depth`` by default two of the entry's
    ``k`` (32 halves or 64 bytes a row)."""
    instruction = tensor_entry(op)
    depth = depth or 2 * matrix_instruction(instruction, "gpu_mma").k
    return gpu_wmma(op, block_m, block_n, warps_m, warps_n, depth, instruction, stages, split_k, engine)


# the wgmma entries' k and type suffix by the op's operand types (Schedule.operand_dtype of its inputs)
WGMMA_TYPES = {("float16", "float16"): "k16_f16_f32", ("bfloat16", "bfloat16"): "k16_bf16_f32",
               ("int8", "int8"): "k32_s8_s32", ("uint8", "int8"): "k32_u8s8_s32"}


def wgmma_types(op: Op) -> str:
    """The k and type suffix of ``op``'s wgmma entries (``WGMMA_TYPES``); ScheduleError naming the
    operand types that have none."""
    schedule = Schedule(op)
    types = tuple(schedule.operand_dtype(t) for t in op.inputs)
    if types not in WGMMA_TYPES:
        kinds = ", ".join(f"{a} x {b}" for a, b in WGMMA_TYPES)
        raise ScheduleError(f"gpu_wgmma: {op!r} multiplies {types[0]} by {types[1]}; the wgmma entries take "
                            f"{kinds} (gpu_mma takes the others)")
    return WGMMA_TYPES[types]


def wgmma_instruction(columns: int, block_n: int, warps_n: int, types: str = "k16_f16_f32") -> str:
    """The ``wgmma_m64nN{types}`` entry (``wgmma_types``) of a block of ``block_n`` columns over
    ``warps_n`` warpgroups on an op of ``columns`` (N): the narrowest N of 64, 128, 256 that covers a
    group's columns (256 beyond: more fragments)."""
    group = -(-min(block_n, columns) // max(1, warps_n))
    width = next((n for n in (64, 128) if group <= n), 256)
    return f"wgmma_m64n{width}{types}"


def gpu_wgmma(op: Op, block_m: int = 128, block_n: int = 256, warps_m: int = 2, warps_n: int = 1,
              depth: int = 64, stages: int = 4, split_k: int = 1, engine: str = "threads",
              cluster: tuple[int, int] = (1, 1), specialize: bool = False, swizzle: int = 32,
              persistent: bool = False, padded: bool = False, halves: int = 0) -> Schedule:
    """``gpu_wmma`` on Hopper's ``wgmma.mma_async`` m64nNk16 (``sm_90a``): each ``warps_m x warps_n``
    iteration is a warpgroup of four warps holding ``block_m/warps_m x block_n/warps_n`` outputs as 64 x N
    fragments, N (``wgmma_instruction``) of 64, 128 or 256 as the group's columns of the op need; both
    inputs' tiles read by the tensor cores from 32-byte-swizzled shared memory through matrix descriptors,
    the copies of the next ``stages - 2`` steps in flight while a step's products run (``stages`` >= 3).
    ``engine="tma"``: the tensor memory accelerator copies the tiles, one thread issuing a step's boxes,
    completing on an mbarrier a buffer (a Matmul's or Gemm's 2-D operands; a conv's activations and
    weights as N-D boxes, each tile a box of output pixels: ``pixel_boxes``). ``cluster=(2, 1)``: blocks
    in clusters of two along the output rows (``(1, 2)``: columns; ``Schedule.cluster``), the input they
    share copied once a cluster by TMA multicast (``engine="tma"``). ``specialize=True``: warp
    specialization (``Schedule.specialize``), one more warpgroup issuing the TMA copies while the
    ``warps_m x warps_n`` ones only multiply (with ``engine="tma"``). ``swizzle=64`` or ``128``: tiles of
    rows of a whole step's bytes (``Schedule.swizzle``; a ``depth`` of 64 or 128 bytes, ``engine="tma"``):
    one TMA box a tile a step. ``persistent=True``: one block a multiprocessor walking the output tiles
    (``Schedule.persistent``; with ``specialize=True``), the producer copying the next tile's steps while
    the consumers store; with ``cluster``, each cluster walking the tiles its blocks take together.
    ``padded=True``: B (a Matmul's or Gemm's second operand, the weights, stored once) in rows of whole
    128-byte L2 lines, its reduction in blocks of a line's elements padded with zeros (float16 ``NK64k``;
    ``engine="tma"``, which reads them as rows of the padded length: ``tma.padded_rows``). ``halves=S``:
    the last S steps multiplied in halves of the warpgroups' columns, the left half's outputs stored while
    the right half's products run (``Schedule.halves``; one wave's output drain partly hidden).
    float16 or bfloat16 operands, or a quantized op's int8 or uint8 activations
    and symmetric int8 (or ternary) weights (``wgmma_types``: m64nNk32 into exact int32 sums, the
    quantized epilogue of ``gpu_mma``; a quantized conv on TMA pixel boxes adds the activations' zero
    point at the padding, which TMA fills with 0, back in the epilogue: ``padding_sums``)."""
    _, n_dims = _matrix_dims(op, "gpu_wgmma")
    columns = math.prod(op.extent(d) for d in n_dims)
    entry = wgmma_instruction(columns, block_n, warps_n, wgmma_types(op))
    schedule = gpu_wmma(op, block_m, block_n, warps_m, warps_n, depth, entry, stages, split_k, engine)
    schedule = schedule if tuple(cluster) == (1, 1) else schedule.cluster(*cluster)
    schedule = schedule.specialize() if specialize else schedule
    schedule = schedule if swizzle == 32 else schedule.swizzle(swizzle)
    for name, value in (("persistent", persistent), ("padded", padded)):
        if not isinstance(value, bool):
            raise ScheduleError(f"gpu_wgmma({name}={value!r}): True or False")
    schedule = _whole_line_rows(schedule, op.inputs[1], entry, engine) if padded else schedule
    schedule = schedule.persistent() if persistent else schedule
    return schedule.halves(halves) if halves else schedule


def _whole_line_rows(schedule: Schedule, tensor: str, entry: str, engine: str) -> Schedule:
    """``schedule`` with the 2-D ``tensor`` stored in rows of whole L2 lines (``gpu_wgmma``'s ``padded``):
    its inner (reduction) dim in blocks of ``L2_LINE_BYTES`` of ``entry``'s elements."""
    layout = schedule.layout_of(tensor)
    if engine != "tma" or len(layout.order) != 2:
        raise ScheduleError(f"gpu_wgmma(padded=True): {tensor} of {schedule.op!r} is stored {layout.tag} "
                            f"and copied by engine={engine!r}; rows of whole lines take a 2-D operand (a "
                            f"Matmul's or Gemm's) copied by engine='tma'")
    (rows, _), (columns, _) = layout.order
    block = L2_LINE_BYTES // matrix_instruction(entry, "gpu_wgmma(padded=True)").element_bytes
    return schedule.layout(tensor, f"{rows}{columns}{block}{columns.lower()}")


TENSOR_PRESETS = Presets({f.__name__: f for f in (gpu_wmma, gpu_mma, gpu_wgmma)})


# --- decode: GEMVs and small-M GEMMs streaming their weights ------------------------------------------

VECTOR_BYTES = 16          # one load of weights in the cuda target's GEMV kernels


def gpu_gemv(op: Op, warps: int | None = None, columns: int | None = None,
             weight_format: str | None = None, depth: int | None = None,
             split: int | None = None, stage: bool = False) -> Schedule:
    """A decode-shaped ``Matmul`` (a GEMV or up to 8 rows) on the cuda target's GEMV kernels
    (``targets/cuda/gemv.py``): ``columns`` consecutive outputs ``j`` per warp (``warp.x``), ``warps``
    warps a block (``block.x``); the weights in ``NK{v}k`` and the activations in ``MK{v}k``, ``v``
    the weights of one 16-byte load (float16 8, int8 16, i2_s 64), so that each output's weights stream
    in 16-byte vectors over the warp's lanes. Ternary weights are stored as ``weight_format`` (default
    ``"i2_s"``, 2 bits each; ``"int8"``: a byte each). ``warps`` and ``columns`` default to the fastest
    of the shapes timed on an H200 at the LLM decode shapes (docs/benchmarks.md): 4 x 1 for float16 and
    int8 weights, 8 x 4 for i2_s. ``depth`` (``unroll("k", depth)``): the rounds of each lane's loop (a
    16-byte vector of each of its columns a round) whose weights it loads before using the first
    (default: 8 vectors in flight, ``8 // columns`` rounds). ``split`` (``split("k", chunk)``, the rounds
    then ``k_i``'s): k in that many shares of whole 16-byte vectors, each summed by its own warp of the
    block (``warps x split`` warps), the shares added in order through shared memory (exact for int8
    and ternary); refused where a share would hold no vector or the block more than 1024 threads.
    ``stage`` (``stage(activations, columns' loop)``): each block copies the activations' rows into
    shared memory once, under its first weight loads, and its warps read them there (i2_s: the
    activations' sum taken once a block, not by every lane); refused where the rows take more than
    ``MAX_SHARED_BYTES``."""
    roles = GemvRoles.of(op)
    j, k = roles.outputs, roles.reduction
    schedule = Schedule(op)
    ternary = op.quant is not None and op.quant.ternary
    if ternary:
        schedule = schedule.weight_format(weight_format or "i2_s")
    elif weight_format is not None:
        raise ScheduleError(f"weight_format={weight_format!r} stores ternary weights; {op!r} has none")
    packed = schedule.weight_format_mode == "i2_s"
    weights = 4 * VECTOR_BYTES if packed else VECTOR_BYTES // (1 if op.quant is not None else 2)
    warps, columns = (max(1, int(given or default)) for given, default in
                      ((warps, 8 if packed else 4), (columns, 4 if packed else 1)))
    layouts = roles.layouts(weights)
    schedule = (schedule.layout(roles.weights, layouts[roles.weights])
                .layout(roles.activations, layouts[roles.activations])
                .split(j, warps * columns).split(f"{j}_i", columns))
    schedule = schedule.bind(f"{j}_o", "block.x").bind(f"{j}_i_o", "warp.x")
    reduction = k
    if split is not None and split != 1:
        vectors = -(-roles.k // weights)
        if not isinstance(split, int) or isinstance(split, bool) or not 1 <= split <= vectors:
            raise ScheduleError(f"split={split!r}: the GEMV's k holds {vectors} vectors of {weights} "
                                f"weights; split it into 1 to {vectors} warps' shares")
        schedule, reduction = schedule.split(k, -(-vectors // split) * weights), f"{k}_i"
    # a lane has at most k rounds: a deeper unroll is the same kernel
    schedule = schedule if depth is None else schedule.unroll(reduction, min(depth, roles.k))
    return schedule.stage(roles.activations, f"{j}_i_i") if stage else schedule


# --- depthwise convolutions: memory-bound, a thread's channel vector and run of pixels ------------------

DEPTHWISE_THREADS = 128    # threads a block by default (gpu_depthwise)


def depthwise_block(op: Op, run: int | None = None, threads_c: int | None = None,
                    threads_w: int | None = None) -> tuple[int, int, int]:
    """``gpu_depthwise``'s ``run``, ``threads_c`` and ``threads_w`` for ``op``, defaulted and clamped to
    it (a run no longer than a row, no more threads than channel vectors and runs)."""
    roles = DepthwiseRoles.of(op)
    columns, vectors = roles.columns, -(-roles.channels // roles.vector)
    run = _fit_factor((2 if columns.stride == 1 else 1) if run is None else run, columns.out, "run")
    spread = -(-vectors // -(-vectors // 32))
    threads_c = _fit_factor(spread if threads_c is None else threads_c, vectors, "threads_c")
    runs, per_block = -(-columns.out // run), max(1, DEPTHWISE_THREADS // threads_c)
    return run, threads_c, _fit_factor(per_block if threads_w is None else threads_w, runs, "threads_w")


def gpu_depthwise(op: Op, run: int | None = None, threads_c: int | None = None,
                  threads_w: int | None = None) -> Schedule:
    """A depthwise convolution (groups == channels, two windows: ``DepthwiseRoles``; a ``Conv2d`` or a
    ``Contraction`` of that form) on the cuda target's depthwise kernels (``targets/cuda/depthwise.py``):
    the input and output channels last (2-D: ``NHWC``), the weights ``HWIO``; each thread a vector of
    16 bytes of channels (``k_i``, vectorized: 8 float16/bfloat16, 4 float32) and a ``run`` of output
    pixels along W (``ow_i``); ``threads_c`` x ``threads_w`` threads a block over channel vectors
    (``thread.x``) and runs (``thread.y``), the grid over runs (``block.x``), channel vectors
    (``block.y``) and the images' output rows (``n`` fused with ``oh``, ``block.z``). ``threads_c``
    defaults to the channel vectors spread evenly over blocks of at most 32, ``threads_w`` to about
    ``DEPTHWISE_THREADS`` threads a block (at most the runs of a row); ``run`` to 2 pixels (stride 1) or
    1 (a stride along W), the fastest of 1, 2, 4 and 8 on an H200 at MobileNetV2's depthwise layers
    (bench_cuda_depthwise.py). The loop names above are a Conv2d's; another op's are its roles' dims."""
    run, threads_c, threads_w = depthwise_block(op, run, threads_c, threads_w)
    roles = DepthwiseRoles.of(op)
    n, k, c, oh, ow = roles.batch, roles.channel, roles.reduction, roles.rows.out_dim, roles.columns.out_dim
    schedule = Schedule(op)
    for tensor, tag in roles.layouts.items():
        schedule = schedule.layout(tensor, tag)
    schedule = (schedule.split(k, roles.vector).split(f"{k}_o", threads_c).split(ow, run)
                .split(f"{ow}_o", threads_w)
                .reorder(n, oh, f"{k}_o_o", f"{ow}_o_o", f"{k}_o_i", f"{ow}_o_i", f"{ow}_i", c,
                         roles.rows.tap_dim, roles.columns.tap_dim, f"{k}_i")
                .fuse(n, oh).vectorize(f"{k}_i"))
    for loop, axis in ((f"{n}_{oh}", "block.z"), (f"{k}_o_o", "block.y"), (f"{ow}_o_o", "block.x"),
                       (f"{k}_o_i", "thread.x"), (f"{ow}_o_i", "thread.y")):
        schedule = schedule.bind(loop, axis)
    return schedule


def _fit_factor(value: int, extent: int, name: str) -> int:
    """``value`` (a positive int) clamped to ``extent``; ValueError naming ``name`` otherwise."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}={value!r}: must be a positive int")
    return min(value, extent)
