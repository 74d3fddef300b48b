"""The cuda target's search rules (``SearchRules``): the GPU presets' knobs as candidates, legal by
construction, ranked by a cost model of waves, occupancy and bytes moved per level.

Candidates: a float32 op's SIMT presets (``gpu_tiled``, ``gpu_staged``: threads and register blocks,
the staged step's depth); a float16, bfloat16 or quantized op's tensor-core presets that have an entry
of its types (``preset_entry``: ``gpu_wgmma`` for float16 on ``sm_90``, ``gpu_mma`` on ``sm_80`` and
newer, ``gpu_wmma`` for float16 and bfloat16: block and warp (warpgroup) tiles, depth, stages, split-K,
which a quantized op takes on an int32 output only; ``gpu_wgmma`` also, for a Matmul's or Gemm's 2-D
operands and a conv's (boxes of output pixels, ``pixel_boxes``; a quantized conv's padding, which TMA
fills with 0, added back in the epilogue: ``padding_sums``), with its tiles copied by the
tensor memory accelerator, ``engine="tma"``: no copy instructions in the threads' steps, first among
equals); a depthwise conv's, the depthwise family's runs of 1 and 2 pixels by two blocks
(``DepthwiseKnobs``, ``depthwise_work``); a decode-shaped op the GEMV family takes (``gemv.check``: a GEMV or
up to 8 rows, float16, int8 or ternary weights), that family's warps, columns and k splits, each with
its activations staged in shared memory and not (``GemvKnobs``, ``gemv_work``: the staging's cost per
block fitted on the H200's times, ``GEMV_STAGED_CYCLES``). Each knob is clamped to the op as the
preset clamps it (a 128-row block of a 64-channel conv is a 64-row one), so no two candidates build
the same kernel; none asks for more than the architecture's shared memory per block, 1024 threads or
``MAX_ACCUMULATORS`` accumulator registers per thread (spills) or more registers than an SM has.

The cost model (``Gpu``: the device's multiprocessors and clock where a GPU is present, else the
architecture's data-centre part, ``ARCH``): blocks are resident ``occupancy`` at a time per SM (shared
memory, threads and registers per SM), so the grid runs in ``waves`` over the SMs; each wave takes the
longest of its blocks' arithmetic (tensor-core or FFMA rate, less with fewer warps or independent
accumulators per thread than the SM needs to hide latency), their shared-memory/L1 reads, their global
loads from L2 (each block loads its inputs' tiles of its reduction share: ``l2_bytes``) and, tensor-core
kernels, the instructions their warps issue (``step_instructions``: the copies' code as the printer's
kernels compile, the products); the whole kernel takes at least its device-memory bytes (inputs once,
the output once per split-K share) at the HBM rate; plus a launch (more in clusters), each block
round's pipeline fill and, split-K, the atomic adds of its shares and the output's zeroing after the
products (``atomic_bytes_per_s``). A TMA-copied conv's blocks are its pixel boxes (``pixel_box``, overhanging
where they do not tile the output). The calibrated figures (launch, clock, issue and tensor rates, L2,
atomics, instruction counts) are ``costs.COSTS``, each measured, counted or fitted on recorded H200 runs
(``calibration``); the search prices its tensor-core candidates by this model (``own_seconds``: the
tuning table's model column and its Spearman figure against the measured times). The calibration rows
are float16 kernels; a bfloat16 or int8 candidate is priced by the same figures with its element bytes,
int8's doubled tensor rate (``device.INT8_PER_F16``) and, where the weights' zero point may be nonzero,
the activation sums' products (unmeasured extrapolations: the ranking, not the absolute time, is what
they are for). Split-K shares a tile's reduction among blocks: a batch-1 conv whose tiles fill a few SMs
ranks split-K first; a large GEMM, whose tiles fill the SMs many times, ranks the large tiles first
(fewer bytes per flop from L2).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from functools import cache

from ...dataflows import (
    L2_LINE_BYTES,
    clamp_tile,
    depthwise_block,
    gpu_depthwise,
    gpu_gemv,
    gpu_mma,
    gpu_rows,
    gpu_staged,
    gpu_tiled,
    gpu_wgmma,
    gpu_wmma,
    pixel_box,
    tensor_entry,
    wgmma_instruction,
    wgmma_types,
)
from ...depthwise_roles import DepthwiseRoles
from ...expr import linear_terms
from ...gemv_roles import GemvRoles
from ...ops import Op
from ...schedule import SWIZZLE_WIDTHS, Schedule, ScheduleError
from ..search import KERNEL, Candidate, SearchRules
from . import depthwise, device, gemv, halves, output_types, specialize
from .costs import COSTS, GROUP_BYTES, Costs, copy_instructions, entry_instructions
from .instructions import WGMMA_F16_F32, MatrixInstruction, instruction
from .printer import CUDA
from .quantized import needs_activation_sums
from .target import SHARED_BYTES_PER_BLOCK
from .tensor_printer import (
    REGISTERS_PER_SM,
    TensorPrinter,
    persistent_shared,
    ring_bytes,
    row_staging_bytes,
    staging_buffers,
    staging_fits,
    store_staging_bytes,
)

WARP = 32
MAX_THREADS = 1024                 # threads per block (every architecture here)
MAX_BLOCKS_PER_SM = 32
MAX_ACCUMULATORS = 128             # float32 accumulators per thread (more spill beside the fragments)
OVERHEAD_REGISTERS = 40            # per thread: addresses, loop counters, fragments in flight
STATIC_SHARED = 48 * 1024          # the SIMT presets' staged tiles are static shared memory
FILL_CYCLES = 800                  # a block round's first global loads (the pipeline's fill)
LOAD_LATENCY = 600                 # cycles of one step's global loads (a ring of s stages: s - 1 in flight)
STEP_CYCLES = 40                   # one reduction step's barrier and address arithmetic
L1_BYTES_PER_CLOCK = 128           # shared memory / L1 per SM per clock
SCHEDULERS = 4                     # warp schedulers per SM, each issuing one instruction a cycle at most
BUSY_WARPS = 8                     # warps per SM the tensor cores (and FFMA pipes) need to stay busy
BUSY_ACCUMULATORS = 8              # independent FFMAs per SIMT thread that hide the FFMA latency
COST_MODEL = "cost model"          # the family of tensor-core candidates this model prices (model_seconds)


@dataclass(frozen=True)
class Arch:
    """An architecture's figures (its data-centre part: H100/H200, L40S, A10, A100, T4)."""

    multiprocessors: int
    clock_mhz: float
    shared_per_sm: int             # bytes of shared memory per SM
    threads_per_sm: int
    hbm_bytes_per_s: float
    tensor_flops_per_clock: int    # dense float16 tensor-core flops per SM per clock, float32 sums


ARCH = {"sm_90": Arch(132, 1980, 228 * 1024, 2048, 4.8e12, 4096),
        "sm_89": Arch(142, 2520, 100 * 1024, 1536, 0.864e12, 512),
        "sm_86": Arch(72, 1695, 100 * 1024, 1536, 0.6e12, 512),
        "sm_80": Arch(108, 1410, 164 * 1024, 2048, 2.0e12, 2048),
        "sm_75": Arch(40, 1590, 64 * 1024, 1024, 0.32e12, 512)}
