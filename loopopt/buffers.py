"""Storage buffers for kernels: zero-filled and aligned to a cache line.

numpy's large arrays start 16 bytes into a page, so every 64-byte vector load of an
AVX-512 kernel would straddle two cache lines; kernels' buffers start on a line instead.
"""
from __future__ import annotations

import numpy as np

ALIGNMENT = 64     # bytes: one cache line, one AVX-512 vector


def aligned_zeros(shape: tuple[int, ...], dtype, tail_bytes: int = 0) -> np.ndarray:
    """A zero array of ``shape`` whose data starts on a 64-byte boundary, followed by
    ``tail_bytes`` readable zero bytes (for kernels that read a little past the end)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.zeros(nbytes + tail_bytes + ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def aligned_copy(array: np.ndarray, tail_bytes: int = 0) -> np.ndarray:
    """A C-contiguous, 64-byte-aligned copy of ``array`` (see ``aligned_zeros``)."""
    copy = aligned_zeros(array.shape, array.dtype, tail_bytes)
    copy[...] = array
    return copy
