"""Durations for people: in the unit (s, ms, us, ns) that shows them with three significant digits."""
from __future__ import annotations

import math

UNITS = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))    # largest first


def time_unit(seconds: float) -> tuple[str, float]:
    """The largest unit (its name, its seconds) in which ``seconds`` is at least 1 (``ns`` below 1 ns;
    ``ms`` for 0 or a value that is not finite)."""
    if not math.isfinite(seconds) or seconds <= 0:
        return UNITS[1]
    return next((unit for unit in UNITS if seconds >= unit[1]), UNITS[-1])


def in_unit(seconds: float, scale: float) -> str:
    """``seconds`` in the unit of ``scale`` seconds with three significant digits where it is 1 to 999
    of them (``564``, ``12.3``, ``1.23``); smaller values keep two decimals."""
    value = seconds / scale
    decimals = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    return f"{value:.{decimals}f}"


def duration(seconds: float) -> str:
    """``seconds`` in its ``time_unit`` with three significant digits: ``564 us``, ``1.23 ms``, ``12.0 s``."""
    name, scale = time_unit(seconds)
    return f"{in_unit(seconds, scale)} {name}"
