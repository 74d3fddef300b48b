"""bfloat16 ops: kernels on every ISA here plus scalar agree with the float64 reference of the
bf16-rounded inputs within the bf16 error bound (measure.bf16_tolerance); the vdpbf16ps path where
a schedule has a dot loop of 2; ml_dtypes inputs; bad input refused with the allowed values."""
import ml_dtypes
import numpy as np
import pytest
from helpers import (
    ISAS,
    check,
    conv_dot_schedule,
    conv_ops,
    even_conv_ops,
    gemm_ops,
    matmul_ops,
    quick_first,
    schedules,
    tiers,
)
from hypothesis import strategies as st

import loopopt as lo
from loopopt.bf16 import bf16_values
from loopopt.measure import tolerance
from loopopt.targets.x86.isa import BF16_DOT_FLAGS, bf16_dot_available

BF16 = "bfloat16"
needs_dot = pytest.mark.skipif(not bf16_dot_available("avx512"),
                               reason=f"this CPU lacks {', '.join(BF16_DOT_FLAGS)} (vdpbf16ps) or AVX-512")


def random_conv_schedule(isa, data):
    """A random legal schedule of a random bf16 conv (widened operands, or pairs where it has a dot loop)."""
    op = data.draw(conv_ops(dtype=BF16))
    check(data.draw(schedules(op, isa)), isa)


test_random_bf16_conv_schedules_quick, test_random_bf16_conv_schedules = tiers(
    random_conv_schedule, 1, 12, isas=ISAS, data=st.data())


def random_matmul_schedule(isa, data):
    """A random legal schedule of a random bf16 matmul (batch dims, transposes)."""
    check(data.draw(schedules(data.draw(matmul_ops(dtype=BF16)), isa)), isa)


test_random_bf16_matmul_schedules_quick, test_random_bf16_matmul_schedules = tiers(
    random_matmul_schedule, 1, 6, isas=ISAS, data=st.data())


def random_new_op_schedule(isa, data):
    """A random legal schedule of a random bf16 Conv1d, Conv3d or Gemm."""
    op = data.draw(st.one_of(conv_ops(spatial=1, dtype=BF16), conv_ops(max_hw=4, spatial=3, max_channels=3,
                                                                       dtype=BF16), gemm_ops(dtype=BF16)))
    check(data.draw(schedules(op, isa)), isa)


test_random_bf16_new_op_schedules_quick, test_random_bf16_new_op_schedules = tiers(
    random_new_op_schedule, 1, 9, isas=ISAS, data=st.data())


def matmul_dot_schedule(op: lo.Matmul, block: bool) -> lo.Schedule:
    """B in pairs of k per column (KN16n2k): k_i (2) is the dot loop."""
    s = (lo.Schedule(op).layout("B", "KN16n2k").split("j", 16).split("k", 2)
         .reorder("i", "j_o", "k_o", "k_i", "j_i").vectorize("j_i"))
    return s.register_block("k_o") if block else s


def conv_dot(data, block):
    """The vdpbf16ps path of a random conv: chosen, and within the bound."""
    schedule = conv_dot_schedule(data.draw(even_conv_ops()), block)
    assert "dpbf16_ps" in schedule.compile("avx512").source
    check(schedule, "avx512")


test_bf16_conv_dot_quick, test_bf16_conv_dot = tiers(
    conv_dot, 1, 12, marks=[needs_dot, pytest.mark.parametrize("block", [True, False])], data=st.data())


def cache_blocked_conv_dot(data):
    """A cache block of the input channels that does not divide them, both in whole pairs: the partial
    block's guard holds for all of a pair or none of it, so the block runs on vdpbf16ps, within the bound."""
    pairs = data.draw(st.integers(3, 8))
    block = 2 * data.draw(st.integers(2, pairs - 1).filter(lambda m: pairs % m))
    op = lo.Conv2d(2 * pairs, data.draw(st.integers(2, 40)), 3, stride=data.draw(st.integers(1, 2)),
                   padding=data.draw(st.integers(0, 1)), batch=data.draw(st.integers(1, 2)),
                   height=data.draw(st.integers(3, 7)), width=data.draw(st.integers(3, 9)), dtype=BF16)
    schedule = (lo.Schedule(op).layout("I", "NHWC").layout("O", "NHWC").layout("W", "OIHW16o2i")
                .split("k", 16).split("c", block).split("c_i", 2)
                .reorder("n", "k_o", "oh", "c_o", "ow", "kh", "kw", "c_i_o", "c_i_i", "k_i")
                .vectorize("k_i").register_block("kh"))
    assert "dpbf16_ps" in schedule.compile("avx512").source
    check(schedule, "avx512")


test_bf16_cache_blocked_conv_dot_quick, test_bf16_cache_blocked_conv_dot = tiers(
    cache_blocked_conv_dot, 1, 8, marks=[needs_dot], data=st.data())


