"""Table-lookup formats of ternary weights (``weight_format("tl1" | "tl2")``): the groups, their packing
shared by every target.

TL1 takes pairs of weights ``(w0, w1)`` of one output channel and consecutive input channels: 9
values, stored as a 4-bit index ``3 (w0 + 1) + (w1 + 1)`` into a table of the 9 partial sums
``w0 x0 + w1 x1`` of the matching pair of activations. TL2 takes triples: 27 values, but a triple
and its negation share an entry up to the sign, so its table holds the 13 triples whose first
nonzero weight is +1 and (0, 0, 0) (14 entries, a 4-bit index) and a sign bit per triple and
output channel negates the entry (1.67 bits per weight).

Packed weights: per column block (32 output channels of one group, zero-padded), filter tap and
byte ``q`` of the input channels, the 32 channels' bytes, each holding the indices of groups
``2 q`` (low nibble) and ``2 q + 1`` (high nibble): ``[block][tap...][q][32]``, the input channels
zero-padded to whole bytes; TL2 then stores one uint32 of sign bits (bit ``c``: channel ``c`` of
the block) per block, tap and group: ``[block][tap...][2 q]``.

A table is 16 int16 entries per group of activations (32 bytes); each target prints the C of its
build and of one lookup step (``targets/lut.py``'s ``Lookup``: x86's in ``targets/x86/lut_c.py``,
NEON's in ``targets/neon/lut.py``).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

COLUMNS = 32        # output channels per column block: the int16 lanes of a 512-bit register
ENTRIES = 16        # int16 entries per group's table
INT16_MAX = 32767


@dataclass(frozen=True)
class LutFormat:
    """A table-lookup format: ``group`` weights per index, the weight groups of each table entry
    (``classes``), and whether a sign bit per group negates the entry (TL2's mirror symmetry)."""

    name: str
    group: int
    classes: tuple[tuple[int, ...], ...]
    signed: bool

    @property
    def bound(self) -> int:
        """The largest |table entry| (uint8 activations)."""
        return 255 * self.group

    @property
    def chunk(self) -> int:
        """Lookup steps (a byte: 2 groups each) summed in int16 before widening."""
        return INT16_MAX // self.bound // 2

    @property
    def channels_per_byte(self) -> int:
        """Input channels whose indices share one byte (two groups)."""
        return 2 * self.group

    def encode(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(class index, sign) of weight groups ``w[..., group]``."""
        codes = list(itertools.product((-1, 0, 1), repeat=self.group))
        index, sign = np.zeros(len(codes), np.uint8), np.zeros(len(codes), np.uint8)
        for i, code in enumerate(codes):
            negative = self.signed and next((v for v in code if v), 0) < 0
            index[i] = self.classes.index(tuple(-v for v in code) if negative else code)
            sign[i] = negative
        code = sum((w[..., j].astype(np.int64) + 1) * 3 ** (self.group - 1 - j) for j in range(self.group))
        return index[code], sign[code]


TRIPLES = tuple(t for t in itertools.product((-1, 0, 1), repeat=3) if next((v for v in t if v), 1) > 0)
FORMATS = {
    "tl1": LutFormat("tl1", 2, tuple(itertools.product((-1, 0, 1), repeat=2)), False),
    # the 13 triples whose first nonzero weight is +1, and (0, 0, 0) first: 14 entries and a sign bit
    "tl2": LutFormat("tl2", 3, ((0, 0, 0),) + tuple(t for t in TRIPLES if any(t)), True),
}


@dataclass(frozen=True)
class LutShape:
    """The packed extents of a ternary op in a table-lookup format: ``groups`` of ``cg`` input and
    ``kg`` output channels, filter ``taps`` per window."""

    fmt: LutFormat
    groups: int
    cg: int
    kg: int
    taps: tuple[int, ...]

    @property
    def blocks_per_group(self) -> int:
        return -(-self.kg // COLUMNS)

    @property
    def blocks(self) -> int:
        """Column blocks over all groups (a block never spans two groups)."""
        return self.groups * self.blocks_per_group

    @property
    def bytes(self) -> int:
        """Index bytes per column and tap (two groups of input channels each)."""
        return -(-self.cg // self.fmt.channels_per_byte)

    @property
    def index_bytes(self) -> int:
        return self.blocks * math.prod(self.taps) * self.bytes * COLUMNS

    @property
    def packed_bytes(self) -> int:
        """Bytes of the packed weights: the indices, then (signed formats) the sign words."""
        signs = self.blocks * math.prod(self.taps) * 2 * self.bytes * 4 if self.fmt.signed else 0
        return self.index_bytes + signs


def pack(shape: LutShape, w: np.ndarray) -> np.ndarray:
    """The packed bytes of ternary weights ``w[output channel, *taps, input channel of its group]``."""
    fmt, g, kpad = shape.fmt, shape.groups, shape.blocks_per_group * COLUMNS
    taps = math.prod(shape.taps)
    padded = np.zeros((g, kpad, taps, shape.bytes * fmt.channels_per_byte), dtype=np.int16)
    padded[:, :shape.kg, :, :shape.cg] = np.asarray(w, dtype=np.int16).reshape(g, shape.kg, taps, shape.cg)
    # [group, column, tap, group of channels], then two per byte: [group, column, tap, q]
    index, sign = fmt.encode(padded.reshape(g, kpad, taps, 2 * shape.bytes, fmt.group))
    nibbles = (index[..., 0::2] | (index[..., 1::2] << 4)).astype(np.uint8)
    blocked = nibbles.reshape(g, shape.blocks_per_group, COLUMNS, taps, shape.bytes)
    indices = blocked.transpose(0, 1, 3, 4, 2).reshape(-1)                             # [block, tap, q, col]
    if not fmt.signed:
        return np.ascontiguousarray(indices)
    bits = sign.reshape(g, shape.blocks_per_group, COLUMNS, taps, 2 * shape.bytes).astype(np.uint32)
    shifted = bits.transpose(0, 1, 3, 4, 2) << np.arange(COLUMNS, dtype=np.uint32)
    words = shifted.sum(axis=-1, dtype=np.uint32)
    return np.concatenate([indices, words.astype("<u4").reshape(-1).view(np.uint8)])
