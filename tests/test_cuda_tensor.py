"""Tensor-core kernels of the cuda target without a GPU: float16 ops, the ``tensorize``, ``stage(stages=)``
and ``split_k`` steps and their refusals, the ``gpu_wmma`` and ``gpu_mma`` presets' host emulation (the
fragment operations' scalar meaning, through the swizzled tile layout; split-K shares added) against
the reference over random ops (``gpu_wgmma`` with ``engine="tma"`` too: the boxes, their swizzle and
the barriers' byte counts), and compile-only nvcc builds (0 spills, ``HMMA``, ``LDSM`` and 16-byte
``LDGSTS`` in the SASS, ``REDG`` for split-K, ``UTMALDG`` and ``HGMMA`` (int8: ``IGMMA``) without
``LDGSTS`` for TMA; skipped with the reason without nvcc or cuobjdump)."""
import re
from dataclasses import replace

import numpy as np
import pytest
from helpers import conv_ops, gemm_ops, matmul_ops, needs, sass, tiers
from hypothesis import strategies as st

import loopopt as lo
from loopopt.dataflows import MMA, WMMA, gpu_mma, gpu_wgmma, gpu_wmma, wgmma_instruction
from loopopt.measure import output_rounded, tolerance
from loopopt.schedule import ScheduleError
from loopopt.schedule_file import schedule_from_toml, to_toml
from loopopt.targets.cuda import (
    instructions,
    persistent,
    specialize,
    tensor_printer,
    tma,
    tma_store,
    toolchain,
)
from loopopt.targets.cuda.emulate import emulate
from loopopt.targets.cuda.instructions import INSTRUCTIONS
from loopopt.targets.cuda.printer import CUDA, print_kernel
from loopopt.targets.registry import target

HALF_MATMUL = lo.Matmul(37, 45, 40, dtype="float16")
HALF_CONV = lo.Conv2d(24, 40, 3, stride=2, padding=(1, 2), dilation=2, height=13, width=11, batch=2,
                      dtype="float16")
SMALL_TILES = {"block_m": 32, "block_n": 32, "warps_m": 2, "warps_n": 1, "depth": 32}


needs_nvcc = needs(toolchain.nvcc)


def _emulated_error(schedule: lo.Schedule, seed: int = 0) -> tuple[float, float]:
    """The host emulation's largest error against the reference, and its largest excess over the bound
    (``measure.checked``'s: the sums' and a 16-bit output's rounding)."""
    op = schedule.op
    inputs = op.random_inputs(seed=seed)
    args = [inputs[t] for t in op.call_tensors]
    kernel = emulate(schedule)
    residual = np.random.default_rng(seed).standard_normal(op.tensor(op.output).shape).astype(np.float32)
    added = [residual] if schedule.residual else []
    out = kernel(*op.operand_values(*args[:2]), *args[2:], *added)    # the values a float16 kernel reads
    expected = op.reference(*args)
    if kernel.epilogue is not None:
        expected = kernel.epilogue.apply(expected, residual)
    error = np.abs(out.astype(np.float64) - expected)
    return float(error.max()), float((error - output_rounded(op, expected, tolerance(op, inputs))).max())


# --- float16 ops ----------------------------------------------------------------------------------

def test_a_float16_reference_sums_the_half_rounded_inputs_in_float32():
    op = lo.Matmul(3, 4, 5, dtype="float16")
    a, b = (np.full(s, 1 + 2.0 ** -12, np.float32) for s in ((3, 5), (5, 4)))   # rounds to 1 in half
    assert np.array_equal(op.reference(a, b), np.full((3, 4), 5.0))
    assert "dtype='float16'" in repr(op)


def test_the_x86_target_refuses_float16_and_tensorized_schedules():
    with pytest.raises(ScheduleError, match=r"multiplies float16, which the x86 target has no kernels for: "
                                            r"compile it with target='cuda'"):
        lo.Schedule(HALF_MATMUL).compile(target="x86")
    with pytest.raises(ScheduleError, match=r"loops i_i, j_i, k_i are tensorized onto wmma_m16n16k16_f16_f32,"
                                            r" "
                                            r"a GPU instruction; the neon target has none"):
        tensorized = _tiles().tensorize("i_i", "j_i", "k_i", WMMA)
        replace(tensorized, op=lo.Matmul(37, 45, 40)).refuse_gpu_steps("neon")


# --- the tensorize step ---------------------------------------------------------------------------

def _b_by_tma(op, b_layout: str = "NK") -> lo.Schedule:
    """A Matmul on wgmma m64n64k16 whose A the threads copy and whose B TMA copies."""
    return (lo.Schedule(op).split("i", 64).split("j", 64).split("k", 16)
            .reorder("i_o", "j_o", "k_o", "i_i", "j_i", "k_i")
            .tensorize("i_i", "j_i", "k_i", "wgmma_m64n64k16_f16_f32").bind("i_o", "block.x")
            .bind("j_o", "block.y").layout("B", b_layout).stage("A", "k_o", 4)
            .stage("B", "k_o", 4, engine="tma"))


def _tiles(op=HALF_MATMUL) -> lo.Schedule:
    return lo.Schedule(op).split("i", 16).split("j", 16).split("k", 16).reorder(
        "i_o", "j_o", "k_o", "i_i", "j_i", "k_i")


def test_tensorize_records_the_three_loops_and_the_instruction():
    s = _tiles().tensorize("i_i", "j_i", "k_i", WMMA)
    assert s.tensorized == ("i_i", "j_i", "k_i", WMMA) and s.tensor_roles() == ("A", "B")
    assert "tensorize('i_i', 'j_i', 'k_i', 'wmma_m16n16k16_f16_f32')" in [str(step) for step in s.steps]


@pytest.mark.parametrize("make, message", [
    (lambda: _tiles().tensorize("i_i", "j_i", "k_i", "mma_m8n8k4"),
     r"unknown matrix instruction 'mma_m8n8k4'; known: wmma_m16n16k16_f16_f32, mma_m16n8k16_f16_f32, "
     r"wmma_m16n16k16_bf16_f32, mma_m16n8k16_bf16_f32, mma_m16n8k32_s8_s32, mma_m16n8k32_s8u8_s32, "
     r"mma_m16n8k32_u8s8_s32, mma_m16n8k32_u8u8_s32, wgmma_m64n64k16_f16_f32, wgmma_m64n128k16_f16_f32, "
     r"wgmma_m64n256k16_f16_f32"),
    (lambda: _tiles(lo.Matmul(37, 45, 40)).tensorize("i_i", "j_i", "k_i", WMMA),
     r"multiplies float16 \(the input moving with i_i\) by float16; Matmul\(.*\) gives float32 by float32"),
    (lambda: lo.Schedule(HALF_MATMUL).split("i", 8).split("j", 16).split("k", 16)
     .reorder("i_o", "j_o", "k_o", "i_i", "j_i", "k_i").tensorize("i_i", "j_i", "k_i", WMMA),
     r"loop 'i_i' has 8 iterations; wmma_m16n16k16_f16_f32's m is 16 \(split the loop by 16"),
    (lambda: _tiles().reorder("i_o", "j_o", "i_i", "k_o", "j_i", "k_i").tensorize("i_i", "j_i", "k_i", WMMA),
     r"must stay the three innermost, in that order"),
    (lambda: _tiles().tensorize("i_i", "j_i", "k_i", WMMA).split("k_i", 8),
     r"must stay the three innermost"),
    (lambda: _tiles().reorder("i_o", "j_o", "k_o", "k_i", "j_i", "i_i").tensorize("k_i", "j_i", "i_i", WMMA),
     r"loop 'k_i' \(dims k\) must run over outputs only"),
    (lambda: _tiles().tensorize("i_i", "j_i", "k_i", WMMA).unroll("k_i"),
     r"the tensorized loop 'k_i' takes no other annotation"),
    (lambda: gpu_wmma(lo.Conv2d(8, 8, 3, groups=2, height=6, width=6, dtype="float16")),
     r"gpu_wmma: Conv2d\(.*\) is not a matrix product: every output dim moves input I"),
    (lambda: gpu_wmma(lo.Matmul(32, 32, 32, batch=(2,), dtype="float16")),
     r"are not a matrix product: one input must vary with m_i_i_i and k_i_i \(not j_i_i_i\)"),
])
def test_tensorize_refuses_what_the_instruction_cannot_run(make, message):
    with pytest.raises(ScheduleError, match=message):
        make()


