"""One core's measured peak of an instruction table: a loop of independent multiply-add chains built
through cffi in this process and timed, the best of several short runs. x86's machine profile
(``targets/x86/profile.py``) and NEON's on an ARM machine (``targets/neon/profile.py``) measure with it.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from ..cbuild import DEFAULT_OPT_LEVEL, compile_c
from ..codegen.instr import Isa

PEAK_ROUNDS, PEAK_RUNS, PEAK_PAUSE = 5, 10, 0.02   # best of rounds x runs, rounds apart by a pause (s)
PEAK_ITERATIONS = 400_000
CHAINS = 12
PEAK_CDEF = "float lo_peak(long iterations);"

_PEAK_SOURCE = """{prelude}
/* {chains} independent multiply-add chains so both vector pipes stay busy. */
float lo_peak(long iterations)
{{
    {vt} acc[{chains}];
    const {vt} a = {bcast_a}, b = {bcast_b};
    for (int i = 0; i < {chains}; ++i) acc[i] = {zero};
    for (long it = 0; it < iterations; ++it) {{
#pragma GCC unroll {chains}
        for (int i = 0; i < {chains}; ++i) acc[i] = {update};
    }}
    {vt} total = {zero};
    for (int i = 0; i < {chains}; ++i) total = {add};
    return {hsum};
}}
"""


def peak_source(table: Isa, update: str, values: tuple[str, str, str]) -> str:
    """The C of ``float lo_peak(long iterations)``: ``CHAINS`` accumulators ``acc[i]`` of ``table``'s
    vectors, each updated by ``update`` (C over ``a``, ``b`` and ``acc[i]``) every iteration, then
    summed (``values``: the C scalars broadcast into ``a`` and ``b``, and the one the sum multiplies by)."""
    value_a, value_b, one = values
    return _PEAK_SOURCE.format(
        prelude=table.prelude, chains=CHAINS, vt=table.vector_type,
        bcast_a=table.broadcast(s=value_a), bcast_b=table.broadcast(s=value_b), zero=table.zero(),
        update=update, add=table.fma(a="acc[i]", b=table.broadcast(s=one), c="total"),
        hsum=table.hsum(v="total"))


def timed(function: Callable[..., Any], *args: Any) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def best_of_rounds(function: Callable[..., Any], *args: Any) -> float:
    """The fastest of PEAK_ROUNDS x PEAK_RUNS calls, the rounds apart by a short pause so that a
    burst of other work spoils at most some of them."""
    best = math.inf
    for round_number in range(PEAK_ROUNDS):
        if round_number:
            time.sleep(PEAK_PAUSE)
        best = min(best, *(timed(function, *args) for _ in range(PEAK_RUNS)))
    return best


def peak_gops(table: Isa, update: str, values: tuple[str, str, str], ops: int) -> float:
    """G ops/s of ``peak_source(table, update, values)`` built and timed here, ``ops`` per lane and
    update."""
    module = compile_c(peak_source(table, update, values), PEAK_CDEF, table.compile_flags,
                       level=DEFAULT_OPT_LEVEL)     # measures the machine at any $LOOPOPT_OPT_LEVEL
    best = best_of_rounds(module.lib.lo_peak, PEAK_ITERATIONS)
    return PEAK_ITERATIONS * CHAINS * table.lanes * ops / best / 1e9
