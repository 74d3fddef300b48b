"""Low-bit kernels, one thread: ternary GEMVs at LLM decode shapes (1 x 4096 x 4096, 4096 -> 11008
and 11008 -> 4096) with i2_s, tl1 and tl2 weights against loopopt's int8 GEMV of the same schedule,
and ternary (the stored int8 schedule, int8 storage and i2_s; tl1 and tl2 under a register-blocked
table-lookup schedule) and binary XNOR + popcount convs on ResNet-50 conv2_x and conv3_x against the
stored int8 schedule of each layer; each low-bit kernel next to the naive loop of the same
arithmetic (``lo.Schedule(op)`` for the same QuantSpec and weight format; binary: the scalar
``__builtin_popcountll`` path with a register block of one position and one channel). Under each conv
table a note sets the binary kernel's vector instruction rate (XOR, vpopcntq, add per 512 products)
against the vpdpbusd rate of the machine profile's int8 peak: the ceiling of binary over int8.

Run ``python benchmarks/bench_lowbit.py`` (``--write`` records the tables in the "Low-bit kernels" section
of docs/benchmarks.md). The kernels of a table are timed together by ``lo.measure_all`` (interleaved
rounds, kernel run only, verified against quant.py's exact reference); there the weights stay in the
caches between runs. The GEMVs are timed again from DRAM: before each run a buffer ``DRAM_CACHES`` (4)
times the largest cache of ``lo.machine_profile()`` is read, so the weights come from memory; their
weight bandwidth (stored weight bytes per run over the median time) is set against two yardsticks:
``lo.machine_profile().memory_bandwidth()`` (the best one-core pass over a buffer 4x the last cache) and
a plain read of as many bytes (``loopopt.machine.StreamRead``) timed in the same interleaved rounds
after the same eviction, which sees the same load. Peers in the same rounds where installed:
onnxruntime's 4-bit ``MatMulNBits`` (a one-node com.microsoft model) and llama.cpp's ternary ``TQ1_0``
and ``TQ2_0`` (``ggml_ternary.py``: ggml's CPU libraries as ``python benchmarks/build_ggml.py`` builds them
from the llama-cpp-python sdist into its cache, else those of an installed llama-cpp-python, or
``--ggml-lib DIR``; with none, the table says why its llama.cpp rows are missing).
"""
from __future__ import annotations

import argparse
import datetime
import math
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_reuse import write_section
from ggml_ternary import GgmlGemv, library_dir

import loopopt as lo
from loopopt.cbuild import compile_c
from loopopt.machine import DRAM_CACHES, StreamRead, cpu_seconds, machine_profile, others_share
from loopopt.onnx.peer import session_options
from loopopt.quant_reference import random_call
from loopopt.targets.x86.binary import LANES
from loopopt.targets.x86.families import compile_binary
from loopopt.targets.x86.isa import INT_ISAS

SECTION = "## Low-bit kernels"
WORD_PRODUCTS = 512          # binary products per XOR + vpopcntq + add (8 uint64 lanes)
BINARY_INSTRUCTIONS = 3
VNNI_PRODUCTS = 64           # u8 x s8 products per vpdpbusd (16 int32 lanes x 4)
BODY_CHAINS, BODY_ITERATIONS, BODY_RUNS = 12, 2_000_000, 15
BODY_SOURCE = """#include <immintrin.h>
/* BODY_CHAINS independent XOR + vpopcntq + add chains: the binary kernel's loop body alone. */
long lo_binary_body(long iterations)
{
    __m512i acc[%(chains)d];
    const __m512i w = _mm512_set1_epi64(0x0123456789abcdefLL);
    for (int i = 0; i < %(chains)d; ++i) acc[i] = _mm512_set1_epi64(i + 1);
    for (long it = 0; it < iterations; ++it) {
#pragma GCC unroll %(chains)d
        for (int i = 0; i < %(chains)d; ++i)
            acc[i] = _mm512_add_epi64(acc[i], _mm512_popcnt_epi64(_mm512_xor_si512(acc[i], w)));
    }
    __m512i total = acc[0];
    for (int i = 1; i < %(chains)d; ++i) total = _mm512_add_epi64(total, acc[i]);
    return _mm512_reduce_add_epi64(total);
}
""" % {"chains": BODY_CHAINS}
GEMVS = ((1, 4096, 4096), (1, 11008, 4096), (1, 4096, 11008))    # Matmul(m, n, k): k inputs -> n outputs
Peer = tuple[str, Callable[[], object], int]      # a peer's GEMV: label, runner, weight bytes


