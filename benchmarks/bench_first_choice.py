"""How long the search's first choice and an ONNX model's prepare take, for one or more source trees
interleaved (e.g. main's and a branch's): no kernel is timed, only the choosing.

``python benchmarks/bench_first_choice.py --trees A B --rounds 3`` times, in a fresh child process per
tree and round (trees alternating within each round), ``tune.choice.first_choice`` of each op of ``OPS``
at 1 and 2 threads (a fresh op object each time, so nothing of an earlier ranking is reused: the space
built and ranked whole, as ``loopopt.onnx`` does once per distinct op of a model); ``--models
FILE.onnx ...`` instead times ``backend.prepare`` of each model file (``--threads``), warm (the kernel
cache as it is: what was compiled before is loaded) and with ``--cold`` also cold (an empty kernel
cache with this machine's profile copied in: every kernel compiled). Each child imports loopopt from
its tree (``A``: a directory holding the ``loopopt`` package). Run it under ``chrt -f 10`` on a shared
machine; the table gives each figure's median and range over the rounds.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

OPS = {   # name: (constructor, args, keyword args; quant=True: QuantSpec())
    "1x1 256->64 56x56": ("Conv2d", (256, 64, 1), {"height": 56, "width": 56}),
    "3x3 64 56x56": ("Conv2d", (64, 64, 3), {"padding": 1, "height": 56, "width": 56}),
    "3x3/2 256 28x28": ("Conv2d", (256, 256, 3), {"stride": 2, "padding": 1, "height": 28, "width": 28}),
    "dw 3x3 144 56x56": ("Conv2d", (144, 144, 3), {"padding": 1, "groups": 144, "height": 56, "width": 56}),
    "GEMM 512x1024x1024": ("Gemm", (512, 1024, 1024), {}),
    "int8 1x1 256->64 56x56": ("Conv2d", (256, 64, 1), {"height": 56, "width": 56, "quant": True}),
    "int8 3x3 64 56x56": ("Conv2d", (64, 64, 3), {"padding": 1, "height": 56, "width": 56, "quant": True}),
    "int8 dw 3x3 144 56x56": ("Conv2d", (144, 144, 3),
                              {"padding": 1, "groups": 144, "height": 56, "width": 56, "quant": True}),
}
THREADS = (1, 2)

CHILD = r"""
import json, sys, time
tree, task = sys.argv[1], json.loads(sys.argv[2])
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]   # this tree's loopopt
sys.path.insert(0, tree)
import loopopt as lo
assert lo.__file__.startswith(tree), lo.__file__
from loopopt.machine import machine_profile
machine_profile()
times = {}
if task["kind"] == "ops":
    from loopopt.quant import QuantSpec
    from loopopt.tune.choice import first_choice
    first_choice(lo.Conv2d(8, 8, 1, height=4, width=4))                      # imports and one-time tables
    for name, (cls, args, kwargs) in task["ops"].items():
        for threads in task["threads"]:
            op = getattr(lo, cls)(*args, **{**kwargs, "quant": QuantSpec() if kwargs.get("quant") else None})
            start = time.perf_counter()
            first_choice(op, "auto", threads)
            times[f"{name}, {threads}T"] = time.perf_counter() - start
else:
    from loopopt.onnx import backend
    for path in task["models"]:
        start = time.perf_counter()
        backend.prepare(path, threads=task["threads"])
        times[path] = time.perf_counter() - start
print(json.dumps(times))
"""


def child(tree: str, task: dict, cache: str | None) -> dict[str, float]:
    """One child process's times (``cache``: its kernel cache directory; None: the default)."""
    env = dict(os.environ, **({"LOOPOPT_CACHE_DIR": cache} if cache else {}))
    done = subprocess.run([sys.executable, "-c", CHILD, tree, json.dumps(task)], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.splitlines()[-1])


def cold_cache(profile: Path) -> str:
    """An empty kernel cache directory holding only this machine's profile (nothing compiled)."""
    folder = tempfile.mkdtemp(prefix="bench-first-choice-")
    shutil.copy(profile, folder)
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs="+", required=True, help="source trees holding a loopopt package")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", nargs="*", default=[], help="ONNX files: time their prepare instead")
    parser.add_argument("--threads", type=int, default=1, help="the models' thread count")
    parser.add_argument("--cold", action="store_true", help="also each prepare on an empty kernel cache")
    args = parser.parse_args(argv)
    from loopopt.machine import profile_path
    trees = [str(Path(tree).resolve()) for tree in args.trees]
    runs = [("warm" if args.models else "-", None)] + ([("cold", True)] if args.cold else [])
    times: dict[tuple[str, str, str], list[float]] = {}
    for _ in range(args.rounds):
        for tree in trees:
            for label, cold in runs:
                if args.models:
                    task = {"kind": "models", "models": args.models, "threads": args.threads}
                else:
                    task = {"kind": "ops", "ops": OPS, "threads": THREADS}
                cache = cold_cache(profile_path()) if cold else None
                try:
                    for what, seconds in child(tree, task, cache).items():
                        times.setdefault((what, label, tree), []).append(seconds)
                finally:
                    if cache:
                        shutil.rmtree(cache)
    print(f"| {'prepare' if args.models else 'first_choice'} | cache | "
          + " | ".join(f"{Path(t).name} (s, median [min-max])" for t in trees)
          + (" | ratio of medians |" if len(trees) == 2 else " |"))
    print("|---|---|" + "---|" * (len(trees) + (len(trees) == 2)))
    for what, label in dict.fromkeys((what, label) for what, label, _ in times):
        cells, medians = [], []
        for tree in trees:
            values = times[(what, label, tree)]
            medians.append(statistics.median(values))
            cells.append(f"{medians[-1]:.2f} [{min(values):.2f}-{max(values):.2f}]")
        ratio = [f"{medians[0] / medians[1]:.2f}x"] if len(trees) == 2 else []
        print(f"| {Path(what).name if args.models else what} | {label} | " + " | ".join(cells + ratio) + " |")


if __name__ == "__main__":
    main()
