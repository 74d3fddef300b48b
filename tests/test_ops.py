"""Ops as polyhedral objects: domain, accesses, dependences, FLOPs, validation."""
import itertools

import islpy as isl
import numpy as np
import pytest

import loopopt as lo
from loopopt.layout import Layout


def brute_force_macs(op: lo.Conv2d) -> int:
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = op.kernel_size, op.stride, op.padding, op.dilation
    count = 0
    for oh, ow, r, s in itertools.product(range(op.out_height), range(op.out_width), range(kh), range(kw)):
        ih, iw = oh * sh - ph + r * dh, ow * sw - pw + s * dw
        count += 0 <= ih < op.height and 0 <= iw < op.width
    return count * op.batch * op.out_channels * op.in_channels // op.groups


@pytest.mark.parametrize("kwargs", [
    dict(in_channels=3, out_channels=4, kernel_size=3, padding=1, height=5, width=6),
    dict(in_channels=4, out_channels=6, kernel_size=(3, 2), stride=(2, 3), padding=(2, 1), dilation=(2, 1),
         groups=2, batch=2, height=9, width=8),
])
def test_domain_excludes_padding_taps(kwargs):
    op = lo.Conv2d(**kwargs)
    assert op.macs == brute_force_macs(op)
    assert op.flops == 2 * op.macs


def test_output_size_follows_pytorch():
    op = lo.Conv2d(3, 8, 7, stride=2, padding=3, height=224, width=224)
    assert (op.out_height, op.out_width) == (112, 112)


def test_access_maps_and_dependences():
    op = lo.Conv2d(4, 4, 3, groups=2, height=5, width=5)
    assert "I[" in str(op.access_maps["I"]) and "floor" not in str(op.access_maps["W"])
    flow = op.dependences["flow"]
    assert not flow.is_empty()
    # each dependence stays on one output element
    out = op.access_maps["O"]
    pairs = flow.apply_domain(out).apply_range(out)
    assert pairs.is_subset(isl.Map.identity(pairs.get_space()))
    mm = lo.Matmul(3, 4, 5)
    assert str(mm.dependences["flow"]).count("k' = 1 + k") == 1
    assert mm.macs == 60


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(in_channels=0, out_channels=4, kernel_size=3), ValueError,
     "in_channels must be a positive integer, got 0"),
    (dict(in_channels=6, out_channels=4, kernel_size=3, groups=4), ValueError,
     "in_channels=6 is not divisible by groups=4"),
    (dict(in_channels=4, out_channels=4, kernel_size=9, height=5, width=5), ValueError,
     "larger than the padded input"),
    (dict(in_channels=4, out_channels=4, kernel_size=3, stride=0), ValueError, "stride must be >= 1"),
    (dict(in_channels=4, out_channels=4, kernel_size=3, padding=-1), ValueError, "padding must be >= 0"),
    (dict(in_channels=4, out_channels=4, kernel_size=(1, 2, 3)), TypeError,
     "kernel_size must be an int or a pair"),
    (dict(in_channels=4, out_channels=4, kernel_size=3, dtype="float64"), ValueError,
     "dtype 'float64' is not supported"),
    (dict(in_channels=4, out_channels=4, kernel_size=3, bias=1), TypeError, "bias must be True or False"),
])
def test_bad_shapes(kwargs, error, message):
    with pytest.raises(error, match=message):
        lo.Conv2d(**kwargs)


def test_bad_matmul():
    with pytest.raises(ValueError, match="k must be a positive integer, got -2"):
        lo.Matmul(2, 3, -2)


@pytest.mark.parametrize("tag, letters, shape", [
    ("NHWC", "NCHW", (2, 5, 3, 4)), ("NCHW16c", "NCHW", (2, 5, 3, 4)), ("CHWN", "NCHW", (2, 5, 3, 4)),
    ("OIHW4i4o", "OIHW", (6, 3, 2, 2)), ("HWIO", "OIHW", (6, 3, 2, 2)), ("KM", "MK", (3, 7)),
])
def test_layout_round_trip_and_offsets(tag, letters, shape):
    layout = Layout.parse(tag, letters)
    array = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    stored = layout.to_storage(array)
    assert np.array_equal(layout.from_storage(stored, shape), array)
    from loopopt.expr import Const
    for index in itertools.islice(itertools.product(*map(range, shape)), 0, None, 7):
        offset = layout.offset(tuple(Const(i) for i in index), shape).evaluate({})
        assert stored.reshape(-1)[offset] == array[index]


# --- N-d convolutions and padding ------------------------------------------------------------------

