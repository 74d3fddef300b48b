"""ReuseProfile: reuse-distance histograms of a schedule and what follows from them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..schedule import Schedule
from .items import ItemSpace, check_capacity


@dataclass(frozen=True, eq=False)
class ReuseProfile:
    """Histograms of reuse distances per tensor of ``schedule``'s trace.

    ``counts[p, d]`` is the number of accesses to the tensor at trace position ``p``
    (input 0, input 1, output) with distance ``d``; the last column counts cold accesses.
    """

    schedule: Schedule
    space: ItemSpace
    counts: np.ndarray
    engine: str
    _cumulative: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def granularity(self) -> str:
        return self.space.granularity

    @property
    def line_size(self) -> int:
        return self.space.line_size

    @property
    def tensors(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.space.tensors)

    def _row(self, tensor: Optional[str]) -> np.ndarray:
        if tensor is None:
            return self.counts.sum(axis=0)
        if tensor not in self.tensors:
            raise ValueError(f"tensor={tensor!r} is not in this trace: choose one of "
                             f"{', '.join(self.tensors)} or None for all")
        return self.counts[self.tensors.index(tensor)]

    def accesses_of(self, tensor: Optional[str] = None) -> int:
        """Accesses to ``tensor`` (all tensors when None)."""
        return int(self._row(tensor).sum())

    @property
    def accesses(self) -> int:
        return self.accesses_of(None)

    def cold(self, tensor: Optional[str] = None) -> int:
        """Cold (first) accesses."""
        return int(self._row(tensor)[-1])

    def histogram(self, tensor: Optional[str] = None) -> dict[float, int]:
        """``{distance: count}`` with ``math.inf`` for cold accesses."""
        row = self._row(tensor)
        hist: dict[float, int] = {int(d): int(row[d]) for d in np.flatnonzero(row[:-1])}
        if row[-1]:
            hist[math.inf] = int(row[-1])
        return hist

    def _hits_below(self, tensor: Optional[str]) -> np.ndarray:
        """``h[c]``: accesses with finite distance < c, for c = 0 .. items."""
        if tensor not in self._cumulative:
            self._cumulative[tensor] = np.concatenate(([0], np.cumsum(self._row(tensor)[:-1])))
        return self._cumulative[tensor]

    def misses(self, capacity_lines: int, tensor: Optional[str] = None) -> int:
        """Misses of a fully associative LRU cache of ``capacity_lines`` items: distance >= capacity."""
        capacity = check_capacity(capacity_lines)
        hits = self._hits_below(tensor)
        return self.accesses_of(tensor) - int(hits[min(capacity, len(hits) - 1)])

    def miss_ratio_curve(self, tensor: Optional[str] = None) -> tuple[np.ndarray, np.ndarray]:
        """``(capacities, miss ratios)`` for every capacity from 1 item to the whole item space."""
        hits = self._hits_below(tensor)
        total = max(self.accesses_of(tensor), 1)
        return np.arange(1, len(hits)), (total - hits[1:]) / total

    def median_distance(self, tensor: Optional[str] = None) -> float:
        """Median reuse distance (cold counts as infinite)."""
        row = self._row(tensor)
        index = int(np.searchsorted(np.cumsum(row), (row.sum() + 1) // 2))
        return math.inf if index == len(row) - 1 else float(index)

    def hierarchy(self, machine=None, energy=None, set_associative: bool = True):
        """Predicted traffic and energy per memory level (see ``hierarchy.predict``).

        ``hierarchy`` and ``summary`` are lazy facades: the hierarchy model sits above the
        profile it reads, so it is imported here."""
        from .hierarchy import predict
        return predict(self, machine, energy, set_associative)

    def summary(self, machine=None) -> str:
        """Accesses, cold misses, median distance per tensor and misses at the machine's caches."""
        from .hierarchy import Machine
        machine = machine or Machine.detect()
        unit = "lines" if self.granularity == "line" else "elements"
        levels = [(c.name, c.capacity_items(self)) for c in machine.caches]
        head = (f"reuse profile ({self.granularity}, {self.line_size} B lines, engine {self.engine}) of "
                f"{self.schedule.op!r}\n{'tensor':>6} {'accesses':>12} {'cold':>10} {'median':>8} "
                + " ".join(f"{name + ' miss':>12}" for name, _ in levels))
        rows = [head]
        for tensor in self.tensors + (None,):
            median = self.median_distance(tensor)
            rows.append(f"{tensor or 'all':>6} {self.accesses_of(tensor):>12} {self.cold(tensor):>10} "
                        f"{median:>8g} " + " ".join(f"{self.misses(cap, tensor):>12}" for _, cap in levels))
        rows.append("capacities: " + ", ".join(f"{name} {cap} {unit}" for name, cap in levels))
        return "\n".join(rows)
