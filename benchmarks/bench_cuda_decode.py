"""Low-bit decode on the GPU: the cuda target's GEMV kernels (``dataflows.gpu_gemv``,
``targets/cuda/gemv.py``) at LLM decode shapes (1 x 4096 x 4096, 4096 -> 11008, 11008 -> 4096, and an
8-row GEMM) with float16, int8 and ternary i2_s weights (int8 activations, float32 output,
per-channel scales), in the knobs of ``VARIANTS``, next to cuBLAS's float16 GEMV through PyTorch
(``torch.nn.functional.linear``, weights N x K) and the floor of the same bytes (``decode_floor``: an
empty kernel, and the fastest plain streaming read of exactly the weights' bytes), in the same run.

Each loopopt kernel is verified by ``lo.measure`` (the float16 ones against float64 products, the
integer ones against quant.py's exact reference). Three times each, median, per call:

* ``cold``: CUDA events around one launch with the L2 overwritten first (``device.elapsed``): the
  weights come from HBM, the launch's own latency included;
* ``graph``: 20 launches on the same buffers replayed in a CUDA graph (``lo.measure(graph=True)``):
  back to back, the weights in the L2 when they fit (60 MB);
* ``stream``: launches over ``copies`` sets of buffers in rotation, together four times the L2,
  replayed in one CUDA graph: back to back with the weights from HBM (each set is evicted before its
  turn comes again): the weight streaming rate without the launch gaps.

Weight bandwidth is the weights' bytes over the time, against the device-to-device copy rate measured
in the same run (bytes read + written), and, in the stream scope, the read floor's time over the
kernel's (``stream % of read``). ``python benchmarks/bench_cuda_decode.py [--only ...] [--json
PATH]``; ``--check``: small odd-shaped kernels of every kind verified once (the run to put under
``compute-sanitizer``). The four cases take about five minutes on an H200 (one case about 70 s; the
kernels of all cases are built in parallel first).
"""
from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import decode_floor
from cuda_bench import events_median, graph_median, main, markdown

import loopopt as lo
from loopopt.dataflows import gpu_gemv
from loopopt.measure import verify
from loopopt.quant_reference import random_call
from loopopt.schedule import ScheduleError
from loopopt.targets.cuda import device, gemv

SHAPES = {"4096x4096": (1, 4096, 4096), "4096to11008": (1, 11008, 4096), "11008to4096": (1, 4096, 11008),
          "m8.4096x4096": (8, 4096, 4096)}
INT8 = lo.QuantSpec(activation="int8", output="float32")
TERNARY = lo.QuantSpec(activation="int8", output="float32", weight="ternary")
# gpu_gemv's knobs timed for each kind of weights (depth: a lane's rounds whose weights load together;
# split: the warps of a block that share k; stage: the activations copied once a block to shared memory),
# each the fastest of its kind at some shape in an earlier run (docs/benchmarks.md), staged and not
STAGED = {"stage": True}
VARIANTS = {"float16": ({"warps": 4, "columns": 1}, {"warps": 4, "columns": 1, "depth": 4},
                        {"warps": 4, "columns": 1, "depth": 4, **STAGED}),
            "int8": ({"warps": 4, "columns": 1},),
            "ternary i2_s": ({"warps": 8, "columns": 4}, {"warps": 8, "columns": 4, **STAGED},
                             {"warps": 4, "columns": 2}, {"warps": 4, "columns": 2, **STAGED},
                             {"warps": 8, "columns": 2, **STAGED}, {"warps": 4, "columns": 4, "split": 2},
                             {"warps": 4, "columns": 4, "split": 2, **STAGED})}
L2_COPIES = 4             # the rotating buffer sets hold this many times the L2
CASES = list(SHAPES)
CHECKS = [lo.Matmul(1, 37, 100, dtype="float16"), lo.Matmul(3, 45, 203, dtype="float16"),
          lo.Matmul(1, 37, 200, quant=TERNARY), lo.Matmul(5, 29, 77, quant=lo.QuantSpec(weight="ternary")),
          lo.Matmul(2, 33, 130, quant=lo.QuantSpec(activation="uint8", output="uint8")),
          lo.Matmul(1, 19, 70, quant=INT8)]


