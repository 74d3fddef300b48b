"""Model vs measured: rank correlation of the kernel model (and of the reuse-distance energy) with time.

Run ``python benchmarks/bench_model.py`` (``--write`` records the result in the "Model vs measured"
section of docs/benchmarks.md; ``--json PATH`` saves every row; ``--times PATH`` takes the measured
times from such a file instead of measuring again, to evaluate a changed model on the same runs).

About 30 schedules of ResNet-50 conv2_x and 28 of ``Matmul(256, 256, 512)``: the ``lo.dataflows``
presets, the stored schedule of the layer, and variants (without ``register_block``, without
``vectorize``, other tile sizes, loop orders and vectorized loops). Every kernel is compiled for the
best ISA of this CPU, verified once and timed in two interleaved rounds on one thread (``lo.measure``
with a small budget); its time is the median of both rounds' runs. For each op the script prints
the Spearman rank correlation of the measured time with the kernel model's ``predicted_seconds``
and with the reuse-distance hierarchy's predicted energy.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import loopopt as lo  # noqa: E402
from loopopt import dataflows as df  # noqa: E402
from loopopt.schedule import Schedule  # noqa: E402
from loopopt.tune.fit import spearman  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## Model vs measured"
BUDGET = 0.15          # seconds of timed runs per schedule and round
ROUNDS = 2


def without(schedule: Schedule, *primitives: str) -> Schedule:
    """``schedule`` rebuilt from its steps minus those of ``primitives`` (e.g. "register_block")."""
    rebuilt = Schedule(schedule.op)
    for step in schedule.steps:
        if step.primitive not in primitives:
            rebuilt = getattr(rebuilt, step.primitive)(*step.args, **dict(step.kwargs))
    return rebuilt


SHORT = {"register_block": "rb", "vectorize": "vec"}
RB, VEC = ("register_block",), ("vectorize",)
BOTH = ("register_block", "vectorize")


def variants(name: str, schedule: Schedule, *removed: tuple[str, ...]) -> dict[str, Schedule]:
    """``schedule`` and, for each tuple of primitives in ``removed``, it without them (named e.g.
    ``name -rb -vec``)."""
    cases = {name: schedule}
    for primitives in removed:
        cases[" -".join([name] + [SHORT[p] for p in primitives])] = without(schedule, *primitives)
    return cases


def channels_last(schedule: Schedule) -> Schedule:
    """NHWC activations and HWIO weights."""
    return schedule.layout("I", "NHWC").layout("W", "HWIO").layout("O", "NHWC")


def conv_schedules(op: lo.Conv2d) -> dict[str, Schedule]:
    """About 30 schedules of a 3x3 convolution (written for resnet50.conv2_x)."""
    cases = {name: preset(op) for name, preset in df.PRESETS.items()}
    cases |= variants("stored", lo.load_schedule("resnet50.conv2_x", op), RB, VEC, BOTH)
    cases |= variants("os k64 ow7", df.output_stationary(op, k=64, ow=7), RB, VEC)
    cases |= variants("output_stationary", cases.pop("output_stationary"), RB)
    for k, ow in ((16, 4), (16, 14), (32, 4), (32, 7)):
        cases[f"os k{k} ow{ow}"] = df.output_stationary(op, k=k, ow=ow)
    cases["os k16 ow8 at kh"] = (without(df.output_stationary(op), "register_block")
                                 .reorder("kh", "kw", "c").register_block("kh"))
    cases["os nhwc ow16 k4 vec ow"] = (channels_last(Schedule(op)).tile(k=4, ow=16)
                                       .vectorize("ow_i").register_block("c"))
    cases["os nchw ow16 k4 vec ow"] = (Schedule(op).tile(k=4, ow=16)
                                       .vectorize("ow_i").register_block("c"))
    cases["weight_stationary k64"] = df.weight_stationary(op, k=64)
    cases["input_stationary k64"] = df.input_stationary(op, k=64)
    cases |= variants("tiled k16 c8 ow8", df.tiled(op, k=16, c=8, ow=8), VEC)
    cases["implicit_gemm m4 k64"] = df.implicit_gemm(op, m=4, k=64)
    cases |= variants("implicit_gemm m14 k32", df.implicit_gemm(op, m=14, k=32), RB)
    cases["im2col m16"] = df.im2col(op, m=16)
    cases["interchanged -vec"] = without(cases["interchanged"], "vectorize")
    cases["naive kh kw c"] = Schedule(op).reorder("kh", "kw", "c")
    return cases


def matmul_schedules(op: lo.Matmul) -> dict[str, Schedule]:
    """About 28 schedules of a matrix multiply."""
    cases = {name: df.PRESETS[name](op) for name in ("naive", "interchanged", "tiled", "weight_stationary",
                                                      "input_stationary")}
    cases |= variants("output_stationary", df.output_stationary(op), RB, VEC)
    for i, j in ((1, 16), (2, 16), (4, 32), (6, 64), (12, 32), (8, 32), (8, 48), (16, 16), (3, 48)):
        cases[f"os i{i} j{j}"] = df.output_stationary(op, i=i, j=j)
    cases |= variants("os i4 j64", df.output_stationary(op, i=4, j=64), RB, VEC)
    cases |= variants("tiled i64 k64 j64", df.tiled(op, i=64, k=64, j=64), VEC)
    cases["tiled i8 k8 j16"] = df.tiled(op, i=8, k=8, j=16)
    cases["interchanged -vec"] = without(cases["interchanged"], "vectorize")
    cases["k i j vec j"] = Schedule(op).reorder("k", "i", "j").vectorize("j")
    cases["j k i vec i"] = Schedule(op).reorder("j", "k", "i").vectorize("i")
    cases["naive vec k"] = Schedule(op).vectorize("k")
    cases["block 4x4 vec k, B NK"] = (Schedule(op).layout("B", "NK").tile(i=4, j=4).reorder("i_i", "j_i", "k")
                                      .vectorize("k").register_block("i_i"))
    return cases


def measure_all(cases: dict[str, Schedule], rounds: int = ROUNDS, budget: float = BUDGET,
                progress: Callable[[str], None] = lambda _: None) -> dict[str, dict]:
    """Compile every schedule (best ISA, one thread), then time all of them ``rounds`` times,
    interleaved so that they share the machine's noise; verified on the first round only."""
    kernels = {}
    for name, schedule in cases.items():
        progress(f"compile {name}")
        kernels[name] = schedule.compile()
        kernels[name].set_threads(1)
    times: dict[str, list[float]] = {name: [] for name in cases}
    verified = {}
    for round_ in range(rounds):
        for name, kernel in kernels.items():
            progress(f"round {round_ + 1}: {name}")
            timing = lo.measure(kernel, budget=budget, verify_output=round_ == 0)
            times[name] += timing.times
            verified.setdefault(name, timing.verified)
    return {name: {"isa": kernels[name].isa, "seconds": float(np.median(times[name])),
                   "runs": len(times[name]), "verified": verified[name]} for name in cases}


