"""Whole models through loopopt.onnx vs onnxruntime: ResNet-18-, ResNet-50- and MobileNetV2-shaped networks
(written here in PyTorch, random weights, exported with torch.onnx.export; no downloads), fp32 and int8
(onnxruntime.quantization.quantize_static: QOperator format, QLinearConv / QLinearMatMul; and QDQ
format, DequantizeLinear -> Conv/MatMul -> QuantizeLinear groups), 1 and 2 threads. Per model: the
summed time of its compute nodes on loopopt (the backend's default schedule, and tuned with
--tune-trials) and on onnxruntime (each node or fused QDQ group alone), from loopopt.onnx.report; the
whole model end to end (``rep.run`` against ``session.run``, each runtime in its own worker process
with the same thread count, rounds interleaved by this one: ``runtimes.py``); the
whole model's output through loopopt.onnx.backend (strict) against onnxruntime's; and for the int8
models each quantized node's output against onnxruntime's on the same inputs, in steps of the output,
with which of the two is exact (loopopt.onnx.exact) where they differ. onnxruntime runs with
``--ort-int8``'s session options (``loopopt.onnx.peer``): ``exact`` (the default: its exact int8 kernels,
like with like against loopopt's; on an x86 CPU without VNNI its default ones saturate) or ``default``
(its own choice, faster there); the heading says which.

    python benchmarks/bench_onnx.py [--quick] [--resolution 224] [--threads 1,2] [--precisions fp32,int8,qdq]
                                    [--models resnet18,mobilenetv2,resnet50] [--tune-trials N]
                                    [--tune-models a,b] [--log FILE] [--whole-only [--tuned-log FILE
                                    [--prepare-trials N]]] [--ort-int8 exact|default]
                                    [--omp-wait-policy active|passive|N] [--realtime] [--write]

``--write`` replaces the section "Whole models vs onnxruntime" of docs/benchmarks.md; with
``--whole-only`` (the whole-model timing and output check only, no per-node reports) the section
"Whole models end to end vs onnxruntime". ``--tuned-log`` adds a third contender to the whole-model
rounds: the model prepared with that tuning log (``prepare(..., log=FILE, tune=N)`` with
``--prepare-trials N``: each distinct op tuned into the log first; the log resumes, so a second run
measures nothing again).
"""
from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from bench_layers import machine_text, versions_text  # noqa: E402
from bench_reuse import write_section  # noqa: E402
from runtimes import RETRIES, SETTLE, WARM_RUNS, Contender, Worker, interleave  # noqa: E402

import loopopt as lo  # noqa: E402
from loopopt.machine import cpu_seconds, others_share  # noqa: E402
from loopopt.onnx.peer import EXACT, INT8_MODES  # noqa: E402
from loopopt.onnx.report import RAN, TUNED, model_report, random_inputs  # noqa: E402

SECTION = "## Whole models vs onnxruntime"
WHOLE_SECTION = "## Whole models end to end vs onnxruntime"
OPSET = 19           # onnx.reference runs (De)QuantizeLinear from opset 19


