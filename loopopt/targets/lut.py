"""Ternary convolutions and GEMMs by table lookup, ``Schedule.weight_format("tl1" | "tl2")`` (T-MAC /
bitnet.cpp style), under the schedule's splits, order and register block: the nest, the tables'
workspace and the kernel class are shared by the targets; each prints the C of the table build and of
one lookup step through a ``Lookup`` (x86: ``targets/x86/lut_c.py``, NEON: ``targets/neon/lut.py``).

The reduction is grouped along the input channels of one filter tap: a group is ``fmt.group``
consecutive input channels of one input pixel (``targets/lut_format.py``), so a pixel's tables serve
every tap, output position and output channel that reads it, and the table build costs a pass over
the input, not over the output times the taps. (The fused ``(kh, kw, c)`` run of an im2col row
would group across taps and give each output position its own tables.) A GEMM is the case without
windows: its pixels are the rows of A, its input channels the reduction.

The kernel runs the schedule's nest in table-lookup units: the output channels in column blocks of
32 (a block holds channels of one group; ``split("k", f)`` needs ``f`` a multiple of 32 and covers
``f / 32`` blocks) and the input channels in bytes of indices (``2 * fmt.group`` channels;
``split("c", f)`` needs ``f`` a multiple of that); the other dims as they are. From the schedule:

* the loop order (``reorder``, ``tile``): every order is exact, as the sums go to the int32
  workspace ``O`` (zeroed first) with ``+=`` and the epilogue pass of ``codegen/quantized.py``
  applies compensation, bias and scales afterwards;
* where the tables are built: at the end of the outermost run of loops over the batch (GEMM rows),
  the output positions of each window and the input channels (``c``), for the input pixels and
  channel bytes one iteration of that run reads (an output row band reads its rows and the halo
  of the filter: the halo's tables are rebuilt per band; a pixel in the padding gets tables of
  zeros, so the steps need no padding guard). ``Schedule(conv)`` builds one image's tables at a
  time, ``tile(oh=4)`` with ``oh_o`` outermost after ``n`` a band of rows;
* the accumulators: the loops after the last loop over outputs (or, with ``register_block(at)``,
  from ``at`` inward: reduction loops first, then block loops over outputs, unrolled into one
  accumulator of 32 channels per block position, at most ``MAX_ACCUMULATORS``) sum in int16
  registers, widened to int32 before they may overflow (``fmt.chunk`` steps). Loads shared by
  block positions (a pixel's tables, a column block's indices) are issued once per step;
* the threads (``parallel``): a loop over outputs between the table build and the accumulation
  region (e.g. the column blocks ``j_o`` of a GEMV, ``k_o`` or a row loop of a conv) runs on OpenMP
  threads (``kernel.set_threads``): the tables are built before it, shared and only read in it,
  each thread adds its own outputs to the workspace, and the epilogue pass runs on the threads too.
  A parallel loop around the table build is refused (one tables workspace).

Steps that do not apply are refused with the reason: ``fuse``, ``vectorize`` (the kernel vectorizes
the 32 channels of a block itself), ``unroll`` (``register_block`` unrolls),
``arithmetic("dequantize")``, ``compensation("kernel")`` and a layout of the weights (they are
packed in the format's own order); layouts of the activations and the output apply.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np

from ..codegen import cprint, quantized
from ..codegen.emit import KERNEL_NAME, Generated, with_threads
from ..codegen.instr import Isa
from ..codegen.params import KernelParam, signature, storage_elements
from ..expr import Bound, Const, Expr, Var
from ..kernel import QuantizedKernel
from ..ops import Op
from ..quant import QuantParams
from ..schedule import Schedule, ScheduleError, Split
from .lut_format import COLUMNS, ENTRIES, FORMATS, LutFormat, LutShape, pack

LUT = "lo_lut"            # the kernel parameter holding the tables (allocated by prepare)
MAX_ACCUMULATORS = 16     # block positions of a register block (32 output channels each)
TABLE = 2 * ENTRIES       # int16 slots of one byte's two groups
NO_EPILOGUE = "its epilogue pass scales the int32 sums of the table lookups (ternary table-lookup kernels)"


class Lookup(ABC):
    """A target's C of the table-lookup kernel on one instruction set: the table build, its int16 sum
    variables per accumulator (32 output channels), the loads of a byte of indices (and sign words) and
    of a table, the step, and the widening to int32."""

    @property
    @abstractmethod
    def name(self) -> str:
        """The instruction-set variant, for the kernel's header and pseudo-code."""

    @property
    @abstractmethod
    def table_isa(self) -> Isa:
        """The integer table whose compile flags the kernel is built with."""

    @property
    @abstractmethod
    def includes(self) -> list[str]:
        """The ``#include`` lines of its intrinsics."""

    @property
    @abstractmethod
    def vector(self) -> bool:
        """Whether the sums are int16 vectors (widened every ``fmt.chunk`` steps) or int32 scalars."""

    @abstractmethod
    def constants(self, fmt: LutFormat) -> list[str]:
        """C constants of the table build (the classes' weights)."""

    @abstractmethod
    def entries(self, fmt: LutFormat, table: str, xs: list[str]) -> list[str]:
        """C storing the ``ENTRIES`` int16 table slots at pointer ``table`` of one group of activations
        ``xs`` (C ints): entry ``e`` the dot product with ``fmt.classes[e]``, 0 past the classes."""

    @abstractmethod
    def declare(self, acc: str) -> list[str]:
        """Zeroed sums of accumulator ``acc`` and its int32 totals."""

    @abstractmethod
    def indices(self, name: str, at: str, signs: str | None) -> list[str]:
        """Load the 32 index bytes at ``at`` (a uint8 pointer) as ``name``: the two groups' indices
        (and, signed, their sign masks from the uint32 words at ``signs``)."""

    @abstractmethod
    def table(self, name: str, at: str) -> list[str]:
        """Load the two groups' tables at int16 pointer ``at`` as ``name``."""

    @abstractmethod
    def step(self, acc: str, ind: str, tab: str, signed: bool) -> list[str]:
        """Add the entries of both groups of one byte, looked up in ``tab`` by ``ind``, to ``acc``."""

    @abstractmethod
    def widen(self, acc: str) -> list[str]:
        """Add the int16 sums of ``acc`` to its int32 totals and zero them (vector sums)."""

    @abstractmethod
    def totals(self, acc: str) -> str:
        """The int array of the 32 int32 totals of ``acc`` (after ``widen``)."""

    def prelude(self) -> list[str]:
        """Constants of the steps."""
        return []


