"""Tap dots (codegen/taps.py): vpdpbusd over 4 filter taps per lane, lanes along the output positions.

Every kernel is checked against quant.py's exact integer reference (raw products exactly where the
kernel keeps an int32 workspace, requantized and int32 outputs bit for bit) over depthwise and
stem-like convs with tails, stride, dilation, per-side padding, groups and batch, on every integer
ISA here plus scalar; where the window fits the instructions, the SIMD kernels must run the tap dot.
"""
import pytest
from helpers import (
    INT_ISAS,
    SPECS,
    check_quantized,
    generates,
    integer_calls,
    rotated,
    tap_convs,
    tap_schedule,
    tiers,
)
from helpers import SIMD_INT_ISAS as SIMD_ISAS
from hypothesis import assume
from hypothesis import strategies as st

import loopopt as lo
from loopopt.codegen import generate, quantized, taps
from loopopt.codegen.taps import fits
from loopopt.schedule import block_limit
from loopopt.targets.x86 import isa as x86_isa
from loopopt.targets.x86.isa import INT_ISAS as INT_TABLES
from loopopt.targets.x86.isa import ISAS
from loopopt.targets.x86.space import candidates


def exact_tap_dot(isa, data):
    """A random tap dot schedule of a random conv agrees with the reference; it runs the tap dot on a
    SIMD ISA wherever the window fits (else the bytes are widened, also exactly)."""
    op = data.draw(tap_convs())
    s = tap_schedule(op, data.draw(st.integers(1, 40)), data.draw(st.integers(1, 3)),
                     data.draw(st.sampled_from(["c", "kh"])), data.draw(st.booleans()))
    if data.draw(st.booleans()):
        s = s.compensation("kernel")
    used = isa != "scalar" and fits(op.windows[-1])
    # without a tap dot a register block may refuse a weight broadcast that a padding guard protects
    assume(used or generates(s, isa))
    kernel = check_quantized(s, isa, call=data.draw(st.none() | integer_calls(op)))
    assert (kernel.plan.tap_dot is not None) == used, (s, isa)


test_exact_tap_dot_quick, test_exact_tap_dot = tiers(
    exact_tap_dot, 1, 9, isas=INT_ISAS, data=st.data())


ZIPS = {"avx512": "_mm512_permutex2var_epi32", "avx2": "_mm256_unpacklo_epi32"}   # the zip_low entry's mark


