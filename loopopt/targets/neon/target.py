"""``NeonTarget``: the x86 emitter's schedules printed from the NEON tables (``isa.py``), run natively or
under emulation (``toolchain.py``), with a modelled core (``profile.py``)."""
from __future__ import annotations

import platform
from collections.abc import Callable, Sequence

from ...cbuild import compile_c
from ...codegen import generate
from ...codegen.emit import KERNEL_NAME, THREADS_NAME
from ...codegen.instr import tables
from ...codegen.params import signature
from ...codegen.pseudocode import header, render
from ...codegen.quantized import QUANT_FLAGS
from ...driver import CffiDriver, Driver
from ...kernel import Kernel, QuantizedKernel, wrap
from ...schedule import Schedule
from ..base import Target
from ..binary import NO_EPILOGUE as NO_BINARY_EPILOGUE
from ..binary import BinaryKernel, generate_binary
from ..binary import pseudocode as pseudocode_of_binary
from ..core_costs import CoreCosts
from ..kernel_counts import KernelCounts
from ..lut import NO_EPILOGUE as NO_LUT_EPILOGUE
from ..lut import LutKernel, generate_lut
from ..lut import pseudocode as pseudocode_of_lut
from ..lut_format import FORMATS
from . import binary, mmla, toolchain
from .counts import own_counts
from .isa import BF16_DOT_FEATURES, BFDOT_NAME, BFDOT_ROUNDOFF, NAME, NEON, NEON_INT
from .lut import LOOKUP
from .profile import CORE_COSTS, core_peak, measured_peaks
from .runner import EmulatedDriver, RunnerCase
from .search import NeonSearch


def function_drivers(cases: Sequence[RunnerCase]) -> list[Driver]:
    """A driver of each case's function: in this process on an AArch64 machine (a library of the kernel
    cache each), else a case of one runner of them all under the emulator (one build for all)."""
    if toolchain.native():
        return [native_driver(case) for case in cases]
    tools = toolchain.emulation()
    runner = toolchain.build_runner(cases, tools)
    return [EmulatedDriver((*tools.command, str(runner)), index, case) for index, case in enumerate(cases)]


def native_driver(case: RunnerCase) -> Driver:
    """``case``'s function built through cffi and called in this process."""
    setter = f"\nvoid {case.threads}(int n);" if case.threads else ""
    cdef = f"{signature(case.function, case.params, restrict=False)};{setter}"
    module = compile_c(case.source, cdef, case.flags, ("-fopenmp",) if case.threads else ())
    return CffiDriver(module, case.function, case.threads)


def kernel_case(schedule: Schedule, isa: str = NAME) -> tuple[RunnerCase, Callable[[Driver], Kernel]]:
    """``schedule``'s NEON C on variant ``isa`` as a runner case, and how its kernel wraps a driver of it;
    ScheduleError for what NEON cannot run (before any machine check)."""
    schedule.refuse_gpu_steps(NeonTarget.name, float16=True)
    if is_binary(schedule):
        schedule.refuse_epilogue("NEON's binary", NO_BINARY_EPILOGUE)
        generated = generate_binary(schedule, binary.VARIANT, binary.POPCOUNT)
        flags = generated.compile_flags + QUANT_FLAGS
        case = RunnerCase(generated.source, KERNEL_NAME, generated.params, flags)
        return case, lambda driver: BinaryKernel(schedule, generated, driver, binary.VARIANT, binary.POPCOUNT)
    if mmla.is_mmla(schedule):
        generated = mmla.generate_mmla(schedule)
        flags = generated.compile_flags + QUANT_FLAGS + (("-fopenmp",) if generated.openmp else ())
        case = RunnerCase(generated.source, KERNEL_NAME, generated.params, flags,
                          THREADS_NAME if generated.openmp else None, generated.read_ahead)
        return case, lambda driver: QuantizedKernel(schedule, generated, driver, generated.plan)
    table_lookup = is_table_lookup(schedule)
    if table_lookup:
        schedule.refuse_epilogue("NEON's table lookup", NO_LUT_EPILOGUE)
    generated = (generate_lut(schedule, LOOKUP) if table_lookup
                 else generate(schedule, tables(isa).floats, bf16_dot=TARGET.bf16_dot(isa)))
    flags = generated.compile_flags + (QUANT_FLAGS if schedule.op.quant is not None else ())
    flags += ("-fopenmp",) if generated.openmp else ()
    threads = THREADS_NAME if generated.openmp else None
    case = RunnerCase(generated.source, KERNEL_NAME, generated.params, flags, threads, generated.read_ahead)
    if table_lookup:
        return case, lambda driver: LutKernel(schedule, generated, driver, generated.plan)
    return case, lambda driver: wrap(schedule, generated, driver)


