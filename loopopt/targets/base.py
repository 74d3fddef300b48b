"""The target interface: what turns a target-neutral Schedule into a kernel for one kind of processor.

A target owns its instruction-set variants (``isas``: e.g. x86's ``avx512``, ``avx2``, ``scalar``,
``amx``), which of them this machine runs, how a schedule becomes a callable kernel (code, build,
load: its toolchain and driver), and the peak every "% of peak" of its kernels is judged against.
The runtime, the search, the ONNX backend and the reports see targets only through this interface
and the registry (``targets/registry.py``); a new target is a folder under ``targets/`` plus one
registry line.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from ..codegen.pseudocode import render
from .bytemap import ByteMap, PairMap, portable_byte_map, portable_pair_map
from .linear_quant import LinearQuant, linear_quant
from .pair_program import PairArith, PairProgram
from .pool_c import PoolKernel, pool_kernels
from .transpose import Transpose, portable_transpose

if TYPE_CHECKING:
    from ..kernel import Kernel
    from ..ops import Op
    from ..pool import PoolSchedule
    from ..schedule import Schedule
    from .core_costs import CoreCosts
    from .kernel_counts import KernelCounts
    from .search import SearchRules


class TargetUnavailableError(RuntimeError):
    """A target cannot build or run kernels here (a missing toolchain, emulator or device); says why."""


class Target(ABC):
    """A kind of processor kernels are generated for."""

    name: str                   # registry name: "x86", "neon", "cuda"
    description: str            # one line for tables and ``loopopt targets``
    has_device = False          # kernels run on a device beside the host (a GPU), not on its CPU

    @abstractmethod
    def isas(self) -> tuple[str, ...]:
        """Every instruction-set variant of this target, best first (``isa=`` of ``compile``)."""

    @abstractmethod
    def available_isas(self, integer: bool = False) -> tuple[str, ...]:
        """The variants this machine builds and runs, best first; ``integer``: for quantized kernels."""

    @abstractmethod
    def resolve_isa(self, isa: str, integer: bool = False) -> str:
        """``"auto"`` becomes the best available variant; an unknown or unavailable one is a ValueError
        that names it and what is allowed."""

    def variant(self, isa: str, integer: bool = False) -> str:
        """The variant ``isa`` names, on any machine: ``"auto"`` as ``resolve_isa`` makes it, a named one
        as it is (choosing a schedule for it, its pseudo-code, the kernel model and generated code need
        nothing of this machine; ``compile`` checks it runs here); an unknown one is a ValueError."""
        return isa if isa in self.isas() else self.resolve_isa(isa, integer)

    @abstractmethod
    def compile(self, schedule: Schedule, isa: str = "auto") -> Kernel:
        """Generate, build (cached) and load ``schedule``'s kernel for variant ``isa``. A schedule this
        target cannot run is a ScheduleError (checked first, the same on every machine); a variant
        this machine lacks is a ValueError; a missing toolchain a TargetUnavailableError."""

    def compile_many(self, schedules: Sequence[Schedule], isa: str = "auto") -> list[Kernel]:
        """The kernels of ``schedules`` (as ``compile``); a target that builds many at once faster
        (NEON under emulation: one runner executable) overrides it."""
        return [self.compile(schedule, isa) for schedule in schedules]

    @abstractmethod
    def peak(self, isa: str, dtype: str) -> float:
        """The peak (G ops/s, one core or one device) of variant ``isa`` for ``dtype`` that "% of peak"
        is measured against."""

    def general_isas(self) -> tuple[str, ...]:
        """The variants of ``available_isas`` that compute every op, best first (``lo.available_isas``;
        x86: without the AMX tiles, which compute int8 and bfloat16 only)."""
        return self.available_isas()

    def prepare_timing(self) -> None:
        """Measure, once in this process, what timing this target's kernels reads (a host's peaks), before
        ``lo.tune`` hands its trials to worker processes; the default: nothing."""
        return None

    def pseudocode(self, schedule: Schedule, isa: str = "auto") -> str:
        """``schedule``'s kernel on variant ``isa`` as readable loop-nest pseudo-code
        (``Schedule.pseudocode``). The default is the target-neutral nest, without an instruction
        set's notes; a C-like target passes its table to ``codegen.pseudocode.render``."""
        return render(schedule)

    def peak_source(self, isa: str) -> str:
        """What ``peak`` is, for a table's heading: a measured core, a device's product of units."""
        return "one core, machine profile"

    def device(self) -> str | None:
        """The device the kernels run on, beside the host (e.g. a GPU's name), or None: the host."""
        return None

    def require_device(self) -> None:
        """TargetUnavailableError saying what is missing where this target's device is not here
        (nothing for a target that runs on the host): asked before anything is built."""
        if self.has_device:
            self.device()

    def array_module(self) -> ModuleType:
        """The array library of the memory its kernels read and write (numpy, the default: the
        host's; a GPU target's: CuPy, TargetUnavailableError where it or the device is missing)."""
        return np

    def emulate(self, schedule: Schedule) -> Kernel:
        """The host emulation of ``schedule``'s kernel on this target, called as on the host (numpy
        arrays, the kernel's own parameter types), where the target has one; TargetUnavailableError
        (the default) where it has none."""
        raise TargetUnavailableError(f"the {self.name} target has no host emulation of its kernels")

    def fingerprint(self) -> str | None:
        """What the tuning log keys this target's trials by where that is not this host (its
        ``machine.fingerprint``, None, the default): a device target's device."""
        return None

    def run_timer(self) -> Callable[[Callable[[], object]], float] | None:
        """How ``measure`` times one run of this target's kernels: None where the host's clock around
        the call does (a kernel that returns when it is done); for kernels that run asynchronously on
        a device, a function that runs the call and returns the seconds the device took."""
        return None

    def graph_timer(self, run: Callable[[], object]) -> Callable[[], float]:
        """A function of no arguments giving the seconds of one ``run`` replayed inside a CUDA graph
        (``measure(..., graph=True)``); ValueError for a target whose kernels run on the host."""
        raise ValueError(f"graph=True times kernels replayed in a CUDA graph; the {self.name} target's "
                         f"kernels run on the host: measure them without it")

    def matrix_instruction(self, name: str):
        """The entry ``name`` of this target's table of warp-wide matrix instructions (``tensorize``),
        with its ``m, n, k`` and ``inputs`` dtype; ValueError where it has none of that name."""
        raise ValueError(f"the {self.name} target has no matrix instructions (tensorize compiles with "
                         f"target='cuda')")

    def computes(self, isa: str, op: Op) -> bool:
        """Whether variant ``isa`` computes ``op``'s arithmetic (x86's AMX tiles: quantized and bfloat16
        ops only); the default: every variant computes every op it is given."""
        return True

    def bf16_dot(self, isa: str) -> bool:
        """Whether variant ``isa``'s bfloat16 kernels consume the reduction in pairs with its bf16 table's
        ``dot`` where a schedule allows (the instruction runs where the kernels do); the default: no."""
        return False

    def search_rules(self) -> SearchRules:
        """How ``lo.tune`` searches this target's kernels: candidates, ranking, cost models
        (``targets/search.py``); a ValueError where it has none."""
        raise ValueError(f"the {self.name} target has no search rules: lo.tune searches x86 kernels "
                         f"(isa='auto' on an x86 host, or one of x86's variants), neon kernels "
                         f"(target='neon') and cuda kernels (target='cuda')")

    def core_costs(self, isa: str) -> CoreCosts | None:
        """The kernel model's constants of the core that runs variant ``isa``'s kernels (``model.py``),
        or None where the model has none (its kernels are not priced: x86's AMX tiles, CUDA)."""
        return None

    def byte_map(self) -> ByteMap:
        """The 8-bit table lookup over a byte array on this host (``targets/bytemap.py``): the
        portable C loop, unless the target has a vector version its CPU runs."""
        return portable_byte_map()

    def transpose(self) -> Transpose:
        """The batched 2-D transposes a kernel call packs its activations with on this host
        (``targets/transpose.py``): the portable tile loops built with ``vector_flags``, unless the
        target has vector code of its own."""
        return portable_transpose(self.vector_flags())

    def vector_flags(self) -> tuple[str, ...]:
        """Compiler flags that let the portable C loops of ``targets/`` (``linear_quant``) use this host's
        vector instructions: none by default."""
        return ()

    def linear_quant(self, dtype: np.dtype) -> LinearQuant:
        """The QuantizeLinear / DequantizeLinear loops of the 8-bit ``dtype`` on this host
        (``targets/linear_quant.py``): the portable loops built with ``vector_flags``, unless the target
        has vector code of its own."""
        return linear_quant(np.dtype(dtype), self.vector_flags())

    def pool_kernels(self, schedules: Sequence[PoolSchedule]) -> list[PoolKernel]:
        """The kernels of pooling schedules (``pool.PoolSchedule``) on this host, built at once: the
        generated C of ``targets/pool_c.py``, its channel blocks vectorized with ``vector_flags``, NCHW
        inputs copied channels-last by ``transpose``, 8-bit tables looked up by ``pool_byte_map``."""
        lookup = self.pool_byte_map()
        return pool_kernels(tuple(schedules), self.vector_flags(), self.transpose(),
                            None if lookup is None else (lookup.source, lookup.flags))

    def pool_byte_map(self) -> ByteMap | None:
        """The byte map (``targets/bytemap.py``) whose one-thread loop a pool kernel calls to look its maxima
        up in an 8-bit table (``PoolSchedule.table``), or None: the kernel loads each from the table (the
        default)."""
        return None

    def pair_map(self) -> PairMap:
        """The lookup of two bytes in a 65,536-byte table over byte arrays on this host
        (``targets/bytemap.py``): the portable C loop, unless the target has a faster version."""
        return portable_pair_map()

    def pair_arith(self, program: PairProgram) -> PairArith | None:
        """``program`` (``targets/pair_program.py``: a pair lookup's steps as arithmetic) compiled for this
        host, or None where the target computes none (its pair lookups look up the table)."""
        return None

    def unmodelled(self, schedule: Schedule) -> str | None:
        """Why the kernel model (``model.py``) does not price ``schedule``'s kernel on this target (a
        family of its own that it neither counts itself nor lets the SIMD counter count: CUDA's GEMV), or
        None: it does."""
        return None

    def own_counts(self, schedule: Schedule, isa: str) -> KernelCounts | None:
        """The kernel model's counts (``model.py``) of ``schedule``'s kernel on variant ``isa`` where it is
        a kernel family of the target's own, which the counter of the table-driven SIMD nest does not
        walk; None (the default): that counter counts it."""
        return None

    def timing_refusal(self) -> str | None:
        """Why kernels of this target cannot be timed here (e.g. they run under an emulator), or None."""
        return None

    def __repr__(self) -> str:
        return f"<Target {self.name}: {self.description}>"
