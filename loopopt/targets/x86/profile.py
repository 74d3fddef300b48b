"""x86's part of the machine profile (``machine.py``): the instruction-set features the CPU key names,
one core's peaks, measured (the fp32 FMA, int8 dot and bf16 pair dot throughput of each SIMD table
this CPU runs, a loop of independent multiply-add chains; the scalar multiply-add rate of a machine
without SIMD; the AMX tile peaks, ``amx_runtime.amx_peak_gops``) and read back (``peak_of``), and
the read kernel of the bandwidth measurement (the best SIMD loads).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...cbuild import DEFAULT_OPT_LEVEL, compile_c
from ...codegen.arith import BF16_PAIR
from ...codegen.instr import Isa
from ...codegen.quantized import DOT
from ..peak import PEAK_ITERATIONS, best_of_rounds, peak_gops
from ..peak import timed as timed  # the machine profile's bandwidth runs (machine.py)
from .amx import AMX
from .amx_runtime import amx_available, amx_peak_gops
from .isa import (
    BF16_DOT_FLAGS,
    BF16_ISAS,
    INT_ISAS,
    ISA_PREFERENCE,
    ISAS,
    TILE_ISA,
    available_int_isas,
    available_isas,
    bf16_dot_available,
)

# what the CPU key says about the instruction sets: each feature loopopt has kernels for and the
# /proc/cpuinfo flags it needs
KEY_FEATURES = (("avx2", ISAS["avx2"].cpu_flags), ("avx512", ISAS["avx512"].cpu_flags),
                ("vnni", INT_ISAS["avx512"].cpu_flags), ("bf16", BF16_DOT_FLAGS), ("amx", AMX.cpu_flags))
PEAK_ISAS = ISA_PREFERENCE + (TILE_ISA,)   # the tiles: int8 and bfloat16 (TDPBUSD, TDPBF16PS tile loops)
AMX_PEAKS = {"int8": "int8", "bfloat16": "bf16"}   # profile dtype -> amx_peak_gops dtype
# per element type: (tables, available ISAs, operands a and b, one chain update, ops per lane per update)
_PEAK_KINDS: dict[str, tuple[dict[str, Isa], Callable[[], tuple[str, ...]], tuple[str, str, str],
                             Callable[[Isa], str], int]] = {
    "float32": (ISAS, available_isas, ("0.999f", "1e-3f", "1.0f"),
                lambda t: t.fma(a="a", b="acc[i]", c="b"), 2),
    "int8": (INT_ISAS, available_int_isas, ("0x01020304", "0x01010101", "1"),
             lambda t: t.dot(a="a", b="b", c="acc[i]"), 2 * DOT),
    # the float table with the bf16 table's vdpbf16ps: float vectors reinterpreted as bf16 pairs
    "bfloat16": ({isa: replace(ISAS[isa], prelude=BF16_ISAS[isa].prelude,
                               compile_flags=BF16_ISAS[isa].compile_flags,
                               ops=ISAS[isa].ops | {"dot": BF16_ISAS[isa].dot})
                  for isa in ISAS if "dot" in BF16_ISAS[isa].ops},
                 lambda: tuple(isa for isa in available_isas() if bf16_dot_available(isa)),
                 ("0.999f", "1e-3f", "1.0f"), lambda t: t.dot(a="a", b="b", c="acc[i]"), 2 * BF16_PAIR),
}

_READ_SOURCE = """{prelude}
#include <stdlib.h>

float *lo_buffer(long n)
{{
    float *p = aligned_alloc(64, (size_t)n * sizeof(float));
    if (p) for (long i = 0; i < n; ++i) p[i] = 1.0f;
    return p;
}}

void lo_free(float *p) {{ free(p); }}

