"""Storage buffers for kernels: zero-filled and aligned to a cache line; the memory they may take.

numpy's large arrays start 16 bytes into a page, so every 64-byte vector load of an
AVX-512 kernel would straddle two cache lines; kernels' buffers start on a line instead.
An ``exact`` buffer (for sanitized kernels) is not aligned but ends exactly where the
kernel may stop reading, so AddressSanitizer sees any read past it.

Before allocating large buffers, callers compare their estimate with the memory this
machine has available (``check_memory``): ``MemAvailable`` of ``/proc/meminfo``, or
``$LOOPOPT_MEMORY_LIMIT`` bytes when set, and raise ``MemoryLimitError`` naming the sizes.
Without ``$LOOPOPT_MEMORY_LIMIT``, requests under ``UNCHECKED_BYTES`` are not checked.
"""
from __future__ import annotations

import ctypes
import math
import os
from collections.abc import Mapping

import numpy as np

ALIGNMENT = 64     # bytes: one cache line, one AVX-512 vector
MEMORY_ENV = "LOOPOPT_MEMORY_LIMIT"
MEMINFO = "/proc/meminfo"
UNCHECKED_BYTES = 64 * 2**20   # smaller requests skip reading MemAvailable (30 us) unless a limit is set


class MemoryLimitError(MemoryError):
    """A call would need more memory than this machine has available (the message names the sizes)."""


def _aligned(shape: tuple[int, ...], dtype, tail_bytes: int, exact: bool, allocate) -> np.ndarray:
    """An array of ``shape`` in a buffer from ``allocate`` (np.zeros or np.empty) whose data starts on
    a 64-byte boundary, followed by ``tail_bytes`` readable zero bytes."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = allocate(nbytes + tail_bytes + (0 if exact else ALIGNMENT), dtype=np.uint8)
    start = 0 if exact else -raw.ctypes.data % ALIGNMENT
    raw[start + nbytes:start + nbytes + tail_bytes] = 0
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def aligned_zeros(shape: tuple[int, ...], dtype, tail_bytes: int = 0, exact: bool = False) -> np.ndarray:
    """A zero array of ``shape`` whose data starts on a 64-byte boundary, followed by
    ``tail_bytes`` readable zero bytes (for kernels that read a little past the end).
    ``exact``: no alignment, and the allocation ends right after those ``tail_bytes``."""
    return _aligned(shape, dtype, tail_bytes, exact, np.zeros)


def aligned_empty(shape: tuple[int, ...], dtype, tail_bytes: int = 0, exact: bool = False) -> np.ndarray:
    """An uninitialized array placed as ``aligned_zeros`` places its zeros (the tail bytes zero)."""
    return _aligned(shape, dtype, tail_bytes, exact, np.empty)


def aligned_copy(array: np.ndarray, tail_bytes: int = 0, exact: bool = False) -> np.ndarray:
    """A C-contiguous copy of ``array`` placed as ``aligned_zeros`` places its zeros (the copy written
    once: no zero fill before it)."""
    copy = aligned_empty(array.shape, array.dtype, tail_bytes, exact)
    copy[...] = array
    return copy


def aligned_empty_like(array: np.ndarray, dtype=None, order: tuple[int, ...] | None = None) -> np.ndarray:
    """An uninitialized array of ``array``'s shape (and dtype, unless given) stored with its axes in
    ``array``'s memory order (by stride; ``order``: in that order, outer to inner), starting on a 64-byte
    boundary and followed by 64 zero bytes: a kernel that reads a little past the end of its input reads
    it without a copy (``zeros_follow``)."""
    if order is None:
        order = np.argsort(array.strides, kind="stable")[::-1]       # the axes outer to inner in memory
    stored = _aligned(tuple(array.shape[axis] for axis in order), dtype or array.dtype, ALIGNMENT, False,
                      np.empty)
    return stored.transpose(np.argsort(order))


def memory_axes(array: np.ndarray) -> list[int]:
    """``array``'s axes from outer to inner in memory (by stride; a tie: the later axis inner)."""
    strides = array.strides          # a few axes: sorted in Python
    return sorted(range(array.ndim), key=lambda axis: (-strides[axis], -axis))


def carve(memory: np.ndarray, offset: int, nbytes: int) -> np.ndarray:
    """The ``nbytes`` bytes of the uint8 array ``memory`` from ``offset`` as an array of their own: a
    kernel asking what follows it (``zeros_follow``) sees these bytes' end as its allocation's end."""
    return np.frombuffer(memoryview(memory)[offset:offset + nbytes], np.uint8)


