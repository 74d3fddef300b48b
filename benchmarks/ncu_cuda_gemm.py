"""Why a GEMM kernel's time differs between one cold launch and a CUDA graph: loopopt's fp16 4096^3
kernels (``KNOBS``: warp-specialized, and the same in a persistent tile loop) and cuBLAS (torch.matmul)
on the same inputs, each verified against float64 PyTorch first.

``python benchmarks/ncu_cuda_gemm.py scopes [--json PATH]``: each kernel's median of one launch with
the L2 flushed and per launch inside a CUDA graph, and the SM clock and power nvidia-smi samples while
each scope runs for about a second (one launch after another, L2 flushed between; or 50 back to back).

``ncu --clock-control none -k regex:'lo_nest|nvjet|gemm' --section SpeedOfLight --section Occupancy
--section LaunchStats --csv python benchmarks/ncu_cuda_gemm.py launch`` profiles each kernel (two
launches each, in the order the labels print).

``python benchmarks/ncu_cuda_gemm.py rounds [bfloat16]``: 9 interleaved rounds, each timing every kernel
(and cuBLAS) one launch at a time with the L2 flushed (median of 10) and in a CUDA graph (median of 3
replays of 20), so that clocks drifting as the GPU warms hit all alike; the medians of the rounds.

``compute-sanitizer --tool memcheck python benchmarks/ncu_cuda_gemm.py check`` (and racecheck): small
persistent kernels (``CHECKS``: blocks walking one to six tiles, split-K, a Gemm's scales) verified once.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from cuda_bench import events_median, graph_median, torch_graph_median

import loopopt as lo
from loopopt.dataflows import gpu_wgmma
from loopopt.measure import verify
from loopopt.targets.cuda import device

SPECIALIZED = {"warps_m": 1, "warps_n": 2, "depth": 64, "stages": 4, "swizzle": 128, "engine": "tma",
               "specialize": True}
KNOBS = {"specialized": SPECIALIZED, "persistent": SPECIALIZED | {"persistent": True},
         "persistent 256x128": SPECIALIZED | {"block_m": 256, "block_n": 128, "warps_m": 2, "warps_n": 1,
                                              "persistent": True}}
CHECKS = [(lo.Matmul(300, 260, 200, dtype="float16"),
           {"warps_m": 1, "warps_n": 2, "depth": 64, "swizzle": 128}),
          (lo.Matmul(1100, 1000, 128, dtype="float16"),
           {"block_m": 64, "block_n": 64, "warps_m": 1, "depth": 64, "swizzle": 128}),
          (lo.Gemm(250, 300, 72, alpha=0.5, beta=2.0, dtype="float16"),
           {"block_m": 64, "block_n": 64, "warps_m": 1, "depth": 32, "stages": 3, "split_k": 3})]


def check() -> bool:
    ok = True
    for op, tiles in CHECKS:
        schedule = gpu_wgmma(op, **tiles, engine="tma", specialize=True, persistent=True)
        good, error = verify(schedule.compile(target="cuda"), seed=7)
        print(f"{op!r} persistent {tiles}: {'verified' if good else 'WRONG'} (max error {error:.2e})",
              flush=True)
        ok &= good
    return ok


def calls(dtype: str = "float16") -> dict[str, Callable[[], object]]:
    """Each kernel's call on the same random ``dtype`` inputs, verified against float64 PyTorch."""
    import cupy as cp
    import torch
    generator = torch.Generator(device="cuda").manual_seed(0)
    a, b = (torch.randn(4096, 4096, device="cuda", generator=generator).to(getattr(torch, dtype))
            for _ in range(2))
    expected = torch.matmul(a.double(), b.double())
    runs = {"cuBLAS": lambda: torch.matmul(a, b)}
    stored = [a, b.t().contiguous()]
    if dtype == "bfloat16":     # a bfloat16 kernel takes the bit patterns
        stored = [cp.asarray(t.view(torch.int16)).view(cp.uint16) for t in stored]
    for name, knobs in KNOBS.items():
        kernel = gpu_wgmma(lo.Matmul(4096, 4096, 4096, dtype=dtype), **knobs).compile(target="cuda")
        out = cp.full((4096, 4096), float("nan"), dtype=cp.float32)
        buffers = kernel.bind({"A": stored[0], "B": stored[1], "C": out})
        kernel.run(buffers)
        got = torch.as_tensor(out, device="cuda").double()
        error = float(torch.linalg.vector_norm(got - expected) / torch.linalg.vector_norm(expected))
        print(f"{name}: relative error {error:.2e}", flush=True)
        if not error < 1e-4:
            raise SystemExit(f"{name} is wrong: relative error {error}")
        runs[name] = lambda kernel=kernel, buffers=buffers: kernel.run(buffers)
    return runs


