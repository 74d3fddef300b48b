"""Every generated kernel agrees with the numpy reference, on every ISA here plus scalar."""
import itertools

import numpy as np
import pytest
from helpers import (
    ISAS,
    check,
    conv_ops,
    gemm_ops,
    matmul_ops,
    quick_first,
    rotated,
    schedules,
    spatially_blocked_schedules,
    tiers,
)
from hypothesis import assume
from hypothesis import strategies as st

import loopopt as lo
from loopopt.cbuild import compile_c
from loopopt.codegen.vector import exact_offset
from loopopt.measure import tolerance
from loopopt.targets.x86.space import candidates, in_panels


def random_conv_schedule(isa, data):
    """A random legal schedule of a random conv."""
    op = data.draw(conv_ops())
    check(data.draw(schedules(op, isa)), isa)


test_random_conv_schedules_quick, test_random_conv_schedules = tiers(
    random_conv_schedule, 1, 12, isas=ISAS, data=st.data())


def random_conv_nd_schedule(isa, spatial, data):
    """A random legal schedule of a random Conv1d or Conv3d (asymmetric and "same" padding too)."""
    op = data.draw(conv_ops(max_hw=9 if spatial == 1 else 4, spatial=spatial, max_channels=3))
    check(data.draw(schedules(op, isa)), isa)


test_random_conv_nd_schedules_quick, test_random_conv_nd_schedules = tiers(
    random_conv_nd_schedule, 1, 8, isas=ISAS, marks=[pytest.mark.parametrize("spatial", [1, 3])],
    data=st.data())


def random_matmul_schedule(isa, data):
    """A random legal schedule of a random matmul (batch dims, transposes)."""
    op = data.draw(matmul_ops())
    check(data.draw(schedules(op, isa)), isa)


test_random_matmul_schedules_quick, test_random_matmul_schedules = tiers(
    random_matmul_schedule, 1, 6, isas=ISAS, data=st.data())


def random_gemm_schedule(isa, data):
    """A random legal schedule of a random Gemm (alpha, beta, C broadcast, transposes)."""
    op = data.draw(gemm_ops())
    check(data.draw(schedules(op, isa)), isa)


test_random_gemm_schedules_quick, test_random_gemm_schedules = tiers(
    random_gemm_schedule, 1, 8, isas=ISAS, data=st.data())


def search_space_conv(isa, data):
    """A random register-blocked candidate of ``lo.tune``'s search space of a random conv (channels-last
    activations, plain or packed weights; its loads indexed from one operand base per tensor where isl
    proves them at constant distances from it)."""
    op = data.draw(conv_ops(max_channels=20))
    found = [c for c in candidates(op, isa) if c.knobs.weights in ("plain", "packed")]
    kernel = check(data.draw(st.sampled_from(found)).schedule, isa)
    if isa != "scalar" and op.groups == 1:          # the input a broadcast along the channel lanes
        assert "lo_base_I" in kernel.source


test_search_space_convs_quick, test_search_space_convs = tiers(
    search_space_conv, 1, 10, isas=ISAS, data=st.data())


def prefetched_search_space_op(isa, data):
    """A random packed-weights candidate of a random conv, matmul or Gemm with its weights prefetched
    ``ahead`` elements (``Schedule.prefetch``): the same outputs, one prefetch per cache line of a
    reduction step's weight loads on a SIMD ISA; the scalar emitter, with no operand base, refuses it."""
    op = data.draw(st.one_of(conv_ops(max_channels=20), matmul_ops(batched=False), gemm_ops()))
    found = [c for c in candidates(op, isa) if c.knobs.weights == "packed"]
    assume(found)
    schedule = data.draw(st.sampled_from(found)).schedule.prefetch(op.inputs[1],
                                                                   data.draw(st.integers(1, 4096)))
    if isa == "scalar":
        with pytest.raises(lo.ScheduleError, match="does not read .* at constant distances from one base"):
            schedule.compile(isa)
        return
    kernel = check(schedule, isa)
    assert f"__builtin_prefetch(&lo_base_{op.inputs[1]}[" in kernel.source


test_prefetched_search_space_ops_quick, test_prefetched_search_space_ops = tiers(
    prefetched_search_space_op, 1, 8, isas=ISAS, data=st.data())


