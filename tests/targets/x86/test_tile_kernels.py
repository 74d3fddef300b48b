"""AMX tile kernels (``compile(isa="amx")``) agree with quant.py's exact reference bit for bit
(requantized) or within float32 rounding (float output), on shapes with tails in every tile
dimension, padding, stride, dilation, groups and batch, on one thread and with their pixel or
channel blocks split over 2; their refusals; the weight packing; tile code on threads started
before and after Linux's AMX permission."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers import (
    HYPOTHESIS,
    SPECS,
    check,
    check_quantized,
    conv_ops,
    integer_calls,
    needs_amx,
    quick_first,
    tiers,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import loopopt as lo
from loopopt.codegen import quantized
from loopopt.layout import moved_last
from loopopt.quant_reference import random_call
from loopopt.targets.x86 import tiles
from loopopt.targets.x86.amx import TILE
from loopopt.targets.x86.space import _gathers_fewer_steps, fused_reduction

THREADS = 2


@st.composite
def tile_convs(draw, dtype="float32"):
    """Convs whose channels and widths cross the tile sizes (16 pixels, 16 channels, 64 bytes)."""
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cg = draw(st.integers(1, 80 if groups == 1 else 20))
    kg = draw(st.integers(2 if cg == 1 and groups > 1 else 1, 40))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    span = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    height = draw(st.integers(max(1, span[0] - 2 * padding[0]), 5))
    width = draw(st.integers(max(1, span[1] - 2 * padding[1]), 40))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 2)))
    return lo.Conv2d(cg * groups, kg * groups, kernel, stride=stride,
                     padding=padding, dilation=dilation, groups=groups, bias=draw(st.booleans()),
                     batch=draw(st.integers(1, 2)), height=height, width=width, dtype=dtype)


def tile_schedule(op, data):
    """The op's schedule with a drawn output layout, pixel and channel blocks and block order."""
    s = lo.Schedule(op)
    pixel, channel = tiles.pixel_dim(op), op.channel_dim
    if op.windows and data.draw(st.booleans()):
        s = s.layout(op.output, moved_last(op.tensor(op.output).letters, op.output_channel_axis))
    blocks = {d: data.draw(st.sampled_from([None, 16, 32])) for d in (pixel, channel)}
    blocks = {d: b for d, b in blocks.items() if b and op.extent(d) > 1}
    if blocks:
        s = s.split(*next(iter(blocks.items()))) if len(blocks) == 1 else s.tile(**blocks)
    outer = [f"{d}_o" if d in blocks else d for d in (pixel, channel)]
    return s.reorder(*outer) if data.draw(st.booleans()) else s


def parallel_tile_schedule(op, data):
    """``tile_schedule`` with ``parallel`` on a drawn loop over the output's pixel dims (the pixel
    blocks split over threads) or over its channels (the channel blocks)."""
    s = tile_schedule(op, data)
    pixels = {quantized.batch_dim(op), *(w.out_dim for w in op.windows)}
    loops = [name for name in s.loop_names
             if s.dims_of(name) <= pixels or s.dims_of(name) == {op.channel_dim}]
    return s.parallel(data.draw(st.sampled_from(loops)))


def random_tile_conv(data):
    op = data.draw(tile_convs()).with_quant(data.draw(SPECS))
    check_quantized(tile_schedule(op, data), "amx")


test_random_tile_convs_quick, test_random_tile_convs = tiers(
    random_tile_conv, 1, 20, marks=[needs_amx], data=st.data())


