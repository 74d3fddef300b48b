"""Activation buffers shared by liveness: after a plan's first run, the buffers its steps write on every
run (a kernel's output storage, a pool's, an elementwise step's kept buffer: ``Holder``) move into one
block of memory, each at an offset no buffer alive at the same time overlaps, so that a model's working
set is its largest live values, not the sum of all of them.

A buffer is alive from the first step that writes it to the last step that reads any value in its memory
(a Relu in place on it, a Flatten viewing it, a shortcut that a later conv writes over: the same memory),
as the first run saw the values' memory. Buffers the model's outputs lie in keep memory of their own. The
offsets are the largest-first best fit (a buffer takes the smallest gap, among the buffers alive with
it, that holds it): the large activations of a stage share a few places that the next block finds in
the cache. Each buffer is followed by the zero bytes its readers may read past its end (a kernel's
read-ahead: ``buffers.zeros_follow``), carved as the end of an allocation of its own; where an earlier
buffer's data lies over those bytes, the plan zeroes them before the step that writes the buffer
(``Arena.clears``).
"""
from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..buffers import ALIGNMENT, aligned_zeros, carve, placed


class Holder(Protocol):
    """What holds a step's output buffer: ``held()`` the buffer (C-contiguous) and the zero bytes its
    readers may read after it, or None (nothing to share); ``move(buffer)``: write into ``buffer`` (the
    same shape and dtype, followed by as many zero bytes) from now on."""

    def held(self) -> tuple[np.ndarray, int] | None: ...

    def move(self, buffer: np.ndarray) -> None: ...


@dataclass(frozen=True)
class Buffer:
    """One buffer of the first run: its holder, its data and tail bytes, and the steps it lives over."""

    holder: Holder
    shape: tuple[int, ...]
    dtype: np.dtype
    tail: int
    first: int        # the step that writes it first
    last: int         # the last step reading (or writing) a value in its memory

    @property
    def nbytes(self) -> int:
        """Bytes of its data."""
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def size(self) -> int:
        """Bytes it takes: its data and tail, to a whole number of cache lines."""
        return -(-(self.nbytes + self.tail) // ALIGNMENT) * ALIGNMENT

    def meets(self, other: Buffer) -> bool:
        """Whether the two are alive at one step."""
        return self.first <= other.last and other.first <= self.last


Call = tuple[Callable[..., None], tuple]


@dataclass(frozen=True)
class Arena:
    """The shared memory, the buffers moved into it at their offsets, the bytes those buffers took apart
    (``apart``), and per step the calls that zero a tail before it (``clears``)."""

    memory: np.ndarray
    buffers: tuple[Buffer, ...]
    offsets: tuple[int, ...]
    apart: int
    clears: dict[int, tuple[Call, ...]]


def root(array: np.ndarray) -> np.ndarray:
    """The array whose memory ``array`` views (itself where it owns its memory)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def offsets(buffers: Sequence[Buffer]) -> list[int]:
    """Each buffer's offset, cache-line aligned: largest first, each in the smallest gap between the
    buffers placed already and alive with it that holds it (else after the last of them)."""
    placed_at: dict[int, int] = {}
    for index in sorted(range(len(buffers)), key=lambda i: (-buffers[i].size, buffers[i].first)):
        buffer = buffers[index]
        taken = sorted((placed_at[i], placed_at[i] + buffers[i].size) for i in placed_at
                       if buffers[i].meets(buffer))
        best, start = None, 0
        for low, high in taken:
            gap = low - start
            if gap >= buffer.size and (best is None or gap < best[0]):
                best = (gap, start)
            start = max(start, high)
        placed_at[index] = start if best is None else best[1]
    return [placed_at[i] for i in range(len(buffers))]


def share(holders: Sequence[Holder], reads: Sequence[Sequence[np.ndarray]],
          writes: Sequence[Sequence[np.ndarray]], kept: Sequence[np.ndarray]) -> Arena:
    """Move the buffers of ``holders`` into one arena: those the first run wrote (``reads[i]`` and
    ``writes[i]``: the arrays step ``i`` read and wrote in it), but those in whose memory a value of
    ``kept`` (the model's outputs) lies."""
    spans: dict[int, list[int]] = {}      # id of a memory's root -> [first step, last step] touching it
    for index, arrays in enumerate(writes):
        for array in arrays:
            spans.setdefault(id(root(array)), [index, index])[1] = index
    for index, arrays in enumerate(reads):
        for array in arrays:
            span = spans.get(id(root(array)))
            if span is not None:
                span[1] = max(span[1], index)
    outputs = {id(root(array)) for array in kept}
    buffers = []
    for holder in holders:
        held = holder.held()
        span = None if held is None else spans.get(id(root(held[0])))
        if span is not None and id(root(held[0])) not in outputs:
            buffers.append(Buffer(holder, held[0].shape, held[0].dtype, held[1], *span))
    places = offsets(buffers)
    memory = aligned_zeros((max((o + b.size for o, b in zip(places, buffers)), default=0),), np.uint8)
    clears: dict[int, list[Call]] = {}
    for buffer, offset in zip(buffers, places):
        end = offset + buffer.nbytes
        if any(o < end + buffer.tail and end < o + b.nbytes for o, b in zip(places, buffers)):
            address = memory.ctypes.data + end
            clears.setdefault(buffer.first, []).append((ctypes.memset, (address, 0, buffer.tail)))
        buffer.holder.move(placed(carve(memory, offset, buffer.nbytes + buffer.tail),
                                  buffer.shape, buffer.dtype))
    return Arena(memory, tuple(buffers), tuple(places), sum(b.size for b in buffers),
                 {step: tuple(calls) for step, calls in clears.items()})
