"""NEON's search rules (``SearchRules``): register blocks of the output-stationary preset (an output
block of positions x vectors of output channels in the 32 vector registers over the whole reduction) and
of smmla/usmmla (quantized GEMMs and one-group convs), ranked first by a heuristic of the modelled core,
then by the search's kernel model (which counts both kernels). On an AArch64
machine ``lo.tune`` times them; under emulation it ranks them by the kernel model and verifies the
best-ranked under the emulator, timing nothing (``tune/ranked.py``)."""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ...dataflows import output_stationary, table_lookup
from ...ops import Op
from ...schedule import Schedule, ScheduleError
from ..binary import BinaryKnobs, register_blocks
from ..lut import MAX_ACCUMULATORS, lut_nest
from ..lut_format import COLUMNS, FORMATS
from ..search import Candidate, SearchRules
from . import binary, mmla
from .isa import LANES, NAME, REGISTERS
from .profile import CORE_COSTS, PROFILE

CHANNEL_VECTORS = 4            # channel blocks of 1..4 vectors of 4 lanes
MAX_PIXEL_BLOCK = 12           # output positions per register block at most
FMA_LATENCY = 4                # cycles of a dependent fmla (Neoverse V1, modelled)
MMLA = "mmla"                  # the knobs' kind of smmla/usmmla candidates (first priced by ``mmla_seconds``)
MMLA_ROWS = 8                  # rows per mmla register block at most
MMLA_COLUMN_PAIRS = 4          # column pairs per mmla register block at most
EPILOGUE_INSTRUCTIONS = 8      # instructions of the epilogue pass per output (modelled)
POPCOUNT_INSTRUCTIONS = 6      # a binary update: eor, cnt, 3 pairwise widening adds, the add
LOOKUP = "lookup"              # the knobs' kind of table-lookup candidates (tl1, tl2)
LOOKUP_INSTRUCTIONS = 3        # per int16 add of 8 entries: its share of the tbl and zip, the add
INT16_LANES = 8
WORD_BITS = 64


@dataclass(frozen=True)
class Knobs:
    """A register block of ``pixel_block`` output positions (Matmul: rows) x ``channel_block`` output
    channels, and the loop run on threads (None: one thread)."""

    pixel_block: int
    channel_block: int
    parallel: str | None = None

    def as_dict(self) -> dict:
        return {"pixel_block": self.pixel_block, "channel_block": self.channel_block,
                "parallel": self.parallel}

    def schedule(self, op: Op, isa: str) -> Schedule:
        schedule = output_stationary(op, k=self.channel_block, ow=self.pixel_block, j=self.channel_block,
                                     i=self.pixel_block)
        return schedule.parallel(self.parallel) if self.parallel else schedule


@dataclass(frozen=True)
class MmlaKnobs:
    """A register block of ``pixel_block`` rows x ``channel_block`` columns (even) on smmla/usmmla
    (``mmla.preset``), and the loop run on threads (None: one thread)."""

    pixel_block: int
    channel_block: int
    parallel: str | None = None

    def as_dict(self) -> dict:
        return {"kernel": MMLA, "pixel_block": self.pixel_block, "channel_block": self.channel_block,
                "parallel": self.parallel}

    def schedule(self, op: Op, isa: str) -> Schedule:
        schedule = mmla.preset(op, self.pixel_block, self.channel_block)
        return schedule.parallel(self.parallel) if self.parallel else schedule


@dataclass(frozen=True)
class LookupKnobs:
    """A ternary op's table-lookup candidate (``targets/lut.py``, ``dataflows.table_lookup``): its weight
    format and a register block of ``pixel_block`` output positions x ``channel_block`` output channels
    (column blocks of 32, or all of them), on one thread."""

    weight_format: str
    pixel_block: int
    channel_block: int

    def as_dict(self) -> dict:
        return {"kernel": LOOKUP, "weight_format": self.weight_format, "pixel_block": self.pixel_block,
                "channel_block": self.channel_block}

    def schedule(self, op: Op, isa: str) -> Schedule:
        return table_lookup(op, self.weight_format, self.pixel_block, self.channel_block)