@pytest.mark.parametrize("make, message", [
    (lambda: lo.Schedule(HALF_MATMUL), r"runs on tensor cores only: tensorize\(i, j, k"),
    (lambda: _tiles().tensorize("i_i", "j_i", "k_i", WMMA),
     r"a tensorized kernel reads both inputs from shared memory: stage A and B"),
    (lambda: _tiles(lo.Matmul(37, 45, 40)).bind("i_o", "block.x").bind("j_o", "warp.x"),
     r"multiplies float32; the cuda GEMV kernels \(a loop bound to a warp axis without tensorize\)"),
    (lambda: gpu_wmma(lo.Matmul(256, 256, 64, dtype="float16"), block_m=256, block_n=256, warps_m=1,
                      warps_n=1, depth=64),
     r"stages=3: a tensorized block needs \d+ bytes of shared memory \(3 buffers .* 232448 at most: "
     r"stages=2 is the deepest ring of these tiles"),
    (lambda: _tiles().tensorize("i_i", "j_i", "k_i", WMMA).stage("A", "k_o").stage("B", "k_o")
     .bind("i_o", "block.x").bind("j_o", "thread.x"),
     r"loop 'j_o' is bound to a thread axis; a tensorized kernel's threads are the lanes"),
    (lambda: gpu_mma(lo.Matmul(256, 256, 64, dtype="float16"), depth=64, stages=8),
     r"needs 262144 bytes .*\(8 buffers of 32 \+ 32 tiles of 256 \+ 256 elements of 2 bytes\); 232448 at "
     r"most: stages=7 is the deepest ring of these tiles"),
    (lambda: gpu_wgmma(HALF_MATMUL, stages=2),
     r"wgmma_m64n64k16_f16_f32 runs behind its threads: .* needs 3 or more buffers, not stages=2"),
    (lambda: gpu_wgmma(lo.Matmul(1024, 256, 64, dtype="float16"), block_m=1024, warps_m=16, depth=16,
                       stages=3),
     r"a block of 16 issuing groups of 128 threads \(wgmma_m64n256k16_f16_f32\) has 2048 threads; CUDA "
     r"allows at most 1024"),
    (lambda: lo.Schedule(lo.Matmul(37, 45, 40)).split("k", 8).bind("i", "thread.x").split_k("k_o"),
     r"split_k\('k_o'\) needs a tensorized schedule"),
    (lambda: lo.Schedule(lo.Matmul(37, 45, 40)).bind("i", "thread.x").stage("A", "k", stages=2),
     r"stage\(..., stages=2\) needs a tensorized schedule"),
    (lambda: lo.Schedule(lo.Matmul(37, 45, 40)).bind("i", "thread.x").stage("A", "k", engine="tma"),
     r"stage\(A, ..., engine='tma'\) needs a tensorized schedule"),
    (lambda: gpu_wgmma(lo.Conv2d(24, 40, 3, height=13, width=11, dtype="float16"), engine="tma")
     .layout("I", "NCHW"),
     r"stage\('I', engine='tma'\): TMA's boxes need the reduction channel 'c' innermost; I is stored NCHW"),
    (lambda: _b_by_tma(HALF_MATMUL, "KN"), r"B is stored KN at \[k, j\] \(a layout with 'k' last would do"),
    (lambda: gpu_wgmma(lo.Matmul(37, 45, 13, dtype="float16"), engine="tma"),
     r"stage\('A', engine='tma'\): TMA needs each row of A on 16 bytes; its rows are 13 elements \(26 "
     r"bytes\): pad them to a multiple of 8"),
    (lambda: gpu_wmma(HALF_MATMUL, engine="tma"),
     r"stage\('A', engine='tma'\) fills the tiles that wgmma's descriptors read; wmma_m16n16k16_f16_f32 "
     r"loads its tiles through the threads"),
    (lambda: lo.Schedule(lo.Matmul(37, 45, 40, dtype="float16")).split("i", 64).split("j", 64)
     .split("k", 24).split("k_i", 16).reorder("i_o", "j_o", "k_o", "k_i_o", "i_i", "j_i", "k_i_i")
     .bind("i_o", "block.x").bind("j_o", "block.y")
     .tensorize("i_i", "j_i", "k_i_i", "wgmma_m64n64k16_f16_f32")
     .stage("A", "k_o", 3, "tma").stage("B", "k_o", 3),
     r"the guard .*k_i_o.* skips columns inside a tile, which TMA copies whole"),
    (lambda: gpu_wgmma(HALF_MATMUL, engine="tma", cluster=(2, 1)),
     r"cluster\(2, 1\): block.x launches 1 blocks \('i_o'\), not a multiple of the cluster's 2"),
    (lambda: gpu_wgmma(lo.Matmul(200, 45, 40, dtype="float16"), cluster=(2, 1)),
     r"cluster\(2, 1\) multicasts B's tiles, which only TMA copies: stage\('B', ..., engine='tma'\)"),
    (lambda: lo.Schedule(lo.Matmul(37, 45, 40)).bind("i", "block.x").cluster(2, 1),
     r"cluster\(2, 1\) needs a tensorized schedule"),
    (lambda: gpu_wgmma(HALF_MATMUL, specialize=True),
     r"specialize\(\): the producer warpgroup copies by TMA only; A is copied by the threads: "
     r"stage\('A', ..., engine='tma'\)"),
    (lambda: gpu_mma(HALF_MATMUL).swizzle(128), r"swizzle\(128\) lays tiles out for wgmma's descriptors; "
                                                r"mma_m16n8k16_f16_f32 reads the 32-byte swizzle"),
    (lambda: gpu_wgmma(HALF_MATMUL, depth=64, swizzle=128),
     r"swizzle\(128\): the threads copy A's tiles in the 32-byte swizzle; stage\('A', ..., engine='tma'\)"),
    (lambda: gpu_wgmma(lo.Matmul(40, 40, 256, dtype="float16"), depth=64, swizzle=64, engine="tma"),
     r"swizzle\(64\): a tile row holds one step's depth; the steps are 128 bytes deep: stage at a step of at "
     r"most 64 bytes \(gpu_wgmma\(depth=32\)\)"),
    (lambda: gpu_mma(HALF_MATMUL).specialize(), r"specialize\(\): the consumer warpgroups issue wgmma and "
                                                r"keep one group in flight; mma_m16n8k16_f16_f32 runs with"),
    (lambda: gpu_wgmma(lo.Matmul(4096, 4096, 64, dtype="float16"), block_m=192, warps_m=3, engine="tma",
                       specialize=True),
     r"3 consumer warpgroups and the producer start with 128 registers a thread, too few for 128 "
     r"accumulators"),
    (lambda: gpu_wgmma(HALF_MATMUL, engine="tma", persistent=True),
     r"persistent\(\): the producer warpgroup runs into the next tile while the consumers store; "
     r"specialize\(\) the warps first"),
    (lambda: lo.Schedule(lo.Matmul(37, 45, 40)).bind("i", "block.x").persistent(),
     r"persistent\(\) needs a tensorized schedule"),
])
def test_the_cuda_printer_refuses_tensorized_schedules_it_cannot_print(make, message):
    with pytest.raises(ScheduleError, match=message):
        print_kernel(make())


@pytest.mark.parametrize("make, message", [
    (lambda s: s.split_k("j_o"), r"split_k\('j_o'\): loop 'j_o' \(dims j\) must run over the reduction only"),
    (lambda s: s.split_k("k_o").split_k("k_o"), r"loop 'k_o' is already bound to block.z"),
    (lambda s: s.bind("i_o", "block.z").split_k("k_o"), r"block.z is already bound to loop 'i_o'"),
    (lambda s: s.stage("A", "k_o", stages=1), r"stages=1; a ring has 2 or more buffers \(as many as the "
                                              r"target's shared memory holds\)"),
    (lambda s: s.stage("A", "k_o", engine="dma"),
     r"stage\(tensor='A', at='k_o', engine='dma'\): engine='dma'; choose one of 'threads', 'tma'"),
    (lambda s: s.stage("A", "k_o", stages=2).stage("B", "k_o", stages=3),
     r"the tensors staged already have stages=2; stage every input with the same depth"),
    (lambda s: gpu_mma(HALF_MATMUL, split_k=0), r"gpu_wmma: split_k=0; choose 1"),
    (lambda s: s.cluster(3, 1), r"cluster\(3, 1\): cluster sizes 3 x 1; one axis of 2, 4 or 8 blocks"),
    (lambda s: s.cluster(2, 2), r"cluster sizes 2 x 2; one axis of 2, 4 or 8 blocks and the other 1"),
    (lambda s: s.cluster(1, 2), r"no loop is bound to block.y, the cluster's axis"),
    (lambda s: s.bind("i_o", "block.x").cluster(2, 1).cluster(2, 1),
     r"the blocks are clustered already \(2 x 1\); cluster once"),
    (lambda s: s.specialize().specialize(), r"specialize\(\): the warps are specialized already"),
    (lambda s: s.persistent().persistent(), r"persistent\(\): the tile loop is persistent already"),
    (lambda s: gpu_wgmma(HALF_MATMUL, persistent=1), r"gpu_wgmma\(persistent=1\): True or False"),
    (lambda s: s.swizzle(48), r"swizzle\(48\): width=48; choose one of 32, 64, 128 bytes"),
    (lambda s: s.clip(0.0).clip(1.0),
     r"the outputs are clipped already \(Clip\(low=0.0, high=None\)\); clip once"),
    (lambda s: print_kernel(gpu_mma(HALF_MATMUL, split_k=2).clip(0.0)),
     r"epilogue \(Clip\(low=0.0, high=None\)\) needs each output's whole sum; split_k\('k_o_o'\)"),
    (lambda s: print_kernel(gpu_mma(HALF_MATMUL, split_k=2).add_residual()),
     r"epilogue \(\+ residual\) needs each output's whole sum"),
    (lambda s: print_kernel(lo.Schedule(lo.Matmul(4, 4, 4)).bind("i", "thread.x").add_residual()),
     r"add_residual\(\) needs a tensorized schedule"),
    (lambda s: print_kernel(lo.Schedule(lo.Matmul(4, 4, 4)).bind("i", "thread.x").clip(0.0)),
     r"clip: Clip\(low=0.0, high=None\) needs a tensorized schedule"),
])
def test_split_k_pipeline_stages_and_clip_refuse_what_they_cannot_mean(make, message):
    with pytest.raises(ScheduleError, match=message):
        make(_tiles())


