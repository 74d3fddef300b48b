"""Stack (reuse) distances: the brute-force definition and the compiled trace engine."""
from __future__ import annotations

import math
from typing import Hashable, Iterable

import numpy as np

from ..schedule import Schedule
from .items import ItemSpace
from .trace import trace_module

#: the trace engine refuses schedules with more accesses than this (about a minute of work)
TRACE_ACCESS_LIMIT = 5_000_000_000


def reuse_distances(trace: Iterable[Hashable]) -> list[float]:
    """Reuse distance of each access of ``trace`` (``math.inf`` when cold), by an explicit LRU stack.

    ``reuse_distances("ABCABBACDB")`` is ``[inf, inf, inf, 2, 2, 0, 1, 2, inf, 3]``.
    Quadratic: meant for short traces and as the oracle of the engines.
    """
    stack: list[Hashable] = []          # most recent last
    distances: list[float] = []
    for item in trace:
        try:
            depth = len(stack) - 1 - stack[::-1].index(item)
        except ValueError:
            distances.append(math.inf)
        else:
            distances.append(len(stack) - 1 - depth)
            del stack[depth]
        stack.append(item)
    return distances


def check_trace_size(schedule: Schedule, limit: int = TRACE_ACCESS_LIMIT) -> int:
    """Accesses of the schedule's trace (4 per instance); ValueError above ``limit``."""
    accesses = 4 * schedule.op.macs
    if accesses > limit:
        raise ValueError(f"the trace of {schedule.op!r} has {accesses:.3g} accesses, more than the trace "
                         f"engine's limit of {limit:.3g} (TRACE_ACCESS_LIMIT): it would take minutes; "
                         f"use engine='analytical' (it runs only the blocks of the trace that do not "
                         f"repeat) or analyze a smaller layer (fewer channels, batch 1)")
    return accesses


def stack_histograms(schedule: Schedule, space: ItemSpace) -> np.ndarray:
    """Dense histograms ``[tensor position, distance]`` with the cold count in the last column."""
    check_trace_size(schedule)
    module = trace_module(schedule, space)
    ffi, n = module.ffi, space.size
    cap = 1 << (2 * n).bit_length()       # small on purpose: compaction every ~cap - n accesses
    arrays = {"last": np.zeros(n, np.int64), "owner": np.full(cap + 1, -1, np.int64),
              "tree": np.zeros(cap + 1, np.int32), "hist": np.zeros((3, n + 1), np.int64)}
    state = ffi.new("stack_state *", {"nitems": n, "cap": cap, "now": 0, "seen": 0})
    for name, array in arrays.items():
        setattr(state, name, ffi.cast(ffi.typeof(getattr(state, name)), ffi.from_buffer(array)))
    module.lib.stack_run(state)
    return arrays["hist"]
