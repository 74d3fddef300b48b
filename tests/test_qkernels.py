"""Quantized kernels agree with quant.py's exact reference on every integer ISA here plus scalar.

Raw int32 products are checked exactly, requantized outputs bit for bit, float32 outputs
within float32 rounding; dequantize-on-the-fly within the float summation bound.
"""
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    HYPOTHESIS,
    SPECS,
    conv_ops,
    integer_calls,
    matmul_ops,
    quantized_schedules,
    quick_first,
    rotated,
    schedules,
    spatially_blocked_schedules,
    tiers,
)
from helpers import INT_ISAS as ISAS
from helpers import SIMD_INT_ISAS as SIMD_ISAS
from helpers import check_quantized as check
from hypothesis import given, settings
from hypothesis import strategies as st

import loopopt as lo
from loopopt.codegen.emit import generate
from loopopt.quant_reference import random_call
from loopopt.schedule_file import list_schedules
from loopopt.targets.x86.families import ISAS as X86_ISAS

GENERIC = Path(__file__).resolve().parents[1] / "schedules"     # the schedules of no particular CPU


def quantized(op, spec):
    return op.with_quant(spec)


def random_quantized_conv_schedule(isa, data):
    """A random legal schedule of a random quantized conv (every QuantSpec combination), either
    compensation, sometimes dequantizing, on calibrated data or on full-range data with any zero points."""
    op = quantized(data.draw(conv_ops(max_hw=7)), data.draw(SPECS))
    check(data.draw(quantized_schedules(op, isa)), isa, call=data.draw(st.none() | integer_calls(op)))


test_random_quantized_conv_schedules_quick, test_random_quantized_conv_schedules = tiers(
    random_quantized_conv_schedule, 1, 11, isas=ISAS, data=st.data())


def random_quantized_matmul_schedule(isa, data):
    """A random legal schedule of a random quantized matmul (either operand transposed, every QuantSpec
    combination)."""
    op = quantized(data.draw(matmul_ops(max_mn=9, batched=False)), data.draw(SPECS))
    check(data.draw(schedules(op, isa)), isa, call=data.draw(st.none() | integer_calls(op)))


test_random_quantized_matmul_schedules_quick, test_random_quantized_matmul_schedules = tiers(
    random_quantized_matmul_schedule, 1, 12, isas=ISAS, data=st.data())


def random_quantized_nd_conv_schedule(isa, data):
    """A random legal schedule of a random quantized Conv1d or Conv3d (per-side pads, stride,
    dilation, groups, depthwise, batch; every QuantSpec), either compensation, on calibrated or
    full-range data: the compensation table has a border class per window."""
    op = quantized(data.draw(conv_ops(max_hw=6, spatial=data.draw(st.sampled_from([1, 3])), max_channels=4)),
                   data.draw(SPECS))
    s = data.draw(schedules(op, isa))
    if data.draw(st.booleans()):
        s = s.compensation("kernel")
    check(s, isa, call=data.draw(st.none() | integer_calls(op)))


test_random_quantized_nd_conv_schedules_quick, test_random_quantized_nd_conv_schedules = tiers(
    random_quantized_nd_conv_schedule, 1, 9, isas=ISAS, data=st.data())


def random_quantized_batched_matmul_schedule(isa, data):
    """A random legal schedule of a random quantized matmul with 1 or 2 batch dims (batched weights:
    a compensation table per batch), either operand transposed, every QuantSpec, either compensation."""
    op = data.draw(matmul_ops(max_mn=9).filter(lambda m: m.batch))
    s = data.draw(schedules(quantized(op, data.draw(SPECS)), isa))
    if data.draw(st.booleans()):
        s = s.compensation("kernel")
    check(s, isa, call=data.draw(st.none() | integer_calls(s.op)))


test_random_quantized_batched_matmul_schedules_quick, test_random_quantized_batched_matmul_schedules = tiers(
    random_quantized_batched_matmul_schedule, 1, 8, isas=ISAS,
    data=st.data())


def spatially_blocked_quantized_conv(isa, data):
    """A register block of a random quantized conv over spatially blocked activations
    (``spatially_blocked_schedules``: loads in the padding of another spatial block), every QuantSpec,
    the u8 x s8 dot's form too, on calibrated or full-range data."""
    s = data.draw(spatially_blocked_schedules(isa, data.draw(SPECS)))
    check(s, isa, call=data.draw(st.none() | integer_calls(s.op)))


test_spatially_blocked_quantized_convs_quick, test_spatially_blocked_quantized_convs = tiers(
    spatially_blocked_quantized_conv, 1, 5, isas=ISAS, data=st.data())


