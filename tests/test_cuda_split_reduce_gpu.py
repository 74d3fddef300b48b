"""Split-K shares added by a tile's last block (``split_reduce.py``) on an NVIDIA GPU (``-m gpu``; skipped
with the reason where there is none): in split order, bit for bit as the host emulation adds them, and
within the reference's bound over the presets, 16-bit and float32 outputs, a fused epilogue, BERT's GEMM."""
import numpy as np
import pytest
from test_cuda_gpu import needs_gpu
from test_cuda_out_dtype_gpu import needs_hopper
from test_cuda_split_reduce import HALF, SPLIT, ordered_shares

import loopopt as lo
from loopopt.dataflows import gpu_mma, gpu_wgmma, gpu_wmma
from loopopt.measure import verify
from loopopt.targets.cuda import device
from loopopt.tune.choice import first_choice

pytestmark = [pytest.mark.gpu, needs_gpu]

BERT = lo.Matmul(384, 768, 3072, dtype="float16", out_dtype="float16")
VARIANTS = {"wmma": lambda op: gpu_wmma(op, **SPLIT), "mma": lambda op: gpu_mma(op, **SPLIT),
            "wgmma": lambda op: gpu_wgmma(op, **SPLIT), "wgmma tma relu": lambda op: gpu_wgmma(
                op, split_k=4, engine="tma").clip(low=0.0),
            "specialized": lambda op: gpu_wgmma(op, **SPLIT, engine="tma", specialize=True)}
OPS = [lo.Matmul(300, 264, 512, dtype="float16", out_dtype="float16"),
       lo.Matmul(37, 45, 200, dtype="bfloat16", out_dtype="bfloat16"),
       lo.Gemm(30, 24, 512, alpha=0.5, beta=2.0, dtype="float16", out_dtype="float16")]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("op", OPS, ids=repr)
def test_last_block_split_k_matches_the_reference_on_the_gpu(op, variant):
    needs_hopper(variant)
    if ("tma" in variant or "special" in variant) and op.k % 8:
        pytest.skip("TMA copies rows of 16 bytes")
    kernel = VARIANTS[variant](op).compile(target="cuda")
    for seed in (11, 12):       # twice: the counters are back at 0 after each launch
        ok, error = verify(kernel, seed=seed)
        assert ok, error


@pytest.mark.parametrize("variant", ["wmma", "mma", "wgmma", "specialized"])     # 3 shares of 64
def test_the_gpu_adds_the_shares_in_split_order(variant):
    needs_hopper(variant)
    schedule = VARIANTS[variant](HALF)
    out = schedule.compile(target="cuda")(*ordered_shares(HALF.m, HALF.n))
    assert np.all(out.astype(np.float64) == 0.0)


@pytest.mark.parametrize("out_dtype", ["float16", "float32"])
def test_bert_s_first_choice_matches_the_reference(out_dtype):
    op = lo.Matmul(384, 768, 3072, dtype="float16", out_dtype=out_dtype)
    ok, error = verify(first_choice(op, device.arch()).schedule.compile(target="cuda"), seed=3)
    assert ok, error