def gemv_schedule(op: lo.Matmul) -> lo.Schedule:
    """VNNI GEMV: B stored as blocks of 16 columns x 4 rows, the blocks of a column block consecutive
    along k (``NK16n4k``: each of the 4 vectors of a block streams through memory), k split by 4 (the
    dot loop), a block of 64 columns (4 vectors) kept in registers across the whole reduction."""
    return (lo.Schedule(op).layout("B", "NK16n4k").split("k", 4).split("j", 64)
            .reorder("i", "j_o", "k_o", "k_i", "j_i").vectorize("j_i").register_block("k_o"))


def lut_gemv_schedule(op: lo.Matmul, fmt: str) -> lo.Schedule:
    """A table-lookup GEMV with 8 column blocks (256 outputs) in registers across the reduction: each
    step's tables are loaded once for the 8 blocks, and the weights stream from 8 rows of indices at once
    (and tl2's 8 rows of sign bits), enough for the hardware prefetcher to keep DRAM busy (4 blocks were as
    fast with the weights in the caches and slower from DRAM)."""
    return (lo.Schedule(op).split("j", 256).reorder("i", "j_o", "k", "j_i").register_block("k")
            .weight_format(fmt))


def lut_conv_schedule(op: lo.Conv2d, fmt: str) -> lo.Schedule:
    """A table-lookup conv (``lut.py``): activations and output channels-last, 4 output columns x 64
    output channels (2 column blocks) in 8 accumulators across the taps and input channels; ``k_o``, not a
    table loop, right after ``n``: one image's tables, built before its nest."""
    return (lo.Schedule(op).layout("I", "NHWC").layout("O", "NHWC").split("k", 64).tile(ow=4)
            .reorder("n", "k_o", "oh", "ow_o", "kh", "kw", "c", "ow_i", "k_i").register_block("kh")
            .weight_format(fmt))


def one_thread(kernel):
    """``kernel`` set to run its parallel loop (if any) on one thread."""
    kernel.set_threads(1)
    return kernel


BASELINES = (
    "\"vs naive\" is the median of the naive loop of the same arithmetic over the kernel's (the BitNet "
    "issue's bar: >= 10x). The naive loop is `lo.Schedule(op)`, the textbook nest without steps, compiled "
    "for the same QuantSpec: with the weights stored one byte each, or in i2_s (`weight_format(\"i2_s\")`). "
    "tl1 and tl2 (table lookup) have no naive form of their own, so their baseline is the naive i2_s loop: "
    "the same ternary arithmetic on 2-bit weights. A binary op's one schedule step is its register block "
    "(`lo.Schedule(op)` of a binary op is the XNOR + popcount nest on packed bits, blocked by default), so "
    "the binary kernel's baseline is its scalar path with a block of one output position and one channel "
    "(`__builtin_popcountll`, one word at a time), labelled as such. The naive loops are compiled for the "
    "best ISA, so the C compiler may vectorize them.")
