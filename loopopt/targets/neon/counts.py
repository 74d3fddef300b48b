"""The kernel model's counts (``targets/kernel_counts.py``) of NEON's kernel families that the table-driven
counter (``targets/x86/costs.py``) does not walk: smmla/usmmla (``mmla.py``), the TL1/TL2 table lookups
(``targets/lut.py`` printed by ``lut.py``) and binary XNOR + popcount (``targets/binary.py``).

Each is counted from the kernel's own shape, instruction by instruction as its C issues them: the
register block's setup and stores once per block, its body once per reduction step, the table builds,
the int16 sums' widening, and the epilogue pass over the outputs (an output vector as x86's counter
counts one). An update that is more than one instruction is one multiply-add of the model's arithmetic
(``model.UPDATE_INSTRUCTIONS``): ``dot`` for an mmla (one instruction; each of its 4 int32 lanes adds 8
products), ``lookup`` for the int16 add of 8 looked-up entries (each a group's 2 or 3 products),
``popcount`` for eor, cnt, three pairwise widening adds and the add into a uint64 lane (64 products).
Modelled, not measured: nothing here has been timed on an ARM core."""
from __future__ import annotations

import math

from ...schedule import Schedule
from ..binary import BinaryShape, block_of
from ..kernel_counts import KernelCounts, Site, Work
from ..lut import lut_nest, region_loops
from ..lut_format import COLUMNS
from . import binary, mmla
from .isa import LANES, NAME

EPILOGUE = Work(loads=4, stores=1, vector_ops=10)    # the quantized epilogue per output vector (as x86's)
MMLA_PRODUCTS = 8           # products per int32 lane of an smmla/usmmla
WORD_BITS = 64              # products per uint64 lane of a popcount update
INT16_LANES = 8


def own_counts(schedule: Schedule) -> KernelCounts | None:
    """The counts of ``schedule``'s kernel where it is one of the families above, else None."""
    op = schedule.op
    if op.quant is not None and op.quant.binary:
        return binary_counts(schedule)
    if mmla.is_mmla(schedule):
        return mmla_counts(schedule)
    if schedule.weight_format_mode in ("tl1", "tl2"):
        return lookup_counts(schedule)
    return None


