"""A conv's im2col tiles copied as TMA boxes of output pixels (``targets/cuda/pixel_boxes.py``,
``gpu_wgmma(conv, engine="tma")``) without a GPU: the pixel boxes of the ResNet convs, the host emulation
against the reference over random convs (1-D to 3-D, stride through the boxes' element strides,
dilation, per-side padding, boxes overhanging the output, batch > 1, channel tails), the emulation
missing the reference with a start coordinate off by one or without the zero fill, the printed tensor
maps, and the refusals (channels not on 16 bytes, a box over 256 elements, a cluster, rows that are no
box); a quantized conv's: ``test_padding_sums.py``. The GPU runs are ``test_cuda_tensor_gpu.py``'s
(``-m gpu``)."""
from dataclasses import replace

import pytest
from helpers import conv_ops, tiers
from hypothesis import strategies as st
from test_cuda_tensor import _emulated_error

import loopopt as lo
from loopopt import dataflows
from loopopt.dataflows import gpu_wgmma, pixel_box
from loopopt.schedule import ScheduleError
from loopopt.targets.cuda import pixel_boxes
from loopopt.targets.cuda.printer import print_kernel

STRIDED = lo.Conv2d(24, 40, 3, stride=2, padding=((1, 0), (2, 1)), dilation=2, height=13, width=11, batch=2,
                    dtype="float16")
SPECIALIZED = {"block_m": 64, "warps_m": 1, "depth": 64, "swizzle": 128, "specialize": True}


@pytest.mark.parametrize("extents, block, box", [
    ((32, 56, 56), 128, (2, 8, 8)), ((32, 28, 28), 128, (8, 4, 4)), ((32, 14, 14), 128, (32, 2, 2)),
    ((1, 14, 14), 128, (1, 8, 16)), ((32, 56, 56), 192, (3, 8, 8)), ((3, 37), 64, (1, 64))])
def test_a_pixel_box_tiles_the_output_where_it_can(extents, block, box):
    """The ResNet convs' 128-row blocks tile their outputs exactly; elsewhere the box overhangs least,
    each 64-row tile a box too."""
    assert pixel_box(extents, block, 64) == box


def test_the_kernel_prints_the_tensor_maps_and_the_box_copies():
    """The activations [N, H, W, C] in boxes of 64 channels x 8 x 8 pixels x 1 image, the weights
    [K, KH, KW, C] in boxes of a tap's 64 channels x 64 filters, the start coordinates in the copy."""
    op = lo.Conv2d(64, 64, 3, padding=1, height=56, width=56, batch=32, dtype="float16")
    source = print_kernel(gpu_wgmma(op, warps_m=1, warps_n=2, depth=64, swizzle=128, engine="tma",
                                    specialize=True)).source
    for text in ("lo_dims[4] = {64ull, 56ull, 56ull, 32ull}, lo_strides[3] = {128ull, 7168ull, 401408ull}; "
                 "const unsigned lo_box[4] = {64u, 8u, 8u, 1u}, lo_unit[4] = {1u, 1u, 1u, 1u}",
                 "lo_dims[4] = {64ull, 3ull, 3ull, 64ull}", "lo_box[4] = {64u, 1u, 1u, 64u}",
                 "lo_tma_4d(", "cp.async.bulk.tensor.4d"):
        assert text in source, text
    strided = print_kernel(gpu_wgmma(STRIDED, engine="tma")).source
    assert "lo_box[4] = {16u, 16u, 16u, 1u}, lo_unit[4] = {1u, 2u, 2u, 1u}" in strided    # stride 2


_CONVS = st.integers(1, 3).flatmap(lambda spatial: conv_ops(max_hw=9, spatial=spatial, max_channels=5,
                                                           dtype="float16")).filter(
    lambda op: op.groups == 1).map(lambda op: type(op)(**{**op.arguments, "in_channels": 8 * op.in_channels}))
_TILES = st.sampled_from([{}, SPECIALIZED, {"block_m": 192, "block_n": 32, "warps_m": 3, "depth": 32,
                                            "split_k": 2, "stages": 3},
                          {"block_m": 128, "warps_m": 1, "warps_n": 2, "depth": 32, "swizzle": 64,
                           "specialize": True}])