def lookup_blocks(op: Op) -> list[LookupKnobs]:
    """The table-lookup blocks of a ternary op: in both formats, 1, 2 or 4 column blocks of 32 channels
    below the channel count or all of them, times 1 to ``MAX_PIXEL_BLOCK`` positions, as many
    accumulators (32 channels each) as the kernel holds; those whose schedule the kernel takes."""
    channel_blocks = [m * COLUMNS for m in (1, 2, 4) if m * COLUMNS < op.channels] + [op.channels]
    found = []
    for fmt, channels in itertools.product(FORMATS, channel_blocks):
        most = min(MAX_PIXEL_BLOCK, MAX_ACCUMULATORS // -(-channels // COLUMNS), op.extent(pixel_dim(op)))
        for pixels in range(1, most + 1):
            knobs = LookupKnobs(fmt, pixels, channels)
            try:
                lut_nest(knobs.schedule(op, NAME))
            except ScheduleError:
                continue
            found.append(knobs)
    return found


def parallel_loop(schedule: Schedule, threads: int) -> str | None:
    """The outermost loop of output positions or channels outside the register block with at least
    ``threads`` iterations (None: none has)."""
    outputs = schedule.offset(schedule.op.output).variables()
    for loop in schedule.loops:
        if loop.name not in outputs or loop.name == schedule.register_block_at:
            return None
        if loop.extent >= threads:
            return loop.name
    return None


def pixel_dim(op: Op) -> str:
    """The dim of ``output_stationary``'s block of positions: the output column (Matmul: the rows)."""
    if op.windows:
        return op.windows[-1].out_dim
    return [d for d in op.dim_names if d not in op.reduction_dims and d != op.channel_dim][-1]


def candidates(op: Op, threads: int = 1, isa: str = NAME) -> list[Candidate]:
    """Every register block of ``op`` on variant ``isa`` whose accumulators, a weight vector each and a
    broadcast fit the 32 registers, channel blocks of 1 to 4 vectors; with ``threads`` > 1 those with an
    outer loop to split.
    A binary op: the XNOR + popcount kernel's register blocks (``binary.register_blocks``), on one thread
    (ValueError for more)."""
    if op.quant is not None and op.quant.binary:
        if threads > 1:
            raise ValueError(f"neon's binary kernels (XNOR + popcount) run on one thread: tune {op!r} with "
                             f"threads=1")
        return [Candidate(op, isa, knobs) for knobs in register_blocks(
            op, binary.VARIANT.lanes, REGISTERS, MAX_PIXEL_BLOCK, CHANNEL_VECTORS)]
    channels = sorted({min(m * LANES, op.channels) for m in range(1, CHANNEL_VECTORS + 1)})
    blocks = []
    for channel_block in channels:
        vectors = -(-channel_block // LANES)
        limit = min(MAX_PIXEL_BLOCK, (REGISTERS - vectors - 1) // vectors, op.extent(pixel_dim(op)))
        blocks += [Knobs(pixel_block, channel_block) for pixel_block in range(1, limit + 1)]
    if mmla_applies(op):
        per_group, grouped = op.channels // mmla.groups(op), mmla.groups(op) > 1
        pairs = [c for c in range(1, -(-op.channels // 2) + 1) if not grouped or per_group % (2 * c) == 0]
        blocks += [MmlaKnobs(rows, 2 * columns) for columns in pairs[:MMLA_COLUMN_PAIRS]
                   for rows in range(2, min(MMLA_ROWS, op.extent(pixel_dim(op)) + 1) + 1, 2)
                   if rows // 2 * (columns + 1) + 1 <= REGISTERS]
    if op.quant is not None and op.quant.ternary and threads == 1:
        blocks += lookup_blocks(op)
    return [candidate for knobs in blocks if (candidate := _on_threads(op, knobs, threads, isa)) is not None]


def mmla_applies(op: Op) -> bool:
    """A quantized GEMM or convolution (grouped: an even number of output channels per group):
    smmla/usmmla apply (``mmla.py``)."""
    taps = {w.tap_dim for w in op.windows}
    return (op.quant is not None and op.reduction_dims == {op.reduction_channel_dim, *taps}
            and (mmla.groups(op) == 1 or op.channels // mmla.groups(op) % 2 == 0))


def _on_threads(op: Op, knobs, threads: int, isa: str) -> Candidate | None:
    """The candidate of ``knobs`` on ``isa``, with the outermost output loop of enough iterations on
    ``threads`` threads (None where it has none)."""
    if threads == 1:
        return Candidate(op, isa, knobs)
    try:
        loop = parallel_loop(knobs.schedule(op, isa), threads)
    except ScheduleError:
        return None
    return None if loop is None else Candidate(op, isa, replace(knobs, parallel=loop))


def mmla_seconds(candidate: Candidate) -> float:
    """A first guess of an mmla candidate's time on the modelled core (the kernel model, which counts
    the kernel, ``targets/neon/counts.py``, reorders them): per register block and step of 8 channels,
    its smmla/usmmla (taken at the dot's rate: ``fma_per_cycle``, not measured) or its loads (two 8-byte
    rows per row pair, a 16-byte weight block per column pair), whichever takes longer; the stores of
    the int32 sums and the epilogue pass (about 8 instructions an output) through the front end."""
    op, knobs = candidate.op, candidate.knobs
    rows_dim = pixel_dim(op)
    row_pairs, column_pairs = -(-knobs.pixel_block // 2), knobs.channel_block // 2
    reduction = math.prod(op.extent(d) for d in op.reduction_dims)
    outputs = op.flops // (2 * reduction)
    blocks = (outputs // (op.extent(rows_dim) * op.channels) * -(-op.extent(rows_dim) // knobs.pixel_block)
              * -(-op.channels // knobs.channel_block))
    channels = op.extent(op.reduction_channel_dim)
    steps = reduction // channels * -(-channels // mmla.DEPTH)        # per filter tap, 8 channels a step
    per_step = max(row_pairs * column_pairs / CORE_COSTS.fma_per_cycle,
                   (2 * row_pairs + column_pairs) / CORE_COSTS.loads_per_cycle)
    cycles = blocks * (steps * per_step + 4 * row_pairs * column_pairs / CORE_COSTS.stores_per_cycle)
    cycles += EPILOGUE_INSTRUCTIONS * outputs / CORE_COSTS.issue_per_cycle
    return cycles / (PROFILE.clock_ghz * 1e9)


def binary_seconds(candidate: Candidate) -> float:
    """A first guess of a binary candidate's time on the modelled core: its popcount updates (2 uint64
    lanes of 64 products, ``POPCOUNT_INSTRUCTIONS`` each) on the vector pipes, or its loads (a weight
    vector per vector, a broadcast per position, each step) on the load pipes, whichever takes longer,
    over the share of the channels the edge blocks use."""
    op, knobs = candidate.op, candidate.knobs
    r, v = knobs.pixel_block, knobs.channel_block // binary.VARIANT.lanes
    per_update = max(POPCOUNT_INSTRUCTIONS / CORE_COSTS.vector_per_cycle,
                     (r + v) / (r * v) / CORE_COSTS.loads_per_cycle)
    in_group = op.channels // op.groups
    used = in_group / (-(-in_group // knobs.channel_block) * knobs.channel_block)
    return op.macs / (binary.VARIANT.lanes * WORD_BITS) * per_update / used / (PROFILE.clock_ghz * 1e9)


def lookup_seconds(candidate: Candidate) -> float:
    """A first guess of a table-lookup candidate's time on the modelled core: its int16 adds of 8 table
    entries (each a group's products; ``LOOKUP_INSTRUCTIONS`` with the lookups and zips, TL2 two more)
    on the vector pipes, over the share of the column blocks' channels the op uses."""
    op, knobs = candidate.op, candidate.knobs
    fmt = FORMATS[knobs.weight_format]
    instructions = LOOKUP_INSTRUCTIONS + (2 if fmt.signed else 0)
    used = op.channels / (-(-op.channels // COLUMNS) * COLUMNS)
    adds = op.macs / (fmt.group * INT16_LANES)
    return adds * instructions / CORE_COSTS.vector_per_cycle / used / (PROFILE.clock_ghz * 1e9)


def heuristic_seconds(candidate: Candidate) -> float:
    """A first guess of ``candidate``'s time on the modelled core: the op's multiply-adds at the peak,
    slowed where the block has fewer independent accumulators than the multiply-add pipes times their
    latency, where its loads (a vector of weights per channel vector, a broadcast per position) outrun
    the load pipes, and by the lanes the edge blocks leave idle."""
    op, knobs = candidate.op, candidate.knobs
    vectors = -(-knobs.channel_block // LANES)
    accumulators = vectors * knobs.pixel_block
    in_flight = min(1.0, accumulators / (CORE_COSTS.fma_per_cycle * FMA_LATENCY))
    loads = min(1.0, accumulators / CORE_COSTS.fma_per_cycle
                / ((vectors + knobs.pixel_block) / CORE_COSTS.loads_per_cycle))
    used = op.channels / (-(-op.channels // knobs.channel_block) * vectors * LANES)
    dtype = "int8" if op.quant is not None else op.dtype
    return op.flops / (PROFILE.peak(dtype) * 1e9 * in_flight * loads * used)


class NeonSearch(SearchRules):
    """Register blocks of the output-stationary preset and smmla/usmmla blocks, searched on NEON."""

    def candidates(self, op: Op, isa: str, threads: int = 1, auto: bool = False) -> list[Candidate]:
        return candidates(op, threads, isa)

    def rank(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        """The candidates by ``heuristic_seconds`` (mmla blocks: ``mmla_seconds``; ties: smaller blocks
        first); the search's kernel model reorders them (``tune``)."""
        guesses = {MmlaKnobs: mmla_seconds, BinaryKnobs: binary_seconds, LookupKnobs: lookup_seconds}
        first = lambda c: guesses.get(type(c.knobs), heuristic_seconds)(c)
        priced = [Candidate(c.op, c.isa, c.knobs, (("predicted_seconds", first(c)),)) for c in candidates]
        return sorted(priced, key=lambda c: (c.figures["predicted_seconds"], c.knobs.pixel_block,
                                             c.knobs.channel_block))

    def lanes(self, op: Op, isa: str) -> int:
        return LANES

    def registers(self, isa: str) -> int:
        return REGISTERS

    def describe(self, knobs: dict) -> str:
        split = f", {knobs['parallel']} split over threads" if knobs.get("parallel") else ""
        kinds = {MMLA: "smmla/usmmla", "binary": "XNOR + popcount", LOOKUP: f"{knobs.get('weight_format')} "
                                                                             f"table lookup"}
        kind = kinds.get(knobs.get("kernel"), "output stationary")
        return f"{knobs['pixel_block']}x{knobs['channel_block']} register block ({kind}){split}"
