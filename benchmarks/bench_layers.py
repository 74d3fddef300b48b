"""Real layers side by side: loopopt's kernels against PyTorch (oneDNN) and onnxruntime, fp32 and int8.

Run ``python benchmarks/bench_layers.py`` (``--quick`` to try it out, ``--write`` to record the
tables in the "Layers vs oneDNN and onnxruntime" section of docs/benchmarks.md). Everything runs
in one process, batch 1. Every implementation is timed the same way: warm-up calls, then the
median of single calls timed with ``time.perf_counter`` (loopopt's through ``lo.measure``, which
does the same on prepared buffers), and every output is checked against the numpy reference.
The peers are optional: ``pip install -e '.[bench]'``.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_reuse import command_line
from peers import FP32_PEERS, INT8_PEERS, LayerData, PeerUnavailable

import loopopt as lo
from loopopt.machine import cpu_seconds, others_share
from loopopt.onnx.peer import EXACT, options_text
from loopopt.schedule_file import list_schedules, stored_schedule

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## Layers vs oneDNN and onnxruntime"
# mobilenetv1.block3.depthwise is the depthwise 3x3 with C=128 at 56x56 (stride 1).
LAYERS = ("resnet50.conv2_x", "resnet50.conv3_x", "resnet50.conv4_x", "resnet50.conv2_x.reduce",
          "resnet50.conv1", "mobilenetv1.block3.depthwise", "mobilenetv2.block2.depthwise",
          "mobilenetv2.block2.project")
PRESET = "output_stationary"      # the schedule of layers without a stored one
SEARCHED = {True: "searched on this CPU", False: "searched on another CPU", None: "CPU not recorded"}
NAIVE_LIMIT = 2.0                 # s: the naive kernel is timed only on layers it runs faster than this
NOISY = 1.5                       # a median this many times the fastest run is flagged as noisy
SATURATION = (
    "An unverified PyTorch int8 row on a depthwise layer is expected: PyTorch's x86 (fbgemm) depthwise "
    "kernel sums pairs of uint8 x int8 products in saturating 16-bit lanes, which overflow with "
    "full-range uint8 activations; PyTorch's own x86 observers quantize activations to 7 bits "
    "(`reduce_range=True`) for that reason, and with 7-bit activations its output is exact.")
INT8_SPEC = {"activation": "uint8", "per_channel": True, "weight_symmetric": True}
# loopopt's int8 variants: (label, QuantSpec output, Schedule.arithmetic or None for the default)
INT8_VARIANTS = (("loopopt best", "uint8", None), ("loopopt best, float32 output", "float32", None),
                 ("loopopt best, dequantize", "float32", "dequantize"))


@dataclass
class Options:
    threads: tuple[int, ...]
    repeats: int | None
    budget: float


@dataclass
class Row:
    """One measured (or unavailable) implementation of a layer at a thread count."""

    layer: str
    precision: str               # "fp32" or "int8"
    threads: int
    implementation: str
    median: float | None         # seconds; None if it could not run
    ops: int                     # 2 * multiply-accumulates
    peak: float | None           # one core, GFLOP/s (fp32) or GOP/s (int8); None if unknown
    peer: bool = False
    verified: bool = True
    note: str = ""
    fastest: float | None = None  # seconds, the fastest timed run

    @property
    def noisy(self) -> bool:
        """The median is far above the fastest run: other work competed for the cores."""
        return self.median is not None and self.fastest is not None and self.median > NOISY * self.fastest

    @property
    def gops(self) -> float:
        return self.ops / self.median / 1e9

    @property
    def percent_of_peak(self) -> float | None:
        return None if self.peak is None else 100 * self.gops / (self.threads * self.peak)


# --- timing --------------------------------------------------------------------------------------

def _timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def time_calls(run, options: Options) -> tuple[float, float]:
    """Median and minimum seconds of single calls after two warm-up calls (the second sizes the
    repeat count as ``lo.measure`` does)."""
    run()
    first = _timed(run)
    count = options.repeats or int(min(200, max(3, options.budget / max(first, 1e-6))))
    times = [_timed(run) for _ in range(count)]
    return float(np.median(times)), min(times)


def first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


# --- loopopt -------------------------------------------------------------------------------------

def stored_or_preset(name: str) -> str:
    """``name`` if schedules/<name>.toml exists, else the preset."""
    return name if name in list_schedules() else PRESET


def schedule_note(name: str) -> str:
    """A row's note on its schedule ``name`` (``stored_or_preset``): the preset, or a stored schedule
    and whether it was searched on this CPU."""
    if name == PRESET:
        return f"schedule {name} (preset)"
    return f"schedule {name} (stored, {SEARCHED[stored_schedule(name).this_cpu]})"


def loopopt_rows(kernel, row: Row, options: Options) -> list[Row]:
    """``row`` filled in for each thread count: a kernel without a parallel loop is measured once
    and its single-threaded time repeated (with a note) on the rows of more threads."""
    parallel = kernel.schedule.parallel_loop is not None
    rows, single = [], None
    for threads in options.threads:
        note = row.note
        if parallel and hasattr(kernel, "set_threads"):
            kernel.set_threads(threads)
        elif parallel:
            note += "; Kernel.set_threads missing: OpenMP's default thread count"
        elif threads > 1:
            note += "; no parallel loop: the 1-thread kernel"
        timing = single if single is not None and not parallel else lo.measure(
            kernel, repeats=options.repeats, budget=options.budget)
        single = timing
        rows.append(Row(row.layer, row.precision, threads, row.implementation, timing.median, row.ops,
                        row.peak, verified=row.verified and timing.verified, note=note.strip("; "),
                        fastest=timing.min))
    return rows


def loopopt_fp32(layer: str, op, options: Options) -> tuple[list[Row], Row | None]:
    """The best fp32 schedule (stored for this layer, or the preset) at each thread count, and
    the naive schedule on one thread (None if it is too slow or one thread is not benchmarked)."""
    name = stored_or_preset(layer)
    kernel = lo.load_schedule(name, op).compile(lo.stored_isa(name))
    peak = lo.peak_gflops(kernel.isa)
    best = Row(layer, "fp32", 1, "loopopt best", None, op.flops, peak, note=schedule_note(name))
    rows = loopopt_rows(kernel, best, options)
    if 1 not in options.threads:
        return rows, None
    naive = lo.Schedule(op).compile()
    buffers = naive.prepare(*(op.random_inputs()[t] for t in ("I", "W", "B")))
    if _timed(lambda: naive.run(buffers)) > NAIVE_LIMIT:
        return rows, None
    timing = lo.measure(naive, repeats=options.repeats, budget=options.budget)
    return rows, Row(layer, "fp32", 1, "loopopt naive", timing.median, op.flops, peak,
                     verified=timing.verified, fastest=timing.min)


def int8_peak(isa: str) -> float | None:
    """One core's int8 peak (GOP/s) from the package, or None while it cannot give one."""
    try:
        return float(lo.peak_gflops(isa, dtype="int8"))
    except (TypeError, ValueError):
        return None