def _check_emulated(op, tiles):
    largest, excess = _emulated_error(gpu_wgmma(op, **tiles, engine="tma"), seed=5)
    assert excess <= 0, largest


test_random_convs_emulated_with_pixel_boxes, test_random_convs_emulated_with_pixel_boxes_full = tiers(
    _check_emulated, 1, 4, _CONVS, _TILES)


def _start_off_by_one(monkeypatch):
    operand = pixel_boxes.operand
    monkeypatch.setattr(pixel_boxes, "operand", lambda *args: (lambda box: replace(
        box, start=(box.start[0], box.start[1] + 1, *box.start[2:])))(operand(*args)))


def _no_zero_fill(monkeypatch):
    monkeypatch.setattr(pixel_boxes, "_HOST", pixel_boxes._HOST.replace("map->base[offset] : {zero}",
                                                                        "map->base[offset] : 1"))


def _unit_strides(monkeypatch):
    operand = pixel_boxes.operand
    monkeypatch.setattr(pixel_boxes, "operand", lambda *args: (lambda box: replace(
        box, steps=(1,) * box.rank))(operand(*args)))


@pytest.mark.parametrize("mutate", [
    pytest.param(_start_off_by_one, id="start off by one"),
    pytest.param(_no_zero_fill, id="padding not zero-filled", marks=pytest.mark.slow),
    pytest.param(_unit_strides, id="element strides of 1", marks=pytest.mark.slow)])
def test_the_emulation_copies_through_the_boxes(monkeypatch, mutate):
    """The emulation reads each tile through its box's start coordinates, element strides and zero
    fill: a start coordinate off by one pixel, a fill other than zero or a stride-2 conv's boxes read
    with unit strides miss the reference."""
    mutate(monkeypatch)
    largest, excess = _emulated_error(gpu_wgmma(STRIDED, **SPECIALIZED, engine="tma"), seed=5)
    assert not excess <= 0, largest


def _not_a_box(monkeypatch):
    monkeypatch.setattr(dataflows, "pixel_box", lambda extents, block, rows: (1, 4, 48))
    return gpu_wgmma(lo.Conv2d(64, 64, 3, padding=1, height=56, width=56, batch=2, dtype="float16"),
                     block_m=192, warps_m=3, engine="tma")


@pytest.mark.parametrize("make, message", [
    (lambda mp: gpu_wgmma(lo.Conv2d(12, 16, 3, padding=1, height=8, width=8, dtype="float16"), engine="tma"),
     r"stage\('I', engine='tma'\): TMA needs each row of I on 16 bytes; it has 12 channels \(24 bytes\): "
     r"use a multiple of 8 channels"),
    (lambda mp: gpu_wgmma(lo.Conv2d(8, 8, 1, stride=(1, 5), height=1, width=320, dtype="float16"),
                          block_m=64, warps_m=1, engine="tma"),
     r"a tile of I is a box of 64 elements 5 apart along its dim 'W'; TMA's boxes span at most 256 "
     r"elements: choose a smaller block_m"),
    (lambda mp: gpu_wgmma(lo.Conv2d(8, 8, 3, stride=9, height=40, width=40, batch=4, dtype="float16"),
                          engine="tma"),
     r"a box of 8 elements 9 apart along its dim 'W'; TMA's elements are at most 8 apart: a conv of stride 9 "
     r"keeps engine='threads'"),
    (lambda mp: gpu_wgmma(lo.Conv2d(64, 64, 3, padding=1, height=16, width=16, batch=2, dtype="float16"),
                          engine="tma", cluster=(2, 1)),
     r"cluster\(2, 1\) multicasts slices of 2-D boxes; W is copied in 4-D boxes of a conv: drop the "
     r"cluster"),
    (_not_a_box, r"stage\('I', engine='tma'\): a tile's 64 rows are not a box of I: they take 1 x 2 x 48 "
                 r"coordinates"),
])
def test_what_tma_cannot_copy_as_pixel_boxes_is_refused(monkeypatch, make, message):
    with pytest.raises(ScheduleError, match=message):
        print_kernel(make(monkeypatch))