def brute_force_conv(x, w, stride, pads, dilation, groups):
    """Independent oracle: every output element summed tap by tap in Python."""
    n, sizes, (k, cg), taps = x.shape[0], x.shape[2:], w.shape[:2], w.shape[2:]
    outs = [(size + lo + hi - d * (t - 1) - 1) // s + 1
            for size, (lo, hi), t, s, d in zip(sizes, pads, taps, stride, dilation)]
    out = np.zeros((n, k, *outs))
    for b, kk, *o in itertools.product(range(n), range(k), *map(range, outs)):
        for cc, *t in itertools.product(range(cg), *map(range, taps)):
            pos = [oo * s - lo + tt * d for oo, s, (lo, _), tt, d in zip(o, stride, pads, t, dilation)]
            if all(0 <= p < size for p, size in zip(pos, sizes)):
                out[(b, kk, *o)] += x[(b, kk // (k // groups) * cg + cc, *pos)] * w[(kk, cc, *t)]
    return out


@pytest.mark.parametrize("op", [
    lo.Conv1d(4, 6, 3, stride=2, padding=((2, 0),), dilation=2, groups=2, batch=2, length=9),
    lo.Conv1d(3, 2, 4, padding="same", length=7),
    lo.Conv2d(2, 3, (2, 3), stride=(2, 1), padding=((0, 1), (2, 1)), height=5, width=4),
    lo.Conv3d(2, 2, (2, 1, 3), padding=((1, 0), 0, (0, 2)), dilation=(1, 1, 2), depth=3, height=2, width=5),
], ids=repr)
def test_nd_reference_and_domain_match_brute_force(op):
    x, w = (op.random_inputs()[t] for t in "IW")
    expected = brute_force_conv(x.astype(np.float64), w.astype(np.float64), op.stride, op.pads, op.dilation,
                                op.groups)
    np.testing.assert_allclose(op.reference(x, w), expected, rtol=1e-12, atol=1e-12)
    assert op.tensor("O").shape == expected.shape
    taps = brute_force_conv(np.ones(x.shape), np.ones(w.shape), op.stride, op.pads, op.dilation, op.groups)
    assert op.macs == taps.sum()


def test_nd_names_and_letters():
    op = lo.Conv3d(2, 4, 3, padding=1, depth=5, height=6, width=7)
    assert op.dim_names == ("n", "k", "od", "oh", "ow", "c", "kd", "kh", "kw")
    assert (op.tensor("I").letters, op.tensor("W").letters) == ("NCDHW", "OIDHW")
    assert (op.out_depth, op.out_height, op.out_width) == (5, 6, 7)
    one = lo.Conv1d(2, 4, 3, length=10)
    assert one.dim_names == ("n", "k", "ow", "c", "kw") and one.out_length == 8
    schedule = lo.Schedule(one).layout("I", "NWC").layout("W", "WIO").layout("O", "NCW4c")
    assert schedule.layout_of("W").tag == "WIO"


@pytest.mark.parametrize("kernel, dilation, expected", [(3, 1, (1, 1)), (4, 1, (1, 2)), (2, 3, (1, 2)),
                                                         (1, 1, (0, 0))])
def test_same_padding_follows_pytorch(kernel, dilation, expected):
    op = lo.Conv1d(1, 1, kernel, padding="same", dilation=dilation, length=7)
    assert op.pads == (expected,) and op.out_length == 7
    assert lo.Conv1d(1, 1, kernel, padding="valid", length=7).pads == ((0, 0),)


@pytest.mark.slow      # importing torch takes seconds; test_same_padding_follows_pytorch checks the pads
@pytest.mark.filterwarnings("ignore:Using padding=.same.")
def test_same_padding_against_torch():
    torch = pytest.importorskip("torch")
    op = lo.Conv2d(3, 4, (4, 3), padding="same", dilation=(1, 2), height=6, width=7, bias=False)
    x, w = (op.random_inputs()[t] for t in "IW")
    expected = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                                          padding="same", dilation=(1, 2)).numpy()
    np.testing.assert_allclose(op.reference(x, w), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode, size, kernel, stride, expected", [
    ("SAME_UPPER", 7, 4, 1, (1, 2)), ("SAME_LOWER", 7, 4, 1, (2, 1)), ("SAME_UPPER", 8, 3, 2, (0, 1)),
    ("SAME_LOWER", 8, 3, 2, (1, 0)), ("SAME_UPPER", 5, 1, 2, (0, 0)), ("VALID", 5, 3, 1, (0, 0)),
])
def test_auto_pad_follows_onnx(mode, size, kernel, stride, expected):
    pads = lo.auto_pad(mode, (size,), kernel, stride)
    assert pads == (expected,)
    op = lo.Conv1d(1, 1, kernel, stride=stride, padding=pads, length=size)
    assert op.out_length == (-(-size // stride) if mode != "VALID" else (size - kernel) // stride + 1)


@pytest.mark.parametrize("cls, kwargs, error, message", [
    (lo.Conv2d, dict(padding="full"), TypeError,
     "padding must be an int, a pair of ints or of \\(begin, end\\) pairs, 'same' or 'valid', got 'full'"),
    (lo.Conv2d, dict(padding=((1, 2, 3), 0)), TypeError, "padding must be"),
    (lo.Conv2d, dict(padding=((1, -1), 0)), ValueError, "padding must be >= 0, got \\(\\(1, -1\\), 0\\)"),
    (lo.Conv2d, dict(padding="same", stride=2), ValueError, "padding='same' needs stride 1"),
    (lo.Conv1d, dict(kernel_size=(3, 3), length=5), TypeError, "kernel_size must be an int or a 1-tuple"),
    (lo.Conv3d, dict(stride=(1, 1), depth=4, height=4, width=4), TypeError,
     "stride must be an int or a triple of ints, got \\(1, 1\\)"),
    (lo.Conv3d, dict(depth=4, height=0, width=4), ValueError, "height must be a positive integer, got 0"),
    (lo.Conv1d, dict(length=2), ValueError, "spans 3, larger than the padded input 2"),
])
def test_bad_nd_convs(cls, kwargs, error, message):
    with pytest.raises(error, match=message):
        cls(2, 2, kwargs.pop("kernel_size", 3), **kwargs)


def test_bad_auto_pad():
    with pytest.raises(ValueError, match="auto_pad 'SAME' is not one of SAME_UPPER, SAME_LOWER, VALID"):
        lo.auto_pad("SAME", (5,), 3)


# --- batched and transposed matmuls ----------------------------------------------------------------

@pytest.mark.parametrize("batch, trans_a, trans_b", [((), True, False), ((2,), False, True),
                                                     ((3, 2), True, True)])
def test_matmul_batch_and_transposes(batch, trans_a, trans_b):
    op = lo.Matmul(3, 5, 4, batch=batch, trans_a=trans_a, trans_b=trans_b)
    assert op.tensor("A").shape == batch + ((4, 3) if trans_a else (3, 4))
    assert op.tensor("B").shape == batch + ((5, 4) if trans_b else (4, 5))
    assert op.tensor("C").shape == batch + (3, 5) and op.macs == 60 * int(np.prod(batch))
    a, b = op.random_inputs()["A"], op.random_inputs()["B"]
    expected = np.einsum("...ik,...kj->...ij", np.swapaxes(a, -1, -2) if trans_a else a,
                         np.swapaxes(b, -1, -2) if trans_b else b)
    np.testing.assert_allclose(op.reference(a, b), expected, rtol=1e-6, atol=1e-6)
    assert op.reference_blocks() == ([slice(0, 3)] if not (batch or trans_a) else [slice(None)])
    assert op.with_quant(None).tensor("A") == op.tensor("A")


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(batch=(2, 0)), ValueError, "batch must be a positive integer, got 0"),
    (dict(batch="2"), TypeError, "batch must be an int or a tuple"),
    (dict(trans_a=1), TypeError, "trans_a must be True or False, got 1"),
])
def test_bad_batched_matmul(kwargs, error, message):
    with pytest.raises(error, match=message):
        lo.Matmul(2, 3, 4, **kwargs)


