"""AMX on this core: the measured tile peaks next to the VNNI and FMA peaks, and the int8 tile GEMM.

Run ``python benchmarks/bench_amx.py [--shape M,N,K]`` on a CPU with AMX (one thread). The GEMM
(``loopopt.amx.AmxGemm``, B packed beforehand) is checked exactly against numpy, then timed on
prepared buffers on 64-byte boundaries: warm-up, then the median and the fastest of single calls.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from loopopt.amx import AmxGemm, amx_peak_gops, require_amx
from loopopt.buffers import aligned_copy, aligned_zeros
from loopopt.measure import peak_gflops


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="256,256,1024", help="M,N,K of the GEMM (default 256,256,1024)")
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    m, n, k = (int(x) for x in args.shape.split(","))
    require_amx()
    print(f"CPU: {cpu_model()}, one thread")
    vnni = peak_gflops("avx512", "int8")
    amx_int8, amx_bf16 = amx_peak_gops("int8"), amx_peak_gops("bf16")
    print(f"peak fp32 FMA (AVX-512)   {peak_gflops('avx512', 'float32'):9.1f} GFLOP/s")
    print(f"peak int8 VNNI (vpdpbusd) {vnni:9.1f} GOP/s")
    print(f"peak int8 AMX (TDPBUSD)   {amx_int8:9.1f} GOP/s  ({amx_int8 / vnni:.1f}x VNNI)")
    print(f"peak bf16 AMX (TDPBF16PS) {amx_bf16:9.1f} GFLOP/s")

    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    gemm = AmxGemm(m, n, k)
    packed, out = gemm.pack_b(b), aligned_zeros((m, n), np.int32)
    a = aligned_copy(a)        # on a cache line, as AmxGemm would copy it otherwise (not timed here)
    gemm(a, packed, out)
    if not np.array_equal(out, a.astype(np.int64) @ b.astype(np.int64)):
        raise SystemExit("AmxGemm result differs from numpy")
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        gemm(a, packed, out)
        times.append(time.perf_counter() - start)
    ops = 2 * m * n * k
    for label, t in (("median", float(np.median(times))), ("fastest", min(times))):
        gops = ops / t / 1e9
        print(f"AmxGemm {m}x{n}x{k} {label:7} {t * 1e6:8.1f} us = {gops:7.1f} GOP/s = "
              f"{100 * gops / amx_int8:4.1f}% of the AMX int8 peak, {gops / vnni:.1f}x the VNNI peak")


if __name__ == "__main__":
    main()
