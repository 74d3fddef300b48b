"""The k-step of a warp-specialized wgmma kernel taken apart on an NVIDIA GPU: BERT's 384x768x3072 on
64 x 64 tiles (one consumer warpgroup, depth 64, 8 stages, 128-byte swizzle; unclustered and in clusters
of 1x2 and 1x4), its printed CUDA patched to leave one thing out, each timed in a CUDA graph at K and 2K
so that the difference over the added steps is the time of one step (the launch, the pipeline's fill and
the epilogue cancel); cuBLAS's the same way.

The patches (each asserts the text it changes, so a printer change that moves it fails loudly): without
copies (the full barriers expect 0 bytes, no TMA issued), without products (no wgmma: the consumers only
wait, fence, commit and release), neither (the mbarrier protocol alone), and A's copies alone (B's boxes
not issued, A's bytes expected). Their sums are wrong: the patched kernels are timed, never verified; the
kernels as printed are verified against float64 first, then timed one launch (L2 overwritten) in
alternation with cuBLAS. (One producer thread issued the copies before ``specialize.PRODUCERS`` = 2: 167 ns
a step unclustered, against 144 with two; the consumers' loop unrolled over the ring with the wgmma
descriptors in uniform registers: 95, the protocol alone 46.)

``python benchmarks/bench_cuda_kstep.py [--clusters "unclustered;cluster 1x2"] [--patches "neither"]
[--json PATH]`` prints one line a kernel and patch (ms at K and 2K, ns a step), cuBLAS's, and the
interleaved one-launch times.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from bench_cuda_tensor import reference, run_variant, torch_tensors
from cuda_bench import environment, graph_median, interleaved_medians, torch_graph_median

import loopopt as lo
from loopopt.codegen import Generated
from loopopt.codegen.instr import SCALAR
from loopopt.dataflows import gpu_wgmma
from loopopt.targets.cuda import device, toolchain
from loopopt.targets.cuda.kernel import CudaKernel
from loopopt.targets.cuda.printer import print_kernel
from loopopt.targets.cuda.target import build_arch

M, N, K = 384, 768, 3072
TILES = {"block_m": 64, "block_n": 64, "warps_m": 1, "warps_n": 1, "depth": 64, "swizzle": 128, "stages": 8,
         "engine": "tma", "specialize": True}
CLUSTERS = {"unclustered": {}, "cluster 1x2": {"cluster": (1, 2)}, "cluster 1x4": {"cluster": (1, 4)}}
EXPECT = re.compile(r"lo_expect\((lo_bar \+ [^,]+), \d+\);")


def _substituted(pattern: str | re.Pattern, replacement: str | Callable[[re.Match], str], source: str) -> str:
    """``source`` with ``pattern`` replaced; ValueError unless it matched."""
    changed, count = re.subn(pattern, replacement, source)
    if not count:
        raise ValueError(f"the printed kernel has no {pattern!r}: the patch needs updating")
    return changed


def without_copies(source: str) -> str:
    """No TMA box issued; the full barriers expect 0 bytes (their producer's arrival completes them)."""
    return _substituted(r"\n\s*lo_tma_2d(_multicast)?\(.*\n", "\n", _substituted(EXPECT, r"lo_expect(\1, 0);",
                                                                                  source))


def without_products(source: str) -> str:
    """No wgmma issued: the consumers wait, fence, commit an empty group and release."""
    return _substituted(r"\n\s*LO_WGMMA\(lo_acc.*\n", "\n", source)


def a_copies_alone(source: str) -> str:
    """B's boxes not issued; the full barriers expect A's bytes alone (``M`` tile rows of the depth)."""
    a_bytes = TILES["block_m"] * TILES["depth"] * 2
    return _substituted(r"\n\s*lo_tma_2d(_multicast)?\([^\n]*&lo_map_B[^\n]*\n", "\n",
                        _substituted(EXPECT, rf"lo_expect(\1, {a_bytes});", source))


PATCHES: dict[str, Callable[[str], str]] = {
    "as printed": lambda source: source, "without copies": without_copies,
    "without products": without_products, "neither": lambda source: without_products(without_copies(source)),
    "A's copies alone": a_copies_alone}


def kernel_from(schedule: lo.Schedule, source: str, arch: str) -> CudaKernel:
    """``schedule``'s kernel built from the CUDA ``source`` (with the printed kernel's parameters)."""
    printed = dataclasses.replace(print_kernel(schedule), source=source)
    generated = Generated(printed.source, printed.cdef, printed.arguments, printed.params, SCALAR, {}, False)
    return CudaKernel(schedule, generated, printed, toolchain.build(source, build_arch(schedule, arch)), arch)


def patched_kernel(schedule: lo.Schedule, patch: str, arch: str) -> CudaKernel:
    """``schedule``'s kernel built from its printed CUDA with ``PATCHES[patch]`` applied."""
    return kernel_from(schedule, PATCHES[patch](print_kernel(schedule).source), arch)


def graph_ms(kernel: CudaKernel, stored: list) -> float:
    """ms of one run of ``kernel`` on ``stored`` replayed in a CUDA graph (``cuda_bench.graph_median``)."""
    op = kernel.op
    out = device.cupy().empty((op.m, op.n), kernel.parameter_dtype(op.output))
    buffers = kernel.bind(dict(zip(op.call_tensors, stored)) | {op.output: out})
    return graph_median(lambda: kernel.run(buffers)) * 1e3


# the patches whose sums are right: verified against float64 and timed one launch with cuBLAS, interleaved
SUMS_RIGHT = ("as printed",)


def bench(clusters: list[str], patches: list[str]) -> list[dict]:
    """Each of ``clusters`` and ``patches`` at K and 2K (and cuBLAS): ms in a graph and ns a step; the
    kernels whose sums are right verified at K first, then timed one launch in alternation with cuBLAS."""
    import torch
    arch = device.arch()
    ops = {depth: lo.Matmul(M, N, depth, dtype="float16", out_dtype="float16") for depth in (K, 2 * K)}
    jobs = [(cluster, patch, depth, gpu_wgmma(ops[depth], **TILES, **CLUSTERS[cluster]))
            for cluster in clusters for patch in patches for depth in ops]
    with ThreadPoolExecutor() as pool:
        kernels = list(pool.map(lambda job: patched_kernel(job[3], job[1], arch), jobs))
    inputs = {depth: torch_tensors(op) for depth, op in ops.items()}
    times: dict[tuple[str, str], dict[int, float]] = {}
    calls = {("cuBLAS", "torch.matmul"): lambda a=inputs[K][0][0], b=inputs[K][0][1]: torch.matmul(a, b)}
    for (cluster, patch, depth, _), kernel in zip(jobs, kernels):
        logical, stored = inputs[depth]
        if patch in SUMS_RIGHT and depth == K:
            row = run_variant(kernel, stored, reference(ops[depth], logical))
            print(json.dumps({"kernel": cluster, "patch": patch, "verified": row["verified"],
                              "relative_error": row["relative_error"], "one_launch_ms": row["median_ms"]}),
                  flush=True)
            if row["verified"]:
                out = device.cupy().empty((M, N), kernel.parameter_dtype(kernel.op.output))
                buffers = kernel.bind(dict(zip(kernel.op.call_tensors, stored)) | {kernel.op.output: out})
                calls[(cluster, patch)] = lambda kernel=kernel, buffers=buffers: kernel.run(buffers)
        times.setdefault((cluster, patch), {})[depth] = graph_ms(kernel, stored)
    for depth, (logical, _) in inputs.items():
        a, b = logical
        times.setdefault(("cuBLAS", "torch.matmul"), {})[depth] = torch_graph_median(
            lambda a=a, b=b: torch.matmul(a, b)) * 1e3
    rows = []
    for (kernel, patch), ms in times.items():
        rows.append({"kernel": kernel, "patch": patch, "graph_ms": ms,
                     "ns_per_step": (ms[2 * K] - ms[K]) / (K // TILES["depth"]) * 1e6})
        print(json.dumps(rows[-1]), flush=True)
    for repeat in range(2):
        peer, *mine = interleaved_medians(list(calls.values()))
        for name, seconds in zip(list(calls)[1:], mine):
            rows.append({"together": repeat, "kernel": name[0], "patch": name[1], "ms": seconds * 1e3,
                         "cublas_ms": peer * 1e3, "cublas_over_loopopt": peer / seconds})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def _chosen(text: str, names) -> list[str]:
    chosen = text.split(";")
    unknown = [c for c in chosen if c not in names]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {unknown[0]!r}; choose from {'; '.join(names)}")
    return chosen


if __name__ == "__main__":
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--json", help="write the environment and rows to this file")
    arguments.add_argument("--clusters", type=lambda text: _chosen(text, CLUSTERS), default=list(CLUSTERS),
                           help="semicolon-separated clusterings (default: all)")
    arguments.add_argument("--patches", type=lambda text: _chosen(text, PATCHES), default=list(PATCHES),
                           help="semicolon-separated patches (default: all)")
    args = arguments.parse_args()
    environment_line = environment()
    print(json.dumps(environment_line), flush=True)
    measured = bench(args.clusters, args.patches)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": environment_line, "rows": measured}, f, indent=1)
