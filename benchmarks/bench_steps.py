"""One model's steps inside ``rep.run`` against onnxruntime's nodes: each C call of the plan's repeats
timed on its own (``time.perf_counter`` around it, in the order and on the buffers a run uses; the steps
outside a repeat through ``Plan.run(times=...)``), and onnxruntime's per-node kernel times from its
profiler (``SessionOptions.enable_profiling``), a node matched by name (less the ``_token_<n>`` that
onnxruntime appends to a node it rewrites: its exact int8 path's QLinearConv) or by the output of the fused
node onnxruntime made of it (``<output>_nchwc``: the step's output, or the first output of the step's node
in the graph, where onnxruntime fused a Conv with the Add and Relu after it, which loopopt's step runs too).
Both in this process, their rounds interleaved (each round loopopt's runs and calls, then one
``session.run``), each run ``--settle`` seconds after the last (as ``bench_onnx``'s interleaved rounds
are); loopopt's calls made inside ``loopopt.team.hold``, as a plan run makes them (its threads spin between
steps, not asleep after 300 spins); medians and minimums over
``--rounds``; ``--realtime``: every thread under SCHED_FIFO once prepared (root on Linux).

    python benchmarks/bench_steps.py MODEL.onnx [--threads 2] [--rounds 30] [--settle 0.05] [--realtime]
                                     [--apart] [--again] [--kinds]

``--apart``: a second rep of the model whose plan keeps each step's buffer its own (``Plan.share``), timed
in turn with the first in each round (before/after buffers shared by liveness, in one process).
``--again``: each repeated step's kernel call made and timed a second time straight after the first (its
code, buffers and the core's state its own), a column beside the step's time in place: in place over again
is what the state the steps before it leave costs the step (the step after it then follows two calls).
``--kinds``: a second table, the steps' time lost to onnxruntime's nodes (loopopt's - onnxruntime's, by
median and by minimum) summed by kind of step (``kind``: stem, 1x1 and 3x3 convs, strided ones apart,
pools, adds, quantizing steps), the steps no node matches against the nodes no step matches.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runtimes import realtime_threads  # noqa: E402

from loopopt import team  # noqa: E402
from loopopt.onnx import backend  # noqa: E402
from loopopt.onnx.peer import session_options  # noqa: E402
from loopopt.onnx.report import random_inputs  # noqa: E402

KERNEL_EVENT = "_kernel_time"     # onnxruntime's per-node event names end so
REWRITTEN = re.compile(r"_token_\d+$")   # ... after this where onnxruntime rewrote the node


Timed = tuple[dict, list[float], dict]   # a rep's steps (median, minimum) by node, its runs' seconds, again


def loopopt_steps(reps: list, given: dict[str, np.ndarray], rounds: int, settle: float,
                  peer: Callable[[], None], again: bool = False) -> tuple[list[Timed], list[float]]:
    """Per rep, each step's microseconds by node (median, minimum), the whole run's seconds per round and,
    with ``again``, each repeated step's last call made again straight after it (median, minimum), the
    reps taking turns in each round; and the seconds of ``peer``, called once at the end of each round."""
    calls = [[(rep.plan.steps[index].node, call) for repeat in rep.plan.repeats.values()
              for index, call in zip(repeat.owners, repeat.calls)] for rep in reps]
    seen: list[dict[str, list[float]]] = [defaultdict(list) for _ in reps]
    repeated: list[dict[str, list[float]]] = [defaultdict(list) for _ in reps]
    whole: list[list[float]] = [[] for _ in reps]
    theirs: list[float] = []
    for _ in range(rounds):
        for rep, its_calls, its_seen, its_whole, its_again in zip(reps, calls, seen, whole, repeated):
            time.sleep(settle)
            start = time.perf_counter()
            rep.run(given)
            its_whole.append(time.perf_counter() - start)
            time.sleep(settle)
            alone: dict[str, float] = {}
            rep.plan.run(given, times=alone)          # the steps outside a repeat, each on its own
            for node in {step.node for step in rep.plan.steps} - {node for node, _ in its_calls}:
                its_seen[node].append(alone[node])
            time.sleep(settle)
            made: dict[str, float] = defaultdict(float)   # a step's call and the arena's clears before it
            with team.hold():
                for position, (node, (function, arguments)) in enumerate(its_calls):
                    start = time.perf_counter()
                    function(*arguments)
                    made[node] += time.perf_counter() - start
                    if again and (position + 1 == len(its_calls) or its_calls[position + 1][0] != node):
                        start = time.perf_counter()
                        function(*arguments)
                        its_again[node].append(time.perf_counter() - start)
            for node, seconds in made.items():
                its_seen[node].append(seconds)
        time.sleep(settle)
        start = time.perf_counter()
        peer()
        theirs.append(time.perf_counter() - start)
    return [(summary(its_seen), its_whole, summary(its_again))
            for its_seen, its_whole, its_again in zip(seen, whole, repeated)], theirs


def summary(seconds: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    """Microseconds by node: (median, minimum)."""
    return {node: (np.median(t) * 1e6, min(t) * 1e6) for node, t in seconds.items()}


def onnxruntime_session(path: str, given: dict[str, np.ndarray], threads: int):
    """An onnxruntime session of the model on ``threads`` threads, profiling, run three times."""
    import onnxruntime
    options = session_options(threads)
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    for _ in range(3):
        session.run(None, given)
    return session


def onnxruntime_nodes(session, rounds: int) -> dict:
    """onnxruntime's per-node kernel microseconds by node name (median, minimum) over its last ``rounds``
    runs, from the session's profile (which this ends)."""
    events = json.loads(Path(session.end_profiling()).read_text())
    seen: dict[str, list[float]] = defaultdict(list)
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith(KERNEL_EVENT):
            seen[REWRITTEN.sub("", event["name"][:-len(KERNEL_EVENT)])].append(event["dur"])
    return {node: (float(np.median(t[-rounds:])), float(min(t[-rounds:]))) for node, t in seen.items()}


