"""Elementwise and view nodes on loopopt.onnx.elementwise against onnx.reference over random shapes,
inputs stored in any axis order (as a kernel's output view reaches them), in place or not, on 1-3
threads (the compiled loops split however small the array: ``_any_size_splits``); what they leave to
the reference; quantize chains of one 8-bit tensor as one byte lookup and of two (a quantized residual
Add) as one pair lookup (the compiled maps over every tail, on 1-3 threads)."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from helpers import tiers
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.ops import load_op
from onnx_models import model
from test_onnx_pooling import naive_pool

from loopopt.onnx import backend
from loopopt.onnx.elementwise import ELEMENTWISE, pair_lookup
from loopopt.onnx.lowering import NotSupported, Value
from loopopt.onnx.plan import no_call, viewing
from loopopt.onnx.residual_add import FUSED
from loopopt.pool import PoolSchedule
from loopopt.targets.bytemap import portable_byte_map, portable_pair_map
from loopopt.targets.float_map import OPERATORS, float_map
from loopopt.targets.linear_quant import linear_quant
from loopopt.targets.registry import host_target
from loopopt.targets.threaded_c import MIN_CHUNK, threads_for
from loopopt.targets.x86.bytemap_c import x86_byte_maps

OPSET = 21
RUN_PARAMS = {"opsets": {"": OPSET}, "log": lambda *args: None, "verbose": 0, "new_ops": None,
              "existing_functions": {}, "evaluator_cls": None}
FLOAT_OPS = ("Relu", "Clip", "Add", "Sub", "Mul", "Div")


def _stored(data, array: np.ndarray) -> np.ndarray:
    """``array`` as a view of a copy stored in a random axis order (a kernel's output view)."""
    if array.ndim < 2:
        return array
    order = data.draw(st.permutations(range(array.ndim)))
    return np.ascontiguousarray(array.transpose(order)).transpose(np.argsort(order))


def _case(data) -> tuple[str, list[np.ndarray | None], dict]:
    """An op type, its inputs and attributes."""
    op_type = data.draw(st.sampled_from(FLOAT_OPS + ("Flatten", "Reshape", "DequantizeLinear",
                                                     "QuantizeLinear")))
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = _stored(data, (rng.standard_normal(shape) * 4).astype(np.float32))
    if op_type == "Relu":
        return op_type, [x], {}
    if op_type == "Clip":
        low, high = sorted(rng.standard_normal(2).astype(np.float32))
        bounds = data.draw(st.sampled_from([(low, high), (low, None), (None, high)]))
        return op_type, [x, *(None if b is None else np.float32(b) for b in bounds)], {}
    if op_type in ("Add", "Sub", "Mul", "Div"):
        tail = shape[data.draw(st.integers(0, len(shape))):]       # broadcast: a suffix, some dims 1
        other = tuple(d if data.draw(st.booleans()) else 1 for d in tail)
        return op_type, [x, _stored(data, rng.standard_normal(other).astype(np.float32) + 0.5)], {}
    if op_type == "Flatten":
        return op_type, [x], {"axis": data.draw(st.integers(-len(shape), len(shape)))}
    if op_type == "Reshape":
        target = [0, -1] + [1] * data.draw(st.integers(0, 1)) if len(shape) > 1 else [-1]
        return op_type, [x, np.array(target, np.int64)], {}
    dtype = data.draw(st.sampled_from([np.uint8, np.int8]))
    info = np.iinfo(dtype)
    scale, zero = np.float32(rng.uniform(0.01, 1)), dtype(rng.integers(info.min, info.max + 1))
    if op_type == "QuantizeLinear":
        return op_type, [x * 40, scale, zero], {}
    q = _stored(data, rng.integers(info.min, info.max + 1, shape).astype(dtype))
    return op_type, [q, scale, zero], {}


def _any_size_splits():
    """The compiled loops split over the threads given however few elements they run (one per thread at
    least; chunks start at multiples of ``ALIGN``, so a thread past the end runs none)."""
    return mock.patch("loopopt.targets.threaded_c.MIN_CHUNK", 1)


def _check_elementwise_node(data):
    op_type, inputs, attributes = _case(data)
    names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    node = helper.make_node(op_type, names, ["y"], **attributes)
    want = load_op("", op_type, OPSET)(node, RUN_PARAMS).run(*inputs)[0]
    values = [None if a is None else Value(np.shape(a), np.asarray(a).dtype, np.asarray(a)) for a in inputs]
    run = ELEMENTWISE[op_type](node, values, OPSET, threads=data.draw(st.integers(1, 3)))
    before = [None if a is None else np.array(a) for a in inputs]
    with _any_size_splits():
        got = run(inputs, False)[0]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)          # the same arithmetic: the same bits
        for given, kept in zip(inputs, before):
            np.testing.assert_array_equal(given, kept)   # not in place: the inputs unchanged
        in_place = run([None if a is None else np.asarray(a).copy(order="K") for a in inputs], True)[0]
        np.testing.assert_array_equal(in_place, want)


