"""Side-by-side comparison of schedules of one op: compile, verify, measure, analyse."""
from __future__ import annotations

import csv
import html
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .codegen.instr import SCALAR
from .machine import peak_gflops, provenance
from .measure import END_TO_END, KERNEL_ONLY, ROUNDS, Timing, checked, measure_all
from .model import core_costs, kernel_model
from .ops import Op
from .progress import Progress
from .schedule import Schedule
from .targets import Target, host_target
from .targets import target as named_target
from .units import in_unit, json_units, rate_unit, time_unit
from .winograd import AnyPlan

MEASURE_BUDGET = 0.5          # seconds of timed runs per schedule (measure adapts the repeats)


@dataclass
class Row:
    """One schedule's results: timing, verification, noise and (optionally) predicted traffic."""

    name: str
    isa: str
    median_ms: float | None          # None (and the other timing fields): not timed, its target refused
    min_ms: float | None
    iqr_ms: float | None
    repeats: int
    gflops: float | None
    percent_of_peak: float | None
    verified: bool
    max_error: float
    noisy: bool = False
    noise: str = ""                 # why the timing is noisy ("" when stable)
    predicted_ms: float | None = None                          # the kernel model, one thread
    dram_bytes: int | None = None
    energy_uj: float | None = None
    misses: dict[str, int] = field(default_factory=dict)          # per cache level
    level_bytes: dict[str, int] = field(default_factory=dict)     # bytes delivered per level
    level_energy_uj: dict[str, float] = field(default_factory=dict)
    relative_error: float | None = None    # max_error / the reference output's largest magnitude
    algorithm: str = "direct"              # or "winograd F(4x4,3x3)" (a WinogradPlan row)


