"""How repeatable a search's measured order is: each verified trial of a tuning log timed again.

Run ``python benchmarks/bench_retest.py LOG [LOG ...]`` (``--ops SUBSTRING`` keeps the searches whose op
signature contains it; ``--write`` records the table in the "Measurement repeatability" section of
docs/benchmarks.md). For each search of the logs (as ``bench_rank.py`` reads them: one op, thread
count and machine, its verified register-blocked and AMX trials), every trial's logged schedule is
compiled and timed again exactly as the search's worker timed it (``trial.run_trial``: ``lo.measure``
with the trial's budget, verified), the trials in a seeded random order so that a drift of the
machine's speed does not follow the logged order. Reported per search:

* ``spread``: the slowest trial's logged minimum time over the fastest's;
* ``retest``: Spearman's rank correlation of the logged minimum times with the new ones (the
  test-retest reliability of the search's order);
* ``ceiling``: its square root: under the classical model of a measurement as a true value plus
  independent noise, the correlation of the true value with one measurement, i.e. the most any
  prediction, however exact, can reach against the logged times;
* ``predicted`` / ``refitted``: ``bench_rank.py``'s figures against the logged times, and
  ``predicted (retest)`` against the new ones.

The logs must be this machine's (each search's fingerprint is printed); the new times depend on the
machine's load, as the logged ones did (the load of other processes during the run is printed).
"""
from __future__ import annotations

import datetime
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rank import Search, correlation, known_ops, log_parser, parse_logs, predictions, searches
from bench_reuse import command_line, write_section

from loopopt import machine
from loopopt.tune.trial import Task, run_trial

SECTION = "## Measurement repeatability of a search's trials"
SEED = 0
COLUMNS = ("trials", "spread", "retest", "ceiling", "predicted", "refitted", "predicted (retest)")


def retimed(search: Search, seed: int) -> tuple[list[float | None], list[float]]:
    """Each trial's minimum time measured again (None where the trial did not verify now), the trials
    timed in a seeded random order, and the other processes' CPU share during each timing (where known)."""
    order = list(range(len(search.measured)))
    random.Random(seed).shuffle(order)
    times: list[float | None] = [None] * len(order)
    shares: list[float] = []
    for index in order:
        task = Task(search.op, search.schedules[index], search.candidates[index].isa, search.threads,
                    search.budgets[index])
        outcome = run_trial(task)
        if outcome.status == "ok" and outcome.timing is not None:
            times[index] = outcome.timing.min
            if outcome.timing.other_cpu_share is not None:
                shares.append(outcome.timing.other_cpu_share)
    return times, shares


def figures(search: Search, again: list[float | None]) -> dict[str, float | None]:
    """The columns of ``COLUMNS`` for one search (None where a figure has fewer than 3 trials)."""
    kept = [i for i, second in enumerate(again) if second is not None]
    retest = correlation([again[i] for i in kept], [search.measured[i] for i in kept])
    predicted = predictions(search)
    return {
        "trials": float(len(search.measured)),
        "spread": max(search.measured) / min(search.measured),
        "retest": retest,
        "ceiling": None if retest is None else math.sqrt(max(retest, 0.0)),
        "predicted": correlation(predicted["predicted"], search.measured),
        "refitted": correlation(predicted["refitted"], search.measured),
        "predicted (retest)": correlation([predicted["predicted"][i] for i in kept],
                                          [again[i] for i in kept]),
    }


def _fmt(name: str, value: float | None) -> str:
    if value is None:
        return "-"
    if name == "trials":
        return f"{value:.0f}"
    if name == "spread":
        return f"{value:.2f}x"
    return f"{value:+.3f}"


def table(results: list[tuple[Search, dict[str, float | None]]]) -> str:
    lines = ["| log | op | threads | " + " | ".join(COLUMNS) + " |", "|---|---|---|" + "---|" * len(COLUMNS)]
    for search, row in results:
        lines.append(f"| {search.log} | `{search.op!r}` | {search.threads} | "
                     + " | ".join(_fmt(name, row[name]) for name in COLUMNS) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = log_parser(__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=SEED, help="seed of the order the trials are timed in")
    args = parse_logs(parser, argv)
    start = time.perf_counter()
    results, loads = [], []
    for search in searches(args.logs, known_ops(), args.ops):
        again, shares = retimed(search, args.seed)
        loads += shares
        row = figures(search, again)
        results.append((search, row))
        print(f"{search.name} ({search.fingerprint}): "
              + ", ".join(f"{name} {_fmt(name, row[name])}" for name in COLUMNS), file=sys.stderr, flush=True)
    load = (f"other processes {100 * min(loads):.0f}-{100 * max(loads):.0f}% of the CPU while a trial was "
            "timed" if loads else "the load of other processes unknown")
    machines = ", ".join(sorted({s.fingerprint for s, _ in results}))
    text = "\n\n".join([
        f"Produced on {datetime.date.today().isoformat()} ({time.strftime('%H:%M %Z')}) by\n\n"
        f"```\n{command_line(__file__, argv)}\n```",
        f"{len(results)} searches (machine fingerprints {machines}; timed again on "
        f"{machine.this_cpu().model}, fingerprint {machine.fingerprint()}),"
        f" every verified trial timed again in {time.perf_counter() - start:.0f} s; {load}. Columns: module "
        "docstring of `benchmarks/bench_retest.py` (retest = Spearman of the logged times with the new ones, "
        "ceiling = its square root, the most an exact prediction can reach against the logged times).",
        table(results)])
    print(f"{SECTION}\n\n{text}")
    if args.write:
        write_section(text, SECTION)


if __name__ == "__main__":
    main()
