"""AMX on this core: the measured tile peaks next to the VNNI and FMA peaks, the int8 tile GEMM,
and (``--layers``) loopopt's AMX int8 and bf16 layer kernels against its other kernels and the peers.

Run ``python benchmarks/bench_amx.py [--shape M,N,K]`` on a CPU with AMX (one thread). The GEMM
(``amx_runtime.AmxGemm`` of ``loopopt.targets.x86``, B packed beforehand) is checked exactly against numpy,
then timed on prepared buffers on 64-byte boundaries: warm-up, then the median and the fastest of
single calls.

``python benchmarks/bench_amx.py --layers [--rounds N] [--threads 1,2] [--only A,B] [--precisions
int8] [--write]``: for each layer of LAYERS (``--only``: these, catalogued or of
``bench_tune.LAYERS``) and each thread count, int8 (uint8 activations, int8 per-channel symmetric
weights, int32 bias, requantized uint8 output, as ``bench_layers.py``): loopopt's AMX tile kernel
(``compile(isa="amx")``, the best of the tile schedules of ``lo.tune``'s AMX space for that many
threads by a short pre-timing: 8 on one thread, 16 where it also gathers patches, those with the
pixel or the channel blocks split over the threads on more), loopopt's stored schedule
(``schedules/<layer>.int8.toml`` on the ISA its provenance records, ``lo.stored_isa``: VNNI, or AMX
tiles; one thread only), PyTorch x86 int8 and onnxruntime QLinearConv when installed; bf16
(float32 inputs rounded to bf16, float32 output): loopopt's AMX kernel (chosen the same way), the
stored ``<layer>.bf16`` schedule where there is one (one thread), PyTorch on bf16 channels-last
tensors. Each output is verified; then the calls are interleaved (one call of each per round) and
the median per implementation reported with its rate and % of the AMX peak of its precision (one
core's: on several threads the share of one core's peak can pass 100%). ``--write`` records the
tables in docs/benchmarks.md: the default run (all LAYERS, both precisions, one thread) in section
"AMX int8 and bf16 layers", any other selection in "AMX layers on several threads"; a run during
which other processes took 5% of the CPU or more is labelled a shared-machine run.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_layers import INT8_SPEC, write_section
from bench_reuse import command_line
from bench_tune import LAYERS as UNCATALOGUED
from peers import INT8_PEERS, ORT_NO_SPIN, LayerData, PeerUnavailable

import loopopt as lo
from loopopt.buffers import aligned_copy, aligned_zeros
from loopopt.machine import cpu_seconds, others_share
from loopopt.measure import bf16_tolerance, peak_gflops
from loopopt.schedule_file import list_schedules
from loopopt.targets.x86.amx_runtime import AmxGemm, amx_peak_gops, require_amx
from loopopt.targets.x86.space import candidates
from loopopt.targets.x86.tiles import tile_plan

LAYERS = ("resnet50.conv1", "resnet50.conv2_x", "resnet50.conv2_x.reduce", "resnet50.conv3_x",
          "resnet50.conv4_x", "mobilenetv2.block2.project")
SECTION = "## AMX int8 and bf16 layers"
THREADS_SECTION = "## AMX layers on several threads"      # any selection but the default
PRE_TIMING = 20                 # calls per AMX candidate when choosing the schedule
SHARED = 0.05                   # others' CPU share from which a run is labelled a shared-machine run


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


@dataclass
class Case:
    """One implementation of a layer: ``run`` (the timed call), ``verify`` ("yes" or what is wrong)."""

    run: Callable[[], object]
    verify: Callable[[], str]
    note: str = ""


def _verdict(ok: bool, why: str) -> str:
    return "yes" if ok else f"NO: {why}"


def _prepared(schedule, isa: str, args: tuple, params: dict, threads: int = 1):
    kernel = schedule.compile(isa)
    kernel.set_threads(threads)
    buffers = kernel.prepare(*args, **params)
    return kernel, buffers, (lambda: kernel.run(buffers))


def _output(kernel, buffers):
    """The output of one run on prepared buffers."""
    kernel.run(buffers)
    return kernel.output(buffers)


def _fastest_tiles(op, args: tuple, params: dict, threads: int):
    """The AMX kernel of ``lo.tune``'s AMX space for ``threads`` threads that is fastest on a short
    pre-timing, its buffers, its run and a note naming its block."""
    tiles = [_prepared(c.schedule, "amx", args, params, threads) for c in candidates(op, "amx", threads)]
    kernel, buffers, run = min(tiles, key=lambda t: _median_call(t[2], PRE_TIMING))
    plan = tile_plan(kernel.schedule)
    order = "channel blocks outer" if plan.channels_outer else "pixels outer"
    split = f", {plan.parallel} split over threads" if plan.parallel else ""
    gathered = ", patches gathered" if plan.shape.patch else ""
    return (kernel, buffers, run,
            f"{plan.block_pixels} pixels x {plan.scratch_columns} channels, {order}{split}{gathered}")


def layer_op(layer: str, dtype: str = "float32") -> lo.Conv2d:
    """Layer ``layer`` of the catalog, or of ``bench_tune.LAYERS``, with inputs of ``dtype``."""
    if layer in UNCATALOGUED:
        op = UNCATALOGUED[layer].op
        return type(op)(**{**op.arguments, "dtype": dtype})
    return lo.get_layer(layer, dtype=dtype)


def int8_cases(layer: str, data: LayerData, threads: int) -> tuple[dict[str, Case], list[str]]:
    """loopopt's AMX kernel, its stored VNNI schedule (one thread) and the int8 peers (uint8 output)."""
    qop = data.op.with_quant(lo.QuantSpec(**INT8_SPEC, output="uint8"))
    args, params = (data.xq, data.wq, data.bq), data.quant_params()
    check = lambda kernel, buffers: _verdict(*data.check(_output(kernel, buffers), "uint8"))
    kernel, buffers, run, note = _fastest_tiles(qop, args, params, threads)
    cases = {"loopopt AMX": Case(run, partial(check, kernel, buffers), note)}
    if threads == 1 and f"{layer}.int8" in list_schedules():
        isa = lo.stored_isa(f"{layer}.int8")           # an AMX tile schedule on the tiles
        isa = "avx512" if isa == "auto" else isa
        kernel, buffers, run = _prepared(lo.load_schedule(f"{layer}.int8", qop), isa, args, params)
        stored = Case(run, partial(check, kernel, buffers), f"stored schedule, {isa}")
        cases[f"loopopt {'AMX' if isa == 'amx' else 'VNNI'} stored ({layer}.int8)"] = stored
    missing = []
    for label, build in INT8_PEERS:
        try:
            peer = build(data, threads)
        except PeerUnavailable as err:
            missing.append(f"{label}: {err}")
            continue
        verify = lambda peer=peer: _verdict(*data.check(peer.output(peer.run()), "uint8"))
        cases[label] = Case(peer.run, verify, peer.note)
    return cases, missing


