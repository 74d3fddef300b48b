"""The cuda search's first choices of the benchmarks' cases, and a hash of each one's printed CUDA.

Run on two checkouts (``PYTHONPATH=<checkout> python benchmarks/cuda_first_choices.py --json A.json``)
and compare the files: a change to the search space or the cost model that moves no first choice lists
the same kernels with the same source hashes. No GPU: the model ranks for sm_90 (the H200's figures).
The cases: bench_cuda_tensor's (4096^3 fp16 and bf16, BERT, ResNet-50's 3x3 convs at N=32 and N=1),
bench_cuda_int8's, bench_cuda_decode's GEMVs (fp16, int8, ternary), bench_cuda_depthwise's and
bench_cuda_tune's layers in no catalog.

``python benchmarks/cuda_first_choices.py [--json PATH]``
"""
from __future__ import annotations

import argparse
import hashlib
import json

from bench_cuda_decode import INT8, SHAPES, TERNARY
from bench_cuda_depthwise import CASES as DEPTHWISE
from bench_cuda_depthwise import depthwise_op
from bench_cuda_int8 import CASES as INT8_CASES
from bench_cuda_int8 import case_op as int8_op
from bench_cuda_tensor import CASES as TENSOR_CASES
from bench_cuda_tensor import half_op
from bench_cuda_tune import NOVEL

import loopopt as lo
from loopopt.targets.cuda.printer import CUDA, print_kernel
from loopopt.targets.registry import target

ARCH = "sm_90"


def cases() -> dict[str, lo.Op]:
    """Every benchmark case's op by name."""
    ops = {case: half_op(case) for case in TENSOR_CASES}
    ops |= {f"int8 {case}": int8_op(case) for case in INT8_CASES}
    for name, (m, n, k) in SHAPES.items():
        ops |= {f"gemv {name} fp16": lo.Matmul(m, n, k, dtype="float16", out_dtype="float16"),
                f"gemv {name} int8": lo.Matmul(m, n, k, quant=INT8),
                f"gemv {name} ternary": lo.Matmul(m, n, k, quant=TERNARY)}
    ops |= {f"depthwise {case}": depthwise_op(case) for case in DEPTHWISE}
    return ops | dict(NOVEL)


def first(op: lo.Op) -> dict:
    """The model's first candidate of ``op``: its description and its printed CUDA's hash."""
    rules = target("cuda").search_rules()
    best = rules.rank(rules.candidates(op, ARCH))[0]
    source = print_kernel(best.knobs.schedule(op, ARCH), CUDA).source
    return {"kernel": rules.describe(best.knobs.as_dict()),
            "source sha256": hashlib.sha256(source.encode()).hexdigest()[:16],
            "predicted us": round(best.figures["predicted_seconds"] * 1e6, 2)}


def main() -> int:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--json", help="write the rows to this file")
    args = arguments.parse_args()
    rows = {}
    for name, op in cases().items():
        rows[name] = first(op)
        print(f"{name}: {json.dumps(rows[name])}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