def _where(schedule: Schedule) -> str:
    return f"weight_format({schedule.weight_format_mode!r})"


def _check_form(op: Op, where: str) -> None:
    """ScheduleError unless ``op`` is a convolution over its windows or a GEMM: one position dim
    besides the windows, no weight batch dims, weights indexed by plain dims."""
    positions = op.position_dims
    if len(positions) != 1 or quantized.weight_batch_dims(op):
        raise ScheduleError(f"{where}: the table-lookup kernel takes a convolution or a GEMM with one "
                            f"batch (row) dim; {op!r} has the position dims {', '.join(positions)}")
    wanted = {op.channel_dim, op.reduction_channel_dim} | {w.tap_dim for w in op.windows}
    axes = op.index(op.inputs[1])
    names = [e.name for e in axes if isinstance(e, Var)]
    if len(names) != len(axes) or set(names) != wanted or len(axes) != len(wanted):
        raise ScheduleError(f"{where}: the table-lookup kernel takes weights indexed by the output channel, "
                            f"the input channel and the taps; {op!r} indexes them by "
                            f"{', '.join(e.to_c() for e in axes)}")


def weights_in_order(op: Op, wq: np.ndarray) -> np.ndarray:
    """Logical weights as ``[output channel, *taps, input channel of its group]``."""
    names = [e.name for e in op.index(op.inputs[1])]
    order = [op.channel_dim, *(w.tap_dim for w in op.windows), op.reduction_channel_dim]
    return np.transpose(np.asarray(wq), [names.index(d) for d in order])


def lut_shape(op: Op, fmt: LutFormat) -> LutShape:
    """The packed extents of ``op`` in ``fmt``."""
    groups = op.groups
    return LutShape(fmt, groups, op.extent(op.reduction_channel_dim), op.channels // groups,
                    tuple(w.taps for w in op.windows))


def pack_lut(op: Op, wq: np.ndarray, fmt: LutFormat) -> np.ndarray:
    """The packed bytes of ternary weights in the op's logical layout."""
    return pack(lut_shape(op, fmt), weights_in_order(op, wq))


@dataclass(frozen=True)
class Range:
    """The values of an op dim one iteration of the table loops reads: from ``base`` (an expression
    of those loops) at most ``span`` values."""

    base: Expr
    span: int


