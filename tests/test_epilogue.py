"""Fused epilogues on the CPU (``Schedule.clip``, ``Schedule.add_residual``): random float schedules
against the reference ``clip(op.reference(...) + residual)``, where the register block applies them and
where a pass after the nest does, the refusals, and the kernel's per-call residual."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import INT_ISAS, ISAS, conv_ops, gemm_ops, matmul_ops, quantized_schedules, schedules, tiers
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx_models import expected, model

import loopopt as lo
from loopopt.activation import Clip
from loopopt.codegen import generate
from loopopt.dataflows import output_stationary
from loopopt.epilogue import RESIDUAL, Epilogue
from loopopt.measure import checked
from loopopt.onnx import backend
from loopopt.quant import clip_requantized
from loopopt.quant_reference import random_call, reference_output
from loopopt.schedule import ScheduleError
from loopopt.schedule_file import schedule_from_toml, to_toml
from loopopt.targets.x86.costs import count
from loopopt.targets.x86.isa import ISAS as X86_ISAS
from loopopt.tune.choice import first_choice

CLIPS = [None, (0.0, None), (0.0, 6.0), (None, 0.25), (-0.5, 0.5)]


def _with_epilogue(schedule: lo.Schedule, residual: bool, clip) -> lo.Schedule:
    if residual:
        schedule = schedule.add_residual()
    return schedule.clip(*clip) if clip else schedule


def _matches(data, isa):
    """A random op (conv with padding, stride, dilation, groups and batch; matmul; Gemm with scales; a
    bfloat16 conv) and schedule (splits, reorders, layouts, parallel and vector loops, register blocks)
    with a residual and/or a clip computes the reference's epilogue."""
    op = data.draw(st.one_of(conv_ops(max_hw=7), matmul_ops(max_mn=13, max_k=11),
                             gemm_ops(max_mn=13, max_k=11), conv_ops(max_hw=6, dtype="bfloat16")))
    residual = data.draw(st.booleans())
    clip = data.draw(st.sampled_from(CLIPS[0 if residual else 1:]))
    schedule = _with_epilogue(data.draw(schedules(op, isa)), residual, clip)
    kernel = schedule.compile(isa)
    kernel.set_threads(2 if schedule.parallel_loop is not None else 1)
    seed = data.draw(st.integers(0, 3))
    ok, error, _ = checked(kernel, seed=seed)
    assert ok, (schedule.pseudocode(isa), error)
    if kernel.generated.output_over_residual:
        _writes_over_the_residual(kernel, seed)


def _writes_over_the_residual(kernel: lo.Kernel, seed: int) -> None:
    """A call writing the output over the residual gives, bit for bit, the output of the kernel's own
    call, in the memory of the residual it read (its packed copy where it could not read it as given)."""
    op = kernel.op
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(op.tensor(t).shape).astype(np.float32) for t in op.call_tensors]
    residual = rng.standard_normal(op.tensor(op.output).shape).astype(np.float32)
    expected = kernel(*arrays, residual)
    call = kernel.with_constants(*arrays[1:])
    given = residual.copy()
    written = call(arrays[0], given, over_residual=True)
    np.testing.assert_array_equal(written, expected)
    own = call(arrays[0], residual)       # the next call, not over it: the kernel's own buffer
    np.testing.assert_array_equal(own, expected)
    assert not np.shares_memory(own, written) and not np.shares_memory(own, residual)


test_epilogue_matches_the_reference, test_epilogue_matches_the_reference_more = tiers(
    _matches, 1, 6, data=st.data(), isas=ISAS)


