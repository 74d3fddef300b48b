"""Where a one-launch time goes besides the kernel: the GEMM in no catalog (2000x3000x1000 fp16) against
cuBLAS's (PyTorch's ``torch.matmul``) one launch after the L2 was overwritten, as ``cuda_bench`` times it.

- Empty kernels of each launch kind (132 blocks of 384 threads: no shared memory; 229,408 bytes of it;
  and three 128-byte tensor maps as ``__grid_constant__`` parameters; and ``__cluster_dims__(2, 1, 1)``;
  launched with programmatic dependent launch, PDL, their threads waiting at ``griddepcontrol.wait``),
  each timed as a kernel is (``device.elapsed``), in alternation.
- The clusters of 2 of 229,408-byte blocks the device holds at once (``cudaOccupancyMaxActiveClusters``).
- A trace (PyTorch's profiler, CUPTI's records) of each kernel's one-launch runs: the kernel's own
  duration and the gap between the flush's end (a memset) and its start.
- The first choice before this session (192x256, one wave) and its unpersistent 1x2 cluster (the first
  choice now) as printed and with PDL (``pdl``: the launch attribute, every thread waiting at
  ``griddepcontrol.wait`` once the barriers are set up, before the first copy; ``trigger``:
  ``griddepcontrol.launch_dependents`` once the products are done), and in clusters of 4 along the
  columns, each verified against float64, timed in a CUDA graph,
  then one launch in alternation with cuBLAS, twice; the same at K = 1024 (rows of whole L2 lines)
  without PDL.

``python benchmarks/bench_cuda_launch.py [--json PATH]``
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor

from bench_cuda_against import WIDE
from bench_cuda_kstep import _substituted, graph_ms, kernel_from
from bench_cuda_tensor import prepacked, reference, run_variant, torch_tensors
from bench_cuda_tune import case_op
from cuda_bench import interleaved_medians, rows_main

import loopopt as lo
from loopopt.dataflows import gpu_wgmma
from loopopt.targets.cuda import device, toolchain
from loopopt.targets.cuda.printer import print_kernel

WAIT = 'asm volatile("griddepcontrol.wait;" ::: "memory");'
TRIGGER = 'asm volatile("griddepcontrol.launch_dependents;" ::: "memory");'
SMEM = 229408           # the first choice's dynamic shared memory
EMPTY = r"""
#include <cuda_runtime.h>
struct __align__(64) lo_map { unsigned long long words[16]; };
__global__ void lo_empty_plain(int *out) { if (out && threadIdx.x == 1024) *out = 1; }
__global__ void lo_empty_maps(int *out, const __grid_constant__ lo_map a, const __grid_constant__ lo_map b,
                              const __grid_constant__ lo_map c)
{ if (out && threadIdx.x == 1024) *out = (int) (a.words[0] + b.words[0] + c.words[0]); }
__global__ void __cluster_dims__(2, 1, 1) lo_empty_cluster(int *out, const __grid_constant__ lo_map a,
                              const __grid_constant__ lo_map b, const __grid_constant__ lo_map c)
{ if (out && threadIdx.x == 1024) *out = (int) (a.words[0] + b.words[0] + c.words[0]); }
__global__ void lo_empty_pdl(int *out, const __grid_constant__ lo_map a, const __grid_constant__ lo_map b,
                             const __grid_constant__ lo_map c)
{ WAIT if (out && threadIdx.x == 1024) *out = (int) (a.words[0] + b.words[0] + c.words[0]); }
__global__ void __cluster_dims__(2, 1, 1) lo_empty_pdl_cluster(int *out, const __grid_constant__ lo_map a,
                             const __grid_constant__ lo_map b, const __grid_constant__ lo_map c)
{ WAIT if (out && threadIdx.x == 1024) *out = (int) (a.words[0] + b.words[0] + c.words[0]); }

template <typename... Args>
static int lo_launch(void (*kernel)(Args...), int smem, int pdl, cudaStream_t stream, Args... args)
{
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return (int) e;
    cudaLaunchConfig_t config = {};
    cudaLaunchAttribute attribute[1];
    config.gridDim = dim3(132, 1, 1); config.blockDim = dim3(128, 3, 1);
    config.dynamicSmemBytes = smem; config.stream = stream;
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute; config.numAttrs = pdl ? 1 : 0;
    return (int) cudaLaunchKernelEx(&config, kernel, args...);
}