def _flag(value: object, fmt: str) -> str:
    """A table cell: "-" for None, yes/NO for a bool, else ``fmt``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return fmt.format(value)


COLUMNS = (("schedule", "name", "{}"), ("isa", "isa", "{}"), ("median ms", "median_ms", "{:.3f}"),
           ("IQR ms", "iqr_ms", "{:.3f}"), ("rate", "gflops", "{:.2f}"),
           ("% peak", "percent_of_peak", "{:.1f}"), ("ok", "verified", "{}"),
           ("err/max", "relative_error", "{:.1e}"), ("noise", "noisy", "{}"),
           ("model ms", "predicted_ms", "{:.3f}"), ("DRAM MB", "dram_bytes", "{:.2f}"),
           ("energy uJ", "energy_uj", "{:.0f}"))
HOST_PEAK = "one core, machine profile"     # what a host comparison's peak is
CELL = {"noisy": lambda value: "NOISY" if value else "-",
        "dram_bytes": lambda value: _flag(value and value / 1e6, "{:.2f}")}
TIMES = ("median_ms", "iqr_ms", "predicted_ms")    # shown in the unit of the fastest median (units.time_unit)
# a Row's field -> its JSON key in the units of units.JSON_UNITS, and the factor to them
JSON_FIELDS = {"median_ms": ("median_s", 1e-3), "min_ms": ("min_s", 1e-3), "iqr_ms": ("iqr_s", 1e-3),
               "predicted_ms": ("predicted_s", 1e-3), "gflops": ("rate", 1.0),
               "energy_uj": ("energy_j", 1e-6), "level_energy_uj": ("level_energy_j", 1e-6)}


def json_row(row: Row) -> dict[str, Any]:
    """``row`` in the JSON outputs' units (``units.JSON_UNITS``): times in s, energy in J, the rate under
    ``rate`` (GFLOP/s or GOP/s, as the document's ``units`` say)."""
    data = {}
    for key, value in asdict(row).items():
        name, factor = JSON_FIELDS.get(key, (key, None))
        data[name] = value if factor is None else _scaled(value, factor)
    return data


def _scaled(value, factor: float):
    """``value`` (a number, None, or a dict of them) times ``factor``."""
    if isinstance(value, dict):
        return {key: _scaled(v, factor) for key, v in value.items()}
    return None if value is None else value * factor


class Comparison:
    """Many schedules of one op with their Timing and reuse analysis, as a table and plots.

    ``end_to_end``, ``rounds`` and ``other_cpu_share`` say how the rows were timed (see
    ``measure_all``); ``provenance`` where and when (``loopopt.machine.provenance``); ``origins``
    where some rows' schedules come from (row name -> e.g. a stored schedule's file and the CPU it
    was searched on); ``timing_refusal``: why the rows were verified but not timed (their target's
    ``timing_refusal``, e.g. kernels run under an emulator), "" when they were timed."""

    def __init__(self, op: Op, rows: list[Row], profiles: dict[str, Any], peak: float, note: str = "", *,
                 end_to_end: bool = False, rounds: int = 1, other_cpu_share: float | None = None,
                 provenance: dict[str, Any] | None = None, origins: dict[str, str] | None = None,
                 timing_refusal: str = "", peak_source: str = HOST_PEAK):
        self.op, self.rows, self.profiles, self.peak, self.note = op, rows, profiles, peak, note
        self.end_to_end, self.rounds, self.other_cpu_share = end_to_end, rounds, other_cpu_share
        self.provenance = provenance if provenance is not None else _provenance(rows)
        self.origins = dict(origins or {})
        self.timing_refusal, self.peak_source = timing_refusal, peak_source

    @property
    def unit(self) -> str:
        """GFLOP/s, or GOP/s for a quantized op (integer operations, 2 per multiply-accumulate)."""
        return rate_unit(self.op)

    @property
    def noisy(self) -> bool:
        """Whether any row's timing was unstable."""
        return any(r.noisy for r in self.rows)

    def analysed(self) -> "Comparison":
        """This comparison restricted to the rows with a reuse analysis (what the traffic plots draw; a
        WinogradPlan row has none)."""
        rows = [r for r in self.rows if r.name in self.profiles]
        if len(rows) == len(self.rows):
            return self
        return Comparison(self.op, rows, self.profiles, self.peak, self.note, end_to_end=self.end_to_end,
                          rounds=self.rounds, other_cpu_share=self.other_cpu_share,
                          provenance=self.provenance,
                          origins={r.name: self.origins[r.name] for r in rows if r.name in self.origins},
                          timing_refusal=self.timing_refusal, peak_source=self.peak_source)

    def ranking(self) -> list[str]:
        """Names of the verified rows, fastest first by their (interleaved) median, or where they were not
        timed by the kernel model's prediction (rows without one last)."""
        key = ((lambda r: (r.predicted_ms is None, r.predicted_ms or 0.0)) if self.timing_refusal
               else (lambda r: r.median_ms))
        return [r.name for r in sorted((r for r in self.rows if r.verified), key=key)]

    def _time_unit(self) -> tuple[str, float]:
        """The unit of the table's times: the one in which the fastest median (rows not timed: the fastest
        prediction) has three digits."""
        times = ([r.median_ms for r in self.rows if r.median_ms is not None]
                 or [r.predicted_ms for r in self.rows if r.predicted_ms is not None])
        return time_unit(min(times, default=1.0) * 1e-3)

    def _headings(self) -> list[str]:
        unit = self._time_unit()[0]
        return [head.replace(" ms", f" {unit}") if attr in TIMES else self.unit if attr == "gflops" else head
                for head, attr, _ in COLUMNS]

    def _cells(self, row: Row) -> list[str]:
        scale = self._time_unit()[1]
        return [CELL[attr](getattr(row, attr)) if attr in CELL else
                _flag(getattr(row, attr), fmt) if attr not in TIMES or getattr(row, attr) is None else
                in_unit(getattr(row, attr) * 1e-3, scale) for _, attr, fmt in COLUMNS]

    def _heading(self) -> list[str]:
        interleaved = f"; runs interleaved over {self.rounds} rounds" if len(self.rows) > 1 else ""
        work = f"{self.op.flops / 1e6:.1f} M{self.unit[1:-2]}"
        if self.timing_refusal:
            return [f"{self.op!r}: {work}, peak {self.peak:.1f} {self.unit} (one core, the target's modelled "
                    f"profile)", "times: not measured (see below), each row verified against the reference"]
        return [f"{self.op!r}: {work}, peak {self.peak:.1f} {self.unit} ({self.peak_source})",
                f"times: {END_TO_END if self.end_to_end else KERNEL_ONLY}{interleaved}"]

    def _footing(self) -> list[str]:
        lines = []
        ranking = " < ".join(self.ranking())
        if self.noisy:
            # the other processes' share is one figure for all rows; a spread is each row's own
            reasons = dict.fromkeys(reason if reason.startswith("other processes") else f"{r.name}: {reason}"
                                    for r in self.rows if r.noisy for reason in r.noise.split("; "))
            lines.append(f"WARNING: noisy timings ({'; '.join(reasons)}): the ranking by median "
                         f"({ranking}) may not hold; re-run on a quiet machine")
        elif self.timing_refusal:
            lines.append(f"not timed: {self.timing_refusal}; 'model {self._time_unit()[0]}' is the kernel "
                         f"model's prediction on the target's modelled core; ranking by it: {ranking}")
        elif len(self.rows) > 1:
            lines.append(f"ranking by interleaved median: {ranking}")
        p = self.provenance
        done = "verified" if self.timing_refusal else "measured"
        lines.append(f"{done} on {p['cpu']} (machine {p['fingerprint']}), {p.get('threads', 1)} thread(s), "
                     f"loopopt {p['loopopt']}, {p['compiler']}, {p['utc']}"
                     + (f"; kernels on {p['device']}" if "device" in p else ""))
        lines += [f"{name}: {origin}" for name, origin in self.origins.items()]
        winograd = [r.name for r in self.rows if r.algorithm.startswith("winograd")]
        if winograd:
            lines.append(f"{', '.join(winograd)}: {self.unit} and % peak are direct-equivalent (the direct "
                         f"algorithm's operations over the Winograd time; it does fewer multiplications, so "
                         f"it can pass the peak)")
        return lines + ([self.note] if self.note else [])

    def __str__(self) -> str:
        table = [self._headings()] + [self._cells(r) for r in self.rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
        lines = ["  ".join(cell.ljust(w) if i < 2 else cell.rjust(w)
                           for i, (cell, w) in enumerate(zip(row, widths, strict=True))) for row in table]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(self._heading() + lines + self._footing())

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self._headings())
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in self._cells(r)) + "</tr>"
                       for r in self.rows)
        paragraphs = lambda lines: "".join(f"<p>{html.escape(line)}</p>" for line in lines)
        table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        return f"{paragraphs(self._heading())}{table}{paragraphs(self._footing())}"

    def to_dict(self) -> dict[str, Any]:
        """The comparison as JSON-ready data in the units of ``units.JSON_UNITS`` (``units``; rows as
        ``json_row``), with how (``timing``) and where (``provenance``) it was measured."""
        timing = {"scope": END_TO_END if self.end_to_end else KERNEL_ONLY, "end_to_end": self.end_to_end,
                  "rounds": self.rounds, "other_cpu_share": self.other_cpu_share, "noisy": self.noisy}
        return {"op": repr(self.op), "units": json_units(self.op), "flops": self.op.flops, "peak": self.peak,
                "note": self.note, "timing": timing, "ranking": self.ranking(), "provenance": self.provenance,
                "origins": self.origins, "rows": [json_row(r) for r in self.rows]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_csv(self, path: str | Path) -> Path:
        """One line per row as ``json_row`` (nested per-level figures left out), each with the provenance
        columns."""
        path = Path(path)
        where = {f"provenance_{k}": v for k, v in self.provenance.items() if k != "isa"}
        flat = [{**{k: v for k, v in json_row(r).items() if not isinstance(v, dict)}, **where}
                for r in self.rows]
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(flat[0]))
            writer.writeheader()
            writer.writerows(flat)
        return path

    def plot(self, path: str | Path) -> Path:
        """A dashboard of every comparison plot in one image."""
        from .plot import dashboard
        return dashboard(self, path)


