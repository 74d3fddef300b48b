"""Do the GEMM in no catalog's 2000-byte rows (K = 1000 float16: most 128-byte TMA box rows read two L2
lines) cost its kernels, and do inputs stored with rows of whole lines win it back? Each kernel as
printed, with B (the weights, packed N x K outside the timed call anyway) stored ``NK64k`` and with A
stored ``MK64k`` too (``tma.padded_rows``: 1000 columns in 16 blocks of 64, rows of 2048 bytes, the
padding zero), verified against float64 and timed one launch in alternation with cuBLAS (on the unpadded
inputs), twice, and in a CUDA graph: the one wave of 192 x 256 alone and in 1x2 pairs, and the 192 x 128
walk alone and in 1x2 pairs.

``python benchmarks/bench_cuda_pitch.py [--json PATH]``
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from bench_cuda_against import WIDE
from bench_cuda_tensor import reference, torch_tensors
from bench_cuda_tune import case_op
from cuda_bench import graph_median, interleaved_medians, rows_main

from loopopt.dataflows import gpu_wgmma
from loopopt.targets.cuda import device

BLOCK = 64              # columns of a block of the padded layouts: 128 bytes, a whole L2 line
WALK = {"block_m": 192, "block_n": 128, "warps_m": 3, "warps_n": 1, "depth": 64, "swizzle": 128, "stages": 5,
        "engine": "tma", "specialize": True, "persistent": True}
KERNELS = {"one wave": WIDE, "one wave 1x2": WIDE | {"cluster": (1, 2)}, "walk": WALK,
           "walk 1x2": WALK | {"cluster": (1, 2)}}
PADDED = {"rows as given": {}, "B padded": {"B": f"NK{BLOCK}k"},
          "A and B padded": {"A": f"MK{BLOCK}k", "B": f"NK{BLOCK}k"}}


def padded(matrix, k: int):
    """A device copy of ``matrix`` (rows x ``k``) in whole blocks of ``BLOCK`` columns, the padding zero:
    its storage in ``PADDED``'s layouts."""
    cp = device.cupy()
    blocks = -(-k // BLOCK)
    out = cp.zeros((matrix.shape[0], blocks * BLOCK), cp.float16)
    out[:, :k] = cp.asarray(matrix)
    return out.reshape(matrix.shape[0], blocks, BLOCK)


def bench() -> list[dict]:
    import torch
    cp = device.cupy()
    op = case_op("novel_gemm")
    logical, stored = torch_tensors(op)
    expected = reference(op, logical)
    a, b = logical
    inputs = {name: padded(matrix, op.k) for name, matrix in zip(("A", "B"), stored)}

    def schedule(job: tuple[str, str]):
        made = gpu_wgmma(op, **KERNELS[job[0]])
        for tensor, tag in PADDED[job[1]].items():
            made = made.layout(tensor, tag)
        return made
    jobs = [(kernel, rows) for kernel in KERNELS for rows in PADDED]
    with ThreadPoolExecutor() as pool:      # nvcc on all cores
        built = list(pool.map(lambda job: schedule(job).compile(target="cuda"), jobs))
    calls, rows = {"cuBLAS": lambda: torch.matmul(a, b)}, []
    for (kernel_name, padding), kernel in zip(jobs, built):
        out = cp.full((op.m, op.n), cp.nan, cp.float16)
        given = {name: inputs[name] if name in PADDED[padding] else tensor
                 for name, tensor in zip(op.call_tensors, stored)}
        buffers = kernel.bind(given | {op.output: out})
        kernel.run(buffers)
        got = torch.as_tensor(out, device="cuda").double()
        error = float(torch.linalg.vector_norm(got - expected) / torch.linalg.vector_norm(expected))
        name = f"{kernel_name}, {padding}"
        verified = bool(not torch.isnan(got).any()) and error < 1e-3
        run = (lambda kernel=kernel, buffers=buffers: kernel.run(buffers))
        rows.append({"kernel": name, "verified": verified, "relative_error": error,
                     "graph_us": graph_median(run) * 1e6})
        print(json.dumps(rows[-1]), flush=True)
        if verified:
            calls[name] = run
    for repeat in range(2):
        medians = interleaved_medians(list(calls.values()))
        rows.append({"together": repeat} | {name: round(seconds * 1e6, 2)
                                            for name, seconds in zip(calls, medians)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    raise SystemExit(rows_main(__doc__, bench))
