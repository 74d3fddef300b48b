"""Search the stored best fp32 (or int8) schedule of each benchmarked layer with ``lo.tune`` and write it
to this CPU's ``schedules/<cpu key>/``.

Run ``python benchmarks/tune_layers.py [--int8] [--layers a,b] [--trials N] [--log FILE] [--write]``. For
every layer ``lo.tune`` searches its register-blocked candidates (output blocks of ``ow`` columns x ``k``
channels in vector registers, reduction orders, channels-last layouts, weights plain / packed / in VNNI
dot groups for int8, tap dots for int8 convs with few channels per group, outer loop orders, unrolling:
see docs/reference/tune.md) on this CPU's widest SIMD ISA (``--isa``: AVX-512, else AVX2; int8: AVX-512
VNNI, else AVX2's emulated dot), one thread, each candidate compiled, verified and timed in a worker
process (the direct algorithm only: a stored layer schedule is a register-blocked SIMD schedule, its
blocks sized for that ISA's vectors and registers, the ISA recorded in its provenance); with ``--log``
every trial goes to that SQLite tuning log and a rerun skips what it holds. int8 (``--int8``) is the
benchmark's quantization: uint8 activations, int8 weights per output channel, uint8 output; the weight
compensation is computed when the weights are packed.

The winner (by minimum time, the figure least disturbed by other processes) is re-measured. Winners get
the output rows moved outermost and split over threads only where that variant is no slower on one thread
(within 2%, ``--parallel-cost``; an OpenMP loop nested inside ``k_o`` measured 2-20% slower for int8, and
an fp32 depthwise winner with ``oh`` inside ``ow_o``, ``parallel("oh")`` where it was, 40% slower).

With ``--write`` the winner goes to this CPU's directory, ``schedules/<cpu key>/<layer>.toml`` (int8:
``<layer>.int8.toml``; the key is ``loopopt.machine.cpu_key()``), so stored schedules stay at least as fast
as before: first the winner and the schedule the lookup returns for that name today (this CPU's, else the
generic file, else another CPU's) are timed together, one thread, their runs interleaved, and compared by
their minimum time; both are printed, and the winner is written only if it is at least as fast (or with
``--force``). Where the stored schedule is faster and is not this CPU's (another CPU's, or the generic
file: e.g. an AVX-512 search's on an AVX2 CPU), it is written to this CPU's directory instead, its
description saying where it comes from and both minima: this CPU's directory holds what this CPU
measured best, and the lookup's note no longer calls it another CPU's. A new CPU directory is added to
``pyproject.toml``'s data-files, so it is installed. New files join the generated-C corpus
(``tests/generated_corpus.py`` reads every file under ``schedules/``): record it again with
``python tests/test_generated_c.py --record``. ``--dir`` writes under another directory instead of
``schedules/`` (e.g. to try the script out).

``--isa auto`` searches on the best ISA instead: on a CPU with AMX an int8 search then also has the
AMX tile candidates of ``lo.tune`` (blocks of 16 or 32 pixels x channels, their order, gathered
patches); an AMX winner is stored with ``isa = "amx"`` in its provenance (``lo.stored_isa``, which
``bench_layers.py``, ``bench_amx.py`` and ``loopopt compare`` compile it with) and no parallel loop.
"""
from __future__ import annotations

import argparse
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import loopopt as lo
from loopopt.machine import cpu_key, this_cpu
from loopopt.schedule_file import list_schedules, stored_schedule
from loopopt.targets.x86.isa import ISAS, available_int_isas
from loopopt.targets.x86.tiles import tile_plan

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
DATA_FILES = "[tool.setuptools.data-files]"
LAYERS = ("resnet50.conv2_x", "resnet50.conv3_x", "resnet50.conv4_x", "resnet50.conv2_x.reduce",
          "resnet50.conv1", "mobilenetv1.block3.depthwise", "mobilenetv2.block2.depthwise",
          "mobilenetv2.block3.depthwise", "mobilenetv2.block2.project")