def test_a_block_holding_final_sums_applies_it_to_its_accumulators():
    """output_stationary's register block holds whole sums: the residual load, add and clip are on its
    accumulators before their store (no pass after the nest); odd channels leave a masked tail."""
    op = lo.Conv2d(6, 21, 3, stride=2, padding=(1, 2), batch=2, height=9, width=7)
    schedule = output_stationary(op).add_residual().clip(0.0, 6.0)
    avx512 = generate(schedule, X86_ISAS["avx512"]).source          # the C, generated on any CPU
    assert "after the nest" not in avx512
    assert "_mm512_min_ps(_mm512_set1_ps(6.0f), _mm512_max_ps(_mm512_set1_ps(0.0f), _mm512_add_ps(" in avx512
    kernel = schedule.compile(ISAS[0])
    assert "after the nest" not in kernel.source and checked(kernel)[0]
    plain = lo.Schedule(op).clip(low=0.0).compile(kernel.isa)
    assert "O: Clip(low=0.0, high=None), over its storage after the nest" in plain.source
    # the x86 kernel model counts the pass as a site, the block's epilogue in its stores
    assert "epilogue" in [site.name for site in count(lo.Schedule(op).clip(low=0.0), "avx2").sites]
    stores = {name: next(site.work for site in count(s, "avx2").sites if site.name == "register block store")
              for name, s in (("fused", schedule), ("plain", output_stationary(op)))}
    fused, plain = stores["fused"], stores["plain"]      # per accumulator: a residual load, add, max, min
    assert fused.vector_ops == plain.vector_ops + 3 * fused.stores
    assert fused.loads == plain.loads + fused.stores


def test_the_kernel_takes_the_residual_after_the_bias_and_with_each_call():
    op = lo.Conv2d(3, 5, 3, padding=1, height=4, width=6)
    kernel = output_stationary(op).add_residual().compile(ISAS[0])
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(op.tensor(t).shape).astype(np.float32) for t in op.call_tensors)
    r = rng.standard_normal(op.tensor(op.output).shape).astype(np.float32)
    expected = op.reference(x, w, b) + r
    np.testing.assert_allclose(kernel(x, w, b, r), expected, rtol=1e-5, atol=1e-5)
    call = kernel.with_constants(w, b)
    np.testing.assert_allclose(call(x, r), expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"takes 2 array\(s\) per call \(I, the residual\), got 1"):
        call(x)
    with pytest.raises(ValueError, match=r"the residual has shape \(5, 4, 6\) and dtype float32; .* adds "
                                         r"one of shape \(1, 5, 4, 6\)"):
        call(x, r[0])
    assert kernel.generated.arguments == ("I", "W", "B", RESIDUAL, "O")
    assert kernel.call_bytes()["inputs"] == 4 * (x.size + w.size + b.size + r.size)
    assert "O[n, k, oh, ow] = O[n, k, oh, ow] + lo_residual[n, k, oh, ow]" in \
        output_stationary(op).add_residual().pseudocode(ISAS[0])


def test_a_kernel_storing_each_output_once_may_write_it_over_the_residual():
    """A register block holding final sums reads each residual element just before storing the output
    at the same offset: a call may give both the residual's memory (``over_residual``), and the C
    declares those two without ``restrict``; a kernel whose pass after the nest adds the residual to
    the sums it stored may not (ValueError), nor one without a residual."""
    op = lo.Conv2d(6, 21, 3, stride=2, padding=(1, 2), batch=2, height=9, width=7)
    isa = "avx512" if "avx512" in ISAS else ISAS[0]
    kernel = output_stationary(op).add_residual().clip(0.0, 6.0).compile(isa)
    assert kernel.generated.output_over_residual
    assert "const float *lo_residual, float *O)" in kernel.source
    assert "const float *restrict I" in kernel.source
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(op.tensor(t).shape).astype(np.float32) for t in op.call_tensors)
    residual = rng.standard_normal(op.tensor(op.output).shape).astype(np.float32)
    expected = kernel(x, w, b, residual)
    layout = kernel.schedule.layout_of(op.output)
    stored = layout.view(layout.to_storage(residual), residual.shape)   # as the conv before hands it on
    call = kernel.with_constants(w, b)
    written = call(x, stored, over_residual=True)
    np.testing.assert_array_equal(written, expected)
    assert np.shares_memory(written, stored)     # the residual read as it is, then written over
    passed = lo.Schedule(op).add_residual().compile(isa)
    assert not passed.generated.output_over_residual and "restrict lo_residual" in passed.source
    with pytest.raises(ValueError, match=r"over_residual=True needs a kernel that adds a residual and "
                                         r"stores each output once; .* applies its epilogue in a pass over"):
        passed.with_constants(w, b)(x, residual, over_residual=True)
    with pytest.raises(ValueError, match=r"over_residual=True needs .*; .* adds no residual"):
        output_stationary(op).compile(isa).with_constants(w, b)(x, over_residual=True)


