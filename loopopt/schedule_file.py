"""Named schedules as TOML files: load (replay the steps on an op) and save.

A file holds a ``name``, a ``description`` and one ``[[step]]`` table per primitive,
whose single key is the primitive and whose value its arguments::

    name = "output_stationary"
    description = "an ow x k block of outputs stays in registers"

    [[step]]
    tile = { ow = 8, k = 16 }       # a table: keyword arguments

    [[step]]
    reorder = ["k_o", "c"]          # a list: positional arguments

    [[step]]
    vectorize = "k_i"               # a scalar: the one argument

A file without ``[[step]]`` tables is refused (an empty or truncated file is not silently
the naive schedule); a schedule with no steps on purpose says ``step = []``.

``save_schedule`` also writes a ``[provenance]`` table (loopopt version, machine fingerprint,
CPU model, vendor and key, ISA, compiler, threads, UTC time: ``loopopt.machine.provenance``);
``load_schedule`` warns (``OtherMachineWarning``, once per file and process) when it was
recorded on another CPU (``loopopt.machine.same_cpu``: another CPU key, else fingerprint, else vendor).

Schedules searched on one CPU live in a subdirectory named after its key
(``schedules/<cpu key>/<name>.toml``, ``loopopt.machine.cpu_key``). A name is looked up in each
schedule directory in turn; in a directory, this CPU's subdirectory comes first, then the
directory itself (the generic files), then the other CPUs' subdirectories, closest key first; among
the files found outside this CPU's subdirectory, those searched on an ISA this CPU has come before
those searched on one it lacks (``isa_fit``: register blocks sized for 512-bit vectors spill on
256-bit ones), the ISA this CPU runs that arithmetic on best first: an AVX2-only CPU (Haswell to
Skylake client, Zen 1 to 3) finds the files an AVX2 CPU's search wrote ahead of AVX-512 ones.
``stored_schedule(name)`` says which file that is, the CPU and ISA it was searched on, and whether
this CPU is that CPU and has that ISA; loading a file searched on an ISA this CPU lacks warns.

A ``split``/``tile``/``unroll`` factor larger than its loop's extent is clamped to the extent, so
a file written for one layer applies to any op with the same loop names.

``algorithm`` says what the file holds: a loop nest of the ``direct``, ``implicit_gemm`` or ``im2col``
algorithm (``[[step]]`` tables; a file without the key is a loop nest too), or a ``winograd`` plan:
no steps but a ``[winograd]`` table with its output ``tile`` (F(tile x tile, 3x3)), its GEMM register
block (``gemm_rows``, ``gemm_cols``; absent: the default) and, in ``[winograd.stages]``, the steps of
each stage whose schedule differs from the default one (``stage = [{ step }, ...]``)::

    name = "conv80"
    algorithm = "winograd"

    [winograd]
    tile = 4
    gemm_rows = 7
    gemm_cols = 48

``load_schedule`` returns a ``Schedule`` or, for a Winograd file, the plan (``winograd.plan``); either
compiles with ``.compile(isa)``.

``made_for`` records the arithmetic of the op a file was made for (``arithmetic``: ``float32``,
``bfloat16``, ``int8`` or ``binary``; an int8 or binary op's ``QuantSpec`` in ``quant``);
``save_schedule`` writes both. Loading a file on an op of another arithmetic is refused with the way
out (``any_arithmetic=True`` replays its steps anyway); a file without ``made_for`` (the presets)
applies to any op, and a QuantSpec differing within one arithmetic (another output, zero points or
scale granularity) is the same integer kernel with another epilogue, so it applies.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import re
import sys
import tomllib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .atomic import write_text_atomically
from .machine import OtherMachineWarning, cpu_key, machine_mismatch, same_cpu, this_cpu
from .machine import provenance as machine_provenance
from .ops import Op
from .schedule import Schedule, ScheduleError, Step
from .targets.base import Target, TargetUnavailableError
from .targets.registry import target_of_isa
from .winograd import AnyPlan, WinogradError
from .winograd import plan as winograd_plan

PRIMITIVES = ("split", "tile", "reorder", "fuse", "vectorize", "unroll", "parallel", "layout",
              "register_block", "compensation", "arithmetic", "weight_format", "bind", "stage", "tensorize",
              "split_k", "clip", "add_residual", "clip_quantized", "cluster", "specialize", "swizzle",
              "persistent", "prefetch", "halves")
SUFFIX = ".toml"
SCHEDULE_ALGORITHMS = ("direct", "implicit_gemm", "im2col")    # a loop nest: one Schedule
WINOGRAD = "winograd"                                          # a pipeline: a Winograd plan
ALGORITHMS = (*SCHEDULE_ALGORITHMS, WINOGRAD)
WINOGRAD_KEYS = ("tile", "gemm_rows", "gemm_cols", "stages")
AnySchedule = Schedule | AnyPlan          # what a schedule file holds
ARITHMETICS = ("float32", "bfloat16", "int8", "binary")
OTHER_ARITHMETIC = {           # how to get an op of the arithmetic a file was made for
    "float32": "a float32 op (dtype='float32', no quant; on the command line: without --int8 or --dtype)",
    "bfloat16": "a bfloat16 op (dtype='bfloat16'; on the command line: --dtype bfloat16)",
    "int8": "a quantized op (op.with_quant({quant}); on the command line: --int8)",
    "binary": "a binary op (op.with_quant({quant}); on the command line: --int8 --activation binary "
              "--weight binary)",
}
_warned: set[Path] = set()      # schedule files whose other-machine warning was given in this process
LACKING_ISA = ("its register blocks were sized for that ISA's vectors and registers, so here it is not a "
               "searched best (benchmarks/tune_layers.py --write searches this CPU)")   # of an ISA it lacks


class ScheduleFileError(ValueError):
    """A schedule file that cannot be read or does not fit the op (names file, line and step)."""


def schedule_dirs() -> list[Path]:
    """Where named schedules are looked up: ``$LOOPOPT_SCHEDULES``, the source tree's
    ``schedules/``, then the installed data directory ``<prefix>/share/loopopt/schedules``."""
    dirs = [Path(p) for p in os.environ.get("LOOPOPT_SCHEDULES", "").split(os.pathsep) if p]
    dirs += [Path(__file__).resolve().parent.parent / "schedules",
             Path(sys.prefix) / "share" / "loopopt" / "schedules"]
    return [d for d in dirs if d.is_dir()]


def _candidates(directory: Path) -> list[Path]:
    """The directories of ``directory`` a name is looked up in, in order: this CPU's subdirectory,
    ``directory`` itself, the other CPUs' subdirectories (closest key first: the most leading parts
    in common with this CPU's key, then the most common features)."""
    here = cpu_key().split("-")

    def distance(key: str) -> tuple[int, int, str]:
        parts = key.split("-")
        leading = next((i for i, (a, b) in enumerate(zip(parts, here)) if a != b), min(len(parts), len(here)))
        return -leading, -len(set(parts) & set(here)), key
    others = sorted((d for d in directory.iterdir() if d.is_dir() and d.name != cpu_key()),
                    key=lambda d: distance(d.name))
    return [directory / cpu_key(), directory, *others]


