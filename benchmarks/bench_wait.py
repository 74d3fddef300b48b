"""loopopt alone on several threads: libgomp's default OpenMP wait policy (its threads spin at a barrier)
against loopopt's own (``loopopt.openmp``: a short spin), passive and a longer spin, and one thread for
scale, each a worker process of its own (``runtimes.Worker``) running the same whole model
(``bench_onnx.export``: random weights, batch 1), interleaved rounds. ``--peer``: onnxruntime in the same
rounds, on one thread and on ``--threads`` with its intra-op threads spinning (its default) and not;
``--realtime``: every worker timed under SCHED_FIFO once prepared (``Worker.realtime``).

    python benchmarks/bench_wait.py [--models resnet18] [--precisions fp32] [--threads 2]
                                    [--resolution 224] [--rounds 15] [--peer] [--realtime] [--write]

``--write`` replaces the section "OpenMP wait policy of multi-threaded plans" of docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_layers import machine_text  # noqa: E402
from bench_onnx import export  # noqa: E402
from bench_reuse import command_line, publish  # noqa: E402
from runtimes import SETTLE, Contender, Worker, interleave  # noqa: E402

import loopopt as lo  # noqa: E402
from loopopt.machine import cpu_seconds, others_share  # noqa: E402
from loopopt.onnx.report import random_inputs  # noqa: E402

SECTION = "## OpenMP wait policy of multi-threaded plans"
POLICIES = {   # the environment of a worker: how its OpenMP threads wait at a barrier
    "libgomp's default": {"GOMP_SPINCOUNT": "300000"},    # what libgomp does unset: spin 300,000 times
    "loopopt's default (spin 300)": {},                  # loopopt.openmp: GOMP_SPINCOUNT=300
    "passive": {"OMP_WAIT_POLICY": "passive"},           # asleep at once
    "spin 3k": {"GOMP_SPINCOUNT": "3000"},
}


def contenders(path: Path, threads: int, peer: bool = False) -> list[Contender]:
    """loopopt on one thread, and on ``threads`` threads under each of ``POLICIES``; with ``peer``,
    onnxruntime on one thread and on ``threads``, its threads spinning and not."""
    found = [Contender("1 thread", "loopopt", path, 1)] + [
        Contender(f"{threads} threads, {policy}", "loopopt", path, threads, env=env)
        for policy, env in POLICIES.items()]
    if peer:
        found += [Contender("onnxruntime, 1 thread", "onnxruntime", path, 1),
                  Contender(f"onnxruntime, {threads} threads, spinning", "onnxruntime", path, threads),
                  Contender(f"onnxruntime, {threads} threads, not spinning", "onnxruntime", path, threads,
                            ort_spinning=False)]
    return found


def rows(name: str, precision: str, path: Path, threads: int, rounds: int, peer: bool = False,
         realtime: bool = False) -> list[str]:
    """One table row per contender: median and minimum ms, libgomp's default's median over its own, and
    whether its output is the first row's ("-" for onnxruntime's); the rounds timed again (``interleave``)."""
    import onnx
    inputs = random_inputs(onnx.load(str(path), load_external_data=False), seed=3)
    with ExitStack() as stack:
        workers = [stack.enter_context(Worker(c, inputs)) for c in contenders(path, threads, peer)]
        for worker in workers if realtime else ():
            worker.realtime()
        times, outputs, disturbed, _ = interleave(workers, rounds)
    medians = [float(np.median(t)) for t in times]
    default = medians[1]
    lines = []
    for worker, seconds, median, output in zip(workers, times, medians, outputs):
        same = ("-" if worker.contender.runtime != "loopopt" else
                "yes" if all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(output, outputs[0]))
                else "NO")
        lines.append(f"| {name} | {precision} | {worker.contender.name} | {median * 1e3:.1f} | "
                     f"{min(seconds) * 1e3:.1f} | {default / median:.2f} | {same} | {disturbed} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet18")
    parser.add_argument("--precisions", default="fp32", help="fp32, int8 (QOperator), qdq")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--peer", action="store_true", help="onnxruntime in the same rounds")
    parser.add_argument("--realtime", action="store_true", help="SCHED_FIFO once prepared (root)")
    parser.add_argument("--write", action="store_true", help="record the table in docs/benchmarks.md")
    args = parser.parse_args(argv)
    start = cpu_seconds()
    lines = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            files = export(name, args.resolution, Path(folder))
            for precision in args.precisions.split(","):
                found = rows(name, precision, files[precision], args.threads, args.rounds, args.peer,
                             args.realtime)
                lines += found
                print("\n".join(found), flush=True)
    text = "\n\n".join([
        f"Produced on {time.strftime('%Y-%m-%d (%H:%M %Z)')} by\n\n```\n{command_line(__file__, argv)}\n```",
        machine_text(lo.available_isas()[0], others_share(start)),
        f"loopopt alone (no other runtime in its process): `rep.run` of `backend.prepare(model, strict=True, "
        f"threads=...)` in worker processes of their own (`benchmarks/runtimes.py`), one per row, the same "
        f"inputs, batch 1, {args.resolution}x{args.resolution}, {args.rounds} interleaved rounds "
        f"({SETTLE * 1e3:.0f} ms apart). `libgomp's default`: its threads spin 300,000 times at a barrier "
        "before they sleep (`GOMP_SPINCOUNT=300000` in that worker: what libgomp does when nothing is set); "
        "`loopopt's default (spin 300)`: nothing set, so loopopt loads libgomp with `GOMP_SPINCOUNT=300` "
        "(`loopopt.openmp`: a few microseconds, then asleep); `passive`: `OMP_WAIT_POLICY=passive` "
        "(asleep at once); `spin 3k`: `GOMP_SPINCOUNT=3000`. `libgomp / row` "
        "> 1: the row is faster than libgomp's default; `same output`: the row's output equals the first "
        "row's (rtol 1e-4). These figures depend on the other processes' share above: on cores of its own a "
        "spinning wait can answer a barrier sooner (not measured: this machine is shared); "
        "`OMP_WAIT_POLICY=active` gives it back."
        + (" onnxruntime's rows (`--peer`) run in the same rounds: its intra-op threads spin after a call "
           "by default; `not spinning`: `session.intra_op.allow_spinning=0`." if args.peer else "")
        + (" Every worker timed under SCHED_FIFO once prepared (`--realtime`)." if args.realtime else "")
        + " `again`: round timings discarded because another process's real-time threads ran in them "
          "(`runtimes.interleave`).",
        "| model | precision | contender | median ms | min ms | libgomp / row (median) | same output "
        "| again |\n"
        "|---|---|---|---|---|---|---|---|\n" + "\n".join(lines)])
    publish(text, SECTION, args.write)


if __name__ == "__main__":
    main()
