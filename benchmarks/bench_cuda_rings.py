"""Deep rings and tall tiles on an NVIDIA GPU: BERT's 384x768x3072 (``bench_cuda_tensor.half_op``) on
64 x 64 wgmma tiles at ring depths up to the shared memory's (cuBLAS's kernel there: 64 x 64, 13
stages); BERT again (``bert_tiles``) on 128 x 64 and 64 x 128 tiles of one or two consumer warpgroups, a
barrier round trip feeding twice a 64 x 64 step's products, split-K 1-3 (the tile's last block adding
the shares), its fastest five and the 64 x 64 ring of 8 then timed in alternation with cuBLAS together;
and the GEMM in no catalog (``bench_cuda_tune.NOVEL``: 2000x3000x1000; ``novel_gemm.k1024``: K = 1024,
rows of whole L2 lines) on 192-, 128- and 256-row persistent tiles (cuBLAS's: a persistent 192 x 128
kernel), at K = 1000 with B, the weights, stored in whole-line rows as the search stores them (packed once
outside the timed call: ``bench_cuda_tensor.prepacked``; cuBLAS on B as given), both with a float16
output as cuBLAS writes it, next to cuBLAS in the same process, timed as ``bench_cuda_tensor.py`` times
its variants (one launch with the L2 overwritten, in a CUDA graph, the fastest in alternation with cuBLAS)
after the cost model's first three candidates (``model_first``); then (``together``) BERT's tiles' and the
GEMM in no catalog's fastest five, with BERT's baseline and the GEMM's first choice alone and in 1x2 pairs,
all in alternation with cuBLAS in the same rounds, three times.

``python benchmarks/bench_cuda_rings.py [--only bert,bert_tiles,novel_gemm,novel_gemm.k1024] [--json PATH]``;
``--check``: small deep-ring, tall-tile and clustered persistent kernels verified once (the run to put under
``compute-sanitizer``).
"""
from __future__ import annotations

import json

from bench_cuda_tensor import bench as bench_variants
from bench_cuda_tensor import build_all, half_op, model_first, prepacked, table, torch_tensors
from bench_cuda_tune import case_op
from cuda_bench import interleaved_medians, main

import loopopt as lo
from loopopt.dataflows import gpu_wgmma
from loopopt.measure import verify

CASES = ["bert", "bert_tiles", "novel_gemm", "novel_gemm.k1024"]
SPECIALIZED = {"engine": "tma", "specialize": True}
SMALL = {"block_m": 64, "block_n": 64, "warps_m": 1, "warps_n": 1}
# BERT: one warpgroup of 64 x 64 a block, 72 blocks; a step of depth 64 (128-byte rows) or 32 (64-byte);
# in clusters of 2 or 4 blocks along the rows or the columns, the tiles they share multicast
DEEP = {"depth": 64, "swizzle": 128}
RINGS = [DEEP | {"stages": s} | SPECIALIZED for s in (4, 5, 6, 7, 8, 9, 10, 11, 14)] + \
    [DEEP | {"stages": s, "engine": "tma"} for s in (5, 8, 14)] + \
    [{"depth": 32, "swizzle": 64, "stages": s} | SPECIALIZED for s in (8, 16, 27)] + \
    [DEEP | {"warps_n": 2, "stages": s} | SPECIALIZED for s in (5, 8)] + \
    [DEEP | {"stages": s, "cluster": c} | extra for c in ((2, 1), (1, 2), (1, 4)) for s in (6, 8)
     for extra in (SPECIALIZED, {"engine": "tma"})]     # 6 x 12 tiles: no cluster of 4 along the rows
# BERT on twice a 64 x 64 step's products a barrier round trip (24 KB a stage): 128 x 64 on two consumer
# warpgroups (384 threads, 36 tiles), 64 x 128 on one (n=128) or two (48 tiles); split-K to fill the SMs
WIDE_TILES = [({"block_m": 128, "block_n": 64, "warps_m": 2, "warps_n": 1}, (1, 2, 3)),
              ({"block_m": 64, "block_n": 128, "warps_m": 1, "warps_n": 1}, (1, 2)),
              ({"block_m": 64, "block_n": 128, "warps_m": 1, "warps_n": 2}, (1, 2))]
