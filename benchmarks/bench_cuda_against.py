"""A change to the printed CUDA timed against another checkout on an NVIDIA GPU: each case's schedule
printed by this checkout and by ``--against`` (another loopopt checkout's root, whose printer runs in a
subprocess; the kernels' parameters must be the same), both verified against float64, then timed one
launch with the L2 overwritten in alternation with cuBLAS (``cuda_bench.interleaved_medians``, twice)
and in a CUDA graph.

``python benchmarks/bench_cuda_against.py --against PATH [--only CASE,...] [--json PATH]``
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

from bench_cuda_kstep import graph_ms, kernel_from
from bench_cuda_tensor import reference, run_variant, torch_tensors
from bench_cuda_tune import case_op
from cuda_bench import environment, interleaved_medians

import loopopt as lo
from loopopt.dataflows import gpu_wgmma
from loopopt.targets.cuda import device

SPECIALIZED = {"depth": 64, "swizzle": 128, "engine": "tma", "specialize": True}
SMALL = {"block_m": 64, "block_n": 64, "warps_m": 1, "warps_n": 1}
WIDE = {"block_m": 192, "block_n": 256, "warps_m": 3, "warps_n": 1, "depth": 64, "swizzle": 128, "stages": 4,
        "engine": "tma"}        # the GEMM in no catalog's first choice
CASES = {"bert 64x64 s14": ("bert", SMALL | SPECIALIZED | {"stages": 14}),
         "bert 64x64 s8": ("bert", SMALL | SPECIALIZED | {"stages": 8}),
         "no catalog 192x256 s4": ("novel_gemm", WIDE),
         "no catalog 192x256 s4 cluster 1x2": ("novel_gemm", WIDE | {"cluster": (1, 2)}),
         "no catalog 192x128 s5 specialized": ("novel_gemm", {"block_m": 192, "block_n": 128, "warps_m": 3,
                                                              "warps_n": 1, "stages": 5} | SPECIALIZED),
         # persistent: 16 and 64 steps a tile, whole rounds of a 4-buffer ring
         "no catalog 192x128 s4 persistent": ("novel_gemm", {"block_m": 192, "block_n": 128, "warps_m": 3,
                                                             "warps_n": 1, "stages": 4, "persistent": True}
                                              | SPECIALIZED),
         "gemm4096 128x256 s4 persistent": ("gemm4096", {"block_m": 128, "block_n": 256, "warps_m": 1,
                                                         "warps_n": 2, "stages": 4, "persistent": True}
                                            | SPECIALIZED)}


def printed_there(root: str, op: lo.Op, arguments: dict) -> str:
    """The CUDA source of ``gpu_wgmma(op, **arguments)`` as the checkout at ``root`` prints it (its
    ``loopopt`` first on the path of a subprocess)."""
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import loopopt as lo; "
              "from loopopt.dataflows import gpu_wgmma; "
              "from loopopt.targets.cuda.printer import print_kernel; "
              "op = eval(sys.argv[2], vars(lo)); "
              "sys.stdout.write(print_kernel(gpu_wgmma(op, **eval(sys.argv[3]))).source)")
    return subprocess.run([sys.executable, "-c", script, root, repr(op), repr(arguments)],
                          capture_output=True, text=True, check=True).stdout


def bench(root: str, names: list[str]) -> list[dict]:
    import torch
    arch, rows = device.arch(), []
    for name in names:
        case, arguments = CASES[name]
        op = case_op(case)
        schedule = gpu_wgmma(op, **arguments)
        kernels = {"there": kernel_from(schedule, printed_there(root, op, arguments), arch),
                   "here": schedule.compile(target="cuda")}
        logical, stored = torch_tensors(op)
        expected = reference(op, logical)
        a, b = logical
        calls = [lambda a=a, b=b: torch.matmul(a, b)]
        for checkout, kernel in kernels.items():
            row = run_variant(kernel, stored, expected)
            rows.append({"case": name, "checkout": checkout, "verified": row["verified"],
                         "relative_error": row["relative_error"], "one_launch_ms": row["median_ms"],
                         "graph_ms": graph_ms(kernel, stored), "registers": kernel.build.registers})
            print(json.dumps(rows[-1]), flush=True)
            out = device.cupy().empty((op.m, op.n), kernel.parameter_dtype(op.output))
            buffers = kernel.bind(dict(zip(op.call_tensors, stored)) | {op.output: out})
            calls.append(lambda kernel=kernel, buffers=buffers: kernel.run(buffers))
        for repeat in range(2):
            peer, *mine = interleaved_medians(calls)
            rows.append({"case": name, "together": repeat, "cublas_ms": peer * 1e3} |
                        {f"{checkout}_ms": seconds * 1e3 for checkout, seconds in zip(kernels, mine)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--against", required=True, help="the other loopopt checkout's root")
    arguments.add_argument("--only", help="comma-separated cases: " + ", ".join(CASES))
    arguments.add_argument("--json", help="write the environment and rows to this file")
    args = arguments.parse_args()
    names = args.only.split(",") if args.only else list(CASES)
    unknown = [name for name in names if name not in CASES]
    if unknown:
        arguments.error(f"--only {unknown[0]!r}: the cases are " + ", ".join(CASES))
    environment_line = environment()
    print(json.dumps(environment_line), flush=True)
    measured = bench(args.against, names)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": environment_line, "rows": measured}, f, indent=1)
    raise SystemExit(0 if all(r.get("verified", True) for r in measured) else 1)