def _bf16_check(op, inputs: dict, y: np.ndarray, rounding: float = 0.0) -> str:
    """Within the bf16 bound of ``measure.bf16_tolerance``, plus ``rounding`` times the magnitude
    ``|b| + sum |x w|`` for an implementation that rounds its bias and output to bf16?"""
    reference = op.reference(*(inputs[t] for t in op.call_tensors))
    magnitude = op.reference(*(np.abs(inputs[t]) for t in op.call_tensors))
    bound = bf16_tolerance(op, inputs) + rounding * magnitude
    error = np.abs(y.astype(np.float64) - reference)
    return _verdict(bool(np.all(error <= bound)), f"max error {float(error.max()):.3g}")


def bf16_cases(layer: str, data: LayerData, threads: int) -> tuple[dict[str, Case], list[str]]:
    """loopopt's AMX bf16 kernel, its stored bf16 schedule if the layer has one (one thread), PyTorch
    bf16 NHWC."""
    op = layer_op(layer, "bfloat16")
    inputs = {"I": data.x, "W": data.w, "B": data.b}
    args = (data.x, data.w, data.b)
    check = lambda kernel, buffers: _bf16_check(op, inputs, _output(kernel, buffers))
    kernel, buffers, run, note = _fastest_tiles(op, args, {}, threads)
    cases = {"loopopt AMX": Case(run, partial(check, kernel, buffers), note)}
    if threads == 1 and f"{layer}.bf16" in list_schedules():
        kernel, buffers, run = _prepared(lo.load_schedule(f"{layer}.bf16", op), "avx512", args, {})
        stored = Case(run, partial(check, kernel, buffers), "stored schedule")
        cases[f"loopopt AVX-512 ({layer}.bf16)"] = stored
    try:
        torch = importlib.import_module("torch")
    except ImportError as err:
        return cases, [f"PyTorch bf16: {err}"]
    torch.set_num_threads(threads)
    to = lambda a: torch.from_numpy(a).to(torch.bfloat16)
    x, w, b = to(data.x).contiguous(memory_format=torch.channels_last), to(data.w), to(data.b)
    w = w.contiguous(memory_format=torch.channels_last)
    conv = partial(torch.nn.functional.conv2d, x, w, b, op.stride, op.padding, op.dilation, op.groups)

    def run():
        with torch.no_grad():
            return conv()
    # PyTorch rounds its bias and output to bf16: 2^-8 of each, 2^-7 of the magnitude in all
    verify = lambda: _bf16_check(op, inputs, run().float().contiguous().numpy(), 2.0 ** -7)
    cases["PyTorch bf16 NHWC"] = Case(run, verify, "bf16 tensors, channels_last, bf16 output")
    return cases, []


