"""The cuda target's tensor-core kernels (``gpu_wmma``: float16 inputs, float32 sums, WMMA
m16n16k16) on an NVIDIA GPU, next to cuBLAS / cuDNN in float16 through PyTorch in the same run: a
4096^3 GEMM (B stored N x K) and ResNet-50's 3x3 convs conv2_x, conv3_x, conv4_x at N=32 (NHWC
activations and output, OHWI weights; PyTorch's tensors channels_last). A few tile shapes each.

Every loopopt output is checked against float64 PyTorch on the GPU of the same float16-rounded
inputs (‖out − ref‖ / ‖ref‖ under 1e-4, no element left unwritten: the output starts as NaN).
Times: CUDA events around each launch on device arrays (no copies), the L2 cache overwritten before
each run, median of 50 after 10 warm-ups; the peers the same way.

``python benchmarks/bench_cuda_tensor.py [--only gemm4096,conv2_x] [--json PATH]`` prints the device,
driver, nvcc, every variant and a Markdown table of each case's best.
"""
from __future__ import annotations

import argparse
import json

import numpy as np
from bench_cuda import _events_median, environment

import loopopt as lo
from loopopt.dataflows import gpu_wmma
from loopopt.layers import get_layer
from loopopt.targets.cuda import device

TILES = {  # (block_m, block_n, warps_m, warps_n, depth)
    "gemm4096": [(128, 128, 2, 4, 32), (128, 256, 2, 4, 32), (256, 128, 4, 2, 32)],
    "conv": [(128, 64, 4, 2, 32), (128, 128, 2, 4, 32), (128, 128, 2, 4, 64)],
}


def half_op(case: str) -> lo.Op:
    if case == "gemm4096":
        return lo.Matmul(4096, 4096, 4096, dtype="float16")
    layer = get_layer(f"resnet50.{case}", batch=32)
    return type(layer)(**{**layer.arguments, "dtype": "float16"})


def torch_tensors(op: lo.Op, seed: int = 0) -> tuple[list, list]:
    """The inputs as PyTorch float16 tensors on the GPU (logical layout, channels_last for a conv) and
    the same values in each tensor's storage layout of ``gpu_wmma`` (NHWC, OHWI; B as N x K)."""
    import torch
    generator = torch.Generator(device="cuda").manual_seed(seed)
    shapes = [op.tensor(t).shape for t in op.inputs]
    a, b = (torch.randn(*s, device="cuda", generator=generator).half() for s in shapes)
    if not op.windows:
        return [a, b], [a.contiguous(), b.t().contiguous()]
    a, b = a.contiguous(memory_format=torch.channels_last), b.contiguous(memory_format=torch.channels_last)
    bias = torch.randn(op.channels, device="cuda", generator=generator)
    return [a, b, bias], [a.permute(0, 2, 3, 1).contiguous(), b.permute(0, 2, 3, 1).contiguous(), bias]


def peer(op: lo.Op, logical: list) -> tuple[str, float]:
    """cuBLAS / cuDNN in float16 (float32 accumulation) on the same inputs: name and seconds."""
    import torch
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cudnn.benchmark = True
    if not op.windows:
        a, b = logical
        return "cuBLAS (torch.matmul fp16)", _events_median(lambda: torch.matmul(a, b))
    x, w, bias = logical
    wins = op.windows
    stride, pad, dilation = (tuple(getattr(v, f) for v in wins) for f in ("stride", "pad", "dilation"))
    half_bias = bias.half()
    call = lambda: torch.nn.functional.conv2d(x, w, half_bias, stride, pad, dilation, op.groups)
    return f"cuDNN {torch.backends.cudnn.version()} (torch conv2d fp16 NHWC)", _events_median(call)


def reference(op: lo.Op, logical: list):
    """float64 PyTorch on the GPU, in the kernel's output storage layout (NHWC for a conv)."""
    import torch
    if not op.windows:
        a, b = logical
        return torch.matmul(a.double(), b.double())
    x, w, bias = logical
    wins = op.windows
    stride, pad, dilation = (tuple(getattr(v, f) for v in wins) for f in ("stride", "pad", "dilation"))
    out = torch.nn.functional.conv2d(x.double(), w.double(), bias.double(), stride, pad, dilation, op.groups)
    return out.permute(0, 2, 3, 1)


def run_variant(op: lo.Op, tiles: tuple, stored: list, expected) -> dict:
    import cupy as cp
    import torch
    kernel = gpu_wmma(op, *tiles).compile(target="cuda")
    shape = kernel.schedule.layout_of(op.output).storage_shape(op.tensor(op.output).shape)
    out = cp.full(shape, np.nan, dtype=np.float32)
    values = dict(zip(op.call_tensors, stored)) | {op.output: out}
    buffers = kernel.bind(values)
    kernel.run(buffers)
    got = torch.as_tensor(out, device="cuda").double()
    written = not bool(torch.isnan(got).any())
    relative = float(torch.linalg.vector_norm(got - expected) / torch.linalg.vector_norm(expected))
    seconds = _events_median(lambda: kernel.run(buffers))
    return {"tiles": tiles, "median_ms": seconds * 1e3, "tflops": op.flops / seconds / 1e12,
            "percent_of_peak": 100 * op.flops / seconds / 1e9 / device.tensor_peak_gflops(),
            "relative_error": relative, "verified": written and relative < 1e-4,
            "registers": kernel.build.registers, "spill_bytes": kernel.build.spill_bytes}


def bench(cases: list[str]) -> list[dict]:
    rows = []
    for case in cases:
        op = half_op(case)
        logical, stored = torch_tensors(op)
        peer_name, peer_seconds = peer(op, logical)
        expected = reference(op, logical)
        for tiles in TILES["gemm4096" if case == "gemm4096" else "conv"]:
            row = {"case": case, "op": repr(op), "peer": peer_name, "peer_ms": peer_seconds * 1e3,
                   "peer_tflops": op.flops / peer_seconds / 1e12} | run_variant(op, tiles, stored, expected)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def table(rows: list[dict]) -> str:
    best = {}
    for r in rows:
        if r["verified"] and (r["case"] not in best or r["median_ms"] < best[r["case"]]["median_ms"]):
            best[r["case"]] = r
    lines = ["| case (fp16 in, fp32 sums) | tiles (bm, bn, wm, wn, depth) | median ms | TFLOP/s "
             "| % TC peak | "
             "rel. error | regs | peer | peer ms | peer TFLOP/s | loopopt / peer time |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in best.values():
        lines.append(f"| {r['case']} | {tuple(r['tiles'])} | {r['median_ms']:.3f} | {r['tflops']:.0f} | "
                     f"{r['percent_of_peak']:.1f} | {r['relative_error']:.1e} | {r['registers']} | "
                     f"{r['peer']} | "
                     f"{r['peer_ms']:.3f} | {r['peer_tflops']:.0f} | {r['median_ms'] / r['peer_ms']:.2f}x |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated cases of gemm4096, conv2_x, conv3_x, conv4_x")
    parser.add_argument("--json", help="write the environment and rows to this file")
    args = parser.parse_args()
    env = environment() | {"tensor_peak_gflops": device.tensor_peak_gflops()}
    print(json.dumps(env), flush=True)
    rows = bench(args.only.split(",") if args.only else ["gemm4096", "conv2_x", "conv3_x", "conv4_x"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "rows": rows}, f, indent=1)
    print(table(rows))
    return 0 if all(r["verified"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
