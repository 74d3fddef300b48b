"""Quantized kernels: the integer plan of a schedule and the C around its reduction nest.

With integer arithmetic the reduction nest accumulates the raw products of the stored
integers, ``P = sum x' * w'`` over the valid taps, into an int32 workspace laid out like
the output (``O``); ``x' = x + shift`` where ``shift`` is 128 when int8 activations feed
the u8 x s8 dot instruction (``x ^ 0x80``), else 0, and ``w' = w + weight_shift`` are the
weights as stored: uint8 weights are shifted by -128 (``w ^ 0x80``, int8) when they are
packed, and so are their zero points (``zw' = zw - 128``), so every nest multiplies s8
weights and uint8 weights cost nothing in the kernel. The exact accumulator of DESIGN.md,
``acc = sum (x - zx) * (w - zw[k])``, is then

    acc = P - zx' * T[k](p) - zw'[k] * S(p),     zx' = zx + shift,

with ``T[k](p) = sum (w - zw[k])`` and ``S(p) = sum x'`` over the taps valid at output
position ``p`` (padding taps do not exist, so both depend on ``p`` near the borders).
``T`` only takes as many values per channel as there are classes of output rows and
columns with different valid taps, so it is a table ``[K, row classes, column classes]``
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
products are widened to int32 and multiply-added lane by lane.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..expr import Bound, Var
from ..ops import Op, Window
from ..schedule import Compensation, QuantArithmetic, Schedule
from . import ternary
from .params import KernelParam, index_ctype, scalar
from .vector import proves_step

DOT = 4   # bytes per lane consumed by one dot instruction
# Epilogue loops store bytes (which may alias anything) from pointers that OpenMP outlining strips of
# ``restrict``: tell the compiler the lanes are independent so it still vectorizes them.
SIMD_PRAGMA = "#pragma omp simd"
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

    @property
    def integer(self) -> bool:
        return self.arithmetic == "integer"


def plan(schedule: Schedule, lanes: int) -> QuantPlan:
    """The plan of ``schedule`` on a target with ``lanes`` int32 lanes (1: scalar)."""
    spec = schedule.op.quant
    integer = schedule.arithmetic_mode == "integer"
    dot = find_dot_loop(schedule, lanes) if integer else None
    packed = schedule.weight_format_mode == "i2_s"
    if dot and packed and not ternary.groups_aligned(schedule, dot):
        dot = None      # a dot group of packed weights is one 32-bit read: it must start on 4 elements
    return QuantPlan(
        arithmetic=schedule.arithmetic_mode, compensation=schedule.compensation_mode, dot_loop=dot,
        shift=128 if dot and spec.activation == "int8" else 0,
        weight_shift=-128 if spec.weight == "uint8" else 0,
        activation_sums=integer and not spec.weight_symmetric,
        fused_epilogue=(integer and schedule.register_block_at is not None
                        and schedule.block_holds_final_outputs()),
        activation_type=C_TYPES[spec.activation], output_type=C_TYPES[spec.output],
        bias_type="float" if spec.dequantized else "int32_t", packed_weights=packed)


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
    """A group runs whole: no padding guard may depend on the loop; a partial block of it is
    fine only where the weights are zero-padded beyond it (a blocked layout) and
    ``padded_groups`` allows that."""
    if any(name in schedule.value(d).variables() for g in schedule.op.guards for d in g.expr.variables()):
        return False
    partial = any(name in guard.expr.variables() for guard in schedule.partial_guards)
    return not partial or (padded_groups and _weights_padded(schedule, name, group))


def read_ahead(schedule: Schedule, qp: QuantPlan, lanes: int) -> dict[str, int]:
    """Bytes a vectorized quantized kernel may read past the end of its arrays: a dot group, a
    byte gather and AVX2's masked byte load read 4 bytes at a byte element (so ``DOT - 1`` past the
    last one); a dequantizing kernel loads whole vectors of per-channel parameters from a lane's
    channel, also in masked-off lanes past the last channel."""
    if lanes == 1:
        return {}
    ahead = dict.fromkeys(schedule.op.inputs, DOT - 1)
    if not qp.integer:
        ahead |= dict.fromkeys(("lo_zw", "lo_wscale"), 4 * (lanes - 1))
    return ahead


# --- output-position classes of the weight compensation ----------------------------------------

@dataclass(frozen=True)
class Borders:
    """Output rows/columns grouped by which filter rows/columns are valid there."""

    row_class: tuple[int, ...]             # per output row
    row_valid: tuple[tuple[int, ...], ...]  # per class: 1 per valid filter row
    col_class: tuple[int, ...]
    col_valid: tuple[tuple[int, ...], ...]

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.row_valid), len(self.col_valid)


NO_WINDOW = Window("", "", out=1, taps=1, stride=1, pad=0, dilation=1, size=1)   # one class, one valid tap


def _classes(w: Window):
    valid = [tuple(int(0 <= o * w.stride - w.pad + t * w.dilation < w.size) for t in range(w.taps))
             for o in range(w.out)]
    distinct = sorted(set(valid), key=valid.index)
    return tuple(distinct.index(v) for v in valid), tuple(distinct)


def row_col_windows(op: Op) -> tuple[Window, Window]:
    """The op's row and column windows; a missing one is ``NO_WINDOW`` (a GEMM has two)."""
    windows = op.windows + (NO_WINDOW,) * (2 - len(op.windows))
    if len(windows) != 2:
        raise NotImplementedError(f"quantized kernels support ops with at most 2 window axes; {op!r} has "
                                  f"{len(op.windows)}")
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


