"""Pooling as an op (``lo.Pool``): its domain and accesses, its refusals, and its generated kernels
(``lo.PoolSchedule(...).compile()``) against the op's numpy reference and the ONNX definition one
output element at a time (``naive_pool``), over random shapes: 1-3 spatial dims, odd sizes, channel
blocks with tails, strides, dilations, asymmetric pads, ceil_mode, count_include_pad, batch > 1,
inputs stored channels-last or not, kernels reading them channels-last or (a max) channels-first; max of
float32, uint8 and int8 bit-exact; 8-bit maxima mapped through a table by a byte map's loop."""
from __future__ import annotations

import re
from unittest import mock

import numpy as np
import pytest
from helpers import tiers
from hypothesis import assume
from hypothesis import strategies as st
from test_onnx_pooling import naive_pool

import loopopt as lo
from loopopt.targets.bytemap import portable_byte_map
from loopopt.targets.pool_c import pool_kernels
from loopopt.targets.registry import host_target

DTYPES = {"float32": np.float32, "uint8": np.uint8, "int8": np.int8}


def _input(rng: np.random.Generator, op: lo.Pool, stored: str) -> np.ndarray:
    """A random input of ``op``, stored channels-last (a view of an NHWC array, as a conv hands it on), in
    its logical order (NCHW), or neither (every other element of a wider array)."""
    dtype = DTYPES[op.dtype]
    if dtype == np.float32:
        x = rng.standard_normal(op.input_shape).astype(np.float32)
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, op.input_shape, endpoint=True).astype(dtype)
    if stored == "strided":
        return np.repeat(x, 2, axis=-1)[..., ::2]
    return np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 1, -1)), -1, 1) if stored == "channels_last" else x


def _onnx_attributes(op: lo.Pool) -> dict:
    spatial = len(op.sizes)
    return {"kernel_shape": list(op.kernel), "strides": list(op.strides), "dilations": list(op.dilations),
            "pads": [b for b, _ in op.pads] + [e for _, e in op.pads], "ceil_mode": int(op.ceil_mode),
            "count_include_pad": int(op.count_include_pad)} if spatial else {}


@st.composite
def pool_cases(draw) -> tuple[lo.PoolSchedule, str, int]:
    """A random pool's schedule, how its input is stored (``_input``), and an input seed."""
    kind = draw(st.sampled_from(["max", "average"]))
    dtype = "float32" if kind == "average" else draw(st.sampled_from(list(DTYPES)))
    spatial = draw(st.integers(1, 3))
    sizes = [draw(st.integers(1, 9 if spatial < 3 else 5)) for _ in range(spatial)]
    kernel = [draw(st.integers(1, min(4, n + 1))) for n in sizes]
    pads = [(draw(st.integers(0, k - 1)), draw(st.integers(0, k - 1))) for k in kernel]
    try:
        op = lo.Pool(kind, draw(st.integers(1, 21)), tuple(sizes), tuple(kernel),
                     tuple(draw(st.integers(1, 3)) for _ in sizes),
                     tuple(draw(st.integers(1, 2)) for _ in sizes),
                     tuple(pads), draw(st.booleans()), draw(st.booleans()), draw(st.integers(1, 2)), dtype)
    except ValueError as error:       # a window beyond the input or entirely in the padding
        assume(not re.search("larger than|entirely in the padding", str(error)))
        raise
    lanes = draw(st.sampled_from([0, 1, 4, 8, 16]))     # 0: the default block
    stored = draw(st.sampled_from(["channels_last", "logical", "strided"]))
    layout = draw(st.sampled_from([op.layout, op.first_layout] if kind == "max" else [op.layout]))
    table = draw(st.sampled_from(["", *DTYPES])) if kind == "max" and dtype != "float32" else ""
    return lo.PoolSchedule(op, lanes, layout, table), stored, draw(st.integers(0, 2**16))


