"""16-bit outputs (``out_dtype``) of the tensor-core kernels on an NVIDIA GPU (``-m gpu``; skipped with the
reason where there is none): bit for bit the float32 sums rounded to nearest even, as the host emulation
rounds them, and within the reference's bound over every epilogue (scratch, TMA-staged, pairs, singles,
bias and scales, residual and ReLU), float16 and bfloat16."""
import pytest
from test_cuda_gpu import needs_gpu
from test_cuda_out_dtype import PERSISTENT, SMALL, exact_rounding_misses

import loopopt as lo
from loopopt.dataflows import gpu_mma, gpu_wgmma, gpu_wmma
from loopopt.measure import verify
from loopopt.targets.cuda import device

pytestmark = [pytest.mark.gpu, needs_gpu]

VARIANTS = {"wmma": lambda op: gpu_wmma(op), "mma relu": lambda op: gpu_mma(op).clip(low=0.0),
            "wgmma": lambda op: gpu_wgmma(op), "wgmma tma residual": lambda op: gpu_wgmma(
                op, block_m=192, warps_m=3, depth=32, engine="tma").add_residual(),
            "specialized": lambda op: gpu_wgmma(op, engine="tma", specialize=True),
            "persistent": lambda op: gpu_wgmma(op, **SMALL, **PERSISTENT),
            "persistent 128x256": lambda op: gpu_wgmma(op, warps_m=1, warps_n=2, depth=64, **PERSISTENT)}
OPS = [lo.Matmul(300, 264, 200, dtype="float16", out_dtype="float16"),
       lo.Matmul(100, 44, 64, dtype="float16", out_dtype="float16"),
       lo.Matmul(37, 45, 40, dtype="float16", out_dtype="float16"),
       lo.Gemm(30, 24, 72, alpha=0.5, beta=2.0, dtype="float16", out_dtype="float16"),
       lo.Matmul(300, 520, 264, dtype="bfloat16", out_dtype="bfloat16")]


def needs_hopper(variant: str) -> None:
    """Skip a ``wgmma`` variant (any but the ``wmma`` and ``mma`` ones) where the GPU is not a Hopper."""
    if not variant.startswith(("wmma", "mma")) and device.arch() != "sm_90":
        pytest.skip(f"wgmma runs on sm_90 (Hopper) only; this GPU is {device.arch()}")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("op", OPS, ids=repr)
def test_16bit_outputs_match_the_reference_on_the_gpu(op, variant):
    needs_hopper(variant)
    if "tma" in variant or "special" in variant or "persistent" in variant:
        if op.k % 8:
            pytest.skip("TMA copies rows of 16 bytes")
    ok, error = verify(VARIANTS[variant](op).compile(target="cuda"), seed=11)
    assert ok, error


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_gpu_rounds_16bit_outputs_as_the_emulation_does(variant, dtype):
    needs_hopper(variant)
    op = lo.Matmul(130, 200, 64, dtype=dtype, out_dtype=dtype)
    schedule = VARIANTS[variant](op)
    if schedule.residual:
        pytest.skip("the residual is random")
    assert exact_rounding_misses(schedule, seed=5, build=lambda s: s.compile(target="cuda")) == 0
