"""What the cuda target's benchmarks share (``bench_cuda.py``: float32 SIMT, ``bench_cuda_tensor.py``:
float16 tensor cores, ``bench_cuda_int8.py``: int8 and bfloat16): CUDA-event medians with the L2 cache
overwritten before each run and medians inside a CUDA graph (loopopt's kernels and PyTorch's), the
environment line (GPU, driver, nvcc), the command line (``main``: ``--only``, ``--json``, ``--check``),
the Markdown table and the ending (JSON written, table printed, exit status 1 unless every row was
verified)."""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from collections.abc import Callable, Sequence

from loopopt.targets.cuda import device, toolchain


def events_median(call: Callable[[], object], repeats: int = 50, warmup: int = 10) -> float:
    """Seconds of one ``call`` on the GPU: the median of ``repeats`` CUDA-event timings, each after the
    L2 cache was overwritten (``device.elapsed``: cold inputs)."""
    for _ in range(warmup):
        call()
    return statistics.median(device.elapsed(call) for _ in range(repeats))


def alternated(rounds_of: Sequence[Callable[[], float]], rounds: int) -> list[float]:
    """Each of ``rounds_of`` (a function giving one round's median seconds) run in alternation,
    ``rounds`` rounds: the median of each one's rounds."""
    times: list[list[float]] = [[] for _ in rounds_of]
    for _ in range(rounds):
        for one_round, timed in zip(rounds_of, times):
            timed.append(one_round())
    return [statistics.median(timed) for timed in times]


def interleaved_medians(calls: Sequence[Callable[[], object]], rounds: int = 9) -> list[float]:
    """Seconds of one launch of each of ``calls``, timed in alternation: ``rounds`` rounds, each call 20
    cold runs a round (``events_median``), the median of each call's rounds' medians."""
    return alternated([lambda call=call: events_median(call, repeats=20, warmup=2) for call in calls], rounds)


def interleaved_graph_medians(timers: Sequence[Callable[[], float]], rounds: int = 9,
                              repeats: int = 20) -> list[float]:
    """Seconds of one launch inside a CUDA graph of each of ``timers`` (``device.graph_timer`` of a
    loopopt kernel, ``torch_graph_timer`` of a peer), timed in alternation: ``rounds`` rounds of
    ``repeats`` replays each, the median of each one's rounds' medians."""
    return alternated([lambda timed=timed: statistics.median(timed() for _ in range(repeats))
                       for timed in timers], rounds)


def alternated_with_peers(run: Callable[[], object], peer_calls: Sequence[Callable[[], object]],
                          rounds: int = 9) -> tuple[list[float], list[float]]:
    """Seconds of one launch of ``run`` (a loopopt kernel run) and of each of ``peer_calls`` (PyTorch or
    Triton calls), timed in alternation with the L2 flushed (``interleaved_medians``), then inside a CUDA
    graph (``interleaved_graph_medians``): the two lists, ``run``'s first in each."""
    calls = [run, *peer_calls]
    timers = [device.graph_timer(run), *(torch_graph_timer(call) for call in peer_calls)]
    return interleaved_medians(calls, rounds), interleaved_graph_medians(timers, rounds)


def graph_median(call: Callable[[], object], repeats: int = 20) -> float:
    """Seconds of one ``call`` (a loopopt kernel run) replayed inside a CUDA graph: the median of
    ``repeats`` replays of ``device.GRAPH_LAUNCHES`` captured calls, per call (``device.graph_timer``:
    back to back, L2 warm, no launch overhead)."""
    timed = device.graph_timer(call)
    return statistics.median(timed() for _ in range(repeats))


def torch_graph_timer(call: Callable[[], object],
                      launches: int = device.GRAPH_LAUNCHES) -> Callable[[], float]:
    """``device.graph_timer`` of a PyTorch call (a peer): ``launches`` calls captured once with
    ``torch.cuda.graph``; the function returned replays them between PyTorch's events and gives the
    seconds of one call."""
    import torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):          # cuDNN and cuBLAS choose and allocate outside the capture
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            call()

    def timed() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / launches
    return timed


def torch_graph_median(call: Callable[[], object], repeats: int = 20,
                       launches: int = device.GRAPH_LAUNCHES) -> float:
    """``graph_median`` of a PyTorch call (a peer): the median of ``repeats`` replays of
    ``torch_graph_timer``."""
    timed = torch_graph_timer(call, launches)
    return statistics.median(timed() for _ in range(repeats))


def environment() -> dict:
    """The GPU, its architecture, the driver, nvcc and the FFMA and float16 tensor-core peaks."""
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip()
    return {"gpu": device.name(), "arch": device.arch(), "driver": driver, "nvcc": toolchain.nvcc_version(),
            "ffma_peak_gflops": device.ffma_peak_gflops(), "tensor_peak_gflops": device.tensor_peak_gflops()}


def main(doc: str, cases: Sequence[str], bench: Callable[[list[str]], list[dict]],
         table: Callable[[list[dict]], str], check: Callable[[], bool]) -> int:
    """A benchmark's command line: ``--only`` (a comma-separated subset of ``cases``), ``--json`` (where
    the environment and the rows go), ``--check`` (``check()`` alone: small kernels verified once, the
    run to put under ``compute-sanitizer``). Prints the environment, ``bench``'s rows as they come
    and ``table`` of them; the exit status is 0 if every row (or the check) was verified, else 1."""
    arguments = argparse.ArgumentParser(description=doc.splitlines()[0])
    arguments.add_argument("--only", type=lambda text: _cases(text, cases),
                           help=f"comma-separated cases of {', '.join(cases)}")
    arguments.add_argument("--json", help="write the environment and rows to this file")
    arguments.add_argument("--check", action="store_true",
                           help="small kernels verified once (for the sanitizer)")
    args = arguments.parse_args()
    if args.check:
        return 0 if check() else 1
    env = environment()
    print(json.dumps(env), flush=True)
    rows = bench(args.only or list(cases))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "rows": rows}, f, indent=1)
    print(table(rows))
    return 0 if all(r["verified"] for r in rows) else 1


def rows_main(doc: str, bench: Callable[[], list[dict]]) -> int:
    """A benchmark's command line without cases: ``--json`` (where the environment and the rows go).
    Prints the environment, then runs ``bench`` (which prints its rows as they come); the exit status is
    0 if every row that says ``verified`` was, else 1."""
    arguments = argparse.ArgumentParser(description=doc.splitlines()[0])
    arguments.add_argument("--json", help="write the environment and rows to this file")
    args = arguments.parse_args()
    env = environment()
    print(json.dumps(env), flush=True)
    rows = bench()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "rows": rows}, f, indent=1)
    return 0 if all(r.get("verified", True) for r in rows) else 1


def _cases(text: str, cases: Sequence[str]) -> list[str]:
    chosen = text.split(",")
    unknown = [c for c in chosen if c not in cases]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown case {unknown[0]!r}; choose from {', '.join(cases)}")
    return chosen


def fastest_verified(rows: Sequence[dict]) -> dict[str, dict]:
    """Each case's verified row of the least one-launch median."""
    best: dict[str, dict] = {}
    for r in rows:
        if r["verified"] and (r["case"] not in best or r["median_ms"] < best[r["case"]]["median_ms"]):
            best[r["case"]] = r
    return best


def markdown(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table of ``rows`` under ``header``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
