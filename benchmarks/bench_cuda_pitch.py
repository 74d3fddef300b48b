"""Do the GEMM in no catalog's 2000-byte rows (K = 1000 float16: most 128-byte TMA box rows read two L2
lines) cost its kernels, and would weights packed with rows of whole lines win it back? Each kernel's
printed CUDA patched so that its tensor maps step ``PITCH`` elements (2048 bytes) between the rows of B
(the weights, packed N x K outside the timed call anyway) or of A and B, over inputs stored with rows
padded to that pitch (the padding never read: the maps' dims stay K = 1000), verified against float64
and timed one launch in alternation with cuBLAS (on the unpadded inputs), twice, and in a CUDA graph:
the one wave of 192 x 256 alone and in 1x2 pairs, and the 192 x 128 walk alone and in 1x2 pairs.

``python benchmarks/bench_cuda_pitch.py [--json PATH]``
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from bench_cuda_against import WIDE
from bench_cuda_kstep import _substituted, kernel_from
from bench_cuda_tensor import reference, torch_tensors
from bench_cuda_tune import case_op
from cuda_bench import graph_median, interleaved_medians, rows_main

from loopopt.dataflows import gpu_wgmma
from loopopt.targets.cuda import device
from loopopt.targets.cuda.printer import print_kernel

PITCH = 1024            # elements between padded rows: 2048 bytes, whole 128-byte lines
WALK = {"block_m": 192, "block_n": 128, "warps_m": 3, "warps_n": 1, "depth": 64, "swizzle": 128, "stages": 5,
        "engine": "tma", "specialize": True, "persistent": True}
KERNELS = {"one wave": WIDE, "one wave 1x2": WIDE | {"cluster": (1, 2)}, "walk": WALK,
           "walk 1x2": WALK | {"cluster": (1, 2)}}
PADDED = {"rows as given": (), "B padded": ("B",), "A and B padded": ("A", "B")}


def padded_maps(source: str, tensors: tuple[str, ...], k: int) -> str:
    """The printed CUDA with the tensor maps of ``tensors`` stepping ``PITCH`` elements a row."""
    for tensor in tensors:
        given = (rf"(lo_map_{tensor}; \{{ const unsigned long long lo_dims\[2\] = \{{{k}ull, \d+ull\}}, "
                 rf"lo_strides\[1\] = \{{){2 * k}ull\}}")
        source = _substituted(given, rf"\g<1>{2 * PITCH}ull}}", source)
    return source


class Rows:
    """A device matrix of ``rows`` x ``k`` float16 stored ``PITCH`` elements a row, offered to a kernel's
    ``bind`` as if contiguous (the kernel reads it through its tensor map alone)."""

    def __init__(self, padded, k: int):
        self.padded = padded
        self.__cuda_array_interface__ = {"shape": (padded.shape[0], k), "typestr": "<f2",
                                         "data": (padded.data.ptr, False), "strides": None, "version": 3}


def bench() -> list[dict]:
    import torch
    cp = device.cupy()
    op, arch = case_op("novel_gemm"), device.arch()
    logical, stored = torch_tensors(op)
    expected = reference(op, logical)
    a, b = logical
    inputs = {}
    for name, matrix in zip(("A", "B"), stored):
        padded = cp.zeros((matrix.shape[0], PITCH), cp.float16)
        padded[:, :op.k] = cp.asarray(matrix)
        inputs[name] = Rows(padded, op.k)
    jobs = [(kernel, rows) for kernel in KERNELS for rows in PADDED]
    with ThreadPoolExecutor() as pool:      # nvcc on all cores
        built = list(pool.map(lambda job: kernel_from(
            gpu_wgmma(op, **KERNELS[job[0]]),
            padded_maps(print_kernel(gpu_wgmma(op, **KERNELS[job[0]])).source, PADDED[job[1]], op.k), arch),
            jobs))
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