def random_tile_call_on_channels_last(data):
    """A tile kernel called with its constants bound (``with_constants``, as the ONNX backend calls it)
    on a view of channels-last memory (a previous kernel's output) reads that memory where it is when its
    int8 activations are stored unpadded (1x1, stride 1, a channel pitch with no padding), else copies
    (bf16 always: rounded per call); the output bit for bit the plain call's on a copy of the array,
    also after new values were written at the same address and on another array."""
    channels = data.draw(st.sampled_from([8, 24, 96, 144]) | st.integers(1, 140))
    kernel_size, padding = data.draw(st.sampled_from([(1, 0), (1, 0), (3, 1), (1, 1)]))
    bf16 = data.draw(st.booleans())
    op = lo.Conv2d(channels, data.draw(st.integers(1, 40)), kernel_size, padding=padding,
                   bias=data.draw(st.booleans()), batch=data.draw(st.integers(1, 2)),
                   height=data.draw(st.integers(1, 6)), width=data.draw(st.integers(1, 20)),
                   dtype="bfloat16" if bf16 else "float32")
    if not bf16:
        op = op.with_quant(data.draw(SPECS))
    kernel = lo.Schedule(op).compile("amx")
    arrays, params = ([op.random_inputs(2)[t] for t in op.call_tensors], {}) if bf16 else random_call(op, 2)
    x, *constants = arrays
    flipped = np.ascontiguousarray(np.flip(x, axis=3))
    # a previous kernel's output: channels-last memory followed by zeros in its allocation
    n, c, h, w = x.shape
    storage = np.zeros(x.size + 64, x.dtype)
    channels_last = storage[:x.size].reshape(n, h, w, c).transpose(0, 3, 1, 2)
    channels_last[...] = x
    call = kernel.with_constants(*constants, **params)
    expected = [kernel(np.ascontiguousarray(a), *constants, **params) for a in (x, flipped)]
    np.testing.assert_array_equal(call(channels_last), expected[0])
    channels_last[...] = flipped            # new values at the same address (a model's next run)
    np.testing.assert_array_equal(call(channels_last), expected[1])
    np.testing.assert_array_equal(call(np.ascontiguousarray(x)), expected[0])       # another array
    read_in_place = np.shares_memory(kernel._packed(op.inputs[0], channels_last), channels_last)
    unpadded = kernel_size == 1 and padding == 0 and channels == tiles.TileShape.of(op).pitch
    assert read_in_place == (unpadded and not bf16)     # bf16 values are rounded into a copy per call
    alone = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)    # no zeros after it
    in_place_alone = np.shares_memory(kernel._packed(op.inputs[0], alone), alone)
    assert in_place_alone == (unpadded and not bf16 and kernel._ahead(op.inputs[0]) == 0)
    np.testing.assert_array_equal(call(alone), expected[0])


test_random_tile_calls_on_channels_last_quick, test_random_tile_calls_on_channels_last = tiers(
    random_tile_call_on_channels_last, 1, 6, marks=[needs_amx], data=st.data())


def random_tile_conv1d(data):
    """A quantized Conv1d on the tiles (its one window as the row window, no column taps), padded alike
    on both sides and not depthwise (which the tiles refuse), exact on calibrated or full-range data."""
    op = data.draw(conv_ops(max_hw=12, spatial=1, max_channels=20).filter(
        lambda op: op.pads[0][0] == op.pads[0][1] and not op.in_channels == op.out_channels == op.groups))
    op = op.with_quant(data.draw(SPECS))
    check_quantized(lo.Schedule(op), "amx", call=data.draw(st.none() | integer_calls(op)))


test_random_tile_conv1ds_quick, test_random_tile_conv1ds = tiers(
    random_tile_conv1d, 2, 14, marks=[needs_amx], data=st.data())


def random_tile_matmul(data, m, n, k):
    op = lo.Matmul(m, n, k, quant=data.draw(SPECS))
    check_quantized(tile_schedule(op, data), "amx")


test_random_tile_matmuls_quick, test_random_tile_matmuls = tiers(
    random_tile_matmul, 1, 14, marks=[needs_amx], data=st.data(), m=st.integers(1, 70),
    n=st.integers(1, 70), k=st.integers(1, 150))


def random_bf16_tile_conv(data):
    check(tile_schedule(data.draw(tile_convs("bfloat16")), data), "amx")


test_random_bf16_tile_convs_quick, test_random_bf16_tile_convs = tiers(
    random_bf16_tile_conv, 1, 14, marks=[needs_amx], data=st.data())


def random_bf16_tile_matmul(data, m, n, k):
    check(tile_schedule(lo.Matmul(m, n, k, dtype="bfloat16"), data), "amx")


test_random_bf16_tile_matmuls_quick, test_random_bf16_tile_matmuls = tiers(
    random_bf16_tile_matmul, 1, 12, marks=[needs_amx], data=st.data(), m=st.integers(1, 70),
    n=st.integers(1, 70), k=st.integers(1, 150))


def random_parallel_tile_conv(data):
    """Convs with tails, stride, dilation, padding, groups and batch 2 on 2 threads: int8 bit-exact,
    bf16 within its bound."""
    if data.draw(st.booleans()):
        op = data.draw(tile_convs()).with_quant(data.draw(SPECS))
        check_quantized(parallel_tile_schedule(op, data), "amx", threads=THREADS)
    else:
        check(parallel_tile_schedule(data.draw(tile_convs("bfloat16")), data), "amx", threads=THREADS)