WIDE = [tiles | DEEP | {"stages": s, "split_k": k} | SPECIALIZED for tiles, splits in WIDE_TILES
        for k in splits for s in (6, 8)]
BASELINE = SMALL | DEEP | {"stages": 8} | SPECIALIZED      # main's BERT kernel
# (tiles, ring depths): 40 KB a step at 192 x 128 (5 fit), 48 KB at the others (4; wgmma's n=192 B tile is
# laid out as 256 rows)
TALL = [({"block_m": 192, "block_n": 128, "warps_m": 3, "warps_n": 1}, (4, 5)),
        ({"block_m": 192, "block_n": 128, "warps_m": 1, "warps_n": 2}, (4, 5)),
        ({"block_m": 128, "block_n": 192, "warps_m": 2, "warps_n": 1}, (4,)),
        ({"block_m": 256, "block_n": 128, "warps_m": 2, "warps_n": 1}, (4,)),
        ({"block_m": 128, "block_n": 256, "warps_m": 2, "warps_n": 1}, (4,))]
ONE_WAVE = {"block_m": 192, "block_n": 256, "warps_m": 3, "warps_n": 1, "depth": 64, "swizzle": 128,
            "stages": 4, "engine": "tma"}
WALKS = [tiles | {"depth": 64, "swizzle": 128, "stages": s, "persistent": True} | SPECIALIZED
         for tiles, rings in TALL for s in rings] + \
    [TALL[0][0] | {"depth": 64, "swizzle": 128, "stages": 5} | SPECIALIZED, ONE_WAVE] + \
    [tiles | {"depth": 64, "swizzle": 128, "stages": rings[-1], "cluster": c} | extra
     for (tiles, rings), c in ((TALL[0], (1, 2)), (TALL[3], (2, 1)), (TALL[3], (1, 2)), (TALL[4], (2, 1)),
                               (TALL[4], (1, 2)))
     for extra in (SPECIALIZED, {"engine": "tma"})] + \
    [ONE_WAVE | {"cluster": (1, 2)}] + \
    [{"block_m": 192, "block_n": 256, "warps_m": 3, "warps_n": 1, "depth": 32, "swizzle": 64, "stages": s,
      "engine": "tma"} | extra for s in (6, 8) for extra in ({}, {"cluster": (1, 2)})] + \
    [tiles | {"depth": 64, "swizzle": 128, "stages": s, "persistent": True, "cluster": c} | SPECIALIZED
     for (tiles, rings), c in ((TALL[1], (1, 2)), (TALL[0], (1, 2)), (TALL[3], (1, 2)), (TALL[4], (2, 1)))
     for s in rings]
# the GEMM in no catalog's walks with B, the weights, in whole-line rows at K = 1000 (what the search offers
# where K's rows straddle lines: ``padded``; at K = 1024 as given); the 192 x 256 one wave as given, alone
# and in 1x2 pairs (the search's first choice before), to compare
AS_GIVEN = [ONE_WAVE, ONE_WAVE | {"cluster": (1, 2)}]
# 11 x 12 tiles (x 24 at 128 columns): clusters along columns; 192 x 256 at depth 32 keeps 4-6 steps'
# copies in flight (112-168 KB) where depth 64 keeps 2 (112 KB); persistent walks by clusters last
# (cuBLAS's: 192 x 128 in pairs along the columns, two consumer warpgroups of 192 x 64, 132 cluster tiles)


def variants(case: str, op: lo.Op) -> list[tuple[str, dict]]:
    """The (preset, arguments) timed for ``case``: the cost model's first three, then the rings or tiles."""
    if case == "bert_tiles":
        return [("gpu_wgmma", arguments) for arguments in (BASELINE, *WIDE)]
    if case == "bert":
        return [*model_first(op), *(("gpu_wgmma", SMALL | arguments) for arguments in RINGS)]
    if case == "novel_gemm.k1024":      # rows of whole lines: B as given
        return [*model_first(op), *(("gpu_wgmma", arguments) for arguments in WALKS)]
    return [*model_first(op), *(("gpu_wgmma", arguments | {"padded": True}) for arguments in WALKS),
            *(("gpu_wgmma", arguments) for arguments in AS_GIVEN)]