INT8 = lo.Conv2d(8, 8, 3, padding=1, height=5, width=5, quant=lo.QuantSpec())


@pytest.mark.parametrize("make, message", [
    (lambda: lo.Schedule(INT8).clip(0.0).compile("scalar"),
     r"quantized SIMD kernels fuse no epilogue \(Clip\(low=0.0, high=None\)\): their own epilogue"),
    (lambda: lo.Schedule(lo.Matmul(64, 8, 64, quant=lo.QuantSpec("binary", True, True, "float32", "binary")))
     .add_residual().compile(), r"x86's binary kernels fuse no epilogue \(\+ residual\): its epilogue turns"),
    (lambda: lo.Schedule(lo.Matmul(16, 16, 32, dtype="bfloat16")).clip(0.0).compile("amx"),
     r"x86's amx tiles kernels fuse no epilogue"),
    (lambda: lo.Schedule(lo.Matmul(4, 4, 4)).clip(0.0).add_residual(),
     r"the residual is added before the clip: add_residual\(\) first, then clip"),
    (lambda: lo.Schedule(lo.Matmul(4, 4, 4)).add_residual().add_residual(), r"the residual is added already"),
])
def test_refusals_name_the_family_or_the_order(make, message):
    with pytest.raises(ScheduleError, match=message):
        make()


def test_the_reference_epilogue_adds_then_clips():
    values = np.array([-2.0, 0.5, 3.0], np.float32)
    residual = np.array([1.0, 1.0, 4.0], np.float32)
    epilogue = Epilogue(Clip(0.0, 6.0), residual=True)
    np.testing.assert_array_equal(epilogue.apply(values, residual), [0.0, 1.5, 6.0])
    with pytest.raises(ValueError, match="pass the residual array"):
        epilogue.apply(values)
    assert str(epilogue) == "+ residual, then Clip(low=0.0, high=6.0)"
    schedule = lo.Schedule(lo.Matmul(4, 4, 4)).add_residual().clip(high=1.0)
    assert schedule_from_toml(to_toml(schedule), schedule.op).fused_epilogue == schedule.fused_epilogue


def _downsampling_block() -> onnx.ModelProto:
    """A ResNet downsampling block whose shortcut Conv comes after the Add's other Conv (the Add goes to
    the first), a Conv read twice (not fused), a broadcast Add (not fused), a Clip of opset 21's inputs
    with one bound, and a Relu that is a graph output (fused: the kernel writes it)."""
    conv = lambda x, w, y, **attrs: helper.make_node("Conv", [x, w, f"{w}_b"], [y], name=w, **attrs)
    nodes = [
        conv("x", "body1", "b1", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["b1"], ["b1r"]),
        conv("b1r", "body2", "b2", pads=[1, 1, 1, 1]), conv("x", "down", "d", strides=[2, 2]),
        helper.make_node("Add", ["d", "b2"], ["a"], name="add"), helper.make_node("Relu", ["a"], ["ar"]),
        conv("ar", "twice", "t"), helper.make_node("Relu", ["t"], ["tr"]),
        helper.make_node("Mul", ["t", "tr"], ["m"]),
        conv("m", "broadcast", "c"), helper.make_node("Add", ["c", "row"], ["cb"]),
        conv("cb", "last", "l"), helper.make_node("Clip", ["l", "", "six"], ["y"], name="clip")]
    shapes = {"body1": (6, 4, 3, 3), "body2": (6, 6, 3, 3), "down": (6, 4, 1, 1), "twice": (6, 6, 1, 1),
              "broadcast": (6, 6, 3, 3), "last": (5, 6, 1, 1)}
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(np.float32(6), "six"),
             numpy_helper.from_array(rng.standard_normal((1, 6, 1, 1)).astype(np.float32), "row")]
    for name, shape in shapes.items():
        inits += [numpy_helper.from_array((rng.standard_normal(shape) / 3).astype(np.float32), name),
                  numpy_helper.from_array(rng.standard_normal(shape[0]).astype(np.float32), f"{name}_b")]
    return model(nodes, [("x", TensorProto.FLOAT, [2, 4, 9, 7])], [("y", TensorProto.FLOAT, None),
                                                                  ("ar", TensorProto.FLOAT, None)],
                 inits, opset=21)


