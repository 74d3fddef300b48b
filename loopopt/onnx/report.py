"""Where a model's time goes: every compute node with its shape, MFLOP, loopopt time (default
schedule, and tuned when asked) through ``lo.compare`` (timing, % of peak, reuse and traffic),
onnxruntime's time for the same node when onnxruntime is installed (a one-node model; a fused
QDQ group as the group's nodes), for a quantized node how the two outputs compare in steps of
the output and with the exact integer reference (``exact``), totals, and a plot (``loopopt onnx
MODEL.onnx``)."""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..compare import MEASURE_BUDGET, Row, compare, json_row
from ..measure import repeat_count
from ..plot import plot_bars
from ..tune import TuneError, tune
from ..tune.log import signature
from ..units import json_units, rate_unit
from .backend import LoopoptRep, LoweredNode
from .exact import IntegerCheck, integer_check
from .graph import dtype_of, load_model, runtime_inputs, static_input_shapes
from .kernels import DEFAULT
from .peer import EXACT, config_entries, options_text, session_options

ORT_BUDGET = 0.3     # seconds of timed onnxruntime runs per node
RAN, TUNED = "ran", "tuned"   # comparison rows: the schedule the backend ran, the one tuned here
LOOPOPT_KEYS = ("median_s", "rate", "percent_of_peak", "verified", "dram_bytes", "misses")   # a row in --json



def _seconds(ms: float | None) -> float | None:
    """Milliseconds (the report's fields) in seconds (its JSON, ``units.JSON_UNITS``)."""
    return None if ms is None else ms * 1e-3

@dataclass
class NodeReport:
    """One compute node: its lowering and the figures measured for it (times in ms)."""

    lowered: LoweredNode
    mflop: float = 0.0
    rows: list[Row] = field(default_factory=list)   # lo.compare rows RAN (the backend's schedule), TUNED
    onnxruntime_ms: float | None = None
    tune_error: str = ""                              # why lo.tune found no schedule (no TUNED row)
    integer: IntegerCheck | None = None               # a quantized node: loopopt vs onnxruntime vs exact

    def row(self, name: str) -> Row | None:
        """The row ``name`` (RAN or TUNED), or None."""
        return next((r for r in self.rows if r.name == name), None)

    @property
    def best(self) -> Row | None:
        """The row of the faster schedule loopopt has for the node (None if it ran on the reference)."""
        return min(self.rows, key=lambda r: r.median_ms, default=None)

    def to_dict(self) -> dict[str, Any]:
        lowered = self.lowered
        rows = self.rows
        return {"node": lowered.node, "op_type": lowered.op_type,
                "op": repr(lowered.op) if lowered.op else None,
                "schedule_source": lowered.source, "note": lowered.note, "reason": lowered.reason or None,
                "absorbed": list(lowered.absorbed), "flops": round(self.mflop * 1e6),
                "rate_unit": rate_unit(lowered.op) if lowered.op else None,
                "onnxruntime_s": _seconds(self.onnxruntime_ms),
                "tune_error": self.tune_error or None,
                "integer_check": self.integer.to_dict() if self.integer else None,
                "loopopt": {r.name: {k: v for k, v in json_row(r).items() if k in LOOPOPT_KEYS}
                            for r in rows}}


@dataclass(frozen=True)
class Fallback:
    """A node the backend runs on onnx.reference: why, and its median time in a run of the model."""

    node: str
    op_type: str
    reason: str
    ms: float

    def __str__(self) -> str:
        return f"{self.node} ({self.op_type}) {self.ms:.3f} ms: {self.reason}"


