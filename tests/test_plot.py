"""Plots: every figure is written for a conv and a matmul comparison without a warning or a
word on stderr; the speed axis is logarithmic with whiskers inside the data and under the peak;
the roofline has one roof per measured level and a point per schedule and level; the traffic
plot shows the level whose traffic varies."""
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

import loopopt as lo
from loopopt import dataflows, plot
from loopopt.cli import main
from loopopt.compare import Comparison, Row, compare

PLOTS = ["plot_runtime", "plot_miss_ratio", "plot_traffic", "plot_energy", "plot_traffic_vs_time",
         "plot_dram_vs_time", "plot_roofline", "plot_histograms", "dashboard"]
NAMES = ["naive", "tiled", "output_stationary"]


def _compare(op):
    return compare(op, [dataflows.PRESETS[n](op) for n in NAMES], NAMES, progress=False, budget=0.02)


@pytest.fixture(scope="module")
def comparisons():
    return {"conv": _compare(lo.Conv2d(4, 8, 3, padding=1, height=6, width=6)),
            "matmul": _compare(lo.Matmul(16, 24, 32))}


def _axes():
    return Figure().subplots()


def _synthetic(level_bytes, *, median_ms=1.0, min_ms=0.9, iqr_ms=0.1, gflops=None, peak=100.0):
    """A Comparison of a tiny matmul with made-up timings and traffic (one row per ``level_bytes``)."""
    op = lo.Matmul(4, 4, 4)
    profile = lo.reuse(lo.Schedule(op), granularity="line")
    rows = [Row(f"s{i}", "scalar", median_ms, min_ms, iqr_ms, 10,
                gflops or op.flops / median_ms / 1e6, 1.0, True, 0.0, level_bytes=dict(traffic))
            for i, traffic in enumerate(level_bytes)]
    return Comparison(op, rows, {r.name: profile for r in rows}, peak, provenance={})


# the quick tier: the conv's dashboard (every plot in one figure) and its roofline alone; the other
# pairs are slow
QUICK_PLOTS = {("conv", "dashboard"), ("conv", "plot_roofline")}


@pytest.mark.parametrize("kind, name", [
    (kind, name) if (kind, name) in QUICK_PLOTS else pytest.param(kind, name, marks=pytest.mark.slow)
    for kind in ("conv", "matmul") for name in PLOTS])
