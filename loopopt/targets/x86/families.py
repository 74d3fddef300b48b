"""x86's kernel families: the one place that decides how a schedule becomes x86 C.

A ``Family`` is one generator with the schedules it takes (``takes(schedule, isa)``), its build flags and
its kernel class (``build``), and the pseudo-code of the nest its kernel runs (``pseudocode``).
``FAMILIES`` are asked in order and the first that takes a schedule builds it (``family_of``): binary ops
(XNOR + popcount, any variant but the tiles), the AMX tiles (``isa="amx"``), table-lookup ternary weights
(``weight_format("tl1" | "tl2")``), else the SIMD C emitter (``codegen/``) with x86's tables. The target,
the command line and the search ask ``family_of`` instead of re-deriving the choice.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...cbuild import compile_c
from ...codegen import generate
from ...codegen.emit import KERNEL_NAME, THREADS_NAME
from ...codegen.pseudocode import header, render
from ...codegen.quantized import QUANT_FLAGS
from ...driver import CffiDriver
from ...kernel import Kernel, cffi_driver, wrap
from ...schedule import Schedule, ScheduleError
from .. import binary, lut
from ..binary import BinaryKernel, generate_binary
from ..lut import LutKernel, generate_lut
from ..lut_format import FORMATS
from . import tiles
from .binary import POPCOUNTS, VARIANTS
from .isa import (
    INT_ISAS,
    ISA_PREFERENCE,
    ISAS,
    TILE_ISA,
    bf16_dot_available,
    byte_permute_flags,
    cpu_flags,
    named_isa,
    require_cpu,
)
from .kernels import Bf16TileKernel, TileKernel
from .lut_c import LookupC, check_lut_on
from .tiles import check_amx_cpu, generate_tiles


@dataclass(frozen=True)
class Family:
    """One way a schedule becomes an x86 kernel."""

    name: str
    generator: str                                  # the module that writes its C
    takes: Callable[[Schedule, str], bool]          # (schedule, isa as asked) -> this family builds it
    build: Callable[[Schedule, str], Kernel]        # generate, compile with its flags, wrap in its class
    pseudocode: Callable[[Schedule, str], str]      # its kernel's nest as Schedule.pseudocode prints it
    no_epilogue: str = ""     # why it fuses no ``clip``/``add_residual`` ("": it fuses them)


def compile_binary(schedule: Schedule, isa: str = "auto", popcount: str = "auto") -> BinaryKernel:
    """The XNOR + popcount kernel of a binary op (``targets/binary.py``) on ``isa``. ``popcount``:
    ``"vpopcntq"`` (AVX-512 VPOPCNTDQ), ``"nibble"`` (vpshufb table), ``"builtin"`` (scalar), or
    ``"auto"`` (vpopcntq where the CPU has it)."""
    name = named_isa(isa, integer=True)
    choices = POPCOUNTS[name]
    if popcount == "auto":
        popcount = "vpopcntq" if "vpopcntq" in choices and "avx512_vpopcntdq" in cpu_flags() else choices[-1]
    if popcount not in choices:
        raise ValueError(f"popcount={popcount!r} is not available on isa {name!r}; allowed: "
                         f"{', '.join(map(repr, choices))} (or 'auto')")
    generated = generate_binary(schedule, VARIANTS[name], popcount)    # refusals first, as _compile_lut
    require_cpu(name, integer=True)
    if popcount == "vpopcntq" and "avx512_vpopcntdq" not in cpu_flags():
        raise ValueError("popcount='vpopcntq' needs AVX-512 VPOPCNTDQ (avx512_vpopcntdq in /proc/cpuinfo); "
                         "this CPU lacks it: use 'nibble'")
    module = compile_c(generated.source, generated.cdef, generated.compile_flags + QUANT_FLAGS)
    driver = CffiDriver(module, KERNEL_NAME, THREADS_NAME if generated.openmp else None)
    return BinaryKernel(schedule, generated, driver, VARIANTS[name], popcount)


def _compile_binary(schedule: Schedule, isa: str) -> Kernel:
    if isa == TILE_ISA:
        raise ScheduleError(f"isa {TILE_ISA!r} has no binary kernels; a binary op compiles to XNOR + "
                            f"popcount on {', '.join(map(repr, ISA_PREFERENCE[:-1]))} "
                            f"or {ISA_PREFERENCE[-1]!r}")
    return compile_binary(schedule, isa)


def _compile_tiles(schedule: Schedule, isa: str) -> Kernel:
    generated = generate_tiles(schedule)    # a schedule AMX cannot run is refused the same on every CPU
    check_amx_cpu()
    driver = cffi_driver(generated, generated.isa.compile_flags + QUANT_FLAGS)
    if generated.plan is None:
        return Bf16TileKernel(schedule, generated, driver)
    return TileKernel(schedule, generated, driver, generated.plan)


def _compile_lut(schedule: Schedule, isa: str) -> Kernel:
    name = named_isa(isa, integer=True)
    check_lut_on(schedule, name)
    generated = generate_lut(schedule, LookupC(name))    # refusals first, the same on every CPU
    require_cpu(name, integer=True)
    driver = cffi_driver(generated, generated.compile_flags + QUANT_FLAGS)
    return LutKernel(schedule, generated, driver, generated.plan)


def _compile_simd(schedule: Schedule, isa: str) -> Kernel:
    quantized = schedule.op.quant is not None
    name = named_isa(isa, integer=quantized)
    generated = generate(schedule, ISAS[name], bf16_dot=bf16_dot_available(name))   # refusals first
    require_cpu(name, integer=quantized)
    # quantized kernels: the integer table's flags; float32 products without contraction (requantization
    # must match quant.py bit for bit) and wrapping int32 arithmetic (compensation terms)
    flags = INT_ISAS[name].compile_flags + QUANT_FLAGS if quantized else generated.compile_flags
    if quantized and (generated.plan.tap_dot is not None or generated.plan.requantized_clip is not None):
        flags += byte_permute_flags(name)
    return wrap(schedule, generated, cffi_driver(generated, flags))


def _simd_pseudocode(schedule: Schedule, isa: str) -> str:
    name = named_isa(isa, integer=schedule.op.quant is not None)
    return render(schedule, ISAS[name], bf16_dot_available(name))


def _binary_pseudocode(schedule: Schedule, isa: str) -> str:   # packed bits in the kernel's own layouts
    return "\n".join(header(schedule) + binary.pseudocode(schedule, VARIANTS[named_isa(isa, integer=True)]))


def _tiles_pseudocode(schedule: Schedule, isa: str) -> str:
    return "\n".join(header(schedule) + tiles.pseudocode(schedule))


def _lut_pseudocode(schedule: Schedule, isa: str) -> str:
    name = named_isa(isa, integer=True)
    check_lut_on(schedule, name)
    return "\n".join(header(schedule) + lut.pseudocode(schedule, LookupC(name)))


def _is_binary(schedule: Schedule, isa: str) -> bool:
    return schedule.op.quant is not None and schedule.op.quant.binary


FAMILIES: tuple[Family, ...] = (
    Family("binary", "targets/binary.py", _is_binary, _compile_binary, _binary_pseudocode,
           binary.NO_EPILOGUE),
    Family("amx tiles", "targets/x86/tiles.py", lambda schedule, isa: isa == TILE_ISA, _compile_tiles,
           _tiles_pseudocode, "each tile store runs the tile family's own epilogue (bias, scales, "
           "requantization) on a scratch of the tile"),
    Family("table lookup", "targets/lut.py",
           lambda schedule, isa: schedule.weight_format_mode in FORMATS, _compile_lut, _lut_pseudocode,
           lut.NO_EPILOGUE),
    Family("simd", "codegen/emit.py", lambda schedule, isa: True, _compile_simd, _simd_pseudocode),
)


def family_of(schedule: Schedule, isa: str = "auto") -> Family:
    """The family that builds ``schedule`` on ``isa`` (as asked: ``"auto"``, a SIMD variant or ``"amx"``)."""
    return next(family for family in FAMILIES if family.takes(schedule, isa))


def compile_schedule(schedule: Schedule, isa: str = "auto") -> Kernel:
    """Generate C for ``schedule`` on ``isa`` with its family, build it through the cache, and wrap it;
    ScheduleError for a fused epilogue the family has not."""
    family = family_of(schedule, isa)
    if family.no_epilogue:
        schedule.refuse_epilogue(f"x86's {family.name}", family.no_epilogue)
    return family.build(schedule, isa)
