"""The ARM core NEON kernels are judged against: modelled from the vendor's published figures, not
measured (kernels here run under an emulator). A Neoverse V1 class core (AWS Graviton3) at 2.6 GHz:
four 128-bit Advanced SIMD pipes, each issuing one ``fmla`` (4 fp32 multiply-adds) or one
``sdot``/``usdot`` (16 int8 multiply-adds) per cycle."""
from __future__ import annotations

from dataclasses import dataclass

from ..core_costs import CoreCosts
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

# The kernel model's constants of that core (modelled, not measured), from Arm's software optimization
# guide: four 128-bit SIMD pipes, 3 loads and 2 stores per cycle, 8-wide dispatch, a 256-entry reorder
# buffer; no mask registers or gathers: masked accesses, gathers and scatters are lane-by-lane helpers
# (a lane through memory each), a mask 3 instructions (dup, tst). Scalar events, store forwarding and
# the scalar add's latency are taken as x86's Golden Cove's (targets/x86/costs.py).
CORE_COSTS = CoreCosts(fma_per_cycle=4, vector_per_cycle=4, loads_per_cycle=3, stores_per_cycle=2,
                       issue_per_cycle=8, gather_lane=1.0, scatter_lane=1.0, masked=6, mask=3, hsum=2,
                       loop_iteration=2, definition=1, division=8, guard_check=2, lane_step=1,
                       store_forward=5, scalar_add_latency=2, window=256)
