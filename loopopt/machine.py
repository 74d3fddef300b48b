"""This machine: its fingerprint, its measured profile, and the provenance of results.

The profile holds one core's peak per ISA (fp32 FMA, int8 dot and bf16 ``vdpbf16ps`` throughput; AMX tiles
for int8), the read bandwidth of each memory level (L1, L2, L3, DRAM) and the cache sizes the OS reports. It
is measured once and cached as JSON in the kernel cache directory (``$LOOPOPT_CACHE_DIR``,
default ``~/.cache/loopopt``), in a file named after the machine fingerprint, the C compiler
and the profile format, written atomically; a file that cannot be read or does not
validate is measured again, never trusted. ``machine_profile(remeasure=True)`` (``loopopt
machine --remeasure``) replaces it.

The fingerprint (16 hex digits) hashes the CPU vendor, model name, family/model/stepping,
feature flags, logical CPU count and cache geometry: what decides which schedule is fastest.
The compiler is not part of it (it keys the profile file instead), so results recorded on
this machine keep matching after a compiler update.

The CPU key (``cpu_key()``, e.g. ``intel-6-143-avx2-avx512-vnni-bf16-amx``) is coarser: vendor, family,
model and the instruction sets loopopt generates code for. Machines with one key run the same kernels
on the same cores (core count, cache sizes of the part and stepping aside), so a schedule searched on one
is the answer on the others: stored schedules are kept per CPU key (``schedules/<key>/``).
"""
from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from .atomic import host_lock, write_text_atomically
from .cbuild import (
    CACHE_ENV,
    DEFAULT_OPT_LEVEL,
    BuildError,
    cache_dir,
    compiler,
    compiler_identity,
    opt_level,
)
from .targets.x86.isa import visible_flags
from .targets.x86.profile import KEY_FEATURES, measure_peaks, peak_isas, peak_of, read_kernel, timed

PROFILE_FORMAT = 6          # 2: bfloat16 peaks; 3: the int8 peaks include the AMX tile peak (TILE_ISA)
                            # where the CPU has it; 4: so do the bfloat16 peaks; 5: each bandwidth has its
                            # median, runs and the other processes' CPU share, the DRAM buffer is 4x the
                            # last cache; 6: bandwidths from short calls (``BANDWIDTH_CALL``), a profile
                            # measured under load ranks as one measured idle
SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
DTYPES = ("float32", "int8", "bfloat16")
UNITS = ("GFLOP/s", "GOP/s", "GFLOP/s")
VENDORS = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}
OTHERS_LIMIT = 0.25        # other processes' share of the machine's CPU time above which a run is noisy
BANDWIDTH_CALL = 0.002     # s: each timed read call reads about this long: within a time slice, so that on a
                           # shared machine the best call runs uncut (see ``measure_bandwidth``)
BANDWIDTH_RUNS = 25        # timed calls per level: their best and their median are kept
TYPICAL_CACHE_BYTES = {"L1": 32 << 10, "L2": 1 << 20, "L3": 0}   # a data cache the OS does not report
DRAM_CACHES = 4            # the DRAM buffer is this many times the last cache: well beyond it, as a cache
                           # whose replacement resists streaming keeps part of a buffer a little larger
DRAM_MIN = 64 << 20        # bytes: the DRAM buffer is at least this


# --- identity ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CpuIdentity:
    """What /proc/cpuinfo says about the first CPU, and the logical CPU count."""

    vendor: str
    model: str
    family: str
    model_number: str
    stepping: str
    flags: frozenset[str]
    cpus: int


def parse_cpuinfo(text: str, cpus: int) -> CpuIdentity:
    """The identity in the first processor block of a /proc/cpuinfo ``text``."""
    fields: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return CpuIdentity(fields.get("vendor_id", "unknown"),
                       fields.get("model name", platform.processor() or "unknown"),
                       fields.get("cpu family", "?"), fields.get("model", "?"), fields.get("stepping", "?"),
                       frozenset(fields.get("flags", "").split()), cpus)