def _check_kernels(cases):
    """Each case's kernel (all built from one C file) against the op's reference and the definition (a max
    mapped through a random table: the table of those); its rows split over 2 and 3 threads (however
    few: ``MIN_CHUNK`` 1) the same bits as on one."""
    kernels = host_target().pool_kernels([schedule for schedule, _, _ in cases])
    for kernel, (schedule, stored, seed) in zip(kernels, cases):
        op, rng = schedule.op, np.random.default_rng(seed)
        x = _input(rng, op, stored)
        if schedule.table:
            table = rng.standard_normal(256).astype(np.float32) if schedule.table == "float32" else \
                rng.integers(0, 256, 256).astype(np.uint8).view(schedule.table)
            ours = kernel(x, table=table)
            np.testing.assert_array_equal(ours, table[op.reference(x).view(np.uint8)])
            with mock.patch("loopopt.targets.threaded_c.MIN_CHUNK", 1):
                np.testing.assert_array_equal(kernel(x, threads=2, table=table), ours)
            continue
        ours, reference = kernel(x), op.reference(x)
        with mock.patch("loopopt.targets.threaded_c.MIN_CHUNK", 1):
            for threads in (2, 3):
                np.testing.assert_array_equal(kernel(x, threads=threads), ours)
        definition = naive_pool("MaxPool" if op.kind == "max" else "AveragePool", x, _onnx_attributes(op))
        assert ours.shape == reference.shape == definition.shape == op.output_shape
        assert ours.dtype == reference.dtype == np.dtype(op.dtype)
        if op.kind == "max":
            np.testing.assert_array_equal(ours, reference)
            np.testing.assert_array_equal(ours, definition)
        else:
            np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(ours, definition, rtol=1e-5, atol=1e-6)


test_pool_kernels_quick, test_pool_kernels_slow = tiers(_check_kernels, 1, 5,
                                                        st.lists(pool_cases(), min_size=8, max_size=8))


def _check_byte_mapped(cases, sizes):
    """Max pools of 8-bit values mapped through an 8-bit table, their interior maxima looked up by a byte
    map's loop (``pool_kernels``' ``byte_map``): the portable loop's and the host's (``pool_byte_map``,
    where it has one), both with a table's lookups of each byte beside them in the C file (unmapped
    kernels), against the table of the op's reference; on 1 and 2 threads."""
    target = host_target()
    schedules = []
    for (schedule, _, _), size in zip(cases, sizes):
        op = schedule.op
        channels_first = schedule.input_layout == op.first_layout
        op = lo.Pool("max", op.channels * size, op.sizes, op.kernel, op.strides, op.dilations, op.pads,
                     op.ceil_mode, False, op.batch, op.dtype if op.dtype != "float32" else "uint8")
        schedules.append(lo.PoolSchedule(op, schedule.lanes, op.first_layout if channels_first else op.layout,
                                         "int8" if size % 2 else "uint8"))
    first = schedules[0]
    schedules.append(lo.PoolSchedule(first.op, first.lanes, first.input_layout, "float32"))
    for byte_map in {portable_byte_map(), target.pool_byte_map() or portable_byte_map()}:
        kernels = pool_kernels(tuple(schedules), target.vector_flags(), target.transpose(),
                               (byte_map.source, byte_map.flags))
        for kernel, schedule, seed in zip(kernels, schedules, range(len(schedules))):
            rng = np.random.default_rng(seed)
            x = _input(rng, schedule.op, "channels_last")
            table = rng.integers(0, 256, 256).astype(np.uint8).view(schedule.table) \
                if schedule.table != "float32" else rng.standard_normal(256).astype(np.float32)
            want = table[schedule.op.reference(x).view(np.uint8)]
            np.testing.assert_array_equal(kernel(x, table=table), want)
            with mock.patch("loopopt.targets.threaded_c.MIN_CHUNK", 1):
                np.testing.assert_array_equal(kernel(x, threads=2, table=table), want)


test_byte_mapped_pools_quick, test_byte_mapped_pools_slow = tiers(
    _check_byte_mapped, 1, 4, st.lists(pool_cases(), min_size=3, max_size=3),
    st.lists(st.integers(1, 13), min_size=3, max_size=3))


