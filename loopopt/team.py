"""loopopt's own threads for its OpenMP kernels: a team that spins while a plan runs and sleeps after.

GCC lowers the kernels' ``#pragma omp parallel`` (and static-schedule ``parallel for``) to calls of four
OpenMP functions (``GOMP_parallel``, ``omp_get_thread_num``, ``omp_get_num_threads``,
``omp_set_num_threads``; no barriers, no dynamic schedules, no reductions: every kernel of the cache
imported those four alone). So a kernel is still compiled with ``-fopenmp``, its C unchanged, but linked
with ``team_omp.c``: those four defined with hidden visibility (a kernel's calls bind to them at link
time, whatever OpenMP runtime ``import torch`` or another library put in the process's global scope),
forwarding to the uniquely named functions of ``team.c``, one shared object of the cache loaded
(``RTLD_GLOBAL``) before the first kernel, so that every kernel of the process runs on one team. A
kernel calling any other OpenMP function would need libgomp beside the team: its build is refused
(``foreign_runtime``), naming ``$LOOPOPT_OPENMP=libgomp``, which builds it.

``team.c``: a region runs ``fn(data)`` on the calling thread and on workers started on demand (kept
after); a region asked from inside a region, or on one thread, runs on the caller alone. Regions of two
Python threads are serialized on the team (the second waits for the first's region to end; each
region's own thread count stands). After ``fork`` the child has no workers: its first region starts
them. A region's thread count is ``omp_set_num_threads`` of the calling thread, else ``OMP_NUM_THREADS``
(its first number), else the CPUs this process may run on, as libgomp does.

How a thread waits for the next region (or the caller for its workers): while a plan run is in progress
(``hold``: ``Plan.run``, ``lo.measure``'s timed calls), it spins with ``pause`` without bound, yielding
its core (``sched_yield``) every 256 spins; the run's start wakes sleeping workers, so they spin when its
first region comes. Once a yield hands the core to another thread (the thread's context switches,
``getrusage``), other work wants that core: for the rest of the run the thread waits as outside one.
Outside a run it spins ``SPIN`` times (as libgomp with ``GOMP_SPINCOUNT=300``, loopopt's setting before
the team: ``loopopt.openmp``) and then sleeps on a futex.
``OMP_WAIT_POLICY`` (``active``: spin without bound always; ``passive``: sleep at once, even in a plan
run) or ``GOMP_SPINCOUNT`` (a count, ``infinite`` / ``infinity``, or a count with a
``k``/``M``/``G``/``T`` suffix: that spin everywhere) choose otherwise; ``OMP_PROC_BIND`` and the other
OpenMP settings are ignored (a warning names those set).

Measured (AMD EPYC Zen 3, KVM, 2 vCPUs, where waking a sleeping thread costs 25-110 us; whole models at
224x224, each runtime in its own process, 7 interleaved rounds, medians, docs/benchmarks.md, sixteenth
session): with the cores free (SCHED_FIFO; no thread gives way there), two threads, the team against
libgomp at 300 spins, libgomp at 300,000 spins (the ceiling of spinning) and onnxruntime (spinning):
MobileNetV2 fp32 6.3 / 7.7 / 6.3 / 6.6 ms, int8 6.7 / 7.6 / 6.9 / 7.8; ResNet-18 fp32 25.8 / 26.5 / 25.8
/ 24.1, int8 25.8 / 27.7 / 27.2 / 25.1; ResNet-50 fp32 59.0 / 59.8 / 63.5 / 56.4, int8 47.4 / 45.4 / 43.4
/ 48.4 (the ResNets' steps are long: spinning buys them 0-5%). Beside a busy process on one of the two
cores (not SCHED_FIFO, others taking ~80% of the machine): MobileNetV2 fp32 21.3 ms on the team, 16.3 on
libgomp at 300 spins, 33.6 onnxruntime (spinning); ResNet-18 fp32 69.4 / 71.3 / 113.0; without giving
way the team took 92.1 ms against libgomp's 22.0 there.

``$LOOPOPT_OPENMP=libgomp`` links kernels with libgomp instead (``loopopt.openmp``: its wait policy
at 300 spins), the documented alternative for comparing the two; kernels of the two are cache entries of
their own. A compiler other than GCC (``CC=clang`` lowers OpenMP to libomp's ``__kmpc_*`` calls) keeps its
own OpenMP runtime.
"""
from __future__ import annotations

import ctypes
import os
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from . import elf

