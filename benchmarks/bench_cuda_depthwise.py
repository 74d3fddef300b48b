"""The cuda target's depthwise kernels (``dataflows.gpu_depthwise``: a thread's 16-byte channel vector
and run of output pixels, the input loaded once per filter row into registers; float16 inputs,
float32 sums and output) on MobileNetV2's depthwise 3x3 layers at N=32, next to cuDNN (torch conv2d
float16 channels_last, groups = channels, ``cudnn.benchmark``) in the same run, and to the device's
copy rate of the same bytes.

Bytes: the input (float16 NHWC) read, the output (float32 NHWC) written and the weights read once:
the floor of a memory-bound kernel. The copy rate: ``torch``'s copy of a float16 tensor of half those
bytes (it reads and writes them), timed the same way. Every loopopt output is checked against float64
PyTorch on the same float16 inputs (‖out − ref‖ / ‖ref‖ under 1e-5, no element left unwritten).
Times: CUDA events around one launch with the L2 cache overwritten before it, median of 50 after 10
warm-ups; and inside a CUDA graph (L2 warm, no launch overhead); cuDNN both ways. Runs of 1, 2, 4
and 8 pixels and a wider block a layer (``VARIANTS``, built in parallel first); each layer's fastest in
the table. The output is float32 (the target's float16 kernels sum and store float32): loopopt's
kernels move up to a third more bytes than cuDNN's, which writes float16.

``python benchmarks/bench_cuda_depthwise.py [--only dw56,dw7] [--json PATH]``; ``--check``: small
kernels of every guard kind (stride, dilation, asymmetric padding, a channel tail, batch > 1, bias,
bfloat16 and float32) verified once (the run to put under ``compute-sanitizer``).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from cuda_bench import events_median, graph_median, main, markdown, torch_graph_median

import loopopt as lo
from loopopt.dataflows import gpu_depthwise
from loopopt.measure import checked

# MobileNetV2's depthwise 3x3 layers: channels, input size, stride
CASES = {"dw112s2": (96, 112, 2), "dw56": (144, 56, 1), "dw28": (192, 28, 1), "dw14": (384, 14, 1),
         "dw7": (960, 7, 1)}
BATCH = 32
VARIANTS = [{"run": 1}, {"run": 2}, {"run": 4}, {"run": 8}, {"run": 2, "threads_w": 16}]


def depthwise_op(case: str, batch: int = BATCH) -> lo.Conv2d:
    channels, size, stride = CASES[case]
    return lo.Conv2d(channels, channels, 3, stride=stride, padding=1, groups=channels, bias=False,
                     batch=batch, height=size, width=size, dtype="float16")


def moved_bytes(op: lo.Conv2d, output_bytes: int = 4) -> int:
    """The input and weights (float16) read once, the output written once."""
    return 2 * (op.batch * op.in_channels * op.height * op.width + 9 * op.out_channels) + \
        output_bytes * op.batch * op.out_channels * op.out_height * op.out_width


def copy_seconds(nbytes: int) -> float:
    """Seconds of torch's device-to-device copy that reads and writes ``nbytes`` in all (L2 flushed)."""
    import torch
    src = torch.randn(nbytes // 4, device="cuda").half()
    dst = torch.empty_like(src)
    return events_median(lambda: dst.copy_(src))


def bench(cases: list[str]) -> list[dict]:
    import cupy as cp
    import torch
    torch.backends.cudnn.benchmark = True
    with ThreadPoolExecutor() as pool:     # every kernel built before any timing, nvcc on all cores
        kernels = dict(pool.map(lambda pair: (pair, gpu_depthwise(depthwise_op(pair[0]), **VARIANTS[pair[1]])
                                              .compile(target="cuda")),
                                [(case, v) for case in cases for v in range(len(VARIANTS))]))
    rows = []
    for case in cases:
        op = depthwise_op(case)
        generator = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(op.batch, op.in_channels, op.height, op.width, device="cuda",
                        generator=generator).half()
        w = torch.randn(op.out_channels, 1, 3, 3, device="cuda", generator=generator).half()
        x, w = (t.contiguous(memory_format=torch.channels_last) for t in (x, w))
        stride = op.stride
        expected = torch.nn.functional.conv2d(x.double(), w.double(), None, stride, 1, 1, op.groups)
        expected = expected.permute(0, 2, 3, 1)
        def peer(x=x, w=w, stride=stride, groups=op.groups):
            return torch.nn.functional.conv2d(x, w, None, stride, 1, 1, groups)

        peer_ms, peer_graph_ms = events_median(peer) * 1e3, torch_graph_median(peer) * 1e3
        nbytes = moved_bytes(op)
        copy_ms = copy_seconds(nbytes) * 1e3
        stored = {"I": x.permute(0, 2, 3, 1).contiguous(), "W": w.permute(2, 3, 1, 0).contiguous()}
        for v, knobs in enumerate(VARIANTS):
            kernel = kernels[case, v]
            out = cp.full((op.batch, op.out_height, op.out_width, op.out_channels), np.nan, dtype=np.float32)
            buffers = kernel.bind(stored | {"O": out})
            kernel.run(buffers)
            got = torch.as_tensor(out, device="cuda").double()
            relative = float(torch.linalg.vector_norm(got - expected) / torch.linalg.vector_norm(expected))
            def launch(kernel=kernel, buffers=buffers):
                kernel.run(buffers)

            ms, graph_ms = events_median(launch) * 1e3, graph_median(launch) * 1e3
            row = {"case": case, "op": repr(op), "knobs": knobs, "block": kernel.printed.block,
                   "median_ms": ms, "graph_ms": graph_ms, "bytes": nbytes, "gb_s": nbytes / ms / 1e6,
                   "copy_ms": copy_ms, "percent_of_copy": 100 * copy_ms / ms,
                   "cudnn_ms": peer_ms, "cudnn_graph_ms": peer_graph_ms,
                   "cudnn_gb_s": moved_bytes(op, 2) / peer_ms / 1e6,
                   "vs_cudnn": peer_ms / ms, "vs_cudnn_graph": peer_graph_ms / graph_ms,
                   "relative_error": relative,
                   "verified": not bool(torch.isnan(got).any()) and relative < 1e-5,
                   "registers": kernel.build.registers, "spill_bytes": kernel.build.spill_bytes}
            print(row, flush=True)
            rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    best: dict[str, dict] = {}
    for r in rows:
        if r["verified"] and (r["case"] not in best or r["median_ms"] < best[r["case"]]["median_ms"]):
            best[r["case"]] = r
    return markdown(["layer (N=32, fp16)", "knobs", "ms", "graph ms", "MB moved", "GB/s", "copy ms",
                     "% of copy", "cuDNN ms", "cuDNN graph ms", "x cuDNN", "x cuDNN graph"],
                    [[r["op"].split(", bias")[0] + ")", r["knobs"], f"{r['median_ms']:.4f}",
                      f"{r['graph_ms']:.4f}", f"{r['bytes'] / 1e6:.1f}", f"{r['gb_s']:.0f}",
                      f"{r['copy_ms']:.4f}", f"{r['percent_of_copy']:.0f}", f"{r['cudnn_ms']:.4f}",
                      f"{r['cudnn_graph_ms']:.4f}", f"{r['vs_cudnn']:.2f}", f"{r['vs_cudnn_graph']:.2f}"]
                     for r in best.values()])


def check() -> bool:
    """Small kernels of every guard kind, verified once against the op's reference."""
    ops = [lo.Conv2d(13, 13, 3, stride=2, padding=((1, 0), (2, 1)), groups=13, batch=3, height=11, width=9,
                     dtype="float16"),
           lo.Conv2d(24, 24, 3, padding=2, dilation=2, groups=24, batch=2, height=10, width=13,
                     dtype="float16"),
           lo.Conv2d(20, 20, 3, stride=2, padding=1, groups=20, batch=2, height=9, width=9, dtype="bfloat16"),
           lo.Conv2d(10, 10, (3, 5), padding=(1, 2), groups=10, batch=2, height=7, width=12, dtype="float32")]
    ok = True
    for op in ops:
        for knobs in ({"run": 3, "threads_w": 2}, {"run": 4}):
            good, error, _ = checked(gpu_depthwise(op, **knobs).compile(target="cuda"), seed=3)
            print(repr(op), knobs, "ok" if good else error, flush=True)
            ok &= good
    return ok


if __name__ == "__main__":
    raise SystemExit(main(__doc__, list(CASES), bench, table, check))