def test_a_pool_takes_a_thread_per_min_chunk_of_input_and_row():
    """How many threads a pool kernel's call takes (load-independent): ResNet's 3x3/2 MaxPool of 64x112x112
    both of two, a 512x7x7 pool one (fewer than ``MIN_CHUNK`` elements), a global pool one (one row)."""
    kernels = host_target().pool_kernels([lo.PoolSchedule(lo.Pool("max", 64, (112, 112), (3, 3), 2, 1, 1)),
                                          lo.PoolSchedule(lo.Pool("max", 512, (7, 7), (3, 3), 1, 1, 1)),
                                          lo.PoolSchedule(lo.Pool("average", 2048, (7, 7), (7, 7)))])
    assert [kernel.threads_for(2) for kernel in kernels] == [2, 1, 1]
    assert [kernel.threads_for(1) for kernel in kernels] == [1, 1, 1]


def test_a_channels_first_max_pool_reads_whole_rows_and_splits_the_outer_rows():
    """ResNet's stem MaxPool read channels-first (as an NCHW conv hands it on): each block of 64 channels'
    rows reduced over the window's rows where all 3 are inside the input (unrolled: ``in[0 + i]``,
    ``in[112 + i]``, ``in[224 + i]``), transposed by the host's loops, then over the columns; its rows are
    the images x output rows, as a channels-last kernel's; a 1-D pool's rows are its images. The same
    bits as the channels-last kernel on the same values."""
    op = lo.Pool("max", 64, (112, 112), (3, 3), 2, 1, 1, batch=2)
    first, last = host_target().pool_kernels([lo.PoolSchedule(op, input_layout="NCHW"), lo.PoolSchedule(op)])
    assert first.schedule.channels_first and not last.schedule.channels_first
    assert "in[224 + i] > m ? in[224 + i] : m" in first.source
    assert "lo_transpose_4((const unsigned int *)stage, (unsigned int *)staged, 1, 64, 112);" in first.source
    assert "# NCHW -> NHWC" in first.source and first.rows == last.rows == 2 * 56
    x = np.random.default_rng(5).standard_normal(op.input_shape).astype(np.float32)
    np.testing.assert_array_equal(first(x, threads=2), last(x))
    line = lo.Pool("max", 3, (9,), (2,), batch=2)
    assert host_target().pool_kernels([lo.PoolSchedule(line, input_layout="NCW")])[0].rows == 2


def test_the_domain_holds_the_taps_inside_the_input():
    """The domain's instances are the (output element, tap) pairs whose input index is inside the input,
    and the input access maps each into the input's box."""
    op = lo.Pool("max", 3, (5, 6), (3, 2), (2, 2), 1, ((1, 0), (0, 1)), ceil_mode=True, batch=2)
    assert op.output_sizes == (3, 3)
    inside = [sum(0 <= o * w.stride - w.pad + t * w.dilation < w.size for t in range(w.taps))
              for w in op.windows for o in range(w.out)]
    assert op.instances == op.batch * op.channels * sum(inside[:3]) * sum(inside[3:])
    image = op.domain.apply(op.access_maps["I"])
    assert image.is_subset(lo.Pool("max", 3, (5, 6), (1, 1), batch=2).access_maps["I"].range())
    assert op.reduction_dims == {"kh", "kw"} and [name for name, _ in op.dims][:4] == ["n", "c", "oh", "ow"]


