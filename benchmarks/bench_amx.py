"""AMX on this core: the measured tile peaks next to the VNNI and FMA peaks, the int8 tile GEMM,
and (``--layers``) loopopt's AMX int8 layer kernels against its VNNI schedules and the peers.

Run ``python benchmarks/bench_amx.py [--shape M,N,K]`` on a CPU with AMX (one thread). The GEMM
(``loopopt.amx.AmxGemm``, B packed beforehand) is checked exactly against numpy, then timed on
prepared buffers on 64-byte boundaries: warm-up, then the median and the fastest of single calls.

``python benchmarks/bench_amx.py --layers [--rounds N] [--write]``: for each layer of LAYERS, int8
(uint8 activations, int8 per-channel symmetric weights, int32 bias, requantized uint8 output, as
``bench_layers.py``): loopopt's AMX tile kernel (``compile(isa="amx")``, the best of the 8 tile
schedules of ``lo.tune``'s AMX space by a short pre-timing), loopopt's stored VNNI schedule
(``schedules/<layer>.int8.toml`` on avx512), PyTorch x86 int8 and onnxruntime QLinearConv when
installed. Each output is verified; then the calls are interleaved (one call of each per round),
one thread, and the median per implementation reported with its GOP/s and % of the AMX int8 peak.
``--write`` records the table in docs/benchmarks.md, section "AMX int8 layers".
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_layers import INT8_SPEC, write_section
from peers import INT8_PEERS, LayerData, PeerUnavailable

import loopopt as lo
from loopopt.amx import AmxGemm, amx_peak_gops, require_amx
from loopopt.buffers import aligned_copy, aligned_zeros
from loopopt.codegen.tiles import tile_plan
from loopopt.machine import cpu_seconds, others_share
from loopopt.measure import peak_gflops
from loopopt.tune.space import candidates

LAYERS = ("resnet50.conv1", "resnet50.conv2_x", "resnet50.conv2_x.reduce", "resnet50.conv3_x",
          "resnet50.conv4_x", "mobilenetv2.block2.project")
SECTION = "## AMX int8 layers"
PRE_TIMING = 20                 # calls per AMX candidate when choosing the schedule


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))


def _median_call(run, calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def loopopt_cases(layer: str, data: LayerData) -> dict[str, tuple]:
    """(run, output, note) of loopopt's AMX kernel (the fastest tile schedule) and stored VNNI schedule."""
    op = data.op
    qop = op.with_quant(lo.QuantSpec(**INT8_SPEC, output="uint8"))
    args = (data.xq, data.wq, data.bq)

    def prepared(schedule, isa):
        kernel = schedule.compile(isa)
        buffers = kernel.prepare(*args, **data.quant_params())
        return kernel, buffers, (lambda: kernel.run(buffers)), (lambda _: kernel.output(buffers))

    tiles = [prepared(c.schedule, "amx") for c in candidates(qop, "amx")]
    kernel, _, run, output = min(tiles, key=lambda t: _median_call(t[2], PRE_TIMING))
    plan = tile_plan(kernel.schedule)
    order = "channel blocks outer" if plan.channels_outer else "pixels outer"
    block = f"{plan.block_pixels} pixels x {plan.scratch_columns} channels, {order}"
    cases = {"loopopt AMX": (run, output, block)}
    _, _, run, output = prepared(lo.load_schedule(f"{layer}.int8", qop), "avx512")
    cases[f"loopopt VNNI ({layer}.int8)"] = (run, output, "stored schedule, avx512")
    return cases


def peer_cases(data: LayerData) -> tuple[dict[str, tuple], list[str]]:
    cases, missing = {}, []
    for label, build in INT8_PEERS:
        try:
            case = build(data, 1)
        except PeerUnavailable as err:
            missing.append(f"{label}: {err}")
            continue
        cases[label] = (case.run, case.output, case.note)
    return cases, missing


