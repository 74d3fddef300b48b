"""A model input's QuantizeLinear written in its conv's stored layout: the rotated quantize loop
(``LinearQuant.rotated``: each ``rows x cols`` matrix quantized and transposed) against onnx.reference's
QuantizeLinear and numpy's transpose bit for bit, over odd sizes, ties and both 8-bit types, on 1-3
threads, built with the host's loop and the portable one; and the plan (``LoopoptRep._quantized_orders``,
``elementwise.quantize_linear``'s ``order``) on QOperator and QDQ convs of random geometry (kernel,
stride, padding, odd sizes, channels): the quantized input stored as the conv stores it, read by the
conv without a copy, and every output the bits of the same model with the quantize writing NCHW."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from helpers import HYPOTHESIS
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_models import _init, model

from loopopt.layout import Layout
from loopopt.onnx import backend
from loopopt.onnx.elementwise import ROTATED_ROWS, rotated
from loopopt.targets.linear_quant import ROTATED_BLOCK, linear_quant
from loopopt.targets.registry import host_target

OPSET = 21
ELEM = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def _reference(x: np.ndarray, scale: np.float32, zero) -> np.ndarray:
    """onnx.reference's QuantizeLinear of ``x``."""
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    proto = model([node], [("x", TensorProto.FLOAT, list(x.shape))], [("y", ELEM[type(zero)], None)],
                  [_init("s", np.asarray(scale)), _init("z", np.asarray(zero))], opset=OPSET)
    return ReferenceEvaluator(proto).run(None, {"x": x})[0]


@pytest.mark.slow
@settings(max_examples=40, **HYPOTHESIS)
@given(st.data())
def test_rotated_loop(data) -> None:
    """``batch x rows x cols`` values (ties of x / scale, their neighbours, random ones) quantized
    rotated by the host's or the portable loop: the reference's codes, transposed."""
    portable = data.draw(st.booleans())
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    dtype = data.draw(st.sampled_from([np.uint8, np.int8]))
    rows = data.draw(st.sampled_from([2, 3, 5]))
    batch, cols = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 300))
    scale = np.float32(data.draw(st.sampled_from([0.5, 0.37, 3.0])))
    zero = dtype(rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1))
    size = batch * rows * cols
    ties = (rng.integers(-300, 300, size) + 0.5 * rng.integers(0, 2, size)) * scale
    x = np.where(rng.random(size) < 0.7, ties, rng.standard_normal(size) * 300).astype(np.float32)
    x = np.nextafter(x, x + rng.integers(-1, 2, x.size).astype(np.float32)).reshape(batch, rows, cols)
    loops = linear_quant(np.dtype(dtype)) if portable else host_target().linear_quant(np.dtype(dtype))
    q = np.empty(x.size, dtype)
    threads = data.draw(st.integers(1, 3))
    with mock.patch("loopopt.targets.threaded_c.MIN_CHUNK", 1):
        loops.rotated(rows).quantize(x.reshape(-1), q, float(scale), float(zero), batch, cols, threads)
    np.testing.assert_array_equal(q.reshape(batch, cols, rows), _reference(x, scale, zero).transpose(0, 2, 1))


@pytest.mark.slow
def test_rotated_stem_input_on_tiles_and_tails():
    """A model input's case: 3 rows of 1-3 matrices of whole tiles and tails (``ROTATED_BLOCK`` columns),
    ties included, on 1-3 threads split anywhere: the reference's codes, transposed."""
    loops, scale, zero = host_target().linear_quant(np.dtype(np.uint8)), np.float32(0.5), np.uint8(3)
    for batch, cols in ((1, 2 * ROTATED_BLOCK), (2, 37), (3, ROTATED_BLOCK + 65), (1, 1)):
        x = (np.arange(batch * 3 * cols, dtype=np.float32).reshape(batch, 3, cols) - 40) * np.float32(0.25)
        q = np.empty(x.size, np.uint8)
        for threads in (1, 2, 3):
            with mock.patch("loopopt.targets.threaded_c.MIN_CHUNK", 1):
                loops.rotated(3).quantize(x.reshape(-1), q, float(scale), float(zero), batch, cols, threads)
            want = _reference(x, scale, zero).transpose(0, 2, 1)
            np.testing.assert_array_equal(q.reshape(batch, cols, 3), want)


def test_rotated_loop_refuses_bad_arrays_and_rows():
    loops = host_target().linear_quant(np.dtype(np.uint8))
    with pytest.raises(ValueError, match="rows must be a positive integer, got 0"):
        loops.rotated(0)
    with pytest.raises(ValueError, match=r"x has 12 elements; 1 x 3 x 5 rotated needs 15"):
        loops.rotated(3).quantize(np.zeros(12, np.float32), np.zeros(12, np.uint8), 1.0, 0.0, 1, 5)
    with pytest.raises(ValueError, match="q must be a contiguous 1-D uint8 array, got dtype int8"):
        loops.rotated(3).quantize(np.zeros(15, np.float32), np.zeros(15, np.int8), 1.0, 0.0, 1, 5)


