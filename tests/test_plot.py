"""Every plot function writes a non-empty PNG."""
import pytest

import loopopt as lo
from loopopt import dataflows, plot
from loopopt.compare import compare

PLOTS = ["plot_runtime", "plot_miss_ratio", "plot_traffic", "plot_energy", "plot_dram_vs_time",
         "plot_roofline", "plot_histograms", "dashboard"]


@pytest.fixture(scope="module")
def comparison():
    op = lo.Conv2d(4, 8, 3, padding=1, height=6, width=6)
    names = ["naive", "input_stationary"]
    return compare(op, [dataflows.PRESETS[n](op) for n in names], names, progress=False, budget=0.02)


@pytest.mark.parametrize("name", PLOTS)
def test_plot_writes_png(comparison, tmp_path, name):
    path = getattr(plot, name)(comparison, tmp_path / f"{name}.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_reuse_plots_need_analysis(tmp_path):
    op = lo.Matmul(4, 4, 4)
    cmp = compare(op, [lo.Schedule(op)], ["naive"], reuse=False, progress=False, budget=0.01)
    assert cmp.plot(tmp_path / "only_runtime.png").stat().st_size > 0
    with pytest.raises(ValueError, match="reuse"):
        plot.plot_roofline(cmp, tmp_path / "r.png")
