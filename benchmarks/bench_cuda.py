"""The cuda target on an NVIDIA GPU: loopopt's ``gpu_naive`` (one thread per output), ``gpu_tiled``
(block-tiled SIMT, a register block per thread) and ``gpu_staged`` (the same, input tiles staged in
shared memory) kernels of ResNet-50's 3x3 convs
(conv2_x, conv3_x, conv4_x at N=32 and N=1) and of a 4096^3 GEMM, float32, each verified against
the reference (the GEMM against float64 products on the GPU) and timed by ``lo.measure`` (CUDA
events, median), next to cuDNN / cuBLAS through PyTorch in the same run (same shapes, float32 with
TF32 off; CUDA events, median of 50 calls). Every timed run, loopopt's and the peers', starts
with the L2 cache overwritten (``device.elapsed``: cold inputs).

``python benchmarks/bench_cuda.py [--only conv2_x.n1,gemm4096] [--json PATH]`` prints the device,
driver, nvcc and a Markdown table. ``--check``: small kernels of every guard kind (padding, stride,
dilation, groups, batch, tails, the init pass), verified once each: the run to put under
``compute-sanitizer --tool memcheck`` (and ``racecheck``: the staged kernels' barriers).
"""
from __future__ import annotations

from cuda_bench import events_median, main, markdown

import loopopt as lo
from loopopt.dataflows import GPU_PRESETS
from loopopt.layers import get_layer
from loopopt.measure import tolerance, verify

CASES = {f"{layer}.n{batch}": (lambda layer=layer, batch=batch: get_layer(f"resnet50.{layer}", batch=batch))
         for batch in (32, 1) for layer in ("conv2_x", "conv3_x", "conv4_x")}
CASES["gemm4096"] = lambda: lo.Matmul(4096, 4096, 4096)
CHECKS = {
    "conv pad/stride/dilation/groups, batch 2": lo.Conv2d(8, 12, 3, stride=2, padding=(1, 2), dilation=2,
                                                          groups=2, height=13, width=11, batch=2),
    "conv 5x5 tails": lo.Conv2d(3, 20, 5, padding=2, height=17, width=19, batch=3),
    "matmul tails": lo.Matmul(37, 45, 13),
    "gemm alpha/beta": lo.Gemm(30, 20, 7, alpha=0.5, beta=2.0),
}


def peer(op) -> tuple[str, float]:
    """cuDNN (conv) or cuBLAS (GEMM) through PyTorch on ``op``'s shapes, float32, TF32 off."""
    import torch
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    shapes = [op.tensor(t).shape for t in op.inputs]
    a, b = (torch.randn(*s, device="cuda") for s in shapes)
    if not op.windows:
        return "cuBLAS (torch.mm)", events_median(lambda: torch.mm(a, b))
    bias = torch.randn(op.channels, device="cuda") if op.bias else None
    w = op.windows
    stride, pad, dilation = (tuple(getattr(x, f) for x in w) for f in ("stride", "pad", "dilation"))
    call = lambda: torch.nn.functional.conv2d(a, b, bias, stride, pad, dilation, op.groups)
    return f"cuDNN {torch.backends.cudnn.version()} (torch.conv2d)", events_median(call)


def bench(names: list[str]) -> list[dict]:
    rows = []
    for name in names:
        op = CASES[name]()
        peer_name, peer_seconds = peer(op)
        for preset, make in GPU_PRESETS.items():
            kernel = make(op).compile(target="cuda")
            timing = lo.measure(kernel, budget=0.5, verify_output=bool(op.windows))
            verified = timing.verified if op.windows else gpu_checked(kernel)
            rows.append({"case": name, "op": repr(op), "kernel": preset, "median_ms": timing.median * 1e3,
                         "gflops": timing.gflops, "percent_of_peak": timing.percent_of_peak,
                         "verified": verified, "relative_error": timing.relative_error,
                         "registers": kernel.build.registers, "spill_bytes": kernel.build.spill_bytes,
                         "peer": peer_name, "peer_ms": peer_seconds * 1e3,
                         "peer_gflops": op.flops / peer_seconds / 1e9})
            print(f"{name} {preset}: {timing}; {kernel.build.registers} registers, "
                  f"{kernel.build.spill_bytes} spill bytes; {peer_name} {peer_seconds * 1e3:.3f} ms",
                  flush=True)
    return rows


def gpu_checked(kernel) -> bool:
    """A GEMM kernel's output against float64 products on the GPU (cuBLAS through PyTorch), within
    ``measure.tolerance``: the reference of a 4096^3 GEMM, whose numpy reference takes minutes."""
    import torch
    op = kernel.op
    inputs = op.random_inputs(seed=4)
    args = [inputs[t] for t in op.call_tensors]
    a, b = (torch.from_numpy(x).cuda().double() for x in args)
    expected = torch.mm(a, b).cpu().numpy()
    error = abs(kernel(*args).astype("float64") - expected)
    ok = bool((error <= tolerance(op, inputs)).all())
    print(f"{op!r} against float64 torch.mm on the GPU: max error {error.max():.2e}, "
          f"{'verified' if ok else 'WRONG'}", flush=True)
    return ok


def check() -> bool:
    """Every CHECKS op under both presets and a schedule with the init pass, verified once."""
    ok = True
    for what, op in CHECKS.items():
        schedules = {name: make(op) for name, make in GPU_PRESETS.items()}
        first = op.dim_names[0]
        reduction = next(d for d in op.dim_names if d in op.reduction_dims)
        schedules["reduction outside, init pass"] = (lo.Schedule(op).reorder(reduction, first)
                                                     .bind(first, "thread.x"))
        for name, schedule in schedules.items():
            good, error = verify(schedule.compile(target="cuda"), seed=7)
            ok &= good
            print(f"{what}, {name}: {'verified' if good else 'WRONG'} (max error {error:.2e})", flush=True)
    return ok


def table(rows: list[dict]) -> str:
    header = ["case", "loopopt kernel", "median ms", "GFLOP/s", "% of FFMA peak", "verified", "regs",
              "spills", "peer", "peer ms", "loopopt / peer time"]
    return markdown(header, [[r["case"], r["kernel"], f"{r['median_ms']:.3f}", f"{r['gflops']:.0f}",
                              f"{r['percent_of_peak']:.1f}", "yes" if r["verified"] else "NO", r["registers"],
                              r["spill_bytes"], r["peer"], f"{r['peer_ms']:.3f}",
                              f"{r['median_ms'] / r['peer_ms']:.1f}x"] for r in rows])


if __name__ == "__main__":
    raise SystemExit(main(__doc__, list(CASES), bench, table, check))