test_random_parallel_tile_convs_quick, test_random_parallel_tile_convs = tiers(
    random_parallel_tile_conv, 1, 18, marks=[needs_amx], data=st.data())


@needs_amx
@pytest.mark.slow
@settings(max_examples=12, **HYPOTHESIS)
@given(data=st.data())
def test_random_parallel_tile_conv1ds(data):
    op = data.draw(conv_ops(max_hw=40, spatial=1, max_channels=40).filter(
        lambda op: op.pads[0][0] == op.pads[0][1] and not op.in_channels == op.out_channels == op.groups))
    if data.draw(st.booleans()):
        check_quantized(parallel_tile_schedule(op.with_quant(data.draw(SPECS)), data), "amx", threads=THREADS)
    else:
        bf16 = type(op)(**{**op.arguments, "dtype": "bfloat16"})
        check(parallel_tile_schedule(bf16, data), "amx", threads=THREADS)


@needs_amx
@pytest.mark.slow
@settings(max_examples=16, **HYPOTHESIS)
@given(data=st.data(), m=st.integers(1, 100), n=st.integers(1, 100), k=st.integers(1, 150))
def test_random_parallel_tile_matmuls(data, m, n, k):
    if data.draw(st.booleans()):
        check_quantized(parallel_tile_schedule(lo.Matmul(m, n, k, quant=data.draw(SPECS)), data), "amx",
                        threads=THREADS)
    else:
        check(parallel_tile_schedule(lo.Matmul(m, n, k, dtype="bfloat16"), data), "amx", threads=THREADS)


@needs_amx
@pytest.mark.parametrize("case", quick_first([("pixels", "int8"), ("channels", "bfloat16"),
                                              ("channels", "int8"), ("pixels", "bfloat16")]), ids="-".join)
def test_parallel_blocks_with_shifted_tails(case):
    """2 images of 3 rows of 37 pixels, numbered over the 39-wide padded rows (``TileShape.wide``: 115
    numbers per image, a shifted last pixel block) x 40 channels (a shifted last channel block) on 2
    threads: each thread loads the tile configuration and releases the tiles, and the shifted blocks
    write only what the blocks before them did not."""
    split, kind = case
    extra = {"quant": lo.QuantSpec("uint8", True, False, "uint8")} if kind == "int8" else {"dtype": kind}
    op = lo.Conv2d(40, 40, 3, padding=1, batch=2, height=3, width=37, **extra)
    s = lo.Schedule(op).layout("O", "NHWC").tile(ow=32, k=32).parallel("ow_o" if split == "pixels" else "k_o")
    plan = tiles.tile_plan(s)
    assert plan.shape.wide and plan.shape.pixels == 2 * 39 + 37
    assert plan.parallel == split and plan.units == {"pixels": 2 * 4, "channels": 2}[split]
    kernel = (check_quantized if kind == "int8" else check)(s, "amx", threads=THREADS)
    region = kernel.source.split("#pragma omp parallel\n", 1)[1]
    assert kernel.threads == THREADS and "_tile_loadconfig" in region and "_tile_release" in region


PERMISSION_SCRIPT = """
    import os
    import threading

    import numpy as np

    import loopopt as lo
    from loopopt.targets.x86 import amx_runtime
    from loopopt.quant_reference import random_call, reference_output

    spec = lo.QuantSpec("uint8", True, False, "uint8")
    op = lo.Conv2d(32, 40, 3, padding=1, height=6, width=20, quant=spec)
    args, params = random_call(op, 1)
    expected = reference_output(op, args, params)
    tiles = lo.Schedule(op).layout("O", "NHWC").tile(ow=16, k=16).parallel("ow_o").compile("amx")
    tiles.set_threads(2)
    go, results = threading.Event(), []
    early = threading.Thread(target=lambda: (go.wait(), results.append(tiles(*args, **params))), daemon=True)
    early.start()                                     # a Python thread started before the request
    vnni = lo.Schedule(op).parallel("oh").compile("avx512")
    vnni.set_threads(2)
    assert np.array_equal(vnni(*args, **params), expected)    # starts an OpenMP worker
    threads = len(os.listdir("/proc/self/task"))
    assert not amx_runtime._granted
    assert np.array_equal(tiles(*args, **params), expected)   # the request, then tiles on that worker
    assert amx_runtime._granted and len(os.listdir("/proc/self/task")) == threads
    go.set()
    early.join()
    assert np.array_equal(results[0], expected)      # its OpenMP worker is started after the request
    print("tiles ran on threads started before and after the request")
"""


