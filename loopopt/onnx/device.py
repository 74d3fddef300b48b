"""The device a prepared model runs on beside the host (``prepare(model, device="CUDA")``): its target,
the array module of its memory (CuPy on a GPU), the transfers between host and device, and how a
schedule becomes its kernel.

``cuda_device()`` is the GPU that CuPy sees: kernels built with nvcc for its architecture, arrays in
its memory, the tuning log's trials of that GPU (``Target.fingerprint``: its name). ``emulated_device``
stands in for a GPU where there is none (CI): each kernel is the host emulation of the CUDA kernel
of the same schedule (``Target.emulate``: the printed nest compiled as host C), arrays are numpy's, and
the trials taken from a tuning log are those of the GPU it names. A caller chooses it explicitly;
``prepare`` never falls back to it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from ..kernel import Kernel
from ..schedule import Schedule
from ..targets.base import Target
from ..targets.registry import target

GPU = "CUDA"                 # the device name ``prepare`` takes
GPU_TARGET = "cuda"
GPU_FLOATS = ("float32", "float16")      # the float dtypes the cuda target's kernels take


@dataclass(frozen=True)
class Device:
    """Where a prepared model's nodes run: ``xp`` is the array module of its memory, ``to_device`` and
    ``to_host`` copy a host array there and back, ``compile_many`` builds the kernels of schedules for it
    (for ``isa``), ``fingerprint`` keys its trials in a tuning log and ``floats`` are the float dtypes its
    kernels multiply."""

    name: str
    target: Target
    isa: str
    xp: ModuleType
    fingerprint: str
    to_host: Callable[[Any], np.ndarray]
    compile_many: Callable[[Sequence[Schedule]], list[Kernel]]
    floats: tuple[str, ...] = GPU_FLOATS

    def compile(self, schedule: Schedule) -> Kernel:
        """One schedule's kernel for the device."""
        return self.compile_many([schedule])[0]

    def to_device(self, array: np.ndarray) -> Any:
        """A host array copied to the device (C-contiguous)."""
        return self.xp.ascontiguousarray(self.xp.asarray(array))

    def __str__(self) -> str:
        return self.name


def cuda_device() -> Device:
    """The GPU CuPy sees (TargetUnavailableError naming what is missing: CuPy, a GPU)."""
    cuda = target(GPU_TARGET)
    xp = cuda.array_module()
    isa = cuda.resolve_isa("auto")
    return Device(f"{cuda.device()}", cuda, isa, xp, cuda.fingerprint(), xp.asnumpy,
                  lambda schedules: cuda.compile_many(schedules, isa))


def emulated_device(gpu: str = "NVIDIA H200", isa: str = "auto") -> Device:
    """The host emulation of the GPU named ``gpu`` of architecture ``isa`` ("auto": the cuda target's
    default without a GPU): numpy arrays, each kernel ``Target.emulate``'s, the tuning log's trials of
    that GPU (keyed as ``Target.fingerprint`` keys them: ``"NAME (ARCH)"``)."""
    cuda = target(GPU_TARGET)
    isa = cuda.resolve_isa(isa)
    fingerprint = f"{gpu} ({isa})"
    return Device(f"host emulation of {fingerprint}", cuda, isa, np, fingerprint, np.asarray,
                  lambda schedules: [cuda.emulate(schedule) for schedule in schedules])
