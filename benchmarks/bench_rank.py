"""The search's ranking model against tuning logs, offline: no compile, no timing.

Run ``python benchmarks/bench_rank.py LOG [LOG ...]`` (``--ops SUBSTRING`` keeps the searches whose op
signature contains it; ``--write`` records the table in the "Ranking model vs tuning logs" section of
docs/benchmarks.md). A tuning log (``lo.tune(..., log=...)``; e.g. the one ``bench_tune.py --log``
or ``tune_layers.py --log`` keeps) holds every trial's op, knobs, ISA, thread count and measured
times. For each search in it (one op, thread count and machine; its verified trials of the
register-blocked direct search, AMX tiles included), this script rebuilds each trial's candidate
from its knobs, recomputes what loopopt's ranking predicts for it today from loopopt's analysis
alone (``rank.figures``, ``guide.price``; never the trial's own timing), and reports the
Spearman rank correlation of each prediction with the measured minimum time over the search's trials:

* ``logged``: the kernel model's time the search recorded then (``model_seconds`` in the log: the
  figure ``TuneResult.model_spearman`` reports), for comparison;
* ``heuristic``: ``rank.figures``' ``predicted_seconds`` (the first-stage ranker);
* ``model``: ``guide.price``'s time (the kernel model without its memory term);
* ``predicted``: ``Guide.prior`` (what the guide orders by before any refit: the model, the
  heuristic's streamed operands, the thread imbalance, blended with the heuristic's time; AMX: the
  tile model's and the heuristic's);
* ``refitted``: the guide's fitted time of each trial when it was picked, the search replayed in the
  logged order (``Guide.observe`` on each trial after its prediction): the prediction the search
  ranks by, fitted on the earlier trials only;
* ``cross-validated``: each trial predicted by the fit to all the search's other trials (leave one
  out): the refitted model at the end of the search, out of sample.

The figures are recomputed on this machine (its machine profile); the logs' trials must be of this
machine's kind for them to mean anything (each search's fingerprint is printed).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_reuse import command_line, write_section
from bench_tune import LAYERS as BENCH_LAYERS
from tune_layers import INT8_SPEC
from tune_layers import LAYERS as CATALOG_LAYERS

import loopopt as lo
from loopopt import machine
from loopopt.ops import Op
from loopopt.targets.registry import target
from loopopt.targets.search import Candidate
from loopopt.targets.x86.rank import figures as figures_of
from loopopt.targets.x86.space import Knobs, TileKnobs
from loopopt.tune.fit import spearman
from loopopt.tune.guide import Guide

SECTION = "## Ranking model vs tuning logs"
GOAL = 0.8                        # the goal: Spearman >= 0.8 over each search's trials
FIGURES = ("logged", "heuristic", "model", "predicted", "refitted", "cross-validated")


def known_ops() -> dict[str, Op]:
    """The ops the benchmarks tune, by log signature: ``bench_tune.py``'s layers and the catalog layers
    of ``tune_layers.py``, fp32 and int8 (``tune_layers.INT8_SPEC``)."""
    ops = [layer.op for layer in BENCH_LAYERS.values()] + [lo.get_layer(name) for name in CATALOG_LAYERS]
    ops += [op.with_quant(INT8_SPEC) for op in ops if op.quant is None]
    return {repr(op): op for op in ops}


def candidate(op: Op, isa: str, knobs: dict) -> Candidate | None:
    """The search candidate a logged trial measured (None for another algorithm's trial or a
    table-lookup one, which the kernel model does not price)."""
    if "algorithm" in knobs or "weight_format" in knobs and knobs["weight_format"] in ("tl1", "tl2"):
        return None
    if isa == "amx":
        return Candidate(op, isa, TileKnobs(knobs["pixel_block"], knobs["channel_block"],
                                            knobs["channels_outer"], knobs.get("parallel"),
                                            knobs.get("patches", False)))
    return Candidate(op, isa, Knobs(knobs["pixel_block"], knobs["channel_block"], tuple(knobs["reduction"]),
                                    tuple(knobs["outer"]), knobs["weights"], knobs["cache_block"],
                                    tuple(tuple(u) for u in knobs["unroll"]), knobs["parallel"],
                                    knobs.get("weight_format", "int8"), knobs.get("pixel"),
                                    knobs.get("activations", "last")))


@dataclass
class Search:
    """The verified trials of one search in a log, in the order they were logged."""

    log: str
    op: Op
    threads: int
    fingerprint: str
    candidates: list[Candidate] = field(default_factory=list)
    measured: list[float] = field(default_factory=list)        # minimum time (s)
    logged: list[float | None] = field(default_factory=list)   # the model_seconds the search recorded
    schedules: list[str] = field(default_factory=list)         # each trial's schedule (TOML)
    budgets: list[float] = field(default_factory=list)         # each trial's timing budget (s)

    @property
    def name(self) -> str:
        return f"{self.op!r} {self.threads}T"


def _rows(path: str) -> list[tuple]:
    """The verified trials of the tuning log at ``path``, read from a copy of it (the log and its
    write-ahead log copied to a temporary directory: SQLite writes the shared-memory index of a WAL
    database even when it only reads it, and the log is left as it was)."""
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "log.db"
        for suffix in ("", "-wal"):
            if Path(path + suffix).exists():
                shutil.copyfile(path + suffix, str(copy) + suffix)
        db = sqlite3.connect(copy)
        try:
            return db.execute("SELECT op, threads, fingerprint, isa, knobs, model, min, schedule, budget "
                              "FROM trials WHERE status = 'ok' ORDER BY id").fetchall()
        finally:
            db.close()


def searches(paths: Iterable[str], ops: dict[str, Op], wanted: str = "") -> list[Search]:
    """The searches of the logs at ``paths`` whose op is in ``ops`` (and whose signature contains
    ``wanted``); the logs are read from copies (``_rows``)."""
    found: dict[tuple, Search] = {}
    for path in paths:
        for signature, threads, fingerprint, isa, knobs, model, least, schedule, budget in _rows(path):
            op = ops.get(signature)
            if op is None or wanted not in signature:
                continue
            trial = candidate(op, isa, json.loads(knobs))
            if trial is None:
                continue
            search = found.setdefault((path, signature, threads, fingerprint),
                                      Search(Path(path).name, op, threads, fingerprint))
            search.candidates.append(trial)
            search.measured.append(least)
            search.logged.append(json.loads(model).get("model_seconds"))
            search.schedules.append(schedule)
            search.budgets.append(budget)
    return list(found.values())


def predictions(search: Search) -> dict[str, list[float | None]]:
    """Each figure of ``FIGURES`` for every trial of ``search`` (None where there is none)."""
    guide = Guide([replace(c, model=tuple(figures_of(c).items())) for c in search.candidates],
                  target("x86").search_rules(), threads=search.threads)
    figures: dict[str, list[float | None]] = {name: [] for name in FIGURES}
    figures["logged"] = list(search.logged)
    for index, seconds in enumerate(search.measured):
        figures["heuristic"].append(guide.heuristic(index))
        model = guide.score(index)
        figures["model"].append(None if model is None else model.seconds)
        figures["predicted"].append(guide.prior(index))
        figures["refitted"].append(guide.fitted(index))
        guide.observe(index, seconds)
    figures["cross-validated"] = cross_validated(guide, search.measured)
    return figures


def cross_validated(guide: Guide, measured: list[float]) -> list[float | None]:
    """Each trial predicted by the fit to all the search's other trials of its family (leave one out,
    ``Guide.held_out``; None: a refused schedule), the guide having observed them all."""
    held = guide.held_out()
    return [held[i] if i in held and math.isfinite(held[i]) else None for i in range(len(measured))]


def correlation(predicted: list[float | None], measured: list[float]) -> float | None:
    """Spearman over the trials that have a finite prediction."""
    pairs = [(p, m) for p, m in zip(predicted, measured, strict=True) if p is not None and math.isfinite(p)]
    return spearman(*zip(*pairs)) if len(pairs) >= 3 else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def table(results: list[tuple[Search, dict[str, float | None]]]) -> str:
    lines = ["| log | op | threads | trials | " + " | ".join(FIGURES) + " |",
             "|---|---|---|---|" + "---|" * len(FIGURES)]
    for search, rho in results:
        lines.append(f"| {search.log} | `{search.op!r}` | {search.threads} | {len(search.measured)} | "
                     + " | ".join(_fmt(rho[name]) for name in FIGURES) + " |")
    return "\n".join(lines)


def summary(results: list[tuple[Search, dict[str, float | None]]]) -> str:
    """Per figure: the median Spearman and how many searches reach ``GOAL``."""
    lines = ["| figure | median Spearman | searches >= 0.8 |", "|---|---|---|"]
    for name in FIGURES:
        values = sorted(r[name] for _, r in results if r[name] is not None)
        median = values[len(values) // 2] if values else None
        lines.append(f"| {name} | {_fmt(median)} | {sum(v >= GOAL for v in values)} of {len(values)} |")
    return "\n".join(lines)


def log_parser(description: str) -> argparse.ArgumentParser:
    """The command line of a script over tuning logs: the logs, ``--ops`` and ``--write``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("logs", nargs="+", help="SQLite tuning logs (read from copies, left as they are)")
    parser.add_argument("--ops", default="", help="only the searches whose op signature contains this")
    parser.add_argument("--write", action="store_true", help="record the table(s) in docs/benchmarks.md")
    return parser


