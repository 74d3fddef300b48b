"""int8 Winograd F(2x2,3x3) (loopopt.winograd_int8): bit for bit quant.py's exact output of the direct
conv (the accumulators are the same integers) over random shapes, specs, full-range calls and GEMM
blocks on every integer ISA here plus scalar; exact at the channel limit; refused ops and bad calls."""
import re

import numpy as np
import pytest
from helpers import INT_ISAS as ISAS
from helpers import SPECS, integer_calls, quick_first, rotated, tiers, winograd_convs
from hypothesis import strategies as st

import loopopt as lo
from loopopt import winograd, winograd_int8
from loopopt.quant import QuantSpec, check_call, output_multipliers
from loopopt.quant_reference import random_call, reference_output
from loopopt.targets.x86.isa import INT_ISAS
from loopopt.targets.x86.winograd_int8 import BLOCKS, LANES, TEMPORARIES

SPEC = QuantSpec(activation="uint8", per_channel=True, output="uint8")
SMALL = lo.Conv2d(17, 19, 3, padding=((0, 1), (2, 1)), bias=True, batch=2, height=7, width=9, quant=SPEC)


def _expected(op, arrays, params) -> np.ndarray:
    """quant.py's output; a float32 output as the direct kernels compute it from the exact accumulators
    (``float(acc) * m[k] + b[k]`` in float32), so it too is compared bit for bit."""
    if not op.quant.dequantized:
        return reference_output(op, arrays, params)
    acc = op.integer_accumulators(arrays[0], arrays[1], params["x_zero_point"], params["w_zero_point"])
    qp = check_call(op.quant, op.channels, repr(op), arrays, params)
    y = acc.astype(np.float32) * output_multipliers(op.quant, qp, op.channels).reshape(1, -1, 1, 1)
    return y + arrays[2].reshape(1, -1, 1, 1) if op.bias else y


def _check(op, isa, call=None, gemm_rows=None, gemm_cols=None):
    plan = lo.dataflows.winograd(op, gemm_rows=gemm_rows, gemm_cols=gemm_cols)
    kernel = plan.compile(isa)
    arrays, params = call if call is not None else random_call(op, 1)
    result = kernel(*arrays, **params)
    expected = _expected(op, arrays, params)
    assert result.dtype == expected.dtype and result.shape == expected.shape
    assert np.array_equal(result, expected), (isa, np.abs(result.astype(float) - expected).max())
    return kernel


DOT = {"avx512": "vpdpwssd %2, %1, %0", "avx2": "_mm256_madd_epi16", "scalar": "a.lo * b.lo + a.hi * b.hi"}


@pytest.mark.parametrize("isa, output", rotated(ISAS, ("uint8", "int32", "int8", "float32")))
def test_small_layer_bit_exact(isa, output):
    """Odd sizes, asymmetric padding, 17 input and 19 output channels, batch 2, a bias, on each ISA."""
    kernel = _check(SMALL.with_quant(QuantSpec(per_channel=True, output=output)), isa)
    assert kernel.algorithm == "winograd F(2x2,3x3)" == winograd.algorithm_name(2)
    assert DOT[isa] in kernel.source


