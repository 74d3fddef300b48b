"""Timing of kernels and this machine's measured peak."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .buffers import MemoryLimitError, check_memory
from .cbuild import compile_c
from .codegen.isa import INT_ISAS, ISAS, available_int_isas, available_isas
from .codegen.quantized import DOT
from .kernel import Kernel
from .quant_reference import random_call, reference_output
from .quant_reference import tolerance as quant_tolerance


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
    unit: str = "GFLOP/s"      # quantized kernels: GOP/s (2 integer ops per multiply-accumulate)
    unverified: str = ""       # why the output could not be verified (the reference needs too much memory)

    def __str__(self) -> str:
        check = ("verified" if self.verified else f"not verified: {self.unverified}" if self.unverified
                 else "NOT verified")
        return (f"median {self.median * 1e3:.3f} ms (min {self.min * 1e3:.3f}, IQR {self.iqr * 1e3:.3f}, "
                f"n={self.repeats}), {self.gflops:.2f} {self.unit} = {self.percent_of_peak:.1f}% of "
                f"{self.peak_gflops:.1f} {self.unit} peak, {check}")


_PEAK_SOURCE = """{prelude}
/* {chains} independent multiply-add chains so both vector pipes stay busy. */
float lo_peak(long iterations)
{{
    {vt} acc[{chains}];
    const {vt} a = {bcast_a}, b = {bcast_b};
    for (int i = 0; i < {chains}; ++i) acc[i] = {zero};
    for (long it = 0; it < iterations; ++it) {{
#pragma GCC unroll {chains}
        for (int i = 0; i < {chains}; ++i) acc[i] = {update};
    }}
    {vt} total = {zero};
    for (int i = 0; i < {chains}; ++i) total = {add};
    return {hsum};
}}
"""

# per element type: (tables, available ISAs, operands a and b, one chain update, ops per lane per update)
_PEAK_KINDS = {
    "float32": (ISAS, available_isas, ("0.999f", "1e-3f", "1.0f"), lambda t: t.fma(a="a", b="acc[i]", c="b"), 2),
    "int8": (INT_ISAS, available_int_isas, ("0x01020304", "0x01010101", "1"),
             lambda t: t.dot(a="a", b="b", c="acc[i]"), 2 * DOT),
}


@lru_cache(maxsize=None)
def peak_gflops(isa: str = "auto", dtype: str = "float32") -> float:
    """Measured single-thread peak (G ops/s) of ``isa`` on this machine.

    ``dtype="float32"``: FMA throughput (2 flops per lane). ``"int8"``: throughput of the
    u8 x s8 dot instruction of the integer table (VNNI ``vpdpbusd``; AVX2 ``vpmaddwd``
    sequence), 8 ops (4 multiply-adds) per int32 lane.
    """
    if dtype not in _PEAK_KINDS:
        raise ValueError(f"peak_gflops: dtype={dtype!r} is not supported; allowed: 'float32', 'int8'")
    tables, available, (value_a, value_b, one), update, ops = _PEAK_KINDS[dtype]
    name = available()[0] if isa == "auto" else isa
    table = tables[name]
    if not table.vectorizes:  # scalar kernels are still measured against the machine's SIMD peak
        table = tables[available()[0]]
    if not table.vectorizes:  # no SIMD at all: the scalar multiply-add rate is the peak
        return _scalar_peak()
    chains = 12
    source = _PEAK_SOURCE.format(
        prelude=table.prelude, chains=chains, vt=table.vector_type,
        bcast_a=table.broadcast(s=value_a), bcast_b=table.broadcast(s=value_b), zero=table.zero(),
        update=update(table), add=table.fma(a="acc[i]", b=table.broadcast(s=one), c="total"),
        hsum=table.hsum(v="total"))
    module = compile_c(source, "float lo_peak(long iterations);", table.compile_flags)
    # many short runs: the fastest one is the least disturbed by other processes on a busy machine
    iterations = 400_000
    best = min(_timed(module.lib.lo_peak, iterations) for _ in range(40))
    return iterations * chains * table.lanes * ops / best / 1e9


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


def _call(kernel: Kernel, seed: int) -> tuple[list[np.ndarray], dict]:
    """Random arrays and keyword parameters of one call (quantized: calibrated parameters)."""
    if kernel.op.quant is not None:
        return random_call(kernel.op, seed)
    return _call_arguments(kernel, kernel.op.random_inputs(seed)), {}


def verify(kernel: Kernel, seed: int = 0) -> tuple[bool, float]:
    """Run ``kernel`` on random inputs and compare with the reference; (ok, max abs error).

    Quantized kernels are checked against quant.py's exact reference: requantized outputs
    bit for bit, float32 outputs within float32 rounding (``quant_reference.tolerance``).
    The reference is computed in blocks of the batch (``Op.reference_blocks``, which raises
    MemoryLimitError if one batch item's reference does not fit the available memory).
    """
    op = kernel.op
    blocks = op.reference_blocks()
    args, params = _call(kernel, seed)
    result = kernel(*args, **params)
    ok, worst = True, 0.0
    for rows in blocks:
        block = [args[0][rows], *args[1:]]
        if op.quant is None:
            inputs = dict(zip(kernel.generated.arguments, block, strict=False))   # without the output
            expected, bound = op.reference(*block), tolerance(op, inputs)
        else:
            expected = reference_output(op, block, params)
            bound = (np.zeros(expected.shape) if op.quant.requantized else
                     quant_tolerance(op, block, params, kernel.schedule.arithmetic_mode == "dequantize"))
        error = np.abs(result[rows].astype(np.float64) - expected.astype(np.float64))
        ok, worst = ok and bool(np.all(error <= bound)), max(worst, float(error.max(initial=0.0)))
    return ok, worst


def measure(kernel: Kernel, repeats: int | None = None, warmup: int = 1, budget: float = 1.0,
            verify_output: bool = True, seed: int = 0) -> Timing:
    """Time ``kernel`` on prepared buffers: warm-up, then ``repeats`` runs (default: fit ``budget`` s)."""
    if not isinstance(kernel, Kernel):
        hint = "; call .compile() first: measure(schedule.compile())" if hasattr(kernel, "compile") else ""
        raise TypeError(f"measure takes a compiled Kernel, got a {type(kernel).__name__}{hint}")
    if repeats is not None and repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    op = kernel.op
    check_memory(f"measuring {op!r}", kernel.call_bytes())
    args, params = _call(kernel, seed)
    buffers = kernel.prepare(*args, **params)
    first = _timed(kernel.run, buffers)
    for _ in range(max(0, warmup - 1)):
        kernel.run(buffers)
    count = repeats or int(min(200, max(3, budget / max(first, 1e-6))))
    times = np.array([_timed(kernel.run, buffers) for _ in range(count)])
    del args, params, buffers           # verify makes its own call
    ok, error, unverified = False, float("nan"), ""
    if verify_output:
        try:
            ok, error = verify(kernel, seed)
        except MemoryLimitError as err:
            unverified = str(err)
    median = float(np.median(times))
    q75, q25 = np.percentile(times, [75, 25])
    gflops = op.flops / median / 1e9
    dtype = "float32" if op.quant is None else "int8"   # quantized: GOP/s against the int8 dot peak
    peak = peak_gflops(kernel.isa, dtype) * kernel.threads
    return Timing(median, float(times.min()), float(q75 - q25), count, gflops, 100 * gflops / peak, peak,
                  ok, error, tuple(times.tolist()), "GFLOP/s" if op.quant is None else "GOP/s", unverified)

