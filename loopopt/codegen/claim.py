"""C of a parallel loop whose chunks the threads of an OpenMP region claim as they go.

A region's threads share one counter (``lo_next``, declared before the region); each thread claims the next
chunk of iterations (``__atomic_compare_exchange_n``) and runs it, until none is left, so the first free
thread (the caller included) runs the next chunk: a thread slowed by its vCPU (a neighbour's DRAM traffic,
a preemption) or late to start takes fewer chunks instead of holding the others idle at the region's end,
as a split into one contiguous range per thread (``schedule(static)``) did. The team serves the region as
before (``GOMP_parallel`` and the thread number and count: no OpenMP dynamic schedule).

The rule (OpenMP's ``schedule(guided)``, with a least chunk): on ``T > 1`` threads each claim takes
``ceil(r / (SHARE * T))`` of the ``r`` iterations left, at least ``ceil(n / (LEAST * T))`` of the loop's
``n``, rounded up to a multiple of ``align``: the first chunks long (a contiguous run of iterations keeps the
reuse inside it), the last ones short, so the threads end within a short chunk of each other, in a few
claims a region (each an atomic on a cache line the threads share); on one thread, one chunk of all.
"""
from __future__ import annotations

SHARE = 1               # a claim takes 1 / (SHARE * threads) of the iterations left,
LEAST = 8               # and at least 1 / (LEAST * threads) of the loop
COUNTER = "lo_next"     # the first iteration no thread has claimed yet, shared by the region's threads


def counter(int_type: str) -> str:
    """The C declaration of the shared counter, placed just before the region."""
    return f"{int_type} {COUNTER} = 0;"


def claimed(int_type: str, extent: str, call: str, align: int = 1) -> list[str]:
    """C statements, inside the ``omp parallel`` region following ``counter``, running ``call`` (on the
    chunk ``[lo_begin, lo_end)``) on each chunk of ``[0, extent)`` that this thread claims (``extent``: a
    C expression, unchanged in the region; chunks start at multiples of ``align``)."""
    size = "(lo_left > lo_least ? lo_left : lo_least)"
    if align > 1:
        size = f"({size} + {align - 1}) / {align} * {align}"
    return [f"const {int_type} lo_threads = omp_get_num_threads();",
            f"const {int_type} lo_least = {_ceil(extent, f'{LEAST} * lo_threads')};",
            f"{int_type} lo_begin = __atomic_load_n(&{COUNTER}, __ATOMIC_RELAXED);",
            f"while (lo_begin < {extent}) {{",
            f"    const {int_type} lo_left = {_ceil(f'{extent} - lo_begin', f'{SHARE} * lo_threads')};",
            f"    const {int_type} lo_size = lo_threads == 1 ? {extent} : {size};",
            f"    const {int_type} lo_end = lo_begin + lo_size < {extent} ? lo_begin + lo_size : {extent};",
            f"    if (!__atomic_compare_exchange_n(&{COUNTER}, &lo_begin, lo_end, 0, __ATOMIC_RELAXED, "
            "__ATOMIC_RELAXED))",
            "        continue;   /* another thread claimed it: lo_begin is the counter's value now */",
            f"    {call};",
            "    lo_begin = lo_end;",
            "}"]


def _ceil(numerator: str, denominator: str) -> str:
    """C of ``ceil(numerator / denominator)`` for non-negative C expressions."""
    return f"({numerator} + {denominator} - 1) / ({denominator})"
