"""Quantized kernels: the integer plan of a schedule and the C around its reduction nest.

With integer arithmetic the reduction nest accumulates the raw products of the stored
integers, ``P = sum x' * w'`` over the valid taps, into an int32 workspace laid out like
the output (``O``); ``x' = x + shift`` where ``shift`` is 128 when int8 activations feed
the u8 x s8 dot instruction (``x ^ 0x80``), else 0 (also for int8 activations where the integer
table has the s8 x s8 dot: ``has_signed_dot``), and ``w' = w + weight_shift`` are the
weights as stored: uint8 weights are shifted by -128 (``w ^ 0x80``, int8) when they are
packed, and so are their zero points (``zw' = zw - 128``), so every nest multiplies s8
weights and uint8 weights cost nothing in the kernel. The exact accumulator of DESIGN.md,
``acc = sum (x - zx) * (w - zw[k])``, is then

    acc = P - zx' * T[k](p) - zw'[k] * S(p),     zx' = zx + shift,

with ``T[k](p) = sum (w - zw[k])`` and ``S(p) = sum x'`` over the taps valid at output
position ``p`` (padding taps do not exist, so both depend on ``p`` near the borders).
``T`` only takes as many values per channel as there are classes of output positions with
different valid taps along each window (a conv's depth, rows, columns), so it is a table
``[weight batch...][class per window...][K]`` (a batched matmul's weights: one per batch item)
computed when the weights are packed (``compensation("packed")``) or by the kernel
(``compensation("kernel")``); ``S`` is computed by the kernel (only for asymmetric
weights, whose ``zw'`` may be nonzero; symmetric uint8 weights have ``zw = 128``, ``zw' = 0``).
The epilogue pass then applies ``T``, ``S``, the bias and the scales, and writes the float32,
requantized or raw int32 output ``Y`` in the output's layout.

With ``arithmetic("dequantize")`` the nest converts every operand to float32 and
accumulates in float straight into the float output: no workspace and no epilogue.

VNNI. ``vpdpbusd`` adds, in each int32 lane, the products of 4 consecutive u8 bytes of
one operand with 4 consecutive s8 bytes of the other. A schedule selects it with a
reduction loop of extent 4 (e.g. ``split("c", 4)`` and its ``c_i``) that is the innermost
reduction loop, with only output loops between it and the vectorized loop, along which
both inputs are unit-stride in storage (activations NHWC or NCHW4c-like, weights with 4
input channels innermost, e.g. ``OIHW16o4i``). That loop is not emitted; each vector
instruction consumes its 4 iterations. Without such a loop (or on the scalar target) the
products are widened to int32 and multiply-added lane by lane. A depthwise conv or a stem (few input
channels per group) can instead have a dot loop along a window's taps, the lanes along that window's
output positions (``taps.find``, ``QuantPlan.tap_dot``); with symmetric weights the padding bytes of
that window hold the activations' zero point, so its padding taps count as valid in ``P`` and ``T``
(``QuantPlan.tap_fill``, ``class_borders``: one class along it) and ``T`` is constant along the lanes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..activation import Clip
from ..cnames import letter_variable
from ..expr import Bound, Const, Var
from ..ops import Op, Window
from ..schedule import Compensation, QuantArithmetic, Schedule
from . import cprint, taps, ternary, wide
from .instr import SIGNED_DOT_MEANINGS, tables
from .params import KernelParam, index_ctype, scalar
from .vector import proves_step

DOT = 4   # bytes per lane consumed by one dot instruction
# Epilogue loops store bytes (which may alias anything) from pointers that OpenMP outlining strips of
# ``restrict``: tell the compiler the lanes are independent so it still vectorizes them.
SIMD_PRAGMA = "#pragma omp simd"
# every integer kernel's flags: float32 products without contraction (requantization must match quant.py
# bit for bit), wrapping int32 arithmetic (compensation terms, exact modulo 2^32), and no errno from math
# builtins (the requantization's __builtin_irintf is then one conversion instruction, not a call)
QUANT_FLAGS = ("-ffp-contract=off", "-fwrapv", "-fopenmp-simd", "-fno-math-errno")
MAP = "lo_map"     # ``Schedule.clip_quantized``'s outputs by requantized value: 256 bytes, by bit pattern
C_TYPES = {"float32": "float", "uint8": "uint8_t", "int8": "int8_t", "int32": "int32_t"}


@dataclass(frozen=True)
class QuantPlan:
    """What a quantized kernel computes and how."""

    arithmetic: QuantArithmetic
    compensation: Compensation
    dot_loop: str | None         # reduction loop consumed by the dot instruction
    shift: int                   # added to activations before the products (int8 on the dot: 128)
    weight_shift: int            # added to the weights when they are packed (uint8: -128, stored as int8)
    activation_sums: bool        # asymmetric weights need S(p)
    fused_epilogue: bool         # a register block holding final sums applies the epilogue at its store
    activation_type: str         # C types
    output_type: str
    bias_type: str
    packed_weights: bool = False  # ternary weights stored as i2_s (codegen/ternary.py)
    tap_dot: taps.TapDot | None = None   # the dot loop runs along a window's taps (codegen/taps.py)
    tap_fill: bool = False        # the tap dot's padding bytes hold the activations' zero point
    requantized_clip: Clip | None = None   # clipped on another scale after (``Schedule.clip_quantized``)
    wide_weights: bool = False    # weights stored as s16 (codegen/wide.py)

    @property
    def dot_instruction(self) -> str:
        """The integer table's dot entry the reduction uses: ``dot_s16`` for s16 weights
        (``WIDE_MEANINGS``), ``dot_s8`` for unshifted int8 activations (``SIGNED_DOT_MEANINGS``), else the
        u8 x s8 ``dot``."""
        if self.wide_weights:
            return "dot_s16"
        return "dot_s8" if self.activation_type == "int8_t" and not self.shift else "dot"

    @property
    def integer(self) -> bool:
        return self.arithmetic == "integer"


def has_signed_dot(isa_name: str) -> bool:
    """Whether variant ``isa_name``'s integer table has the s8 x s8 dot (``SIGNED_DOT_MEANINGS``)."""
    ints = tables(isa_name).ints
    return ints is not None and set(SIGNED_DOT_MEANINGS) <= set(ints.ops)