DOT = 4                        # input channels per int32 lane of vpdpbusd (and AVX2's emulated dot)
REMEASURE = 3                  # the winner's minimum is the best of this many measurements
ROUNDS = 7                     # winner vs stored schedule: runs interleaved over this many rounds
PARALLEL_COST = 1.02           # the parallel variant is kept if its minimum is within 2%
ISA_NAMES = {"avx512": "AVX-512", "avx2": "AVX2"}
DOT_NAMES = {"avx512": "vpdpbusd", "avx2": "emulated dot (lo_avx2_dpbusd)"}
INT8_SPEC = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="uint8")


@dataclass(frozen=True)
class Mode:
    """What is searched: fp32 kernels or integer (dot) kernels."""

    name: str

    def op(self, layer: str) -> lo.Conv2d:
        op = lo.get_layer(layer)
        return op.with_quant(INT8_SPEC) if self.name == "int8" else op

    @property
    def suffix(self) -> str:
        return "" if self.name == "fp32" else f".{self.name}"

    def isas(self) -> tuple[str, ...]:
        """The SIMD ISAs this CPU runs the mode's kernels on, widest first."""
        return available_int_isas() if self.name == "int8" else lo.available_isas()

    def rate(self, op: lo.Conv2d, seconds: float, isa: str) -> str:
        rate = op.flops / seconds / 1e9
        if self.name == "fp32":
            return f"{rate:.1f} GFLOP/s"
        percent = 100 * rate / lo.peak_gflops(isa, "int8")
        return f"{rate:.0f} GOP/s = {percent:.0f}% of the {DOT_NAMES[isa]} peak"


def parallel_rows(schedule: lo.Schedule) -> lo.Schedule:
    """``schedule`` with the output rows outermost and split over threads."""
    outermost = next(loop.name for loop in schedule.loops if loop.extent > 1 or loop.name == "oh")
    if outermost != "oh":
        schedule = schedule.reorder("oh", outermost)
    return schedule.parallel("oh")


def one_thread(schedule: lo.Schedule, isa: str) -> lo.Kernel:
    """``schedule``'s kernel on ``isa`` (the search's SIMD ISA, or amx for an AMX tile winner), on one
    thread."""
    kernel = schedule.compile(isa)
    if schedule.parallel_loop is not None:
        kernel.set_threads(1)
    return kernel


def minimum(schedule: lo.Schedule, budget: float, what: str, isa: str) -> float:
    """The minimum one-thread time of ``schedule``'s kernel on ``isa``, which must be verified."""
    timing = lo.measure(one_thread(schedule, isa), budget=budget)
    if not timing.verified:
        raise AssertionError(f"{what} does not match the reference")
    return timing.min


def against_stored(name: str, op: lo.Conv2d, winner: lo.Schedule, budget: float, isa: str,
                   simd: str) -> tuple[float, float] | None:
    """Time ``winner`` (on ``isa``) and the schedule the lookup finds for ``name`` today (on
    ``stored_on(name, simd)``) together (one thread, runs interleaved over ROUNDS rounds, ``budget``
    seconds each), print both minima and return them (the stored one's infinite if it is not verified;
    None when nothing is stored under ``name``)."""
    if name not in list_schedules():
        print(f"  {name}: nothing stored under this name yet", flush=True)
        return None
    stored = stored_schedule(name)
    kernels = [one_thread(winner, isa), one_thread(lo.load_schedule(name, op), stored_on(name, simd))]
    new, old = lo.measure_all(kernels, budget=budget, rounds=ROUNDS, progress=False)
    for label, timing in (("new winner", new), (f"stored {stored.path}", old)):
        verdict = "" if timing.verified else "  NOT verified"
        print(f"  {name}: {label}: min {timing.min * 1e3:.3f} ms, median {timing.median * 1e3:.3f} ms over "
              f"{timing.repeats} runs{verdict}", flush=True)
    print(f"  {name}: the stored one was {stored.summary()}", flush=True)
    if not new.verified:
        raise AssertionError(f"the winner of {name} does not match the reference")
    return new.min, old.min if old.verified else math.inf


def stored_on(name: str, simd: str) -> str:
    """The ISA the stored schedule ``name`` runs on here: its provenance's where this CPU has it (an AMX
    tile schedule: amx), else ``simd``."""
    isa = lo.stored_isa(name)
    return simd if isa == "auto" else isa