def test_rotation_of_an_input_to_its_readers_order():
    """NCHW to NHWC is (N, C, H*W) matrices transposed; the same order, an order no rotation makes, or
    more than ``ROTATED_ROWS`` rows: None."""
    assert rotated((0, 1, 2, 3), (0, 2, 3, 1), (2, 3, 5, 7)) == (2, 3, 35)
    assert rotated((0, 2, 3, 1), (0, 1, 2, 3), (2, 3, 5, 7)) == (2, 35, 3)
    assert rotated((0, 1, 2, 3), (0, 1, 2, 3), (2, 3, 5, 7)) is None
    assert rotated((0, 1, 2, 3), (0, 3, 1, 2), (2, 3, 5, 7)) == (2, 15, 7)
    assert rotated((0, 1, 2, 3), (0, 2, 1, 3), (2, 3, 5, 7)) is None
    assert rotated((0, 1, 2, 3), (0, 2, 3, 1), (1, ROTATED_ROWS + 1, 2, 2)) is None
    assert rotated((0, 1, 2, 3), None, (1, 3, 2, 2)) is None


def _conv_model(draw, qdq: bool):
    """QuantizeLinear of a float NCHW input -> an int8 conv (QLinearConv, or DequantizeLinear -> Conv ->
    QuantizeLinear, its bias scale x_scale * w_scale: fused) of random geometry -> DequantizeLinear; and an
    input."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    c, k = draw(st.integers(1, 4)), draw(st.sampled_from([8, 16, 24]))
    kernel, stride = draw(st.sampled_from([1, 3, 7])), draw(st.integers(1, 2))
    pads = [draw(st.integers(0, kernel // 2)) for _ in range(4)]
    h, w = kernel + draw(st.integers(2, 9)), kernel + draw(st.integers(2, 9))    # 2 output rows and columns
    n = draw(st.integers(1, 2))
    u8, i8 = np.uint8, np.int8
    inits = [_init("xs", np.float32(0.02)), _init("xz", u8(rng.integers(0, 256))),
             _init("w", rng.integers(-127, 128, (k, c, kernel, kernel), dtype=i8)),
             _init("ws", (rng.random(k) * 0.01 + 0.005).astype(np.float32)), _init("wz", np.zeros(k, i8)),
             _init("b", rng.integers(-500, 500, k, dtype=np.int32)), _init("ys", np.float32(0.05)),
             _init("yz", u8(rng.integers(0, 256)))]
    attrs = dict(kernel_shape=[kernel, kernel], strides=[stride, stride], pads=pads)
    if qdq:
        inits.append(_init("bs", (np.float32(0.02) * numpy_helper.to_array(inits[3])).astype(np.float32)))
        conv = [helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
                helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
                helper.make_node("DequantizeLinear", ["b", "bs"], ["bd"], axis=0),
                helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], name="conv", **attrs),
                helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["yq"])]
    else:
        conv = [helper.make_node("QLinearConv", ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["yq"],
                                 name="conv", **attrs)]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="quantize"), *conv,
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    proto = model(nodes, [("x", TensorProto.FLOAT, [n, c, h, w])], [("y", TensorProto.FLOAT, None)], inits,
                  opset=OPSET)
    return proto, (rng.standard_normal((n, c, h, w)) * 2).astype(np.float32)


@pytest.mark.slow
@settings(max_examples=6, **HYPOTHESIS)
@given(st.data())
def test_planned_quantize(data) -> None:
    """The QOperator or QDQ model (``_conv_model``) with the quantize planned, on 1 or 2 threads, against
    the same model with none."""
    proto, x = _conv_model(data.draw, data.draw(st.booleans()))
    with mock.patch.object(backend.LoopoptRep, "_quantized_orders", lambda self, reads, order: {}):
        plain = backend.prepare(proto, strict=True)
    rep = backend.prepare(proto, strict=True, threads=data.draw(st.integers(1, 2)))
    lowered = rep.lowered["conv"]
    assert lowered.op.quant is not None        # the QDQ group fused: the conv reads the quantized input
    stored = lowered.schedule.layout_of(lowered.op.inputs[0])
    nhwc = stored.tag == "NHWC"
    assert rep._quantized == ({"xq": (0, 2, 3, 1)} if nhwc else {})
    packed = []
    to_storage = Layout.to_storage

    def recorded(layout, array, *args, **kwargs):
        out = to_storage(layout, array, *args, **kwargs)
        packed.append(out is not None and not np.shares_memory(out, array))
        return out

    want = [plain.run([x])[0].copy() for _ in range(3)]
    with mock.patch.object(Layout, "to_storage", recorded):
        got = [rep.run([x])[0].copy() for _ in range(3)]       # the third in the shared memory, repeated
    if nhwc:
        assert not any(packed), "the conv packed the quantized input"
        held, _ = rep.plan.steps[0].holders[0].held()
        zero = np.uint8(plain.constants["xz"])
        np.testing.assert_array_equal(held, _reference(x, np.float32(0.02), zero).transpose(0, 2, 3, 1))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)