def panelled_search_space_op(isa, data):
    """A random packed-weights register block (no cache block) of a random conv, matmul or Gemm in channel
    panels of 2 or 3 channel blocks (``space.in_panels``: the panels' loop outermost, the panel's channel
    blocks innermost; the last panel, channel block and pixel block partial where the sizes leave them so):
    the same outputs as the reference."""
    op = data.draw(st.one_of(conv_ops(max_channels=40), matmul_ops(), gemm_ops()))
    found = [c for c in candidates(op, isa) if c.knobs.weights == "packed" and not c.knobs.cache_block]
    assume(found)
    knobs = data.draw(st.sampled_from(found)).knobs
    panelled = in_panels(op, knobs, knobs.channel_block * data.draw(st.integers(2, 3)))
    check(panelled.schedule(op, isa), isa)


test_panelled_search_space_ops_quick, test_panelled_search_space_ops = tiers(
    panelled_search_space_op, 1, 4, isas=ISAS, data=st.data())


def spatially_blocked_conv(isa, data):
    """A register block of a random conv over spatially blocked activations (``spatially_blocked_schedules``:
    loads, the operand base's own and a vector's first lane too, in the padding of another spatial block)."""
    check(data.draw(spatially_blocked_schedules(isa)), isa)


test_spatially_blocked_convs_quick, test_spatially_blocked_convs = tiers(
    spatially_blocked_conv, 2, 6, isas=ISAS, data=st.data())


# issue 31: the block's first load, its operand base, at column (row) -2 of a stride-3 window: block -1
BASE_IN_THE_PADDING = {
    "columns": (dict(stride=(1, 3), padding=(0, 2), height=4, width=8), "ow", ("oh", "ow_o"), "NCHW16c4w"),
    "rows": (dict(stride=(3, 1), padding=(2, 0), height=8, width=4), "oh", ("oh_o", "ow"), "NCHW4c3h"),
}


@pytest.mark.parametrize("geometry, tiled, outer, layout, isa", rotated(BASE_IN_THE_PADDING, ISAS))
def test_operand_base_in_the_padding_of_a_spatial_block(geometry, tiled, outer, layout, isa):
    s = (lo.Schedule(lo.Conv2d(3, 16, 1, bias=False, **geometry)).layout("O", "NHWC").layout("W", "HWIO")
         .tile(**{tiled: 3, "k": 16}).reorder(*outer, "k_o", "c", "kh", "kw").vectorize("k_i")
         .register_block("c").layout("I", layout))
    kernel = check(s, isa)
    assert isa == "scalar" or "lo_base_I = " in kernel.source


@pytest.mark.parametrize("isa", quick_first(ISAS))
def test_strided_vector_from_a_first_lane_in_the_padding(isa):
    # the lanes' rows 2*oh_o - 1 and 2*oh_o cross a block of NCHW2h: strided(3) from lane 0's element,
    # at row -1 (block -1) where oh_o = 0; in the plain nest and in a register block
    op = lo.Conv2d(1, 1, 1, padding=(1, 0), height=1, width=2)
    s = (lo.Schedule(op).layout("I", "NCHW2h").split("oh", 2)
         .reorder("n", "k", "oh_o", "ow", "c", "kh", "kw", "oh_i").vectorize("oh_i"))
    for schedule in (s, s.register_block("c")):
        assert isa == "scalar" or "I strided(3)" in check(schedule, isa).source


@pytest.mark.parametrize("tag", ["NCHW4c3w", "NCHW2h3w"])
def test_exact_offsets_are_floor_divisions_in_c(tag):
    # the input's offset of a strided, padded conv reaches rows and columns -2 (block -1, whose C
    # truncation is block 0): exact_offset's C has the offset's value everywhere in the loop box
    op = lo.Conv2d(3, 2, 2, stride=3, padding=2, bias=False, height=7, width=8)
    s = lo.Schedule(op).layout("I", tag).tile(ow=3)
    offset, names = s.offset("I"), s.loop_names
    text = exact_offset(s, offset)
    assert text != offset.to_c()
    module = compile_c(f"long f({', '.join(f'long {n}' for n in names)}) {{ return {text}; }}",
                       f"long f({', '.join('long' for _ in names)});")
    for values in itertools.product(*(range(loop.extent) for loop in s.loops)):
        assert module.lib.f(*values) == offset.evaluate(dict(zip(names, values)))


CONV = {"in_channels": 6, "out_channels": 20, "kernel_size": 3, "padding": 1, "batch": 2, "height": 7,
        "width": 9}


