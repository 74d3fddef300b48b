"""NEON's search rules (``SearchRules``): register blocks of the output-stationary preset (an output
block of positions x vectors of output channels in the 32 vector registers over the whole reduction),
ranked first by a heuristic of the modelled core, then by the search's kernel model. On an AArch64
machine ``lo.tune`` times them; under emulation it ranks them by the kernel model and verifies the
best-ranked under the emulator, timing nothing (``tune/ranked.py``)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...dataflows import output_stationary
from ...ops import Op
from ...schedule import Schedule, ScheduleError
from ..search import Candidate, SearchRules
from .isa import LANES, REGISTERS
from .profile import CORE_COSTS, PROFILE

CHANNEL_VECTORS = 4            # channel blocks of 1..4 vectors of 4 lanes
MAX_PIXEL_BLOCK = 12           # output positions per register block at most
FMA_LATENCY = 4                # cycles of a dependent fmla (Neoverse V1, modelled)


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


def candidates(op: Op, threads: int = 1) -> list[Candidate]:
    """Every register block of ``op`` whose accumulators, a weight vector each and a broadcast fit the
    32 registers, channel blocks of 1 to 4 vectors; with ``threads`` > 1 those with an outer loop to split.
    ValueError for a binary op (its XNOR-popcount kernel is not searched on NEON yet)."""
    if op.quant is not None and op.quant.binary:
        raise ValueError(f"the neon search has no candidates for binary ops yet ({op!r}): compile "
                         f"lo.Schedule(op) with target='neon' (its default register block)")
    found = []
    channels = sorted({min(m * LANES, op.channels) for m in range(1, CHANNEL_VECTORS + 1)})
    for channel_block in channels:
        vectors = -(-channel_block // LANES)
        limit = min(MAX_PIXEL_BLOCK, (REGISTERS - vectors - 1) // vectors, op.extent(pixel_dim(op)))
        for pixel_block in range(1, limit + 1):
            knobs = Knobs(pixel_block, channel_block)
            if threads > 1:
                try:
                    loop = parallel_loop(knobs.schedule(op, "neon"), threads)
                except ScheduleError:
                    continue
                if loop is None:
                    continue
                knobs = Knobs(pixel_block, channel_block, loop)
            found.append(Candidate(op, "neon", knobs))
    return found


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
    """Register blocks of the output-stationary preset, searched on NEON."""

    def candidates(self, op: Op, isa: str, threads: int = 1, auto: bool = False) -> list[Candidate]:
        return candidates(op, threads)

    def rank(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        """The candidates by ``heuristic_seconds`` (ties: smaller blocks first); the search's kernel model
        reorders them (``tune``)."""
        priced = [Candidate(c.op, c.isa, c.knobs, (("predicted_seconds", heuristic_seconds(c)),))
                  for c in candidates]
        return sorted(priced, key=lambda c: (c.figures["predicted_seconds"], c.knobs.pixel_block,
                                             c.knobs.channel_block))

    def lanes(self, op: Op, isa: str) -> int:
        return LANES

    def registers(self, isa: str) -> int:
        return REGISTERS

    def describe(self, knobs: dict) -> str:
        split = f", {knobs['parallel']} split over threads" if knobs.get("parallel") else ""
        return f"{knobs['pixel_block']}x{knobs['channel_block']} register block (output stationary){split}"
