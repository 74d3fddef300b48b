"""Plots of a Comparison (matplotlib, Okabe-Ito colour-blind-safe palette; ``palette`` keeps the colours
distinct past its 8).

Every ``plot_*`` function writes one figure to ``path`` and returns the path; each draws
through a ``draw_*(ax, comparison)`` function that ``dashboard`` reuses. Every panel has a title and a
one-line caption under it saying what to look for (``CAPTIONS``); legends sit outside the axes, never
over the data. Figures are
``matplotlib.figure.Figure`` objects saved directly (no pyplot, so no backend is chosen and
no global figure state is touched) with constrained layout; the notices matplotlib logs on a
first import (building its font cache, a temporary config directory) are held back.
"""
from __future__ import annotations

import logging
import math
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .machine import machine_profile
from .units import duration


def _import_quietly() -> tuple:
    """The matplotlib names this module uses, imported with matplotlib's logger raised to ERROR:
    a first import logs "building the font cache" or "created a temporary config directory",
    which are not the user's concern."""
    logger = logging.getLogger("matplotlib")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        from matplotlib import colormaps, figure, lines, ticker
    finally:
        logger.setLevel(level)
    return (figure.Figure, lines.Line2D, ticker.LogLocator, ticker.MaxNLocator, ticker.FuncFormatter,
            ticker.NullFormatter, colormaps["cividis"], colormaps["tab20"], colormaps["turbo"])


(Figure, Line2D, LogLocator, MaxNLocator, FuncFormatter, NullFormatter, LEVEL_COLOURS, TAB20,
 TURBO) = _import_quietly()

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis

    from .analysis import CacheLevel, ReuseProfile
    from .compare import Comparison, Row

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
LEVEL_ORDER = ("registers", "L1", "L2", "L3", "DRAM")
MEMORY_LEVELS = LEVEL_ORDER[1:]          # levels with a measured bandwidth (registers have none)
# marker, roof line style, marker area: outer levels larger and drawn first, so markers at one intensity nest
LEVEL_STYLE = {"L1": ("o", ":", 25), "L2": ("s", "-.", 45), "L3": ("^", "--", 70), "DRAM": ("D", "-", 100)}
CONSTANT_BELOW = 0.01   # coefficient of variation under which a level's traffic counts as the same for all
WHISKERS = "whiskers: IQR (median ± IQR/2, clipped to the fastest run and the peak)"
DENSE_DECADES = 2.5     # a log axis over more decades is ticked at powers of ten only
CAPTION_WIDTH = 72      # characters of a caption line (a dashboard panel is about this wide at its font)
CAPTIONS = {      # one line each (at most CAPTION_WIDTH characters): what to look for
    "runtime": "further right is faster; the dashed line is the peak",
    "roofline": "far under its roof: speed left on the table; filled marker: the limit",
    "traffic_vs_time": "down-left is better; a rising trend means this traffic costs time",
    "traffic": "lower bars move fewer bytes; compare the schedules' bars at each level",
    "miss_ratio": "lower is better; a drop left of a cache's line is data that cache keeps",
    "histogram": "accesses left of a cache's line are reuses that cache catches",
    "energy": "lower stacks cost less energy; DRAM's share grows as data leaves cache",
}
WINOGRAD_MARK = " *"     # on a Winograd row's label: its rate counts the direct algorithm's operations
WINOGRAD_NOTE = ("* Winograd: direct-equivalent rate (the direct algorithm's operations over its time), so "
                 "it can pass the peak")


def palette(count: int) -> list[str]:
    """``count`` distinct colours: the Okabe-Ito palette (colour-blind safe) up to 8, tab20 up to 20,
    evenly spaced colours of the turbo map beyond."""
    if count <= len(PALETTE):
        return list(PALETTE[:count])
    if count <= TAB20.N:
        return [_hex(TAB20(i)) for i in range(count)]
    return [_hex(TURBO(x)) for x in np.linspace(0.0, 1.0, count)]