YARDSTICKS = (
    "Two yardsticks for a GEMV's weight bandwidth: the profile's DRAM figure (one core streaming a buffer "
    "4x the last cache, the best of its timed passes) and a plain read of as many bytes as the kernel's "
    "weights (`loopopt.machine.StreamRead`, the profile's read kernel) timed in the same interleaved rounds "
    "after the same eviction, so under the same load. On this VM they differ: a read of a few MiB after "
    "every cache was flushed streams several times faster than a pass over a GiB-sized buffer "
    "(docs/reference/machine.md, `StreamRead`), so a GEMV's weights can beat the profile's figure without "
    "beating DRAM; the plain read of the same bytes is the fair one. A median far above its minimum is "
    "other work on the shared machine.")
NAIVE_INT8_STORAGE = "naive loop, ternary int8 storage (`lo.Schedule(op)`)"
NAIVE_I2S = "naive loop, ternary i2_s (`lo.Schedule(op).weight_format(\"i2_s\")`)"
NAIVE_BINARY = ("binary, scalar popcount, 1 x 1 block "
                "(`compile_binary(lo.Schedule(op).tile(ow=1, k=1), \"scalar\", \"builtin\")`)")


def weight_bytes(kernel) -> int:
    """Bytes of the stored weights the kernel reads per run."""
    return kernel.tensor_bytes(kernel.op.inputs[1])


def vs_naive(label: str, baseline: str | None, medians: dict[str, float]) -> str:
    """How many times faster than its naive baseline the kernel ``label`` ran ("-" without one)."""
    return f"{medians[baseline] / medians[label]:.1f}x" if baseline else "-"


def largest_cache():
    """The largest cache level of ``lo.machine_profile()``."""
    return max(machine_profile().caches, key=lambda c: c.size)


def dram_times(runners: list[Callable[[], object]], runs: int) -> tuple[list[list[float]], float | None]:
    """Seconds of ``runs`` runs of each runner (interleaved, after one untimed run of each: first-call
    costs), each run right after reading one byte of every line of a buffer ``DRAM_CACHES`` times the
    largest cache (the profile's DRAM buffer), so that its data comes from DRAM; and the other processes'
    share of the CPU meanwhile."""
    flush = np.ones(DRAM_CACHES * largest_cache().size, np.uint8)
    times: list[list[float]] = [[] for _ in runners]
    for run in runners:
        run()
    start_cpu = cpu_seconds()
    for _ in range(runs):
        for run, out in zip(runners, times):
            flush[::64].sum()
            start = time.perf_counter()
            run()
            out.append(time.perf_counter() - start)
    return times, others_share(start_cpu)


def kernel_runner(kernel) -> Callable[[], object]:
    """``kernel.run`` on buffers prepared once from a random call."""
    args, params = random_call(kernel.op)
    return partial(kernel.run, kernel.prepare(*args, **params))


def matmulnbits_runner(n: int, k: int) -> tuple[Callable[[], object], int] | str:
    """onnxruntime's ``MatMulNBits`` (4-bit weights, an fp32 scale per block of 32, one thread,
    ``accuracy_level=4``: int8 activations) on random data, and its weight bytes; or why it is absent."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as err:
        return f"onnxruntime / onnx not installed ({err})"
    rng = np.random.default_rng(0)
    blocks = -(-k // 32)
    bq = rng.integers(0, 256, (n, blocks, 16), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.02, n * blocks).astype(np.float32)
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft", K=k, N=n,
                            bits=4, block_size=32, accuracy_level=4)
    graph = helper.make_graph([node], "gemv", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, n])],
                              [numpy_helper.from_array(bq, "B"), numpy_helper.from_array(scales, "scales")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    options = session_options(1)
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {"A": rng.standard_normal((1, k)).astype(np.float32)}
    return partial(session.run, None, feeds), bq.nbytes + scales.nbytes


def ggml_peers(n: int, k: int, ggml_lib: str | None) -> tuple[list[Peer], str]:
    """llama.cpp's TQ1_0 and TQ2_0 GEMVs (label, runner, weight bytes) and a note, or none and why."""
    directory = library_dir(ggml_lib)
    if isinstance(directory, str):
        return [], f"llama.cpp's TQ1_0 / TQ2_0 are not in this table: {directory}."
    peers = []
    for kind, bits in (("TQ1_0", "1.69"), ("TQ2_0", "2.06")):
        gemv = GgmlGemv(directory, kind, n, k)
        peers.append((f"llama.cpp 1 thread, `{kind}` ({bits} bits; activations to Q8_K in the op; max error "
                      f"{gemv.error:.1e} of the largest output)", gemv.run, gemv.weight_bytes))
    shown = f"~/{directory.relative_to(Path.home())}" if directory.is_relative_to(Path.home()) else directory
    return peers, (f"llama.cpp: the ggml libraries in {shown}, one `ggml_mul_mat` graph computed by "
                   f"`ggml_graph_compute_with_ctx` on 1 thread; its error is against the float64 product of "
                   f"its random ternary weights (the activations' 8-bit rounding).")


