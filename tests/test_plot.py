"""Plots: every figure is written for a conv and a matmul comparison without a warning or a
word on stderr; the speed axis is logarithmic with whiskers inside the data and under the peak;
the roofline has one roof per measured level and a point per schedule and level; the traffic
plot shows the level whose traffic varies."""
import dataclasses
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.legend import Legend

import loopopt as lo
from loopopt import dataflows, plot
from loopopt.analysis import Machine
from loopopt.cli import main
from loopopt.compare import Comparison, Row, _add_hierarchy, compare
from loopopt.measure import Timing
from loopopt.tune import Trial, TuneResult

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


# the quick tier: the conv's roofline alone (the ten-row dashboard below draws every panel and checks
# the layout); the other pairs are slow
QUICK_PLOTS = {("conv", "plot_roofline")}


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


def test_a_row_timed_once_draws_whiskers_around_its_rate():
    """A row with one run (no IQR, its minimum its median: the naive loop on a loaded machine) has the
    rate ``measure`` computes from the median in seconds, which ``flops / median_ms`` misses in the last
    bit for 41 of these 101 medians: its whiskers still bracket it, and matplotlib draws them (a negative
    whisker length was an error that ended ``loopopt compare --plot``)."""
    base = _synthetic([{}])
    flops = base.op.flops
    rows = [dataclasses.replace(base.rows[0], name=f"s{i}", median_ms=seconds * 1e3, min_ms=seconds * 1e3,
                                iqr_ms=0.0, gflops=flops / seconds / 1e9)       # as measure.py computes it
            for i, seconds in enumerate(np.linspace(0.001, 0.3, 101))]
    for row in rows:
        low, high = plot.whisker_range(row, flops, peak=100.0)
        assert low <= row.gflops <= high and high == pytest.approx(low)
    plot.draw_runtime(_axes(), Comparison(base.op, rows, {}, 100.0, provenance={}))


@pytest.mark.slow
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


