"""Low-bit kernels, one thread: ternary GEMVs at LLM decode shapes (1 x 4096 x 4096, 4096 -> 11008
and 11008 -> 4096) with i2_s, tl1 and tl2 weights against loopopt's int8 GEMV of the same schedule,
and ternary (the stored int8 schedule, int8 storage and i2_s) and binary XNOR + popcount convs on
ResNet-50 conv2_x and conv3_x against the stored int8 schedule of each layer.

Run ``python benchmarks/bench_lowbit.py`` (``--write`` records the tables in the "Low-bit kernels" section
of docs/benchmarks.md). Each pair of kernels is timed together by ``lo.measure_all`` (interleaved rounds,
kernel run only, verified against quant.py's exact reference). The GEMV's weight bandwidth is the bytes
of its stored weights per run over the median time, next to ``lo.machine_profile().memory_bandwidth()``
(the one-core DRAM read bandwidth); weights that fit a cache level stay there between the timed runs.
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_reuse import write_section

import loopopt as lo
from loopopt.machine import machine_profile

SECTION = "## Low-bit kernels"
GEMVS = ((1, 4096, 4096), (1, 11008, 4096), (1, 4096, 11008))    # Matmul(m, n, k): k inputs -> n outputs


def gemv_schedule(op: lo.Matmul) -> lo.Schedule:
    """VNNI GEMV: B stored as blocks of 16 columns x 4 rows, the blocks of a column block consecutive
    along k (``NK16n4k``: each of the 4 vectors of a block streams through memory), k split by 4 (the
    dot loop), a block of 64 columns (4 vectors) kept in registers across the whole reduction."""
    return (lo.Schedule(op).layout("B", "NK16n4k").split("k", 4).split("j", 64)
            .reorder("i", "j_o", "k_o", "k_i", "j_i").vectorize("j_i").register_block("k_o"))


def one_thread(kernel):
    """``kernel`` set to run its parallel loop (if any) on one thread."""
    kernel.set_threads(1)
    return kernel


def weight_bytes(kernel) -> int:
    """Bytes of the stored weights the kernel reads per run."""
    name = kernel.op.inputs[1]
    ctype = next(p.ctype for p in kernel.generated.params if p.name == name)
    return kernel._elements(name) * {"int8_t": 1, "uint8_t": 1, "uint64_t": 8}[ctype]


def gemv_rows(shape: tuple[int, int, int], budget: float) -> list[str]:
    m, n, k = shape
    int8 = lo.Matmul(m, n, k, quant=lo.QuantSpec("int8", True, True, "float32"))
    ternary = lo.Matmul(m, n, k, quant=lo.QuantSpec("int8", True, True, "float32", "ternary"))
    cases = [("int8 weights (1 byte)", gemv_schedule(int8)),
             ("ternary, int8 storage (1 byte)", gemv_schedule(ternary)),
             ("ternary, i2_s (2 bits)", gemv_schedule(ternary).weight_format("i2_s")),
             ("ternary, tl1 table lookup (2 bits)", lo.Schedule(ternary).weight_format("tl1")),
             ("ternary, tl2 table lookup (1.67 bits)", lo.Schedule(ternary).weight_format("tl2"))]
    kernels = [one_thread(s.compile()) for s in (case[1] for case in cases)]
    timings = lo.measure_all(kernels, budget=budget)
    dram = machine_profile().memory_bandwidth()
    base = timings[0].median
    rows = ["| kernel | isa | median ms | min ms | weight MB | weight GB/s | % of DRAM bw | vs int8 "
            "| verified |", "|---|---|---|---|---|---|---|---|---|"]
    for (label, _), kernel, t in zip(cases, kernels, timings):
        size = weight_bytes(kernel)
        gbs = size / t.median / 1e9
        noisy = " (NOISY)" if t.noisy else ""
        rows.append(f"| {label} | {kernel.isa} | {t.median * 1e3:.3f} | {t.min * 1e3:.3f} | "
                    f"{size / 1e6:.2f} | {gbs:.1f} | {100 * gbs / dram:.0f} | {base / t.median:.2f}x | "
                    f"{t.verified}{noisy} |")
    last = max(machine_profile().caches, key=lambda c: c.size)
    fits = last.size > 2 * weight_bytes(kernels[0])
    where = ("all the weight arrays fit in it, so the timed runs read them from there, not from DRAM" if fits
             else "the int8 weights do not fit in it")
    rows.append(f"\nDRAM read bandwidth of one core (`lo.machine_profile().memory_bandwidth()`): {dram:.1f} "
                f"GB/s. The largest cache ({last.name}) holds {last.size / 2**20:.0f} MiB: {where}.")
    return rows


def conv_rows(layer: str, budget: float) -> list[str]:
    """The layer's stored int8 schedule on int8 and on ternary weights (int8 storage and i2_s), and the
    binary kernel."""
    binary = lo.get_layer(layer, quant=lo.QuantSpec("binary", True, True, "float32", "binary"))
    int8 = lo.get_layer(layer, quant=lo.QuantSpec("uint8", True, True, "uint8"))
    ternary = lo.get_layer(layer, quant=lo.QuantSpec("uint8", True, True, "uint8", "ternary"))
    stored = lo.load_schedule(f"{layer}.int8", ternary)
    kernels = [one_thread(lo.load_schedule(f"{layer}.int8", int8).compile()), one_thread(stored.compile()),
               one_thread(stored.weight_format("i2_s").compile()), lo.Schedule(binary).compile()]
    labels = [f"int8 (`{layer}.int8`, uint8 x int8 -> uint8)", "ternary, int8 storage, same schedule",
              "ternary, i2_s, same schedule", "binary XNOR + popcount (float32 output)"]
    timings = lo.measure_all(kernels, budget=budget)
    rows = ["| kernel | isa | median ms | GOP/s (2 ops per product) | vs int8 | verified |",
            "|---|---|---|---|---|---|"]
    for label, kernel, t in zip(labels, kernels, timings):
        how = f", popcount {kernel.popcount}" if hasattr(kernel, "popcount") else ""
        rows.append(f"| {label} | {kernel.isa}{how} | {t.median * 1e3:.3f} | {t.gflops:.0f} | "
                    f"{timings[0].median / t.median:.2f}x | {t.verified}{' (NOISY)' if t.noisy else ''} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=2.0, help="seconds of timed runs per kernel")
    parser.add_argument("--layers", default="resnet50.conv2_x,resnet50.conv3_x")
    parser.add_argument("--write", action="store_true", help="record the tables in docs/benchmarks.md")
    args = parser.parse_args()
    profile = machine_profile()
    text = "\n".join([
        f"`python benchmarks/bench_lowbit.py{' --write' if args.write else ''}` "
        f"({datetime.date.today()}, {profile.cpu}, one thread; the machine's 2 cores were shared with "
        f"other work while this ran, so the figures are noisy).", "",
        *(line for shape in GEMVS for line in (
            f"### Ternary GEMV, Matmul{shape}: {shape[2]} inputs -> {shape[1]} outputs (float32 output, "
            f"per-channel scales)", "", *gemv_rows(shape, args.budget), "")),
        *(line for layer in args.layers.split(",") for line in (
            f"### Ternary and binary conv, {layer}", "", *conv_rows(layer, args.budget), ""))])
    print(text)
    if args.write:
        write_section(text, SECTION)


if __name__ == "__main__":
    main()