def ship(directory: Path) -> None:
    """Add the schedule ``directory`` (a subdirectory of ``schedules/``) to pyproject.toml's data-files,
    so ``pip install`` installs it, unless it is there already."""
    relative = directory.relative_to(ROOT).as_posix()
    line = f'"share/loopopt/{relative}" = ["{relative}/*.toml"]'
    text = PYPROJECT.read_text()
    if line in text:
        return
    head, found, tail = text.partition(DATA_FILES + "\n")
    if not found:
        raise SystemExit(f"{PYPROJECT} has no {DATA_FILES} table to add {relative} to")
    entries, rest = tail.split("\n\n", 1)
    PYPROJECT.write_text(f"{head}{DATA_FILES}\n{entries}\n{line}\n\n{rest}")
    print(f"added {relative} to the data-files of {PYPROJECT}", flush=True)


def write(layer: str, mode: Mode, schedule: lo.Schedule, description: str, root: Path, isa: str) -> Path:
    """Save ``schedule`` (chosen on ``isa``) as ``root/<cpu key>/<layer><suffix>.toml`` (and ship that
    directory)."""
    directory = root / cpu_key()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{layer}{mode.suffix}.toml"
    lo.save_schedule(schedule, path, description=description, isa=isa, threads=1)
    if dict(schedule.layouts).get(schedule.op.inputs[1], "").endswith(f"{DOT}i"):     # VNNI dot groups
        # a dot split clamped to fewer input channels (conv1's 3) is stored as 4: loading clamps it
        # again (the same kernel), and on other convs the file still selects the dot instruction
        text = path.read_text()
        path.write_text(re.sub(r'split = \["c", [123]\]', f'split = ["c", {DOT}]', text))
    if directory.parent == ROOT / "schedules":
        ship(directory)
    return path


def keep(name: str, layer: str, mode: Mode, minima: tuple[float, float], root: Path, simd: str) -> Path:
    """Write the schedule the lookup finds for ``name`` (searched on another CPU or ISA), which beat this
    search's winner here (``minima``: the winner's and its minimum time), to this CPU's directory: what
    this CPU measured best, saying where it comes from."""
    stored = stored_schedule(name)
    isa = stored_on(name, simd)
    searched = f"{stored.cpu or 'an unrecorded CPU'}" + (f" for {stored.isa}" if stored.isa else "")
    before = tomllib.loads(stored.path.read_text()).get("description", "")
    flag = "" if mode.name == "fp32" else f" --{mode.name}"
    source = f"{stored.path.parent.name}/{stored.path.name}"
    description = (f"Kept by benchmarks/tune_layers.py{flag} from {source} (searched on {searched}): on one "
                   f"core of {this_cpu().model}, {ISA_NAMES.get(isa, isa)}, one thread, runs interleaved, "
                   f"its minimum {minima[1] * 1e3:.3f} ms beat this search's winner's "
                   f"{minima[0] * 1e3:.3f} ms. Its description there: {before}")
    return write(layer, mode, lo.load_schedule(name, mode.op(layer)), description, root, isa)


def search(layer: str, mode: Mode, budget: float, trials: int, log: str | None, isa: str,
           simd: str) -> tuple[float, dict, lo.Schedule]:
    """(best minimum time, its knobs, its schedule) found by ``lo.tune`` on ``isa`` among the direct
    schedules (register blocks on ``simd``, and with ``auto`` on a CPU with AMX also AMX tile schedules:
    knob ``isa = "amx"``), printing every trial."""
    result = lo.tune(mode.op(layer), trials=trials, isa=isa, log=log, budget=budget, progress=False,
                     algorithms="direct")
    print(result.table(), flush=True)
    best = next(t for t in result.trials if t.number == result.best_number)
    seconds = min([result.timing.min] + [minimum(result.best, budget, layer, winner_isa(best.knobs, simd))
                                         for _ in range(REMEASURE - 1)])
    return seconds, best.knobs, result.best


def winner_isa(knobs: dict, simd: str) -> str:
    """The ISA a winner's kernel runs on: ``amx`` for a tile schedule, else ``simd``."""
    return "amx" if knobs.get("isa") == "amx" else simd


