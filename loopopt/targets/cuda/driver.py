"""``CudaDriver``: calls a built kernel's launcher (``printer.KERNEL_NAME``), loaded with cffi's ABI
mode, on device pointers; it launches on CuPy's current stream (the default one unless a ``with stream``
says otherwise), on which ``device.elapsed`` times it and ``device.graph_timer`` captures it."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cffi

from ...codegen.params import KernelParam
from ...driver import Driver
from . import device
from .printer import ERROR_NAME, KERNEL_NAME, CudaSource
from .toolchain import Build


class CudaError(RuntimeError):
    """A launch the CUDA runtime refused (the message names the error)."""


class CudaDriver(Driver):
    """The launcher of one built kernel: its arguments are device addresses (ints), one per pointer
    parameter, and the scalars."""

    def __init__(self, build: Build, printed: CudaSource):
        self._ffi = cffi.FFI()
        self._ffi.cdef(printed.cdef)
        self._library = self._ffi.dlopen(str(build.library))
        self._launch = getattr(self._library, KERNEL_NAME)
        self._error_string = getattr(self._library, ERROR_NAME)
        self._shape = f"grid {printed.grid}, block {printed.block}"

    def bind(self, params: tuple[KernelParam, ...], values: Mapping[str, Any]) -> tuple:
        return tuple(self._ffi.cast("void *", values[p.name]) if p.pointer else values[p.name]
                     for p in params)

    def call(self, arguments: tuple) -> None:
        """Launch (asynchronous: a copy back or an event waits for it); CudaError if CUDA refuses."""
        code = self._launch(*arguments, self._ffi.cast("void *", device.stream_pointer()))
        if code:
            message = self._ffi.string(self._error_string(code)).decode()
            raise CudaError(f"launching the kernel ({self._shape}): CUDA error {code}: {message}")

    def set_threads(self, n: int) -> None:
        raise ValueError("a CUDA kernel has no OpenMP threads: its threads are the loops bound to thread "
                         "axes")
