"""bf16 vs fp32 on one layer (default ResNet-50 conv2_x), one thread: loopopt's fp32 schedule, the same
schedule on bf16 inputs (widened to fp32 and fused), the vdpbf16ps schedule ``<layer>.bf16``, and PyTorch
fp32 and bf16 (channels-last tensors, oneDNN) when torch is installed.

Run ``python benchmarks/bench_bf16.py`` (``--write`` records the table in the "bf16 vs fp32" section of
docs/benchmarks.md). loopopt's kernels are timed together by ``lo.measure_all`` (interleaved rounds, kernel
run only, verified against the float64 reference of the bf16-rounded inputs within the bf16 bound);
PyTorch's calls are timed one by one like bench_layers.py's peers.
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_layers import Options, time_calls
from bench_reuse import command_line, write_section

import loopopt as lo
from loopopt.bf16 import bf16_values
from loopopt.machine import cpu_seconds, machine_profile, others_share
from loopopt.measure import bf16_tolerance
from loopopt.targets.x86.isa import cpu_flags

SECTION = "## bf16 vs fp32"
FP32_RTOL = 1e-4          # PyTorch fp32: within this fraction of the reference's largest magnitude
BF16_OUTPUT = 2.0 ** -8   # PyTorch bf16 returns bf16: its output rounding, relative


@dataclass
class Row:
    implementation: str
    median: float
    fastest: float
    peak: float | None          # GFLOP/s the row is judged against; None: not comparable (AMX)
    verified: bool
    note: str = ""


def loopopt_rows(layer: str, budget: float) -> list[Row]:
    """The three loopopt kernels of ``layer`` on one thread, measured interleaved."""
    cases = [("fp32", layer, "float32"), ("bf16, widened + FMA", layer, "bfloat16"),
             ("bf16, vdpbf16ps", f"{layer}.bf16", "bfloat16")]
    kernels = []
    for _, schedule, dtype in cases:
        # the float32 schedule on the bf16 op on purpose (widened + FMA): any_arithmetic
        kernel = lo.load_schedule(schedule, lo.get_layer(layer, dtype=dtype), any_arithmetic=True).compile()
        kernel.set_threads(1)
        kernels.append(kernel)
    timings = lo.measure_all(kernels, budget=budget)
    rows = []
    for (label, schedule, dtype), kernel, t in zip(cases, kernels, timings):
        how = ("vdpbf16ps" if "dpbf16_ps" in kernel.source else
               "fp32 FMA" if dtype == "float32" else "bf16 widened to fp32, FMA")
        note = f"schedule `{schedule}`, {kernel.isa}, {how}"
        rows.append(Row(f"loopopt {label}", t.median, t.min, t.peak_gflops, t.verified, note))
    return rows


def torch_rows(layer: str, budget: float) -> list[Row]:
    """PyTorch conv2d on channels-last fp32 and bf16 tensors, one thread (empty without torch)."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return []
    torch.set_num_threads(1)
    op32 = lo.get_layer(layer)
    inputs = op32.random_inputs(seed=0)
    x, w, b = inputs["I"], inputs["W"], inputs["B"]
    xt = torch.from_numpy(x).contiguous(memory_format=torch.channels_last)
    wt = torch.from_numpy(w).contiguous(memory_format=torch.channels_last)
    bt = torch.from_numpy(b)
    conv = lambda a, k, c: F.conv2d(a, k, c, stride=op32.stride, padding=op32.padding,
                                    dilation=op32.dilation, groups=op32.groups)
    rows = []
    options = Options((1,), None, budget)
    with torch.no_grad():
        median, fastest = time_calls(lambda: conv(xt, wt, bt), options)
        reference = op32.reference(x, w, b)
        error = np.abs(conv(xt, wt, bt).numpy() - reference).max()
        rows.append(Row("PyTorch fp32", median, fastest, lo.peak_gflops("auto"),
                        bool(error <= FP32_RTOL * np.abs(reference).max()),
                        f"oneDNN, channels-last; torch {torch.__version__}"))
        xb, wb, bb = (t.to(torch.bfloat16) for t in (xt, wt, bt))
        median, fastest = time_calls(lambda: conv(xb, wb, bb), options)
        y = conv(xb, wb, bb).float().numpy()
        bias = bf16_values(b)           # PyTorch adds the bias in bf16 too
        bf16_op = lo.get_layer(layer, dtype="bfloat16")
        expected = bf16_op.reference(x, w, bias)
        bound = bf16_tolerance(bf16_op, {"I": x, "W": w, "B": bias}) + BF16_OUTPUT * np.abs(expected)
        amx = "amx_bf16" in cpu_flags()
        rows.append(Row("PyTorch bf16", median, fastest,
                        None if amx else lo.peak_gflops("auto", "bfloat16"),
                        bool(np.all(np.abs(y - expected) <= bound)),
                        "oneDNN, channels-last bf16 tensors (bias and output bf16 too)"
                        + ("; this CPU has AMX, which oneDNN uses for bf16 (ONEDNN_VERBOSE=1 names the "
                           "kernel; on the Xeon of 2026-11-23: brg_conv_fwd:avx10_1_512_amx), so no "
                           "AVX-512 peak applies" if amx else "")))
    return rows


