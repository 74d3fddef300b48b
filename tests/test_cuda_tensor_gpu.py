"""The cuda target's tensor-core kernels (``gpu_wmma``, ``gpu_mma``) on an NVIDIA GPU (``-m gpu``;
skipped with the reason where there is none): float16 inputs, float32 sums, against the reference of
the half-rounded inputs, over tails, padding, stride, dilation, batch, bias and scales, with and
without split-K; ``gpu_wgmma`` on Hopper only, its Matmul and Gemm operands also copied by the tensor
memory accelerator (``engine="tma"``), and warp-specialized (``specialize=True``: a producer warpgroup
copying, consumer warpgroups multiplying; float16 and bfloat16)."""
import pytest
from test_cuda_gpu import needs_gpu

import loopopt as lo
from loopopt.dataflows import gpu_mma, gpu_wgmma, gpu_wmma
from loopopt.measure import verify
from loopopt.targets.cuda import device

pytestmark = pytest.mark.gpu

OPS = [lo.Conv2d(24, 40, 3, stride=2, padding=(1, 2), dilation=2, height=13, width=11, batch=2,
                 dtype="float16"),
       lo.Conv2d(3, 20, 5, padding=2, height=17, width=19, batch=3, dtype="float16"),
       lo.Conv2d(64, 72, 1, height=7, width=9, bias=False, dtype="float16"),
       lo.Conv2d(64, 64, 3, padding=1, height=14, width=14, batch=4, dtype="float16"),
       lo.Matmul(37, 45, 13, dtype="float16"), lo.Matmul(300, 260, 200, dtype="float16"),
       lo.Gemm(30, 20, 70, alpha=0.5, beta=2.0, dtype="float16")]
SMALL = {"block_m": 32, "block_n": 48, "warps_m": 2, "warps_n": 3, "depth": 48}
VARIANTS = {"wmma": lambda op: gpu_wmma(op),
            "wmma small relu6": lambda op: gpu_wmma(op, **SMALL).clip(0.0, 6.0),
            "mma": lambda op: gpu_mma(op), "mma small split_k=3": lambda op: gpu_mma(op, **SMALL, split_k=3),
            "mma split_k=2 stages=2": lambda op: gpu_mma(op, split_k=2, stages=2),
            "mma relu": lambda op: gpu_mma(op).clip(low=0.0),
            "wgmma": lambda op: gpu_wgmma(op),
            "wgmma small split_k=3": lambda op: gpu_wgmma(op, **SMALL, split_k=3),
            "wgmma tall stages=3 relu": lambda op: gpu_wgmma(op, block_m=256, block_n=128, warps_m=4,
                                                             stages=3).clip(low=0.0),
            "mma residual relu": lambda op: gpu_mma(op).add_residual().clip(low=0.0),
            "wgmma small residual": lambda op: gpu_wgmma(op, **SMALL).add_residual()}


@needs_gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("op", OPS, ids=repr)
def test_tensor_kernels_match_the_reference_on_the_gpu(op, variant):
    if variant.startswith("wgmma") and device.arch() != "sm_90":
        pytest.skip(f"wgmma runs on sm_90 (Hopper) only; this GPU is {device.arch()}")
    ok, error = verify(VARIANTS[variant](op).compile(target="cuda"), seed=11)
    assert ok, error


TMA_OPS = [lo.Matmul(37, 45, 40, dtype="float16"), lo.Matmul(300, 260, 200, dtype="float16"),
           lo.Matmul(3, 5, 8, dtype="float16"), lo.Gemm(30, 20, 72, alpha=0.5, beta=2.0, dtype="float16"),
           lo.Matmul(300, 520, 264, dtype="bfloat16")]
