"""Timing of kernels and this machine's measured peak."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .build import Kernel, available_isas
from .cbuild import compile_c
from .codegen import ISAS


@dataclass(frozen=True)
class Timing:
    """Runtime statistics of a kernel (seconds) with derived throughput."""

    median: float
    min: float
    iqr: float
    repeats: int
    gflops: float
    percent_of_peak: float
    peak_gflops: float
    verified: bool
    max_error: float
    times: tuple[float, ...] = field(repr=False, default=())

    def __str__(self) -> str:
        check = "verified" if self.verified else "NOT verified"
        return (f"median {self.median * 1e3:.3f} ms (min {self.min * 1e3:.3f}, IQR {self.iqr * 1e3:.3f}, "
                f"n={self.repeats}), {self.gflops:.2f} GFLOP/s = {self.percent_of_peak:.1f}% of "
                f"{self.peak_gflops:.1f} GFLOP/s peak, {check}")


_PEAK_SOURCE = """{prelude}
/* {chains} independent FMA chains so both FMA pipes stay busy. */
float lo_peak(long iterations)
{{
    {vt} acc[{chains}];
    const {vt} a = {bcast_a}, b = {bcast_b};
    for (int i = 0; i < {chains}; ++i) acc[i] = {zero};
    for (long it = 0; it < iterations; ++it) {{
#pragma GCC unroll {chains}
        for (int i = 0; i < {chains}; ++i) acc[i] = {fma};
    }}
    {vt} total = {zero};
    for (int i = 0; i < {chains}; ++i) total = {add};
    return {hsum};
}}
"""


@lru_cache(maxsize=None)
def peak_gflops(isa: str = "auto") -> float:
    """Measured single-thread fp32 peak (GFLOP/s) of ``isa`` on this machine (FMA throughput)."""
    name = available_isas()[0] if isa == "auto" else isa
    table = ISAS[name]
    if not table.vectorizes:  # scalar kernels are still measured against the machine's SIMD peak
        table = ISAS[available_isas()[0]]
    if not table.vectorizes:  # no SIMD at all: the scalar multiply-add rate is the peak
        return _scalar_peak()
    chains = 12
    source = _PEAK_SOURCE.format(
        prelude=table.prelude, chains=chains, vt=table.vector_type,
        bcast_a=table.broadcast(s="0.999f"), bcast_b=table.broadcast(s="1e-3f"), zero=table.zero(),
        fma=table.fma(a="a", b="acc[i]", c="b"), add=table.fma(a="acc[i]", b=table.broadcast(s="1.0f"), c="total"),
        hsum=table.hsum(v="total"))
    module = compile_c(source, "float lo_peak(long iterations);", table.compile_flags)
    iterations = 2_000_000
    best = min(_timed(module.lib.lo_peak, iterations) for _ in range(5))
    flops = iterations * chains * table.lanes * 2
    return flops / best / 1e9


def _scalar_peak() -> float:
    module = compile_c("float lo_peak(long n){float a=0.f;for(long i=0;i<n;++i)a=a*0.999f+1e-3f;return a;}",
                       "float lo_peak(long n);")
    return 2 * 10_000_000 / min(_timed(module.lib.lo_peak, 10_000_000) for _ in range(3)) / 1e9


def _timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def tolerance(op, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """Elementwise error bound of a float32 kernel: 2 * n * eps * sum |terms| (+ tiny)."""
    abs_inputs = [np.abs(inputs[t]) for t in op.inputs]
    magnitude = op.reference(*abs_inputs)
    reduction = max(1, op.macs // max(1, int(np.prod(op.tensor(op.output).shape))))
    return 2 * reduction * np.finfo(np.float32).eps * magnitude + 1e-6


def _call_arguments(kernel: Kernel, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The kernel's input arrays (inputs, then bias if any) picked from ``inputs`` by tensor name."""
    return [inputs[t] for t in kernel.generated.arguments[:-1]]


def verify(kernel: Kernel, seed: int = 0) -> tuple[bool, float]:
    """Run ``kernel`` on random inputs and compare with the reference; (ok, max abs error)."""
    op = kernel.op
    inputs = op.random_inputs(seed)
    args = _call_arguments(kernel, inputs)
    result = kernel(*args)
    expected = op.reference(*args)
    error = np.abs(result - expected)
    return bool(np.all(error <= tolerance(op, inputs))), float(error.max())


def measure(kernel: Kernel, repeats: int | None = None, warmup: int = 1, budget: float = 1.0,
            verify_output: bool = True, seed: int = 0) -> Timing:
    """Time ``kernel`` on prepared buffers: warm-up, then ``repeats`` runs (default: fit ``budget`` s)."""
    if repeats is not None and repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    op = kernel.op
    inputs = op.random_inputs(seed)
    buffers = kernel.prepare(*_call_arguments(kernel, inputs))
    first = _timed(kernel.run, buffers)
    for _ in range(max(0, warmup - 1)):
        kernel.run(buffers)
    count = repeats or int(min(200, max(3, budget / max(first, 1e-6))))
    times = np.array([_timed(kernel.run, buffers) for _ in range(count)])
    ok, error = verify(kernel, seed) if verify_output else (False, float("nan"))
    median = float(np.median(times))
    q75, q25 = np.percentile(times, [75, 25])
    gflops = op.flops / median / 1e9
    peak = peak_gflops(kernel.isa) * (_threads(kernel))
    return Timing(median, float(times.min()), float(q75 - q25), count, gflops, 100 * gflops / peak, peak,
                  ok, error, tuple(times.tolist()))


def _threads(kernel: Kernel) -> int:
    if kernel.schedule.parallel_loop is None:
        return 1
    return int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))
