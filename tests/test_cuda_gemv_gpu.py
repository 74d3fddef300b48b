"""The cuda target's GEMV family on an NVIDIA GPU (``-m gpu``; skipped with the reason where there is none):
float16, int8 and ternary (i2_s and one byte a weight) GEMVs and small-M GEMMs over odd sizes and tails
against the op's reference (integers bit for bit), with k split over a block's warps and the activations
staged in shared memory too, on host arrays and on device arrays, and ``measure(..., graph=True)``."""
import numpy as np
import pytest
from test_cuda_gpu import needs_gpu

import loopopt as lo
from loopopt.dataflows import gpu_gemv
from loopopt.measure import checked
from loopopt.quant_reference import random_call, reference_output

pytestmark = pytest.mark.gpu

OPS = [lo.Matmul(1, 37, 100, dtype="float16"), lo.Matmul(3, 45, 2203, trans_b=True, dtype="float16"),
       lo.Matmul(1, 4096, 4096, dtype="float16"),
       lo.Matmul(1, 37, 2200, quant=lo.QuantSpec(activation="int8", weight="ternary")),
       lo.Matmul(5, 29, 77, trans_a=True, quant=lo.QuantSpec(weight="ternary", output="uint8")),
       lo.Matmul(8, 300, 4100, quant=lo.QuantSpec(weight="ternary", output="int32")),
       lo.Matmul(2, 33, 130, quant=lo.QuantSpec(activation="uint8", output="int8")),
       lo.Matmul(1, 1000, 700, quant=lo.QuantSpec(activation="int8", per_channel=False, output="float32"))]
KNOBS = [{"warps": 4, "columns": 1}, {"warps": 2, "columns": 3}, {"warps": 8, "columns": 4}]


@needs_gpu
@pytest.mark.parametrize("knobs", KNOBS, ids=str)
@pytest.mark.parametrize("op", OPS, ids=repr)
def test_gemv_kernels_match_the_reference_on_the_gpu(op, knobs):
    ok, error, _ = checked(gpu_gemv(op, **knobs).compile(target="cuda"), seed=13)
    assert ok, error


SPLITS = [(lo.Matmul(1, 37, 2200, quant=lo.QuantSpec(activation="int8", weight="ternary")),
           {"warps": 4, "columns": 2, "split": 3}),
          (lo.Matmul(8, 300, 4100, quant=lo.QuantSpec(weight="ternary", output="int32")),
           {"warps": 2, "columns": 3, "split": 2}),
          (lo.Matmul(1, 4096, 4096, quant=lo.QuantSpec(activation="int8", weight="ternary")),
           {"warps": 4, "columns": 4, "split": 2}),
          (lo.Matmul(3, 45, 2203, trans_b=True, dtype="float16"), {"warps": 4, "columns": 1, "split": 2}),
          (lo.Matmul(2, 33, 130, quant=lo.QuantSpec(activation="uint8", output="int8")),
           {"warps": 3, "columns": 1, "split": 2})]


@needs_gpu
@pytest.mark.parametrize("op, knobs", SPLITS, ids=str)
def test_gemv_kernels_with_k_split_over_warps_match_the_reference_on_the_gpu(op, knobs):
    """The shares' sums handed over in shared memory and added in order: integers bit for bit."""
    ok, error, _ = checked(gpu_gemv(op, **knobs).compile(target="cuda"), seed=17)
    assert ok, error


@needs_gpu
@pytest.mark.parametrize("weight_format", ["int8", "i2_s"])
def test_ternary_storage_formats_agree_bit_for_bit(weight_format):
    op = lo.Matmul(2, 70, 333, quant=lo.QuantSpec(activation="int8", weight="ternary", output="int32"))
    args, params = random_call(op, seed=3)
    got = gpu_gemv(op, weight_format=weight_format).compile(target="cuda")(*args, **params)
    np.testing.assert_array_equal(got, reference_output(op, args, params))


@needs_gpu
def test_a_float16_gemv_runs_on_device_arrays_and_in_a_graph():
    import cupy as cp
    op = lo.Matmul(1, 256, 512, dtype="float16")
    kernel = gpu_gemv(op).compile(target="cuda")
    x, w = (op.random_inputs(seed=2)[t] for t in op.inputs)
    padded = {t: kernel.schedule.layout_of(t).to_storage(a.astype(np.float16))
              for t, a in zip(op.inputs, (x, w), strict=True)}
    out = cp.asnumpy(kernel(*(cp.asarray(padded[t]) for t in op.inputs)))
    expected = x.astype(np.float16).astype(np.float64) @ w.astype(np.float16).astype(np.float64)
    assert np.abs(out - expected).max() < 1e-3 * np.abs(expected).max()
    timing = lo.measure(kernel, budget=0.1, graph=True)
    assert timing.graph and timing.verified


STAGED = [(lo.Matmul(1, 4096, 4096, quant=lo.QuantSpec(activation="int8", weight="ternary")),
           {"warps": 4, "columns": 2}),
          (lo.Matmul(1, 4096, 11008, quant=lo.QuantSpec(activation="int8", weight="ternary")),
           {"warps": 4, "columns": 4, "split": 2}),
          (lo.Matmul(2, 9, 2200, trans_a=True, quant=lo.QuantSpec(weight="ternary", output="uint8")),
           {"warps": 1, "columns": 3, "split": 3}),
          (lo.Matmul(8, 300, 4100, quant=lo.QuantSpec(weight="ternary", output="int32")),
           {"warps": 2, "columns": 3}),
          (lo.Matmul(3, 45, 2203, trans_b=True, dtype="float16"), {"warps": 4, "columns": 1, "split": 2}),
          (lo.Matmul(1, 4096, 4096, dtype="float16"), {"warps": 4, "columns": 1, "depth": 4}),
          (lo.Matmul(2, 33, 130, quant=lo.QuantSpec(activation="uint8", output="int8")),
           {"warps": 3, "columns": 1})]


@needs_gpu
@pytest.mark.parametrize("op, knobs", STAGED, ids=str)
def test_gemv_kernels_with_staged_activations_match_the_reference_on_the_gpu(op, knobs):
    """The activations copied once a block (cp.async) under the weight loads, read from shared memory;
    i2_s's activation sums by the block's warps: integers bit for bit."""
    ok, error, _ = checked(gpu_gemv(op, stage=True, **knobs).compile(target="cuda"), seed=19)
    assert ok, error
