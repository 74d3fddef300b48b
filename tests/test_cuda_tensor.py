"""Tensor-core kernels of the cuda target without a GPU: float16 ops, the ``tensorize`` step and its
refusals, the ``gpu_wmma`` preset's host emulation (the fragment operations' scalar meaning) against
the reference over random ops, and compile-only nvcc builds (0 spills, ``HMMA`` and 16-byte
``LDGSTS`` in the SASS; skipped with the reason without nvcc or cuobjdump)."""
import subprocess
from dataclasses import replace

import numpy as np
import pytest
from helpers import conv_ops, gemm_ops, matmul_ops, needs, tiers
from hypothesis import strategies as st

import loopopt as lo
from loopopt.dataflows import WMMA, gpu_wmma
from loopopt.measure import tolerance
from loopopt.schedule import ScheduleError
from loopopt.schedule_file import schedule_from_toml, to_toml
from loopopt.targets.cuda import toolchain
from loopopt.targets.cuda.emulate import emulate
from loopopt.targets.cuda.instructions import INSTRUCTIONS
from loopopt.targets.cuda.printer import print_kernel

HALF_MATMUL = lo.Matmul(37, 45, 40, dtype="float16")
HALF_CONV = lo.Conv2d(24, 40, 3, stride=2, padding=(1, 2), dilation=2, height=13, width=11, batch=2,
                      dtype="float16")
SMALL_TILES = {"block_m": 32, "block_n": 32, "warps_m": 2, "warps_n": 1, "depth": 32}


needs_nvcc = needs(toolchain.nvcc)


def _emulated_error(schedule: lo.Schedule, seed: int = 0) -> tuple[float, float]:
    """The host emulation's largest error against the reference, and the largest allowed."""
    op = schedule.op
    inputs = op.random_inputs(seed=seed)
    args = [inputs[t] for t in op.call_tensors]
    out = emulate(schedule)(*op.operand_values(*args[:2]), *args[2:])    # the values a float16 kernel reads
    error = np.abs(out.astype(np.float64) - op.reference(*args))
    return float(error.max()), float((error - tolerance(op, inputs)).max())


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

def _tiles(op=HALF_MATMUL) -> lo.Schedule:
    return lo.Schedule(op).split("i", 16).split("j", 16).split("k", 16).reorder(
        "i_o", "j_o", "k_o", "i_i", "j_i", "k_i")


def test_tensorize_records_the_three_loops_and_the_instruction():
    s = _tiles().tensorize("i_i", "j_i", "k_i", WMMA)
    assert s.tensorized == ("i_i", "j_i", "k_i", WMMA) and s.tensor_roles() == ("A", "B")
    assert "tensorize('i_i', 'j_i', 'k_i', 'wmma_m16n16k16_f16_f32')" in [str(step) for step in s.steps]


@pytest.mark.parametrize("make, message", [
    (lambda: _tiles().tensorize("i_i", "j_i", "k_i", "mma_m8n8k4"),
     r"unknown matrix instruction 'mma_m8n8k4'; known: wmma_m16n16k16_f16_f32"),
    (lambda: _tiles(lo.Matmul(37, 45, 40)).tensorize("i_i", "j_i", "k_i", WMMA),
     r"multiplies float16 inputs; Matmul\(.*\) is float32 \(build the op with dtype='float16'\)"),
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
     r"loop 'j_o' is bound to a warp axis, which only a tensorized schedule"),
    (lambda: gpu_wmma(lo.Matmul(256, 256, 64, dtype="float16"), block_m=256, block_n=256, warps_m=1,
                      warps_n=1, depth=64),
     r"a tensorized block needs \d+ bytes of shared memory \(3 buffers .* at most 232448"),
    (lambda: _tiles().tensorize("i_i", "j_i", "k_i", WMMA).stage("A", "k_o").stage("B", "k_o")
     .bind("i_o", "block.x").bind("j_o", "thread.x"),
     r"loop 'j_o' is bound to a thread axis; a tensorized kernel's threads are the lanes"),
])
def test_the_cuda_printer_refuses_tensorized_schedules_it_cannot_print(make, message):
    with pytest.raises(ScheduleError, match=message):
        print_kernel(make())


def test_compile_refuses_a_block_over_the_architectures_shared_memory():
    with pytest.raises(ScheduleError, match=r"the kernel's blocks need 73728 bytes of shared memory; sm_75 "
                                            r"allows 65536 per block"):
        gpu_wmma(lo.Matmul(256, 256, 64, dtype="float16")).compile(target="cuda", isa="sm_75")