def plan(schedule: Schedule, lanes: int, signed_dot: bool = False) -> QuantPlan:
    """The plan of ``schedule`` on a target with ``lanes`` int32 lanes (1: scalar); ``signed_dot``: its
    integer table has the s8 x s8 dot (``has_signed_dot``), which int8 activations feed unshifted."""
    spec = schedule.op.quant
    integer = schedule.arithmetic_mode == "integer"
    tap = taps.find(schedule, lanes) if integer else None
    dot = tap.loop if tap else find_dot_loop(schedule, lanes) if integer else None
    packed = schedule.weight_format_mode == "i2_s"
    if dot and packed and not ternary.groups_aligned(schedule, dot):
        dot = tap = None   # a dot group of packed weights is one 32-bit read: it must start on 4 elements
    return QuantPlan(
        arithmetic=schedule.arithmetic_mode, compensation=schedule.compensation_mode, dot_loop=dot,
        shift=128 if dot and spec.activation == "int8" and not signed_dot else 0,
        weight_shift=-128 if spec.weight == "uint8" else 0,
        activation_sums=integer and not spec.weight_symmetric,
        fused_epilogue=(integer and schedule.register_block_at is not None
                        and schedule.block_holds_final_outputs()),
        activation_type=C_TYPES[spec.activation], output_type=C_TYPES[spec.output],
        bias_type="float" if spec.dequantized else "int32_t", packed_weights=packed, tap_dot=tap,
        tap_fill=tap is not None and spec.weight_symmetric, requantized_clip=schedule.requantized_clip,
        wide_weights=schedule.weight_format_mode == "s16")


def find_dot_loop(schedule: Schedule, lanes: int, group: int = DOT, padded_groups: bool = True) -> str | None:
    """The reduction loop a dot instruction of ``group`` elements per lane consumes (module
    docstring: 4 bytes for vpdpbusd, 2 bf16 for vdpbf16ps), or None. ``padded_groups``: a last group
    may run past the input channels where the weights are zero-padded (the products there are
    exactly 0 for integers; bfloat16 passes False, as 0 times a neighbouring inf or NaN is not 0)."""
    vec = schedule.vector_loop
    op = schedule.op
    if vec is None or lanes == 1:
        return None
    out_vars = schedule.offset(op.output).variables()
    if vec.name not in out_vars:
        return None
    inside = schedule.loops[:-1]
    reductions = [i for i, loop in enumerate(inside) if loop.name not in out_vars]
    if not reductions:
        return None
    loop = inside[reductions[-1]]
    if loop.extent > group or loop.unroll or loop.parallel:
        return None
    if loop.extent < group and not (padded_groups and _covers_padded_channels(schedule, loop.name, group)):
        return None
    if not all(_unit_stride(schedule, t, loop.name, group) for t in op.inputs):
        return None
    return loop.name if _guards_allow_groups(schedule, loop.name, group, padded_groups) else None


@lru_cache(maxsize=1024)
def _unit_stride(schedule: Schedule, tensor: str, name: str, group: int) -> bool:
    """True iff ``tensor``'s storage offset grows by exactly 1 along loop ``name`` everywhere."""
    return proves_step(schedule, schedule.offset(tensor), name, 1, f"{name} + 1 < {group}")


def _split_of(schedule: Schedule, name: str):
    return next((r for r in schedule.relations if getattr(r, "inner", None) == name), None)