extern "C" int lo_clusters(void)
{   /* clusters of 2 blocks of lo_empty_cluster (SMEM bytes each) the device holds at once */
    cudaError_t e = cudaFuncSetAttribute(lo_empty_cluster, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(2, 1, 1); config.blockDim = dim3(128, 3, 1); config.dynamicSmemBytes = SMEM;
    int clusters = 0;
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveClusters(&clusters, lo_empty_cluster, &config);
    return e == cudaSuccess ? clusters : -(int) e;
}

extern "C" int lo_empty(int kind, void *stream)
{
    cudaStream_t s = (cudaStream_t) stream;
    lo_map m = {};
    int *none = 0;
    switch (kind) {
    case 0: lo_empty_plain<<<132, dim3(128, 3, 1), 0, s>>>(none); return (int) cudaGetLastError();
    case 1: return lo_launch(lo_empty_plain, SMEM, 0, s, none);
    case 2: return lo_launch(lo_empty_maps, SMEM, 0, s, none, m, m, m);
    case 3: return lo_launch(lo_empty_cluster, SMEM, 0, s, none, m, m, m);
    case 4: return lo_launch(lo_empty_pdl, SMEM, 1, s, none, m, m, m);
    default: return lo_launch(lo_empty_pdl_cluster, SMEM, 1, s, none, m, m, m);
    }
}
""".replace("WAIT", WAIT).replace("SMEM", str(SMEM))
EMPTY_KINDS = ["plain <<<>>>", "229 KB shared", "+ 3 tensor maps", "+ cluster 2", "+ PDL",
               "+ PDL + cluster 2"]


def pdl(source: str, trigger: bool = False) -> str:
    """The printed CUDA launched with programmatic dependent launch: every thread waits for the grids
    before it (``griddepcontrol.wait``) once the barriers are set up, before the first copy; with
    ``trigger``, the next grid may launch once the products are done."""
    barriers = r"(\n    if \(lo_thread == 0\) lo_barriers_init\(lo_bar, \d+\);\n)"
    source = _substituted(barriers, rf"\1    {WAIT}\n", source)
    if trigger:
        done = (r"(\n    asm volatile\(\"wgmma\.wait_group\.sync\.aligned 0;\" ::: \"memory\"\);\n"
                r"    __syncthreads\(\);   /\* every warp is done)")
        source = _substituted(done, rf"\n    {TRIGGER}\1", source)
    launch = re.compile(r"    lo_nest<<<(dim3\([^)]*\)), (dim3\([^)]*\)), (\d+), \(cudaStream_t\) "
                        r"lo_stream>>>\((.*)\);\n    return \(int\) cudaGetLastError\(\);")
    return _substituted(launch, lambda m: (
        "    cudaLaunchConfig_t lo_config = {}; cudaLaunchAttribute lo_attribute[1];\n"
        f"    lo_config.gridDim = {m.group(1)}; lo_config.blockDim = {m.group(2)}; "
        f"lo_config.dynamicSmemBytes = {m.group(3)}; lo_config.stream = (cudaStream_t) lo_stream;\n"
        "    lo_attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; "
        "lo_attribute[0].val.programmaticStreamSerializationAllowed = 1;\n"
        "    lo_config.attrs = lo_attribute; lo_config.numAttrs = 1;\n"
        f"    return (int) cudaLaunchKernelEx(&lo_config, lo_nest, {m.group(4)});"), source)


VARIANTS = {"first choice": (WIDE, lambda s: s), "first choice PDL": (WIDE, pdl),
            "first choice PDL trigger": (WIDE, lambda s: pdl(s, trigger=True)),
            "cluster 1x2": (WIDE | {"cluster": (1, 2)}, lambda s: s),
            "cluster 1x2 PDL": (WIDE | {"cluster": (1, 2)}, pdl),
            "cluster 1x2 PDL trigger": (WIDE | {"cluster": (1, 2)}, lambda s: pdl(s, trigger=True)),
            "cluster 1x4": (WIDE | {"cluster": (1, 4)}, lambda s: s)}


def traced(calls: dict, runs: int = 30) -> dict:
    """Each call's kernel in PyTorch's profiler trace (CUPTI's records) over ``runs`` one-launch runs
    (the L2 overwritten, events around, as ``device.elapsed``): the medians of its duration and of the
    gap from the end of the kernel before it (the flush) to its start, in us."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    found = {}
    for name, call in calls.items():
        for _ in range(3):
            device.elapsed(call)
        with profile(activities=[ProfilerActivity.CUDA]) as trace:
            for _ in range(runs):
                device.elapsed(call)
            torch.cuda.synchronize()
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "trace.json")
            trace.export_chrome_trace(path)
            with open(path) as f:
                events = json.load(f)["traceEvents"]
        # the flush (CuPy's fill with 0) is a memset, each run's kernels follow it
        kernels = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memset")),
                         key=lambda e: e["ts"])
        durations, gaps, names = [], [], set()
        for before, kernel in zip(kernels, kernels[1:]):
            if before["cat"] == "gpu_memset" and kernel["cat"] == "kernel":
                durations.append(kernel["dur"])
                gaps.append(kernel["ts"] - before["ts"] - before["dur"])
                names.add(kernel["name"][:80])
        found[name] = {"kernel_us": statistics.median(durations) if durations else None,
                       "gap_us": statistics.median(gaps) if gaps else None, "runs": len(durations),
                       "names": sorted(names)}
        print(json.dumps({"traced": name} | found[name]), flush=True)
    return found


