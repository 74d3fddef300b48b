"""Storage layouts of tensors, named with oneDNN format tags.

A tag lists a tensor's dimension letters from outermost to innermost. An upper-case
letter is a whole dimension (or its outer part when the dimension is blocked); a
number followed by the lower-case letter is an inner block of that dimension:
``NCHW16c`` stores ``C`` as ``C/16`` outer blocks with 16 channels innermost.
A blocked dimension is padded with zeros up to a multiple of its block.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from .buffers import aligned_copy, aligned_empty, zeros_follow
from .expr import Expr

Transposer = Callable[[np.ndarray, np.ndarray, int, int, int], None]   # (src, dst, batch, rows, cols)
_TOKEN = re.compile(r"(\d+)([a-z])|([A-Z])")


@dataclass(frozen=True)
class Layout:
    """A parsed format tag for a tensor with logical dimension letters ``letters``."""

    tag: str
    letters: str                      # logical order, e.g. "NCHW" or "OIHW"
    order: tuple[tuple[str, int], ...]  # storage dims: (letter, block) outer->inner; block 0 = whole/outer

    @staticmethod
    @lru_cache(maxsize=1024)
    def parse(tag: str, letters: str, tensor: str = "tensor") -> "Layout":
        """Parse ``tag`` for a tensor whose logical dims are ``letters``; ValueError if malformed
        (a Layout is immutable: each tag is parsed once)."""
        pos, order, blocks = 0, [], {}
        for match in _TOKEN.finditer(tag):
            if match.start() != pos:
                break
            pos = match.end()
            if match.group(3):
                order.append((match.group(3), 0))
            else:
                letter, size = match.group(2).upper(), int(match.group(1))
                if size < 1 or letter in blocks:
                    raise ValueError(f"layout {tag!r} of {tensor}: bad block {match.group(0)!r}")
                blocks[letter] = size
                order.append((letter, size))
        outer = [letter for letter, block in order if block == 0]
        if pos != len(tag) or sorted(outer) != sorted(letters) or any(b not in outer for b in blocks):
            raise ValueError(
                f"layout {tag!r} is not a valid format tag for {tensor} with dims {letters}: "
                f"use a permutation of {letters!r} optionally followed by blocks such as "
                f"'16{letters[1].lower()}' (e.g. {_examples(letters)})")
        return Layout(tag, letters, tuple(order))

    @lru_cache(maxsize=4096)       # noqa: B019 (layouts are few, immutable and parsed once: ``parse``)
    def block(self, letter: str) -> int:
        """Inner block size of ``letter`` (1 when not blocked)."""
        return next((b for name, b in self.order if name == letter and b), 1)

    @lru_cache(maxsize=4096)       # noqa: B019
    def storage_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Shape of the storage array for a tensor of logical ``shape``."""
        extent = dict(zip(self.letters, shape))
        return tuple(b if b else -(-extent[name] // self.block(name)) for name, b in self.order)

    def strides(self, shape: tuple[int, ...]) -> list[int]:
        """Element strides of the storage dims, outer to inner."""
        dims = self.storage_shape(shape)
        strides, acc = [], 1
        for size in reversed(dims):
            strides.append(acc)
            acc *= size
        return strides[::-1]

    def offset(self, index: tuple[Expr, ...], shape: tuple[int, ...]) -> Expr:
        """Element offset in storage of the logical ``index`` (an Expr per logical dim)."""
        by_letter = dict(zip(self.letters, index))
        total: Expr | int = 0
        for (letter, block), stride in zip(self.order, self.strides(shape)):
            size = self.block(letter)
            part = by_letter[letter] % block if block else by_letter[letter] // size
            total = total + part * stride
        return total

    def to_storage(self, array: np.ndarray, tail_bytes: int = 0, exact: bool = False,
                   into: np.ndarray | None = None, transpose: Transposer | None = None) -> np.ndarray:
        """Copy a logical-layout array into this layout (blocked dims zero-padded), in a
        64-byte-aligned buffer followed by ``tail_bytes`` readable zero bytes (``exact``: see
        ``buffers.aligned_zeros``), or in ``into``: a buffer an earlier call returned for an array of
        this shape, whose tail is still zero (where no dim is padded; else a new buffer). No copy
        where the array's memory already is this layout (aligned to its element, not necessarily to
        64 bytes: a kernel reads its inputs with unaligned vector loads) and ``tail_bytes`` zeros of
        its allocation follow it (``buffers.zeros_follow``: a kernel's output buffer; any array where
        the kernel reads nothing past it, as a caller's row-major matrix in a plain layout).
        ``transpose``: a compiled batched transpose (``targets/transpose.py``) that copies a contiguous
        array whose layout change is a ``rotation``; other copies are numpy's."""
        padded_shape, split_shape, perm = self._split(array.shape)
        padded = array
        if padded_shape != array.shape:       # a blocked dim padded with zeros to its block
            padded = np.zeros(padded_shape, dtype=array.dtype)
            padded[tuple(slice(0, n) for n in array.shape)] = array
        stored = padded.reshape(split_shape).transpose(perm)
        in_place = stored.flags.c_contiguous and stored.flags.aligned and not exact
        if in_place and zeros_follow(stored, tail_bytes):
            return stored       # the array's memory already is this layout (a kernel only reads its inputs)
        reuse = into is not None and padded is array and into.shape == stored.shape
        compiled = transpose is not None and padded.flags.c_contiguous
        rotation = self.rotation(padded_shape) if compiled else None
        if rotation is None:
            if reuse:
                np.copyto(into, stored)
                return into
            return aligned_copy(stored, tail_bytes, exact)
        out = into if reuse else aligned_empty(stored.shape, stored.dtype, tail_bytes, exact)
        transpose(padded, out, *rotation)
        return out

    @lru_cache(maxsize=4096)       # noqa: B019
    def rotation(self, shape: tuple[int, ...]) -> tuple[int, int, int] | None:
        """Where storing an array of logical ``shape`` (whole blocks) in this layout moves a run of its
        (split) dims past all the ones after it, leaving the ones before in place: ``(batch, rows,
        cols)``, the layout change as ``batch`` matrices of ``rows x cols`` transposed (NCHW -> NHWC:
        ``(N, C, H*W)``; NCHW -> NCHW16c: ``(N*C/16, 16, H*W)``); else None (no change is one either)."""
        _, split_shape, perm = self._split(shape)
        return rotation(perm, split_shape)

    @lru_cache(maxsize=4096)       # noqa: B019
    def _split(self, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """For a logical ``shape``: its shape padded to whole blocks, that shape with each blocked dim
        split in two (outer, block), and the permutation of the split dims into storage order."""
        padded_shape = tuple(-(-n // self.block(letter)) * self.block(letter)
                             for letter, n in zip(self.letters, shape))
        split_shape, split_axes = [], {}
        for letter, n in zip(self.letters, padded_shape):
            size = self.block(letter)
            split_axes[(letter, 0)] = len(split_shape)
            split_shape.append(n // size)
            if size > 1:
                split_axes[(letter, size)] = len(split_shape)
                split_shape.append(size)
        perm = tuple(split_axes[(name, b)] for name, b in self.order if (name, b) in split_axes)
        return padded_shape, tuple(split_shape), perm

    def storage_view(self, array: Any) -> Any | None:
        """A logical-layout array (numpy or CuPy) viewed in this layout's storage order by its own
        methods (``xp.ascontiguousarray`` of it is ``to_storage``'s copy, on its device), or None where
        a blocked dim would need zero padding."""
        padded_shape, split_shape, perm = self._split(tuple(array.shape))
        return None if padded_shape != tuple(array.shape) else array.reshape(split_shape).transpose(perm)

    def view(self, stored: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
        """The logical array of ``shape`` as a view of ``stored`` (no copy: its strides say the
        layout), or None when this layout blocks a dim (its blocks do not merge into one axis)."""
        if any(block for _, block in self.order):
            return None
        storage_pos = {letter: i for i, (letter, _) in enumerate(self.order)}
        return stored.reshape(self.storage_shape(shape)).transpose([storage_pos[n] for n in self.letters])

    def from_storage(self, stored: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """Inverse of ``to_storage``: the logical array of ``shape``."""
        return np.ascontiguousarray(self.logical_view(stored, shape))

    def logical_view(self, stored: Any, shape: tuple[int, ...]) -> Any:
        """The logical array of ``shape`` over ``stored`` (a numpy or CuPy array in this layout) by its
        own methods (transpose, reshape, slicing): a view where the layout allows, on its device."""
        split_axes, storage_pos = [], {key: i for i, key in enumerate(self.order)}
        padded_shape = []
        for letter, n in zip(self.letters, shape):
            size = self.block(letter)
            split_axes.append(storage_pos[(letter, 0)])
            if size > 1:
                split_axes.append(storage_pos[(letter, size)])
            padded_shape.append(-(-n // size) * size)
        logical = stored.transpose(split_axes).reshape(padded_shape)
        return logical[tuple(slice(0, n) for n in shape)]


def rotation(perm: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, int, int] | None:
    """Where storing an array of ``shape`` with its axes in the order ``perm`` moves a run of its axes past
    all the ones after it, leaving the ones before in place: ``(batch, rows, cols)``, the change as
    ``batch`` matrices of ``rows x cols`` transposed; else None (no change is one either)."""
    kept = next((p for p, axis in enumerate(perm) if axis != p), None)
    if kept is None:
        return None
    moved = perm[kept]                         # the first axis after the run that moves
    if tuple(perm[kept:]) != tuple(range(moved, len(perm))) + tuple(range(kept, moved)):
        return None
    return math.prod(shape[:kept]), math.prod(shape[kept:moved]), math.prod(shape[moved:])


def moved_last(letters: str, axis: int) -> str:
    """The format tag of dims ``letters`` with the dim at ``axis`` moved innermost (``NCHW``, 1: ``NHWC``)."""
    return letters[:axis] + letters[axis + 1:] + letters[axis]


def _examples(letters: str) -> str:
    if letters == "NCHW":
        return "NCHW, NHWC, NCHW16c"
    if letters == "OIHW":
        return "OIHW, HWIO, OHWI, OIHW16i16o"
    return ", ".join([letters, letters[::-1]])