def layout_problems(fig: Figure) -> list[str]:
    """What in ``fig`` (drawn, by the window bounding boxes of its artists) overlaps: a legend over any
    panel's data area or over another legend, two tick labels of one axis, a title over another panel;
    and text outside the figure."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    panels = [ax for ax in fig.axes if ax.get_visible()]
    areas = [ax.get_window_extent(renderer).shrunk(0.99, 0.99) for ax in panels]
    legends = [legend for ax in panels for legend in dict.fromkeys(ax.findobj(Legend))]
    boxes = [legend.get_window_extent(renderer) for legend in legends]
    found = [f"legend {i} over panel {j}" for i, box in enumerate(boxes) for j, area in enumerate(areas)
             if box.overlaps(area)]
    found += [f"legends {i} and {j} overlap" for i, a in enumerate(boxes) for j, b in enumerate(boxes)
              if i < j and a.overlaps(b)]
    for index, ax in enumerate(panels):
        for axis in [ax.xaxis, ax.yaxis] + [a for child in ax.child_axes for a in (child.xaxis, child.yaxis)]:
            low, high = sorted(axis.get_view_interval())
            labels = [label.get_window_extent(renderer).shrunk(0.98, 0.98) for tick, label in
                      zip(axis.get_majorticklocs(), axis.get_majorticklabels())
                      if low <= tick <= high and label.get_visible() and label.get_text()]
            found += [f"panel {index}: tick labels {a} and {b} overlap" for i, a in enumerate(labels)
                      for b in labels[i + 1:] if a.overlaps(b)]
        title = ax.title.get_window_extent(renderer)
        found += [f"title of panel {index} over panel {j}" for j, area in enumerate(areas)
                  if j != index and title.overlaps(area)]
        inside = fig.bbox.padded(1)
        for text in (ax.title, ax.xaxis.label, ax.yaxis.label):
            box = text.get_window_extent(renderer)
            if text.get_text() and not (inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1)):
                found.append(f"panel {index}: {text.get_text()[:30]!r} outside the figure")
    return found


def _ten_rows() -> Comparison:
    """A comparison of ten rows (a Winograd one, a noisy one) of a tiny matmul, with made-up timings and
    the reuse analysis of its naive schedule for every row."""
    op = lo.Matmul(4, 4, 4)
    profile = lo.reuse(lo.Schedule(op), granularity="line")
    hierarchy = profile.hierarchy(Machine.detect(), set_associative=False)
    rows = []
    for i in range(10):
        ms = 0.01 * (i + 1)
        rows.append(Row(f"schedule_{i}" + "_with_a_long_name" * (i == 7), "avx2", ms, ms * 0.9, ms * 0.1, 10,
                        op.flops / ms / 1e6, 1.0, True, 0.0, noisy=i == 3,
                        algorithm="winograd F(2x2,3x3)" if i == 9 else "direct"))
        _add_hierarchy(rows[-1], hierarchy)
    return Comparison(op, rows, {r.name: profile for r in rows}, 100.0, provenance={})


def test_captions_are_one_line():
    assert all(len(text) <= plot.CAPTION_WIDTH for text in plot.CAPTIONS.values())


def test_palette_stays_distinct_for_any_number_of_rows():
    assert plot.palette(8) == list(plot.PALETTE)
    assert all(len(set(plot.palette(n))) == n for n in (1, 5, 9, 20, 21, 64))


@pytest.mark.slow
def test_a_ten_row_dashboard_keeps_legends_off_the_data_and_its_text_apart():
    """Legends outside every panel, no overlapping labels; distinct colours; a caption under each title;
    the Winograd row marked direct-equivalent, the noisy timing said; miss ratios on a log axis."""
    cmp = _ten_rows()
    fig = plot.dashboard_figure(cmp)
    assert layout_problems(fig) == []
    runtime, roofline, _, _, misses, _ = fig.axes[:6]
    assert all(ax.get_title().count("\n") >= 1 for ax in fig.axes[:6])        # title and caption
    assert [label.get_text() for label in runtime.get_yticklabels()][-1] == "schedule_9 *"
    assert "direct-equivalent" in runtime.get_title() and "NOISY" in runtime.get_title()
    colours = {tuple(line.get_color()) if not isinstance(line.get_color(), str) else line.get_color()
               for line in misses.get_lines() if line.get_label().startswith("schedule_")}
    assert len(colours) == 10 and misses.get_yscale() == "log"
    assert "direct-equivalent" in roofline.get_title()


def test_layout_problems_finds_a_legend_over_the_data():
    ax = Figure().subplots()
    ax.plot([0, 1], [0, 1], label="data")
    ax.legend(loc="center")
    assert layout_problems(ax.figure) == ["legend 0 over panel 0"]


def test_tune_plot_is_coloured_by_algorithm_and_says_whether_the_search_converged():
    op = lo.Conv2d(4, 16, 3, padding=1, height=6, width=6)
    seconds = [4e-3, 8e-3, 1e-3, 3e-3, 2.5e-3, None, 2e-3, 1.9e-3]
    names = ["direct", "im2col", "winograd", "direct", "direct", "direct", "direct", "direct"]
    trials = [Trial(n, "", {"algorithm": a}, {}, "ok" if s else "error",
                    s and Timing(s, s, 0.0, 1, 1.0, 1.0, 0.1, True, 0.0), "")
              for n, (s, a) in enumerate(zip(seconds, names), 1)]
    result = TuneResult(op, "avx2", 1, lo.Schedule(op), trials[2].timing, trials, best_number=3)
    fig = result.figure()
    assert layout_problems(fig) == []
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:3] == ["direct", "im2col", "winograd"] and "failed trial" in labels
    assert len({tuple(c.get_facecolor()[0]) for c in ax.collections[:3]}) == 3
    assert "search: converged" in ax.get_title() and "direct-equivalent" in ax.get_title()


@pytest.mark.slow
def test_reuse_plot(tmp_path, capsys, monkeypatch):
    """loopopt reuse --plot: the schedule's histograms per tensor and its miss-ratio curve, laid out
    without overlaps (drawn once, here; ``_save`` writes every figure's PNG and is tested above)."""
    path, figures = tmp_path / "reuse.png", []
    monkeypatch.setattr(plot, "_save", lambda fig, where: figures.append(fig) or where)
    assert main(["reuse", "--matmul", "8,16,8", "--schedule", "tiled", "--plot", str(path)]) == 0
    assert f"plot written to {path}" in capsys.readouterr().out
    titles = [ax.get_title().split("\n")[0] for ax in figures[0].axes if ax.get_visible()]
    assert titles == ["reuse distances of A", "reuse distances of B", "reuse distances of C",
                      "miss-ratio curves (fully associative LRU)"]
    assert layout_problems(figures[0]) == []