@dataclass(frozen=True)
class Cache:
    """A data or unified cache: total bytes, associativity, line bytes, logical CPUs sharing it."""

    name: str
    size: int
    ways: int
    line_size: int
    shared_cpus: int


def os_caches(root: Path = SYSFS_CACHE) -> tuple[Cache, ...]:
    """The data and unified caches of cpu0 from sysfs, innermost first (``()`` if unreadable)."""
    try:
        caches = sorted(_sysfs_cache(d) for d in root.glob("index*")
                        if (d / "type").read_text().strip() != "Instruction")
    except (OSError, ValueError):
        return ()
    return tuple(Cache(f"L{level}", size, ways, line, shared) for level, size, ways, line, shared in caches)


def _sysfs_cache(index: Path) -> tuple[int, int, int, int, int]:
    def read(name: str) -> str:
        return (index / name).read_text().strip()
    size = read("size")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
    try:
        shared = _cpu_count(read("shared_cpu_list"))
    except OSError:            # not every kernel reports it: count the cache as private
        shared = 1
    return (int(read("level")), int(size.rstrip("KMG")) * scale, int(read("ways_of_associativity")),
            int(read("coherency_line_size")), shared)


def _cpu_count(cpu_list: str) -> int:
    """Number of CPUs in a sysfs list such as ``0-3,8``."""
    count = 0
    for part in filter(None, cpu_list.split(",")):
        first, _, last = part.partition("-")
        count += int(last or first) - int(first) + 1
    return count


def fingerprint_of(identity: CpuIdentity, caches: tuple[Cache, ...]) -> str:
    """16 hex digits hashing ``identity`` (flags in sorted order) and the cache geometry."""
    parts = [identity.vendor, identity.model, identity.family, identity.model_number, identity.stepping,
             " ".join(sorted(identity.flags)), str(identity.cpus)]
    parts += [f"{c.name}:{c.size}:{c.ways}:{c.line_size}:{c.shared_cpus}" for c in caches]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def cpu_key_of(identity: CpuIdentity) -> str:
    """The CPU key of ``identity`` (module docstring): vendor, family, model and the features of
    ``KEY_FEATURES`` it has, lower case, joined by ``-`` (a directory name)."""
    def part(text: str) -> str:
        return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in text.lower()) or "unknown"
    parts = [VENDORS.get(identity.vendor) or part(identity.vendor), part(identity.family.replace("?", "")),
             part(identity.model_number.replace("?", ""))]
    return "-".join(parts + [name for name, flags in KEY_FEATURES if set(flags) <= identity.flags])


@lru_cache(maxsize=1)
def this_cpu() -> CpuIdentity:
    """This machine's CPU identity (read once per process)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    identity = parse_cpuinfo(text, os.cpu_count() or 1)
    return replace(identity, flags=visible_flags(identity.flags))


@lru_cache(maxsize=1)
def fingerprint() -> str:
    """This machine's fingerprint (see the module docstring)."""
    return fingerprint_of(this_cpu(), os_caches())


def cpu_key() -> str:
    """This CPU's key (see the module docstring): where its stored schedules are kept."""
    return cpu_key_of(this_cpu())


def loopopt_version() -> str:
    """The installed loopopt version (``unknown (not installed)`` when run from a bare source tree)."""
    try:
        return metadata.version("loopopt")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def compiler_version() -> str:
    """The first line of the C compiler's ``--version``, or why there is none."""
    try:
        return compiler_identity(compiler())
    except BuildError as err:
        return f"none ({err})"


def kernel_compiler() -> str:
    """What kernels are built with: ``compiler_version()``, and their ``-O`` level where
    ``$LOOPOPT_OPT_LEVEL`` sets another than the default (results and tuning trials then say so)."""
    level = opt_level()
    return compiler_version() if level == DEFAULT_OPT_LEVEL else f"{compiler_version()} at -O{level}"


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def provenance(isa: str | None = None, threads: int | None = None) -> dict[str, Any]:
    """Where and how a result was produced: loopopt version, machine fingerprint, CPU model, vendor
    and key, ISA, C compiler (``kernel_compiler``), threads and UTC time (``isa``/``threads`` only when
    given)."""
    record: dict[str, Any] = {"loopopt": loopopt_version(), "fingerprint": fingerprint(),
                              "cpu": this_cpu().model, "vendor": this_cpu().vendor, "cpu_key": cpu_key()}
    if isa is not None:
        record["isa"] = isa
    record["compiler"] = kernel_compiler()
    if threads is not None:
        record["threads"] = threads
    record["utc"] = utc_now()
    return record


