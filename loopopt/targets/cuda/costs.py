"""The cuda cost model's calibrated figures (``Costs``) and the instructions a tensor-core kernel's warp
issues per pipeline step (``step_instructions``), as the tensor printer's code compiles.

Every figure says where it comes from: *measured* (read off a recorded H200 run or its profile),
*counted* (from the SASS of generated kernels) or *fitted* (chosen to match the recorded times of
``tests/data/cuda/h200_tensor_times.json``, the calibration rows; ``benchmarks/fit_cuda_costs.py
--fit`` refits them). docs/reference/cuda.md ("The cost model") lists them with the model's error on the rows.
"""
from __future__ import annotations

from dataclasses import dataclass

from .instructions import MatrixInstruction

GROUP_BYTES = 16                   # one cp.async copy: 16 bytes of a staged tile


@dataclass(frozen=True)
class Costs:
    """The cost model's calibrated figures (the H200's; other architectures scale by their ``Arch``)."""

    # fitted: what CUDA events around one launch see beyond the kernel's own work (the launch, the L2
    # cold after the flush, the first loads): 7.5 us of the grid 4-14.5 us (9.5 us before split-K's
    # atomic adds were priced, ``atomic_bytes_per_s``; the N=1 rows measure 11.8-16 us; the first model
    # took 4). A fixed split-K cost fitted to 0 over the 20 split rows.
    launch_seconds: float = 7.5e-6
    # measured: the SM clock the timed kernels ran at, as a share of the part's boost clock: Nsight
    # Compute counted 711k SM cycles for the 4096^3 wgmma kernel (128 x 256, depth 64, 4 stages) that
    # CUDA events timed at 0.4515 ms, 0.442 ms less the launch: 1.61 GHz of 1.98.
    clock_share: float = 0.81
    # measured (Nsight Compute): warp instructions issued per scheduler per cycle, 4 schedulers an SM:
    # 0.44 on the wgmma GEMM (2 warps a scheduler), 0.51 on the mma.sync GEMM (4 warps a scheduler).
    issue_async: float = 0.44
    issue_sync: float = 0.51
    # measured: the tensor cores' rate as a share of the part's dense fp16 peak: wgmma m64n256k16 from
    # shared memory back to back reached 966 TFLOP/s on 132 SMs (the wgmma de-risk), 0.90 of 1071 at
    # the boost clock; mma.sync 240 TFLOP/s with the tensor pipe active 38% of the time (Nsight, the
    # mma GEMM): 632 busy, 0.65 of wgmma's 966, 0.59 of the peak (used where wgmma exists: Hopper).
    tensor_share_async: float = 0.90
    tensor_share_sync: float = 0.59
    # measured: L2 to the SMs, bytes per SM per (sustained) clock: the wgmma GEMM moved 1.61 GB of
    # tiles from L2 in 711k cycles at 67% of the L2's throughput (Nsight): 1.61e9 / (0.67 x 711e3 x 132).
    l2_bytes_per_clock: float = 25.6
    # measured (a lower bound): the same with tiles in the 128-byte swizzle (``Schedule.swizzle``: one
    # box of 128-byte rows a tile a step instead of four of 32): the bf16 4096^3 GEMM at 128 x 256,
    # warp-specialized, moved the same 1.61 GB in 0.197 ms (0.1875 less the launch, 301k cycles at
    # 1.6 GHz): 40.6 bytes per SM-clock, the tensor cores near busy, so the L2 may give more.
    l2_bytes_per_clock_wide: float = 40.6
    # measured (a lower bound): what one SM takes from L2 when fewer SMs share it (the two rates above are
    # per SM with all 132 loading): cuBLAS's BERT kernel (384x768x3072, 64 x 64 tiles: 72 blocks) moved
    # 786 KB a block in 7.4 us in a CUDA graph (H200, 2026-11-29): 66 bytes per SM-clock at 1.6 GHz. A
    # kernel of fewer blocks than SMs gets the chip's rate shared among its blocks, at most this.
    l2_port_bytes_per_clock: float = 66.0
    # fitted: the L2 cost of the second line a TMA box row reads where it starts inside one (a float16
    # GEMM's 2000-byte rows at K = 1000: 1.875 lines a 128-byte row), as a share of a line's bytes: the
    # GEMM in no catalog's 192 x 256 one wave and 192 x 128 walk, alone and in 1x2 pairs, each with A and
    # B as given, B and both stored in whole-line rows (12 one-launch times, H200, 2026-11-30,
    # docs/benchmarks.md): rms log error 0.065 at 0.15 (0.063 at 0, 0.109 at 0.5, 0.213 at a whole line,
    # which priced the one wave 34.8 us against 25.5 measured); at 0.15 the walk as given 31.6 against
    # 32.05. Whole-line rows measured faster in every kernel (1-19%); the model's share ranks them first.
    straddled_line_share: float = 0.15
    # measured: what launching in clusters of two adds to a kernel's one launch: empty kernels of 132
    # blocks of 384 threads, 229 KB of shared memory and three tensor maps, 2.82-2.91 us one launch alone,
    # 3.04 in pairs (``__cluster_dims__(2, 1, 1)``; H200, 2026-11-30, bench_cuda_launch.py). Where a
    # pair's products bind as the kernel alone's, this is what tells them apart: the GEMM in no catalog's
    # one wave with B in whole-line rows ran 0.7-1.3% slower in pairs in nine of ten interleavings.
    cluster_launch_seconds: float = 0.2e-6
    # measured: the rate a one-wave kernel's outputs leave its SMs after its last product, the tensor cores
    # idle: the GEMM in no catalog's 192 x 256 one wave staged and TMA-stored its 12.7 MB in ~4.4 us
    # whatever the flush (a clock64 timeline over its 132 blocks, H200, 2026-11-30, docs/benchmarks.md).
    # Only ``halves`` is credited with it (the share it hides); no kernel is charged it.
    output_drain_bytes_per_s: float = 2.9e12
    # fitted: cycles until a step's TMA boxes land, a ring of s buffers keeping s - 2 steps in flight (the
    # consumers hold two): BERT on 64 x 64 TMA tiles, warp-specialized, ran 18.8-18.9, 16.1-16.3 and 13.3-13.4
    # us at 4, 5 and 8 stages, 15.1 / 15.8 at 6 / 7 and 14.2-14.7 at 9-14 (H200, one launch, three runs,
    # 2026-11-29): 1000 cycles puts 4 and 5 stages behind the L2 rate and 8 at it.
    tma_latency_cycles: float = 1000.0
    # counted: a warp's instructions per pipeline step as the current printer's kernels compile (SASS
    # of the calibration rows' kernels at commit 9db1a75, the main loop's body; least squares over the
    # 24 rows whose loop is one step, ``step_instructions`` in the rows' file): 108 besides its copies
    # and products (barrier, ring indices, fences, the loop), 1.5 per 16-byte copy of a plain matrix's
    # tile (the unrolled copies' addresses fold into one base), 36 per copy of a conv's tiles (im2col
    # and window indices, the padding guard).
    step_fixed: float = 108.0
    copy_affine: float = 1.5
    copy_gather: float = 36.0
    # measured: split-K's atomic adds into the output (and the memset zeroing it first), in bytes a second
    # after the products, not overlapped with them: conv3_x at N=32 on 256 x 128 TMA tiles took 0.0256,
    # 0.0390 and 0.0468 ms unsplit, in 2 and in 4 shares (0.0235-0.0245 ms of products each, 38.5 and
    # 64.2 MB added and zeroed: 2.5-2.8 TB/s), conv4_x at N=32 on 128 x 256 in 8 shares 0.0432 ms
    # (57.8 MB: 2.9 TB/s); the figure that fits the 54 TMA conv rows of this session best (mean |log|
    # error 0.196 -> 0.189, the largest factor 1.99 -> 1.54).
    atomic_bytes_per_s: float = 2.5e12
    # fitted: a requantizing epilogue (``quantized.store``; on wgmma from the registers, staged) after a
    # wave's products, not overlapped with them (but in a persistent kernel of several blocks an SM, where
    # only the last wave's is: ``search.predict``): cycles per output of an SM's wave (its schedulers and
    # stores) and per output one thread holds (its chain of conversions). Over the 56 TMA int8 conv rows
    # of ``tests/data/cuda/h200_int8_conv_times.json`` (tenth session: persistent kernels, specialized
    # ones of several blocks an SM, the border term one read a channel) these two rank at Spearman 0.67
    # (0.29 without), rms log error 0.36, and each layer's first pick runs within 5% of its fastest
    # (conv4_x's 1.11x without them). The kernels printed without the epilogue ran 3-5 us faster.
    epilogue_cycles_per_output: float = 0.2
    epilogue_thread_cycles: float = 40.0
    # measured: split-K shares added by each tile's last block (``split_reduce.py``), the workspace's bytes
    # written and read back a second: BERT's 384x768x3072 on 128 x 128 tiles in 7 shares (8.3 MB of
    # float32 shares) took 0.0299 ms with a float16 output, 0.0135 with atomic adds into float32 (H200,
    # interleaved): 16.4 us more for 16.5 MB, the reads on the 18 last blocks' SMs alone.
    split_reduce_bytes_per_s: float = 1.0e12