def test_the_kernel_runs_the_loops_of_its_schedule():
    """The C's loops are the schedule's, in its order (the images and the first output dim as one loop of
    rows, which the threads split; the tap loops from each position's first tap inside the input; where
    all 9 taps are inside, one loop over the channels with the taps unrolled: ``if`` before ``else``),
    with a last channel block for the remainder of the channels."""
    schedule = lo.PoolSchedule(lo.Pool("average", 20, (7, 7), (3, 3), 2, 1, 1), lanes=8)
    source = schedule.compile().source
    loops = re.findall(r"for \((?:long|int) (\w+) = ", source)
    assert loops == ["lo_row", "ow", "c_o", "c_i", "c_i", "kh", "kw", "c_i", "c_i",   # rows; 2 blocks of 8
                     "c_i", "c_i", "kh", "kw", "c_i", "c_i"]                               # the last 4
    assert source.count("if (kh_lo == 0 && kh_hi == 3 && kw_lo == 0 && kw_hi == 3) {") == 2
    assert "m = m + in[" + str(7 * 20 + 20) + " + c_i];" in source        # tap (1, 1): one row and column on
    assert [name for name, _, _ in schedule.loops] == ["n", "oh", "ow", "c_o", "kh", "kw", "c_i"]
    assert "for c_o in 0..3   # 2 block(s) of 8 and one of 4" in schedule.pseudocode()


@pytest.mark.parametrize("arguments, message", [
    (dict(kind="min"), "kind='min': a pool is one of max, average"),
    (dict(dtype="float64"), "dtype='float64': a pool's input is one of float32, uint8, int8"),
    (dict(kind="average", dtype="uint8"), "an average pool of uint8 needs ONNX's rounding"),
    (dict(sizes=(4, 4, 4, 4), kernel=(1, 1, 1, 1)), "pools of 1 to 3 spatial dims, got 4"),
    (dict(kernel=(0, 2)), "kernel=(0, 2): needs 2 integer(s) >= 1"),
    (dict(strides=(1,)), "strides=(1,): needs 2 integer(s) >= 1"),
    (dict(pads=((1, -1), (0, 0))), "pads=((1, -1), (0, 0)): needs one (begin, end) pair of integers >= 0"),
    (dict(kernel=(9, 2)), "the window along oh (9 taps, dilation 1) is larger than its padded input"),
    (dict(pads=((2, 0), (0, 0))), "leave a window along oh entirely in the padding"),
])
def test_refusals_name_the_value(arguments, message):
    given = dict(kind="max", channels=4, sizes=(5, 5), kernel=(2, 2)) | arguments
    with pytest.raises(ValueError, match=re.escape(message)):
        lo.Pool(**given)
    with pytest.raises(ValueError, match=re.escape("lanes=-1: the channel block needs an integer >= 1")):
        lo.PoolSchedule(lo.Pool("max", 4, (5, 5), (2, 2)), lanes=-1)
    with pytest.raises(ValueError, match=re.escape("input_layout='NWC': the input of a 2-D pool is stored "
                                                   "NHWC or NCHW")):
        lo.PoolSchedule(lo.Pool("max", 4, (5, 5), (2, 2)), input_layout="NWC")
    with pytest.raises(ValueError, match=re.escape("input_layout='NCHW': an average reads its input NHWC")):
        lo.PoolSchedule(lo.Pool("average", 4, (5, 5), (2, 2)), input_layout="NCHW")
    with pytest.raises(ValueError, match=re.escape("lanes=64: a channels-first block of rows (64 x 300 "
                                                   "float32) must fit 65536 bytes")):
        lo.PoolSchedule(lo.Pool("max", 64, (3, 300), (2, 2)), lanes=64, input_layout="NCHW")
    assert lo.PoolSchedule(lo.Pool("max", 64, (3, 300), (2, 2)), input_layout="NCHW").lanes == 54
    with pytest.raises(ValueError, match=re.escape("table='uint8': a max of 8-bit values maps through a "
                                                   "table of one of float32, uint8, int8, not a max of "
                                                   "float32")):
        lo.PoolSchedule(lo.Pool("max", 4, (5, 5), (2, 2)), table="uint8")
    kernel = lo.PoolSchedule(lo.Pool("max", 4, (5, 5), (2, 2), dtype="int8"), table="float32").compile()
    x = np.zeros((1, 4, 5, 5), np.int8)
    with pytest.raises(ValueError, match=r"table: the kernel of .* takes 256 contiguous float32, got none"):
        kernel(x)
    with pytest.raises(ValueError, match=r"table: the kernel of .* takes 256 contiguous float32, got uint8 "
                                         r"\(256,\)"):
        kernel(x, table=np.zeros(256, np.uint8))
