"""Dataflow presets: correct on odd, grouped and depthwise convs; stationary operands really stay."""
import pytest
from helpers import rotated

import loopopt as lo
from loopopt import dataflows
from loopopt.analysis import reuse
from loopopt.measure import verify

CONVS = [lo.Conv2d(6, 10, 3, padding=1, height=9, width=11),
         lo.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, height=7, width=7),
         lo.Conv2d(4, 6, (1, 3), groups=2, dilation=(1, 2), height=5, width=9, bias=False),
         lo.Conv1d(6, 10, 4, padding="same", length=13),
         lo.Conv3d(4, 6, 3, stride=(1, 2, 1), padding=((1, 0), 1, (0, 2)), groups=2, depth=4, height=5,
                   width=6)]
MATMULS = [lo.Matmul(13, 17, 19), lo.Matmul(5, 17, 9, batch=(2, 3), trans_a=True),
           lo.Matmul(7, 5, 3, batch=2, trans_b=True)]


@pytest.mark.parametrize("name, op", rotated(list(dataflows.PRESETS), CONVS))
def test_preset_matches_reference(name, op):
    ok, error = verify(dataflows.PRESETS[name](op).compile())
    assert ok, f"{name}: max error {error}"


@pytest.mark.parametrize("name", [n for n in dataflows.PRESETS if n != "naive"])
def test_presets_vectorize_innermost(name):
    schedule = dataflows.PRESETS[name](CONVS[0])
    assert schedule.loops[-1].vectorized


@pytest.mark.parametrize("name, op", rotated([n for n in dataflows.PRESETS if n != "im2col"], MATMULS))
def test_matmul_presets_match_reference(name, op):
    ok, error = verify(dataflows.PRESETS[name](op).compile())
    assert ok, f"{name}: max error {error}"


def test_im2col_refuses_matmul():
    with pytest.raises(ValueError, match="applies to a convolution only"):
        dataflows.im2col(lo.Matmul(4, 4, 4))


def test_factors_clamped_to_extents():
    op = lo.Conv2d(3, 5, 3, height=4, width=4)
    schedule = dataflows.output_stationary(op, k=64, ow=64)
    extents = {loop.name: loop.extent for loop in schedule.loops}
    assert extents["k_i"] == 5 and extents["ow_i"] == 2


def test_presets_name_loops_through_windows():
    assert dataflows.implicit_gemm(CONVS[3]).loop_names == ("m_o", "k_o", "r", "m_i", "k_i")
    schedule = dataflows.weight_stationary(CONVS[4])
    assert schedule.loop_names[:9] == ("k_o", "c", "kd", "kh", "kw", "n", "od", "oh", "ow")
    assert {schedule.layout_of(t).tag for t in "IO"} == {"NDHWC"} and schedule.layout_of("W").tag == "DHWIO"


STATIONARY = {"output_stationary": "O", "weight_stationary": "W", "input_stationary": "I"}


@pytest.mark.parametrize("name, stationary", STATIONARY.items())
def test_stationary_operand_stays_innermost(name, stationary):
    """In a 1 KB cache (half an AVX-512 register file) the stationary operand misses least."""
    op = lo.Conv2d(16, 32, 3, padding=1, height=8, width=8)
    profile = reuse(dataflows.PRESETS[name](op))
    ratio = {t: profile.misses(256, t) / profile.accesses_of(t) for t in ("I", "W", "O")}
    assert min(ratio, key=ratio.get) == stationary, ratio


def test_unknown_preset_names_the_closest_and_the_known_ones():
    with pytest.raises(KeyError, match=r"unknown dataflow preset 'output_stationry'; did you mean "
                                       r"'output_stationary'\? \(known: naive, interchanged, .*, im2col\)"):
        dataflows.PRESETS["output_stationry"]
    assert isinstance(dataflows.PRESETS, dict) and dataflows.PRESETS.get("typo") is None
    assert "tiled" in dataflows.PRESETS and dataflows.PRESETS["tiled"] is dataflows.tiled