@dataclass
class ModelReport:
    """The report of a model: one NodeReport per compute node, in graph order."""

    model: str
    threads: int
    nodes: list[NodeReport] = field(default_factory=list)
    engines_ms: dict[str, float] = field(default_factory=dict)   # a run of the whole plan, by engine
    fallbacks: list[Fallback] = field(default_factory=list)     # the nodes onnx.reference runs
    onnxruntime_int8: str = EXACT                               # the peer's int8 mode (``peer.INT8_MODES``)

    @property
    def onnxruntime_options(self) -> dict[str, str] | None:
        """The session config entries onnxruntime ran with (None if it ran no node)."""
        ran = any(n.onnxruntime_ms is not None for n in self.nodes)
        return config_entries(self.onnxruntime_int8) if ran else None

    @property
    def timed(self) -> list[NodeReport]:
        """The nodes that ran on loopopt kernels."""
        return [n for n in self.nodes if n.best is not None]

    def total_ms(self, runtime: str) -> float | None:
        """Summed time of the timed nodes: loopopt's best (``"loopopt"``) or onnxruntime's (None
        unless onnxruntime timed every one of them)."""
        if runtime == "loopopt":
            return sum(n.best.median_ms for n in self.timed) if self.timed else None
        ort = [n.onnxruntime_ms for n in self.timed]
        return sum(ort) if ort and None not in ort else None

    def table(self) -> str:
        """A text table: node, op, MFLOP, loopopt ms (the schedule the backend ran: default or logged;
        tuned), % of peak and DRAM traffic of the faster, onnxruntime ms and the ratio; the totals."""
        head = (f"{'node':<24} {'MFLOP':>8} {'ran ms':>8} {'schedule':>8} {'tuned ms':>9} "
                f"{'% peak':>6} {'DRAM MB':>8} {'ORT ms':>8} {'ORT/lo':>6}  loopopt op")
        lines = [f"model {self.model}, {self.threads} thread(s)", head]
        cell = lambda value, fmt: "-" if value is None else fmt.format(value)
        for node in self.nodes:
            lowered = node.lowered
            if not lowered.on_kernel:
                lines.append(f"{lowered.node:<24.24} on onnx.reference: {lowered.reason}")
                continue
            ran, tuned, best = node.row(RAN), node.row(TUNED), node.best
            ratio = node.onnxruntime_ms / best.median_ms if node.onnxruntime_ms else None
            source = "default" if lowered.source.startswith(DEFAULT) else "log"
            lines.append(f"{lowered.node:<24.24} {node.mflop:>8.2f} "
                         f"{ran.median_ms:>8.3f} {source:>8} "
                         f"{cell(tuned and tuned.median_ms, '{:.3f}'):>9} {best.percent_of_peak:>6.1f} "
                         f"{cell(best.dram_bytes and best.dram_bytes / 1e6, '{:.2f}'):>8} "
                         f"{cell(node.onnxruntime_ms, '{:.3f}'):>8} {cell(ratio, '{:.2f}'):>6}  "
                         f"{lowered.op!r}")
        loopopt, ort = self.total_ms("loopopt"), self.total_ms("onnxruntime")
        lines.append(f"total over the compute nodes: loopopt {cell(loopopt, '{:.3f}')} ms, "
                     f"onnxruntime {cell(ort, '{:.3f}')} ms"
                     + (f" ({ort / loopopt:.2f}x)" if loopopt and ort else ""))
        if self.onnxruntime_options is not None:
            lines.append(f"onnxruntime ran with {options_text(self.onnxruntime_int8)}")
        lines += [f"not tuned: {n.lowered.node}: {n.tune_error}" for n in self.nodes if n.tune_error]
        checked = [n for n in self.nodes if n.integer is not None]
        if checked:
            lines.append("integer outputs vs onnxruntime (same inputs; where they differ, which is exact):")
            lines += [f"  {n.lowered.node}: {n.integer}" for n in checked]
            lines.append(f"  all {len(checked)} nodes: {self.integer_total}")
        lines += [f"{n.lowered.node} absorbs {', '.join(n.lowered.absorbed)}" for n in self.nodes
                  if n.lowered.absorbed]
        if self.engines_ms:
            parts = ", ".join(f"{engine} {ms:.3f}" for engine, ms in self.engines_ms.items())
            lines.append(f"whole model, each node timed in a run of the plan: "
                         f"{sum(self.engines_ms.values()):.3f} ms ({parts})")
        lines += [f"on onnx.reference: {fallback}" for fallback in self.fallbacks]
        return "\n".join(lines)

    @property
    def integer_total(self) -> IntegerCheck | None:
        """The integer checks of every quantized node as one (None if there are none)."""
        checks = [n.integer for n in self.nodes if n.integer is not None]
        return IntegerCheck.total(checks) if checks else None

    def to_dict(self) -> dict[str, Any]:
        """The report in the JSON outputs' units (``units.JSON_UNITS``: times in s, each node's rate in its
        ``rate_unit``)."""
        totals = {runtime: self.total_ms(runtime) for runtime in ("loopopt", "onnxruntime")}
        integer = self.integer_total
        return {"model": self.model, "units": json_units(), "threads": self.threads,
                "nodes": [n.to_dict() for n in self.nodes],
                "total_s": {runtime: _seconds(ms) for runtime, ms in totals.items()},
                "integer_check": integer.to_dict() if integer else None,
                "onnxruntime_options": self.onnxruntime_options,
                "whole_model_s": {engine: _seconds(ms) for engine, ms in self.engines_ms.items()},
                "onnx_reference": [{"node": f.node, "op_type": f.op_type, "reason": f.reason,
                                    "median_s": _seconds(f.ms)} for f in self.fallbacks]}

    def plot(self, path: str | Path) -> Path:
        """Where the time goes: per compute node, loopopt (default, tuned) vs onnxruntime, in ms."""
        timed = self.timed
        series = {"loopopt": [n.row(RAN).median_ms for n in timed]}
        if any(n.row(TUNED) for n in timed):
            series["loopopt tuned"] = [n.row(TUNED) and n.row(TUNED).median_ms for n in timed]
        if any(n.onnxruntime_ms is not None for n in timed):
            series["onnxruntime"] = [n.onnxruntime_ms for n in timed]
        return plot_bars(path, [n.lowered.node for n in timed], series, "median time per run (ms)",
                         f"{self.model}: time per compute node, {self.threads} thread(s)")


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs of the model's static input shapes (ValueError naming a dynamic input dim)."""
    rng = np.random.default_rng(seed)
    shapes = static_input_shapes(model)
    arrays = {}
    for value in runtime_inputs(model):
        dtype = dtype_of(value) or np.dtype(np.float32)
        shape = shapes[value.name]
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            arrays[value.name] = rng.integers(max(info.min, -100), min(info.max, 100), shape, dtype=dtype)
        else:
            arrays[value.name] = rng.standard_normal(shape).astype(dtype)
    return arrays


