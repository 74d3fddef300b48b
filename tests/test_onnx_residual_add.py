"""A QOperator residual's DequantizeLinear -> Add (-> Relu) as one step (loopopt.onnx.residual_add) against
onnx.reference over random shapes, 8-bit dtypes, scales and zero points, the operands stored in random axis
orders (one order: the compiled loop; two: the steps one by one), on 1-3 threads, in place or not; and the
compiled loop (``LinearQuant.dequantize_add``) against numpy bit for bit over every tail."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import tiers
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_models import model
from test_onnx_elementwise import OPSET, _any_size_splits

from loopopt.onnx import backend
from loopopt.onnx.residual_add import FUSED
from loopopt.targets.linear_quant import linear_quant
from loopopt.targets.registry import host_target
from loopopt.targets.threaded_c import MIN_CHUNK

ELEM = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -3.5], np.float32)


def _floats(rng, shape) -> np.ndarray:
    """Normal values with some NaNs, infinities, zeros of both signs and a subnormal among them."""
    size = int(np.prod(shape))
    values = np.where(rng.random(size) < 0.1, rng.choice(SPECIAL, size), rng.standard_normal(size) * 3)
    return values.astype(np.float32).reshape(shape)


def _in_order(array: np.ndarray, order) -> np.ndarray:
    """``array`` as a view of a copy stored with its axes in ``order`` (a kernel's output view)."""
    return np.ascontiguousarray(array.transpose(order)).transpose(np.argsort(order))


def _check_residual_add(data):
    dtype = data.draw(st.sampled_from([np.uint8, np.int8]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    info = np.iinfo(dtype)
    scale, zero = np.float32(rng.uniform(0.001, 2)), dtype(rng.integers(info.min, info.max + 1))
    shape = [*data.draw(st.lists(st.integers(1, 6), min_size=0, max_size=3)), data.draw(st.integers(1, 90))]
    first = data.draw(st.booleans())             # the dequantized value is the Add's first operand
    relu = data.draw(st.booleans())
    also = data.draw(st.sampled_from(["", "dq", "sum"]))     # a value also a graph output
    nodes = [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"]),
             helper.make_node("Add", ["dq", "r"] if first else ["r", "dq"], ["sum"])]
    if relu:
        nodes.append(helper.make_node("Relu", ["sum"], ["y"]))
    last = "y" if relu else "sum"
    outputs = [(last, TensorProto.FLOAT, shape)] + ([(also, TensorProto.FLOAT, shape)]
                                                     if also and also != last else [])
    inits = [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(np.asarray(zero), "z")]
    proto = model(nodes, [("q", ELEM[dtype], shape), ("r", TensorProto.FLOAT, shape)], outputs, inits,
                  opset=OPSET)
    rep = backend.prepare(proto, strict=True, threads=data.draw(st.integers(1, 3)))
    kinds = [s.op_type for s in rep.plan.steps]
    if also == "dq":                                          # the dequantized value read twice
        assert kinds == [n.op_type for n in nodes]
    elif also == "sum" and relu:                              # the sum read twice: Relu on its own
        assert kinds == [FUSED, "Relu"]
    else:
        assert kinds == [FUSED + (" -> Relu" if relu else "")]
    orders = [data.draw(st.permutations(range(len(shape)))) for _ in range(2)]
    if data.draw(st.booleans()):
        orders[1] = orders[0]                    # one memory order: the compiled loop
    q = _in_order(rng.integers(info.min, info.max + 1, shape).astype(dtype), orders[0])
    r = _in_order(_floats(rng, shape), orders[1])
    want = ReferenceEvaluator(proto).run(None, {"q": q, "r": r})
    kept = r.copy(order="K")
    with _any_size_splits():
        for got, expected in zip(rep.run([q, r]), want):
            assert got.dtype == expected.dtype and got.shape == expected.shape
            np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))   # the same bits
        np.testing.assert_array_equal(r.view(np.uint32), kept.view(np.uint32))   # a graph input: kept
        if len(rep.plan.steps) == 1:
            over = r.copy(order="K")
            got = rep.plan.steps[0].run([q, over], True)[0]                     # over the residual
            np.testing.assert_array_equal(got.view(np.uint32), want[0].view(np.uint32))


test_residual_add_quick, test_residual_add_slow = tiers(_check_residual_add, 12, 120, st.data())


@pytest.mark.parametrize("flags", list(dict.fromkeys([(), host_target().vector_flags()])), ids=str)
def test_dequantize_add_loop_matches_numpy_bit_for_bit(flags):
    """``dequantize_add`` over every length 0-150 (chunks of 64 on 2 and 3 threads) and one of several
    ``MIN_CHUNK`` on 1-3 threads, every code, NaNs, infinities and zeros of both signs in the residual,
    with and without Relu, into a new array and in place: numpy's DequantizeLinear, add and maximum bits;
    wrong arrays refused."""
    rng = np.random.default_rng(29)
    for dtype in (np.uint8, np.int8):
        loops, info = linear_quant(np.dtype(dtype), flags), np.iinfo(dtype)
        cases = [*((n, 1 + n % 3) for n in range(151)), *((3 * MIN_CHUNK + 77, t) for t in (1, 2, 3))]
        for n, threads in cases:
            q = rng.integers(info.min, info.max + 1, n).astype(dtype)
            r = _floats(rng, (n,))
            scale, zero = np.float32(rng.uniform(0.001, 2)), np.float32(rng.integers(info.min, info.max + 1))
            summed = (q.astype(np.float32) - zero) * scale + r
            for relu, want in ((False, summed), (True, np.maximum(summed, 0))):
                y = np.empty_like(r)
                loops.dequantize_add(q, r, y, float(zero), float(scale), relu, threads)
                np.testing.assert_array_equal(y.view(np.uint32), want.view(np.uint32))
                over = r.copy()
                loops.dequantize_add(q, over, over, float(zero), float(scale), relu, threads)    # in place
                np.testing.assert_array_equal(over.view(np.uint32), want.view(np.uint32))
        with pytest.raises(ValueError, match="x must be a contiguous 1-D float32 array, got dtype float64"):
            loops.dequantize_add(np.zeros(2, dtype), np.zeros(2), np.zeros(2, np.float32), 0.0, 1.0)
        with pytest.raises(ValueError, match="x and q differ in size: 3 and 2 elements"):
            loops.dequantize_add(np.zeros(2, dtype), *(np.zeros(3, np.float32),) * 2, 0.0, 1.0)
