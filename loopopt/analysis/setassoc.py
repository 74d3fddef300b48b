"""Set-associative LRU caches simulated on the schedule's line trace (compiled, one pass)."""
from __future__ import annotations

import numpy as np

from ..schedule import Schedule
from .items import check_capacity, item_space
from .stack import check_trace_size
from .trace import trace_module


def simulate_caches(schedule: Schedule, geometries: list[tuple[int, int]], line_size: int = 64) -> np.ndarray:
    """Misses ``[cache, tensor position]`` of LRU caches with ``(sets, ways)`` each on the line trace.

    Line ``x`` maps to set ``x % sets``; tensors start on 64-byte boundaries from address 0.
    """
    for sets, ways in geometries:
        check_capacity(sets, "sets")
        check_capacity(ways, "ways")
    check_trace_size(schedule)
    space = item_space(schedule, "line", line_size)
    module = trace_module(schedule, space)
    ffi = module.ffi
    misses = np.zeros((len(geometries), 3), np.int64)
    keep = [misses]
    caches = ffi.new("sa_cache[]", len(geometries))
    for cache, (sets, ways), row in zip(caches, geometries, misses):
        tags, stamps = np.full(sets * ways, -1, np.int64), np.zeros(sets * ways, np.int64)
        keep += [tags, stamps]
        cache.sets, cache.ways, cache.clock = sets, ways, 0
        cache.tags = ffi.cast("long long *", ffi.from_buffer(tags))
        cache.stamps = ffi.cast("long long *", ffi.from_buffer(stamps))
        cache.misses = ffi.cast("long long *", ffi.from_buffer(row))
    state = ffi.new("sa_state *", {"ncaches": len(geometries), "caches": caches})
    module.lib.sa_run(state)
    return misses
