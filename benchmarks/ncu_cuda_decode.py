"""One launch of each decode kernel worth profiling, for Nsight Compute: the streaming read of the
weights' bytes of each shape (``decode_floor``), loopopt's float16 GEMV at 1 x 4096 x 4096, and the
ternary i2_s GEMV at the three decode shapes in each shape's ``KNOBS`` (bench_cuda_decode.py's fastest
variants), each after one launch outside the profile's filter.

    ncu --clock-control none -k regex:'lo_nest|lo_read' --section SpeedOfLight --section Occupancy \\
        --section LaunchStats --section WarpStateStats --section SchedulerStats \\
        --section InstructionStats --section MemoryWorkloadAnalysis --csv \\
        python benchmarks/ncu_cuda_decode.py

prints the kernels' labels in launch order (ncu's rows follow it)."""
from __future__ import annotations

import decode_floor
from bench_cuda_decode import SHAPES, TERNARY

import loopopt as lo
from loopopt.dataflows import gpu_gemv
from loopopt.quant_reference import random_call
from loopopt.targets.cuda import device

KNOBS = {"4096x4096": ({"warps": 4, "columns": 2}, {"warps": 4, "columns": 2, "stage": True},
                       {"warps": 8, "columns": 4}),
         "4096to11008": ({"warps": 8, "columns": 4}, {"warps": 8, "columns": 4, "stage": True}),
         "11008to4096": ({"warps": 4, "columns": 4, "split": 2},
                         {"warps": 4, "columns": 4, "split": 2, "stage": True})}
FLOAT16 = {"4096x4096": ({"warps": 4, "columns": 1, "depth": 4},)}


def read(nbytes: int) -> None:
    """The plain streaming read of ``nbytes`` (4 loads of 16 bytes a thread)."""
    cp = device.cupy()
    vectors = nbytes // 16
    kernel = decode_floor._module(4).get_function("lo_read")
    data, out = cp.zeros(vectors * 4, dtype=cp.uint32), cp.zeros(1, dtype=cp.uint32)
    print(f"read {nbytes} bytes, 4 loads a thread", flush=True)
    blocks = -(-vectors // (4 * decode_floor.THREADS))
    kernel((blocks,), (decode_floor.THREADS,), (data, cp.int64(vectors), out))


def gemv(op: lo.Matmul, knobs: dict, label: str) -> None:
    compiled = gpu_gemv(op, **knobs).compile(target="cuda")
    args, params = random_call(op) if op.quant is not None else (
        [op.random_inputs(seed=1)[t] for t in op.call_tensors], {})
    buffers = compiled.prepare(*args, **params)
    print(f"{label} {op.m}x{op.n}x{op.k} {knobs}", flush=True)
    compiled.run(buffers)


def main() -> None:
    for case, (m, n, k) in SHAPES.items():
        if case not in KNOBS:
            continue
        read(n * k // 4)
        for knobs in KNOBS[case]:
            gemv(lo.Matmul(m, n, k, quant=TERNARY), knobs, "ternary")
        if case in FLOAT16:
            read(2 * n * k)
            for knobs in FLOAT16[case]:
                gemv(lo.Matmul(m, n, k, dtype="float16"), knobs, "float16")
    device.cupy().cuda.Device().synchronize()


if __name__ == "__main__":
    main()