def dram_rows(cases: list[tuple[str, object]], kernels: list, shape: tuple[int, int, int],
              runs: int, ggml_lib: str | None) -> list[str]:
    """The GEMVs timed with their weights read from DRAM, the peers (onnxruntime's MatMulNBits, llama.cpp's
    TQ1_0 and TQ2_0) and a plain read of as many bytes as each one's weights, in the same rounds."""
    peers: list[Peer] = []
    ort = matmulnbits_runner(shape[1], shape[2])
    if isinstance(ort, str):
        notes = [f"onnxruntime's MatMulNBits is not in this table: {ort}."]
    else:
        peers.append(("onnxruntime 1 thread, `MatMulNBits` 4-bit, block 32, accuracy_level 4 (not verified)",
                      *ort))
        notes = ["onnxruntime's weight bytes are its 4-bit initializer and scales (it may repack them when "
                 "the session is created); its output is not checked (random weights)."]
    llama, note = ggml_peers(shape[1], shape[2], ggml_lib)
    peers += llama
    notes.append(note)
    labels = [label for label, _ in cases] + [label for label, _, _ in peers]
    runners = [kernel_runner(kernel) for kernel in kernels] + [run for _, run, _ in peers]
    sizes = [weight_bytes(kernel) for kernel in kernels] + [size for _, _, size in peers]
    reads = {size: StreamRead(size) for size in sorted(set(sizes))}
    times, share = dram_times(runners + list(reads.values()), runs)
    medians = [float(np.median(t)) for t in times]
    read_medians = medians[len(labels):]
    read_gbs = {size: read.nbytes / median / 1e9 for (size, read), median in zip(reads.items(), read_medians)}
    dram = machine_profile().memory_bandwidth()
    rows = ["| kernel | median ms | min ms | weight MB | weight GB/s | % of profile DRAM bw "
            "| % of a plain read of as many bytes | vs int8 |", "|---|---|---|---|---|---|---|---|"]
    for label, size, kernel_times, median in zip(labels, sizes, times, medians):
        gbs = size / median / 1e9
        rows.append(f"| {label} | {median * 1e3:.3f} | {min(kernel_times) * 1e3:.3f} | {size / 1e6:.2f} | "
                    f"{gbs:.1f} | {100 * gbs / dram:.0f} | {100 * gbs / read_gbs[size]:.0f} | "
                    f"{medians[0] / median:.2f}x |")
    for (size, read), read_times, median in zip(reads.items(), times[len(labels):], read_medians):
        rows.append(f"| plain read of {size / 1e6:.2f} MB (`StreamRead`) | {median * 1e3:.3f} | "
                    f"{min(read_times) * 1e3:.3f} | {read.nbytes / 1e6:.2f} | {read_gbs[size]:.1f} | "
                    f"{100 * read_gbs[size] / dram:.0f} | 100 | - |")
    busy = "unknown" if share is None else f"{100 * share:.0f}%"
    goal = goals(labels, [size / read_gbs[size] / 1e9 for size in sizes], medians[:len(labels)], len(cases))
    return rows + ["", f"{runs} runs of each, interleaved; other processes used {busy} of the machine's CPU "
                   f"meanwhile. {' '.join(notes)}", "", goal]


