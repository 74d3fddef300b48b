"""Tests of loopopt.quant: calibration, parameter checks and the exact quantized references."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from loopopt.quant import (
    QuantSpec,
    check_quant_params,
    dequantize,
    dequantize_output,
    qconv2d_accumulators,
    qmatmul_accumulators,
    quant_error,
    quantize,
    quantize_linear,
    requant_multiplier,
    requantize_output,
)

FAST = settings(max_examples=40, deadline=None)


# ---------------------------------------------------------------- QuantSpec

def test_spec_properties():
    s = QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="float32")
    assert not s.requantized and s.bias_dtype == np.float32
    r = QuantSpec(activation="int8", per_channel=False, weight_symmetric=False, output="uint8")
    assert r.requantized and r.bias_dtype == np.int32 and r.weight_dtype == np.int8
    raw = QuantSpec(output="int32", weight="uint8")
    assert not raw.requantized and not raw.dequantized and not raw.scaled and raw.bias_dtype == np.int32
    assert raw.parameters == ("x_zero_point", "w_zero_point") and raw.weight_dtype == np.uint8
    assert r.parameters == ("x_scale", "x_zero_point", "w_scale", "w_zero_point", "y_scale", "y_zero_point")
    # int8 weights (the default) are not named in the repr: signatures of earlier specs are kept
    assert repr(s) == ("QuantSpec(activation='uint8', per_channel=True, weight_symmetric=True, "
                       "output='float32')")
    assert repr(raw).endswith("output='int32', weight='uint8')") and eval(repr(raw)) == raw
    with pytest.raises(AttributeError):
        s.output = "int8"  # frozen


@pytest.mark.parametrize("kwargs, match", [
    ({"activation": "int4"}, r"activation='int4'.*allowed: 'uint8', 'int8'"),
    ({"activation": "float32"}, r"activation='float32'.*allowed"),
    ({"output": "int16"}, r"output='int16'.*allowed: 'float32', 'uint8', 'int8', 'int32'"),
    ({"weight": "int4"}, r"weight='int4' is not supported; allowed: 'int8', 'uint8'"),
    ({"per_channel": "yes"}, r"per_channel='yes' must be a bool"),
    ({"weight_symmetric": 1}, r"weight_symmetric=1 must be a bool"),
])
def test_spec_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        QuantSpec(**kwargs)


# ---------------------------------------------------------------- quantize / dequantize

def test_onnx_dynamic_quantize_linear_example():
    # ONNX DynamicQuantizeLinear documentation example
    x = np.array([0, 2, -3, -2.5, 1.34, 0.5], dtype=np.float32)
    q, scale, zp = quantize(x, "uint8")
    assert q.dtype == np.uint8 and q.tolist() == [153, 255, 0, 26, 221, 179]
    assert scale == np.float32(5 / 255) and isinstance(scale, np.float32)
    assert zp == 153 and zp.dtype == np.uint8


def test_onnx_quantize_dequantize_linear_examples():
    # ONNX QuantizeLinear example: half to even (3 / 2 = 1.5 -> 2) and saturation
    q = quantize_linear(np.array([0, 2, 3, 1000, -254, -1000], np.float32), 2.0, np.uint8(128))
    assert q.dtype == np.uint8 and q.tolist() == [128, 129, 130, 255, 1, 0]
    q = quantize_linear(np.array([0, 2, 3, 5, -2, -5, 1000, -1000], np.float32), 2.0, np.int8(-1))
    assert q.dtype == np.int8 and q.tolist() == [-1, 0, 1, 1, -2, -3, 127, -128]
    # ONNX DequantizeLinear example
    y = dequantize(np.array([0, 3, 128, 255], np.uint8), np.float32(2), np.uint8(128))
    assert y.dtype == np.float32 and y.tolist() == [-256, -250, 0, 254]


def test_symmetric_conventions():
    x = np.array([-2.54, 0.0, 1.27, 0.01], np.float32)
    q, scale, zp = quantize(x, "int8")
    assert scale == np.float32(np.float32(2.54) / np.float32(127)) and zp == 0
    assert q.tolist() == [-127, 0, 64, 0]          # 63.5 -> 64 within float32 rounding
    q, scale, zp = quantize(x, "uint8", symmetric=True)
    assert zp == 128 and q.min() == 1
    q, scale, zp = quantize(x, "int8", symmetric=False)
    assert scale == np.float32((1.27 + 2.54) / 255) and zp == np.rint(-128 + 2.54 / scale)


def test_zero_and_constant_arrays():
    for dtype in ("uint8", "int8"):
        q, scale, zp = quantize(np.zeros((3, 4)), dtype)
        assert scale == 1 and np.all(dequantize(q, scale, zp) == 0)
        q, scale, zp = quantize(np.zeros((3, 4)), dtype, axis=1)
        assert np.all(scale == 1) and scale.shape == (4,)
    q, scale, zp = quantize(np.full(5, 3.0), "uint8")   # range [0, 3]: zero included
    assert scale > 0 and zp == 0 and np.all(dequantize(q, scale, zp) == np.float32(3.0))


def test_quantize_bad_input():
    with pytest.raises(ValueError, match="dtype='int16'"):
        quantize(np.ones(3), "int16")
    with pytest.raises(ValueError, match="non-finite"):
        quantize(np.array([1.0, np.nan]), "uint8")
    with pytest.raises(ValueError, match="axis=2"):
        quantize(np.ones((2, 2)), "int8", axis=2)


arrays = st.integers(1, 4).flatmap(lambda nd: st.tuples(
    st.lists(st.integers(1, 5), min_size=nd, max_size=nd), st.integers(0, 2**32 - 1),
    st.floats(1e-3, 1e3), st.floats(-1.0, 1.0)))


@FAST
@given(arrays, st.sampled_from(["uint8", "int8"]), st.sampled_from([None, True, False]),
       st.booleans())
def test_roundtrip_error_at_most_half_scale(params, dtype, symmetric, per_channel):
    shape, seed, magnitude, offset = params
    x = np.random.default_rng(seed).standard_normal(shape) + offset
    x = (x * magnitude).astype(np.float32)
    axis = len(shape) - 1 if per_channel else None
    q, scale, zp = quantize(x, dtype, axis=axis, symmetric=symmetric)
    assert q.dtype == np.dtype(dtype) and q.shape == x.shape
    if per_channel:
        assert scale.shape == zp.shape == (shape[-1],) and scale.dtype == np.float32
        assert zp.dtype == np.dtype(dtype)
    else:
        assert isinstance(scale, np.float32) and np.ndim(zp) == 0 and zp.dtype == np.dtype(dtype)
    assert np.all(scale > 0)
    if symmetric or (symmetric is None and dtype == "int8"):
        assert np.all(zp == (0 if dtype == "int8" else 128))
    y = dequantize(q, scale, zp, axis=axis)
    assert y.dtype == np.float32
    assert np.all(np.abs(y - x) <= scale * np.float32(0.5 + 1e-4))
    # zero is exactly representable
    assert np.all(dequantize(zp, scale, zp, axis=0 if per_channel else None) == 0)


def test_per_channel_axis_shapes():
    w = np.random.default_rng(0).standard_normal((6, 3, 2, 2)).astype(np.float32)
    w[2] *= 100
    q, s, z = quantize(w, "int8", axis=0)
    assert s.shape == z.shape == (6,) and s[2] > 10 * s[0]
    _, s1, _ = quantize(w, "int8", axis=-3)
    assert np.array_equal(s1, quantize(w, "int8", axis=1)[1])
    qt, st_, zt = quantize(w, "int8")
    assert np.ndim(st_) == 0
    # per-channel is at least as accurate as per-tensor on every channel
    err_c = np.abs(dequantize(q, s, z, axis=0) - w).reshape(6, -1).max(1)
    err_t = np.abs(dequantize(qt, st_, zt) - w).reshape(6, -1).max(1)
    assert np.all(err_c <= err_t + 1e-6)


# ---------------------------------------------------------------- check_quant_params

U8F = QuantSpec("uint8", per_channel=True, weight_symmetric=True, output="float32")
I8Q = QuantSpec("int8", per_channel=False, weight_symmetric=False, output="uint8")
U8W = QuantSpec("int8", per_channel=True, weight_symmetric=True, output="int8", weight="uint8")
RAW = QuantSpec("int8", per_channel=True, weight_symmetric=False, output="int32", weight="uint8")


def test_check_params_normalizes():
    p = check_quant_params(U8F, 3, 0.5, np.uint8(7), np.array([1, 2, 3], np.float64),
                           np.zeros(3, np.int8), bias=[0.5, 1.0, 2.0])
    assert p.x_scale == np.float32(0.5) and p.x_zero_point == 7
    assert p.w_scale.dtype == np.float32 and p.w_scale.tolist() == [1, 2, 3]
    assert p.w_zero_point.dtype == np.int32 and p.w_zero_point.shape == (3,)
    assert p.y_scale is None and p.bias.dtype == np.float32
    p = check_quant_params(I8Q, 4, 0.1, 0, 0.2, np.int8(-3), 0.05, 128,
                           xq=np.zeros(2, np.int8), wq=np.zeros(2, np.int8),
                           bias=np.arange(4))
    assert p.w_scale.shape == (4,) and p.w_zero_point.tolist() == [-3] * 4
    assert p.y_scale == np.float32(0.05) and p.y_zero_point == 128 and p.bias.dtype == np.int32
    p = check_quant_params(RAW, 2, None, np.int8(-100), None, np.array([255, 0], np.uint8),
                           xq=np.zeros(2, np.int8), wq=np.zeros(2, np.uint8), bias=np.array([1, -2]))
    assert p.x_scale is None and p.w_scale is None and p.y_scale is None
    assert p.x_zero_point == -100 and p.w_zero_point.tolist() == [255, 0] and p.bias.tolist() == [1, -2]


@pytest.mark.parametrize("spec, args, kw, exc, match", [
    (U8F, (3, 0.0, 0, [1, 1, 1], [0, 0, 0]), {}, ValueError,
     r"x_scale=0\.0 is invalid: scales must be finite and > 0"),
    (U8F, (3, -1.0, 0, [1, 1, 1], [0, 0, 0]), {}, ValueError, r"x_scale=-1\.0 is invalid"),
    (U8F, (3, np.inf, 0, [1, 1, 1], [0, 0, 0]), {}, ValueError, r"x_scale=inf is invalid"),
    (U8F, (3, 1.0, 0, [1, np.nan, 1], [0, 0, 0]), {}, ValueError, r"w_scale=nan is invalid"),
    (U8F, (3, 1e-50, 0, [1, 1, 1], [0, 0, 0]), {}, ValueError, r"x_scale=.*float32"),
    (U8F, (3, 1.0, 256, [1, 1, 1], [0, 0, 0]), {}, ValueError,
     r"x_zero_point=256 is out of range for uint8 \(allowed 0\.\.255\)"),
    (U8F, (3, 1.0, -1, [1, 1, 1], [0, 0, 0]), {}, ValueError, r"x_zero_point=-1 is out of range"),
    (I8Q, (3, 1.0, -129, 1.0, 0, 1.0, 0), {}, ValueError,
     r"x_zero_point=-129 is out of range for int8 \(allowed -128\.\.127\)"),
    (U8F, (3, 1.0, 0, [1, 1], [0, 0]), {}, ValueError, r"w_scale has shape \(2,\).*shape \(3,\)"),
    (U8F, (3, 1.0, 0, [1, 1, 1], [0, 0]), {}, ValueError, r"w_zero_point has shape \(2,\)"),
    (I8Q, (3, 1.0, 0, [1, 1, 1], 0, 1.0, 0), {}, ValueError, r"w_scale has shape \(3,\).*scalar"),
    (U8F, (3, 1.0, 0, [1, 1, 1], [0, 2, 0]), {}, ValueError,
     r"w_zero_point=2 must be 0: QuantSpec\(weight='int8', weight_symmetric=True\)"),
    (U8W, (3, 1.0, 0, [1, 1, 1], [128, 0, 128], 1.0, 0), {}, ValueError,
     r"w_zero_point=0 must be 128: QuantSpec\(weight='uint8', weight_symmetric=True\)"),
    (U8W, (3, 1.0, 0, [1, 1, 1], [128, 256, 128], 1.0, 0), {}, ValueError,
     r"w_zero_point=256 is out of range for uint8 \(allowed 0\.\.255\)"),
    (U8F, (3, 1.0, np.int8(5), [1, 1, 1], [0, 0, 0]), {}, TypeError,
     r"x_zero_point has dtype int8 but applies to uint8 values: pass it as uint8"),
    (U8W, (3, 1.0, 0, [1, 1, 1], np.full(3, -128, np.int8), 1.0, 0), {}, TypeError,
     r"w_zero_point has dtype int8 but applies to uint8 values"),
    (U8W, (3, 1.0, 0, [1, 1, 1], [128] * 3, 1.0, 0), {"wq": np.zeros(2, np.int8)}, TypeError,
     r"weight dtype int8 does not match QuantSpec\(weight='uint8'\): expected uint8"),
    (RAW, (3, None, 0, None, [0, 1, 2, 3]), {}, ValueError,
     r"w_zero_point has shape \(4,\); a per-channel parameter must have shape \(3,\)"),
    (RAW, (3, 1.0, 0, None, [0, 1, 2]), {}, ValueError,
     r"output='int32' is the raw int32 accumulators \(no scales\): x_scale=1\.0 must not be given"),
    (RAW, (3, None, 0, None, None), {}, ValueError,
     r"w_zero_point is required \(a call takes x_zero_point, w_zero_point\)"),
    (RAW, (3, None, 0, None, [0, 1, 2]), {"bias": np.zeros(3, np.float32)}, TypeError,
     r"bias dtype float32 does not match output='int32'"),
    (I8Q, (3, 1.0, 0, 1.0, 128, 1.0, 0), {}, ValueError,
     r"w_zero_point=128 is out of range for int8"),
    (I8Q, (3, 1.0, 0, 1.0, 0), {}, ValueError, r"y_scale and y_zero_point are required"),
    (I8Q, (3, 1.0, 0, 1.0, 0, 1.0), {}, ValueError, r"is requantized: y_zero_point is required"),
    (I8Q, (3, 1.0, 0, 1.0, 0, 0.0, 0), {}, ValueError, r"y_scale=.*0\.0"),
    (I8Q, (3, 1.0, 0, 1.0, 0, 1.0, 256), {}, ValueError, r"y_zero_point=256 .* uint8"),
    (U8F, (3, 1.0, 0, [1, 1, 1], [0, 0, 0], 1.0, 0), {}, ValueError,
     r"output='float32' is dequantized: y_scale=1\.0"),
    (U8F, (3, 1.0, 0, [1, 1, 1], [0, 0, 0]), {"xq": np.zeros(2, np.int8)}, TypeError,
     r"input dtype int8 .* expected uint8"),
    (I8Q, (3, 1.0, 0, 1.0, 0, 1.0, 0), {"xq": np.zeros(2, np.uint8)}, TypeError,
     r"input dtype uint8 .* expected int8"),
    (U8F, (3, 1.0, 0, [1, 1, 1], [0, 0, 0]), {"wq": np.zeros(2, np.uint8)}, TypeError,
     r"weight dtype uint8 .* int8"),
    (U8F, (3, 1.0, 0, [1, 1, 1], [0, 0, 0]), {"wq": np.zeros(2, np.float32)}, TypeError,
     r"weight dtype float32"),
    (U8F, (3, 1.0, 0.5, [1, 1, 1], [0, 0, 0]), {}, TypeError, r"x_zero_point must be an integer"),
    (U8F, (3, 1.0, 0, [1, 1, 1], [0, 0, 0]), {"bias": np.zeros(3, np.int32)}, TypeError,
     r"bias dtype int32 does not match output='float32'"),
    (I8Q, (3, 1.0, 0, 1.0, 0, 1.0, 0), {"bias": np.zeros(3, np.float32)}, TypeError,
     r"bias dtype float32 .* int32 bias"),
    (I8Q, (3, 1.0, 0, 1.0, 0, 1.0, 0), {"bias": np.zeros(2, np.int32)}, ValueError,
     r"bias has shape \(2,\); expected \(3,\)"),
    (I8Q, (3, 1.0, 0, 1.0, 0, 1.0, 0), {"bias": np.array([0, 0, 2**31])}, ValueError,
     r"do not fit int32"),
])
def test_check_params_errors(spec, args, kw, exc, match):
    with pytest.raises(exc, match=match):
        check_quant_params(spec, *args, **kw)


# ---------------------------------------------------------------- exact accumulators

def brute_conv(x, w, zx, zw, stride, padding, dilation, groups):
    n, _, h, wd = x.shape
    k, cg, kh, kw = w.shape
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    kg = k // groups
    out = np.zeros((n, k, oh, ow), dtype=np.int64)
    for b in range(n):
        for o in range(k):
            g = o // kg
            for i in range(oh):
                for j in range(ow):
                    total = 0
                    for ci in range(cg):
                        for r in range(kh):
                            for s in range(kw):
                                y = i * stride[0] - padding[0] + r * dilation[0]
                                xx = j * stride[1] - padding[1] + s * dilation[1]
                                if 0 <= y < h and 0 <= xx < wd:
                                    total += ((int(x[b, g * cg + ci, y, xx]) - zx)
                                              * (int(w[o, ci, r, s]) - int(zw[o])))
                    out[b, o, i, j] = total
    return out


conv_cases = st.fixed_dictionaries({
    "n": st.integers(1, 2), "groups": st.integers(1, 3), "cg": st.integers(1, 3),
    "kg": st.integers(1, 2), "h": st.integers(1, 6), "w": st.integers(1, 6),
    "kh": st.integers(1, 3), "kw": st.integers(1, 3),
    "stride": st.tuples(st.integers(1, 2), st.integers(1, 2)),
    "padding": st.tuples(st.integers(0, 2), st.integers(0, 2)),
    "dilation": st.tuples(st.integers(1, 2), st.integers(1, 2)),
    "act": st.sampled_from(["uint8", "int8"]), "wdt": st.sampled_from(["int8", "uint8"]),
    "per_channel": st.booleans(),
    "sym": st.booleans(), "seed": st.integers(0, 2**32 - 1)})


@FAST
@given(conv_cases)
def test_qconv2d_accumulators_match_brute_force(c):
    h_eff = c["h"] + 2 * c["padding"][0] - c["dilation"][0] * (c["kh"] - 1)
    w_eff = c["w"] + 2 * c["padding"][1] - c["dilation"][1] * (c["kw"] - 1)
    assume(h_eff >= 1 and w_eff >= 1)
    rng = np.random.default_rng(c["seed"])
    k, cin = c["kg"] * c["groups"], c["cg"] * c["groups"]
    info, winfo = np.iinfo(c["act"]), np.iinfo(c["wdt"])
    x = rng.integers(info.min, info.max + 1, (c["n"], cin, c["h"], c["w"])).astype(c["act"])
    w = rng.integers(winfo.min, winfo.max + 1, (k, c["cg"], c["kh"], c["kw"])).astype(c["wdt"])
    zx = int(rng.integers(info.min, info.max + 1))
    zw = (np.zeros(k, c["wdt"]) if c["sym"] else rng.integers(winfo.min, winfo.max + 1, k).astype(c["wdt"]))
    if not c["per_channel"]:
        zw = zw[:1]
    zw_arg = zw if c["per_channel"] else zw[0]
    acc = qconv2d_accumulators(x, w, zx, zw_arg, c["stride"], c["padding"], c["dilation"],
                               c["groups"])
    expect = brute_conv(x, w, zx, np.broadcast_to(zw, (k,)), c["stride"], c["padding"],
                        c["dilation"], c["groups"])
    assert acc.dtype == np.int32
    assert np.array_equal(acc, expect)


def test_qconv2d_accumulators_int_args_and_padding_is_zero_point():
    x = np.full((1, 1, 2, 2), 9, np.uint8)           # x == zx everywhere: every term is 0
    w = np.full((2, 1, 3, 3), 5, np.int8)
    acc = qconv2d_accumulators(x, w, 9, np.array([1, -2], np.int8), stride=1, padding=1)
    assert acc.shape == (1, 2, 2, 2) and not acc.any()
    x = np.array([[[[1, 2], [3, 4]]]], np.uint8)       # hand-computed 1x1 conv
    w = np.array([[[[3]]]], np.int8)
    acc = qconv2d_accumulators(x, w, 1, np.int8(1))
    assert acc[0, 0].tolist() == [[0, 2], [4, 6]]


@FAST
@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 6), st.sampled_from(["uint8", "int8"]),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_qmatmul_accumulators_match_brute_force(m, n, kk, act, per_col, seed):
    rng = np.random.default_rng(seed)
    info = np.iinfo(act)
    a = rng.integers(info.min, info.max + 1, (m, kk)).astype(act)
    b = rng.integers(-128, 128, (kk, n)).astype(np.int8)
    za = int(rng.integers(info.min, info.max + 1))
    zb = rng.integers(-128, 128, n if per_col else 1).astype(np.int8)
    acc = qmatmul_accumulators(a, b, za, zb if per_col else zb[0])
    zbf = np.broadcast_to(zb, (n,))
    for i in range(m):
        for j in range(n):
            assert acc[i, j] == sum((int(a[i, t]) - za) * (int(b[t, j]) - int(zbf[j]))
                                    for t in range(kk))
    assert acc.dtype == np.int32


def test_accumulator_overflow_is_reported():
    a = np.full((1, 40000), 255, np.uint8)
    b = np.full((40000, 1), -128, np.int8)
    with pytest.raises(OverflowError, match="does not fit int32"):
        qmatmul_accumulators(a, b, 0, 127)


# ---------------------------------------------------------------- outputs

def scalar_requantize(acc, bias, sx, sw, sy, zy, lo, hi):
    m = np.float32(float(np.float32(sx)) * float(np.float32(sw)) / float(np.float32(sy)))
    p = np.float32(np.float32(int(acc) + int(bias)) * m)
    return min(max(round(float(p)) + zy, lo), hi)   # Python round(): half to even


def test_requantize_ties_hand_values():
    acc = np.array([[1, 3, 5, -1, -3, 7, 1000, -1000]], np.int32)
    # m = 0.5 * 1 / 1 = 0.5 exactly: products are exact .5 ties
    out = requantize_output(acc, 0.5, np.float32(1.0), 1.0, 10, "uint8", axis=0)
    assert out.dtype == np.uint8
    assert out.tolist() == [[10, 12, 12, 10, 8, 14, 255, 0]]
    out = requantize_output(acc, 0.5, 1.0, 1.0, -3, "int8", bias_i32=[2], axis=0)
    # (acc + 2) / 2 = 1.5, 2.5, 3.5, 0.5, -0.5, 4.5 -> 2, 2, 4, 0, -0, 4; then - 3
    assert out.tolist() == [[-1, -1, 1, -3, -3, 1, 127, -128]]


@FAST
@given(st.integers(0, 2**32 - 1), st.sampled_from(["uint8", "int8"]), st.booleans())
def test_requantize_matches_scalar_loop(seed, out_dtype, with_bias):
    rng = np.random.default_rng(seed)
    k = 4
    acc = rng.integers(-2**20, 2**20, (2, k, 3)).astype(np.int32)
    acc[0, :, 0] = [0, 1, -1, 2**20]
    sx = np.float32(rng.uniform(1e-3, 1))
    sw = rng.uniform(1e-3, 1, k).astype(np.float32)
    sy = np.float32(rng.uniform(0.5, 50))
    lo, hi = np.iinfo(out_dtype).min, np.iinfo(out_dtype).max
    zy = int(rng.integers(lo, hi + 1))
    bias = rng.integers(-1000, 1000, k).astype(np.int32) if with_bias else None
    out = requantize_output(acc, sx, sw, sy, zy, out_dtype, bias_i32=bias, axis=1)
    assert out.dtype == np.dtype(out_dtype)
    for idx in np.ndindex(acc.shape):
        b = 0 if bias is None else bias[idx[1]]
        assert out[idx] == scalar_requantize(acc[idx], b, sx, sw[idx[1]], sy, zy, lo, hi)
    m = requant_multiplier(sx, sw, sy)
    assert m.dtype == np.float32 and m.shape == (k,)


def test_requantize_last_axis_and_errors():
    acc = np.array([[4, 4], [8, 8]], np.int32)
    out = requantize_output(acc, 1.0, np.array([0.5, 1.0], np.float32), 1.0, 0, "int8", axis=-1)
    assert out.tolist() == [[2, 4], [4, 8]]
    with pytest.raises(TypeError, match="int32"):
        requantize_output(acc.astype(np.int64), 1.0, 1.0, 1.0, 0, "int8")
    with pytest.raises(OverflowError, match="accumulator \\+ bias"):
        requantize_output(np.array([2**31 - 1], np.int32), 1.0, 1.0, 1.0, 0, "int8",
                          bias_i32=[1], axis=0)
    with pytest.raises(ValueError, match="multiplier"):
        requant_multiplier(1e-30, 1e-30, 1.0)


def test_requantize_follows_float32_multiplier():
    # m is rounded to float32 before the product: 0.1*0.1/0.01 != 1 in float32 arithmetic
    m = requant_multiplier(0.1, 0.1, 0.01)[0]
    expect = np.float32(np.float64(np.float32(0.1)) ** 2 / np.float64(np.float32(0.01)))
    assert m == expect
    acc = np.array([2**24 + 1, 12345677], np.int32)       # int32 -> float32 rounds
    out = requantize_output(acc[None], 1.0, 1.0, 2.0**20, 0, "int8", axis=0)
    assert out.tolist() == [[16, 12]]


def test_dequantize_output():
    acc = np.arange(2 * 3 * 2 * 2, dtype=np.int32).reshape(2, 3, 2, 2) - 10
    sw = np.array([0.5, 0.25, 2.0], np.float32)
    bias = np.array([1.0, -1.0, 0.5], np.float32)
    y = dequantize_output(acc, np.float32(0.1), sw, bias, axis=1)
    expect = acc * 0.1 * sw[None, :, None, None].astype(np.float64) + bias[None, :, None, None]
    assert y.dtype == np.float32 and np.allclose(y, expect, rtol=1e-6)
    ym = dequantize_output(acc.reshape(8, 3), 0.1, sw, axis=-1)
    assert np.allclose(ym, acc.reshape(8, 3) * 0.1 * sw, rtol=1e-6)


def test_quantized_conv_end_to_end_accuracy():
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (1, 8, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 8, 3, 3)).astype(np.float32)
    from loopopt.reference import conv_reference
    ref = conv_reference(x, w, padding=(1, 1)).astype(np.float32)
    xq, sx, zx = quantize(x, "uint8")
    wq, sw, zw = quantize(w, "int8", axis=0)
    acc = qconv2d_accumulators(xq, wq, zx, zw, padding=1)
    y = dequantize_output(acc, sx, sw, axis=1)
    err = quant_error(ref, y)
    assert err["sqnr_db"] > 30 and err["rel_l2"] < 0.03
    ys, zy = np.float32(np.abs(ref).max() / 127), 0
    yq = requantize_output(acc, sx, sw, ys, zy, "int8")
    assert quant_error(ref, dequantize(yq, ys, zy))["sqnr_db"] > 25


def test_quant_error():
    e = quant_error(np.array([3.0, 4.0]), np.array([3.0, 4.0]))
    assert e == {"max_abs": 0.0, "rel_l2": 0.0, "sqnr_db": math.inf}
    e = quant_error(np.array([3.0, 4.0]), np.array([3.0, 4.5]))
    assert e["max_abs"] == 0.5 and e["rel_l2"] == pytest.approx(0.1)
    assert e["sqnr_db"] == pytest.approx(20.0)
    with pytest.raises(ValueError, match="shapes differ"):
        quant_error(np.zeros(2), np.zeros(3))
