"""The GEMM in no catalog's first choice (``bench_cuda_cold.FIRST``: 192 x 256 in one wave, B in whole-line
rows) and cuBLAS (torch.matmul) launched twice each on the same inputs (the first choice once more before,
verified against float64), for Nsight Compute to compare what each moves:

``ncu --clock-control none --cache-control all -k regex:'lo_nest|nvjet|gemm' --section SpeedOfLight
--metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct --csv
python benchmarks/ncu_cuda_cold.py``
"""
from __future__ import annotations

from bench_cuda_cold import FIRST
from bench_cuda_tensor import prepacked, reference, torch_tensors
from bench_cuda_tune import case_op

from loopopt.dataflows import gpu_wgmma
from loopopt.targets.cuda import device


def main() -> int:
    import torch
    op = case_op("novel_gemm")
    kernel = gpu_wgmma(op, **FIRST).compile(target="cuda")
    logical, stored = torch_tensors(op)
    out = device.cupy().full((op.m, op.n), float("nan"), kernel.parameter_dtype(op.output))
    buffers = kernel.bind(dict(zip(op.call_tensors, prepacked(kernel, stored))) | {op.output: out})
    kernel.run(buffers)     # one launch more (the first profiled): verified against float64
    expected = reference(op, logical)
    got = torch.as_tensor(out, device="cuda").double()
    error = float(torch.linalg.vector_norm(got - expected) / torch.linalg.vector_norm(expected))
    print(f"first choice: relative error {error:.1e}", flush=True)
    if not error < 1e-3:
        return 1
    a, b = logical
    calls = {"cuBLAS": lambda: torch.matmul(a, b), "first choice": lambda: kernel.run(buffers)}
    for label, call in calls.items():
        for _ in range(2):
            call()
        torch.cuda.synchronize()
        print(label, "launched twice", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