def _analysis():
    """The reuse-analysis package, or None when it is not installed."""
    try:
        from . import analysis
    except ImportError:
        return None
    return analysis


def compare(op: Op, schedules: Sequence[Schedule | AnyPlan], names: Sequence[str] | None = None,
            isa: str | Sequence[str] = "auto",
            reuse: bool = True, progress: bool = True, budget: float = MEASURE_BUDGET,
            threads: int = 1, rounds: int = ROUNDS, end_to_end: bool = False,
            origins: dict[str, str] | None = None, target: str | Target | None = None) -> Comparison:
    """Compile each schedule of ``op``, time them together with their runs interleaved over
    ``rounds`` rounds (``measure_all``: ``budget`` seconds of runs each, the same noise for all),
    verify them and (with ``reuse``) analyse their reuse. ``isa``: one for every row, or one per row
    (e.g. the ISA each tuning-log winner was measured on).

    Schedules with a parallel loop run on ``threads`` threads (default 1, so every row
    is one core's work and % of peak compares like with like). ``end_to_end`` times whole
    calls, packing included; by default only the kernel runs. A ``WinogradPlan``
    (``dataflows.winograd``) is a row like a schedule (verified within its own error bound), without
    reuse analysis or kernel model (both take one schedule); every row reports its error relative to
    the output's largest magnitude. ``origins``: row name -> where its schedule comes from, shown under
    the table (``loopopt compare`` says there which CPU a stored schedule was searched on).

    ``target``: build the schedules for that target (default: the one each ``isa`` belongs to); where
    it cannot time its kernels here (``Target.timing_refusal``, e.g. NEON under an emulator) every row
    is verified, not timed, and ranked by the kernel model's prediction."""
    names = list(names) if names is not None else [f"schedule{i + 1}" for i in range(len(schedules))]
    if len(names) != len(schedules):
        raise ValueError(f"got {len(schedules)} schedules but {len(names)} names")
    for name, schedule in zip(names, schedules, strict=True):
        if not isinstance(schedule, Schedule | AnyPlan) or repr(schedule.op) != repr(op):
            raise ValueError(f"schedule {name!r} is not a Schedule of {op!r}")
    isas = [isa] * len(schedules) if isinstance(isa, str) else list(isa)
    if len(isas) != len(schedules):
        raise ValueError(f"got {len(schedules)} schedules but {len(isas)} ISAs")
    strangers = [name for name in origins or {} if name not in names]
    if strangers:
        raise ValueError(f"origins names {strangers} but the rows are {names}")
    single = [isinstance(s, Schedule) for s in schedules]     # WinogradPlans: no reuse, no model
    chosen = None if target is None else named_target(target)
    if chosen is not None and chosen is not host_target() and not all(single):
        raise ValueError(f"a Winograd plan runs on the host only; compare it without target={chosen.name!r}")
    refusal = (chosen.timing_refusal() if chosen is not None else None) or ""
    if chosen is not None:
        chosen.require_device()
    device = chosen is not None and chosen.has_device     # the reuse analysis models the host's caches
    analysis = _analysis() if reuse and not device else None
    note = ("" if analysis or not reuse else f"no reuse analysis on target {chosen.name!r} (it models CPU "
            f"caches)" if device else "reuse analysis unavailable (loopopt.analysis not installed)")
    machine = analysis.Machine.detect() if analysis else None
    steps = len(schedules) * (2 if analysis else 1) + 1
    bar, kernels, profiles = Progress(steps, progress), [], {}
    for index, (name, schedule, row_isa, one) in enumerate(zip(names, schedules, isas, single, strict=True)):
        bar.update(index, f"{name}: compile")
        kernel = schedule.compile(row_isa, target=chosen) if chosen and one else schedule.compile(row_isa)
        kernel.set_threads(threads if isinstance(schedule, Schedule) and schedule.parallel_loop is not None
                           else 1)
        kernels.append(kernel)
    if refusal:
        bar.update(len(kernels), f"verify {len(kernels)} schedules (not timed)")
        timings, rows = [], [_verified_row(name, kernel) for name, kernel in zip(names, kernels)]
    else:
        bar.update(len(kernels), f"measure {len(kernels)} schedules, runs interleaved")
        timings = measure_all(kernels, budget=budget, rounds=rounds, end_to_end=end_to_end,
                              progress=None if progress else False)
        rows = [_row(name, kernel.isa, timing) for name, kernel, timing in zip(names, kernels, timings)]
    if analysis:
        for index, (name, schedule, row) in enumerate(zip(names, schedules, rows)):
            if not single[index]:
                continue
            bar.update(len(kernels) + 1 + index, f"{name}: reuse analysis")
            profiles[name] = analysis.reuse(schedule, granularity="line")
            _add_hierarchy(row, profiles[name].hierarchy(machine, set_associative=False))
    for name, schedule, kernel, row, one in zip(names, schedules, kernels, rows, single, strict=True):
        if not one or core_costs(kernel.isa) is None:    # AMX tiles: the kernel model has no costs for them
            continue
        try:
            model = kernel_model(schedule, kernel.isa, profiles.get(name), traffic=bool(analysis),
                                 machine=machine)
        except ValueError:          # a kernel the model does not price (Target.unmodelled): no prediction
            continue
        row.predicted_ms = model.predicted_seconds * 1e3
    bar.update(steps, "done")
    resolved = rows[0].isa if rows else SCALAR.name
    # quantized ops: GOP/s against the int8 (dot instruction) peak, as measure reports them
    dtype = op.dtype if op.quant is None else "int8"
    peak = chosen.peak(resolved, dtype) if chosen is not None else peak_gflops(resolved, dtype)
    where = provenance(isa=resolved, threads=threads)
    if device:
        where["device"] = chosen.device()
    return Comparison(op, rows, profiles, peak, note,
                      end_to_end=end_to_end, rounds=rounds,
                      other_cpu_share=timings[0].other_cpu_share if timings else None,
                      provenance=where, origins=origins, timing_refusal=refusal,
                      peak_source=chosen.peak_source(resolved) if device else HOST_PEAK)


