"""Ranking of candidates: which to measure first.

A ranker is any function ``(candidates) -> candidates`` that returns them best first, each
with the figures it ranked by in ``Candidate.model`` (recorded with the trial in the log), its
``predicted_seconds`` among them. ``lo.tune(..., rank=...)`` takes one; ``rank`` below is the
built-in heuristic, cheap enough for every candidate: it picks the shortlist that the kernel
model then orders (``guide.py``).

The heuristic predicts a time from the op's work and this machine's peak, scaled by the efficiencies
of the register block that a CPU core's FMA pipeline cares about: accumulators enough to hide the
multiply-add latency but a few vector registers left spare (ResNet-18's 128-channel 3x3 layer ran
1.89 ms with a 14x32 fp32 block, 31 of 32 registers, and 1.19 ms with 10x32), few loads per
multiply-add, vector lanes and edge blocks used fully, no loop step per reduction step (an unrolled
loop), dot groups filled (quantized ops without a dot instruction widen bytes to int32 lanes, a
quarter of the dot rate; a tap dot fills its groups with taps, and shuffles its activations; an emulated
dot widens each broadcast and weight vector, ``EMULATED_DOT_OPS``), long
reductions per stored block, and the weights that the innermost outer loop reuses in L1 or L2. To
that compute time it adds ``strided_seconds``, the time plain weight rows of a block that is part of
the channels take from L2 or L3 where the rows, a channel row apart, need more lines than the cache
sets they map to hold (VGG conv5_1's plain 32-channel blocks ran 2x the packed ones; ResNet-18's
256->512 3x3 stride-2 layer ran 0.66 ms with packed 48-channel blocks and 1.37 ms with plain ones in
one search on a shared machine), ``stream_seconds``, the time the operands (input and weights)
take to come from beyond L2 (``streamed_bytes``): once, and again on each iteration of an outer loop
that does not index an operand when what the loops inside it touch of that operand does not fit half
of L2 (the 512-channel 3x3 layers of ResNet-18, 9.4 MB of weights, ran 4.5-10 ms with the channel
block loop inside the row loop and 2.8 ms with it outside, in one search on a shared machine), and for a
candidate ranked as a kernel that adds a residual (``Candidate.residual``) ``residual_seconds``, the time
that residual takes to come from beyond L2 where each block is stored.
A table-lookup candidate of a ternary op (``tl1``, ``tl2``) gets ``LUT_SHARE`` of the int8 dot peak,
scaled by its register block's accumulators (``chains`` hide the latency), its loads per lookup (a
pixel's tables, a column block's indices) and the lanes its edge blocks use. An AMX candidate gets
the tile model's time (``tile_model``: its tile dots at the AMX peak, its tile loads from the cache
levels that hold their operands, its epilogue).
A binary op's candidate (XNOR + popcount) gets ``BINARY_RATE[isa]`` times the int8 dot peak of its
ISA (from instruction counts, not measured: on AVX-512, 512 products per XOR, ``vpopcntq`` and add
on the two ports that run two ``vpdpbusd`` of 64 products; the nibble popcount takes 6 more
instructions; a scalar core one ``popcnt`` of 64 products per cycle), scaled by its accumulators,
its loads per XOR (a weight vector per channel vector, a broadcast per position), spare registers
and edge blocks; every candidate of one search has the same rate, so it orders them by the block alone.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import replace
from functools import lru_cache

from ...dataflows import activations_last
from ...layout import Layout
from ...machine import Cache, MachineProfile
from ...machine import machine_profile as measured_profile
from ...ops import Op
from ..binary import block_dims
from ..lut_format import COLUMNS
from ..search import Candidate
from .binary import LANES as BINARY_LANES
from .isa import ISA_PREFERENCE, ISAS, TILE_ISA
from .knob_memo import by_knobs
from .space import (
    DOT,
    WEIGHTS,
    Knobs,
    Names,
    Roles,
    dot_elements,
    emulates_dot,
    is_binary,
    is_table_lookup,
    lanes,
    lut_columns,
    operand_registers,
    panel_loops,
    reads_memory,
    registers,
    tap_window,
    weight_formats,
)
from .tile_model import tile_time

CHAIN_SHARE = 2            # accumulators that hide the FMA latency (4 cycles x 2 ports) and loads between:
                           # this share of the ISA's vector registers (``chains``)
WIDENED = 0.25             # rate of a quantized kernel without a dot instruction, relative to the dot peak
STORE, RELOAD = 4, 12       # reduction steps one block's final store (a partial sum's reload and store) costs
SCATTERED_RELOAD = 2       # ... times this where they come from beyond L2 out of order (``reload_steps``)
L1_FIT, L2_FIT, NO_FIT = 1.0, 0.9, 0.7   # efficiency when the reused weights fit L1, else L2; partial sums
LINE = 64                  # bytes of a cache line
FAR = 2048                 # bytes: weight rows this far apart are beyond the L1 stride prefetcher's reach
                           # (it follows strides below 2 KB); from 4 KB each row is on a page of its own
PAGED = 4.0                # a line of strided weight rows this far apart costs this many lines' L2 streaming
                           # time when L1 cannot hold a block's rows: a miss the prefetcher does not hide, a
                           # TLB lookup (bench_tune's log: plain 32-channel blocks ran 1.2-1.9x the packed
                           # ones on the BERT FFN up-projection, 12 KB rows: about 5 cycles a line; 2.5-4x on
                           # the down-projection, 3 KB rows, in one search on a shared machine)
TIGHT, SPARE_SHARE = 0.8, 8   # efficiency of a block that leaves fewer spare vector registers than this share
                              # of the ISA's (``tight_spare``)
DOT_LIVE = 20              # accumulators a requantizing dot block keeps across a stepping reduction loop
                           # without spilling (see ``spills_accumulators``)
LUT_SHARE = 0.4            # a table-lookup block's rate relative to the int8 dot peak: tl1/tl2 conv2_x ran at
                           # about 0.4 of int8's time (docs/benchmarks.md, 1.16/1.03 ms vs 0.44 ms)
BINARY_RATE = {"avx512": 8 / 3, "avx2": 8 / 9, "scalar": 0.5}   # see the docstring
# vector instructions of an emulated dot (AVX2's lo_avx2_dpbusd) per update (2 vpmaddwd, 2 vpaddd), per
# activation operand (its u8 bytes widened to 16-bit halves: and, shift) and per weight operand (s8: 3
# shifts), each operand shared by the block's updates that use it: a dot block with more channel vectors
# widens fewer broadcasts per update (measured: ``space.EMULATED_DOT_OPERANDS``); a tap dot broadcasts the
# weights and widens a window of activations per vector
EMULATED_DOT_OPS = {"avx2": (4, 2, 3)}
# the same on weights pre-widened when packed (s16, ``codegen/wide.py``): nothing to widen per weight vector,
# but its address, which GCC recomputes from the loop variables on every step (4 scalar instructions), priced
# as one: of the 12-accumulator blocks 3x32 ran fastest (0.85-0.91x main's int8 7x16 first choices on
# ResNet's 1x1 and 3x3 convs; 2x32 0.94-1.11x, 4x24 1.16-1.88x; AMD EPYC Zen 3, 1 thread, kernel-only)
WIDE_DOT_OPS = {"avx2": (4, 2, 1)}
NARROW_DOT = 0.9           # efficiency of an emulated dot's block (a dot or tap dot) on int8 weights, widened
                           # in the loop, in an op that has s16 blocks: against those the int8 ones ran 7-15%
                           # slower than priced (GCC keeps a 7x16 block's accumulators on the stack, 16 stores
                           # a step): ResNet's 3x3 512->512 at 7x7, 3x3/2 256->512 to 7x7 and 1x1/2 1024->2048
                           # to 7x7 ran s16 4x16 in 0.87, 0.88 and 0.93x int8 7x16's time, priced 1.00x; the
                           # 3x3 128->128 at 28x28 s16 3x32 in 0.85-0.91x, priced 0.95x (AMD EPYC Zen 3, 1
                           # thread, kernel-only). Every int8 block of such an op alike: their order holds
EMULATED_PASSES = 0.9      # efficiency of an emulated dot's block with a cache block: its int32 sums go to
                           # memory between the passes and through a requantizing pass after the nest
                           # (ResNet-50's int8 3x3/2 128->128 conv from 56x56 ran 3x32 s16 blocks with
                           # 64-channel cache blocks 1.11x the time of the same blocks without, its 1x1/2
                           # 512->1024 from 28x28 with 256-channel ones 1.08x; AMD EPYC Zen 3, 1 thread,
                           # kernel only, minimums of interleaved calls)
STRIDED_LIVE = 12          # accumulators an emulated dot block keeps without losing time where it unrolls the
                           # taps of a strided window (see ``spills_strided``)
WIDE_STRIDED_LIVE = 8      # the same on s16 weights (``lo_avx2_dot_s16``: each broadcast's two halves live)
TAP_SPREAD = 2             # shuffles per window of a tap dot's activations, at the rate of the dots
SCATTER = 1 / 3            # streamed operands' extra time per pair of outer loops out of the output's order
TAIL = 2.0                 # a partial block along a padded window's positions: its dim's used share to this
                           # power again (see ``tail``; per ISA: ``PIXEL_TAIL``), or along the channels
PIXEL_TAIL = {"avx512": TAIL, "avx2": 0.0, "scalar": TAIL}   # ``tail``'s power per ISA (AVX2: none measured)
MASKED = 1.15              # a partial channel block's masked code, run by every block (see ``channel_tail``)
FLOAT_LOADS = 0.8          # loads per multiply-add a ``float_block`` issues at its peak: a block of one
                           # channel vector broadcasts once per multiply-add (ResNet-50's 3x3 64->64 conv at
                           # 56x56 and 128->128 at 28x28, AMD EPYC Zen 3, 1 thread: 12x8 and 10x8 blocks 1.21x
                           # and 1.18x the time of 4x16; 14x8 1.15x, eleventh session)
FLOAT_BLOCK_ISAS = ("avx2",)   # ISAs whose float32 register blocks are priced by their partial pixel block's
                               # chains (``pixel_edges``) and their weight reads from L2
                               # (``l2_weight_share``): measured on AVX2 only
RESIDUAL_SCATTER = 2.4     # a fused residual's extra time per pair of outer loops out of the output's order
                           # (see ``residual_seconds``)
RESIDUAL_BYTES = 4         # bytes of a residual element (float32: kernels with a float output add one)
SPLIT = 1.5                # a wider ISA's float32 peak below this times its half-width ISA's: split vectors
                           # (``split_vectors``)
MEMORY_OPERAND = 0.9       # efficiency of a block that multiplies a weight vector from memory
                           # (``space.memory_operand``): ResNet's 3x3 convs at 14x14 to 56x56, whose rows 4x16
                           # and 5x16 blocks cover whole or nearly, ran 7x16 at 1.08-1.11x their time (AMD
                           # EPYC Zen 3, 1 thread, kernel only, thread times of 21 interleaved calls)


_ranking_profile: ContextVar[MachineProfile | None] = ContextVar("ranking_profile", default=None)


def machine_profile() -> MachineProfile:
    """This machine's profile (``machine.machine_profile``): the one a ranking (``_figured``) looked up
    for its candidates while it runs, else looked up now."""
    return _ranking_profile.get() or measured_profile()


@lru_cache(maxsize=1)
def _caches() -> dict[str, int]:
    """This machine's data cache sizes in bytes by level, "L1", "L2" and "L3"
    (``MachineProfile.cache_size``)."""
    profile = machine_profile()
    return {level: profile.cache_size(level) for level in ("L1", "L2", "L3")}


@lru_cache(maxsize=16)
def _peak(isa: str, dtype: str) -> float:
    """This machine's one-core peak of ``isa`` on ``dtype`` in operations per second."""
    return machine_profile().peak(isa, dtype) * 1e9