SMALL_GROUP = {"block_m": 64, "block_n": 64, "warps_m": 1, "warps_n": 1}    # one warpgroup: BERT's tiles
TMA_VARIANTS = {"wgmma tma": lambda op: gpu_wgmma(op, engine="tma"),
                "wgmma tma depth=32 stages=8": lambda op: gpu_wgmma(op, depth=32, stages=8, engine="tma"),
                "wgmma tma small split_k=3": lambda op: gpu_wgmma(op, **SMALL, split_k=3, engine="tma"),
                "wgmma tma tall stages=3 relu": lambda op: gpu_wgmma(op, block_m=256, block_n=128, warps_m=4,
                                                                     stages=3, engine="tma").clip(low=0.0),
                "wgmma tma residual": lambda op: gpu_wgmma(op, block_m=192, warps_m=3, depth=32,
                                                           engine="tma").add_residual(),
                "specialized 128x256": lambda op: gpu_wgmma(op, engine="tma", specialize=True),
                "specialized small split_k=3": lambda op: gpu_wgmma(op, **SMALL, split_k=3, stages=3,
                                                                         engine="tma", specialize=True),
                "128-byte swizzle three groups": lambda op: gpu_wgmma(op, block_m=192, warps_m=3, depth=64,
                                                                      engine="tma", swizzle=128),
                "specialized 64-byte swizzle relu": lambda op: gpu_wgmma(
                    op, depth=32, engine="tma", swizzle=64, specialize=True).clip(low=0.0),
                "specialized 256x128 depth=32 stages=8 residual": lambda op: gpu_wgmma(
                    op, block_m=256, block_n=128, depth=32, stages=8, engine="tma", specialize=True
                ).add_residual(),
                "persistent 128-byte swizzle residual relu": lambda op: gpu_wgmma(
                    op, warps_m=1, warps_n=2, depth=64, swizzle=128, engine="tma", specialize=True,
                    persistent=True).add_residual().clip(low=0.0),
                "specialized 64x64 ring of 14": lambda op: gpu_wgmma(
                    op, **SMALL_GROUP, depth=64, swizzle=128, stages=14, engine="tma", specialize=True),
                "64x64 ring of 20 depth=32": lambda op: gpu_wgmma(op, **SMALL_GROUP, depth=32, swizzle=64,
                                                                  stages=20, engine="tma"),
                "persistent small split_k=3": lambda op: gpu_wgmma(
                    op, **SMALL, split_k=3, stages=3, engine="tma", specialize=True, persistent=True)}


@needs_gpu
@pytest.mark.parametrize("variant", TMA_VARIANTS)
@pytest.mark.parametrize("op", TMA_OPS, ids=repr)
def test_tma_staged_kernels_match_the_reference_on_the_gpu(op, variant):
    if device.arch() != "sm_90":
        pytest.skip(f"wgmma runs on sm_90 (Hopper) only; this GPU is {device.arch()}")
    ok, error = verify(TMA_VARIANTS[variant](op).compile(target="cuda"), seed=13)
    assert ok, error


@needs_gpu
@pytest.mark.parametrize("stages", [3, 4])
@pytest.mark.parametrize("k", [64, 128, 192, 384, 1000])
def test_the_consumers_last_round_of_the_ring_ends_anywhere_on_the_gpu(k, stages):
    """A specialized kernel's consumers walk the steps by rounds of the ring unrolled over its buffers:
    the tile's 1, 2, 3, 6 or 16 steps (the last with a partial depth) end a round at each of its
    buffers."""
    if device.arch() != "sm_90":
        pytest.skip(f"wgmma runs on sm_90 (Hopper) only; this GPU is {device.arch()}")
    op = lo.Matmul(130, 72, k, dtype="float16", out_dtype="float16")
    schedule = gpu_wgmma(op, **SMALL_GROUP, depth=64, swizzle=128, stages=stages, engine="tma",
                         specialize=True)
    ok, error = verify(schedule.compile(target="cuda"), seed=17)
    assert ok, error


NO_CATALOG = lo.Matmul(2000, 3000, 1000, dtype="float16", out_dtype="float16")     # bench_cuda_tune.NOVEL
CLUSTERED = {"cluster 2x1, 3 warpgroups": (lo.Matmul(300, 260, 200, dtype="float16"),
                                           {"block_m": 192, "warps_m": 3, "cluster": (2, 1)}),
             "cluster 1x2": (lo.Matmul(300, 260, 200, dtype="float16"), {"cluster": (1, 2)}),
             "cluster 4x1 split_k=2": (lo.Gemm(250, 70, 72, alpha=0.5, beta=2.0, dtype="float16"),
                                       {"block_m": 64, "warps_m": 1, "split_k": 2, "cluster": (4, 1)}),
             "cluster 1x2 residual": (lo.Matmul(37, 100, 40, dtype="float16"),
                                      {"block_n": 64, "stages": 3, "cluster": (1, 2)}),
             "specialized cluster 2x1": (lo.Matmul(400, 520, 264, dtype="bfloat16"),
                                         {"cluster": (2, 1), "specialize": True}),
             "specialized cluster 2x1 128-byte swizzle": (lo.Matmul(400, 520, 264, dtype="float16"),
                                                          {"cluster": (2, 1), "specialize": True, "depth": 64,
                                                           "swizzle": 128}),
             "specialized cluster 1x2 split_k=2": (lo.Gemm(250, 70, 72, alpha=0.5, beta=2.0, dtype="float16"),
                                                   {"block_n": 32, "split_k": 2, "cluster": (1, 2),
                                                    "specialize": True}),
             # the GEMM in no catalog's one wave of 192 x 256 in pairs along the columns (B as given)
             "no catalog's one wave 1x2": (NO_CATALOG, {"block_m": 192, "block_n": 256, "warps_m": 3,
                                                            "depth": 64, "swizzle": 128, "stages": 4,
                                                            "cluster": (1, 2)})}