def _epilogue(schedule: Schedule) -> Site:
    outputs = math.prod(schedule.op.tensor(schedule.op.output).shape)
    return Site("epilogue", -(-outputs // LANES), EPILOGUE, LANES)


def mmla_counts(schedule: Schedule) -> KernelCounts:
    """smmla/usmmla: per block ``P x Q`` accumulators zeroed, then per filter tap and step of 8 channels
    two 8-byte row loads, their vcombine and (a conv) the rows' padding checks per row pair, a weight
    load per column pair and ``P x Q`` mmla; the 4 int32 sums of each accumulator stored one by one in
    the block's bounds."""
    form = mmla.mmla_form(schedule)
    op = schedule.op
    p, q = form.row_pairs, form.column_pairs
    blocks = math.prod(extent for _, extent, _ in form.outer)
    taps = math.prod(op.extent(w.tap_dim) for w in op.windows)
    steps = taps * -(-op.extent(op.reduction_channel_dim) // mmla.DEPTH)
    padding = len(op.windows)
    body = Work(fma=p * q, loads=2 * p + q, vector_ops=p + (2 * p if padding else 0),
                definitions=2 * p + q, guard_checks=2 * p * padding, loop_iterations=1)
    setup = Work(vector_ops=p * q, loop_iterations=1)
    store = Work(stores=5 * p * q, definitions=4 * p * q, guard_checks=4 * p * q)
    sites = (Site("register block setup", blocks, setup, LANES),
             Site("register block body", blocks * steps, body, LANES, 1.0, steps),
             Site("register block store", blocks, store, LANES), _epilogue(schedule))
    return KernelCounts(schedule, NAME, "dot", LANES, sites, op.macs, p * q, lane_products=MMLA_PRODUCTS)


def lookup_counts(schedule: Schedule) -> KernelCounts:
    """TL1/TL2: the table builds (per byte of a pixel's channels, two groups of 16 int16 entries, 8 at a
    time: a multiply-add per weight of the group and a store per 8), then per step and block position
    the index bytes (two loads, masks and shifts; TL2 its sign masks), the table (two ``vld2q_u8``;
    loads shared by the block's positions issued once), per group and 16 columns two ``tbl`` and two zips
    and the int16 adds (TL2: a negation and a select each); every chunk of steps the 32 sums widened to
    int32 (a load, a widening, an add and a store per 4)."""
    nest = lut_nest(schedule)
    op, fmt = schedule.op, nest.shape.fmt
    extents = dict(nest.loops)
    positions = math.prod(extents[name] for name in nest.block)
    channel = nest.coefficients(op.channel_dim)
    column_blocks = math.prod(extents[name] for name in nest.block if channel[name])
    pixels = positions // column_blocks
    builds = math.prod(extent for _, extent in nest.loops[:nest.table_at])
    table_bytes = math.prod(extent for _, extent in nest.table_dims)
    build = Work(loads=2 * fmt.group, vector_ops=2 * 2 * fmt.group, stores=2 * 2, loop_iterations=1,
                 definitions=2)
    regions = math.prod(extent for _, extent in nest.loops[:nest.region])
    loops, fits, chunk = region_loops(nest, True)
    steps = math.prod(extent for _, extent in loops)
    run = min(chunk, math.prod(extent for _, extent in loops[fits:]))
    lookups = COLUMNS // 16 * 2           # per group: two 16-column halves; two groups a byte
    signs = 2 * 2 * (COLUMNS // INT16_LANES) if fmt.signed else 0     # a dup and a vtst per 8 columns
    step = Work(loads=column_blocks * (2 + (2 if fmt.signed else 0)) + pixels * 4,
                vector_ops=column_blocks * (4 + signs) + positions * lookups * (4 + (4 if fmt.signed else 0)),
                fma=positions * lookups * 2, definitions=column_blocks + pixels, loop_iterations=1)
    parts = COLUMNS // INT16_LANES
    widen = Work(loads=2 * parts, vector_ops=2 * 2 * parts + parts, stores=2 * parts)
    sites = (Site("table build", builds * table_bytes, build, INT16_LANES),
             Site("lookup step", regions * steps, step, INT16_LANES, 2.0, steps),
             Site("widen", regions * -(-steps // run) * positions, widen, LANES),
             Site("flush", regions * positions, Work(loads=COLUMNS, stores=COLUMNS), 1),
             _epilogue(schedule))
    return KernelCounts(schedule, NAME, "lookup", INT16_LANES, sites, op.macs, positions * parts,
                        lane_products=fmt.group)


def binary_counts(schedule: Schedule) -> KernelCounts:
    """XNOR + popcount: per block of ``r`` positions x ``v`` vectors of 2 channels and step (tap and word)
    the step's activation offset, a weight load per vector, an activation word broadcast per position and
    an update (eor, cnt, 3 widening adds, an add) per accumulator; tail blocks as the kernel runs them."""
    op = schedule.op
    shape = BinaryShape.of(op, lanes=binary.VARIANT.lanes)
    r, v = block_of(schedule, binary.VARIANT)
    vectors = shape.kpad // shape.lanes
    row_blocks, vector_blocks = -(-shape.positions // r), -(-vectors // v)
    images = shape.batch * shape.groups
    steps = shape.rows.taps * shape.cols.taps * shape.words
    blocks = images * row_blocks * vector_blocks
    per_block = 1 / (row_blocks * vector_blocks)    # a block's share of one image's rows and vectors
    body = Work(fma=shape.positions * vectors * per_block, loads=vectors * row_blocks * per_block,
                broadcasts=shape.positions * vector_blocks * per_block, definitions=1, loop_iterations=1)
    store = Work(stores=shape.positions * vectors * per_block)
    sites = (Site("register block body", blocks * steps, body, shape.lanes, 1.0, steps),
             Site("register block store", blocks, store, shape.lanes), _epilogue(schedule))
    return KernelCounts(schedule, NAME, "popcount", shape.lanes, sites, op.macs, r * v,
                        lane_products=WORD_BITS)