def goals(labels: list[str], read_seconds: list[float], medians: list[float], kernels: int) -> str:
    """The goals of issue 14 for the fastest ternary kernel from DRAM (rows 1 to ``kernels - 1``; row 0 is
    int8; rows from ``kernels`` on are peers): its bandwidth over a plain read's of as many bytes
    (``read_seconds``: the median of that read per row), its speed-up over int8 and over the fastest peer."""
    best = min(range(1, kernels), key=lambda i: medians[i])
    peers = range(kernels, len(labels))
    peer = min(peers, key=lambda i: medians[i]) if peers else None
    versus = f"; {medians[peer] / medians[best]:.2f}x the fastest peer, {labels[peer]}" if peers else ""
    share = 100 * read_seconds[best] / medians[best]
    return (f"Goals of issue 14 in this run: the fastest ternary kernel, {labels[best]}, streams its weights "
            f"at {share:.0f} % of the bandwidth of a plain read of as many bytes (goal: >= 80 % of the DRAM "
            f"bandwidth; the table has its share of the profile's figure), {medians[0] / medians[best]:.2f}x "
            f"loopopt's int8 GEMV from DRAM (goal >= 2.5x){versus}.")


def gemv_rows(shape: tuple[int, int, int], budget: float, runs: int, ggml_lib: str | None) -> list[str]:
    m, n, k = shape
    int8 = lo.Matmul(m, n, k, quant=lo.QuantSpec("int8", True, True, "float32"))
    ternary = lo.Matmul(m, n, k, quant=lo.QuantSpec("int8", True, True, "float32", "ternary"))
    cases = [("int8 weights (1 byte)", gemv_schedule(int8)),
             ("ternary, int8 storage (1 byte)", gemv_schedule(ternary)),
             ("ternary, i2_s (2 bits)", gemv_schedule(ternary).weight_format("i2_s")),
             ("ternary, tl1 table lookup (2 bits)", lo.Schedule(ternary).weight_format("tl1")),
             ("ternary, tl2 table lookup (1.67 bits)", lo.Schedule(ternary).weight_format("tl2")),
             *((f"ternary, {fmt} table lookup, 8 column blocks in registers (`lut_gemv_schedule`)",
                lut_gemv_schedule(ternary, fmt)) for fmt in ("tl1", "tl2"))]
    naive = [(NAIVE_INT8_STORAGE, lo.Schedule(ternary)),
             (NAIVE_I2S, lo.Schedule(ternary).weight_format("i2_s"))]
    baselines = [None, NAIVE_INT8_STORAGE, NAIVE_I2S, NAIVE_I2S, NAIVE_I2S, NAIVE_I2S, NAIVE_I2S, None, None]
    kernels = [one_thread(s.compile()) for _, s in cases + naive]
    timings = lo.measure_all(kernels, budget=budget)
    medians = {label: t.median for (label, _), t in zip(cases + naive, timings)}
    base = timings[0].median
    rows = ["Weights in the caches between runs:", "",
            "| kernel | isa | median ms | min ms | weight MB | weight GB/s | vs int8 | vs naive | verified |",
            "|---|---|---|---|---|---|---|---|---|"]
    for (label, _), kernel, t, baseline in zip(cases + naive, kernels, timings, baselines):
        size = weight_bytes(kernel)
        noisy = " (NOISY)" if t.noisy else ""
        rows.append(f"| {label} | {kernel.isa} | {t.median * 1e3:.3f} | {t.min * 1e3:.3f} | "
                    f"{size / 1e6:.2f} | {size / t.median / 1e9:.1f} | {base / t.median:.2f}x | "
                    f"{vs_naive(label, baseline, medians)} | {t.verified}{noisy} |")
    last = largest_cache()
    rows += ["", f"Weights from DRAM (a {DRAM_CACHES * last.size / 2**20:.0f} MiB buffer, {DRAM_CACHES}x the "
             f"{last.size / 2**20:.0f} MiB {last.name}, read before each run):", "",
             *dram_rows(cases, kernels[:len(cases)], shape, runs, ggml_lib)]
    return rows