@needs_amx
@pytest.mark.slow           # a fresh process compiling its kernels
def test_threads_started_before_and_after_the_amx_request():
    """Linux's AMX permission is per process: an OpenMP worker and a Python thread started before
    ``require_amx`` run tile code, and so does a worker started after it (a thread without it would
    die of SIGILL)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(PERMISSION_SCRIPT)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "tiles ran" in done.stdout, done.stderr


@needs_amx
@pytest.mark.parametrize("activation", quick_first(["uint8", "int8"]))
def test_resnet_block_shape(activation):
    """A 3x3 layer with 64-byte chunks, full 2 x 2 blocks and a shifted last pixel block of each row."""
    op = lo.Conv2d(128, 64, 3, padding=1, height=4, width=40,
                   quant=lo.QuantSpec(activation, True, False, "uint8"))
    kernel = check_quantized(lo.Schedule(op).layout("O", "NHWC"), "amx")
    dot = {"uint8": "_tile_dpbusd", "int8": "_tile_dpbssd"}[activation]
    assert kernel.isa == "amx" and dot in kernel.source and "lo_xsum[" in kernel.source
    with pytest.raises(ValueError, match="keeps no int32 accumulators"):
        kernel.accumulators(None)


QSPEC = lo.QuantSpec()


@needs_amx
@pytest.mark.parametrize("kind", quick_first(["bfloat16", "int8"]))
def test_folded_column_taps(kind):
    """conv1's shape: 7 column taps x 3 channels (stored as 4) reduced in one chunk per filter row."""
    extra = {"quant": lo.QuantSpec("uint8", True, False, "uint8")} if kind == "int8" else {"dtype": kind}
    op = lo.Conv2d(3, 20, 7, stride=2, padding=3, height=13, width=40, **extra)
    shape = tiles.TileShape.of(op)
    assert shape.fold and shape.column_taps == 1 and len(shape.starts) == 1
    (check_quantized if kind == "int8" else check)(lo.Schedule(op), "amx")


@st.composite
def stems(draw, dtype="float32"):
    """Small stems: 1-4 input channels, kernels up to 7 x 7, odd sizes, stride 1-3, padding that differs
    between the sides, dilation, batch 1 or 2."""
    kernel = (draw(st.integers(1, 7)), draw(st.integers(1, 7)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(2))
    span = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    height = draw(st.integers(max(1, span[0] - sum(padding[0])), span[0] + 4))
    width = draw(st.integers(max(1, span[1] - sum(padding[1])), 41))
    return lo.Conv2d(draw(st.integers(1, 4)), draw(st.integers(1, 40)), kernel,
                     stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))), padding=padding,
                     dilation=dilation, bias=draw(st.booleans()), batch=draw(st.integers(1, 2)),
                     height=height, width=width, dtype=dtype)


def random_gathered_stem(data):
    """Stems with each pixel's patch gathered (the reduction dims fused): int8 bit-exact against the
    quantized reference, bf16 within its bound, on one thread or with the blocks split over 2."""
    bf16 = data.draw(st.booleans())
    op = data.draw(stems("bfloat16" if bf16 else "float32"))
    if not bf16:
        op = op.with_quant(data.draw(SPECS))
    threads = data.draw(st.sampled_from([1, THREADS]))
    schedule = fused_reduction((parallel_tile_schedule if threads > 1 else tile_schedule)(op, data))
    assert tiles.tile_plan(schedule).shape.patch
    if bf16:
        check(schedule, "amx", threads=threads)
    else:
        check_quantized(schedule, "amx", threads=threads)


test_random_gathered_stems_quick, test_random_gathered_stems = tiers(
    random_gathered_stem, 1, 16, marks=[needs_amx], data=st.data())


@needs_amx
@pytest.mark.slow
@settings(max_examples=10, **HYPOTHESIS)
@given(data=st.data())
def test_random_stems_unfused(data):
    """The same stems without the gather (asymmetric padding through the padded activations)."""
    op = data.draw(stems()).with_quant(data.draw(SPECS))
    check_quantized(tile_schedule(op, data), "amx", call=data.draw(st.none() | integer_calls(op)))


