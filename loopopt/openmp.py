"""How loopopt's OpenMP threads wait: passively, unless the environment says otherwise.

libgomp reads its wait policy from the environment once, when it is loaded. By default its threads
spin at a barrier (300,000 times) before they sleep; on a machine whose cores other
work also wants, a spinning thread takes a core from the thread it waits for. Measured (loopopt alone,
``benchmarks/bench_wait.py``, a 2-core Xeon loaded by other processes, docs/benchmarks.md): ResNet-18
fp32 on 2 threads 311.4 ms a run by default, 58.5 ms with ``OMP_WAIT_POLICY=passive`` (5.3x), 85.3 ms
on 1 thread; int8 262.5 ms, 18.5 ms and 25.5 ms.

``load_runtime()`` loads libgomp (once, before the first kernel built with OpenMP) with
``OMP_WAIT_POLICY=passive`` unless ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` is set, and then puts the
environment back as it was, for child processes and other libraries' own settings. A process has one
libgomp (PyTorch's bundled copy has the same soname, so whichever loads first serves both): loaded by
loopopt first, PyTorch's OpenMP threads wait passively too; loaded by another library first (``import
torch`` before the first kernel), it keeps the policy that load read, for loopopt's kernels too. Set
``OMP_WAIT_POLICY=active`` (or a ``GOMP_SPINCOUNT``) before the first kernel to spin. Where the
compiler's OpenMP runtime is not libgomp (``CC=clang``: libomp), nothing is set.
"""
from __future__ import annotations

import ctypes
import os

OPENMP_FLAG = "-fopenmp"        # what compiles and links a kernel with OpenMP
RUNTIME = "libgomp.so.1"
USER_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")   # either one: the user chose how threads wait
DEFAULT_POLICY = "passive"

_loaded = False


def load_runtime() -> None:
    """Load libgomp for loopopt's kernels, waiting passively unless the environment says how to wait."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    if any(name in os.environ for name in USER_SETTINGS):
        return                              # the kernel's own load reads the user's settings
    os.environ["OMP_WAIT_POLICY"] = DEFAULT_POLICY
    try:
        ctypes.CDLL(RUNTIME, mode=os.RTLD_GLOBAL)
    except OSError:
        pass                                # another OpenMP runtime (libomp): it reads its own settings
    finally:
        del os.environ["OMP_WAIT_POLICY"]
