"""The ARM core NEON kernels are judged against. On an AArch64 machine its peaks are measured (``peak``:
``measured_peaks``, the loop of independent ``fmla`` / ``usdot`` chains of ``targets/peak.py``); elsewhere
(kernels run under an emulator) they are modelled from the vendor's published figures: a Neoverse V1
class core (AWS Graviton3) at 2.6 GHz, four 128-bit Advanced SIMD pipes, each issuing one ``fmla`` (4
fp32 multiply-adds) or one ``sdot``/``usdot`` (16 int8 multiply-adds) per cycle. The kernel model's
instruction costs (``CORE_COSTS``) are that core's either way; its clock follows the peak."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ..core_costs import CoreCosts
from ..peak import peak_gops
from . import toolchain
from .isa import INT_FEATURES, LANES, NEON, NEON_INT

INT8_OPS = 8                       # per int32 lane of a dot: 4 multiply-adds
PEAK_VALUES = {"float32": ("0.999f", "1e-3f", "1.0f"), "int8": ("0x01020304", "0x01010101", "1")}


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


def peak_kernels(features: frozenset[str]) -> dict[str, tuple]:
    """The peak loops (``targets/peak.py``) a core of ``features`` runs, by dtype: its table, one chain
    update, the operands and the ops per lane and update: fp32 ``fmla``; int8 ``usdot`` (FEAT_I8MM), else
    ``sdot`` (FEAT_DotProd), else none."""
    kernels = {"float32": (NEON, NEON.fma(a="a", b="acc[i]", c="b"), PEAK_VALUES["float32"], 2)}
    if set(INT_FEATURES) <= features:
        kernels["int8"] = (NEON_INT, NEON_INT.dot(a="a", b="b", c="acc[i]"), PEAK_VALUES["int8"], INT8_OPS)
    elif "asimddp" in features:
        kernels["int8"] = (NEON_INT, NEON_INT.dot_s8(a="a", b="b", c="acc[i]"), PEAK_VALUES["int8"], INT8_OPS)
    return kernels


@cache
def measured_peaks() -> dict[str, float]:
    """One core's peaks (G ops/s by dtype) measured on this AArch64 machine, once per process."""
    return {dtype: peak_gops(*kernel) for dtype, kernel in peak_kernels(toolchain.cpu_features()).items()}


def core_peak(dtype: str) -> float:
    """One core's peak for ``dtype`` kernels: measured on an AArch64 machine (bfloat16 and float16 are
    widened to fp32 lanes: the fp32 peak), else the modelled core's; ValueError for a dtype without NEON
    kernels, or int8 natively on a core without the dot product."""
    modelled = PROFILE.peak(dtype)
    if not toolchain.native():
        return modelled
    measured = measured_peaks()
    kind = "int8" if dtype == "int8" else "float32"
    if kind not in measured:
        raise ValueError("target 'neon' has no int8 peak on this CPU: it lacks the dot product (asimddp)")
    return measured[kind]
