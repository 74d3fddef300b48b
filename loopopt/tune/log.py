"""The tuning log: one SQLite row per measured trial, kept across runs and machines.

The file (stdlib ``sqlite3``, WAL journal) holds a ``meta`` table naming the application and the
schema version, and a ``trials`` table: the op's signature (its ``repr``), the schedule as
TOML, the candidate's knobs and the ranking model's figures (JSON), ISA, threads, the machine
fingerprint, host, compiler and loopopt version, the status and error, the timing statistics
and the UTC time. Each trial is committed in its own transaction, so killing the process
(even ``kill -9``) loses at most the trials being measured. A file that is not SQLite, is
damaged, or is another application's or another schema version's database raises
``TuningLogError`` naming it, and is left untouched.
"""
from __future__ import annotations

import json
import math
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..machine import fingerprint, loopopt_version, utc_now
from ..measure import Timing
from ..ops import Op
from ..schedule_file import AnySchedule
from ..targets.registry import target_of_isa
from .algorithms import label, rebuild, selected
from .trial import Outcome

APPLICATION = "loopopt tuning log"
SCHEMA = 1
FINDINGS = 4               # of SQLite's integrity findings, a damaged log's error names the first few
TIMING_COLUMNS = ("median", "min", "iqr", "repeats", "gflops", "percent_of_peak", "peak_gflops", "verified",
                  "max_error", "unit", "end_to_end", "noisy", "other_cpu_share", "noise")
CREATE = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE trials (
    id INTEGER PRIMARY KEY,
    op TEXT NOT NULL, schedule TEXT NOT NULL, knobs TEXT NOT NULL, model TEXT NOT NULL,
    isa TEXT NOT NULL, threads INTEGER NOT NULL, budget REAL NOT NULL,
    fingerprint TEXT NOT NULL, host TEXT NOT NULL, compiler TEXT NOT NULL, loopopt TEXT NOT NULL,
    status TEXT NOT NULL, error TEXT NOT NULL,
    median REAL, min REAL, iqr REAL, repeats INTEGER, gflops REAL, percent_of_peak REAL, peak_gflops REAL,
    verified INTEGER, max_error REAL, unit TEXT, end_to_end INTEGER, noisy INTEGER, other_cpu_share REAL,
    noise TEXT,
    utc TEXT NOT NULL
);
CREATE INDEX trials_of_op ON trials (op, fingerprint, isa, threads);
INSERT INTO meta VALUES ('application', '{APPLICATION}'), ('schema', '{SCHEMA}');
"""


class TuningLogError(ValueError):
    """A tuning log that cannot be opened, read or written (names the file and why)."""


@dataclass(frozen=True)
class LoggedTrial:
    """One row of the log."""

    op: str
    schedule: str
    knobs: dict[str, Any]
    model: dict[str, float]
    isa: str
    threads: int
    status: str
    error: str
    timing: Timing | None
    fingerprint: str
    host: str
    utc: str

    @property
    def algorithm(self) -> str:
        """``direct``, ``implicit_gemm``, ``im2col`` or ``winograd`` (``tune.algorithms``)."""
        return label(self.knobs)

    def to_schedule(self, op: Op, source: str = "tuning log") -> AnySchedule:
        """The trial's schedule applied to ``op`` (the op it was logged for), or its Winograd plan;
        compile it with ``self.isa`` to rebuild the kernel that was measured (the tile variant: a tile
        schedule)."""
        return rebuild(op, self.schedule, self.knobs, source)


def signature(op: Op) -> str:
    """The op's canonical signature in the log: its repr (shape, options and quantization)."""
    return repr(op)


def _timing(row: sqlite3.Row) -> Timing | None:
    if row["median"] is None:
        return None
    values = {c: row[c] for c in TIMING_COLUMNS}
    values.update(verified=bool(values["verified"]), end_to_end=bool(values["end_to_end"]),
                  noisy=bool(values["noisy"]),
                  max_error=math.nan if values["max_error"] is None else values["max_error"])
    return Timing(**values)