NAMED_SCHEDULES = {
    "tiled": lambda s: s.tile(ow=8, k=16).reorder("k_o", "oh", "ow_o", "c", "kh", "kw").vectorize("k_i"),
    "nhwc": lambda s: s.layout("I", "NHWC").layout("O", "NHWC").layout("W", "HWIO").tile(k=16)
    .vectorize("k_i"),
    "blocked-parallel": lambda s: s.layout("I", "NCHW16c").layout("O", "NCHW16c").layout("W", "OIHW16i16o")
    .tile(ow=4, k=16).unroll("ow_i").vectorize("k_i").parallel("oh"),
    "ow-vector": lambda s: s.split("ow", 16).reorder("ow_o", "c", "kh", "kw", "ow_i").vectorize("ow_i"),
    # reduction across lanes
    "reduction-vector": lambda s: s.vectorize("kw"),
    # strided input
    "fused": lambda s: s.fuse("oh", "ow").reorder("c", "kh", "kw", "oh_ow").vectorize("oh_ow"),
    # gathered weights
    "gather": lambda s: s.reorder("kh", "kw", "c").fuse("kw", "c").vectorize("kw_c"),
    "register-block": lambda s: s.layout("I", "NHWC").layout("O", "NHWC").layout("W", "HWIO").tile(ow=3, k=32)
    .reorder("k_o", "oh", "ow_o", "c", "kh", "kw").vectorize("k_i").register_block("c"),
    # lane guards from padding (listed before the partial block, so that the quick tier's scalar
    # register block is this one: the partial block's scalar C is 8x longer, seconds of gcc)
    "register-block-lanes": lambda s: s.split("ow", 5).reorder("ow_o", "c", "kh", "kw", "ow_i")
    .vectorize("ow_i").register_block("c"),
    # incomplete block: O loaded
    "register-block-partial": lambda s: s.tile(ow=4, k=16).reorder("k_o", "oh", "ow_o", "c", "kh", "kw")
    .vectorize("k_i").register_block("kh").parallel("k_o"),
    # lanes reduce
    "register-block-reduce": lambda s: s.split("c", 4).reorder("c_o", "kh", "kw", "c_i").split("ow", 2)
    .reorder("c_o", "kh", "kw", "ow_i").vectorize("c_i").register_block("c_o"),
}


@pytest.mark.parametrize("build, isa", rotated(NAMED_SCHEDULES, ISAS))
def test_named_schedules(build, isa):
    check(build(lo.Schedule(lo.Conv2d(**CONV))), isa)


@pytest.mark.parametrize("isa", quick_first(ISAS))
def test_strided_dilated_grouped(isa):
    op = lo.Conv2d(6, 9, (3, 2), stride=(2, 3), padding=(2, 1), dilation=(2, 1), groups=3, batch=3,
                   height=11, width=10)
    check(lo.Schedule(op).tile(k=2, ow=3).vectorize("ow_i"), isa)
    check(lo.Schedule(op).reorder("kw", "k").vectorize("k"), isa)


@pytest.mark.parametrize("isa", quick_first(ISAS))
def test_depthwise_blocked(isa):
    op = lo.Conv2d(20, 20, 3, padding=1, groups=20, height=6, width=5)
    s = lo.Schedule(op).layout("I", "NCHW16c").layout("O", "NCHW16c")
    check(s.reorder("kw", "k").vectorize("k"), isa)


@pytest.mark.parametrize("isa", quick_first(ISAS))
def test_output_constant_across_lanes_but_written_with_the_vector_loop(isa):
    # C's offset i + j mentions i_j_k, yet isl proves it constant over the 2 lanes
    s = lo.Schedule(lo.Matmul(1, 1, 2)).fuse("i", "j").fuse("i_j", "k").vectorize("i_j_k")
    check(s, isa)


@pytest.mark.parametrize("isa", quick_first(ISAS))
def test_register_block_of_outputs_without_any_valid_tap(isa):
    # kw is constant, so the padding guard of ow is checked outside the block and skips ow=0, 2:
    # those outputs are the bias alone
    op = lo.Conv2d(1, 1, kernel_size=1, padding=(0, 1), height=1, width=1)
    check(lo.Schedule(op).fuse("kh", "kw").register_block("c"), isa)


@pytest.mark.parametrize("isa", quick_first(ISAS))
def test_register_block_with_a_padding_guard_on_a_fused_block_loop(isa):
    # kw (a reduction dim) is fused with n_i into the block loop kw_n_i: the padding guard
    # of ow only skips updates; ow=0 and ow=2 still exist and hold the bias
    op = lo.Conv2d(1, 1, kernel_size=1, padding=(0, 1), height=1, width=1)
    check(lo.Schedule(op).tile(n=2).fuse("kw", "n_i").register_block("c"), isa)



