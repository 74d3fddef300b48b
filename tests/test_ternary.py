"""Ternary weights (QuantSpec(weight="ternary")) stored as i2_s: exact against quant.py's reference on
every integer ISA here plus scalar, the packing, and the refusals."""
import numpy as np
import pytest
from helpers import INT_ISAS as ISAS
from helpers import SIMD_INT_ISAS as SIMD_ISAS
from helpers import (
    SPECS,
    conv_ops,
    generates,
    layout_tags,
    quantized_schedules,
    quick_first,
    rotated,
    schedules,
    tiers,
)
from helpers import check_quantized as check
from hypothesis import strategies as st

import loopopt as lo
from loopopt.codegen.ternary import pack_i2s, packed_bytes, unpack_i2s
from loopopt.quant_reference import random_call
from loopopt.schedule import block_limit
from loopopt.targets.lut import check_lut, lut_nest, pack_lut
from loopopt.targets.lut_format import FORMATS

TERNARY_SPECS = SPECS.map(lambda s: lo.QuantSpec(s.activation, s.per_channel, True, s.output, "ternary"))


def random_ternary_conv_schedule(isa, data):
    """A random legal schedule of a random ternary conv in i2_s, either compensation, sometimes
    dequantizing."""
    op = data.draw(conv_ops(max_hw=7)).with_quant(data.draw(TERNARY_SPECS))
    check(data.draw(quantized_schedules(op, isa)).weight_format("i2_s"), isa)


test_random_ternary_conv_schedules_quick, test_random_ternary_conv_schedules = tiers(
    random_ternary_conv_schedule, 1, 12, isas=ISAS, data=st.data())


def random_ternary_matmul_schedule(isa, data, m, n, k):
    """A random legal schedule of a random ternary matmul in i2_s."""
    op = lo.Matmul(m, n, k, quant=data.draw(TERNARY_SPECS))
    check(data.draw(schedules(op, isa)).weight_format("i2_s"), isa)


test_random_ternary_matmul_schedules_quick, test_random_ternary_matmul_schedules = tiers(
    random_ternary_matmul_schedule, 1, 6, isas=ISAS,
    data=st.data(), m=st.integers(1, 9), n=st.integers(1, 37), k=st.integers(1, 70))


def random_ternary_dot_schedule(isa, data):
    """The VNNI form of a random ternary conv (c split by 4, 4 input channels innermost in the weights)
    under random output-channel blocks and tiles: whole aligned vectors, dot-group gathers and
    broadcasts of the packed weights, channels not a multiple of 4, 16 or 64."""
    op = data.draw(conv_ops(max_hw=6)).with_quant(data.draw(TERNARY_SPECS))
    block = data.draw(st.sampled_from([4, 8, 16]))
    s = (lo.Schedule(op).layout("I", "NHWC").layout("O", data.draw(st.sampled_from(["NHWC", "NCHW"])))
         .layout("W", f"OIHW{block}o4i").split("c", 4)
         .tile(ow=data.draw(st.integers(1, 4)), k=data.draw(st.sampled_from([4, 8, 16])))
         .reorder("k_o", "oh", "ow_o", "c_o", "kh", "kw", "c_i", "ow_i", "k_i"))
    if data.draw(st.integers(0, 2)) == 0:
        s = s.reorder("k_o", "oh", "ow_o", "c_o", "kh", "kw", "c_i", "k_i", "ow_i")
    s = s.vectorize(s.loop_names[-1])
    if data.draw(st.booleans()) and generates(s.register_block("c_o"), isa):
        s = s.register_block("c_o")
    check(s.weight_format("i2_s"), isa)


test_random_ternary_dot_schedules_quick, test_random_ternary_dot_schedules = tiers(
    random_ternary_dot_schedule, 1, 12, isas=ISAS, data=st.data())


