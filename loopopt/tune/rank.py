"""Ranking of candidates: which to measure first.

A ranker is any function ``(candidates) -> candidates`` that returns them best first, each
with the figures it ranked by in ``Candidate.model`` (recorded with the trial in the log), its
``predicted_seconds`` among them. ``lo.tune(..., rank=...)`` takes one; ``rank`` below is the
built-in heuristic, cheap enough for every candidate: it picks the shortlist that the kernel
model then orders (``guide.py``).

The heuristic predicts a time from the op's work and this machine's peak, scaled by the
efficiencies of the register block that a CPU core's FMA pipeline cares about: accumulators
enough to hide the multiply-add latency, few loads per multiply-add, vector lanes and edge
blocks used fully, no loop step per reduction step (an unrolled loop), dot groups filled
(quantized ops without a dot instruction widen bytes to int32 lanes, a quarter of the dot
rate; a tap dot fills its groups with taps, and shuffles its activations), long reductions per
stored block, and the weights that the innermost outer loop reuses in cache. A table-lookup
candidate of a ternary op (``tl1``, ``tl2``) gets ``LUT_SHARE`` of the int8 dot peak, scaled by its
register block's accumulators (``CHAINS`` hide the latency), its loads per lookup (a pixel's tables,
a column block's indices) and the lanes its edge blocks use.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache

from ..codegen.lut_format import COLUMNS
from ..codegen.tiles import tile_plan
from ..machine import machine_profile
from .space import DOT, Candidate, Roles, dot_elements, lanes, lut_columns, tap_window

Ranker = Callable[[Sequence[Candidate]], list[Candidate]]

CHAINS = 16                # accumulators that hide the FMA latency (4 cycles x 2 ports) and the loads between
WIDENED = 0.25             # rate of a quantized kernel without a dot instruction, relative to the dot peak
STORE, RELOAD = 4, 12       # reduction steps one block's final store (a partial sum's reload and store) costs
L1_FIT, L2_FIT, NO_FIT = 1.0, 0.9, 0.7   # efficiency when the reused weights fit L1, half of L2, neither
LUT_SHARE = 0.4            # a table-lookup block's rate relative to the int8 dot peak: tl1/tl2 conv2_x ran at
                           # about 0.4 of int8's time (docs/benchmarks.md, 1.16/1.03 ms vs 0.44 ms)
TAP_SPREAD = 2             # shuffles per window of a tap dot's activations, at the rate of the dots


@lru_cache(maxsize=1)
def _caches() -> tuple[int, int]:
    """This machine's L1 and L2 data cache sizes in bytes (typical sizes if not reported)."""
    sizes = {c.name: c.size for c in machine_profile().caches}
    return sizes.get("L1", 32 << 10), sizes.get("L2", 1 << 20)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def tile_efficiency(candidate: Candidate) -> float:
    """An AMX candidate's share of the tile peak: the tile rows, columns and K bytes its blocks use
    (the shifted last blocks recompute), fewer tiles loaded per dot with 2 x 2 blocks."""
    plan = tile_plan(candidate.schedule)
    s = plan.shape
    pixels = s.pixels / (_ceil(s.pixels, plan.block_pixels) * plan.block_pixels)
    channels = s.kg / (_ceil(s.channel_tiles, plan.col_tiles) * plan.scratch_columns)
    depth = s.cg / (len(s.starts) * s.values)
    loads = plan.row_tiles * plan.col_tiles / (plan.row_tiles + plan.col_tiles)   # dots per tile load, <= 1
    return pixels * channels * depth * loads


def _edges(extent: int, block: int) -> float:
    """The share of a dim's blocks that its last, partial block leaves used."""
    return extent / (_ceil(extent, block) * block)


