"""Schedule search: ``tune(op)`` measures register-blocked candidates of any op in isolated worker
processes, logs every trial in an SQLite tuning log and returns the fastest verified schedule;
``best_schedule(op, log)`` reads the best one back from a log, ``best_trial(op, log)`` the best trial
(schedule, ISA, timing).

The search is target-neutral: the candidates, their heuristic order and any model of the target's
own (x86: the AMX tile model) come from the target's search rules (``Target.search_rules()``,
``targets/search.py``; x86's in ``targets/x86/space.py``, ``rank.py``, ``tile_model.py``).

Modules: ``algorithms`` (direct, implicit GEMM, im2col, Winograd: their candidates and share of the
trials), ``guide`` and ``fit`` (the kernel model's order, refitted to the measurements; Spearman),
``choice`` (the first choice without measuring: the default schedule of an op never tuned),
``trial`` (what a worker measures), ``executor`` (worker processes with a timeout), ``cluster``
(any executor, a Dask cluster included), ``log`` (the SQLite log), ``search`` (the loop), ``result``
(``TuneResult``), ``ranked`` (where the target cannot time kernels here, e.g. NEON under an emulator:
the kernel model's ranking, the best verified, nothing timed: ``RankedResult``).
"""
from .executor import IsolatedExecutor, TrialTimeout, WorkerDied, WorkerError
from .log import LoggedTrial, TuningLog, TuningLogError, best_schedule, best_trial
from .ranked import RankedCandidate, RankedResult
from .result import Trial, TuneResult
from .search import TuneError, tune

__all__ = ["IsolatedExecutor", "LoggedTrial", "RankedCandidate", "RankedResult", "Trial", "TrialTimeout",
           "TuneError", "TuneResult", "TuningLog", "TuningLogError", "WorkerDied", "WorkerError",
           "best_schedule", "best_trial", "tune"]
