"""The last pipeline steps in halves (``Schedule.halves``, ``targets/cuda/halves.py``): the host emulation
against the reference over drawn shapes, what can make it fail, the refusals, an sm_90a build, and the
search's halves candidates (one wave only) and their price."""
import re
from dataclasses import replace

import pytest
from helpers import matmul_ops, needs, sass, tiers
from hypothesis import strategies as st
from test_cuda_tensor import _emulated_error

import loopopt as lo
from loopopt.dataflows import gpu_mma, gpu_wgmma
from loopopt.schedule import ScheduleError
from loopopt.schedule_file import schedule_from_toml, to_toml
from loopopt.targets.cuda import halves, toolchain
from loopopt.targets.cuda.printer import print_kernel
from loopopt.targets.cuda.search import HALVES, _halved, figures, tensor_knobs
from loopopt.targets.registry import target
from loopopt.targets.search import Candidate

WIDE = {"depth": 64, "swizzle": 128, "engine": "tma"}
GOAL = lo.Matmul(2000, 3000, 1000, dtype="float16", out_dtype="float16")       # the GEMM in no catalog
FIRST = {"block_m": 192, "block_n": 256, "warps_m": 3, "stages": 4, "padded": True} | WIDE
# (tiles, halves): m64n256 -> m64n128 in the 128-byte swizzle, m64n128 -> m64n64 in the 32-byte one
TAILS = st.sampled_from([({"block_m": 64, "warps_m": 1, "stages": 4} | WIDE, 2),
                         ({"block_m": 64, "warps_m": 1, "stages": 4} | WIDE, 3),
                         ({"block_m": 64, "warps_m": 1, "block_n": 128, "stages": 3} | WIDE, 2),
                         ({"block_m": 64, "warps_m": 1, "block_n": 128, "depth": 32, "stages": 4,
                           "engine": "tma"}, 3),
                         ({"block_m": 128, "warps_m": 2, "stages": 4} | WIDE, 1)])