def test_gathers_where_the_patch_takes_fewer_steps():
    """lo.tune's AMX space gathers conv1's patch (147 bytes: 3 K-steps, not 7 filter rows) and a
    3-channel 3 x 3 conv's, not a 3 x 3 conv of 64 channels (9 steps either way)."""
    conv1 = lo.Conv2d(3, 64, 7, stride=2, padding=3, height=224, width=224, quant=QSPEC)
    assert _gathers_fewer_steps(conv1) and _gathers_fewer_steps(lo.Conv2d(3, 16, 3, height=9, width=9,
                                                                            quant=QSPEC))
    assert not _gathers_fewer_steps(lo.Conv2d(64, 64, 3, height=9, width=9, quant=QSPEC))
    shape = tiles.tile_plan(fused_reduction(lo.Schedule(conv1))).shape
    assert (shape.patch, shape.depth, shape.patch_pitch, shape.starts, shape.runs) == (
        True, 147, 192, (0, 64, 128), (7, 21))


@pytest.mark.parametrize("op, build, message", [
    (lo.Conv2d(8, 8, 3, groups=8, height=5, width=5, quant=QSPEC), lambda s: s, "refuses the depthwise"),
    (lo.Conv2d(8, 8, 3, height=5, width=5), lambda s: s, "is float32"),
    (lo.Conv2d(8, 8, 3, height=5, width=5, quant=QSPEC), lambda s: s.arithmetic("dequantize"),
     "arithmetic"),
    (lo.Conv2d(8, 8, 3, height=5, width=5, quant=QSPEC), lambda s: s.fuse("k", "oh").parallel("k_oh"),
     r"either the pixel blocks \(parallel on a loop over n, oh, ow\) or the channel blocks"),
    (lo.Conv2d(8, 8, 3, height=5, width=30, quant=QSPEC), lambda s: s.split("ow", 8),
     "split of 'ow' by 8 is not a tile block"),
    # ops the tile kernels do not compute: refused, not computed wrong
    # gathered patches: all the reduction dims fused, taps then channels, of a conv with one group
    (lo.Conv2d(8, 8, 3, height=5, width=5, quant=QSPEC), lambda s: s.fuse("c", "kh").fuse("c_kh", "kw"),
     r"taps then channels \(kh, kw, c\); 'c_kh_kw' fuses c, kh, kw"),
    (lo.Conv2d(8, 8, 3, groups=2, height=5, width=5, quant=QSPEC),
     lambda s: s.reorder("kh", "kw", "c").fuse("kh", "kw").fuse("kh_kw", "c"), "one group"),
    (lo.Conv2d(8, 8, 3, height=5, width=5, quant=QSPEC),
     lambda s: s.reorder("kh", "kw", "c").split("c", 4).fuse("kh", "kw").fuse("kh_kw", "c_o"),
     "fuses kh, kw, c_o"),
    (lo.Conv3d(8, 8, 3, depth=3, height=5, width=5, dtype="bfloat16"), lambda s: s, "3 window axes"),
    (lo.Conv3d(8, 8, 3, depth=3, height=5, width=5, quant=QSPEC), lambda s: s, "3 window axes"),
    (lo.Gemm(8, 16, 32, alpha=2.0, dtype="bfloat16"), lambda s: s, "no scaled output"),
    (lo.Gemm(8, 16, 32, dtype="bfloat16"), lambda s: s, "a bias per output channel"),
    (lo.Matmul(8, 16, 32, trans_a=True, quant=QSPEC), lambda s: s, "is not one"),
    (lo.Matmul(8, 16, 32, batch=2, dtype="bfloat16"), lambda s: s, r"2 batch dims \(b, i\)"),
    (lo.Matmul(8, 16, 32, batch=(2, 3), trans_b=True, quant=QSPEC), lambda s: s, "3 batch dims"),
    (lo.Contraction("C[i,j] += A[k,i] * B[k,j]", {"i": 5, "j": 7, "k": 9}, dtype="bfloat16"), lambda s: s,
     "is not one"),
    (lo.Contraction("C[i,j] += A[i,k,l] * B[l,k,j]", {"i": 5, "j": 7, "k": 3, "l": 4}, dtype="bfloat16"),
     lambda s: s, "is not one"),
])
def test_refusals(op, build, message):
    with pytest.raises(tiles.TileError, match=message):
        tiles.tile_plan(build(lo.Schedule(op)))