def _rows(layer: str, threads: int, cases: dict[str, Case], rounds: int, flops: int,
          peak: float) -> list[str]:
    verified = {label: case.verify() for label, case in cases.items()}
    times = {label: [] for label in cases}
    for _ in range(rounds):
        for label, case in cases.items():
            begin = time.perf_counter()
            case.run()
            times[label].append(time.perf_counter() - begin)
    amx = float(np.median(times["loopopt AMX"]))
    rows = []
    for label, case in cases.items():
        t = float(np.median(times[label]))
        rate = flops / t / 1e9
        fastest = min(times[label])
        rows.append(f"| {layer} | {threads} | {label} | {t * 1e3:.3f} | {fastest * 1e3:.3f} | {rate:.0f} | "
                    f"{100 * rate / peak:.1f}% | {t / amx:.2f}x | {verified[label]} | {case.note} |")
    return rows


PRECISIONS = {"int8": (int8_cases, "GOP/s"), "bf16": (bf16_cases, "GFLOP/s")}
PEAK_DTYPES = {"int8": "int8", "bf16": "bfloat16"}


def _load_text(share: float | None) -> str:
    """What the other processes' CPU share says about the run (a label from SHARED on)."""
    if share is None:
        return ""
    if share >= SHARED:
        return (f"**Shared machine:** other processes used {100 * share:.0f}% of the CPU meanwhile, so "
                f"these times are noisier and slower than on a quiet machine.")
    return f"Other processes used {100 * share:.0f}% of the CPU meanwhile."