def parse_logs(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser``'s arguments, the logs checked to exist (an error naming those that do not)."""
    args = parser.parse_args(argv)
    missing = [p for p in args.logs if not Path(p).is_file()]
    if missing:
        parser.error(f"no such tuning log: {', '.join(missing)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_logs(log_parser(__doc__.splitlines()[0]), argv)
    start = time.perf_counter()
    results = []
    for search in searches(args.logs, known_ops(), args.ops):
        figures = predictions(search)
        rho = {name: correlation(figures[name], search.measured) for name in FIGURES}
        results.append((search, rho))
        print(f"{search.name}: " + ", ".join(f"{n} {_fmt(r)}" for n, r in rho.items()), file=sys.stderr,
              flush=True)
    fingerprints = sorted({s.fingerprint for s, _ in results})
    text = "\n\n".join([
        f"Produced on {datetime.date.today().isoformat()} ({time.strftime('%H:%M %Z')}) by\n\n"
        f"```\n{command_line(__file__, argv)}\n```",
        f"{len(results)} searches (machine fingerprints {', '.join(fingerprints)}; recomputed on "
        f"{machine.this_cpu().model}, fingerprint {machine.fingerprint()}) in "
        f"{time.perf_counter() - start:.0f} s, no kernel compiled or timed. Spearman rank correlation of "
        "each prediction with the measured minimum time over a search's verified trials (module docstring "
        "of `benchmarks/bench_rank.py`: logged = the kernel model as the search recorded it, heuristic = "
        "`rank.figures`, model = the kernel model today, predicted = what the guide orders by before a "
        "refit, refitted = the guide's prediction when the trial was picked, fitted on the earlier trials, "
        "cross-validated = each trial predicted by the fit to all the other trials).",
        summary(results), table(results)])
    print(f"{SECTION}\n\n{text}")
    if args.write:
        write_section(text, SECTION)


if __name__ == "__main__":
    main()