def list_schedules() -> list[str]:
    """Names of the stored schedules: generic and per-CPU files (``load_schedule`` finds each)."""
    return sorted({p.stem for d in schedule_dirs() for c in _candidates(d) if c.is_dir()
                   for p in c.glob(f"*{SUFFIX}")})


def isa_fit(recorded: Mapping[str, Any], made_for: str | None) -> int:
    """How the ISA provenance ``recorded`` names fits this CPU for a file made for arithmetic
    ``made_for``: 0 it is the ISA this CPU runs that arithmetic on best (``"auto"``), or none is
    recorded; 1 another ISA this CPU has; 2 an ISA this CPU lacks (or an unknown one)."""
    isa = recorded.get("isa")
    if not isinstance(isa, str):
        return 0
    integer = made_for in ("int8", "binary")
    target = _running_target(isa, integer)
    if target is None:
        return 2
    return 0 if isa == target.resolve_isa("auto", integer) else 1


def _running_target(isa: str, integer: bool) -> Target | None:
    """The target of variant ``isa`` if this machine runs it (``integer``: its quantized kernels), else
    None."""
    try:
        target = target_of_isa(isa)
        target.resolve_isa(isa, integer)
    except (ValueError, TargetUnavailableError):
        return None
    return target


def _fit_of(path: Path, document: dict[str, Any] | None = None) -> int:
    """``isa_fit`` of the schedule file ``path`` (parsed: ``document``, else read here)."""
    document = read_schedule_file(path)[0] if document is None else document
    made_for = document.get("made_for")
    return isa_fit(_provenance(path, document), made_for if isinstance(made_for, str) else None)


