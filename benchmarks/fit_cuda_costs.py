"""The cuda cost model against the recorded H200 times (``tests/data/cuda/h200_tensor_times.json``):
each row's predicted and measured time, the factor between them, the rank correlation, and the
fit of the figures the rows set (``calibration.FITTED``: the launch's) over a grid.

``python benchmarks/fit_cuda_costs.py [--fit]`` prints the table under ``COSTS`` (and the best grid
point with ``--fit``: paste its figures into ``loopopt/targets/cuda/costs.py``). Needs no GPU.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

from loopopt.targets.cuda.calibration import FITTED, GRID, fit, load, log_error
from loopopt.targets.cuda.costs import COSTS, Costs
from loopopt.tune.fit import spearman

ROWS = Path(__file__).resolve().parent.parent / "tests" / "data" / "cuda" / "h200_tensor_times.json"


def table(costs: Costs) -> str:
    calibration = load(ROWS)
    lines = [f"{'row':78} {'measured us':>11} {'model us':>9} {'model/measured':>14}"]
    for row in calibration.rows:
        predicted = calibration.predicted(row, costs)
        lines.append(f"{row.label():78} {row.seconds * 1e6:11.1f} {predicted * 1e6:9.1f} "
                     f"{predicted / row.seconds:14.2f}")
    ratios, error = calibration.ratios(costs), log_error(calibration, costs)
    rho = spearman([r * row.seconds for r, row in zip(ratios, calibration.rows)],
                   [row.seconds for row in calibration.rows])
    lines.append(f"factor: {min(ratios):.2f}-{max(ratios):.2f}, rms log error {error:.3f} "
                 f"(x{math.exp(error):.2f}), Spearman {rho:+.3f} over {len(ratios)} rows")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help=f"fit {', '.join(FITTED)} over a grid")
    costs = COSTS
    if parser.parse_args().fit:
        costs = fit(load(ROWS), GRID)
        print("fitted: " + ", ".join(f"{name} = {getattr(costs, name):.3g}" for name in FITTED))
    print(table(costs))


if __name__ == "__main__":
    main()