test_elementwise_node_quick, test_elementwise_node_slow = tiers(_check_elementwise_node, 25, 300, st.data())


@pytest.mark.parametrize("op_type, inputs, opset, reason", [
    ("Add", [np.zeros(2, np.int32), np.zeros(2, np.int32)], OPSET, "Add of dtypes int32, int32"),
    ("Add", [np.zeros(2, np.float32), np.zeros(2, np.float32)], 6, "its broadcast attribute"),
    ("DequantizeLinear", [np.zeros(2, np.uint8), np.ones(2, np.float32), np.zeros(2, np.uint8)], OPSET,
     "a scale or zero point of shape (2,)"),
    ("QuantizeLinear", [np.zeros(2, np.float32), np.float32(1), np.uint16(0)], OPSET,
     "QuantizeLinear from float32 to uint16"),
])
def test_what_elementwise_leaves_to_the_reference(op_type, inputs, opset, reason):
    node = helper.make_node(op_type, [f"i{k}" for k in range(len(inputs))], ["y"])
    values = [Value(np.shape(a), np.asarray(a).dtype, np.asarray(a)) for a in inputs]
    with pytest.raises(NotSupported, match=reason.replace("(", r"\(").replace(")", r"\)")):
        ELEMENTWISE[op_type](node, values, opset)


def test_quantize_chains_run_as_one_lookup():
    """QuantizeLinear -> DequantizeLinear -> Relu -> QuantizeLinear (int8) -> DequantizeLinear -> Clip
    -> QuantizeLinear (uint8): both chains one lookup step each, the same bits as onnx.reference; a
    chain whose inner value is also an output stays as it is."""
    u8, i8 = np.uint8, np.int8
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in
             [("s1", np.float32(0.05)), ("z1", u8(120)), ("s2", np.float32(0.03)), ("z2", i8(-7)),
              ("s3", np.float32(0.02)), ("z3", u8(3)), ("low", np.float32(-0.5)), ("high", np.float32(1.5))]]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z1"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s1", "z1"], ["d1"]),
             helper.make_node("Relu", ["d1"], ["r1"]),
             helper.make_node("QuantizeLinear", ["r1", "s2", "z2"], ["q2"]),
             helper.make_node("DequantizeLinear", ["q2", "s2", "z2"], ["d2"]),
             helper.make_node("Clip", ["d2", "low", "high"], ["c2"]),
             helper.make_node("QuantizeLinear", ["c2", "s3", "z3"], ["y"])]
    for inner in ((), ("c2",)):
        proto = model(nodes, [("x", TensorProto.FLOAT, [2, 3, 5, 4])],
                      [("y", TensorProto.UINT8, None)] + [(n, TensorProto.FLOAT, None) for n in inner],
                      inits, opset=OPSET)
        rep = backend.prepare(proto, strict=True)
        chains = [s.op_type for s in rep.plan.steps if "->" in s.op_type]
        assert chains == ["DequantizeLinear -> Relu -> QuantizeLinear"] + (
            [] if inner else ["DequantizeLinear -> Clip -> QuantizeLinear"])
        x = np.random.default_rng(5).standard_normal((2, 3, 5, 4)).astype(np.float32) * 4
        stored = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        want = ReferenceEvaluator(proto).run(None, {"x": x})
        for got, expected in zip(rep.run([stored]), want):
            np.testing.assert_array_equal(got, expected)


