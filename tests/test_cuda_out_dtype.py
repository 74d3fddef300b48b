"""16-bit outputs (``out_dtype``, ``targets/cuda/output_types.py``) without a GPU: a float16 or bfloat16
output is the float32 sum rounded to nearest even once, bit for bit, in the host emulation of every
epilogue that stores it (through the warps' scratch, from registers in pairs or one at a time, staged
for TMA's stores); a truncating conversion misses; the op's and the targets' refusals."""
from dataclasses import replace

import numpy as np
import pytest
from helpers import matmul_ops, tiers
from hypothesis import strategies as st

import loopopt as lo
from loopopt.bf16 import bf16_bits, bf16_to_float32
from loopopt.dataflows import gpu_mma, gpu_wgmma
from loopopt.measure import verify
from loopopt.schedule import ScheduleError
from loopopt.targets.cuda import output_types
from loopopt.targets.cuda.emulate import emulate
from loopopt.targets.cuda.printer import print_kernel

PERSISTENT = {"engine": "tma", "specialize": True, "persistent": True}
SMALL = {"block_m": 64, "block_n": 64, "warps_m": 1, "depth": 16, "stages": 3}


def rounded(exact: np.ndarray, dtype: str) -> np.ndarray:
    """``exact`` (float32 values) rounded to nearest even ``dtype``, as float64."""
    if dtype == "float16":
        return exact.astype(np.float16).astype(np.float64)
    return bf16_to_float32(bf16_bits(exact.astype(np.float32), "exact")).astype(np.float64)


def exact_rounding_misses(schedule: lo.Schedule, seed: int = 0, build=emulate) -> int:
    """How many outputs of ``schedule``'s host emulation (or its kernel from ``build``) differ from the
    nearest-even rounding of the exact sum: the inputs are small integers, so the float32 sums are exact
    and most need rounding to 16 bits (ties too: float16 keeps 11 bits of the 12-13 the sums have,
    bfloat16 8)."""
    op = schedule.op
    rng = np.random.default_rng(seed)
    arrays = [rng.integers(0, 16, op.tensor(t).shape).astype(np.float32) for t in op.call_tensors]
    exact = op.reference(*arrays)
    assert np.all(np.abs(exact) < 2 ** 24)
    out = build(schedule)(*arrays)
    assert out.dtype == (np.float16 if op.out_dtype == "float16" else np.float32)
    return int(np.sum(out.astype(np.float64) != rounded(exact.astype(np.float32), op.out_dtype)))


HALF_OUT = lo.Matmul(100, 136, 64, dtype="float16", out_dtype="float16")


def test_a_16bit_output_is_the_float32_sum_rounded_to_nearest_even_and_truncation_misses(monkeypatch):
    """The persistent kernel's TMA-staged stores (64 columns a chunk of 128 bytes) round each sum to
    nearest even; the same kernel with a conversion that drops the rest instead misses."""
    schedule = gpu_wgmma(HALF_OUT, **SMALL, **PERSISTENT)
    assert "lo_map_C" in print_kernel(schedule).source
    assert exact_rounding_misses(schedule) == 0
    monkeypatch.setattr(output_types, "HOST", output_types.HOST.replace(
        "if (rest > half || (rest == half && (h & 1))) ++h;", ""))
    assert exact_rounding_misses(schedule) > 0


@pytest.mark.slow
@pytest.mark.parametrize("make, dtype", [
    pytest.param(lambda dtype: gpu_wgmma(lo.Matmul(100, 44, 64, dtype=dtype, out_dtype=dtype), **SMALL,
                                         **PERSISTENT), "bfloat16", id="persistent pairs bf16"),
    pytest.param(lambda dtype: gpu_wgmma(lo.Matmul(100, 45, 64, dtype=dtype, out_dtype=dtype), **SMALL,
                                         **PERSISTENT), "float16", id="persistent singles"),
    pytest.param(lambda dtype: gpu_mma(lo.Gemm(30, 20, 48, dtype=dtype, out_dtype=dtype)), "bfloat16",
                 id="mma gemm bf16")])
def test_every_epilogue_rounds_a_16bit_output_to_nearest_even(make, dtype):
    assert exact_rounding_misses(make(dtype), seed=5) == 0


def _check_random_half_outputs(op, tiles):
    """Random Matmuls with float16 outputs, within the reference's bound (the sums' and the output's one
    rounding: ``measure.checked``) in the host emulation."""
    half = lo.Matmul(op.m, op.n, op.k, dtype="float16", out_dtype="float16")
    ok, error = verify(emulate(gpu_wgmma(half, **tiles)), seed=2)
    assert ok, error


test_random_half_outputs_emulated, test_random_half_outputs_emulated_full = tiers(
    _check_random_half_outputs, 1, 3, matmul_ops(max_mn=70, max_k=64, batched=False, dtype="float16").filter(
        lambda op: op.k % 8 == 0), st.sampled_from([SMALL | PERSISTENT, {}, SMALL | {"engine": "tma"}]))


@pytest.mark.parametrize("make, error, message", [
    (lambda: lo.Matmul(8, 8, 8, out_dtype="float16"), ValueError,
     r"out_dtype 'float16' is not supported for dtype='float32': allowed 'float32'"),
    (lambda: lo.Matmul(8, 8, 8, dtype="float16", out_dtype="bfloat16"), ValueError,
     r"out_dtype 'bfloat16' is not supported for dtype='float16': allowed 'float32', 'float16'"),
    (lambda: lo.Schedule(lo.Matmul(8, 8, 8, dtype="bfloat16", out_dtype="bfloat16")).compile(target="x86"),
     ScheduleError, r"writes bfloat16 outputs, which the x86 target has no kernels for: compile it with "
                    r"target='cuda'"),
    (lambda: print_kernel(lo.Schedule(HALF_OUT).bind("i", "block.x").bind("j", "thread.x")), ScheduleError,
     r"stores float16 outputs, which only the tensor-core kernels write: tensorize it"),
    (lambda: print_kernel(replace(gpu_wgmma(HALF_OUT, split_k=2), split_reduce="atomic")), ScheduleError,
     r"split_k\('k_o_o'\) adds float32 shares into the output; Matmul\(.*out_dtype='float16'\) stores "
     r"float16, rounded once from each output's whole sum: split_k\(..., reduce='last'\) or "
     r"out_dtype='float32'")])
def test_16bit_outputs_are_refused_where_no_kernel_stores_them(make, error, message):
    with pytest.raises(error, match=message):
        make()
