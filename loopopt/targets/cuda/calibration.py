"""Recorded GPU times against the cuda cost model: the calibration rows (``Row``: a case, the preset
and its arguments as timed, the measured time, the run), the model's time of each under the figures
of the printer that ran it (``Costs``), and the fit of the few figures the rows set (``fit``).

The rows live in a JSON file (``tests/data/cuda/h200_tensor_times.json``): ``gpu``/``method``/``runs``
say where they come from; each run names the copy costs its printer compiled to (counted in SASS),
which replace ``COSTS``'s (the current printer's) for its rows.
"""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, fields, replace
from functools import cache
from pathlib import Path

from ...layers import get_layer
from ...ops import Matmul, Op
from ...quant import QuantSpec
from .costs import COSTS, Costs
from .search import WGMMA_KNOBS, TensorKnobs, gpu_of, predict, tensor_knobs

# the tensor presets' defaults (dataflows.gpu_wmma / gpu_mma / gpu_wgmma), the rows' missing arguments
DEFAULTS = {"gpu_wmma": dict(block_m=128, block_n=128, warps_m=2, warps_n=4, depth=32, stages=3, split_k=1),
            "gpu_mma": dict(block_m=128, block_n=128, warps_m=2, warps_n=4, depth=32, stages=4, split_k=1),
            "gpu_wgmma": dict(block_m=128, block_n=256, warps_m=2, warps_n=1, depth=64, stages=4, split_k=1)}
# the figures the rows set (the others are measured or counted) and the values the fit tries
GRID = {"launch_seconds": [step * 0.5e-6 for step in range(8, 30)]}
FITTED = tuple(GRID)


@cache
def case_op(case: str) -> Op:
    """The float16 op of a benchmark case: ``gemm4096``, ``bert`` (384 x 768 x 3072) or ResNet-50's
    ``conv2_x.n32``-style layer at a batch; ``conv2_x.n32.u8``: the layer quantized as
    ``bench_cuda_int8``'s (uint8 activations, per-channel int8 weights, a requantized uint8 output)."""
    if case == "gemm4096":
        return Matmul(4096, 4096, 4096, dtype="float16")
    if case == "bert":
        return Matmul(384, 768, 3072, dtype="float16")
    layer, _, rest = case.partition(".n")
    batch, _, kind = rest.partition(".")
    if not batch.isdigit() or kind not in ("", "u8"):
        raise ValueError(f"unknown case {case!r}: gemm4096, bert or a ResNet-50 layer as conv2_x.n32 "
                         f"(quantized: conv2_x.n32.u8)")
    op = get_layer(f"resnet50.{layer}", batch=int(batch))
    if kind == "u8":
        return type(op)(**{**op.arguments, "quant": QuantSpec(activation="uint8", output="uint8")})
    return type(op)(**{**op.arguments, "dtype": "float16"})


@dataclass(frozen=True)
class Row:
    """One recorded time: ``preset(case_op(case), **arguments)`` measured at ``seconds`` in ``run``."""

    case: str
    preset: str
    arguments: tuple[tuple[str, int], ...]
    seconds: float
    run: str
    step_instructions: int | None = None    # SASS count of the current printer's step (see the file)

    @property
    def op(self) -> Op:
        return case_op(self.case)

    @property
    def knobs(self) -> TensorKnobs:
        return _knobs(self.case, self.preset, self.arguments)

    def label(self) -> str:
        arguments = ", ".join(f"{k}={v}" for k, v in self.arguments)
        return f"{self.case} {self.preset}({arguments}) [{self.run}]"


@cache
def _knobs(case: str, preset: str, arguments: tuple[tuple[str, int], ...]) -> TensorKnobs:
    """The knobs of a row's arguments: the tiles clamped as the preset clamps them, and wgmma's own
    (``WGMMA_KNOBS``: swizzle, specialize, persistent) as given."""
    given = DEFAULTS[preset] | dict(arguments)
    own = {name: given.pop(name) for name in WGMMA_KNOBS if name in given}
    return replace(tensor_knobs(case_op(case), preset, **given), **own)


@dataclass(frozen=True)
class Calibration:
    """The rows of a file and each run's printer costs (what ``COSTS``'s copy figures were then)."""

    rows: tuple[Row, ...]
    printers: dict[str, dict[str, float]]
    arch: str

    def costs(self, row: Row, costs: Costs = COSTS) -> Costs:
        """``costs`` with the copy figures of the printer that ran ``row``."""
        return replace(costs, **self.printers.get(row.run, {}))

    def predicted(self, row: Row, costs: Costs = COSTS) -> float:
        """The model's seconds of ``row`` under ``costs`` (its run's printer's copy figures)."""
        gpu, costs = gpu_of(self.arch), self.costs(row, costs)
        return predict(row.knobs.work(row.op, gpu, costs), gpu, costs)["predicted_seconds"]

    def ratios(self, costs: Costs = COSTS) -> list[float]:
        """Predicted over measured, row by row."""
        return [self.predicted(row, costs) / row.seconds for row in self.rows]


def load(path: str | Path) -> Calibration:
    """The calibration rows of a JSON file (see the module docstring)."""
    data = json.loads(Path(path).read_text())
    known = {f.name for f in fields(Costs)}
    printers = {run: {k: v for k, v in about.get("printer", {}).items() if k in known}
                for run, about in data["runs"].items()}
    rows = tuple(Row(r["case"], r["preset"], tuple(sorted(r["knobs"].items())), r["ms"] * 1e-3, r["run"],
                     r.get("step_instructions")) for r in data["rows"])
    return Calibration(rows, printers, data["arch"])


def log_error(calibration: Calibration, costs: Costs) -> float:
    """The root mean square of log(predicted / measured) over the rows."""
    ratios = calibration.ratios(costs)
    return math.sqrt(sum(math.log(r) ** 2 for r in ratios) / len(ratios))


def fit(calibration: Calibration, grid: dict[str, list[float]], costs: Costs = COSTS) -> Costs:
    """``costs`` with the ``grid`` point (figure -> values tried) of least ``log_error``."""
    points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    return min((replace(costs, **point) for point in points), key=lambda c: log_error(calibration, c))