@pytest.mark.parametrize("low, high, message", [
    (None, None, r"clip: give low, high or both"), (2.0, 1.0, r"clip: low=2.0 is above high=1.0"),
    (float("nan"), None, r"clip: low=nan; a bound is a finite number or None"),
    ("0", None, r"clip: low='0'; a bound is a finite number")])
def test_clip_refuses_bounds_it_cannot_apply(low, high, message):
    with pytest.raises(ValueError, match=message):
        _tiles().clip(low, high)


def test_split_k_runs_the_reduction_across_block_z_adding_the_shares():
    s = gpu_mma(HALF_CONV, split_k=3)
    assert s.split_k_loop == "steps_o" and s.loop("steps_o").axis == "block.z"
    printed = print_kernel(s)
    assert printed.grid[2] == 3 and "atomicAdd" in printed.source
    assert "cudaMemsetAsync(O, 0," in printed.source
    assert "LO_ADD(O[" in printed.source and "(steps_o == 0 ? B[" in printed.source


def test_compile_refuses_a_block_over_the_architectures_shared_memory():
    with pytest.raises(ScheduleError, match=r"the kernel's blocks need 73728 bytes of shared memory; sm_75 "
                                            r"allows 65536 per block"):
        gpu_wmma(lo.Matmul(256, 256, 64, dtype="float16")).compile(target="cuda", isa="sm_75")


def test_a_ring_is_as_deep_as_the_shared_memory_holds():
    """BERT's 64 x 64 tiles of depth 64 take 16 KB a step: 14 buffers and their two mbarriers each fit
    the 227 KB a block may have, 15 are refused naming the deepest."""
    bert = lo.Matmul(384, 768, 3072, dtype="float16", out_dtype="float16")
    tiles = {"block_m": 64, "block_n": 64, "warps_m": 1, "warps_n": 1, "depth": 64, "engine": "tma",
             "specialize": True}
    printed = print_kernel(gpu_wgmma(bert, **tiles, stages=14))
    assert printed.dynamic_shared_bytes == 14 * (16384 + 16) <= 227 * 1024
    assert "lo_barriers_init(lo_bar, 14); lo_empty_init(lo_bar + 14, 14, 1);" in printed.source
    with pytest.raises(ScheduleError, match=r"^stages=15: a tensorized block needs 246000 bytes of shared "
                                            r"memory .* stages=14 is the deepest ring of these tiles$"):
        print_kernel(gpu_wgmma(bert, **tiles, stages=15))


def test_a_deep_ring_wraps_in_the_emulation():
    """30 steps through a 12-buffer ring (two and a half rounds), warp-specialized: as printed it matches
    the reference."""
    op = lo.Matmul(70, 64, 480, dtype="float16")
    largest, excess = _emulated_error(gpu_wgmma(op, block_m=64, block_n=64, warps_m=1, warps_n=1, depth=16,
                                                stages=12, engine="tma", specialize=True), seed=9)
    assert excess <= 0, largest


def test_warp_axes_count_32_threads_each():
    with pytest.raises(ScheduleError, match=r"a block would have 2048 threads "
                                            r"\(i_o\[8\] warps x j_o\[8\] warps\)"):
        lo.Schedule(lo.Matmul(128, 128, 16, dtype="float16")).split("i", 16).split("j", 16) \
            .bind("i_o", "warp.y").bind("j_o", "warp.x")


def test_a_tensorized_schedule_round_trips_through_a_schedule_file():
    schedule = gpu_mma(HALF_MATMUL, **SMALL_TILES, split_k=2)
    again = schedule_from_toml(to_toml(schedule), HALF_MATMUL)
    assert again.tensorized == schedule.tensorized and again.stages == schedule.stages
    boxes = gpu_wgmma(HALF_MATMUL, stages=5, engine="tma")
    assert "stage(tensor='A', at='k_o', stages=5, engine='tma')" in [str(step) for step in boxes.steps]
    assert schedule_from_toml(to_toml(boxes), HALF_MATMUL).tma_staged == ("A", "B")
    assert schedule_from_toml(to_toml(boxes.cluster(1, 2)), HALF_MATMUL).cluster_dims == (1, 2)
    assert schedule_from_toml(to_toml(boxes.specialize()), HALF_MATMUL).specialized
    assert schedule_from_toml(to_toml(boxes.swizzle(128)), HALF_MATMUL).tile_swizzle == 128
    assert schedule_from_toml(to_toml(boxes.specialize().persistent()), HALF_MATMUL).persistent_tiles
    assert (again.pipeline_stages, again.split_k_loop) == (4, "k_o_o")
    clipped = gpu_wmma(HALF_MATMUL).clip(-1.0, 6.0)
    assert schedule_from_toml(to_toml(clipped), HALF_MATMUL).epilogue == clipped.epilogue
    assert print_kernel(again).source == print_kernel(schedule).source


def test_the_instruction_table_names_its_architecture_and_both_spellings():
    entry = INSTRUCTIONS[WMMA]
    assert (entry.m, entry.n, entry.k, entry.operands, entry.accumulator, entry.arch) == (
        16, 16, 16, ("float16", "float16"), "float32", "sm_70")
    assert "mma_sync" in entry.cuda.mma and "lo_q" in entry.scalar.mma
    entry = INSTRUCTIONS[MMA]
    assert (entry.m, entry.n, entry.k, entry.arch, entry.a_tile_elements) == (16, 16, 16, "sm_80", 256)
    assert "LO_LDSM_X4" in entry.cuda.load_a and "ldmatrix" in entry.header
    assert "LO_TILE" in entry.scalar.load_b


def test_the_wgmma_entries_issue_by_warpgroup_from_descriptors_of_swizzled_tiles():
    for n in (64, 128, 256):
        entry = INSTRUCTIONS[f"wgmma_m64n{n}k16_f16_f32"]
        assert (entry.m, entry.n, entry.k, entry.arch, entry.lanes, entry.asynchronous) == (
            64, n, 16, "sm_90a", 128, True)
        assert (entry.a_tile_elements, entry.b_tile_elements) == (1024, 16 * n)
        assert entry.tile == INSTRUCTIONS[MMA].tile
        assert f"m64n{n}k16.f32.f16.f16" in entry.header and "wgmma.wait_group" in entry.cuda.retire
    assert not INSTRUCTIONS[MMA].asynchronous
    assert [wgmma_instruction(columns, 256, 2) for columns in (40, 200, 300, 4096)] == [
        f"wgmma_m64n{n}k16_f16_f32" for n in (64, 128, 128, 128)]


@pytest.mark.parametrize("name", [MMA, "mma_m16n8k32_s8_s32"])
def test_the_swizzled_tile_is_wgmma_s_32_byte_swizzle(name):
    """The mma tiles' (16-bit and int8; wgmma's is the 16-bit one) LO_TILE is the 32-byte swizzle
    wgmma's descriptors name (layout type 3): byte ``row * 32 + col x element bytes`` with bit 4 XORed
    with bit 7, on a 64-row tile."""
    entry = INSTRUCTIONS[name]
    tile = entry.tile.partition("LO_TILE(row, col) ")[2]
    for row in range(64):
        for col in range(entry.k):
            byte = row * 32 + entry.element_bytes * col
            offset = eval(tile.replace("row", str(row)).replace("col", str(col)))
            assert entry.element_bytes * offset == byte ^ ((byte >> 7 & 1) << 4)