def op_of(case: str) -> lo.Op:
    return half_op("bert") if case == "bert_tiles" else case_op(case)


def bench(cases: list[str]) -> list[dict]:
    rows = bench_variants(cases, choose=variants, op_of=op_of)
    for case in ("bert_tiles", "novel_gemm"):
        if case in cases:
            together(case, [r for r in rows if r["case"] == case])
    return rows


def pinned(case: str, op: lo.Op) -> list[dict]:
    """The kernels ``together`` times whatever their one launch: BERT's baseline; the GEMM in no
    catalog's first choice (``model_first``) and the same kernel in 1x2 pairs (without its last steps in
    halves, which take no clusters)."""
    if case == "bert_tiles":
        return [BASELINE]
    first = model_first(op, 1)[0][1]
    return [first, {name: value for name, value in first.items() if name != "halves"} | {"cluster": (1, 2)}]


def together(case: str, rows: list[dict], count: int = 5, rounds: int = 9, repeats: int = 3) -> None:
    """``pinned``'s kernels and the ``count`` fastest verified of ``rows`` (by one launch) timed in
    alternation with cuBLAS, all in each round (``rounds`` of 20 cold runs each), ``repeats`` times:
    their medians and cuBLAS / each, a line each."""
    import cupy as cp
    import torch
    op = op_of(case)
    ranked = sorted((r for r in rows if r["verified"]), key=lambda r: r["median_ms"])[:count]
    chosen = pinned(case, op)
    chosen += [r["arguments"] for r in ranked if r["arguments"] not in chosen]
    logical, stored = torch_tensors(op)
    a, b = logical
    calls = [lambda: torch.matmul(a, b)]
    for arguments in chosen:
        kernel = gpu_wgmma(op, **arguments).compile(target="cuda")
        out = cp.empty(kernel.schedule.layout_of(op.output).storage_shape(op.tensor(op.output).shape),
                       kernel.parameter_dtype(op.output))
        buffers = kernel.bind(dict(zip(op.call_tensors, prepacked(kernel, stored))) | {op.output: out})
        calls.append(lambda kernel=kernel, buffers=buffers: kernel.run(buffers))
    for repeat in range(repeats):
        peer_ms, *mine = (seconds * 1e3 for seconds in interleaved_medians(calls, rounds))
        for arguments, ms in zip(chosen, mine):
            print(json.dumps({"case": case, "together": repeat, "arguments": arguments, "ms": ms,
                              "cublas_ms": peer_ms, "cublas_over_loopopt": peer_ms / ms}), flush=True)


def check() -> bool:
    """A deep ring whose steps wrap it several times, a persistent tall tile over tails, and one walked by
    clusters, verified."""
    runs = [gpu_wgmma(lo.Matmul(100, 72, 1000, dtype="float16", out_dtype="float16"), **SMALL, depth=32,
                      swizzle=64, stages=20, **SPECIALIZED),
            gpu_wgmma(lo.Matmul(100, 72, 1000, dtype="float16"), **SMALL, depth=64, swizzle=128, stages=13,
                      engine="tma"),
            gpu_wgmma(lo.Matmul(500, 300, 200, dtype="float16", out_dtype="float16"), **TALL[0][0], depth=64,
                      swizzle=128, stages=5, persistent=True, **SPECIALIZED),
            gpu_wgmma(lo.Matmul(500, 512, 200, dtype="float16", out_dtype="float16"), **TALL[1][0], depth=64,
                      swizzle=128, stages=5, persistent=True, cluster=(1, 2), **SPECIALIZED)]
    build_all(runs)
    ok = True
    for schedule in runs:
        good, error = verify(schedule.compile(target="cuda"), seed=7)
        ok &= good
        print(f"{schedule.op!r} {schedule.pipeline_stages} stages: {'verified' if good else 'WRONG'} "
              f"(max error {error:.2e})", flush=True)
    return ok


if __name__ == "__main__":
    raise SystemExit(main(__doc__, CASES, bench, table, check))
