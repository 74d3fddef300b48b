"""``NeonTarget``: the x86 emitter's schedules printed from the NEON tables (``isa.py``), run natively or
under emulation (``toolchain.py``), with a modelled core (``profile.py``)."""
from __future__ import annotations

import platform
from collections.abc import Mapping

from ...cbuild import compile_c
from ...codegen import generate
from ...codegen.emit import KERNEL_NAME, THREADS_NAME
from ...codegen.params import KernelParam, signature
from ...codegen.pseudocode import render
from ...codegen.quantized import QUANT_FLAGS
from ...driver import CffiDriver, Driver
from ...kernel import Kernel, wrap
from ...schedule import Schedule, ScheduleError
from ..base import Target
from . import toolchain
from .isa import NAME, NEON, NEON_INT
from .profile import PROFILE
from .runner import EmulatedDriver, runner_source


def check_schedule(schedule: Schedule) -> None:
    """ScheduleError naming what NEON cannot run yet (the same on every machine)."""
    op = schedule.op
    if op.quant is not None and op.quant.binary:
        raise ScheduleError("isa 'neon' has no binary (XNOR + popcount, cnt) kernels yet; binary ops run on "
                            "target 'x86'")
    packed = schedule.weight_format_mode
    if packed != "int8":
        kind = ("cannot unpack i2_s ternary weights" if packed == "i2_s"
                else "has no table-lookup (tbl) kernels")
        raise ScheduleError(f"isa 'neon' {kind} yet: weight_format({packed!r}) runs on target 'x86'; "
                            f"without it the ternary weights are int8 bytes, which NEON runs")


def function_driver(source: str, function: str, params: tuple[KernelParam, ...], flags: tuple[str, ...],
                    threads: str | None = None, read_ahead: Mapping[str, int] | None = None) -> Driver:
    """A driver of ``function`` (taking ``params``; ``threads``: its OpenMP thread-count setter) of the
    C ``source`` built with ``flags`` (``-fopenmp`` among them for a parallel one): in this process on
    an AArch64 machine, else a runner under the emulator (``read_ahead``: bytes read past arrays)."""
    if toolchain.native():
        setter = f"\nvoid {threads}(int n);" if threads else ""
        cdef = f"{signature(function, params, restrict=False)};{setter}"
        module = compile_c(source, cdef, flags, ("-fopenmp",) if threads else ())
        return CffiDriver(module, function, threads)
    tools = toolchain.emulation()
    runner = toolchain.build_runner(runner_source(source, function, params, threads), flags, tools)
    return EmulatedDriver((*tools.command, str(runner)), params, read_ahead or {})


class NeonTarget(Target):
    name = "neon"
    description = ("AArch64 NEON C (fp32 fmla, int8 usdot), native through cffi on an ARM machine, else "
                   "cross-compiled and run under qemu-aarch64")

    def isas(self) -> tuple[str, ...]:
        return (NAME,)

    def available_isas(self, integer: bool = False) -> tuple[str, ...]:
        if toolchain.native():
            table = NEON_INT if integer else NEON
            return (NAME,) if set(table.cpu_flags) <= toolchain.cpu_features() else ()
        return () if toolchain.missing() else (NAME,)

    def resolve_isa(self, isa: str, integer: bool = False) -> str:
        if isa not in ("auto", NAME):
            raise ValueError(f"unknown isa {isa!r} for target 'neon': choose 'auto' or {NAME!r}")
        if toolchain.native():
            table = NEON_INT if integer else NEON
            lacking = sorted(set(table.cpu_flags) - toolchain.cpu_features())
            if lacking:
                raise ValueError(f"isa 'neon' needs CPU features {', '.join(lacking)} that this CPU lacks"
                                 f"{' for integer kernels' if integer else ''}")
        else:
            toolchain.emulation()
        return NAME

    def compile(self, schedule: Schedule, isa: str = "auto") -> Kernel:
        schedule.refuse_gpu_steps(self.name)
        check_schedule(schedule)
        generated = generate(schedule, NEON, bf16_dot=False)     # refusals before any machine check
        quantized = schedule.op.quant is not None
        self.resolve_isa(isa, integer=quantized)
        flags = generated.compile_flags + (QUANT_FLAGS if quantized else ())
        flags += ("-fopenmp",) if generated.openmp else ()
        threads = THREADS_NAME if generated.openmp else None
        driver = function_driver(generated.source, KERNEL_NAME, generated.params, flags, threads,
                                 generated.read_ahead)
        kernel = wrap(schedule, generated, driver)
        kernel.target = self
        return kernel

    def pseudocode(self, schedule: Schedule, isa: str = "auto") -> str:
        return render(schedule, NEON, bf16_dot=False)

    def peak(self, isa: str, dtype: str) -> float:
        return PROFILE.peak(dtype)

    def timing_refusal(self) -> str | None:
        if toolchain.native():
            return None
        return (f"neon kernels run under an emulator ({' or '.join(toolchain.EMULATORS)}) on this "
                f"{platform.machine()} machine, whose times say nothing of an ARM core")


TARGET = NeonTarget()
