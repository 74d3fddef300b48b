"""The search's correction of its cost model to what it measured, and the rank correlation.

``Fit`` predicts a candidate's time from two predictions of it, the kernel model's (``m``) and the
ranking heuristic's (``h``):

    log t = a + b log m + c log h

fitted by least squares to the verified trials measured so far (at least ``MIN_TRIALS``), with
``b`` and ``c`` regularized toward the kernel model as it is (``b = 1, c = 0``) by the weight of
``PRIOR`` trials (ridge regression on the standardized logs), so that a few noisy trials move it
little, and a direction the trials cannot tell apart (the two predictions ordering the measured
candidates alike) stays where the model puts it. ``a`` corrects the model's scale;
``b`` and ``c`` reorder the candidates where the measurements side with the heuristic (which sees
whether the reused weights stay in cache, a memory term the ranking model leaves out). The fit
depends only on the measured trials, so a search replayed from its log refits the same way.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

MIN_TRIALS = 3             # verified trials before the first refit
PRIOR = 2.0                # weight (in trials) of the model as it is: b = 1, c = 0


@dataclass(frozen=True)
class Fit:
    """``log t = intercept + model_weight log m + heuristic_weight log h`` (module docstring)."""

    intercept: float = 0.0
    model_weight: float = 1.0
    heuristic_weight: float = 0.0

    @classmethod
    def of(cls, samples: Sequence[tuple[float, float, float]]) -> Fit:
        """The fit to ``(model_seconds, heuristic_seconds, measured_seconds)`` samples (all > 0);
        the model as it is with fewer than MIN_TRIALS samples."""
        if len(samples) < MIN_TRIALS:
            return cls()
        logs = np.log(np.asarray(samples, dtype=float))
        features, times = logs[:, :2], logs[:, 2]
        centre, spread = features.mean(axis=0), features.std(axis=0)
        spread[spread == 0] = 1.0                  # a feature without spread keeps its prior weight
        standard = (features - centre) / spread    # unit variance: PRIOR weighs as that many trials
        prior = np.array([1.0, 0.0]) * spread
        gram = standard.T @ standard + PRIOR * np.eye(2)
        weights = np.linalg.solve(gram, standard.T @ (times - times.mean()) + PRIOR * prior) / spread
        return cls(float(times.mean() - centre @ weights), float(weights[0]), float(weights[1]))

    def predict(self, model_seconds: float, heuristic_seconds: float) -> float:
        """The fitted time of a candidate (inf if the model has none: a refused schedule)."""
        if not math.isfinite(model_seconds):
            return math.inf
        return math.exp(self.intercept + self.model_weight * math.log(model_seconds)
                        + self.heuristic_weight * math.log(heuristic_seconds))


def ranks(values: Iterable[float]) -> np.ndarray:
    """Ranks from 0, ties sharing their mean rank."""
    x = np.asarray(list(values), dtype=float)
    order = np.empty(len(x))
    order[x.argsort(kind="stable")] = np.arange(len(x))
    for value in np.unique(x):
        order[x == value] = order[x == value].mean()
    return order


def spearman(a: Iterable[float], b: Iterable[float]) -> float | None:
    """Spearman's rank correlation of paired values (Pearson's correlation of their ranks); None
    with fewer than 3 pairs or when either side has one value only (no order to compare)."""
    ra, rb = ranks(a), ranks(b)
    if len(ra) != len(rb):
        raise ValueError(f"spearman needs paired values, got {len(ra)} and {len(rb)}")
    if len(ra) < 3 or np.ptp(ra) == 0 or np.ptp(rb) == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])
