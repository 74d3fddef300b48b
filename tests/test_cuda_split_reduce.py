"""Split-K shares added by a tile's last block (``split_k(..., reduce="last")``, ``split_reduce.py``) without
a GPU: the host emulation adds the shares in split order, exactly as printed, and misses where a share is
added in another order, twice or never, or where a block takes itself for the last too early; its
refusals; the search's 16-bit candidates split this way."""
from dataclasses import replace

import numpy as np
import pytest

import loopopt as lo
from loopopt.dataflows import gpu_mma, gpu_wgmma, gpu_wmma
from loopopt.measure import verify
from loopopt.schedule import ScheduleError
from loopopt.targets.cuda import split_reduce
from loopopt.targets.cuda.emulate import emulate
from loopopt.targets.cuda.printer import print_kernel
from loopopt.targets.cuda.search import CudaSearch, figures

SPLIT = {"split_k": 3, "depth": 32, "stages": 3}


def ordered_shares(m: int = 40, n: int = 72) -> tuple[np.ndarray, np.ndarray]:
    """Inputs of a Matmul with k = 192 whose three 64-deep shares sum to 1, 2^25 and -2^25 at every output:
    added in split order (1 + 2^25 rounds to 2^25 in float32) they give 0, in any other order 1 or
    +-2^25, and a share added twice or never is off by 1 or 2^25."""
    a = np.full((m, 192), 4096.0, np.float32)
    b = np.zeros((192, n), np.float32)
    b[0], b[64], b[128] = 2.0 ** -12, 2.0 ** 13, -(2.0 ** 13)
    return a, b


def split_outputs(schedule: lo.Schedule) -> np.ndarray:
    return emulate(schedule)(*ordered_shares(schedule.op.m, schedule.op.n)).astype(np.float64)


HALF = lo.Matmul(40, 72, 192, dtype="float16", out_dtype="float16")


@pytest.mark.parametrize("mutate, expected", [
    pytest.param(lambda monkeypatch: None, 0.0, id="as printed"),
    pytest.param(lambda monkeypatch: monkeypatch.setattr(
        split_reduce, "order",
        lambda split, splits: f"for (int {split} = {splits} - 1; {split} >= 0; --{split})"),
        1.0, id="in reverse", marks=pytest.mark.slow),
    pytest.param(lambda monkeypatch: monkeypatch.setattr(
        split_reduce, "order",
        lambda split, splits: f"for (int {split} = 0; {split} < {splits} - 1; ++{split})"),
        None, id="the last share never", marks=pytest.mark.slow),
    pytest.param(lambda monkeypatch: monkeypatch.setattr(
        split_reduce, "arrive", lambda device, tile, splits, meet:
        [f"const int lo_last = ++{split_reduce.COUNTERS}[{tile}] >= {splits - 1};"]),
        None, id="a block before the last", marks=pytest.mark.slow)])
def test_the_last_block_adds_the_shares_in_split_order(monkeypatch, mutate, expected):
    mutate(monkeypatch)
    out = split_outputs(gpu_wgmma(HALF, **SPLIT))
    if expected is not None:
        assert np.all(out == expected)
    else:
        assert not np.all(out == 0.0)


@pytest.mark.slow
@pytest.mark.parametrize("make", [
    pytest.param(lambda: gpu_mma(lo.Matmul(40, 72, 192, dtype="bfloat16", out_dtype="bfloat16"), **SPLIT),
                 id="mma bf16"),
    pytest.param(lambda: gpu_wmma(HALF, **SPLIT), id="wmma")])


def test_every_kernel_kind_adds_its_shares_in_split_order(make):
    assert np.all(split_outputs(make()) == 0.0)


@pytest.mark.slow
def test_a_last_block_reduction_takes_a_fused_epilogue_and_a_16bit_output():
    """A float32 output with ReLU after split-K (refused under atomic adds) within the reference's bound."""
    op = lo.Matmul(100, 72, 256, dtype="float16")
    with pytest.raises(ScheduleError, match=r"split_k\(..., reduce='last'\) or drop one of them"):
        print_kernel(gpu_wgmma(op, split_k=3).clip(low=0.0))
    schedule = lo.Schedule(op).split("k", 64).split_k("k_o", "last")
    assert "split_k('k_o', 'last')" in [str(step) for step in schedule.steps]
    ok, error = verify(emulate(gpu_wgmma(HALF, split_k=2, depth=32, stages=3).clip(low=0.0)), seed=4)
    assert ok, error


@pytest.mark.parametrize("make, message", [
    (lambda: lo.Schedule(HALF).split("k", 64).split_k("k_o", "sum"),
     r"split_k\('k_o', 'sum'\): reduce='sum'; allowed 'atomic' \(atomicAdd into the output\) or 'last'"),
    (lambda: print_kernel(gpu_wgmma(HALF, **SPLIT, engine="tma", specialize=True, persistent=True)),
     r"split_k\('k_o_o', 'last'\) adds float32 shares in a tile's last block of a grid of tiles; a "
     r"persistent block walks several tiles: drop persistent")])
def test_last_block_reductions_are_refused_where_they_cannot_apply(make, message):
    with pytest.raises(ScheduleError, match=message):
        make()


@pytest.mark.slow
def test_the_search_prices_a_last_block_reduction_at_its_measured_rate():
    """BERT's 384x768x3072 GEMM: a split candidate of a float16 output writes its float32 shares and reads
    them back (``split_reduce_bytes_per_s``, measured: 16.4 us more than atomic adds at 128 x 128 in 7
    shares), so the cost model puts an unsplit 64 x 64 kernel (the first choice; cuBLAS's tile) before a
    split one (measured on the H200: unsplit 0.029 ms, split 0.030-0.038)."""
    half, single = (lo.Matmul(384, 768, 3072, dtype="float16", out_dtype=out)
                    for out in ("float16", "float32"))
    candidates = CudaSearch().candidates(half, "sm_90")
    shape = lambda c: (c.knobs.block_m, c.knobs.block_n, c.knobs.split_k, c.knobs.stages, c.knobs.specialize)
    unsplit = next(c for c in candidates if shape(c) == (64, 64, 1, 5, True))
    split = next(c for c in candidates if c.knobs.split_k == 8)
    assert figures(unsplit)["predicted_seconds"] < figures(split)["predicted_seconds"]
    extra = figures(split)["predicted_seconds"] - figures(replace(split, op=single))["predicted_seconds"]
    outputs = 384 * 768
    assert extra == pytest.approx(8 * outputs * 8 / 1.0e12 - 4 * outputs * 9 / 2.5e12, rel=0.05)
