"""Host emulation of a CUDA schedule: the printed kernel with its block and thread loops run as CPU
loops, compiled as C and called like any kernel (``emulate(schedule)(x, w, b)``). It checks, without
a GPU, that the nest the cuda target prints computes the op: the same loops, dims, guards, layouts,
accumulators and stores, only the bound loops' variables come from loops instead of
``blockIdx``/``threadIdx``."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...codegen import Generated
from ...codegen.instr import SCALAR
from ...codegen.quantized import QUANT_FLAGS
from ...kernel import Buffers, Kernel, cffi_driver
from ...schedule import Schedule
from . import gemv, quantized
from .gemv import PackedWeights
from .printer import HOST, print_kernel

HOST_ISA = SCALAR       # scalar C: no vector instructions, as each GPU thread runs it


class EmulatedQuantizedKernel(Kernel):
    """The host emulation of a quantized op's kernel, called as its CUDA kernel is
    (``kernel(xq, wq, b, x_zero_point=..., ...)``)."""

    def prepare(self, *arrays: np.ndarray, **params: Any) -> Buffers:
        return self.bind(self.call_values(arrays, params))

    def call_values(self, arrays: tuple, params: dict[str, Any]) -> dict[str, Any]:
        """The values of one call by parameter name (``quantized.call_values``)."""
        return quantized.call_values(self, arrays, params)

    def __call__(self, *arrays: np.ndarray, **params: Any) -> np.ndarray:
        buffers = self.prepare(*arrays, **params)
        self.run(buffers)
        return self.output(buffers)


class EmulatedGemvKernel(PackedWeights, EmulatedQuantizedKernel):
    """The host emulation of a quantized GEMV kernel (``gemv.py``): i2_s weights packed as on the GPU."""


def emulate(schedule: Schedule) -> Kernel:
    """The host-C kernel of ``schedule``'s CUDA nest (ScheduleError where the cuda target refuses it)."""
    printed = print_kernel(schedule, HOST)
    generated = Generated(printed.source, printed.cdef, printed.arguments, printed.params, HOST_ISA, {},
                          False)
    if schedule.op.quant is not None:   # requantization as quant.py rounds: no contracted multiply-add
        kind = EmulatedGemvKernel if gemv.takes(schedule) else EmulatedQuantizedKernel
        return kind(schedule, generated, cffi_driver(generated, QUANT_FLAGS))
    return Kernel(schedule, generated, cffi_driver(generated, HOST_ISA.compile_flags))
