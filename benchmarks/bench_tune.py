"""Layers no catalog holds, tuned by ``lo.tune``, against PyTorch (oneDNN / MKL) and onnxruntime.

Run ``python benchmarks/bench_tune.py`` (``--layers a,b``, ``--threads 1,2``, ``--trials N``,
``--seconds S`` per search, ``--log FILE`` to keep the trials; ``--write`` records the tables in
the "Tuned layers vs PyTorch and onnxruntime" section of docs/benchmarks.md). For each layer and
thread count, one search (``lo.tune``: model-guided, each trial compiled, verified and timed in a
worker process); then, in this process, the best kernel is measured again (``lo.measure``: the
median of single runs) next to PyTorch (``conv2d`` on channels-last tensors, ``torch.matmul``)
and onnxruntime, each timed as ``bench_layers.py`` times its peers and its output verified. Per
search: the best time against the peers, % of peak, the trials and seconds until the search was
within 95% of its final best, and the Spearman rank correlation of the kernel model's time with
the measured times of its trials. A run with fewer layers or a smaller budget than the defaults
labels its section a smoke run.

``--convergence`` runs the issue's conv2_x check instead: a 16-trial search of ResNet-50 conv2_x from
scratch against the stored schedule (this CPU's, where one is stored), the two kernels timed together
by ``lo.measure_all`` (section "ResNet-50 conv2_x: measured trials to the stored schedule's speed").
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
from bench_layers import INT8_SPEC, Options, first_line, int8_peak, machine_text, time_calls, versions_text
from bench_reuse import command_line, write_section
from peers import FP32_PEERS, INT8_PEERS, MATMUL_PEERS, LayerData, PeerUnavailable

import loopopt as lo
from loopopt.machine import cpu_seconds, others_share

SECTION = "## Tuned layers vs PyTorch and onnxruntime"
CONVERGENCE_SECTION = "## ResNet-50 conv2_x: measured trials to the stored schedule's speed"
CONVERGENCE_LAYER, CONVERGENCE_TRIALS = "resnet50.conv2_x", 16      # the issue's goal: 98% within 16
CONVERGENCE_GOAL = 0.98
ROUNDS = 7                        # interleaved measurement rounds of the stored and the tuned kernel
MEASURE_BUDGET = 1.75             # s of timed runs per kernel over those rounds
TRIALS, SECONDS = 64, 120.0       # the issue's budget per search
WITHIN = 0.95                     # "reached": a trial at least this fraction as fast as the search's best
PEER_BUDGET = 0.5                 # s of timed calls per peer and per re-measured kernel


@dataclass(frozen=True)
class Layer:
    """A layer of a real network that no loopopt catalog holds."""

    name: str
    op: lo.Conv2d | lo.Matmul
    source: str
    int8: bool = False            # tuned quantized (uint8 activations, int8 weights, uint8 output)


LAYERS = {layer.name: layer for layer in (
    Layer("ssd300.vgg16.conv5_1", lo.Conv2d(512, 512, 3, padding=1, height=19, width=19),
          "VGG-16 backbone of SSD300 (300x300 input)"),
    Layer("inception_v3.mixed_6b.1x7", lo.Conv2d(128, 128, (1, 7), padding=(0, 3), height=17, width=17),
          "Inception-v3 Mixed_6b, 1x7 branch"),
    Layer("inception_v3.mixed_6b.7x1", lo.Conv2d(128, 192, (7, 1), padding=(3, 0), height=17, width=17),
          "Inception-v3 Mixed_6b, 7x1 branch"),
    Layer("deeplabv3_resnet50.layer3.dilated", lo.Conv2d(256, 256, 3, padding=2, dilation=2, height=28,
                                                         width=28),
          "DeepLabv3 ResNet-50 (output stride 8, 224x224 input), layer3 3x3 dilation 2"),
    Layer("yolov3.darknet53.downsample", lo.Conv2d(256, 512, 3, stride=2, padding=1, height=52, width=52),
          "YOLOv3 Darknet-53 (416x416 input), stride-2 3x3 52x52 -> 26x26"),
    Layer("efficientnet_b0.stage5.depthwise5x5", lo.Conv2d(672, 672, 5, padding=2, groups=672, height=14,
                                                           width=14),
          "EfficientNet-B0 stage 5, MBConv6 5x5 depthwise"),
    Layer("bert_base.ffn_in", lo.Matmul(384, 3072, 768), "BERT-base FFN up-projection, 384 tokens"),
    Layer("bert_base.ffn_out", lo.Matmul(384, 768, 3072), "BERT-base FFN down-projection, 384 tokens"),
    Layer("gpt2.decode.mlp_in", lo.Matmul(1, 3072, 768),
          "GPT-2 small MLP up-projection, one-token decode (GEMV)"),
    Layer("gpt2.decode.qkv", lo.Matmul(1, 2304, 768), "GPT-2 small attention QKV, one-token decode (GEMV)"),
    Layer("ssd300.vgg16.conv5_1.int8", lo.Conv2d(512, 512, 3, padding=1, height=19, width=19),
          "VGG-16 backbone of SSD300, int8", int8=True),
)}


@dataclass
class Row:
    """One search and its comparison."""

    layer: str
    threads: int
    isa: str = ""                      # the best trial's
    median: float | None = None        # the tuned kernel re-measured (s)
    rate: float | None = None          # G(FL)OP/s of that median
    percent: float | None = None       # of threads x one-core peak
    peers: dict[str, float | None] | None = None    # name -> median (s), None if unavailable or wrong
    notes: str = ""
    trials: int = 0
    elapsed: float = 0.0
    within_trial: int | None = None
    within_seconds: float | None = None
    spearman: float | None = None
    ranking: float | None = None       # Spearman of the refitted prediction each trial was picked by
    fit: float | None = None           # Spearman of the final fit, each trial left out of it


def _peer_cases(layer: Layer, threads: int):
    """(name, Case or the reason there is none, check) of each peer of ``layer``."""
    op = layer.op
    if not op.windows:                                 # a matrix multiply
        inputs = op.random_inputs()
        a, b = inputs["A"], inputs["B"]
        want = a.astype(np.float64) @ b.astype(np.float64)
        bound = 1e-4 * float(np.max(np.abs(want))) + 1e-5

        def check(y):
            error = float(np.max(np.abs(y - want)))
            return error <= bound, f"max error {error:.3g}"
        builders = [(name, lambda build=build: build(a, b, threads)) for name, build in MATMUL_PEERS]
    else:
        data = LayerData.make(op)
        output = "uint8" if layer.int8 else "fp32"
        check = lambda y: data.check(y, output)
        chosen = INT8_PEERS if layer.int8 else [p for p in FP32_PEERS if p[0] != "PyTorch NCHW"]
        builders = [(name, lambda build=build: build(data, threads)) for name, build in chosen]
    for name, build in builders:
        try:
            yield name, build(), check
        except PeerUnavailable as err:
            yield name, str(err), check


def peer_medians(layer: Layer, threads: int, options: Options) -> tuple[dict[str, float | None], list[str]]:
    """Each peer's median (s) on ``layer`` with ``threads`` threads (None: unavailable or wrong), notes."""
    medians, notes = {}, []
    for name, case, check in _peer_cases(layer, threads):
        if isinstance(case, str):
            medians[name] = None
            notes.append(f"{name}: {case}")
            continue
        ok, why = check(case.output(case.run()))
        medians[name] = time_calls(case.run, options)[0] if ok else None
        if not ok:
            notes.append(f"{name}: wrong output ({why})")
    return medians, notes


