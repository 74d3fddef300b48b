"""A quantized conv on TMA pixel boxes (``gpu_wgmma(conv, engine="tma")``) without a GPU: TMA fills the
padding with 0, not the activations' zero point, and the epilogue adds back ``zx`` times the weights at
each pixel's taps outside the input (``targets/cuda/padding_sums.py``). The table of the sums outside
each box of taps against a direct sum (Conv1d to Conv3d); the host emulation bit for bit against
quant.py's reference over random convs (1-D to 3-D, stride, dilation, per-side padding, batch > 1,
channel tails, boxes overhanging the output, every spec wgmma takes, split-K on int32); the emulation
missing it without the compensation, with the padding's taps read one off or a border pixel taken for an
interior one; the printed source; the refusals. The GPU runs are ``test_cuda_int8_gpu.py``'s (``-m gpu``)."""
import dataclasses
import itertools
import re

import numpy as np
import pytest
from helpers import conv_ops, tiers
from hypothesis import strategies as st
from test_cuda_int8 import WGMMA_SPECS, _check_preset

import loopopt as lo
from loopopt.dataflows import gpu_wgmma
from loopopt.measure import checked
from loopopt.quant_reference import random_call
from loopopt.schedule import ScheduleError
from loopopt.targets.cuda import emulate as emulate_module
from loopopt.targets.cuda import padding_sums, persistent
from loopopt.targets.cuda.emulate import emulate
from loopopt.targets.cuda.printer import print_kernel

U8 = lo.QuantSpec(activation="uint8", output="uint8")
STRIDED = lo.Conv2d(32, 40, 3, stride=2, padding=((1, 0), (2, 1)), dilation=2, height=13, width=11, batch=2,
                    quant=U8)
STRIDED_INT32 = type(STRIDED)(**STRIDED.arguments | {"quant": lo.QuantSpec(activation="uint8",
                                                                             output="int32")})
SPECIALIZED = {"block_m": 64, "warps_m": 1, "depth": 64, "swizzle": 64, "specialize": True}
PERSISTENT = {"block_m": 64, "block_n": 64, "warps_m": 1, "depth": 32, "stages": 3, "specialize": True,
              "persistent": True}
SPLIT = {"block_m": 64, "block_n": 64, "warps_m": 1, "depth": 32, "stages": 3, "split_k": 3}


@pytest.mark.parametrize("op", [
    lo.Conv1d(16, 3, 4, padding=1, length=9, quant=U8), STRIDED,
    lo.Conv3d(16, 5, (2, 3, 2), padding=1, depth=4, height=5, width=4, quant=U8)],
    ids=lambda op: type(op).__name__)
def test_the_table_sums_each_channels_weights_outside_every_box_of_taps(op):
    """Entry (box, k) of the table: channel k's weights at the taps outside the box, the box numbered
    by its intervals ``[a, b)`` of each window's taps (``a`` slowest), the channels fastest."""
    weights = np.random.default_rng(1).integers(-128, 128, op.tensor("W").shape).astype(np.int8)
    table = padding_sums.table(op, weights, np)
    assert table.shape == padding_sums.shape(op) == (*(padding_sums.pairs(w.taps) for w in op.windows),
                                                     op.channels)
    taps = weights.astype(np.int64).sum(axis=1)          # K x the taps
    intervals = [[(a, b) for a in range(w.taps + 1) for b in range(a, w.taps + 1)] for w in op.windows]
    for box in itertools.product(*(range(len(i)) for i in intervals)):
        inside = taps[(slice(None), *(slice(*intervals[n][i]) for n, i in enumerate(box)))]
        assert np.array_equal(table[box], taps.reshape(op.channels, -1).sum(axis=1)
                              - inside.reshape(op.channels, -1).sum(axis=1)), box


def _check_tma(op, spec, tiles):
    """``gpu_wgmma(op with spec, engine="tma", **tiles)`` emulated bit for bit (or its refusal)."""
    _check_preset(gpu_wgmma, op, spec, tiles | {"engine": "tma"})


# channels a multiple of 16 (a TMA box row of int8 is 16 bytes); the specs without activation sums
_CONVS = st.integers(1, 3).flatmap(lambda spatial: conv_ops(spatial=spatial, max_channels=3)).filter(
    lambda op: op.groups == 1).map(lambda op: type(op)(**op.arguments | {"in_channels": 16 * op.in_channels}))