def copy_rate() -> float:
    """Bytes per second of a device-to-device copy of 1 GiB (read + written), events median."""
    import torch
    a = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    return 2 * a.numel() / events_median(lambda: b.copy_(a), repeats=20, warmup=3)


def rotated_median(make_run: Callable[[int], Callable[[], object]], copies: int, repeats: int = 10) -> float:
    """Seconds per launch of ``copies`` launches, each ``make_run(r)`` on its own buffers, captured in
    one CUDA graph and replayed (``device.graph_timer``), median of ``repeats`` replays."""
    runs = [make_run(r) for r in range(copies)]
    turn = iter(range(10**9))
    timed = device.graph_timer(lambda: runs[next(turn) % copies](), launches=copies)
    return statistics.median(timed() for _ in range(repeats))


def copies_for(weight_bytes: int) -> int:
    """Buffer sets whose weights together fill ``L2_COPIES`` times the L2."""
    l2 = device.cupy().cuda.runtime.deviceGetAttribute(device.cupy().cuda.runtime.cudaDevAttrL2CacheSize, 0)
    return max(2, -(-L2_COPIES * l2 // weight_bytes))


def compiled(schedules: list[lo.Schedule]) -> list:
    """The kernels of ``schedules``, built in parallel (nvcc on every core)."""
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        return list(pool.map(lambda s: s.compile(target="cuda"), schedules))


def loopopt_row(case: str, label: str, kernel, rate: float) -> dict:
    """One loopopt kernel: verified and timed three ways (the module docstring)."""
    cold = lo.measure(kernel, budget=0.2)
    graph = lo.measure(kernel, budget=0.2, verify_output=False, graph=True)
    weights = kernel.tensor_bytes(kernel.op.inputs[1])
    args, params = random_call(kernel.op) if kernel.op.quant is not None else (
        [kernel.op.random_inputs(seed=1)[t] for t in kernel.op.call_tensors], {})
    first = kernel.prepare(*args, **params)
    cp = device.cupy()
    sets = [first] + [kernel.bind({n: v.copy() if isinstance(v, cp.ndarray) else v
                                   for n, v in first.arrays.items()}) for _ in range(copies_for(weights) - 1)]
    stream = rotated_median(lambda r: (lambda: kernel.run(sets[r])), len(sets))
    return row(case, label, weights, cold.median, graph.median, stream, rate, cold.verified,
               cold.relative_error, kernel.build.registers)


def row(case, label, weights, cold, graph, stream, rate, verified, error, registers="-") -> dict:
    return {"case": case, "kernel": label, "weight_bytes": weights, "cold_us": cold * 1e6,
            "graph_us": graph * 1e6, "stream_us": stream * 1e6,
            "stream_percent_of_copy": weights / stream / rate * 100,
            "cold_percent_of_copy": weights / cold / rate * 100, "verified": verified,
            "relative_error": error, "registers": registers}


def cublas_row(case: str, m: int, n: int, k: int, rate: float) -> dict:
    """cuBLAS's float16 GEMV / GEMM through ``torch.nn.functional.linear`` (weights N x K)."""
    import torch
    from cuda_bench import torch_graph_median
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    weights = [torch.randn(n, k, device="cuda", dtype=torch.float16) for _ in range(copies_for(2 * n * k))]
    cold = events_median(lambda: torch.nn.functional.linear(x, weights[0]))
    graph = torch_graph_median(lambda: torch.nn.functional.linear(x, weights[0]))
    turn = iter(range(10**9))
    stream = torch_graph_median(lambda: torch.nn.functional.linear(x, weights[next(turn) % len(weights)]),
                                launches=len(weights))
    return row(case, "cuBLAS float16 (torch linear)", 2 * n * k, cold, graph, stream, rate, True, 0.0)


def ops(m: int, n: int, k: int) -> dict[str, lo.Matmul]:
    """The decode Matmul of each kind of weights."""
    return {"float16": lo.Matmul(m, n, k, dtype="float16"), "int8": lo.Matmul(m, n, k, quant=INT8),
            "ternary i2_s": lo.Matmul(m, n, k, quant=TERNARY)}


def schedules(names: list[str]) -> list[tuple[str, str, lo.Schedule]]:
    """(case, label, schedule) of every loopopt kernel the cases time; a variant the GEMV kernels refuse
    at a case's shape (the 8-row GEMM's float16 activations staged: 64 KB, past the 48 KB a block
    stages) is left out, its refusal printed."""
    planned = []
    for case in names:
        for kind, op in ops(*SHAPES[case]).items():
            for knobs in VARIANTS[kind]:
                schedule = gpu_gemv(op, **knobs)
                try:
                    gemv.check(schedule)
                except ScheduleError as refusal:
                    print(f"{case} {kind} GEMV {knobs}: not timed: {refusal}", flush=True)
                    continue
                planned.append((case, f"{kind} GEMV {knobs}", schedule))
    return planned


def floor_row(case: str, floor: decode_floor.Floor, rate: float) -> dict:
    return row(case, floor.label, floor.nbytes, floor.cold, floor.graph, floor.stream, rate, True, 0.0)


def bench(names: list[str]) -> list[dict]:
    rate = copy_rate()
    print(f"device-to-device copy: {rate / 1e12:.2f} TB/s", flush=True)
    rows = [floor_row("launch", f, rate) for f in decode_floor.empty_floors(events_median, graph_median)]
    print(rows, flush=True)
    planned = schedules(names)
    kernels = compiled([s for _, _, s in planned])
    floors: dict[int, dict] = {}
    for case in names:
        m, n, k = SHAPES[case]
        rows.append(cublas_row(case, m, n, k, rate))
        print(rows[-1], flush=True)
        for (_, label, _), kernel in ((p, built) for p, built in zip(planned, kernels, strict=True)
                                      if p[0] == case):
            timed = loopopt_row(case, label, kernel, rate)
            nbytes = timed["weight_bytes"]
            if nbytes not in floors:
                floors[nbytes] = floor_row(case, decode_floor.read_floor(
                    nbytes, copies_for(nbytes), events_median, graph_median, rotated_median), rate)
                rows.append(floors[nbytes])
                print(rows[-1], flush=True)
            timed["stream_percent_of_read"] = floors[nbytes]["stream_us"] / timed["stream_us"] * 100
            rows.append(timed)
            print(rows[-1], flush=True)
    rows.append({"case": "copy", "kernel": "device-to-device copy", "rate_tb_s": rate / 1e12,
                 "verified": True})
    return rows


def check() -> bool:
    """Every CHECKS op under five GEMV shapes (k split over 2 warps, the activations staged in shared
    memory), verified once."""
    knobs = ({"warps": 2, "columns": 3}, {"warps": 4, "columns": 1}, {"warps": 2, "columns": 2, "split": 2},
             {"warps": 2, "columns": 3, **STAGED}, {"warps": 1, "columns": 2, "split": 2, **STAGED})
    cases = [(op, v) for op in CHECKS for v in knobs]
    ok = True
    for (op, v), kernel in zip(cases, compiled([gpu_gemv(op, **v) for op, v in cases]), strict=True):
        good, error = verify(kernel, seed=5)
        ok &= good
        print(f"{op!r} {v}: {'verified' if good else 'WRONG'} (max error {error:.2e})", flush=True)
    return ok


def table(rows: list[dict]) -> str:
    header = ["case", "kernel", "weight MB", "cold us", "graph us", "stream us", "stream % of copy",
              "stream % of read", "cold % of copy", "verified", "regs"]
    return markdown(header, [[r["case"], r["kernel"], f"{r['weight_bytes'] / 1e6:.2f}",
                              *(f"{r[f'{scope}_us']:.2f}" for scope in ("cold", "graph", "stream")),
                              f"{r['stream_percent_of_copy']:.0f}",
                              f"{r['stream_percent_of_read']:.0f}" if "stream_percent_of_read" in r else "-",
                              f"{r['cold_percent_of_copy']:.0f}",
                              "yes" if r["verified"] else "NO", r["registers"]]
                             for r in rows if "weight_bytes" in r])


if __name__ == "__main__":
    raise SystemExit(main(__doc__, CASES, bench, table, check))