def matmul_dot(block, m, n, pairs):
    """The vdpbf16ps path of a random matmul (an even k): chosen, and within the bound."""
    schedule = matmul_dot_schedule(lo.Matmul(m, n, 2 * pairs, dtype=BF16), block)
    assert "dpbf16_ps" in schedule.compile("avx512").source
    check(schedule, "avx512")


test_bf16_matmul_dot_quick, test_bf16_matmul_dot = tiers(
    matmul_dot, 1, 8, st.integers(1, 20), st.integers(1, 37), st.integers(1, 12),
    marks=[needs_dot, pytest.mark.parametrize("block", [True, False])])


@pytest.mark.parametrize("isa", quick_first(ISAS))
def test_a_dot_schedule_elsewhere_and_an_odd_pair_widen(isa):
    """The dot schedule on an ISA without vdpbf16ps, and on channels that end in half a pair (no dot:
    the pair would multiply a zero weight by the next pixel's channel), widens and fuses."""
    odd = lo.Conv2d(5, 20, 3, padding=1, batch=2, height=5, width=6, dtype=BF16)
    schedule = conv_dot_schedule(odd, block=True)
    assert "dpbf16" not in schedule.compile(isa).source
    check(schedule, isa)


def test_ml_dtypes_inputs_equal_float32_inputs_rounded():
    op = lo.Conv2d(6, 20, 3, padding=1, batch=2, height=5, width=6, dtype=BF16)
    x, w, b = (op.random_inputs(seed=3)[t] for t in "IWB")
    kernel = conv_dot_schedule(op, block=True).compile()
    from_float = kernel(x, w, b)
    assert np.array_equal(kernel(x.astype(ml_dtypes.bfloat16), w.astype(ml_dtypes.bfloat16), b), from_float)
    mixed = kernel(x.astype(ml_dtypes.bfloat16), w, b)
    assert np.array_equal(mixed, from_float) and mixed.dtype == np.float32


def test_reference_rounds_and_the_bound_can_fail():
    """The reference multiplies the bf16-rounded inputs; against the float32 inputs unrounded the
    kernel is outside the bound (so the bound is not loose enough to hide the rounding)."""
    op = lo.Matmul(8, 16, 64, dtype=BF16)
    inputs = op.random_inputs(seed=2)
    a, b = inputs["A"], inputs["B"]
    y = lo.Schedule(op).compile("scalar")(a, b)
    assert np.array_equal(op.reference(a, b), lo.Matmul(8, 16, 64).reference(bf16_values(a), bf16_values(b)))
    bound = tolerance(op, inputs)
    assert np.all(np.abs(y - op.reference(a, b)) <= bound)
    assert np.any(np.abs(y - lo.Matmul(8, 16, 64).reference(a, b)) > bound)


def test_measure_verifies_a_bf16_kernel():
    op = lo.Matmul(4, 16, 6, dtype=BF16)
    timing = lo.measure(matmul_dot_schedule(op, block=True).compile(), repeats=2, budget=0.01)
    assert timing.verified and timing.unit == "GFLOP/s"


def test_dtype_is_checked_and_carried():
    with pytest.raises(ValueError, match="dtype 'float64' is not supported: allowed 'float32', 'bfloat16', "
                                         "'float16'"):
        lo.Conv2d(4, 4, 3, dtype="float64")
    with pytest.raises(ValueError, match="dtype 'int8' is not supported"):
        lo.Matmul(4, 4, 4, dtype="int8")
    spec = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="float32")
    with pytest.raises(ValueError, match="dtype 'bfloat16' cannot be quantized"):
        lo.Matmul(4, 4, 4, dtype=BF16, quant=spec)
    conv = lo.Conv2d(4, 4, 3, dtype=BF16)
    assert conv.with_quant(None).dtype == BF16 and "dtype='bfloat16'" in repr(conv)
    with pytest.raises(ValueError, match="cannot be quantized"):
        conv.with_quant(spec)
    assert "dtype" not in repr(lo.Conv2d(4, 4, 3))


def test_bad_bf16_inputs_are_refused():
    op = lo.Matmul(3, 5, 4, dtype=BF16)
    kernel = lo.Schedule(op).compile("scalar")
    a, b = op.random_inputs()["A"], op.random_inputs()["B"]
    with pytest.raises(ValueError, match=r"A has shape \(4, 3\); .* expects \(3, 4\)"):
        kernel(a.T.copy().astype(ml_dtypes.bfloat16), b)
    with pytest.raises(TypeError, match="B has dtype float64; this kernel takes float32 or ml_dtypes.bfl"):
        kernel(a, b.astype(np.float64))
    with pytest.raises(TypeError, match="B has dtype float16"):
        kernel(a, b.astype(np.float16))
    conv = lo.Conv2d(2, 3, 1, height=2, width=2, dtype=BF16)
    x, w, bias = (conv.random_inputs()[t] for t in "IWB")
    with pytest.raises(TypeError, match="B has dtype bfloat16; this kernel takes float32"):
        lo.Schedule(conv).compile("scalar")(x, w, bias.astype(ml_dtypes.bfloat16))