def loopopt_int8(layer: str, data: LayerData, options: Options) -> list[Row]:
    """All of the benchmark's calls into loopopt's int8 API (uint8 x int8 per-channel weights): the
    stored ``<layer>.int8`` schedule (or the preset) with integer arithmetic and a uint8 output, the
    same with a float32 output (the int32 sums dequantized by the epilogue), and the same schedule with
    ``.arithmetic("dequantize")`` (operands converted to float32 inside the loop), which only makes a
    float32 output.
    A variant that raises becomes a "not available" row."""
    op = data.op
    rows = []
    for label, output, arithmetic in INT8_VARIANTS:
        row, qop = Row(layer, "int8", 1, label, None, op.flops, None), None
        try:
            qop = lo.Conv2d(op.in_channels, op.out_channels, op.kernel_size, stride=op.stride,
                            padding=op.padding, dilation=op.dilation, groups=op.groups, bias=op.bias,
                            batch=op.batch, height=op.height, width=op.width,
                            quant=lo.QuantSpec(**INT8_SPEC, output=output))
            name = stored_or_preset(f"{layer}.int8")
            schedule = lo.load_schedule(name, qop)
            if arithmetic:
                schedule = schedule.arithmetic(arithmetic)
            # on the ISA it was searched on (an AMX tile schedule on the tiles), but the operands
            # dequantized in the loop, which only the SIMD kernels do
            kernel = schedule.compile("auto" if arithmetic else lo.stored_isa(name))
            requantized = output != "float32"
            y = kernel(data.xq, data.wq, data.bq if requantized else data.b, **data.quant_params(requantized))
            row.verified, why = data.check(y, output if requantized else "dequantized")
            kind = "operands dequantized in the loop" if arithmetic else "int32 sums dequantized"
            notes = (schedule_note(name), "" if requantized else f"float32 output, {kind}", why)
            row.peak, row.note = int8_peak(kernel.isa), "; ".join(filter(None, notes))
            rows += loopopt_rows(kernel, row, options)
        except Exception as err:  # noqa: BLE001  (the int8 code generator is still being built)
            why = first_line(err).replace(repr(qop), "Conv2d(...)") if qop else first_line(err)
            rows += [Row(layer, "int8", n, label, None, op.flops, None, note=f"not available: {why}")
                     for n in options.threads]
    return rows