def onnxruntime_run(nodes: Sequence[onnx.NodeProto], model: onnx.ModelProto, values: dict[str, np.ndarray],
                    constant: Container[str], threads: int,
                    int8: str = EXACT) -> tuple[float, list[np.ndarray]] | None:
    """onnxruntime's median time (ms) of ``nodes`` alone (a model of just them, one node or a fused
    group's; their ``constant`` inputs stay initializers; session options ``peer.session_options`` of
    ``threads`` and int8 mode ``int8``) and its outputs, or None when onnxruntime is not installed."""
    try:
        import onnxruntime
    except ImportError:
        return None
    produced = {name for node in nodes for name in node.output}
    names = dict.fromkeys(n for node in nodes for n in node.input if n and n not in produced)
    feeds = {name: values[name] for name in names if name not in constant}
    inits = [numpy_helper.from_array(values[name], name) for name in names if name in constant]
    outputs = [o for o in nodes[-1].output if o]     # a group's last node is its QuantizeLinear or anchor
    info = lambda name: helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(values[name].dtype), values[name].shape)
    graph = helper.make_graph(list(nodes), "node", [info(n) for n in feeds], [info(o) for o in outputs],
                              inits)
    single = helper.make_model(graph, opset_imports=list(model.opset_import))
    session = onnxruntime.InferenceSession(single.SerializeToString(), session_options(threads, int8),
                                           providers=["CPUExecutionProvider"])
    results = session.run(None, feeds)
    start = time.perf_counter()
    session.run(None, feeds)
    times = []
    for _ in range(repeat_count(time.perf_counter() - start, ORT_BUDGET)):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3, results