def vnni_conv(s, block=16):
    return (s.layout("I", "NHWC").layout("O", "NHWC").layout("W", f"OIHW{block}o4i").split("c", 4)
            .tile(ow=3, k=block).reorder("k_o", "oh", "ow_o", "c_o", "kh", "kw", "c_i").vectorize("k_i"))


SPEC_CASES = {
    "u8-pc-float": lo.QuantSpec("uint8", True, True, "float32", "ternary"),
    "s8-pt-int32": lo.QuantSpec("int8", False, True, "int32", "ternary"),
    "u8-pt-uint8": lo.QuantSpec("uint8", False, True, "uint8", "ternary"),
    "s8-pc-int8": lo.QuantSpec("int8", True, True, "int8", "ternary"),
}


@pytest.mark.parametrize("spec, isa", rotated(SPEC_CASES, SIMD_ISAS))
def test_aligned_vectors_take_the_fast_path(spec, isa):
    # c = 6 (the blocked weights are zero-padded to 8), k = 20 (a partial vector), padding, stride, groups,
    # dilation, batch
    op = lo.Conv2d(12, 40, 3, stride=(1, 2), padding=(1, 2), dilation=(2, 1), groups=2, batch=2, height=7,
                   width=9, bias=True, quant=spec)
    lanes = 16 if isa == "avx512" else 8
    kernel = check(vnni_conv(lo.Schedule(op), lanes).weight_format("i2_s"), isa)
    assert kernel.plan.dot_loop == "c_i" and kernel.plan.packed_weights
    nest = kernel.source.split("the reduction nest")[1]
    assert "lo_i2s_vector(W," in nest and "weights: ternary, i2_s" in kernel.source


@pytest.mark.parametrize("isa", quick_first(SIMD_ISAS))
def test_second_half_of_a_block_on_avx2_vectors(isa):
    # 8 lanes x 4 = 32 weights per vector: every other vector starts in the middle of a 64-weight block
    op = lo.Conv2d(8, 16, 1, height=3, width=5, quant=lo.QuantSpec("uint8", True, True, "int32", "ternary"))
    kernel = check(vnni_conv(lo.Schedule(op), 8).weight_format("i2_s"), isa)
    assert kernel.plan.dot_loop == "c_i"


def test_int8_format_is_the_default_and_exact():
    op = lo.Matmul(3, 19, 33, quant=lo.QuantSpec("int8", True, True, "int32", "ternary"))
    kernel = check(lo.Schedule(op).reorder("i", "k", "j").vectorize("j"), ISAS[0])
    assert not kernel.plan.packed_weights and "lo_i2s" not in kernel.source