@lru_cache(maxsize=256)
def borders(op: Op) -> Borders:
    """The border classes of the op's row and column windows (a GEMM has one class)."""
    rows, cols = (_classes(w) for w in row_col_windows(op))
    return Borders(rows[0], rows[1], cols[0], cols[1])


def stored_weights(qp: QuantPlan, wq: np.ndarray) -> np.ndarray:
    """The weights as the kernel reads them: int8 ``w + qp.weight_shift`` (logical layout)."""
    if not qp.weight_shift:
        return wq
    return (wq.astype(np.int16) + qp.weight_shift).astype(np.int8)


def weight_compensation(op: Op, wq: np.ndarray, zw: np.ndarray) -> np.ndarray:
    """``T[row class, column class, k] = sum (w - zw[k])`` over the valid taps (int32, flat).

    ``wq`` in the op's logical layout: output channels on ``op.weight_channel_axis``, then
    the input channels and the window taps (conv ``[K, C/g, KH, KW]``, matmul ``[K, N]``).
    """
    b = borders(op)
    w = np.moveaxis(np.asarray(wq, dtype=np.int64), op.weight_channel_axis, 0)
    zero = np.asarray(zw, dtype=np.int64).reshape((-1,) + (1,) * (w.ndim - 1))
    rows, cols = row_col_windows(op)
    taps = (w - zero).sum(axis=1).reshape(-1, rows.taps, cols.taps)
    table = np.einsum("kab,ra,cb->rck", taps, np.array(b.row_valid), np.array(b.col_valid))
    return table.astype(np.int32).reshape(-1)


# --- C around the nest ---------------------------------------------------------------------------

def parameters(qp: QuantPlan) -> tuple[KernelParam, ...]:
    """The C parameters after the tensors (inputs, bias, ``O``); ``lo_zw`` holds the stored weights'
    zero points ``zw'`` (module docstring). A raw int32 output has no multipliers."""
    if not qp.integer:
        return (KernelParam("lo_zw", "int32_t", const=True), KernelParam("lo_wscale", "float", const=True),
                scalar("lo_xscale", "float"), scalar("lo_zx", "int"))
    mult = (KernelParam("lo_mult", "float", const=True),) if qp.output_type != "int32_t" else ()
    return (KernelParam("Y", qp.output_type), KernelParam("lo_zw", "int32_t", const=True), *mult,
            KernelParam("lo_comp", "int32_t"), KernelParam("lo_xsum", "int32_t"), scalar("lo_zx", "int"),
            scalar("lo_zy", "int"))


def tensor_type(schedule: Schedule, qp: QuantPlan, tensor: str) -> str:
    """The C element type of a kernel tensor argument."""
    op = schedule.op
    if tensor == op.inputs[0]:
        return qp.activation_type
    if tensor == op.inputs[1]:
        return "uint8_t" if qp.packed_weights else "int8_t"
    if tensor == op.bias_tensor:
        return qp.bias_type
    return "int32_t" if qp.integer else "float"


def _storage_offset(schedule: Schedule, tensor: str, index) -> str:
    info = schedule.op.tensor(tensor)
    return schedule.layout_of(tensor).offset(tuple(index), info.shape).to_c()


def _omp(schedule: Schedule) -> list[str]:
    return ["#pragma omp parallel for schedule(static)"] if schedule.parallel_loop is not None else []


def _tables(op) -> list[str]:
    """The border classes as static C arrays."""
    b = borders(op)
    flat = lambda rows: ", ".join(str(v) for row in rows for v in row)
    listed = lambda classes: ", ".join(map(str, classes))
    return [f"static const int lo_hclass[{len(b.row_class)}] = {{{listed(b.row_class)}}};",
            f"static const int lo_wclass[{len(b.col_class)}] = {{{listed(b.col_class)}}};",
            f"static const unsigned char lo_hvalid[{len(b.row_valid) * len(b.row_valid[0])}] = "
            f"{{{flat(b.row_valid)}}};",
            f"static const unsigned char lo_wvalid[{len(b.col_valid) * len(b.col_valid[0])}] = "
            f"{{{flat(b.col_valid)}}};"]