def bench_layers(rounds: int) -> str:
    """The markdown table of every layer (see the module docstring)."""
    require_amx()
    amx_peak = peak_gflops("amx", "int8")
    rows, missing = [], set()
    start = cpu_seconds()
    for layer in LAYERS:
        data = LayerData.make(lo.get_layer(layer))
        peers, absent = peer_cases(data)
        missing.update(absent)
        cases = loopopt_cases(layer, data) | peers
        verified = {}
        for label, (run, output, _) in cases.items():
            ok, why = data.check(output(run()), "uint8")
            verified[label] = "yes" if ok else f"NO: {why}"
        times = {label: [] for label in cases}
        for _ in range(rounds):
            for label, (run, _, _) in cases.items():
                begin = time.perf_counter()
                run()
                times[label].append(time.perf_counter() - begin)
        amx = float(np.median(times["loopopt AMX"]))
        for label, (_, _, note) in cases.items():
            t = float(np.median(times[label]))
            gops = data.op.flops / t / 1e9
            rows.append(f"| {layer} | {label} | {t * 1e3:.3f} | {gops:.0f} | {100 * gops / amx_peak:.1f}% | "
                        f"{t / amx:.2f}x | {verified[label]} | {note} |")
        print(f"{layer}: done", file=sys.stderr, flush=True)
    share = others_share(start)
    header = ("| layer | implementation | median ms | GOP/s | % of AMX int8 peak | time vs loopopt AMX | "
              "verified | note |\n|---|---|---|---|---|---|---|---|")
    text = [f"Command: `python benchmarks/bench_amx.py --layers --rounds {rounds} --write`, "
            f"{datetime.date.today().isoformat()}.",
            f"CPU: {cpu_model()}, one thread; AMX int8 peak {amx_peak:.0f} GOP/s (loopopt's tile loop), "
            f"VNNI int8 peak {peak_gflops('avx512', 'int8'):.0f} GOP/s. Batch 1, uint8 activations, int8 "
            f"per-channel weights, uint8 output; calls interleaved, {rounds} rounds, medians. "
            + (f"Other processes used {100 * share:.0f}% of the CPU meanwhile." if share is not None else ""),
            header + "\n" + "\n".join(rows)]
    if missing:
        text.append("Not run: " + "; ".join(sorted(missing)))
    return "\n\n".join(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="256,256,1024", help="M,N,K of the GEMM (default 256,256,1024)")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--layers", action="store_true", help="time the AMX int8 layer kernels (see above)")
    parser.add_argument("--rounds", type=int, default=50, help="interleaved rounds of --layers")
    parser.add_argument("--write", action="store_true", help="record --layers in docs/benchmarks.md")
    args = parser.parse_args()
    if args.layers:
        text = bench_layers(args.rounds)
        print(text)
        if args.write:
            write_section(text, SECTION)
        return
    m, n, k = (int(x) for x in args.shape.split(","))
    require_amx()
    print(f"CPU: {cpu_model()}, one thread")
    vnni = peak_gflops("avx512", "int8")
    amx_int8, amx_bf16 = amx_peak_gops("int8"), amx_peak_gops("bf16")
    print(f"peak fp32 FMA (AVX-512)   {peak_gflops('avx512', 'float32'):9.1f} GFLOP/s")
    print(f"peak int8 VNNI (vpdpbusd) {vnni:9.1f} GOP/s")
    print(f"peak int8 AMX (TDPBUSD)   {amx_int8:9.1f} GOP/s  ({amx_int8 / vnni:.1f}x VNNI)")
    print(f"peak bf16 AMX (TDPBF16PS) {amx_bf16:9.1f} GFLOP/s")

    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    gemm = AmxGemm(m, n, k)
    packed, out = gemm.pack_b(b), aligned_zeros((m, n), np.int32)
    a = aligned_copy(a)        # on a cache line, as AmxGemm would copy it otherwise (not timed here)
    gemm(a, packed, out)
    if not np.array_equal(out, a.astype(np.int64) @ b.astype(np.int64)):
        raise SystemExit("AmxGemm result differs from numpy")
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        gemm(a, packed, out)
        times.append(time.perf_counter() - start)
    ops = 2 * m * n * k
    for label, t in (("median", float(np.median(times))), ("fastest", min(times))):
        gops = ops / t / 1e9
        print(f"AmxGemm {m}x{n}x{k} {label:7} {t * 1e6:8.1f} us = {gops:7.1f} GOP/s = "
              f"{100 * gops / amx_int8:4.1f}% of the AMX int8 peak, {gops / vnni:.1f}x the VNNI peak")


if __name__ == "__main__":
    main()