def matched(step, theirs: dict, first_outputs: dict[str, str]) -> tuple[float, float] | None:
    """onnxruntime's time of the node a step runs: by name, or its fused node's (named by the step's output
    or by the first output of the step's node, ``first_outputs`` by node name)."""
    return (theirs.get(step.node) or theirs.get(f"{step.outputs[0]}_nchwc")
            or theirs.get(f"{first_outputs.get(step.node)}_nchwc"))


def cell(times: tuple[float, float] | None) -> str:
    return "-" if times is None else f"{times[0]:.0f} ({times[1]:.0f})"


def table(rep, ours: dict, theirs: dict, first_outputs: dict[str, str], threads: int,
          apart: dict | None = None, again: dict | None = None) -> list[str]:
    """One row per step: loopopt's and onnxruntime's median (minimum) microseconds and their ratio; with
    ``apart``, loopopt's without shared buffers and apart/shared; with ``again``, the step's call made
    again straight after and in place/again."""
    extra = (f" loopopt apart us {threads}T | apart/shared |", "---|---|") if apart is not None else ("", "")
    if again is not None:
        extra = (extra[0] + f" loopopt again us {threads}T | in place/again |", extra[1] + "---|---|")
    rows = [f"| step | op | loopopt us {threads}T | onnxruntime us {threads}T | ORT/loopopt |{extra[0]}",
            f"|---|---|---|---|---|{extra[1]}"]
    for step in rep.plan.steps:
        mine, peer = ours.get(step.node), matched(step, theirs, first_outputs)
        ratio = f"{peer[0] / mine[0]:.2f}" if mine and peer else "-"
        cells = [step.node, step.op_type, cell(mine), cell(peer), ratio]
        if apart is not None:
            other = apart.get(step.node)
            cells += [cell(other), f"{other[0] / mine[0]:.2f}" if other and mine else "-"]
        if again is not None:
            warm = again.get(step.node)
            cells += [cell(warm), f"{mine[0] / warm[0]:.2f}" if warm and mine else "-"]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def kind(rep, step) -> str:
    """What kind of step ``step`` of ``rep`` is: a windowed op (a conv) by its taps and stride (a stem:
    3 input channels), else by the node types it runs."""
    op = getattr(rep.lowered.get(step.node), "op", None)
    windows = op.windows if op is not None else ()
    if windows:
        taps = {window.tap_dim for window in windows}
        channels = math.prod(op.extent(d) for d in op.reduction_dims if d not in taps)
        stride = "/2" if max(window.stride for window in windows) > 1 else ""
        return "stem conv" if channels == 3 else "x".join(str(w.taps) for w in windows) + f"{stride} conv"
    for part, name in (("add", "add"), ("pool", "pool"), ("gemm", "gemm"), ("matmul", "matmul"),
                       ("quantize", "quantize, dequantize")):
        if part in step.op_type.lower():
            return name
    return step.op_type


