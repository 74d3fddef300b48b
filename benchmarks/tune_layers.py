"""Search the stored best fp32 schedule of each benchmarked layer and write it to ``schedules/``.

Run ``python benchmarks/tune_layers.py [--layers a,b] [--write]``. For every layer the search
tries channels-last register-blocked schedules over a grid of output blocks (``ow`` columns x
``k`` channels) and two loop structures:

* ``dense``: ``k_o, oh, ow_o`` outside, the reduction ``kh, kw, c`` around the block (each
  input value is broadcast to every output-channel vector of the block);
* ``depthwise``: ``oh, ow_o, k_o`` outside (a pixel's channels are consumed together), the
  reduction ``c, kh, kw`` with ``kh, kw`` unrolled so that neighbouring taps share loads.

Each candidate is compiled, verified and timed on one thread; the fastest (by minimum time,
the figure least disturbed by other processes) gets ``parallel("oh")`` for multi-threaded
runs and, with ``--write``, is saved as ``schedules/<layer>.toml``.
"""
from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import loopopt as lo

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("resnet50.conv2_x", "resnet50.conv3_x", "resnet50.conv4_x", "resnet50.conv2_x.reduce",
          "resnet50.conv1", "mobilenetv1.block3.depthwise", "mobilenetv2.block2.depthwise",
          "mobilenetv2.block3.depthwise", "mobilenetv2.block2.project")
STRUCTURES = {  # name: (outer loops, reduction loops, unrolled reduction loops)
    "dense": (("k_o", "oh", "ow_o"), ("kh", "kw", "c"), ()),
    "depthwise": (("oh", "ow_o", "k_o"), ("c", "kh", "kw"), ("kh", "kw")),
}
OW_BLOCKS = (4, 6, 7, 8, 14)
K_BLOCKS = (16, 32, 64)
MAX_ACCUMULATORS = 28          # of the 32 AVX-512 registers, leave room for operands


def candidate(op: lo.Conv2d, ow: int, k: int, structure: str) -> lo.Schedule:
    """The register-blocked channels-last schedule of ``op`` with an ``ow x k`` output block."""
    outer, reduction, unrolled = STRUCTURES[structure]
    s = (lo.Schedule(op).layout("I", "NHWC").layout("W", "HWIO").layout("O", "NHWC")
         .tile(ow=min(ow, op.out_width), k=min(k, op.out_channels))
         .reorder(*outer, *reduction).vectorize("k_i"))
    for loop in unrolled:
        s = s.unroll(loop)
    return s.register_block(reduction[0])


def search(layer: str, budget: float) -> tuple[float, tuple, lo.Schedule]:
    """(best minimum time, its parameters, its schedule) over the grid, printing every candidate."""
    op = lo.get_layer(layer)
    best = None
    for ow, k, structure in itertools.product(OW_BLOCKS, K_BLOCKS, STRUCTURES):
        accumulators = min(ow, op.out_width) * -(-min(k, op.out_channels) // 16)
        if accumulators > MAX_ACCUMULATORS:
            continue
        schedule = candidate(op, ow, k, structure)
        timing = lo.measure(schedule.compile("avx512"), budget=budget)
        if not timing.verified:
            raise AssertionError(f"{layer} {ow}x{k} {structure} does not match the reference")
        print(f"  {layer:32s} ow={ow:2d} k={k:2d} {structure:9s} min {timing.min * 1e3:8.3f} ms "
              f"{op.flops / timing.min / 1e9:6.1f} GFLOP/s", flush=True)
        if best is None or timing.min < best[0]:
            best = (timing.min, (ow, k, structure), schedule)
    return best


def describe(layer: str, ow: int, k: int, structure: str, seconds: float) -> str:
    op = lo.get_layer(layer)
    outer, reduction, unrolled = STRUCTURES[structure]
    vectors = min(ow, op.out_width) * -(-min(k, op.out_channels) // 16)
    shared = f" {' and '.join(unrolled)} unrolled so neighbouring taps share input loads;" if unrolled else ""
    return (f"Found by benchmarks/tune_layers.py ({op.flops / seconds / 1e9:.1f} GFLOP/s on one core, AVX-512): "
            f"channels-last, a {ow} (ow) x {k} (k) output block in {vectors} vector accumulators kept "
            f"across {', '.join(reduction)};{shared} {', '.join(outer)} outside; weights packed to HWIO "
            f"once, outside the timed call; output rows split over threads.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default=",".join(LAYERS), help="comma-separated catalog layer names")
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of timing per candidate")
    parser.add_argument("--write", action="store_true", help="save the winners to schedules/<layer>.toml")
    args = parser.parse_args()
    if "avx512" not in lo.available_isas():
        raise SystemExit("the search targets AVX-512, which this CPU lacks")
    for layer in [name for name in args.layers.split(",") if name]:
        seconds, (ow, k, structure), schedule = search(layer, args.budget)
        print(f"best {layer}: ow={ow} k={k} {structure}, {seconds * 1e3:.3f} ms", flush=True)
        if args.write:
            path = ROOT / "schedules" / f"{layer}.toml"
            lo.save_schedule(schedule.parallel("oh"), path, description=describe(layer, ow, k, structure, seconds))


if __name__ == "__main__":
    main()