@st.composite
def blocks(draw, isa):
    """A GEMM register block of ``isa`` (None: the default) that fits its vector registers."""
    if draw(st.booleans()):
        return None, None
    vectors = draw(st.integers(1, 4 if isa == "avx512" else 2))
    rows = draw(st.integers(1, max(1, (INT_ISAS[isa].registers - TEMPORARIES[isa] - vectors) // vectors)))
    return rows, vectors * LANES[isa]


def _random(op, isa, data):
    call = data.draw(integer_calls(op)) if data.draw(st.booleans()) else random_call(op, 2)
    _check(op, isa, call, *data.draw(blocks(isa)))


test_random_quick, test_random = tiers(
    _random, 1, 16, winograd_convs(quant=SPECS), st.sampled_from(ISAS), st.data())


def test_float_output_is_the_direct_kernels():
    """A float32 output is the direct kernel's bit for bit (the same accumulators and epilogue)."""
    op = SMALL.with_quant(QuantSpec(activation="int8", per_channel=False, output="float32"))
    arrays, params = random_call(op, 3)
    direct = lo.Schedule(op).compile(ISAS[0])(*arrays, **params)
    assert np.array_equal(lo.dataflows.winograd(op).compile(ISAS[0])(*arrays, **params), direct)


@pytest.mark.parametrize("isa", quick_first(ISAS))
def test_exact_at_the_channel_limit(isa):
    """The worst case at ``max_channels``: every product -255 * 255, |acc| just below 2^29."""
    spec = QuantSpec(weight="uint8", weight_symmetric=False, per_channel=False, output="int32")
    c = winograd_int8.max_channels(spec)
    op = lo.Conv2d(c, 1, 3, padding=1, bias=False, height=3, width=3, quant=spec)
    arrays = [np.full((1, c, 3, 3), 255, np.uint8), np.zeros((1, c, 3, 3), np.uint8)]
    params = {"x_zero_point": np.uint8(0), "w_zero_point": np.uint8(255)}
    kernel = _check(op, isa, (arrays, params))
    centre = kernel(*arrays, **params)[0, 0, 1, 1]
    assert centre == -9 * c * 255 * 255 and -centre < 2**29 <= 9 * (c + 1) * 255 * 255


@pytest.mark.parametrize("op, m, message", [
    (SMALL, 4, "int8 winograd is F(2x2,3x3) only (m=2), got m=4: F(4x4,3x3)'s filter transform has"),
    (lo.Conv2d(1828, 4, 3, height=4, width=4, quant=SPEC), 2, "up to 1827 input channels, got 1828"),
    (lo.Conv2d(918, 4, 3, height=4, width=4, quant=QuantSpec(weight="uint8", weight_symmetric=False)), 2,
     "asymmetric uint8 weights (|w - zw| <= 255) that holds for every input up to 917 input channels, "
     "got 918"),
    (lo.Conv2d(4, 4, 3, height=4, width=4, quant=QuantSpec(weight="ternary")), 2, "ternary and binary ops"),
    (lo.Conv2d(4, 4, 3, stride=2, quant=SPEC), 2, "stride=1 on both spatial dims, got stride=(2, 2)"),
    (lo.Conv2d(4, 4, 3, groups=2, quant=SPEC), 2, "groups=1, got groups=2"),
    (lo.Matmul(4, 4, 4, quant=SPEC), 2, "2-D convolution"),
])
def test_refused(op, m, message):
    with pytest.raises(winograd.WinogradError, match=re.escape(message)):
        lo.dataflows.winograd(op, m=m)


def test_bad_calls_and_blocks():
    kernel = lo.dataflows.winograd(SMALL).compile(ISAS[-1])
    arrays, params = random_call(SMALL, 1)
    with pytest.raises(ValueError, match="pass y_scale"):
        kernel(*arrays, **{k: v for k, v in params.items() if k != "y_scale"})
    with pytest.raises(TypeError, match="unknown quantization parameter"):
        kernel(*arrays, **params, scale=1.0)
    with pytest.raises(TypeError, match="input dtype int8 does not match"):
        kernel(arrays[0].astype(np.int8), *arrays[1:], **params)
    with pytest.raises(ValueError, match=r"I has shape \(2, 17, 7\)"):
        kernel(arrays[0][..., 0], *arrays[1:], **params)
    with pytest.raises(ValueError, match="kernel takes 3 arrays"):
        kernel(arrays[0], **params)
    with pytest.raises(ValueError, match="one thread"):
        kernel.set_threads(2)
    with pytest.raises(ValueError, match="multiple of the 16 int32 lanes of avx512"):
        lo.dataflows.winograd(SMALL, gemm_cols=24).compile("avx512")
    with pytest.raises(ValueError, match="do not fit the 32 vector registers"):
        lo.dataflows.winograd(SMALL, gemm_rows=8, gemm_cols=64).compile("avx512")
    assert all((r + 1) * v + TEMPORARIES[isa] <= INT_ISAS[isa].registers for isa, (r, v) in BLOCKS.items())


def test_measure_and_tune_see_it():
    timing = lo.measure(lo.dataflows.winograd(SMALL).compile(), repeats=2, budget=0.01)
    assert timing.verified and timing.algorithm == "winograd F(2x2,3x3)" and timing.max_error == 0
    from loopopt.tune.algorithms import alternatives, refusals
    assert refusals(SMALL, ("winograd",), "avx512", 1) == {"winograd": ""}
    assert "tile candidates" in refusals(SMALL, ("winograd",), "amx", 1)["winograd"]
    names = [a.schedule for a in alternatives(SMALL, "winograd", "avx512")]
    assert names == ["winograd F(2x2,3x3)", "winograd F(2x2,3x3), GEMM 7x48",
                     "winograd F(2x2,3x3), GEMM 12x32", "winograd F(2x2,3x3), GEMM 4x64"]
    blocked = winograd.from_name(SMALL, names[1])
    assert (blocked.gemm_rows, blocked.gemm_cols) == (7, 48) and winograd.from_name(SMALL, "x") is None
    for isa in ISAS:              # every block lo.tune tries fits its ISA's registers
        for rows, cols in winograd_int8.tune_blocks(isa):
            winograd_int8.shape_of(SMALL, isa, rows, cols)


@pytest.mark.slow
def test_tune_tries_int8_winograd(tmp_path):
    op = lo.Conv2d(32, 32, 3, padding=1, height=14, width=14, quant=SPEC)
    result = lo.tune(op, trials=4, budget=0.02, progress=False, log=str(tmp_path / "tune.db"),
                     algorithms=("direct", "winograd"))
    assert set(result.by_algorithm()) == {"direct", "winograd"}
    assert "winograd F(2x2,3x3)" in result.table()