_TILES = st.sampled_from([{}, SPECIALIZED, {"block_m": 128, "block_n": 32, "warps_m": 2, "depth": 32,
                                            "split_k": 2, "stages": 3},
                          {"block_m": 64, "block_n": 64, "warps_m": 1, "depth": 128, "swizzle": 128}])

# hypothesis's first example is the smallest (a 1 x 1 conv without padding): the quick tier's is below
_, test_random_quantized_convs_on_pixel_boxes = tiers(_check_tma, 1, 5, _CONVS, WGMMA_SPECS, _TILES)


@pytest.mark.parametrize("tiles", [SPECIALIZED, PERSISTENT], ids=["specialized", "persistent"])
def test_a_strided_dilated_padded_uint8_conv_is_exact_with_the_compensation(tiles):
    """The border pixels' taps outside (rows and columns, both sides, stride 2, dilation 2) with a
    zero point far from 0: bit for bit, also where the consumers store each tile of a persistent walk."""
    schedule = gpu_wgmma(STRIDED, **tiles, engine="tma")
    assert padding_sums.compensated(schedule)
    arrays, params = random_call(STRIDED, seed=3)
    assert params["x_zero_point"] > 50
    ok, error, _ = checked(emulate(schedule), seed=3)
    assert ok, error


def _mutated(monkeypatch, pattern: str, replacement: str) -> None:
    """The host emulation's printed source with ``pattern`` (a regular expression it must hold)
    replaced."""
    def printed(schedule, syntax):
        source = print_kernel(schedule, syntax)
        assert re.search(pattern, source.source), pattern
        return dataclasses.replace(source, source=re.sub(pattern, replacement, source.source))
    monkeypatch.setattr(emulate_module, "print_kernel", printed)


def _no_compensation(monkeypatch):
    monkeypatch.setattr(padding_sums, "outside", lambda *args: "0")


def _taps_one_off(monkeypatch):
    row = padding_sums.row
    monkeypatch.setattr(padding_sums, "row", lambda *args: row(*args).replace(
        "lo_end_tap(lo_v0, 2,", "1 + lo_end_tap(lo_v0, 2,"))


def _interior_too_wide(monkeypatch):
    interior = padding_sums.interior
    monkeypatch.setattr(padding_sums, "interior", lambda window: (lambda first, last: (first - 1, last))(
        *interior(window)))


def _border_term_twice(monkeypatch):
    outside = padding_sums.outside
    monkeypatch.setattr(padding_sums, "outside", lambda *args: f"2 * {outside(*args)}")


def _border_term_in_every_share(monkeypatch):
    """Under split-K each share adds the border term, not the first alone."""
    _mutated(monkeypatch, r"if \(lo_edge && \w+ == 0\)", "if (lo_edge)")


def _rounded_down(monkeypatch):
    """The requantized output rounded toward zero, not to the nearest (even)."""
    _mutated(monkeypatch, r"rintf\(lo_p\)", "truncf(lo_p)")


# a persistent walk of several tiles a block: 3 blocks over 9 tiles (one warpgroup, 64 x 64) or 5 (two, 128 x
# 64), border pixels in every round
WALKED = lo.Conv2d(32, 40, 3, stride=(1, 2), padding=((1, 0), (2, 1)), dilation=(1, 2), height=12, width=19,
                   batch=3, quant=U8)
TWO_WARPGROUPS = PERSISTENT | {"block_m": 128, "warps_m": 2}


def _first_round_border(monkeypatch):
    """The border term added in each block's first tile alone (``persistent.HOST_BLOCKS`` blocks)."""
    _mutated(monkeypatch, r"const int lo_edge = ([^;]*);",
             rf"const int lo_edge = lo_tile < {persistent.HOST_BLOCKS} && (\1);")


def _two_blocks_on_one_tile(monkeypatch):
    monkeypatch.setattr(persistent.Walk, "group",
                        lambda self, block, blocks, round: f"({block}) / 2 + ({round}) * ({blocks})")


@pytest.mark.parametrize("mutate, tiles, exact", [
    pytest.param(lambda monkeypatch: None, PERSISTENT, True, id="as printed"),
    pytest.param(lambda monkeypatch: None, TWO_WARPGROUPS, True, id="as printed, two warpgroups",
                 marks=pytest.mark.slow),
    pytest.param(_first_round_border, PERSISTENT, False, id="the border term in a block's first tile alone",
                 marks=pytest.mark.slow),
    pytest.param(_two_blocks_on_one_tile, TWO_WARPGROUPS, False, id="a tile stored twice, one never",
                 marks=pytest.mark.slow)])
