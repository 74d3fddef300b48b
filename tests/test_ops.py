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
    (dict(in_channels=4, out_channels=4, kernel_size=3, dtype="float16"), ValueError,
     "dtype 'float16' is not supported"),
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