# --- Gemm --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("c_shape", [(4, 5), (5,), (1, 5), (4, 1), (1,), (1, 1), None])
def test_gemm_reference_and_roles(c_shape):
    op = lo.Gemm(4, 5, 3, trans_a=True, alpha=0.5, beta=-2.0, c_shape=c_shape)
    inputs = op.random_inputs()
    a, b = inputs["A"], inputs["B"]
    expected = 0.5 * (a.T.astype(np.float64) @ b)
    if c_shape is not None:
        expected = expected - 2.0 * inputs["C"]
    np.testing.assert_allclose(op.reference(*(inputs[t] for t in op.call_tensors)), expected, rtol=1e-12)
    assert op.call_tensors == (("A", "B", "C") if c_shape else ("A", "B")) and op.output == "Y"
    assert op.scales == (0.5, -2.0 if c_shape else 0.0)
    assert lo.Gemm(4, 5, 3).scales is None and lo.Gemm(4, 5, 3, beta=2.0, c_shape=None).scales is None
    if c_shape:
        assert op.tensor("C").role == "bias" and op.tensor("C").shape == c_shape


def test_gemm_kernel_call_and_offsets():
    op = lo.Gemm(3, 4, 5, c_shape=(3, 1), alpha=2.0)
    assert op.bias_offset().to_c() == "i"
    assert lo.Gemm(3, 4, 5).bias_offset().to_c() == "(4*i + j)"
    a, b, c = (op.random_inputs(seed=2)[t] for t in "ABC")
    y = lo.Schedule(op).compile("scalar")(a, b, c)
    np.testing.assert_allclose(y, 2.0 * a @ b + c, rtol=1e-5)
    with pytest.raises(ValueError, match="C has shape \\(3,\\); Gemm\\(m=3, n=4, k=5, alpha=2.0, "
                                         "c_shape=\\(3, 1\\)\\) expects \\(3, 1\\)"):
        lo.Schedule(op).compile("scalar")(a, b, c[:, 0])


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(c_shape=(2, 4)), ValueError, "c_shape \\(2, 4\\) does not broadcast to \\(m, n\\) = \\(3, 4\\)"),
    (dict(alpha="2"), TypeError, "alpha must be a finite real number, got '2'"),
    (dict(beta=float("nan")), TypeError, "beta must be a finite real number, got nan"),
    (dict(quant=lo.QuantSpec()), ValueError, "a Gemm is not quantized"),
])
def test_bad_gemm(kwargs, error, message):
    with pytest.raises(error, match=message):
        lo.Gemm(3, 4, 5, **kwargs)