def static_tables(schedule: Schedule, qp: QuantPlan) -> str:
    """File-scope C (before the kernel function)."""
    return "\n".join(["#include <stdint.h>"] + (_tables(schedule.op) if qp.integer else [])) + "\n"


def _tap_sum(indent: str, op: Op, rows_ok: str, cols_ok: str, term: str, it: str) -> list[str]:
    """``s += term`` over the taps (row tap, column tap, input channel) whose rows and columns
    are valid; ``it`` is the C type of the loop variables."""
    rows, cols = op.windows
    c = op.reduction_channel_dim
    loop = lambda dim, extent: f"for ({it} {dim} = 0; {dim} < {extent}; ++{dim})"
    return [f"{indent}int s = 0;",
            f"{indent}{loop(rows.tap_dim, rows.taps)} if ({rows_ok})",
            f"{indent}    {loop(cols.tap_dim, cols.taps)} if ({cols_ok})",
            f"{indent}        {loop(c, op.extent(c))} s += {term};"]


def batch_dim(op: Op) -> str:
    """The output dim that is neither the channel nor a window's output (conv ``n``, matmul ``i``)."""
    windowed = {w.out_dim for w in op.windows}
    dims = [e.name for e in op.index(op.output) if isinstance(e, Var)]
    return next(d for d in dims if d != op.channel_dim and d not in windowed)


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
    if qp.compensation == "kernel":
        lines.append("/* weight compensation T[row class][column class][k] = sum (w - zw[k]) "
                     "over valid taps */")
        lines += _omp(schedule)
        weight = ternary.reference(schedule, w, _storage_offset(schedule, w, op.index(w)))
        if op.windows:
            rows, cols = op.windows
            rc, cc = borders(op).shape
            lines += [f"for ({it} {k} = 0; {k} < {op.channels}; ++{k})",
                      f"    for ({it} rc = 0; rc < {rc}; ++rc)",
                      f"        for ({it} cc = 0; cc < {cc}; ++cc) {{"]
            lines += _tap_sum(" " * 12, op, f"lo_hvalid[rc * {rows.taps} + {rows.tap_dim}]",
                              f"lo_wvalid[cc * {cols.taps} + {cols.tap_dim}]", f"{weight} - lo_zw[{k}]",
                              it)
            lines += [f"            lo_comp[(rc * {cc} + cc) * {op.channels} + {k}] = s;", "        }"]
        else:
            lines += [f"for ({it} {k} = 0; {k} < {op.channels}; ++{k}) {{", "    int s = 0;",
                      f"    for ({it} {c} = 0; {c} < {op.extent(c)}; ++{c}) s += {weight} - lo_zw[{k}];",
                      f"    lo_comp[{k}] = s;", "}"]
    if qp.activation_sums:
        shift = f" + {qp.shift}" if qp.shift else ""
        lines.append("/* activation sums S over the valid taps of each output position "
                     "(asymmetric weights) */")
        lines += _omp(schedule)
        n = batch_dim(op)
        if op.windows:
            # windowed ops take activations [batch, channel, one axis per window]
            rows, cols = op.windows
            g = op.groups
            channel = Var("g") * op.extent(c) + Var(c)
            xoff = _storage_offset(schedule, a, (Var(n), channel, rows.input_index, cols.input_index))
            lines += [f"for ({it} {n} = 0; {n} < {op.extent(n)}; ++{n})",
                      f"    for ({it} g = 0; g < {g}; ++g)",
                      f"        for ({it} {rows.out_dim} = 0; {rows.out_dim} < {rows.out}; ++{rows.out_dim})",
                      f"            for ({it} {cols.out_dim} = 0; {cols.out_dim} < {cols.out}; "
                      f"++{cols.out_dim}) {{"]
            lines += _tap_sum(" " * 16, op, Bound(rows.input_index, 0, rows.size).to_c(),
                              Bound(cols.input_index, 0, cols.size).to_c(), f"{a}[{xoff}]{shift}", it)
            lines += [f"                lo_xsum[(({n} * {g} + g) * {rows.out} + {rows.out_dim}) * {cols.out} "
                      f"+ {cols.out_dim}] = s;", "            }"]
        else:
            xoff = _storage_offset(schedule, a, op.index(a))
            lines += [f"for ({it} {n} = 0; {n} < {op.extent(n)}; ++{n}) {{", "    int s = 0;",
                      f"    for ({it} {c} = 0; {c} < {op.extent(c)}; ++{c}) s += {a}[{xoff}]{shift};",
                      f"    lo_xsum[{n}] = s;", "}"]
    return lines