def _weight_letter(op: Op, dim: str) -> str:
    """The weights' layout letter of the axis that op dim ``dim`` indexes."""
    weights = op.inputs[1]
    return op.tensor(weights).letters[op.index(weights).index(Var(dim))]


def _weights_padded(schedule: Schedule, name: str, group: int) -> bool:
    """Loop ``name`` is the inner part of a split of the input channels (the op's
    ``reduction_channel_dim``) and the weights' layout blocks them by a multiple of ``group``, so a
    group reads zeros past the end."""
    op = schedule.op
    split = _split_of(schedule, name)
    layout = schedule.layout_of(op.inputs[1])
    return (split is not None and split.parent == op.reduction_channel_dim
            and layout.block(_weight_letter(op, op.reduction_channel_dim)) % group == 0)


def _covers_padded_channels(schedule: Schedule, name: str, group: int) -> bool:
    """A loop shorter than a group (a split clamped to a dimension of fewer channels) is a
    dot loop when it spans the whole dimension and the weights are zero-padded to a group."""
    split = _split_of(schedule, name)
    return _weights_padded(schedule, name, group) and split.parent_extent <= split.factor


def _guards_allow_groups(schedule: Schedule, name: str, group: int, padded_groups: bool) -> bool:
    """A group runs whole: no padding guard may depend on the loop; a partial block's guard either
    holds for all of a group or for none of it (``_group_uniform``: a cache block of the input
    channels that does not divide them, both multiples of the group), or it cuts a group only where
    the weights are zero-padded beyond it (a blocked layout) and ``padded_groups`` allows that."""
    if any(name in schedule.value(d).variables() for g in schedule.op.guards for d in g.expr.variables()):
        return False
    partial = [guard for guard in schedule.partial_guards
               if name in guard.expr.variables() and not _group_uniform(schedule, guard, name)]
    return not partial or (padded_groups and _weights_padded(schedule, name, group))


def _group_uniform(schedule: Schedule, guard: Bound, name: str) -> bool:
    """True iff isl proves ``guard`` holds at an iteration exactly where it holds with loop ``name``
    at 0 (the group's first element, where the dot loop's emission checks it)."""
    first = Bound(guard.expr.substitute({name: Const(0)}), guard.lower, guard.upper)
    return all(schedule.iterations(holds.to_isl(), _fails(fails)).is_empty()
               for holds, fails in ((first, guard), (guard, first)))


def _fails(bound: Bound) -> str:
    """The isl constraint that ``bound`` does not hold."""
    expr = bound.expr.to_isl()
    return f"({expr} < {bound.lower} or {expr} >= {bound.upper})"


def read_ahead(schedule: Schedule, qp: QuantPlan, lanes: int) -> dict[str, int]:
    """Bytes a vectorized quantized kernel may read past the end of its arrays: a dot group, a
    byte gather and AVX2's masked byte load read 4 bytes at a byte element (so ``DOT - 1`` past the
    last one; a tap dot's window load: ``taps.read_ahead``); a dequantizing kernel loads whole
    vectors of per-channel parameters from a lane's channel, also in masked-off lanes past the last
    channel."""
    if lanes == 1:
        return {}
    ahead = dict.fromkeys(schedule.op.inputs, DOT - 1)
    if qp.tap_dot is not None:
        ahead[schedule.op.inputs[0]] = max(DOT - 1, taps.read_ahead(lanes))
    if not qp.integer:
        ahead |= dict.fromkeys(("lo_zw", "lo_wscale"), 4 * (lanes - 1))
    return ahead


# --- output-position classes of the weight compensation ----------------------------------------

@dataclass(frozen=True)
class Borders:
    """Output positions along each class window grouped by which filter taps are valid there."""

    classes: tuple[tuple[int, ...], ...]            # per window: the class of each output position
    valid: tuple[tuple[tuple[int, ...], ...], ...]  # per window, per class: 1 per valid tap

    @property
    def shape(self) -> tuple[int, ...]:
        """Classes per window."""
        return tuple(len(v) for v in self.valid)


NO_WINDOW = Window("", "", out=1, taps=1, stride=1, pad=0, dilation=1, size=1)   # one class, one valid tap
CLASS_NAMES = {"d": ("depth", "dc"), "h": ("row", "rc"), "w": ("column", "cc")}   # per table letter


def _classes(w: Window):
    valid = [tuple(int(0 <= o * w.stride - w.pad + t * w.dilation < w.size) for t in range(w.taps))
             for o in range(w.out)]
    distinct = sorted(set(valid), key=valid.index)
    return tuple(distinct.index(v) for v in valid), tuple(distinct)


def row_col_windows(op: Op) -> tuple[Window, Window]:
    """The op's row and column windows as the tile kernels read them; a missing one is ``NO_WINDOW``
    (a GEMM has two); ValueError for more than 2 windows."""
    windows = op.windows + (NO_WINDOW,) * (2 - len(op.windows))
    if len(windows) != 2:
        raise ValueError(f"{op!r} has {len(op.windows)} window axes; a row and a column window at most")
    return windows[0], windows[1]