COSTS = Costs()


def entry_instructions(entry: MatrixInstruction, rows: int, columns: int, depth: int) -> float:
    """The matrix instructions and fragment loads a warp issues per step for its ``rows x columns``
    outputs (a warpgroup's, for an entry of 128 lanes) over ``depth`` reduction elements: wgmma one
    instruction per fragment and k-step (the tensor cores read shared memory); mma.sync and WMMA two
    HMMA per 16 x 16 fragment and one ldmatrix (WMMA: its fragment loads) per fragment row or column."""
    fragments_m, fragments_n, k_steps = -(-rows // entry.m), -(-columns // entry.n), -(-depth // entry.k)
    if entry.asynchronous:
        return fragments_m * fragments_n * k_steps
    return k_steps * (2 * fragments_m * fragments_n + fragments_m + fragments_n)


def copy_instructions(groups_a: int, groups_b: int, threads: int, gather: bool,
                      costs: Costs = COSTS) -> float:
    """A thread's copy instructions per step: its share of each tile's 16-byte groups over the block's
    threads, at the affine rate or, for an implicit GEMM's tiles (a conv's: im2col rows, and weights
    indexed through the fused window and channel steps), at the gather rate."""
    each = costs.copy_gather if gather else costs.copy_affine
    return each * (-(-groups_a // threads) + -(-groups_b // threads))