@pytest.mark.slow      # the quick tier fuses test_onnx_backend's residual net
def test_onnx_convs_fuse_their_residual_add_and_clip_where_nothing_else_reads_them():
    proto = _downsampling_block()
    rep = backend.prepare(proto, strict=True)
    labels = {node.name: node.op_type for node in rep.prepared.graph.node}
    fused = {name: tuple(labels[n] for n in node.absorbed) for name, node in rep.lowered.items()
             if node.absorbed}
    assert fused == {"body1": ("Relu",), "body2": ("Add", "Relu"), "last": ("Clip",)}
    assert "fused epilogue: + residual" in str(rep.lowered["body2"])
    steps = {step.node: step for step in rep.plan.steps}
    assert steps["body2"].inputs[-1] == "d" and steps["body2"].outputs == ("ar",)
    assert {step.op_type for step in rep.plan.steps} == {"Conv", "Relu", "Mul", "Add"}
    x = np.random.default_rng(1).standard_normal((2, 4, 9, 7)).astype(np.float32)
    for got, want in zip(rep.run([x]), expected(proto, [x]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# --- clip_quantized: a requantized output dequantized, clipped and quantized again in the store ---

QUANT_CLIPS = [(0.0, 6.0), (0.0, None), (None, 0.5), (-1.0, 2.5)]


def _clips_quantized(data, isa):
    """A random requantized conv (padding, stride, dilation, groups, batch; uint8 or int8 activations and
    outputs) and schedule (register blocks whose stores pack bytes, epilogue passes, parallel loops)
    with ``clip_quantized``: bit for bit ``clip_requantized`` of quant.py's exact output."""
    output, activation = (data.draw(st.sampled_from(["uint8", "int8"])) for _ in range(2))
    spec = lo.QuantSpec(activation=activation, per_channel=data.draw(st.booleans()),
                        weight_symmetric=data.draw(st.booleans()), output=output)
    op = data.draw(conv_ops(max_hw=7)).with_quant(spec)
    clip = data.draw(st.sampled_from(QUANT_CLIPS))
    schedule = data.draw(quantized_schedules(op, isa)).clip_quantized(*clip)
    info = np.iinfo(output)
    scale = np.float32(data.draw(st.sampled_from([0.0037, 0.02, 0.3])))
    zero = np.array(data.draw(st.integers(int(info.min), int(info.max)))).astype(output)
    args, params = random_call(op, data.draw(st.integers(0, 3)))
    kernel = schedule.compile(isa)
    kernel.set_threads(2 if schedule.parallel_loop is not None else 1)
    got = kernel(*args, **params, clip_scale=scale, clip_zero_point=zero)
    want = clip_requantized(reference_output(op, args, params), params["y_scale"], params["y_zero_point"],
                            Clip(*clip), scale, zero)
    assert got.dtype == want.dtype and np.array_equal(got, want), (schedule.pseudocode(isa), isa)


test_clip_quantized_is_exact, test_clip_quantized_is_exact_more = tiers(
    _clips_quantized, 2, 4, data=st.data(), isas=INT_ISAS)


def test_clip_quantized_on_amx_tiles_and_its_refusals():
    """AMX tile kernels requantize and clip in their tile store (exact); a float op, a float output and a
    second clip are refused at the step, a missing, extra or bad call parameter at the call."""
    op = lo.Conv2d(32, 24, 1, height=5, width=7, quant=lo.QuantSpec(output="int8"))
    args, params = random_call(op, 1)
    zero, scale = np.array(0).astype(np.int8), np.float32(0.003)
    requantized = reference_output(op, args, params)
    y = (requantized, params["y_scale"], params["y_zero_point"])
    want = clip_requantized(*y, Clip(-0.2, 0.3), scale, zero)
    unclipped = clip_requantized(*y, Clip(-9.0, 9.0), scale, zero)
    assert want.min() > unclipped.min() and want.max() < unclipped.max()    # both bounds clip some outputs
    for isa in {"amx", "scalar"} & set(INT_ISAS):
        kernel = lo.Schedule(op).clip_quantized(-0.2, 0.3).compile(isa)
        assert np.array_equal(kernel(*args, **params, clip_scale=scale, clip_zero_point=zero), want), isa
    with pytest.raises(ValueError, match=r"pass clip_scale= \(a positive float32\) and clip_zero_point="):
        kernel(*args, **params)
    with pytest.raises(ValueError, match=r"clip_zero_point must be one integer in -128\.\.127.*got 200"):
        kernel(*args, **params, clip_scale=np.float32(0.03), clip_zero_point=200)
    with pytest.raises(ValueError, match=r"clip_scale must be one positive finite float32, got -1.0"):
        kernel(*args, **params, clip_scale=-1.0, clip_zero_point=zero)
    with pytest.raises(TypeError, match=r"clip_scale quantize the outputs of a schedule with clip_quantized"):
        lo.Schedule(op).compile("scalar")(*args, **params, clip_scale=np.float32(0.03))
    with pytest.raises(ScheduleError, match=r"clip_quantized\(low=0.0, high=6.0\): it clips requantized "
                                            r"8-bit outputs; .* has float32 outputs \(float outputs: clip\)"):
        lo.Schedule(lo.Matmul(4, 4, 4)).clip_quantized(0.0, 6.0)
    with pytest.raises(ScheduleError, match=r"has int32 outputs"):
        lo.Schedule(op.with_quant(lo.QuantSpec(output="int32"))).clip_quantized(0.0)
    with pytest.raises(ScheduleError, match=r"the outputs are clipped already"):
        lo.Schedule(op).clip_quantized(0.0).clip_quantized(0.0)
    schedule = lo.Schedule(op).clip_quantized(high=6.0)
    assert schedule_from_toml(to_toml(schedule), op).requantized_clip == Clip(None, 6.0)
    assert "then dequantized, Clip(low=None, high=6.0) and quantized again (clip_quantized)" in \
        schedule.pseudocode("scalar")


def test_a_vector_block_prefetches_the_residual_it_adds_unless_it_prefetches_an_operand():
    """Each accumulator's residual is prefetched as the block starts (its reduction hides the latency the
    store would wait on), the values as before; a block that prefetches its weights prefetches no residual,
    nor one whose threads split the channels."""
    op = lo.Conv2d(16, 64, 1, height=4, width=8)
    isa = "avx512" if "avx512" in ISAS else ISAS[0]
    chosen = first_choice(op, isa, residual=True)
    kernel = chosen.schedule.add_residual().clip(0.0).compile(isa)
    accumulators = chosen.knobs.pixel_block * chosen.knobs.channel_block // X86_ISAS[isa].lanes
    assert kernel.source.count(f"__builtin_prefetch(&{RESIDUAL}[") == accumulators
    rng = np.random.default_rng(2)
    x, w, b = (rng.standard_normal(op.tensor(t).shape).astype(np.float32) for t in op.call_tensors)
    residual = rng.standard_normal(op.tensor(op.output).shape).astype(np.float32)
    np.testing.assert_allclose(kernel(x, w, b, residual), np.maximum(op.reference(x, w, b) + residual, 0),
                               rtol=1e-5, atol=1e-5)
    prefetching = chosen.schedule.prefetch("W", 256).add_residual().compile(isa)
    assert f"__builtin_prefetch(&{RESIDUAL}[" not in prefetching.source
    split = chosen.schedule.parallel("k_o").add_residual().compile(isa)
    assert f"__builtin_prefetch(&{RESIDUAL}[" not in split.source
    rows = chosen.schedule.parallel("oh").add_residual().compile(isa)
    assert f"__builtin_prefetch(&{RESIDUAL}[" in rows.source