def kinds_table(rep, ours: dict, theirs: dict, first_outputs: dict[str, str], threads: int) -> list[str]:
    """The time loopopt's steps lost to onnxruntime's nodes (us, by median and by minimum), summed by
    ``kind``, most lost first; the steps no node matches against the nodes no step matches, last."""
    lost: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    unmatched, matched_nodes = [0, 0.0, 0.0], [0.0, 0.0]
    for step in rep.plan.steps:
        mine, peer = ours.get(step.node), matched(step, theirs, first_outputs)
        if mine is None:
            continue
        row = lost[kind(rep, step)] if peer else unmatched
        peer = peer or (0.0, 0.0)
        row[:] = [row[0] + 1, row[1] + mine[0] - peer[0], row[2] + mine[1] - peer[1]]
        matched_nodes[:] = [matched_nodes[0] + peer[0], matched_nodes[1] + peer[1]]
    others = [sum(t[i] for t in theirs.values()) - matched_nodes[i] for i in (0, 1)]
    rows = [f"| kind of step | steps | lost us {threads}T (median) | lost us {threads}T (min) |",
            "|---|---|---|---|"]
    rows += [f"| {name} | {count} | {median:+.0f} | {least:+.0f} |"
             for name, (count, median, least) in sorted(lost.items(), key=lambda item: -item[1][1])]
    rows.append(f"| steps no node matches, less the nodes no step matches | {unmatched[0]} | "
                f"{unmatched[1] - others[0]:+.0f} | {unmatched[2] - others[1]:+.0f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--settle", type=float, default=0.05, help="seconds before each timed run")
    parser.add_argument("--realtime", action="store_true", help="SCHED_FIFO once prepared (root)")
    parser.add_argument("--apart", action="store_true",
                        help="also the plan with each step's buffer its own (no sharing), in turn each round")
    parser.add_argument("--again", action="store_true",
                        help="also each repeated step's call made again straight after it (its state warm)")
    parser.add_argument("--kinds", action="store_true",
                        help="also the time lost to onnxruntime's nodes summed by kind of step")
    args = parser.parse_args()
    import onnx
    graph = onnx.load(args.model, load_external_data=False)
    given = random_inputs(graph, seed=3)
    first_outputs = {node.name: node.output[0] for node in graph.graph.node}
    reps = [backend.prepare(args.model, strict=True, threads=args.threads) for _ in range(1 + args.apart)]
    reps[-1].plan.share = not args.apart
    for rep in reps:
        for _ in range(4):   # the first shares the buffers, two more show the repeats, the fourth runs them
            rep.run(given)
    session = onnxruntime_session(args.model, given, args.threads)
    if args.realtime:
        realtime_threads()
    ((ours, whole, again), *apart), peer = loopopt_steps(
        reps, given, args.rounds, args.settle, lambda: session.run(None, given), args.again)
    rep = reps[0]
    theirs = onnxruntime_nodes(session, args.rounds)
    repeated = sum(r.stop - r.start for r in rep.plan.repeats.values())
    print(f"{Path(args.model).name}, {args.threads} thread(s), {args.rounds} rounds, load "
          f"{os.getloadavg()[0]:.1f}: {len(rep.plan.steps)} steps, {repeated} in {len(rep.plan.repeats)} "
          f"repeat(s); rep.run median {np.median(whole) * 1e3:.2f} ms (min {min(whole) * 1e3:.2f}), steps "
          f"summed {sum(t[0] for t in ours.values()) / 1e3:.2f} ms; session.run median "
          f"{np.median(peer) * 1e3:.2f} ms (min {min(peer) * 1e3:.2f}), nodes summed "
          f"{sum(t[0] for t in theirs.values()) / 1e3:.2f} ms"
          + "".join(f"; apart (no shared buffers) rep.run median {np.median(w) * 1e3:.2f} ms (min "
                    f"{min(w) * 1e3:.2f}), steps summed {sum(t[0] for t in a.values()) / 1e3:.2f} ms"
                    for a, w, _ in apart))
    print("\n".join(table(rep, ours, theirs, first_outputs, args.threads, apart[0][0] if apart else None,
                           again if args.again else None)))
    if args.kinds:
        print("\n" + "\n".join(kinds_table(rep, ours, theirs, first_outputs, args.threads)))


if __name__ == "__main__":
    main()