@pytest.mark.parametrize("isa", ISAS)
def test_register_block_over_a_partial_channel_block_reads_the_bias_in_bounds(isa):
    # 17 channels in blocks of 8: the third block has one channel, its 7 dead accumulators must not
    # read B[17..23] (the sanitizer tier sees such a read; here the bias loads must be guarded)
    op = lo.Conv2d(1, 17, 1, height=1, width=4)
    s = lo.Schedule(op).tile(k=8, ow=4).vectorize("ow_i").register_block("c")
    check(s, isa)
    setup = [line for line in s.compile(isa).source.splitlines() if "lo_acc" in line and "B[" in line]
    assert setup and all("_ok ? " in line for line in setup)


@st.composite
def cache_blocked_schedules(draw):
    """A random conv, matmul or Gemm with its reduction channels split by a cache block whose outer
    loop is among the output loops outside a register block (the block's first visit of its outputs
    starts them: no pass sets the output first), the channel dim's inner loop innermost, vectorized or
    not."""
    op = draw(st.one_of(conv_ops(), matmul_ops(), gemm_ops()))
    rc, channel = op.reduction_channel_dim, op.channel_dim
    assume(op.extent(rc) >= 2)
    s = lo.Schedule(op).split(rc, draw(st.integers(1, op.extent(rc) - 1)))
    s = s.split(channel, draw(st.integers(1, op.extent(channel))))
    inner_channel, cache = f"{channel}_i", f"{rc}_o"
    summed = [n for n in s.loop_names if s.dims_of(n) & op.reduction_dims and n != cache]
    outputs = [n for n in s.loop_names if n not in summed and n not in (cache, inner_channel)]
    inner = draw(st.permutations(summed))
    s = s.reorder(*draw(st.permutations([*outputs, cache])), *inner, inner_channel)
    try:
        return (s.vectorize(inner_channel) if draw(st.booleans()) else s).register_block(inner[0])
    except lo.ScheduleError:
        assume(False)


def cache_blocked_schedule(isa, data):
    """The kernel of a cache-blocked register block agrees with the reference, also run twice on the
    same buffers (every output is set by the block's first visit, not added to the last run's)."""
    schedule = data.draw(cache_blocked_schedules())
    kernel = check(schedule, isa)
    op = schedule.op
    inputs = op.random_inputs(seed=1)
    args = [inputs[t] for t in op.call_tensors]
    buffers = kernel.prepare(*args)
    kernel.run(buffers)
    kernel.run(buffers)
    assert np.all(np.abs(kernel.output(buffers) - op.reference(*args)) <= tolerance(op, inputs))


test_cache_blocked_schedules_quick, test_cache_blocked_schedules = tiers(
    cache_blocked_schedule, 1, 14, isas=ISAS, data=st.data())


@pytest.mark.parametrize("isa", quick_first(ISAS))
def test_cache_blocked_matmul_starts_its_outputs_in_the_block(isa):
    # k in cache blocks of 5, k_o outside the 2 x 16 block: the accumulators start at zero where
    # k_o == 0 and load C after; no pass zeroes C first
    s = (lo.Schedule(lo.Matmul(6, 40, 13)).split("k", 5).tile(i=2, j=16)
         .reorder("j_o", "k_o", "i_o", "k_i").vectorize("j_i").register_block("k_i"))
    kernel = check(s, isa)
    assert "lo_first = k_o == 0" in kernel.source and "/* C = 0 */" not in kernel.source
    check(s.parallel("j_o"), isa, threads=2)         # each thread's panels of C


@pytest.mark.parametrize("isa", quick_first(ISAS))
def test_partial_register_block_runs_whole_blocks_without_its_guards(isa):
    # 7 rows in blocks of 3: the last block has one row, the others run their reduction without the
    # accumulators' existence tests and the row guards of A's loads (both hold there)
    s = (lo.Schedule(lo.Matmul(7, 20, 9)).tile(i=3, j=16)
         .reorder("i_o", "j_o", "k").vectorize("j_i").register_block("k"))
    kernel = check(s, isa)
    whole, _, partial = kernel.source.partition("} else {")
    assert "every accumulator exists" in whole and "_ok)" not in whole.split("every accumulator exists")[1]
    assert "if (lo_acc2_ok) lo_acc2 " in partial