def conv_rows(layer: str, budget: float) -> list[str]:
    """The layer's stored int8 schedule on int8 and on ternary weights (int8 storage and i2_s), and the
    binary kernel."""
    binary = lo.get_layer(layer, quant=lo.QuantSpec("binary", True, True, "float32", "binary"))
    int8 = lo.get_layer(layer, quant=lo.QuantSpec("uint8", True, True, "uint8"))
    ternary = lo.get_layer(layer, quant=lo.QuantSpec("uint8", True, True, "uint8", "ternary"))
    stored = lo.load_schedule(f"{layer}.int8", ternary)
    kernels = [one_thread(lo.load_schedule(f"{layer}.int8", int8).compile()), one_thread(stored.compile()),
               one_thread(stored.weight_format("i2_s").compile()),
               *(one_thread(lut_conv_schedule(ternary, fmt).compile()) for fmt in ("tl1", "tl2")),
               lo.Schedule(binary).compile(), one_thread(lo.Schedule(ternary).compile()),
               one_thread(lo.Schedule(ternary).weight_format("i2_s").compile()),
               compile_binary(lo.Schedule(binary).tile(ow=1, k=1), "scalar", "builtin")]
    positions, vectors = kernels[5].block
    labels = [f"int8 (`{layer}.int8`, uint8 x int8 -> uint8)", "ternary, int8 storage, same schedule",
              "ternary, i2_s, same schedule", "ternary, tl1 table lookup (`lut_conv_schedule`)",
              "ternary, tl2 table lookup (`lut_conv_schedule`)",
              f"binary XNOR + popcount (float32 output), register block {positions} positions x "
              f"{vectors * LANES[kernels[5].isa]} channels (`lo.Schedule(op)`, the default)",
              NAIVE_INT8_STORAGE, NAIVE_I2S, NAIVE_BINARY]
    baselines = [None, NAIVE_INT8_STORAGE, NAIVE_I2S, NAIVE_I2S, NAIVE_I2S, NAIVE_BINARY, None, None, None]
    timings = lo.measure_all(kernels, budget=budget)
    medians = {label: t.median for label, t in zip(labels, timings)}
    rows = ["| kernel | isa | median ms | GOP/s (2 ops per product) | vs int8 | vs naive | verified |",
            "|---|---|---|---|---|---|---|"]
    for label, kernel, t, baseline in zip(labels, kernels, timings, baselines):
        how = f", popcount {kernel.popcount}" if hasattr(kernel, "popcount") else ""
        rows.append(f"| {label} | {kernel.isa}{how} | {t.median * 1e3:.3f} | {t.gflops:.0f} | "
                    f"{timings[0].median / t.median:.2f}x | {vs_naive(label, baseline, medians)} | "
                    f"{t.verified}{' (NOISY)' if t.noisy else ''} |")
    if kernels[5].popcount == "vpopcntq":
        rows += ["", instruction_note(timings[5], timings[0])]
    return rows


def binary_body_rate() -> float:
    """The binary kernel's loop body alone (``BODY_CHAINS`` independent XOR + ``vpopcntq`` + add
    chains, no loads): G products per second, best of ``BODY_RUNS`` calls."""
    flags = INT_ISAS["avx512"].compile_flags + ("-mavx512vpopcntdq",)
    body = compile_c(BODY_SOURCE, "long lo_binary_body(long iterations);", flags).lib.lo_binary_body
    best = math.inf
    for _ in range(BODY_RUNS):
        start = time.perf_counter()
        body(BODY_ITERATIONS)
        best = min(best, time.perf_counter() - start)
    return BODY_ITERATIONS * BODY_CHAINS * WORD_PRODUCTS / best / 1e9


