"""The search's first choice against the next ranked candidates, per distinct quantized conv of ONNX models:
kernel only, one process, this machine.

    python benchmarks/bench_ranked.py MODEL.onnx [MODEL.onnx ...] [--ranked 8]
                                      [--budget 0.2] [--shapes SUBSTRING[|SUBSTRING...]] [--over 1.1]

For each distinct QLinearConv (QOperator int8 models; channels, kernel, stride, pads, groups, input size),
builds ``lo.Conv2d`` with uint8 activations, per-channel symmetric int8 weights and a uint8 output (the
quantize_static models' form), times ``tune.choice.first_choice`` and the first ``--ranked`` candidates
of the ranking that build, at one thread (``lo.measure_all``, medians, in one call so their rounds
interleave), and prints one row per shape: the first choice's time, the best's, their ratio and both
candidates (with the arithmetic their C runs: ``dot``, ``integer``); ``--over`` keeps the rows whose
ratio exceeds it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import onnx
from onnx import numpy_helper, shape_inference

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import loopopt as lo  # noqa: E402
from loopopt.tune import choice  # noqa: E402
from loopopt.tune.result import describe  # noqa: E402

SPEC = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="uint8")
Shape = tuple[int, int, int, int, int, int, int, int, int]   # c, k, kh, kw, h, w, stride, pad, groups


def conv_shapes(paths: list[str]) -> dict[Shape, list[str]]:
    """Each distinct QLinearConv's shape, with the models (file stems) that have it, in model order."""
    shapes: dict[Shape, list[str]] = {}
    for path in paths:
        model = shape_inference.infer_shapes(onnx.load(path))
        dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
                for v in (*model.graph.value_info, *model.graph.input)}
        weights = {t.name: numpy_helper.to_array(t).shape for t in model.graph.initializer}
        for node in model.graph.node:
            if node.op_type != "QLinearConv":
                continue
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            k, _, kh, kw = weights[node.input[3]]
            _, c, h, w = dims[node.input[0]]
            shape = (c, k, kh, kw, h, w, attrs.get("strides", [1])[0], attrs.get("pads", [0])[0],
                     attrs.get("group", 1))
            shapes.setdefault(shape, []).append(Path(path).name.split(".")[0])
    return shapes


def label(shape: Shape) -> str:
    c, k, kh, kw, h, w, stride, _, groups = shape
    return f"{c}->{k} {kh}x{kw} s{stride} g{groups} {h}x{w}"


def arithmetic(kernel) -> str:
    """The arithmetic the kernel's C header names (``emit._header``)."""
    return kernel.source.split("arithmetic: ", 1)[1].split("\n", 1)[0].split()[0]


def compare(shape: Shape, ranked: int, budget: float) -> tuple[list[float], list[str]]:
    """The first choice's and the first ``ranked`` candidates' median seconds and descriptions."""
    c, k, kh, kw, h, w, stride, pad, groups = shape
    op = lo.Conv2d(c, k, kernel_size=(kh, kw), stride=stride, padding=pad, groups=groups, bias=True, batch=1,
                   height=h, width=w, quant=SPEC)
    first = choice.first_choice(op)
    others = [cand for cand in choice.ranking(op) if cand.builds][:ranked]
    candidates = [first] + [cand for cand in others if cand is not first]
    kernels = [cand.schedule.compile(cand.isa) for cand in candidates]
    names = [f"{describe(cand.knobs.as_dict(), cand.isa)} [{arithmetic(kernel)}]"
             for cand, kernel in zip(candidates, kernels)]
    return [t.median for t in lo.measure_all(kernels, budget=budget)], names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--ranked", type=int, default=8, help="ranked candidates timed beside the first")
    parser.add_argument("--budget", type=float, default=0.2, help="lo.measure_all's seconds per kernel")
    parser.add_argument("--shapes", help="keep the shapes whose label contains one of these ('|' between)")
    parser.add_argument("--over", type=float, default=0.0, help="print the rows whose ratio exceeds this")
    args = parser.parse_args()
    print("| shape | models (convs) | first choice us | best us | first/best | first choice | best |")
    print("|---|---|---|---|---|---|---|")
    for shape, models in conv_shapes(args.models).items():
        if args.shapes and not any(part in label(shape) for part in args.shapes.split("|")):
            continue
        times, names = compare(shape, args.ranked, args.budget)
        best = min(range(len(times)), key=times.__getitem__)
        if times[0] / times[best] > args.over:
            where = f"{', '.join(dict.fromkeys(models))} ({len(models)})"
            print(f"| {label(shape)} | {where} | {times[0] * 1e6:.1f} | {times[best] * 1e6:.1f} "
                  f"| {times[0] / times[best]:.2f} | {names[0]} | {names[best]} |", flush=True)


if __name__ == "__main__":
    main()
