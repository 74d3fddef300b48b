"""Pooling nodes on loopopt.onnx.pooling against onnx.reference over random shapes and attributes, and
the nodes it leaves to onnx.reference."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from helpers import tiers
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_models import model

import loopopt as lo
from loopopt.onnx import backend
from loopopt.onnx.plan import KERNEL, NUMPY
from loopopt.onnx.pooling import POOL_ATTRIBUTES, unsupported

DTYPES = {np.float32: TensorProto.FLOAT, np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
FALLBACK = "the loopopt kernel refuses it: "


def _pool_model(op_type: str, x: np.ndarray, outputs=("y",), **attributes):
    node = helper.make_node(op_type, ["x"], list(outputs), **attributes)
    return model([node], [("x", DTYPES[x.dtype.type], x.shape)], [(name, None, None) for name in outputs])


def naive_pool(op_type: str, x: np.ndarray, attributes: dict) -> np.ndarray:
    """The ONNX definition, one output element at a time: the window's input elements (pads hold
    none), their max or mean (``count_include_pad``: divided by the taps inside the padded input, as
    onnx.reference and onnxruntime do where ``ceil_mode`` reaches past the end pad)."""
    spatial, sizes = x.ndim - 2, x.shape[2:]
    if op_type.startswith("Global"):
        attributes = {"kernel_shape": list(sizes)}
    kernel = attributes["kernel_shape"]
    strides = attributes.get("strides") or [1] * spatial
    dilations = attributes.get("dilations") or [1] * spatial
    if attributes.get("auto_pad", "NOTSET") != "NOTSET":
        pads = lo.auto_pad(attributes["auto_pad"], sizes, kernel, strides, dilations)
    else:
        flat = attributes.get("pads") or [0] * (2 * spatial)
        pads = list(zip(flat[:spatial], flat[spatial:]))
    outs = []
    for n, k, s, d, (begin, end) in zip(sizes, kernel, strides, dilations, pads):
        span = n + begin + end - d * (k - 1) - 1
        out = (-(-span // s) if attributes.get("ceil_mode") else span // s) + 1
        outs.append(out - 1 if attributes.get("ceil_mode") and (out - 1) * s >= n + begin else out)
    y = np.zeros(x.shape[:2] + tuple(outs), x.dtype)
    for position in np.ndindex(*outs):
        ranges = [[o * s - p[0] + t * d for t in range(k)]
                  for o, s, p, k, d in zip(position, strides, pads, kernel, dilations)]
        inside = [[i for i in r if 0 <= i < n] for r, n in zip(ranges, sizes)]
        window = x[(slice(None), slice(None), *np.ix_(*inside))].reshape(x.shape[:2] + (-1,))
        if "Max" in op_type:
            y[(slice(None), slice(None), *position)] = window.max(axis=-1)
        else:
            padded = [[i for i in r if i < n + p[1]] for r, n, p in zip(ranges, sizes, pads)]
            count = (np.prod([len(r) for r in padded]) if attributes.get("count_include_pad")
                     else window.shape[-1])
            y[(slice(None), slice(None), *position)] = window.astype(np.float64).sum(axis=-1) / count
    return y


def _check_against_reference(op_type: str, x: np.ndarray, **attributes) -> None:
    """``op_type`` through the backend against ``naive_pool`` (onnx.reference's pools are wrong on
    3-D inputs with pads, SAME_LOWER, and global pools of other than 2 spatial dims; onnxruntime
    agrees with ours on those)."""
    proto = _pool_model(op_type, x, **attributes)
    ours = backend.prepare(proto, strict=True).run([x])[0]
    theirs = naive_pool(op_type, x, attributes)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)

def _window_attributes(data, spatial: int, sizes: tuple[int, ...], average: bool) -> dict:
    kernel = [data.draw(st.integers(1, min(4, n))) for n in sizes]
    attributes = {"kernel_shape": kernel, "strides": [data.draw(st.integers(1, 3)) for _ in sizes]}
    if data.draw(st.booleans()):
        # strides up to the kernel: SAME pads are then >= 0 (onnxruntime refuses negative ones, and
        # onnx.reference reads them otherwise than the spec)
        attributes["strides"] = [min(s, k) for s, k in zip(attributes["strides"], kernel)]
        attributes["auto_pad"] = data.draw(st.sampled_from(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    else:   # a pad is smaller than the kernel (ONNX's rule), so no window lies in the pad alone
        attributes["pads"] = [data.draw(st.integers(0, k - 1)) for k in kernel * 2]
        if not average:
            attributes["dilations"] = [data.draw(st.integers(1, 2)) for _ in sizes]
    if average:
        attributes["count_include_pad"] = data.draw(st.integers(0, 1))
    if "pads" in attributes:
        attributes["ceil_mode"] = data.draw(st.integers(0, 1))
    span = [(k - 1) * attributes.get("dilations", [1] * spatial)[i] + 1 for i, k in enumerate(kernel)]
    if any(s > n + sum(attributes.get("pads", [0] * 2 * spatial)[i::spatial]) for i, (s, n)
           in enumerate(zip(span, sizes))):
        attributes.pop("dilations", None)
    return attributes


def _check_pool_node(data):
    op_type = data.draw(st.sampled_from(["MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"]))
    spatial = data.draw(st.integers(1, 3))
    sizes = tuple(data.draw(st.integers(1, 7)) for _ in range(spatial))
    shape = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 5)), *sizes)
    dtype = np.float32 if op_type != "MaxPool" else data.draw(st.sampled_from(list(DTYPES)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = (rng.standard_normal(shape).astype(np.float32) if dtype == np.float32
         else rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, shape, endpoint=True).astype(dtype))
    attributes = ({} if op_type.startswith("Global")
                  else _window_attributes(data, spatial, sizes, op_type == "AveragePool"))
    _check_against_reference(op_type, x, **attributes)


test_pool_node_quick, test_pool_node_slow = tiers(_check_pool_node, 2, 12, st.data())


@pytest.mark.parametrize("op_type, attributes, outputs, reason", [
    ("MaxPool", {"kernel_shape": [2, 2]}, ("y", "indices"), "the Indices output"),
    ("MaxPool", {"kernel_shape": [2, 2], "storage_order": 1}, ("y",), "storage_order=1"),
])
def test_what_pooling_leaves_to_the_reference(op_type, attributes, outputs, reason):
    x = np.random.default_rng(2).standard_normal((1, 2, 5, 5)).astype(np.float32)
    assert unsupported(op_type, x, POOL_ATTRIBUTES | attributes, outputs) == reason
    proto = _pool_model(op_type, x, outputs=outputs, **attributes)
    ours = backend.prepare(proto).run([x])
    theirs = ReferenceEvaluator(proto).run(None, {"x": x})
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("op_type, dtype, shape, engine, reason", [
    ("MaxPool", np.float32, (2, 8, 20, 19), KERNEL, ""),        # ResNet's stem pool, batch 2, an odd width
    ("MaxPool", np.float64, (1, 2, 5, 5), NUMPY,
     FALLBACK + "dtype='float64': a pool's input is one of float32, uint8, int8"),
    ("GlobalAveragePool", np.float32, (1, 2, 3, 2, 3, 2), NUMPY,
     FALLBACK + "sizes=(3, 2, 3, 2): pools of 1 to 3 spatial dims, got 4"),
])
def test_pools_run_on_kernels_and_numpy_where_the_op_model_refuses(op_type, dtype, shape, engine, reason):
    """The plan's step runs the node on its loopopt kernel, built at prepare (none at run), or on numpy
    with the kernel's refusal as the reason; either matches the ONNX definition."""
    x = np.random.default_rng(3).standard_normal(shape).astype(dtype)
    attributes = {} if op_type.startswith("Global") else {"kernel_shape": [3, 3], "strides": [2, 2],
                                                          "pads": [1, 1, 1, 1]}
    node = helper.make_node(op_type, ["x"], ["y"], **attributes)
    elements = {**DTYPES, np.float64: TensorProto.DOUBLE}
    proto = model([node], [("x", elements[dtype], shape)], [("y", None, None)])
    rep = backend.prepare(proto, strict=True)
    (step,) = rep.plan.steps
    assert (step.engine, step.reason) == (engine, reason)
    with mock.patch.object(lo.PoolSchedule, "compile", side_effect=AssertionError("a pool compiled at run")):
        np.testing.assert_allclose(rep.run([x])[0], naive_pool(op_type, x, attributes), rtol=1e-6)