def _positions(op: Op) -> tuple[str, str, str]:
    """(channel variable, compensation table index, activation-sum index) over logical output names."""
    info = op.tensor(op.output)
    dims = [e.name if isinstance(e, Var) else None for e in op.index(op.output)]
    name = lambda dim: f"lo_{info.letters[dims.index(dim)].lower()}"
    channel, n = f"lo_{info.letters[op.output_channel_axis].lower()}", name(batch_dim(op))
    if not op.windows:
        return channel, channel, n
    rows, cols = op.windows
    h, w = name(rows.out_dim), name(cols.out_dim)
    rc, cc = borders(op).shape
    kg = op.channels // op.groups
    # the row of the table in ptrdiff_t: with -fwrapv an int index that wraps would not be provably
    # consecutive in the channel, and the compiler would emulate a gather in every vectorized epilogue
    return (channel, f"(ptrdiff_t)(lo_hclass[{h}] * {cc} + lo_wclass[{w}]) * {op.channels} + {channel}",
            f"(({n} * {op.groups} + {channel} / {kg}) * {rows.out} + {h}) * {cols.out} + {w}")


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
        name, size = f"lo_{letter.lower()}", layout.block(letter)
        if size == 1:
            loops.append(f"for ({it} {name} = 0; {name} < {extent[letter]}; ++{name})")
        elif block:
            loops.append(f"for ({it} {name}_i = 0; {name}_i < {size}; ++{name}_i)")
            defs += [f"const {it} {name} = {name}_o * {size} + {name}_i;",
                     f"if ({name} >= {extent[letter]}) continue;"]
        else:
            loops.append(f"for ({it} {name}_o = 0; {name}_o < {-(-extent[letter] // size)}; ++{name}_o)")
    names = [f"lo_{letter.lower()}" for letter in info.letters]
    return loops, defs, layout.offset(tuple(Var(n) for n in names), info.shape).to_c()


def _clamped(expr, size: int) -> str:
    """C of ``min(expr, size - 1)``."""
    return f"({expr.to_c()} < {size - 1} ? {expr.to_c()} : {size - 1})"


def epilogue_statements(schedule: Schedule, qp: QuantPlan, value: str, index=None,
                        target: str | None = None, narrow: bool = True,
                        clamp: frozenset[str] = frozenset()) -> list[str]:
    """C statements turning the int32 products ``value`` of one output element into its
    output value, stored to ``target`` (default: the element of ``Y``). With ``narrow=False``
    a requantized value is stored as an int (already in the output type's range) for the caller
    to narrow: a loop without byte types is vectorized at the full int32 width.

    The element is named by ``lo_<letter>`` variables of the output's logical dims; given
    ``index`` (expressions over the loops) they are defined here first. Index expressions over
    a variable of ``clamp`` are clamped to the output's shape: a dead lane past the output's
    last element computes (and its caller does not store) the last one's value, so it reads the
    per-channel and per-position tables in bounds.
    """
    op, spec = schedule.op, schedule.op.quant
    info = op.tensor(op.output)
    names = [f"lo_{letter.lower()}" for letter in info.letters]
    it = index_ctype(schedule)
    lines = [f"const {it} {n} = {_clamped(e, size) if e.variables() & clamp else e.to_c()};"
             for n, e, size in zip(names, index, info.shape, strict=True)] if index is not None else []
    offset = schedule.layout_of(op.output).offset(tuple(Var(n) for n in names), info.shape).to_c()
    target = target or f"Y[{offset}]"
    channel, comp, xsum = _positions(op)
    lines += [f"int lo_a = {value};", f"lo_a -= (lo_zx + {qp.shift}) * lo_comp[{comp}];"]
    if qp.activation_sums:
        lines.append(f"lo_a -= lo_zw[{channel}] * lo_xsum[{xsum}];")
    if not spec.dequantized and op.bias:
        lines.append(f"lo_a += {op.bias_tensor}[{channel}];")
    if not spec.scaled:
        return lines + [f"{target} = lo_a;"]
    if spec.requantized:
        return lines + [f"float lo_p = __builtin_rintf((float)lo_a * lo_mult[{channel}]);",
                        "lo_p = lo_p < lo_low ? lo_low : (lo_p > lo_high ? lo_high : lo_p);",
                        f"{target} = ({qp.output_type})((int)lo_p + lo_zy);" if narrow
                        else f"{target} = (int)lo_p + lo_zy;"]
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
             + ", in the output's storage order */", "{"] + ["    " + p for p in _omp(schedule)]
    for depth, loop in enumerate(loops):
        if depth == len(loops) - 1:
            lines.append("    " * (depth + 1) + SIMD_PRAGMA)
        lines.append("    " * (depth + 1) + loop + (" {" if depth == len(loops) - 1 else ""))
    lines += ["    " * (len(loops) + 1) + line for line in body]
    lines += ["    " * len(loops) + "}", "}"]
    return lines