def search(layer: Layer, threads: int, args: argparse.Namespace, options: Options) -> Row:
    """Tune ``layer`` for ``threads`` threads, re-measure its best and time the peers."""
    op = layer.op.with_quant(lo.QuantSpec(**INT8_SPEC, output="uint8")) if layer.int8 else layer.op
    row = Row(layer.name, threads)
    try:
        result = lo.tune(op, trials=args.trials, seconds=args.seconds, threads=threads, log=args.log,
                         progress=sys.stderr.isatty(), budget=args.budget, algorithms="direct")
    except Exception as err:  # noqa: BLE001  (one layer's failure is a row, the others still run)
        row.notes = f"search failed: {first_line(err)}"
        return row
    kernel = result.best.compile(result.isa)
    if threads > 1:
        kernel.set_threads(threads)
    timing = lo.measure(kernel, budget=options.budget, progress=False)
    peak = lo.peak_gflops(result.isa) if op.quant is None else int8_peak(result.isa)
    row.isa = result.isa
    row.median = timing.median
    row.rate = op.flops / timing.median / 1e9
    row.percent = None if peak is None else 100 * row.rate / (threads * peak)
    reached = result.first_within(WITHIN)
    row.trials, row.elapsed = len(result.trials), result.elapsed
    row.within_trial, row.within_seconds = reached.number, reached.elapsed
    row.spearman, row.ranking, row.fit = result.model_spearman, result.ranking_spearman, result.fit_spearman
    row.peers, notes = peer_medians(layer, threads, options)
    if not timing.verified:
        notes.insert(0, "loopopt: output NOT verified")
    row.notes = "; ".join(notes)
    return row


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def results_table(rows: list[Row]) -> str:
    peers = list(dict.fromkeys(name for r in rows for name in (r.peers or {})))
    head = ("| layer | threads | ISA | loopopt tuned (ms) | rate | % of peak | "
            + " | ".join(f"{p} (ms)" for p in peers)
            + " | vs best peer | within 95%: trial (s) | search: trials (s) | Spearman | ranking Spearman "
              "| fit Spearman | notes |")
    lines = [head, "|" + "---|" * (13 + len(peers))]
    for r in rows:
        found = [m for m in (r.peers or {}).values() if m is not None]
        speed = min(found) / r.median if found and r.median else None
        lines.append(
            f"| {r.layer} | {r.threads} | {r.isa} | {_fmt(r.median and r.median * 1e3, '.3f')} | "
            f"{_fmt(r.rate, '.1f')} | {_fmt(r.percent, '.1f')} | "
            + " | ".join(_fmt(m and m * 1e3, '.3f') for m in ((r.peers or {}).get(p) for p in peers))
            + f" | {_fmt(speed, '.2f')}x | {_fmt(r.within_trial, 'd')} ({_fmt(r.within_seconds, '.1f')}) | "
            f"{r.trials} ({r.elapsed:.1f}) | {_fmt(r.spearman, '+.3f')} | {_fmt(r.ranking, '+.3f')} | "
            f"{_fmt(r.fit, '+.3f')} | "
            f"{r.notes} |")
    return "\n".join(lines)


