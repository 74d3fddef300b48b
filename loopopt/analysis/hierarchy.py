"""Memory-hierarchy model: traffic and energy per level predicted from a ReuseProfile.

Each level (registers, L1, L2, L3) is modelled as a fully associative LRU cache
of its capacity, so level ``i`` misses exactly the accesses with reuse distance >=
its capacity in items, and those misses are the accesses of level ``i + 1``; DRAM
serves the last level's misses. Capacities come from
``/sys/devices/system/cpu/cpu0/cache`` (``Machine.detect``), falling back to
``DEFAULT_CACHES``. At element granularity a capacity holds ``size / 4`` items.

Energy (``ENERGY_PJ``, picojoules per 64-bit access, Horowitz ISSCC 2014, 45 nm):
8 KiB SRAM 10 pJ, 32 KiB 20 pJ, 1 MiB 100 pJ, DRAM 1.3-2.6 nJ (1.95 nJ used);
register file 1 pJ and L3 (32 MiB) 200 pJ are extrapolations, not in the paper.
Arithmetic per MAC: fp32 multiply 3.7 + add 0.9 pJ; int8 multiply 0.2 + int32 add 0.1 pJ.
Energy of a level = bytes it delivers / 8 * its per-access energy. Pass
``energy={...}`` to override any entry.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..machine import SYSFS_CACHE, os_caches, this_cpu
from .items import check_capacity, element_bytes
from .setassoc import simulate_caches

if TYPE_CHECKING:
    from .profile import ReuseProfile

ENERGY_PJ = {"registers": 1.0, "L1": 20.0, "L2": 100.0, "L3": 200.0, "DRAM": 1950.0,
             "mac_float32": 4.6, "mac_int8": 0.3}


@dataclass(frozen=True)
class CacheLevel:
    """One level: total size in bytes, associativity and line size."""

    name: str
    size: int
    ways: int
    line_size: int = 64

    def __post_init__(self):
        check_capacity(self.size, f"{self.name} size")
        check_capacity(self.ways, f"{self.name} ways")

    @property
    def sets(self) -> int:
        return max(self.size // (self.ways * self.line_size), 1)

    def capacity_items(self, profile: ReuseProfile) -> int:
        """Capacity in the profile's items (lines, or 4-byte elements)."""
        item = profile.line_size if profile.granularity == "line" else 4
        return max(self.size // item, 1)


DEFAULT_CACHES = (CacheLevel("L1", 32 << 10, 8), CacheLevel("L2", 1 << 20, 16),
                  CacheLevel("L3", 32 << 20, 16))


@dataclass(frozen=True)
class Machine:
    """Register file bytes (level 0) and the data caches, innermost first."""

    register_bytes: int = 32 * 64
    caches: tuple[CacheLevel, ...] = DEFAULT_CACHES

    @staticmethod
    def detect(root: Path = SYSFS_CACHE) -> Machine:
        """This machine's data caches from sysfs (``loopopt.machine.os_caches``) and its vector
        register file (AVX-512: 32 x 64 B, else 16 x 32 B); the defaults when sysfs is unreadable."""
        registers = 32 * 64 if "avx512f" in this_cpu().flags else 16 * 32
        levels = tuple(CacheLevel(c.name, c.size, c.ways, c.line_size) for c in os_caches(root))
        return Machine(registers, levels or DEFAULT_CACHES)


@dataclass(frozen=True)
class LevelTraffic:
    """Predicted traffic of one level; ``set_assoc_misses`` from simulating its geometry (L1/L2)."""

    name: str
    capacity_items: int | None
    accesses: int
    misses: int
    bytes: int
    energy_pj: float
    set_assoc_misses: int | None = None

    @property
    def conflict_misses(self) -> int | None:
        """Set-associative minus fully associative misses (None if not simulated)."""
        return None if self.set_assoc_misses is None else self.set_assoc_misses - self.misses


@dataclass(frozen=True)
class Hierarchy:
    """Per-level predictions plus the arithmetic energy of the op."""

    levels: tuple[LevelTraffic, ...]
    compute_energy_pj: float

    @property
    def energy_pj(self) -> float:
        return self.compute_energy_pj + sum(level.energy_pj for level in self.levels)

    @property
    def dram_bytes(self) -> int:
        return self.levels[-1].bytes

    def table(self) -> str:
        rows = [(f"{'level':>9} {'capacity':>10} {'accesses':>12} {'misses':>12} {'set-assoc':>12} "
                f"{'conflict':>10} {'bytes':>14} {'energy uJ':>10}")]
        for lv in self.levels:
            cap = "" if lv.capacity_items is None else lv.capacity_items
            sa = "" if lv.set_assoc_misses is None else lv.set_assoc_misses
            conflict = "" if lv.conflict_misses is None else lv.conflict_misses
            rows.append(f"{lv.name:>9} {cap:>10} {lv.accesses:>12} {lv.misses:>12} {sa:>12} {conflict:>10} "
                        f"{lv.bytes:>14} {lv.energy_pj / 1e6:>10.2f}")
        rows.append(f"{'compute':>9} {'':>10} {'':>12} {'':>12} {'':>12} {'':>10} {'':>14} "
                    f"{self.compute_energy_pj / 1e6:>10.2f}")
        rows.append(f"total energy {self.energy_pj / 1e6:.2f} uJ")
        return "\n".join(rows)


def _delivered_bytes(profile: ReuseProfile, capacity: int | None) -> int:
    """Bytes delivered by the level that serves the accesses with distance >= ``capacity``
    (every access when None): lines at line granularity, elements otherwise."""
    total = 0
    for t in profile.tensors:
        count = profile.accesses_of(t) if capacity is None else profile.misses(capacity, t)
        size = profile.line_size if profile.granularity == "line" and capacity is not None \
            else element_bytes(profile.schedule.op, t)
        total += count * size
    return total


def predict(profile: ReuseProfile, machine: Machine | None = None, energy: dict | None = None,
            set_associative: bool = True) -> Hierarchy:
    """Accesses, misses, bytes and energy per level; L1/L2 also simulated set-associatively
    (line granularity with the caches' line size only)."""
    machine = machine or Machine.detect()
    table = {**ENERGY_PJ, **(energy or {})}
    levels = (CacheLevel("registers", machine.register_bytes, 1),) + machine.caches
    simulated = {}
    if set_associative and profile.granularity == "line":
        l12 = [c for c in machine.caches[:2] if c.line_size == profile.line_size]
        misses = simulate_caches(profile.schedule, [(c.sets, c.ways) for c in l12], profile.line_size)
        simulated = {c.name: int(row.sum()) for c, row in zip(l12, misses)}
    result, accesses, served_by_previous = [], profile.accesses, None
    for level in levels:
        cap = level.capacity_items(profile)
        misses = profile.misses(cap)
        delivered = _delivered_bytes(profile, served_by_previous)
        result.append(LevelTraffic(level.name, cap, accesses, misses, delivered,
                                   delivered / 8 * table.get(level.name, table["L3"]),  # L4+ priced as L3
                                   simulated.get(level.name)))
        accesses, served_by_previous = misses, cap
    dram = _delivered_bytes(profile, served_by_previous)
    result.append(LevelTraffic("DRAM", None, accesses, 0, dram, dram / 8 * table["DRAM"]))
    mac = "mac_int8" if profile.schedule.op.quant is not None else "mac_float32"
    return Hierarchy(tuple(result), profile.schedule.op.macs * table[mac])


def comparison_row(profile: ReuseProfile, timing=None, machine: Machine | None = None,
                   set_associative: bool = False) -> dict:
    """One schedule's row of a comparison table: time, GFLOP/s and % of peak from ``timing``
    (a ``lo.measure`` Timing, optional), accesses, misses per level, DRAM bytes and energy."""
    hierarchy = profile.hierarchy(machine, set_associative=set_associative)
    row = {} if timing is None else {"time_s": timing.median, "gflops": timing.gflops,
                                     "percent_of_peak": timing.percent_of_peak}
    row["accesses"] = profile.accesses
    row.update({f"{level.name}_misses": level.misses for level in hierarchy.levels[:-1]})
    row.update({f"{level.name}_conflict_misses": level.conflict_misses for level in hierarchy.levels
                if level.conflict_misses is not None})
    row["dram_bytes"] = hierarchy.dram_bytes
    row["energy_uj"] = hierarchy.energy_pj / 1e6
    return row
