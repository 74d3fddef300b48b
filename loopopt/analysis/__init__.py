"""Reuse-distance analysis of schedules and the memory-hierarchy model built on it."""
from __future__ import annotations

from ..schedule import Schedule
from .analytical import analytical_histograms, choose_engine
from .hierarchy import ENERGY_PJ, CacheLevel, Hierarchy, LevelTraffic, Machine, comparison_row, predict
from .items import item_space
from .profile import ReuseProfile
from .setassoc import simulate_caches
from .stack import TRACE_ACCESS_LIMIT, reuse_distances, stack_histograms

ENGINES = ("auto", "trace", "analytical")


def reuse(schedule: Schedule, granularity: str = "element", line_size: int = 64,
          engine: str = "auto") -> ReuseProfile:
    """Reuse-distance profile of ``schedule``'s trace at ``granularity`` ("element" or "line").

    ``engine="trace"`` runs the compiled Olken/Fenwick stack engine over the whole trace;
    ``engine="analytical"`` proves with isl which blocks of the trace repeat and runs only
    representative ones (same histograms exactly); ``"auto"`` picks the one with less work.
    """
    if not isinstance(schedule, Schedule):
        raise TypeError(f"reuse needs a lo.Schedule, got {type(schedule).__name__}")
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r} is not supported: use one of {', '.join(ENGINES)}")
    space = item_space(schedule, granularity, line_size)
    analyzer = None
    if engine == "auto":
        engine, analyzer = choose_engine(schedule, space)
    if engine == "analytical":
        return ReuseProfile(schedule, space, analytical_histograms(schedule, space, analyzer), "analytical")
    return ReuseProfile(schedule, space, stack_histograms(schedule, space), "trace")


__all__ = ["reuse", "ReuseProfile", "reuse_distances", "Machine", "CacheLevel", "Hierarchy", "LevelTraffic",
           "predict", "comparison_row", "ENERGY_PJ", "simulate_caches", "TRACE_ACCESS_LIMIT"]
