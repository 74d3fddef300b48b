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
from . import quantized
from .printer import HOST, print_kernel

HOST_ISA = SCALAR       # scalar C: no vector instructions, as each GPU thread runs it


class EmulatedQuantizedKernel(Kernel):
    """The host emulation of a quantized op's kernel, called as its CUDA kernel is
    (``kernel(xq, wq, b, x_zero_point=..., ...)``)."""

    def prepare(self, *arrays: np.ndarray, **params: Any) -> Buffers:
        return self.bind(quantized.call_values(self, arrays, params))

    def __call__(self, *arrays: np.ndarray, **params: Any) -> np.ndarray:
        buffers = self.prepare(*arrays, **params)
        self.run(buffers)
        return self.output(buffers)


def emulate(schedule: Schedule) -> Kernel:
    """The host-C kernel of ``schedule``'s CUDA nest (ScheduleError where the cuda target refuses it)."""
    printed = print_kernel(schedule, HOST)
    generated = Generated(printed.source, printed.cdef, printed.arguments, printed.params, HOST_ISA, {},
                          False)
    if schedule.op.quant is not None:   # requantization as quant.py rounds: no contracted multiply-add
        return EmulatedQuantizedKernel(schedule, generated, cffi_driver(generated, QUANT_FLAGS))
    return Kernel(schedule, generated, cffi_driver(generated, HOST_ISA.compile_flags))