@dataclass(frozen=True)
class GroupShape:
    """An op as per-group GEMMs over its windows: batch, groups, input and output channels per group,
    the row and column windows (``NO_WINDOW`` where the op has none)."""

    batch: int
    groups: int
    cg: int                          # input channels per group
    kg: int                          # output channels per group
    rows: Window
    cols: Window

    @classmethod
    def of(cls, op: Op, **extra):
        """The shape of ``op`` (``extra``: the fields a subclass adds)."""
        rows, cols = row_col_windows(op)
        return cls(op.extent(batch_dim(op)), op.groups, op.extent(op.reduction_channel_dim),
                   op.channels // op.groups, rows, cols, **extra)


def class_windows(op: Op) -> tuple[Window, ...]:
    """The windows whose border classes index the compensation table: the op's own, one per spatial
    dim; an op without windows (a GEMM) has two ``NO_WINDOW`` of one class each."""
    return op.windows or (NO_WINDOW, NO_WINDOW)


def table_letters(op: Op) -> str:
    """The letter naming each class window's C tables (``lo_<letter>class``, ``lo_<letter>valid``):
    the last ones of ``dhw`` (a 2-D conv's rows ``h`` and columns ``w``)."""
    count = len(class_windows(op))
    if count > len(CLASS_NAMES):
        raise ValueError(f"quantized kernels take at most {len(CLASS_NAMES)} window axes; {op!r} has {count}")
    return "dhw"[len(CLASS_NAMES) - count:]


@lru_cache(maxsize=256)
def borders(op: Op) -> Borders:
    """The border classes of each class window (a GEMM has one class)."""
    per_window = [_classes(w) for w in class_windows(op)]
    return Borders(tuple(c for c, _ in per_window), tuple(v for _, v in per_window))


def weight_batch_dims(op: Op) -> tuple[str, ...]:
    """Dims indexing the weights that are neither their output channels nor reduced (a batched
    matmul's batch dims): the compensation has a table per value of them."""
    return tuple(e.name for e in op.index(op.inputs[1])
                 if isinstance(e, Var) and e.name != op.channel_dim and e.name not in op.reduction_dims)


def batch_dim(op: Op) -> str:
    """The position dim of an op with one (conv ``n``, matmul ``i``), as the tile kernels read it."""
    return op.position_dims[-1]


def filled_window_index(op: Op, qp: QuantPlan | None) -> int | None:
    """The index among the op's windows of a tap dot's window whose padding bytes the kernel fills with
    the activations' zero point (``QuantPlan.tap_fill``; None without one). A padding tap then adds
    ``zx' * w`` to the products, which the compensation takes back: every tap of that window counts
    as valid everywhere along it (one border class), so the compensation does not vary along the tap
    dot's lanes. Only with symmetric weights: the activation sums stay sums over the valid taps."""
    return op.windows.index(qp.tap_dot.window) if qp is not None and qp.tap_fill else None


def class_borders(op: Op, qp: QuantPlan | None = None) -> Borders:
    """The border classes the compensation of plan ``qp`` uses: ``borders``, with a filled tap dot
    window (``filled_window_index``) one class of all taps valid."""
    b, at = borders(op), filled_window_index(op, qp)
    if at is None:
        return b
    window = op.windows[at]
    classes, valid = list(b.classes), list(b.valid)
    classes[at], valid[at] = (0,) * window.out, ((1,) * window.taps,)
    return Borders(tuple(classes), tuple(valid))


def window_classes(op: Op, qp: QuantPlan | None = None) -> list[tuple[str, Window, int]]:
    """Per window of the op (none for a GEMM): its table letter, the window and its class count in
    the compensation of plan ``qp`` (``class_borders``)."""
    return list(zip(table_letters(op), op.windows, class_borders(op, qp).shape)) if op.windows else []


def tap_window_index(op: Op, qp: QuantPlan | None) -> int | None:
    """The index among the op's windows of a tap dot's window (None without one): the compensation
    table holds that window's output positions, not its border classes, innermost (after ``k``), so
    the epilogue's lanes, which run along those positions, read it contiguously. A filled tap dot
    window (``filled_window_index``) has one class: None."""
    return (op.windows.index(qp.tap_dot.window)
            if qp is not None and qp.tap_dot is not None and not qp.tap_fill else None)


def compensation_entries(op: Op, qp: QuantPlan | None = None) -> int:
    """Entries of the compensation table ``T[weight batch...][class...][k]`` (with a tap dot:
    ``T[weight batch...][other windows' classes...][k][position]``, ``tap_window_index``)."""
    shape = list(class_borders(op, qp).shape)
    at = tap_window_index(op, qp)
    if at is not None:
        shape[at] = op.windows[at].out
    return op.channels * math.prod(shape) * math.prod(op.extent(d) for d in weight_batch_dims(op))


def compensation_table(op: Op, qp: QuantPlan, wq: np.ndarray, zw: np.ndarray) -> np.ndarray:
    """The compensation table the kernel of plan ``qp`` reads (``compensation_entries``): the
    ``weight_compensation`` per class, or with a tap dot per position of its window, innermost."""
    table = weight_compensation(op, wq, zw, class_borders(op, qp))
    at = tap_window_index(op, qp)
    if at is None:
        return table
    batch = [op.extent(d) for d in weight_batch_dims(op)]
    axis = len(batch) + at
    per_class = table.reshape(*batch, *class_borders(op, qp).shape, op.channels)
    per_position = np.take(per_class, class_borders(op, qp).classes[at], axis=axis)
    return np.ascontiguousarray(np.moveaxis(per_position, axis, -1)).reshape(-1)


def stored_weights(qp: QuantPlan, wq: np.ndarray) -> np.ndarray:
    """The weights as the kernel reads them: int8 ``w + qp.weight_shift`` (logical layout)."""
    if not qp.weight_shift:
        return wq
    return (wq.astype(np.int16) + qp.weight_shift).astype(np.int8)


def weight_compensation(op: Op, wq: np.ndarray, zw: np.ndarray, valid: Borders | None = None) -> np.ndarray:
    """``T[weight batch..., class..., k] = sum (w - zw[k])`` over the valid taps (int32, flat) of the
    border classes ``valid`` (default: ``borders(op)``).

    ``wq`` in the op's logical layout (indexed by dims: conv ``[K, C/g, *taps]``, matmul
    ``[*batch, K, N]``), the output channels on ``op.weight_channel_axis``.
    """
    w = np.asarray(wq, dtype=np.int64)
    shape = [1] * w.ndim
    shape[op.weight_channel_axis] = -1
    dims = [e.name for e in op.index(op.inputs[1])]
    windows = op.windows
    letters = dict(zip(dims + [f"class {i}" for i in range(len(windows))],
                       "abcdefghijklmnopqrstuvwxyz"))
    classes = [letters[f"class {i}"] for i in range(len(windows))]
    operands = [(w - np.asarray(zw, dtype=np.int64).reshape(shape), "".join(letters[d] for d in dims))]
    operands += [(np.array(row), cls + letters[win.tap_dim])
                 for row, cls, win in zip((valid or borders(op)).valid, classes, windows)]
    out = "".join(letters[d] for d in weight_batch_dims(op)) + "".join(classes) + letters[op.channel_dim]
    spec = ",".join(sub for _, sub in operands) + "->" + out
    # a reduction dim that does not index the weights repeats each weight (a contraction's)
    repeats = math.prod(op.extent(d) for d in op.reduction_dims - set(dims))
    return (repeats * np.einsum(spec, *(a for a, _ in operands))).astype(np.int32).reshape(-1)


# --- C around the nest ---------------------------------------------------------------------------

def parameters(qp: QuantPlan) -> tuple[KernelParam, ...]:
    """The C parameters after the tensors (inputs, bias, ``O``); ``lo_zw`` holds the stored weights'
    zero points ``zw'`` (module docstring). A raw int32 output has no multipliers."""
    if not qp.integer:
        return (KernelParam("lo_zw", "int32_t", const=True), KernelParam("lo_wscale", "float", const=True),
                scalar("lo_xscale", "float"), scalar("lo_zx", "int"))
    mult = (KernelParam("lo_mult", "float", const=True),) if qp.output_type != "int32_t" else ()
    clipped = (KernelParam(MAP, "uint8_t", const=True),) if qp.requantized_clip is not None else ()
    return (KernelParam("Y", qp.output_type), KernelParam("lo_zw", "int32_t", const=True), *mult,
            KernelParam("lo_comp", "int32_t"), KernelParam("lo_xsum", "int32_t"), scalar("lo_zx", "int"),
            scalar("lo_zy", "int"), *clipped)


def tensor_type(schedule: Schedule, qp: QuantPlan, tensor: str) -> str:
    """The C element type of a kernel tensor argument."""
    op = schedule.op
    if tensor == op.inputs[0]:
        return qp.activation_type
    if tensor == op.inputs[1]:
        return "uint8_t" if qp.packed_weights else "int16_t" if qp.wide_weights else "int8_t"
    if tensor == op.bias_tensor:
        return qp.bias_type
    return "int32_t" if qp.integer else "float"


def _storage_offset(schedule: Schedule, tensor: str, index) -> str:
    info = schedule.op.tensor(tensor)
    return schedule.layout_of(tensor).offset(tuple(index), info.shape).to_c()


PARALLEL_FOR = "#pragma omp parallel for schedule(static)"   # the schedule's parallel loop


def _omp(schedule: Schedule, collapse: int = 1) -> list[str]:
    """The pragma splitting the next loop (``collapse`` > 1: the next ``collapse`` loops, as one) over the
    threads of a parallel schedule."""
    if schedule.parallel_loop is None:
        return []
    return [PARALLEL_FOR + (f" collapse({collapse})" if collapse > 1 else "")]


def _tables(op: Op, qp: QuantPlan) -> list[str]:
    """The border classes of plan ``qp`` (``class_borders``) as static C arrays: per class window, the
    class of each output position, then per window the valid taps of each class."""
    b = class_borders(op, qp)
    flat = lambda rows: ", ".join(str(v) for row in rows for v in row)
    listed = lambda classes: ", ".join(map(str, classes))
    letters = table_letters(op)
    return ([f"static const int lo_{x}class[{len(classes)}] = {{{listed(classes)}}};"
             for x, classes in zip(letters, b.classes)]
            + [f"static const unsigned char lo_{x}valid[{len(valid) * len(valid[0])}] = {{{flat(valid)}}};"
               for x, valid in zip(letters, b.valid)])


def static_tables(schedule: Schedule, qp: QuantPlan) -> str:
    """File-scope C (before the kernel function)."""
    return "\n".join(["#include <stdint.h>"] + (_tables(schedule.op, qp) if qp.integer else [])) + "\n"


def _tap_sum(op: Op, valid: list[str], term: str, it: str) -> list[str]:
    """``s += term`` over the reduction: one loop per window's taps, those whose positions are valid
    (``valid``: a C condition per window), then the other reduction dims (a conv's input channels);
    ``it`` is the C type of the loop variables."""
    loop = lambda dim, extent: cprint.for_loop(it, dim, extent)
    taps = {w.tap_dim for w in op.windows}
    others = [d for d in op.dim_names if d in op.reduction_dims and d not in taps]
    headers = [f"{loop(w.tap_dim, w.taps)} if ({ok})" for w, ok in zip(op.windows, valid, strict=True)]
    lines = ["int s = 0;", *cprint.staircase(headers + [loop(d, op.extent(d)) for d in others])]
    lines[-1] += f" s += {term};"
    return lines


def _flat(terms: list[tuple[str, int]]) -> str:
    """C of the row-major offset of ``(index, extent)`` terms (the first extent is not used)."""
    offset = terms[0][0]
    for depth, (index, extent) in enumerate(terms[1:]):
        offset = f"{offset if depth == 0 else f'({offset})'} * {extent} + {index}"
    return offset


def constants(schedule: Schedule, qp: QuantPlan) -> list[str]:
    """C constants of every function that runs the epilogue: the clamp of a requantized value."""
    if not (qp.integer and schedule.op.quant.requantized):
        return []
    info = np.iinfo(schedule.op.quant.output)
    return [f"const float lo_low = (float)({int(info.min)} - lo_zy), "
            f"lo_high = (float)({int(info.max)} - lo_zy);   /* clamp of the requantized value */"]


def prologue(schedule: Schedule, qp: QuantPlan) -> list[str]:
    """C statements before the nest: compensation computed in the kernel, activation sums."""
    if not qp.integer:
        return []
    op, it = schedule.op, index_ctype(schedule)
    lines: list[str] = []
    a, w = op.inputs
    k, c = op.channel_dim, op.reduction_channel_dim
    loop = lambda dim, extent: cprint.for_loop(it, dim, extent)
    windows = op.windows
    if qp.compensation == "kernel":
        wbatch = [(d, op.extent(d)) for d in weight_batch_dims(op)]
        per_window = window_classes(op, qp)
        at = tap_window_index(op, qp)        # a tap dot's window: its positions (the loop names its class)
        classes = [(CLASS_NAMES[x][1], win.out if i == at else n) for i, (x, win, n) in enumerate(per_window)]
        axes = [f"[{CLASS_NAMES[x][0]} class]" for x in table_letters(op)] + ["[k]"]
        if at is not None:
            axes = axes[:at] + axes[at + 1:] + [f"[{per_window[at][1].out_dim}]"]
        named = "".join(f"[{d}]" for d, _ in wbatch) + "".join(axes)
        lines.append(f"/* weight compensation T{named} = sum (w - zw[k]) over valid taps */")
        lines += _omp(schedule)
        woff = _storage_offset(schedule, w, op.index(w))
        weight = wide.reference(schedule, w, woff)
        valid = [f"lo_{x}valid[{f'lo_{x}class[{v}]' if i == at else v} * {win.taps} + {win.tap_dim}]"
                 for i, ((x, win, _), (v, _)) in enumerate(zip(per_window, classes))]
        body = _tap_sum(op, valid, f"{weight} - lo_zw[{k}]", it)
        loops = [loop(d, n) for d, n in wbatch] + [loop(k, op.channels)] + [loop(v, n) for v, n in classes]
        rows = [cls for i, cls in enumerate(classes) if i != at] + [(k, op.channels)]
        rows += [classes[at]] if at is not None else []
        lines += cprint.loop_nest(loops, body + [f"lo_comp[{_flat(wbatch + rows)}] = s;"])
    if qp.activation_sums:
        shift = f" + {qp.shift}" if qp.shift else ""
        lines.append("/* activation sums S over the valid taps of each output position "
                     "(asymmetric weights) */")
        lines += _omp(schedule)
        positions = [(d, op.extent(d)) for d in op.position_dims]
        if windows:
            # windowed ops take activations [batch, channel, one axis per window], per group of channels
            channel = Var("g") * op.extent(c) + Var(c)
            index = (*(Var(d) for d, _ in positions), channel, *(win.input_index for win in windows))
            positions += [("g", op.groups)] + [(win.out_dim, win.out) for win in windows]
        else:
            index = op.index(a)
        xoff = _storage_offset(schedule, a, index)
        body = _tap_sum(op, [Bound(win.input_index, 0, win.size).to_c() for win in windows],
                        f"{a}[{xoff}]{shift}", it)
        lines += cprint.loop_nest([loop(d, n) for d, n in positions],
                                  body + [f"lo_xsum[{_flat(positions)}] = s;"])
    return lines


def _positions(op: Op, qp: QuantPlan) -> tuple[str, str, str]:
    """(channel variable, compensation table index, activation-sum index) over logical output names."""
    info = op.tensor(op.output)
    dims = [e.name if isinstance(e, Var) else None for e in op.index(op.output)]
    name = lambda dim: letter_variable(info.letters[dims.index(dim)])
    channel = letter_variable(info.letters[op.output_channel_axis])
    windows = op.windows
    positions = [(name(d), op.extent(d)) for d in op.position_dims]
    if windows:
        positions += [(f"{channel} / {op.channels // op.groups}", op.groups)]
        positions += [(name(win.out_dim), win.out) for win in windows]
    at = tap_window_index(op, qp)
    # a filled tap dot window has one class: the table does not vary along the lanes
    along = {at, filled_window_index(op, qp)}
    table = [(name(d), op.extent(d)) for d in weight_batch_dims(op)]
    table += [(f"lo_{x}class[{name(win.out_dim)}]", n) for i, (x, win, n) in enumerate(window_classes(op, qp))
              if i not in along]
    # the row of the table in ptrdiff_t: with -fwrapv an int index that wraps would not be provably
    # consecutive in the channel (or a tap dot's positions), and the compiler would emulate a gather in
    # every vectorized epilogue
    if at is not None:
        window = op.windows[at]
        row = _flat(table + [(channel, op.channels)])
        comp = f"(ptrdiff_t)({row}) * {window.out} + {name(window.out_dim)}"
    else:
        comp = f"(ptrdiff_t)({_flat(table)}) * {op.channels} + {channel}" if table else channel
    return channel, comp, _flat(positions)


def output_loops(schedule: Schedule) -> tuple[list[str], list[str], str]:
    """Loops over the output in its storage order (the innermost contiguous, so the compiler
    vectorizes the pass), the statements defining the logical index ``lo_<letter>`` (and
    skipping a blocked dimension's padding), and the storage offset."""
    op, it = schedule.op, index_ctype(schedule)
    info = op.tensor(op.output)
    layout = schedule.layout_of(op.output)
    extent = dict(zip(info.letters, info.shape))
    loops, defs = [], []
    for letter, block in layout.order:
        name, size = letter_variable(letter), layout.block(letter)
        if size == 1:
            loops.append(cprint.for_loop(it, name, extent[letter]))
        elif block:
            loops.append(cprint.for_loop(it, f"{name}_i", size))
            defs += [f"const {it} {name} = {name}_o * {size} + {name}_i;",
                     f"if ({name} >= {extent[letter]}) continue;"]
        else:
            loops.append(cprint.for_loop(it, f"{name}_o", -(-extent[letter] // size)))
    names = [letter_variable(letter) for letter in info.letters]
    return loops, defs, layout.offset(tuple(Var(n) for n in names), info.shape).to_c()


def _clamped(expr, size: int) -> str:
    """C of ``min(expr, size - 1)``."""
    return f"({expr.to_c()} < {size - 1} ? {expr.to_c()} : {size - 1})"


FOLDED = "lo_cb"     # the table of bias - (zx + shift) * compensation (``folded_offsets``)


def folded_offsets(schedule: Schedule, qp: QuantPlan) -> list[str]:
    """C filling ``FOLDED``, one int per compensation entry: the bias of its channel minus ``(zx +
    shift)`` times the entry, so the epilogue adds one value instead of multiplying the compensation
    and adding the bias (needs a table whose channel is innermost: no tap dot)."""
    op, it = schedule.op, index_ctype(schedule)
    if tap_window_index(op, qp) is not None:
        raise ValueError("folded_offsets: a tap dot's compensation table has the positions innermost")
    entries = compensation_entries(op, qp)
    bias = f"{op.bias_tensor}[t_e % {op.channels}] " if op.bias and not op.quant.dequantized else "0 "
    return [f"int32_t {FOLDED}[{entries}] __attribute__((aligned(64)));   /* bias - (zx + shift) x comp */",
            SIMD_PRAGMA,
            cprint.for_loop(it, "t_e", entries) +
            f" {FOLDED}[t_e] = {bias}- (lo_zx + {qp.shift}) * lo_comp[t_e];"]


def epilogue_statements(schedule: Schedule, qp: QuantPlan, value: str, index=None,
                        target: str | None = None, narrow: bool = True,
                        clamp: frozenset[str] = frozenset(), folded: bool = False,
                        mapped: bool = True) -> list[str]:
    """C statements turning the int32 products ``value`` of one output element into its
    output value, stored to ``target`` (default: the element of ``Y``). With ``narrow=False``
    a requantized value is stored as an int (already in the output type's range) for the caller
    to narrow: a loop without byte types is vectorized at the full int32 width.

    The element is named by ``lo_<letter>`` variables of the output's logical dims; given
    ``index`` (expressions over the loops) they are defined here first. Index expressions over
    a variable of ``clamp`` are clamped to the output's shape: a dead lane past the output's
    last element computes (and its caller does not store) the last one's value, so it reads the
    per-channel and per-position tables in bounds. With ``folded`` the compensation and the bias
    are one entry of ``FOLDED`` (``folded_offsets``). A ``clip_quantized`` value is looked up in
    ``MAP`` here, or with ``mapped=False`` left for the caller to map (packed bytes: ``map_bytes``).
    """
    op, spec = schedule.op, schedule.op.quant
    info = op.tensor(op.output)
    names = [letter_variable(letter) for letter in info.letters]
    it = index_ctype(schedule)
    lines = [f"const {it} {n} = {_clamped(e, size) if e.variables() & clamp else e.to_c()};"
             for n, e, size in zip(names, index, info.shape, strict=True)] if index is not None else []
    offset = schedule.layout_of(op.output).offset(tuple(Var(n) for n in names), info.shape).to_c()
    target = target or f"Y[{offset}]"
    channel, comp, xsum = _positions(op, qp)
    lines += [f"int lo_a = {value};", f"lo_a += {FOLDED}[{comp}];" if folded else
              f"lo_a -= (lo_zx + {qp.shift}) * lo_comp[{comp}];"]
    if qp.activation_sums:
        lines.append(f"lo_a -= lo_zw[{channel}] * lo_xsum[{xsum}];")
    if not spec.dequantized and op.bias and not folded:
        lines.append(f"lo_a += {op.bias_tensor}[{channel}];")
    if not spec.scaled:
        return lines + [f"{target} = lo_a;"]
    if spec.requantized:
        # clamped before it is rounded (the bounds are integers, so rounding commutes with the clamp),
        # then rounded to the nearest even int by one conversion (vcvtps2dq: irintf under QUANT_FLAGS'
        # -fno-math-errno); two selects, each a vmaxps / vminps (a nested select: compares and a blend)
        lines += [f"float lo_p = (float)lo_a * lo_mult[{channel}];",
                  "lo_p = lo_p < lo_low ? lo_low : lo_p;", "lo_p = lo_p > lo_high ? lo_high : lo_p;"]
        value = "__builtin_irintf(lo_p) + lo_zy"
        if qp.requantized_clip is not None and mapped:
            value = f"({qp.output_type}){MAP}[(uint8_t)({value})]"
        return lines + [f"{target} = ({qp.output_type})({value});" if narrow else f"{target} = {value};"]
    bias = f" + {op.bias_tensor}[{channel}]" if op.bias else ""
    return lines + [f"{target} = (float)lo_a * lo_mult[{channel}]{bias};"]


def epilogue(schedule: Schedule, qp: QuantPlan) -> list[str]:
    """C pass from the int32 workspace ``O`` to the output ``Y`` (integer arithmetic whose
    epilogue is not fused into a register block's store)."""
    if not qp.integer or qp.fused_epilogue:
        return []
    op = schedule.op
    loops, defs, offset = output_loops(schedule)
    body = defs + epilogue_statements(schedule, qp, f"{op.output}[{offset}]")
    lines = ["/* epilogue: compensation, bias" + (", scale" if op.quant.scaled else "")
             + (", requantization" if op.quant.requantized else "")
             + ", in the output's storage order */"]
    # the threads split the loops outside the vectorized one: a batch of one is not one thread's pass
    outer = max(1, len(loops) - 1)
    loops = [*loops[:-1], f"{SIMD_PRAGMA}\n{loops[-1]}"]
    return lines + cprint.block("", [*_omp(schedule, outer), *cprint.loop_nest(loops, body)])
