"""The cuda target's search rules (targets/cuda/search.py) without a GPU: candidates legal by
construction (threads, shared memory as the printer allocates it, accumulators), the cost model's
ranking (a batch-1 conv ranks split-K first, a large GEMM large tiles first), ranked candidates of
random ops (float16, float32, bfloat16 and quantized: every QuantSpec on the int8 entries) in host
emulation against the reference, and ``lo.tune(op, target="cuda")`` refusing in one
line where there is no GPU, before anything is built. On a GPU (``-m gpu``): a search of 8 trials,
its winner verified and its trials logged under the GPU's name."""
from dataclasses import replace
from functools import cache

import numpy as np
import pytest
from helpers import conv_ops, gemm_ops, matmul_ops, needs, tiers
from hypothesis import strategies as st

import loopopt as lo
from loopopt.cli import main
from loopopt.measure import checked, tolerance
from loopopt.targets import TargetUnavailableError
from loopopt.targets.cuda import device, padding_sums
from loopopt.targets.cuda.costs import COSTS
from loopopt.targets.cuda.emulate import emulate
from loopopt.targets.cuda.printer import CUDA, print_kernel
from loopopt.targets.cuda.search import (
    MAX_ACCUMULATORS,
    MAX_THREADS,
    STATIC_SHARED,
    TENSOR_PRESETS,
    CudaSearch,
    _line_reads,
    boxed,
    gpu_of,
    predict,
    simt_shared,
    tensor_knobs,
    tensor_shared,
)
from loopopt.targets.cuda.target import SHARED_BYTES_PER_BLOCK
from loopopt.targets.cuda.tensor_printer import TensorPrinter
from loopopt.targets.registry import target
from loopopt.tune import TuningLog, best_trial
from loopopt.tune.choice import first_choice

RULES = target("cuda").search_rules()
ARCH = "sm_90"
CONV2_X_N1 = lo.Conv2d(64, 64, 3, padding=1, height=56, width=56, batch=1, dtype="float16")
BIG_GEMM = lo.Matmul(4096, 4096, 4096, dtype="float16")
BERT = lo.Matmul(384, 768, 3072, dtype="float16", out_dtype="float16")
OPS = [CONV2_X_N1, lo.Matmul(37, 45, 40, dtype="float16"),
       lo.Conv2d(24, 40, 3, stride=2, padding=(1, 2), dilation=2, height=13, width=11, batch=2),
       lo.Conv2d(8, 12, 3, padding=1, groups=2, height=13, width=11), lo.Matmul(300, 260, 200)]
ASYMMETRIC = lo.QuantSpec(activation="int8", weight="uint8", weight_symmetric=False, output="uint8")
no_gpu = pytest.mark.skipif(device.present(), reason="a GPU is here: the search runs")
needs_gpu = needs(device.cupy)


@cache
def _ranked(op, arch=ARCH):
    return RULES.rank(RULES.candidates(op, arch))


@pytest.mark.parametrize("op", OPS, ids=repr)
@pytest.mark.slow
def test_every_candidate_fits_a_block(op):
    candidates = RULES.candidates(op, ARCH)
    assert candidates and len({c.knobs for c in candidates}) == len(candidates)
    for knobs in (c.knobs for c in candidates):
        assert knobs.threads <= MAX_THREADS and knobs.pixel_block * knobs.channel_block <= (
            MAX_ACCUMULATORS * knobs.threads)
        limit = SHARED_BYTES_PER_BLOCK[ARCH] if op.dtype == "float16" else STATIC_SHARED
        assert (tensor_shared(knobs) if op.dtype == "float16" else simt_shared(op, knobs)) <= limit


@pytest.mark.slow
def test_the_shared_memory_counted_is_the_printed_kernels():
    op = lo.Matmul(300, 260, 200, dtype="float16")
    candidates = RULES.candidates(op, "sm_86")           # 99 KiB a block: the deep rings are left out
    largest = max(candidates, key=lambda c: tensor_shared(c.knobs))
    assert tensor_shared(largest.knobs) <= SHARED_BYTES_PER_BLOCK["sm_86"] < max(
        tensor_shared(c.knobs) for c in RULES.candidates(op, ARCH))
    for candidate in (largest, _ranked(op)[0]):
        printed = print_kernel(candidate.schedule)
        assert printed.dynamic_shared_bytes == tensor_shared(candidate.knobs)
        assert np.prod(printed.block) == candidate.knobs.threads


