"""The five single layers a new user tried (issue 29), loopopt against PyTorch in the scope frameworks
are compared in: weights packed once, the activations packed per call from NCHW / row-major numpy.

Layers: conv 80->192 3x3 28x28, GEMM 512x1024x1024, batched attention 12 x (128x64 @ 64x128),
depthwise 240 channels 5x5 28x28, int8 conv 80->192 (uint8 activations, int8 per-channel weights,
uint8 output). loopopt runs the ONNX backend's default schedule (``onnx.kernels.default_schedule``:
the search's untimed first choice) and is timed two ways: ``prepacked`` (``kernel.with_constants(w, b,
**params)`` once, as the ONNX backend binds a node, then ``call(x)``: the activations packed from NCHW
each call, the output returned in the logical layout, a view of the kernel's storage where the layout
allows; the attention's second operand is an activation, so both come with each call:
``kernel.with_constants(per_call=2)``, ``call(a, b)``, packed where their layout is not row-major)
and ``kernel only`` (``kernel.run`` on prepared buffers). PyTorch
(``benchmarks/peers.py``): NCHW and channels-last convolutions, the quantized x86 engine
(channels-last), ``torch.matmul``; for the int8 conv also onnxruntime's ``QLinearConv`` with its exact
int8 products (``loopopt.onnx.peer.session_options``): PyTorch's x86 engine multiplies with
``vpmaddubsw`` on CPUs without VNNI, whose int16 pair sums saturate, so its outputs can miss the exact
ones there. All of a layer's calls are interleaved one by one, one thread; every output is checked
against the reference, and the ratio is taken against the fastest peer whose output verified (a
faster one that did not is named beside it).

    python benchmarks/bench_prepacked.py [--budget 0.5] [--clock wall|cpu] [--write]

``--write`` replaces the section "Five layers in the prepacked-weights scope vs PyTorch" of
docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_layers import machine_text, versions_text  # noqa: E402
from bench_reuse import command_line, publish  # noqa: E402
from peers import LayerData, ort_int8, torch_fp32, torch_int8, torch_matmul  # noqa: E402

import loopopt as lo  # noqa: E402
from loopopt.machine import cpu_seconds, others_share  # noqa: E402
from loopopt.onnx.kernels import default_schedule  # noqa: E402

SECTION = "## Five layers in the prepacked-weights scope vs PyTorch"
INT8 = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="uint8")


@dataclass
class Layer:
    """One layer: loopopt's op and call (arrays, quantization parameters, whether the second array is
    a weight to prepack), its check (an output -> what is wrong with it, '' if nothing), and the peers'
    calls (name -> zero-argument run, output to numpy)."""

    name: str
    op: lo.Conv2d | lo.Matmul
    arrays: tuple[np.ndarray, ...]
    params: dict
    weights: bool
    check: Callable[[np.ndarray], str]
    peers: dict[str, tuple[Callable[[], object], Callable[[object], np.ndarray]]]


def _conv(name: str, op: lo.Conv2d, quantized: bool = False) -> Layer:
    data = LayerData.make(op)
    if quantized:
        qop = lo.Conv2d(op.in_channels, op.out_channels, op.kernel_size, padding=op.padding, groups=op.groups,
                        height=op.height, width=op.width, quant=INT8)
        peers = {"PyTorch x86 NHWC": torch_int8(data, 1),
                 "onnxruntime QLinearConv (exact)": ort_int8(data, 1)}
        return Layer(name, qop, (data.xq, data.wq, data.bq), data.quant_params(), True,
                     lambda y: data.check(y, "uint8")[1],
                     {peer: (case.run, case.output) for peer, case in peers.items()})
    peers = {}
    for layout, channels_last in (("NCHW", False), ("NHWC", True)):
        case = torch_fp32(data, 1, channels_last)
        peers[f"PyTorch {layout}"] = (case.run, case.output)
    return Layer(name, op, (data.x, data.w, data.b), {}, True, lambda y: data.check(y, "fp32")[1], peers)


def _matmul(name: str, op: lo.Matmul, weights: bool) -> Layer:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((*op.batch, op.m, op.k)).astype(np.float32)
    b = rng.standard_normal((*op.batch, op.k, op.n)).astype(np.float32)
    want = a.astype(np.float64) @ b
    case = torch_matmul(a, b, 1)
    bound = 1e-4 * float(np.abs(want).max())

    def check(y: np.ndarray) -> str:
        error = float(np.abs(y - want).max())
        return "" if error <= bound else f"max error {error:.3g} > {bound:.3g}"

    return Layer(name, op, (a, b), {}, weights, check, {"PyTorch matmul": (case.run, case.output)})


def layers() -> list[Layer]:
    conv = lo.Conv2d(80, 192, 3, padding=1, height=28, width=28)
    return [_conv("conv 80->192 3x3 28x28", conv),
            _matmul("GEMM 512x1024x1024", lo.Matmul(512, 1024, 1024), weights=True),
            _matmul("attention 12 x 128x128x64", lo.Matmul(128, 128, 64, batch=(12,)), weights=False),
            _conv("depthwise 240ch 5x5 28x28", lo.Conv2d(240, 240, 5, padding=2, groups=240, height=28,
                                                         width=28)),
            _conv("int8 conv 80->192 3x3 28x28", conv, quantized=True)]


CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}    # cpu: this thread's CPU time
CLOCK_TEXT = {"wall": "wall time", "cpu": "the calling thread's CPU time (`time.thread_time`: preemptions by "
              "the machine's other processes left out; the caches they share are not)"}


def _timed(run: Callable[[], object], clock: Callable[[], float]) -> float:
    start = clock()
    run()
    return clock() - start


def interleaved(runs: dict[str, Callable[[], object]], budget: float,
                clock: Callable[[], float] = time.perf_counter) -> dict[str, tuple[float, float]]:
    """Median and minimum seconds of each run on ``clock``, the runs called in turn, one call each per
    round, for about ``budget`` seconds of the slowest (at least 5 rounds) after two warm-up rounds."""
    for run in runs.values():
        run()
    first = max(_timed(run, clock) for run in runs.values())
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(int(min(200, max(5, budget / first)))):
        for name, run in runs.items():
            times[name].append(_timed(run, clock))
    return {name: (float(np.median(t)), min(t)) for name, t in times.items()}


def row(layer: Layer, budget: float, clock: Callable[[], float]) -> str:
    # the weights (and bias, quantization parameters) checked and packed once; both operands per call;
    # the activations arrive in their logical layouts (NCHW, row-major): a candidate that stores them so
    # where the ranking puts it within the packing it saves (tune.choice.first_reading)
    per_call = 1 if layer.weights else len(layer.arrays)
    arriving = {tensor: layer.op.tensor(tensor).letters for tensor in layer.op.inputs[1:per_call]}
    schedule, source, isa = default_schedule(layer.op, arrives=layer.op.tensor(layer.op.inputs[0]).letters,
                                             operands=arriving)
    kernel = schedule.compile(isa)
    call = kernel.with_constants(*layer.arrays[per_call:], per_call=per_call, **layer.params)
    whole = lambda: call(*layer.arrays[:per_call])              # noqa: E731
    buffers = kernel.prepare(*layer.arrays, **layer.params)
    wrong = {"loopopt": layer.check(whole()),
             **{name: layer.check(out(run())) for name, (run, out) in layer.peers.items()}}
    failed = "; ".join(f"{name}: {what}" for name, what in wrong.items() if what)
    times = interleaved({"prepacked": whole, "kernel": lambda: kernel.run(buffers),
                         **{name: run for name, (run, _) in layer.peers.items()}}, budget, clock)
    ours = times["prepacked"][0]
    verified = [name for name in layer.peers if not wrong[name]] or list(layer.peers)
    best = min(verified, key=lambda name: times[name][0])
    fastest = min(layer.peers, key=lambda name: times[name][0])
    unverified = f"; {times[fastest][0] / ours:.2f} ({fastest}, not verified)" if fastest != best else ""
    peers = ", ".join(f"{name} {times[name][0] * 1e3:.3f}" for name in layer.peers)
    scope = "prepacked" if layer.weights else "both operands per call"
    return (f"| {layer.name} | {kernel.isa}: {source.split(':', 1)[-1].strip()} | {scope} | "
            f"{ours * 1e3:.3f} | {times['kernel'][0] * 1e3:.3f} | {peers} | "
            f"{times[best][0] / ours:.2f} ({best}){unverified} | "
            f"{times['prepacked'][1] * 1e3:.3f} / {times[best][1] * 1e3:.3f} | "
            f"{'NO: ' + failed if failed else 'yes'} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=0.5, help="seconds of rounds per layer (default 0.5)")
    parser.add_argument("--clock", choices=CLOCKS, default="wall",
                        help="wall time, or the calling thread's CPU time (one thread: loopopt's and "
                             "PyTorch's calls run on it; preemptions left out), default wall")
    parser.add_argument("--write", action="store_true", help="record the table in docs/benchmarks.md")
    args = parser.parse_args(argv)
    start = cpu_seconds()
    lines = []
    for layer in layers():
        lines.append(row(layer, args.budget, CLOCKS[args.clock]))
        print(lines[-1], flush=True)
    text = "\n\n".join([
        f"Produced on {time.strftime('%Y-%m-%d (%H:%M %Z)')} by\n\n```\n{command_line(__file__, argv)}\n```",
        f"{machine_text(lo.available_isas()[0], others_share(start))} Peers: {versions_text()}.",
        "One thread, batch 1. loopopt: the ONNX backend's default schedule (the search's untimed first "
        "choice; its ISA and knobs in the `schedule` column), timed as whole calls from NCHW / row-major "
        "numpy with the weights packed once (`call = kernel.with_constants(w, b, **params)`, as the ONNX "
        "backend binds a node, then `call(x)`: the activations packed each call into the buffers the "
        "kernel keeps, the output in the logical layout, a view of the kernel's storage where the layout "
        "allows; the attention's second operand is an activation: "
        "`call = kernel.with_constants(per_call=2)`, `call(a, b)`, both given each call, packed where their "
        "layout is not row-major) and kernel only (`kernel.run` on prepared buffers). PyTorch as "
        "`benchmarks/peers.py` sets it up (NCHW and channels-last `conv2d`, the x86 quantized engine, "
        "`torch.matmul`); for the int8 conv also onnxruntime's `QLinearConv` with exact int8 products "
        "(PyTorch's x86 engine saturates int16 pair sums where the CPU has no VNNI). A layer's calls run "
        f"interleaved one by one, each timed by {CLOCK_TEXT[args.clock]}; medians (ms), and the minimums "
        "of loopopt's whole call and of the peer the ratio is taken against. `best peer / loopopt` > 1: "
        "loopopt is faster, against the fastest peer whose output verified (a faster one that did not is "
        "named after it); `verified`: every output matched the reference (fp32 within 1e-4 of the largest "
        "value; uint8 within 2 LSB), else which missed and by how much.",
        "| layer | schedule | loopopt scope | loopopt ms | loopopt kernel only ms | peers ms | "
        "best peer / loopopt | min ms (loopopt / peer) | verified |\n"
        "|---|---|---|---|---|---|---|---|---|\n" + "\n".join(lines)])
    publish(text, SECTION, args.write)


if __name__ == "__main__":
    main()