def predictions(cases: dict[str, Schedule], isa: str, progress: Callable[[str], None]) -> dict[str, dict]:
    """Per schedule: the kernel model (fully associative traffic, and L1/L2 simulated in their sets
    and ways), its bound and what the C compiler vectorized, and the reuse hierarchy's energy."""
    machine = lo.Machine.detect()
    rows = {}
    for name, schedule in cases.items():
        progress(f"model {name}")
        profile = lo.reuse(schedule, granularity="line")
        model = lo.kernel_model(schedule, isa, profile, machine=machine)
        simulated = lo.kernel_model(schedule, isa, profile, machine=machine, set_associative=True)
        rows[name] = {"model_s": model.predicted_seconds, "model_set_assoc_s": simulated.predicted_seconds,
                      "bound": model.bound, "compiler_vectorized": model.counts.compiler_vectorized,
                      "energy_uj": profile.hierarchy(machine, set_associative=False).energy_pj / 1e6}
    return rows


OPS = {"resnet50.conv2_x": (lambda: lo.get_layer("resnet50.conv2_x"), conv_schedules),
       "Matmul(256, 256, 512)": (lambda: lo.Matmul(256, 256, 512), matmul_schedules)}
FIGURES = (("kernel model", "model_s"), ("kernel model, set-associative L1/L2", "model_set_assoc_s"),
           ("reuse-distance energy", "energy_uj"))


def correlations(rows: dict[str, dict]) -> dict[str, float]:
    seconds = [r["seconds"] for r in rows.values()]
    return {key: spearman(seconds, [r[key] for r in rows.values()]) for _, key in FIGURES}


