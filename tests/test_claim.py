"""Chunks claimed as they go (``loopopt.codegen.claim``): on the team's threads every iteration of the
loop is run once, in the chunks of the rule (each starting at a multiple of ``align``); one thread runs one
chunk of all."""
from __future__ import annotations

from functools import cache

import numpy as np
from helpers import HYPOTHESIS
from hypothesis import given, settings
from hypothesis import strategies as st

from loopopt.cbuild import compile_c
from loopopt.codegen import claim
from loopopt.openmp import OPENMP_FLAG

CDEF = "int lo_chunks(long n, int threads, long *begins, long *ends);"
RECORD = ("{ const int c = __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED); "
          "begins[c] = lo_begin; ends[c] = lo_end; }")


@cache
def _library(align: int):
    """A C function running ``claimed`` over ``[0, n)`` on ``threads`` threads, recording each chunk."""
    body = "\n".join(f"        {line}" for line in claim.claimed("long", "n", RECORD, align))
    source = f"""#include <omp.h>
int lo_chunks(long n, int threads, long *begins, long *ends) {{
    int calls = 0;
    {claim.counter("long")}
    #pragma omp parallel num_threads(threads)
    {{
{body}
    }}
    return calls;
}}
"""
    return compile_c(source, CDEF, (OPENMP_FLAG,), (OPENMP_FLAG,))


@settings(max_examples=60, **HYPOTHESIS)
@given(st.integers(0, 3000), st.integers(1, 4), st.sampled_from([1, 3, 64]))
def test_every_iteration_runs_once_in_the_rules_chunks(n, threads, align):
    library = _library(align)
    begins, ends = np.full(n + 8, -1, np.int64), np.full(n + 8, -1, np.int64)
    calls = library.lib.lo_chunks(n, threads, library.ffi.from_buffer("long[]", begins),
                                  library.ffi.from_buffer("long[]", ends))
    ran = sorted(zip(begins[:calls].tolist(), ends[:calls].tolist(), strict=True))
    assert ran == _chunks(n, threads, align)


def _chunks(n: int, threads: int, align: int) -> list[tuple[int, int]]:
    """The chunks of the rule, in order: each claim's size follows from where the last one ended."""
    chunks, begin = [], 0
    while begin < n:
        size = max(_ceil(n - begin, claim.SHARE * threads), _ceil(n, claim.LEAST * threads))
        end = n if threads == 1 else min(n, begin + _ceil(size, align) * align)
        chunks.append((begin, end))
        begin = end
    return chunks


def _ceil(a: int, b: int) -> int:
    return -(-a // b)
