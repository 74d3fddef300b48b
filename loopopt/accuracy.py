"""Accuracy of quantization choices next to their speed.

``quant_accuracy(op, x, w, b)`` quantizes a float32 op's data per tensor and per channel,
with symmetric and asymmetric weights, runs each quantized kernel, and reports the error
of its float32 output against the float32 reference (max abs, relative L2, SQNR in dB,
``quant.quant_error``) with the kernel's measured speed.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional, Union

import numpy as np

from .ops import Op
from .quant import QuantSpec, quant_error, quantize
from .schedule import Schedule

CHOICES = ((False, True), (False, False), (True, True), (True, False))   # (per_channel, weight_symmetric)
ScheduleChoice = Union[None, str, Callable[[Op], Schedule]]


@dataclass
class AccuracyRow:
    """One quantization choice: its error against float32 and its kernel's speed."""

    choice: str
    activation: str
    per_channel: bool
    weight_symmetric: bool
    max_abs: float
    rel_l2: float
    sqnr_db: float
    median_ms: Optional[float] = None
    gops: Optional[float] = None
    percent_of_peak: Optional[float] = None
    verified: Optional[bool] = None


class AccuracyReport:
    """Rows of ``quant_accuracy``: a table (``str``) and ``to_dict``."""

    def __init__(self, op: Op, rows: list[AccuracyRow]):
        self.op, self.rows = op, rows

    def __str__(self) -> str:
        head = ("choice", "max abs", "rel L2", "SQNR dB", "median ms", "GOP/s", "% int8 peak", "ok")
        fmt = lambda v, f: ("-" if v is None else ("yes" if v else "NO") if isinstance(v, bool)
                            else f.format(v))
        table = [head] + [(r.choice, fmt(r.max_abs, "{:.3g}"), fmt(r.rel_l2, "{:.3g}"),
                           fmt(r.sqnr_db, "{:.1f}"), fmt(r.median_ms, "{:.3f}"), fmt(r.gops, "{:.2f}"),
                           fmt(r.percent_of_peak, "{:.1f}"), fmt(r.verified, "{}")) for r in self.rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(head))]
        lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
                 for row in table]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join([f"quantization error of {self.op!r} against float32"] + lines)

    def to_dict(self) -> dict[str, Any]:
        clean = lambda v: None if isinstance(v, float) and math.isinf(v) else v
        return {"op": repr(self.op), "rows": [{k: clean(v) for k, v in asdict(r).items()} for r in self.rows]}


def quant_accuracy(op: Op, x: Optional[np.ndarray] = None, w: Optional[np.ndarray] = None,
                   b: Optional[np.ndarray] = None, schedule: ScheduleChoice = None, isa: str = "auto",
                   activation: str = "uint8", timing: bool = True, budget: float = 0.3,
                   seed: int = 0) -> AccuracyReport:
    """Quantization error (vs the float32 reference) and speed of each quantization choice.

    ``op`` is a float32 Conv2d/Matmul (its shape is what counts); ``x``/``w``/``b`` default
    to ``op.random_inputs(seed)``. Each choice of per-tensor/per-channel and
    symmetric/asymmetric weights quantizes the data with ``lo.quantize`` (activations
    ``activation``), runs the kernel of ``schedule`` (a stored schedule name, a function
    from the quantized op to a Schedule, or None for the naive nest) with a float32
    output, and, with ``timing``, measures it.
    """
    from .measure import measure
    from .schedule_file import load_schedule
    inputs = op.random_inputs(seed)
    x = inputs[op.inputs[0]] if x is None else np.asarray(x, dtype=np.float32)
    w = inputs[op.inputs[1]] if w is None else np.asarray(w, dtype=np.float32)
    if op.bias:
        b = inputs[op.bias_tensor] if b is None else np.asarray(b, dtype=np.float32)
    reference = op.reference(x, w, *([b] if b is not None else [])).astype(np.float32)
    rows = []
    for per_channel, symmetric in CHOICES:
        spec = QuantSpec(activation=activation, per_channel=per_channel, weight_symmetric=symmetric)
        qop = op.with_quant(spec)
        xq, sx, zx = quantize(x, activation)
        axis = op.weight_channel_axis if per_channel else None
        wq, sw, zw = quantize(w, "int8", axis=axis, symmetric=symmetric)
        if schedule is None:
            s = Schedule(qop)
        elif isinstance(schedule, str):
            s = load_schedule(schedule, qop)
        else:
            s = schedule(qop)
        kernel = s.compile(isa)
        y = kernel(xq, wq, *([b] if b is not None else []), x_scale=sx, x_zero_point=zx, w_scale=sw,
                   w_zero_point=zw)
        err = quant_error(reference, y)
        row = AccuracyRow(f"{'per-channel' if per_channel else 'per-tensor'} "
                          f"{'symmetric' if symmetric else 'asymmetric'}", activation, per_channel, symmetric,
                          err["max_abs"], err["rel_l2"], err["sqnr_db"])
        if timing:
            t = measure(kernel, budget=budget, seed=seed)
            row.median_ms, row.gops, row.percent_of_peak, row.verified = (
                t.median * 1e3, t.gflops, t.percent_of_peak, t.verified)
        rows.append(row)
    return AccuracyReport(op, rows)
