"""C of a parallel loop whose chunks the threads of an OpenMP region claim as they go.

A region's threads share one counter (``lo_next``, declared before the region); each thread takes the next
chunk of iterations with ``__atomic_fetch_add`` and runs it, until none is left, so the first free thread
(the caller included) runs the next chunk: a thread slowed by its vCPU (a neighbour's DRAM traffic, a
preemption) or late to start takes fewer chunks instead of holding the others idle at the region's end,
as a split into one contiguous range per thread (``schedule(static)``) did. The team serves the region as
before (``GOMP_parallel`` and the thread number and count: no OpenMP dynamic schedule).

The rule: on ``T > 1`` threads a loop of ``n`` iterations runs as ``min(n, T * CHUNKS_PER_THREAD)`` chunks
of ``ceil(n / chunks)`` iterations (rounded up to a multiple of ``align``), so a chunk is a contiguous run
of at least one iteration (a kernel's parallel loop is its outermost loop of more than one iteration: each
chunk keeps the reuse inside its iterations); on one thread, one chunk of all ``n``.
"""
from __future__ import annotations

CHUNKS_PER_THREAD = 4
COUNTER = "lo_next"     # the first iteration no thread has claimed yet, shared by the region's threads


def counter(int_type: str) -> str:
    """The C declaration of the shared counter, placed just before the region."""
    return f"{int_type} {COUNTER} = 0;"


def claimed(int_type: str, extent: str, call: str, align: int = 1) -> list[str]:
    """C statements, inside the ``omp parallel`` region following ``counter``, running ``call`` (on the
    chunk ``[lo_begin, lo_end)``) on each chunk of ``[0, extent)`` that this thread claims (``extent``: a
    C expression, unchanged in the region; chunks start at multiples of ``align``)."""
    chunk = f"({extent} + lo_chunks - 1) / lo_chunks"
    if align > 1:
        chunk = f"({chunk} + {align - 1}) / {align} * {align}"
    most = f"lo_threads * {CHUNKS_PER_THREAD}"
    return [f"const {int_type} lo_threads = omp_get_num_threads();",
            f"const {int_type} lo_chunks = {most} < {extent} ? {most} : {extent};",
            f"const {int_type} lo_chunk = lo_threads == 1 || lo_chunks < 1 ? {extent} : {chunk};",
            f"for ({int_type} lo_begin = {_claim()}; lo_begin < {extent}; lo_begin = {_claim()}) {{",
            f"    const {int_type} lo_end = lo_begin + lo_chunk < {extent} ? lo_begin + lo_chunk : {extent};",
            f"    {call};",
            "}"]


def _claim() -> str:
    """C claiming the next chunk: the counter's value before adding ``lo_chunk`` to it."""
    return f"__atomic_fetch_add(&{COUNTER}, lo_chunk, __ATOMIC_RELAXED)"