def test_plot_writes_png_without_warnings(comparisons, tmp_path, capfd, kind, name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = getattr(plot, name)(comparisons[kind], tmp_path / f"{name}.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    assert capfd.readouterr().err == ""


@pytest.mark.slow
def test_first_matplotlib_import_says_nothing(tmp_path):
    """A first import in a process whose matplotlib config dir cannot be created (matplotlib logs
    a temporary-directory notice and builds a font cache) prints nothing on stderr."""
    (tmp_path / "file").write_text("")
    script = textwrap.dedent(f"""
        import warnings
        warnings.simplefilter("error")
        import loopopt as lo
        from loopopt import plot
        from loopopt.compare import Comparison, Row
        op = lo.Matmul(4, 4, 4)
        row = Row("naive", "scalar", 1.0, 0.9, 0.1, 10, 1.28e-4, 1.0, True, 0.0)
        plot.plot_runtime(Comparison(op, [row], {{}}, 100.0, provenance={{}}), {str(tmp_path / "r.png")!r})
    """)
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "file" / "mpl")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stderr == "" and (tmp_path / "r.png").stat().st_size > 0


@pytest.mark.slow
def test_report_has_every_figure(tmp_path, capsys):
    path = tmp_path / "r.md"
    argv = ["report", "--matmul", "8,16,8", "--schedules", "naive,tiled", "--quiet", "-o", str(path)]
    assert main(argv) == 0
    text = path.read_text()
    assert [c for c, _, _ in plot.FIGURES if f"## {c}\n" in text] == [c for c, _, _ in plot.FIGURES]


def test_speed_axis_is_log_with_whiskers_under_the_peak():
    # IQR 4 ms around a 1 ms median: the fast end stops at the fastest run (0.5 ms, 2x the median's
    # speed), and that is above the 1.5x peak, so the whisker stops at the peak
    cmp = _synthetic([{}], median_ms=1.0, min_ms=0.5, iqr_ms=4.0)
    cmp.peak = 1.5 * cmp.rows[0].gflops
    ax = _axes()
    plot.draw_runtime(ax, cmp)
    assert ax.get_xscale() == "log"
    whiskers = [x for c in ax.collections if isinstance(c, LineCollection) for seg in c.get_segments()
                for x in seg[:, 0]]
    assert whiskers and max(whiskers) == pytest.approx(cmp.peak)
    assert min(whiskers) == pytest.approx(cmp.op.flops / 3.0 / 1e6)       # median + IQR/2 = 3 ms
    assert "IQR" in ax.get_title()


def test_whisker_range():
    row = _synthetic([{}], median_ms=2.0, min_ms=1.5, iqr_ms=1.0).rows[0]      # flops 128: 1 ms = 128e-6 G
    g = lambda ms: 128 / ms / 1e6
    assert plot.whisker_range(row, 128, peak=1.0) == pytest.approx((g(2.5), g(1.5)))
    assert plot.whisker_range(row, 128, peak=g(1.8)) == pytest.approx((g(2.5), g(1.8)))
    above = _synthetic([{}], median_ms=2.0, min_ms=1.0, iqr_ms=2.0, gflops=g(1.2)).rows[0]   # above the peak
    assert plot.whisker_range(above, 128, peak=g(1.8))[1] == pytest.approx(g(1.2))


def test_hierarchical_roofline_has_a_roof_per_level_and_a_point_per_schedule_and_level(comparisons):
    cmp = comparisons["conv"]
    for bandwidth in ({"L1": 200.0, "L2": 80.0, "DRAM": 10.0}, None):
        ax = _axes()
        plot.draw_roofline(ax, cmp, bandwidth)
        levels = list(bandwidth or lo.machine_profile().bandwidth)
        roofs = [line.get_gid() for line in ax.get_lines() if (line.get_gid() or "").startswith("roof:")]
        points = [c.get_gid() for c in ax.collections if (c.get_gid() or "").startswith("point:")]
        assert sorted(roofs) == sorted(f"roof:{lv}" for lv in levels + ["compute"])
        assert sorted(points) == sorted(f"point:{r.name}:{lv}" for r in cmp.rows for lv in levels)
        assert ax.get_xscale() == ax.get_yscale() == "log"
    # a few KB of data, in L1 during the timed runs: its L2/L3/DRAM traffic is a first run's, never the bound
    labels = [t.get_text().split(": ") for t in ax.get_legend().get_texts()]
    assert [name for name, _ in labels] == [r.name for r in cmp.rows]
    assert {limit for _, limit in labels} <= {"L1-bound", "compute-bound"}


def test_bound_is_the_lowest_roof():
    bandwidth = {"L1": 100.0, "L2": 50.0, "DRAM": 5.0}
    assert plot.bound({"L1": 1.0, "L2": 4.0, "DRAM": 10.0}, bandwidth, 1000.0) == ("DRAM", 50.0)
    assert plot.bound({"L1": 0.5, "L2": 4.0, "DRAM": 100.0}, bandwidth, 1000.0) == ("L1", 50.0)
    assert plot.bound({"L1": 10.0, "L3": 0.001}, bandwidth, 300.0) == ("compute", 300.0)   # L3: no roof


def test_warm_levels_stop_at_the_cache_that_holds_the_data():
    levels, sizes = ["L1", "L2", "L3", "DRAM"], {"L1": 48 << 10, "L2": 2 << 20, "L3": 32 << 20}
    assert plot.warm_levels(levels, 1 << 10, sizes) == ["L1"]
    assert plot.warm_levels(levels, 1_750_000, sizes) == ["L1", "L2"]
    assert plot.warm_levels(levels, 2 << 20, sizes) == ["L1", "L2"]
    assert plot.warm_levels(levels, 100 << 20, sizes) == levels
    assert plot.warm_levels(["L2", "DRAM"], 1 << 10, sizes) == ["L2"]


def test_varying_level():
    traffic = {"L1": [10, 100, 50], "L2": [5, 6, 5], "L3": [1, 1, 1], "DRAM": [1, 1, 1]}
    level, spread = plot.varying_level(traffic)
    assert level == "L1" and spread["L3"] == spread["DRAM"] == 0 and spread["L1"] > spread["L2"] > 0
    assert plot.varying_level({"L2": [1, 2], "DRAM": [10, 20]})[0] == "DRAM"            # a tie: the outermost
    assert plot.varying_level({"L1": [100, 100.5], "DRAM": [7, 7]})[0] is None          # under 1 %
    assert plot.varying_level({"L1": [100, 100.5]}, constant_below=0.001)[0] == "L1"
    assert plot.varying_level({"L2": [0, 0]}) == (None, {"L2": 0.0})


def test_traffic_vs_time_shows_the_varying_level_or_says_none_varies(comparisons):
    cmp = comparisons["matmul"]
    level, _ = plot.varying_level({lv: [r.level_bytes[lv] for r in cmp.rows] for lv in plot.MEMORY_LEVELS
                                   if lv in cmp.rows[0].level_bytes})
    ax = _axes()
    plot.draw_traffic_vs_time(ax, cmp)
    assert level is not None and ax.get_xlabel() == f"predicted {level} traffic (MB)"
    assert ax.get_title().startswith(f"{level} traffic vs time: the level whose traffic varies most")
    assert ax.get_yscale() == "log"
    same = {"registers": 4096, "L1": 640, "L2": 320, "L3": 192, "DRAM": 192}
    ax = _axes()
    plot.draw_traffic_vs_time(ax, _synthetic([same, same]))
    assert ax.get_xlabel() == "predicted DRAM traffic (MB)" and "no level's traffic varies" in ax.get_title()


def test_reuse_plots_need_analysis(tmp_path):
    op = lo.Matmul(4, 4, 4)
    cmp = compare(op, [lo.Schedule(op)], ["naive"], reuse=False, progress=False, budget=0.01)
    assert cmp.plot(tmp_path / "only_runtime.png").stat().st_size > 0
    with pytest.raises(ValueError, match="reuse"):
        plot.plot_roofline(cmp, tmp_path / "r.png")