class TuningLog:
    """An open tuning log (created if missing); ``close()`` it, or use it as a context manager."""

    def __init__(self, path: str | os.PathLike, readonly: bool = False):
        self.path = Path(path)
        if readonly and not self.path.is_file():
            raise TuningLogError(f"tuning log {self.path} does not exist")
        if not readonly and self.path.is_dir():
            raise TuningLogError(f"tuning log {self.path} is a directory")
        try:
            uri = f"{self.path.resolve().as_uri()}?mode={'ro' if readonly else 'rwc'}"
            self.connection = sqlite3.connect(uri, uri=True, timeout=30)
            self.connection.row_factory = sqlite3.Row
            self._check(readonly)
        except sqlite3.DatabaseError as err:       # not a database, damaged, unopenable
            self.close()
            raise TuningLogError(f"tuning log {self.path} cannot be used: {err} (the file was left as "
                                 f"it is)") from None
        except TuningLogError:
            self.close()
            raise

    def _check(self, readonly: bool) -> None:
        """Create the tables in an empty database; refuse another application's or schema's."""
        found = [line.strip() for row in self.connection.execute("PRAGMA quick_check")
                 for line in row[0].splitlines() if line.strip()]
        if found != ["ok"]:            # one line: SQLite's findings may span lines and rows
            more = f"; {len(found) - FINDINGS} more" if len(found) > FINDINGS else ""
            findings = "; ".join(found[:FINDINGS]) + more
            raise TuningLogError(f"tuning log {self.path} is damaged ({findings}); it was left as it is")
        query = "SELECT name FROM sqlite_master WHERE type = 'table'"
        tables = {r[0] for r in self.connection.execute(query)}
        if not tables and not readonly:
            self.connection.execute("PRAGMA journal_mode = WAL")
            self.connection.executescript(f"BEGIN; {CREATE} COMMIT;")
            return
        meta = dict(self.connection.execute("SELECT key, value FROM meta")) if "meta" in tables else {}
        if meta.get("application") != APPLICATION:
            raise TuningLogError(f"{self.path} is an SQLite database but not a loopopt tuning log (tables: "
                                 f"{', '.join(sorted(tables)) or 'none'}); it was left as it is")
        if meta.get("schema") != str(SCHEMA):
            raise TuningLogError(f"tuning log {self.path} has schema version {meta.get('schema')}; this "
                                 f"loopopt reads version {SCHEMA} (use another log file)")
        if not readonly:
            self.connection.execute("PRAGMA journal_mode = WAL")

    def close(self) -> None:
        if getattr(self, "connection", None) is not None:
            self.connection.close()
            self.connection = None

    def __enter__(self) -> TuningLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def append(self, op: Op, schedule: str, knobs: dict[str, Any], model: dict[str, float], isa: str,
               threads: int, budget: float, outcome: Outcome) -> None:
        """Record one trial in its own transaction."""
        timing = outcome.timing
        values = {c: getattr(timing, c) if timing else None for c in TIMING_COLUMNS}
        if timing and math.isnan(timing.max_error):
            values["max_error"] = None
        row = {"op": signature(op), "schedule": schedule, "knobs": json.dumps(knobs),
               "model": json.dumps(model), "isa": isa, "threads": threads, "budget": budget,
               "fingerprint": outcome.fingerprint, "host": outcome.host, "compiler": outcome.compiler,
               "loopopt": loopopt_version(),
               "status": outcome.status, "error": outcome.error, **values, "utc": utc_now()}
        try:
            with self.connection:
                self.connection.execute(f"INSERT INTO trials ({', '.join(row)}) VALUES "
                                        f"({', '.join('?' * len(row))})", tuple(row.values()))
        except sqlite3.Error as err:
            raise TuningLogError(f"cannot write to tuning log {self.path}: {err}") from None

    def trials(self, op: Op, isa: str | None = None, threads: int | None = None,
               machine: str | None = None) -> list[LoggedTrial]:
        """The logged trials of ``op`` on this machine (``machine``: another fingerprint; with ``isa``,
        the key of where its target's kernels run, ``Target.fingerprint``: a GPU's name), oldest
        first, optionally of one ISA and thread count."""
        query = "SELECT * FROM trials WHERE op = ? AND fingerprint = ?"
        where = machine or (isa is not None and target_of_isa(isa).fingerprint()) or fingerprint()
        params: list[Any] = [signature(op), where]
        for column, value in (("isa", isa), ("threads", threads)):
            if value is not None:
                query += f" AND {column} = ?"
                params.append(value)
        try:
            rows = self.connection.execute(query + " ORDER BY id", params).fetchall()
        except sqlite3.Error as err:
            raise TuningLogError(f"cannot read tuning log {self.path}: {err}") from None
        return [LoggedTrial(r["op"], r["schedule"], json.loads(r["knobs"]), json.loads(r["model"]), r["isa"],
                            r["threads"], r["status"], r["error"], _timing(r), r["fingerprint"], r["host"],
                            r["utc"]) for r in rows]