# --- peers ---------------------------------------------------------------------------------------

def peer_rows(layer: str, data: LayerData, precision: str, threads: int, peak: float | None,
              options: Options) -> list[Row]:
    """Each peer of ``precision`` set up for ``threads``, verified, then timed."""
    rows = []
    for name, build in FP32_PEERS if precision == "fp32" else INT8_PEERS:
        row = Row(layer, precision, threads, name, None, data.op.flops, peak, peer=True)
        try:
            case = build(data, threads)
            output_dtype = "uint8" if precision == "int8" else "fp32"
            row.verified, why = data.check(case.output(case.run()), output_dtype)
            row.median, row.fastest = time_calls(case.run, options)
            row.note = "; ".join(filter(None, (case.note, why)))
        except PeerUnavailable as err:
            row.note = f"not available: {err}"
        except Exception as err:  # noqa: BLE001  (a peer failing in any way becomes a "failed" row)
            row.note = f"failed: {first_line(err)}"
        rows.append(row)
    return rows


# --- report --------------------------------------------------------------------------------------

def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def results_table(rows: list[Row], precision: str) -> str:
    """One markdown table of ``precision``'s rows; the last column compares each row with the
    fastest verified peer of its (layer, threads) group: best peer's median / this median."""
    unit = "GFLOP/s" if precision == "fp32" else "GOP/s"
    lines = [f"| layer | threads | implementation | median ms | {unit} | % of peak | "
             "speed vs best peer | note |",
             "|---|---|---|---|---|---|---|---|"]
    footnotes: dict[str, int] = {}
    for row in rows:
        if row.precision != precision:
            continue
        peers = [r.median for r in rows if r.peer and r.verified and r.median is not None
                 and (r.layer, r.threads, r.precision) == (row.layer, row.threads, precision)]
        timed = row.median is not None
        ratio = min(peers) / row.median if peers and timed else None
        ms, gops, percent = (row.median * 1e3, row.gops, row.percent_of_peak) if timed else (None, None, None)
        note = _footnoted(row.note, footnotes) if row.verified else f"NOT verified: {row.note}"
        if row.noisy:
            note = f"noisy: fastest run {row.fastest * 1e3:.3f} ms; {note}".rstrip("; ")
        lines.append(f"| {row.layer} | {row.threads} | {row.implementation} | "
                     f"{_fmt(ms, '.3f')} | {_fmt(gops, '.1f')} | {_fmt(percent, '.1f')} | "
                     f"{_fmt(ratio, '.2f')} | {note} |")
    return "\n".join(lines + [""] + [f"- [{n}] {text}" for text, n in footnotes.items()])


def _footnoted(note: str, footnotes: dict[str, int]) -> str:
    """A long "not available: ..." or "failed: ..." note becomes a numbered footnote (said once)."""
    for prefix in ("not available: ", "failed: "):
        if note.startswith(prefix) and len(note) > 60:
            number = footnotes.setdefault(note[len(prefix):], len(footnotes) + 1)
            return f"{prefix[:-2]} [{number}]"
    return note


def naive_table(best: list[Row], naive: list[Row]) -> str:
    lines = ["| layer | naive ms | best ms | best / naive speed-up |", "|---|---|---|---|"]
    for slow in naive:
        fast = next(r for r in best if r.layer == slow.layer and r.threads == 1)
        lines.append(f"| {slow.layer} | {slow.median * 1e3:.3f} | {fast.median * 1e3:.3f} | "
                     f"{slow.median / fast.median:.1f}x |")
    return "\n".join(lines)