class OtherMachineWarning(UserWarning):
    """A stored result (e.g. a schedule) was recorded on another machine."""


def same_cpu(recorded: Mapping[str, Any]) -> bool | None:
    """Whether provenance ``recorded`` names this CPU: by its CPU key when recorded, else its
    fingerprint, else its vendor (another vendor is another CPU; the same one says nothing); None
    when it records nothing to tell."""
    if "cpu_key" in recorded:
        return recorded["cpu_key"] == cpu_key()
    if "fingerprint" in recorded:
        return recorded["fingerprint"] == fingerprint()
    if "vendor" in recorded and recorded["vendor"] != this_cpu().vendor:
        return False
    return None


def machine_mismatch(recorded: Mapping[str, Any]) -> str | None:
    """How the CPU of provenance ``recorded`` differs from this one, naming both CPUs
    ("on X (...); this machine is Y (...)"); None when it is this CPU or the record cannot tell
    (``same_cpu``)."""
    if same_cpu(recorded) is not False:
        return None
    here = this_cpu()
    details = ", ".join(f"{key} {recorded[key]}" for key in ("vendor", "cpu_key", "fingerprint")
                        if key in recorded)
    there = f"{recorded.get('cpu', 'an unnamed CPU')} ({details})"
    return (f"on {there}; this machine is {here.model} (vendor {here.vendor}, CPU key {cpu_key()}, "
            f"fingerprint {fingerprint()})")


# --- other processes' CPU time ---------------------------------------------------------------------

