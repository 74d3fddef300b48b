"""Search the stored best fp32 (or int8) schedule of each benchmarked layer and write it to ``schedules/``.

Run ``python benchmarks/tune_layers.py [--int8] [--layers a,b] [--write]``. For every layer the
search tries channels-last register-blocked schedules over one grid: output blocks (``ow``
columns x ``k`` channels) times loop structures. fp32 (weights packed to HWIO):

* ``dense``: ``k_o, oh, ow_o`` outside, the reduction ``kh, kw, c`` around the block (each
  input value is broadcast to every output-channel vector of the block);
* ``depthwise``: ``oh, ow_o, k_o`` outside (a pixel's channels are consumed together), the
  reduction ``c, kh, kw`` with ``kh, kw`` unrolled so that neighbouring taps share loads.

int8 (``--int8``; the benchmark's quantization: uint8 activations, int8 weights per output
channel, uint8 output) keeps ``depthwise`` for depthwise layers (bytes widened to int32 lanes:
one input channel per group leaves no run of input channels for a dot instruction) and on the
other layers searches two VNNI structures: weights packed to ``OIHW16o4i``, ``c`` split by 4
(clamped to fewer channels, zero-padded to 4 by the weight layout) with ``c_i`` the innermost
reduction loop, so that each ``vpdpbusd`` consumes it, and the rest of the reduction ordered
``c_o, kh, kw`` (``dot``) or ``kh, kw, c_o`` (``dot-taps``). The epilogue (requantization) is
fused into the block's store; the weight compensation is computed when the weights are packed
(``--compensation packed,kernel`` searches both).

Each candidate is compiled, verified and timed on one thread; the fastest (by minimum time,
the figure least disturbed by other processes) is re-measured. fp32 winners get
``parallel("oh")`` for multi-threaded runs; int8 winners get the output rows moved outermost
and split over threads only where that variant is no slower on one thread (within 2%,
``--parallel-cost``; an OpenMP loop nested inside ``k_o`` measured 2-20% slower). With ``--write``
the winner is saved as ``schedules/<layer>.toml`` (int8: ``schedules/<layer>.int8.toml``).
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import loopopt as lo
from loopopt.codegen.isa import available_int_isas
from loopopt.machine import this_cpu

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("resnet50.conv2_x", "resnet50.conv3_x", "resnet50.conv4_x", "resnet50.conv2_x.reduce",
          "resnet50.conv1", "mobilenetv1.block3.depthwise", "mobilenetv2.block2.depthwise",
          "mobilenetv2.block3.depthwise", "mobilenetv2.block2.project")
OW_BLOCKS = (4, 6, 7, 8, 14)
K_BLOCKS = (16, 32, 64)
MAX_ACCUMULATORS = 28          # of the 32 AVX-512 registers, leave room for operands
LANES = 16                     # fp32 / int32 lanes of an AVX-512 vector
DOT = 4                        # input channels per int32 lane of vpdpbusd
REMEASURE = 3                  # the winner's minimum is the best of this many measurements
PARALLEL_COST = 1.02           # int8: the parallel variant is kept if its minimum is within 2%
INT8_SPEC = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="uint8")


@dataclass(frozen=True)
class Structure:
    """A loop structure around the ``ow x k`` register block."""

    outer: tuple[str, ...]         # loops outside the block, outermost first
    reduction: tuple[str, ...]     # reduction loops the block is kept across, outermost first
    unrolled: tuple[str, ...] = ()
    weights: str = "HWIO"          # weight storage layout
    dot: bool = False              # c split by 4 into c_o, c_i for the dot instruction
    depthwise: bool | None = None  # only depthwise layers (True), only the others (False), any (None)

    def applies(self, op: lo.Conv2d) -> bool:
        depthwise = op.groups > 1 and op.groups == op.in_channels
        return self.depthwise is None or self.depthwise == depthwise


DEPTHWISE = Structure(("oh", "ow_o", "k_o"), ("c", "kh", "kw"), ("kh", "kw"))
VNNI = {"weights": "OIHW16o4i", "dot": True, "depthwise": False}


@dataclass(frozen=True)
class Mode:
    """What is searched: fp32 kernels or integer (VNNI) kernels."""

    name: str
    structures: dict
    compensations: tuple = (None,)  # Schedule.compensation choices (None: not a quantized op)

    def op(self, layer: str) -> lo.Conv2d:
        op = lo.get_layer(layer)
        return lo.accuracy.quantized_op(op, INT8_SPEC) if self.name == "int8" else op

    @property
    def suffix(self) -> str:
        return "" if self.name == "fp32" else f".{self.name}"

    def rate(self, op: lo.Conv2d, seconds: float) -> str:
        rate = op.flops / seconds / 1e9
        if self.name == "fp32":
            return f"{rate:.1f} GFLOP/s"
        return f"{rate:.0f} GOP/s = {100 * rate / lo.peak_gflops('avx512', 'int8'):.0f}% of the vpdpbusd peak"


MODES = {
    "fp32": Mode("fp32", {"dense": Structure(("k_o", "oh", "ow_o"), ("kh", "kw", "c")),
                          "depthwise": DEPTHWISE}),
    "int8": Mode("int8", {"dot": Structure(("k_o", "oh", "ow_o"), ("c_o", "kh", "kw", "c_i"), **VNNI),
                          "dot-taps": Structure(("k_o", "oh", "ow_o"), ("kh", "kw", "c_o", "c_i"), **VNNI),
                          "depthwise": dataclasses.replace(DEPTHWISE, depthwise=True)},
                 ("packed",)),
}


def candidate(op: lo.Conv2d, ow: int, k: int, structure: Structure,
              compensation: str | None = None) -> lo.Schedule:
    """The register-blocked channels-last schedule of ``op`` with an ``ow x k`` output block."""
    s = lo.Schedule(op).layout("I", "NHWC").layout("W", structure.weights).layout("O", "NHWC")
    if structure.dot:
        s = s.split("c", min(DOT, op.in_channels // op.groups))
    s = (s.tile(ow=min(ow, op.out_width), k=min(k, op.out_channels))
         .reorder(*structure.outer, *structure.reduction).vectorize("k_i"))
    for loop in structure.unrolled:
        s = s.unroll(loop)
    s = s.register_block(structure.reduction[0])
    # packed is the default: no step, so the file also applies to float ops
    return s.compensation(compensation) if compensation not in (None, "packed") else s


def parallel_rows(schedule: lo.Schedule) -> lo.Schedule:
    """``schedule`` with the output rows outermost and split over threads."""
    outermost = next(loop.name for loop in schedule.loops if loop.extent > 1 or loop.name == "oh")
    if outermost != "oh":
        schedule = schedule.reorder("oh", outermost)
    return schedule.parallel("oh")


def grid(op: lo.Conv2d, mode: Mode):
    """(parameters, schedule) of every candidate of ``mode`` that applies to ``op``."""
    for ow, k, (name, structure), compensation in itertools.product(
            OW_BLOCKS, K_BLOCKS, mode.structures.items(), mode.compensations):
        accumulators = min(ow, op.out_width) * -(-min(k, op.out_channels) // LANES)
        if structure.applies(op) and accumulators <= MAX_ACCUMULATORS:
            yield (ow, k, name, compensation), candidate(op, ow, k, structure, compensation)


def minimum(schedule: lo.Schedule, budget: float, what: str) -> float:
    """The minimum one-thread time of ``schedule``'s AVX-512 kernel, which must be verified."""
    kernel = schedule.compile("avx512")
    if schedule.parallel_loop is not None:
        kernel.set_threads(1)
    timing = lo.measure(kernel, budget=budget)
    if not timing.verified:
        raise AssertionError(f"{what} does not match the reference")
    return timing.min