def _hex(rgba: Sequence[float]) -> str:
    return "#" + "".join(f"{round(255 * c):02x}" for c in rgba[:3])


def colour(index: int, count: int = len(PALETTE)) -> str:
    """The colour of item ``index`` of ``count`` (``palette``)."""
    return palette(max(count, index + 1))[index]


def caption(ax: Axes, title: str, text: str, *notes: str) -> None:
    """``title`` over the panel and under it the one-line ``text`` (what to look for) and any ``notes``
    (what the panel's figures mean), each wrapped only if longer than ``CAPTION_WIDTH``."""
    lines = [line for part in (text, *notes) for line in textwrap.wrap(part, CAPTION_WIDTH)]
    ax.set_title("\n".join([title, *lines]), fontsize=9)


def _is_winograd(row: Row) -> bool:
    return row.algorithm.startswith("winograd")


def _caches() -> tuple[CacheLevel, ...]:
    """This machine's data caches, as the comparison's hierarchy model saw them."""
    from .analysis import Machine
    return Machine.detect().caches


def _mark_levels(ax: Axes) -> None:
    """A dotted line at each cache's capacity in lines, named at its top; the (log) axis reaches past the
    largest, so that every name is inside it."""
    capacities = {cache.name: cache.size // cache.line_size for cache in _caches()}
    for name, lines in capacities.items():
        ax.axvline(lines, color="grey", linestyle=":", linewidth=1)
        ax.text(lines, 1.0, f" {name}", transform=ax.get_xaxis_transform(), va="top", fontsize=8,
                color="grey")
    if capacities:
        ax.set_xlim(right=max(ax.get_xlim()[1], 8 * max(capacities.values())))


def _require_reuse(cmp: Comparison) -> None:
    if not cmp.profiles:
        raise ValueError("this plot needs the reuse analysis: run compare(..., reuse=True)")


def legend_outside(ax: Axes, **options) -> None:
    """The legend of ``ax`` outside it, right of its top corner (never over the data)."""
    ax.legend(fontsize=7, **{"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0,
                             **options})


class _SpanLogLocator(LogLocator):
    """Log ticks at 1, 2 and 5 times powers of ten over up to ``DENSE_DECADES`` decades, at powers of ten
    over more (so that the labels never crowd)."""

    def tick_values(self, vmin: float, vmax: float):
        low, high = sorted((max(vmin, 1e-300), max(vmax, 1e-300)))
        self.set_params(subs=(1.0, 2.0, 5.0) if math.log10(high / low) <= DENSE_DECADES else (1.0,))
        return super().tick_values(vmin, vmax)


def _plain_log(axis: Axis) -> None:
    """Log ticks (``_SpanLogLocator``) labelled as plain numbers."""
    axis.set_major_locator(_SpanLogLocator())
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


# --- speed ------------------------------------------------------------------------------------------

def whisker_range(row: Row, flops: float, peak: float) -> tuple[float, float]:
    """(low, high) G ops/s of ``row``'s interquartile spread: median time ± IQR/2, the fast end
    clipped to the fastest run, the high end to the peak (or to the median's speed if that is
    above it); never past the row's rate (a row timed once has no spread, and its rate, computed from
    the median in seconds, may differ from ``flops / median_ms`` in the last bit)."""
    fast_ms = max(row.median_ms - row.iqr_ms / 2, row.min_ms)
    slow_ms = row.median_ms + row.iqr_ms / 2
    high = min(flops / fast_ms / 1e6, max(peak, row.gflops))
    return min(flops / slow_ms / 1e6, row.gflops), max(high, row.gflops)


def draw_runtime(ax: Axes, cmp: Comparison) -> None:
    """Measured speed per schedule on a log axis (G ops/s below, the median time on top), with the
    clipped interquartile whiskers and this machine's peak."""
    names = [r.name + (WINOGRAD_MARK if _is_winograd(r) else "") for r in cmp.rows]
    y = np.arange(len(names))
    colours, ends = palette(len(names)), []
    for i, r in enumerate(cmp.rows):
        low, high = whisker_range(r, cmp.op.flops, cmp.peak)
        ends += [low, high]
        ax.errorbar(r.gflops, i, xerr=[[r.gflops - low], [high - r.gflops]], fmt="o", color=colours[i],
                    capsize=3, markersize=7)
        ax.annotate(duration(r.median_ms * 1e-3), (r.gflops, i), xytext=(0, 7), textcoords="offset points",
                    ha="center", fontsize=7)
    ax.axvline(cmp.peak, color="black", linestyle="--", linewidth=1, label=f"peak {cmp.peak:.0f} {cmp.unit}")
    ax.set_xscale("log")
    ax.set_xlim(min(ends) / 1.6, max(ends + [cmp.peak]) * 1.6)     # every whisker, label and the peak
    ax.set_yticks(y, names)
    ax.set_ylim(len(names) - 0.4, -0.7)            # first schedule on top
    ax.set_xlabel(f"throughput ({cmp.unit}, log)")
    _plain_log(ax.xaxis)
    ms = lambda g: cmp.op.flops / np.maximum(g, 1e-12) / 1e6   # its own inverse
    top = ax.secondary_xaxis("top", functions=(ms, ms))
    top.set_xlabel("median time (ms)", fontsize=8)
    _plain_log(top.xaxis)
    notes = [WHISKERS] + ([WINOGRAD_NOTE] if any(_is_winograd(r) for r in cmp.rows) else [])
    if cmp.noisy:
        notes.append("NOISY timings: other processes disturbed them; the ranking may not hold")
    caption(ax, "measured speed", CAPTIONS["runtime"], *notes)
    legend_outside(ax)


# --- hierarchical roofline ---------------------------------------------------------------------------

def level_intensities(cmp: Comparison, levels: Sequence[str]) -> list[dict[str, float]]:
    """Per row: ops per byte delivered by each of ``levels`` (predicted traffic; levels without
    traffic left out)."""
    return [{lv: cmp.op.flops / r.level_bytes[lv] for lv in levels if r.level_bytes.get(lv, 0) > 0}
            for r in cmp.rows]


def bound(intensity: Mapping[str, float], bandwidth: Mapping[str, float], peak: float) -> tuple[str, float]:
    """The roof that bounds a schedule and its attainable G ops/s: the lowest of the compute
    peak and, per level, bandwidth (GB/s) x intensity (ops/byte)."""
    roofs = {"compute": peak, **{lv: bandwidth[lv] * oi for lv, oi in intensity.items() if lv in bandwidth}}
    level = min(roofs, key=roofs.get)
    return level, roofs[level]


def warm_levels(levels: Sequence[str], footprint: int, cache_sizes: Mapping[str, int]) -> list[str]:
    """The ``levels`` (innermost first) that repeated runs draw from: up to the first cache of
    ``cache_sizes`` (bytes) that holds ``footprint`` bytes. The traffic of the levels beyond it
    is the compulsory traffic of a first run, which the timed (warm) runs do not pay."""
    for i, lv in enumerate(levels):
        if cache_sizes.get(lv, 0) >= footprint:
            return list(levels[:i + 1])
    return list(levels)


def draw_roofline(ax: Axes, cmp: Comparison, bandwidth: Mapping[str, float] | None = None) -> None:
    """Hierarchical roofline: the compute peak and one roof per memory level with a measured read
    bandwidth (default: the machine profile's), and each schedule's measured speed at its
    intensity per level (one marker per schedule and level; filled: the roof that bounds it, of
    the levels that warm runs draw from; faded: a first run's compulsory traffic)."""
    _require_reuse(cmp)
    if bandwidth is None:
        bandwidth = {lv: b.gbs for lv, b in machine_profile().bandwidth.items()}
    levels = [lv for lv in MEMORY_LEVELS if lv in bandwidth]
    intensities = level_intensities(cmp, levels)
    unit, per = cmp.unit, cmp.unit[1:-2]
    xs = [oi for row in intensities for oi in row.values()] + [cmp.peak / bandwidth[lv] for lv in levels]
    x = np.logspace(math.log10(min(xs)) - 0.5, math.log10(max(xs)) + 0.5, 2)
    for lv in levels:
        ridge = cmp.peak / bandwidth[lv]
        style = LEVEL_STYLE[lv][1]
        ax.plot([x[0], ridge], [bandwidth[lv] * x[0], cmp.peak], color="dimgrey", linestyle=style,
                linewidth=1.2, gid=f"roof:{lv}")
        ax.annotate(lv, (x[0], bandwidth[lv] * x[0]), xytext=(2, 2), textcoords="offset points", fontsize=7,
                    color="dimgrey", bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
    ax.plot([min(cmp.peak / bandwidth[lv] for lv in levels), x[1]], [cmp.peak] * 2, color="black",
            linewidth=1.5, gid="roof:compute")
    sizes = {c.name: c.size for c in _caches()}
    faded = False
    colours = palette(len(cmp.rows))
    for i, (r, intensity) in enumerate(zip(cmp.rows, intensities)):
        warm = warm_levels(list(intensity), r.level_bytes["DRAM"], sizes)
        limit, _ = bound({lv: intensity[lv] for lv in warm}, bandwidth, cmp.peak)
        faded |= len(warm) < len(intensity)
        ax.plot(sorted(intensity.values()), [r.gflops] * len(intensity), color=colours[i], linewidth=0.8,
                alpha=0.6)
        for depth, (lv, oi) in enumerate(reversed(intensity.items())):
            marker, _, area = LEVEL_STYLE[lv]
            ax.scatter(oi, r.gflops, marker=marker, s=area, zorder=3 + depth, edgecolors=colours[i],
                       facecolors=colours[i] if lv == limit else "white", linewidths=1.5,
                       alpha=1.0 if lv in warm else 0.3, gid=f"point:{r.name}:{lv}")
        mark = WINOGRAD_MARK if _is_winograd(r) else ""
        ax.plot([], [], color=colours[i], linewidth=4, label=f"{r.name}{mark}: {limit}-bound")
    level_handles = [Line2D([], [], color="dimgrey", linestyle=style, marker=marker, markerfacecolor="white",
                            label=f"{lv} {bandwidth[lv]:.0f} GB/s")
                     for lv in levels for marker, style, _ in [LEVEL_STYLE[lv]]]
    level_handles.append(Line2D([], [], color="black", linewidth=1.5, label=f"peak {cmp.peak:.0f} {unit}"))
    ax.add_artist(ax.legend(handles=level_handles, fontsize=7, loc="lower left", bbox_to_anchor=(1.01, 0.0),
                            borderaxespad=0.0, title="roofs (read)", title_fontsize=7))
    legend_outside(ax)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log(ax.yaxis)
    ax.set_xlabel(f"intensity ({per} per byte delivered by the level)")
    ax.set_ylabel(f"measured throughput ({unit})")
    notes = ["faded: traffic of a first run only (the data fits in an inner cache)"] if faded else []
    if any(_is_winograd(r) for r in cmp.rows):
        notes.append(WINOGRAD_NOTE)
    caption(ax, "hierarchical roofline", CAPTIONS["roofline"], *notes)


# --- traffic -----------------------------------------------------------------------------------------

def variation(values: Sequence[float]) -> float:
    """Coefficient of variation (population standard deviation / mean; 0 when the mean is 0)."""
    mean = float(np.mean(values))
    return float(np.std(values)) / mean if mean > 0 else 0.0


def varying_level(traffic: Mapping[str, Sequence[float]], constant_below: float = CONSTANT_BELOW
                  ) -> tuple[str | None, dict[str, float]]:
    """The level whose traffic varies most across schedules (largest coefficient of variation; on
    a tie the outermost) and every level's coefficient; None when none reaches ``constant_below``.
    ``traffic`` maps each level, innermost first, to its bytes per schedule."""
    spread = {lv: variation(values) for lv, values in traffic.items()}
    best = max(reversed(list(spread)), key=spread.get, default=None)
    return (best if best is not None and spread[best] >= constant_below else None), spread


def _memory_traffic(cmp: Comparison) -> dict[str, list[int]]:
    """Predicted bytes per memory level (registers left out), one entry per row."""
    return {lv: [r.level_bytes[lv] for r in cmp.rows]
            for lv in MEMORY_LEVELS if lv in cmp.rows[0].level_bytes}


def draw_traffic_vs_time(ax: Axes, cmp: Comparison) -> None:
    """Predicted traffic of the level that varies most across the schedules against measured
    median time (DRAM, said so, when no level's traffic varies)."""
    _require_reuse(cmp)
    level, spread = varying_level(_memory_traffic(cmp))
    shown = level or "DRAM"
    colours = palette(len(cmp.rows))
    for i, r in enumerate(cmp.rows):
        ax.scatter(r.level_bytes[shown] / 1e6, r.median_ms, color=colours[i], label=r.name, s=40, zorder=3)
    traffic = [r.level_bytes[shown] for r in cmp.rows]
    if min(traffic) > 0 and max(traffic) >= 10 * min(traffic):
        ax.set_xscale("log")
    else:
        ax.xaxis.set_major_locator(MaxNLocator(4))
    ax.set_yscale("log")
    _plain_log(ax.yaxis)
    ax.set_xlabel(f"predicted {shown} traffic (MB)")
    ax.set_ylabel("measured median time (ms, log)")
    spreads = ", ".join(f"{lv} {100 * cv:.0f}%" for lv, cv in spread.items())
    why = ("the level whose traffic varies most across schedules" if level else
           f"no level's traffic varies by {100 * CONSTANT_BELOW:.0f}% or more across schedules")
    caption(ax, f"{shown} traffic vs time: {why}", CAPTIONS["traffic_vs_time"],
            f"coefficient of variation: {spreads}")
    legend_outside(ax)


def draw_traffic(ax: Axes, cmp: Comparison) -> None:
    """Predicted bytes delivered by each memory level, one bar per schedule, log scale."""
    _require_reuse(cmp)
    levels = [lv for lv in LEVEL_ORDER if lv in cmp.rows[0].level_bytes]
    width = 0.8 / len(cmp.rows)
    colours = palette(len(cmp.rows))
    for i, r in enumerate(cmp.rows):
        ax.bar(np.arange(len(levels)) + (i - (len(cmp.rows) - 1) / 2) * width,
               [max(r.level_bytes[lv], 1) / 1e6 for lv in levels], width, color=colours[i], label=r.name)
    ax.set_xticks(np.arange(len(levels)), levels)
    ax.set_yscale("log")
    ax.set_ylabel("predicted traffic (MB, log)")
    caption(ax, "predicted bytes delivered by each level (scalar-trace model)", CAPTIONS["traffic"])
    legend_outside(ax)


def draw_energy(ax: Axes, cmp: Comparison) -> None:
    """Predicted energy per memory level and compute, stacked (levels in a sequential colour map,
    so that the schedules' colours keep meaning schedules)."""
    _require_reuse(cmp)
    names = [r.name for r in cmp.rows]
    keys = [k for k in LEVEL_ORDER + ("compute",) if k in cmp.rows[0].level_energy_uj]
    bottom = np.zeros(len(names))
    for key, shade in zip(keys, np.linspace(0.0, 0.9, len(keys))):
        values = np.array([r.level_energy_uj.get(key, 0) for r in cmp.rows], dtype=float)
        ax.bar(names, values, bottom=bottom, color=LEVEL_COLOURS(shade), edgecolor="white", linewidth=0.5,
               label=key)
        bottom += values
    ax.set_ylabel("predicted energy (uJ)")
    caption(ax, "predicted energy per level (scalar-trace model)", CAPTIONS["energy"])
    ax.tick_params(axis="x", rotation=30 if len(names) <= 4 else 90)
    for label in ax.get_xticklabels():
        label.set_horizontalalignment("right" if len(names) <= 4 else "center")
    legend_outside(ax)


# --- reuse -------------------------------------------------------------------------------------------

def draw_miss_ratio(ax: Axes, cmp: Comparison) -> None:
    """Miss ratio of a fully associative LRU cache vs its capacity, per schedule (both axes log)."""
    _require_reuse(cmp)
    draw_miss_ratios(ax, cmp.profiles)


def draw_miss_ratios(ax: Axes, profiles: Mapping[str, ReuseProfile]) -> None:
    """Miss ratio of a fully associative LRU cache vs its capacity of each of ``profiles`` (name ->
    profile), on log axes down to the smallest ratio drawn (a ratio of 0 is left out)."""
    colours, smallest = palette(len(profiles)), 1.0
    for i, (name, profile) in enumerate(profiles.items()):
        capacity, ratio = profile.miss_ratio_curve()
        ax.step(np.maximum(capacity, 1), np.where(ratio > 0, ratio, np.nan), where="post", color=colours[i],
                label=name)
        smallest = min(smallest, ratio[ratio > 0].min(initial=1.0))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(smallest / 2, 1.5)
    _plain_log(ax.yaxis)
    ax.set_xlabel("cache capacity (64-byte lines)")
    ax.set_ylabel("miss ratio (log)")
    caption(ax, "miss-ratio curves (fully associative LRU)", CAPTIONS["miss_ratio"])
    _mark_levels(ax)
    legend_outside(ax)


def draw_histogram(ax: Axes, cmp: Comparison, tensor: str) -> None:
    """Reuse-distance histogram of ``tensor`` (log2 bins, cold at the right) per schedule."""
    _require_reuse(cmp)
    draw_histograms(ax, cmp.profiles, tensor)


def draw_histograms(ax: Axes, profiles: Mapping[str, ReuseProfile], tensor: str) -> None:
    """Reuse-distance histogram of ``tensor`` (log2 bins, cold at the right) of each of ``profiles``."""
    largest = max(max((d for d in p.histogram(tensor) if d != math.inf), default=1)
                  for p in profiles.values())
    edges = 2.0 ** np.arange(0, math.ceil(math.log2(largest + 1)) + 2)
    cold_bin = edges[-1]
    colours = palette(len(profiles))
    for i, (name, profile) in enumerate(profiles.items()):
        hist = profile.histogram(tensor)
        values = np.array([cold_bin if d == math.inf else d + 1 for d in hist], dtype=float)
        ax.hist(values, bins=np.append(edges, cold_bin * 2), weights=list(hist.values()), histtype="step",
                color=colours[i], label=name, linewidth=1.5)
    ax.text(cold_bin * 1.4, 0.5, "cold", transform=ax.get_xaxis_transform(), ha="center", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("reuse distance + 1 (64-byte lines; rightmost bin: cold)")
    ax.set_ylabel("accesses")
    caption(ax, f"reuse distances of {tensor}", CAPTIONS["histogram"])
    _mark_levels(ax)
    legend_outside(ax)


# --- figures -----------------------------------------------------------------------------------------

def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path


def _rows_for(draw: Callable[[Axes, Comparison], None], cmp: Comparison) -> Comparison:
    """The runtime plot shows every row; the traffic plots only the rows with a reuse analysis."""
    return cmp if draw is draw_runtime else cmp.analysed()


def _single(draw: Callable[[Axes, Comparison], None]) -> Callable[[Comparison, str | Path], Path]:
    def plot(cmp: Comparison, path: str | Path) -> Path:
        fig = Figure(figsize=(7.5, 5), layout="constrained")
        draw(fig.subplots(), _rows_for(draw, cmp))
        return _save(fig, path)
    plot.__doc__ = f"Write the figure of ``{draw.__name__}`` to ``path``: {draw.__doc__}"
    return plot


plot_runtime = _single(draw_runtime)
plot_miss_ratio = _single(draw_miss_ratio)
plot_traffic = _single(draw_traffic)
plot_energy = _single(draw_energy)
plot_traffic_vs_time = _single(draw_traffic_vs_time)
plot_dram_vs_time = plot_traffic_vs_time   # the former name (DRAM traffic is the same for all when data fits)
plot_roofline = _single(draw_roofline)


def plot_bars(path: str | Path, labels: Sequence[str], series: Mapping[str, Sequence[float | None]],
              xlabel: str, title: str) -> Path:
    """Write grouped horizontal bars to ``path``: one group per label (top to bottom), one bar per
    series (a missing value, None, draws no bar); e.g. the time of each node of a model per runtime."""
    fig = Figure(figsize=(8, 1.2 + 0.45 * len(labels) * max(1, len(series)) ** 0.5), layout="constrained")
    ax = fig.subplots()
    height = 0.8 / max(1, len(series))
    colours = palette(len(series))
    for index, (name, values) in enumerate(series.items()):
        rows = [(i, v) for i, v in enumerate(values) if v is not None]
        ax.barh([i + index * height for i, _ in rows], [v for _, v in rows], height=height, label=name,
                color=colours[index])
    ax.set_yticks([i + height * (len(series) - 1) / 2 for i in range(len(labels))], labels)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    legend_outside(ax)
    return _save(fig, path)


def plot_histograms(cmp: Comparison, path: str | Path) -> Path:
    """One reuse-distance histogram per tensor, side by side."""
    _require_reuse(cmp)
    return _save(reuse_figure(cmp.profiles, cmp.op.tensors, miss_ratios=False), path)


def plot_reuse(profile: ReuseProfile, path: str | Path, name: str = "schedule") -> Path:
    """The reuse picture of one schedule (``loopopt reuse --plot``): its reuse-distance histogram per
    tensor and its miss-ratio curve, each with its caption."""
    return _save(reuse_figure({name: profile}, profile.tensors, miss_ratios=True), path)


def reuse_figure(profiles: Mapping[str, ReuseProfile], tensors: Sequence[str], miss_ratios: bool) -> Figure:
    """The histogram of each tensor of ``profiles`` (and with ``miss_ratios`` their miss-ratio curves),
    two panels a row."""
    panels = len(tensors) + miss_ratios
    columns = min(2, panels)
    rows = -(-panels // columns)
    fig = Figure(figsize=(7.5 * columns, 4.5 * rows), layout="constrained")
    axes = list(fig.subplots(rows, columns, squeeze=False).flat)
    for ax, tensor in zip(axes, tensors):
        draw_histograms(ax, profiles, tensor)
    if miss_ratios:
        draw_miss_ratios(axes[len(tensors)], profiles)
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig


def dashboard(cmp: Comparison, path: str | Path) -> Path:
    """Runtime, hierarchical roofline, traffic vs time, traffic per level, miss ratios and energy
    in one image (runtime only when the comparison has no reuse analysis)."""
    return _save(dashboard_figure(cmp), path)


def dashboard_figure(cmp: Comparison) -> Figure:
    """The figure ``dashboard`` saves."""
    draws = [draw_runtime]
    if cmp.profiles:
        draws += [draw_roofline, draw_traffic_vs_time, draw_traffic, draw_miss_ratio, draw_energy]
    columns = min(3, len(draws))
    rows = -(-len(draws) // columns)
    fig = Figure(figsize=(6.5 * columns, 5.5 * rows), layout="constrained")
    for ax, draw in zip(fig.subplots(rows, columns, squeeze=False).flat, draws):
        draw(ax, _rows_for(draw, cmp))
    fig.suptitle(repr(cmp.op), fontsize=10)
    return fig


FIGURES: tuple[tuple[str, Callable[[Comparison, str | Path], Path], bool], ...] = (
    ("runtime", plot_runtime, False), ("hierarchical roofline", plot_roofline, True),
    ("traffic vs time at the level that varies", plot_traffic_vs_time, True),
    ("traffic per level", plot_traffic, True), ("miss-ratio curves", plot_miss_ratio, True),
    ("reuse-distance histograms", plot_histograms, True), ("energy per level", plot_energy, True))
"""(caption, plot function, needs the reuse analysis) of every figure, in the report's order."""