def _check_lookup_chain(data):
    """DequantizeLinear -> Relu or Clip -> QuantizeLinear of random scales, zero points and 8-bit
    dtypes over a random shape stored in a random axis order: one lookup step on the host's compiled
    byte map, the same bits as onnx.reference, not in place and in place."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    source, target = (data.draw(st.sampled_from([np.uint8, np.int8])) for _ in range(2))
    zeros = [t(rng.integers(np.iinfo(t).min, np.iinfo(t).max + 1)) for t in (source, target)]
    scales = [np.float32(rng.uniform(0.005, 0.5)) for _ in range(2)]
    between = data.draw(st.sampled_from(["Relu", "Clip"]))
    low, high = sorted(rng.uniform(-3, 3, 2).astype(np.float32))
    shape = [*data.draw(st.lists(st.integers(1, 6), min_size=0, max_size=3)), data.draw(st.integers(1, 140))]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in
             [("s1", scales[0]), ("z1", zeros[0]), ("s2", scales[1]), ("z2", zeros[1]),
              ("low", low), ("high", high)]]
    nodes = [helper.make_node("DequantizeLinear", ["q", "s1", "z1"], ["d"]),
             helper.make_node(between, ["d", "low", "high"][:1 if between == "Relu" else 3], ["c"]),
             helper.make_node("QuantizeLinear", ["c", "s2", "z2"], ["y"])]
    elem = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
    proto = model(nodes, [("q", elem[source], shape)], [("y", elem[target], shape)], inits, opset=OPSET)
    rep = backend.prepare(proto, strict=True, threads=data.draw(st.integers(1, 3)))
    [step] = rep.plan.steps
    assert step.op_type == f"DequantizeLinear -> {between} -> QuantizeLinear"
    info = np.iinfo(source)
    q = _stored(data, rng.integers(info.min, info.max + 1, shape).astype(source))
    want = ReferenceEvaluator(proto).run(None, {"q": q})[0]
    kept = q.copy(order="K")
    with _any_size_splits():
        got = rep.run([q])[0]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(q, kept)                   # a graph input: not overwritten
        np.testing.assert_array_equal(step.run([kept], True)[0], want)      # in place


test_lookup_chain_quick, test_lookup_chain_slow = tiers(_check_lookup_chain, 15, 120, st.data())


def _check_pair_lookup_chain(data):
    """DequantizeLinear of two 8-bit tensors (random scales, zero points, dtypes, each stored in a random
    axis order) -> Add, Sub or Mul -> optionally Relu or Clip -> QuantizeLinear: one pair lookup step,
    the same bits as onnx.reference, not in place and in place; with the combined value also a graph
    output, the steps stay as they are (an Add: its first DequantizeLinear and it as one step)."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    dtypes = [data.draw(st.sampled_from([np.uint8, np.int8])) for _ in range(3)]
    zeros = [t(rng.integers(np.iinfo(t).min, np.iinfo(t).max + 1)) for t in dtypes]
    scales = [np.float32(rng.uniform(0.005, 0.5)) for _ in range(3)]
    combine = data.draw(st.sampled_from(["Add", "Sub", "Mul"]))
    after = data.draw(st.sampled_from([(), ("Relu",), ("Clip",)]))
    shape = [*data.draw(st.lists(st.integers(1, 5), min_size=0, max_size=3)), data.draw(st.integers(1, 70))]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in
             [*((f"s{k}", scales[k]) for k in range(3)), *((f"z{k}", zeros[k]) for k in range(3)),
              ("low", np.float32(-0.25)), ("high", np.float32(6))]]
    nodes = [helper.make_node("DequantizeLinear", ["a", "s0", "z0"], ["da"]),
             helper.make_node("DequantizeLinear", ["b", "s1", "z1"], ["db"]),
             helper.make_node(combine, ["da", "db"], ["sum"])]
    last = "sum"
    for op_type in after:
        bounds = ("low", "high") if op_type == "Clip" else ()
        nodes.append(helper.make_node(op_type, ["sum", *bounds], ["c"]))
        last = "c"
    nodes.append(helper.make_node("QuantizeLinear", [last, "s2", "z2"], ["y"]))
    elem = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
    also = data.draw(st.booleans())       # the combined value also an output: nothing fused
    proto = model(nodes, [("a", elem[dtypes[0]], shape), ("b", elem[dtypes[1]], shape)],
                  [("y", elem[dtypes[2]], shape)] + ([("sum", TensorProto.FLOAT, shape)] if also else []),
                  inits, opset=OPSET)
    rep = backend.prepare(proto, strict=True, threads=data.draw(st.integers(1, 3)))
    chain = " -> ".join(["DequantizeLinear", "DequantizeLinear", combine, *after, "QuantizeLinear"])
    steps = [n.op_type for n in nodes]
    if also and combine == "Add":        # the first DequantizeLinear and the Add one step (``residual_add``)
        steps = ["DequantizeLinear", FUSED, *after, "QuantizeLinear"]
    assert [s.op_type for s in rep.plan.steps] == (steps if also else [chain])
    a, b = (_stored(data, rng.integers(np.iinfo(t).min, np.iinfo(t).max + 1, shape).astype(t))
            for t in dtypes[:2])
    want = ReferenceEvaluator(proto).run(None, {"a": a, "b": b})
    kept = a.copy(order="K")
    with _any_size_splits():
        for got, expected in zip(rep.run([a, b]), want):
            assert got.dtype == expected.dtype and got.shape == expected.shape
            np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(a, kept)                   # a graph input: not overwritten
        if not also:
            np.testing.assert_array_equal(rep.plan.steps[0].run([kept, b], True)[0], want[0])   # in place