def exact_phase_groups(isa, data):
    """Depthwise convs with strides 1 to 3 and wide rows (several phase groups and a partial one): a
    tap dot schedule agrees with the reference, and runs in phase groups (``taps.phases``) exactly where
    the stride divides 4, the taps are contiguous and a block has a group's vectors (the last partial)."""
    groups, stride = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3))
    kh, kw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 6))
    dilation = data.draw(st.sampled_from([1, 1, 2]))
    padding = tuple((data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))) for _ in range(2))
    width = data.draw(st.integers(max(1, dilation * (kw - 1) + 1 - sum(padding[1])), 150))
    rows, outputs = data.draw(st.integers(1, 2)), groups * data.draw(st.integers(1, 2))   # stride along h
    op = lo.Conv2d(groups, outputs, (kh, kw), stride=(rows, stride), padding=padding, dilation=(1, dilation),
                   groups=groups, batch=data.draw(st.integers(1, 2)),
                   height=data.draw(st.integers(max(1, kh - sum(padding[0])), 4)), width=width,
                   bias=data.draw(st.booleans()), quant=data.draw(SPECS))
    pixels = data.draw(st.integers(1, min(80, block_limit(lo.Schedule(op).loop("ow").extent))))
    s = tap_schedule(op, pixels, data.draw(st.integers(1, 2)), unroll=data.draw(st.booleans()))
    kernel = check_quantized(s, isa, call=data.draw(st.none() | integer_calls(op)))
    if isa == "scalar":
        return
    assert fits(op.windows[-1]) and kernel.plan.tap_dot is not None
    count = taps.phases(kernel.plan.tap_dot, INT_TABLES[isa])
    assert count == (4 // stride if stride in taps.PHASED_STRIDES and dilation == 1 else 1)
    grouped = count > 1 and s.loop("ow_i").extent > (count - 1) * ISAS[isa].lanes   # the last one partial
    assert (ZIPS[isa] in kernel.source) == grouped, (s, isa)


test_exact_phase_groups_quick, test_exact_phase_groups = tiers(
    exact_phase_groups, 1, 8, isas=INT_ISAS, data=st.data())


@pytest.mark.parametrize("isa", INT_ISAS)
def test_output_reading_only_padding(isa):
    """Width 2, dilation 3, padding 1: the one output column's two taps both read padding, so the
    nest's guards exclude every iteration; the weights' broadcast still needs no per-lane guard
    (found by hypothesis: register_block refused it)."""
    op = lo.Conv2d(1, 1, (1, 2), padding=(0, 1), dilation=(1, 3), width=2, height=1,
                   quant=lo.QuantSpec("uint8", True, False, "float32"))
    kernel = check_quantized(tap_schedule(op, 2, 2), isa)
    assert (kernel.plan.tap_dot is not None) == (isa != "scalar")


LAYERS = {   # the shapes of the layers the tap dot is for, shrunk (rows) to keep the checks fast
    "depthwise s1": dict(in_channels=5, out_channels=5, kernel_size=3, padding=1, groups=5, height=4,
                         width=56),
    "depthwise s2": dict(in_channels=3, out_channels=3, kernel_size=3, stride=2, padding=1, groups=3,
                         height=5, width=113, batch=2),
    "stem": dict(in_channels=3, out_channels=9, kernel_size=7, stride=2, padding=3, height=9, width=60),
}


@pytest.mark.parametrize("conv, isa", rotated(LAYERS, SIMD_ISAS))
@pytest.mark.slow
def test_layer_shapes(conv, isa):
    """56 columns per block: 3 whole vectors and a partial one on AVX-512, 7 on AVX2."""
    op = lo.Conv2d(**conv, quant=lo.QuantSpec("uint8", True, True, "uint8"))
    assert check_quantized(tap_schedule(op, 56, 2), isa).plan.tap_dot is not None


@pytest.mark.parametrize("change, why", [
    (lambda s: s.layout("I", "NHWC"), "the activations' columns are not innermost"),
    (lambda s: s.layout("W", "OIHW"), "the weights of the missing 4th tap are not zero-padded"),
])
def test_no_tap_dot(change, why):
    op = lo.Conv2d(4, 4, 3, padding=1, groups=4, height=5, width=20, quant=lo.QuantSpec())
    s = change(tap_schedule(op, 16, 1))
    assert generate(s, ISAS["avx512"]).plan.tap_dot is None, why


def test_no_tap_dot_where_the_window_does_not_fit():
    """Stride 5 puts a lane's groups past the 16 bytes of its 128-bit lane: the bytes are widened."""
    op = lo.Conv2d(2, 2, 3, stride=5, groups=2, height=11, width=40, quant=lo.QuantSpec())
    assert not fits(op.windows[-1])
    assert generate(tap_schedule(op, 16, 1), ISAS["avx512"]).plan.tap_dot is None


@pytest.mark.parametrize("layer", ["mobilenetv1.block3.depthwise", "mobilenetv2.block2.depthwise",
                                   "resnet50.conv1"])
def test_tune_has_tap_dot_candidates(layer):
    """``lo.tune`` searches tap dots for the int8 depthwise layers and the stem, and they generate them."""
    op = lo.get_layer(layer, quant=lo.QuantSpec())
    taps = [c for c in candidates(op, "avx512") if getattr(c.knobs, "weights", None) == "taps"]
    assert taps
    assert generate(taps[-1].schedule, ISAS["avx512"]).plan.tap_dot is not None


@pytest.mark.parametrize("conv", ["depthwise s2", "stem"])
def test_spread_without_vbmi(conv, monkeypatch):
    """On a CPU without AVX512-VBMI the same C spreads a window by a dword permute and a byte shuffle
    (``lo_tap_spread``'s other branch), also exactly; on this CPU it is built without the VBMI flag."""
    if "avx512" not in SIMD_ISAS:
        pytest.skip("no AVX-512 VNNI here")
    monkeypatch.setattr(x86_isa, "VBMI_FLAGS", {})
    assert x86_isa.byte_permute_flags("avx512") == ()
    op = lo.Conv2d(**LAYERS[conv], quant=lo.QuantSpec("int8", True, True, "int8"))
    assert check_quantized(tap_schedule(op, 40, 2), "avx512").plan.tap_dot is not None


def test_padding_filled_with_the_zero_point():
    """With symmetric weights a tap dot fills its window's padding bytes with the activations' zero
    point, so the compensation does not vary along the lanes (one class along the window); asymmetric
    weights keep the valid-tap sums (padding bytes 0, the compensation per position)."""
    def plan(symmetric):
        op = lo.Conv2d(4, 4, 3, padding=1, groups=4, height=5, width=20,
                       quant=lo.QuantSpec("uint8", True, symmetric, "uint8"))
        return op, generate(tap_schedule(op, 16, 1), ISAS["avx512"]).plan
    op, filled = plan(True)
    assert filled.tap_fill and quantized.class_borders(op, filled).shape == (3, 1)
    assert quantized.compensation_entries(op, filled) == 4 * 3
    op, kept = plan(False)
    assert not kept.tap_fill and quantized.compensation_entries(op, kept) == 4 * 3 * 20
