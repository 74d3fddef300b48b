"""``CudaTarget``: float32 SIMT kernels of bound schedules for NVIDIA GPUs, built with nvcc.

The instruction-set variants are GPU architectures (``sm_90``, ...): ``"auto"`` is the device's
where one is present, else ``sm_90``. Building needs only nvcc (``toolchain``); running and timing
need CuPy and a GPU (``device``). "% of peak" is against the device's FP32 FFMA peak.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType

from ...codegen import Generated
from ...codegen.instr import SCALAR
from ...codegen.pseudocode import header
from ...kernel import Kernel
from ...schedule import Schedule, ScheduleError
from ..base import Target, TargetUnavailableError
from ..search import SearchRules
from . import depthwise, device, gemv, toolchain
from .emulate import emulate
from .instructions import MatrixInstruction, instruction
from .kernel import CudaKernel, GemvQuantizedCudaKernel, QuantizedCudaKernel
from .printer import print_kernel

ARCHS = ("sm_90", "sm_89", "sm_86", "sm_80", "sm_75")     # built with -gencode=arch=compute_N,code=sm_N
# The most shared memory one block may ask for, by architecture (CUDA C Programming Guide, "Technical
# Specifications per Compute Capability": the opt-in maximum per block).
SHARED_BYTES_PER_BLOCK = {"sm_90": 227 * 1024, "sm_89": 99 * 1024, "sm_86": 99 * 1024, "sm_80": 163 * 1024,
                          "sm_75": 64 * 1024}
DEFAULT_ARCH = "sm_90"


def build_arch(schedule: Schedule, arch: str) -> str:
    """What nvcc builds ``schedule`` for on ``arch``: ``arch``, or its architecture-specific variant
    (``sm_90a``) where the tensorized instruction needs one; ScheduleError where ``arch`` lacks it."""
    if not schedule.tensorized:
        return arch
    entry = instruction(schedule.tensorized[3])
    if not entry.runs_on(arch):
        raise ScheduleError(f"{entry.name} needs {entry.arch}"
                            f"{'' if entry.arch.endswith('a') else ' or newer'}; the kernel is built for "
                            f"{arch}")
    return entry.arch if entry.arch.endswith("a") else arch


class CudaTarget(Target):
    name = "cuda"
    description = ("NVIDIA GPUs: float32 SIMT and float16, bfloat16 and int8 tensor-core (tensorize) CUDA C "
                   "of bound schedules, built with nvcc, run through CuPy")
    has_device = True

    def isas(self) -> tuple[str, ...]:
        return ARCHS

    def available_isas(self, integer: bool = False) -> tuple[str, ...]:
        """The architectures nvcc builds here (none without nvcc), the device's first."""
        try:
            toolchain.nvcc()
        except TargetUnavailableError:
            return ()
        first = device.arch() if device.present() and device.arch() in ARCHS else DEFAULT_ARCH
        return (first, *(a for a in ARCHS if a != first))

    def resolve_isa(self, isa: str, integer: bool = False) -> str:
        if isa == "auto":
            return device.arch() if device.present() and device.arch() in ARCHS else DEFAULT_ARCH
        if isa not in ARCHS:
            raise ValueError(f"unknown cuda architecture {isa!r}: choose 'auto' or one of {', '.join(ARCHS)}")
        return isa

    def compile(self, schedule: Schedule, isa: str = "auto") -> CudaKernel:
        if schedule.requantized_clip is not None:
            raise ScheduleError(f"clip_quantized: the cuda target's kernels of {schedule.op!r} requantize "
                                "without it; leave clip_quantized out and clip the outputs after the kernel")
        printed = print_kernel(schedule)            # a schedule the target cannot run: ScheduleError
        arch = self.resolve_isa(isa)
        if printed.dynamic_shared_bytes > SHARED_BYTES_PER_BLOCK[arch]:
            raise ScheduleError(f"the kernel's blocks need {printed.dynamic_shared_bytes} bytes of shared "
                                f"memory; {arch} allows {SHARED_BYTES_PER_BLOCK[arch]} per block (tile "
                                f"smaller)")
        build = toolchain.build(printed.source, build_arch(schedule, arch))
        generated = Generated(printed.source, printed.cdef, printed.arguments, printed.params, SCALAR,
                              {}, False)
        kind = CudaKernel if schedule.op.quant is None else (
            GemvQuantizedCudaKernel if gemv.takes(schedule) else QuantizedCudaKernel)
        kernel = kind(schedule, generated, printed, build, arch)
        kernel.target = self
        return kernel

    def compile_many(self, schedules: Sequence[Schedule], isa: str = "auto") -> list[CudaKernel]:
        """The kernels of ``schedules``, nvcc building them in parallel (one process a core)."""
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            return list(pool.map(lambda schedule: self.compile(schedule, isa), schedules))

    def pseudocode(self, schedule: Schedule, isa: str = "auto") -> str:
        """The GEMV and depthwise families' own nests (``gemv.pseudocode``, ``depthwise.pseudocode``), else
        the schedule's nest."""
        if gemv.takes(schedule):
            return "\n".join(header(schedule) + gemv.pseudocode(schedule))
        if depthwise.takes(schedule):
            return "\n".join(header(schedule) + depthwise.pseudocode(schedule))
        return super().pseudocode(schedule, isa)

    def unmodelled(self, schedule: Schedule) -> str | None:
        if gemv.takes(schedule):
            return ("the kernel model does not count the cuda GEMV kernels (targets/cuda/gemv.py: lanes "
                    "over 16-byte weight vectors, a shuffle butterfly)")
        if depthwise.takes(schedule):
            return ("the kernel model does not count the cuda depthwise kernels (targets/cuda/depthwise.py: "
                    "a thread's channel vector and run of pixels; search.py prices them as bytes moved)")
        return None

    def peak(self, isa: str, dtype: str) -> float:
        """The device's peak (G flops/s, int8: G ops/s): FP32 FFMA for float32, dense tensor cores for
        float16 and bfloat16 (the same rate) and int8 (twice it)."""
        if dtype in ("float16", "bfloat16"):
            return device.tensor_peak_gflops(isa)
        if dtype == "int8":
            return device.INT8_PER_F16 * device.tensor_peak_gflops(isa)
        if dtype != "float32":
            raise ValueError(f"the cuda target has float32 kernels (and float16, bfloat16 and int8 on tensor "
                             f"cores), not {dtype!r}")
        return device.ffma_peak_gflops(isa)

    def peak_source(self, isa: str) -> str:
        return (f"{device.name()}'s FFMA peak: {device.multiprocessors()} SMs x {device.clock_mhz():.0f} "
                f"MHz x {device.FP32_LANES_PER_SM[isa]} FP32 lanes x 2 (float16 and bfloat16: x "
                f"{device.TENSOR_F16_FLOPS_PER_SM.get(isa, '?')} tensor-core flops per SM per clock; int8: "
                f"x {device.INT8_PER_F16} that)")

    def matrix_instruction(self, name: str) -> MatrixInstruction:
        return instruction(name)

    def device(self) -> str:
        return f"{device.name()} ({device.arch()})"

    def search_rules(self) -> SearchRules:
        from .search import CudaSearch  # the presets' module: imported when a search asks
        return CudaSearch()

    def array_module(self) -> ModuleType:
        """CuPy (``device.cupy``: TargetUnavailableError without it or a GPU)."""
        return device.cupy()

    def emulate(self, schedule: Schedule) -> Kernel:
        """The kernel's nest as host C (``emulate.emulate``): numpy arrays, float16 values as float32."""
        return emulate(schedule)

    def fingerprint(self) -> str:
        """The tuning log's key of this target's trials: the device (name and architecture)."""
        return self.device()

    def graph_timer(self, run: Callable[[], object]) -> Callable[[], float]:
        """``run`` replayed in a CUDA graph (``device.graph_timer``)."""
        return device.graph_timer(run)

    def run_timer(self) -> Callable[[Callable[[], object]], float]:
        """CUDA events around each run (``device.elapsed``)."""
        return device.elapsed


TARGET = CudaTarget()