@needs_amx
@pytest.mark.parametrize("op", quick_first([
    lo.Gemm(9, 20, 16, c_shape=(20,), dtype="bfloat16"), lo.Matmul(9, 20, 16, trans_b=True, dtype="bfloat16"),
    lo.Conv1d(8, 16, 3, padding=1, length=9, dtype="bfloat16"),
    lo.Conv1d(6, 20, 3, stride=2, padding=2, groups=2, batch=2, length=11,
              quant=lo.QuantSpec("int8", True, False, "int8", "uint8"))]), ids=repr)
def test_new_ops_the_tile_kernels_take(op):
    """A Gemm whose C is a per-column bias, transposed weights, a 1-D conv (bfloat16, and quantized
    exactly: its compensation table has one window)."""
    (check_quantized if op.quant else check)(lo.Schedule(op), "amx")


def test_amx_isa_on_a_cpu_without_amx(monkeypatch):
    monkeypatch.setattr(tiles, "cpu_flags", lambda: frozenset({"avx512f", "avx512_vnni"}))
    op = lo.Conv2d(8, 8, 3, height=5, width=5, quant=QSPEC)
    with pytest.raises(ValueError, match="needs CPU features amx_bf16, amx_int8, amx_tile, avx512bw"):
        lo.Schedule(op).compile("amx")


BF16 = {"dtype": "bfloat16"}


PACKED_OPS = [
    lo.Conv2d(6, 40, (2, 3), groups=2, height=4, width=4, quant=QSPEC),
    lo.Conv2d(3, 20, 7, height=9, width=9, quant=QSPEC), lo.Conv2d(24, 20, 3, height=5, width=5, quant=QSPEC),
    lo.Conv2d(150, 20, 1, height=3, width=3, quant=QSPEC), lo.Matmul(5, 17, 70, quant=QSPEC),
    lo.Conv2d(6, 40, (2, 3), groups=2, height=4, width=4, **BF16),
    lo.Conv2d(70, 20, 1, height=3, width=3, **BF16), lo.Matmul(5, 17, 33, **BF16)]


@pytest.mark.parametrize("op, patch", [
    *((op, False) for op in PACKED_OPS),
    # patches are gathered for convs of one group only
    *((op, True) for op in PACKED_OPS if op.groups == 1 and op.windows)])
def test_weights_in_b_tiles(op, patch):
    """Packed weight [g, tile, kh, kw, chunk, r, group n + t] is W[channel g kg + 16 tile + n, c,
    kh, kw'] for the tap value v = start + group r + t (c = v, kw' = kw; folded: kw' = v // pitch,
    c = v % pitch; gathered patches: kh, kw', c = v over (KH, KW, pitch)) of a real channel and
    output, else 0 (group: 4 int8, 2 bf16 values per 32 bits)."""
    s = tiles.TileShape.of(op, patch)
    dtype = np.int8 if op.quant else np.uint16
    w = np.random.default_rng(0).integers(1, 100, op.tensor(op.inputs[1]).shape).astype(dtype)
    packed = tiles.pack_weights(op, w, np.empty(s.packed_weights_shape, dtype), s)
    logical = np.moveaxis(w, op.weight_channel_axis, 0).reshape(op.channels, s.cg, s.rows.taps, s.cols.taps)
    for index in np.ndindex(*s.packed_weights_shape):
        g, tile, kh, kw, q, r, column = index
        n, v = tile * TILE + column // s.group, s.starts[q] + s.group * r + column % s.group
        if s.patch:
            kh, kw, c = np.unravel_index(min(v, s.depth - 1), (s.rows.taps, s.cols.taps, s.pitch))
        else:
            kw, c = divmod(v, s.pitch) if s.fold else (kw, v)
        real = n < s.kg and v < s.depth and c < s.cg
        assert packed[index] == (logical[g * s.kg + n, c, kh, kw] if real else 0), index


@pytest.mark.slow
@needs_amx
def test_compare_on_tiles():
    """``lo.compare(isa="amx")``: no kernel-model figure (it has no AMX costs), % of the AMX bf16 peak."""
    op = lo.Conv2d(16, 16, 3, padding=1, height=6, width=20, dtype="bfloat16")
    result = lo.compare(op, [lo.Schedule(op)], isa="amx", reuse=False, progress=False, budget=0.01)
    assert result.rows[0].isa == "amx" and result.rows[0].predicted_ms is None
    assert result.peak == lo.peak_gflops("amx", "bfloat16")