def layers_table(ops: dict[str, object]) -> str:
    """The layers with their shapes and schedules; a stored schedule's footnote says which CPU it was
    searched on and whether that is this one."""
    lines = [("| layer | shape (C -> K, kernel, input, stride, groups) | MFLOP | loopopt fp32 schedule | "
             "loopopt int8 schedule |"), "|---|---|---|---|---|"]
    footnotes: dict[str, int] = {}

    def cell(name: str) -> str:
        if name == PRESET:
            return f"{name} (preset)"
        stored = stored_schedule(name)
        path = stored.path.relative_to(ROOT) if stored.path.is_relative_to(ROOT) else stored.path
        return f"{name} [{footnotes.setdefault(f'{stored.summary()} ({path})', len(footnotes) + 1)}]"
    for layer, op in ops.items():
        (kh, kw), (sh, _) = op.kernel_size, op.stride
        shape = (f"{op.in_channels} -> {op.out_channels}, {kh}x{kw}, {op.height}x{op.width}, "
                 f"s{sh}, g{op.groups}")
        lines.append(f"| {layer} | {shape} | {op.flops / 1e6:.1f} | {cell(stored_or_preset(layer))} | "
                     f"{cell(stored_or_preset(layer + '.int8'))} |")
    return "\n".join(lines + [""] + [f"- [{n}] {text}" for text, n in footnotes.items()])


def machine_text(isa: str, others: float | None) -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown CPU")
    from loopopt.targets.x86.isa import cpu_flags
    vnni = "avx512_vnni" in cpu_flags()
    peak8 = int8_peak(isa)
    unavailable = "- (`lo.peak_gflops(isa, dtype=\"int8\")` is not available yet)"
    peak8_text = f"{peak8:.1f} GOP/s" if peak8 else unavailable
    return (f"Machine: {model}, {os.cpu_count()} cores, "
            f"ISA `{isa}` (AVX-512 VNNI: {'yes' if vnni else 'no'}); measured one-core peaks: fp32 "
            f"{lo.peak_gflops(isa):.1f} GFLOP/s (the package's FMA loop), int8 {peak8_text}. "
            f"Other processes used {_fmt(None if others is None else 100 * others, '.0f')}% of the machine's "
            f"CPU time during the run (/proc/stat less this process); such work makes the timings noisy, the "
            f"2-thread ones most (OpenMP threads that spin at a barrier while the other core is taken can "
            f"turn a 1 ms call into 16-32 ms).")


def versions_text(ort_int8: str = EXACT) -> str:
    """The peers' versions, onnxruntime's with the session options of int8 mode ``ort_int8``."""
    found = []
    for module in ("torch", "onnxruntime", "onnx"):
        try:
            found.append(f"{module} {__import__(module).__version__}")
        except Exception:  # noqa: BLE001  (a broken install is reported like a missing one)
            found.append(f"{module} not installed")
        else:
            found[-1] += f" ({options_text(ort_int8)})" if module == "onnxruntime" else ""
    return ", ".join(found)


def report(command: str, ops: dict, rows: list[Row], naive: list[Row], options: Options,
           others: float | None) -> str:
    isa = lo.available_isas()[0]
    budget = (f"{options.repeats} runs" if options.repeats
              else f"as many runs as fit in {options.budget} s (3 to 200)")
    best = [r for r in rows if r.precision == "fp32" and not r.peer]
    parts = [
        f"Produced on {datetime.date.today().isoformat()} ({time.strftime('%H:%M %Z')}) by\n\n"
        f"```\n{command}\n```\n",
        f"{machine_text(isa, others)} Peers: {versions_text()}. Batch 1, all in one process.",
        (f"Each case: warm-up calls, then the median of {budget}, each call timed alone with "
        f"`time.perf_counter` (loopopt through `lo.measure` on prepared buffers; the peers' calls include "
        f"their framework overhead and output allocation). Every output is checked against the float64 "
        f"reference (fp32: within 1e-4 of its largest magnitude; int8: within 2 LSB of the exact uint8 "
        f"output of loopopt.quant); an unverified row says so and is never the best peer. "
        f"% of peak = throughput / (threads x one-core peak). \"speed vs best peer\" = the fastest "
        f"verified peer's median / this median (on loopopt's rows: the ratio loopopt / best reference): "
        f"above 1 is faster than every peer in that layer and thread count. A median more than {NOISY}x "
        f"the fastest run is marked noisy. "
        f"PyTorch's fp32 backend is in the note (Mkldnn = oneDNN, Slow2d = im2col + MKL GEMM, which "
        f"PyTorch picks for 1x1 convolutions on one thread). All int8 implementations get the same "
        f"quantized tensors: uint8 activations per tensor, int8 symmetric weights per output channel, "
        f"int32 bias, uint8 output."),
        "### Layers\n\n" + layers_table(ops),
        "### fp32\n\n" + results_table(rows, "fp32"),
        "### int8\n\n" + results_table(rows, "int8"),
    ]
    if any(r.implementation.startswith("PyTorch") and r.precision == "int8" and not r.verified for r in rows):
        parts.append(SATURATION)
    if naive:
        parts.append("### loopopt: best schedule vs naive, 1 thread\n\n" + naive_table(best, naive))
    return "\n\n".join(parts)