@pytest.mark.parametrize("op, staged", [
    (lo.Matmul(1000, 1000, 512, quant=lo.QuantSpec(activation="int8", output="uint8")), "rows"),
    (lo.Matmul(1000, 1000, 512, quant=lo.QuantSpec(activation="int8", output="float32")), "rows"),
    (lo.Matmul(1000, 1000, 512, dtype="bfloat16", out_dtype="bfloat16"), "TMA stores")], ids=repr)
@pytest.mark.slow
def test_a_persistent_kernel_counts_the_printed_kernels_shared_memory(op, staged):
    """Its consumers' staging of the outputs past the ring (a quantized op's rows, or the chunks TMA
    stores) as the printer lays it out."""
    walking = [c for c in RULES.candidates(op, ARCH) if c.knobs.persistent]
    assert walking
    for candidate in walking:
        printer = TensorPrinter(candidate.schedule, CUDA)
        assert (printer.staged_rows if staged == "rows" else printer.stored is not None)
        assert candidate.knobs.work(op, gpu_of(ARCH)).shared == printer.smem_bytes


@pytest.mark.slow
def test_a_batch_one_conv_ranks_split_k_first():
    """Among the threads' copies (TMA's: ``test_a_convs_candidates_copy_pixel_boxes_by_tma_first``)."""
    first = next(c for c in _ranked(CONV2_X_N1) if c.knobs.engine == "threads")
    assert first.knobs.split_k > 1 and first.figures["waves"] == 1
    unsplit = next(c for c in _ranked(CONV2_X_N1) if c.knobs == replace(first.knobs, split_k=1))
    assert unsplit.figures["blocks"] <= 132 / 4 < 132 / 2 < first.figures["blocks"] <= 132
    assert unsplit.figures["predicted_seconds"] > 1.2 * first.figures["predicted_seconds"]


@pytest.mark.slow
def test_a_large_gemm_ranks_large_tiles_first():
    """The 4096^3 GEMM: large tiles first, no split-K candidate (its output tiles fill the SMs alone; the
    model once ranked split-K 4 first, never measured faster); first the family fastest on the H200:
    128 x 256 tiles in the 128-byte swizzle, warp-specialized in a persistent tile loop (0.194 ms fp16;
    specialized 0.198-0.204; unspecialized 0.207-0.209, in the 32-byte swizzle 0.357; 192 x 256 in
    three warpgroups 0.214 and 0.292), walked by pairs of blocks along the rows (B multicast: the
    model's L2 term, 1.06x its tensor term alone, bounds the walk; measured alike, 0.2070 ms against
    0.2041, cuBLAS 0.2069 and 0.2045 interleaved), each clustered walk before its unclustered twin, that
    before its specialized twin (the pipeline fills once a block, not once a wave), that before its
    unspecialized one."""
    ranked = _ranked(BIG_GEMM)
    first = ranked[0].knobs
    assert first.block_m * first.block_n >= 128 * 256 and first.split_k == 1
    small = next(c for c in ranked if c.knobs.block_m * c.knobs.block_n <= 64 * 64)
    assert small.figures["l2_bytes"] > 2.5 * ranked[0].figures["l2_bytes"]      # 2/64 vs 1/128 + 1/256
    assert small.figures["predicted_seconds"] > 1.5 * ranked[0].figures["predicted_seconds"]
    assert {c.knobs.split_k for c in ranked} == {1}
    assert (first.preset, first.block_m * first.block_n, first.depth, first.engine, first.swizzle,
            first.specialize, first.persistent, first.cluster) == (
        "gpu_wgmma", 128 * 256, 64, "tma", 128, True, True, (2, 1))
    alone = replace(first, cluster=(1, 1))
    twins = [next(c for c in ranked if c.knobs == knobs) for knobs in (
        alone, replace(alone, persistent=False), replace(alone, persistent=False, specialize=False))]
    assert ranked[0].figures["predicted_seconds"] < twins[0].figures["predicted_seconds"] \
        < twins[1].figures["predicted_seconds"]
    assert ranked.index(twins[1]) < ranked.index(twins[2])
    three = next(c for c in ranked if (c.knobs.block_m, c.knobs.warps_m, c.knobs.swizzle) == (192, 3, 128))
    assert not three.knobs.specialize        # 128 accumulators a consumer do not fit 3 + 1 warpgroups
    assert three.figures["predicted_seconds"] > ranked[0].figures["predicted_seconds"]


