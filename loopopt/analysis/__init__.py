"""Reuse-distance analysis of schedules and the memory-hierarchy model built on it."""
from __future__ import annotations

from ..schedule import Schedule
from .hierarchy import ENERGY_PJ, CacheLevel, Hierarchy, LevelTraffic, Machine, comparison_row, predict
from .items import item_space
from .profile import ReuseProfile
from .setassoc import simulate_caches
from .stack import TRACE_ACCESS_LIMIT, reuse_distances, stack_histograms

ENGINES = ("auto", "trace", "analytical")


def reuse(schedule: Schedule, granularity: str = "element", line_size: int = 64,
          engine: str = "auto") -> ReuseProfile:
    """Reuse-distance profile of ``schedule``'s trace at ``granularity`` ("element" or "line").

    ``engine="trace"`` (and ``"auto"``) runs the compiled Olken/Fenwick stack engine.
    """
    if not isinstance(schedule, Schedule):
        raise TypeError(f"reuse needs a lo.Schedule, got {type(schedule).__name__}")
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r} is not supported: use one of {', '.join(ENGINES)}")
    if engine == "analytical":
        raise ValueError("engine='analytical' is not implemented yet; use engine='trace' or 'auto'")
    space = item_space(schedule, granularity, line_size)
    return ReuseProfile(schedule, space, stack_histograms(schedule, space), "trace")


__all__ = ["reuse", "ReuseProfile", "reuse_distances", "Machine", "CacheLevel", "Hierarchy", "LevelTraffic",
           "predict", "comparison_row", "ENERGY_PJ", "simulate_caches", "TRACE_ACCESS_LIMIT"]
