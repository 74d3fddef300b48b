"""Elementwise C loops on several threads: ``threaded(...)`` wraps a serial loop over ``[0, n)`` in a
function that runs it on ``threads`` OpenMP threads (the threads loopopt's kernels run on), which claim
contiguous chunks of the range as they go (``codegen.claim``), each starting at a multiple of ``ALIGN``
elements; the caller picks the thread count with ``threads_for``: one per ``MIN_CHUNK`` elements at most.

The ONNX backend's DequantizeLinear and QuantizeLinear loops (``linear_quant``) and byte and pair lookups
(``bytemap``) ran on one thread while the kernels between them ran on all: in ResNet-18 and ResNet-50 int8
(QOperator) models such steps (with the numpy Add and Relu between them) are 42% and 44% of a one-thread
run's node time (2.56 of 6.15 ms, 12.7 of 28.7 ms, Intel Xeon with AMX), which caps two threads at 1.4x.
The dequantization of 802,816 codes (ResNet-18's 64x112x112 stem output) took 182 us on one thread and
82 us on two, of 200,704 codes 28 and 20 us, of 100,352 codes 14 and 22 us (minimum of 300 calls, the
machine's two cores busy with other work, this process at nice -15); through Python threads (a pool
thread taking half, numpy and cffi releasing the GIL) two threads were slower at every size (220 us at
802,816 codes), so the split is in C.
"""
from __future__ import annotations

from ..codegen import claim

MIN_CHUNK = 1 << 16     # elements a thread takes at least (fewer: the calling thread runs them all)
ALIGN = 64              # chunks start at multiples of this many elements (whole cache lines)
THREADS_PARAM = "int threads"


def threads_for(size: int, threads: int) -> int:
    """How many of ``threads`` threads a loop of ``size`` elements runs on: one per ``MIN_CHUNK``
    elements, at least one."""
    return max(1, min(threads, size // MIN_CHUNK))


def threaded(declaration: str, call: str, align: int = ALIGN) -> str:
    """The C definition of the function ``declaration`` (its parameters end in ``long n, int threads``)
    that runs ``call`` (the serial loop on the chunk ``[lo_begin, lo_end)``: its pointers offset by
    ``lo_begin``, its length ``lo_end - lo_begin``) on ``threads`` OpenMP threads, each claiming chunks
    as it goes (``claim``), or on the calling thread alone where ``threads`` is 1; chunks start at
    multiples of ``align`` iterations."""
    chunks = "\n".join(f"        {line}" for line in claim.claimed("long", "n", call, align))
    return f"""{declaration}
{{
    if (threads <= 1) {{
        const long lo_begin = 0, lo_end = n;
        {call};
        return;
    }}
    {claim.counter("long")}
    #pragma omp parallel num_threads(threads)
    {{
{chunks}
    }}
}}
"""


HEADER = "#include <omp.h>\n"
