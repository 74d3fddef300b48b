"""Binary ops (QuantSpec(activation="binary", weight="binary")): the XNOR + popcount kernels agree with
quant.py's exact reference (int32 bit for bit, float32 within float32 rounding) on every integer ISA
here plus scalar and every popcount this CPU runs; the packing and the refusals."""
import numpy as np
import pytest
from helpers import SPECS_BINARY as SPECS
from helpers import binary_convs, check_binary, tiers
from hypothesis import strategies as st

import loopopt as lo
from loopopt.measure import verify
from loopopt.quant_reference import random_call
from loopopt.targets.binary import block_dims
from loopopt.targets.x86.binary import LANES, POPCOUNTS
from loopopt.targets.x86.families import compile_binary
from loopopt.targets.x86.isa import available_int_isas, cpu_flags
from loopopt.targets.x86.rank import rank
from loopopt.targets.x86.space import candidates, is_binary

VARIANTS = [(isa, popcount) for isa in available_int_isas() for popcount in POPCOUNTS[isa]
            if popcount != "vpopcntq" or "avx512_vpopcntdq" in cpu_flags()]


def check(op, isa, popcount, seed=1, block=None):
    """The kernel of ``op`` (with the register block ``block`` = (positions, output channels) as a
    ``tile`` step, or the default one) against the reference."""
    schedule = lo.Schedule(op)
    if block is not None:
        positions, channels = block_dims(op)
        schedule = schedule.tile(**{positions: block[0], channels: block[1]})
    return check_binary(compile_binary(schedule, isa, popcount), seed)


def draw_block(data, isa):
    """A register block: 1 to 7 output positions x 1 to 3 vectors of output channels of ``isa``, or
    None (the ISA's default block)."""
    if data.draw(st.booleans()):
        return None
    return data.draw(st.integers(1, 7)), data.draw(st.integers(1, 3)) * LANES[isa]


def random_binary_conv(variant, data, words):
    """A random binary conv (``binary_convs``) under a random register block (tails of positions and of
    channel vectors)."""
    check(data.draw(binary_convs(words)), *variant, block=draw_block(data, variant[0]))


test_random_binary_convs_quick, test_random_binary_convs = tiers(
    random_binary_conv, 1, 16, marks=[pytest.mark.parametrize("variant", VARIANTS, ids=str)], data=st.data(),
    words=st.integers(1, 3))


def random_binary_matmul(variant, data, m, n, k):
    """A random binary matmul (columns of B are the output channels, rows of A the positions)."""
    check(lo.Matmul(m, n, k, quant=data.draw(SPECS)), *variant, block=draw_block(data, variant[0]))


test_random_binary_matmuls_quick, test_random_binary_matmuls = tiers(
    random_binary_matmul, 1, 8, marks=[pytest.mark.parametrize("variant", VARIANTS, ids=str)], data=st.data(),
    m=st.integers(1, 9), n=st.integers(1, 27), k=st.integers(1, 200))


def test_padding_taps_contribute_zero():
    # all +1: each output is the number of valid products (3 channels x the taps inside the image)
    op = lo.Conv2d(3, 2, 3, padding=1, bias=False, height=4, width=4,
                   quant=lo.QuantSpec("binary", False, True, "int32", "binary"))
    kernel = compile_binary(lo.Schedule(op), "scalar")
    y = kernel(np.ones((1, 3, 4, 4), np.int8), np.ones((2, 3, 3, 3), np.int8), x_zero_point=0, w_zero_point=0)
    assert y[0, 0, 0, 0] == 3 * 4 and y[0, 1, 1, 1] == 3 * 9 and y[0, 0, 0, 1] == 3 * 6


def test_auto_picks_the_cpu_popcount():
    op = lo.Matmul(1, 8, 64, quant=lo.QuantSpec("binary", True, True, "int32", "binary"))
    kernel = check(op, "auto", "auto")
    expected = {"avx512": "vpopcntq" if "avx512_vpopcntdq" in cpu_flags() else "nibble", "avx2": "nibble",
                "scalar": "builtin"}[kernel.isa]
    assert kernel.popcount == expected and f"popcount: {expected}" in kernel.source
    assert lo.Schedule(op).compile().popcount == expected