def instruction_note(binary, int8) -> str:
    """Why the binary kernel's lead over int8 has a ceiling: both at their vector instruction rates,
    the binary loop body's measured here, vpdpbusd's by the machine profile."""
    rate = binary.gflops / 2 / WORD_PRODUCTS * BINARY_INSTRUCTIONS
    peak = machine_profile().peak("avx512", "int8") / 2 / VNNI_PRODUCTS
    body = binary_body_rate()
    ceiling = body / (peak * VNNI_PRODUCTS)
    return (f"The binary kernel's loop body is one XOR, one `vpopcntq` and one add per 512 products (per "
            f"accumulator, no spills), so at its median it issued {rate:.1f} G of these vector instructions "
            f"per second, against the {peak:.1f} G `vpdpbusd` per second (64 products each) of the machine "
            f"profile's int8 peak. That body alone ({BODY_CHAINS} independent chains, no loads, measured in "
            f"this run) does {body:.0f} G products per second ({body / WORD_PRODUCTS:.2f} G bodies, "
            f"{body / WORD_PRODUCTS * BINARY_INSTRUCTIONS:.1f} G instructions per second), {ceiling:.2f}x "
            f"vpdpbusd's {peak * VNNI_PRODUCTS:.0f} G: the ceiling of binary over int8 on this CPU. The "
            f"binary kernel ran at {100 * binary.gflops / 2 / body:.0f}% of that body's rate, the int8 "
            f"kernel at {int8.percent_of_peak:.0f}% of its peak; binary >= 4x this int8 kernel would need "
            f"the binary kernel at {4 * int8.percent_of_peak / ceiling:.0f}% of its body's rate (or the "
            f"int8 kernel below {100 * ceiling / 4:.0f}% of its peak with binary at the full rate).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=2.0, help="seconds of timed runs per kernel")
    parser.add_argument("--dram-runs", type=int, default=10,
                        help="runs of each GEMV with its weights read from DRAM")
    parser.add_argument("--layers", default="resnet50.conv2_x,resnet50.conv3_x")
    parser.add_argument("--ggml-lib", help="directory of llama.cpp's ggml libraries (default: the newest "
                        "build of build_ggml.py in its cache, else the installed llama-cpp-python's)")
    parser.add_argument("--write", action="store_true", help="record the tables in docs/benchmarks.md")
    args = parser.parse_args()
    profile = machine_profile()
    options = (" --write" if args.write else "") + (f" --ggml-lib {args.ggml_lib}" if args.ggml_lib else "")
    text = "\n".join([
        f"`python benchmarks/bench_lowbit.py{options}` "
        f"({datetime.date.today()}, {profile.cpu}, one thread; the machine's {profile.cpus} cores were "
        f"shared with other work while this ran, so the figures are noisy, and the DRAM-bound ones "
        f"unreliable: other work competes for the memory bus too).", "", BASELINES, "",
        f"DRAM read bandwidth of one core (`lo.machine_profile().memory_bandwidth()`, the best of the timed "
        f"passes; measured {profile.measured_utc}): DRAM {profile.bandwidth['DRAM']}.", "", YARDSTICKS, "",
        *(line for shape in GEMVS for line in (
            f"### Ternary GEMV, Matmul{shape}: {shape[2]} inputs -> {shape[1]} outputs (float32 output, "
            f"per-channel scales)", "", *gemv_rows(shape, args.budget, args.dram_runs, args.ggml_lib), "")),
        *(line for layer in args.layers.split(",") for line in (
            f"### Ternary and binary conv, {layer}", "", *conv_rows(layer, args.budget), ""))])
    print(text)
    if args.write:
        write_section(text, SECTION)


if __name__ == "__main__":
    main()
