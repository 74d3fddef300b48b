"""A clip applied to each output of a kernel before it is stored (``Schedule.clip``): ``min(max(v,
low), high)`` after the bias and a Gemm's scales; ReLU is ``Clip(low=0.0)``, ReLU6 ``Clip(0.0, 6.0)``.
One bound may be absent. The reference applies it to the op's reference output (``apply``); the
cuda target's tensor-core kernels fuse it into their store (``c``)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np


@dataclass(frozen=True)
class Clip:
    """``min(max(v, low), high)``; ``None``: no bound on that side."""

    low: Optional[float] = None
    high: Optional[float] = None

    def __post_init__(self):
        for name, bound in (("low", self.low), ("high", self.high)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float))
                                      or not math.isfinite(bound)):
                raise ValueError(f"clip: {name}={bound!r}; a bound is a finite number or None")
        if self.low is None and self.high is None:
            raise ValueError("clip: give low, high or both (ReLU: clip(low=0.0))")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"clip: low={self.low!r} is above high={self.high!r}")

    @property
    def bounds(self) -> dict[str, float]:
        """The bounds given, by name (``Schedule.clip``'s keyword arguments)."""
        return {name: float(v) for name, v in (("low", self.low), ("high", self.high)) if v is not None}

    def apply(self, values: np.ndarray) -> np.ndarray:
        """``values`` clipped (the reference of a kernel with this epilogue)."""
        return np.clip(values, self.low, self.high)

    def c(self, value: str) -> str:
        """The C expression of float ``value`` clipped."""
        if self.low is not None:
            value = f"fmaxf({value}, {float(self.low)!r}f)"
        if self.high is not None:
            value = f"fminf({value}, {float(self.high)!r}f)"
        return value