def model_report(model, threads: int = 1, tune_trials: int = 0, log: str | os.PathLike | None = None,
                 reuse: bool = True, progress: bool = False, budget: float = MEASURE_BUDGET,
                 isa: str = "auto", ort_int8: str = EXACT) -> ModelReport:
    """The report of ``model`` (a path, bytes or ModelProto with static input shapes): each compute
    node compiled with the default schedule (or the tuning log's best, ``log``), measured with
    ``lo.compare`` on ``threads`` threads (``budget`` seconds of timed runs per schedule); with
    ``tune_trials`` > 0 each distinct op is also tuned (``lo.tune``, trials appended to ``log``) and
    the tuned schedule compared too; kernels, tuning and comparisons on ``isa``; onnxruntime in int8
    mode ``ort_int8`` (``peer.INT8_MODES``)."""
    config_entries(ort_int8)          # an unknown mode is refused before anything is measured
    proto = load_model(model)
    name = Path(os.fspath(model)).name if isinstance(model, (str, os.PathLike)) else proto.graph.name
    inputs = random_inputs(proto)
    logged = log if log is not None and os.path.exists(log) else None   # --tune may create the log
    rep = LoopoptRep(proto, strict=False, log=logged, threads=threads, isa=isa)
    values = rep.values(inputs)       # fixes every shape, lowers every compute node
    report = ModelReport(name, threads, onnxruntime_int8=ort_int8)
    times = rep.profile(inputs)
    for step in rep.plan.steps:
        report.engines_ms[step.engine] = report.engines_ms.get(step.engine, 0.0) + times[step.node] * 1e3
    report.fallbacks = [Fallback(step.node, step.op_type, step.reason, times[step.node] * 1e3)
                        for step in rep.fallbacks()]
    tuned: dict[str, Any] = {}
    nodes = [(node, rep.lowered[node.name]) for node in rep.prepared.graph.node if node.name in rep.lowered]
    by_name = {node.name: node for node in rep.prepared.graph.node}
    for index, (node, lowered) in enumerate(nodes, 1):
        entry = NodeReport(lowered)
        report.nodes.append(entry)
        if not lowered.on_kernel:
            continue
        op = lowered.op
        entry.mflop = op.flops / 1e6
        runs = [(RAN, lowered.schedule, lowered.isa)]
        if tune_trials:
            key = signature(op)
            if key not in tuned:
                _say(progress, f"tuning {index}/{len(nodes)}: {lowered.node} {op!r}")
                try:
                    tuned[key] = tune(op, trials=tune_trials, threads=threads, isa=isa, log=log,
                                      progress=False)
                except TuneError as error:     # reported in the table and the JSON, not hidden
                    tuned[key] = str(error)
            if isinstance(tuned[key], str):
                entry.tune_error = tuned[key]
            else:
                runs.append((TUNED, tuned[key].best, tuned[key].isa))
        _say(progress, f"measuring {index}/{len(nodes)}: {lowered.node}")
        for label, schedule, isa in runs:    # each on its own ISA (a tuned schedule may be AMX's)
            entry.rows += compare(op, [schedule], [label], isa=isa, reuse=reuse, progress=False,
                                  threads=threads, budget=budget).rows
        members = rep.groups[node.name].members if node.name in rep.groups else (node,)
        chain = rep.chains.get(node.name)      # the nodes its kernel's epilogue runs: onnxruntime's too
        members += tuple(by_name[name] for name in chain.absorbed) if chain is not None else ()
        ort = onnxruntime_run(members, proto, values, rep.constants, threads, ort_int8)
        if ort is not None:
            entry.onnxruntime_ms, outputs = ort
            entry.integer = integer_check(node, [values[n] if n else None for n in node.input],
                                          values[chain.output if chain else node.output[0]], outputs[0])
    return report


def _say(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)
