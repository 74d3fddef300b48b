"""``X86Target``: today's x86 generators, build and machine profile behind the Target interface."""
from __future__ import annotations

import numpy as np

from ...kernel import Kernel
from ...machine import machine_profile
from ...ops import Op
from ...schedule import Schedule
from ..base import Target
from ..bytemap import ByteMap, PairMap
from ..core_costs import CoreCosts
from ..linear_quant import LinearQuant
from ..pair_program import PairArith, PairProgram
from ..transpose import Transpose
from .amx_runtime import amx_available
from .bytemap_c import x86_byte_map, x86_pair_map, x86_pool_byte_map
from .costs import X86_CORE_COSTS
from .families import compile_schedule, family_of
from .isa import (
    ISA_PREFERENCE,
    ISAS,
    TILE_ISA,
    available_int_isas,
    available_isas,
    resolve_isa,
)
from .pair_c import x86_pair_arith
from .quant_c import x86_linear_quant
from .search import X86Search
from .tiles import check_amx_cpu
from .transpose_c import x86_transpose


class X86Target(Target):
    name = "x86"
    description = "x86-64 SIMD C (AVX-512, AVX2, scalar; AMX tiles), built with the host C compiler"

    def isas(self) -> tuple[str, ...]:
        return (*ISA_PREFERENCE, TILE_ISA)

    def available_isas(self, integer: bool = False) -> tuple[str, ...]:
        simd = available_int_isas() if integer else available_isas()
        return (*simd, TILE_ISA) if amx_available() else simd

    def general_isas(self) -> tuple[str, ...]:
        return available_isas()

    def prepare_timing(self) -> None:
        machine_profile()

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

    def pseudocode(self, schedule: Schedule, isa: str = "auto") -> str:
        return family_of(schedule, isa).pseudocode(schedule, isa)

    def peak(self, isa: str, dtype: str) -> float:
        return machine_profile().peak(isa, dtype)

    def core_costs(self, isa: str) -> CoreCosts | None:
        return X86_CORE_COSTS.get(isa)

    def computes(self, isa: str, op: Op) -> bool:
        return isa != TILE_ISA or op.quant is not None or op.dtype == "bfloat16"

    def transpose(self) -> Transpose:
        return x86_transpose()

    def byte_map(self) -> ByteMap:
        return x86_byte_map()

    def pair_map(self) -> PairMap:
        return x86_pair_map()

    def pool_byte_map(self) -> ByteMap | None:
        return x86_pool_byte_map()

    def linear_quant(self, dtype: np.dtype) -> LinearQuant:
        return x86_linear_quant(dtype)

    def pair_arith(self, program: PairProgram) -> PairArith | None:
        return x86_pair_arith(program)

    def vector_flags(self) -> tuple[str, ...]:
        return ISAS[available_isas()[0]].compile_flags

    def search_rules(self) -> X86Search:
        return SEARCH


SEARCH = X86Search()
TARGET = X86Target()