RUNTIME_ENV = "LOOPOPT_OPENMP"
TEAM, LIBGOMP = "team", "libgomp"                   # the values of RUNTIME_ENV (the first the default)
RUNTIME_SOURCE = Path(__file__).with_name("team.c")
ENTRY_SOURCE = Path(__file__).with_name("team_omp.c")
RUNTIME_FLAGS = ("-O2", "-fPIC", "-shared", "-pthread")
ENTRY_FLAGS = ("-O2", "-fPIC", "-c")
LINK_FLAGS = ("-Wl,--as-needed",)   # the driver's libgomp (-fopenmp) stays out of a kernel needing none
SPIN = 300                          # spins before a thread sleeps outside a plan run
FOREVER = -1                        # spin without bound
SUFFIXES = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}    # GOMP_SPINCOUNT's, as libgomp reads them
SERVED = ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads", "omp_set_num_threads")  # team_omp.c
FOREIGN = ("libgomp", "libomp", "libiomp")   # OpenMP runtimes' library names
IGNORED = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "OMP_STACKSIZE", "GOMP_STACKSIZE",
           "OMP_DYNAMIC", "OMP_THREAD_LIMIT", "OMP_MAX_ACTIVE_LEVELS", "OMP_NESTED")

_runtime: ctypes.CDLL | None = None


def serves(compiler_identity: str) -> bool:
    """Whether kernels of the compiler that answered ``compiler_identity`` (its ``--version`` line) run
    on the team: ``$LOOPOPT_OPENMP`` is ``team`` (or unset) and the compiler is GCC; ValueError naming
    another value of the variable and the allowed ones."""
    value = os.environ.get(RUNTIME_ENV, TEAM)
    if value not in (TEAM, LIBGOMP):
        raise ValueError(f"{RUNTIME_ENV}={value!r}: allowed: {TEAM} (loopopt's own threads, the "
                         f"default) or {LIBGOMP}")
    return value == TEAM and "clang" not in compiler_identity.lower()


def foreign_runtime(shared_object: Path) -> str | None:
    """The OpenMP runtime library a kernel linked for the team still needs, if any: its calls of OpenMP
    functions other than ``SERVED`` bound there (``LINK_FLAGS`` keep it out of a kernel needing none)."""
    return next((name for name in elf.needed(shared_object) if name.startswith(FOREIGN)), None)


def wait_rule(environ: Mapping[str, str]) -> tuple[int, int]:
    """The spins before a thread sleeps outside a plan run and in one (``FOREVER``: no bound) that
    ``environ``'s ``OMP_WAIT_POLICY`` and ``GOMP_SPINCOUNT`` ask for (the policy first, as libgomp
    reads them); ValueError naming a value neither allows."""
    policy = environ.get("OMP_WAIT_POLICY")
    if policy is not None:
        if policy.strip().lower() not in ("active", "passive"):
            raise ValueError(f"OMP_WAIT_POLICY={policy!r}: allowed: active or passive")
        spin = FOREVER if policy.strip().lower() == "active" else 0
        return spin, spin
    count = environ.get("GOMP_SPINCOUNT")
    if count is None:
        return SPIN, FOREVER
    text = count.strip()
    spin = (FOREVER if text.lower() in ("infinite", "infinity") else
            int(text[:-1]) * SUFFIXES[text[-1]] if text[-1:] in SUFFIXES and text[:-1].isdigit() else
            int(text) if text.isdigit() else None)
    if spin is None:
        raise ValueError(f"GOMP_SPINCOUNT={count!r}: allowed: a count of spins (digits, optionally with "
                         f"a k, M, G or T suffix), infinite or infinity")
    return spin, spin


def default_threads(environ: Mapping[str, str]) -> int:
    """A region's thread count where the caller set none: ``OMP_NUM_THREADS``'s first number, else the
    CPUs this process may run on; ValueError naming a value that is not a positive count."""
    value = environ.get("OMP_NUM_THREADS")
    if value is None:
        return len(os.sched_getaffinity(0))
    first = value.split(",")[0].strip()
    if not first.isdigit() or int(first) < 1:
        raise ValueError(f"OMP_NUM_THREADS={value!r}: allowed: a positive thread count (or a comma-separated "
                         f"list of them, the first used)")
    return int(first)


def load(path: Path) -> None:
    """Load the team's shared object at ``path`` (built from ``RUNTIME_SOURCE``) into the global scope,
    once a process, waiting as the environment says; a warning names OpenMP settings it ignores."""
    global _runtime
    if _runtime is not None:
        return
    spin, held = wait_rule(os.environ)
    threads = default_threads(os.environ)
    ignored = [name for name in IGNORED if name in os.environ]
    if ignored:
        warnings.warn(f"loopopt's OpenMP threads ignore {', '.join(ignored)} (its team binds no thread to a "
                      f"CPU and keeps the default stacks); {RUNTIME_ENV}={LIBGOMP} reads them", stacklevel=2)
    runtime = ctypes.CDLL(str(path), mode=os.RTLD_GLOBAL)
    runtime.lo_team_configure(ctypes.c_long(spin), ctypes.c_long(held), threads)
    _runtime = runtime


def workers() -> int:
    """The team's workers started so far in this process (0 before the team is loaded)."""
    return _runtime.lo_team_workers() if _runtime is not None else 0


@contextmanager
def hold() -> Iterator[None]:
    """While inside, the team's threads wait for the next region spinning (a plan run); a no-op where
    the team is not loaded (no kernel of the process runs on it)."""
    runtime = _runtime
    if runtime is None:
        yield
        return
    runtime.lo_team_hold(1)
    try:
        yield
    finally:
        runtime.lo_team_hold(-1)
