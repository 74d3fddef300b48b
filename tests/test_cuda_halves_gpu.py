"""The last pipeline steps in halves (``Schedule.halves``) on an NVIDIA Hopper GPU (``-m gpu``; skipped with
the reason where there is none): each kernel against the float64 reference (``measure.verify``)."""
import pytest
from test_cuda_gpu import needs_gpu
from test_cuda_halves import FIRST, GOAL, WIDE

import loopopt as lo
from loopopt.dataflows import gpu_wgmma
from loopopt.measure import verify
from loopopt.targets.cuda import device

pytestmark = [pytest.mark.gpu, needs_gpu]

SMALL = {"block_m": 64, "warps_m": 1, "stages": 4} | WIDE
CASES = {"goal, last 2": (GOAL, FIRST, 2), "goal, last 3": (GOAL, FIRST, 3),
         "goal, last 1": (GOAL, FIRST, 1),
         "float32 out": (lo.Matmul(150, 296, 400, dtype="float16"), SMALL, 3),
         "gemm bias scales": (lo.Gemm(300, 520, 264, alpha=0.5, beta=2.0, dtype="float16",
                                      out_dtype="float16"), SMALL, 2),
         "bfloat16": (lo.Matmul(300, 520, 264, dtype="bfloat16", out_dtype="bfloat16"), SMALL, 3),
         "m64n128 -> m64n64, 32-byte swizzle": (
             lo.Matmul(200, 136, 256, dtype="float16", out_dtype="float16"),
                                               {"block_m": 64, "warps_m": 1, "block_n": 128, "depth": 32,
                                                "stages": 4, "engine": "tma"}, 3)}


@pytest.mark.parametrize("case", CASES)
def test_halves_match_the_float64_reference_on_the_gpu(case):
    if device.arch() != "sm_90":
        pytest.skip(f"wgmma runs on sm_90 (Hopper) only; this GPU is {device.arch()}")
    op, tiles, steps = CASES[case]
    ok, error = verify(gpu_wgmma(op, **tiles, halves=steps).compile(target="cuda"), seed=7)
    assert ok, error