@lru_cache(maxsize=64)
def _operands(op: Op) -> tuple[Roles, tuple[tuple[frozenset[str], int], ...], float]:
    """What the heuristic reads of an op, once: its roles; per input the dims that index it and its
    bytes; and the read bandwidth (bytes/s) of the level beyond L2 that holds the inputs (L3 when
    they fit half of it, else DRAM)."""
    inputs = tuple((frozenset(v for e in op.index(t) for v in e.variables()),
                    math.prod(op.tensor(t).shape) * element_bytes(op)) for t in op.inputs)
    bandwidth = machine_profile().bandwidth
    level = "L3" if sum(b for _, b in inputs) <= _caches()["L3"] // 2 and "L3" in bandwidth else "DRAM"
    return Roles.of(op), inputs, bandwidth[level].gbs * 1e9


def chains(isa: str) -> int:
    """Accumulators a register block of ``isa`` needs to run at its peak: ``1 / CHAIN_SHARE`` of its vector
    registers (AVX-512 16 of 32; AVX2 8 of 16, the FMA latency times its two ports, leaving room for the
    weight vectors and a broadcast)."""
    return registers(isa) // CHAIN_SHARE


def tight_spare(isa: str) -> int:
    """Spare vector registers below which a register block of ``isa`` spills: ``1 / SPARE_SHARE`` of its
    registers (AVX-512 4, AVX2 2). AVX2's 16 registers hold half as many accumulators as AVX-512's 32,
    so figures tuned on AVX-512 put 1-vector blocks first (14x8: 14 accumulators, a broadcast per
    multiply-add, no register spare): ResNet-50's 3x3 64->64 conv at 56x56 ran 2.64 ms with 14x8 blocks,
    2.29 ms with 4x16 and 2.49 ms with 2x32 (16 and 8 registers spare as each; medians of 9 interleaved
    rounds, kernel only, under ``chrt -f 10`` on a shared 2-core AMD EPYC Zen 3, load 7); 6x16 (one
    spare) 2.69 ms, 5x16 2.38 ms."""
    return registers(isa) // SPARE_SHARE


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _edges(extent: int, block: int) -> float:
    """The share of a dim's blocks that its last, partial block leaves used."""
    return extent / (_ceil(extent, block) * block)


def lut_efficiency(candidate: Candidate) -> float:
    """A table-lookup candidate's share of the int8 dot peak."""
    op, knobs = candidate.op, candidate.knobs
    columns = lut_columns(op, knobs.channel_block)
    accumulators = knobs.pixel_block * columns
    efficiency = LUT_SHARE * min(1.0, accumulators / chains(candidate.isa))
    efficiency *= accumulators / (accumulators + knobs.pixel_block + columns)       # loads per lookup
    efficiency *= _edges(op.channels, knobs.channel_block) * knobs.channel_block / (columns * COLUMNS)
    return efficiency * _edges(op.extent(Roles.of(op).pixel), knobs.pixel_block)


