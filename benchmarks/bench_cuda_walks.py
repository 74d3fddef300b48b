"""The GEMM in no catalog (``bench_cuda_tune.NOVEL``: 2000x3000x1000, float16 out) on persistent walks by
clusters taken apart on an NVIDIA GPU: each kernel verified against float64, then timed in a CUDA graph
at K and 2K (rows of 2000 and 4000 bytes; some also at 1024 and 2048, rows of whole 128-byte lines), so
that the difference over the 16 steps of 64 added to each tile is the time of 64 more of K, and K's time
less its 16 such the fixed part (the launch, the pipeline's fill, the epilogues); cuBLAS the same way.
The kernels: the search's first choice (192 x 256 in one wave), 192 x 128 walked in pairs along the
columns (cuBLAS's form) on three and on two consumer warpgroups, 4 and 5 stages, with one, two and three
producer threads (``specialize.PRODUCERS``), and at depth 32; then the first choice, the walks of 5
stages and cuBLAS one launch (L2 overwritten) in alternation.

``python benchmarks/bench_cuda_walks.py [--json PATH]`` prints one line a kernel.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from bench_cuda_tensor import build_all, reference, run_variant, torch_tensors
from cuda_bench import environment, graph_median, interleaved_medians, torch_graph_median

import loopopt as lo
from loopopt.dataflows import gpu_wgmma
from loopopt.targets.cuda import specialize

M, N = 2000, 3000
STRADDLED, ALIGNED = (1000, 2000), (1024, 2048)     # K: rows straddling 128-byte lines, whole lines
FIRST = {"block_m": 192, "block_n": 256, "warps_m": 3, "warps_n": 1, "depth": 64, "swizzle": 128,
         "stages": 4, "engine": "tma"}
WALK = {"block_m": 192, "block_n": 128, "depth": 64, "swizzle": 128, "engine": "tma", "specialize": True,
        "persistent": True, "cluster": (1, 2)}
# name: (gpu_wgmma's arguments, producer threads, the K it runs at)
KERNELS = {"first choice 192x256": (FIRST, 2, STRADDLED + ALIGNED),
           **{f"walk in pairs {w}x{n} s{s}": (WALK | {"warps_m": w, "warps_n": n, "stages": s}, 2,
                                              STRADDLED + (ALIGNED if (w, s) == (3, 5) else ()))
              for w, n in ((3, 1), (1, 2)) for s in (4, 5)},
           **{f"walk in pairs 3x1 s5, {p} producer(s)": (WALK | {"warps_m": 3, "warps_n": 1, "stages": 5}, p,
                                                         STRADDLED) for p in (1, 3)},
           "walk in pairs 3x1 depth 32 s10": (WALK | {"warps_m": 3, "warps_n": 1, "depth": 32, "swizzle": 64,
                                                      "stages": 10}, 2, STRADDLED)}


def printed_with(producers: int, work: Callable[[], object]):
    """``work()``'s result with kernels printed with ``producers`` producer threads."""
    saved, specialize.PRODUCERS = specialize.PRODUCERS, producers
    try:
        return work()
    finally:
        specialize.PRODUCERS = saved


def schedule(arguments: dict, k: int) -> lo.Schedule:
    return gpu_wgmma(lo.Matmul(M, N, k, dtype="float16", out_dtype="float16"), **arguments)


def at_depth(k: int, one_launch: dict) -> list[dict]:
    """The rows of the GEMM at depth ``k``: cuBLAS's graph time, each kernel's that runs at ``k`` (verified
    first); at 1000 the first choice's and 5-stage walks' calls go into ``one_launch``, and cuBLAS's."""
    import cupy as cp
    import torch
    op = lo.Matmul(M, N, k, dtype="float16", out_dtype="float16")
    logical, stored = torch_tensors(op)
    expected = reference(op, logical)
    a, b = logical
    one_launch["cuBLAS"] = lambda: torch.matmul(a, b)
    rows = [{"kernel": "cuBLAS", "k": k, "graph_ms": torch_graph_median(one_launch["cuBLAS"]) * 1e3}]
    for name, (arguments, producers, depths) in KERNELS.items():
        if k not in depths:
            continue
        kernel = printed_with(producers, lambda arguments=arguments: schedule(arguments, k).compile(
            target="cuda"))
        row = {"kernel": name, "k": k, "producers": producers} | run_variant(kernel, stored, expected)
        out = cp.empty((M, N), kernel.parameter_dtype(op.output))
        buffers = kernel.bind(dict(zip(op.call_tensors, stored)) | {op.output: out})
        call = lambda kernel=kernel, buffers=buffers: kernel.run(buffers)
        row["graph_ms"] = graph_median(call) * 1e3
        rows.append(row)
        if k == STRADDLED[0] and (name.startswith("first") or name.endswith("s5")):
            one_launch[name] = call
    return rows


def bench() -> list[dict]:
    for producers in sorted({p for _, p, _ in KERNELS.values()}):     # nvcc on every core
        printed_with(producers, lambda producers=producers: build_all(
            [schedule(arguments, k) for arguments, p, depths in KERNELS.values() if p == producers
             for k in depths]))
    rows, one_launch = [], {}
    for k in STRADDLED + ALIGNED:
        calls: dict = {}
        rows += at_depth(k, calls)
        one_launch = one_launch or calls
    for row in rows:
        print(json.dumps(row), flush=True)
    names = list(one_launch)
    for repeat in range(2):
        peer_ms, *mine = (s * 1e3 for s in interleaved_medians(list(one_launch.values()), 9))
        for name, ms in zip(names[1:], mine):
            rows.append({"kernel": name, "k": STRADDLED[0], "interleaved": repeat, "ms": ms,
                         "cublas_ms": peer_ms, "cublas_over_loopopt": peer_ms / ms})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def steps(rows: list[dict]) -> None:
    """Each kernel's time of 64 more of K (ns) and fixed part (us) from its graph times at K and 2K (16
    steps of 64 a tile added at K = 1000 and 1024)."""
    graphs = {(r["kernel"], r["k"]): r["graph_ms"] * 1e3 for r in rows if "graph_ms" in r}
    for name in ["cuBLAS", *KERNELS]:
        for k, double in (STRADDLED, ALIGNED):
            if (name, k) in graphs:
                step = (graphs[name, double] - graphs[name, k]) / 16
                print(f"{name:40s} K={k}: {graphs[name, k]:6.2f} us, {double}: {graphs[name, double]:6.2f}; "
                      f"{step * 1e3:4.0f} ns per 64 of K, fixed {graphs[name, k] - 16 * step:5.2f} us")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the environment and rows to this file")
    args = parser.parse_args()
    rows = bench()
    steps(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": environment(), "rows": rows}, f, indent=1)