PADDED_ROWS = {"no catalog's first choice, B in NK64k": (NO_CATALOG, {
                   "block_m": 192, "block_n": 256, "warps_m": 3, "depth": 64, "swizzle": 128, "stages": 4},
                   {"B": "NK64k"}),
               "no catalog's one wave in 1x2, B in NK64k": (NO_CATALOG, {
                   "block_m": 192, "block_n": 256, "warps_m": 3, "depth": 64, "swizzle": 128, "stages": 4,
                   "cluster": (1, 2)}, {"B": "NK64k"}),
               "no catalog's 192x128 walk in 1x2, A and B in 64-column blocks": (NO_CATALOG, {
                   "block_m": 192, "block_n": 128, "warps_m": 3, "depth": 64, "swizzle": 128, "stages": 5,
                   "cluster": (1, 2), "specialize": True, "persistent": True}, {"A": "MK64k", "B": "NK64k"}),
               "13 columns padded to 16": (lo.Matmul(70, 90, 13, dtype="float16"), {
                   "block_m": 64, "block_n": 64, "warps_m": 1, "depth": 16}, {"A": "MK16k", "B": "NK16k"})}


@needs_gpu
@pytest.mark.parametrize("case", PADDED_ROWS)
def test_padded_rows_copied_by_tma_match_the_reference_on_the_gpu(case):
    """Inputs stored with their rows padded to whole blocks of the reduction (``tma.padded_rows``), read
    by TMA at the padded pitch, tails and padding zero."""
    if device.arch() != "sm_90":
        pytest.skip(f"TMA runs on sm_90 (Hopper) only; this GPU is {device.arch()}")
    op, tiles, layouts = PADDED_ROWS[case]
    schedule = gpu_wgmma(op, **tiles, engine="tma")
    for tensor, tag in layouts.items():
        schedule = schedule.layout(tensor, tag)
    ok, error = verify(schedule.compile(target="cuda"), seed=19)
    assert ok, error


@needs_gpu
@pytest.mark.parametrize("case", CLUSTERED)
def test_tma_multicast_kernels_match_the_reference_on_the_gpu(case):
    """Clusters of 2 and 4 blocks along the rows and the columns, tails zero-filled past the tensor,
    split-K, a residual: each block's slice multicast into its peers' buffers."""
    if device.arch() != "sm_90":
        pytest.skip(f"TMA multicast runs on sm_90 (Hopper) only; this GPU is {device.arch()}")
    op, tiles = CLUSTERED[case]
    schedule = gpu_wgmma(op, **tiles, engine="tma")
    ok, error = verify((schedule.add_residual() if "residual" in case else schedule).compile(target="cuda"),
                       seed=17)
    assert ok, error


CONV_BOX_OPS = [lo.Conv2d(24, 40, 3, stride=2, padding=((1, 0), (2, 1)), dilation=2, height=13, width=11,
                          batch=2, dtype="float16"),
                lo.Conv2d(16, 20, 5, padding=2, height=17, width=19, batch=3, dtype="float16"),
                lo.Conv2d(64, 72, 1, height=7, width=9, bias=False, dtype="float16"),
                lo.Conv2d(64, 64, 3, padding=1, height=14, width=14, batch=4, dtype="bfloat16"),
                lo.Conv1d(16, 24, 3, stride=2, padding=((2, 1),), length=37, batch=3, dtype="float16"),
                lo.Conv3d(8, 16, 3, stride=(1, 2, 1), padding=1, dilation=(2, 1, 1), depth=7, height=6,
                          width=7, batch=2, dtype="float16")]
