"""x86's AVX2 quantization arithmetic against onnx.reference, bit for bit: the QuantizeLinear loop
(``targets/x86/quant_c.py``) on ties, their float32 neighbours, zeros, subnormals, infinities, NaN and
random values, over lengths that leave every tail, on 1-3 threads; the computed pair lookups
(``targets/x86/pair_c.py``, AVX2 and AVX-512) of random residual chains over all 65,536 pairs and random
lengths, in place and not; and the ONNX backend's choice between a computed pair and the table
(``onnx/pair_arith.py``)."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from helpers import tiers
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_models import model

from loopopt.onnx import backend, elementwise
from loopopt.targets.pair_program import PairProgram
from loopopt.targets.registry import host_target
from loopopt.targets.threaded_c import MIN_CHUNK
from loopopt.targets.x86.isa import AVX2, AVX512, available_isas, cpu_flags

OPSET = 21
ELEM = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
needs_avx2 = pytest.mark.skipif(AVX2.name not in available_isas(), reason="this CPU does not run AVX2")
needs_avx512bw = pytest.mark.skipif(AVX512.name not in available_isas() or "avx512bw" not in cpu_flags(),
                                    reason="this CPU does not run AVX-512 F and BW")
PAIR_ISAS = pytest.mark.parametrize("isa", [pytest.param(AVX2.name, marks=needs_avx2),
                                            pytest.param(AVX512.name, marks=needs_avx512bw)])


def _reference_quantize(x: np.ndarray, scale: np.float32, zero) -> np.ndarray:
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    inits = [numpy_helper.from_array(np.asarray(scale), "s"), numpy_helper.from_array(np.asarray(zero), "z")]
    proto = model([node], [("x", TensorProto.FLOAT, [x.size])], [("y", ELEM[type(zero)], [x.size])], inits,
                  opset=OPSET)
    with np.errstate(all="ignore"):
        return ReferenceEvaluator(proto).run(None, {"x": x})[0]


def _check_avx2_quantize(data):
    """Values at and next to every tie k + 1/2 of x / scale and every integer k (k across the 8-bit range
    and past it) for a random scale (tiny to large, either sign), random values, both zeros and a
    subnormal, in a random order; a random length and thread count: onnx.reference's bits; built with
    AVX2's flags or as this CPU's loops are (``x86_linear_quant``: the widest ISA's flags)."""
    from loopopt.targets.x86.quant_c import avx2_linear_quant, x86_linear_quant
    build = data.draw(st.sampled_from([avx2_linear_quant, x86_linear_quant]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    dtype = data.draw(st.sampled_from([np.uint8, np.int8]))
    info = np.iinfo(dtype)
    zero = dtype(rng.integers(info.min, info.max + 1))
    scale = np.float32(data.draw(st.sampled_from([1e-30, 1e-6, 0.0078125, 0.37, 0.5, 3.0, 1e20]))
                       * rng.uniform(0.5, 2) * data.draw(st.sampled_from([1, -1])))
    k = np.arange(-400, 400, dtype=np.float32)
    exact = np.concatenate([(k + np.float32(0.5)) * scale, k * scale]).astype(np.float32)
    up, down = (np.nextafter(exact, np.float32(direction)) for direction in (np.inf, -np.inf))
    near = np.concatenate([exact, up, down])
    x = np.concatenate([near, (rng.standard_normal(300) * 200 * scale).astype(np.float32),
                        np.float32([0.0, -0.0, 1e-45, -1e-45])])
    x = rng.permutation(x)[:data.draw(st.integers(0, x.size))].astype(np.float32)
    q = np.empty(x.size, dtype)
    threads = data.draw(st.integers(1, 3))
    with mock.patch("loopopt.targets.threaded_c.MIN_CHUNK", 1):
        build(np.dtype(dtype)).quantize(x, q, float(scale), float(zero), threads)
    np.testing.assert_array_equal(q, _reference_quantize(x, scale, zero))


test_avx2_quantize_quick, test_avx2_quantize_slow = tiers(_check_avx2_quantize, 10, 80, st.data(),
                                                          marks=(needs_avx2,))


@needs_avx2
def test_avx2_quantize_saturates_past_int32_and_makes_nan_0():
    """Past int32 (where onnx.reference's cast overflows) saturated, a NaN 0, as the portable loop."""
    from loopopt.targets.x86.quant_c import avx2_linear_quant
    for dtype in (np.uint8, np.int8):
        q = np.ones(37, dtype)
        x = np.resize(np.float32([np.inf, -np.inf, 3e38, -3e38, np.nan]), 37)
        avx2_linear_quant(np.dtype(dtype)).quantize(x, q, 0.5, 3.0)
        info = np.iinfo(dtype)
        np.testing.assert_array_equal(q, np.resize([info.max, info.min, info.max, info.min, 0], 37))


def _draw_chain(data, rng) -> tuple:
    """A random residual chain's dtypes (a, b, output), combining op, Relu or not, scales and zero points."""
    dtypes = [data.draw(st.sampled_from([np.uint8, np.int8])) for _ in range(3)]
    zeros = [t(rng.integers(np.iinfo(t).min, np.iinfo(t).max + 1)) for t in dtypes]
    scales = [np.float32(rng.uniform(0.002, 0.5)) for _ in range(3)]
    return dtypes, data.draw(st.sampled_from(["Add", "Sub", "Mul"])), data.draw(st.booleans()), scales, zeros


def _chain_model(dtypes, combine, relu, scales, zeros, n: int | str = "n"):
    """The model of a residual chain: DequantizeLinear of two 8-bit tensors of shape [n] -> ``combine`` ->
    Relu if ``relu`` -> QuantizeLinear."""
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in
             [*((f"s{k}", scales[k]) for k in range(3)), *((f"z{k}", zeros[k]) for k in range(3))]]
    nodes = [helper.make_node("DequantizeLinear", ["a", "s0", "z0"], ["da"]),
             helper.make_node("DequantizeLinear", ["b", "s1", "z1"], ["db"]),
             helper.make_node(combine, ["da", "db"], ["c"]),
             *([helper.make_node("Relu", ["c"], ["r"])] if relu else []),
             helper.make_node("QuantizeLinear", ["r" if relu else "c", "s2", "z2"], ["y"])]
    return model(nodes, [("a", ELEM[dtypes[0]], [n]), ("b", ELEM[dtypes[1]], [n])],
                 [("y", ELEM[dtypes[2]], [n])], inits, opset=OPSET)


def _program(dtypes, combine, relu, scales, zeros) -> PairProgram:
    """The chain's program, written out here (independently of ``onnx/pair_arith.py``)."""
    value, constant = (lambda k: ("value", k)), (lambda k: ("constant", k))
    ops = [("sub", value(0), constant(0)), ("mul", value(2), constant(1)),
           ("sub", value(1), constant(2)), ("mul", value(4), constant(3)),
           ({"Add": "add", "Sub": "sub", "Mul": "mul"}[combine], value(3), value(5))]
    if relu:
        ops.append(("max", constant(4), value(6)))
    numbers = (float(zeros[0]), float(scales[0]), float(zeros[1]), float(scales[1]), 0.0, float(scales[2]),
               float(zeros[2]))
    return PairProgram((np.dtype(dtypes[0]), np.dtype(dtypes[1])), tuple(ops), len(ops) + 1, 5, 6,
                       np.dtype(dtypes[2]), numbers)


def _check_pair_program(isa, data):
    """A random chain's program in ``isa``'s intrinsics: onnx.reference's output on all 65,536 pairs, and on
    random arrays of a random length (every tail) on 1-3 threads, into a new array and in place over either
    input."""
    from loopopt.targets.x86 import pair_c
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    chain = _draw_chain(data, rng)
    proto, dtypes = _chain_model(*chain), chain[0]
    arith = getattr(pair_c, f"{isa}_pair_arith")(_program(*chain))
    patterns = np.arange(256, dtype=np.uint8)
    every = {"a": np.repeat(patterns, 256).view(dtypes[0]), "b": np.tile(patterns, 256).view(dtypes[1])}
    reference = ReferenceEvaluator(proto)
    np.testing.assert_array_equal(arith.table(), reference.run(None, every)[0])
    n = data.draw(st.integers(0, 400))
    a, b = (rng.integers(np.iinfo(t).min, np.iinfo(t).max + 1, n).astype(t) for t in dtypes[:2])
    want = reference.run(None, {"a": a, "b": b})[0]
    threads = data.draw(st.integers(1, 3))
    with mock.patch("loopopt.targets.threaded_c.MIN_CHUNK", 1):
        out = np.empty(n, dtypes[2])
        arith(a, b, out, threads)
        np.testing.assert_array_equal(out, want)
        for overwritten in ("a", "b")[:2 if dtypes[2] == dtypes[0] == dtypes[1] else 0]:
            a_in, b_in = a.copy(), b.copy()
            into = a_in if overwritten == "a" else b_in
            arith(a_in, b_in, into, threads)
            np.testing.assert_array_equal(into, want)


test_pair_program_quick, test_pair_program_slow = tiers(_check_pair_program, 8, 60, st.data(),
                                                        marks=(PAIR_ISAS,))


@PAIR_ISAS
def test_pair_program_refuses_wrong_arrays(isa):
    from loopopt.targets.x86 import pair_c
    program = _program([np.uint8, np.int8, np.uint8], "Add", True, [np.float32(0.1)] * 3,
                       [np.uint8(3), np.int8(-2), np.uint8(0)])
    arith = getattr(pair_c, f"{isa}_pair_arith")(program)
    with pytest.raises(ValueError, match="b must be a contiguous 1-D int8 array, got dtype uint8 shape"):
        arith(np.zeros(4, np.uint8), np.zeros(4, np.uint8), np.zeros(4, np.uint8))
    with pytest.raises(ValueError, match="a, b and dst differ in size: 4, 3 and 4 elements"):
        arith(np.zeros(4, np.uint8), np.zeros(3, np.int8), np.zeros(4, np.uint8))


def test_the_backend_computes_a_pair_chain_only_where_it_gives_the_table():
    """A residual chain (DequantizeLinear x2 -> Add -> Relu -> QuantizeLinear) runs as the host target's
    computed pair where it has one (AVX2 or AVX-512 the widest ISA here), else as the table lookup; a
    computed pair whose table differs from the chain's (here: a program with the operands of Sub swapped,
    standing in for a target's wrong code) is not used: the lookup runs, the output onnx.reference's."""
    rng = np.random.default_rng(3)
    scales = [np.float32(0.043), np.float32(0.021), np.float32(0.05)]
    chain = ([np.uint8, np.int8, np.uint8], "Sub", True, scales, [np.uint8(131), np.int8(-5), np.uint8(0)])
    n = 2 * MIN_CHUNK + 77          # two threads' chunks
    proto = _chain_model(*chain, n)
    a = rng.integers(0, 256, n).astype(np.uint8)
    b = rng.integers(-128, 128, n).astype(np.int8)
    want = ReferenceEvaluator(proto).run(None, {"a": a, "b": b})[0]
    target = host_target()
    real = target.pair_arith

    def swapped(program):
        kind, lhs, rhs = program.ops[4]
        ops = (*program.ops[:4], (kind, rhs, lhs), *program.ops[5:])
        return real(PairProgram(program.sources, ops, program.result, program.scale, program.zero,
                                program.out, program.constants))

    for pair_arith, computes in ((real, real(_program(*chain)) is not None), (swapped, False)):
        spy = mock.Mock(wraps=elementwise.pair_computed)
        made = (lambda self, program, make=pair_arith: make(program))
        with mock.patch.object(type(target), "pair_arith", made), \
                mock.patch.object(elementwise, "pair_computed", spy):
            rep = backend.prepare(proto, strict=True, threads=2)
        assert spy.called == computes
        assert [s.op_type for s in rep.plan.steps] == [
            "DequantizeLinear -> DequantizeLinear -> Sub -> Relu -> QuantizeLinear"]
        np.testing.assert_array_equal(rep.run([a, b])[0], want)


def test_chains_the_program_does_not_cover_stay_lookups():
    """A Clip between the Add and the QuantizeLinear (its bounds may be attributes): no program, the table
    lookup runs, onnx.reference's bits."""
    from loopopt.onnx.pair_arith import pair_program
    n = 300
    proto = _chain_model([np.uint8, np.uint8, np.int8], "Add", False, [np.float32(0.1)] * 3,
                         [np.uint8(7), np.uint8(200), np.int8(3)], n)
    clipped = helper.make_node("Clip", ["c", "low", "high"], ["clipped"])
    proto.graph.node.insert(3, clipped)
    proto.graph.node[4].input[0] = "clipped"
    proto.graph.initializer.extend([numpy_helper.from_array(np.float32(-1.0), "low"),
                                    numpy_helper.from_array(np.float32(2.5), "high")])
    programs = []
    with mock.patch("loopopt.onnx.pair_arith.pair_program", lambda *a: programs.append(pair_program(*a))), \
            mock.patch.object(elementwise, "pair_computed") as computed:
        rep = backend.prepare(proto, strict=True)
    assert programs == [None] and not computed.called
    assert [s.op_type for s in rep.plan.steps] == [
        "DequantizeLinear -> DequantizeLinear -> Add -> Clip -> QuantizeLinear"]
    rng = np.random.default_rng(4)
    a, b = (rng.integers(0, 256, n).astype(np.uint8) for _ in range(2))
    want = ReferenceEvaluator(proto).run(None, {"a": a, "b": b})[0]
    np.testing.assert_array_equal(rep.run([a, b])[0], want)