def binary_efficiency(candidate: Candidate) -> float:
    """A binary candidate's rate relative to the int8 dot peak of its ISA (``BINARY_RATE``, scaled)."""
    op, knobs, isa = candidate.op, candidate.knobs, candidate.isa
    vectors = _ceil(knobs.channel_block, BINARY_LANES[isa])
    accumulators = knobs.pixel_block * vectors
    efficiency = BINARY_RATE[isa] * min(1.0, accumulators / chains(isa))
    if registers(isa) - accumulators - vectors - 1 < tight_spare(isa):                 # the compiler spills
        efficiency *= TIGHT
    efficiency *= accumulators / max(accumulators, knobs.pixel_block + vectors)  # loads per XOR
    efficiency *= _edges(op.channels // op.groups, knobs.channel_block)
    return efficiency * _edges(op.extent(block_dims(op)[0]), knobs.pixel_block)


def spills_accumulators(candidate: Candidate, accumulators: int) -> bool:
    """Whether a quantized dot block of ``accumulators`` spills them in its reduction loop: more than
    ``DOT_LIVE`` across a reduction channel loop that steps (runs more dots than it unrolls). GCC 12
    stores 12 of a 7x48 block's 21 accumulators to the stack on every step of that loop (12 stack
    stores per 21 ``vpdpbusd``), although they, 3 weight vectors and a broadcast fit 32 registers:
    the requantizing epilogue after the loop holds its per-channel vectors too. MobileNetV2's 1x1 convs
    at 28x28 and 14x14 (32->192, 64->384, 96->576; one interleaved run each, this project's shared Xeon
    with AMX, 1 thread): 7x48 47.6, 35.8 and 79.9 us, 5x64 (20, no stores) 42.8, 27.1 and 53.0 us. A
    24-channel reduction unrolled whole (24->144 at 56x56) keeps its 7x48 block in registers."""
    op, knobs = candidate.op, candidate.knobs
    if op.quant is None or knobs.weights != "dot" or accumulators <= DOT_LIVE:
        return False
    rc = Roles.of(op, knobs.pixel).rc
    loop = Names.of(rc, knobs.cache_block, True).reduction
    steps = _ceil(min(op.extent(rc), knobs.cache_block or op.extent(rc)), dot_elements(op))
    return steps > dict(knobs.unroll).get(loop, 1)


def spills_unrolled(candidate: Candidate) -> bool:
    """Whether an emulated dot block (AVX2's ``lo_avx2_dpbusd``, 16 registers; a dot or tap dot) unrolls
    several reduction loops (the taps of a window completely): GCC 12 then hoists the weight loads and
    widenings of the unrolled steps and spills them and the accumulators. Int8 stems on the AMD EPYC Zen 3,
    1 thread, kernel-only medians of one interleaved run each, that unroll against the same block with one
    loop or none unrolled: ResNet's 7x7 (7x16 dot) 5.49 against 3.23 ms, its 16x4 tap dot (kh, kw) 3.75
    against 3.21-3.31 ms; MobileNetV1/V2's 3x3 (7x16 dot) 0.444 / 0.448 against 0.369-0.380 ms; VGG-16's
    conv1_1 3.50 against 2.58-3.05 ms."""
    knobs = candidate.knobs
    return knobs.weights in ("dot", "taps") and candidate.isa in EMULATED_DOT_OPS and len(knobs.unroll) > 1


def spills_strided(candidate: Candidate, accumulators: int) -> bool:
    """Whether an emulated dot block (AVX2's ``lo_avx2_dpbusd``) of more than ``STRIDED_LIVE`` accumulators
    (``WIDE_STRIDED_LIVE`` on s16 weights) unrolls the taps of a window of stride > 1 along its pixel block
    (an int8 stem): such blocks ran slower than 12-accumulator ones, where at stride 1 they did not. AMD
    EPYC Zen 3, 1 thread, kernel-only medians of 9 interleaved rounds under ``chrt -f 10``, the first
    choice's loop order, kw unrolled: ResNet's 7x7 stride-2 stem 7x16 3.31 ms, 6x16 2.88, 3x32 3.17, 5x16
    3.06; MobileNet's 3x3 stride-2 stem 7x16 0.378 ms, 6x16 0.358, 3x32 0.340; a 7x7 stride-1 window at
    112x112 7x16 2.74 ms (min), 6x16 2.85. Why was not found: not the broadcasts the unrolled taps share
    (each behind a volatile asm barrier: the same times), not the inner loop's instructions (``llvm-mca
    -mcpu=znver3``: 2.74 and 2.66 cycles an update at 7x16 and 6x16); the 1x1 and 3x3 convs, which unroll
    their input channels, keep 7x16 first (the fastest block or within 5% of it). On s16 weights each
    broadcast keeps its two 16-bit halves live beside the accumulators and a product's temporary (16
    registers at 12 accumulators: GCC 12 stores or reloads 126 stack slots per kh step of ResNet's stem
    3x32 block): the stems' 8-accumulator 4x16 ran 0.83x 3x32's time on ResNet's (2.43 against 2.91 ms;
    6x16 2.86, 5x16 3.05) and 0.90x on MobileNet's (0.304 against 0.337 ms; 6x16 0.355, 8x8 0.368), the
    same measurement (eighteenth session)."""
    live = WIDE_STRIDED_LIVE if candidate.knobs.weight_format == "s16" else STRIDED_LIVE
    return (emulates_dot(candidate.isa, candidate.knobs.weights) and accumulators > live
            and strided_taps(candidate))


def strided_taps(candidate: Candidate) -> bool:
    """Whether a register-blocked candidate unrolls the taps of a window of stride > 1 along its pixel
    block."""
    knobs = candidate.knobs
    window = tap_window(candidate.op, knobs.pixel)
    return window is not None and window.stride > 1 and window.tap_dim in dict(knobs.unroll)


def rolled(candidate: Candidate) -> bool:
    """Whether the innermost reduction loop of a register-blocked candidate steps (is not unrolled):
    unrolling a loop outside it (a tap) leaves a loop step per reduction step (ResNet-50 conv3_x, 4x64
    blocks, in one search on a shared machine: c innermost unrolled by 4 1.23 ms, kw unrolled with c
    innermost 1.44 ms, nothing unrolled 2.4 ms; conv2_x 8x32: 1.24, 1.35 and 1.34 ms). A tap dot
    candidate: whether nothing is unrolled (its innermost loop is one dot's taps)."""
    knobs = candidate.knobs
    if knobs.weights == "taps" or not knobs.reduction:
        return not knobs.unroll
    roles = Roles.of(candidate.op, knobs.pixel)
    innermost = knobs.reduction[-1]
    if innermost == roles.rc:
        innermost = Names.of(roles.rc, knobs.cache_block, knobs.weights == "dot").reduction
    return innermost not in dict(knobs.unroll)


def tail(candidate: Candidate) -> float:
    """The time of a register-blocked candidate over that of its blocks all whole, beyond the lanes
    its last, partial block leaves unused (which the heuristic and the kernel model count): 1 when
    the pixel block divides its dim or that dim has no padded window, else ``1 / used ** TAIL``
    (``used`` the share of the dim's blocks that it uses: ``_edges``). A partial block of a padded
    window runs a second, guarded copy of the reduction; measured in one search each on a shared
    machine, ResNet-50 conv2_x 9x32 and 11x32 blocks (8/9 and 6/7 used) ran 1.36x and 1.35-1.5x the
    time of 8x32 blocks, 10x32 and 12x32 (14/15) 1.11x, where the kernel model says 1.04x, 1.06x and
    1.02x; conv3_x 5x64 and 6x64 (14/15) 1.12-1.15x of 4x64, the model 1.01x. A GEMM's partial row
    blocks (no window) ran as fast as whole ones (BERT FFN 7x48, 9x48 against 6x48, 8x48). On AVX2
    (``PIXEL_TAIL``: power 0, the unused positions alone) partial blocks cost their unused share and no
    more: on a shared 2-core AMD EPYC Zen 3 (kernel only, medians of 9 interleaved rounds under
    ``chrt -f 10``, 1 thread) ResNet-50's 3x3 convs ran 5x16 blocks at 1.05x (56x56, 64 channels) and
    1.045x (28x28, 128) the time of 4x16, which divide the rows (15/14 of the positions computed: 1.07x),
    and at 7x7 4x16 blocks (7/8 used) ran fastest: 512->512 2.78 ms, 7x8 2.88; 256->512 stride 2 on 2
    threads 0.68 ms, 7x8 (no tail, first before) 0.88."""
    knobs, op = candidate.knobs, candidate.op
    if candidate.isa == TILE_ISA or is_table_lookup(candidate) or is_binary(candidate):
        return 1.0
    window = tap_window(op, knobs.pixel)
    if window is None or not (window.pad or window.pad_end):
        return 1.0
    roles = Roles.of(op, knobs.pixel)
    return 1 / _edges(roles.extent(op, roles.pixel), knobs.pixel_block) ** PIXEL_TAIL[candidate.isa]


def channel_tail(candidate: Candidate) -> float:
    """The time of a register-blocked candidate over that of its channel blocks all whole, beyond the
    lanes its last, partial channel block leaves unused: ``MASKED / used ** TAIL`` (``used``: ``_edges``
    of the channels; 1 where the blocks divide the channels), as ``tail`` counts a padded window's
    partial pixel block. The kernel's one copy of the reduction is the guarded one, so every block
    runs it: masked loads and masked, conditional multiply-adds (ResNet-18's 512-channel 3x3 layer:
    42 ``maskz_loadu`` and 21 ``mask3_fmadd`` with 7x48 blocks, 14 plain ``fmadd`` with 7x32), which
    ``MASKED`` prices where the last block's unused share is small. ResNet-18's 256-channel 3x3 layer
    (14x14) ran 1.62-1.73 ms with 7x48 blocks (16 of the last block's 48 channels used) and 1.40-1.46 ms
    with 7x32, 1.51 ms with 14x16; its 128-channel 7x7 shape 0.088-0.093 ms with 7x48 and 0.079 ms with
    7x32, where the lanes alone put 7x48 first (one search each on this project's shared 2-core Xeon
    with AMX, 1 thread); the 512-channel one at 7x7 (32 of the last 48 used) 2.28 ms with 7x48 and 2.08
    ms with 7x32 (minimum thread times of 24 interleaved calls, 4 weight copies in rotation, load 10),
    where ``1 / used ** TAIL`` alone left 7x48 first. The kernel model's shortlist (``Traits.tail``)
    leaves it out: its fit learns from the trials."""
    if candidate.isa == TILE_ISA or is_table_lookup(candidate) or is_binary(candidate):
        return 1.0
    used = _edges(candidate.op.channels, candidate.knobs.channel_block)
    return 1.0 if used == 1 else MASKED / used ** TAIL


def reload_steps(op: Op, knobs: Knobs) -> float:
    """Reduction steps that storing a block costs: ``STORE``, or with a cache block ``RELOAD`` (its
    partial sums reloaded and stored on every pass), ``SCATTERED_RELOAD`` times that where the output
    does not fit half of L2 (``output_fits``) and the outer loops visit it out of its memory order
    (``out_of_order``): each pass then reloads every block's rows from beyond L2, a row apart, where
    no prefetcher runs ahead of them. GEMM 512x1024x1024, 8x32 blocks, whole calls from row-major
    numpy with the weights prepacked, five runs of 40 interleaved rounds under ``chrt -f 10`` (this
    project's shared Xeon with AMX, load 11; median / min ms): 512-deep panels, the rows' loop inside
    the panels' 7.48-7.93 / 7.31-7.37; 256-deep, the rows' loop outside (in the output's order)
    7.09-7.43 / 6.94-6.99; torch.matmul 7.39-7.66 / 7.21-7.29. ResNet-50's 1024->512 1x1 at 14x14
    (output within half of L2) keeps its choice."""
    if not knobs.cache_block:
        return STORE
    scattered = not output_fits(op) and out_of_order(op, knobs) > 0
    return RELOAD * (SCATTERED_RELOAD if scattered else 1)


def element_bytes(op: Op) -> int:
    """Bytes of one operand element: int8 for a quantized op, else its dtype's."""
    return 1 if op.quant is not None else 2 if op.dtype == "bfloat16" else 4


@by_knobs("pixel", "pixel_block", "channel_block", "channel_panel", "cache_block")
def outer_extents(op: Op, knobs: Knobs) -> dict[str, int]:
    """The extent of each loop outside the register block (``knobs.outer``), by name."""
    roles = Roles.of(op, knobs.pixel)
    extents = {d: op.extent(d) for d in roles.others}
    extents[f"{roles.pixel}_o"] = _ceil(roles.extent(op, roles.pixel), knobs.pixel_block)
    extents[f"{roles.channel}_o"] = _ceil(op.channels, knobs.channel_block)
    if knobs.channel_panel:
        panels, blocks = panel_loops(roles.channel)
        del extents[f"{roles.channel}_o"]
        extents[panels] = _ceil(op.channels, knobs.channel_panel)
        extents[blocks] = knobs.channel_panel // knobs.channel_block
    if knobs.cache_block:
        extents[f"{roles.rc}_o"] = _ceil(op.extent(roles.rc), knobs.cache_block)
    return extents


def streamed_bytes(op: Op, knobs: Knobs, capacity: int) -> int:
    """Bytes of the op's inputs read beyond a cache of ``capacity`` bytes: ``streamed_inputs`` summed."""
    return sum(first + again for first, again in streamed_inputs(op, knobs, capacity))


@by_knobs("pixel", "pixel_block", "channel_block", "channel_panel", "cache_block", "outer", "parallel")
def streamed_inputs(op: Op, knobs: Knobs, capacity: int, threads: int = 1) -> list[tuple[int, int]]:
    """Bytes of each of the op's inputs read from beyond a cache of ``capacity`` bytes, as (read first,
    read again): each input once, and once more per iteration of an outer loop that does not index it (its
    reuse) when the part of it that the loops inside touch (the indexing loops' share of it) does not fit.
    The parallel loop's first ``threads`` iterations run at once, each thread reading the input first;
    the other passes read it again. A channel panel's
    loop (``channel_panel``) adds no pass: each panel reads the activations again in their memory
    order, a block's rows front to back, which the prefetchers bring ahead of the block's many
    multiply-adds per element (GEMM 512x1024x1024: 128-channel panels, the activations read 8 times,
    ran faster than 256-deep cache blocks, read once, in every run measured)."""
    extents = outer_extents(op, knobs)
    roles = Roles.of(op, knobs.pixel)
    panels = panel_loops(roles.channel)[0] if knobs.channel_panel else None
    streamed = []
    for dims, size in _operands(op)[1]:
        indexes = [not dims.isdisjoint(roles.dims_of(loop)) for loop in knobs.outer]
        indexing = [extents[loop] if index else 1 for loop, index in zip(knobs.outer, indexes)]
        first = passes = 1
        for position, loop in enumerate(knobs.outer):
            if indexes[position] or extents[loop] == 1 or loop == panels:
                continue
            inside = size * math.prod(indexing[position + 1:]) / math.prod(indexing)
            if inside > capacity:
                passes *= extents[loop]
                first *= min(extents[loop], threads) if loop == knobs.parallel else 1
        streamed.append((size * first, size * (passes - first)))
    return streamed


def stream_seconds(candidate: Candidate, capacity: int, scatter: float = 1.0) -> float:
    """The time the op's inputs take to come from beyond a cache of ``capacity`` bytes (``streamed_inputs``)
    at the bandwidth of the level beyond L2 that holds them (``_operands``), times ``scatter`` (the extra
    time of blocks stored out of the output's order, ``out_of_order``); a conv's weights in a
    ``float_block`` read first at DRAM's, in their packed order whatever the output's: in a model they
    were last read a run ago, behind the other
    layers' weights (ResNet-50's 100 MB, ResNet-18's 47 MB: more than L3), while its activations were just
    written (and weights read again come from that level). On the AMD EPYC Zen 3 a core read 16-20 GB/s
    from DRAM, two cores 33-40 GB/s reading a buffer each and 27-29 reading one buffer together (1-9 MB
    after 128 MB of other reads): two threads that split the positions each read all the weights from
    DRAM. ResNet-50's 512->512 3x3 stride-2 conv at 14x14 (9.4 MB of weights), 2 threads, kernel-only with
    the caches flushed before each call: its output channels split 0.86-0.96x the time of its positions
    split by median in six runs, within 3% by minimum; in the model no difference measured."""
    op = candidate.op
    streamed = streamed_inputs(op, candidate.knobs, capacity, candidate.threads)
    bandwidth = _operands(op)[2]
    dram = machine_profile().bandwidth.get("DRAM")
    total = sum(first + again for first, again in streamed)
    if not (float_block(candidate) and op.windows) or dram is None:
        return total / bandwidth * scatter
    first_weights = streamed[1][0]
    return (total - first_weights) / bandwidth * scatter + first_weights / (dram.gbs * 1e9)


def reread_seconds(candidate: Candidate, capacity: int, scatter: float = 1.0) -> float:
    """The part of ``stream_seconds`` that reads the activations (the first input) again (``streamed_inputs``'
    second figure of it): from the level beyond L2 that their first read left them in, at its bandwidth,
    times ``scatter``."""
    op = candidate.op
    again = streamed_inputs(op, candidate.knobs, capacity, candidate.threads)[0][1]
    return again / _operands(op)[2] * scatter


@by_knobs("pixel", "pixel_block", "channel_block", "channel_panel", "cache_block", "outer")
def out_of_order(op: Op, knobs: Knobs, channels_first: bool = False) -> int:
    """The pairs of outer loops (of more than one iteration, over output dims) that visit the
    channels-last output out of its memory order (the positions in their order, the channels last;
    ``channels_first``: a plane candidate's output, in the op's logical order, NCHW):
    each such pair makes the blocks jump in memory instead of running along it, and the operands
    that stream from beyond L2 come at less than the prefetchers' bandwidth (``SCATTER`` more time
    per pair). Measured over the 32 trials of one search each on a shared machine, Spearman of this
    count with the time: +0.58 (MobileNet-v2 and v1 3x3 depthwise), +0.25 (EfficientNet 5x5
    depthwise), +0.59 and +0.46 (1x1 convs); a depthwise 4x48 block ran 0.19-0.21 ms in order and
    0.31-0.35 ms with two or three pairs out of order. ``figures`` counts none where the streams keep
    their pace in any order (``streams_in_any_order``). The loop of fused positions (``fused_pixel``)
    counts as the loops of the dims it fuses, in their order."""
    roles = Roles.of(op, knobs.pixel)
    outputs = [d for d in op.dim_names if d not in op.reduction_dims]
    memory = outputs if channels_first else [d for d in outputs if d != roles.channel] + [roles.channel]
    extents = outer_extents(op, knobs)
    places = [memory.index(dim) for loop in knobs.outer if extents[loop] > 1
              for dim in roles.dims_of(loop) if dim in memory]
    return sum(a > b for i, a in enumerate(places) for b in places[i + 1:])


def output_fits(op: Op) -> bool:
    """Whether the op's output, at ``RESIDUAL_BYTES`` an element, fits half of L2: its blocks then stay in
    the cache in whatever order the outer loops store them (``residual_seconds`` counts no residual from
    beyond L2; see ``streams_in_any_order``)."""
    return math.prod(op.tensor(op.output).shape) * RESIDUAL_BYTES <= _caches()["L2"] // 2


def streams_in_any_order(op: Op) -> bool:
    """Whether a block order out of the output's (``out_of_order``) leaves the streams at the
    prefetchers' pace: a pointwise op's output fits half of L2 (``output_fits``) while its weights,
    beyond it, stream (a GEMM's, a 1x1 conv's). ``figures`` then counts no ``SCATTER``, and
    weight-heavy layers with few positions take the channel block loop outside the rows, each block's
    weights read once (minimum / median thread times of 40 interleaved calls, the weights out of L2
    before each, this project's shared Xeon with AMX, load 6): ResNet-50's 1024->2048 1x1 stride-2
    conv at 14x14 2.58 / 3.20 -> 2.23 / 2.66 ms, 512->2048 at 7x7 1.37 / 1.78 -> 1.22 / 1.51 ms,
    MobileNetV2's 320->1280 at 7x7 0.449 / 0.531 -> 0.447 / 0.501 ms. Where the weights fit too
    (MobileNetV2's 576->160 at 7x7 ran 0.106 ms with its rows outside the channel blocks and 0.122 ms
    with them inside and a cache block, the choice the rule made there), and for a window of several
    taps (ResNet-18's 128->256 3x3 stride-2 conv took a 14x16 block for 7x32, 0.77-1.18 ms by minimum
    in three runs, 1-6% slower each time), the rule leaves the layers as they were."""
    weights = math.prod(op.tensor(op.inputs[1]).shape) * element_bytes(op)
    pointwise = all(window.taps == 1 for window in op.windows)
    return pointwise and output_fits(op) and weights > _caches()["L2"] // 2


def residual_seconds(op: Op, knobs: Knobs) -> float:
    """The time a residual of the output's shape, added where each block is stored (``Schedule.add_residual``:
    a ResNet block's shortcut, written steps before), takes to come from beyond L2 when the output does not
    fit half of L2: its bytes at the bandwidth beyond L2, and ``RESIDUAL_SCATTER`` times that again per pair
    of outer loops that visit the output out of its memory order (``out_of_order``). In memory order the
    prefetchers bring it ahead of the stores; out of it each block's loads wait at its store. ResNet-50's
    64->256 1x1 conv at 56x56 (3.2 MB of output) with 8x32 blocks, minimum thread times on this project's
    shared 2-core Xeon with AMX (load 9, 50 interleaved calls, 4 weight and residual copies in rotation):
    channel blocks outside the row's pixel blocks (one pair out of order) 0.92 ms without the residual and
    1.64 ms with it, in memory order 1.08 and 1.23 ms; 0.21 ms is 3.2 MB at the profile's L3 bandwidth.
    The 128->512 conv at 28x28 (1.6 MB) ran 1.14 ms out of order and 0.97 ms in order with the residual; the
    256->1024 one at 14x14 (0.8 MB, within half of L2) 1.03 and 1.00 ms. 0 where the output fits
    (``output_fits``)."""
    if output_fits(op):
        return 0.0
    size = math.prod(op.tensor(op.output).shape) * RESIDUAL_BYTES
    return size / _operands(op)[2] * (1 + RESIDUAL_SCATTER * out_of_order(op, knobs))


def conflict_lines(cache: Cache, stride: int, rows: int, lines: int) -> int:
    """The lines of ``cache`` that ``rows`` rows ``stride`` bytes apart, ``lines`` lines each, can
    occupy: the sets their lines map to (a row start repeats its set every ``way / gcd(stride, way)``
    rows) times the ways."""
    way = cache.size // max(cache.ways, 1)
    sets = way // cache.line_size
    return min(sets, min(rows, way // math.gcd(stride, way)) * lines) * max(cache.ways, 1)


@lru_cache(maxsize=4096)
def activation_lines_per_set(op: Op, pixel_block: int, cache_block: int | None, pixel: str | None,
                             sets: int) -> int:
    """The most lines of one set (of ``sets``) that a register block's activation rows take in a cache:
    ``pixel_block`` rows (channels-last: a position's reduction channels, as far as the cache block
    reaches) a position apart. 0 where the pixel's window has several taps (neighbouring rows overlap
    into one span)."""
    roles = Roles.of(op, pixel)
    source = op.inputs[0]
    window = next((w for w in op.windows if w.out_dim == roles.step), None)
    if window is not None and window.taps > 1:
        return 0
    letters = op.tensor(source).letters
    layout = Layout.parse(activations_last(op)[source], letters)
    letter = letters[op.axis(source, roles.step)]
    position = next(p for p, (name, _) in enumerate(layout.order) if name == letter)
    size = element_bytes(op)
    stride = layout.strides(op.tensor(source).shape)[position] * (window.stride if window else 1) * size
    row = min(op.extent(roles.rc), cache_block or op.extent(roles.rc)) * size
    taken = Counter(line % sets for r in range(pixel_block)
                    for line in range(r * stride // LINE, (r * stride + row - 1) // LINE + 1))
    return max(taken.values())


def weights_stay_in_l1(op: Op, knobs: Knobs, weight_bytes: int, l1: Cache) -> bool:
    """Whether a block's weights (``weight_bytes``, contiguous: as many bytes of every set's ways) stay
    in ``l1`` while the innermost outer loop runs: they fit and leave, in every set, a way more than the
    block's activation rows take there (``activation_lines_per_set``; the one more for the output block
    and the lines passing through). GEMM 512x1024x1024's row-major A has rows 4 KB apart, which all land
    in the same sets: with a 256-deep packed weight panel (32 KB, 8 of 12 ways) those sets need 16 lines
    and the panel does not stay (8x32 blocks, minimum thread CPU time over 21 interleaved rounds on this
    project's shared Xeon with AMX: the panel's loop outside the rows' 8.7 ms, inside them 7.3 ms, 512-deep
    panels streamed from L2 7.6 ms; a 128-deep panel, 12 lines exactly, 9.7 ms)."""
    way = l1.size // max(l1.ways, 1)
    sets = way // l1.line_size
    rows = activation_lines_per_set(op, knobs.pixel_block, knobs.cache_block, knobs.pixel, sets)
    return weight_bytes <= l1.size and _ceil(weight_bytes, way) + rows < l1.ways


def plain_rows(op: Op, knobs: Knobs) -> bool:
    """Whether a block reads plain weight rows a channel row apart: plain weights, a block that is part
    of the channels."""
    return knobs.weights == "plain" and knobs.channel_block < op.channels


def _plain_last(candidate: Candidate) -> bool:
    """The first tie-break of ``rank`` and ``best``: where two candidates' predicted times tie, packed
    weights go before plain rows a channel row apart (``plain_rows``; ``strided_seconds`` 0: the heuristic
    sees no conflict). In ResNet-18's fp32 plan (weights from L3 on every run; per-step minima over 31
    interleaved rounds on this project's shared Xeon with AMX) its 256-channel 3x3 layers ran
    1.96-2.09 ms with plain 14x16 blocks (64-byte rows 1 KB apart) and 1.61-1.74 ms with packed ones,
    its 64- and 128-channel layers 0-4% faster packed; the steps summed 31.6 -> 30.6 ms."""
    if candidate.isa == TILE_ISA or is_table_lookup(candidate) or is_binary(candidate):
        return False
    return plain_rows(candidate.op, candidate.knobs)


def _taps_rolled(candidate: Candidate) -> bool:
    """The second tie-break of ``rank`` and ``best``: an emulated dot block on s16 weights that unrolls its
    window's taps (reduction kh, c, kw with kw unrolled: the figures do not read the order, so it ties
    with its twin unrolling the input channels) goes first: the unrolled taps share the broadcasts of the
    columns they overlap. Int8 3x3 convs on the AMD EPYC Zen 3 (kernel-only, medians of 21-31 interleaved
    rounds under ``chrt -f 10``, taps unrolled against channels unrolled, 1 and 2 threads): 512 at 7x7
    0.80-0.85x, 256 at 14x14 0.90-0.92x, 128 at 28x28 0.96-0.98x, 64 at 56x56 0.95-0.98x, stride 2
    512 from 14x14 0.93-0.96x, 256->512 from 14x14 0.90-0.93x (nineteenth session)."""
    knobs = candidate.knobs
    if candidate.isa == TILE_ISA or is_table_lookup(candidate) or is_binary(candidate):
        return True
    window = tap_window(candidate.op, knobs.pixel)
    return not (knobs.weight_format == "s16" and emulates_dot(candidate.isa, knobs.weights)
                and window is not None and window.tap_dim in dict(knobs.unroll))


def _residual_runs(candidate: Candidate) -> int:
    """The third tie-break of ``rank`` and ``best``: on split vectors (``split_vectors``), a kernel that adds
    a residual (``Candidate.residual``) whose output does not fit half of L2 (``output_fits``: the residual
    comes from beyond L2 where each block is stored) goes first the wider its channel block, the longer the
    run of the residual each position's block reads and stores. On an AMD EPYC Zen 4 (residual + ReLU in
    place, kernel only, 4 MB written before each of 55-75 interleaved calls, 1 / 2 threads), ResNet-50's fp32
    64->256 1x1 conv at 56x56 ran 4x64 blocks in 0.85-0.95x the time of 8x32, which tie; ResNet-18's
    3x3 64->64 at 56x56 4x64 in 0.96-0.97x that of 8x32. Where the output fits, the wider block was no
    better: the 512->2048 1x1 conv at 7x7 ran 4x64 1.06x 7x32's time, 256->512/2 from 14x14 1.01x."""
    knobs = candidate.knobs
    if (not candidate.residual or not isinstance(knobs, Knobs) or knobs.weights not in WEIGHTS[:2]
            or not split_vectors(candidate.isa) or output_fits(candidate.op)):
        return 0
    return -knobs.channel_block


def _ties(candidate: Candidate) -> tuple[bool, bool, int]:
    """How ``rank`` and ``best`` order candidates whose predicted times tie."""
    return _plain_last(candidate), _taps_rolled(candidate), _residual_runs(candidate)


def strided_seconds(op: Op, knobs: Knobs, depth: int) -> float:
    """The time plain weights of a block that is part of the channels take to come to L1 beyond what
    the prefetcher hides: a block reads ``depth`` weight rows a channel row apart, once per block;
    when they need more lines than the sets they map to hold (``conflict_lines``) in L2, each line
    comes from L3 (at its bandwidth); else when they do in L1 and the rows lie ``FAR`` apart, from L2
    at ``PAGED`` times a streamed line's time. 0 for packed weights and for a block of all the
    channels (contiguous rows)."""
    if not plain_rows(op, knobs):
        return 0.0
    row = op.channels * element_bytes(op)
    lines = _ceil(knobs.channel_block * element_bytes(op), LINE)
    caches = {c.name: c for c in machine_profile().caches}
    bandwidth = machine_profile().bandwidth
    needed = depth * lines
    if "L2" in caches and needed > conflict_lines(caches["L2"], row, depth, lines):
        line_seconds = LINE / ((bandwidth["L3"] if "L3" in bandwidth else bandwidth["DRAM"]).gbs * 1e9)
    elif "L1" in caches and needed > conflict_lines(caches["L1"], row, depth, lines) and row >= FAR:
        line_seconds = PAGED * LINE / (bandwidth["L2"].gbs * 1e9)
    else:
        return 0.0
    return math.prod(outer_extents(op, knobs).values()) * needed * line_seconds


def figures(candidate: Candidate) -> dict[str, float]:
    """The heuristic's figures of one candidate: ``efficiency`` (0..1) of its compute,
    ``stream_seconds`` (its operands from beyond L2), ``strided_seconds``, ``residual_seconds`` (only
    for a candidate that adds a residual, ``Candidate.residual``) and ``predicted_seconds`` (their sum),
    on ``Candidate.threads`` threads, the busiest thread's: an AMX candidate's from the tile model
    (``tile_time``: its share of the blocks and the bytes it reads itself), a register block's its share
    of the compute (``imbalance`` over the threads) and an even share of the operands' time (the
    threads' caches and bandwidth side by side; what both read is not counted twice). On more than one
    thread the activations read again (``reread_seconds``: a pass per channel block where they outgrow half
    of L2, in their memory order, from L3) overlap the thread's compute: its time is the longer of the two.
    The parallel loop must be outermost there, which leaves out the orders that read nothing again on one
    thread (the reduction's cache blocks outside the channel blocks); priced as added time, those re-reads
    had ResNet-50's 1x1 convs at 14x14 and 7x7 split by channel block take 2x32 blocks (half the passes of
    5x16). In ResNet-50 fp32 on two threads of the AMD EPYC Zen 3 (each step timed in run order, main's
    ranking and this one alternating, 11 rounds, medians): 1024->256 at 14x14 0.91-1.02x main's time in its
    five places, 1024->512 0.97x, 2048->512 at 7x7 0.91-0.99x, 1024->2048 stride 2 0.89x; the 12 nodes
    scheduled otherwise 0.96x in sum. Weights read again
    stay added: overlapped too, the 3x3 convs at 7x7 dropped their cache blocks and ran 1.25-1.34x slower
    there, a 3x3 128->128 split by rows 1.33x (ResNet-18). One thread, and a block other than a
    ``float_block`` (an int8 one's emulated dot: not measured in a model), keep the sum."""
    op, knobs = candidate.op, candidate.knobs
    if candidate.isa == TILE_ISA:
        seconds = tile_time(candidate.schedule, candidate.threads).predicted_seconds   # the busiest thread's
        peak = _peak(TILE_ISA, "int8" if op.quant is not None else op.dtype)
        return {"efficiency": op.flops / (peak * seconds), "stream_seconds": 0.0,
                "predicted_seconds": seconds}
    if is_table_lookup(candidate) or is_binary(candidate):
        efficiency = lut_efficiency(candidate) if is_table_lookup(candidate) else binary_efficiency(candidate)
        return {"efficiency": efficiency, "stream_seconds": 0.0,
                "predicted_seconds": op.flops / (_peak(candidate.isa, "int8") * efficiency)}
    roles = _operands(op)[0]
    vector = lanes(op, candidate.isa)
    taps, planes = knobs.weights == "taps", knobs.weights == "planes"
    laned, other = ((knobs.pixel_block, knobs.channel_block) if taps or planes     # lanes along the pixels
                    else (knobs.channel_block, knobs.pixel_block))
    vectors = _ceil(laned, vector)
    accumulators = other * vectors
    along = Roles.of(op, knobs.pixel)
    pixels = along.extent(op, along.pixel)
    efficiency = min(1.0, accumulators / chains(candidate.isa))
    spare = (registers(candidate.isa) - accumulators
             - operand_registers(candidate.isa, knobs.weights, vectors, knobs.weight_format))
    # an emulated dot's operand registers are the ones it was measured to need: none more must stay spare
    needed = 0 if emulates_dot(candidate.isa, knobs.weights) else tight_spare(candidate.isa)
    memory = reads_memory(candidate)          # a weight vector read by each update: no register to spill
    if memory:
        efficiency *= MEMORY_OPERAND
    if ((spare < needed and not memory)                                          # the compiler spills
            or spills_accumulators(candidate, accumulators) or spills_unrolled(candidate)
            or spills_strided(candidate, accumulators)):
        efficiency *= TIGHT
    # loads per multiply-add: a broadcast per block row and a vector per block column, shared by the block;
    # planes: each channel's own plane, a vector per accumulator and the channel's weight broadcast
    loads = accumulators + other if planes else other + vectors
    efficiency *= min(1.0, (FLOAT_LOADS if float_block(candidate) else 1.0) * accumulators / loads)
    if rolled(candidate):
        efficiency *= accumulators / (accumulators + 1)       # a loop step per reduction step
    efficiency *= laned / (vectors * vector)                                         # masked lanes
    efficiency *= _edges(op.channels, knobs.channel_block) * pixel_edges(candidate, pixels, vectors)
    efficiency /= tail(candidate) * channel_tail(candidate)  # partial blocks: their guarded copies
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
    if (taps or knobs.weights == "dot") and candidate.isa in EMULATED_DOT_OPS:
        update, activation, weight = (WIDE_DOT_OPS if knobs.weight_format == "s16" else EMULATED_DOT_OPS)[
            candidate.isa]
        row, column = (weight, activation) if taps else (activation, weight)    # a broadcast, a vector
        efficiency *= accumulators * update / (accumulators * update + other * row + vectors * column)
        if knobs.weight_format == "int8" and "s16" in weight_formats(op, candidate.isa, "dot"):
            efficiency *= NARROW_DOT
    depth = math.prod(op.extent(d) for d in op.reduction_dims) // rc * min(rc, knobs.cache_block or rc)
    efficiency *= depth / (depth + reload_steps(op, knobs))
    if knobs.cache_block and passes_cost(candidate):
        efficiency *= EMULATED_PASSES
    # the innermost outer loop decides which weights must stay in cache while it runs: one channel
    # block's (it runs over positions), all channels' or a panel's (it runs over channel blocks), or none
    # (a cache block)
    innermost = knobs.outer[-1] if knobs.outer else ""
    channels = (op.channels if innermost == f"{roles.channel}_o" else knobs.channel_panel
                if innermost == panel_loops(roles.channel)[1] else knobs.channel_block)
    weight_bytes = depth * channels * element_bytes(op)
    l1, l2 = _caches()["L1"], _caches()["L2"]
    level = next((c for c in machine_profile().caches if c.name == "L1"), None)
    stays = weights_stay_in_l1(op, knobs, weight_bytes, level) if level else weight_bytes <= l1
    # a cache block of the reduction that keeps a dot block's weights in L1 gains it nothing where its
    # dots hide their L2 latency (``passes_cost``), and the block's sums go to memory between the passes
    # and through an epilogue pass after the nest
    stays = stays and not (knobs.cache_block and passes_cost(candidate))
    # s16 weights, multiplied from memory, run as fast from L2: a 3x3 64->64 conv at 56x56 ran its 3x32
    # block (36 KB of s16 weights a channel block) in 1.72 ms, its 4x16 (18 KB) in 1.85 (AMD EPYC Zen 3)
    stays = stays or knobs.weight_format == "s16"
    efficiency *= (NO_FIT if innermost == f"{roles.rc}_o" else L1_FIT if stays
                   else l2_fit(candidate) * l2_weight_share(candidate))
    scattered = 0 if streams_in_any_order(op) else out_of_order(op, knobs, channels_first=planes)
    stream = stream_seconds(candidate, l2 // 2, 1 + SCATTER * scattered)
    strided = strided_seconds(op, knobs, depth)
    residual = {"residual_seconds": residual_seconds(op, knobs)} if candidate.residual else {}
    compute = op.flops / (_peak(candidate.isa, op.dtype if op.quant is None else "int8") * efficiency)
    busiest = imbalance(candidate, candidate.threads) / candidate.threads     # its share of the compute
    memory = (stream + strided + sum(residual.values())) / candidate.threads
    if candidate.threads == 1 or not float_block(candidate):
        return {"efficiency": efficiency, "stream_seconds": stream, "strided_seconds": strided, **residual,
                "predicted_seconds": compute * busiest + memory}
    again = reread_seconds(candidate, l2 // 2, 1 + SCATTER * scattered) / candidate.threads
    return {"efficiency": efficiency, "stream_seconds": stream, "strided_seconds": strided, **residual,
            "predicted_seconds": max(compute * busiest, again) + memory - again}


def passes_cost(candidate: Candidate) -> bool:
    """Whether a cache block of the reduction costs a dot block more than it gains (``EMULATED_PASSES``, its
    weights priced from L2): an emulated dot, whose widening of each weight vector (``EMULATED_DOT_OPS``)
    hides their L2 latency, and a native int8 one on vectors this machine runs as two halves
    (``split_vectors``; bfloat16's pair dot not measured). On an AMD EPYC Zen 4 (1 thread, kernel only,
    medians of interleaved calls, L2 warm / the caches overwritten with 64 MB before each call), ResNet's
    int8 3x3 256->256 conv at 14x14 ran the first choice with 64-channel cache blocks (7x32, weights in L1)
    in 503-532 / 646 us, the same block without them (weights from L2) in 467-479 / 561 us and 4x64 in
    472-496 / 532; 512->512 at 7x7 857 / 979 us against 490 / 596 for 4x64 without them."""
    weights, isa = candidate.knobs.weights, candidate.isa
    return emulates_dot(isa, weights) or (weights == "dot" and candidate.op.quant is not None
                                          and split_vectors(isa))


def split_vectors(isa: str) -> bool:
    """Whether this machine runs ``isa``'s vectors as two halves: its measured float32 peak (the machine
    profile's) is below ``SPLIT`` times that of the ISA of half its lanes (AMD EPYC Zen 4: AVX-512 117,
    AVX2 118 GFLOP/s; the Xeon of tests/data/machine_profile.json 170 and 85)."""
    if isa not in ISAS:                 # AMX tiles: no vectors to split
        return False
    narrower = next((name for name in ISA_PREFERENCE if ISAS[name].lanes * 2 == ISAS[isa].lanes), None)
    peaks = machine_profile().peaks["float32"]
    return narrower in peaks and isa in peaks and peaks[isa] < SPLIT * peaks[narrower]


def float_block(candidate: Candidate) -> bool:
    """Whether a candidate is a float32 register block with the lanes along the channels (plain or packed
    weights) on an ISA of ``FLOAT_BLOCK_ISAS``."""
    op = candidate.op
    return (candidate.isa in FLOAT_BLOCK_ISAS and op.quant is None and op.dtype == "float32"
            and candidate.knobs.weights in WEIGHTS[:2])


def pixel_edges(candidate: Candidate, pixels: int, vectors: int) -> float:
    """The share of a register block's time along its ``pixels`` positions that does work: ``_edges``, the
    last, partial block costing a whole one; for a ``float_block`` the partial block costs its own positions
    but no fewer than keep ``chains`` accumulators (``vectors`` each) in flight: fewer wait on the FMA
    latency. On a shared 2-core AMD EPYC Zen 3 (kernel only, medians of 9 interleaved rounds under
    ``chrt -f 10``, 1 thread) ResNet-50's 3x3 convs ran 5x16 blocks at 1.05x (56x56: 59 of 56 positions
    so) and 1.045x (28x28: 29 of 28) the time of 4x16 (eleventh session); its 256->1024 1x1 conv at 14x14
    ran 5x16 blocks along the rows (14 of 14) 1.02-1.04x faster than 4x16 along the fused positions
    (196 of 196) and 5x16 there (199 of 196); at 7x7 4x16 along the rows (8 of 7) 1.15-1.2x slower than
    5x16 along the fused positions (49 of 49)."""
    block = candidate.knobs.pixel_block
    whole, rest = divmod(pixels, block)
    if not float_block(candidate) or not rest:
        return _edges(pixels, block)
    return pixels / (whole * block + min(block, max(rest, _ceil(chains(candidate.isa), vectors))))


def l2_weight_share(candidate: Candidate) -> float:
    """The share of its ISA's peak that a float32 register block whose weights come from L2 keeps while L2
    delivers them (a ``float_block``; else 1): each multiply-add reads a weight vector that the
    block's ``pixel_block`` positions share, ``lanes * 4 / pixel_block`` bytes, against the machine profile's
    L2 bandwidth. On a shared 2-core AMD EPYC Zen 3 (L2 85 GB/s, peak 104 GFLOP/s) a 2x32 block needs
    104 GB/s, 4x16 52: ResNet-50's 3x3 256->256 conv at 14x14 (2.4 MB of weights) ran 2.55 ms with 2x32
    blocks and 2.15 ms with 5x16 (1 thread; 2 threads 1.34 -> 1.12 ms), 128->128 at 28x28 2.42 -> 2.27 ms
    with 4x16, 256->256 stride 2 from 28x28 2.89 -> 2.59 ms with 5x16 (kernel only, medians of 9 interleaved
    rounds under ``chrt -f 10``). Not priced on AVX-512 (not measured) nor for a quantized block (its
    emulated dot's own rate)."""
    op, knobs, isa = candidate.op, candidate.knobs, candidate.isa
    if not float_block(candidate):
        return 1.0
    vector = lanes(op, isa)
    demand = _peak(isa, op.dtype) / (2 * vector) * vector * element_bytes(op) / knobs.pixel_block
    return min(1.0, machine_profile().bandwidth["L2"].gbs * 1e9 / demand)


def l2_fit(candidate: Candidate) -> float:
    """The efficiency of a block whose weights come from L2: ``L2_FIT``, but 1 for a channel panel's
    ``float_block`` (``l2_weight_share`` prices its L2 reads): the panel's packed weights pass under every
    row in their memory order, the prefetchers ahead of them. ResNet-50's 1x1 1024->256 conv at 14x14 on
    the AMD EPYC Zen 3 (1 thread, ``chrt -f 10``): 32-channel panels of 5x16 blocks 1.038 ms by minimum
    kernel-only against 1.088 for the 128-deep cache blocks (the first choice before), the channel blocks
    outermost without panels 1.045; in the model, in place, 0.91-0.97x the cache blocks' time by minimum."""
    return 1.0 if candidate.knobs.channel_panel and float_block(candidate) else L2_FIT


def imbalance(candidate: Candidate, threads: int) -> float:
    """The busiest thread's share of a register block's work over an even share (1: the parallel loop's
    iterations split evenly over ``threads``, or one thread)."""
    knobs = candidate.knobs
    if threads == 1 or not isinstance(knobs, Knobs) or not knobs.parallel:
        return 1.0
    extent = outer_extents(candidate.op, knobs)[knobs.parallel]
    return -(-extent // threads) * threads / extent


def _reads(candidate: Candidate) -> tuple:
    """What ``figures`` reads of a candidate: all of it but the reduction order and which loops are
    unrolled (only whether the innermost reduction loop is, whether an emulated dot unrolls several, and
    whether it unrolls a strided window's taps); candidates that differ only there share their figures."""
    knobs = candidate.knobs
    if candidate.isa == TILE_ISA or is_table_lookup(candidate) or is_binary(candidate):
        return candidate.op, candidate.isa, knobs, candidate.threads
    return (candidate.op, candidate.isa, knobs.pixel_block, knobs.channel_block, knobs.weights,
            knobs.cache_block, rolled(candidate), spills_unrolled(candidate), strided_taps(candidate),
            knobs.outer, knobs.pixel, knobs.weight_format, candidate.residual, candidate.threads)


_recent: list = [None, None, {}]     # the last ranking's profile, first op and figures by ``_reads``


def _figured(candidates: Sequence[Candidate]) -> list[tuple[Candidate, tuple[tuple[str, float], ...]]]:
    """Each candidate with the heuristic's figures (computed once per distinct ``_reads``; those of the
    last ranking of the same op on the same profile taken from it: ``first_reading`` ranks the space
    that ``first_choice`` did)."""
    profile, op = measured_profile(), candidates[0].op if candidates else None
    known = _recent[2] if _recent[0] is profile and _recent[1] is op else {}
    _recent[:] = [profile, op, known]
    keys = [_reads(candidate) for candidate in candidates]
    looked_up = _ranking_profile.set(profile)     # once, not per candidate
    try:
        for candidate, key in zip(candidates, keys):
            if key not in known:
                known[key] = tuple(figures(candidate).items())
    finally:
        _ranking_profile.reset(looked_up)
    return [(c, known[key]) for c, key in zip(candidates, keys)]


def rank(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The candidates with the heuristic's figures, fastest predicted first (ties: ``_plain_last``,
    ``_taps_rolled``, then their order)."""
    scored = [replace(c, model=model) for c, model in _figured(candidates)]
    return sorted(scored, key=lambda c: (c.figures["predicted_seconds"], *_ties(c)))


def best(candidates: Sequence[Candidate]) -> Candidate | None:
    """``rank(candidates)[0]`` without sorting them all (None if there are none)."""
    scored = _figured(candidates)
    if not scored:
        return None
    candidate, model = min(scored, key=lambda pair: (dict(pair[1])["predicted_seconds"], *_ties(pair[0])))
    return replace(candidate, model=model)