@dataclass(frozen=True)
class LutNest:
    """A schedule in table-lookup units: the loops with their extents, each op dim's value over
    them, the partial blocks, where the tables are built and which loops accumulate."""

    schedule: Schedule
    shape: LutShape
    loops: tuple[tuple[str, int], ...]
    values: tuple[tuple[str, Expr], ...]       # op dim -> its value over the loops
    tails: tuple[tuple[str, Bound], ...]       # op dim -> the guard of a partial block
    table_at: int                              # loops outside the table build
    region: int                                # the first loop of the accumulation region
    block: tuple[str, ...]                     # block loops (innermost, unrolled)

    @property
    def op(self) -> Op:
        return self.schedule.op

    def value(self, dim: str) -> Expr:
        return dict(self.values)[dim]

    def coefficients(self, dim: str) -> dict[str, int]:
        """Each loop's coefficient in ``dim``'s value (the values are linear)."""
        zero = {name: 0 for name, _ in self.loops}
        base = self.value(dim).evaluate(zero)
        return {name: self.value(dim).evaluate(zero | {name: 1}) - base for name, _ in self.loops}

    def range(self, dim: str) -> Range:
        """The values of ``dim`` one iteration of the table loops reads."""
        outer = {name for name, _ in self.loops[:self.table_at]}
        inner = {name: Const(0) for name, _ in self.loops[self.table_at:]}
        coef = self.coefficients(dim)
        span = 1 + sum((extent - 1) * coef[name] for name, extent in self.loops if name not in outer)
        return Range(self.value(dim).substitute(inner), span)

    @property
    def table_dims(self) -> tuple[tuple[str, int], ...]:
        """The tables' axes (name, extent): batch, groups, the input positions of each window, bytes."""
        op = self.op
        axes = [("n", self.range(_batch(op)).span), ("g", op.groups)]
        for i, w in enumerate(op.windows):
            span = (self.range(w.out_dim).span - 1) * w.stride + (w.taps - 1) * w.dilation + 1
            axes.append((f"i{i}", span))
        return tuple(axes + [("q", self.range(op.reduction_channel_dim).span)])

    @property
    def table_entries(self) -> int:
        """int16 entries of the tables workspace."""
        return math.prod(extent for _, extent in self.table_dims) * TABLE

    def at_maximum(self) -> dict[str, Expr]:
        """Each op dim at the loops' largest values, a partial block's dead iterations included (the
        indices below grow with every loop)."""
        top = {name: extent - 1 for name, extent in self.loops}
        return {d: Const(self.value(d).evaluate(top)) for d in self.op.dim_names}

    @property
    def weights_read_ahead(self) -> int:
        """Bytes past the packed weights that a partial block's dead steps load (and do not add)."""
        shape = self.shape
        last = self.weight_flat(self.at_maximum()).evaluate({})
        ends = [(last + 1) * COLUMNS - shape.index_bytes]
        if shape.fmt.signed:
            ends.append(shape.index_bytes + (last + 1) * 8 - shape.packed_bytes)
        return max(0, *ends)

    @property
    def tables_read_ahead(self) -> int:
        """Bytes past the tables that a partial block's dead steps load (and do not add)."""
        top = {name: extent - 1 for name, extent in self.loops}
        bases = {f"lo_{k}": self.range(d).base.evaluate(top) for k, d in self.based_dims().items()}
        last = self.table_flat(self.at_maximum()).evaluate(bases)
        return max(0, 2 * ((last + 1) * TABLE - self.table_entries))

    def based_dims(self) -> dict[str, str]:
        """The C names of the tables' bases (``lo_nb``, ``lo_qb``, ``lo_b<window>``) and their dims."""
        op = self.op
        return {"nb": _batch(op), "qb": op.reduction_channel_dim,
                **{f"b{i}": w.out_dim for i, w in enumerate(op.windows)}}

    def weight_flat(self, values: dict[str, Expr]) -> Expr:
        """The flat (block, tap..., byte) index of the weights' indices at ``values`` of the dims."""
        op, shape = self.op, self.shape
        flat = values[op.channel_dim]
        for w, taps in zip(op.windows, shape.taps):
            flat = flat * taps + values[w.tap_dim]
        return flat * shape.bytes + values[op.reduction_channel_dim]

    def table_flat(self, values: dict[str, Expr]) -> Expr:
        """The flat (batch, group, input position..., byte) index of the tables at ``values`` of the
        dims, relative to the bases ``lo_nb``, ``lo_b<window>``, ``lo_qb``."""
        op = self.op
        cb = values[op.channel_dim]
        g = cb // self.shape.blocks_per_group if op.groups > 1 else Const(0)
        axes = [values[_batch(op)] - Var("lo_nb"), g]
        axes += [self.input_position(values, i) - Var(f"lo_b{i}") for i in range(len(op.windows))]
        return _flat(axes + [values[op.reduction_channel_dim] - Var("lo_qb")], self.table_dims)

    def input_position(self, values: dict[str, Expr], window: int) -> Expr:
        w = self.op.windows[window]
        return values[w.out_dim] * w.stride + values[w.tap_dim] * w.dilation - w.pad


