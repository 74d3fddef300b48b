"""The search's correction of its cost model to what it measured, and the rank correlation.

``Fit`` predicts a candidate's log time from a vector of features that loopopt's analysis gives
for it (``guide.FEATURES``: the log of the prior prediction first (the kernel model's time blended
with the heuristic's), then the heuristic's log time
and what the model prices poorly: streamed operands, strided weights, thread imbalance, which core
resource binds):

    log t = a + w . x

fitted by least squares to the trials measured so far (at least ``MIN_TRIALS``), with ``w``
regularized toward the kernel model as it is (weight 1 on its log time, 0 on the others) by the
weight of ``PRIOR`` trials (ridge regression on the standardized features), so that a few noisy
trials move it little, and a direction the trials cannot tell apart stays where the model puts it.
``a`` corrects the model's scale; ``w`` reorders the candidates where the measurements side with a
feature. The features of a trial come from its candidate alone, never from its timing; a trial is
predicted by the fit to the trials before it; the fit depends only on the measured trials, so a
search replayed from its log refits the same way.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

MIN_TRIALS = 3             # verified trials before the first refit
PRIOR = 2.0                # weight (in trials) of the model as it is: 1 on the first feature, 0 on the others
MAX_EXPONENT = 700.0       # a fitted log time beyond this predicts an infinite time (exp overflows)
SPREAD = 1e-6              # a feature whose standard deviation over the trials is below this has none


@dataclass(frozen=True)
class Fit:
    """``log t = intercept + weights . features`` (module docstring); no weights: the first feature
    (the model's log time) as it is."""

    intercept: float = 0.0
    weights: tuple[float, ...] = ()

    @classmethod
    def of(cls, samples: Sequence[tuple[Sequence[float], float]]) -> Fit:
        """The fit to ``(features, measured_seconds)`` samples (features of one length, the first the
        model's log time; times > 0); with fewer than MIN_TRIALS samples the model with its scale
        corrected to theirs (the model as it is without samples)."""
        if len(samples) < MIN_TRIALS:       # the scale alone (the order stays the model's)
            return cls(float(np.mean([math.log(t) - f[0] for f, t in samples]))) if samples else cls()
        features = np.asarray([f for f, _ in samples], dtype=float)
        times = np.log(np.asarray([t for _, t in samples], dtype=float))
        centre, spread = features.mean(axis=0), features.std(axis=0)
        spread[spread < SPREAD] = 1.0              # a feature without spread keeps its prior weight
        standard = (features - centre) / spread    # unit variance: PRIOR weighs as that many trials
        prior = np.zeros(features.shape[1])
        prior[0] = spread[0]
        gram = standard.T @ standard + PRIOR * np.eye(features.shape[1])
        weights = np.linalg.solve(gram, standard.T @ (times - times.mean()) + PRIOR * prior) / spread
        return cls(float(times.mean() - centre @ weights), tuple(float(w) for w in weights))

    def predict(self, features: Sequence[float]) -> float:
        """The fitted time of a candidate of ``features`` (inf if its first, the model's log time, is
        not finite: a refused schedule)."""
        if not math.isfinite(features[0]):
            return math.inf
        exponent = self.intercept + (float(np.dot(self.weights, features)) if self.weights else features[0])
        return math.exp(exponent) if exponent < MAX_EXPONENT else math.inf


def ranks(values: Iterable[float]) -> np.ndarray:
    """Ranks from 0, ties sharing their mean rank."""
    x = np.asarray(list(values), dtype=float)
    order = np.empty(len(x))
    order[x.argsort(kind="stable")] = np.arange(len(x))
    for value in np.unique(x):
        order[x == value] = order[x == value].mean()
    return order


def spearman_undefined(a: Sequence[float], b: Sequence[float]) -> str | None:
    """Why Spearman's rank correlation of paired values is undefined (fewer than 3 pairs, or one
    side all tied, so that it has no order to compare), or None where it is defined."""
    if len(a) < 3:
        return f"{len(a)} pairs, 3 needed"
    tied = [name for name, values in (("first", a), ("second", b)) if np.ptp(np.asarray(values, float)) == 0]
    return f"the {' and '.join(tied)} values all tie, so there is no order to compare" if tied else None


def spearman(a: Iterable[float], b: Iterable[float]) -> float | None:
    """Spearman's rank correlation of paired values (Pearson's correlation of their ranks), in
    [-1, 1]; None exactly where ``spearman_undefined`` gives a reason."""
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"spearman needs paired values, got {len(a)} and {len(b)}")
    if spearman_undefined(a, b) is not None:
        return None
    return float(np.clip(np.corrcoef(ranks(a), ranks(b))[0, 1], -1.0, 1.0))
