"""Winograd F(4x4,3x3) and F(2x2,3x3) vs loopopt's best direct schedule and PyTorch, fp32, one thread,
on ResNet-50 conv3_x and conv4_x (the 3x3 stride-1 layers); and the exact int8 Winograd F(2x2,3x3) vs
the stored direct int8 schedule of the layer.

Run ``python benchmarks/bench_winograd.py`` (``--write`` records the tables in the "Winograd" and
"Winograd int8" sections of docs/benchmarks.md; ``--precisions int8`` runs the int8 part only).

fp32: loopopt's kernels of a layer are timed together by ``lo.measure_all`` (interleaved rounds, kernel
run only; Winograd's filter transform and the layouts' packing are in ``prepare``, not timed), each
verified against the float64 reference (Winograd within its own bound, ``loopopt.winograd.error_bound``);
the max error is reported relative to the output's largest magnitude. Each Winograd F(4x4) stage is then
timed on its own (``measure_all`` of the stage kernels, random inputs) to show where the time goes.
PyTorch's calls are timed one by one like bench_layers.py's.

int8 (uint8 activations, int8 per-channel weights, int32 bias, uint8 output): the stored direct schedule
``<layer>.int8`` and ``lo.dataflows.winograd(op)`` (F(2x2,3x3)), each on avx512 (VNNI: ``vpdpbusd`` for
the direct kernel, ``vpdpwssd`` for Winograd's GEMM) and on avx2 (``vpmaddwd``), all four timed together
by ``lo.measure_all`` and verified bit for bit against quant.py's exact reference; then the avx512
Winograd stages one by one (``time_calls`` of each stage's C function on prepared buffers).
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_layers import INT8_SPEC, Options, time_calls
from bench_reuse import command_line, write_section
from peers import LayerData, PeerUnavailable, torch_fp32

import loopopt as lo
from loopopt.machine import cpu_seconds, machine_profile, others_share
from loopopt.quant_reference import random_call
from loopopt.winograd_int8 import STAGES

SECTION = "## Winograd"
INT8_SECTION = "## Winograd int8"
LAYERS = ("resnet50.conv3_x", "resnet50.conv4_x")
INT8_ISAS = ("avx512", "avx2")


@dataclass
class Row:
    implementation: str
    median: float
    fastest: float
    verified: bool
    relative_error: float
    note: str = ""


def loopopt_rows(layer: str, budget: float) -> tuple[list[Row], list[tuple[str, float]]]:
    """Direct (the stored schedule), Winograd F(4x4) and F(2x2), measured interleaved; and the F(4x4)
    stages' medians."""
    op = lo.get_layer(layer)
    direct = lo.load_schedule(layer, op).compile()
    direct.set_threads(1)
    plans = {m: lo.dataflows.winograd(op, m=m) for m in (4, 2)}
    kernels = [direct] + [plan.compile() for plan in plans.values()]
    timings = lo.measure_all(kernels, budget=budget)
    notes = [f"schedule `{layer}`, {direct.isa}"]
    notes += [f"{len(p.stages)} stages, GEMM {p.schedules['gemm'].op!r}" for p in plans.values()]
    rows = [Row(f"loopopt {t.algorithm}", t.median, t.min, t.verified, t.relative_error, note)
            for t, note in zip(timings, notes)]
    stages = kernels[1]
    stage_times = lo.measure_all(stages.kernels, budget=budget / 2)
    return rows, [(stage.name, t.median) for stage, t in zip(plans[4].stages, stage_times)]


def int8_rows(layer: str, budget: float) -> tuple[list[Row], list[Row], list[tuple[str, float]]]:
    """The stored direct int8 schedule and int8 Winograd F(2x2,3x3) on each of ``INT8_ISAS``, measured
    interleaved (rows, and each row's direct row of the same ISA); the avx512 Winograd stages' medians."""
    op = lo.get_layer(layer, quant=lo.QuantSpec(**INT8_SPEC, output="uint8"))
    kernels = []
    for isa in INT8_ISAS:
        direct = lo.load_schedule(f"{layer}.int8", op).compile(isa)
        direct.set_threads(1)
        kernels += [direct, lo.dataflows.winograd(op).compile(isa)]
    timings = lo.measure_all(kernels, budget=budget)
    rows = [Row(f"loopopt {t.algorithm}, {k.isa}", t.median, t.min, t.verified, t.relative_error,
                f"schedule `{layer}.int8`" if t.algorithm == "direct" else
                f"GEMM block {k.shape.rows} tiles x {k.shape.vectors * k.shape.lanes} channels")
            for k, t in zip(kernels, timings)]
    winograd = kernels[1]
    arrays, params = random_call(op, 0)
    buffers = winograd.prepare(*arrays, **params)
    options = Options((1,), None, budget / 2)
    stages = [(stage, time_calls(partial(winograd.run_stage, stage, buffers), options)[0])
              for stage in STAGES]
    return rows, [rows[i - i % 2] for i in range(len(rows))], stages


def torch_row(layer: str, budget: float) -> list[Row]:
    """PyTorch conv2d on channels-last fp32 tensors, one thread (empty without torch)."""
    data = LayerData.make(lo.get_layer(layer))
    try:
        case = torch_fp32(data, 1, channels_last=True)
    except PeerUnavailable:
        return []
    median, fastest = time_calls(case.run, Options((1,), None, budget))
    y = case.output(case.run())
    ok, _ = data.check(y, "fp32")
    error = float(np.abs(y - data.reference).max() / np.abs(data.reference).max())
    return [Row("PyTorch fp32", median, fastest, ok, error, f"channels-last, {case.note}")]


