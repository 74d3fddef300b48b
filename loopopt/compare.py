"""Side-by-side comparison of schedules of one op: compile, verify, measure, analyse."""
from __future__ import annotations

import csv
import html
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .measure import Timing, measure, peak_gflops
from .model import kernel_model
from .ops import Op
from .schedule import Schedule

MEASURE_BUDGET = 0.5          # seconds of timed runs per schedule (measure adapts the repeats)


@dataclass
class Row:
    """One schedule's results: timing, verification and (optionally) predicted traffic."""

    name: str
    isa: str
    median_ms: float
    min_ms: float
    iqr_ms: float
    repeats: int
    gflops: float
    percent_of_peak: float
    verified: bool
    max_error: float
    predicted_ms: float | None = None                          # the kernel model, one thread
    dram_bytes: int | None = None
    energy_uj: float | None = None
    misses: dict[str, int] = field(default_factory=dict)          # per cache level
    level_bytes: dict[str, int] = field(default_factory=dict)     # bytes delivered per level
    level_energy_uj: dict[str, float] = field(default_factory=dict)


COLUMNS = (("schedule", "name", "{}"), ("isa", "isa", "{}"), ("median ms", "median_ms", "{:.3f}"),
           ("IQR ms", "iqr_ms", "{:.3f}"), ("GFLOP/s", "gflops", "{:.2f}"),
           ("% peak", "percent_of_peak", "{:.1f}"), ("ok", "verified", "{}"),
           ("model ms", "predicted_ms", "{:.3f}"), ("DRAM MB", "dram_bytes", "{:.2f}"),
           ("energy uJ", "energy_uj", "{:.0f}"))


class Comparison:
    """Many schedules of one op with their Timing and reuse analysis, as a table and plots."""

    def __init__(self, op: Op, rows: list[Row], profiles: dict[str, Any], peak: float, note: str = ""):
        self.op, self.rows, self.profiles, self.peak, self.note = op, rows, profiles, peak, note

    @property
    def unit(self) -> str:
        """GFLOP/s, or GOP/s for a quantized op (integer operations, 2 per multiply-accumulate)."""
        return "GFLOP/s" if self.op.quant is None else "GOP/s"

    def _cells(self, row: Row) -> list[str]:
        cells = []
        for _, attr, fmt in COLUMNS:
            value = getattr(row, attr)
            if attr == "dram_bytes" and value is not None:
                value = value / 1e6
            cells.append("-" if value is None else ("yes" if value is True else "NO" if value is False
                                                    else fmt.format(value)))
        return cells

    def __str__(self) -> str:
        table = [[head for head, _, _ in COLUMNS]] + [self._cells(r) for r in self.rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
        lines = ["  ".join(cell.ljust(w) if i < 2 else cell.rjust(w)
                           for i, (cell, w) in enumerate(zip(row, widths, strict=True))) for row in table]
        lines.insert(1, "  ".join("-" * w for w in widths))
        head = f"{self.op!r}: {self.op.flops / 1e6:.1f} M{self.unit[1:-2]}, peak {self.peak:.1f} {self.unit}"
        return "\n".join([head] + lines + ([self.note] if self.note else []))

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h, _, _ in COLUMNS)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in self._cells(r)) + "</tr>"
                       for r in self.rows)
        note = f"<p>{html.escape(self.note)}</p>" if self.note else ""
        return (f"<p>{html.escape(repr(self.op))}, peak {self.peak:.1f} {self.unit}</p>"
                f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}")

    def to_dict(self) -> dict[str, Any]:
        return {"op": repr(self.op), "flops": self.op.flops, "peak_gflops": self.peak, "note": self.note,
                "rows": [asdict(r) for r in self.rows]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_csv(self, path: str | Path) -> Path:
        path = Path(path)
        flat = [{k: v for k, v in asdict(r).items() if not isinstance(v, dict)} for r in self.rows]
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(flat[0]))
            writer.writeheader()
            writer.writerows(flat)
        return path

    def plot(self, path: str | Path) -> Path:
        """A dashboard of every comparison plot in one image."""
        from .plot import dashboard
        return dashboard(self, path)