def sampled(loop: Callable[[], None]) -> dict:
    """The median SM clock (MHz) and power (W) nvidia-smi reads while ``loop`` runs (about a second)."""
    query = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "50"]
    probe = subprocess.Popen(query, stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    loop()
    probe.terminate()
    rows = [line.split(",") for line in probe.communicate()[0].splitlines() if "," in line][6:]
    clocks, power = sorted(float(r[0]) for r in rows), sorted(float(r[1]) for r in rows)
    return {"sm_mhz": clocks[len(clocks) // 2] if clocks else None,
            "watts": power[len(power) // 2] if power else None}


def for_a_second(step: Callable[[], None]) -> Callable[[], None]:
    def loop() -> None:
        end = time.time() + 1.0
        while time.time() < end:
            step()
    return loop


def scopes() -> list[dict]:
    cp = device.cupy()
    rows = []
    for name, call in calls().items():
        graph = torch_graph_median(call) if name == "cuBLAS" else graph_median(call)

        def back_to_back(call=call) -> None:
            for _ in range(50):
                call()
            cp.cuda.Device().synchronize()
        row = {"kernel": name, "cold_ms": events_median(call) * 1e3, "graph_ms": graph * 1e3,
               "cold_clock": sampled(for_a_second(lambda call=call: device.elapsed(call))),
               "hot_clock": sampled(for_a_second(back_to_back))}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def rounds(dtype: str, count: int = 9) -> list[dict]:
    runs = calls(dtype)
    graphs = {name: device.graph_timer(call) for name, call in runs.items() if name != "cuBLAS"}
    cold: dict[str, list[float]] = {name: [] for name in runs}
    hot: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(count):
        for name, call in runs.items():
            cold[name].append(events_median(call, repeats=10, warmup=2))
            hot[name].append(torch_graph_median(call, repeats=3) if name == "cuBLAS"
                             else statistics.median(graphs[name]() for _ in range(3)))
    peer_cold, peer_graph = statistics.median(cold["cuBLAS"]), statistics.median(hot["cuBLAS"])
    rows = [{"dtype": dtype, "kernel": name, "cold_ms": statistics.median(cold[name]) * 1e3,
             "graph_ms": statistics.median(hot[name]) * 1e3,
             "cuBLAS_over_cold": peer_cold / statistics.median(cold[name]),
             "cuBLAS_over_graph": peer_graph / statistics.median(hot[name])} for name in runs]
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows


def launch() -> None:
    cp = device.cupy()
    for name, call in calls().items():
        print(f"profiled: {name}", flush=True)
        for _ in range(2):
            call()
            cp.cuda.Device().synchronize()


if __name__ == "__main__":
    if sys.argv[1] == "launch":
        launch()
    elif sys.argv[1] == "check":
        raise SystemExit(0 if check() else 1)
    elif sys.argv[1] == "rounds":
        rounds(sys.argv[2] if len(sys.argv) > 2 else "float16")
    else:
        result = scopes()
        if "--json" in sys.argv:
            with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
                json.dump(result, f, indent=1)
