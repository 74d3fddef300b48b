"""Host emulation of a CUDA schedule: the printed kernel with its block and thread loops run as CPU
loops, compiled as C and called like any kernel (``emulate(schedule)(x, w, b)``). It checks, without
a GPU, that the nest the cuda target prints computes the op: the same loops, dims, guards, layouts,
accumulators and stores, only the bound loops' variables come from loops instead of
``blockIdx``/``threadIdx``."""
from __future__ import annotations

from ...codegen import Generated
from ...codegen.instr import SCALAR
from ...kernel import Kernel, cffi_driver
from ...schedule import Schedule
from .printer import HOST, print_kernel

HOST_ISA = SCALAR       # scalar C: no vector instructions, as each GPU thread runs it


def emulate(schedule: Schedule) -> Kernel:
    """The host-C kernel of ``schedule``'s CUDA nest (ScheduleError where the cuda target refuses it)."""
    printed = print_kernel(schedule, HOST)
    generated = Generated(printed.source, printed.cdef, printed.arguments, printed.params, HOST_ISA, {},
                          False)
    return Kernel(schedule, generated, cffi_driver(generated, HOST_ISA.compile_flags))
