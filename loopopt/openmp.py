"""How libgomp's threads wait where loopopt's kernels run on it: a short spin, then asleep, unless the
environment says otherwise.

Kernels built with GCC run on loopopt's own team of threads (``loopopt.team``), which spins while a plan
runs and sleeps after (MobileNetV2 on two threads of the Zen 3 VM below: fp32 7.7 -> 6.3 ms, int8 7.6
-> 6.7 against libgomp at 300 spins, at libgomp's 300,000-spin ceiling and past onnxruntime; beside a
busy process 1.3x libgomp's time, still under onnxruntime's: ``loopopt.team``); they run on libgomp with
``$LOOPOPT_OPENMP=libgomp``, and this module's setting applies then.

libgomp reads its wait policy from the environment once, when it is loaded. By default its threads
spin at a barrier (300,000 times) before they sleep; on a machine whose cores other work also wants, a
spinning thread takes a core from the thread it waits for. Measured (loopopt alone,
``benchmarks/bench_wait.py``, a 2-core Xeon loaded by other processes, docs/benchmarks.md): ResNet-18
fp32 on 2 threads 311.4 ms a run by default, 58.5 ms with ``OMP_WAIT_POLICY=passive`` (5.3x), 85.3 ms
on 1 thread. Asleep at once (passive), each parallel region wakes the other threads, which costs more
than a short spin where kernels follow each other: MobileNetV2 fp32 on 2 threads of an idle 2-core Xeon
(AMX, KVM; 11 interleaved rounds, medians) 10.44 ms passive, 8.29 ms spinning 300 times (a few
microseconds) first, 7.66 ms at 1,000, 7.22 ms at 3,000; ResNet-18 fp32 19.29 -> 17.23 ms, MobileNetV2
int8 11.41 -> 10.36 ms at 300. With a busy process on one of the two cores: 14.16 ms passive, 14.81 ms
at 300, 16.37 ms at 1,000 (at 74% of the CPU taken by others, 3,000 was 1.7x passive): ``SPIN_COUNT``
is the spin that gains where the cores are free and costs little where they are not. Measured again
(MobileNetV2 fp32, 2 threads, docs/benchmarks.md, session 10): 300 spins last 5-15 us, 30,000 about 0.6 ms;
under SCHED_FIFO 30,000 ran 4.3-5.6 ms against 5.4-9.2 ms, but beside other work not preempted 30-174 ms
against 16-22 ms, so the spin stays short. On a 2-core AMD EPYC Zen 3 VM (KVM; an idle vCPU halts at
once, so waking a sleeping thread took 50-110 us; a spin iteration ~29 ns: 300 spins ~9 us, 3,000 ~86 us)
MobileNetV2 on 2 threads, each runtime in its own process (11 interleaved rounds, medians,
docs/benchmarks.md, session 13): with the cores free (SCHED_FIFO) fp32 9.54 ms at 300 spins, 7.77 at
3,000, 7.58 at 30,000 (onnxruntime, whose threads spin by default, 8.16; not spinning 10.57), int8 11.99
/ 8.83 / 9.87 ms (onnxruntime 8.90); beside other work (load 9, not preempted) fp32 19.94 ms at 300,
49.90 at 3,000, 14.53 passive (onnxruntime 31.23). Where the cores are the model's,
``GOMP_SPINCOUNT=3000`` (a spin as long as a wake-up there) is the faster choice.

``load_runtime()`` loads libgomp (once, before the first kernel built with OpenMP) with
``GOMP_SPINCOUNT=SPIN_COUNT`` unless ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` is set, and then puts the
environment back as it was, for child processes and other libraries' own settings. A process has one
libgomp (PyTorch's bundled copy has the same soname, so whichever loads first serves both): loaded by
loopopt first, PyTorch's OpenMP threads wait so too; loaded by another library first (``import torch``
before the first kernel), it keeps the policy that load read, for loopopt's kernels too. Set
``OMP_WAIT_POLICY=passive`` on a machine shared with other work (or ``active``, or a ``GOMP_SPINCOUNT``)
before the first kernel to choose otherwise. Where the compiler's OpenMP runtime is not libgomp
(``CC=clang``: libomp), nothing is set.
"""
from __future__ import annotations

import ctypes
import os

OPENMP_FLAG = "-fopenmp"        # what compiles and links a kernel with OpenMP
RUNTIME = "libgomp.so.1"
USER_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")   # either one: the user chose how threads wait
SPIN_COUNT = "300"     # libgomp spins this many times at a barrier before its thread sleeps

_loaded = False


def load_runtime() -> None:
    """Load libgomp for loopopt's kernels, spinning ``SPIN_COUNT`` times at a barrier before a thread
    sleeps, unless the environment says how to wait."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    if any(name in os.environ for name in USER_SETTINGS):
        return                              # the kernel's own load reads the user's settings
    os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    try:
        ctypes.CDLL(RUNTIME, mode=os.RTLD_GLOBAL)
    except OSError:
        pass                                # another OpenMP runtime (libomp): it reads its own settings
    finally:
        del os.environ["GOMP_SPINCOUNT"]