def _provenance(rows: list[Row]) -> dict[str, Any]:
    """Provenance of a Comparison built without one: this machine, now, the first row's ISA."""
    return provenance(isa=rows[0].isa if rows else None)


def _row(name: str, isa: str, timing: Timing) -> Row:
    return Row(name, isa, timing.median * 1e3, timing.min * 1e3, timing.iqr * 1e3, timing.repeats,
               timing.gflops, timing.percent_of_peak, timing.verified, timing.max_error, timing.noisy,
               timing.noise, relative_error=timing.relative_error, algorithm=timing.algorithm)


def _verified_row(name: str, kernel) -> Row:
    """The row of a kernel verified against the reference but not timed."""
    ok, error, largest = checked(kernel)
    return Row(name, kernel.isa, None, None, None, 0, None, None, ok, error,
               relative_error=error / largest if largest > 0 else error)


def _add_hierarchy(row: Row, hierarchy) -> None:
    row.dram_bytes = int(hierarchy.dram_bytes)
    row.energy_uj = hierarchy.energy_pj / 1e6
    row.misses = {lv.name: int(lv.misses) for lv in hierarchy.levels}
    row.level_bytes = {lv.name: int(lv.bytes) for lv in hierarchy.levels}
    row.level_energy_uj = {lv.name: lv.energy_pj / 1e6 for lv in hierarchy.levels}
    row.level_energy_uj["compute"] = hierarchy.compute_energy_pj / 1e6