TENSOR_PRESETS = {"gpu_wgmma": gpu_wgmma, "gpu_mma": gpu_mma, "gpu_wmma": gpu_wmma}
SIMT_PRESETS = {"gpu_tiled": gpu_tiled, "gpu_staged": gpu_staged}
WGMMA_KNOBS = ("swizzle", "specialize", "persistent", "cluster", "padded", "halves")
HALVES = (2, 3)                    # the last steps a one-wave candidate multiplies in halves (``halves``)
PAIRS = ((1, 2), (2, 1))           # a persistent walk's clusters: pairs along the columns (A shared), rows
BLOCKS = (32, 64, 128, 192, 256)
WARPS = ((1, 1), (1, 2), (2, 1), (2, 2), (1, 4), (4, 1), (2, 4), (4, 2), (3, 1))
DEPTHS = (32, 64)                  # elements of 16 bits a tile row holds per step (int8: twice as many)
# deeper rings first: they win ties
# gpu_wgmma's: BERT on 64 x 64 TMA tiles, specialized, one launch with the L2 flushed (H200, consumers
# unrolled over the ring): 10.3 us at 14 stages, 10.5 at 11, 11.8 at 8, 15.4 at 5, 18.2 at 4 (cuBLAS 11.0)
STAGES = {"gpu_wgmma": (14, 11, 8, 5, 4, 3), "gpu_mma": (4, 3, 2), "gpu_wmma": (3, 2)}
SPLITS = (1, 2, 4, 8, 16)
# depthwise runs of 4 and 8 pixels were 1.3-2.1x slower than runs of 2 on each of MobileNetV2's layers on
# an H200 (bench_cuda_depthwise.py), so only runs of 1 and 2 are candidates; None: the default block
DEPTHWISE_RUNS, DEPTHWISE_THREADS_W = (1, 2), (None, 16)
DEPTHWISE_REGISTERS = ((1, 46), (2, 62), (4, 109), (8, 154))    # (run, ptxas's registers): 3x3 float16, sm_90
PRICED = (*TENSOR_PRESETS, "gpu_depthwise", "gpu_gemv")    # the presets this cost model prices
# a decode GEMV's candidates: warps a block, outputs a warp, k split over a block's warps, staged or not
GEMV_WARPS, GEMV_COLUMNS, GEMV_SPLITS = (4, 8), (1, 2, 4), (1, 2)
# warp instructions a lane issues per 16-byte weight vector and row (the products; i2_s: 16 LOP3 + 16
# dp4a, float16: 4 conversions of pairs + 8 FMAs, int8: 4 dp4a), and per activation vector and row
# where the lane sums the activations itself (i2_s unstaged: 4 dp4a), counted in the printed kernels
GEMV_PRODUCT_INSTRUCTIONS = {"i2_s": 32, "float16": 12, "int8": 4}
GEMV_SUM_INSTRUCTIONS = 4
GEMV_REGISTERS = 48                # ptxas's figure of a one-column kernel, sm_90; 12 more a column
# what staging the activations (``gpu_gemv(stage=True)``) cost a block on an H200, one resident block after
# another: fitted on the stream-scope times of bench_cuda_decode.py at the three decode shapes (staged
# minus unstaged twin over the blocks an SM runs; 2026-11-29): i2_s 0.8-2.6 us a block (median 1.4), float16
# 0.05-0.08 us; in cycles of the model's clock. Why i2_s pays so much more is not established (the copy
# and the sums' barrier come before its weights arrive in the SASS; ncu: more long-scoreboard stalls).
GEMV_STAGED_CYCLES = {"i2_s": 2200.0, "float16": 110.0, "int8": 110.0}
THREADS_X, THREADS_Y, REGS, SIMT_DEPTHS = (8, 16, 32), (4, 8, 16), (1, 2, 4, 8), (8, 16, 32)


@dataclass(frozen=True)
class Gpu:
    """What the cost model reads of the GPU: the device's SMs and clock where one is present, else
    the architecture's (``ARCH``)."""

    arch: str
    multiprocessors: int
    clock_hz: float
    figures: Arch



@cache
def gpu_of(arch: str) -> Gpu:
    """The ``Gpu`` a search on ``arch`` models: this machine's device where it is of ``arch``."""
    figures = ARCH[arch]
    if device.present() and device.arch() == arch:
        return Gpu(arch, device.multiprocessors(), device.clock_mhz() * 1e6, figures)
    return Gpu(arch, figures.multiprocessors, figures.clock_mhz * 1e6, figures)


@dataclass(frozen=True)
class TensorKnobs:
    """A tensor-core candidate: ``preset`` (``gpu_wgmma``, ``gpu_mma``, ``gpu_wmma``) with its tiles, as
    the preset clamps them to the op, the name of the entry it tensorizes onto (``preset_entry``;
    gpu_wgmma's N follows its block) and its copy engine."""

    preset: str
    block_m: int
    block_n: int
    warps_m: int
    warps_n: int
    depth: int
    stages: int
    split_k: int
    entry: str
    engine: str = "threads"        # who copies the tiles (``Schedule.stage``): the threads or TMA
    swizzle: int = 32              # bytes of the tiles' swizzled rows (``Schedule.swizzle``; TMA only)
    specialize: bool = False       # a producer warpgroup copies (``Schedule.specialize``; TMA only)
    persistent: bool = False       # one block a SM walks the tiles (``Schedule.persistent``; specialized)
    cluster: tuple[int, int] = (1, 1)    # a cluster's blocks along the rows, columns (``Schedule.cluster``)
    padded: bool = False           # B, the weights, in rows of whole L2 lines (``gpu_wgmma``'s; TMA only)
    halves: int = 0                # the last steps multiplied in halves (``Schedule.halves``; one wave)

    @property
    def pixel_block(self) -> int:
        return self.block_m

    @property
    def channel_block(self) -> int:
        return self.block_n

    @property
    def instruction(self) -> MatrixInstruction:
        return instruction(self.entry)

    @property
    def threads(self) -> int:
        return self.instruction.lanes * (self.warps_m * self.warps_n + self.specialize)

    def as_dict(self) -> dict:
        return asdict(self)

    def arguments(self) -> dict:
        """The preset's keyword arguments: gpu_wgmma's own knobs only where they differ from the
        defaults (the other presets lack them)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("preset", "entry")
                and (f.name not in WGMMA_KNOBS or getattr(self, f.name) != f.default)}

    def schedule(self, op: Op, isa: str) -> Schedule:
        return TENSOR_PRESETS[self.preset](op, **self.arguments())

    def work(self, op: Op, gpu: Gpu, costs: Costs = COSTS) -> Work:
        return tensor_work(op, self, gpu, costs)


@dataclass(frozen=True)
class SimtKnobs:
    """A float32 candidate: ``preset`` (``gpu_tiled``, ``gpu_staged``) with its threads and register
    blocks (``depth``: the staged step, 0 for ``gpu_tiled``), as the preset clamps them to the op."""

    preset: str
    threads_x: int
    threads_y: int
    regs_x: int
    regs_y: int
    depth: int

    @property
    def pixel_block(self) -> int:
        return self.threads_x * self.regs_x

    @property
    def channel_block(self) -> int:
        return self.threads_y * self.regs_y

    @property
    def threads(self) -> int:
        return self.threads_x * self.threads_y

    def as_dict(self) -> dict:
        return asdict(self)

    def schedule(self, op: Op, isa: str) -> Schedule:
        knobs = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("preset", "depth")}
        if self.preset == "gpu_staged":
            knobs["depth"] = self.depth
        return SIMT_PRESETS[self.preset](op, **knobs)

    def work(self, op: Op, gpu: Gpu) -> Work:
        return simt_work(op, self, gpu)


@dataclass(frozen=True)
class Work:
    """One block's work and the grid's, as the cost model counts them."""

    blocks: int
    threads: int                   # per block
    registers: int                 # per thread
    shared: int                    # bytes of shared memory per block
    flops: float                   # per block
    steps: int                     # reduction steps per block (a barrier each)
    l1_bytes: float                # per block: shared-memory / L1 reads
    l2_bytes: float                # per block: global loads (its inputs' tiles over its reduction share)
    hbm_bytes: float               # the whole kernel: device-memory traffic
    latency: float                 # cycles a block takes at least: its steps' loads, ``stages - 1`` in flight
    rate: float                    # flops per SM per clock, the SM busy
    busy: float                    # 0..1: how busy a thread's independent work keeps it (SIMT: accumulators)
    instructions: float            # per block: warp instructions issued (0: not counted, SIMT)
    issue: float                   # warp instructions an SM scheduler issues per clock
    atomic_bytes: float = 0.0      # the whole kernel: split-K's atomic adds and the output's zeroing
    persistent: bool = False       # one block a SM walks the tiles: the pipeline fills once, not each wave
    requantized: float = 0.0       # per block: outputs a requantizing epilogue makes after the products
    thread_outputs: float = 0.0    # of those, one thread's
    serial_cycles: float = 0.0     # per block: cycles its SM spends on it alone, one block after another
    clustered: bool = False        # launched in clusters (``costs.cluster_launch_seconds``)
    halves: int = 0                # the last steps in halves (``Schedule.halves``): part of the drain hidden
    output_bytes: float = 0.0      # the whole kernel's output bytes (what its last wave drains)


@dataclass(frozen=True)
class DepthwiseKnobs:
    """A depthwise conv's candidate (``gpu_depthwise``, ``depthwise.py``): a thread's ``run`` of output
    pixels, the block's threads over channel vectors (``threads_c``) and runs (``threads_w``), as the
    preset clamps them."""

    preset: str
    run: int
    threads_c: int
    threads_w: int
    vector: int                    # channels of a thread (16 bytes: the op's dtype sets it)

    # a block's output pixels along W and its channels (the Knobs protocol's block); the knobs as JSON
    pixel_block = property(lambda self: self.run * self.threads_w)
    channel_block = property(lambda self: self.threads_c * self.vector)
    as_dict = asdict

    def schedule(self, op: Op, isa: str) -> Schedule:
        return gpu_depthwise(op, self.run, self.threads_c, self.threads_w)

    def work(self, op: Op, gpu: Gpu) -> Work:
        return depthwise_work(op, self, gpu)


@dataclass(frozen=True)
class GemvKnobs:
    """A decode-shaped op's candidate (``gpu_gemv``, ``gemv.py``): ``warps`` a block, ``columns``
    outputs a warp, k split over ``split`` warps of the block, the activations copied once a block to
    shared memory (``stage``); ``rows``: the op's."""

    preset: str
    warps: int
    columns: int
    split: int
    stage: bool
    rows: int

    # a block's rows and outputs (the Knobs protocol's block); its threads; the knobs as JSON
    pixel_block = property(lambda self: self.rows)
    channel_block = property(lambda self: self.warps * self.columns)
    threads = property(lambda self: self.warps * self.split * WARP)
    as_dict = asdict

    def schedule(self, op: Op, isa: str) -> Schedule:
        return gpu_gemv(op, self.warps, self.columns, split=self.split, stage=self.stage)

    def work(self, op: Op, gpu: Gpu) -> Work:
        return gemv_work(op, self, gpu)