@pytest.mark.slow      # BERT's 9,000 candidates ranked: 2 s
def test_bert_ranks_a_deep_ring_first():
    """BERT's 384 x 768 x 3072: 64 x 64 TMA tiles (72 blocks, each SM with L2's share of 60 SMs idle)
    in a ring of 14 buffers, warp-specialized, first (one launch on the H200: 10.3 us against 10.5 at 11
    stages, 11.8 at 8, 15.4 at 5 and 18.2 at 4; cuBLAS's kernel the same tile in 13 stages, 11.0 us): its
    shallower twins wait on their TMA boxes."""
    ranked = _ranked(BERT)
    first = ranked[0].knobs
    assert (first.block_m, first.block_n, first.split_k, first.engine, first.specialize, first.stages) == (
        64, 64, 1, "tma", True, 14)
    seconds = [next(c for c in ranked if c.knobs == replace(first, stages=s)).figures["predicted_seconds"]
               for s in (14, 11, 8, 5, 4)]
    assert seconds == sorted(seconds) and seconds[4] > 1.2 * seconds[2]


@pytest.mark.slow
def test_the_first_choice_needs_no_gpu_and_sm_75_has_no_mma():
    chosen = first_choice(CONV2_X_N1, ARCH)
    assert chosen.knobs == _ranked(CONV2_X_N1)[0].knobs and chosen.schedule.split_k
    assert {c.knobs.preset for c in RULES.candidates(CONV2_X_N1, "sm_75")} == {"gpu_wmma"}
    assert {c.knobs.preset for c in RULES.candidates(CONV2_X_N1, "sm_89")} == {"gpu_mma", "gpu_wmma"}
    knobs = chosen.knobs.as_dict()
    tiles = f"{knobs['block_m']}x{knobs['block_n']} block, {knobs['warps_m']}x{knobs['warps_n']}"
    assert f"gpu_wgmma {tiles} warpgroups" in RULES.describe(knobs | {"preset": "gpu_wgmma"})
    assert f"gpu_mma {tiles} warps" in RULES.describe(knobs | {"preset": "gpu_mma"})


@pytest.mark.slow
def test_quantized_and_bfloat16_ops_have_the_candidates_of_their_entries():
    quantized = lo.Conv2d(16, 16, 3, height=8, width=8, quant=lo.QuantSpec(weight="uint8", output="uint8"))
    knobs = [c.knobs for c in RULES.candidates(quantized, ARCH)]
    assert {(k.preset, k.entry, k.split_k) for k in knobs} == {("gpu_mma", "mma_m16n8k32_u8u8_s32", 1)}
    assert {k.depth for k in knobs} == {32}       # 64 and 128 bytes a row, clamped to the 16 channels
    assert RULES.candidates(quantized, "sm_75") == []
    grouped = lo.Conv2d(16, 16, 3, groups=2, height=8, width=8, quant=lo.QuantSpec())
    assert RULES.candidates(grouped, ARCH) == []
    splits = {c.knobs.split_k for c in RULES.candidates(lo.Matmul(64, 64, 4096, quant=lo.QuantSpec(
        activation="int8", output="int32")), ARCH)}
    assert splits == {1, 2, 4, 8, 16}
    u8 = lo.Matmul(64, 64, 64, quant=lo.QuantSpec(activation="uint8", output="uint8"))
    u8s8 = {(c.knobs.preset, c.knobs.entry) for c in RULES.candidates(u8, ARCH)}   # int8 weights: wgmma
    assert u8s8 == {("gpu_mma", "mma_m16n8k32_u8s8_s32"), ("gpu_wgmma", "wgmma_m64n64k32_u8s8_s32")}
    bf16 = {(c.knobs.preset, c.knobs.entry) for c in RULES.candidates(lo.Matmul(64, 64, 64, dtype="bfloat16"),
                                                                       ARCH)}
    assert bf16 == {("gpu_mma", "mma_m16n8k16_bf16_f32"), ("gpu_wmma", "wmma_m16n16k16_bf16_f32"),
                    ("gpu_wgmma", "wgmma_m64n64k16_bf16_f32")}


