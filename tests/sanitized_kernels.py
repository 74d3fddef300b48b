"""Random kernels for the sanitizer tier (tests/test_sanitize.py runs this module in a python with
AddressSanitizer preloaded and LOOPOPT_SANITIZE=address,undefined; it is not collected otherwise).

A bounded, derandomized set: float, bfloat16 and quantized convs and matmuls on every ISA here, register
blocks wherever the schedule has a site for one (sanitized kernel buffers end where the kernel
may stop reading, so a read past them is reported). Shapes are small: a sanitized build of a
register block of hundreds of unrolled accumulators takes minutes."""
import pytest
from helpers import (
    SPECS,
    check_quantized,
    conv_dot_schedule,
    conv_ops,
    conv_wide_schedule,
    even_conv_ops,
    generates,
    register_block_sites,
    schedules,
    tap_convs,
    tap_schedule,
)
from helpers import check as check_float
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import loopopt as lo
from loopopt.targets.x86.isa import available_int_isas

EXAMPLES = 2
MATMULS = dict(m=st.integers(1, 6), n=st.integers(1, 24), k=st.integers(1, 12))
BOUNDED = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def blocked_schedules(draw, op, isa):
    """A random schedule, register-blocked at one of its sites if it has any."""
    s = draw(schedules(op, isa))
    sites = register_block_sites(s, isa) if s.register_block_at is None else []
    return s.register_block(draw(st.sampled_from(sites))) if sites else s


@pytest.mark.parametrize("isa", lo.available_isas())
@BOUNDED
@given(data=st.data())
def test_float_convs(isa, data):
    check_float(data.draw(blocked_schedules(data.draw(conv_ops(max_hw=7)), isa)), isa)


@pytest.mark.parametrize("isa", lo.available_isas())
@BOUNDED
@given(data=st.data(), **MATMULS)
def test_float_matmuls(isa, data, m, n, k):
    check_float(data.draw(blocked_schedules(lo.Matmul(m, n, k), isa)), isa)


@pytest.mark.parametrize("isa", lo.available_isas())
@BOUNDED
@given(data=st.data())
def test_bf16_convs(isa, data):
    """Widened bf16 operands (gathers and AVX2's masked loads read 2 bytes past an element) and, on
    AVX-512 with AVX512-BF16, the vdpbf16ps pairs."""
    check_float(data.draw(blocked_schedules(data.draw(conv_ops(max_hw=7, dtype="bfloat16")), isa)), isa)
    check_float(conv_dot_schedule(data.draw(even_conv_ops(max_hw=7)), data.draw(st.booleans())), isa)


@pytest.mark.parametrize("isa", available_int_isas())
@BOUNDED
@given(data=st.data())
def test_quantized_convs(isa, data):
    """Quantized Conv1d/2d/3d: the border class tables of every window read in bounds."""
    spatial = data.draw(st.sampled_from([1, 2, 2, 3]))
    op = data.draw(conv_ops(max_hw=7, spatial=spatial)).with_quant(data.draw(SPECS))
    s = data.draw(blocked_schedules(op, isa))
    if op.quant.dequantized and data.draw(st.booleans()):
        s = s.arithmetic("dequantize")
    check_quantized(s.compensation(data.draw(st.sampled_from(["packed", "kernel"]))), isa)


@pytest.mark.parametrize("isa", available_int_isas())
@BOUNDED
@given(data=st.data(), **MATMULS)
def test_quantized_matmuls(isa, data, m, n, k):
    """Quantized matmuls, batched (a compensation table per batch item) and transposed."""
    op = lo.Matmul(m, n, k, batch=tuple(data.draw(st.lists(st.integers(1, 3), max_size=2))),
                   trans_a=data.draw(st.booleans()), trans_b=data.draw(st.booleans()), quant=data.draw(SPECS))
    check_quantized(data.draw(blocked_schedules(op, isa)), isa)


@pytest.mark.skipif("avx2" not in available_int_isas(), reason="this CPU has no AVX2")
@BOUNDED
@given(data=st.data())
def test_wide_weights(data):
    """s16 weights (codegen/wide.py): the activations, outputs and tables read in bounds around them (the
    weight blocks themselves are read by an asm statement's memory operand, which AddressSanitizer does
    not see: test_wide_weights checks that a vector past the last channels points at the zero block)."""
    op = lo.Conv2d(data.draw(st.integers(1, 9)), data.draw(st.integers(1, 20)), 3, padding=1,
                   height=data.draw(st.integers(1, 6)), width=data.draw(st.integers(1, 7)),
                   quant=data.draw(SPECS))
    block, pixels = data.draw(st.sampled_from([8, 24, 32])), data.draw(st.integers(1, 3))
    check_quantized(conv_wide_schedule(op, block, pixels, data.draw(st.booleans()), data.draw(st.booleans())),
                    "avx2")


@pytest.mark.parametrize("isa", available_int_isas())
@BOUNDED
@given(data=st.data())
def test_tap_dots(isa, data):
    """Tap dots (codegen/taps.py): window loads read at most a window past the activations, and the
    windows near a row's ends nothing before them (AVX-512: only the row's bytes)."""
    s = tap_schedule(data.draw(tap_convs()), data.draw(st.integers(1, 40)), data.draw(st.integers(1, 3)))
    assume(generates(s, isa))     # without a tap dot a register block may refuse a guarded broadcast
    check_quantized(s, isa)


@pytest.mark.parametrize("isa", available_int_isas())
@pytest.mark.parametrize("stride, width, pixels", [(2, 113, 56), (1, 61, 64)])
def test_tap_phase_groups(isa, stride, width, pixels):
    """Tap dots in phase groups (taps.phases): the plain window loads near a row's end (the used lanes'
    taps in the row) read at most a window past the activations; the last row of the last channel too."""
    op = lo.Conv2d(3, 3, 3, stride=(1, stride), padding=((1, 1), (1, 2)), groups=3, batch=2, height=3,
                   width=width, quant=lo.QuantSpec("uint8", True, True, "uint8"))
    check_quantized(tap_schedule(op, pixels, 1), isa)
