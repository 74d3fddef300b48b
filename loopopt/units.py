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


def significant(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits and no exponent (``0.00231``, ``1.23``, ``231``); ``0``
    for zero."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def rate_unit(op) -> str:
    """The unit of ``op``'s rate: ``GOP/s`` for a quantized op (integer operations, 2 per
    multiply-accumulate), ``GFLOP/s`` for float32 and bfloat16."""
    return "GFLOP/s" if op.quant is None else "GOP/s"


# Every ``--json`` output: SI units in keys named by them (``median_s``, ``energy_j``, ``dram_bytes``), rates
# under ``rate`` keys in the op's rate unit; the document's ``units`` object names them.
JSON_UNITS = {"time": "s", "energy": "J", "data": "bytes"}


def json_units(op=None) -> dict[str, str]:
    """The ``units`` object of a JSON output: ``JSON_UNITS`` and, for an op, its ``rate`` unit."""
    return {**JSON_UNITS, **({"rate": rate_unit(op)} if op is not None else {})}