@no_gpu
def test_tune_without_a_gpu_says_so_in_one_line_before_building(monkeypatch, capsys):
    def no_candidates(*args):
        raise AssertionError("candidates built before the device was asked for")
    monkeypatch.setattr(CudaSearch, "candidates", no_candidates)
    with pytest.raises(TargetUnavailableError, match="needs CuPy and an NVIDIA GPU"):
        lo.tune(CONV2_X_N1, target="cuda", trials=2)
    assert main(["tune", "--target", "cuda", "--matmul", "64,64,64", "--dtype", "float16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NVIDIA GPU" in err


def _emulated_excess(candidate, seed: int = 5) -> float:
    op = candidate.op
    inputs = op.random_inputs(seed=seed)
    args = [inputs[t] for t in op.call_tensors]
    out = emulate(candidate.schedule)(*op.operand_values(*args[:2]), *args[2:])
    return float((np.abs(out.astype(np.float64) - op.reference(*args)) - tolerance(op, inputs)).max())


def _check_ranked_emulated(op, pick):
    """The best-ranked candidate and one drawn from the rest compute ``op`` (quantized: bit for bit)."""
    ranked = _ranked(op)
    if not ranked:                      # a grouped conv is not rows x columns: no tensor-core tile
        assert (op.dtype != "float32" or op.quant is not None) and op.groups > 1
        return
    for candidate in {ranked[0], ranked[pick % len(ranked)]}:
        if op.quant is not None:
            assert checked(emulate(candidate.schedule), seed=5)[0], candidate.knobs
        else:
            assert _emulated_excess(candidate) <= 0, candidate.knobs


test_ranked_convs_emulated, test_ranked_convs_emulated_full = tiers(
    _check_ranked_emulated, 1, 6, st.one_of(conv_ops(max_hw=9, max_channels=12, dtype="float16"),
                                            conv_ops(max_hw=9, max_channels=6)), st.integers(0, 10**6))
test_ranked_matmuls_emulated, test_ranked_matmuls_emulated_full = tiers(
    _check_ranked_emulated, 1, 4, st.one_of(matmul_ops(max_mn=40, max_k=50, batched=False, dtype="float16"),
                                            gemm_ops(max_mn=30, max_k=40)), st.integers(0, 10**6))

SPECS = st.builds(lo.QuantSpec, activation=st.sampled_from(lo.quant.ACTIVATIONS),
                  weight=st.sampled_from(lo.quant.WEIGHTS), per_channel=st.booleans(),
                  weight_symmetric=st.booleans(), output=st.sampled_from(lo.quant.OUTPUTS))
_, test_ranked_quantized_and_bfloat16_ops_emulated = tiers(
    _check_ranked_emulated, 1, 2, st.one_of(
        st.builds(lambda op, spec: type(op)(**op.arguments, quant=spec), conv_ops(max_hw=7, max_channels=12)
                  | matmul_ops(max_mn=40, max_k=50, batched=False), SPECS),
        matmul_ops(max_mn=40, max_k=50, batched=False, dtype="bfloat16")), st.integers(0, 10**6))


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("op", [lo.Conv2d(64, 96, 3, padding=1, height=28, width=28, batch=2,
                                          dtype="float16"), lo.Matmul(300, 260, 200),
                                lo.Conv2d(64, 96, 3, padding=1, height=28, width=28, quant=ASYMMETRIC)],
                         ids=repr)
def test_a_gpu_search_verifies_and_logs_its_trials(op, tmp_path):
    log = tmp_path / "gpu.db"
    result = lo.tune(op, target="cuda", trials=8, log=str(log), progress=False)
    assert result.timing.verified and result.isa == device.arch()
    assert len(result.trials) == 8 and all(t.status == "ok" for t in result.trials)
    with TuningLog(log, readonly=True) as logged:
        trials = logged.trials(op, result.isa, 1, machine=target("cuda").fingerprint())
    assert len(trials) == 8 and device.name() in trials[0].fingerprint
    assert best_trial(op, log, isa=result.isa).timing.min == result.timing.min


def test_a_matmuls_wgmma_candidates_copy_by_tma_first():
    """TMA copies a Matmul's 2-D operands (first among the model's equals: measured faster), not rows
    of 13 halves."""
    ranked = _ranked(BIG_GEMM)
    assert {c.knobs.engine for c in ranked if c.knobs.preset == "gpu_wgmma"} == {"tma", "threads"}
    assert ranked[0].knobs.engine == "tma" and RULES.describe(ranked[0].knobs.as_dict()).endswith(
        ", TMA, 128-byte swizzle, warp-specialized, persistent, clusters of 2x1")
    assert ranked[0].schedule.tma_staged == ("A", "B")
    assert (ranked[0].schedule.tile_swizzle, ranked[0].schedule.specialized) == (128, True)
    assert not boxed(lo.Matmul(30, 20, 13, dtype="float16"))


@pytest.mark.slow
def test_a_convs_candidates_copy_pixel_boxes_by_tma_first():
    """A conv's wgmma candidates copy its tiles as TMA boxes of output pixels (``pixel_boxes``), first
    in the model's ranking: conv2_x at N=1 on the H200, the fastest of them (64 x 64 blocks of 8 x 8
    pixels, one consumer warpgroup, 128-byte swizzle, warp-specialized: 0.0087 ms one launch) beat every
    variant the threads copy (0.0112 ms at best) and cuDNN (0.0117 ms); it is a candidate (one
    warpgroup a block: ``WARPS``' 1 x 1), though the model, whose launch and L2 figures come from the
    GEMMs, prices it 9% over the threads' first."""
    ranked = _ranked(CONV2_X_N1)
    assert ranked[0].knobs.engine == "tma" and ranked[0].schedule.tma_staged == ("I", "W")
    assert RULES.describe(ranked[0].knobs.as_dict()).endswith(", TMA, 128-byte swizzle, warp-specialized")
    assert any((c.knobs.block_m, c.knobs.block_n, c.knobs.warps_m, c.knobs.warps_n, c.knobs.depth,
                c.knobs.stages, c.knobs.split_k, c.knobs.engine, c.knobs.swizzle, c.knobs.specialize)
               == (64, 64, 1, 1, 64, 4, 1, "tma", 128, True) for c in ranked)


@pytest.mark.slow
def test_a_persistent_tile_loop_is_a_candidate_where_the_tiles_outnumber_the_sms():
    """Persistent candidates are warp-specialized kernels of more tiles (and split-K shares) than SMs,
    priced one pipeline fill a block instead of one a wave, with room for their TMA stores' staging;
    BERT's 384 x 768 at 128 x 256 (9 tiles) and quantized ops whose weights' zero point costs activation
    sums get none, requantized ones do."""
    bert = lo.Matmul(384, 768, 3072, dtype="float16")
    for op, candidates in ((BIG_GEMM, _ranked(BIG_GEMM)), (bert, RULES.candidates(bert, ARCH))):
        for c in candidates:
            k = c.knobs
            tiles = -(-op.m // k.block_m) * -(-op.n // k.block_n) * k.split_k
            assert not k.persistent or (k.specialize and tiles > 132), k
    walking = {(c.knobs.block_m, c.knobs.block_n, c.knobs.split_k) for c in candidates if c.knobs.persistent}
    assert (128, 256, 1) not in walking and (64, 64, 2) in walking      # 9 tiles; 144 shares
    walks = {(c.knobs.block_m, c.knobs.block_n, c.knobs.warps_m, c.knobs.depth, c.knobs.stages): c
             for c in _ranked(BIG_GEMM) if c.knobs.persistent}
    # 5 steps of 192 x 128 x 64 leave room for one staging buffer a warpgroup of the stores; 4 for two
    assert [TensorPrinter(walks[192, 128, 3, 64, stages].schedule, CUDA).staging_buffers
            for stages in (5, 4)] == [1, 2]
    sums = lo.Matmul(4096, 4096, 4096, quant=lo.QuantSpec(activation="uint8", weight="uint8", output="uint8"))
    assert not any(c.knobs.persistent for c in RULES.candidates(sums, ARCH))
    requantized = lo.Matmul(4096, 4096, 4096, quant=lo.QuantSpec(activation="uint8", output="uint8"))
    assert any(c.knobs.persistent for c in RULES.candidates(requantized, ARCH))
    first = _ranked(BIG_GEMM)[0]
    unwalked = replace(first.knobs, persistent=False, cluster=(1, 1))
    twin = next(c for c in _ranked(BIG_GEMM) if c.knobs == unwalked)
    saved = twin.figures["predicted_seconds"] - first.figures["predicted_seconds"]
    assert first.figures["waves"] == 4 and saved > 0
    assert "persistent" in RULES.describe(first.knobs.as_dict())
    assert first.knobs.schedule(BIG_GEMM, ARCH).persistent_tiles


NOVEL_GEMM = lo.Matmul(2000, 3000, 1000, dtype="float16", out_dtype="float16")    # bench_cuda_tune.NOVEL


@pytest.mark.slow
def test_a_walk_in_pairs_of_blocks_is_a_candidate_of_a_float_matmul():
    """Persistent walks by clusters of two (``PAIRS``) of a float Matmul whose tiles come in whole pairs
    along the cluster's axis, priced with the shared input's tiles once a pair and a clustered launch
    (``cluster_launch_seconds``), and, where the rows straddle L2 lines, the unpersistent wide TMA kernels
    in the same pairs. The GEMM in no catalog (H200, one launch interleaved with cuBLAS, us; B, the
    weights, in whole-line rows: the next test): its first choice, 192 x 256 in one wave alone (24.35-24.83
    against cuBLAS's 24.53-24.74 in three calls), ahead of the same kernel in pairs along the columns
    (24.56-25.15: slower in nine of ten interleavings, 0.3% faster in one; the products bind both,
    the pair's launch tells them apart), both ahead of 192 x 128 walked in pairs along the columns
    (cuBLAS's form: 25.6-26.0), ahead of the same walk alone (26.3-26.4); 11 rows of tiles give no pairs
    along the rows. At K = 1024 (rows of whole lines) the pair was 1.5-2.1% slower (24.51-24.74 against
    24.13-24.22): offered only where rows straddle lines. A conv and a quantized op get no clusters."""
    ranked = _ranked(NOVEL_GEMM)
    first = ranked[0]       # its last steps in halves (test_cuda_halves.py), which take no clusters
    assert (first.knobs.block_m, first.knobs.block_n, first.knobs.persistent, first.knobs.cluster,
            first.knobs.padded) == (192, 256, False, (1, 1), True)
    alone = next(c for c in ranked if c.knobs == replace(first.knobs, halves=0))
    in_pairs = next(c for c in ranked if c.knobs == replace(alone.knobs, cluster=(1, 2)))
    assert in_pairs.figures["predicted_seconds"] - alone.figures["predicted_seconds"] == \
        pytest.approx(COSTS.cluster_launch_seconds)   # the products bind both
    a = 1 + COSTS.straddled_line_share * 0.875      # A's 2000-byte rows: 1.875 lines a box row
    a_once = (192 / 2 * a + 256) / (192 * a + 256)      # A's tiles once a pair
    assert in_pairs.figures["l2_bytes"] == pytest.approx(alone.figures["l2_bytes"] * a_once)
    assert not any(c.knobs.cluster == (2, 1) for c in ranked if (c.knobs.block_m, c.knobs.block_n) ==
                   (192, 256))
    assert in_pairs.knobs.schedule(NOVEL_GEMM, ARCH).cluster_dims == (1, 2)
    paired = [c for c in ranked if c.knobs.cluster != (1, 1)]
    assert all(c.knobs.cluster == (1, 2) for c in paired if (c.knobs.block_m, c.knobs.block_n) == (192, 128))
    pair = next(c for c in paired if (c.knobs.block_m, c.knobs.block_n, c.knobs.stages, c.knobs.persistent)
                == (192, 128, 5, True))
    walk = next(c for c in ranked if c.knobs == replace(pair.knobs, cluster=(1, 1)))
    assert ranked.index(first) < ranked.index(alone) < ranked.index(in_pairs) < ranked.index(pair) \
        < ranked.index(walk)
    shared = (192 / 2 * a + 128) / (192 * a + 128)       # A's tiles once a pair
    assert pair.figures["l2_bytes"] == pytest.approx(walk.figures["l2_bytes"] * shared)
    assert RULES.describe(pair.knobs.as_dict()).endswith("clusters of 1x2, weights in whole-line rows")
    assert pair.knobs.schedule(NOVEL_GEMM, ARCH).cluster_dims == (1, 2)
    aligned = _ranked(lo.Matmul(2000, 3000, 1024, dtype="float16", out_dtype="float16"))
    alone_first = aligned[0].knobs
    assert (alone_first.block_m, alone_first.block_n, alone_first.cluster) == (192, 256, (1, 1))
    assert not any(c.knobs.cluster != (1, 1) for c in aligned if not c.knobs.persistent)
    assert any(c.knobs.cluster == (1, 2) for c in aligned if c.knobs.persistent)
    quantized = lo.Matmul(2000, 3000, 1024, quant=lo.QuantSpec(activation="int8", output="int32"))
    for op in (CONV2_X_N1, quantized):
        assert not any(c.knobs.cluster != (1, 1) for c in RULES.candidates(op, ARCH)), op


@pytest.mark.slow
def test_weights_whose_rows_straddle_lines_are_stored_in_whole_line_rows_and_priced_so():
    """Where K's rows straddle L2 lines (the GEMM in no catalog's 2000 bytes), every TMA candidate of a
    float Matmul stores B, the weights, in rows of whole lines (``padded``: ``NK64k``), priced below the
    same kernel on B as given (``_straddled``: each box row's second line at ``straddled_line_share``);
    at K = 1024, on the threads' copies, for a conv and a quantized op B stays as given."""
    assert [_line_reads(pitch, row) for pitch, row in ((2000, 128), (2048, 128), (0, 64), (2000, 64))] == \
        [1.875, 1.0, 1.0, 1.375]
    ranked = _ranked(NOVEL_GEMM)
    tma = [c for c in ranked if c.knobs.engine == "tma"]
    assert tma and all(c.knobs.padded for c in tma)
    assert not any(c.knobs.padded for c in ranked if c.knobs.engine == "threads")
    gpu = gpu_of(ARCH)
    for candidate in (tma[0], next(c for c in tma if c.knobs.persistent)):
        assert candidate.knobs.schedule(NOVEL_GEMM, ARCH).layout_of("B").tag == "NK64k"
        assert "weights in whole-line rows" in RULES.describe(candidate.knobs.as_dict())
        given = predict(replace(candidate.knobs, padded=False).work(NOVEL_GEMM, gpu), gpu)
        assert candidate.figures["l2_bytes"] < given["l2_bytes"]
        assert candidate.figures["predicted_seconds"] <= given["predicted_seconds"]
    walk = next(c for c in tma if c.knobs.persistent and c.knobs.cluster == (1, 1))
    whole = predict(walk.knobs.work(NOVEL_GEMM, gpu, replace(COSTS, straddled_line_share=0.0)), gpu)
    assert walk.figures["l2_bytes"] > whole["l2_bytes"]
    aligned = lo.Matmul(2000, 3000, 1024, dtype="float16", out_dtype="float16")
    quantized = lo.Matmul(2000, 3000, 1000, quant=lo.QuantSpec(activation="int8", output="int32"))
    for op in (aligned, CONV2_X_N1, quantized):
        assert not any(c.knobs.padded for c in RULES.candidates(op, ARCH)), op


def _saved_by_walking(op, knobs, costs):
    """Seconds the cost model saves ``knobs``' kernel in a persistent tile loop, and how many blocks an SM
    it holds."""
    gpu = gpu_of(ARCH)
    walking = predict(replace(knobs, persistent=True).work(op, gpu, costs), gpu, costs)
    return predict(knobs.work(op, gpu, costs), gpu, costs)["predicted_seconds"] \
        - walking["predicted_seconds"], walking["occupancy"]


@pytest.mark.parametrize("layer, tiles, blocks", [
    ("conv2_x", (128, 64, 1, 1, 64), 2),
    pytest.param("conv3_x", (128, 128, 2, 1, 128), 1, marks=pytest.mark.slow)])    # 2.6 s
def test_a_persistent_requantizing_kernel_hides_its_epilogues_beside_other_blocks_products(layer, tiles,
                                                                                          blocks):
    """A persistent requantizing conv of several blocks an SM is priced its last wave's epilogue alone
    (the others run beside the SM's other blocks' products: conv2_x at N=32 0.0307 -> 0.0257 ms on the
    H200); one block an SM (two consumer warpgroups of 128 x 128) saves its pipeline fills alone."""
    shape = lo.layers.get_layer(f"resnet50.{layer}", batch=32)
    op = type(shape)(**shape.arguments, quant=lo.QuantSpec(activation="uint8", output="uint8"))
    bm, bn, wm, wn, depth = tiles
    knobs = replace(tensor_knobs(op, "gpu_wgmma", bm, bn, wm, wn, depth, 4, 1, "tma"), swizzle=depth,
                    specialize=True)
    quiet = replace(COSTS, epilogue_cycles_per_output=0.0, epilogue_thread_cycles=0.0)
    (saved, held), (fills, _) = _saved_by_walking(op, knobs, COSTS), _saved_by_walking(op, knobs, quiet)
    assert held == blocks and fills > 0
    assert (saved > 2 * fills) == (blocks > 1), (saved, fills)
    assert knobs.schedule(op, ARCH).specialized and \
        print_kernel(replace(knobs, persistent=True).schedule(op, ARCH)).source.count(
            f"__launch_bounds__(256, {blocks})" if wm == 1 else "__launch_bounds__(384, 1)") == 1


# the fastest variants of ``bench_cuda_int8.py`` on the H200 (uint8 activations, requantized uint8
# output, N=32; this session's run, tests/data/cuda/h200_int8_conv_times.json, where
# test_cost_calibration checks the model's first picks against them)
U8_CONV_WINNERS = {"conv2_x": (256, 64, 1, 1, 64, 3, 1, "tma", 64, False, False),
                   "conv3_x": (64, 128, 1, 1, 128, 4, 1, "tma", 128, True, True),
                   "conv4_x": (64, 128, 1, 1, 128, 4, 1, "tma", 128, True, True)}


@pytest.mark.slow       # the candidates of three ResNet layers: 5 s
@pytest.mark.parametrize("layer", U8_CONV_WINNERS)
def test_a_quantized_convs_candidates_copy_pixel_boxes_by_tma(layer):
    """A quantized conv's wgmma candidates copy its tiles as TMA pixel boxes, the padding's zero point
    added back in the epilogue (``padding_sums``), first in the model's ranking; the tiles measured
    fastest are candidates (conv3_x's and conv4_x's persistent, one consumer warpgroup, two blocks an
    SM)."""
    shape = lo.layers.get_layer(f"resnet50.{layer}", batch=32)
    op = type(shape)(**shape.arguments, quant=lo.QuantSpec(activation="uint8", output="uint8"))
    ranked = RULES.rank(RULES.candidates(op, ARCH))
    first = ranked[0].schedule
    assert ranked[0].knobs.engine == "tma" and first.tma_staged == ("I", "W")
    assert padding_sums.compensated(first)
    shapes = [(k.block_m, k.block_n, k.warps_m, k.warps_n, k.depth, k.stages, k.split_k, k.engine, k.swizzle,
               k.specialize, k.persistent) for k in (c.knobs for c in ranked)]
    assert U8_CONV_WINNERS[layer] in shapes


TERNARY = lo.QuantSpec(activation="int8", weight="ternary")
DECODE = [lo.Matmul(1, 4096, 4096, quant=TERNARY),
          pytest.param(lo.Matmul(1, 11008, 4096, quant=TERNARY), marks=pytest.mark.slow),
          pytest.param(lo.Matmul(1, 4096, 11008, quant=TERNARY), marks=pytest.mark.slow)]


@pytest.mark.slow
def test_a_decode_shaped_op_with_a_16_bit_output_gets_the_tensor_core_candidates():
    """The GEMV family stores float32 only: a decode-shaped float16 op storing float16 (ONNX's MatMul)
    is the tensor-core kernels', whose first choice prints; the same op storing float32 stays GEMV's."""
    op = lo.Matmul(1, 4096, 4096, dtype="float16", out_dtype="float16")
    ranked = _ranked(op)
    assert ranked and {c.knobs.preset for c in ranked} <= set(TENSOR_PRESETS)
    print_kernel(ranked[0].schedule)
    assert {c.knobs.preset for c in _ranked(lo.Matmul(1, 4096, 4096, dtype="float16"))} == {"gpu_gemv"}


@pytest.mark.parametrize("op", DECODE, ids=["4096x4096", "4096to11008", "11008to4096"])
def test_a_decode_gemv_has_the_gemv_family_s_candidates_priced_staged_behind_unstaged(op):
    """The GEMV family's warps, columns and k splits, each staged and not, all priced by the cost model;
    as timed on the H200 (bench_cuda_decode.py, every shape), each staged kernel after its unstaged twin,
    and the one-column kernels (twice the activation loads a weight) after the first. (The first
    candidates of small decode ops run in the emulation: ``test_ranked_*_emulated``.)"""
    ranked = _ranked(op)
    assert ranked and {c.knobs.preset for c in ranked} == {"gpu_gemv"}
    assert not any(RULES.unpriced(c) for c in ranked) and {c.knobs.stage for c in ranked} == {False, True}
    seconds = {c.knobs: c.figures["predicted_seconds"] for c in ranked}
    for knobs in (k for k in seconds if k.stage):
        assert seconds[knobs] > seconds[replace(knobs, stage=False)], knobs
    first = ranked[0].knobs
    assert not first.stage and first.columns > 1
    described = RULES.describe(first.as_dict())
    assert described.startswith(f"gpu_gemv {first.warps} warps of {first.columns} column"), described