def resnet18(torch):
    """ResNet-18's layer shapes (BasicBlocks 64-128-256-512, 1000 classes), batch norm folded on export."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, c: int, k: int, stride: int):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(c, k, 3, stride, 1, bias=False), nn.BatchNorm2d(k), nn.ReLU(),
                                      nn.Conv2d(k, k, 3, 1, 1, bias=False), nn.BatchNorm2d(k))
            self.down = (nn.Sequential(nn.Conv2d(c, k, 1, stride, bias=False), nn.BatchNorm2d(k))
                         if stride > 1 or c != k else nn.Identity())

        def forward(self, x):
            return torch.relu(self.body(x) + self.down(x))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    c = 64
    for k, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(c, k, stride), Block(k, k, 1)]
        c = k
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers)


def mobilenetv2(torch):
    """MobileNetV2's layer shapes (width 1.0: inverted residuals with depthwise 3x3 convolutions)."""
    nn = torch.nn

    def conv(c: int, k: int, size: int, stride: int = 1, groups: int = 1, relu: bool = True):
        parts = [nn.Conv2d(c, k, size, stride, size // 2, groups=groups, bias=False), nn.BatchNorm2d(k)]
        return parts + ([nn.ReLU6()] if relu else [])

    class Inverted(nn.Module):
        def __init__(self, c: int, k: int, stride: int, expand: int):
            super().__init__()
            hidden = c * expand
            parts = conv(c, hidden, 1) if expand != 1 else []
            parts += conv(hidden, hidden, 3, stride, hidden) + conv(hidden, k, 1, relu=False)
            self.body = nn.Sequential(*parts)
            self.residual = stride == 1 and c == k

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    layers, c = conv(3, 32, 3, 2), 32
    for expand, k, repeats, stride in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(repeats):
            layers.append(Inverted(c, k, stride if i == 0 else 1, expand))
            c = k
    layers += conv(c, 1280, 1) + [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, 1000)]
    return nn.Sequential(*layers)


def resnet50(torch):
    """ResNet-50's layer shapes (Bottlenecks 1x1-3x3-1x1, expansion 4, 3-4-6-3 blocks of widths
    64-128-256-512, 1000 classes), batch norm folded on export."""
    nn = torch.nn

    def conv(c: int, k: int, size: int, stride: int = 1) -> list:
        return [nn.Conv2d(c, k, size, stride, size // 2, bias=False), nn.BatchNorm2d(k)]

    class Bottleneck(nn.Module):
        def __init__(self, c: int, width: int, stride: int):
            super().__init__()
            k = 4 * width
            self.body = nn.Sequential(*conv(c, width, 1), nn.ReLU(), *conv(width, width, 3, stride),
                                      nn.ReLU(), *conv(width, k, 1))
            self.down = nn.Sequential(*conv(c, k, 1, stride)) if stride > 1 or c != k else nn.Identity()

        def forward(self, x):
            return torch.relu(self.body(x) + self.down(x))

    layers = [*conv(3, 64, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    c = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(c, width, stride if i == 0 else 1))
            c = 4 * width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 1000)]
    return nn.Sequential(*layers)


MODELS = {"resnet18": resnet18, "mobilenetv2": mobilenetv2, "resnet50": resnet50}


def export(name: str, resolution: int, folder: Path) -> dict[str, Path]:
    """The fp32 ONNX file of model ``name`` and its int8 quantizations: QOperator (``int8``) and QDQ
    (``qdq``)."""
    import torch
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process
    torch.manual_seed(0)
    net = MODELS[name](torch).eval()
    x = torch.randn(1, 3, resolution, resolution)
    raw, fp32 = (folder / f"{name}.{kind}.onnx" for kind in ("raw", "fp32"))
    torch.onnx.export(net, (x,), str(raw), opset_version=OPSET, dynamo=False, input_names=["x"])
    quant_pre_process(str(raw), str(fp32))           # folds the Identity nodes the exporter leaves

    class Calibration(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(1)
            self.batches = iter([{"x": rng.standard_normal((1, 3, resolution, resolution)).astype(np.float32)}
                                 for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    files = {"fp32": fp32}
    for precision, quant_format in (("int8", QuantFormat.QOperator), ("qdq", QuantFormat.QDQ)):
        files[precision] = folder / f"{name}.{precision}.onnx"
        quantize_static(str(fp32), str(files[precision]), Calibration(), quant_format=quant_format,
                        op_types_to_quantize=["Conv", "MatMul"], per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return files


def output_check(ours: list[np.ndarray], theirs: list[np.ndarray]) -> str:
    """loopopt's first output (strict backend) against onnxruntime's, from the same inputs."""
    diff = float(np.abs(ours[0] - theirs[0]).max())
    return f"max abs(loopopt - onnxruntime) {diff:.2e} (outputs up to {float(np.abs(theirs[0]).max()):.2f})"


class Whole(NamedTuple):
    """Seconds of the whole model end to end, each runtime in its own process: loopopt's ``rep.run`` and
    onnxruntime's ``session.run`` (medians and minimums over the rounds), loopopt's with the tuning log
    (None without one), loopopt's prepare, the nodes the rep runs on onnx.reference, its output
    against onnxruntime's (``output_check``), and the round timings discarded and kept though other
    processes' real-time threads ran in them (``runtimes.Rounds``)."""

    ours: float
    theirs: float
    ours_min: float
    theirs_min: float
    prepare: float
    fallbacks: list[str]
    check: str
    disturbed: int | None
    kept_disturbed: int | None
    tuned: float | None = None
    tuned_min: float | None = None
    apart: float | None = None
    apart_min: float | None = None


def whole_model(path: Path, threads: int, rounds: int, tuned_log: str | None = None,
                prepare_trials: int = 0, wait_policy: str | None = None, realtime: bool = False,
                ort_int8: str = EXACT, apart: bool = False) -> Whole:
    """The whole model, ``rep.run`` (prepared once, strict, default schedules; and with ``tuned_log``
    prepared with that log, ``prepare_trials`` trials per op tuned into it first) and onnxruntime's
    ``session.run``, each in its own worker process (``runtimes.Worker``) with ``threads`` threads, on
    the same inputs, interleaved over ``rounds`` rounds; ``wait_policy``: how loopopt's OpenMP threads
    wait (``wait_env``; None: loopopt's team's, ``loopopt.team``); ``realtime``: each worker timed
    under SCHED_FIFO once prepared (``Worker.realtime``); ``ort_int8``: onnxruntime's int8 mode
    (``loopopt.onnx.peer``); ``apart``: also loopopt with each step's buffer its own (``Plan.share``)."""
    import onnx
    inputs = random_inputs(onnx.load(str(path), load_external_data=False), seed=3)
    env = wait_env(wait_policy)
    contenders = [Contender("loopopt", "loopopt", path, threads, env=env),
                  Contender("onnxruntime", "onnxruntime", path, threads, ort_int8=ort_int8)]
    if tuned_log is not None:
        contenders.append(Contender("loopopt tuned", "loopopt", path, threads, tuned_log, prepare_trials,
                                    env))
    if apart:
        contenders.append(Contender("loopopt apart", "loopopt", path, threads, env=env, share=False))
    with ExitStack() as stack:
        workers = [stack.enter_context(Worker(contender, inputs)) for contender in contenders]
        for worker in workers if realtime else ():
            worker.realtime()
        timed = interleave(workers, rounds)
    ours, theirs, *more = timed.times
    more_ms = [(float(np.median(times)), min(times)) for times in more]
    tuned_ms = more_ms.pop(0) if tuned_log is not None else (None, None)
    apart_ms = more_ms.pop(0) if apart else (None, None)
    return Whole(float(np.median(ours)), float(np.median(theirs)), min(ours), min(theirs),
                 workers[0].prepare_s, workers[0].fallbacks, output_check(*timed.outputs[:2]),
                 timed.disturbed, timed.kept_disturbed, *tuned_ms, *apart_ms)


def integer_text(report) -> str:
    """The quantized nodes' outputs against onnxruntime's (same inputs), with which is exact where they
    differ ("-" for a float model)."""
    total = report.integer_total
    return "-" if total is None else f"{sum(n.integer is not None for n in report.nodes)} nodes: {total}"


def row(name: str, precision: str, threads: int, report, whole: Whole) -> str:
    ours, theirs = report.total_ms("loopopt"), report.total_ms("onnxruntime")
    ran = sum(n.row(RAN).median_ms for n in report.timed)
    tuned = [n.row(TUNED) or n.row(RAN) for n in report.timed]   # a node lo.tune could not: its ran time
    tuned_ms = sum(t.median_ms for t in tuned) if any(n.row(TUNED) for n in report.timed) else None
    mflop = sum(n.mflop for n in report.timed)
    cells = [name, precision, str(threads), f"{whole.ours * 1e3:.1f}", f"{whole.theirs * 1e3:.1f}",
             f"{whole.theirs / whole.ours:.2f}", str(len(report.timed)), f"{mflop:.0f}", f"{ran:.2f}",
             "-" if tuned_ms is None else f"{tuned_ms:.2f}", f"{theirs:.2f}" if theirs else "-",
             f"{theirs / ours:.2f}" if theirs else "-", whole.check, integer_text(report)]
    return "| " + " | ".join(cells) + " |"


def whole_row(name: str, precision: str, threads: int, whole: Whole) -> str:
    cells = [name, precision, str(threads), f"{whole.prepare:.1f}", f"{whole.ours * 1e3:.1f}",
             f"{whole.theirs * 1e3:.1f}", f"{whole.theirs / whole.ours:.2f}", f"{whole.ours_min * 1e3:.1f}",
             f"{whole.theirs_min * 1e3:.1f}", f"{whole.theirs_min / whole.ours_min:.2f}"]
    if whole.tuned is not None:
        cells += [f"{whole.tuned * 1e3:.1f}", f"{whole.theirs / whole.tuned:.2f}",
                  f"{whole.theirs_min / whole.tuned_min:.2f}"]
    if whole.apart is not None:
        cells += [f"{whole.apart * 1e3:.1f}", f"{whole.apart / whole.ours:.2f}",
                  f"{whole.apart_min / whole.ours_min:.2f}"]
    disturbed = "-" if whole.disturbed is None else f"{whole.disturbed} / {whole.kept_disturbed}"
    cells += [disturbed, ", ".join(whole.fallbacks) or "none", whole.check]
    return "| " + " | ".join(cells) + " |"


def wait_env(wait_policy: str | None) -> dict[str, str]:
    """The environment of loopopt's worker for ``--omp-wait-policy``: ``active`` or ``passive``
    (``OMP_WAIT_POLICY``), a number of spins (``GOMP_SPINCOUNT``), or None (loopopt's own team's:
    ``loopopt.team``)."""
    if wait_policy is None:
        return {}
    if wait_policy in ("active", "passive"):
        return {"OMP_WAIT_POLICY": wait_policy}
    if wait_policy.isdigit():
        return {"GOMP_SPINCOUNT": wait_policy}
    raise ValueError(f"OpenMP wait policy {wait_policy!r} is not known; active, passive or a number of spins")


def process_text(rounds: int, wait_policy: str | None, realtime: bool = False) -> str:
    """How the whole-model rounds ran: each runtime in its own process, interleaved, same threads."""
    policy = ("loopopt's own team of OpenMP threads (spinning while a plan runs, 300 spins then asleep "
              "outside one: `loopopt.team`)" if wait_policy is None
              else " and ".join(f"`{name}={value}`" for name, value in wait_env(wait_policy).items())
              + " in loopopt's process")
    return (f"Each runtime runs in its own worker process (`benchmarks/runtimes.py`: started once, the model "
            f"prepared once in each, as a user runs one runtime), with the same thread count (the `threads` "
            f"column: `prepare(threads=...)`, `intra_op_num_threads`) and {policy}; the parent interleaves "
            f"{rounds} rounds (round i: loopopt's worker, then onnxruntime's, {SETTLE * 1e3:.0f} ms apart), "
            "each worker timing its own `rep.run` / `session.run` on the same inputs, and compares the "
            f"outputs of the warm-up round (then {WARM_RUNS} untimed rounds: loopopt's plan repeats its "
            "calls from its fourth run on: it shares its buffers after the first)."
            + (" Once prepared, each worker's threads run under SCHED_FIFO (`--realtime`: the machine's "
               "other processes cannot preempt the timed runs; they keep 5% of the CPU)."
               if realtime else "")
            + " A round during which another process's real-time threads ran (another benchmark under "
              "SCHED_FIFO: at our priority or above, it holds a core that a two-thread run needs) is timed "
              f"again, up to {RETRIES} times (`runtimes.interleave`).")


def whole_text(lines: list[str], resolution: int, rounds: int, tuned_log: str | None = None,
               prepare_trials: int = 0, wait_policy: str | None = None, realtime: bool = False,
               apart: bool = False) -> str:
    """The description and table of a ``--whole-only`` run."""
    tuned = "" if tuned_log is None else (
        " The `tuned` columns time a third contender in the same rounds: the model prepared with a tuning "
        f"log (`prepare(model, strict=True, threads=..., log=..., tune={prepare_trials})`: "
        + (f"each distinct compute op tuned with {prepare_trials} trials into the log first, trials "
           "already logged taken from it" if prepare_trials else "the log's best schedules, no new trials")
        + "), against the same onnxruntime rounds.")
    tuned += ("" if not apart else " The `apart` columns time another loopopt contender in the same rounds: "
              "the same plan with each step's buffer its own (`rep.plan.share = False`: no buffers shared by "
              "liveness); apart/shared > 1: sharing is faster.")
    columns = ["model", "precision", "threads (both)", "loopopt prepare s",
               "loopopt rep.run ms (own process)", "onnxruntime session.run ms (own process)", "ORT/loopopt",
               "loopopt min ms", "onnxruntime min ms", "ORT/loopopt (min)"]
    if tuned_log is not None:
        columns += ["tuned rep.run ms", "ORT/tuned", "ORT/tuned (min)"]
    if apart:
        columns += ["apart rep.run ms", "apart/shared", "apart/shared (min)"]
    columns += ["rounds timed again / kept disturbed", "nodes on onnx.reference", "output"]
    return (f"Networks written in this script with random weights, batch 1, {resolution}x{resolution} input, "
            f"exported with `torch.onnx.export` (opset {OPSET}); int8 and qdq: `quantize_static` in "
            "QOperator and in QDQ format (Conv and MatMul quantized). Each row times the whole model end to "
            "end: `rep.run` of `loopopt.onnx.backend.prepare(model, strict=True, threads=...)` (default "
            "schedules, weights packed at prepare, the execution plan: kernels, numpy elementwise and "
            "pooling steps on the kernels' storage layouts, 8-bit lookups between int8 kernels) against "
            "onnxruntime's `session.run` (its default graph optimizations). "
            f"{process_text(rounds, wait_policy, realtime)} `rounds timed again / kept disturbed`: the "
            "round timings so discarded, and the rounds kept though disturbed after the last retry. "
            "The median and the minimum (the run least "
            "disturbed by "
            "other processes) of each; `loopopt prepare s`: the seconds of loopopt's `prepare` in its worker "
            "(the kernel cache as the run found it). ORT/loopopt > 1: loopopt "
            f"is faster.{tuned}\n\n"
            "| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|\n" + "\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet18,mobilenetv2")
    parser.add_argument("--resolution", type=int, default=224, help="input height and width (default 224)")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--precisions", default="fp32,int8,qdq",
                        help="fp32, int8 (QOperator) and qdq (QDQ format) (default all three)")
    parser.add_argument("--tune-trials", type=int, default=0, help="lo.tune trials per distinct node shape")
    parser.add_argument("--tune-models", help="the models to tune (default: all of --models)")
    parser.add_argument("--isa", default="auto", help="ISA of loopopt's kernels and tuning (default auto)")
    parser.add_argument("--log", help="tuning log (its best schedules run the nodes; tuning appends to it)")
    parser.add_argument("--budget", type=float, default=0.3,
                        help="seconds of timed runs per node and schedule")
    parser.add_argument("--rounds", type=int, default=31,
                        help="alternating rounds of the whole-model timing (default 31)")
    parser.add_argument("--quick", action="store_true", help="resolution 64, one thread, budget 0.05 s")
    parser.add_argument("--whole-only", action="store_true",
                        help="only the whole-model timing and output check (no per-node reports)")
    parser.add_argument("--tuned-log",
                        help="--whole-only: also time each model prepared with this tuning log")
    parser.add_argument("--apart", action="store_true",
                        help="--whole-only: also time loopopt with each step's buffer its own (no sharing)")
    parser.add_argument("--prepare-trials", type=int, default=0,
                        help="with --tuned-log: prepare(..., tune=N): tune each distinct op with N trials "
                             "into the log first (default 0: the log as it is)")
    parser.add_argument("--omp-wait-policy",
                        help="how loopopt's OpenMP threads wait: active or passive (OMP_WAIT_POLICY), or a "
                             "number of spins (GOMP_SPINCOUNT) (default: loopopt's team: spinning in a plan "
                             "run, 300 spins outside one)")
    parser.add_argument("--realtime", action="store_true",
                        help="time each prepared worker under SCHED_FIFO (root on Linux): a shared machine's "
                             "other work cannot preempt the timed runs")
    parser.add_argument("--ort-int8", choices=tuple(INT8_MODES), default=EXACT,
                        help="onnxruntime's int8 kernels: exact (default: like with like; "
                             "session.x64quantprecision=1 on x86 without VNNI) or default (its own; on x86 "
                             "without VNNI they saturate)")
    parser.add_argument("--write", action="store_true", help="record the table in docs/benchmarks.md")
    args = parser.parse_args(argv)
    try:
        wait_env(args.omp_wait_policy)
    except ValueError as error:
        parser.error(str(error))
    if args.quick:
        args.resolution, args.threads, args.budget = 64, "1", 0.05
    command = "python benchmarks/bench_onnx.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = []
    start = cpu_seconds()
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            files = export(name, args.resolution, Path(folder))
            for precision in args.precisions.split(","):
                for threads in (int(t) for t in args.threads.split(",")):
                    whole = whole_model(files[precision], threads, args.rounds, args.tuned_log,
                                        args.prepare_trials, args.omp_wait_policy, args.realtime,
                                        args.ort_int8, args.apart)
                    if args.whole_only:
                        lines.append(whole_row(name, precision, threads, whole))
                        print(lines[-1], flush=True)
                        continue
                    trials = args.tune_trials if name in (args.tune_models or args.models).split(",") else 0
                    report = model_report(files[precision], threads=threads, tune_trials=trials,
                                          log=args.log, reuse=False, budget=args.budget, isa=args.isa,
                                          ort_int8=args.ort_int8)
                    lines.append(row(name, precision, threads, report, whole))
                    print(lines[-1], flush=True)
                    print(report.table(), file=sys.stderr, flush=True)
    isa = lo.available_isas()[0]
    heading = "\n\n".join([
        f"Produced on {datetime.date.today().isoformat()} ({time.strftime('%H:%M %Z')}) by\n\n"
        f"```\n{command}\n```",
        f"{machine_text(isa, others_share(start))} Peers: {versions_text(args.ort_int8)}."])
    if args.whole_only:
        text = heading + "\n\n" + whole_text(lines, args.resolution, args.rounds, args.tuned_log,
                                               args.prepare_trials, args.omp_wait_policy, args.realtime,
                                               args.apart)
        print(text)
        if args.write:
            write_section(text, WHOLE_SECTION)
        return
    text = "\n\n".join([
        heading,
        (f"Networks written in this script with random weights, batch 1, {args.resolution}x{args.resolution} "
         f"input, exported with `torch.onnx.export` (opset {OPSET}); int8 and qdq: `quantize_static` in "
         "QOperator and in QDQ format (Conv and MatMul quantized: uint8 activations per tensor, int8 weights "
         "per channel; the classifier Gemm stays fp32); the backend fuses each QDQ group "
         "(DequantizeLinear -> Conv -> QuantizeLinear) into one quantized kernel, as onnxruntime fuses it "
         "into a QLinearConv. Times are the sum over the compute nodes (Conv, QLinearConv, a fused QDQ "
         "group, Gemm) "
         "of each node's median (the `nodes'` columns; the `whole model` columns time the whole call, "
         "end to end: loopopt's `rep.run` on the prepared rep, weights packed once, against onnxruntime's "
         f"`session.run`, medians; {process_text(args.rounds, args.omp_wait_policy, args.realtime)}): "
         "loopopt through "
         "`lo.compare` (kernel runs on prepared buffers) with the "
         "backend's schedule (`ran`: the tuning log's best if it has one, else the default: the candidate "
         "`lo.tune` ranks first, chosen without compiling or measuring) and, with tuning, the `lo.tune` "
         "result (a node it finds no candidate for counts with its `ran` time); "
         "onnxruntime runs each node alone as a one-node model (`session.run`, its per-call overhead "
         "included). ORT/loopopt > 1: "
         "loopopt's nodes are faster in total. The output check runs the whole model through "
         "`loopopt.onnx.backend` in strict mode (non-compute nodes on onnx.reference) against onnxruntime. "
         "The int8 check runs each quantized node (or QDQ group) on onnxruntime alone with loopopt's inputs "
         "for it and compares the outputs in steps of the output (LSB); where they differ it counts which "
         "one equals the exact integer reference (`loopopt.onnx.exact`: exact int32 accumulation, the "
         "real product with the stored scales rounded half to even, saturated)."),
        "| model | precision | threads (both) | whole model: loopopt rep.run ms (own process) | "
        "onnxruntime session.run ms (own process) | "
        "ORT/loopopt | nodes | MFLOP | nodes' loopopt ran ms | nodes' loopopt tuned ms | "
        "nodes' onnxruntime ms | nodes' ORT/loopopt | output | int8 nodes vs onnxruntime |\n"
        + "|---" * 14 + "|\n"
        + "\n".join(lines),
    ])
    print(text)
    if args.write:
        write_section(text, SECTION)


if __name__ == "__main__":
    main()
