"""loopopt alone on several threads, its kernels' OpenMP threads waiting between regions by each of
``POLICIES`` (``--policies``): libgomp's default (its threads spin at a barrier), libgomp at loopopt's
setting (``loopopt.openmp``: a short spin), passive, a longer spin, or loopopt's own team
(``loopopt.team``: spinning while a plan runs), and on one thread for scale (``--single``), each a
worker process of its own (``runtimes.Worker``) running the same whole model
(``bench_onnx.export``: random weights, batch 1), interleaved rounds. ``--peer``: onnxruntime in the same
rounds, on one thread and on ``--threads`` with its intra-op threads spinning (its default) and not;
``--realtime``: every worker timed under SCHED_FIFO once prepared (``Worker.realtime``).

    python benchmarks/bench_wait.py [--models resnet18] [--precisions fp32] [--threads 2]
                                    [--resolution 224] [--rounds 15] [--policies libgomp,team]
                                    [--single libgomp-300] [--peer] [--realtime] [--write]

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
from loopopt.team import LIBGOMP, RUNTIME_ENV  # noqa: E402

SECTION = "## OpenMP wait policy of multi-threaded plans"
ON_LIBGOMP = {RUNTIME_ENV: LIBGOMP}
POLICIES = {   # a worker's environment: which threads its kernels run on, and how they wait between regions
    "libgomp": {**ON_LIBGOMP, "GOMP_SPINCOUNT": "300000"},   # libgomp as it is: 300,000 spins, then asleep
    "libgomp-300": ON_LIBGOMP,                               # loopopt.openmp's setting: GOMP_SPINCOUNT=300
    "libgomp-3k": {**ON_LIBGOMP, "GOMP_SPINCOUNT": "3000"},
    "passive": {**ON_LIBGOMP, "OMP_WAIT_POLICY": "passive"},  # asleep at once
    "team": {},                                          # loopopt.team, the default
}
DEFAULT_POLICIES = "libgomp,libgomp-300,passive,libgomp-3k"


def contenders(path: Path, threads: int, policies: list[str], single: list[str],
               peer: bool = False) -> list[Contender]:
    """loopopt on one thread under each of ``single`` and on ``threads`` threads under each of
    ``policies`` (names of ``POLICIES``); with ``peer``, onnxruntime on one thread and on ``threads``,
    its threads spinning and not."""
    found = [Contender(f"1 thread, {policy}", "loopopt", path, 1, env=POLICIES[policy]) for policy in single]
    found += [Contender(f"{threads} threads, {policy}", "loopopt", path, threads, env=POLICIES[policy])
              for policy in policies]
    if peer:
        found += [Contender("onnxruntime, 1 thread", "onnxruntime", path, 1),
                  Contender(f"onnxruntime, {threads} threads, spinning", "onnxruntime", path, threads),
                  Contender(f"onnxruntime, {threads} threads, not spinning", "onnxruntime", path, threads,
                            ort_spinning=False)]
    return found


def policy_names(text: str) -> list[str]:
    """The policies a comma-separated ``text`` names; ValueError naming one not in ``POLICIES``."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in POLICIES]
    if unknown:
        raise ValueError(f"unknown wait policy {unknown[0]!r}; allowed: {', '.join(POLICIES)}")
    return names


def rows(name: str, precision: str, path: Path, threads: int, rounds: int, policies: list[str],
         single: list[str], peer: bool = False, realtime: bool = False) -> list[str]:
    """One table row per contender: median and minimum ms, the first of ``policies``' median on
    ``threads`` threads over its own, and whether its output is the first row's ("-" for onnxruntime's);
    the rounds timed again (``interleave``)."""
    import onnx
    inputs = random_inputs(onnx.load(str(path), load_external_data=False), seed=3)
    with ExitStack() as stack:
        workers = [stack.enter_context(Worker(c, inputs))
                   for c in contenders(path, threads, policies, single, peer)]
        for worker in workers if realtime else ():
            worker.realtime()
        times, outputs, disturbed, _ = interleave(workers, rounds)
    medians = [float(np.median(t)) for t in times]
    default = medians[len(single)]
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
    parser.add_argument("--policies", default=DEFAULT_POLICIES,
                        help=f"wait policies on --threads threads, the first the ratios' base "
                             f"({', '.join(POLICIES)})")
    parser.add_argument("--single", default="libgomp-300", help="wait policies on one thread")
    parser.add_argument("--peer", action="store_true", help="onnxruntime in the same rounds")
    parser.add_argument("--realtime", action="store_true", help="SCHED_FIFO once prepared (root)")
    parser.add_argument("--write", action="store_true", help="record the table in docs/benchmarks.md")
    args = parser.parse_args(argv)
    policies, single = policy_names(args.policies), policy_names(args.single)
    start = cpu_seconds()
    lines = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            files = export(name, args.resolution, Path(folder))
            for precision in args.precisions.split(","):
                found = rows(name, precision, files[precision], args.threads, args.rounds, policies,
                             single, args.peer, args.realtime)
                lines += found
                print("\n".join(found), flush=True)
    text = "\n\n".join([
        f"Produced on {time.strftime('%Y-%m-%d (%H:%M %Z)')} by\n\n```\n{command_line(__file__, argv)}\n```",
        machine_text(lo.available_isas()[0], others_share(start)),
        f"loopopt alone (no other runtime in its process): `rep.run` of `backend.prepare(model, strict=True, "
        f"threads=...)` in worker processes of their own (`benchmarks/runtimes.py`), one per row, the same "
        f"inputs, batch 1, {args.resolution}x{args.resolution}, {args.rounds} interleaved rounds "
        f"({SETTLE * 1e3:.0f} ms apart). The kernels' threads: `libgomp`: libgomp's default, its threads "
        "spin 300,000 times at a barrier before they sleep (`GOMP_SPINCOUNT=300000`); `libgomp-300`: "
        "loopopt's setting of libgomp (`loopopt.openmp`: a few microseconds, then asleep); `libgomp-3k`: "
        "`GOMP_SPINCOUNT=3000`; `passive`: `OMP_WAIT_POLICY=passive` (asleep at once); those four with "
        "`LOOPOPT_OPENMP=libgomp`; `team`: loopopt's own team, its default (`loopopt.team`: spinning, "
        "yielding its core every 256 spins, while a plan runs; 300 spins then asleep outside one). "
        f"`{policies[0]} / row` > 1: the row is faster than the first policy on {args.threads} threads; "
        "`same output`: the row's output equals the first row's (rtol 1e-4)."
        + (" onnxruntime's rows (`--peer`) run in the same rounds: its intra-op threads spin after a call "
           "by default; `not spinning`: `session.intra_op.allow_spinning=0`." if args.peer else "")
        + (" Every worker timed under SCHED_FIFO once prepared (`--realtime`)." if args.realtime else "")
        + " `again`: round timings discarded because another process's real-time threads ran in them "
          "(`runtimes.interleave`).",
        f"| model | precision | contender | median ms | min ms | {policies[0]} / row (median) | same output "
        "| again |\n"
        "|---|---|---|---|---|---|---|---|\n" + "\n".join(lines)])
    publish(text, SECTION, args.write)


if __name__ == "__main__":
    main()