def needs(isa: str, integer: bool) -> frozenset[str]:
    """The CPU features variant ``isa`` needs (integer: for quantized kernels): the opt-in ``neon_bfdot``
    bfdot's FEAT_BF16 besides neon's."""
    table = NEON_INT if integer else NEON
    return frozenset(table.cpu_flags) | (frozenset(BF16_DOT_FEATURES) if isa == BFDOT_NAME else frozenset())


def is_binary(schedule: Schedule) -> bool:
    return schedule.op.quant is not None and schedule.op.quant.binary


def is_table_lookup(schedule: Schedule) -> bool:
    return schedule.weight_format_mode in FORMATS


class NeonTarget(Target):
    name = "neon"
    description = ("AArch64 NEON C (fp32 fmla, int8 usdot, ternary tbl lookups, binary cnt), native through "
                   "cffi on an ARM machine, else cross-compiled and run under qemu-aarch64")

    def isas(self) -> tuple[str, ...]:
        return (NAME, BFDOT_NAME)

    def available_isas(self, integer: bool = False) -> tuple[str, ...]:
        if toolchain.native():
            return tuple(isa for isa in self.isas() if not needs(isa, integer) - toolchain.cpu_features())
        return () if toolchain.missing() else self.isas()

    def variant(self, isa: str, integer: bool = False) -> str:
        """The variant ``isa`` names (``"auto"``: neon, for floats and integers alike), checked against
        ``isas`` only; ValueError naming the allowed ones."""
        if isa not in ("auto", *self.isas()):
            raise ValueError(f"unknown isa {isa!r} for target 'neon': choose 'auto', "
                             f"{', '.join(map(repr, self.isas()))}")
        return NAME if isa == "auto" else isa

    def resolve_isa(self, isa: str, integer: bool = False) -> str:
        isa = self.variant(isa)
        if toolchain.native():
            lacking = sorted(needs(isa, integer) - toolchain.cpu_features())
            if lacking:
                raise ValueError(f"isa {isa!r} needs CPU features {', '.join(lacking)} that this CPU lacks"
                                 f"{' for integer kernels' if integer else ''}")
        else:
            toolchain.emulation()
        return isa

    def compile(self, schedule: Schedule, isa: str = "auto") -> Kernel:
        return self.compile_many([schedule], isa)[0]

    def compile_many(self, schedules: Sequence[Schedule], isa: str = "auto") -> list[Kernel]:
        """The kernels of ``schedules`` (as ``compile``), built together: under emulation one runner
        executable for them all."""
        built = [kernel_case(schedule, self.variant(isa)) for schedule in schedules]
        isa = self.resolve_isa(isa, integer=any(schedule.op.quant is not None for schedule in schedules))
        drivers = function_drivers([case for case, _ in built])
        kernels = [kernel_of(driver) for (_, kernel_of), driver in zip(built, drivers, strict=True)]
        for kernel in kernels:
            kernel.target = self
            if isa == BFDOT_NAME and kernel.op.dtype == "bfloat16":
                kernel.sum_roundoff = BFDOT_ROUNDOFF      # bfdot's sums round to odd (isa.py)
        return kernels

    def pseudocode(self, schedule: Schedule, isa: str = "auto") -> str:
        if is_binary(schedule):     # packed bits in the kernel's own layouts
            return "\n".join(header(schedule) + pseudocode_of_binary(schedule, binary.VARIANT))
        if is_table_lookup(schedule):
            return "\n".join(header(schedule) + pseudocode_of_lut(schedule, LOOKUP))
        if mmla.is_mmla(schedule):
            return "\n".join(mmla.pseudocode(schedule))
        variant = self.variant(isa)
        return render(schedule, tables(variant).floats, self.bf16_dot(variant))

    def search_rules(self) -> NeonSearch:
        return NeonSearch()

    def bf16_dot(self, isa: str) -> bool:
        """bfmlalb/bfmlalt (FEAT_BF16; the opt-in ``neon_bfdot``: bfdot): under emulation (``-cpu max``
        has it), natively where the CPU does."""
        return not toolchain.native() or set(BF16_DOT_FEATURES) <= toolchain.cpu_features()

    def peak(self, isa: str, dtype: str) -> float:
        return core_peak(dtype)

    def prepare_timing(self) -> None:
        if toolchain.native():
            measured_peaks()

    def core_costs(self, isa: str) -> CoreCosts | None:
        return CORE_COSTS

    def own_counts(self, schedule: Schedule, isa: str) -> KernelCounts | None:
        return own_counts(schedule)

    def timing_refusal(self) -> str | None:
        if toolchain.native():
            return None
        return (f"neon kernels run under an emulator ({' or '.join(toolchain.EMULATORS)}) on this "
                f"{platform.machine()} machine, whose times say nothing of an ARM core")


TARGET = NeonTarget()