def test_bad_values_and_refusals():
    op = lo.Conv2d(4, 2, 3, height=5, width=5, quant=lo.QuantSpec("binary", True, True, "float32", "binary"))
    kernel = compile_binary(lo.Schedule(op), "scalar")
    args, params = random_call(op, 0)
    args[0][0, 3, 2, 1] = 0
    with pytest.raises(ValueError, match=r"binary inputs must be -1 or \+1: input\[0, 3, 2, 1\] = 0"):
        kernel(*args, **params)
    args[0][0, 3, 2, 1] = 1
    args[1][1, 0, 0, 2] = 3
    with pytest.raises(ValueError, match=r"binary weights must be -1 or \+1: weight\[1, 0, 0, 2\] = 3"):
        kernel(*args, **params)
    args[1][1, 0, 0, 2] = 1
    with pytest.raises(ValueError, match="x_zero_point=1 must be 0"):
        kernel(*args, **(params | {"x_zero_point": np.int8(1)}))
    with pytest.raises(lo.ScheduleError, match=r"one schedule step, the register block: tile\(ow=R, k=KB\)"):
        lo.Schedule(op).reorder("kh", "kw").compile("scalar")
    with pytest.raises(lo.ScheduleError, match="k=3 output channels is not a multiple of the 4 uint64 lanes"):
        compile_binary(lo.Schedule(op).tile(ow=2, k=3), "avx2", "nibble")
    wide = lo.Conv2d(4, 2, 3, height=5, width=70, quant=op.quant)      # 68 output columns: a block of 65
    with pytest.raises(lo.ScheduleError, match="65 x 1 accumulators; at most 64"):
        lo.Schedule(wide).tile(ow=65, k=1).compile("scalar")
    with pytest.raises(ValueError, match="popcount='nibble' is not available on isa 'scalar'"):
        compile_binary(lo.Schedule(op), "scalar", "nibble")
    with pytest.raises(lo.ScheduleError, match="isa 'amx' has no binary kernels"):
        lo.Schedule(op).compile("amx")


def test_spec_refusals():
    with pytest.raises(ValueError, match="binary activations and weights go together"):
        lo.QuantSpec("binary", True, True, "int32", "int8")
    with pytest.raises(ValueError, match="binary activations and weights go together"):
        lo.QuantSpec("uint8", True, True, "int32", "binary")
    with pytest.raises(ValueError, match="a binary op's output is 'int32' or 'float32', not 'uint8'"):
        lo.QuantSpec("binary", True, True, "uint8", "binary")


def test_quantize_binary_is_sign_and_absmean():
    q, scale, zero = lo.quantize_binary(np.array([[0.5, -2.0], [0.0, -1.0]], np.float32), axis=0)
    assert q.tolist() == [[1, -1], [1, -1]] and np.allclose(scale, [1.25, 0.5]) and zero.tolist() == [0, 0]


TUNED = lo.Conv2d(70, 20, 3, padding=1, height=5, width=6,
                  quant=lo.QuantSpec("binary", True, True, "int32", "binary"))


@pytest.mark.slow
def test_tune_candidates_are_the_register_blocks():
    isa = available_int_isas()[0]
    space = rank(candidates(TUNED, isa))
    blocks = {(c.knobs.pixel_block, c.knobs.channel_block) for c in space}
    assert all(is_binary(c) for c in space) and len(blocks) == len(space) > 1
    assert all(channels % LANES[isa] == 0 for _, channels in blocks)
    assert all(c.figures["predicted_seconds"] > 0 for c in space)
    assert candidates(TUNED, isa, threads=2) == [] and candidates(TUNED, "amx") == []
    best = space[0].schedule
    assert [step.primitive for step in best.steps] == ["tile"]
    assert "register block" in str(best) and "XOR" in str(best)


@pytest.mark.slow
def test_tune_finds_a_verified_block():
    result = lo.tune(TUNED, trials=3, budget=0.02, progress=False)
    assert result.timing.verified and all(t.knobs["kernel"] == "binary" for t in result.trials)
    assert "implicit_gemm" in result.skipped and "XNOR + popcount" in result.skipped["implicit_gemm"]
    assert verify(result.best.compile(result.isa))[0]
