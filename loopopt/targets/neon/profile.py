"""The ARM core NEON kernels are judged against: modelled from the vendor's published figures, not
measured (kernels here run under an emulator). A Neoverse V1 class core (AWS Graviton3) at 2.6 GHz:
four 128-bit Advanced SIMD pipes, each issuing one ``fmla`` (4 fp32 multiply-adds) or one
``sdot``/``usdot`` (16 int8 multiply-adds) per cycle."""
from __future__ import annotations

from dataclasses import dataclass

from .isa import LANES


@dataclass(frozen=True)
class CoreProfile:
    """One core's modelled clock and vector pipes."""

    core: str
    clock_ghz: float
    simd_pipes: int            # 128-bit pipes, each one fmla or dot instruction per cycle

    def peak(self, dtype: str) -> float:
        """G ops/s of one core: fp32 ``fmla`` (2 flops per lane; bfloat16 and float16 too, widened to
        fp32), or int8 ``sdot``/``usdot`` (4 multiply-adds per int32 lane, 2 ops each); ValueError for
        another dtype."""
        per_lane = {"float32": 2, "bfloat16": 2, "float16": 2, "int8": 8}
        if dtype not in per_lane:
            raise ValueError(f"target 'neon' has no {dtype} kernels yet: peaks for "
                             f"{', '.join(map(repr, per_lane))}")
        return self.simd_pipes * LANES * per_lane[dtype] * self.clock_ghz


PROFILE = CoreProfile(core="Neoverse V1 (modelled, not measured)", clock_ghz=2.6, simd_pipes=4)