def _batch(op: Op) -> str:
    return op.position_dims[0]


def _units(op: Op, shape: LutShape) -> dict[str, tuple[int, int, str]]:
    """Per op dim: (extent in table-lookup units, elements per unit, what a unit is)."""
    units = {d: (e, 1, "") for d, e in op.dims}
    units[op.channel_dim] = (shape.blocks, COLUMNS, "column blocks of 32 output channels")
    fmt = shape.fmt
    units[op.reduction_channel_dim] = (shape.bytes, fmt.channels_per_byte,
                                       f"bytes of indices ({fmt.channels_per_byte} input channels)")
    return units


def check_lut(schedule: Schedule) -> None:
    """ScheduleError with the reason unless the table-lookup kernel takes ``schedule`` (the same on
    every target)."""
    op, where = schedule.op, _where(schedule)
    _check_form(op, where)
    refusals = [
        (schedule.arithmetic_mode != "integer", "arithmetic('dequantize'): the kernel sums table entries "
         "in integers"),
        (schedule.compensation_mode != "packed", "compensation('kernel'): the kernel reads only the packed "
         "indices, so the weight compensation is computed when they are packed"),
        (any(not isinstance(r, Split) for r in schedule.relations), "fuse: the nest steps output channels "
         "in column blocks and input channels in bytes of indices; use split, tile and reorder"),
        (schedule.vector_loop is not None, "vectorize: the kernel vectorizes the 32 output channels of a "
         "column block itself"),
        (any(loop.unroll for loop in schedule.loops), "unroll: register_block unrolls the block loops"),
        (dict(schedule.layouts)[op.inputs[1]] != op.tensor(op.inputs[1]).default_layout,
         f"layout({op.inputs[1]!r}, ...): the weights are packed in the format's own order"),
    ]
    for refused, why in refusals:
        if refused:
            raise ScheduleError(f"{where}: {why.split(':')[0]} does not apply to the table-lookup kernel "
                                f"({why.split(': ', 1)[1]})")
    nest = lut_nest(schedule)
    parallel = schedule.parallel_loop
    if parallel is not None and schedule.position(parallel.name) < nest.table_at:
        inside = [name for name, _ in nest.loops[nest.table_at:nest.region]]
        raise ScheduleError(f"{where}: parallel({parallel.name!r}): the tables are built inside that loop, "
                            f"in one workspace the threads would share; parallelize a loop between the table "
                            f"build and the accumulation region: {', '.join(inside) or 'none in this order'}")


