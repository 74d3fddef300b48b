"""Drivers: how a compiled kernel function is called with its arguments.

A ``Kernel`` prepares numpy buffers by parameter name; its driver turns them into the call's
arguments (``bind``) and runs the function on them (``call``). ``CffiDriver`` calls a function of a
shared object loaded through cffi in this process (x86, and NEON on an AArch64 machine); a target whose
kernels run elsewhere (e.g. under an emulator: ``targets/neon/runner.py``) brings a driver of its own.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

from .cbuild import Library
from .codegen.params import KernelParam


class Driver(ABC):
    """Calls one compiled kernel function."""

    @abstractmethod
    def bind(self, params: tuple[KernelParam, ...], values: Mapping[str, Any]) -> tuple:
        """The call's arguments: each parameter's value looked up by its name (arrays: numpy arrays
        in storage layout, which ``call`` may write)."""

    @abstractmethod
    def call(self, arguments: tuple) -> None:
        """Run the function on ``bind``'s arguments (the timed part)."""

    @abstractmethod
    def set_threads(self, n: int) -> None:
        """Run the function's parallel loop on ``n`` OpenMP threads."""

    def function(self) -> Callable[..., None]:
        """``call`` as a function of the arguments themselves (a plan repeats a call with it)."""
        return lambda *arguments: self.call(arguments)


class CffiDriver(Driver):
    """A function of a library loaded in this process (its arrays passed as pointers, not copied)."""

    def __init__(self, library: Library, function: str, threads: str | None = None):
        self._ffi = library.ffi
        self._function = getattr(library.lib, function)
        self._set_threads = getattr(library.lib, threads) if threads else None

    def bind(self, params: tuple[KernelParam, ...], values: Mapping[str, Any]) -> tuple:
        cast = lambda ctype, array: self._ffi.cast(f"{ctype} *", self._ffi.from_buffer(array))
        return tuple(cast(p.ctype, values[p.name]) if p.pointer else values[p.name] for p in params)

    def call(self, arguments: tuple) -> None:
        self._function(*arguments)

    def function(self) -> Callable[..., None]:
        return self._function

    def set_threads(self, n: int) -> None:
        if self._set_threads is None:
            raise ValueError("this kernel has no OpenMP thread-count setter (it has no parallel loop)")
        self._set_threads(n)
