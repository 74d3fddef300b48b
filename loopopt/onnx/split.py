"""Elementwise steps on the model's threads: ``Split(threads)`` runs a function of 1-D arrays of one
length over contiguous chunks of them, one chunk per thread (the calling thread takes the first), and
returns when all are done.

The ONNX backend's elementwise steps (DequantizeLinear and QuantizeLinear in compiled C loops, byte and
pair lookups, Relu, Clip and same-shape Add/Sub/Mul/Div in numpy) ran on one thread while the kernels
between them ran on all: in ResNet-18 and ResNet-50 int8 (QOperator) models they are 42% and 44% of a
one-thread run's node time (2.56 of 6.15 ms, 12.7 of 28.7 ms, Intel Xeon with AMX), so two threads
could at most make such a run 1.4x faster. Compiled calls through cffi and numpy's ufuncs release the
GIL, so Python threads run the chunks at once. A chunk has at least ``MIN_CHUNK`` elements (a
hand-off to a pool thread and back takes 15-25 us; a smaller array runs whole on the calling thread)
and starts at a multiple of ``ALIGN`` elements (whole cache lines for elements of up to 4 bytes: no
line written by two threads).
"""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import numpy as np

MIN_CHUNK = 1 << 16     # elements: fewer per thread and the array runs on the calling thread alone
ALIGN = 64              # elements: chunks start at multiples of this


@cache
def _pool(workers: int) -> ThreadPoolExecutor:
    """The threads that take the chunks after the first, one pool per size in a process."""
    return ThreadPoolExecutor(workers, thread_name_prefix="loopopt-split")


class Split:
    """Runs ``function(*chunks)`` over ``threads`` contiguous chunks of 1-D arrays of one length."""

    def __init__(self, threads: int = 1):
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
        self.threads = threads

    def bounds(self, size: int) -> list[tuple[int, int]]:
        """The ``[begin, end)`` of each chunk of ``size`` elements: as many as ``threads`` allows with at
        least ``MIN_CHUNK`` elements each (one where there are fewer), even to ``ALIGN`` elements."""
        parts = max(1, min(self.threads, size // MIN_CHUNK))
        cuts = [min(size, -(-size * k // parts // ALIGN) * ALIGN) for k in range(parts)] + [size]
        return list(zip(cuts[:-1], cuts[1:]))

    def __call__(self, function: Callable[..., object], *arrays: np.ndarray) -> None:
        """``function`` on each chunk of ``arrays`` (1-D, of one length), the first on this thread."""
        sizes = {array.size for array in arrays}
        if len(sizes) != 1 or any(array.ndim != 1 for array in arrays):
            raise ValueError(f"Split takes 1-D arrays of one length, got shapes "
                             f"{', '.join(str(a.shape) for a in arrays)}")
        (first, *rest) = self.bounds(sizes.pop())
        pool = _pool(self.threads - 1) if rest else None
        pending = [pool.submit(function, *(a[begin:end] for a in arrays)) for begin, end in rest]
        try:
            function(*(a[first[0]:first[1]] for a in arrays))
        finally:
            for future in pending:
                future.result()