@lru_cache(maxsize=256)
def lut_nest(schedule: Schedule) -> LutNest:
    """The table-lookup nest of ``schedule`` (ScheduleError for a split that cuts a unit, or a register
    block of too many accumulators)."""
    op, where = schedule.op, _where(schedule)
    shape = lut_shape(op, FORMATS[schedule.weight_format_mode])
    units = _units(op, shape)
    extent = {d: e for d, (e, _, _) in units.items()}
    unit = {d: u for d, (_, u, _) in units.items()}
    root = {d: d for d in op.dim_names}
    splits: dict[str, tuple[str, str, int]] = {}
    tails = []
    for rel in schedule.relations:
        u = unit[rel.parent]
        if rel.factor % u:
            raise ScheduleError(f"{where}: split({rel.parent!r}, {rel.factor}): the kernel steps "
                                f"{root[rel.parent]} in {units[root[rel.parent]][2]}, so the factor must be "
                                f"a multiple of {u}")
        factor = min(rel.factor // u, extent[rel.parent])
        extent[rel.outer], extent[rel.inner] = -(-extent[rel.parent] // factor), factor
        unit[rel.outer], unit[rel.inner] = 1, u
        root[rel.outer] = root[rel.inner] = root[rel.parent]
        splits[rel.parent] = (rel.outer, rel.inner, factor)
        if extent[rel.parent] % factor:
            tails.append(rel.parent)

    def value(name: str) -> Expr:
        if name not in splits:
            return Var(name)
        outer, inner, factor = splits[name]
        return value(outer) * factor + value(inner)

    loops = tuple((name, extent[name]) for name in schedule.loop_names)
    outputs = {e.name for e in op.index(op.output) if isinstance(e, Var)}
    is_output = [root[name] in outputs for name in schedule.loop_names]
    if schedule.register_block_at is not None:
        region = schedule.position(schedule.register_block_at)
    else:
        region = max((i + 1 for i, out in enumerate(is_output) if out), default=0)
    block = tuple(name for name, out in zip(schedule.loop_names[region:], is_output[region:]) if out)
    count = math.prod(extent[name] for name in block)
    if count > MAX_ACCUMULATORS:
        sizes = " x ".join(f"{n}[{extent[n]}]" for n in block)
        raise ScheduleError(f"{where}: the register block holds {count} accumulators of 32 output channels "
                            f"({sizes} in table-lookup units); at most {MAX_ACCUMULATORS}")
    tabled = {_batch(op), op.reduction_channel_dim} | {w.out_dim for w in op.windows}
    table_at = next((i for i, name in enumerate(schedule.loop_names) if root[name] not in tabled),
                    len(loops))
    return LutNest(schedule, shape, loops, tuple((d, value(d)) for d in op.dim_names),
                   tuple((root[p], Bound(value(p), 0, extent[p])) for p in tails),
                   min(table_at, region), region, block)


# --- C ----------------------------------------------------------------------------------------------

def _loop(name: str, extent: int) -> str:
    return cprint.for_loop("int", name, extent)


def _table_build(nest: LutNest, lookup: Lookup) -> list[str]:
    """C building the tables of the pixels and channel bytes one iteration of the table loops reads."""
    op, shape, fmt = nest.op, nest.shape, nest.shape.fmt
    dims = nest.table_dims
    lines = [f"/* tables: {' x '.join(f'{a}[{e}]' for a, e in dims)} groups of activations, "
             f"{ENTRIES} int16 entries each */"]
    bases = {name: nest.range(dim).base for name, dim in nest.based_dims().items()}
    bases = {name: base * w.stride - w.pad if name.startswith("b") else base
             for (name, base), w in zip(bases.items(), (None, None, *op.windows))}
    lines += [f"const int {', '.join(f'lo_{name} = {base.to_c()}' for name, base in bases.items())};"]
    pixel = [Var(f"lo_i{i}") for i in range(len(op.windows))]
    layout, info = nest.schedule.layout_of(op.inputs[0]), op.tensor(op.inputs[0])
    xs = [f"lo_x{j}" for j in range(fmt.group)]
    reads = []
    for j, x in enumerate(xs):
        channel = Var("lo_p") * fmt.group + j
        offset = layout.offset(_activation_index(op, Var("lo_n"), Var("lo_tg"), channel, pixel), info.shape)
        value = f"(int){op.inputs[0]}[{offset.to_c()}]"
        reads.append(f"const int {x} = lo_inside && {channel.to_c()} < {shape.cg} ? {value} : 0;")
    slots = [Var("lo_tn"), Var("lo_tg"), *(Var(f"lo_t{i}") for i in range(len(op.windows))), Var("lo_tq")]
    slot = _flat(slots, dims)
    body = cprint.nest([_loop("lo_h", 2)], [
        "const int lo_p = 2 * lo_q + lo_h;   /* the group of input channels */", *reads,
        *lookup.entries(fmt, f"{LUT} + ({slot.to_c()}) * {TABLE} + lo_h * {ENTRIES}", xs)])
    body = cprint.nest([_loop("lo_tq", dims[-1][1])],
                   ["const int lo_q = lo_qb + lo_tq;", f"if (lo_q >= {shape.bytes}) continue;", *body])
    # a pixel in the padding gets tables of zeros, so the steps need no padding guard
    inside = " && ".join(f"0 <= lo_i{i} && lo_i{i} < {w.size}" for i, w in enumerate(op.windows)) or "1"
    body = [f"const int lo_inside = {inside};", *body]
    for i in reversed(range(len(op.windows))):
        position = f"const int lo_i{i} = lo_b{i} + lo_t{i};"
        body = cprint.nest([_loop(f"lo_t{i}", dims[2 + i][1])], [position, *body])
    body = cprint.nest([_loop("lo_tn", dims[0][1]), _loop("lo_tg", op.groups)], body)
    return lines + body[:1] + cprint.indented(["const int lo_n = lo_nb + lo_tn;",
                                               f"if (lo_n >= {op.extent(_batch(op))}) continue;"]) + body[1:]


def _flat(values: list[Expr], dims) -> Expr:
    flat = values[0]
    for value, (_, extent) in zip(values[1:], dims[1:]):
        flat = flat * extent + value
    return flat


def _activation_index(op: Op, n: Expr, g: Expr, channel: Expr, pixel: list[Expr]) -> tuple[Expr, ...]:
    """The logical index of the activations at batch ``n``, input channel ``channel`` of group ``g``
    and the input position ``pixel`` of each window."""
    kg = op.channels // op.groups
    bindings = {_batch(op): n, op.reduction_channel_dim: channel, op.channel_dim: g * kg}
    index = []
    for e in op.index(op.inputs[0]):
        window = next((i for i, w in enumerate(op.windows) if e == w.input_index), None)
        index.append(pixel[window] if window is not None else e.substitute(bindings))
    return tuple(index)


@dataclass(frozen=True)
class Position:
    """One block position of the step: its accumulator and the C of what it reads."""

    acc: str
    indices: str
    signs: str | None
    table: str
    valid: str          # C condition of a step that adds (not a dead iteration of a partial block)
    stored: str         # C condition of an output that exists (partial blocks of outputs)
    output: Expr        # the output's storage offset at column ``lo_c`` of the block
    columns: Expr       # channels of the block's group before column 0 (``kb * 32``)


def _positions(nest: LutNest) -> list[Position]:
    """The block positions (one without a register block), block loops replaced by their values."""
    op, shape = nest.op, nest.shape
    extents = dict(nest.loops)
    outputs = {e.name for e in op.index(op.output) if isinstance(e, Var)}
    layout, info = nest.schedule.layout_of(op.output), op.tensor(op.output)
    positions = []
    for number, combo in enumerate(np.ndindex(*(extents[name] for name in nest.block))):
        fixed = {name: Const(int(v)) for name, v in zip(nest.block, combo)}
        val = {d: nest.value(d).substitute(fixed) for d in op.dim_names}
        cb = val[op.channel_dim]
        per_group = shape.blocks_per_group
        g, kb = (cb // per_group, cb % per_group) if op.groups > 1 else (Const(0), cb)
        flat = nest.weight_flat(val)
        words = f"(const uint32_t *)(const void *)({op.inputs[1]} + {shape.index_bytes})"
        signs = f"{words} + {(flat * 2).to_c()}" if shape.fmt.signed else None
        bounds = [(dim, Bound(b.expr.substitute(fixed), b.lower, b.upper)) for dim, b in nest.tails]
        channel = g * shape.kg + kb * COLUMNS + Var("lo_c")
        bindings = {_batch(op): val[_batch(op)], op.channel_dim: channel,
                    **{w.out_dim: val[w.out_dim] for w in op.windows}}
        offset = layout.offset(tuple(e.substitute(bindings) for e in op.index(op.output)), info.shape)
        positions.append(Position(
            f"lo_a{number}", f"{op.inputs[1]} + ({flat.to_c()}) * {COLUMNS}", signs,
            f"{LUT} + ({nest.table_flat(val).to_c()}) * {TABLE}",
            _all([b for _, b in bounds]), _all([b for dim, b in bounds if dim in outputs]),
            offset, kb * COLUMNS))
    return positions


def _all(bounds: list[Bound]) -> str:
    """C of the conjunction of ``bounds`` ("1" for none)."""
    return " && ".join(f"({b.to_c()})" for b in bounds) or "1"


def _step(positions: list[Position], lookup: Lookup, signed: bool) -> list[str]:
    """C of one step of every block position: each shared load once, right before the first position
    that uses it (short live ranges), then each guarded addition."""
    indices = list(dict.fromkeys((p.indices, p.signs) for p in positions))
    tables = list(dict.fromkeys(p.table for p in positions))
    lines: list[str] = []
    loaded: set[str] = set()
    for p in positions:
        ind, tab = f"lo_ix{indices.index((p.indices, p.signs))}", f"lo_tb{tables.index(p.table)}"
        if ind not in loaded:
            lines += lookup.indices(ind, p.indices, p.signs)
        if tab not in loaded:
            lines += lookup.table(tab, p.table)
        loaded |= {ind, tab}
        step = lookup.step(p.acc, ind, tab, signed)
        lines += step if p.valid == "1" else cprint.block(f"if ({p.valid})", step)
    return lines


def _flush(positions: list[Position], lookup: Lookup, op: Op, kg: int) -> list[str]:
    """C adding each block position's int32 sums to the workspace ``O``."""
    lines = []
    for p in positions:
        body = [*lookup.widen(p.acc),
                f"for (int lo_c = 0; lo_c < {COLUMNS} && {p.columns.to_c()} + lo_c < {kg}; ++lo_c) "
                f"{op.output}[{p.output.to_c()}] += {lookup.totals(p.acc)}[lo_c];"]
        lines += cprint.block("" if p.stored == "1" else f"if ({p.stored})", body)
    return lines


def region_loops(nest: LutNest, vector: bool) -> tuple[list[tuple[str, int]], int, float]:
    """The accumulation region's loops (the block loops left out: unrolled into accumulators), the first
    of the shortest run of inner loops whose steps all fit in int16 sums (widened after each of its runs;
    when it is the innermost loop alone, that loop runs in chunks) and the steps per chunk."""
    loops = [(n, e) for n, e in nest.loops[nest.region:] if n not in nest.block]
    chunk = nest.shape.fmt.chunk if vector else math.inf
    fits = next(i for i in range(len(loops) + 1) if math.prod(e for _, e in loops[i:]) <= chunk)
    return loops, fits, chunk


def _region(nest: LutNest, lookup: Lookup, positions: list[Position]) -> list[str]:
    """C of the accumulation region: zeroed accumulators, its reduction loops around the steps (int16
    sums widened every ``fmt.chunk`` steps at most), the flush."""
    fmt = nest.shape.fmt
    loops, fits, chunk = region_loops(nest, lookup.vector)
    widen = [line for p in positions for line in lookup.widen(p.acc)]
    body = _step(positions, lookup, fmt.signed)
    for i in reversed(range(len(loops))):
        name, extent = loops[i]
        if i == len(loops) - 1 and fits == len(loops):
            within = f"{name}_c + {chunk} && {name} < {extent}"        # the chunk, the loop's end
            inner = cprint.nest([cprint.for_loop("int", name, within, begin=f"{name}_c")], body)
            body = cprint.nest([cprint.for_loop("int", f"{name}_c", extent, step=chunk)], inner + widen)
        else:
            body = cprint.nest([_loop(name, extent)], body + (widen if i == fits - 1 else []))
    declarations = [line for p in positions for line in lookup.declare(p.acc)]
    return cprint.block("", declarations + body + _flush(positions, lookup, nest.op, nest.shape.kg))


def _describe(nest: LutNest) -> str:
    loops = ", ".join(f"{n}[{e}]" for n, e in nest.loops)
    table = ", ".join(n for n, _ in nest.loops[:nest.table_at]) or "the whole input, before the nest"
    region = ", ".join(n for n, _ in nest.loops[nest.region:]) or "none (one step per output)"
    parallel = nest.schedule.parallel_loop
    return (f" * nest (table-lookup units: column blocks, index bytes): {loops}\n"
            f" * tables built inside: {table}; accumulated in registers over: {region}"
            f"{'; block: ' + ', '.join(nest.block) if nest.block else ''}"
            f"{f'; on OpenMP threads: {parallel.name}' if parallel else ''}")


def pseudocode(schedule: Schedule, lookup: Lookup) -> list[str]:
    """The kernel's nest on ``lookup``'s instruction set as pseudo-code lines (what
    ``Schedule.pseudocode`` prints for a table-lookup schedule): the loops of ``generate_lut``'s nest in
    table-lookup units, where the tables are built, the accumulation region with its int16 chunks, the
    flush and the epilogue pass."""
    check_lut(schedule)
    nest = lut_nest(schedule)
    op, fmt, parallel = nest.op, nest.shape.fmt, schedule.parallel_loop
    sign = " and a sign bit" if fmt.signed else ""
    lines = [f"# table-lookup kernel (targets/lut.py) on {lookup.name}: ternary weights in {fmt.name} "
             f"(a 4-bit index per {fmt.group} weights{sign}), {COLUMNS} output channels per column block, "
             f"{2 * fmt.group} input channels per index byte; sums added to the int32 workspace {op.output}"]
    depth = 0

    def line(text: str) -> None:
        lines.append("  " * depth + text)

    def loop(name: str, extent: int, note: str = "") -> None:
        nonlocal depth
        threads = "on OpenMP threads" if parallel is not None and name == parallel.name else ""
        notes = ", ".join(n for n in (threads, note) if n)
        line(f"for {name} in 0..{extent}:" + (f"    # {notes}" if notes else ""))
        depth += 1

    for name, extent in nest.loops[:nest.table_at]:
        loop(name, extent)
    line(f"# build the tables ({LUT}) of the input pixels and channel bytes "
         + ("this iteration reads" if nest.table_at else "of the whole input"))
    for name, extent in nest.loops[nest.table_at:nest.region]:
        loop(name, extent)
    block = [f"{n}[{e}]" for n, e in nest.loops[nest.region:] if n in nest.block]
    accumulators = math.prod(e for n, e in nest.loops if n in nest.block)
    line(f"# {accumulators} accumulator(s) of {COLUMNS} int16 sums in registers"
         + (f" (block {', '.join(block)}, unrolled)" if block else ""))
    loops, fits, chunk = region_loops(nest, lookup.vector)
    for i, (name, extent) in enumerate(loops):
        if i == len(loops) - 1 and fits == len(loops):
            line(f"for {name}_c in 0..{extent} step {chunk}:    # int16 sums widened after each chunk")
            depth += 1
            line(f"for {name} in {name}_c..min({name}_c + {chunk}, {extent}):")
            depth += 1
        else:
            loop(name, extent, "int16 sums widened to int32 after each iteration" if i == fits - 1 else "")
    line(f"S += lookup(table[{op.inputs[0]} pixel, index byte], {op.inputs[1]} indices)    # one step per "
         f"accumulator")
    depth = nest.region                          # after the region's loops
    line(f"{op.output}[...] += S    # the accumulators' int32 totals, flushed to the workspace")
    return lines + [f"# epilogue pass over {op.output}: compensation, bias, scales (codegen/quantized.py)"]


def generate_lut(schedule: Schedule, lookup: Lookup) -> Generated:
    """The C kernel of a ternary conv or GEMM in the schedule's table-lookup format, printed by
    ``lookup`` (``check_lut`` first)."""
    check_lut(schedule)
    nest = lut_nest(schedule)
    op, fmt = schedule.op, nest.shape.fmt
    qp = replace(quantized.plan(schedule, 1), fused_epilogue=False)
    a, w = op.inputs
    params = (KernelParam(a, qp.activation_type, const=True), KernelParam(w, "uint8_t", const=True),
              *((KernelParam(op.bias_tensor, qp.bias_type, const=True),) if op.bias else ()),
              KernelParam(op.output, "int32_t"), *quantized.parameters(qp), KernelParam(LUT, "int16_t"))
    positions = _positions(nest)
    nest_lines = _region(nest, lookup, positions)
    parallel = schedule.parallel_loop
    inner = [f"{quantized.PARALLEL_FOR}\n" * (parallel is not None and n == parallel.name) + _loop(n, e)
             for n, e in nest.loops[nest.table_at:nest.region]]
    nest_lines = _table_build(nest, lookup) + cprint.nest(inner, nest_lines)
    body = [*quantized.constants(schedule, qp), *lookup.constants(fmt), *lookup.prelude(),
            f"memset({op.output}, 0, sizeof(int32_t) * {storage_elements(schedule, op.output)});",
            *cprint.nest([_loop(n, e) for n, e in nest.loops[:nest.table_at]], nest_lines),
            *quantized.epilogue(schedule, qp)]
    header = (f"/* loopopt table-lookup kernel (codegen/lut.py) for {op!r}\n"
              f" * isa: {lookup.name}; weights: ternary, {fmt.name} (a 4-bit index per {fmt.group} weights"
              f"{' and a sign bit' if fmt.signed else ''}, 32 output channels per column block)\n"
              f"{_describe(nest)} */")
    openmp = parallel is not None
    prelude = ["#include <stddef.h>", "#include <string.h>", quantized.static_tables(schedule, qp)]
    prelude += lookup.includes
    prelude += ["#include <omp.h>"] if openmp else []
    source = "\n".join([header, *prelude, "", f"{signature(KERNEL_NAME, params)}\n{{",
                        *cprint.indented(body), "}", ""])
    source, cdef = with_threads(source, signature(KERNEL_NAME, params, restrict=False) + ";", openmp)
    ahead = {w: nest.weights_read_ahead, LUT: nest.tables_read_ahead}
    isa = lookup.table_isa
    return Generated(source, cdef, op.call_tensors + (op.output,), params, isa, {}, openmp, plan=qp,
                     read_ahead=ahead, compile_flags=isa.compile_flags)


class LutKernel(QuantizedKernel):
    """A ternary conv or GEMM with ``weight_format("tl1" | "tl2")`` (``generate_lut``): ``prepare``
    packs the weights to 4-bit group indices (and sign bits) and allocates the tables workspace; the
    call, parameters and outputs are the int8 kernels'."""

    @property
    def format(self):
        """The table-lookup format (``lut_format.FORMATS``)."""
        return FORMATS[self.schedule.weight_format_mode]

    def _elements(self, name: str) -> int:
        if name == self.op.inputs[1]:
            return lut_nest(self.schedule).shape.packed_bytes
        if name == LUT:
            return lut_nest(self.schedule).table_entries
        return super()._elements(name)

    def _parameter_values(self, qp: QuantParams, wq: np.ndarray, out_shape) -> dict[str, Any]:
        values = super()._parameter_values(qp, wq, out_shape)
        return values | {LUT: self._zeros(LUT, (self._elements(LUT),), np.int16)}

    def _pack(self, tensor: str, array: np.ndarray, into: np.ndarray | None = None) -> np.ndarray:
        if tensor == self.op.inputs[1]:
            return self._copy(tensor, pack_lut(self.op, array, self.format))
        return super()._pack(tensor, array, into)