def test_a_persistent_walk_requantizes_each_tile_with_its_own_border_term(monkeypatch, mutate, tiles, exact):
    """The consumers of a persistent walk requantize each tile through their staging tile past the ring
    while the producer copies the next: bit for bit as printed; the border term of a block's first tile
    alone, or two blocks on one tile (one stored twice, one never: its outputs poisoned) miss."""
    mutate(monkeypatch)
    schedule = gpu_wgmma(WALKED, **tiles, engine="tma")
    ok, error, _ = checked(emulate(schedule), seed=5)
    assert ok is exact, error


@pytest.mark.parametrize("mutate, tiles", [
    pytest.param(_no_compensation, SPECIALIZED, id="no compensation"),
    pytest.param(_border_term_twice, SPECIALIZED, id="the border term added twice", marks=pytest.mark.slow),
    pytest.param(_taps_one_off, SPECIALIZED, id="taps inside one off", marks=pytest.mark.slow),
    pytest.param(_interior_too_wide, SPECIALIZED, id="a border pixel taken for interior",
                 marks=pytest.mark.slow),
    pytest.param(_border_term_in_every_share, SPLIT, id="the border term in every share",
                 marks=pytest.mark.slow),
    pytest.param(_rounded_down, SPECIALIZED, id="rounded toward zero", marks=pytest.mark.slow)])
def test_the_emulation_misses_without_an_exact_compensation(monkeypatch, mutate, tiles):
    mutate(monkeypatch)
    op = STRIDED if "split_k" not in tiles else STRIDED_INT32
    ok, error, _ = checked(emulate(gpu_wgmma(op, **tiles, engine="tma")), seed=3)
    assert not ok, error


def test_the_source_prints_byte_maps_and_the_padding_table():
    """The activations' map of UINT8 elements (type 0) in 64-channel boxes, ``lo_taps`` among the
    parameters, the epilogue's border pixels (``lo_edge``) and their term, its outputs staged and stored
    16 bytes a thread, and the registers capped at the two blocks an SM the shared memory allows; a conv
    without padding, or copied by the threads, needs none."""
    op = lo.Conv2d(64, 64, 3, padding=1, height=16, width=16, batch=2, quant=U8)
    printed = print_kernel(gpu_wgmma(op, warps_m=1, depth=64, swizzle=64, engine="tma", specialize=True))
    for text in ("if (lo_encode(&lo_map_I, 0, 4, (void *) I, lo_dims", "lo_box[4] = {64u, 16u, 4u, 1u}",
                 "const int lo_edge = lo_o0 < 1 || lo_o0 > 14 || lo_o1 < 1 || lo_o1 > 14;",
                 "lo_first_tap(lo_v0, 1, 3)", "if (lo_edge) {",
                 "const int lo_box = (lo_a0 * (9 - lo_a0) / 2 + lo_b0 - lo_a0) * 10 "
                 "+ lo_a1 * (9 - lo_a1) / 2 + lo_b1 - lo_a1;",
                 "(unsigned) lo_zx * (unsigned) lo_taps[lo_box * 64 + (",
                 "padding: TMA fills it with 0",
                 "lo_stage[lo_row * 80 + lo_col + lo_h] = ", "LO_STORE16(lo_to, lo_from);",
                 "__launch_bounds__(256, 2)"):
        assert text in printed.source, text
    assert padding_sums.TABLE in [p.name for p in printed.params]
    unpadded = lo.Conv2d(64, 64, 3, height=16, width=16, batch=2, quant=U8)
    for schedule in (gpu_wgmma(unpadded, engine="tma"), gpu_wgmma(op)):
        assert not padding_sums.compensated(schedule)
        assert padding_sums.TABLE not in print_kernel(schedule).source


@pytest.mark.parametrize("op, message", [
    (lo.Conv2d(24, 16, 3, padding=1, height=8, width=8, quant=U8),
     r"TMA needs each row of I on 16 bytes; it has 24 channels \(24 bytes\): use a multiple of 16 channels"),
    (lo.Conv2d(16, 16, 3, padding=1, height=8, width=8, quant=lo.QuantSpec(weight_symmetric=False)),
     r"wgmma takes symmetric int8 weights: use gpu_mma for these")])
def test_what_a_quantized_conv_on_pixel_boxes_cannot_take_is_refused(op, message):
    with pytest.raises(ScheduleError, match=message):
        print_kernel(gpu_wgmma(op, engine="tma"))