def bench_layers(rounds: int, layers: tuple[str, ...] = LAYERS, threads: tuple[int, ...] = (1,),
                 precisions: tuple[str, ...] = tuple(PRECISIONS)) -> str:
    """The markdown tables of ``layers`` in ``precisions`` on each of ``threads`` (see the module
    docstring)."""
    require_amx()
    peaks = {p: peak_gflops("amx", PEAK_DTYPES[p]) for p in precisions}
    rows, missing = {p: [] for p in precisions}, set()
    start = cpu_seconds()
    for layer in layers:
        data = LayerData.make(layer_op(layer))
        for n, precision in ((n, p) for n in threads for p in precisions):
            cases, absent = PRECISIONS[precision][0](layer, data, n)
            missing.update(absent)
            rows[precision] += _rows(layer, n, cases, rounds, data.op.flops, peaks[precision])
        print(f"{layer}: done", file=sys.stderr, flush=True)
    share = others_share(start)
    counts = " and ".join(map(str, threads))
    peak_text = "; ".join(f"{p} {peaks[p]:.0f} {PRECISIONS[p][1]}" for p in precisions)
    text = [f"Command: `{command_line(__file__, None)}`, {datetime.date.today().isoformat()}.",
            f"CPU: {cpu_model()}, {counts} thread(s); one core's AMX peaks (loopopt's tile loops): "
            f"{peak_text}; VNNI int8 peak {peak_gflops('avx512', 'int8'):.0f} GOP/s. "
            f"Batch 1; calls interleaved, {rounds} rounds, medians (rates from them) and fastest calls; "
            f"OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY', 'unset')}; onnxruntime's intra-op threads "
            f"do not spin on several threads (`{'='.join(ORT_NO_SPIN)}`: a spinning one took a core from the "
            f"next call). " + _load_text(share)]
    for precision in precisions:
        unit = PRECISIONS[precision][1]
        what = ("int8: uint8 activations, int8 per-channel weights, int32 bias, uint8 output (verified: "
                "within 2 LSB of the exact output; loopopt's is bit-exact)" if precision == "int8" else
                "bf16: float32 inputs rounded to bf16, float32 accumulation and output (verified: within "
                "the bf16 bound of `measure.bf16_tolerance`; PyTorch, which rounds its bias and output to "
                "bf16, within 2^-7 of |b| + sum |x w| more)")
        text += [f"### {precision}\n\n{what}",
                 f"| layer | threads | implementation | median ms | fastest ms | {unit} | % of one core's "
                 f"AMX {precision} peak | time vs loopopt AMX | verified | note |\n"
                 "|---|---|---|---|---|---|---|---|---|---|\n"
                 + "\n".join(rows[precision])]
    if missing:
        text.append("Not run: " + "; ".join(sorted(missing)))
    return "\n\n".join(text)


def _selection(parser: argparse.ArgumentParser,
               args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[int, ...], tuple[str, ...]]:
    """(layers, thread counts, precisions) of ``--only``, ``--threads`` and ``--precisions``; a usage
    error naming a bad value and what is allowed."""
    layers = tuple(args.only.split(",")) if args.only else LAYERS
    unknown = [name for name in layers if name not in UNCATALOGUED and name not in lo.list_layers()]
    if unknown:
        parser.error(f"--only: unknown layer(s) {', '.join(unknown)}: use layers of the catalog "
                     f"(loopopt layers) or of bench_tune.LAYERS ({', '.join(UNCATALOGUED)})")
    if not all(part.isdigit() and int(part) >= 1 for part in args.threads.split(",")):
        parser.error(f"--threads {args.threads!r}: give thread counts >= 1 separated by commas, e.g. 1,2")
    precisions = tuple(args.precisions.split(","))
    if not set(precisions) <= set(PRECISIONS):
        parser.error(f"--precisions {args.precisions!r}: allowed: {', '.join(PRECISIONS)}")
    return layers, tuple(int(part) for part in args.threads.split(",")), precisions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="256,256,1024", help="M,N,K of the GEMM (default 256,256,1024)")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--layers", action="store_true",
                        help="time the AMX int8 and bf16 layer kernels (see above)")
    parser.add_argument("--rounds", type=int, default=50, help="interleaved rounds of --layers")
    parser.add_argument("--threads", default="1", help="thread counts of --layers, e.g. 1,2 (default 1)")
    parser.add_argument("--only", help="the layers of --layers, e.g. resnet50.conv2_x,ssd300.vgg16.conv5_1 "
                                       "(default: LAYERS)")
    parser.add_argument("--precisions", default="int8,bf16", help="of --layers: int8, bf16 or both")
    parser.add_argument("--write", action="store_true", help="record --layers in docs/benchmarks.md")
    args = parser.parse_args()
    if args.layers:
        selection = _selection(parser, args)
        text = bench_layers(args.rounds, *selection)
        print(text)
        if args.write:
            default = selection == (LAYERS, (1,), tuple(PRECISIONS))
            write_section(text, SECTION if default else THREADS_SECTION)
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