class Progress:
    """A dependency-free progress bar on stderr (one line per update when not a terminal)."""

    def __init__(self, total: int, enabled: bool = True, width: int = 24):
        self.total, self.enabled, self.width, self.start = total, enabled, width, time.perf_counter()
        self.tty = sys.stderr.isatty()

    def update(self, done: int, label: str) -> None:
        if not self.enabled:
            return
        filled = self.width * done // max(self.total, 1)
        line = (f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total} "
                f"{time.perf_counter() - self.start:5.1f}s {label}")
        sys.stderr.write(f"\r{line:<79}" if self.tty else line + "\n")
        if self.tty and done == self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _analysis():
    """The reuse-analysis package, or None when it is not installed."""
    try:
        from . import analysis
    except ImportError:
        return None
    return analysis


def compare(op: Op, schedules: Sequence[Schedule], names: Sequence[str] | None = None, isa: str = "auto",
            reuse: bool = True, progress: bool = True, budget: float = MEASURE_BUDGET,
            threads: int = 1) -> Comparison:
    """Compile, verify, measure and (with ``reuse``) analyse each schedule of ``op``.

    Schedules with a parallel loop run on ``threads`` threads (default 1, so every row
    is one core's work and % of peak compares like with like)."""
    names = list(names) if names is not None else [f"schedule{i + 1}" for i in range(len(schedules))]
    if len(names) != len(schedules):
        raise ValueError(f"got {len(schedules)} schedules but {len(names)} names")
    for name, schedule in zip(names, schedules, strict=True):
        if not isinstance(schedule, Schedule) or schedule.op is not op and repr(schedule.op) != repr(op):
            raise ValueError(f"schedule {name!r} is not a Schedule of {op!r}")
    analysis = _analysis() if reuse else None
    note = "" if analysis or not reuse else "reuse analysis unavailable (loopopt.analysis not installed)"
    machine = analysis.Machine.detect() if analysis else None
    steps = len(schedules) * (2 if analysis else 1)
    bar, rows, profiles = Progress(steps, progress), [], {}
    for index, (name, schedule) in enumerate(zip(names, schedules, strict=True)):
        done = index * (2 if analysis else 1)
        bar.update(done, f"{name}: compile + measure")
        kernel = schedule.compile(isa)
        kernel.set_threads(threads if schedule.parallel_loop is not None else 1)
        row = _row(name, kernel.isa, measure(kernel, budget=budget))
        if analysis:
            bar.update(done + 1, f"{name}: reuse analysis")
            profiles[name] = analysis.reuse(schedule, granularity="line")
            _add_hierarchy(row, profiles[name].hierarchy(machine, set_associative=False))
        model = kernel_model(schedule, kernel.isa, profiles.get(name), traffic=bool(analysis),
                             machine=machine)
        row.predicted_ms = model.predicted_seconds * 1e3
        rows.append(row)
    bar.update(steps, "done")
    resolved = rows[0].isa if rows else "scalar"
    # quantized ops: GOP/s against the int8 (dot instruction) peak, as measure reports them
    peak = peak_gflops(resolved, "float32" if op.quant is None else "int8")
    return Comparison(op, rows, profiles, peak, note)


def _row(name: str, isa: str, timing: Timing) -> Row:
    return Row(name, isa, timing.median * 1e3, timing.min * 1e3, timing.iqr * 1e3, timing.repeats,
               timing.gflops, timing.percent_of_peak, timing.verified, timing.max_error)


def _add_hierarchy(row: Row, hierarchy) -> None:
    row.dram_bytes = int(hierarchy.dram_bytes)
    row.energy_uj = hierarchy.energy_pj / 1e6
    row.misses = {lv.name: int(lv.misses) for lv in hierarchy.levels}
    row.level_bytes = {lv.name: int(lv.bytes) for lv in hierarchy.levels}
    row.level_energy_uj = {lv.name: lv.energy_pj / 1e6 for lv in hierarchy.levels}
    row.level_energy_uj["compute"] = hierarchy.compute_energy_pj / 1e6