def cache_blocked_dot_schedule(isa, data, c, block):
    """A random quantized 3x3 conv of ``c`` input channels (any QuantSpec), its dot register block
    under a cache block of ``block`` input channels (the x86 search's form)."""
    op = lo.Conv2d(c, data.draw(st.integers(1, 40)), 3, stride=data.draw(st.integers(1, 2)),
                   padding=data.draw(st.integers(0, 1)), batch=data.draw(st.integers(1, 2)),
                   height=data.draw(st.integers(3, 7)), width=data.draw(st.integers(3, 9)),
                   quant=data.draw(SPECS))
    lanes = X86_ISAS[isa].lanes
    return (lo.Schedule(op).layout("I", "NHWC").layout("O", "NHWC").layout("W", f"OHWI{lanes}o4i")
            .split("c", block).split("c_i", 4).tile(ow=data.draw(st.integers(1, 4)), k=2 * lanes)
            .reorder("n", "k_o", "oh", "c_o", "ow_o", "kh", "kw", "c_i_o", "c_i_i").vectorize("k_i")
            .register_block("kh"))


def cache_blocked_dot_conv(isa, data):
    """A quantized conv's dot register block under a cache block of its input channels, as the x86
    ranking puts first for wide layers: the block's first visit of its outputs starts its int32 sums
    (no pass zeroes them), the epilogue a pass after the nest, split over the threads with the nest (its
    output channels or rows) or on one thread; every QuantSpec, run twice on the same buffers, exact."""
    c = data.draw(st.integers(5, 20))
    s = cache_blocked_dot_schedule(isa, data, c, 4 * data.draw(st.integers(1, (c - 1) // 4)))
    op = s.op
    parallel = data.draw(st.sampled_from([None, "k_o", "oh"]))
    s = s.parallel(parallel) if parallel else s
    call = data.draw(st.none() | integer_calls(op))
    kernel = check(s, isa, threads=2 if parallel else 1, call=call, runs=2)
    assert "lo_first = c_o == 0" in kernel.source and "/* O = 0 */" not in kernel.source


test_cache_blocked_dot_convs_quick, test_cache_blocked_dot_convs = tiers(
    cache_blocked_dot_conv, 2, 12, isas=SIMD_ISAS, data=st.data())


def non_dividing_cache_block_conv(isa, data):
    """A cache block of the input channels that does not divide them, both multiples of 4 (MobileNetV2's
    960 channels in blocks of 512): the partial block's guard holds for all of a dot group or none of
    it, so the block runs on the dot instruction, its last block cut short; every QuantSpec, exact.
    Channels not a multiple of 4 cut a group: widened integer products (the guard on each channel)."""
    groups = data.draw(st.integers(3, 6))
    whole = data.draw(st.booleans())
    block = 4 * data.draw(st.integers(2, groups - 1).filter(lambda m: groups % m))
    c = 4 * groups if whole else 4 * groups - data.draw(st.integers(1, 3))
    s = cache_blocked_dot_schedule(isa, data, c, block)
    kernel = check(s, isa, call=data.draw(st.none() | integer_calls(s.op)))
    assert kernel.plan.dot_loop == ("c_i_i" if whole else None)
    assert ("dot instruction" in kernel.source) == whole


test_non_dividing_cache_block_convs_quick, test_non_dividing_cache_block_convs = tiers(
    non_dividing_cache_block_conv, 2, 12, isas=SIMD_ISAS, data=st.data())


def vnni_conv(s):
    """The VNNI form: NHWC activations, 4 input channels innermost in the weights, c split by 4."""
    return (s.layout("I", "NHWC").layout("O", "NHWC").layout("W", "OIHW16o4i").split("c", 4).tile(ow=3, k=16)
            .reorder("k_o", "oh", "ow_o", "c_o", "kh", "kw", "c_i"))


DOT_SCHEDULES = {
    "u8-pc-sym-dot": (lo.QuantSpec("uint8", True, True, "uint8"), lambda s: vnni_conv(s).vectorize("k_i")),
    # the block sees the whole reduction: bias in the epilogue
    "s8-pc-asym-block": (lo.QuantSpec("int8", True, False, "float32"),
                         lambda s: vnni_conv(s).vectorize("k_i").register_block("c_o")),
    "u8-pt-asym-block-kernel-comp": (lo.QuantSpec("uint8", False, False, "int8"),
                                     lambda s: vnni_conv(s).vectorize("k_i").register_block("kh")
                                     .compensation("kernel")),
    "s8-pt-sym-parallel": (lo.QuantSpec("int8", False, True, "uint8"),
                           lambda s: vnni_conv(s).vectorize("k_i").parallel("oh")),
}


@pytest.mark.parametrize("spec, build, isa", rotated(DOT_SCHEDULES, SIMD_ISAS))
def test_dot_schedules(spec, build, isa):
    # c = 6 is not a multiple of 4: the blocked weights are zero-padded; padding, stride and groups
    op = lo.Conv2d(12, 20, 3, stride=(1, 2), padding=1, groups=2, batch=2, height=6, width=9, quant=spec)
    schedule = build(lo.Schedule(op))
    kernel = check(schedule, isa)
    assert kernel.plan.dot_loop == "c_i" and "dot instruction" in kernel.source
    assert "c_i in 0..4:    # dot loop" in schedule.pseudocode(isa)
    assert (kernel.plan.shift == 128) == (spec.activation == "int8")


SIGNEDNESS = {f"{a}x{w}": (a, w) for a in lo.quant.ACTIVATIONS for w in lo.quant.WEIGHTS}


# int8 x uint8 (both shifts) in the quick tier, the other pairs slow (the random tests draw them too)
SIGNEDNESS_PARAMS = [pytest.param(SIGNEDNESS[name], id=name, marks=() if i == 0 else pytest.mark.slow)
                     for i, name in enumerate(["int8xuint8", "uint8xuint8", "int8xint8", "uint8xint8"])]


@pytest.mark.parametrize("signedness", SIGNEDNESS_PARAMS)
@settings(max_examples=3, **HYPOTHESIS)
@given(data=st.data())
def test_dot_on_every_signedness(signedness, data):
    """Every activation x weight signedness runs on the u8 x s8 dot instruction (int8 activations
    shifted by +128 in the kernel, uint8 weights by -128 when packed), any output, zero points and
    weight granularity, with or without a register block, bit-exact."""
    activation, weight = signedness
    isa = data.draw(st.sampled_from(SIMD_ISAS))
    spec = lo.QuantSpec(activation, data.draw(st.booleans()), data.draw(st.booleans()),
                        data.draw(st.sampled_from(lo.quant.OUTPUTS)), weight=weight)
    blocked = data.draw(st.booleans())

    def schedule(quant):
        op = lo.Conv2d(12, 20, 3, stride=(1, 2), padding=1, groups=2, batch=2, height=6, width=9, quant=quant)
        s = vnni_conv(lo.Schedule(op)).vectorize("k_i")
        return s.register_block("c_o") if blocked else s

    s = schedule(spec)
    kernel = check(s, isa, call=data.draw(integer_calls(s.op)))
    assert kernel.plan.dot_loop == "c_i"
    assert kernel.plan.shift == (128 if activation == "int8" else 0)
    assert kernel.plan.weight_shift == (-128 if weight == "uint8" else 0)
    # the weights' signedness is applied when they are packed: the C is the same but its first (comment)
    # line (the sanitizer tier, tests/test_sanitize.py, runs this test on uint8 weights only)
    other = replace(spec, weight="int8" if weight == "uint8" else "uint8")
    twin = generate(schedule(other), X86_ISAS[isa]).source
    assert twin.split("\n", 1)[1] == kernel.source.split("\n", 1)[1]


# onnxruntime's ConvInteger GEMM takes the weights as its unsigned operand: int8 activations against uint8
# weights add pairs of products in saturating int16 on an x86 CPU without VNNI, whatever its session
# options (loopopt.onnx.peer: its exact path rewrites constant int8 weights only)
ORT_INEXACT = {("ConvInteger", "int8", "uint8")}


def onnxruntime_output(node, inputs: dict[str, np.ndarray], constant: set[str]) -> np.ndarray:
    """The int32 output ``y`` of ``node`` run alone by onnxruntime (``peer.session_options``) on ``inputs``
    (name: array, in the node's order), those in ``constant`` as initializers, as a model's weights are."""
    import onnx
    import onnxruntime
    from onnx import helper

    from loopopt.onnx.peer import session_options
    feeds = {name: a for name, a in inputs.items() if name not in constant}
    info = lambda name, a: helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                         a.shape)
    graph = helper.make_graph([node], node.op_type, [info(n, a) for n, a in feeds.items()],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.INT32, None)],
                              [onnx.numpy_helper.from_array(inputs[n], n) for n in constant])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    session = onnxruntime.InferenceSession(model.SerializeToString(), session_options(),
                                           providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("signedness", SIGNEDNESS_PARAMS)
def test_int32_output_is_onnx_conv_and_matmul_integer(signedness):
    """output='int32' is ONNX ConvInteger / MatMulInteger: bit for bit the exact reference's
    (loopopt.onnx.exact) and onnxruntime's (weights constant; not where it saturates, ``ORT_INEXACT``; its
    ConvInteger takes per-tensor weight zero points only; MatMulInteger per column)."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from loopopt.onnx.exact import exact_output
    activation, weight = signedness
    rng = np.random.default_rng(5)
    conv = lo.Conv2d(6, 8, 3, stride=2, padding=1, groups=2, bias=False, batch=2, height=7, width=6,
                     quant=lo.QuantSpec(activation, False, False, "int32", weight=weight))
    matmul = lo.Matmul(5, 19, 13, quant=lo.QuantSpec(activation, True, False, "int32", weight=weight))
    matmul_schedule = (lo.Schedule(matmul).layout("B", "KN16n4k").split("k", 4).tile(j=16)
                       .reorder("k_o", "k_i", "j_o").vectorize("j_i"))
    names = ("x", "w", "x_zero_point", "w_zero_point")
    for schedule, onnx_op, attributes in (
            (vnni_conv(lo.Schedule(conv)).vectorize("k_i"), "ConvInteger",
             dict(pads=[1, 1, 1, 1], strides=[2, 2], group=2)),
            (matmul_schedule, "MatMulInteger", {})):
        op = schedule.op
        x, w = (rng.integers(np.iinfo(t).min, np.iinfo(t).max + 1, op.tensor(name).shape).astype(t)
                for t, name in zip((activation, weight), op.inputs))
        zx = np.array(np.iinfo(activation).min, activation)
        zw = rng.integers(np.iinfo(weight).min, np.iinfo(weight).max + 1,
                          (op.channels,) if op.quant.per_channel else ()).astype(weight)
        got = schedule.compile()(x, w, x_zero_point=zx, w_zero_point=zw)
        node = onnx.helper.make_node(onnx_op, list(names), ["y"], **attributes)
        assert got.dtype == np.int32 and np.array_equal(got, exact_output(node, [x, w, zx, zw])), onnx_op
        if (onnx_op, activation, weight) not in ORT_INEXACT:
            ort = onnxruntime_output(node, dict(zip(names, (x, w, zx, zw))), {"w", "w_zero_point"})
            assert np.array_equal(got, ort), onnx_op


@pytest.mark.parametrize("isa", quick_first(SIMD_ISAS))
def test_dot_matmul(isa):
    op = lo.Matmul(7, 35, 22, quant=lo.QuantSpec("int8", True, False, "int8"))
    s = (lo.Schedule(op).layout("B", "KN16n4k").split("k", 4).tile(j=16).reorder("k_o", "k_i", "j_o")
         .vectorize("j_i"))
    assert check(s, isa).plan.dot_loop == "k_i"


@pytest.mark.parametrize("isa", quick_first(SIMD_ISAS))
def test_dot_batched_matmul(isa):
    """Batched weights (ONNX MatMulInteger with a 3-D B) on the dot instruction: per-batch weight sums."""
    op = lo.Matmul(7, 35, 22, batch=(2, 3), quant=lo.QuantSpec("int8", True, False, "int8", "uint8"))
    s = (lo.Schedule(op).layout("B", "BDKN16n4k").split("k", 4).tile(j=16).reorder("k_o", "k_i", "j_o")
         .vectorize("j_i"))
    assert check(s, isa).plan.dot_loop == "k_i"


ND_CONVS = {
    1: lo.Conv1d(12, 20, 3, stride=2, padding=((0, 2),), groups=2, batch=2, length=11,
                 quant=lo.QuantSpec("int8", False, False, "uint8", "uint8")),
    3: lo.Conv3d(12, 20, 3, stride=(1, 1, 2), padding=((1, 0), (1, 0), (0, 2)), groups=2, batch=2, depth=4,
                 height=5, width=7, quant=lo.QuantSpec("int8", False, False, "uint8", "uint8"))}


@pytest.mark.parametrize("isa", quick_first(SIMD_ISAS))
@pytest.mark.parametrize("spatial", [1, 3])
def test_dot_nd_conv(isa, spatial):
    """A Conv1d / Conv3d with per-side pads, stride and groups on the dot instruction (channels-last
    activations, 4 input channels innermost in the weights), int8 activations and asymmetric uint8
    weights (both shifts), exact."""
    op = ND_CONVS[spatial]
    letters = op.letters
    outs, taps = (f"o{x.lower()}" for x in letters), (f"k{x.lower()}" for x in letters)
    s = (lo.Schedule(op).layout("I", f"N{letters}C").layout("O", f"N{letters}C")
         .layout("W", f"OI{letters}16o4i").split("c", 4).split("k", 16)
         .reorder("n", "k_o", *outs, "c_o", *taps, "c_i", "k_i").vectorize("k_i"))
    kernel = check(s, isa)
    assert kernel.plan.dot_loop == "c_i" and kernel.plan.shift == 128


@pytest.mark.parametrize("isa", quick_first(SIMD_ISAS))
def test_dot_on_three_channels(isa):
    """conv1's stored schedule splits c by 4; loading clamps it to c = 3, still a dot loop (zero-padded
    weights)."""
    op = lo.Conv2d(3, 20, 7, stride=2, padding=3, height=11, width=10,
                   quant=lo.QuantSpec("int8", True, False, "uint8"))
    # the generic file: on a CPU with AMX this CPU's conv1 schedule is an AMX tile schedule
    kernel = check(lo.load_schedule(GENERIC / "resnet50.conv1.int8.toml", op), isa)
    assert kernel.plan.dot_loop == "c_i" and kernel.plan.shift == 128


def test_no_dot_where_the_groups_are_not_contiguous():
    op = lo.Conv2d(8, 16, 3, padding=1, height=5, width=5, quant=lo.QuantSpec())
    s = lo.Schedule(op).split("c", 4).tile(k=16).reorder("kh", "kw", "c_i").vectorize("k_i")   # NCHW, OIHW
    kernel = check(s, ISAS[0])
    assert kernel.plan.dot_loop is None


CONV = {"in_channels": 6, "out_channels": 20, "kernel_size": 3, "padding": 1, "batch": 2, "height": 7,
        "width": 9}


REGISTER_BLOCKS = {
    # complete block, lanes along k: fused epilogue
    "fused-k": (lo.QuantSpec("uint8", True, False, "uint8"),
                lambda s: s.layout("I", "NHWC").layout("O", "NHWC").layout("W", "HWIO").tile(ow=3, k=32)
                .reorder("k_o", "oh", "ow_o", "c", "kh", "kw").vectorize("k_i").register_block("c")),
    # incomplete block: int32 workspace and epilogue pass
    "workspace": (lo.QuantSpec("int8", False, True, "float32"),
                  lambda s: s.tile(ow=4, k=16).reorder("k_o", "oh", "ow_o", "c", "kh", "kw").vectorize("k_i")
                  .register_block("kh").parallel("k_o")),
    # lanes along ow with padding guards
    "fused-ow": (lo.QuantSpec("uint8", True, True, "int8"),
                 lambda s: s.split("ow", 5).reorder("ow_o", "c", "kh", "kw", "ow_i").vectorize("ow_i")
                 .register_block("c")),
    # lanes reduce: summed when stored
    "lanes-reduce": (lo.QuantSpec("int8", True, False, "uint8"),
                     lambda s: s.split("c", 4).reorder("c_o", "kh", "kw", "c_i").split("ow", 2)
                     .reorder("c_o", "kh", "kw", "ow_i").vectorize("c_i").register_block("c_o")),
    # dequantize-on-the-fly in a register block
    "dequantize": (lo.QuantSpec("uint8", False, False, "float32"),
                   lambda s: s.split("ow", 5).reorder("ow_o", "c", "kh", "kw", "ow_i").vectorize("ow_i")
                   .register_block("c").arithmetic("dequantize")),
}


@pytest.mark.parametrize("spec, build, isa", rotated(REGISTER_BLOCKS, ISAS))
def test_register_blocks(spec, build, isa):
    check(build(lo.Schedule(lo.Conv2d(**CONV, quant=spec))), isa)


@pytest.mark.parametrize("isa", quick_first(SIMD_ISAS))
def test_fused_epilogue_dead_lanes_past_the_last_column(isa):
    """Lanes along ow, 56 columns in tiles of 16: the last vector's dead lanes (columns 56..63) run
    the epilogue too (not stored) at the last column, so their border-class lookups stay inside the
    tables (the sanitizer tier sees a read past them)."""
    op = lo.Conv2d(8, 12, 1, height=3, width=56, quant=lo.QuantSpec("uint8", True, True, "uint8"))
    s = (lo.Schedule(op).layout("I", "NCHW4c").layout("W", "OHWI").layout("O", "NCHW").split("c", 4)
         .tile(k=12, ow=16).reorder("k_o", "oh", "ow_o", "c_o", "kh", "kw", "c_i").vectorize("ow_i")
         .register_block("c_o"))
    assert check(s, isa).plan.fused_epilogue


PACKS = {"avx512": "_mm512_packs_epi32", "avx2": "_mm256_packs_epi32"}    # the mark of pack_u8 / pack_s8


def exact_packed_runs(isa, data):
    """Requantized outputs of register blocks with several vectors along a contiguous output (lanes
    along the channels of a channels-last output, or along the columns of a channels-first one; whole
    or partial last vectors, channel or column tails): exact, and packed to bytes in runs of up to 4
    vectors (``_byte_runs``) wherever every vector of the block is whole but the last."""
    spec = lo.QuantSpec(data.draw(st.sampled_from(lo.quant.ACTIVATIONS)), data.draw(st.booleans()),
                        data.draw(st.booleans()), data.draw(st.sampled_from(["uint8", "int8"])))
    channels, pixels, cin = (data.draw(st.integers(1, n)) for n in (70, 40, 5))
    width, height = data.draw(st.integers(1, 40)), data.draw(st.integers(1, 3))
    op = lo.Conv2d(cin, channels, data.draw(st.integers(1, 3)), padding=1, height=height, width=width,
                   batch=data.draw(st.integers(1, 2)), bias=data.draw(st.booleans()), quant=spec)
    if data.draw(st.booleans()):          # lanes along the channels
        block = data.draw(st.integers(1, channels))
        s = (lo.Schedule(op).layout("I", "NHWC").layout("O", "NHWC").layout("W", "HWIO")
             .tile(ow=data.draw(st.integers(1, 3)), k=block).reorder("k_o", "oh", "ow_o", "c", "kh", "kw")
             .vectorize("k_i").register_block("c"))
        whole = channels % block == 0 and op.extent("ow") % s.loop("ow_i").extent == 0
    else:                                 # lanes along the columns
        s = (lo.Schedule(op).tile(k=data.draw(st.integers(1, 2)), ow=pixels)
             .reorder("k_o", "oh", "ow_o", "c", "kh", "kw").vectorize("ow_i").register_block("c"))
        whole = op.extent("ow") % s.loop("ow_i").extent == 0 and channels % s.loop("k_i").extent == 0
    kernel = check(s, isa, call=data.draw(st.none() | integer_calls(op)))
    if isa != "scalar" and whole:
        assert (PACKS[isa] in kernel.source) == (s.loop(s.vector_loop.name).extent > ISAS_LANES[isa]), s


ISAS_LANES = {"avx512": 16, "avx2": 8}
test_exact_packed_runs_quick, test_exact_packed_runs = tiers(
    exact_packed_runs, 1, 7, isas=ISAS, data=st.data())


@pytest.mark.parametrize("isa", quick_first(ISAS))
def test_depthwise_and_strided(isa):
    spec = lo.QuantSpec("uint8", True, False, "uint8")
    op = lo.Conv2d(6, 6, 3, stride=2, padding=2, dilation=2, groups=6, batch=3, height=9, width=8, quant=spec)
    check(lo.Schedule(op).layout("I", "NHWC").layout("O", "NHWC").reorder("kw", "k").vectorize("k"), isa)
    check(lo.Schedule(op).split("ow", 4).reorder("ow_o", "c", "kh", "kw", "ow_i").vectorize("ow_i"), isa)


# --- the call ----------------------------------------------------------------------------------------

OP = lo.Conv2d(4, 6, 3, padding=1, height=5, width=5, quant=lo.QuantSpec("uint8", True, False, "uint8"))


@pytest.fixture(scope="module")
def call():
    kernel = lo.Schedule(OP).compile("scalar")
    args, params = random_call(OP, 0)
    return kernel, args, params


@pytest.mark.parametrize("change, exc, match", [
    ({"x_scale": 0.0}, ValueError, r"x_scale=0.0 is invalid: scales must be finite and > 0"),
    ({"w_scale": np.array([1, 1, 1, np.nan, 1, 1], np.float32)}, ValueError, r"w_scale=nan is invalid"),
    ({"w_scale": np.ones(5, np.float32)}, ValueError, r"w_scale has shape \(5,\).*one value per output"),
    ({"x_zero_point": 300}, ValueError, r"x_zero_point=300 is out of range for uint8"),
    ({"w_zero_point": np.full(6, -129)}, ValueError, r"w_zero_point=-129 is out of range for int8"),
    ({"y_scale": -1.0}, ValueError, r"y_scale=-1.0 is invalid"),
    ({"y_zero_point": None}, ValueError, r"is quantized: pass y_zero_point"),
    ({"x_scale": None}, ValueError, r"pass x_scale"),
    ({"x_scales": 1.0}, TypeError, r"unknown quantization parameter\(s\) x_scales"),
    ({"x_zero_point": 1.5}, TypeError, r"x_zero_point must be an integer"),
])
def test_bad_parameters(call, change, exc, match):
    kernel, args, params = call
    with pytest.raises(exc, match=match):
        kernel(*args, **{**params, **change})


def test_bad_arrays(call):
    kernel, (x, w, b), params = call
    with pytest.raises(TypeError, match="input dtype int8 does not match QuantSpec\\(activation='uint8'\\)"):
        kernel(x.view(np.int8), w, b, **params)
    with pytest.raises(TypeError, match=r"weight dtype int16 does not match QuantSpec\(weight=.int8.\)"):
        kernel(x, w.astype(np.int16), b, **params)
    with pytest.raises(TypeError, match="bias dtype float32 does not match output='uint8'"):
        kernel(x, w, b.astype(np.float32), **params)
    with pytest.raises(ValueError, match=r"I has shape \(4, 5, 5\)"):
        kernel(x[0], w, b, **params)
    with pytest.raises(ValueError, match="has a bias"):
        kernel(x, w, **params)
    with pytest.raises(TypeError, match="must be a numpy array"):
        kernel(x.tolist(), w, b, **params)


def test_float_output_refuses_output_parameters():
    op = lo.Conv2d(4, 6, 3, height=5, width=5, bias=False, quant=lo.QuantSpec(output="float32"))
    args, params = random_call(op, 0)
    with pytest.raises(ValueError, match="must not be given"):
        lo.Schedule(op).compile("scalar")(*args, **params, y_scale=1.0, y_zero_point=0)


def test_onnx_names_and_per_tensor_scalars():
    """The DESIGN.md example: per-tensor activations, per-channel symmetric weights, float32 output."""
    spec = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="float32")
    qop = lo.Conv2d(8, 8, 3, padding=1, batch=1, height=6, width=6, quant=spec)
    x, w, b = (qop.random_inputs(3)[t] for t in "IWB")
    xq, x_scale, x_zero_point = lo.quantize(x, "uint8")
    wq, w_scale, w_zero_point = lo.quantize(w, "int8", axis=0, symmetric=True)
    y = lo.Schedule(qop).compile()(xq, wq, b, x_scale=x_scale, x_zero_point=x_zero_point,
                                   w_scale=w_scale, w_zero_point=w_zero_point)
    assert y.dtype == np.float32 and lo.quant_error(qop.reference(x, w, b), y)["sqnr_db"] > 25


# --- schedule choices, measure, accuracy ------------------------------------------------------------

def test_schedule_choices_are_validated():
    float_op = lo.Conv2d(4, 6, 3, height=5, width=5)
    with pytest.raises(lo.ScheduleError, match="not quantized"):
        lo.Schedule(float_op).compensation("kernel")
    with pytest.raises(lo.ScheduleError, match="'later' is not a choice; allowed: 'packed', 'kernel'"):
        lo.Schedule(OP).compensation("later")
    with pytest.raises(lo.ScheduleError, match="dequantize-on-the-fly .* float32 output"):
        lo.Schedule(OP).arithmetic("dequantize")
    with pytest.raises(lo.ScheduleError, match="this op's output is 'int32'"):
        lo.Schedule(OP.with_quant(lo.QuantSpec(output="int32"))).arithmetic("dequantize")
    s = lo.Schedule(OP).compensation("kernel").arithmetic("integer")
    assert (s.compensation_mode, s.arithmetic_mode) == ("kernel", "integer")
    again = lo.schedule_file.load_schedule(lo.save_schedule(s, "/tmp/lo_quant_choices.toml"), OP)
    assert (again.compensation_mode, again.arithmetic_mode) == ("kernel", "integer")


def test_measure_quantized_kernels():
    op = lo.Conv2d(16, 16, 3, padding=1, height=8, width=8, quant=lo.QuantSpec("uint8", True, True, "int8"))
    t = lo.measure(vnni_conv(lo.Schedule(op)).vectorize("k_i").compile(), repeats=3)
    assert t.verified and t.unit == "GOP/s" and t.max_error == 0 and "GOP/s" in str(t)
    assert t.peak_gflops == pytest.approx(lo.peak_gflops(ISAS[0], "int8"))
    dequantizing = lo.Schedule(op.with_quant(lo.QuantSpec())).arithmetic("dequantize")
    slow = lo.measure(dequantizing.compile(), repeats=3)
    assert slow.verified
    with pytest.raises(ValueError, match="dtype='int4' is not supported"):
        lo.peak_gflops("auto", "int4")


@pytest.mark.slow
def test_quant_accuracy_report():
    op = lo.Conv2d(8, 8, 3, padding=1, height=6, width=6)
    report = lo.quant_accuracy(op, timing=False, schedule=lambda q: lo.Schedule(q).tile(k=8).vectorize("k_i"))
    assert [r.choice for r in report.rows] == ["per-tensor symmetric", "per-tensor asymmetric",
                                               "per-channel symmetric", "per-channel asymmetric"]
    assert all(r.sqnr_db > 20 and r.max_abs > 0 for r in report.rows)
    assert "SQNR dB" in str(report) and len(report.to_dict()["rows"]) == 4


@pytest.mark.slow
def test_timed_quant_accuracy_report():
    timed = lo.quant_accuracy(lo.Matmul(8, 16, 8), timing=True, budget=0.01)
    assert all(r.verified and r.gops > 0 for r in timed.rows)


def test_compare_reports_quantized_ops_in_gops():
    qop = lo.Conv2d(8, 16, 3, padding=1, height=6, width=6, quant=lo.QuantSpec("int8", False, False, "int8"))
    cmp = lo.compare(qop, [lo.Schedule(qop), lo.load_schedule("resnet50.conv2_x.int8", qop)], reuse=False,
                     progress=False, budget=0.01)
    assert all(row.verified for row in cmp.rows) and "GOP/s" in str(cmp).splitlines()[0]
    assert cmp.peak == pytest.approx(lo.peak_gflops(cmp.rows[0].isa, "int8"))


# --- the stored int8 schedules (schedules/<layer>.int8.toml, benchmarks/tune_layers.py --int8) ---------

INT8_SCHEDULES = sorted(name for name in list_schedules()
                        if name.endswith(".int8") and name.removesuffix(".int8") in lo.list_layers())
BENCHMARK_SPEC = lo.QuantSpec("uint8", per_channel=True, weight_symmetric=True, output="uint8")


def test_every_stored_layer_schedule_has_an_int8_one():
    fp32 = {name for name in list_schedules() if name in lo.list_layers()}
    assert fp32 <= {name.removesuffix(".int8") for name in INT8_SCHEDULES}


# slow: a whole layer at -O3 (the quick tier's one -O3 quantized build, its headers precompiled for it
# alone); the quick tier runs the stored int8 schedules on small convs (test_compare_reports_quantized_ops_
# in_gops, test_cli's compare --int8) and the fp32 ones on their layers (test_best_schedules)
@pytest.mark.slow
@pytest.mark.optimized_build     # GCC 12 at -O1: 17 CPU-s in its combiner on conv4_x.int8's kernel, -O3: 1 s
@pytest.mark.parametrize("name, isa", rotated(INT8_SCHEDULES, SIMD_ISAS))  # scalar: below
def test_int8_schedule_on_its_layer(name, isa):
    """The stored int8 schedule on its layer: a register block with the epilogue fused (on the SIMD
    ISAs), or, stored with isa = "amx" (lo.stored_isa), an AMX tile schedule on the tiles."""
    op = quantized(lo.get_layer(name.removesuffix(".int8")), BENCHMARK_SPEC)
    schedule = lo.load_schedule(name, op)
    if lo.stored_isa(name, op) == "amx":
        assert check(schedule, "amx").isa == "amx"
        return
    kernel = check(schedule, isa)
    assert schedule.register_block_at is not None and kernel.plan.fused_epilogue
    taps = dict(schedule.layouts)[op.inputs[1]].endswith("4w")     # a tap dot schedule (codegen/taps.py)
    assert (kernel.plan.tap_dot is not None) == taps
    assert (kernel.plan.dot_loop is not None) == (op.groups == 1 or taps)   # VNNI but on widened depthwise


@pytest.mark.slow
@pytest.mark.parametrize("name", INT8_SCHEDULES)
@settings(max_examples=2, **HYPOTHESIS)
@given(data=st.data())
def test_int8_schedule_applies_to_any_quantized_conv(name, data):
    op = quantized(data.draw(conv_ops(max_hw=7)), data.draw(SPECS))
    check(lo.load_schedule(name, op), data.draw(st.sampled_from(ISAS)))


@pytest.mark.parametrize("isa", ISAS)
def test_fused_epilogue_dead_lanes_read_the_tables_in_bounds(isa):
    """5 columns in a vector of 8: the dead lanes 5..7 compute the last column's value (clamped
    index), so they read the activation sums and compensation tables in bounds (the sanitizer tier
    sees such a read)."""
    op = lo.Conv2d(1, 1, 3, padding=1, height=5, width=5, quant=lo.QuantSpec("uint8", True, False, "uint8"))
    s = lo.Schedule(op).tile(ow=8).vectorize("ow_i").register_block("c")
    kernel = check(s, isa)
    if isa != "scalar":
        assert kernel.plan.fused_epilogue and "const int lo_w = ((8*ow_o + lo_lane) < 4 ? " in kernel.source