def with_threads(layer: str, seconds: float, schedule: lo.Schedule, budget: float, isa: str,
                 cost: float = PARALLEL_COST) -> tuple[lo.Schedule, str]:
    """The schedule to store and what it says about threads: the output rows outermost and parallel if
    that is at most ``cost`` times slower on one thread, else no parallel loop."""
    if isa == "amx":
        return schedule, "no parallel loop (a one-thread AMX tile schedule)"
    variant = parallel_rows(schedule)
    parallel = min(minimum(variant, budget, layer, isa) for _ in range(REMEASURE))
    print(f"  {layer:32s} output rows outermost and parallel: min {parallel * 1e3:8.3f} ms", flush=True)
    if parallel <= cost * seconds:
        slower = parallel > PARALLEL_COST * seconds
        extra = f"{100 * (parallel / seconds - 1):.0f}% slower" if slower else "no cost"
        return variant, f"output rows outermost, split over threads ({extra} on one thread)"
    return schedule, (f"no parallel loop (output rows outermost and split over threads measured "
                      f"{100 * (parallel / seconds - 1):.0f}% slower on one thread)")


def describe_tiles(layer: str, mode: Mode, knobs: dict, schedule: lo.Schedule, seconds: float,
                   threads: str) -> str:
    """The description of an AMX tile winner."""
    op, shape = mode.op(layer), tile_plan(schedule).shape
    order = "channel blocks outside the pixel blocks" if knobs["channels_outer"] else "pixel blocks outside"
    gathered = (f"; the reduction dims fused (kh, kw, c): each output pixel's patch gathered into a buffer "
                f"inside the timed call, {len(shape.starts)} tile K-steps of {shape.chunk_bytes} bytes"
                if knobs.get("patches") else "")
    rate = op.flops / seconds / 1e9
    return (f"Found by benchmarks/tune_layers.py --int8 --isa auto with lo.tune (AMX tiles, one core of "
            f"{this_cpu().model}, one thread, uint8 x int8 per-channel -> uint8: {seconds * 1e3:.3f} ms, "
            f"{rate:.0f} GOP/s): NHWC output; output blocks of {knobs['pixel_block']} pixels x "
            f"{knobs['channel_block']} channels (int32 accumulator tiles) with the requantization fused at "
            f"the tile store, {order}{gathered}; weights packed in B tiles once, outside the timed call; "
            f"{threads}. Compile with isa='amx' (the provenance's isa; lo.stored_isa).")


