"""The GEMM in no catalog's first choice (``bench_cuda_cold.FIRST``: 192 x 256 in one wave, B in whole-line
rows) and cuBLAS (torch.matmul) launched twice each on the same inputs, the first choice verified against
float64 first, for Nsight Compute to compare what each moves:

``ncu --clock-control none --cache-control all -k regex:'lo_nest|nvjet|gemm' --section SpeedOfLight
--metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct --csv
python benchmarks/ncu_cuda_cold.py``
"""
from __future__ import annotations

from bench_cuda_cold import FIRST
from bench_cuda_tensor import prepacked, reference, run_variant, torch_tensors
from bench_cuda_tune import case_op

from loopopt.dataflows import gpu_wgmma
from loopopt.targets.cuda import device


def main() -> int:
    import torch
    op = case_op("novel_gemm")
    kernel = gpu_wgmma(op, **FIRST).compile(target="cuda")
    logical, stored = torch_tensors(op)
    if not run_variant(kernel, stored, reference(op, logical))["verified"]:
        print("the first choice missed the float64 reference")
        return 1
    out = device.cupy().empty((op.m, op.n), kernel.parameter_dtype(op.output))
    buffers = kernel.bind(dict(zip(op.call_tensors, prepacked(kernel, stored))) | {op.output: out})
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