def search(layer: str, mode: Mode, budget: float) -> tuple[float, tuple, lo.Schedule]:
    """(best minimum time, its parameters, its schedule) over the grid, printing every candidate."""
    op = mode.op(layer)
    best = None
    for params, schedule in grid(op, mode):
        seconds = minimum(schedule, budget, f"{layer} {params}")
        ow, k, structure, compensation = params
        print(f"  {layer:32s} ow={ow:2d} k={k:2d} {structure:9s} {compensation or '':6s} min "
              f"{seconds * 1e3:8.3f} ms {mode.rate(op, seconds)}", flush=True)
        if best is None or seconds < best[0]:
            best = (seconds, params, schedule)
    seconds, params, schedule = best
    seconds = min([seconds] + [minimum(schedule, budget, layer) for _ in range(REMEASURE - 1)])
    return seconds, params, schedule


def with_threads(layer: str, mode: Mode, seconds: float, schedule: lo.Schedule, budget: float,
                 cost: float = PARALLEL_COST) -> tuple[lo.Schedule, str]:
    """The schedule to store and what it says about threads. fp32: ``parallel("oh")``; int8: the
    output rows outermost and parallel if that is at most ``cost`` times slower on one thread, else
    no parallel loop."""
    if mode.name == "fp32":
        return schedule.parallel("oh"), "output rows split over threads"
    variant = parallel_rows(schedule)
    parallel = min(minimum(variant, budget, layer) for _ in range(REMEASURE))
    print(f"  {layer:32s} output rows outermost and parallel: min {parallel * 1e3:8.3f} ms", flush=True)
    if parallel <= cost * seconds:
        slower = parallel > PARALLEL_COST * seconds
        extra = f"{100 * (parallel / seconds - 1):.0f}% slower" if slower else "no cost"
        return variant, f"output rows outermost, split over threads ({extra} on one thread)"
    return schedule, (f"no parallel loop (output rows outermost and split over threads measured "
                      f"{100 * (parallel / seconds - 1):.0f}% slower on one thread)")