def logged_count(op: Op, log: str | os.PathLike, threads: int = 1, isa: str | None = None,
                 algorithms: str | tuple[str, ...] = "auto") -> int:
    """How many trials of ``op`` (any status) of ``algorithms`` the tuning log ``log`` holds, measured on
    this machine with ``threads`` threads (and ``isa``, if given); 0 if there is no such file."""
    if not Path(log).is_file():
        return 0
    wanted = selected(algorithms)
    with TuningLog(log, readonly=True) as tuning_log:
        return sum(t.algorithm in wanted for t in tuning_log.trials(op, isa, threads))


def best_by_algorithm(op: Op, log: str | os.PathLike, threads: int = 1,
                      isa: str | None = None, machine: str | None = None) -> dict[str, LoggedTrial]:
    """The fastest verified trial of each algorithm (``tune.algorithms``) of ``op`` in the tuning log
    ``log`` measured on this machine (``machine``: the one of that fingerprint) with ``threads`` threads
    (and ``isa``, if given), by minimum time."""
    with TuningLog(log, readonly=True) as tuning_log:
        ok = sorted((t for t in tuning_log.trials(op, isa, threads, machine) if t.status == "ok"),
                    key=lambda t: t.timing.min)
    fastest: dict[str, LoggedTrial] = {}
    for t in ok:
        fastest.setdefault(label(t.knobs), t)
    return fastest


def best_trial(op: Op, log: str | os.PathLike, threads: int = 1, isa: str | None = None,
               algorithms: str | tuple[str, ...] = "auto", machine: str | None = None) -> LoggedTrial | None:
    """The fastest verified trial of ``op`` in the tuning log ``log`` measured on this machine with
    ``threads`` threads (and ``isa``, if given), by minimum time, of any of ``algorithms`` (``"auto"``:
    every one, a Winograd plan too; ``SCHEDULE_ALGORITHMS``: one loop nest); None if there is none. Its
    ``isa`` is the ISA it was measured on: ``trial.to_schedule(op).compile(trial.isa)`` rebuilds that
    kernel (an AMX or AVX2 winner, a Winograd plan too). ``machine``: the fingerprint of another machine
    or device to take it from (a GPU's name, ``Target.fingerprint``)."""
    wanted = selected(algorithms)
    fastest = [t for name, t in best_by_algorithm(op, log, threads, isa, machine).items() if name in wanted]
    return min(fastest, key=lambda t: t.timing.min, default=None)


def best_schedule(op: Op, log: str | os.PathLike, threads: int = 1, isa: str | None = None,
                  algorithms: str | tuple[str, ...] = "auto") -> AnySchedule | None:
    """The schedule (or Winograd plan) of ``best_trial(op, log, threads, isa, algorithms)`` applied to
    ``op``; None if there is none. It does not carry the ISA it was measured on: ``best_trial`` does."""
    best = best_trial(op, log, threads, isa, algorithms)
    return None if best is None else best.to_schedule(op, f"tuning log {log}")