def layers_table(names: list[str]) -> str:
    lines = ["| layer | op | GFLOP (GOP) | from |", "|---|---|---|---|"]
    for name in names:
        layer = LAYERS[name]
        lines.append(f"| {name} | `{layer.op!r}` | {layer.op.flops / 1e9:.3f} | {layer.source} |")
    return "\n".join(lines)


def smoke_label(args: argparse.Namespace, others: float | None) -> str:
    """The warning a partial or short run carries (empty for the benchmark's full budget)."""
    partial = len(args.layers) < len(LAYERS) or args.trials < TRIALS or (args.seconds or SECONDS) < SECONDS
    if not partial:
        return ""
    shared = ("" if others is None or others < 0.1 else
              " The machine was shared: other processes used part of its CPU meanwhile (below).")
    return (f"**Smoke run, not the benchmark's result**: {len(args.layers)} of {len(LAYERS)} layers, at most "
            f"{args.trials} trials and {_fmt(args.seconds, 'g')} s per search (the benchmark: all layers, "
            f"{TRIALS} trials, {SECONDS:g} s). It shows that the script runs end to end; the figures say "
            f"nothing about the search's quality.{shared}")


def report(command: str, args: argparse.Namespace, rows: list[Row], others: float | None) -> str:
    isa = lo.available_isas()[0]
    parts = [
        f"Produced on {datetime.date.today().isoformat()} ({time.strftime('%H:%M %Z')}) by\n\n"
        f"```\n{command}\n```\n",
        smoke_label(args, others),
        f"{machine_text(isa, others)} Peers: {versions_text()}. Batch 1, all in one process.",
        (f"Each search: `lo.tune(op, trials={args.trials}, seconds={_fmt(args.seconds, 'g')}, threads=T, "
         f"budget={args.budget:g})` (model-guided; each trial compiled, verified and timed in a worker "
         f"process). Its best kernel is then measured again by `lo.measure` (median of single runs, "
         f"{PEER_BUDGET:g} s) next to the peers (PyTorch `conv2d` on channels-last tensors or "
         f"`torch.matmul`; onnxruntime `Conv`, `QLinearConv` or `MatMul`, whose intra-op threads do not "
         f"spin on several threads; the median of single calls "
         f"for {PEER_BUDGET:g} s after warm-up; every output checked against the float64 reference, "
         f"int8 within 2 LSB of the exact uint8 output). % of peak = rate / (threads x one-core peak "
         f"of the best trial's ISA: fp32 FMA, int8 VNNI or AMX tiles). \"vs best peer\" = the fastest "
         f"verified peer's median / loopopt's: above 1 is faster. \"within 95%\": the first trial at "
         f"least {WITHIN:.0%} as fast as the search's best (by minimum time) and the seconds from the "
         f"search's start to that trial's end (ranking included). Spearman: the kernel model's time vs "
         f"the measured minimum over the search's verified trials (AMX trials: the tile model's); "
         f"ranking Spearman: the same for the prediction each trial was picked by (`fitted_seconds`: "
         f"the model's time with the heuristic's memory terms and the thread imbalance, refitted to "
         f"the trials measured before it); fit Spearman: the same for the search's final fit out of "
         f"sample (`held_out_seconds`: each trial predicted by the refit to all the other trials). "
         f"int8: uint8 activations per tensor, int8 symmetric weights per output channel, uint8 "
         f"output."),
        "### Layers\n\n" + layers_table(args.layers),
        "### Results\n\n" + results_table(rows),
    ]
    return "\n\n".join(p for p in parts if p)