def write_section(text: str, section: str = SECTION) -> None:
    """Replace ``section`` of docs/benchmarks.md (append it if missing), nothing else."""
    doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    block = f"{section}\n\n{text}\n\n"
    match = re.search(rf"^{re.escape(section)}$", doc, re.MULTILINE)
    if match is None:
        DOC.write_text(doc.rstrip("\n") + "\n\n\n" + block)
        return
    following = re.search(r"^## ", doc[match.end():], re.MULTILINE)
    end = match.end() + following.start() if following else len(doc)
    DOC.write_text(doc[:match.start()] + block + doc[end:])


# --- main ----------------------------------------------------------------------------------------

def run_layer(layer: str, options: Options) -> tuple[object, list[Row], Row | None]:
    op = lo.get_layer(layer)
    data = LayerData.make(op)
    peak32 = lo.peak_gflops(lo.available_isas()[0])
    try:
        fp32, naive = loopopt_fp32(layer, op, options)
    except Exception as err:  # noqa: BLE001  (a code generator change under way must not stop the peers' runs)
        fp32, naive = [Row(layer, "fp32", n, "loopopt best", None, op.flops, peak32,
                           note=f"failed: {first_line(err)}") for n in options.threads], None
    int8 = loopopt_int8(layer, data, options)
    peak8 = next((r.peak for r in int8 if r.peak is not None), int8_peak(lo.available_isas()[0]))
    rows = []
    for threads in options.threads:
        rows += [r for r in fp32 if r.threads == threads]
        rows += [naive] if naive and threads == 1 else []
        rows += peer_rows(layer, data, "fp32", threads, peak32, options)
        rows += [r for r in int8 if r.threads == threads]
        rows += peer_rows(layer, data, "int8", threads, peak8, options)
    return op, rows, naive


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, Options]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default=",".join(LAYERS),
                        help="comma-separated layer names (loopopt layers)")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--repeats", type=int,
                        help="timed runs per case (default: as many as fit in --budget)")
    parser.add_argument("--budget", type=float, default=0.5,
                        help="seconds of timed runs per case (default 0.5)")
    parser.add_argument("--quick", action="store_true", help="a quick try-out: 0.1 s per case")
    parser.add_argument("--write", action="store_true", help="record the results in docs/benchmarks.md")
    args = parser.parse_args(argv)
    layers = [name for name in args.layers.split(",") if name]
    for name in layers:
        try:
            lo.get_layer(name)
        except ValueError as err:
            parser.error(str(err))
    args.layers = layers
    try:
        threads = tuple(int(n) for n in args.threads.split(",") if n)
    except ValueError:
        parser.error(f"--threads takes comma-separated integers, got {args.threads!r}")
    if not threads or min(threads) < 1:
        parser.error(f"--threads needs thread counts >= 1, got {args.threads!r}")
    if args.repeats is not None and args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    return args, Options(threads, args.repeats, 0.1 if args.quick else args.budget)


def main(argv: list[str] | None = None) -> None:
    args, options = parse_args(argv)
    command = command_line(__file__, argv)
    warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
    cpu_start = cpu_seconds()
    ops, rows, naive = {}, [], []
    for layer in args.layers:
        start = time.perf_counter()
        op, layer_rows, slow = run_layer(layer, options)
        ops[layer] = op
        rows += layer_rows
        naive += [slow] if slow else []
        print(f"{layer}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
        for row in layer_rows:
            timed = f"{row.median * 1e3:9.3f} ms" if row.median is not None else "        -   "
            print(f"  {row.precision} {row.threads}T {row.implementation:28} {timed}  {row.note}",
                  file=sys.stderr, flush=True)
    text = report(command, ops, rows, naive, options, others_share(cpu_start))
    print(f"{SECTION}\n\n{text}")
    if args.write:
        write_section(text)


if __name__ == "__main__":
    main()
