"""Plots of a Comparison (matplotlib, Agg backend, Okabe-Ito colour-blind-safe palette).

Every ``plot_*`` function writes one figure to ``path`` and returns the path; each draws
through a ``draw_*(ax, comparison)`` function that ``dashboard`` reuses.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from .machine import machine_profile

if TYPE_CHECKING:
    from .compare import Comparison

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
LEVEL_ORDER = ("registers", "L1", "L2", "L3", "DRAM")


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _levels(cmp: Comparison) -> list[tuple[str, int]]:
    """(name, capacity in lines) of this machine's caches."""
    from .analysis import Machine
    return [(c.name, c.size // c.line_size) for c in Machine.detect().caches]


def _mark_levels(ax, cmp: Comparison) -> None:
    for name, lines in _levels(cmp):
        ax.axvline(lines, color="grey", linestyle=":", linewidth=1)
        ax.text(lines, 1.0, f" {name}", transform=ax.get_xaxis_transform(), va="top", fontsize=8, color="grey")


def _require_reuse(cmp: Comparison) -> None:
    if not cmp.profiles:
        raise ValueError("this plot needs the reuse analysis: run compare(..., reuse=True)")


def draw_runtime(ax, cmp: Comparison) -> None:
    """GFLOP/s bars with the interquartile spread and this machine's peak."""
    names = [r.name for r in cmp.rows]
    flops = cmp.op.flops / 1e9
    low = [flops / ((r.median_ms + r.iqr_ms / 2) / 1e3) for r in cmp.rows]
    high = [flops / (max(r.median_ms - r.iqr_ms / 2, 1e-9) / 1e3) for r in cmp.rows]
    values = [r.gflops for r in cmp.rows]
    errors = np.array([[v - lo for v, lo in zip(values, low)], [hi - v for v, hi in zip(values, high)]])
    ax.bar(names, values, yerr=errors, capsize=3, color=[colour(i) for i in range(len(names))])
    ax.axhline(cmp.peak, color="black", linestyle="--", linewidth=1, label=f"peak {cmp.peak:.0f} GFLOP/s")
    for i, r in enumerate(cmp.rows):
        ax.text(i, r.gflops, f"{r.median_ms:.3g} ms", ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("throughput (GFLOP/s)")
    ax.set_title("measured speed (bars: IQR)")
    ax.tick_params(axis="x", rotation=30)
    ax.legend(fontsize=8)


def draw_miss_ratio(ax, cmp: Comparison) -> None:
    """Miss ratio of a fully associative LRU cache vs its capacity, per schedule."""
    _require_reuse(cmp)
    for i, (name, profile) in enumerate(cmp.profiles.items()):
        capacity, ratio = profile.miss_ratio_curve()
        ax.step(np.maximum(capacity, 1), ratio, where="post", color=colour(i), label=name)
    ax.set_xscale("log")
    ax.set_xlabel("cache capacity (64-byte lines)")
    ax.set_ylabel("miss ratio")
    ax.set_title("miss-ratio curves")
    _mark_levels(ax, cmp)
    ax.legend(fontsize=7)


def _stacked(ax, cmp: Comparison, attr: str, scale: float, ylabel: str, title: str) -> None:
    _require_reuse(cmp)
    names = [r.name for r in cmp.rows]
    keys = [k for k in LEVEL_ORDER + ("compute",) if k in getattr(cmp.rows[0], attr)]
    bottom = np.zeros(len(names))
    for i, key in enumerate(keys):
        values = np.array([getattr(r, attr).get(key, 0) for r in cmp.rows], dtype=float) * scale
        ax.bar(names, values, bottom=bottom, color=colour(i), label=key)
        bottom += values
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.tick_params(axis="x", rotation=30)
    ax.legend(fontsize=7)


def draw_traffic(ax, cmp: Comparison) -> None:
    """Predicted bytes delivered by each memory level, stacked."""
    _stacked(ax, cmp, "level_bytes", 1e-6, "predicted traffic (MB)", "traffic per level")


def draw_energy(ax, cmp: Comparison) -> None:
    """Predicted energy per memory level and compute, stacked."""
    _stacked(ax, cmp, "level_energy_uj", 1.0, "predicted energy (uJ)", "energy per level")


def draw_dram_vs_time(ax, cmp: Comparison) -> None:
    """Predicted DRAM traffic against measured median time, one point per schedule."""
    _require_reuse(cmp)
    for i, r in enumerate(cmp.rows):
        ax.scatter(r.dram_bytes / 1e6, r.median_ms, color=colour(i), label=r.name, s=40)
    ax.set_xlabel("predicted DRAM traffic (MB)")
    ax.set_ylabel("measured median time (ms)")
    ax.set_yscale("log")
    ax.set_title("DRAM traffic vs time")
    ax.legend(fontsize=7)


def draw_roofline(ax, cmp: Comparison) -> None:
    """Roofline (the machine profile's peak and DRAM read bandwidth), schedules at their predicted intensity."""
    _require_reuse(cmp)
    bandwidth = machine_profile().memory_bandwidth()
    intensity = [cmp.op.flops / max(r.dram_bytes, 1) for r in cmp.rows]
    x = np.logspace(-2, max(4.0, math.log10(max(intensity)) + 1), 200)
    ax.plot(x, np.minimum(cmp.peak, bandwidth * x), color="black", linewidth=1.5,
            label=f"roof: {cmp.peak:.0f} GFLOP/s, DRAM read {bandwidth:.0f} GB/s")
    for i, (r, oi) in enumerate(zip(cmp.rows, intensity)):
        ax.scatter(oi, r.gflops, color=colour(i), label=r.name, s=40, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("operational intensity (FLOP / DRAM byte)")
    ax.set_ylabel("throughput (GFLOP/s)")
    ax.set_title("roofline")
    ax.legend(fontsize=7)


def draw_histogram(ax, cmp: Comparison, tensor: str) -> None:
    """Reuse-distance histogram of ``tensor`` (log2 bins, cold at the right) per schedule."""
    _require_reuse(cmp)
    largest = max(max((d for d in p.histogram(tensor) if d != math.inf), default=1) for p in cmp.profiles.values())
    edges = 2.0 ** np.arange(0, math.ceil(math.log2(largest + 1)) + 2)
    cold_bin = edges[-1]
    for i, (name, profile) in enumerate(cmp.profiles.items()):
        hist = profile.histogram(tensor)
        values = np.array([cold_bin if d == math.inf else d + 1 for d in hist], dtype=float)
        ax.hist(values, bins=np.append(edges, cold_bin * 2), weights=list(hist.values()), histtype="step",
                color=colour(i), label=name, linewidth=1.5)
    ax.text(cold_bin * 1.4, 0.5, "cold", transform=ax.get_xaxis_transform(), ha="center", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("reuse distance + 1 (64-byte lines; rightmost bin: cold)")
    ax.set_ylabel("accesses")
    ax.set_title(f"reuse distances of {tensor}")
    _mark_levels(ax, cmp)
    ax.legend(fontsize=7)


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path


def _single(draw: Callable) -> Callable:
    def plot(cmp: Comparison, path: str | Path) -> Path:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        draw(ax, cmp)
        return _save(fig, path)
    plot.__doc__ = f"Write the figure of ``{draw.__name__}`` to ``path``: {draw.__doc__}"
    return plot


plot_runtime = _single(draw_runtime)
plot_miss_ratio = _single(draw_miss_ratio)
plot_traffic = _single(draw_traffic)
plot_energy = _single(draw_energy)
plot_dram_vs_time = _single(draw_dram_vs_time)
plot_roofline = _single(draw_roofline)


def plot_histograms(cmp: Comparison, path: str | Path) -> Path:
    """One reuse-distance histogram per tensor, side by side."""
    tensors = cmp.op.tensors
    fig, axes = plt.subplots(1, len(tensors), figsize=(5 * len(tensors), 4))
    for ax, tensor in zip(axes, tensors):
        draw_histogram(ax, cmp, tensor)
    return _save(fig, path)


def dashboard(cmp: Comparison, path: str | Path) -> Path:
    """Runtime, roofline, miss ratios, traffic, energy and DRAM-vs-time in one image
    (runtime only when the comparison has no reuse analysis)."""
    draws = [draw_runtime]
    if cmp.profiles:
        draws += [draw_roofline, draw_miss_ratio, draw_traffic, draw_energy, draw_dram_vs_time]
    columns = min(3, len(draws))
    rows = -(-len(draws) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6 * columns, 4.5 * rows), squeeze=False)
    for ax, draw in zip(axes.flat, draws):
        draw(ax, cmp)
    fig.suptitle(repr(cmp.op), fontsize=10)
    return _save(fig, path)
