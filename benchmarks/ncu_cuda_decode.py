"""One launch of each decode kernel worth profiling, for Nsight Compute: the streaming read of the
ternary and float16 weights' bytes (``decode_floor``) and loopopt's GEMV kernels at 1 x 4096 x 4096
(float16, and ternary i2_s in each of ``KNOBS``), each after one launch outside the profile's filter.

    ncu --clock-control none -k regex:'lo_nest|lo_read' --section SpeedOfLight --section Occupancy \\
        --section LaunchStats --section WarpStateStats --section SchedulerStats \\
        --section MemoryWorkloadAnalysis --csv python benchmarks/ncu_cuda_decode.py

prints the kernels' labels in launch order (ncu's rows follow it). ``--old``: gpu_gemv without the
``depth`` knob (an older loopopt on PYTHONPATH)."""
from __future__ import annotations

import sys

import decode_floor
from bench_cuda_decode import TERNARY

import loopopt as lo
from loopopt.dataflows import gpu_gemv
from loopopt.quant_reference import random_call
from loopopt.targets.cuda import device

SHAPES = ((1, 4096, 4096),)
KNOBS = {"float16": ({"warps": 4, "columns": 1, "depth": 4},),
         "ternary": ({"warps": 8, "columns": 4}, {"warps": 4, "columns": 2},
                     {"warps": 4, "columns": 2, "split": 2}, {"warps": 4, "columns": 4, "split": 2})}


def main(old: bool) -> None:
    cp = device.cupy()
    for m, n, k in SHAPES:
        for nbytes in (2 * n * k, n * k // 4):
            vectors = nbytes // 16
            kernel = decode_floor._module(4).get_function("lo_read")
            data, out = cp.zeros(vectors * 4, dtype=cp.uint32), cp.zeros(1, dtype=cp.uint32)
            print(f"read {nbytes} bytes, 4 loads a thread", flush=True)
            blocks = -(-vectors // (4 * decode_floor.THREADS))
            kernel((blocks,), (decode_floor.THREADS,), (data, cp.int64(vectors), out))
        for kind, op in (("float16", lo.Matmul(m, n, k, dtype="float16")),
                         ("ternary", lo.Matmul(m, n, k, quant=TERNARY))):
            for knobs in KNOBS[kind]:
                if old and "depth" in knobs:
                    continue
                compiled = gpu_gemv(op, **knobs).compile(target="cuda")
                args, params = random_call(op) if op.quant is not None else (
                    [op.random_inputs(seed=1)[t] for t in op.call_tensors], {})
                buffers = compiled.prepare(*args, **params)
                print(f"{'old ' if old else ''}{kind} {m}x{n}x{k} {knobs}", flush=True)
                compiled.run(buffers)
    cp.cuda.Device().synchronize()


if __name__ == "__main__":
    main("--old" in sys.argv)