def describe(layer: str, mode: Mode, params: tuple, seconds: float, threads: str) -> str:
    op = mode.op(layer)
    ow, k, name, compensation = params
    structure = mode.structures[name]
    vectors = min(ow, op.out_width) * -(-min(k, op.out_channels) // LANES)
    shared = (f" {' and '.join(structure.unrolled)} unrolled so neighbouring taps share input loads;"
              if structure.unrolled else "")
    if mode.name == "fp32":
        return (f"Found by benchmarks/tune_layers.py ({mode.rate(op, seconds)} on one core, AVX-512): "
                f"channels-last, a {ow} (ow) x {k} (k) output block in {vectors} vector accumulators kept "
                f"across {', '.join(structure.reduction)};{shared} {', '.join(structure.outer)} outside; "
                f"weights packed to HWIO once, outside the timed call; {threads}.")
    arithmetic = ("c split by 4 so each vpdpbusd consumes c_i (4 input channels per int32 lane, zero-padded "
                  "by the weight layout)" if structure.dot else
                  "bytes widened to int32 lanes (one input channel per group: no dot instruction)")
    return (f"Found by benchmarks/tune_layers.py --int8 (AVX-512 VNNI, one core of {this_cpu().model}, one thread, "
            f"uint8 x int8 per-channel -> uint8: {seconds * 1e3:.3f} ms, {mode.rate(op, seconds)}): NHWC "
            f"activations and output, weights packed to {structure.weights} once, outside the timed call; "
            f"{arithmetic}; a {ow} (ow) x {k} (k) output block in {vectors} int32 vector accumulators kept "
            f"across {', '.join(structure.reduction)} with the requantization fused into its store;{shared} "
            f"{', '.join(structure.outer)} outside; weight compensation {compensation}; {threads}.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default=",".join(LAYERS), help="comma-separated catalog layer names")
    parser.add_argument("--int8", action="store_true", help="search quantized (VNNI) kernels instead of fp32")
    parser.add_argument("--compensation", default="packed",
                        help="int8: comma-separated Schedule.compensation choices to search (packed, kernel)")
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of timing per candidate")
    parser.add_argument("--parallel-cost", type=float, default=PARALLEL_COST,
                        help="int8: keep the parallel variant if its one-thread minimum is at most this "
                             f"many times the serial one (default {PARALLEL_COST})")
    parser.add_argument("--write", action="store_true",
                        help="save the winners to schedules/<layer>.toml (--int8: <layer>.int8.toml)")
    args = parser.parse_args()
    mode = MODES["int8" if args.int8 else "fp32"]
    if args.int8:
        mode = dataclasses.replace(mode, compensations=tuple(args.compensation.split(",")))
    isas = available_int_isas() if args.int8 else lo.available_isas()
    if "avx512" not in isas:
        target = "AVX-512 VNNI" if args.int8 else "AVX-512"
        raise SystemExit(f"the {mode.name} search targets {target}, which this CPU lacks")
    for layer in [name for name in args.layers.split(",") if name]:
        seconds, params, schedule = search(layer, mode, args.budget)
        schedule, threads = with_threads(layer, mode, seconds, schedule, args.budget, args.parallel_cost)
        print(f"best {layer} {mode.name}: ow={params[0]} k={params[1]} {params[2]}, {seconds * 1e3:.3f} ms, "
              f"{mode.rate(mode.op(layer), seconds)}; {threads}", flush=True)
        if args.write:
            path = ROOT / "schedules" / f"{layer}{mode.suffix}.toml"
            lo.save_schedule(schedule, path, description=describe(layer, mode, params, seconds, threads),
                             isa="avx512", threads=1)
            if params[2] in mode.structures and mode.structures[params[2]].dot:
                # a dot split clamped to fewer input channels (conv1's 3) is stored as 4: loading clamps it
                # again (the same kernel), and on other convs the file still selects the dot instruction
                text = path.read_text()
                path.write_text(re.sub(r'split = \["c", [123]\]', f'split = ["c", {DOT}]', text))


if __name__ == "__main__":
    main()
