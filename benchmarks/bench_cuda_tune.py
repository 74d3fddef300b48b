"""``lo.tune(op, target="cuda")`` on an NVIDIA GPU, next to the search's first choice (no measuring),
the ``gpu_mma`` preset's default tiles and cuBLAS / cuDNN through PyTorch, all in one process.

For each case (``bench_cuda_tensor.half_op``: ResNet-50's conv2_x at N=1, BERT's 384x768x3072 by
default; or ``NOVEL``: a conv and a GEMM of shapes in no catalog) the search measures ``--trials``
candidates (compiled on every core, timed one at a time, logged under the GPU's name in ``--log``);
then its winner, the first choice and the preset's default are timed the way ``bench_cuda_tensor.py``
times its variants (CUDA events on device arrays, the L2 overwritten before each run, median of 50)
against the same float64 reference, and the peer likewise; the winner is then timed in alternation with
the peer (``bench_cuda_tensor.interleaved``: one launch, and in a CUDA graph, the "in a graph" ratio).

``python benchmarks/bench_cuda_tune.py [--only novel_conv] [--trials 16] [--log PATH] [--json PATH]``
"""
from __future__ import annotations

import argparse
import json

from bench_cuda_tensor import half_op, interleaved, peer, reference, run_variant, torch_tensors
from cuda_bench import environment

import loopopt as lo
from loopopt.dataflows import gpu_mma
from loopopt.targets.cuda import device
from loopopt.targets.registry import target
from loopopt.tune.choice import first_choice

CASES = ("conv2_x.n1", "bert")
# layers in no catalog (issue 27's "a layer in no catalog"): shapes no preset, table or test was tuned on
NOVEL = {
    "novel_conv": lo.Conv2d(in_channels=96, out_channels=160, kernel_size=3, padding=1, batch=8,
                            height=40, width=40, dtype="float16"),
    "novel_gemm": lo.Matmul(2000, 3000, 1000, dtype="float16", out_dtype="float16"),   # as cuBLAS writes it
    "novel_gemm.k1024": lo.Matmul(2000, 3000, 1024, dtype="float16", out_dtype="float16"),  # whole-line rows
}


def case_op(case: str) -> lo.Op:
    """The op of ``case``: one of ``NOVEL`` or a case of ``bench_cuda_tensor.half_op``."""
    return NOVEL[case] if case in NOVEL else half_op(case)


def bench(case: str, trials: int, log: str) -> list[dict]:
    """The rows of one case: the search's winner, its first choice and the preset's default."""
    op = case_op(case)
    result = lo.tune(op, target="cuda", trials=trials, log=log, progress=False)
    rules = target("cuda").search_rules()
    first = first_choice(op, device.arch())
    logical, stored = torch_tensors(op)
    peer_name, peer_seconds, peer_graph, peer_call = peer(op, logical)
    expected = reference(op, logical)
    rows = []
    for kernel, schedule, what in ((
            "tuned", result.best, rules.describe(result.winner_trial.knobs)),
            ("first choice", first.schedule, rules.describe(first.knobs.as_dict())),
            ("gpu_mma default", gpu_mma(op), "gpu_mma()")):
        row = {"case": case, "op": repr(op), "kernel": kernel, "knobs": what, "peer": peer_name,
               "peer_ms": peer_seconds * 1e3, "peer_graph_ms": peer_graph * 1e3, "trials": len(result.trials),
               "search_ms": result.timing.median * 1e3, "search_s": result.elapsed}
        compiled = schedule.compile(target="cuda")
        row |= run_variant(compiled, stored, expected)
        row["vs_peer"] = peer_seconds * 1e3 / row["median_ms"]
        if kernel == "tuned":       # and in alternation with the peer, and in a CUDA graph
            row |= interleaved(compiled, stored, peer_call)
            row["vs_peer_graph"] = row["interleaved"]["graph_peer_over_loopopt"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--only", default=",".join(CASES),
                           help="comma-separated cases: half_op's or " + ", ".join(NOVEL))
    arguments.add_argument("--trials", type=int, default=16)
    arguments.add_argument("--log", default="gpu-tune.db")
    arguments.add_argument("--json", help="write the environment and rows to this file")
    args = arguments.parse_args()
    env = environment()
    print(json.dumps(env), flush=True)
    rows = [row for case in args.only.split(",") for row in bench(case, args.trials, args.log)]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "rows": rows}, f, indent=1)
    for r in rows:
        print(f"| {r['case']} | {r['kernel']}: {r['knobs']} | {r['median_ms']:.4f} ms | {r['tflops']:.1f} "
              f"TFLOP/s | {r['peer']} {r['peer_ms']:.4f} ms | {r['vs_peer']:.2f}x | "
              f"{r.get('interleaved', {}).get('peer_over_loopopt', float('nan')):.2f}x interleaved | "
              f"{r.get('vs_peer_graph', float('nan')):.2f}x in a graph | "
              f"{'verified' if r['verified'] else 'WRONG'} |")
    return 0 if all(r["verified"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
