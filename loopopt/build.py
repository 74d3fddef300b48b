"""From a Schedule to a callable Kernel: ISA choice, code generation, cffi build, numpy calls."""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .buffers import aligned_copy, aligned_zeros
from .cbuild import compile_c
from .codegen import ISAS, Generated, generate
from .codegen.isa import INT_ISAS
from .codegen.emit import KERNEL_NAME, THREADS_NAME
from .schedule import Schedule

ISA_PREFERENCE = ("avx512", "avx2", "scalar")
QUANT_FLAGS = ("-ffp-contract=off", "-fwrapv", "-fopenmp-simd")


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags of this machine (from /proc/cpuinfo; empty if unreadable)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def available_isas() -> tuple[str, ...]:
    """ISAs this CPU can run, best first (``scalar`` always)."""
    return tuple(name for name in ISA_PREFERENCE if set(ISAS[name].cpu_flags) <= cpu_flags())


def available_int_isas() -> tuple[str, ...]:
    """ISAs this CPU can run integer (quantized) kernels on, best first (AVX-512 needs VNNI)."""
    return tuple(name for name in ISA_PREFERENCE if set(INT_ISAS[name].cpu_flags) <= cpu_flags())


def resolve_isa(isa: str, integer: bool = False) -> str:
    """``auto`` becomes the best available ISA; an unknown or unsupported one is a ValueError.

    ``integer``: for a quantized kernel (the integer tables, e.g. AVX-512 needs VNNI)."""
    tables, available = (INT_ISAS, available_int_isas()) if integer else (ISAS, available_isas())
    if isa == "auto":
        return available[0]
    if isa not in tables:
        raise ValueError(f"unknown isa {isa!r}: choose one of 'auto', {', '.join(map(repr, ISA_PREFERENCE))}")
    if isa not in available:
        missing = sorted(set(tables[isa].cpu_flags) - cpu_flags())
        raise ValueError(f"isa {isa!r} needs CPU features {', '.join(missing)} that this CPU lacks"
                         f"{' for integer kernels' if integer else ''}; available: {', '.join(available)}")
    return isa


@dataclass
class Buffers:
    """Storage-layout arrays of one call, ready for the C function."""

    arrays: dict[str, np.ndarray]
    pointers: tuple


class Kernel:
    """A compiled schedule: call it on numpy arrays in the op's logical layouts."""

    def __init__(self, schedule: Schedule, generated: Generated, module):
        self.schedule = schedule
        self.op = schedule.op
        self.generated = generated
        self.isa = generated.isa.name
        self.source = generated.source
        self._ffi = module.ffi
        self._function = getattr(module.lib, KERNEL_NAME)
        self._set_threads = getattr(module.lib, THREADS_NAME) if generated.openmp else None
        self.threads = (int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))
                        if generated.openmp else 1)

    def set_threads(self, n: int) -> None:
        """Run the schedule's parallel loop on ``n`` OpenMP threads (default: one per core)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"threads must be an integer >= 1, got {n!r}")
        if self._set_threads is None:
            if n > 1:
                raise ValueError(f"this kernel has no parallel loop, so it runs on one thread; "
                                 f"add .parallel(<loop>) to the schedule to use {n}")
            return
        self._set_threads(n)
        self.threads = n

    def __repr__(self) -> str:
        return f"<Kernel {self.isa} for {self.op!r}, {len(self.schedule.steps)} schedule steps>"

    @property
    def workspace_bytes(self) -> int:
        """Bytes of storage-layout copies the kernel works on (inputs, weights, output)."""
        return sum(int(np.prod(self.schedule.layout_of(t).storage_shape(self.op.tensor(t).shape))) * 4
                   for t in self.op.tensors)

    def _check(self, name: str, array, shape: tuple[int, ...]) -> np.ndarray:
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name} must be a numpy array, got {type(array).__name__}")
        if array.dtype != np.float32:
            raise TypeError(f"{name} has dtype {array.dtype}; this kernel takes float32 "
                            f"(convert with {name}.astype(np.float32))")
        if array.shape != shape:
            raise ValueError(f"{name} has shape {array.shape}; {self.op!r} expects {shape}")
        if not array.flags.c_contiguous:
            raise ValueError(f"{name} is not C-contiguous; pass np.ascontiguousarray({name})")
        return array

    def _given(self, arrays: tuple) -> list:
        """The call's arrays, one per input argument (a trailing None bias dropped); ValueError if
        their number is wrong."""
        wanted = self.generated.arguments[:-1]
        given = list(arrays)
        if getattr(self.op, "bias", False) and len(given) == len(wanted) - 1:
            raise ValueError(f"{self.op!r} has a bias: call kernel(x, w, b)")
        if len(given) == len(wanted) + 1 and given[-1] is None:
            given.pop()
        if len(given) != len(wanted):
            raise ValueError(f"kernel takes {len(wanted)} arrays ({', '.join(wanted)}), got {len(given)}")
        return given

    def prepare(self, *arrays: np.ndarray) -> Buffers:
        """Validate logical-layout inputs and copy them into the schedule's storage layouts."""
        args = self.generated.arguments
        wanted = args[:-1]
        given = self._given(arrays)
        has_bias = getattr(self.op, "bias", False)
        storage: dict[str, np.ndarray] = {}
        for tensor, array in zip(wanted, given):
            info = self.op.tensor(tensor)
            self._check(tensor, array, info.shape)
            is_bias = has_bias and tensor == "B"
            storage[tensor] = aligned_copy(array) if is_bias else self.schedule.layout_of(tensor).to_storage(array)
        out = self.op.output
        storage[out] = aligned_zeros(self.schedule.layout_of(out).storage_shape(self.op.tensor(out).shape),
                                     np.float32)
        pointers = tuple(self._ffi.cast("float *", self._ffi.from_buffer(storage[t])) for t in args)
        return Buffers(storage, pointers)

    def run(self, buffers: Buffers) -> None:
        """Execute the kernel on prepared buffers (the timed part)."""
        self._function(*buffers.pointers)

    def output(self, buffers: Buffers) -> np.ndarray:
        """The output of the last run, in the op's logical layout."""
        out = self.op.output
        return self.schedule.layout_of(out).from_storage(buffers.arrays[out], self.op.tensor(out).shape)

    def __call__(self, *arrays: np.ndarray) -> np.ndarray:
        buffers = self.prepare(*arrays)
        self.run(buffers)
        return self.output(buffers)


def compile_schedule(schedule: Schedule, isa: str = "auto") -> Kernel:
    """Generate C for ``schedule`` on ``isa``, build it through the cache, and wrap it."""
    quantized = schedule.op.quant is not None
    isa_name = resolve_isa(isa, integer=quantized)
    generated = generate(schedule, ISAS[isa_name])
    openmp = ("-fopenmp",) if generated.openmp else ()
    # quantized kernels: the integer table's flags; float32 products without contraction (requantization
    # must match quant.py bit for bit) and wrapping int32 arithmetic (compensation terms)
    flags = INT_ISAS[isa_name].compile_flags + QUANT_FLAGS if quantized else ISAS[isa_name].compile_flags
    module = compile_c(generated.source, generated.cdef, flags + openmp, openmp)
    if quantized:
        from .qkernel import QuantizedKernel
        return QuantizedKernel(schedule, generated, module, generated.plan)
    return Kernel(schedule, generated, module)