def lut_efficiency(candidate: Candidate) -> float:
    """A table-lookup candidate's share of the int8 dot peak."""
    op, knobs = candidate.op, candidate.knobs
    columns = lut_columns(op, knobs.channel_block)
    accumulators = knobs.pixel_block * columns
    efficiency = LUT_SHARE * min(1.0, accumulators / CHAINS)
    efficiency *= accumulators / (accumulators + knobs.pixel_block + columns)       # loads per lookup
    efficiency *= _edges(op.channels, knobs.channel_block) * knobs.channel_block / (columns * COLUMNS)
    return efficiency * _edges(op.extent(Roles.of(op).pixel), knobs.pixel_block)


def figures(candidate: Candidate) -> dict[str, float]:
    """The heuristic's figures of one candidate: ``efficiency`` (0..1) and ``predicted_seconds``
    (on one core: the candidates of one search share their thread count)."""
    op, knobs = candidate.op, candidate.knobs
    if candidate.isa == "amx":
        efficiency = tile_efficiency(candidate)
        peak = machine_profile().peak("amx", "int8" if op.quant is not None else op.dtype) * 1e9
        return {"efficiency": efficiency, "predicted_seconds": op.flops / (peak * efficiency)}
    if candidate.table_lookup:
        efficiency = lut_efficiency(candidate)
        peak = machine_profile().peak(candidate.isa, "int8") * 1e9
        return {"efficiency": efficiency, "predicted_seconds": op.flops / (peak * efficiency)}
    roles = Roles.of(op)
    vector = lanes(op, candidate.isa)
    taps = knobs.weights == "taps"         # lanes along the pixels (codegen/taps.py), else the channels
    laned, other = ((knobs.pixel_block, knobs.channel_block) if taps
                    else (knobs.channel_block, knobs.pixel_block))
    vectors = _ceil(laned, vector)
    accumulators = other * vectors
    pixels = op.extent(roles.pixel)
    efficiency = min(1.0, accumulators / CHAINS)
    efficiency *= accumulators / max(accumulators, other + vectors)                 # loads per multiply-add
    if not knobs.unroll:
        efficiency *= accumulators / (accumulators + 1)       # a loop step per reduction step
    efficiency *= laned / (vectors * vector)                                         # masked lanes
    efficiency *= _edges(op.channels, knobs.channel_block) * _edges(pixels, knobs.pixel_block)
    rc = op.extent(roles.rc)
    if knobs.weights == "dot":
        efficiency *= rc / (_ceil(rc, dot_elements(op)) * dot_elements(op))
    elif taps:
        window = tap_window(op)
        # a window of activations per vector and group of output channels (depthwise: per channel)
        windows = vectors * _ceil(knobs.channel_block, op.channels // op.groups)
        efficiency *= window.taps / (_ceil(window.taps, DOT) * DOT)
        efficiency *= accumulators / max(accumulators, TAP_SPREAD * windows)
    elif op.quant is not None:
        efficiency *= WIDENED
    depth = math.prod(op.extent(d) for d in op.reduction_dims) // rc * min(rc, knobs.cache_block or rc)
    efficiency *= depth / (depth + (RELOAD if knobs.cache_block else STORE))
    # the innermost outer loop decides which weights must stay in cache while it runs: one channel
    # block's (it runs over positions), all channels' (it runs over channel blocks), or none (a cache block)
    innermost = knobs.outer[-1] if knobs.outer else ""
    channels = op.channels if innermost == f"{roles.channel}_o" else knobs.channel_block
    weight_bytes = depth * channels * (1 if op.quant is not None else 2 if op.dtype == "bfloat16" else 4)
    l1, l2 = _caches()
    efficiency *= (NO_FIT if innermost == f"{roles.rc}_o" else L1_FIT if weight_bytes <= l1
                   else L2_FIT if weight_bytes <= l2 // 2 else NO_FIT)
    peak = machine_profile().peak(candidate.isa, op.dtype if op.quant is None else "int8") * 1e9
    return {"efficiency": efficiency, "predicted_seconds": op.flops / (peak * efficiency)}


def rank(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The candidates with the heuristic's figures, fastest predicted first (ties keep their order)."""
    scored = [replace(c, model=tuple(figures(c).items())) for c in candidates]
    return sorted(scored, key=lambda c: c.figures["predicted_seconds"])