def describe(layer: str, mode: Mode, knobs: dict, schedule: lo.Schedule, seconds: float, threads: str,
             isa: str) -> str:
    if knobs.get("isa") == "amx":
        return describe_tiles(layer, mode, knobs, schedule, seconds, threads)
    op = mode.op(layer)
    ow, k = knobs["pixel_block"], knobs["channel_block"]
    unrolled = [name for name, _ in knobs["unroll"]]
    shared = f" {' and '.join(unrolled)} unrolled;" if unrolled else ""
    weights = dict(schedule.layouts)[op.inputs[1]]
    outer = ", ".join(name for name in knobs["outer"] if schedule.loop(name).extent > 1)
    taps = knobs["weights"] == "taps"          # lanes along ow (codegen/taps.py), else along k
    lanes = ISAS[isa].lanes                    # fp32 and int32 lanes alike
    vectors = k * -(-ow // lanes) if taps else ow * -(-k // lanes)
    block = (f"a {ow} (ow) x {k} (k) output block in {vectors} vector accumulators kept across "
             f"{', '.join(knobs['reduction'])}")
    packed = f"weights packed to {weights} once, outside the timed call"
    if mode.name == "fp32":
        return (f"Found by benchmarks/tune_layers.py with lo.tune ({mode.rate(op, seconds, isa)} on one core "
                f"of {this_cpu().model}, {ISA_NAMES[isa]}): channels-last, {block};{shared} {outer} outside; "
                f"{packed}; {threads}.")
    dot = DOT_NAMES[isa]
    arithmetic = {"dot": f"c split by 4 so each {dot} consumes c_i (4 input channels per int32 lane, "
                         "zero-padded by the weight layout)",
                  "taps": f"a tap dot: each {dot} consumes 4 kw taps per int32 lane (kw split by 4 where "
                          "longer, zero-padded by the weight layout), the lanes along ow, the activations "
                          "spread from windows of input columns (codegen/taps.py)"}.get(
        knobs["weights"], "bytes widened to int32 lanes (no dot instruction)")
    name = "AVX-512 VNNI" if isa == "avx512" else ISA_NAMES[isa]
    return (f"Found by benchmarks/tune_layers.py --int8 with lo.tune ({name}, one core of "
            f"{this_cpu().model}, one thread, uint8 x int8 per-channel -> uint8: {seconds * 1e3:.3f} ms, "
            f"{mode.rate(op, seconds, isa)}): {'NCHW' if taps else 'NHWC'} activations and output, {packed}; "
            f"{arithmetic}; {block} "
            f"(int32) with the requantization fused into its store;{shared} {outer} outside; weight "
            f"compensation packed; {threads}.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default=",".join(LAYERS), help="comma-separated catalog layer names")
    parser.add_argument("--int8", action="store_true", help="search quantized (dot) kernels instead of fp32")
    parser.add_argument("--trials", type=int, default=64, help="measured candidates per layer (lo.tune)")
    parser.add_argument("--log", help="SQLite tuning log (lo.tune's log): trials are kept, reruns skip them")
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of timing per candidate")
    parser.add_argument("--parallel-cost", type=float, default=PARALLEL_COST,
                        help="keep the parallel variant if its one-thread minimum is at most this "
                             f"many times the serial one (default {PARALLEL_COST})")
    parser.add_argument("--write", action="store_true",
                        help="save each winner to schedules/<cpu key>/<layer>.toml (--int8: "
                             "<layer>.int8.toml) if it is at least as fast as the one stored under that name")
    parser.add_argument("--force", action="store_true",
                        help="with --write: save the winners even where the stored schedule is faster")
    parser.add_argument("--dir", type=Path, default=ROOT / "schedules",
                        help="with --write: the schedule directory to write under (default schedules/)")
    parser.add_argument("--isa", choices=("avx512", "avx2", "auto"),
                        help="the search's ISA: avx512 or avx2 (default: this CPU's widest), or auto (its "
                             "widest and, on a CPU with AMX, int8 and "
                             "bf16 ops also search AMX tile schedules, stored with isa = \"amx\")")
    args = parser.parse_args()
    mode = Mode("int8" if args.int8 else "fp32")
    simd = mode.isas()[0] if args.isa in (None, "auto") else args.isa
    if simd not in ISA_NAMES or simd not in mode.isas():
        raise SystemExit(f"the {mode.name} search needs AVX-512 or AVX2 ({', '.join(ISA_NAMES)}); this CPU "
                         f"runs {mode.name} kernels on {', '.join(mode.isas())}")
    for layer in [name for name in args.layers.split(",") if name]:
        seconds, knobs, schedule = search(layer, mode, args.budget, args.trials, args.log, args.isa or simd,
                                          simd)
        isa = winner_isa(knobs, simd)
        schedule, threads = with_threads(layer, seconds, schedule, args.budget, isa, args.parallel_cost)
        print(f"best {layer} {mode.name} ({isa}): ow={knobs['pixel_block']} k={knobs['channel_block']} "
              f"weights {knobs.get('weights', 'in B tiles')}, {seconds * 1e3:.3f} ms, "
              f"{mode.rate(mode.op(layer), seconds, simd)}; {threads}", flush=True)
        if not args.write:
            continue
        name = f"{layer}{mode.suffix}"
        minima = against_stored(name, mode.op(layer), schedule, args.budget, isa, simd)
        if minima is None or minima[0] <= minima[1] or args.force:
            description = describe(layer, mode, knobs, schedule, seconds, threads, isa)
            print(f"wrote {write(layer, mode, schedule, description, args.dir, isa)}", flush=True)
        elif stored_schedule(name).this_cpu:
            print(f"  {name}: not written: this CPU's stored schedule is faster (--force writes anyway)",
                  flush=True)
        else:
            kept = keep(name, layer, mode, minima, args.dir, simd)
            print(f"wrote {kept}: the stored schedule, faster here", flush=True)


if __name__ == "__main__":
    main()