def convergence(args: argparse.Namespace, cpu_start: float) -> str:
    """The convergence section: a fresh ``CONVERGENCE_TRIALS``-trial search of ResNet-50 conv2_x (no
    log) against the stored schedule, measured interleaved in this process (``cpu_start``: the
    machine's CPU time when the run began, for the other processes' share)."""
    op = lo.get_layer(CONVERGENCE_LAYER)
    stored = lo.load_schedule(CONVERGENCE_LAYER, op)
    result = lo.tune(op, trials=CONVERGENCE_TRIALS, threads=1, isa="avx512", progress=sys.stderr.isatty(),
                     budget=args.budget, algorithms="direct")
    kernels = [stored.compile("avx512"), result.best.compile("avx512")]
    for kernel in kernels:
        kernel.set_threads(1)                # the stored schedule splits its rows over threads
    timings = lo.measure_all(kernels, budget=MEASURE_BUDGET, rounds=ROUNDS, progress=False)
    if not all(t.verified for t in timings):
        raise AssertionError(f"a kernel of {CONVERGENCE_LAYER} does not match the reference")
    (stored_median, stored_min), (tuned_median, tuned_min) = ((t.median, t.min) for t in timings)
    reached = next((t for t in result.trials if t.seconds is not None
                    and stored_min / t.seconds >= CONVERGENCE_GOAL), None)
    peak = lo.peak_gflops("avx512")
    rows = [("stored schedule", stored_median, stored_min, "-"),
            (f"lo.tune, {len(result.trials)} trials ({result.elapsed:.1f} s)", tuned_median, tuned_min,
             f"{stored_min / tuned_min:.3f} (median {stored_median / tuned_median:.3f})")]
    table = ["| kernel | median ms | min ms | GFLOP/s (median) | % of fp32 peak | speed vs stored (min) |",
             "|---|---|---|---|---|---|"]
    table += [f"| {name} | {median * 1e3:.3f} | {least * 1e3:.3f} | {op.flops / median / 1e9:.1f} | "
              f"{100 * op.flops / median / 1e9 / peak:.1f} | {speed} |"
              for name, median, least, speed in rows]
    others = others_share(cpu_start)
    found = ("no trial of the search" if reached is None else
             f"trial {reached.number} ({reached.elapsed:.1f} s after the search started)")
    return "\n\n".join([
        f"Produced on {datetime.date.today().isoformat()} ({time.strftime('%H:%M %Z')}) by\n\n"
        f"```\n{command_line(__file__, args.argv)}\n```",
        f"{machine_text('avx512', others)} One thread, AVX-512.",
        f"A search of `{op!r}` from scratch (`lo.tune(op, trials={CONVERGENCE_TRIALS}, threads=1, "
        f"isa=\"avx512\", budget={args.budget:g}, algorithms=\"direct\")`, no log), then its best kernel and "
        f"the stored schedule `{CONVERGENCE_LAYER}` ({lo.stored_schedule(CONVERGENCE_LAYER).summary()}) "
        f"timed together by `lo.measure_all` (runs interleaved over {ROUNDS} rounds, {MEASURE_BUDGET:g} s "
        f"per kernel) in this process: the median and the minimum of each. The issue's goal: >= "
        f"{CONVERGENCE_GOAL:.0%} of the stored schedule's speed within {CONVERGENCE_TRIALS} measured "
        f"trials. The first trial within {CONVERGENCE_GOAL:.0%} of the stored schedule's minimum (its "
        f"worker's minimum against this process's): {found}.",
        "\n".join(table),
        "For scale, on their own machines (not comparable in absolute time): Halide's autoscheduler "
        "(Adams et al. 2019) reports 99% of peak within 16 sampled trials on this layer, TVM MetaSchedule "
        "2.04 ms after 256 trials (238 s)."])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default=",".join(LAYERS),
                        help="comma-separated layer names (default: all)")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--trials", type=int, default=TRIALS, help=f"trials per search (default {TRIALS})")
    parser.add_argument("--seconds", type=float, default=SECONDS,
                        help=f"wall-clock limit per search (default {SECONDS:g})")
    parser.add_argument("--budget", type=float, default=0.2,
                        help="seconds of timed runs per trial (default 0.2)")
    parser.add_argument("--log", help="SQLite tuning log (a rerun takes logged trials from it)")
    parser.add_argument("--convergence", action="store_true",
                        help=f"instead of the layers: a {CONVERGENCE_TRIALS}-trial search of "
                             f"{CONVERGENCE_LAYER} against its stored schedule")
    parser.add_argument("--write", action="store_true", help="record the results in docs/benchmarks.md")
    args = parser.parse_args(argv)
    args.argv = argv
    args.layers = [name for name in args.layers.split(",") if name]
    unknown = [name for name in args.layers if name not in LAYERS]
    if unknown or not args.layers:
        parser.error(f"unknown layer(s) {', '.join(unknown) or '(none given)'}; the layers: "
                     f"{', '.join(LAYERS)}")
    try:
        args.threads = tuple(int(n) for n in args.threads.split(",") if n)
    except ValueError:
        parser.error(f"--threads takes comma-separated integers, got {args.threads!r}")
    if not args.threads or min(args.threads) < 1:
        parser.error(f"--threads needs thread counts >= 1, got {args.threads!r}")
    for name in ("trials", "seconds", "budget"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name} must be > 0, got {getattr(args, name)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cpu_start = cpu_seconds()
    if args.convergence:
        text = convergence(args, cpu_start)
        print(f"{CONVERGENCE_SECTION}\n\n{text}")
        if args.write:
            write_section(text, CONVERGENCE_SECTION)
        return
    command = command_line(__file__, argv)
    options = Options(args.threads, None, PEER_BUDGET)
    rows = []
    for name in args.layers:
        for threads in args.threads:
            start = time.perf_counter()
            row = search(LAYERS[name], threads, args, options)
            rows.append(row)
            peers = ", ".join(f"{p} {_fmt(m and m * 1e3, '.3f')} ms" for p, m in (row.peers or {}).items())
            print(f"{name} {threads}T: {time.perf_counter() - start:.1f} s; loopopt "
                  f"{_fmt(row.median and row.median * 1e3, '.3f')} ms; {peers}; {row.notes}",
                  file=sys.stderr, flush=True)
    text = report(command, args, rows, others_share(cpu_start))
    print(f"{SECTION}\n\n{text}")
    if args.write:
        write_section(text, SECTION)


if __name__ == "__main__":
    main()