test_pair_lookup_chain_quick, test_pair_lookup_chain_slow = tiers(_check_pair_lookup_chain, 6, 60, st.data())


def _check_pool_in_lookup_chain(data):
    """DequantizeLinear -> optionally Relu -> MaxPool or GlobalMaxPool -> QuantizeLinear (random 8-bit
    dtypes, scales, zero points, windows, strides, asymmetric pads, dilation, ceil_mode, a negative
    output scale, the input stored in a random axis order, the pool's output also a model output or
    not): where every window reads an input element, the pool on the 8-bit values mapping each max
    through the chain's table (one step where that table is non-decreasing and nothing else reads the
    pool's output; else the chain up to the pool as one step into its float values, then
    QuantizeLinear), else the steps as they are; the same bits as onnx.reference either way."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    dtypes = [data.draw(st.sampled_from([np.uint8, np.int8])) for _ in range(2)]
    zeros = [t(rng.integers(np.iinfo(t).min, np.iinfo(t).max + 1)) for t in dtypes]
    sign = data.draw(st.sampled_from([1, 1, 1, -1]))
    scales = [np.float32(rng.uniform(0.005, 0.5)), np.float32(sign * rng.uniform(0.005, 0.5))]
    pool = data.draw(st.sampled_from(["MaxPool", "GlobalMaxPool"]))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(2)]
    dilation = data.draw(st.sampled_from([1, 1, 2]))
    attributes = {} if pool == "GlobalMaxPool" else dict(
        kernel_shape=kernel, strides=[data.draw(st.integers(1, 2)) for _ in range(2)],
        pads=[data.draw(st.integers(0, k - 1)) for k in kernel * 2], dilations=[dilation] * 2,
        ceil_mode=data.draw(st.sampled_from([0, 0, 1])))
    shape = [data.draw(st.integers(1, 2)), data.draw(st.integers(1, 5)),
             *(data.draw(st.integers((k - 1) * dilation + 1, 9)) for k in kernel)]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in
             [("s0", scales[0]), ("z0", zeros[0]), ("s1", scales[1]), ("z1", zeros[1])]]
    relu = data.draw(st.booleans())
    nodes = [helper.make_node("DequantizeLinear", ["q", "s0", "z0"], ["d"]),
             *([helper.make_node("Relu", ["d"], ["r"])] if relu else []),
             helper.make_node(pool, ["r" if relu else "d"], ["p"], **attributes),
             helper.make_node("QuantizeLinear", ["p", "s1", "z1"], ["y"])]
    elem = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
    shared = data.draw(st.booleans())
    outputs = [("y", elem[dtypes[1]], None)] + ([("p", TensorProto.FLOAT, None)] if shared else [])
    proto = model(nodes, [("q", elem[dtypes[0]], shape)], outputs, inits, opset=OPSET)
    rep = backend.prepare(proto, strict=True)
    selects = pool == "GlobalMaxPool" or (dilation == 1 and not attributes["ceil_mode"])
    steps = [n.op_type for n in nodes]
    if selects:
        steps = ([" -> ".join(steps)] if sign > 0 and not shared else [" -> ".join(steps[:-1]), steps[-1]])
    assert [s.op_type for s in rep.plan.steps] == steps
    q = _stored(data, rng.integers(np.iinfo(dtypes[0]).min, np.iinfo(dtypes[0]).max + 1, shape)
                .astype(dtypes[0]))
    run = {n.op_type: load_op("", n.op_type, OPSET)(n, RUN_PARAMS).run for n in nodes if n.op_type != pool}
    floats = run["DequantizeLinear"](q, scales[0], zeros[0])[0]
    floats = run["Relu"](floats)[0] if relu else floats
    # the pool by its definition (onnx.reference's MaxPool gets some asymmetric pads wrong)
    pooled = naive_pool(pool, floats, attributes)
    want = [run["QuantizeLinear"](pooled, scales[1], zeros[1])[0], *([pooled] if shared else [])]
    with mock.patch.object(PoolSchedule, "compile", side_effect=AssertionError("a pool compiled at run")):
        got = rep.run([q])      # the pool's kernel (8-bit where fused into the lookup) built at prepare
    for ours, theirs in zip(got, want, strict=True):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        np.testing.assert_array_equal(ours, theirs)


test_pool_in_lookup_chain_quick, test_pool_in_lookup_chain_slow = tiers(_check_pool_in_lookup_chain, 2, 12,
                                                                        st.data())


def test_byte_map_matches_numpy_over_tails():
    """Every lookup this host runs (on x86: each ISA's, not only the one its target picks, and the portable
    loop; built here, not at collection, where each worker compiled them all): every length 0-200 (the
    vector steps' tails; chunks of 64 on 2 and 3 threads) and in place, and lengths of several
    ``MIN_CHUNK`` on 1-3 threads, against numpy's indexing."""
    byte_maps = (x86_byte_maps() if host_target().name == "x86"
                 else (host_target().byte_map(), portable_byte_map()))
    for byte_map in dict.fromkeys(byte_maps):
        _check_byte_map(byte_map)


def _check_byte_map(byte_map) -> None:
    rng = np.random.default_rng(11)
    table = rng.integers(0, 256, 256).astype(np.uint8)
    for n, threads in [*((n, 1 + n % 3) for n in range(201)), *((3 * MIN_CHUNK + 77, t) for t in (1, 2, 3))]:
        src = rng.integers(0, 256, n).astype(np.uint8)
        dst = np.empty_like(src)
        where = f"{byte_map.name}: {n} bytes on {threads} threads"
        byte_map(table, src, dst, threads)
        np.testing.assert_array_equal(dst, table[src], err_msg=where)
        byte_map(table, src, src, threads)
        np.testing.assert_array_equal(src, dst, err_msg=where)
    with pytest.raises(ValueError, match="src and dst differ in size: 3 and 4 elements"):
        byte_map(table, np.zeros(3, np.uint8), np.zeros(4, np.uint8))


def test_pair_map_matches_numpy_over_tails():
    """The portable pair lookup and the host's (built here, not at collection): every length 0-200 (on 1-3
    threads) and lengths of several ``MIN_CHUNK`` on 1-3 threads, in place into either operand, against
    numpy's indexing; a wrong table or sizes are refused with what was given."""
    for pair_map in dict.fromkeys([portable_pair_map(), host_target().pair_map()]):
        _check_pair_map(pair_map)


def _check_pair_map(pair_map) -> None:
    rng = np.random.default_rng(12)
    table = rng.integers(0, 256, 65536).astype(np.uint8)
    for n, threads in [*((n, 1 + n % 3) for n in range(201)), *((3 * MIN_CHUNK + 77, t) for t in (1, 2, 3))]:
        a, b = rng.integers(0, 256, (2, n)).astype(np.uint8)
        want = table[a.astype(np.intp) * 256 + b]
        dst = np.empty_like(a)
        where = f"{pair_map.name}: {n} bytes on {threads} threads"
        pair_map(table, a, b, dst, threads)
        np.testing.assert_array_equal(dst, want, err_msg=where)
        pair_map(table, a, b, b, threads)
        np.testing.assert_array_equal(b, want, err_msg=where)
    with pytest.raises(ValueError, match=r"table must be 65536 contiguous bytes, got dtype uint8 shape"):
        pair_map(table[:256], a, a, a)
    with pytest.raises(ValueError, match="a and b and dst differ in size: 3 and 4 and 3 elements"):
        pair_map(table, np.zeros(3, np.uint8), np.zeros(4, np.uint8), np.zeros(3, np.uint8))


@pytest.mark.parametrize("flags", list(dict.fromkeys([(), host_target().vector_flags()])), ids=str)
def test_linear_quant_loops_match_onnx_reference_on_ties_and_extremes(flags):
    """The compiled QuantizeLinear on exact ties (scale 0.5: rint's ties to even), near ties, zeros of
    both signs, a subnormal and values past the 8-bit range, over lengths that leave every vector
    tail, and DequantizeLinear of every code, on 1-3 threads (chunks of 64): the same bits as
    onnx.reference, built without and with the host's vector flags; past int32 (the reference's cast
    overflows there) saturated, a NaN 0; wrong arrays refused."""
    rng = np.random.default_rng(13)
    k = np.arange(-300, 300, dtype=np.float64)
    for dtype in (np.uint8, np.int8):
        loops, zero = linear_quant(np.dtype(dtype), flags), dtype(3)
        node = {op: helper.make_node(op, ["x", "s", "z"], ["y"])
                for op in ("QuantizeLinear", "DequantizeLinear")}
        quantize, dequantize = (load_op("", op, OPSET)(node[op], RUN_PARAMS).run for op in node)
        for scale in (np.float32(0.5), np.float32(0.37)):
            x = np.concatenate([(k + 0.5) * scale, k * scale, rng.standard_normal(77) * 400,
                                [3e8, -3e8, 0.0, -0.0, 1e-45]]).astype(np.float32)
            for n, threads in ((x.size, 1), (x.size, 3), (x.size - 1, 2), (17, 2), (1, 3), (0, 2)):
                q = np.empty(n, dtype)
                loops.quantize(x[:n], q, float(scale), float(zero), threads)
                np.testing.assert_array_equal(q, quantize(x[:n], scale, zero)[0])
            codes = np.arange(256, dtype=np.uint8).view(dtype)
            for threads in (1, 3):
                out = np.empty(256, np.float32)
                loops.dequantize(codes, out, float(zero), float(scale), threads)
                np.testing.assert_array_equal(out, dequantize(codes, scale, zero)[0])
        q = np.ones(5, dtype)     # past int32 (where onnx.reference's cast overflows): saturated; NaN: 0
        loops.quantize(np.array([np.inf, -np.inf, 3e38, -3e38, np.nan], np.float32), q, 0.5, 3.0)
        info = np.iinfo(dtype)
        np.testing.assert_array_equal(q, [info.max, info.min, info.max, info.min, 0])
        with pytest.raises(ValueError, match="x must be a contiguous 1-D float32 array, got dtype float64"):
            loops.quantize(np.zeros(2), q, 1.0, 0.0)
        with pytest.raises(ValueError, match="x and q differ in size: 2 and 1 elements"):
            loops.quantize(np.zeros(2, np.float32), q[:1], 1.0, 0.0)


def test_threads_a_compiled_loop_runs_on():
    """How many threads an elementwise loop takes (load-independent: one per ``MIN_CHUNK`` elements, at
    most those given, at least one): ResNet-18's 64x112x112 stem output on both of two threads, a
    512x7x7 output on one."""
    assert threads_for(64 * 112 * 112, 2) == 2 and threads_for(512 * 7 * 7, 2) == 1
    for size in (0, 1, MIN_CHUNK - 1, MIN_CHUNK, 2 * MIN_CHUNK - 1, 2 * MIN_CHUNK, 10 * MIN_CHUNK):
        for threads in (1, 2, 3, 4):
            used = threads_for(size, threads)
            assert 1 <= used <= threads and (used == 1 or size // used >= MIN_CHUNK)
            assert used == threads or size < (used + 1) * MIN_CHUNK


@pytest.mark.parametrize("flags", list(dict.fromkeys([(), host_target().vector_flags()])), ids=str)
def test_float_loops_match_numpy_bit_for_bit(flags):
    """The compiled Relu and Add/Sub/Mul/Div over every length 0-200 (chunks of 64 on 2 and 3 threads)
    and one of several ``MIN_CHUNK`` on 1-3 threads, with NaNs, infinities and zeros of both signs
    among the values, into a new array and in place: numpy's bits (Relu: a NaN kept, -0.0 made +0.0);
    wrong arrays refused."""
    loops, rng = float_map(flags), np.random.default_rng(14)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -3.5], np.float32)
    for n, threads in [*((n, 1 + n % 3) for n in range(201)), *((3 * MIN_CHUNK + 77, t) for t in (1, 2, 3))]:
        a, b = (np.where(rng.random(n) < 0.1, rng.choice(special, n), rng.standard_normal(n) * 9)
                .astype(np.float32) for _ in range(2))
        y = np.empty_like(a)
        loops.relu(a, y, threads)
        np.testing.assert_array_equal(y.view(np.uint32), np.maximum(a, 0).view(np.uint32))
        for name in OPERATORS:
            with np.errstate(all="ignore"):
                want = getattr(np, name)(a, b)
            loops.binary(name, a, b, y, threads)
            np.testing.assert_array_equal(y.view(np.uint32), want.view(np.uint32))
            kept = a.copy()
            loops.binary(name, kept, b, kept, threads)                       # in place
            np.testing.assert_array_equal(kept.view(np.uint32), want.view(np.uint32))
    with pytest.raises(ValueError, match="contiguous 1-D float32 arrays, got dtype float64 shape \\(2,\\)"):
        loops.relu(np.zeros(2), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="the arrays differ in size: 2, 3, 2 elements"):
        loops.binary("add", *(np.zeros(k, np.float32) for k in (2, 3, 2)))
    with pytest.raises(ValueError, match="FloatMap computes add, subtract, multiply, divide, not 'power'"):
        loops.binary("power", *(np.zeros(2, np.float32) for _ in range(3)))