/* Read p[0..n) (n a multiple of {step}) `passes` times into {chains} independent sums. */
float lo_read(const float *p, long n, long passes)
{{
    {vt} acc[{chains}];
    const {vt} one = {one};
    for (int i = 0; i < {chains}; ++i) acc[i] = {zero};
    for (long r = 0; r < passes; ++r)
        for (long j = 0; j < n; j += {step}) {{
#pragma GCC unroll {chains}
            for (int i = 0; i < {chains}; ++i) acc[i] = {update};
        }}
    {vt} total = {zero};
    for (int i = 0; i < {chains}; ++i) total = {add};
    return {hsum};
}}
"""
_READ_CDEF = ("float *lo_buffer(long n); void lo_free(float *p); "
              "float lo_read(const float *p, long n, long passes);")


def measure_peak(isa: str, dtype: str = "float32") -> float:
    """Measure one core's peak (G ops/s) of a SIMD ``isa``: FMA throughput for float32 (2 flops
    per lane), u8 x s8 dot throughput for int8 (VNNI ``vpdpbusd``, AVX2 ``vpmaddwd`` sequence;
    8 ops per int32 lane), bf16 pair dot throughput for bfloat16 (``vdpbf16ps``, 4 flops per
    float32 lane). Best of several short runs."""
    if dtype not in _PEAK_KINDS:
        raise ValueError(f"peak: dtype={dtype!r} is not supported; "
                         f"allowed: {', '.join(map(repr, _PEAK_KINDS))}")
    tables, _, values, update, ops = _PEAK_KINDS[dtype]
    table = tables[isa]
    if not table.vectorizes:
        raise ValueError(f"measure_peak: {isa!r} is not a SIMD ISA; use measure_scalar_peak()")
    return peak_gops(table, update(table), values, ops)


def measure_scalar_peak() -> float:
    """One core's scalar float multiply-add rate (GFLOP/s), the peak of a machine without SIMD."""
    module = compile_c("float lo_peak(long n){float a=0.f;for(long i=0;i<n;++i)a=a*0.999f+1e-3f;return a;}",
                       "float lo_peak(long n);", level=DEFAULT_OPT_LEVEL)
    return 2 * PEAK_ITERATIONS / best_of_rounds(module.lib.lo_peak, PEAK_ITERATIONS) / 1e9


def read_kernel() -> tuple[Any, int]:
    """The library of the read kernel (8 independent vector sums, the best SIMD loads) and the
    floats it reads per step."""
    table = ISAS[available_isas()[0]]
    chains = 8
    step = chains * table.lanes
    source = _READ_SOURCE.format(
        prelude=table.prelude, chains=chains, step=step, vt=table.vector_type, one=table.broadcast(s="1.0f"),
        zero=table.zero(),
        update=table.fma(a=table.load(p=f"p + j + i * {table.lanes}"), b="one", c="acc[i]"),
        add=table.fma(a="acc[i]", b="one", c="total"), hsum=table.hsum(v="total"))
    return compile_c(source, _READ_CDEF, table.compile_flags, level=DEFAULT_OPT_LEVEL), step


def measure_peaks() -> dict[str, dict[str, float]]:
    """Every peak this CPU has (dtype -> ISA -> G ops/s on one core): each SIMD table it runs, the
    scalar rate where it runs none, and the AMX tiles where Linux grants them."""
    peaks: dict[str, dict[str, float]] = {}
    for dtype, (tables, available, *_) in _PEAK_KINDS.items():
        peaks[dtype] = {isa: measure_peak(isa, dtype) for isa in available() if tables[isa].vectorizes}
    if not peaks["float32"]:
        peaks["float32"]["scalar"] = measure_scalar_peak()
    if amx_available():
        for dtype, tiles in AMX_PEAKS.items():
            peaks[dtype]["amx"] = amx_peak_gops(tiles)
    return peaks


def peak_isas(dtype: str) -> tuple[str, ...]:
    """The variants a profile may hold a ``dtype`` peak of."""
    return PEAK_ISAS if dtype in AMX_PEAKS else ISA_PREFERENCE


def peak_of(peaks: dict[str, dict[str, float]], isa: str, dtype: str, cpu: str) -> float:
    """The peak of ``isa`` for ``dtype`` from a profile's ``peaks`` (``MachineProfile.peak``): ``auto``
    and ``scalar`` get the best SIMD ISA's; bfloat16 the faster of the pair dot and float32 FMA;
    ValueError naming an unknown variant, or one ``cpu`` has no measured peak of."""
    if dtype == "bfloat16":
        dots = peaks[dtype]
        if isa == TILE_ISA:
            return _measured(peaks, isa, dtype, cpu)
        simd = [peak for name, peak in dots.items() if name != TILE_ISA]
        dot = max(simd, default=0.0) if isa in ("auto", "scalar") else dots.get(isa, 0.0)
        return max(dot, peak_of(peaks, isa, "float32", cpu))
    measured = peaks[dtype]
    if isa in ("auto", "scalar") and isa not in measured:
        best = next((name for name in ISA_PREFERENCE if name in measured), None)
        return measured[best] if best else peaks["float32"]["scalar"]
    return _measured(peaks, isa, dtype, cpu)


def _measured(peaks: dict[str, dict[str, float]], isa: str, dtype: str, cpu: str) -> float:
    """The measured peak of ``isa`` and ``dtype``; ValueError saying why there is none."""
    measured = peaks[dtype]
    if isa in measured:
        return measured[isa]
    if isa not in PEAK_ISAS:
        raise ValueError(f"unknown isa {isa!r}: choose one of 'auto', "
                         f"{', '.join(map(repr, PEAK_ISAS))}")
    raise ValueError(f"isa {isa!r} cannot run {dtype} kernels on this CPU ({cpu}); "
                     f"measured: {', '.join(measured) or 'none'}")