def test_warp_axes_count_32_threads_each():
    with pytest.raises(ScheduleError, match=r"a block would have 2048 threads "
                                            r"\(i_o\[8\] warps x j_o\[8\] warps\)"):
        lo.Schedule(lo.Matmul(128, 128, 16, dtype="float16")).split("i", 16).split("j", 16) \
            .bind("i_o", "warp.y").bind("j_o", "warp.x")


def test_a_tensorized_schedule_round_trips_through_a_schedule_file():
    schedule = gpu_wmma(HALF_CONV, **SMALL_TILES)
    again = schedule_from_toml(to_toml(schedule), HALF_CONV)
    assert again.tensorized == schedule.tensorized and again.stages == schedule.stages
    assert print_kernel(again).source == print_kernel(schedule).source


def test_the_instruction_table_names_its_architecture_and_both_spellings():
    entry = INSTRUCTIONS[WMMA]
    assert (entry.m, entry.n, entry.k, entry.inputs, entry.accumulator, entry.arch) == (
        16, 16, 16, "float16", "float32", "sm_70")
    assert "mma_sync" in entry.cuda.mma and "lo_q" in entry.scalar.mma


# --- the host emulation against the reference -------------------------------------------------------

@pytest.mark.parametrize("tiles", [pytest.param({}, marks=pytest.mark.slow), SMALL_TILES],
                         ids=["default", "small"])
@pytest.mark.parametrize("op", [HALF_MATMUL, pytest.param(HALF_CONV, marks=pytest.mark.slow),
                                lo.Gemm(30, 20, 7, alpha=0.5, beta=2.0, dtype="float16")], ids=repr)
def test_the_wmma_preset_emulated_matches_the_reference(op, tiles):
    largest, excess = _emulated_error(gpu_wmma(op, **tiles))
    assert excess <= 0, largest


def _check_emulated(op, tiles):
    if op.groups > 1:
        with pytest.raises(ScheduleError, match="not a matrix product"):
            gpu_wmma(op, **tiles)
        return
    largest, excess = _emulated_error(gpu_wmma(op, **tiles), seed=5)
    assert excess <= 0, largest


TILES = st.sampled_from([{}, SMALL_TILES,
                         {"block_m": 64, "block_n": 32, "warps_m": 1, "warps_n": 2, "depth": 16},
                         {"block_m": 32, "block_n": 48, "warps_m": 2, "warps_n": 3, "depth": 48}])
test_random_convs_emulated, test_random_convs_emulated_full = tiers(
    _check_emulated, 3, 8, conv_ops(max_hw=9, max_channels=20, dtype="float16"), TILES)
test_random_matmuls_emulated, test_random_matmuls_emulated_full = tiers(
    _check_emulated, 2, 6, st.one_of(matmul_ops(max_mn=40, max_k=50, batched=False, dtype="float16"),
                                      gemm_ops(max_mn=40, max_k=50, dtype="float16")), TILES)


# --- compile-only builds -------------------------------------------------------------------------

@pytest.mark.slow        # nvcc builds: the quick tier builds one kernel (test_cuda_target.py)
@needs_nvcc
@pytest.mark.parametrize("op", [lo.Matmul(4096, 4096, 4096, dtype="float16"),
                                lo.Conv2d(64, 64, 3, padding=1, height=56, width=56, batch=32,
                                          dtype="float16")],
                         ids=["gemm4096", "conv2_x"])
def test_wmma_kernels_build_for_sm_90_with_hmma_and_no_spills(op):
    kernel = gpu_wmma(op).compile(target="cuda", isa="sm_90")
    assert kernel.build.spill_bytes == 0, kernel.report
    cuobjdump, nvdisasm = toolchain.tool("cuobjdump"), toolchain.tool("nvdisasm")
    if cuobjdump is None or nvdisasm is None:
        pytest.skip("no cuobjdump and nvdisasm here (pip install nvidia-cuda-cuobjdump "
                    "nvidia-cuda-nvdisasm): "
                    "the SASS is unchecked")
    sass = subprocess.run([str(cuobjdump), "--dump-sass", str(kernel.build.library)], capture_output=True,
                          text=True, check=True, env={"PATH": str(nvdisasm.parent)}).stdout
    assert "HMMA.16816.F32" in sass and "LDGSTS.E.BYPASS.128" in sass
    assert "LDL" not in sass and "STL" not in sass
