"""The plan's buffers shared by liveness (loopopt.onnx.arena): the offsets never overlap two buffers alive
at one step (random buffers); a plan walk (each value's bytes as a run leaves them, against the graph's
own liveness, not the arena's) finds no value written over another still to be read, and finds one when
the offsets are broken; models (the small test nets, random graphs with fan-out, views, in-place steps and
residual adds, and bench_onnx's ResNet-18 at 32x32 in the slow tier) give the bits of the same plan without
sharing, run after run, through ``run``, ``values`` (keep) and ``profile`` (times)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import tiers
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_models import model, pooled_stem, quantized, residual_net, small_cnn

from loopopt.buffers import ALIGNMENT
from loopopt.onnx import arena, backend
from loopopt.onnx.arena import Buffer

RNG = np.random.default_rng(15)


def _x(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _check_offsets(data):
    count = data.draw(st.integers(1, 40))
    buffers = []
    for _ in range(count):
        first = data.draw(st.integers(0, 30))
        size, tail, span = (data.draw(st.integers(1, 5000)), data.draw(st.sampled_from([0, 64, 200])),
                            data.draw(st.integers(0, 8)))
        buffers.append(Buffer(None, (size,), np.dtype(np.uint8), tail, first, first + span))
    places = arena.offsets(buffers)
    assert all(offset % ALIGNMENT == 0 for offset in places)
    for i, (a, at) in enumerate(zip(buffers, places)):
        for b, bt in zip(buffers[i + 1:], places[i + 1:]):
            alive = a.first <= b.last and b.first <= a.last
            assert not (alive and at < bt + b.size and bt < at + a.size), (a, at, b, bt)
    steps = range(max(b.last for b in buffers) + 1)
    peak = max(sum(b.size for b in buffers if b.first <= s <= b.last) for s in steps)
    assert peak <= max(o + b.size for o, b in zip(places, buffers)) <= sum(b.size for b in buffers)


test_offsets_quick, test_offsets_slow = tiers(_check_offsets, 30, 300, st.data())


def test_offsets_reuse_a_dead_buffers_place():
    """A chain of equal buffers each alive over two steps takes two places; a smaller one later takes the
    place of one no longer alive, not a new one."""
    chain = [Buffer(None, (1000,), np.dtype(np.uint8), 64, i, i + 1) for i in range(6)]
    places = arena.offsets(chain)
    assert sorted(set(places)) == [0, chain[0].size]
    sizes = [Buffer(None, (n,), np.dtype(np.uint8), 0, 0, last)
             for n, last in ((4096, 3), (640, 1), (4096, 3))]
    small = Buffer(None, (600,), np.dtype(np.uint8), 0, 2, 3)     # alive with the 4096-byte ones only
    places = arena.offsets([*sizes, small])
    assert places[3] == places[1] == 8192     # where the 640-byte one was, after the 4096-byte ones


def _bounds(array: np.ndarray) -> tuple[int, int]:
    low, high = np.lib.array_utils.byte_bounds(array)
    return low, high


def overwritten(rep, given: dict[str, np.ndarray]) -> list[str]:
    """Walk ``rep``'s plan over a step-by-step run on ``given``: each step that writes a buffer
    (``owns_outputs``) against every value alive across it (a graph input or constant, a value an earlier
    step gave that a later step reads, a model output): the pairs whose bytes overlap, named; and after
    each step, the arena's buffers alive then whose tail (the zero bytes a reader may read past their
    end) is not zero."""
    plan, made, dirty = rep.plan, {}, []
    runs = [step.run for step in plan.steps]

    def ran(inputs, reuse, run, index):
        made[plan.steps[index].node] = outputs = run(inputs, reuse)
        shared = plan.arena
        for buffer, offset in zip(shared.buffers, shared.offsets):
            tail = shared.memory[offset + buffer.nbytes:offset + buffer.nbytes + buffer.tail]
            if buffer.first <= index <= buffer.last and tail.any():
                dirty.append(f"a tail after {plan.steps[index].node}")
        return outputs

    for index, (step, run) in enumerate(zip(plan.steps, runs)):
        step.run = lambda inputs, reuse, run=run, index=index: ran(inputs, reuse, run, index)
    try:
        plan.run(given, times={})
    finally:
        for step, run in zip(plan.steps, runs):
            step.run = run
    end = len(plan.steps)
    born = {name: -1 for name in (*given, *plan.constants)}
    values = {**given, **plan.constants}
    last = {name: end for name in (*born, *plan.outputs)}
    for index, step in enumerate(plan.steps):
        for name in step.inputs:
            if name:
                last[name] = max(last.get(name, index), index)
        for name, value in zip(step.outputs, made[step.node]):
            born[name], values[name] = index, value
    found = []
    for index, step in enumerate(plan.steps):
        if not step.owns_outputs:
            continue
        for name, value in zip(step.outputs, made[step.node]):
            low, high = _bounds(value)
            for other, kept in values.items():
                if other in step.outputs or not (born[other] < index < last.get(other, born[other])):
                    continue
                other_low, other_high = _bounds(np.asarray(kept))
                if low < other_high and other_low < high:
                    found.append(f"{step.node} writes {name} over {other}")
    return found + dirty


def _same_as_apart(proto: onnx.ModelProto, inputs: list[dict[str, np.ndarray]], threads: int = 1):
    """``proto`` prepared twice, one plan sharing its buffers and one not: the same bits from every run
    (``run``, then ``values`` and ``profile``), no live value overwritten, the shared rep."""
    shared = backend.prepare(proto, strict=True, threads=threads)
    apart = backend.prepare(proto, strict=True, threads=threads)
    apart.plan.share = False
    for given in inputs:
        for got, want in zip(shared.run(given), apart.run(given)):
            np.testing.assert_array_equal(got, want)
    assert shared.plan.arena is not None and apart.plan.arena is None
    given = inputs[-1]
    assert overwritten(shared, given) == []
    kept, want = shared.values(given), apart.values(given)
    assert kept.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(kept[name], want[name], err_msg=name)
    assert shared.profile(given, runs=1).keys() == apart.profile(given, runs=1).keys()
    for got, want in zip(shared.run(given), apart.run(given)):      # after the step-by-step runs
        np.testing.assert_array_equal(got, want)
    outputs = shared.plan.run(given)
    memory = shared.plan.arena.memory
    assert not any(np.may_share_memory(outputs[name], memory) for name in shared.plan.outputs)
    return shared


def test_small_nets_share_and_give_the_same_bits(tmp_path):
    """The ResNet/MobileNetV2-shaped net (shortcuts written over, Relu in place, a Flatten view), the small
    CNN (batch 2) and a quantized stem (QOperator and QDQ: 8-bit lookups, residual tails): the bits of the
    plan without sharing over five runs, and the shared memory smaller than the buffers apart."""
    nets = {"residual": (residual_net(), (2, 3, 9, 11)), "small": (small_cnn(), (2, 3, 9, 11)),
            "qoperator": (quantized(pooled_stem(), tmp_path, "QOperator"), (2, 3, 9, 11)),
            "qdq": (quantized(residual_net(), tmp_path, "QDQ"), (2, 3, 9, 11))}
    for name, (proto, shape) in nets.items():
        rep = _same_as_apart(proto, [{"x": _x(*shape)} for _ in range(5)])
        assert rep.plan.arena.memory.nbytes < rep.plan.arena.apart, name
        if name == "residual":
            assert [s.node for s in rep.plan.steps if s.overwrites and s.reuse] == ["body2", "project"]
            order = [step.node for step in rep.plan.steps]
            assert [order[r.start:r.stop] for r in rep.plan.repeats.values()] == [order[1:]]


def test_the_walk_finds_buffers_alive_together_placed_over_each_other(monkeypatch):
    """Every buffer at offset 0: the walk names a value written over one still to be read."""
    monkeypatch.setattr(arena, "offsets", lambda buffers: [0] * len(buffers))
    rep = backend.prepare(residual_net(), strict=True)
    x = _x(2, 3, 9, 11)
    rep.run([x])
    assert overwritten(rep, {"x": x})


CHANNELS, HEIGHT, WIDTH = 8, 5, 6
SHAPE = [1, CHANNELS, HEIGHT, WIDTH]


def _graph(data) -> onnx.ModelProto:
    """A random graph of 4-D values of one shape: 3x3 and 1x1 Convs, Relus (in place where their input is
    read by nothing else), MaxPools, Adds of two values (a residual), Flatten -> Reshape back (views), each
    reading any earlier value (fan-out); its last value and maybe another an output."""
    nodes, inits, values = [], [], ["x"]
    shape = numpy_helper.from_array(np.array(SHAPE, np.int64), "shape")
    inits.append(shape)
    for index in range(data.draw(st.integers(2, 9))):
        op = data.draw(st.sampled_from(["conv3", "conv1", "relu", "pool", "add", "view"]))
        pick = lambda: values[data.draw(st.integers(max(0, len(values) - 4), len(values) - 1))]
        name = f"v{index}"
        if op.startswith("conv"):
            size = 3 if op == "conv3" else 1
            weights = (RNG.standard_normal((CHANNELS, CHANNELS, size, size)) / (3 * size)).astype(np.float32)
            inits += [numpy_helper.from_array(weights, f"w{index}"),
                      numpy_helper.from_array(_x(CHANNELS), f"b{index}")]
            nodes.append(helper.make_node("Conv", [pick(), f"w{index}", f"b{index}"], [name],
                                          name=f"conv{index}", pads=[size // 2] * 4))
        elif op == "relu":
            nodes.append(helper.make_node("Relu", [pick()], [name]))
        elif op == "pool":
            nodes.append(helper.make_node("MaxPool", [pick()], [name], kernel_shape=[3, 3],
                                          pads=[1, 1, 1, 1]))
        elif op == "add":
            nodes.append(helper.make_node("Add", [pick(), pick()], [name]))
        else:
            nodes += [helper.make_node("Flatten", [pick()], [f"{name}_flat"]),
                      helper.make_node("Reshape", [f"{name}_flat", "shape"], [name])]
        values.append(name)
    outputs = [values[-1]] + ([values[data.draw(st.integers(1, len(values) - 1))]] if data.draw(st.booleans())
                              else [])
    return model(nodes, [("x", TensorProto.FLOAT, SHAPE)],
                 [(name, TensorProto.FLOAT, SHAPE) for name in dict.fromkeys(outputs)], inits, opset=17)


def _check_random_graph(data):
    proto = _graph(data)
    inputs = [{"x": _x(*SHAPE)} for _ in range(4)]
    rep = _same_as_apart(proto, inputs, threads=data.draw(st.integers(1, 2)))
    reference = ReferenceEvaluator(proto).run(None, inputs[-1])
    for got, want in zip(rep.run(inputs[-1]), reference):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


test_random_graph_quick, test_random_graph_slow = tiers(_check_random_graph, 6, 40, st.data())


@pytest.mark.slow
def test_bench_models_give_the_same_bits(tmp_path, name: str = "resnet18"):
    """bench_onnx's ResNet-18 (random weights) at 32x32, fp32, int8 QOperator and QDQ: the bits of the plan
    without sharing, every step repeated after three runs as without it. ResNet-50 and MobileNetV2 (108 s
    more with a cold kernel cache) were checked so at 224x224 (docs/benchmarks.md, the arena's section)."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import bench_onnx
    for precision, path in bench_onnx.export(name, 32, tmp_path).items():
        proto = onnx.load(str(path))
        rng = np.random.default_rng(3)
        rep = _same_as_apart(proto, [{"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
                                     for _ in range(4)])
        assert rep.plan.arena.memory.nbytes < rep.plan.arena.apart / 2, precision