def test_a_view_step_repeats_only_a_view():
    """``plan.viewing``: a Flatten that gave a view of its input repeats no call; one that had to copy
    (a transposed input) has no call to repeat."""
    run, last_call = viewing(lambda inputs, reuse: [inputs[0].reshape(inputs[0].shape[0], -1)])
    x = np.zeros((2, 3, 4), np.float32)
    run([x], False)
    assert last_call() == (no_call, ())
    run([x.transpose(0, 2, 1)], False)
    assert last_call() is None


def test_a_lookup_that_may_not_overwrite_its_input_writes_one_kept_buffer():
    """A pair lookup whose first input another step still reads (a MobileNetV2 residual's block input)
    writes the same buffer on every run, so the plan may repeat its call; a second input stored in
    another order is copied into new memory on each run, so its call (which skips the copy) is not the
    same and is not repeated."""
    table = np.arange(65536, dtype=np.uint16).astype(np.uint8)       # (a * 256 + b) mod 256 = b
    looked = pair_lookup(table)
    a, b = (np.arange(60, dtype=np.uint8).reshape(3, 4, 5) + k for k in (0, 7))
    first = looked([a, b], False)[0]
    call = looked.last_call()
    second = looked([a, b], False)[0]
    assert np.shares_memory(first, second) and looked.last_call() is call
    assert not np.shares_memory(first, a)
    np.testing.assert_array_equal(second, b)
    b_stored_otherwise = np.ascontiguousarray(b.transpose(2, 0, 1)).transpose(1, 2, 0)
    np.testing.assert_array_equal(looked([a, b_stored_otherwise], False)[0], b)
    copied = looked.last_call()
    np.testing.assert_array_equal(looked([a, b_stored_otherwise], False)[0], b)
    assert looked.last_call() is not copied
    assert np.shares_memory(looked([a, b], True)[0], a)                   # in place where it may