# rows of 16 bytes (TMA's copies and stores), N wide enough for the widest entry's halves
_OPS = matmul_ops(max_mn=140, max_k=200, batched=False, dtype="float16").map(
    lambda op: lo.Matmul(op.m, 136 + 8 * (op.n % 21), 8 * -(-op.k // 8), dtype="float16",
                         out_dtype="float16")).filter(lambda op: op.k >= 8)


def _check_halves_emulated(op, tail):
    """The kernel with its last steps in halves matches the reference in the host emulation, or is
    refused for fewer pipeline steps than the halves."""
    tiles, steps = tail
    schedule = gpu_wgmma(op, **tiles, halves=steps)
    if -(-op.k // tiles["depth"]) < steps:
        with pytest.raises(ScheduleError, match=rf"halves\({steps}\): steps={steps}; .* the kernel's"):
            print_kernel(schedule)
        return
    largest, excess = _emulated_error(schedule, seed=6)
    assert excess <= 0, largest


test_random_halves_emulated, test_random_halves_emulated_full = tiers(
    _check_halves_emulated, 2, 8, _OPS, TAILS)


@pytest.mark.slow        # ~1-3 s each (the emulation of a 296-column tile)
@pytest.mark.parametrize("op", [lo.Matmul(150, 296, 400, dtype="float16", out_dtype="float16"),
                                lo.Matmul(70, 300, 328, dtype="float16"),
                                lo.Gemm(40, 264, 200, alpha=0.5, beta=2.0, dtype="float16")], ids=repr)
def test_float_outputs_bias_and_scales_in_halves_match_the_reference(op):
    """A float32 output (two chunks a half), a Gemm's bias and scales (staged with the bounds select)."""
    schedule = gpu_wgmma(op, block_m=64, warps_m=1, stages=4, halves=3, **WIDE)
    largest, excess = _emulated_error(schedule, seed=2)
    assert excess <= 0, largest


_MMA = halves.Halves.mma


@pytest.mark.parametrize("mutate", [
    lambda monkeypatch: monkeypatch.setattr(halves.Halves, "b_rows", lambda self, half: 0),
    lambda monkeypatch: monkeypatch.setattr(halves.Halves, "mma", lambda self, device, acc, a, b, half:
                                            _MMA(self, device, acc, a, b, 0)),
], ids=["the right half reads the left half's rows", "the right half's sums land in the left half"])
def test_the_emulation_fails_a_half_that_reads_or_writes_the_wrong_columns(monkeypatch, mutate):
    mutate(monkeypatch)
    op = lo.Matmul(70, 256, 192, dtype="float16", out_dtype="float16")
    largest, excess = _emulated_error(gpu_wgmma(op, block_m=64, warps_m=1, stages=4, halves=2, **WIDE))
    assert excess > 0, largest


@pytest.mark.parametrize("make, message", [
    (lambda: gpu_wgmma(GOAL, **FIRST).halves(0), r"halves\(0\): steps=0; a positive number"),
    (lambda: gpu_wgmma(GOAL, **FIRST, halves=2).halves(2), r"halves\(2\): the last 2 steps are in halves"),
    (lambda: gpu_wgmma(GOAL, **FIRST, halves=4), r"halves\(4\): steps=4; at most stages - 1 = 3"),
    (lambda: gpu_wgmma(GOAL, **FIRST | {"block_m": 64, "warps_m": 1, "block_n": 64}, halves=2),
     r"halves\(2\): the products run on wgmma_m64n64k16_f16_f32; halves takes a wgmma entry whose N"),
    (lambda: gpu_mma(GOAL).halves(2), r"halves\(2\): the products run on mma_m16n8k16_f16_f32"),
    (lambda: gpu_wgmma(GOAL, **FIRST | {"block_m": 128, "warps_m": 2}, specialize=True, halves=2),
     r"halves\(2\): the kernel is specialized"),
    (lambda: gpu_wgmma(GOAL, block_m=192, warps_m=3, halves=2), r"copies an input by its threads"),
    (lambda: gpu_wgmma(GOAL, **FIRST, split_k=2, halves=2), r"halves\(2\): C is not stored by TMA"),
    (lambda: gpu_wgmma(lo.Matmul(2000, 3000, 1000, dtype="float16"), **FIRST, halves=2),
     r"halves\(2\): a half's 12 output boxes \(98304 bytes\) do not fit"),
], ids=["no steps", "twice", "more than stages - 1", "no half entry", "mma.sync", "specialized",
        "the threads copy", "split-K", "too many boxes"])
def test_halves_refuses_what_it_cannot_print(make, message):
    with pytest.raises(ScheduleError, match=message):
        print_kernel(make())


@pytest.mark.slow        # an nvcc build: ~20 s each
@needs(toolchain.nvcc)
@pytest.mark.parametrize("steps", HALVES)
def test_the_goal_layers_halves_build_for_sm_90_with_both_wgmma_widths_and_no_spills(steps):
    kernel = gpu_wgmma(GOAL, **FIRST, halves=steps).compile(target="cuda", isa="sm_90")
    assert kernel.build.spill_bytes == 0, kernel.report
    assert "C7511" not in kernel.report, kernel.report      # ptxas serialized no wgmma
    code = sass(kernel)
    assert len(re.findall(r"HGMMA\.64x128x16", code)) == steps * 4 * 2, "the steps' four k16 in two halves"
    assert "HGMMA.64x256x16" in code and "UTMASTG.2D" in code
    assert "LDL" not in code and "STL" not in code


def test_the_search_offers_halves_only_in_one_wave_and_credits_at_most_half_the_drain():
    knobs = tensor_knobs(GOAL, "gpu_wgmma", 192, 256, 3, 1, 64, 4, 1, "tma")
    knobs = replace(knobs, swizzle=128, padded=True)
    halved = _halved(GOAL, knobs, "sm_90")
    assert [k.halves for k in halved] == list(HALVES)
    seconds = [figures(Candidate(GOAL, "sm_90", k))["predicted_seconds"] for k in (knobs, *halved)]
    assert seconds[0] > seconds[1] > seconds[2] >= seconds[0] - 12.7e6 / 2.9e12 / 2
    assert "last 3 steps in halves" in target("cuda").search_rules().describe(halved[-1].as_dict())
    many = lo.Matmul(4096, 4096, 4096, dtype="float16", out_dtype="float16")     # 16 x 32 tiles: many waves
    assert _halved(many, replace(knobs, padded=False), "sm_90") == []


@pytest.mark.slow        # the goal layer's whole search space ranked: ~10 s
def test_the_goal_layers_first_choice_is_its_one_wave_with_the_last_steps_in_halves():
    rules = target("cuda").search_rules()
    first = rules.rank(rules.candidates(GOAL, "sm_90"))[0].knobs
    assert (first.block_m, first.block_n, first.halves, first.padded) == (192, 256, max(HALVES), True), first


def test_halves_round_trip_through_a_schedule_file():
    schedule = gpu_wgmma(GOAL, **FIRST, halves=3)
    text = to_toml(schedule)
    assert "halves = 3" in text
    assert schedule_from_toml(text, GOAL) == schedule