def find_schedule(name_or_path: str | os.PathLike) -> Path:
    """The file of a schedule name (looked up as the module docstring says) or path; unknown names
    suggest the closest."""
    text = str(name_or_path)
    if text.endswith(SUFFIX) or os.sep in text:
        path = Path(text)
        if not path.is_file():
            raise ScheduleFileError(f"schedule file {text} does not exist")
        return path
    for directory in schedule_dirs():
        found = [c / f"{text}{SUFFIX}" for c in _candidates(directory) if (c / f"{text}{SUFFIX}").is_file()]
        if found and found[0].parent == directory / cpu_key():
            return found[0]
        if found:
            return min(found, key=_fit_of)           # the first of the best fit: the lookup order within it
    known = list_schedules()
    close = difflib.get_close_matches(text, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ScheduleFileError(f"unknown schedule {text!r}{hint} (known: {', '.join(known)})")


@dataclass(frozen=True)
class StoredSchedule:
    """A stored schedule file and the CPU and ISA it was searched on (from its ``[provenance]``)."""

    path: Path
    cpu: str | None             # the CPU model its provenance records (None: no provenance)
    cpu_key: str | None         # the CPU key it records (None: not recorded, e.g. a file from before keys)
    this_cpu: bool | None       # whether that is this CPU (None: the provenance cannot tell; False also
                                # when this CPU lacks the ISA it was searched on)
    isa: str | None = None      # the ISA it was searched on (None: not recorded)
    isa_here: bool = True       # whether this CPU has that ISA (True when none is recorded)

    @property
    def name(self) -> str:
        return self.path.stem

    def summary(self) -> str:
        """Where it was searched and whether that is this CPU, e.g. ``searched on AMD EPYC
        [amd-25-17-...]; NOT this CPU (Intel Xeon ... [intel-...])``."""
        if self.cpu is None and self.cpu_key is None:
            return "no provenance (not a search result of a recorded CPU)"
        there = self.cpu or "an unnamed CPU"
        if self.cpu_key:
            there += f" [{self.cpu_key}]"
        if self.isa:
            there += f" for {self.isa}"
        verdict = {True: "this CPU", False: f"NOT this CPU ({this_cpu().model} [{cpu_key()}])",
                   None: "this CPU or not: its provenance cannot tell"}[self.this_cpu]
        lacks = "" if self.isa_here else f", which lacks {self.isa}: {LACKING_ISA}"
        return f"searched on {there}; {verdict}{lacks}"


def stored_schedule(name_or_path: str | os.PathLike) -> StoredSchedule:
    """The file ``load_schedule(name_or_path, op)`` reads and the CPU and ISA it was searched on."""
    path = find_schedule(name_or_path)
    return _stored(path, read_schedule_file(path)[0])


def _stored(path: Path, document: dict[str, Any]) -> StoredSchedule:
    """The ``StoredSchedule`` of the file ``path``, parsed: ``document``."""
    recorded = _provenance(path, document)
    if not recorded:
        return StoredSchedule(path, None, None, None)
    isa = recorded.get("isa") if isinstance(recorded.get("isa"), str) else None
    here = _fit_of(path, document) < 2
    return StoredSchedule(path, recorded.get("cpu"), recorded.get("cpu_key"),
                          same_cpu(recorded) if here else False, isa, here)


def stored_isa(name_or_path: str | os.PathLike, op: Op | None = None) -> str:
    """The ISA to compile a stored schedule on: the one its provenance records when this CPU runs it
    (x86's AMX tiles: a tile schedule, which ``"auto"`` would compile for the SIMD units), else
    ``"auto"``; also ``"auto"`` for an ``op`` that variant does not compute (``Target.computes``: the
    tiles do not multiply float32)."""
    path = find_schedule(name_or_path)
    isa = _provenance(path, read_schedule_file(path)[0]).get("isa")
    if not isinstance(isa, str):
        return "auto"
    target = _running_target(isa, False)
    if target is None:
        return "auto"
    return isa if op is None or target.computes(isa, op) else "auto"


def read_schedule_file(path: Path) -> tuple[dict[str, Any], list[int]]:
    """The parsed TOML document and the line number of each ``[[step]]`` header."""
    try:
        text = path.read_text()
        document = tomllib.loads(text)
    except OSError as err:
        raise ScheduleFileError(f"{path}: cannot read: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise ScheduleFileError(f"{path}: malformed TOML: {err}") from None
    return document, _step_lines(text)


def _step_lines(text: str) -> list[int]:
    """The line number of each ``[[step]]`` header in a schedule file's ``text``."""
    return [n for n, line in enumerate(text.splitlines(), 1) if re.match(r"\s*\[\[\s*step\s*\]\]", line)]


def load_schedule(name_or_path: str | os.PathLike, op: Op, any_arithmetic: bool = False) -> AnySchedule:
    """Apply the stored schedule ``name_or_path`` (a name in ``schedules/`` or a file) to ``op``: a
    Schedule, or the Winograd plan a ``winograd`` file describes. A file made for another arithmetic
    than ``op``'s (``made_for``) is refused unless ``any_arithmetic``."""
    path = find_schedule(name_or_path)
    document, lines = read_schedule_file(path)
    if not any_arithmetic:
        _check_arithmetic(document, op, str(path))
    _warn_if_other_machine(path, document)
    return _rebuild(document, lines, op, str(path))


def arithmetic(op: Op) -> str:
    """The arithmetic of ``op`` a schedule file records (``made_for``): ``"float32"``, ``"bfloat16"``,
    ``"int8"`` (a quantized op: int8/uint8 or ternary weights) or ``"binary"`` (XNOR + popcount)."""
    if op.quant is not None:
        return "binary" if op.quant.binary else "int8"
    return op.dtype


def _check_arithmetic(document: dict[str, Any], op: Op, source: str) -> None:
    """Refuse a document made for another arithmetic than ``op``'s, saying how to get such an op."""
    made_for = document.get("made_for")
    if made_for is None:
        return
    if made_for not in ARITHMETICS:
        raise ScheduleFileError(f"{source}: made_for must be one of {', '.join(map(repr, ARITHMETICS))}, "
                                f"got {made_for!r}")
    if made_for != arithmetic(op):
        quant = document.get("quant", {})
        spec = f"QuantSpec({', '.join(f'{k}={v!r}' for k, v in quant.items())})"
        raise ScheduleFileError(f"{source} was made for {made_for} ops, not {arithmetic(op)} ones like "
                                f"{op!r}: apply it to {OTHER_ARITHMETIC[made_for].format(quant=spec)}, or "
                                f"pass any_arithmetic=True to load_schedule to replay its steps on this op")


def _provenance(path: Path, document: dict[str, Any]) -> dict[str, Any]:
    """The ``[provenance]`` table of a schedule file's parsed ``document`` ({} if it has none)."""
    recorded = document.get("provenance", {})
    if not isinstance(recorded, dict):
        raise ScheduleFileError(f"{path}: 'provenance' must be a table ([provenance]), got {recorded!r}")
    return recorded


def schedule_from_toml(text: str, op: Op, source: str = "<schedule TOML>") -> AnySchedule:
    """The schedule (or Winograd plan) that the TOML ``text`` (as ``to_toml`` writes it) describes,
    applied to ``op``; ``source`` names the text in errors (e.g. the tuning log it comes from)."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ScheduleFileError(f"{source}: malformed TOML: {err}") from None
    return _rebuild(document, _step_lines(text), op, source)


def _rebuild(document: dict[str, Any], lines: list[int], op: Op, source: str) -> AnySchedule:
    """The schedule or Winograd plan of a parsed schedule document, on ``op``."""
    algorithm = document.get("algorithm", SCHEDULE_ALGORITHMS[0])
    if algorithm not in ALGORITHMS:
        raise ScheduleFileError(f"{source}: algorithm must be one of {', '.join(map(repr, ALGORITHMS))}, "
                                f"got {algorithm!r}")
    if algorithm == WINOGRAD:
        return _winograd(document, op, source)
    if "winograd" in document:
        raise ScheduleFileError(f"{source}: a [winograd] table goes with algorithm = 'winograd', not "
                                f"{algorithm!r}")
    return _replay(document, lines, op, source)


def _winograd(document: dict[str, Any], op: Op, source: str) -> AnyPlan:
    """The Winograd plan of a parsed ``algorithm = "winograd"`` document, on ``op``."""
    table = document.get("winograd")
    if "step" in document or not isinstance(table, dict) or "tile" not in table:
        raise ScheduleFileError(f"{source}: a winograd plan has no [[step]] tables but a [winograd] table "
                                f"with tile = 2 or 4 (F(tile x tile, 3x3)), and optionally gemm_rows, "
                                f"gemm_cols and [winograd.stages]")
    unknown = sorted(set(table) - set(WINOGRAD_KEYS))
    if unknown:
        raise ScheduleFileError(f"{source}: [winograd] has no key {unknown[0]!r}; allowed: "
                                f"{', '.join(WINOGRAD_KEYS)}")
    try:
        found = winograd_plan(op, table["tile"], table.get("gemm_rows"), table.get("gemm_cols"))
    except WinogradError as err:
        raise ScheduleFileError(f"{source}: {err}") from None
    stages = table.get("stages", {})
    if not isinstance(stages, dict):
        raise ScheduleFileError(f"{source}: 'stages' must be a table ([winograd.stages]), got {stages!r}")
    for name, steps in stages.items():
        if name not in found.schedules:
            raise ScheduleFileError(f"{source}: [winograd.stages] names stage {name!r}; the stages with a "
                                    f"schedule of {found.algorithm} of this op are: "
                                    f"{', '.join(found.schedules) or 'none (its stages are generated)'}")
        if not isinstance(steps, list):
            raise ScheduleFileError(f"{source}: stage {name!r} must be a list of steps, got {steps!r}")
        schedule = Schedule(found.schedules[name].op)
        for number, entry in enumerate(steps, 1):
            try:
                schedule = apply_step(schedule, entry)
            except (ScheduleError, TypeError) as err:
                raise ScheduleFileError(f"{source}: stage {name} step {number}: {err}") from None
        found = found.with_stage(name, schedule)
    return found


def _replay(document: dict[str, Any], lines: list[int], op: Op, source: str) -> Schedule:
    """Apply the ``[[step]]`` tables of a parsed schedule document to ``op``."""
    if "step" not in document:
        raise ScheduleFileError(f"{source}: no [[step]] tables; a schedule with no steps (the naive loop "
                                f"nest) must say so with 'step = []'")
    steps = document["step"]
    if not isinstance(steps, list):
        raise ScheduleFileError(f"{source}: 'step' must be an array of tables ([[step]])")
    schedule = Schedule(op)
    # a tensorized schedule's splits are fragment and tile sizes, kept as they are on a smaller op
    # (its partial tiles zero-filled); the others' factors are clamped to the loops' extents
    clamp = not any(isinstance(entry, dict) and "tensorize" in entry for entry in steps)
    for number, (line, entry) in enumerate(zip(lines, steps), 1):
        where = f"{source}:{line}: step {number}"
        try:
            schedule = apply_step(schedule, entry, clamp)
        except (ScheduleError, TypeError) as err:
            raise ScheduleFileError(f"{where}: {err}") from None
    return schedule


def _warn_if_other_machine(path: Path, document: dict[str, Any]) -> None:
    """Warn (once per file and process) when the schedule in ``path`` (parsed: ``document``) was recorded
    on another machine or searched on an ISA this CPU lacks."""
    key = path.resolve()
    if key in _warned:
        return
    stored = _stored(path, document)
    mismatch = machine_mismatch(_provenance(path, document))
    if not stored.isa_here:
        _warned.add(key)
        warnings.warn(f"schedule {path.stem!r} ({path}) was {stored.summary()}", OtherMachineWarning,
                      stacklevel=3)
    elif mismatch:
        _warned.add(key)
        warnings.warn(f"schedule {path.stem!r} ({path}) was found {mismatch}: it may not be the fastest "
                      f"schedule here", OtherMachineWarning, stacklevel=3)


def apply_step(schedule: Schedule, entry: Any, clamp: bool = True) -> Schedule:
    """Apply one ``[[step]]`` table to ``schedule`` (``clamp``: a split, tile or unroll factor
    clamped to its loop's extent)."""
    if not isinstance(entry, dict) or len(entry) != 1:
        raise ScheduleError(f"a step must have exactly one key, the primitive ({', '.join(PRIMITIVES)}), "
                            f"got {entry!r}")
    (primitive, value), = entry.items()
    if primitive not in PRIMITIVES:
        close = difflib.get_close_matches(primitive, PRIMITIVES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ScheduleError(f"unknown primitive {primitive!r}{hint}; use one of {', '.join(PRIMITIVES)}")
    if clamp and primitive in ("split", "tile", "unroll"):
        value = _clamped(schedule, primitive, value)
    method = getattr(schedule, primitive)
    if isinstance(value, dict):
        return method(**value)
    return method(*value) if isinstance(value, list) else method(value)


def _clamped(schedule: Schedule, primitive: str, value: Any) -> Any:
    """Factors of a split/tile/unroll clamped to the extents of their loops in ``schedule``."""
    def fit(loop: Any, factor: Any) -> Any:
        if isinstance(factor, int) and not isinstance(factor, bool) and factor > 1:
            return min(factor, schedule.loop(loop, primitive).extent)
        return factor
    if isinstance(value, dict):
        return {loop: fit(loop, factor) for loop, factor in value.items()}
    if isinstance(value, list) and len(value) == 2:
        return [value[0], fit(*value)]
    return value


def to_toml(schedule: AnySchedule, name: str = "schedule", description: str = "",
            provenance: Mapping[str, Any] | None = None, algorithm: str | None = None,
            made_for: bool = False) -> str:
    """The TOML text of ``schedule``'s steps, or of a Winograd plan (module docstring), after a
    ``[provenance]`` table when given; ``algorithm`` (one of ``SCHEDULE_ALGORITHMS``; a plan's is
    ``winograd``) names the algorithm a schedule's loop nest is; ``made_for``: record the arithmetic of
    the schedule's op (``made_for``, and a quantized op's ``quant``). ``load_schedule`` on it rebuilds
    the schedule or plan."""
    plan = not isinstance(schedule, Schedule)
    allowed = (WINOGRAD,) if plan else SCHEDULE_ALGORITHMS
    if algorithm is not None and algorithm not in allowed:
        what = "a Winograd plan" if plan else "a schedule (a loop nest)"
        raise ValueError(f"the algorithm of {what} is one of {', '.join(map(repr, allowed))}, "
                         f"got {algorithm!r}")
    algorithm = WINOGRAD if plan else algorithm
    lines = [f"name = {_value(name)}", f"description = {_value(description)}"]
    if algorithm is not None:
        lines.append(f"algorithm = {_value(algorithm)}")
    if made_for:
        lines.append(f"made_for = {_value(arithmetic(schedule.op))}")
        if schedule.op.quant is not None:
            spec = {k: v if isinstance(v, str) else bool(v)       # a numpy bool is a bool here
                    for k, v in dataclasses.asdict(schedule.op.quant).items()}
            lines.append(f"quant = {_value(spec)}")
    if not plan and not schedule.steps:
        lines.append("step = []")
    if provenance:
        lines += ["", "[provenance]"] + [f"{key} = {_value(value)}" for key, value in provenance.items()]
    if plan:
        lines += _plan_lines(schedule)
    else:
        for step in schedule.steps:
            lines += ["", "[[step]]", f"{step.primitive} = {_value(_step_value(step))}"]
    return "\n".join(lines) + "\n"


def _plan_lines(plan: AnyPlan) -> list[str]:
    """The ``[winograd]`` table of ``plan``: its tile, GEMM block and the stage schedules that differ
    from the default plan's with that tile and block."""
    lines = ["", "[winograd]", f"tile = {plan.m}"]
    lines += [f"{key} = {getattr(plan, key)}" for key in ("gemm_rows", "gemm_cols") if getattr(plan, key)]
    default = winograd_plan(plan.op, plan.m, plan.gemm_rows, plan.gemm_cols).schedules
    changed = {name: s for name, s in plan.schedules.items() if s.steps != default[name].steps}
    if changed:
        lines += ["", "[winograd.stages]"]
        for name, schedule in changed.items():
            steps = [f"  {{ {step.primitive} = {_value(_step_value(step))} }}," for step in schedule.steps]
            lines += [f"{name} = [", *steps, "]"]
    return lines


def save_schedule(schedule: AnySchedule, path: str | os.PathLike, name: str = "", description: str = "",
                  isa: str = "auto", threads: int = 1, algorithm: str | None = None) -> Path:
    """Write ``schedule`` (or a Winograd plan) to ``path`` as TOML, atomically (name defaults to the
    file's stem), with its provenance: this machine, now, and the ``isa`` and ``threads`` it was chosen
    with (default: the ISA ``compile()`` picks here, one thread; x86's tile variant: a tile schedule,
    recorded as is: compile it with that variant); ``algorithm``: what a schedule's loop nest is
    (``to_toml``). The file records the arithmetic of the schedule's op (``made_for``, ``quant``)."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    isa = target_of_isa(isa).resolve_isa(isa, integer=schedule.op.quant is not None)
    path = Path(path)
    return write_text_atomically(path, to_toml(schedule, name or path.stem, description,
                                               machine_provenance(isa=isa, threads=threads), algorithm,
                                               made_for=True))


def _step_value(step: Step) -> Any:
    if step.kwargs:
        return dict(step.kwargs)
    return step.args[0] if len(step.args) == 1 else list(step.args)


def _value(value: Any) -> str:
    """A TOML literal of a str, int, float (finite), list or dict of those."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {value!r} to TOML")