# --- the op as the presets see it -------------------------------------------------------------------

def _outputs(op: Op) -> list[str]:
    return [d for d in op.dim_names if d not in op.reduction_dims]


def _product(op: Op, dims: Sequence[str]) -> int:
    return math.prod(op.extent(d) for d in dims)


def _fragments(extent: int, size: int) -> int:
    return -(-extent // size)


@cache
def _row_dims(op: Op) -> tuple[str, ...]:
    """The output dims the first input moves with: an implicit GEMM's M (a conv's ``n, oh, ow``)."""
    reads = {v for e in op.index(op.inputs[0]) for v in e.variables()}
    return tuple(d for d in _outputs(op) if d in reads)


@cache
def _matrix(op: Op) -> tuple[int, int, int, int] | None:
    """A float16 op as ``gpu_wmma``'s implicit GEMM: M, N, the reduction channels and the other
    reduction dims' product; None where it is not rows x columns (grouped, batched)."""
    m_dims = _row_dims(op)
    n_dims = [d for d in _outputs(op) if d not in m_dims]
    if not m_dims or not n_dims:
        return None
    channel = op.reduction_channel_dim
    others = [d for d in op.dim_names if d in op.reduction_dims and d != channel]
    return _product(op, m_dims), _product(op, n_dims), op.extent(channel), _product(op, others)


def _gathered(op: Op) -> bool:
    """Whether the first input's tiles are an implicit-GEMM gather (a conv's im2col: several output
    dims or a window), not a plain matrix's rows."""
    reads = {v for e in op.index(op.inputs[0]) for v in e.variables()}
    return len([d for d in _outputs(op) if d in reads]) > 1 or len(op.reduction_dims) > 1


def _device_bytes(op: Op, split: int, element_bytes: int = 4) -> float:
    """Device-memory bytes of a kernel: each input once (``element_bytes`` an element), the output once
    per split-K share (float32 or int32, a 16-bit ``out_dtype`` 2 bytes; a requantized one a byte an
    element)."""
    inputs = sum(math.prod(op.tensor(t).shape) * element_bytes for t in op.inputs)
    return inputs + _output_bytes(op) * math.prod(op.tensor(op.output).shape) * split


def _output_bytes(op: Op) -> int:
    """Bytes of an output element: a requantized op's byte, else its ``out_dtype``'s."""
    return 1 if op.quant is not None and op.quant.requantized else output_types.TYPES[op.out_dtype].size


# --- candidates -------------------------------------------------------------------------------------

@cache
def preset_entry(op: Op, preset: str) -> MatrixInstruction | None:
    """The entry ``preset`` tensorizes ``op`` onto (gpu_wgmma's widest), None where it has none of the
    op's types."""
    if preset == "gpu_wgmma":
        if op.quant is not None and needs_activation_sums(op.quant):
            return None
        try:
            return instruction(wgmma_instruction(256, 256, 1, wgmma_types(op)))
        except ScheduleError:
            return None
    try:
        return instruction(tensor_entry(op, wmma=preset == "gpu_wmma"))
    except ScheduleError:
        return None


def tensor_candidates(op: Op, arch: str) -> list[TensorKnobs]:
    """The tensor-core candidates of a float16, bfloat16 or quantized ``op`` on ``arch``, clamped and
    distinct (split-K only where the output can take the shares' sums: not a requantized or dequantized
    one; a 16-bit output's shares are added by the tile's last block, ``split_reduce.py``)."""
    matrix = _matrix(op)
    if matrix is None:
        return []
    entries = {p: preset_entry(op, p) for p in TENSOR_PRESETS}
    splits = SPLITS if op.quant is None or op.quant.output == "int32" else (1,)
    found: dict[TensorKnobs, None] = {}
    for preset, entry in entries.items():
        if entry is None or not entry.runs_on(arch):
            continue
        depths = tuple(depth * 2 // entry.element_bytes for depth in DEPTHS)     # the same bytes a row
        # TMA first: it wins the model's ties (measured faster at equal tiles: the 4096^3 GEMM's
        # 128 x 256 depth-64 kernel 0.360 ms against 0.431 ms on the H200)
        engines = ("tma", "threads") if preset == "gpu_wgmma" and boxed(op) else ("threads",)
        for bm, bn, (wm, wn), depth, stages, split, engine in _grid(BLOCKS, BLOCKS, WARPS, depths,
                                                                    STAGES[preset], splits, engines):
            knobs = tensor_knobs(op, preset, bm, bn, wm, wn, depth, stages, split, engine)
            if knobs.split_k > 1 and _filled(op, knobs, arch):
                continue
            pairs, straddle = _pairs(op, knobs), _rows_straddle_lines(op, knobs)
            for variant in _tma_variants(knobs, _walks(op, knobs, arch), pairs, pairs if straddle else ()):
                variant = replace(variant, padded=straddle and _pads_weights(op, variant))
                if _legal(variant.threads, knobs.block_m * knobs.block_n // knobs.threads,
                          _block_shared(op, variant),
                          SHARED_BYTES_PER_BLOCK[arch]):
                    found.update(dict.fromkeys(_halved(op, variant, arch)))
                    found[variant] = None
    return list(found)


def _halved(op: Op, knobs: TensorKnobs, arch: str) -> list[TensorKnobs]:
    """``knobs`` with its last ``HALVES`` steps in halves (``Schedule.halves``) where they fit its ring
    (``halves.fit``: as the printer checks them) and its blocks fit one wave (only there is the output
    drain after the last product exposed, what the halves hide part of: ``predict``)."""
    if knobs.preset != "gpu_wgmma" or knobs.engine != "tma" or knobs.specialize or knobs.split_k > 1 \
            or knobs.cluster != (1, 1) or _row_blocks(op, knobs) * -(-_matrix(op)[1] // knobs.block_n) \
            > ARCH[arch].multiprocessors:
        return []
    entry = knobs.instruction
    if not _tma_stored(op, knobs) or halves.half_entry(entry) is None:
        return []
    _, _, channels, others = _matrix(op)
    total = others * -(-channels // knobs.depth)
    fragments = knobs.block_m * knobs.block_n // (entry.m * entry.n)
    columns = output_types.TYPES[op.out_dtype].chunk_columns
    fitting = []
    for steps in HALVES:
        try:
            halves.fit(steps, entry, columns, knobs.stages, total, _step_bytes(knobs), fragments)
        except ScheduleError:
            continue
        fitting.append(replace(knobs, halves=steps))
    return fitting


def _tma_variants(knobs: TensorKnobs, walks: bool, pairs: Sequence[tuple[int, int]] = (),
                  clustered: Sequence[tuple[int, int]] = ()) -> list[TensorKnobs]:
    """A TMA candidate in the swizzle as wide as its step's row and warp-specialized where the
    consumers' accumulators fit (``specialize.fits``), in a persistent tile loop too where ``walks``
    (``_walks``; also walked by the clusters of ``pairs``), then wide unspecialized (also in the clusters
    of ``clustered``), then as given: first the faster (ties go to the first; the H200's 4096^3 GEMM at
    128 x 256, depth 64: persistent 0.194, specialized 0.199-0.204, 0.209 and 0.357 ms; 2000x3000x1000 on
    192 x 128 tiles, persistent in pairs along the columns 27.7-28.6 us, persistent 31.7-32.6)."""
    row = knobs.depth * knobs.instruction.element_bytes
    if knobs.engine != "tma" or row not in SWIZZLE_WIDTHS[1:]:
        return [knobs]
    consumers = knobs.warps_m * knobs.warps_n
    wide = replace(knobs, swizzle=row)
    specialized = replace(wide, specialize=True)
    walk = replace(specialized, persistent=True)
    walked = [*(replace(walk, cluster=pair) for pair in pairs), walk] if walks else []
    fits = specialize.fits(consumers, knobs.block_m * knobs.block_n // (consumers * specialize.WARPGROUP))
    return [*([*walked, specialized] if fits else []), wide,
            *(replace(wide, cluster=pair) for pair in clustered), knobs]


def _walks(op: Op, knobs: TensorKnobs, arch: str) -> bool:
    """Whether a persistent tile loop is a candidate: a float op or a quantized one without activation
    sums (its outputs stored or requantized from the registers) whose tiles outnumber the SMs (each
    block then walks several: fewer, the grid is the same), not split for a 16-bit output (the tile's
    last block adds those shares: one tile a block, ``split_reduce.py``), and where its outputs go out
    by TMA, with room for their staging beside the ring (``staging_buffers``: one buffer a warpgroup where
    two do not fit; without any the consumers store from registers: the GEMM 2000x3000x1000 on 192 x 128
    tiles, float16 out, ran 38.1-38.3 us at 5 stages against 31.2-31.4 at 4 with two buffers, and 32.5 at 5
    with one, H200)."""
    m, n, _, _ = _matrix(op)
    last = knobs.split_k > 1 and op.out_dtype != "float32"
    return not _sums(op) and not last and \
        -(-m // knobs.block_m) * -(-n // knobs.block_n) * knobs.split_k > ARCH[arch].multiprocessors and \
        not (_tma_stored(op, knobs) and not _staging_fits(knobs))


def _pairs(op: Op, knobs: TensorKnobs) -> list[tuple[int, int]]:
    """The clusters of two (``PAIRS``) a persistent walk of ``knobs`` may take: a float Matmul's or Gemm's
    (2-D boxes multicast: ``cluster.py``) whose tiles along the pair's axis come in whole pairs."""
    if op.quant is not None or _gathered(op):
        return []
    m, n, _, _ = _matrix(op)
    tiles = (-(-m // knobs.block_m), -(-n // knobs.block_n))
    return [pair for pair in PAIRS if tiles[pair.index(2)] % 2 == 0]


def _rows_straddle_lines(op: Op, knobs: TensorKnobs) -> bool:
    """Whether the tiles' rows (a step's depth of one row of the reduction) start off L2 lines in
    device memory: the reduction's rows not whole lines, so that most 128-byte box rows read two. Only
    there does an unpersistent kernel's pair (``PAIRS``: the shared input's tiles read once a pair) pay
    on the H200: 2000x3000 on 192 x 256 tiles in one wave, in pairs along the columns against alone, one
    launch interleaved with cuBLAS: K = 1000 (2000-byte rows) 0.8-1.1% faster in six interleavings in
    three calls (0.977-0.981x cuBLAS against 0.970-0.978x in two earlier sessions), K = 1024 1.5-2.1%
    slower in four (24.86 against 24.42 us in an earlier session). With B in whole-line rows (``padded``)
    the pair was slower in nine of ten interleavings (0.3% faster to 1.3% slower): the model ties their
    products and prices the pair's clustered launch (``cluster_launch_seconds``), so it ranks second."""
    _, _, channels, _ = _matrix(op)
    return channels * knobs.instruction.element_bytes % L2_LINE_BYTES != 0


def _pads_weights(op: Op, knobs: TensorKnobs) -> bool:
    """Whether ``knobs``' kernel stores B, the weights (packed once, outside the call), in rows of whole
    lines where the reduction's straddle them (``gpu_wgmma``'s ``padded``): a float Matmul's or Gemm's TMA
    kernel. Every kernel of the GEMM in no catalog timed so ran faster on the H200 (K = 1000, one launch
    interleaved with cuBLAS, us): 192 x 256 in one wave 25.44-25.58 -> 24.70-24.83, in 1x2 pairs
    25.12-25.22 -> 24.98-25.09, 192 x 128 walked 31.98-32.13 -> 25.98-26.11, walked in pairs
    26.98-27.14 -> 25.86-26.00."""
    return knobs.engine == "tma" and op.quant is None and not _gathered(op)


def _line_reads(pitch: int, row: int) -> float:
    """The L2 lines a TMA box row of ``row`` bytes reads, averaged over the rows of a tensor stored
    ``pitch`` bytes a row and the steps along it (a line's bytes starting inside a line read two)."""
    rows, steps = (L2_LINE_BYTES // math.gcd(bytes_, L2_LINE_BYTES) for bytes_ in (pitch, row))
    starts = [(r * pitch + s * row) % L2_LINE_BYTES for r in range(rows) for s in range(steps)]
    return sum(-(-(start + row) // L2_LINE_BYTES) for start in starts) / len(starts)


def _straddled(op: Op, knobs: TensorKnobs, costs: Costs = COSTS) -> tuple[float, float]:
    """The factors on A's and B's L2 bytes for box rows that straddle lines: a float Matmul's or Gemm's
    TMA rows of K elements (B's on whole lines where ``padded``) read ``_line_reads`` lines against rows
    on whole lines, each line more priced ``costs.straddled_line_share`` of a line's bytes; a conv's pixel
    boxes and the threads' copies 1."""
    if knobs.engine != "tma" or _gathered(op):
        return 1.0, 1.0
    row = knobs.depth * knobs.instruction.element_bytes
    extra = _line_reads(_matrix(op)[2] * knobs.instruction.element_bytes, row) / _line_reads(0, row) - 1
    a = 1 + costs.straddled_line_share * extra
    return a, 1.0 if knobs.padded else a


def _tma_stored(op: Op, knobs: TensorKnobs) -> bool:
    """Whether a persistent kernel of ``knobs`` would store its outputs by TMA where their staging fits
    (``_stores_by_tma``; unsplit, its fragments whole chunks of columns)."""
    return (_stores_by_tma(op) and knobs.split_k == 1
            and knobs.instruction.n % output_types.TYPES[op.out_dtype].chunk_columns == 0)


def _staging_fits(knobs: TensorKnobs) -> bool:
    return staging_fits(knobs.stages, _step_bytes(knobs), knobs.warps_m * knobs.warps_n)


@cache
def _stores_by_tma(op: Op) -> bool:
    """Whether a persistent kernel of ``op`` (``gpu_wgmma``'s tiles) stores its outputs by TMA
    (``tma_store.output``: a row-major 2-D output)."""
    try:
        return TensorPrinter(gpu_wgmma(op, engine="tma", specialize=True, persistent=True), CUDA).stored \
            is not None
    except ScheduleError:
        return False


def _filled(op: Op, knobs: TensorKnobs, arch: str) -> bool:
    """Whether ``knobs``' output tiles alone launch a block on every SM: split-K then only adds atomic
    shares (the 4096^3 GEMM: the model ranked split-K 4 first, never measured faster on the H200 than
    the same tile unsplit, 192 x 256 TMA 0.292 ms)."""
    m, n, _, _ = _matrix(op)
    return -(-m // knobs.block_m) * -(-n // knobs.block_n) >= ARCH[arch].multiprocessors


@cache
def boxed(op: Op) -> bool:
    """Whether the tensor memory accelerator copies both inputs' tiles of ``gpu_wgmma(op)``
    (``tma.operand``: a Matmul's or Gemm's 2-D operands, a conv's N-D ones, whose rows take a
    multiple of 16 bytes)."""
    try:
        TensorPrinter(gpu_wgmma(op, engine="tma"), CUDA)
    except ScheduleError:
        return False
    return True


def tensor_knobs(op: Op, preset: str, block_m: int, block_n: int, warps_m: int, warps_n: int, depth: int,
                 stages: int, split_k: int, engine: str = "threads") -> TensorKnobs:
    """The knobs ``preset(op, ...)`` builds with these arguments, clamped as the preset clamps them
    (tiles to the op, the depth to its channels, split-K to the shares its steps make)."""
    m, n, channels, others = _matrix(op)
    entry = (instruction(wgmma_instruction(n, block_n, warps_n, _wgmma_types(op))) if preset == "gpu_wgmma"
             else preset_entry(op, preset))
    block_m, warps_m = clamp_tile(m, block_m, warps_m, entry.m)
    block_n, warps_n = clamp_tile(n, block_n, warps_n, entry.n)
    depth = min(depth, _fragments(channels, entry.k) * entry.k)
    steps = others * -(-channels // depth)
    share = -(-steps // split_k)
    if preset == "gpu_wgmma":       # the N of the clamped block's warpgroups
        entry = instruction(wgmma_instruction(block_n, block_n, warps_n, _wgmma_types(op)))
    return TensorKnobs(preset, block_m, block_n, warps_m, warps_n, depth, stages, -(-steps // share),
                       entry.name, engine)


_wgmma_types = cache(wgmma_types)      # an op's wgmma types, found once a search (a Schedule each)


def _grid(*choices: Sequence) -> list[tuple]:
    combos: list[tuple] = [()]
    for options in choices:
        combos = [(*combo, option) for combo in combos for option in options]
    return combos


def tensor_shared(knobs: TensorKnobs, sums: bool = False) -> int:
    """Bytes of shared memory a tensor-core block asks for, as the tensor printer allocates them:
    ``stages`` buffers of both inputs' tiles, each fragment in its instruction's layout (its tile
    elements: WMMA pads its rows against bank conflicts), or the epilogue's scratch of one fragment per
    warp (warpgroup), two with ``sums`` (a quantized op's activation sums), where that is more; TMA's
    ring adds an 8-byte mbarrier a buffer."""
    entry = knobs.instruction
    scratch = knobs.warps_m * knobs.warps_n * entry.fragment_elements * 4 * (2 if sums else 1)
    if knobs.engine != "tma":
        return max(knobs.stages * _step_bytes(knobs), scratch)
    return ring_bytes(knobs.stages, _step_bytes(knobs), scratch, 2 if knobs.specialize else 1)


def _step_bytes(knobs: TensorKnobs) -> int:
    """Bytes of one buffer of the ring: both inputs' tiles of a step, each fragment in its instruction's
    layout."""
    entry = knobs.instruction
    elements = (-(-knobs.block_m // entry.m) * entry.a_tile_elements
                + -(-knobs.block_n // entry.n) * entry.b_tile_elements) * -(-knobs.depth // entry.k)
    return entry.element_bytes * elements


def _block_shared(op: Op, knobs: TensorKnobs) -> int:
    """Bytes of shared memory a tensor-core block of ``op`` asks for, as the printer lays them out:
    ``tensor_shared``'s, or a persistent kernel's that stages its outputs past its ring
    (``tensor_printer.persistent_shared``): a quantized op's fragment of each consumer warpgroup
    (``row_staging_bytes``), or the buffers of the TMA stores (``store_staging_bytes``)."""
    consumers, entry = knobs.warps_m * knobs.warps_n, knobs.instruction
    if not knobs.persistent or knobs.split_k > 1:
        return tensor_shared(knobs, _sums(op))
    if op.quant is not None:
        staging = row_staging_bytes(consumers, entry.m, entry.n, _output_bytes(op))
    elif _tma_stored(op, knobs) and _staging_fits(knobs):
        staging = store_staging_bytes(consumers, staging_buffers(knobs.stages, _step_bytes(knobs), consumers))
    else:
        return tensor_shared(knobs, _sums(op))
    return persistent_shared(knobs.stages, _step_bytes(knobs), staging, 2 if knobs.specialize else 1)


def _sums(op: Op) -> bool:
    """Whether ``op``'s kernel makes the activation sums (``quantized.needs_activation_sums``)."""
    return op.quant is not None and needs_activation_sums(op.quant)


def _legal(threads: int, accumulators: int, shared: int, limit: int) -> bool:
    """Whether a block fits: threads, accumulator registers per thread (and the SM's registers for
    them and the overhead) and shared memory (``limit``)."""
    return (threads <= MAX_THREADS and accumulators <= MAX_ACCUMULATORS
            and threads * (accumulators + OVERHEAD_REGISTERS) <= REGISTERS_PER_SM and shared <= limit)


def simt_candidates(op: Op, arch: str) -> list[SimtKnobs]:
    """The SIMT candidates of a float32 ``op``, clamped and distinct; a staged one whose tiles outgrow
    ``STATIC_SHARED`` is left out."""
    x, y, _ = gpu_rows(op)
    channel = op.reduction_channel_dim
    found: dict[SimtKnobs, None] = {}
    for preset in SIMT_PRESETS:
        depths = SIMT_DEPTHS if preset == "gpu_staged" and channel in op.reduction_dims else (0,)
        for tx, ty, rx, ry, depth in _grid(THREADS_X, THREADS_Y, REGS, REGS, depths):
            tx, ty = min(tx, op.extent(x)), min(ty, op.extent(y))
            rx, ry = max(1, min(rx, -(-op.extent(x) // tx))), max(1, min(ry, -(-op.extent(y) // ty)))
            knobs = SimtKnobs(preset, tx, ty, rx, ry, min(depth, op.extent(channel)) if depth else 0)
            if _legal(knobs.threads, rx * ry, simt_shared(op, knobs), STATIC_SHARED):
                found[knobs] = None
    return list(found)


def _spans(op: Op, knobs: SimtKnobs) -> dict[str, int]:
    """How far each dim runs within one block's reduction step (``depth`` channels; all of them unstaged)."""
    x, y, _ = gpu_rows(op)
    spans = {x: knobs.pixel_block, y: knobs.channel_block}
    for dim in op.reduction_dims:
        spans[dim] = knobs.depth if dim == op.reduction_channel_dim and knobs.depth else op.extent(dim)
    return {d: min(s, op.extent(d)) for d, s in spans.items()}


def _box_bytes(op: Op, spans: dict[str, int]) -> dict[str, int]:
    """Bytes of each input's box over ``spans`` (the other dims fixed); an input whose index is not
    affine in them (a grouped conv's activations) is left out, as ``gpu_staged`` leaves it unstaged."""
    boxes = {}
    for tensor in op.inputs:
        try:
            sizes = []
            for expr in op.index(tensor):
                terms, _ = linear_terms(expr, frozenset(spans))
                sizes.append(1 + sum(abs(c) * (spans[d] - 1) for d, c in terms.items()))
        except ValueError:
            continue
        boxes[tensor] = 4 * math.prod(sizes)
    return boxes


def simt_shared(op: Op, knobs: SimtKnobs) -> int:
    """Bytes of shared memory a ``gpu_staged`` block's tiles take (0 for ``gpu_tiled``)."""
    return sum(_box_bytes(op, _spans(op, knobs)).values()) if knobs.preset == "gpu_staged" else 0


# --- the cost model ---------------------------------------------------------------------------------

def step_instructions(op: Op, knobs: TensorKnobs, costs: Costs = COSTS) -> float:
    """The instructions one warp issues per pipeline step of a tensor-core kernel as the tensor printer's
    code compiles (``costs``: its fixed part, the copies of both tiles' 16-byte groups, the products)."""
    entry = knobs.instruction
    groups = [rows * knobs.depth * entry.element_bytes // GROUP_BYTES
              for rows in (knobs.block_m, knobs.block_n)]
    per_warp = (knobs.block_m // knobs.warps_m, knobs.block_n // knobs.warps_n)
    # TMA's boxes are one thread's (a few instructions a box, warp 0 alone): no per-thread copies
    copies = (copy_instructions(*groups, knobs.threads, _gathered(op), costs) if knobs.engine == "threads"
              else 0.0)
    return costs.step_fixed + copies + entry_instructions(entry, *per_warp, knobs.depth)


def tensor_work(op: Op, knobs: TensorKnobs, gpu: Gpu, costs: Costs = COSTS) -> Work:
    """A tensor-core candidate's work: both inputs' tiles over its reduction share (in a cluster the
    shared input's slice of each tile a block: ``cluster.py``; a quantized op's
    activation sums: one more 16-column product per activation fragment, in each warp of a row)."""
    m, n, channels, others = _matrix(op)
    steps = others * -(-channels // knobs.depth)
    share = -(-steps // knobs.split_k)
    reduction = share * knobs.depth                        # reduction elements per block
    blocks = _row_blocks(op, knobs) * -(-n // knobs.block_n) * knobs.split_k
    padded = 1.25 if knobs.preset == "gpu_wmma" else 1.0   # wmma's fragment loads: more shared traffic
    entry = knobs.instruction
    # a warp-synchronous entry where an asynchronous one exists (Hopper) runs at its measured share
    behind = not entry.asynchronous and WGMMA_F16_F32[256].runs_on(gpu.arch)
    rate = gpu.figures.tensor_flops_per_clock * (costs.tensor_share_sync if behind
                                                 else costs.tensor_share_async)
    rate *= device.INT8_PER_F16 if entry.integer else 1
    warps = entry.lanes * knobs.warps_m * knobs.warps_n // WARP    # a specialized producer's: a few copies
    size = entry.element_bytes
    sums = _sums(op)
    columns = knobs.block_n + (entry.n * knobs.warps_n if sums else 0)     # the sums' products
    l2_rate = _l2_rate(knobs, blocks, gpu, costs)
    a_lines, b_lines = _straddled(op, knobs, costs)
    latency = costs.tma_latency_cycles if knobs.engine == "tma" else LOAD_LATENCY
    # ptxas gives every thread the consumers' registers (a specialized producer holds no accumulators)
    consumers = entry.lanes * knobs.warps_m * knobs.warps_n
    return Work(blocks, knobs.threads, -(-knobs.block_m * columns // consumers) + OVERHEAD_REGISTERS,
                _block_shared(op, knobs),
                2.0 * knobs.block_m * columns * reduction, share,
                padded * size * reduction * (knobs.warps_n * knobs.block_m + knobs.warps_m * knobs.block_n),
                size * reduction * (knobs.block_m / knobs.cluster[1] * a_lines
                                    + knobs.block_n / knobs.cluster[0] * b_lines)
                * costs.l2_bytes_per_clock / l2_rate,
                _device_bytes(op, knobs.split_k, size),
                share * latency / max(1, knobs.stages - (2 if entry.asynchronous else 1)), rate, 1.0,
                warps * share * step_instructions(op, knobs, costs),
                costs.issue_async if entry.asynchronous else costs.issue_sync,
                _split_bytes(op, knobs.split_k, costs), knobs.persistent, *_requantized(op, knobs),
                clustered=knobs.cluster != (1, 1), halves=knobs.halves,
                output_bytes=_output_bytes(op) * math.prod(op.tensor(op.output).shape))


def _l2_rate(knobs: TensorKnobs, blocks: int, gpu: Gpu, costs: Costs = COSTS) -> float:
    """Bytes a clock one SM's tiles come from L2 at: the measured rate with every SM loading (tiles in a
    wider swizzle come in fewer, larger boxes: their own rate), the chip's shared among fewer SMs where
    the grid has fewer blocks, at most an SM's own (``l2_port_bytes_per_clock``)."""
    full = costs.l2_bytes_per_clock_wide if knobs.swizzle > SWIZZLE_WIDTHS[0] else costs.l2_bytes_per_clock
    return min(max(full, costs.l2_port_bytes_per_clock),
               full * gpu.multiprocessors / min(blocks, gpu.multiprocessors))


def _requantized(op: Op, knobs: TensorKnobs) -> tuple[float, float]:
    """A requantized op's outputs per block and per consumer thread (the epilogue's work), else none."""
    if op.quant is None or not op.quant.requantized:
        return 0.0, 0.0
    outputs = knobs.block_m * knobs.block_n
    return float(outputs), outputs / (knobs.warps_m * knobs.warps_n * knobs.instruction.lanes)


def _split_bytes(op: Op, split: int, costs: Costs = COSTS) -> float:
    """The bytes a split-K kernel adds atomically into its output (a share each) and zeroes first; or, for
    a 16-bit output (``split_reduce.py``), the bytes at the atomics' rate that take as long as writing
    its workspace (a float32 share each) and reading it back at their own measured rate."""
    if split == 1:
        return 0.0
    outputs = math.prod(op.tensor(op.output).shape)
    if op.out_dtype == "float32":
        return 4.0 * outputs * (split + 1)
    return 8.0 * outputs * split * costs.atomic_bytes_per_s / costs.split_reduce_bytes_per_s


def _row_blocks(op: Op, knobs: TensorKnobs) -> int:
    """The blocks along M: a TMA-copied conv's pixel boxes (``pixel_box``) cover its output pixels,
    overhanging where they do not tile them; else ``block_m`` rows a block."""
    dims = _row_dims(op)
    extents = tuple(op.extent(d) for d in dims)
    if knobs.engine == "tma" and len(dims) > 1:
        sizes = pixel_box(extents, knobs.block_m, knobs.instruction.m)
        return math.prod(-(-e // s) for e, s in zip(extents, sizes))
    return -(-math.prod(extents) // knobs.block_m)


def simt_work(op: Op, knobs: SimtKnobs, gpu: Gpu) -> Work:
    """A SIMT candidate's work: float32 register blocks, their operands' boxes from L2 at each step."""
    x, y, rest = gpu_rows(op)
    reduction = _product(op, [d for d in op.dim_names if d in op.reduction_dims])
    blocks = (-(-op.extent(x) // knobs.pixel_block) * -(-op.extent(y) // knobs.channel_block)
              * _product(op, rest))
    step = knobs.depth or op.extent(op.reduction_channel_dim)
    steps = -(-op.extent(op.reduction_channel_dim) // step)
    l2 = sum(_box_bytes(op, _spans(op, knobs)).values()) * steps
    # gpu_tiled reads its operands through L1 (a cache, half shared memory's rate)
    l1 = knobs.threads * (knobs.regs_x + knobs.regs_y) * reduction * 4 * (2 if knobs.depth == 0 else 1)
    accumulators = knobs.regs_x * knobs.regs_y
    return Work(blocks, knobs.threads, accumulators + knobs.regs_x + knobs.regs_y + OVERHEAD_REGISTERS // 2,
                simt_shared(op, knobs), 2.0 * knobs.pixel_block * knobs.channel_block * reduction, steps, l1,
                l2, _device_bytes(op, 1), 0.0, 2 * device.FP32_LANES_PER_SM[gpu.arch],
                min(1.0, accumulators / BUSY_ACCUMULATORS), 0.0, 1.0)


def depthwise_candidates(op: Op) -> list[DepthwiseKnobs]:
    """A depthwise conv's candidates: runs of ``DEPTHWISE_RUNS`` pixels by the default block and by
    ``DEPTHWISE_THREADS_W`` runs a block, clamped and distinct."""
    vector = DepthwiseRoles.of(op).vector
    found = {DepthwiseKnobs("gpu_depthwise", *depthwise_block(op, run, None, threads_w), vector): None
             for run in DEPTHWISE_RUNS for threads_w in DEPTHWISE_THREADS_W}
    return list(found)


def gemv_candidates(op: Op) -> list[GemvKnobs]:
    """A decode-shaped op's candidates where the GEMV family takes it (``gemv.check``; else none): the
    warps, columns and k splits of ``GEMV_*``, each staged and not (staged where the activations fit
    the block's shared memory), k split only where each share holds vectors."""
    found = []
    for warps, columns, split, stage in ((w, c, s, staged) for w in GEMV_WARPS for c in GEMV_COLUMNS
                                         for s in GEMV_SPLITS for staged in (False, True)):
        try:
            gemv_shape(op, warps, columns, split, stage)
        except ScheduleError:
            continue
        found.append(GemvKnobs("gpu_gemv", warps, columns, split, stage, op.extent(GemvRoles.of(op).rows)))
    return found


@cache
def gemv_shape(op: Op, warps: int, columns: int, split: int, stage: bool) -> gemv.Shape:
    """The GEMV kernel's shape of ``gpu_gemv(op, warps, columns, split=split, stage=stage)``
    (ScheduleError where the family refuses it)."""
    return gemv.check(gpu_gemv(op, warps, columns, split=split, stage=stage))


def gemv_work(op: Op, knobs: GemvKnobs, gpu: Gpu) -> Work:
    """A GEMV candidate's work: each lane's 16-byte weight vectors of its columns with the activations
    of every row (``GEMV_PRODUCT_INSTRUCTIONS``; unstaged i2_s lanes also sum their activations), the
    warp's butterfly; the weights from device memory once; the activations from L2 once a block and,
    unstaged, through L1 by every warp (an i2_s lane's four 16-byte activation vectors lie 64 bytes
    apart: four times the L1 wavefronts), staged from shared memory (one copy a block, under the
    weights' loads, and a barrier, whose measured cost ``GEMV_STAGED_CYCLES`` the SM pays block after
    block). A block takes at least a load's latency and its warps' instructions after it."""
    shape = gemv_shape(op, knobs.warps, knobs.columns, knobs.split, knobs.stage)
    roles, kind = GemvRoles.of(op), shape.kind
    rows, x_vectors = roles.m, kind.x_vectors
    warps = knobs.warps * knobs.split
    per_vector = knobs.columns * (1 + rows * GEMV_PRODUCT_INSTRUCTIONS[kind.name]) + rows * x_vectors * (
        1 + (GEMV_SUM_INSTRUCTIONS if kind.name == "i2_s" and not knobs.stage else 0))
    butterfly = 5 * rows * (knobs.columns + (1 if kind.name == "i2_s" else 0))
    instructions = warps * (shape.rounds * per_vector + butterfly)
    x_bytes = rows * shape.vectors * x_vectors * 16          # a block's activations (each warp's share)
    l1 = x_bytes * knobs.warps * (1 if knobs.stage else x_vectors)
    weights = knobs.warps * knobs.columns * shape.vectors * 16
    element = 1 if op.quant is not None else 2
    hbm = (roles.n * shape.vectors * 16 + rows * roles.k * element + rows * roles.n * 4)
    registers = GEMV_REGISTERS + 12 * (knobs.columns - 1) + (24 if knobs.stage else 0)
    return Work(shape.blocks, knobs.threads, registers, shape.staged_bytes(rows), 0.0,
                1 if knobs.stage else 0, l1, weights + x_bytes, hbm, LOAD_LATENCY + instructions / SCHEDULERS,
                1.0, 1.0, instructions, 1.0,
                serial_cycles=GEMV_STAGED_CYCLES[kind.name] if knobs.stage else 0.0)


def depthwise_registers(run: int) -> int:
    """Registers per thread of a depthwise kernel of ``run`` pixels: ptxas's figures of the 3x3 float16
    kernels at runs 1, 2, 4 and 8 on sm_90 (``DEPTHWISE_REGISTERS``), linear between them."""
    runs, registers = zip(*DEPTHWISE_REGISTERS, strict=True)
    above = next((i for i, r in enumerate(runs) if r >= run), len(runs) - 1)
    if above == 0 or runs[above] <= run:
        return registers[above]
    r0, r1, g0, g1 = runs[above - 1], runs[above], registers[above - 1], registers[above]
    return round(g0 + (g1 - g0) * (run - r0) / (r1 - r0))


def depthwise_work(op: Op, knobs: DepthwiseKnobs, gpu: Gpu) -> Work:
    """A depthwise candidate's work: each thread's weights and every filter row's input pixels of its run
    (one 16-byte load each, all in flight together, through L1 from L2), then its FFMAs (as busy as its
    independent sums); the input and weights read from device memory once, the float32 output written
    once. A block takes at least a load's latency and its threads' FFMAs one after the other (a thread's
    products wait for its loads)."""
    vector, roles = knobs.vector, DepthwiseRoles.of(op)
    (kh, kw), columns = (roles.rows.taps, roles.columns.taps), roles.columns
    stride, dilation = columns.stride, columns.dilation
    vectors, runs = -(-roles.channels // vector), -(-roles.columns.out // knobs.run)
    blocks = -(-runs // knobs.threads_w) * -(-vectors // knobs.threads_c) * roles.batches * roles.rows.out
    threads = knobs.threads_c * knobs.threads_w
    span = (knobs.run - 1) * stride + (kw - 1) * dilation + 1
    loads = threads * (kh * span + kh * kw) * 16
    # from L2: the block's input box (the runs' overlapping columns hit L1) and its weights
    box = kh * ((knobs.threads_w * knobs.run - 1) * stride + (kw - 1) * dilation + 1) + kh * kw
    sums = knobs.run * vector
    element = 4 if op.dtype == "float32" else 2
    hbm = (math.prod(op.tensor(op.inputs[0]).shape) + math.prod(op.tensor(op.inputs[1]).shape)) * element + \
        4 * math.prod(op.tensor(op.output).shape)
    return Work(blocks, threads, depthwise_registers(knobs.run), 0, 2.0 * threads * sums * kh * kw, 1, loads,
                box * knobs.threads_c * 16, hbm, LOAD_LATENCY + sums * kh * kw,
                2 * device.FP32_LANES_PER_SM[gpu.arch],
                min(1.0, sums / BUSY_ACCUMULATORS), 0.0, 1.0)


def occupancy(work: Work, gpu: Gpu) -> int:
    """Blocks resident per SM at once: the least that shared memory, threads and registers allow."""
    figures = gpu.figures
    by_shared = figures.shared_per_sm // work.shared if work.shared else MAX_BLOCKS_PER_SM
    by_threads = figures.threads_per_sm // work.threads
    by_registers = REGISTERS_PER_SM // (work.threads * work.registers)
    return max(1, min(by_shared, by_threads, by_registers, MAX_BLOCKS_PER_SM))


def predict(work: Work, gpu: Gpu, costs: Costs = COSTS) -> dict[str, float]:
    """The cost model's figures of a kernel: its ``predicted_seconds`` and what makes them;
    ``block_cycles``, a block's arithmetic, reads, instruction issue and load latency as if none
    overlapped, breaks ties (a kernel bound by device memory: the block that leaves the SM idlest).
    A block's cycles are the longest of its terms: the tensor cores (or FFMA pipes), shared memory, L2
    and the schedulers' issue; the SM runs at ``costs.clock_share`` of the part's clock. A requantizing
    epilogue follows each wave's products (``costs.epilogue_cycles_per_output``); in a persistent kernel
    of several blocks an SM only the last wave's: before it, each block's epilogue runs beside the
    products of the SM's other blocks while its producer copies the next tile (conv2_x at N=32 on the
    H200: 0.0307 -> 0.0257 ms, its main loop alone 0.0173-0.0178). A one-wave kernel with its last S steps
    in halves (``Schedule.halves``) is credited the share of its output drain (``costs.
    output_drain_bytes_per_s``) that its left half's stores hide: at most half of it, behind the right
    half's remaining S - 1 half steps (no other kernel is charged the drain, so no other ranking moves)."""
    resident = min(occupancy(work, gpu), -(-work.blocks // gpu.multiprocessors))
    waves = -(-work.blocks // (resident * gpu.multiprocessors))
    warps = resident * work.threads / WARP
    busy = min(1.0, warps / BUSY_WARPS) * work.busy
    cycles = (work.flops / (work.rate * busy), work.l1_bytes / L1_BYTES_PER_CLOCK,
              work.l2_bytes / costs.l2_bytes_per_clock, work.instructions / (SCHEDULERS * work.issue))
    clock = gpu.clock_hz * costs.clock_share
    per_wave = max(resident * max(cycles), work.latency) / clock
    fills = 1 if work.persistent else waves     # a persistent block's producer fills the next tile early
    overhead = (fills * FILL_CYCLES + waves * work.steps * STEP_CYCLES) / clock
    hbm = work.hbm_bytes / gpu.figures.hbm_bytes_per_s
    exposed = 1 if work.persistent and resident > 1 else waves       # epilogues beside no products
    epilogue = exposed * (resident * work.requantized * costs.epilogue_cycles_per_output
                          + work.thread_outputs * costs.epilogue_thread_cycles) / clock
    serial = waves * resident * work.serial_cycles / clock
    launch = costs.launch_seconds + (costs.cluster_launch_seconds if work.clustered else 0.0)
    drain = work.output_bytes / costs.output_drain_bytes_per_s
    hidden = min(drain, (work.halves - 1) * per_wave / work.steps) / 2 if work.halves and waves == 1 else 0.0
    seconds = (launch + max(waves * per_wave, hbm) + overhead + epilogue + serial
               + work.atomic_bytes / costs.atomic_bytes_per_s - hidden)
    return {"predicted_seconds": seconds, "block_cycles": sum(cycles) + work.latency, "waves": float(waves),
            "blocks": float(work.blocks), "occupancy": float(resident),
            "l2_bytes": work.l2_bytes * work.blocks, "hbm_bytes": work.hbm_bytes,
            "issue_cycles": cycles[3], "tensor_cycles": cycles[0], "l2_cycles": cycles[2]}


def figures(candidate: Candidate) -> dict[str, float]:
    """The cost model's figures of ``candidate``."""
    gpu = gpu_of(candidate.isa)
    return predict(candidate.knobs.work(candidate.op, gpu), gpu)


class CudaSearch(SearchRules):
    """The GPU presets' tiles searched on the cuda target (no other algorithm: the implicit GEMM is
    the tensor-core presets' own)."""

    families = (KERNEL, COST_MODEL)

    def candidates(self, op: Op, isa: str, threads: int = 1, auto: bool = False) -> list[Candidate]:
        if threads != 1:
            return []
        if depthwise.is_depthwise(op):
            return [Candidate(op, isa, knobs) for knobs in depthwise_candidates(op)]
        decode = gemv_candidates(op)
        if decode:      # the GEMV family: 1.4-1.7x the tensor-core path at the decode shapes (H200)
            return [Candidate(op, isa, knobs) for knobs in decode]
        simt = op.quant is None and op.dtype == "float32"
        space: Callable[[Op, str], list] = simt_candidates if simt else tensor_candidates
        return [Candidate(op, isa, knobs) for knobs in space(op, isa)]

    def rank(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        priced = [Candidate(c.op, c.isa, c.knobs, tuple(figures(c).items())) for c in candidates]
        order = sorted(range(len(priced)), key=lambda i: (priced[i].figures["predicted_seconds"],
                                                          priced[i].figures["block_cycles"], i))
        return [priced[i] for i in order]

    def family(self, candidate: Candidate) -> str:
        return COST_MODEL if candidate.knobs.preset in PRICED else KERNEL

    def own_seconds(self, candidate: Candidate) -> float:
        return figures(candidate)["predicted_seconds"]

    def unpriced(self, candidate: Candidate) -> bool:
        # the kernel model counts CPU cores; the cost model prices the tensor-core and depthwise kernels
        return candidate.knobs.preset not in PRICED

    def takes_epilogue(self, candidate: Candidate) -> bool:
        """The tensor-core kernels without split-K (each output's whole sum in one block); the SIMT and
        depthwise kernels store plain sums."""
        knobs = candidate.knobs
        return knobs.preset in TENSOR_PRESETS and knobs.split_k == 1

    def lanes(self, op: Op, isa: str) -> int:
        return WARP

    def registers(self, isa: str) -> int:
        return REGISTERS_PER_SM

    def refusal(self, isa: str) -> str:
        return (f"the cuda search has only the GPU presets' candidates ({', '.join(TENSOR_PRESETS)}: the "
                f"implicit GEMM on tensor cores, for float16, bfloat16 and quantized ops that are rows x "
                f"columns; {', '.join(SIMT_PRESETS)} for float32 ops)")

    def describe(self, knobs: dict) -> str:
        if knobs["preset"] == "gpu_gemv":
            return (f"gpu_gemv {knobs['warps']} warps of {knobs['columns']} column(s)"
                    + (f", k split over {knobs['split']} warps" if knobs["split"] > 1 else "")
                    + (", activations staged" if knobs["stage"] else ""))
        if knobs["preset"] == "gpu_depthwise":
            return (f"gpu_depthwise runs of {knobs['run']} pixels, {knobs['threads_c']}x{knobs['threads_w']} "
                    f"threads")
        if knobs["preset"] in TENSOR_PRESETS:
            groups = "warpgroups" if knobs["preset"] == "gpu_wgmma" else "warps"
            return (f"{knobs['preset']} {knobs['block_m']}x{knobs['block_n']} block, {knobs['warps_m']}x"
                    f"{knobs['warps_n']} {groups}, depth {knobs['depth']}, {knobs['stages']} stages"
                    + (f", split-K {knobs['split_k']}" if knobs["split_k"] > 1 else "")
                    + (", TMA" if knobs.get("engine") == "tma" else "")
                    + (f", {knobs['swizzle']}-byte swizzle" if knobs.get("swizzle", 32) > 32 else "")
                    + (", warp-specialized" if knobs.get("specialize") else "")
                    + (", persistent" if knobs.get("persistent") else "")
                    + (f", clusters of {knobs['cluster'][0]}x{knobs['cluster'][1]}"
                       if tuple(knobs.get("cluster", (1, 1))) != (1, 1) else "")
                    + (", weights in whole-line rows" if knobs.get("padded") else "")
                    + (f", last {knobs['halves']} steps in halves" if knobs.get("halves") else ""))
        return (f"{knobs['preset']} {knobs['threads_y']}x{knobs['threads_x']} threads of "
                f"{knobs['regs_y']}x{knobs['regs_x']} outputs"
                + (f", depth {knobs['depth']}" if knobs["depth"] else ""))