def op_table(rows: dict[str, dict]) -> str:
    lines = ["| schedule | measured ms | model ms | model ms (set-assoc.) | model bound | "
             "compiler vectorized | energy uJ |", "|---|---|---|---|---|---|---|"]
    for name, r in sorted(rows.items(), key=lambda item: item[1]["seconds"]):
        lines.append(f"| {name} | {r['seconds'] * 1e3:.3f} | {r['model_s'] * 1e3:.3f} | "
                     f"{r['model_set_assoc_s'] * 1e3:.3f} | {r['bound']} | "
                     f"{r['compiler_vectorized'] or '-'} | {r['energy_uj']:.0f} |")
    return "\n".join(lines)


def machine_text(isa: str) -> str:
    info = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return (f"Machine: {info.get('model name', 'unknown CPU')} (family {info.get('cpu family', '?')}, model "
            f"{info.get('model', '?')}, stepping {info.get('stepping', '?')}), kernels for `{isa}`, measured "
            f"fp32 peak {lo.peak_gflops(isa):.1f} GFLOP/s on one core. Flags (/proc/cpuinfo):\n\n"
            f"```\n{info.get('flags', '')}\n```")


def report(results: dict[str, dict[str, dict]], isa: str, command: str) -> str:
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    head = ["| op | schedules | " + " | ".join(f"Spearman: time vs {label}" for label, _ in FIGURES) + " |",
            "|---|---|" + "---|" * len(FIGURES)]
    for op, rows in results.items():
        rho = correlations(rows)
        head.append(f"| {op} | {len(rows)} | " + " | ".join(f"{rho[key]:+.3f}" for _, key in FIGURES) + " |")
    parts = [f"Produced on {today} by\n\n```\n{command}\n```\n", machine_text(isa), "\n".join(head),
             NOTES]
    for op, rows in results.items():
        parts += [f"### {op}", op_table(rows)]
    return "\n\n".join(parts)


NOTES = """\
Each schedule is compiled for the ISA above, verified against the reference once, and timed by
`lo.measure` (budget 0.15 s) in two rounds that interleave all schedules of the op, on one thread;
its time is the median of both rounds' runs. The kernel model (`lo.kernel_model`, docs/reference/
analysis.md) counts what each generated kernel executes and prices it on this core's throughputs
and latencies; "set-assoc." takes its L1/L2 misses from a simulation of their sets and ways instead
of a fully associative LRU (`set_associative=True`, a pass over the whole trace). The energy is the
reuse-distance hierarchy's prediction that `compare` reported before (`ReuseProfile.hierarchy`).
Spearman's rank correlation is computed over each op's schedules; 1 is the same order.

How the model was built: its counts and the compiler's transformations it assumes (store motion of
an output that the innermost loop does not move, vectorization of a scalar innermost loop or of the
loop around an innermost reduction) come from the generated code and GCC's `-fopt-info` on these
schedules; the core's widths, latencies and reorder window are those of this CPU's core (Golden
Cove); the gather and scatter costs were measured with a microbenchmark on this machine; the costs of
a guard check, a lane step, an index definition and a division were chosen by a grid search on the
conv2_x schedules of an earlier run (the Matmul schedules were not used to choose them). Known
misses: GCC vectorizes some scalar register blocks itself (SLP: conv2_x `stored -vec` and `os k64
ow7 -vec` run faster than modelled) and not others (the Matmul `-vec` blocks run slower); without
the simulation the model does not see cache conflicts (Matmul `weight_stationary`, `naive vec k`,
`j k i vec i`: power-of-two strides map their columns to a few L1 sets)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record the results in docs/benchmarks.md")
    parser.add_argument("--json", type=Path, help="save every row (times, predictions) to this file")
    parser.add_argument("--times", type=Path,
                        help="take the measured times from a --json file of an earlier run")
    args = parser.parse_args()
    progress = lambda message: print(message, file=sys.stderr, flush=True)
    isa = lo.available_isas()[0]
    earlier = json.loads(args.times.read_text()) if args.times else None
    results = {}
    for op_name, (make, build) in OPS.items():
        cases = build(make())
        measured = ({name: earlier[op_name][name] for name in cases} if earlier
                    else measure_all(cases, progress=progress))
        modelled = predictions(cases, isa, progress)
        results[op_name] = {name: measured[name] | modelled[name] for name in cases}
    command = "python benchmarks/bench_model.py" + (" --write" if args.write else "")
    text = report(results, isa, command)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.write:
        from bench_reuse import write_section
        write_section(text, SECTION)


if __name__ == "__main__":
    main()