def test_packing_round_trip_and_size():
    rng = np.random.default_rng(0)
    for n in (1, 63, 64, 65, 200):
        w = rng.integers(-1, 2, size=n).astype(np.int8)
        packed = pack_i2s(w)
        assert packed.dtype == np.uint8 and packed.size == packed_bytes(n) == 16 * -(-n // 64)
        assert np.array_equal(unpack_i2s(packed, n), w)
    # element 17 of a block: byte 1, bits 2-3, code w + 1
    w = np.zeros(64, np.int8)
    w[17] = 1
    assert pack_i2s(w)[1] == 0b01_01_10_01   # fields 3, 2, 1, 0 from the high bits


def test_i2s_buffer_is_a_quarter_of_int8():
    op = lo.Matmul(1, 256, 512, quant=lo.QuantSpec("int8", False, True, "int32", "ternary"))
    int8, i2s = lo.Schedule(op).compile("scalar"), lo.Schedule(op).weight_format("i2_s").compile("scalar")
    assert (int8.buffer_bytes()["packed buffers"] - i2s.buffer_bytes()["packed buffers"]
            == 256 * 512 - 256 * 512 // 4)
    sizes = (int8.tensor_bytes("B"), i2s.tensor_bytes("B"), i2s.tensor_bytes("A"))
    assert sizes == (256 * 512, 256 * 512 // 4, 512)
    with pytest.raises(ValueError, match="'lo_nothing' is not an array parameter"):
        i2s.tensor_bytes("lo_nothing")


def test_weights_outside_ternary_are_refused_with_value_and_index():
    op = lo.Conv2d(3, 4, 3, height=5, width=5, quant=lo.QuantSpec("uint8", True, True, "int32", "ternary"))
    kernel = lo.Schedule(op).weight_format("i2_s").compile("scalar")
    args, params = random_call(op, 0)
    args[1][2, 1, 0, 2] = 2
    with pytest.raises(ValueError, match=r"must be -1, 0 or \+1: weight\[2, 1, 0, 2\] = 2"):
        kernel(*args, **params)
    args[1][2, 1, 0, 2] = 0
    with pytest.raises(ValueError, match="w_zero_point=1 must be 0"):
        kernel(*args, **(params | {"w_zero_point": np.ones(4, np.int8)}))
    with pytest.raises(TypeError, match=r"weight dtype int16 does not match QuantSpec\(weight='ternary'\)"):
        kernel(args[0], args[1].astype(np.int16), *args[2:], **params)


def test_spec_and_schedule_refusals():
    with pytest.raises(ValueError, match="weight='ternary' is symmetric"):
        lo.QuantSpec("uint8", True, False, "int32", "ternary")
    with pytest.raises(ValueError, match="weight='int4' is not supported; allowed: .*'ternary'"):
        lo.QuantSpec(weight="int4")
    int8 = lo.Schedule(lo.Matmul(2, 3, 4, quant=lo.QuantSpec()))
    with pytest.raises(lo.ScheduleError, match="weights are 'int8' .*QuantSpec\\(weight='ternary'\\)"):
        int8.weight_format("i2_s")
    with pytest.raises(lo.ScheduleError, match="not quantized"):
        lo.Schedule(lo.Matmul(2, 3, 4)).weight_format("i2_s")
    ternary = lo.Schedule(lo.Matmul(2, 3, 4, quant=lo.QuantSpec(weight="ternary")))
    with pytest.raises(lo.ScheduleError, match="'tl3' is not a choice; allowed: 'int8', 'i2_s', 'tl1', "):
        ternary.weight_format("tl3")


def test_weight_format_is_printed_and_saved():
    op = lo.Matmul(2, 3, 4, quant=lo.QuantSpec(weight="ternary"))
    s = lo.Schedule(op).reorder("i", "k", "j").vectorize("j").weight_format("i2_s")
    assert "weight_format('i2_s')" in s.pseudocode()
    loaded = lo.schedule_file.schedule_from_toml(lo.to_toml(s), op)
    assert loaded.weight_format_mode == "i2_s" and loaded.steps == s.steps


def test_quantize_ternary_is_absmean():
    w = np.array([[0.5, -2.0, 0.1, 1.4], [0.0, 0.0, 0.0, 0.0]], np.float32)
    q, scale, zero = lo.quantize_ternary(w, axis=0)
    assert np.allclose(scale, [1.0, 1.0]) and zero.tolist() == [0, 0]
    assert q.tolist() == [[0, -1, 0, 1], [0, 0, 0, 0]]
    q, scale, zero = lo.quantize_ternary(w)
    assert scale == np.float32(0.5) and zero == 0 and q[0].tolist() == [1, -1, 0, 1]


# --- TL1, TL2: table lookup ------------------------------------------------------------------------

LUTS = [(fmt, isa) for fmt in FORMATS for isa in ISAS]


def lut_variants(quick):
    """``LUTS`` as parameters: ``quick`` (a format and an ISA) in the quick tier, the others slow."""
    return [pytest.param(v, id=f"{v[0]}-{v[1]}", marks=() if v == quick else pytest.mark.slow) for v in LUTS]


@st.composite
def lut_schedules(draw, op, fmt):
    """A random table-lookup schedule of ``op``: a split of each dim drawn (output channels by multiples of
    32, input channels by multiples of a byte of indices), the loops in a random order, sometimes a register
    block and sometimes a parallel loop (where the kernel takes them), layouts of the activations and the
    output."""
    units = {op.channel_dim: 32, op.reduction_channel_dim: 2 * FORMATS[fmt].group}
    s = lo.Schedule(op)
    for dim in op.dim_names:
        if draw(st.integers(0, 2)) == 0:    # at most one partial block past the loop (block_limit)
            unit = units.get(dim, 1)
            most = max(1, min(3, block_limit(s.loop(dim).extent) // unit))
            s = s.split(dim, unit * draw(st.integers(1, most)))
    s = s.reorder(*draw(st.permutations(s.loop_names)))
    for tensor in (op.inputs[0], op.output):
        s = s.layout(tensor, draw(st.sampled_from(layout_tags(op.tensor(tensor).letters))))
    if draw(st.booleans()):
        try:
            blocked = s.register_block(draw(st.sampled_from(s.loop_names)))
            lut_nest(blocked.weight_format(fmt))
            s = blocked
        except lo.ScheduleError:
            pass
    if draw(st.booleans()):
        threaded = [s.parallel(name) for name in s.loop_names if lut_parallel_ok(s, name, fmt)]
        s = draw(st.sampled_from(threaded)) if threaded else s
    return s.weight_format(fmt)


def lut_parallel_ok(schedule, name, fmt):
    """``schedule.parallel(name)`` is accepted, and the table-lookup kernel takes it (on every target)."""
    try:
        check_lut(schedule.parallel(name).weight_format(fmt))
    except lo.ScheduleError:
        return False
    return True


def threads_of(schedule):
    """2 threads for a schedule with a parallel loop, else 1."""
    return 2 if schedule.parallel_loop is not None else 1


def extreme_call(op, seed, data):
    """``random_call`` with activations at the ends of their range half of the time (the int16 sums'
    worst case)."""
    args, params = random_call(op, seed)
    if data.draw(st.booleans()):
        info = np.iinfo(op.quant.activation)
        ends = np.random.default_rng(seed).choice([info.min, info.max], args[0].shape)
        args[0] = ends.astype(args[0].dtype)
    return args, params


def random_lut_conv(variant, data):
    """A random ternary conv (1-3 spatial dims, groups, depthwise, stride, dilation, padding per side,
    batch, more than one column block per group, channels not a multiple of a byte) under a random
    table-lookup schedule."""
    fmt, isa = variant
    op = data.draw(conv_ops(max_hw=6, max_channels=14, spatial=data.draw(st.sampled_from([1, 2, 2, 3]))))
    if data.draw(st.integers(0, 3)) == 0:
        op = type(op)(**{**op.arguments, "out_channels": op.groups * data.draw(st.integers(33, 70))})
    op = op.with_quant(data.draw(TERNARY_SPECS))
    s = data.draw(lut_schedules(op, fmt))
    kernel = check(s, isa, call=extreme_call(op, 1, data), threads=threads_of(s))
    assert f"weights: ternary, {fmt}" in kernel.source


test_random_lut_convs_quick, test_random_lut_convs = tiers(
    random_lut_conv, 1, 10, data=st.data(),
    marks=[pytest.mark.parametrize("variant", lut_variants(("tl2", ISAS[min(1, len(ISAS) - 1)])))])


def random_lut_matmul(variant, data, m, n, k):
    """A random ternary matmul (either operand transposed, K not a multiple of 2 or 3, columns not a multiple
    of 32) under a random table-lookup schedule."""
    fmt, isa = variant
    op = lo.Matmul(m, n, k, trans_a=data.draw(st.booleans()), trans_b=data.draw(st.booleans()),
                   quant=data.draw(TERNARY_SPECS))
    s = data.draw(lut_schedules(op, fmt))
    kernel = check(s, isa, call=extreme_call(op, 1, data), threads=threads_of(s))
    assert f"weights: ternary, {fmt}" in kernel.source


test_random_lut_matmuls_quick, test_random_lut_matmuls = tiers(
    random_lut_matmul, 1, 6, marks=[pytest.mark.parametrize("variant", lut_variants(("tl1", ISAS[0])))],
    data=st.data(),
    m=st.integers(1, 4), n=st.integers(1, 70), k=st.integers(1, 300))


def random_lut_gemv_eight_blocks(variant, data, m, n, k):
    """The GEMV schedule of bench_lowbit's ``lut_gemv_schedule`` (8 column blocks, 256 outputs, in registers
    across the reduction), on 1-3 rows, 225-300 columns (a partial last block, a second column step of
    1-2 blocks) and any K (not a multiple of a group or of a byte of indices)."""
    fmt, isa = variant
    op = lo.Matmul(m, n, k, quant=data.draw(TERNARY_SPECS))
    s = lo.Schedule(op).split("j", 256).reorder("i", "j_o", "k", "j_i").register_block("k").weight_format(fmt)
    kernel = check(s, isa, call=extreme_call(op, 1, data))
    assert "j_i[8]" in kernel.source and "block: j_i */" in kernel.source        # 8 blocks in registers


test_random_lut_gemv_eight_blocks_quick, test_random_lut_gemv_eight_blocks = tiers(
    random_lut_gemv_eight_blocks, 1, 4, data=st.data(), m=st.integers(1, 3), n=st.integers(225, 300),
    k=st.integers(1, 700), marks=[pytest.mark.parametrize("variant", lut_variants(("tl2", ISAS[0])))])


@pytest.mark.parametrize("variant", quick_first(LUTS), ids=str)
def test_lut_long_reduction_widens_the_int16_sums(variant):
    # 4000 uint8 activations of 250 against +1 / -1 weights: the int16 partial sums must be widened
    # (the innermost loop alone is longer than the int16 chunk)
    fmt, isa = variant
    op = lo.Matmul(1, 40, 4000, quant=lo.QuantSpec("uint8", True, True, "int32", "ternary"))
    kernel = lo.Schedule(op).weight_format(fmt).compile(isa)
    x = np.full((1, 4000), 250, np.uint8)
    w = np.ones((4000, 40), np.int8)
    w[:, 3] = -1
    y = kernel(x, w, x_zero_point=np.uint8(0), w_zero_point=np.zeros(40, np.int8))
    assert y[0, 0] == 4000 * 250 and y[0, 3] == -4000 * 250


CONV_ORDERS = {
    # widened after each input-channel byte (kh x kw fits the int16 chunk), after each kw (c alone fits)
    "c-kh-kw": ("n", "k", "oh", "ow", "c", "kh", "kw"),
    "kh-kw-c": ("n", "k", "oh", "ow", "kh", "kw", "c"),
}


@pytest.mark.parametrize("fmt, order, isa", rotated({f"{fmt}-{name}": (fmt, order) for fmt in FORMATS
                                                      for name, order in CONV_ORDERS.items()}, ISAS,
                                                     quick=["tl2-kh-kw-c"]))
def test_lut_conv_reduction_longer_than_the_int16_chunk(fmt, order, isa):
    op = lo.Conv2d(144, 40, 3, padding=1, bias=False, height=4, width=5,
                   quant=lo.QuantSpec("uint8", True, True, "int32", "ternary"))
    kernel = lo.Schedule(op).reorder(*order).weight_format(fmt).compile(isa)
    x = np.full(op.tensor("I").shape, 255, np.uint8)
    w = np.ones(op.tensor("W").shape, np.int8)
    w[5] = -1
    y = kernel(x, w, x_zero_point=np.uint8(0), w_zero_point=np.zeros(40, np.int8))
    assert y[0, 0, 1, 1] == 144 * 9 * 255 and y[0, 5, 1, 1] == -144 * 9 * 255
    assert y[0, 0, 0, 0] == 144 * 4 * 255      # a corner: 4 valid taps


@pytest.mark.parametrize("isa", quick_first(ISAS))
def test_lut_tables_are_built_per_row_band_and_blocks_share_loads(isa):
    # oh_o, then k_o (not a table loop): the tables cover one band of 2 output rows (4 input rows with the
    # halo); the register block keeps 2 column blocks x 3 positions, each step loads 2 index vectors and
    # 3 pixels' tables
    op = lo.Conv2d(8, 64, 3, stride=1, padding=(1, 2), groups=1, batch=2, height=7, width=6,
                   quant=lo.QuantSpec("int8", True, True, "int8", "ternary"))
    s = (lo.Schedule(op).tile(oh=2).split("k", 64).tile(ow=3)
         .reorder("n", "oh_o", "k_o", "oh_i", "ow_o", "kh", "kw", "c", "ow_i", "k_i").register_block("kh"))
    kernel = check(s.weight_format("tl1"), isa)
    assert "tables built inside: n, oh_o;" in kernel.source and "block: ow_i, k_i" in kernel.source
    assert "g[1] x i0[4] x i1[" in kernel.source
    assert "lo_ix1" in kernel.source and "lo_ix2" not in kernel.source
    assert "lo_tb2" in kernel.source and "lo_tb3" not in kernel.source


@pytest.mark.parametrize("fmt, isa", rotated(list(FORMATS), ISAS))
def test_lut_kernels_run_their_parallel_loop_on_threads(fmt, isa):
    # a GEMV's column blocks (a partial one: 300 outputs), and a conv's row loop inside the tables of an image
    spec = lo.QuantSpec("int8", True, True, "int8", "ternary")
    gemv = (lo.Schedule(lo.Matmul(1, 300, 75, quant=spec)).split("j", 64).reorder("i", "j_o", "k", "j_i")
            .register_block("k").parallel("j_o"))
    conv = lo.Conv2d(7, 40, 3, stride=2, padding=1, batch=2, height=9, width=8, quant=spec)
    rows = lo.Schedule(conv).layout("I", "NHWC").reorder("n", "k", "oh", "ow", "kh", "kw", "c").parallel("oh")
    for schedule, loop in ((gemv, "j_o"), (rows, "oh")):
        for threads in (1, 2, 3):
            kernel = check(schedule.weight_format(fmt), isa, threads=threads)
            assert f"on OpenMP threads: {loop}" in kernel.source and kernel.threads == threads


def test_tl2_packs_a_sign_bit_and_14_classes():
    fmt = FORMATS["tl2"]
    assert len(fmt.classes) == 14 and fmt.classes[0] == (0, 0, 0)
    index, sign = fmt.encode(np.array([[1, -1, 0], [-1, 1, 0], [0, 0, -1], [0, 0, 0]]))
    assert index[0] == index[1] and sign.tolist() == [0, 1, 1, 0] and index[3] == 0


def test_lut_conv_weights_are_packed_per_block_tap_and_byte():
    op = lo.Conv2d(5, 40, (1, 2), groups=1, height=3, width=3, quant=lo.QuantSpec(weight="ternary"))
    w = np.zeros(op.tensor("W").shape, np.int8)
    w[33, 4, 0, 1] = 1          # block 1, column 1, tap (0, 1), channel 4: byte 1, group 2 (low nibble)
    packed = pack_lut(op, w, FORMATS["tl1"])
    assert packed.size == 2 * 2 * 2 * 32
    zero = 3 * 1 + 1            # the index of the pair (0, 0)
    expected = np.full(packed.size, zero | zero << 4, np.uint8)
    expected[((1 * 2 + 1) * 2 + 1) * 32 + 1] = (3 * 2 + 1) | zero << 4
    assert np.array_equal(packed, expected)


def lut_matmul():
    """The naive schedule of a small ternary matmul, for the refusals."""
    return lo.Schedule(lo.Matmul(2, 40, 8, quant=lo.QuantSpec(weight="ternary")))


REFUSALS = {name: case for name, case in zip(
    ("fuse", "vectorize", "unroll", "parallel", "weights-layout", "compensation-kernel", "dequantize",
     "split-columns", "split-bytes", "register-block", "batched-matmul"), [
    (lambda: lut_matmul().fuse("i", "j"), r"fuse does not apply .*use split, tile and reorder"),
    (lambda: lut_matmul().reorder("i", "k", "j").vectorize("j"), r"vectorize does not apply .*itself"),
    (lambda: lut_matmul().unroll("k"), r"unroll does not apply .*register_block unrolls"),
    (lambda: lut_matmul().parallel("i"), r"parallel\('i'\): the tables are built inside that loop, in one "
     r"workspace the threads would share; parallelize a loop between the table build and the accumulation "
     r"region: j$"),
    (lambda: lut_matmul().layout("B", "NK"), r"layout\('B', \.\.\.\) does not apply .*own order"),
    (lambda: lut_matmul().compensation("kernel"), r"compensation\('kernel'\) does not apply"),
    (lambda: lo.Schedule(lo.Matmul(2, 40, 8, quant=lo.QuantSpec(weight="ternary", output="float32")))
     .arithmetic("dequantize"), r"arithmetic\('dequantize'\) does not apply"),
    (lambda: lut_matmul().split("j", 8), r"split\('j', 8\): the kernel steps j in column blocks of 32 "
     r"output channels, so the factor must be a multiple of 32"),
    (lambda: lut_matmul().split("k", 6), r"split\('k', 6\): .*bytes of indices \(4 input channels\).*"
     r"multiple of 4"),
    (lambda: lo.Schedule(lo.Matmul(40, 200, 8, quant=lo.QuantSpec(weight="ternary"))).split("i", 5)
     .reorder("i_o", "k", "i_i", "j").register_block("k"),
     r"register block holds 35 accumulators .*at most 16"),
    (lambda: lo.Schedule(lo.Matmul(2, 40, 8, batch=3, quant=lo.QuantSpec(weight="ternary"))),
     r"a convolution or a GEMM with one batch \(row\) dim; .* has the position dims b, i"),
])}


@pytest.mark.parametrize("schedule, message", REFUSALS.values(), ids=REFUSALS.keys())
def test_lut_refusals(schedule, message):
    with pytest.raises(lo.ScheduleError, match=message):
        schedule().weight_format("tl1").compile("scalar")


@pytest.mark.parametrize("fmt", quick_first(list(FORMATS)))   # tl2: the quick tier's other lookup tests
def test_table_lookup_dataflow_blocks_pixels_and_column_blocks(fmt):
    # a strided, padded conv with 70 channels (a partial column block) and a GEMV, under
    # dataflows.table_lookup: exact, and the block is the one asked for
    spec = lo.QuantSpec("uint8", True, True, "int32", "ternary")
    conv = lo.Conv2d(10, 70, 3, stride=2, padding=(1, 2), height=9, width=11, quant=spec)
    kernel = check(lo.dataflows.table_lookup(conv, fmt, pixels=3, channels=64), ISAS[0])
    assert f"weights: ternary, {fmt}" in kernel.source and "block: ow_i, k_i" in kernel.source
    gemv = lo.Matmul(1, 100, 45, quant=spec)
    kernel = check(lo.dataflows.table_lookup(gemv, fmt, pixels=1, channels=128), ISAS[0])
    assert "block: i_i, j" in kernel.source
    with pytest.raises(lo.ScheduleError, match=r"split\('k', 40\).*multiple of 32"):
        lo.dataflows.table_lookup(conv, fmt, channels=40).compile("scalar")
