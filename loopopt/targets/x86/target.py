"""``X86Target``: today's x86 generators, build and machine profile behind the Target interface."""
from __future__ import annotations

from ...amx import amx_available
from ...codegen.isa import ISA_PREFERENCE, available_int_isas, available_isas, resolve_isa
from ...codegen.tiles import check_amx_cpu
from ...kernel import Kernel, compile_schedule
from ...machine import machine_profile
from ...schedule import Schedule
from ..base import Target

TILE_ISA = "amx"     # the tile variant: quantized and bf16 ops on AMX tiles, chosen explicitly


class X86Target(Target):
    name = "x86"
    description = "x86-64 SIMD C (AVX-512, AVX2, scalar; AMX tiles), built with the host C compiler"

    def isas(self) -> tuple[str, ...]:
        return (*ISA_PREFERENCE, TILE_ISA)

    def available_isas(self, integer: bool = False) -> tuple[str, ...]:
        simd = available_int_isas() if integer else available_isas()
        return (*simd, TILE_ISA) if amx_available() else simd

    def resolve_isa(self, isa: str, integer: bool = False) -> str:
        if isa == TILE_ISA:
            check_amx_cpu()
            return isa
        return resolve_isa(isa, integer)

    def compile(self, schedule: Schedule, isa: str = "auto") -> Kernel:
        schedule.refuse_gpu_steps(self.name)
        kernel = compile_schedule(schedule, isa)
        kernel.target = self
        return kernel

    def peak(self, isa: str, dtype: str) -> float:
        return machine_profile().peak(isa, dtype)


TARGET = X86Target()