def table(op, rows: list[Row], directs: list[Row], unit: str = "GFLOP/s") -> str:
    """One line per row, its speed-up over ``directs`` (the direct row of each row, in order)."""
    lines = [f"| implementation | median ms | fastest ms | effective {unit} | vs direct (medians, fastest) | "
             "verified | max error / max output | note |", "|---|---|---|---|---|---|---|---|"]
    for r, direct in zip(rows, directs, strict=True):
        lines.append(f"| {r.implementation} | {r.median * 1e3:.3f} | {r.fastest * 1e3:.3f} | "
                     f"{op.flops / r.median / 1e9:.1f} | {direct.median / r.median:.2f}x, "
                     f"{direct.fastest / r.fastest:.2f}x | "
                     f"{'yes' if r.verified else 'NO'} | {r.relative_error:.1e} | {r.note} |")
    return "\n".join(lines)


def _header(command: str, others: float | None, notes: str) -> list[str]:
    profile = machine_profile()
    share = "unknown" if others is None else f"{100 * others:.0f}%"
    return [f"Produced on {datetime.date.today().isoformat()} ({time.strftime('%H:%M %Z')}) by\n\n"
            f"```\n{command}\n```",
            f"Machine: {profile.cpu}, {profile.cpus} logical CPUs, one thread, shared with other work: "
            f"other processes used {share} of the machine's CPU time during the run, so the medians "
            f"are noisy. {notes}"]


def _stage_split(stages: list[tuple[str, float]]) -> str:
    total = sum(t for _, t in stages)
    return ", ".join(f"{name} {t * 1e3:.3f} ms ({100 * t / total:.0f}%)" for name, t in stages)


def report(command: str, results: dict[str, tuple[list[Row], list[tuple[str, float]]]],
           others: float | None) -> str:
    """The fp32 section."""
    parts = _header(command, others,
                    "PyTorch is verified within 1e-4 of the output's largest magnitude "
                    "(peers.py). Effective GFLOP/s: the direct convolution's flops over the median "
                    "(Winograd does fewer). loopopt rows: kernel run only (the stored direct schedule packs "
                    "NHWC/HWIO in prepare; Winograd transforms its filter there); PyTorch: whole calls. "
                    "The stored direct schedules were tuned on another CPU (an AMD EPYC, see their "
                    "provenance), so they may not be this machine's best direct schedules.")
    for layer, (rows, stages) in results.items():
        op = lo.get_layer(layer)
        parts.append(f"### {layer}\n\n`{op!r}`\n\n{table(op, rows, [rows[0]] * len(rows))}\n\n"
                     f"Winograd F(4x4,3x3) stages timed one by one (medians): {_stage_split(stages)}.")
    return "\n\n".join(parts)


def int8_report(command: str, results: dict[str, tuple[list[Row], list[Row], list[tuple[str, float]]]],
                others: float | None) -> str:
    """The int8 section."""
    parts = _header(command, others,
                    "uint8 activations, int8 per-channel weights, int32 bias, uint8 output; every row is "
                    "verified bit for bit against quant.py's exact reference (max error 0). Effective "
                    "GOP/s: the direct convolution's operations over the median (Winograd does fewer "
                    "multiplications). Kernel run only: the direct kernels pack NHWC activations and "
                    "blocked weights in prepare; int8 Winograd packs zero-point-padded NHWC activations "
                    "and transforms its filter there. 'vs direct' compares with the direct kernel of the "
                    "same ISA. The stored int8 schedules were tuned on another CPU (an AMD EPYC, see their "
                    "provenance).")
    for layer, (rows, directs, stages) in results.items():
        op = lo.get_layer(layer, quant=lo.QuantSpec(**INT8_SPEC, output="uint8"))
        parts.append(f"### {layer}\n\n`{op!r}`\n\n{table(op, rows, directs, 'GOP/s')}\n\n"
                     f"int8 Winograd F(2x2,3x3) stages on avx512 timed one by one (medians): "
                     f"{_stage_split(stages)}.")
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", nargs="+", default=list(LAYERS))
    parser.add_argument("--precisions", nargs="+", choices=("fp32", "int8"), default=["fp32", "int8"])
    parser.add_argument("--budget", type=float, default=1.0,
                        help="seconds of timed runs per case (default 1)")
    parser.add_argument("--write", action="store_true", help="record the results in docs/benchmarks.md")
    args = parser.parse_args(argv)
    command = command_line(__file__, argv)
    if "fp32" in args.precisions:
        start = cpu_seconds()
        results = {}
        for layer in args.layers:
            rows, stages = loopopt_rows(layer, args.budget)
            results[layer] = (rows + torch_row(layer, args.budget), stages)
        text = report(command, results, others_share(start))
        print(f"{SECTION}\n\n{text}")
        if args.write:
            write_section(text, SECTION)
    if "int8" in args.precisions:
        start = cpu_seconds()
        int8 = {layer: int8_rows(layer, args.budget) for layer in args.layers}
        text = int8_report(command, int8, others_share(start))
        print(f"{INT8_SECTION}\n\n{text}")
        if args.write:
            write_section(text, INT8_SECTION)


if __name__ == "__main__":
    main()