def placed(raw: np.ndarray, shape: tuple[int, ...], dtype) -> np.ndarray:
    """A C-contiguous array of ``shape`` and ``dtype`` at the start of the bytes ``raw`` (its buffer; the
    bytes after it are its tail)."""
    dtype = np.dtype(dtype)
    return raw[:math.prod(shape) * dtype.itemsize].view(dtype).reshape(shape)


class KeptArray:
    """The output buffer of a step that writes one on every run: ``like(array, dtype, order=None)`` is
    ``aligned_empty_like(array, dtype, order)`` on the first call and whenever ``array``'s shape,
    strides, the dtype or the order change, else the same memory as last time (so a plan may repeat the
    step's C call on the same arguments: ``onnx.plan.Plan.repeats``). ``held`` and ``move``: the buffer,
    and its move into memory a plan shares between steps (``onnx.arena``)."""

    def __init__(self) -> None:
        self._key: tuple = ()
        self._array: np.ndarray | None = None

    def like(self, array: np.ndarray, dtype, order: tuple[int, ...] | None = None) -> np.ndarray:
        key = (array.shape, array.strides, array.dtype, np.dtype(dtype), order)
        if key != self._key or self._array is None:
            self._key, self._array = key, aligned_empty_like(array, dtype, order)
        return self._array

    def held(self) -> tuple[np.ndarray, int] | None:
        """The buffer the last call gave, C-contiguous (its axes in memory order), and the zero bytes
        after it that readers may read; None before the first call."""
        if self._array is None:
            return None
        return self._array.transpose(memory_axes(self._array)), ALIGNMENT

    def move(self, buffer: np.ndarray) -> None:
        """Give ``buffer`` from now on (``held``'s shape and dtype, followed by as many zero bytes)."""
        assert self._array is not None
        self._array = buffer.transpose(np.argsort(memory_axes(self._array)))


def zeros_follow(array: np.ndarray, count: int) -> bool:
    """Whether the ``count`` bytes after the last byte of the C-contiguous ``array`` are zeros inside the
    allocation it views (a kernel's buffer: ``aligned_zeros`` leaves zeros after its data), so that a
    kernel reading that far past its end may read ``array`` itself."""
    if count == 0:
        return True
    owner = array
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    if not owner.flags.c_contiguous:
        return False
    end, first = array.ctypes.data + array.nbytes, owner.ctypes.data
    if end < first or end + count > first + owner.nbytes:
        return False
    return ctypes.string_at(end, count) == bytes(count)      # inside the allocation: readable


def _size(value: int) -> str:
    return f"{value / 1e9:.2f} GB" if value >= 1e8 else f"{value / 1e6:.2f} MB"


def available_memory() -> tuple[int, str]:
    """Bytes loopopt may allocate and where that figure comes from: ``$LOOPOPT_MEMORY_LIMIT``
    (an integer number of bytes; ValueError naming a bad value), else ``MemAvailable`` of
    /proc/meminfo (no limit, ``sys.maxsize``, where it cannot be read)."""
    configured = os.environ.get(MEMORY_ENV)
    if configured is not None:
        if not configured.strip().isdigit():
            raise ValueError(f"{MEMORY_ENV}={configured!r} is not a number of bytes: set it to a "
                             f"non-negative integer (e.g. {MEMORY_ENV}=8000000000) or unset it")
        return int(configured), f"{MEMORY_ENV}"
    try:
        with open(MEMINFO) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, f"MemAvailable in {MEMINFO}"
    except (OSError, ValueError, IndexError):
        pass
    return np.iinfo(np.int64).max, "no limit known"


def check_memory(what: str, parts: Mapping[str, int]) -> None:
    """MemoryLimitError if the bytes of ``parts`` (named for the message) exceed ``available_memory()``."""
    need = sum(parts.values())
    if need < UNCHECKED_BYTES and MEMORY_ENV not in os.environ:
        return
    available, source = available_memory()
    if need > available:
        detail = ", ".join(f"{name} {_size(size)}" for name, size in parts.items() if size)
        raise MemoryLimitError(f"{what} needs {_size(need)} ({detail}) but {_size(available)} is available "
                               f"({source}; set {MEMORY_ENV}=<bytes> to change the limit)")