def empty_kernels() -> list[dict]:
    """The empty kernels of ``EMPTY_KINDS`` timed one launch each, in alternation, and traced."""
    library = ctypes.CDLL(str(toolchain.build(EMPTY, "sm_90").library))
    library.lo_empty.argtypes = [ctypes.c_int, ctypes.c_void_p]

    def launcher(kind: int):
        def launch():
            code = library.lo_empty(kind, device.stream_pointer())
            if code:
                raise RuntimeError(f"empty kernel {EMPTY_KINDS[kind]}: CUDA error {code}")
        return launch
    calls = {name: launcher(kind) for kind, name in enumerate(EMPTY_KINDS)}
    print(json.dumps({"clusters_of_2_held": library.lo_clusters()}), flush=True)
    medians = interleaved_medians(list(calls.values()))
    gaps = traced(calls)
    rows = [{"empty": name, "one_launch_us": round(seconds * 1e6, 2)} | gaps[name]
            for name, seconds in zip(calls, medians)]
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows


def timed(op, variants: dict, trace: bool) -> list[dict]:
    """``variants`` of ``op`` (name: (arguments, patch)) built in parallel, verified against float64,
    timed in a CUDA graph, traced (where ``trace``), then one launch in alternation with cuBLAS, twice."""
    import torch
    arch = device.arch()
    logical, stored = torch_tensors(op)
    expected = reference(op, logical)
    a, b = logical
    calls, rows = {"cuBLAS": lambda: torch.matmul(a, b)}, []
    schedules = {name: gpu_wgmma(op, **arguments) for name, (arguments, _) in variants.items()}
    with ThreadPoolExecutor() as pool:      # nvcc on all cores
        kernels = dict(zip(variants, pool.map(lambda name: kernel_from(
            schedules[name], variants[name][1](print_kernel(schedules[name]).source), arch), variants)))
    for name, kernel in kernels.items():
        row = run_variant(kernel, stored, expected)
        rows.append({"op": repr(op), "kernel": name, "verified": row["verified"],
                     "relative_error": row["relative_error"], "one_launch_us": row["median_ms"] * 1e3,
                     "graph_us": graph_ms(kernel, stored) * 1e3})
        print(json.dumps(rows[-1]), flush=True)
        if row["verified"]:
            calls[name] = launch(kernel, stored)
    if trace:
        rows.append({"op": repr(op), "traced": traced(calls)})
    return rows + together(op, calls, 2)


def launch(kernel, stored: list):
    """A call of ``kernel`` on ``stored`` (B packed into its layout: ``prepacked``) into an output of its
    own."""
    op = kernel.op
    out = device.cupy().empty((op.m, op.n), kernel.parameter_dtype(op.output))
    buffers = kernel.bind(dict(zip(op.call_tensors, prepacked(kernel, stored))) | {op.output: out})
    return lambda: kernel.run(buffers)


def together(op, calls: dict, repeats: int) -> list[dict]:
    """``calls`` timed one launch in alternation (``interleaved_medians``), ``repeats`` times: a row of
    their medians (us) each."""
    rows = []
    for repeat in range(repeats):
        medians = interleaved_medians(list(calls.values()))
        rows.append({"op": repr(op), "together": repeat} | {
            name: round(seconds * 1e6, 2) for name, seconds in zip(calls, medians)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def bench() -> list[dict]:
    op = case_op("novel_gemm")
    aligned = lo.Matmul(op.m, op.n, 1024, dtype=op.dtype, out_dtype=op.out_dtype)   # rows of whole lines
    return [*empty_kernels(), *timed(op, VARIANTS, trace=True),
            *timed(aligned, {name: VARIANTS[name] for name in ("first choice", "cluster 1x2", "cluster 1x4")},
                   trace=False)]


if __name__ == "__main__":
    raise SystemExit(rows_main(__doc__, bench))