def table(op, rows: list[Row]) -> str:
    lines = ["| implementation | median ms | fastest ms | GFLOP/s | % of peak | verified | note |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        rate = op.flops / r.median / 1e9
        peak = "-" if r.peak is None else f"{100 * rate / r.peak:.0f}% of {r.peak:.0f}"
        lines.append(f"| {r.implementation} | {r.median * 1e3:.3f} | {r.fastest * 1e3:.3f} | {rate:.1f} | "
                     f"{peak} | {'yes' if r.verified else 'NO'} | {r.note} |")
    return "\n".join(lines)


def report(command: str, layer: str, op, rows: list[Row], others: float | None) -> str:
    profile = machine_profile()
    peaks = profile.peaks
    dot = peaks["bfloat16"].get("avx512")
    dot_text = f"{dot:.1f} GFLOP/s" if dot else "not available (no AVX512-BF16)"
    share = "unknown" if others is None else f"{100 * others:.0f}%"
    return "\n\n".join([
        f"Produced on {datetime.date.today().isoformat()} ({time.strftime('%H:%M %Z')}) by\n\n"
        f"```\n{command}\n```",
        (f"Layer `{layer}` ({op!r}), batch 1, one thread. Machine: {profile.cpu}, {profile.cpus} logical "
         f"CPUs, shared with other work: other processes used {share} of the machine's CPU time during the "
         f"run (/proc/stat less this process), so the medians are noisy. One-core peaks from the machine "
         f"profile: "
         f"fp32 FMA {peaks['float32'].get('avx512', 0):.1f} GFLOP/s, vdpbf16ps {dot_text}; the bf16 peak "
         f"(`lo.peak_gflops(isa, 'bfloat16')`) is the faster of the two ways a bf16 kernel multiplies."),
        ("Medians of single runs (loopopt: `lo.measure_all`, kernel run only on prepared buffers, rounding "
         "to bf16 and packing excluded; PyTorch: whole calls including its output allocation). loopopt's "
         "bf16 outputs are verified against the float64 reference of the bf16-rounded inputs within the "
         "bound of docs/reference/measure.md; PyTorch bf16 within that bound plus 2^-8 of the reference "
         "(it returns bf16), with its bias rounded to bf16; fp32 within 1e-4 of the largest magnitude."),
        table(op, rows),
    ])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", default="resnet50.conv2_x",
                        help="a layer with a stored <layer>.bf16 schedule")
    parser.add_argument("--budget", type=float, default=1.0,
                        help="seconds of timed runs per case (default 1)")
    parser.add_argument("--write", action="store_true", help="record the results in docs/benchmarks.md")
    args = parser.parse_args(argv)
    command = command_line(__file__, argv)
    start = cpu_seconds()
    op = lo.get_layer(args.layer)
    rows = loopopt_rows(args.layer, args.budget) + torch_rows(args.layer, args.budget)
    text = report(command, args.layer, op, rows, others_share(start))
    print(f"{SECTION}\n\n{text}")
    if args.write:
        write_section(text, SECTION)


if __name__ == "__main__":
    main()