@pytest.mark.parametrize("name", [MMA, "mma_m16n8k16_bf16_f32", "mma_m16n8k32_s8_s32"])
def test_the_mma_tiles_are_swizzled_so_each_ldmatrix_phase_hits_every_bank(name):
    """Eight rows of one 16-byte column (what one ldmatrix phase reads) start in eight different
    groups of four banks, and the layout is a permutation of the 16-row tile (32 bytes a row)."""
    entry = INSTRUCTIONS[name]
    tile = entry.tile.partition("LO_TILE(row, col) ")[2]

    def offset(row: int, col: int) -> int:
        return eval(tile.replace("row", str(row)).replace("col", str(col)))
    assert sorted(offset(r, c) for r in range(16) for c in range(entry.k)) == list(range(16 * entry.k))
    for first in (0, 8):
        for col in (0, entry.k // 2):
            banks = {offset(first + r, col) * entry.element_bytes // 16 % 8 for r in range(8)}
            assert len(banks) == 8


# --- the host emulation against the reference -------------------------------------------------------

_WMMA_RELU = ("wmma default relu", lambda op: gpu_wmma(op).clip(low=0.0))
_MMA_SPLIT = ("mma small split_k=2", lambda op: gpu_mma(op, **SMALL_TILES, split_k=2))
_WMMA_CLIP = ("wmma small clip", lambda op: gpu_wmma(op, **SMALL_TILES).clip(-1.0, 6.0))
_WMMA_RESIDUAL = ("wmma small residual relu6",
                  lambda op: gpu_wmma(op, **SMALL_TILES).add_residual().clip(0.0, 6.0))
_MMA_RESIDUAL = ("mma residual", lambda op: gpu_mma(op).add_residual())
_WGMMA_RESIDUAL = ("wgmma small residual", lambda op: gpu_wgmma(op, **SMALL_TILES).add_residual())
_WGMMA_SPLIT = ("wgmma small split_k=2", lambda op: gpu_wgmma(op, **SMALL_TILES, split_k=2))
_WGMMA_TALL = ("wgmma tall relu", lambda op: gpu_wgmma(op, block_m=128, block_n=128, warps_m=1, warps_n=2,
                                                       depth=48, stages=3).clip(low=0.0))
_WGMMA_TMA = ("wgmma tma three groups residual", lambda op: gpu_wgmma(op, block_m=192, warps_m=3, depth=32,
                                                                      stages=5, engine="tma").add_residual())
_WGMMA_B_BY_TMA = ("wgmma B by tma, A by threads", lambda op: _b_by_tma(op))
_GEMM = lo.Gemm(30, 20, 7, alpha=0.5, beta=2.0, dtype="float16")


@pytest.mark.parametrize("op, make", [
    pytest.param(op, make, id=f"{op!r}-{name}", marks=() if quick else pytest.mark.slow)
    for op, (name, make), quick in [(HALF_MATMUL, _MMA_SPLIT, True), (_GEMM, _WMMA_CLIP, False),
                                    (HALF_CONV, _WGMMA_SPLIT, True), (lo.Matmul(150, 70, 60, dtype="float16"),
                                                                       _WGMMA_TALL, False),
                                    (HALF_MATMUL, _WMMA_CLIP, False), (_GEMM, _MMA_SPLIT, False),
                                    (HALF_CONV, _MMA_SPLIT, False), (HALF_CONV, _WMMA_RELU, False),
                                    (HALF_MATMUL, _WMMA_RELU, False), (_GEMM, _WMMA_RELU, False),
                                    (HALF_CONV, _WMMA_RESIDUAL, True), (_GEMM, _MMA_RESIDUAL, False),
                                    (HALF_CONV, _WGMMA_RESIDUAL, False), (HALF_MATMUL, _WGMMA_TMA, False),
                                    (HALF_MATMUL, _WGMMA_B_BY_TMA, False)]])
def test_the_tensor_presets_emulated_match_the_reference(op, make):
    largest, excess = _emulated_error(make(op))
    assert excess <= 0, largest


def _check_emulated(op, make_tiles):
    make, tiles = make_tiles
    if op.groups > 1:
        with pytest.raises(ScheduleError, match="not a matrix product"):
            make(op, **tiles)
        return
    largest, excess = _emulated_error(make(op, **tiles), seed=5)
    assert excess <= 0, largest


TILES = st.tuples(st.sampled_from([gpu_wmma, gpu_mma, gpu_wgmma]),
                  st.sampled_from([{}, SMALL_TILES, SMALL_TILES | {"split_k": 3, "stages": 3},
                                   {"block_m": 64, "block_n": 32, "warps_m": 1, "warps_n": 2, "depth": 16},
                                   {"block_m": 32, "block_n": 48, "warps_m": 2, "warps_n": 3, "depth": 48,
                                    "split_k": 2}]))
test_random_convs_emulated, test_random_convs_emulated_full = tiers(
    _check_emulated, 3, 8, conv_ops(max_hw=9, max_channels=20, dtype="float16"), TILES)
test_random_matmuls_emulated, test_random_matmuls_emulated_full = tiers(
    _check_emulated, 2, 6, st.one_of(matmul_ops(max_mn=40, max_k=50, batched=False, dtype="float16"),
                                      gemm_ops(max_mn=40, max_k=50, dtype="float16")), TILES)


SPECIALIZED = {"specialize": True}       # a producer warpgroup copies, the warp.* warpgroups multiply
PERSISTENT = {"persistent": True}         # one block a multiprocessor walks the tiles
TMA_TILES = st.sampled_from([{}, SMALL_TILES, SMALL_TILES | {"split_k": 3, "stages": 3}, SPECIALIZED,
                             SMALL_TILES | SPECIALIZED | {"split_k": 2, "stages": 3},
                             {"block_m": 256, "block_n": 128, "depth": 16, "stages": 3} | SPECIALIZED,
                             {"block_m": 192, "warps_m": 3, "depth": 64, "swizzle": 128},
                             SMALL_TILES | SPECIALIZED | {"stages": 3, "swizzle": 64},
                             {"block_m": 192, "warps_m": 3, "depth": 32, "stages": 4},
                             {"block_m": 64, "block_n": 32, "warps_m": 1, "warps_n": 2, "depth": 16},
                             SMALL_TILES | SPECIALIZED | PERSISTENT | {"stages": 3},
                             {"block_m": 64, "block_n": 32, "warps_m": 1, "warps_n": 2, "depth": 64,
                              "swizzle": 128} | SPECIALIZED | PERSISTENT])


def _check_tma_emulated(op, tiles):
    """A Matmul or Gemm whose reduction rows take 16 bytes or a multiple is copied by TMA boxes; the
    others are refused with the row's size."""
    if op.extent(op.reduction_channel_dim) % 8:
        with pytest.raises(ScheduleError, match=r"TMA needs each row of [AB] on 16 bytes"):
            print_kernel(gpu_wgmma(op, **tiles, engine="tma"))
        return
    largest, excess = _emulated_error(gpu_wgmma(op, **tiles, engine="tma"), seed=3)
    assert excess <= 0, largest


_ROWS_OF_16_BYTES = st.one_of(matmul_ops(max_mn=70, max_k=64, batched=False, dtype="float16"),
                              gemm_ops(max_mn=40, max_k=64, dtype="float16")).filter(
    lambda op: op.extent(op.reduction_channel_dim) % 8 == 0 or op.extent(op.reduction_channel_dim) == 13)
test_random_matmuls_emulated_with_tma, test_random_matmuls_emulated_with_tma_full = tiers(
    _check_tma_emulated, 1, 3, _ROWS_OF_16_BYTES, TMA_TILES)


def _check_padded_rows_emulated(op, tiles_block):
    """B stored with its rows padded to whole blocks of the reduction (``NK64k``: rows on whole 128-byte
    lines) is read by TMA as rows of the padded length, the padding's zeros as columns; A too where its
    rows do not take a multiple of 16 bytes."""
    tiles, block = tiles_block
    schedule = gpu_wgmma(op, **tiles, engine="tma").layout("B", f"NK{block}k")
    if op.extent(op.reduction_channel_dim) % 8:
        schedule = schedule.layout("A", f"MK{block}k")
    largest, excess = _emulated_error(schedule, seed=4)
    assert excess <= 0, largest


test_random_padded_rows_emulated_with_tma, test_random_padded_rows_emulated_with_tma_full = tiers(
    _check_padded_rows_emulated, 2, 10,
    st.one_of(matmul_ops(max_mn=70, max_k=90, batched=False, dtype="float16"),
              gemm_ops(max_mn=40, max_k=90, dtype="float16")),
    st.tuples(TMA_TILES, st.sampled_from([8, 16, 64])))


def test_tma_reads_padded_rows_at_their_pitch(monkeypatch):
    """The tensor map of a padded B steps the padded row (the GEMM in no catalog's 1000 columns in
    blocks of 64: 2048 bytes); a map stepping 8 columns less misses the reference in the emulation."""
    op = lo.Matmul(2000, 3000, 1000, dtype="float16", out_dtype="float16")
    source = print_kernel(gpu_wgmma(op, block_m=192, block_n=256, warps_m=3, depth=64, swizzle=128,
                                    engine="tma").layout("B", "NK64k")).source
    assert "lo_dims[2] = {1024ull, 3000ull}, lo_strides[1] = {2048ull}" in source
    assert "lo_dims[2] = {1000ull, 2000ull}, lo_strides[1] = {2000ull}" in source
    small = gpu_wgmma(lo.Matmul(70, 90, 100, dtype="float16"), block_m=64, block_n=64, warps_m=1, depth=64,
                      swizzle=128, engine="tma").layout("B", "NK64k").layout("A", "MK64k")
    assert _emulated_error(small)[1] <= 0
    storage_rows = tma.storage_rows
    monkeypatch.setattr(tma, "storage_rows", lambda layout, shape: (storage_rows(layout, shape)[0],
                                                                    storage_rows(layout, shape)[1] - 8))
    largest, excess = _emulated_error(small)
    assert not excess <= 0.1, largest


@pytest.mark.parametrize("op, arguments, named", [
    (lo.Matmul(70, 90, 104, dtype="float16"), {"padded": True}, "engine='threads'"),
    (lo.Conv2d(64, 72, 1, height=7, width=9, bias=False, dtype="float16"), {"padded": True, "engine": "tma"},
     "stored OHWI"),
    (lo.Matmul(70, 90, 104, dtype="float16"), {"padded": 1, "engine": "tma"}, "padded=1")], ids=str)
def test_weights_in_whole_line_rows_refused_where_tma_does_not_copy_a_2d_operand(op, arguments, named):
    """``gpu_wgmma(padded=True)`` takes a Matmul's or Gemm's B copied by TMA; elsewhere a one-line error
    naming what it got."""
    with pytest.raises(ScheduleError, match=re.escape(named)):
        gpu_wgmma(op, **arguments)


@pytest.mark.slow
@pytest.mark.parametrize("op", [lo.Matmul(70, 90, 104, dtype="float16"),
                                lo.Gemm(30, 20, 72, alpha=0.5, beta=2.0, dtype="bfloat16")], ids=repr)
def test_the_searchs_weights_in_whole_line_rows_match_the_reference_in_the_emulation(op):
    """The search's first TMA candidate where K's rows straddle L2 lines (208 and 144 bytes) stores B in
    ``NK64k`` (``gpu_wgmma(padded=True)``) and matches the reference in the emulation."""
    rules = target("cuda").search_rules()
    first = next(c.knobs for c in rules.rank(rules.candidates(op, "sm_90")) if c.knobs.engine == "tma")
    schedule = first.schedule(op, "sm_90")
    assert first.padded and schedule.layout_of("B").tag == "NK64k"
    largest, excess = _emulated_error(schedule, seed=5)
    assert excess <= 0, largest


def test_a_16_bit_output_of_split_shares_is_within_its_rounding_in_the_emulation():
    """Matmul(70, 90, 104) to float16 in 2 shares added by the tile's last block: the emulation's error
    (0.0149 at outputs up to 36.6) is over the float32 sums' bound and within it with the output's one
    rounding to float16 (2^-11 of each output), as ``measure.checked`` bounds it: the fifteenth
    session's miss was its helper's bound, not the split-K path (unsplit, the same error)."""
    op = lo.Matmul(70, 90, 104, dtype="float16", out_dtype="float16")
    largest, excess = _emulated_error(gpu_wgmma(op, split_k=2, depth=32, stages=3))
    assert excess <= 0 and largest > tolerance(op, op.random_inputs(seed=0)).max()


@pytest.mark.parametrize("mutate", [
    pytest.param(lambda monkeypatch: monkeypatch.setattr(tma, "SWIZZLE_BYTES", 64), id="64-byte swizzle"),
    pytest.param(lambda monkeypatch: monkeypatch.setattr(tma.TmaOperand, "box_bytes", 1000),
                 id="bytes expected", marks=pytest.mark.slow)])
def test_the_tma_emulation_fails_a_box_the_descriptors_do_not_read(monkeypatch, mutate):
    """Boxes swizzled otherwise than wgmma's descriptors read them, or a barrier expecting other bytes
    than its boxes bring (the GPU would hang: here the step's buffer turns NaN), miss the reference."""
    mutate(monkeypatch)
    largest, excess = _emulated_error(gpu_wgmma(HALF_MATMUL, engine="tma"))
    assert not excess <= 0.1, largest


def _consumer_reads_early(monkeypatch):
    monkeypatch.setattr(specialize, "full_parity",
                        lambda step, stages: f"(unsigned) (({step}) / {stages} + 1) & 1u")


def _producer_refills_early(monkeypatch):
    monkeypatch.setattr(specialize, "refill_ready", lambda step, stages, try_wait, empty:
                        f"({step}) < {stages} || {try_wait}({empty} + ({step}) % {stages}, "
                        f"(unsigned) (({step}) / {stages}) & 1u)")


@pytest.mark.parametrize("mutate, exact", [
    pytest.param(lambda monkeypatch: None, True, id="as printed"),
    pytest.param(_consumer_reads_early, False, id="consumer before the full barrier"),
    pytest.param(_producer_refills_early, False, id="producer before the empty barrier",
                 marks=pytest.mark.slow),
    pytest.param(lambda monkeypatch: monkeypatch.setattr(specialize, "released", lambda step: f"{step} - 2"),
                 False, id="a consumer releasing another step", marks=pytest.mark.slow)])
def test_the_specialized_emulation_fails_a_wrong_barrier_protocol(monkeypatch, mutate, exact):
    """Warp specialization's protocol (``specialize.py``) as printed matches the reference over 7 steps of
    a 3-buffer ring in two blocks (the producer eager in one, lazy in the other, swapping each round);
    a consumer waiting on the wrong round of the full barrier reads an unfilled buffer, a producer
    waiting on the wrong round of the empty barrier overwrites a step not yet read, and a release of
    the wrong buffer hangs (NaN): each misses it."""
    mutate(monkeypatch)
    op = lo.Matmul(100, 300, 200, dtype="float16")
    largest, excess = _emulated_error(gpu_wgmma(op, block_m=64, block_n=256, warps_m=1, depth=32, stages=3,
                                                engine="tma", specialize=True), seed=4)
    assert (excess <= 0) is exact, largest


@pytest.mark.parametrize("producers", [1, 2, pytest.param(3, marks=pytest.mark.slow)])
@pytest.mark.parametrize("walks", [False, True], ids=["one tile a block", "persistent"])
@pytest.mark.slow
def test_producers_fill_their_own_steps_in_any_order(monkeypatch, producers, walks):
    """``specialize.PRODUCERS`` threads issue the copies, each every ``PRODUCERS``-th step from its own:
    on the device one thread a warp of the producer warpgroup, in the host emulation one cursor each,
    the first tried changing at each fill (their steps land out of order); 7 steps of a 3-buffer ring
    (a persistent kernel's 20 tiles of 5 steps over 3 blocks) match the reference."""
    monkeypatch.setattr(specialize, "PRODUCERS", producers)
    op = lo.Matmul(100, 300, 200, dtype="float16") if not walks else lo.Matmul(320, 200, 80, dtype="float16")
    schedule = (gpu_wgmma(op, block_m=64, block_n=256, warps_m=1, depth=32, stages=3, engine="tma",
                          specialize=True) if not walks else
                gpu_wgmma(op, block_m=64, block_n=64, warps_m=1, depth=16, stages=3, engine="tma",
                          specialize=True, persistent=True))
    source = print_kernel(schedule).source
    first = specialize.WARPGROUP      # the producer warpgroup follows the one consumer warpgroup
    assert f"if (lo_thread % 32 == 0 && lo_thread < {first + 32 * producers}) {{" in source
    assert (f"if (lo_p % {producers} != lo_producer) continue;" in source if walks and producers > 1
            else f"for (int lo_p = lo_producer; lo_p < 7; lo_p += {producers}) {{" in source if producers > 1
            else "lo_producer)" not in source)
    largest, excess = _emulated_error(schedule, seed=8 if walks else 4)
    assert excess <= 0, largest


@pytest.mark.parametrize("mutate, exact", [
    pytest.param(lambda monkeypatch: None, True, id="as printed"),
    pytest.param(lambda monkeypatch: monkeypatch.setattr(
        persistent.Walk, "group",
        lambda self, block, blocks, round: f"({block}) / 2 + ({round}) * ({blocks})"),
        False, id="two blocks start on one tile", marks=pytest.mark.slow),
    pytest.param(lambda monkeypatch: monkeypatch.setattr(
        persistent.Walk, "rounds", lambda self, block, blocks: f"({self.tiles}) / ({blocks})"), False,
        id="the tiles past the last whole round skipped", marks=pytest.mark.slow),
    pytest.param(lambda monkeypatch: monkeypatch.setattr(tma_store, "staged", lambda buffer, row, column, _:
                                                         f"({buffer}) * 2048 + ({row}) * 32 + ({column})"),
                 False, id="staging without the swizzle", marks=pytest.mark.slow),
    pytest.param(lambda monkeypatch: monkeypatch.setattr(tensor_printer.TensorPrinter, "_step_variables",
                                                         lambda self, depth, step: self.emit(
                                                             depth, f"const int lo_step = {step}; "
                                                                    f"const int lo_ring = lo_step;")), False,
        id="the ring counted per tile", marks=pytest.mark.slow)])
def test_the_persistent_emulation_fails_a_wrong_tile_walk(monkeypatch, mutate, exact):
    """A persistent tile loop (``persistent.py``) as printed matches the reference: 3 blocks walk 20
    tiles (7, 7 and 6) of 5 steps in a 3-buffer ring, the producer running into each next tile, the
    outputs stored by TMA; two blocks starting on one tile (one stored twice, one never), a walk stopping
    before the last round's tiles, staging written without the swizzle TMA reads, and consumers that
    restart the ring's count at each tile (reading buffers the producer filled for other steps) each
    miss it."""
    mutate(monkeypatch)
    op = lo.Matmul(320, 200, 80, dtype="float16")
    schedule = gpu_wgmma(op, block_m=64, block_n=64, warps_m=1, depth=16, stages=3, engine="tma",
                         specialize=True, persistent=True)
    largest, excess = _emulated_error(schedule, seed=8)
    assert (excess <= 0) is exact, largest


# clusters of 2 along the columns (10 cluster tiles over 3 clusters: 4, 3, 3) and along the rows (16: 6, 5,
# 5), of 4 along the columns (8: 3, 3, 2)
WALKED_CLUSTERS = [(lo.Matmul(320, 200, 80, dtype="float16"), {"cluster": (1, 2)}),
                   (lo.Matmul(512, 200, 80, dtype="float16"), {"cluster": (2, 1)}),
                   (lo.Matmul(128, 1000, 48, dtype="float16"), {"cluster": (1, 4), "warps_n": 1})]


def _peers_in_another_tile(monkeypatch):
    monkeypatch.setattr(persistent.Walk, "tile",
                        lambda self, group, rank: f"{self.size} * ({group}) + ({rank})")


@pytest.mark.parametrize("mutate, exact", [
    pytest.param(lambda monkeypatch: None, True, id="as printed"),
    pytest.param(_peers_in_another_tile, False, id="a cluster's blocks on tiles of other rows or columns"),
    pytest.param(lambda monkeypatch: monkeypatch.setattr(
        persistent.Walk, "rounds",
        lambda self, block, blocks: f"({self.groups}) / (({blocks}) / {self.size})"),
        False, id="the cluster tiles past the last whole round skipped", marks=pytest.mark.slow)])
@pytest.mark.slow
def test_a_persistent_walk_by_clusters_multicasts_its_peers_slices(monkeypatch, mutate, exact):
    """A persistent walk in clusters (``persistent.Walk``): 3 clusters walk the cluster tiles, each
    block of a cluster the tile of its rank, its peers' slices of the multicast tiles copied (in the
    emulation) from the peers' own tiles, so blocks of a cluster on tiles that share no rows (columns)
    miss the reference, as does a walk that stops before the last round's cluster tiles."""
    mutate(monkeypatch)
    errors = [_emulated_error(gpu_wgmma(op, block_m=64, block_n=64, warps_m=1, depth=16, stages=3,
                                        engine="tma", specialize=True, persistent=True, **tiles), seed=8)
              for op, tiles in WALKED_CLUSTERS]
    assert all(excess <= 0 for _, excess in errors) is exact, errors


def test_a_persistent_cluster_launches_a_row_of_whole_clusters():
    """A persistent kernel in clusters of 2 along the columns (cuBLAS's 1 x 2 of 192 x 128 tiles) launches
    a row of clusters (``__cluster_dims__(2, 1, 1)``): as many as the device holds at once
    (``cudaOccupancyMaxActiveClusters`` of the kernel, its threads and shared memory, read once), at most
    a block a tile in whole clusters; each cluster walks the cluster tiles, its block of rank r the tile r
    of each pair of columns."""
    op = lo.Matmul(2000, 3000, 1000, dtype="float16", out_dtype="float16")
    source = print_kernel(gpu_wgmma(op, block_m=192, block_n=128, warps_m=1, warps_n=2, depth=64, swizzle=128,
                                    stages=5, engine="tma", specialize=True, persistent=True,
                                    cluster=(1, 2))).source
    for text in ("__cluster_dims__(2, 1, 1) lo_nest(",
                 "lo_c.gridDim = dim3(2, 1, 1); lo_c.blockDim = dim3(384, 1, 1); "
                 "lo_c.dynamicSmemBytes = 221264; "
                 "cudaError_t lo_e = cudaOccupancyMaxActiveClusters(&lo_held, lo_nest, &lo_c);",
                 "lo_held *= 2; }",
                 "const int lo_blocks = (lo_held < 264 ? lo_held : 264) / 2 * 2;   /* whole clusters */",
                 "const int lo_rounds = ((132) - ((blockIdx.x) / 2) + ((gridDim.x) / 2) - 1) / "
                 "((gridDim.x) / 2);",
                 "const int lo_group = ((blockIdx.x) / 2) + (lo_n) * ((gridDim.x) / 2);",
                 "const int lo_tile = (lo_group) % 11 + 11 * (2 * ((lo_group) / 11) + (lo_rank));",
                 "lo_tma_2d_multicast(", "lo_release("):
        assert text in source, text


@pytest.mark.parametrize("cluster", [(1, 1), (1, 2)], ids=["alone", "in pairs"])
@pytest.mark.slow
def test_a_persistent_kernel_stages_its_stores_in_one_buffer_a_warpgroup_where_two_do_not_fit(cluster):
    """192 x 128 tiles on two consumer warpgroups: beside 4 buffers of the ring (160 KB) two staging
    buffers a warpgroup fit, beside 5 (200 KB) one (cuBLAS's 5 stages of 192 x 128: 221 KB), each chunk's
    writes waiting until no store still reads it; both match the reference in the emulation."""
    op = lo.Matmul(400, 512, 320, dtype="float16")
    for stages, buffers in ((4, 2), (5, 1)):
        schedule = gpu_wgmma(op, block_m=192, block_n=128, warps_m=1, warps_n=2, depth=64, swizzle=128,
                             stages=stages, engine="tma", specialize=True, persistent=True, cluster=cluster)
        printer = tensor_printer.TensorPrinter(schedule, CUDA)
        assert printer.staging_buffers == buffers and printer.smem_bytes <= tensor_printer.MAX_SHARED_BYTES
        assert f"LO_STORES_READ_BUT({buffers - 1});" in print_kernel(schedule).source
        largest, excess = _emulated_error(schedule, seed=8)
        assert excess <= 0, largest


def test_a_persistent_kernel_walks_the_tiles_and_stores_its_outputs_by_tma_or_in_pairs():
    """One block a multiprocessor (at most one a tile) from the launcher; a block's walk of the tiles; a
    Matmul's outputs staged in shared memory and stored by TMA (``tma_store.py``), the last stores
    awaited before the block ends; a conv's NHWC output stored from registers, two columns an 8-byte
    store where the offset allows (an even channel count), not where it does not (45 columns) nor under
    split-K (atomic adds)."""
    source = print_kernel(gpu_wgmma(lo.Matmul(300, 260, 200, dtype="float16"), engine="tma", specialize=True,
                                    persistent=True)).source
    for text in ("const int lo_blocks = lo_sms < 6 ? lo_sms : 6;", "lo_nest<<<dim3(lo_blocks, 1, 1)",
                 "const int lo_rounds = ((6) - (blockIdx.x) + (gridDim.x) - 1) / (gridDim.x);",
                 "const int lo_tile = (blockIdx.x) + (lo_n) * (gridDim.x);", "lo_tma_store_2d(&lo_map_C, ",
                 "LO_STORES_READ_BUT(1);", "LO_STORES_DONE();", "lo_encode(&lo_map_C, 7, 2, C,",
                 "persistent()"):
        assert text in source, text
    assert "LO_STORE2(C[" not in source and "__syncthreads(); " not in source.split("lo_rounds")[1]
    conv = gpu_wgmma(lo.Conv2d(16, 64, 3, padding=1, height=12, width=12, batch=2, dtype="float16"),
                     engine="tma", specialize=True, persistent=True)
    assert "LO_STORE2(O[" in print_kernel(conv).source and "lo_map_O" not in print_kernel(conv).source
    odd = gpu_wgmma(lo.Matmul(64, 45, 64, dtype="float16"), engine="tma", specialize=True, persistent=True)
    assert "LO_STORE2(C[" not in print_kernel(odd).source and "lo_map_C" not in print_kernel(odd).source
    split = gpu_wgmma(lo.Matmul(64, 64, 64, dtype="float16"), engine="tma", specialize=True, persistent=True,
                      split_k=2, depth=16)
    assert "LO_STORE2(C[" not in print_kernel(split).source and "LO_ADD(C[" in print_kernel(split).source


@pytest.mark.parametrize("specialized", [False, True], ids=["unspecialized", "specialized"])
@pytest.mark.parametrize("mutate, exact", [
    pytest.param(lambda monkeypatch: None, True, id="as printed"),
    pytest.param(lambda monkeypatch: monkeypatch.setattr(tma_store, "staged", lambda buffer, row, column, _:
                                                         f"({buffer}) * 2048 + ({row}) * 32 + ({column})"),
                 False, id="staging without the swizzle", marks=pytest.mark.slow)])
@pytest.mark.parametrize("op", [lo.Matmul(150, 200, 96, dtype="float16"),
                                lo.Gemm(150, 200, 96, alpha=0.5, beta=2.0, c_shape=(200,), dtype="float16")],
                         ids=["matmul", "gemm with a bias"])
@pytest.mark.slow
def test_a_tiles_outputs_go_out_by_tma_staged_over_the_tiles(monkeypatch, mutate, exact, specialized, op):
    """A TMA kernel's outputs (unspecialized or specialized, not persistent) staged over its tiles once
    the products are done and stored by TMA, clipped at the tails of both axes (a Gemm's with its bias):
    they match the reference, and miss it staged without the swizzle TMA reads; the stores awaited before
    the block ends."""
    mutate(monkeypatch)
    schedule = gpu_wgmma(op, block_m=128, warps_m=2, block_n=128, depth=32, stages=3, engine="tma",
                         specialize=specialized)
    source = print_kernel(schedule).source
    for text in (f"lo_tma_store_2d(&lo_map_{op.output}, ", "LO_STORES_DONE();",
                 "lo_stage = (float *) lo_smem;"):
        assert text in source, text
    assert "lo_scratch" not in source
    largest, excess = _emulated_error(schedule, seed=9)
    assert (excess <= 0) is exact, largest


@pytest.mark.parametrize("mutate, exact", [
    pytest.param(lambda monkeypatch: None, True, id="as printed"),
    pytest.param(lambda monkeypatch: monkeypatch.setattr(
        tensor_printer, "with_swizzle", lambda entry, width: replace(
            instructions.with_swizzle(entry, width), host_header=entry.host_header)), False,
        id="descriptors of the 32-byte swizzle", marks=pytest.mark.slow)])
def test_the_wide_swizzle_boxes_are_read_as_the_descriptors_say(monkeypatch, mutate, exact):
    """Tiles of 128-byte rows (``swizzle(128)``: one box a tile a step, the k-slices 32 bytes apart)
    match the reference through the descriptors of the 128-byte swizzle, and miss it through the
    32-byte swizzle's."""
    mutate(monkeypatch)
    op = lo.Matmul(100, 300, 200, dtype="float16")
    schedule = gpu_wgmma(op, block_m=64, warps_m=1, depth=64, engine="tma", swizzle=128, specialize=True)
    largest, excess = _emulated_error(schedule, seed=6)
    assert (excess <= 0) is exact, largest


def test_a_specialized_kernel_prints_its_roles_and_register_split():
    """Two consumer warpgroups and the producer: 384 threads capped at 168 registers at entry, the
    producer down to 40 and the consumers up to 232; the pseudocode names the producer."""
    op = lo.Matmul(4096, 4096, 4096, dtype="bfloat16")
    schedule = gpu_wgmma(op, engine="tma", specialize=True)
    printed = print_kernel(schedule)
    assert printed.block == (384, 1, 1)
    for text in ("__launch_bounds__(384, 1)", "setmaxnreg.dec.sync.aligned.u32 40;",
                 "setmaxnreg.inc.sync.aligned.u32 232;", "m64n256k16.f32.bf16.bf16", "bar.sync 3, 256;",
                 "lo_empty_init(lo_bar + 4, 4, 2)", "specialize()"):
        assert text in printed.source, text
    assert "copied as 2-D boxes by TMA from a producer warpgroup" in schedule.pseudocode("sm_90")


CLUSTERED = [({"block_m": 64, "warps_m": 1, "cluster": (2, 1)}, lo.Matmul(100, 300, 72, dtype="float16")),
             ({"block_m": 64, "block_n": 32, "warps_m": 1, "depth": 32, "stages": 3, "cluster": (1, 4)},
              lo.Gemm(70, 250, 40, alpha=0.5, beta=2.0, dtype="float16"))]


@pytest.mark.parametrize("mutate, exact", [
    pytest.param(lambda monkeypatch: None, True, id="as printed"),
    pytest.param(lambda monkeypatch: monkeypatch.setattr(tma.TmaOperand, "tile_bytes",
                                                         tma.TmaOperand.box_bytes), False,
                 id="one slice's bytes expected", marks=pytest.mark.slow)])
@pytest.mark.parametrize("specialized", [False, True], ids=["", "specialized"])
@pytest.mark.slow
def test_a_cluster_multicasts_one_slice_a_block_in_the_emulation(monkeypatch, mutate, exact, specialized):
    """A clustered kernel (``cluster``: each rank's slice of the shared tiles, along block.x and
    block.y; warp-specialized too) matches the reference; a barrier expecting one slice's bytes (the
    GPU would hang) misses it."""
    mutate(monkeypatch)
    errors = [_emulated_error(gpu_wgmma(op, **tiles, engine="tma", specialize=specialized), seed=2)
              for tiles, op in CLUSTERED]
    assert all(excess <= 0 for _, excess in errors) is exact, errors


def _wrong_stride(entry):
    return replace(entry, host_header=entry.host_header.replace("(256 >> 4) << 32", "(512 >> 4) << 32"))


def _wide_swizzle(entry):
    return replace(entry, host_header=entry.host_header.replace("3ull << 62", "1ull << 62"))


@pytest.mark.parametrize("mutate", [
    pytest.param(lambda entry: replace(entry, tile="#define LO_TILE(row, col) ((row) * 16 + (col))"),
                 id="tile unswizzled"),
    pytest.param(_wrong_stride, id="stride 512", marks=pytest.mark.slow),
    pytest.param(_wide_swizzle, id="128-byte swizzle", marks=pytest.mark.slow)])
def test_the_wgmma_emulation_reads_the_tiles_as_the_descriptors_say(monkeypatch, mutate):
    """A tile laid out otherwise than its descriptor says (the copies' LO_TILE, the descriptor's
    stride or swizzle) reads wrong elements in the emulation: the sums miss the reference."""
    name = "wgmma_m64n64k16_f16_f32"
    monkeypatch.setitem(INSTRUCTIONS, name, mutate(INSTRUCTIONS[name]))
    largest, excess = _emulated_error(gpu_wgmma(HALF_MATMUL))
    assert excess > 0.1, largest


def test_wgmma_is_refused_off_hopper_before_nvcc_runs():
    with pytest.raises(ScheduleError, match=r"wgmma_m64n64k16_f16_f32 needs sm_90a; the kernel is built for "
                                            r"sm_80"):
        gpu_wgmma(HALF_MATMUL).compile(target="cuda", isa="sm_80")


def test_a_block_of_more_than_256_threads_bounds_its_registers_so_it_launches():
    """Four warpgroups (512 threads) get 128 registers each, which ptxas is told (a conv4_x kernel
    took 132 and failed to launch); two (256 threads, 255 registers each) need no bound."""
    op = lo.Matmul(256, 64, 32, dtype="float16")
    four = print_kernel(gpu_wgmma(op, block_m=256, block_n=64, warps_m=4)).source
    assert "__global__ void __launch_bounds__(512) lo_nest(" in four
    assert "__launch_bounds__" not in print_kernel(gpu_wgmma(op)).source


# --- compile-only builds -------------------------------------------------------------------------

@pytest.mark.slow        # nvcc builds: the quick tier builds one kernel (test_cuda_target.py)
@needs_nvcc
@pytest.mark.parametrize("schedule, expected", [
    (lambda: gpu_mma(lo.Matmul(4096, 4096, 4096, dtype="float16")), ["HMMA.16816.F32", "LDSM.16.M88.4"]),
    (lambda: gpu_wmma(lo.Conv2d(64, 64, 3, padding=1, height=56, width=56, batch=1, dtype="float16"),
                      split_k=4), ["HMMA.16816.F32", "REDG.E.ADD.F32"]),
    (lambda: gpu_wgmma(lo.Matmul(4096, 4096, 4096, dtype="float16")), ["HGMMA.64x256x16.F32"]),
    (lambda: gpu_wgmma(lo.Matmul(4096, 4096, 4096, dtype="float16"), block_m=192, warps_m=3, engine="tma",
                       cluster=(2, 1)), ["UTMALDG.2D", "UTMALDG.2D.MULTICAST", "UCGABAR_WAIT"]),
    (lambda: gpu_wgmma(lo.Matmul(4096, 4096, 4096, dtype="bfloat16"), depth=64, engine="tma", swizzle=128,
                       specialize=True, persistent=True),
     ["HGMMA.64x256x16.F32.BF16", "UTMALDG.2D", "USETMAXREG", "UTMASTG.2D"]),
    (lambda: gpu_wgmma(lo.Matmul(4096, 4096, 4096, quant=lo.QuantSpec(activation="uint8", output="uint8")),
                       warps_m=1, warps_n=2, depth=128, engine="tma", swizzle=128, specialize=True),
     ["IGMMA.64x128x32.U8.S8", "UTMALDG.2D", "USETMAXREG"]),
    (lambda: gpu_wgmma(lo.Conv2d(128, 128, 3, padding=1, height=28, width=28, batch=32, dtype="float16"),
                       block_m=256, block_n=128, depth=64, engine="tma", swizzle=128, specialize=True),
     ["HGMMA.64x128x16.F32", "UTMALDG.4D", "SYNCS.ARRIVE.TRANS64", "USETMAXREG"])],
    ids=["gemm4096 mma", "conv2_x.n1 wmma split_k", "gemm4096 wgmma",
         "gemm4096 wgmma tma multicast", "gemm4096 bf16 specialized persistent",
         "gemm4096 u8s8 requantized specialized 128-byte swizzle", "conv3_x.n32 pixel boxes specialized"])
def test_tensor_kernels_build_for_sm_90_with_tensor_instructions_and_no_spills(schedule, expected):
    kernel = schedule().compile(target="cuda", isa="sm_90")
    assert kernel.build.spill_bytes == 0, kernel.report
    assert kernel.build.registers * np.prod(kernel.printed.block) <= 65536, kernel.report
    code = sass(kernel)
    assert ("LDGSTS" in code) != any(i.startswith("UTMALDG") for i in expected)   # the threads', or TMA's
    assert all(instruction in code for instruction in expected), expected
    assert "LDL" not in code and "STL" not in code


@pytest.mark.slow        # an nvcc build
@needs_nvcc
def test_the_ring_protocol_fences_nothing_beyond_its_block():
    """A specialized multicast kernel's mbarrier waits acquire and its releases to the cluster's blocks
    release at the block's scope, as CUTLASS's ClusterBarrier does: at the cluster's scope ptxas put a
    GPU-wide ``MEMBAR.ALL.GPU`` before every remote arrive and an L1 invalidation (``CCTL.IVALL``) after
    every passed try_wait, each step (clustered kernels 3-5x slower than unclustered on the H200)."""
    op = lo.Matmul(384, 768, 3072, dtype="float16", out_dtype="float16")
    schedule = gpu_wgmma(op, block_m=64, block_n=64, warps_m=1, warps_n=1, depth=64, swizzle=128, stages=8,
                         engine="tma", specialize=True, cluster=(1, 2))
    code = re.findall(r"/\*[0-9a-f]{4}\*/\s+([^;]*);", sass(schedule.compile(target="cuda", isa="sm_90")))
    arrives = [i for i, instruction in enumerate(code) if "SYNCS.ARRIVE.TRANS64.RED" in instruction]
    waits = [i for i, instruction in enumerate(code) if "SYNCS.PHASECHK" in instruction]
    assert arrives and waits, "no remote arrive or try_wait in the SASS"
    assert not [code[j] for i in arrives for j in range(i - 4, i) if "MEMBAR" in code[j]]
    assert not [code[i + 1] for i in waits if "CCTL" in code[i + 1]]


@pytest.mark.slow        # an nvcc build
@needs_nvcc
@pytest.mark.parametrize("op, tiles, products", [
    (lo.Matmul(384, 768, 3072, dtype="float16", out_dtype="float16"),
     {"block_m": 64, "block_n": 64, "warps_m": 1, "warps_n": 1, "stages": 8}, 4),
    (lo.Matmul(4096, 4096, 4096, dtype="float16", out_dtype="float16"),
     {"block_m": 128, "block_n": 256, "warps_m": 1, "warps_n": 2, "stages": 4, "persistent": True}, 8)],
    ids=["BERT 64x64 ring of 8", "persistent 128x256: 64 steps, ring of 4"])
def test_the_consumers_wait_on_each_buffer_at_a_constant_address(op, tiles, products):
    """A specialized kernel's consumers run their steps by rounds of the ring, unrolled over its buffers
    (a persistent kernel's where a tile's steps fill whole rounds): each buffer's full barrier waited on
    at its own constant address and every step's ``products`` wgmmas issued, with no ``S2R`` (the
    shared window's base, ``__cvta_generic_to_shared``) between a wait and its products: a step once
    computed its buffer, barrier and descriptors from the step count (144 ns a step on the H200, 102
    unrolled; cuBLAS 98)."""
    schedule = gpu_wgmma(op, **tiles, depth=64, swizzle=128, engine="tma", specialize=True)
    stages = tiles["stages"]
    barriers = tensor_printer.TensorPrinter(schedule, CUDA).barrier_offset
    own = "|".join(f"{barriers + 8 * buffer:#x}" for buffer in range(stages))
    code = re.findall(r"/\*[0-9a-f]{4}\*/\s+([^;]*);", sass(schedule.compile(target="cuda", isa="sm_90")))
    full = [i for i, instruction in enumerate(code)
            if re.search(rf"TRYWAIT P\d, \[(R\d+\+URZ|UR\d+)\+({own})\]", instruction)]
    addresses = {re.search(own, code[i]).group() for i in full}
    assert len(addresses) == stages, [code[i] for i in full]
    products_issued = [i for i, instruction in enumerate(code) if instruction.startswith("HGMMA")]
    assert len(products_issued) == stages * products
    after = {i: next((p for p in products_issued if p > i), i) for i in full}   # the wait's first product
    assert not [code[j] for i in full for j in range(i, after[i]) if "S2R" in code[j]]


@pytest.mark.parametrize("make", [gpu_wmma, gpu_mma])
@pytest.mark.parametrize("split_k", [1, 3])
def test_outputs_in_the_padding_keep_their_bias(make, split_k):
    """A 1x1 conv over a padded row: the outer outputs read only padding, so they are their bias alone
    (the padding guard zero-fills the input's tile; it once also skipped their store)."""
    op = lo.Conv2d(1, 1, 1, padding=(0, 1), height=1, width=1, dtype="float16")
    schedule = make(op, block_m=32, block_n=32, warps_m=2, warps_n=1, depth=32, split_k=split_k, stages=2)
    largest, excess = _emulated_error(schedule, seed=5)
    assert excess <= 0, largest


@pytest.mark.slow
def test_the_pseudocode_of_a_tensorized_schedule_names_its_staged_tiles():
    schedule = gpu_mma(HALF_CONV, **SMALL_TILES)
    text = schedule.pseudocode("sm_90")       # the preset stages 4 buffers
    assert "stage I's tile in shared memory (gathered as a matrix operand, 4-buffer ring)" in text
    assert ("stage B's tile in shared memory (copied as 2-D boxes by TMA, 4-buffer ring)"
            in gpu_wgmma(HALF_MATMUL, engine="tma").pseudocode("sm_90"))
    assert str(schedule) == text      # a GPU schedule prints as the cuda target's, not the host's
