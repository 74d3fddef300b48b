"""The tile model: an AMX candidate's predicted time from what its tile kernel executes.

The kernel model (``lo.kernel_model``) prices SIMD kernels; an AMX tile kernel (``targets/x86/tiles.py``)
is priced here from its plan (``tile_plan``: blocks, taps, K chunks, tiles per block) and this
machine's measured figures (``lo.machine_profile()``: the AMX peak, cache sizes and read bandwidths):

* dots: every tile dot product the kernel issues (the shifted last blocks and a block's unused
  rows, columns and K bytes included), each at the measured peak's time of a full 16 x 16 x 64-byte
  dot;
* loads: every tile the kernel loads (1 KB at most), each from the cache level that holds the
  operand between two uses of it: a channel block's weights (channel blocks outside the pixels) or
  all of a group's weights (pixels outside) for the B tiles; a block's window of activations, else
  all activations (each channel block reads them again) for the A tiles. A set within half of L1
  (A and B tiles share it) comes from L1; a larger one from the first level that holds it, but for
  the share the level inside holds (``min(1, capacity / set)``), at each level's read bandwidth;
  plus, when a call's inputs and output do not stay in L2 between calls, the inputs once from the
  level beyond (``cold_seconds``; VGG conv5_1's 2.4 MB of weights);
* epilogue: ``EPILOGUE_CYCLES`` per output element written (the quantized epilogue of a tile
  store: compensation, bias, requantization, narrowing), at the clock implied by the VNNI peak;
* gathered patches (``targets.x86.tiles.patches``): ``GATHER_CYCLES`` per run of consecutive values
  copied into the patch buffer (once per pixel block, again for each channel block when the channel
  blocks are outside), which then holds the A tiles' rows (from L1).

Dots and loads overlap (the tile unit runs while the next tiles load); the epilogue does not. On
several threads the time is one thread's (``threads``): an even share of the blocks, and the operand
bytes it reads itself: a pixel split reads all the weights on every thread and its share of the
activations, a channel split its share of the weights and all the activations (each core's L1 and L2
its own). ResNet-18's 512-channel 3x3 int8 layer at 7x7 on 2 threads: pixels split, 2.36 MB of weights
read by each thread from L3, predicted 204.5 us, channels split 1.18 MB, 72.0 us; measured (2-core
Xeon with AMX, others' processes on it, nice -15, minimum of 25 interleaved rounds) 85.2 and 64.9 us
(one thread 129.4 us). Before, the two splits tied on one core's time and the pixel split, listed
first, ran. The busiest thread's share (``ceil(units / threads)``: 7 lines of pixel blocks split 4 and
3) was tried too: it moved ResNet-50's 1x1 int8 layers to channel splits on differences of 2-7% (13
pixel units against 16 channel units), which ran 1.7-1.8x slower (1024->256 at 14x14: 44.1 -> 73.8
us; 512->256 at 28x28: 81.9 -> 147.0 us, same run), so not kept: the channel split costs something
this model does not see, which only the duplicated weights outweigh.

On this project's Xeon, against the minimum times of the 16 one-thread AMX trials of VGG conv5_1
and ResNet-50 conv2_x int8 that bench_tune.py and tune_layers.py logged on 2026-11-23 (other
processes 0-23% of the CPU), it predicted 0.77-1.11x the measured times, with a Spearman
correlation of 0.98 (VGG) and 0.90 (conv2_x) over each layer's 8; the tile fill alone had predicted
0.24 ms for the 0.76 ms VGG kernel (its 19-pixel rows fill 2 tiles of 16 rows) and the same time for
pixels-outside blocks, whose weights come from beyond L2 (1.10 ms), as for those that keep them in L2.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ...machine import machine_profile
from ...schedule import Schedule
from .amx import MAX_COLSB, TILE
from .isa import TILE_ISA
from .tiles import TilePlan, tile_plan

EPILOGUE_CYCLES = 1.0      # cycles per output element of the epilogue: fitted to ResNet-50 conv2_x int8,
                           # whose AMX kernels ran 0.09-0.135 ms, their dots and loads 0.03-0.06 ms of it
GATHER_CYCLES = 2.5        # cycles per gathered run: ResNet-50 conv1 int8 (7 runs of 21 bytes a pixel)
                           # spent ~0.045 ms of its 0.25-0.29 ms kernel gathering (perf, 2026-11-23)
VNNI_OPS_PER_CYCLE = 256   # int8 ops per cycle of the VNNI peak: 2 vpdpbusd x 16 lanes x 4 products x 2
LEVELS = ("L1", "L2", "L3", "DRAM")


@dataclass(frozen=True)
class TileTime:
    """The tile model's figures of one AMX kernel (seconds, one of its threads')."""

    dots: float            # tile dot products at the AMX peak
    loads: float           # tile loads from the levels that hold their operands
    epilogue: float        # the output elements' epilogue
    gather: float = 0.0    # copying the gathered patches

    @property
    def predicted_seconds(self) -> float:
        """Dots and loads overlapped, then the epilogue and the gather."""
        return max(self.dots, self.loads) + self.epilogue + self.gather


@lru_cache(maxsize=1)
def _levels() -> tuple[tuple[str, float, float], ...]:
    """(level, capacity in bytes, read bandwidth in bytes/s) of this machine's levels, inside out;
    L1's capacity is half of it (the A and B tiles share it), DRAM's unbounded."""
    profile = machine_profile()
    sizes = {c.name: c.size for c in profile.caches}
    found = []
    for name in LEVELS:
        if name not in profile.bandwidth:
            continue
        capacity = sizes.get(name, float("inf")) if name != "DRAM" else float("inf")
        found.append((name, capacity / 2 if name == "L1" else capacity, profile.bandwidth[name].gbs * 1e9))
    return tuple(found)


def load_seconds(loaded: float, working_set: float) -> float:
    """Seconds to load ``loaded`` bytes of an operand whose reused set is ``working_set`` bytes: from
    the first level that holds the set, but for the share the level inside it holds."""
    levels = _levels()
    inside = None
    for _, capacity, bandwidth in levels:
        if working_set <= capacity:
            if inside is None:
                return loaded / bandwidth
            share = inside[0] / working_set
            return loaded * (share / inside[1] + (1 - share) / bandwidth)
        inside = (capacity, bandwidth)
    return loaded / levels[-1][2]


def _clock() -> float:
    """Cycles per second implied by the measured VNNI int8 peak."""
    return machine_profile().peak("avx512", "int8") * 1e9 / VNNI_OPS_PER_CYCLE


def tile_time(schedule: Schedule, threads: int = 1) -> TileTime:
    """The tile model's time of ``schedule``'s AMX kernel on ``threads`` threads: one thread's, an even
    share of the blocks and the bytes it reads (``TileError`` if it has no AMX kernel)."""
    quant = schedule.op.quant
    return _time(tile_plan(schedule), quant is not None, 1 if quant is not None and quant.requantized else 4,
                 threads)


def thread_share(plan: TilePlan, threads: int) -> float:
    """The share of the blocks one of ``threads`` threads runs: an even share where the plan splits its
    blocks (``plan.units``) over threads, else all."""
    return 1.0 if plan.parallel is None else 1 / threads


def _time(plan: TilePlan, quantized: bool, output_bytes: int, threads: int) -> TileTime:
    s = plan.shape
    share = thread_share(plan, threads)
    weight_share = share if plan.parallel == "channels" else 1.0       # the weights this thread reads
    activation_share = share if plan.parallel == "pixels" else 1.0
    steps = s.row_taps * s.column_taps * len(s.starts)            # tap-chunks each block reduces over
    blocks = s.groups * s.lines * plan.pixel_blocks * plan.channel_blocks * share
    dot_ops = 2 * TILE * TILE * s.values                          # a full dot's operations
    peak = machine_profile().peak(TILE_ISA, "int8" if quantized else "bfloat16") * 1e9
    dots = blocks * steps * plan.row_tiles * plan.col_tiles * dot_ops / peak
    b_set = (plan.col_tiles if plan.channels_outer else s.channel_tiles * weight_share) * steps * s.tile_bytes
    b = load_seconds(blocks * steps * plan.col_tiles * s.tile_bytes, b_set)
    stride = 1 if s.gemm else s.cols.stride
    width = (plan.block_pixels - 1) * stride + (s.cols.taps - 1) * s.cols.dilation + 1
    window = (1 if s.gemm else s.rows.taps) * width * s.channels * s.element
    rows, cols = s.padded
    stored = s.pixels if s.gemm else s.batch * rows * cols                 # activation pixels stored
    activations = stored * s.channels * s.element * activation_share
    a_set = window if window <= _levels()[0][1] else activations
    if s.patch:                      # the A tiles come from the block's gathered patches
        a_set = plan.block_pixels * s.patch_pitch * s.element
    a = load_seconds(blocks * steps * plan.row_tiles * min(TILE, s.pixels) * MAX_COLSB, a_set)
    outputs = s.groups * s.lines * s.pixels * s.kg * share
    weights = s.groups * s.channel_tiles * steps * s.tile_bytes * weight_share
    call = weights + activations + outputs * output_bytes
    gathered = 0.0
    if s.patch:
        # a block's patch is gathered once per channel block (channels outer) or once (pixels outer): each
        # thread of a channel split gathers every pixel block's when the pixels are outside
        mine = 1.0 if plan.parallel == "channels" and not plan.channels_outer else share
        per_block = plan.channel_blocks if plan.channels_outer else 1
        packs = s.groups * s.lines * plan.pixel_blocks * per_block * mine
        gathered = packs * plan.block_pixels * s.runs[0] * GATHER_CYCLES / _clock()
    return TileTime(dots, a + b + cold_seconds(weights + activations, call),
                    outputs * EPILOGUE_CYCLES / _clock(), gathered)


def cold_seconds(inputs: float, call: float) -> float:
    """Seconds to read a call's ``inputs`` bytes once from beyond L2 when the ``call``'s bytes (inputs
    and output) do not stay in L2 between calls (0 when they do)."""
    for name, capacity, bandwidth in _levels():
        if call <= capacity:
            return 0.0 if name in ("L1", "L2") else inputs / bandwidth
    return inputs / _levels()[-1][2]