def cpu_seconds() -> tuple[float, float, float] | None:
    """(wall clock, busy CPU seconds of the whole machine, CPU seconds of this process and its
    finished children such as the compiler), or None where /proc/stat cannot be read. Busy time
    counts steal time (a hypervisor's other guests)."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = ticks[3] + ticks[4]                        # idle + iowait
    mine = sum(os.times()[:4])                        # user, system, children's user and system
    return time.perf_counter(), (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK"), mine


def others_share(start: tuple[float, float, float] | None) -> float | None:
    """Share (0..1) of the machine's CPU time that other processes used since ``start``
    (a ``cpu_seconds()`` sample), or None when either sample is missing."""
    end = cpu_seconds()
    if start is None or end is None:
        return None
    wall, busy, mine = (b - a for a, b in zip(start, end))
    # clamped: over a short interval the clock ticks of /proc/stat can add up to more than the wall time
    return min(1.0, max(0.0, (busy - mine) / (max(wall, 1e-9) * (os.cpu_count() or 1))))


# --- the profile -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Bandwidth:
    """Measured read bandwidth (GB/s, one core) over a buffer of ``buffer_bytes``: the best of ``runs``
    timed calls (``gbs``, what the level can deliver: other work only slows a call down) and their
    median (``median_gbs``), with the share of the machine's CPU time other processes used while they
    ran (``other_cpu_share``; None where /proc/stat cannot be read)."""

    gbs: float
    buffer_bytes: int
    median_gbs: float
    runs: int
    other_cpu_share: float | None

    @property
    def busy(self) -> bool:
        """Whether other processes used more than ``OTHERS_LIMIT`` of the CPU meanwhile (the figure
        may be low: on a shared machine they also compete for the memory bus)."""
        return self.other_cpu_share is not None and self.other_cpu_share > OTHERS_LIMIT

    def __str__(self) -> str:
        share = "unknown" if self.other_cpu_share is None else f"{100 * self.other_cpu_share:.0f}%"
        return (f"{self.gbs:8.1f} GB/s best, {self.median_gbs:.1f} median of {self.runs} runs (buffer "
                f"{_size(self.buffer_bytes)}; other processes used {share} of the CPU"
                f"{', BUSY' if self.busy else ''})")


@dataclass(frozen=True)
class MachineProfile:
    """Measured figures of one machine (see the module docstring); ``peak(isa, dtype)`` is what
    every "% of peak" divides by."""

    fingerprint: str
    cpu: str
    vendor: str
    cpus: int
    compiler: str
    kernel: str
    loopopt: str
    measured_utc: str
    other_cpu_share: float | None      # other processes' share of the CPU while it was measured
    caches: tuple[Cache, ...]
    peaks: dict[str, dict[str, float]]  # dtype -> ISA -> G ops/s on one core
    bandwidth: dict[str, Bandwidth]     # level -> read bandwidth on one core

    def peak(self, isa: str = "auto", dtype: str = "float32") -> float:
        """One core's peak (GFLOP/s for float32 and bfloat16, GOP/s for int8) of ``isa``. ``auto`` and
        ``scalar`` get the best SIMD ISA's (scalar kernels are judged against what the machine
        can do); a machine without SIMD gets its scalar multiply-add rate. bfloat16: the faster of
        the two ways a bf16 kernel can multiply, ``vdpbf16ps`` (measured where the ISA has it) and
        float32 FMA on widened operands (the float32 peak)."""
        if dtype not in self.peaks:
            raise ValueError(f"peak: dtype={dtype!r} is not supported; "
                             f"allowed: {', '.join(map(repr, DTYPES))}")
        return peak_of(self.peaks, isa, dtype, self.cpu)

    def cache_size(self, level: str) -> int:
        """Bytes of the data cache ``level`` ("L1", "L2" or "L3"): as the OS reports it, else a typical
        size (``TYPICAL_CACHE_BYTES``: 32 KB, 1 MB; no L3: 0)."""
        if level not in TYPICAL_CACHE_BYTES:
            raise ValueError(f"cache_size: level={level!r}; allowed: "
                             f"{', '.join(map(repr, TYPICAL_CACHE_BYTES))}")
        return next((c.size for c in self.caches if c.name == level), TYPICAL_CACHE_BYTES[level])

    def memory_bandwidth(self) -> float:
        """DRAM read bandwidth in GB/s (one core): the best of the timed passes over a buffer of
        ``DRAM_CACHES`` times the last cache (``bandwidth["DRAM"]`` has their median and how busy the
        machine was)."""
        return self.bandwidth["DRAM"].gbs

    def to_dict(self) -> dict[str, Any]:
        """The JSON document stored in the cache (and printed by ``loopopt machine --json``)."""
        data = asdict(self)
        return {"format": PROFILE_FORMAT, **data, "caches": [asdict(c) for c in self.caches]}

    @classmethod
    def from_dict(cls, data: Any) -> MachineProfile:
        """A profile from ``to_dict``'s document; ValueError (TypeError for a non-object) naming the
        first field that is wrong."""
        if not isinstance(data, dict):
            raise TypeError(f"the profile must be a JSON object, got {type(data).__name__}")
        if data.get("format") != PROFILE_FORMAT:
            raise ValueError(f"format is {data.get('format')!r}, this loopopt writes {PROFILE_FORMAT}")
        for key in ("fingerprint", "cpu", "vendor", "compiler", "kernel", "loopopt", "measured_utc"):
            _check(isinstance(data.get(key), str), key, data.get(key), "a string")
        _check(_is_int(data.get("cpus")) and data["cpus"] >= 1, "cpus", data.get("cpus"), "an integer >= 1")
        share = data.get("other_cpu_share")
        _check(share is None or _is_number(share) and share >= 0, "other_cpu_share", share,
               "null or a number >= 0")
        peaks = data.get("peaks")
        _check(isinstance(peaks, dict) and set(peaks) == set(DTYPES), "peaks", peaks,
               f"an object with {DTYPES}")
        for dtype, table in peaks.items():
            isas = peak_isas(dtype)
            _check(isinstance(table, dict) and set(table) <= set(isas), f"peaks.{dtype}", table,
                   f"an object keyed by ISAs {isas}")
            for isa, value in table.items():
                _check(_is_number(value) and value > 0, f"peaks.{dtype}.{isa}", value, "a number > 0")
        _check(bool(peaks["float32"]), "peaks.float32", peaks["float32"], "at least one ISA")
        caches = data.get("caches")
        _check(isinstance(caches, list), "caches", caches, "a list")
        for i, cache in enumerate(caches):
            fields = ("size", "ways", "line_size", "shared_cpus")
            _check(isinstance(cache, dict) and set(cache) == {"name", *fields}
                   and isinstance(cache["name"], str)
                   and all(_is_int(cache[f]) and cache[f] >= 1 for f in fields), f"caches[{i}]", cache,
                   f"an object with a name and integers >= 1 {fields}")
        bandwidth = data.get("bandwidth")
        _check(isinstance(bandwidth, dict) and "DRAM" in bandwidth, "bandwidth", bandwidth,
               "an object with DRAM")
        for level, entry in bandwidth.items():
            fields = {"gbs", "buffer_bytes", "median_gbs", "runs", "other_cpu_share"}
            _check(isinstance(entry, dict) and set(entry) == fields
                   and all(_is_number(entry[f]) and entry[f] > 0 for f in ("gbs", "median_gbs"))
                   and all(_is_int(entry[f]) and entry[f] > 0 for f in ("buffer_bytes", "runs"))
                   and (entry["other_cpu_share"] is None or _is_number(entry["other_cpu_share"])
                        and entry["other_cpu_share"] >= 0),
                   f"bandwidth.{level}", entry, "an object with gbs > 0, median_gbs > 0, buffer_bytes > 0, "
                   "runs > 0 and other_cpu_share null or >= 0")
        return cls(**{k: data[k] for k in ("fingerprint", "cpu", "vendor", "cpus", "compiler", "kernel",
                                            "loopopt", "measured_utc", "other_cpu_share")},
                   caches=tuple(Cache(**c) for c in caches),
                   peaks={dtype: {isa: float(v) for isa, v in peaks[dtype].items()} for dtype in DTYPES},
                   bandwidth={level: Bandwidth(float(e["gbs"]), e["buffer_bytes"], float(e["median_gbs"]),
                                               e["runs"], e["other_cpu_share"])
                              for level, e in bandwidth.items()})

    def __str__(self) -> str:
        share = "unknown" if self.other_cpu_share is None else f"{100 * self.other_cpu_share:.0f}%"
        lines = [f"machine {self.fingerprint}: {self.cpu} ({self.vendor}), {self.cpus} logical CPUs",
                 (f"measured {self.measured_utc} by loopopt {self.loopopt}, compiler {self.compiler}, "
                 f"kernel {self.kernel}; other processes used {share} of the CPU meanwhile"),
                 "peak, one core:"]
        for dtype, unit in zip(DTYPES, UNITS):
            lines += [f"  {dtype:<8} {isa:<7} {value:8.1f} {unit}"
                      for isa, value in self.peaks[dtype].items()]
        lines.append("read bandwidth, one core:")
        lines += [f"  {level:<5} {entry}" for level, entry in self.bandwidth.items()]
        lines.append("caches (cpu0, from /sys):" if self.caches else "caches: not reported by the OS")
        lines += [f"  {c.name:<5} {_size(c.size):>9}, {c.ways}-way, {c.line_size}-byte lines, shared by "
                  f"{c.shared_cpus} CPU{'s' if c.shared_cpus > 1 else ''}" for c in self.caches]
        if self.other_cpu_share is not None and self.other_cpu_share > OTHERS_LIMIT:
            lines.append("WARNING: measured on a busy machine; re-measure on a quiet one: "
                         "loopopt machine --remeasure")
        return "\n".join(lines)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _check(ok: bool, field: str, value: Any, wanted: str) -> None:
    if not ok:
        raise ValueError(f"{field} must be {wanted}, got {value!r}"[:300])


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes} B"


# --- measuring -------------------------------------------------------------------------------------

def bandwidth_buffers(caches: tuple[Cache, ...], free_bytes: int) -> dict[str, int]:
    """Buffer bytes per memory level: for each cache, four times the previous one but at most
    half its own size (just past the previous level, surely inside this one; a level that is not
    twice the previous one is skipped); for DRAM ``DRAM_CACHES`` times the last cache, at least
    ``DRAM_MIN``, at most a quarter of ``free_bytes``."""
    sizes, previous = {}, 0
    for cache in caches:
        size = min(cache.size // 2, 4 * previous) if previous else cache.size // 2
        if size > previous:
            sizes[cache.name] = size
        previous = cache.size
    sizes["DRAM"] = max(64 << 10, min(max(DRAM_CACHES * previous, DRAM_MIN), free_bytes // 4))
    return sizes


class StreamRead:
    """A buffer of about ``nbytes`` (rounded up to whole steps: ``self.nbytes``) that a call reads once with
    the read kernel of ``measure_bandwidth``: what streaming that many bytes costs here and now, the
    yardstick of a kernel that streams as many weight bytes. The buffer is a numpy array, on the pages
    numpy gives a kernel's arrays."""

    def __init__(self, nbytes: int):
        module, step = read_kernel()
        self._n = -(-max(nbytes, 1) // (4 * step)) * step
        self._buffer = np.ones(self._n, np.float32)
        self._pointer = module.ffi.cast("float *", module.ffi.from_buffer(self._buffer))
        self._read = module.lib.lo_read
        self.nbytes = self._buffer.nbytes

    def __call__(self) -> float:
        return self._read(self._pointer, self._n, 1)


def measure_bandwidth(sizes: Mapping[str, int]) -> dict[str, Bandwidth]:
    """One core's read bandwidth over a buffer of each size (best SIMD loads): after a pass that brings
    the buffer into its level, ``BANDWIDTH_RUNS`` timed calls of about ``BANDWIDTH_CALL`` seconds each
    (the buffer repeated, or, where one pass takes longer, consecutive stretches of it), their best and
    median, and how busy the machine was. Calls shorter than a time slice keep the best one uncut by
    other processes, so the ranking (which reads the best) chooses alike on a loaded machine: on a shared
    2-core AMD EPYC Zen 3 at load 10, 20 ms calls gave L2 19-23 GB/s and L3 10-21 GB/s against 102 and
    74 under SCHED_FIFO; 2 ms calls 104 and 59-65."""
    module, step = read_kernel()
    lib, ffi = module.lib, module.ffi
    result = {}
    for level, nbytes in sizes.items():
        n = max(step, nbytes // 4 // step * step)
        buffer = lib.lo_buffer(n)
        if buffer == ffi.NULL:
            raise MemoryError(f"cannot allocate the {level} bandwidth buffer of {_size(4 * n)}")
        try:
            once = max(timed(lib.lo_read, buffer, n, 1), 1e-9)   # also brings the buffer into the level
            passes = max(1, int(BANDWIDTH_CALL / once))
            stretch = n if passes > 1 else max(step, int(n * BANDWIDTH_CALL / once) // step * step)
            starts = [(i * stretch) % (n - stretch + 1) // step * step for i in range(BANDWIDTH_RUNS)]
            start = cpu_seconds()
            times = [timed(lib.lo_read, buffer + first, stretch, passes) for first in starts]
            share = others_share(start)
        finally:
            lib.lo_free(buffer)
        gb = 4 * stretch * passes / 1e9
        result[level] = Bandwidth(gb / min(times), 4 * n, gb / statistics.median(times), len(times), share)
    return result


def _free_memory() -> int:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 1 << 30


def measure_profile() -> MachineProfile:
    """Measure this machine's profile now (a few seconds); ``machine_profile`` caches it."""
    start = cpu_seconds()
    peaks = measure_peaks()
    caches = os_caches()
    bandwidth = measure_bandwidth(bandwidth_buffers(caches, _free_memory()))
    cpu = this_cpu()
    return MachineProfile(fingerprint(), cpu.model, cpu.vendor, cpu.cpus, compiler_version(),
                          platform.release(), loopopt_version(), utc_now(), others_share(start), caches,
                          peaks, bandwidth)


# --- the cached profile ----------------------------------------------------------------------------

_profiles: dict[Path, MachineProfile] = {}
_paths: dict[tuple[str | None, str | None], Path] = {}   # profile_path() by $CC and the cache's variable


def profile_path() -> Path:
    """The cache file of this machine's profile (fingerprint, compiler and format in its name)."""
    key = hashlib.sha256(f"{PROFILE_FORMAT}\n{fingerprint()}\n{compiler_version()}".encode()).hexdigest()[:16]
    return cache_dir() / f"machine-{fingerprint()}-{key}.json"


def load_profile(path: Path) -> MachineProfile | None:
    """The profile stored at ``path`` if it is valid and of this machine; None (with a warning for a
    file that exists but cannot be trusted) otherwise."""
    try:
        profile = MachineProfile.from_dict(json.loads(path.read_text()))
        if profile.fingerprint != fingerprint():
            raise ValueError(f"it is of machine {profile.fingerprint}, this one is {fingerprint()}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as err:
        warnings.warn(f"ignoring the machine profile {path} ({err}); measuring it again", stacklevel=3)
        return None
    return profile


def store_profile(path: Path, profile: MachineProfile) -> None:
    """Write ``profile`` to ``path`` atomically (a crash never leaves a partial file); a cache
    that cannot be written only costs a warning."""
    try:
        write_text_atomically(path, json.dumps(profile.to_dict(), indent=2))
    except OSError as err:
        warnings.warn(f"cannot write the machine profile {path} ({err}); it will be measured again "
                      f"in the next process", stacklevel=3)


def machine_profile(remeasure: bool = False) -> MachineProfile:
    """This machine's profile: from memory, else from the cache file, else measured (a few seconds,
    once per machine and compiler) and stored. ``remeasure=True`` measures and stores it again. The
    path is found once per compiler and cache setting (the search's ranking asks for the profile per
    candidate: finding the compiler and the cache each time cost it a millisecond)."""
    setting = (os.environ.get("CC"), os.environ.get(CACHE_ENV))
    path = _paths.get(setting) or _paths.setdefault(setting, profile_path())
    profile = None if remeasure else _profiles.get(path) or load_profile(path)
    if profile is None:
        with host_lock(_lock_name(path)):   # processes starting together measure once and share it
            profile = None if remeasure else load_profile(path)
            if profile is None:
                profile = _measure_and_store(path)
    _profiles[path] = profile
    return profile


def _lock_name(path: Path) -> str:
    """The host lock of the profile at ``path``: named after the path."""
    return f"loopopt-profile-{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]}.lock"


def _measure_and_store(path: Path) -> MachineProfile:
    if sys.stderr.isatty():
        print(f"loopopt: measuring this machine's peaks and bandwidths (once; cached in {path})",
              file=sys.stderr, flush=True)
    profile = measure_profile()
    store_profile(path, profile)
    if profile.other_cpu_share is not None and profile.other_cpu_share > OTHERS_LIMIT:
        warnings.warn(f"the machine profile was measured while other processes used "
                      f"{100 * profile.other_cpu_share:.0f}% of the CPU; its peaks may be low: run "
                      f"`loopopt machine --remeasure` on a quiet machine", stacklevel=3)
    return profile


def peak_gflops(isa: str = "auto", dtype: str = "float32") -> float:
    """One core's peak (G ops/s) of ``isa`` from this machine's profile (measured once, cached).

    ``dtype="float32"``: FMA throughput (2 flops per lane). ``"int8"``: throughput of the
    u8 x s8 dot instruction of the integer table (VNNI ``vpdpbusd``; AVX2 ``vpmaddwd``
    sequence), 8 ops (4 multiply-adds) per int32 lane; x86's tile variant (``TILE_ISA``): the AMX tile dot
    ``TDPBUSD`` (``targets.x86.amx_runtime.amx_peak_gops``), where the CPU has it. ``"bfloat16"``:
    ``vdpbf16ps``, 4 flops per float32 lane (the float32 peak on ISAs without it).
    """
    if dtype not in DTYPES:
        raise ValueError(f"peak_gflops: dtype={dtype!r} is not supported; "
                         f"allowed: {', '.join(map(repr, DTYPES))}")
    return machine_profile().peak(isa, dtype)