CONV_BOX_VARIANTS = {"specialized 128-byte swizzle": {"warps_m": 1, "warps_n": 2, "depth": 64, "swizzle": 128,
                                                      "specialize": True},
                     "defaults": {},
                     "specialized small split_k=3": {"block_m": 64, "warps_m": 1, "block_n": 64, "depth": 32,
                                                     "split_k": 3, "stages": 3, "specialize": True},
                     "tall stages=3 relu": {"block_m": 256, "block_n": 128, "warps_m": 4, "stages": 3},
                     "persistent 128-byte swizzle": {"warps_m": 1, "warps_n": 2, "depth": 64, "swizzle": 128,
                                                     "specialize": True, "persistent": True}}


@needs_gpu
@pytest.mark.parametrize("variant", CONV_BOX_VARIANTS)
@pytest.mark.parametrize("op", CONV_BOX_OPS, ids=repr)
def test_conv_pixel_boxes_match_the_reference_on_the_gpu(op, variant):
    """A conv's activations copied as TMA boxes of output pixels (``pixel_boxes``; 1-D to 3-D: boxes of
    rank 3 to 5): stride 2 through the boxes' element strides, dilation, asymmetric padding and the boxes
    overhanging the output's edges zero-filled, batch > 1, channel tails."""
    if device.arch() != "sm_90":
        pytest.skip(f"wgmma runs on sm_90 (Hopper) only; this GPU is {device.arch()}")
    schedule = gpu_wgmma(op, **CONV_BOX_VARIANTS[variant], engine="tma")
    ok, error = verify((schedule.clip(low=0.0) if "relu" in variant else schedule).compile(target="cuda"),
                       seed=19)
    assert ok, error


@needs_gpu
@pytest.mark.parametrize("op, tiles", [
    (lo.Matmul(2000, 1500, 264, dtype="float16"), {"block_m": 64, "block_n": 64, "warps_m": 1, "depth": 64,
                                                   "swizzle": 128}),
    (lo.Gemm(1030, 2050, 72, alpha=0.5, beta=2.0, dtype="bfloat16"),
     {"block_m": 64, "warps_m": 1, "depth": 32, "stages": 3, "split_k": 2}),
    *((lo.Matmul(1000, 1500, 512, dtype="float16", out_dtype="float16"),
       {"block_m": 64, "block_n": 64, "warps_m": 1, "depth": 64, "swizzle": 128, "stages": stages})
      for stages in (4, 8)),
    # in clusters: cuBLAS's form of the GEMM in no catalog (264 tiles of 192 x 128, two consumer warpgroups
    # of 192 x 64, pairs along the columns: 132 cluster tiles), and pairs along the rows and fours along
    # the columns of 64 x 64 tiles, rounds left over
    *((lo.Matmul(2000, 3000, 1000, dtype="float16", out_dtype="float16"),
       {"block_m": 192, "block_n": 128, "warps_m": 1, "warps_n": 2, "depth": 64, "swizzle": 128,
        "stages": stages, "cluster": (1, 2)}) for stages in (4, 5)),
    (lo.Matmul(2048, 1500, 264, dtype="float16"), {"block_m": 64, "block_n": 64, "warps_m": 1, "depth": 64,
                                                   "swizzle": 128, "cluster": (2, 1)}),
    (lo.Gemm(1030, 2048, 72, alpha=0.5, beta=2.0, dtype="bfloat16"),
     {"block_m": 64, "warps_m": 1, "depth": 32, "stages": 3, "cluster": (1, 4)})],
    ids=["768 tiles of 64x64", "bf16 Gemm 544 tiles split_k=2", "384 tiles of two rounds of 4 buffers",
         "384 tiles of one round of 8 buffers", "1x2 clusters of 192x128 4 stages",
         "1x2 clusters of 192x128 5 stages", "2x1 clusters of 64x64", "bf16 Gemm 1x4 clusters"])
def test_persistent_blocks_walk_several_tiles_on_the_gpu(op, tiles):
    """More tiles than multiprocessors: each block of the persistent loop walks 2-6 tiles, its ring's
    parities going on across them, the producer copying a tile while the consumers store the last; where
    a tile's steps fill whole rounds of the ring the consumers' loop is unrolled over its buffers. In
    clusters the blocks of a cluster walk their cluster's tiles in step, the shared tiles multicast."""
    if device.arch() != "sm_90":
        pytest.skip(f"wgmma runs on sm_90 (Hopper) only; this GPU is {device.arch()}")
    schedule = gpu_wgmma(op, **tiles, engine="tma", specialize=True, persistent=True)
    ok, error = verify(schedule.compile(target="cuda"), seed=23)
    assert ok, error
