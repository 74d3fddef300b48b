"""The ``loopopt`` command: compare, show, reuse, layers, report, cache, machine, tune, onnx.

User mistakes (unknown layer or schedule, malformed ``--conv`` spec or schedule file,
unwritable path or cache, an op that needs more memory than is available) print one line
``loopopt: error: ...`` and exit with status 2, without a traceback. A reader that closes the
output early (``loopopt layers | head -1``) ends the command quietly with status 141, as a
command killed by SIGPIPE. An interrupt (Ctrl-C, SIGINT) ends it with one line ``loopopt:
interrupted ...`` (for ``tune``: where the trials measured so far are) and status 130.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import difflib
import html
import json
import os
import signal
import sys
import tempfile
import warnings
from collections.abc import Sequence
from itertools import takewhile
from pathlib import Path
from typing import TYPE_CHECKING

from .buffers import MemoryLimitError
from .cbuild import BuildError
from .machine import loopopt_version
from .ops import DTYPES
from .targets import TargetUnavailableError
from .targets.registry import isa_names, target, target_names, target_of_isa

if TYPE_CHECKING:
    from .ops import Conv2d

DEFAULT_SCHEDULES = "naive,tiled,output_stationary,weight_stationary,input_stationary"
GPU_SCHEDULES = "gpu_naive,gpu_tiled,gpu_staged"   # compare's rows on a GPU target (GPU_PRESETS)
USAGE_ERROR = 2
BROKEN_PIPE = 128 + signal.SIGPIPE
INTERRUPTED = 128 + signal.SIGINT
REPORT_SUFFIXES = {".md": "Markdown", ".html": "HTML", ".htm": "HTML"}
REPORT_STYLE = ("body{font-family:system-ui,sans-serif;max-width:1400px;margin:2em auto;padding:0 1em;"
                "color:#222}table{border-collapse:collapse;font-size:0.9em}"
                "th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:right}th{background:#f3f3f3}"
                "td:first-child,td:nth-child(2){text-align:left}img{max-width:100%}"
                "figcaption{color:#555;font-size:0.9em}")
FIGURE_NOTE = "Each panel's title says what it shows; the line under it, what to look for."
CONV_SYNTAX = "C,K,KH[xKW],H[xW][,stride=S][,padding=P][,dilation=D][,groups=G][,bias=0|1]"
CONV_OPTIONS = ("stride", "padding", "dilation", "groups", "bias")
MATMUL_SYNTAX = "M,N,K[,batch=B[xB2...]][,trans_a=0|1][,trans_b=0|1]"
EXAMPLES = {
    "layers": ["loopopt layers --filter mobilenetv2"],
    "compare": ["loopopt compare --layer resnet50.conv2_x --schedules naive,tiled,resnet50.conv2_x "
                "--plot out.png",
                "loopopt compare --conv 32,64,3,112,stride=2,padding=1 --batch 4 --no-reuse",
                "loopopt compare --matmul 256,256,512 --json",
                "loopopt compare --layer resnet50.conv3_x --algorithms --log tune.db",
                "loopopt compare --target cuda --layer resnet50.conv2_x --batch 32"],
    "show": ["loopopt show --conv 96,96,3,28,padding=1,groups=96 --schedule output_stationary --no-source"],
    "reuse": ["loopopt reuse --conv 64,64,1x3,56x28,padding=0x1 --schedule tiled --granularity element",
              "loopopt reuse --layer resnet50.conv2_x --schedule output_stationary --plot reuse.png"],
    "report": ["loopopt report --layer mobilenetv2.block2.depthwise -o report.html"],
    "cache": ["loopopt cache info", "loopopt cache trim", "loopopt cache clear"],
    "onnx": ["loopopt onnx model.onnx --plot where.png",
             "loopopt onnx model.onnx --tune --trials 16 --log tune.db --threads 2 --json"],
    "tune": ["loopopt tune --conv 48,96,3,75,stride=2,padding=1 --trials 32 --log tune.db --save mine.toml",
             "loopopt tune --matmul 384,768,3072 --int8 --seconds 60 --json",
             "loopopt tune --layer resnet50.conv3_x --algorithms direct,winograd",
             "loopopt tune --conv 64,64,3,56,padding=1 --scheduler tcp://scheduler:8786 --log tune.db",
             "loopopt tune --target cuda --layer resnet50.conv2_x --dtype float16 --trials 16 --log gpu.db"],
}
STORED_VARIANTS = {"fp32": "", "int8": ".int8", "bf16": ".bf16"}   # stored schedule name = layer + suffix
VARIANT_OF = {"float32": "fp32", "int8": "int8", "bfloat16": "bf16"}   # schedule_file.arithmetic -> variant
INT8_SPEC = {"activation": "uint8", "per_channel": True, "weight_symmetric": True, "output": "uint8",
             "weight": "int8"}
QUANT_CHOICES = (("--activation", "activation"), ("--weight", "weight"), ("--per-tensor", "per_tensor"),
                 ("--asymmetric-weights", "asymmetric_weights"), ("--quant-output", "quant_output"))


class UsageError(Exception):
    """A mistake of the user, reported in one line with exit status 2."""


def _spec_pair(text: str, field: str, low: int) -> tuple[int, int]:
    """``N`` or ``NxM`` (integers >= ``low``) of the --conv field ``field``."""
    parts = text.split("x")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if len(parts) > 2 or not values or min(values) < low:
        raise UsageError(f"--conv field {field} must be N or NxM with integers >= {low}, got {text!r} "
                         f"(syntax: {CONV_SYNTAX})")
    return values[0], values[-1]


def _spec_int(text: str, field: str) -> int:
    """A positive integer of the --conv field ``field``."""
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"--conv field {field} must be a positive integer, got {text!r} "
                         f"(syntax: {CONV_SYNTAX})")
    return int(text)


def _spec_option(key: str, value: str) -> bool | int | tuple[int, int]:
    """The Conv2d argument of the --conv option ``key=value``."""
    if key == "bias":
        if value not in ("0", "1"):
            raise UsageError(f"--conv field bias must be 0 or 1, got {value!r}")
        return value == "1"
    if key == "groups":
        return _spec_int(value, "groups")
    return _spec_pair(value, key, low=0 if key == "padding" else 1)


def parse_conv(spec: str, batch: int = 1, dtype: str = "float32") -> Conv2d:
    """The Conv2d of a --conv spec ``C,K,KH[xKW],H[xW]`` followed by optional ``key=value`` fields
    (``stride``, ``padding``, ``dilation``: ``N`` or ``NxM``; ``groups``; ``bias=0|1``), e.g.
    ``64,64,3,56,padding=1``; UsageError naming the bad field and what it allows."""
    from .ops import Conv2d
    fields = [f.strip() for f in spec.split(",")]
    leading = list(takewhile(lambda f: "=" not in f, fields))
    if len(leading) != 4:
        raise UsageError(f"--conv wants {CONV_SYNTAX} (e.g. 64,64,3,56,padding=1): C, K, kernel and input "
                         f"size come first, got {len(leading)} such fields in {spec!r}")
    options: dict[str, object] = {}
    for field in fields[4:]:
        key, equals, value = field.partition("=")
        if not equals:
            raise UsageError(f"--conv field {field!r} comes after key=value fields; C, K, kernel and input "
                             f"size come first ({CONV_SYNTAX})")
        if key not in CONV_OPTIONS:
            close = [o for o in CONV_OPTIONS if key and o.startswith(key)] or difflib.get_close_matches(
                key, CONV_OPTIONS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            batch_hint = " (the batch size is given with --batch)" if key == "batch" else ""
            raise UsageError(f"--conv has no field {key!r}: {hint}allowed: {', '.join(CONV_OPTIONS)}"
                             f"{batch_hint}")
        if key in options:
            raise UsageError(f"--conv field {key!r} is given twice")
        options[key] = _spec_option(key, value)
    channels = (_spec_int(leading[0], "C (input channels)"), _spec_int(leading[1], "K (output channels)"))
    kernel = _spec_pair(leading[2], "KH[xKW] (kernel size)", low=1)
    height, width = _spec_pair(leading[3], "H[xW] (input size)", low=1)
    try:
        return Conv2d(*channels, kernel, batch=batch, height=height, width=width, dtype=dtype, **options)
    except ValueError as err:
        raise UsageError(f"--conv {spec}: {err}") from None


def parse_matmul(spec: str, dtype: str = "float32"):
    """The Matmul (of ``dtype`` inputs) of a --matmul spec ``M,N,K`` followed by optional
    ``batch=B[xB2...]``, ``trans_a=0|1``, ``trans_b=0|1``; UsageError naming the bad field."""
    from .ops import Matmul
    fields = [f.strip() for f in spec.split(",")]
    try:
        m, n, k = (int(v) for v in fields[:3])
    except ValueError:
        raise UsageError(f"--matmul wants {MATMUL_SYNTAX} (three integers first), got {spec!r}") from None
    options: dict[str, object] = {}
    for field in fields[3:]:
        key, _, value = field.partition("=")
        if key == "batch" and all(v.isdigit() for v in value.split("x")):
            options[key] = tuple(int(v) for v in value.split("x"))
        elif key in ("trans_a", "trans_b") and value in ("0", "1"):
            options[key] = value == "1"
        else:
            raise UsageError(f"--matmul field {field!r} is not one of batch=B[xB2...], trans_a=0|1, "
                             f"trans_b=0|1 ({MATMUL_SYNTAX})")
    try:
        return Matmul(m, n, k, dtype=dtype, **options)
    except ValueError as err:
        raise UsageError(f"--matmul {spec}: {err}") from None


def parse_contraction(expr: str, sizes: str | None, padding: str | None, dtype: str = "float32"):
    """The Contraction of --contraction ``expr`` with --sizes ``name=N,...`` (a tensor's shape as
    ``NAME=AxBxC``) and --padding ``NAME,...`` (inputs read as zero outside); UsageError naming the bad
    field."""
    from .ops import Contraction
    if not sizes:
        raise UsageError("--contraction needs --sizes name=N,... (the extent of every dim)")
    extents: dict[str, object] = {}
    for field in sizes.split(","):
        name, equals, value = (part.strip() for part in field.partition("="))
        parts = value.split("x")
        if not equals or not name or not all(p.isdigit() for p in parts):
            raise UsageError(f"--sizes field {field!r} is not name=N or NAME=AxB... (e.g. i=64,k=3,I=9x9)")
        extents[name] = int(value) if len(parts) == 1 else tuple(int(p) for p in parts)
    padded = [name.strip() for name in padding.split(",")] if padding else []
    try:
        return Contraction(expr, extents, padding=padded, dtype=dtype)
    except (ValueError, TypeError) as err:
        raise UsageError(str(err).splitlines()[0]) from None


def _op(args: argparse.Namespace):
    """The op of ``--layer``/``--conv``/``--matmul``/``--contraction``, quantized as ``--int8`` and the
    QuantSpec choices say (``_quantized``)."""
    return _quantized(args, _float_op(args))


def _quantized(args: argparse.Namespace, op):
    """``op`` with the QuantSpec of ``--int8`` (``INT8_SPEC``, changed by ``--activation``, ``--weight``,
    ``--per-tensor``, ``--asymmetric-weights``, ``--quant-output``); ``op`` itself without ``--int8``."""
    from .quant import QuantSpec
    given = [flag for flag, name in QUANT_CHOICES if getattr(args, name) not in (None, False)]
    if not args.int8:
        if given:
            raise UsageError(f"{given[0]} is a choice of the quantized op; it goes with --int8")
        return op
    if op.dtype != "float32":
        raise UsageError(f"--int8 quantizes float32 inputs; it does not combine with --dtype {op.dtype}")
    chosen = {"activation": args.activation, "weight": args.weight, "output": args.quant_output,
              "per_channel": False if args.per_tensor else None,
              "weight_symmetric": False if args.asymmetric_weights else None}
    try:
        return op.with_quant(QuantSpec(**{**INT8_SPEC, **{k: v for k, v in chosen.items() if v is not None}}))
    except ValueError as err:
        raise UsageError(f"--int8: {err}") from None


def _float_op(args: argparse.Namespace):
    from .layers import get_layer
    if args.contraction:
        if args.batch is not None:
            raise UsageError("--batch applies to --layer and --conv, not to --contraction")
        return parse_contraction(args.contraction, args.sizes, args.padding, dtype=args.dtype)
    if args.sizes or args.padding:
        raise UsageError("--sizes and --padding go with --contraction")
    if args.matmul:
        if args.batch is not None:
            raise UsageError("--batch applies to --layer and --conv, not to --matmul")
        return parse_matmul(args.matmul, dtype=args.dtype)
    if args.conv:
        return parse_conv(args.conv, batch=args.batch or 1, dtype=args.dtype)
    return get_layer(args.layer, batch=args.batch or 1, dtype=args.dtype)


def _schedule(name: str, op):
    """A dataflow preset (any op, also Matmul), a stored schedule name or a TOML path, applied to ``op``."""
    from .dataflows import GPU_PRESETS, PRESETS
    from .schedule_file import load_schedule
    for presets in (PRESETS, GPU_PRESETS):
        if name in presets:
            return presets[name](op)
    return load_schedule(name, op)


def _origin(name: str) -> str:
    """Where the stored schedule ``name`` (a name or TOML path) is read from and the CPU it was
    searched on, whether that is this CPU."""
    from .schedule_file import stored_schedule
    stored = stored_schedule(name)
    return f"stored schedule {stored.path}, {stored.summary()}"


def _winograd(name: str, op):
    """The Winograd plan ``winograd2`` / ``winograd4`` names (F(2x2,3x3), F(4x4,3x3)), None for another name;
    UsageError with the reason if Winograd does not apply to ``op``."""
    from .winograd import TILES, WinogradError, plan
    ms = {f"winograd{m}": m for m in TILES}
    if name not in ms:
        return None
    try:
        return plan(op, ms[name])
    except WinogradError as err:
        raise UsageError(f"--schedules {name}: {err}") from None


def _writable(path: str | None) -> Path | None:
    """``path`` if its directory exists and is writable (checked before any long run)."""
    if path is None:
        return None
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise UsageError(f"cannot write {path}: it is a directory")
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UsageError(f"cannot write {path}: its directory is missing or not writable")
    return target


def _print(args: argparse.Namespace, data: dict, text: str) -> None:
    """``text``, or with ``--json`` the object ``data`` with its ``units`` (``units.json_units``: SI units,
    each key named by its unit) and ``provenance`` where it has none of its own."""
    if args.json:
        from .machine import provenance
        from .units import json_units
        where = data.get("provenance") or provenance(isa=data.get("isa"))
        data = {"units": json_units(), **data, "provenance": where}
    print(json.dumps(data, indent=2, default=str) if args.json else text)


def _stored_name(layer: str | None, op) -> str | None:
    """The name of ``layer``'s stored schedule for ``op``'s arithmetic (``layer.int8`` for a quantized
    op, ...), None without a layer or a stored variant of that arithmetic."""
    from .schedule_file import arithmetic
    variant = VARIANT_OF.get(arithmetic(op))
    return None if layer is None or variant is None else layer + STORED_VARIANTS[variant]


def _default_plan(name: str, op, layer: str | None):
    """An algorithm's schedule when no tuning log has one: direct, the stored schedule of ``layer`` for
    the op's arithmetic (else the ``output_stationary`` preset); ``implicit_gemm`` and ``im2col``, their
    presets; Winograd, F(4x4,3x3) (quantized: F(2x2,3x3)). Returns (schedule or plan, where it came from)."""
    from .dataflows import PRESETS
    from .schedule_file import list_schedules, load_schedule
    from .winograd import plan
    if name == "winograd":
        default = plan(op)
        return default, f"default plan {default.algorithm.removeprefix('winograd ')}"
    if name != "direct":
        return PRESETS[name](op), "preset"
    stored = _stored_name(layer, op)
    if stored in list_schedules():
        return load_schedule(stored, op), f"stored schedule {stored}"
    return PRESETS["output_stationary"](op), "preset output_stationary"


@dataclasses.dataclass
class _Rows:
    """The rows of a comparison: schedules (or Winograd plans), their labels and ISAs, the algorithms
    skipped and why, and where the stored schedules among them come from."""

    schedules: list
    labels: list[str]
    isas: list[str]
    skipped: dict[str, str]
    origins: dict[str, str]


def _algorithm_rows(args: argparse.Namespace, op) -> _Rows:
    """One schedule (or Winograd plan) per algorithm of ``--algorithms``: the fastest in ``--log`` on
    this machine and ``--threads`` and ``--isa`` (``auto``: on any ISA, each compiled for the ISA it
    was measured on), else the default (``_default_plan``, on ``--isa``)."""
    from .schedule_file import stored_isa
    from .tune.algorithms import refusals
    from .tune.log import best_by_algorithm
    wanted = _algorithms(args.algorithms)
    layer = None if args.conv or args.matmul or args.contraction else args.layer
    why = refusals(op, wanted, args.isa, 1)          # compare runs the GEMM presets on one thread
    integer = op.quant is not None
    isa = target_of_isa(args.isa).resolve_isa(args.isa, integer)
    measured = None if args.isa == "auto" else isa
    logged = best_by_algorithm(op, args.log, args.threads, measured) if args.log else {}
    rows = _Rows([], [], [], {name: reason for name, reason in why.items() if reason}, {})
    for name in (a for a in wanted if not why[a]):
        if name in logged:
            trial = logged[name]                 # rebuilt as it was measured: its schedule on its ISA
            found = trial.to_schedule(op, f"tuning log {args.log}")
            source = f"best of log, {trial.knobs['plan']}" if "plan" in trial.knobs else "best of log"
            rows.isas.append(trial.isa)
        else:
            found, source = _default_plan(name, op, layer)
            stored = source.startswith("stored schedule") and args.isa == "auto"
            rows.isas.append(stored_isa(_stored_name(layer, op), op) if stored else isa)
        rows.schedules.append(found)
        rows.labels.append(f"{name}: {source}")
        if source.startswith("stored schedule"):
            rows.origins[rows.labels[-1]] = _origin(_stored_name(layer, op))
    return rows


def _comparison(args: argparse.Namespace):
    """The comparison ``args`` ask for and the algorithms skipped (``--algorithms``)."""
    from .compare import compare
    op = _op(args)
    if args.algorithms is not None:
        if args.schedules is not None:
            raise UsageError("--algorithms chooses the rows itself; it does not combine with --schedules")
        if args.target is not None:
            raise UsageError("--algorithms runs on the host; with --target, name the rows with --schedules")
        rows = _algorithm_rows(args, op)
    else:
        rows = _named_rows(args, op)
    if args.target is not None:      # a row's ISA where the target has it, else the target's best
        variants = target(args.target).isas()
        rows.isas[:] = [isa if isa in variants else "auto" for isa in rows.isas]
    return compare(op, rows.schedules, rows.labels, isa=rows.isas, reuse=not args.no_reuse,
                   progress=not args.quiet and sys.stderr.isatty() and not args.json, threads=args.threads,
                   origins=rows.origins,
                   target=args.target), rows.skipped


def _named_rows(args: argparse.Namespace, op) -> _Rows:
    """The rows of ``--schedules``: presets, Winograd plans, stored schedules (with the CPU they were
    searched on) and TOML files, each on ``--isa`` (``auto``: a stored schedule on the ISA it was
    searched on, where this CPU has it: an AMX tile schedule on the tiles)."""
    from .dataflows import GPU_PRESETS, PRESETS
    from .schedule_file import stored_isa
    if args.log is not None:
        raise UsageError("--log goes with --algorithms (each algorithm's best schedule in the log)")
    gpu = args.target is not None and target(args.target).has_device
    default = GPU_SCHEDULES if gpu else DEFAULT_SCHEDULES
    names = [n.strip() for n in (args.schedules or default).split(",") if n.strip()]
    if not names:
        raise UsageError("--schedules is empty")
    plans = [_winograd(name, op) for name in names]
    stems = [Path(name).name.removesuffix(".toml") for name in names]
    # a file's stem labels its row, unless another name has that stem (a stored name and a file of it)
    labels = [stem if {n for n, s in zip(names, stems) if s == stem} == {name} else name
              for name, stem in zip(names, stems)]
    stored = [plan is None and name not in PRESETS and name not in GPU_PRESETS
              for name, plan in zip(names, plans)]
    origins = {label: _origin(name) for name, label, kept in zip(names, labels, stored) if kept}
    isas = [stored_isa(name, op) if args.isa == "auto" and kept else args.isa
            for name, kept in zip(names, stored)]
    return _Rows([plan or _schedule(name, op) for name, plan in zip(names, plans)], labels, isas, {},
                 origins)


def _skipped_notes(skipped: dict[str, str]) -> list[str]:
    return [f"{name} not shown: {why}" for name, why in skipped.items()]


def _check_drawable(args: argparse.Namespace, what: str) -> None:
    """UsageError if ``what`` (which draws measured times) is asked of a ``--target`` that cannot time its
    kernels here."""
    from .targets import target
    refusal = target(args.target).timing_refusal() if args.target is not None else None
    if refusal:
        raise UsageError(f"{what} draws measured times, and target {args.target!r} cannot time kernels here: "
                         f"{refusal}")


def cmd_compare(args: argparse.Namespace) -> int:
    if args.plot:
        _check_drawable(args, "--plot")
    plot, csv_path = _writable(args.plot), _writable(args.csv)
    cmp, skipped = _comparison(args)
    if plot:
        cmp.plot(plot)
    if csv_path:
        cmp.to_csv(csv_path)
    notes = _skipped_notes(skipped) + ([f"plot written to {plot}"] if plot else [])
    data = {**cmp.to_dict(), **({"skipped": skipped} if skipped else {})}
    _print(args, data, "\n".join([str(cmp), *notes]))
    return 0


def _loop_nest(args: argparse.Namespace):
    """The one schedule ``--schedule`` names for ``show`` and ``reuse``; a Winograd plan's file (a
    pipeline of stages, not one loop nest) is a UsageError saying where it runs."""
    from .schedule import Schedule
    schedule = _schedule(args.schedule, _op(args))
    if not isinstance(schedule, Schedule):
        raise UsageError(f"--schedule {args.schedule} is a {schedule.algorithm} plan, a pipeline of stages, "
                         f"not one loop nest: {args.command} takes a schedule; compare runs the plan "
                         f"(loopopt compare --schedules {args.schedule})")
    return schedule


def cmd_show(args: argparse.Namespace) -> int:
    schedule = _loop_nest(args)
    loops = [{"name": loop.name, "extent": loop.extent, "vectorized": loop.vectorized,
              "parallel": loop.parallel, "unroll": loop.unroll} for loop in schedule.loops]
    data = {"op": repr(schedule.op), "steps": [str(s) for s in schedule.steps], "loops": loops,
            "layouts": dict(schedule.layouts),
            "pseudocode": schedule.pseudocode(None if args.isa == "auto" else args.isa)}
    text = f"{schedule.op!r}\nsteps: {', '.join(data['steps']) or '(naive)'}\n\n{data['pseudocode']}"
    if not args.no_source:
        kernel = schedule.compile(args.isa)
        data["isa"], data["source"] = kernel.isa, kernel.source
        text += f"\n\n/* generated C ({kernel.isa}) */\n{kernel.source}"
    _print(args, data, text)
    return 0


def cmd_reuse(args: argparse.Namespace) -> int:
    from .analysis import Machine, reuse
    plot = _writable(args.plot)
    schedule = _loop_nest(args)
    profile = reuse(schedule, granularity=args.granularity)
    machine = Machine.detect()
    hierarchy = profile.hierarchy(machine, set_associative=False)
    data = {"op": repr(schedule.op), "granularity": args.granularity,
            "tensors": {t: {"accesses": profile.accesses_of(t), "cold": profile.cold(t),
                            "median_distance": profile.median_distance(t),
                            "misses": {c.name: profile.misses(c.capacity_items(profile), t)
                                       for c in machine.caches}}
                        for t in profile.tensors},
            "levels": [{"name": lv.name, "accesses": lv.accesses, "misses": lv.misses, "bytes": lv.bytes,
                        "energy_j": lv.energy_pj * 1e-12} for lv in hierarchy.levels],
            "compute_energy_j": hierarchy.compute_energy_pj * 1e-12, "energy_j": hierarchy.energy_pj * 1e-12,
            "plot": str(plot) if plot else None}
    text = f"{profile.summary(machine)}\n\n{hierarchy.table()}"
    if plot:
        from .plot import plot_reuse
        name = Path(args.schedule).name.removesuffix(".toml")
        text += f"\nplot written to {plot_reuse(profile, plot, name)}"
    _print(args, data, text)
    return 0


def _stored_variants(layer: str, names: set[str]) -> dict:
    """The stored schedules of ``layer`` (``names``: every stored name) by variant (fp32, int8,
    bf16), each the ``StoredSchedule`` the lookup finds."""
    from .schedule_file import stored_schedule
    return {variant: stored_schedule(layer + suffix) for variant, suffix in STORED_VARIANTS.items()
            if layer + suffix in names}


def cmd_layers(args: argparse.Namespace) -> int:
    from .layers import LAYERS
    from .schedule_file import list_schedules
    from .units import significant
    names = set(list_schedules())
    specs = [s for s in LAYERS.values() if args.filter in s.name]
    rows, notes = [], {}
    line = ("{name:<32} {C:>5} {K:>5} {kernel:>6} {HW:>5} {stride:>6} {groups:>6} {kind:>9} {GFLOP:>7}  "
            "{stored}").format
    lines = [line(name="name", C="C", K="K", kernel="kernel", HW="HxW", stride="stride", groups="groups",
                  kind="kind", GFLOP="GFLOP", stored="stored schedules [where searched]")]
    for spec in specs:
        flops = spec.conv().flops
        row = {"name": spec.name, "in_channels": spec.in_channels, "out_channels": spec.out_channels,
               "kernel_size": spec.kernel_size, "size": spec.size, "stride": spec.stride,
               "padding": spec.padding, "groups": spec.groups, "kind": spec.kind, "flops": flops}
        stored = _stored_variants(spec.name, names)
        row["stored"] = {variant: {"path": str(found.path), "cpu": found.cpu, "cpu_key": found.cpu_key,
                                   "this_cpu": found.this_cpu} for variant, found in stored.items()}
        cells = [f"{variant} [{notes.setdefault(found.summary(), len(notes) + 1)}]"
                 for variant, found in stored.items()]
        rows.append(row)
        lines.append(line(name=spec.name, C=spec.in_channels, K=spec.out_channels, kernel=spec.kernel_size,
                          HW=spec.size, stride=spec.stride, groups=spec.groups, kind=spec.kind,
                          GFLOP=significant(flops / 1e9), stored=" ".join(cells) or "-"))
    lines += [f"[{number}] {summary}" for summary, number in notes.items()]
    _print(args, {"filter": args.filter, "layers": rows}, "\n".join(lines))
    return 0


def _figures(cmp) -> list[tuple[str, bytes]]:
    """(caption, PNG bytes) of every plot of ``cmp``."""
    from .plot import FIGURES
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for caption, maker, needs_reuse in FIGURES:
            if cmp.profiles or not needs_reuse:
                figures.append((caption, maker(cmp, Path(tmp) / "figure.png").read_bytes()))
    return figures


def cmd_report(args: argparse.Namespace) -> int:
    output = _writable(args.output)
    if output.suffix.lower() not in REPORT_SUFFIXES:
        allowed = ", ".join(f"{suffix} ({kind})" for suffix, kind in REPORT_SUFFIXES.items())
        raise UsageError(f"cannot write a report to {output}: its suffix must be one of {allowed}, got "
                         f"{output.suffix or 'none'} (for a PDF, print the HTML report from a browser)")
    _check_drawable(args, "a report")
    cmp, skipped = _comparison(args)
    notes = "".join(f"\n{note}" for note in _skipped_notes(skipped))
    figures = [(c, base64.b64encode(png).decode()) for c, png in _figures(cmp)]
    if REPORT_SUFFIXES[output.suffix.lower()] == "HTML":
        body = "".join(f"<h2>{html.escape(c)}</h2><figure><img alt='{html.escape(c)}' "
                       f"src='data:image/png;base64,{b}'><figcaption>{html.escape(FIGURE_NOTE)}</figcaption>"
                       f"</figure>" for c, b in figures)
        skipped_notes = f"<pre>{html.escape(notes.strip())}</pre>" if notes.strip() else ""
        text = (f"<!doctype html><html><head><meta charset='utf-8'><title>loopopt report</title>"
                f"<style>{REPORT_STYLE}</style></head><body><h1>loopopt report</h1>{cmp._repr_html_()}"
                f"{skipped_notes}{body}</body></html>")
    else:
        body = "".join(f"\n## {c}\n\n![{c}](data:image/png;base64,{b})\n" for c, b in figures)
        text = f"# loopopt report\n\n```\n{cmp}{notes}\n```\n{body}"
    output.write_text(text)
    _print(args, {"report": str(output), **cmp.to_dict()}, f"{cmp}\nreport written to {output}")
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    from .cbuild import cache_info, clear_cache, trim_cache
    info = {"info": cache_info, "trim": trim_cache, "clear": clear_cache}[args.action]()
    data = {"action": args.action, **dataclasses.asdict(info)}
    _print(args, data, str(info) if args.action == "info" else info.removed())
    return 0


def cmd_machine(args: argparse.Namespace) -> int:
    from .machine import machine_profile, provenance
    profile = machine_profile(remeasure=args.remeasure)
    _print(args, {**profile.to_dict(), "provenance": provenance()}, str(profile))
    return 0


def _machine_parser(sub, json_flag: argparse.ArgumentParser) -> None:
    """The ``machine`` subcommand: this machine's profile (peaks, bandwidths, caches)."""
    p = sub.add_parser("machine", parents=[json_flag],
                       help="this machine's measured profile: peaks per ISA, bandwidth per memory level, "
                            "caches",
                       description="Show this machine's profile (measured once, then read from the cache): "
                                   "one core's fp32/int8 peak per ISA, read bandwidth per memory level, "
                                   "cache sizes. Every %% of peak and roofline uses it. Example: loopopt "
                                   "machine --json")
    p.add_argument("--remeasure", action="store_true",
                   help="measure again (on a quiet machine) and replace the cached profile")
    p.set_defaults(run=cmd_machine)


def cmd_tune(args: argparse.Namespace) -> int:
    from .schedule_file import save_schedule
    from .tune import tune
    if args.plot:
        _check_drawable(args, "--plot")
    plot, save = _writable(args.plot), _writable(args.save)
    if args.log is not None:
        _writable(args.log)
    op = _op(args)
    with _executor(args.scheduler) as executor:
        result = tune(op, trials=args.trials, seconds=args.seconds, threads=args.threads, isa=args.isa,
                      log=args.log, executor=executor, progress=sys.stderr.isatty() and not args.json,
                      seed=args.seed, budget=args.budget, algorithms=_algorithms(args.algorithms),
                      target=args.target)
    notes = []
    if plot:
        notes.append(f"plot written to {result.plot(plot)}")
    if save:
        saved = save_schedule(result.best, save, description=result.provenance(), isa=result.isa,
                              threads=result.threads, algorithm=result.algorithm)
        notes.append(f"{result.algorithm} schedule of {result.winner_label} saved to {saved}")
    data = {**result.to_dict(), "plot": str(plot) if plot else None, "saved": str(save) if save else None}
    _print(args, data, "\n".join([result.table(), "", str(result), *notes]))
    return 0


@contextlib.contextmanager
def _executor(scheduler: str | None):
    """The executor of ``loopopt tune``: None (this machine's worker process), or a client of the Dask
    scheduler ``--scheduler`` names (``local``: a LocalCluster here)."""
    if scheduler is None:
        yield None
        return
    from .tune.cluster import dask_client
    with dask_client(scheduler) as client:
        yield client


def _algorithms(text: str) -> tuple[str, ...]:
    """``--algorithms`` of tune and compare: "auto" or the algorithms named (a UsageError lists the
    allowed ones)."""
    from .tune.algorithms import selected
    try:
        return selected("auto" if text == "auto" else [a.strip() for a in text.split(",")])
    except ValueError as err:
        raise UsageError(f"--algorithms: {err}") from None


def _tune_parser(sub, json_flag: argparse.ArgumentParser) -> None:
    """The ``tune`` subcommand: search the fastest schedule of one op."""
    description = ("Search the fastest verified schedule of a layer, any convolution or a matrix multiply: "
                   "register-blocked candidates, each compiled, verified and timed in a worker process, "
                   "optionally logged in an SQLite tuning log (reruns skip what it holds).")
    p = sub.add_parser("tune", parents=[json_flag], help="search the fastest schedule of one op (lo.tune)",
                       description=description, epilog=_examples("tune"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _op_arguments(p)
    p.add_argument("--trials", type=_positive, default=64, help="measured candidates at most (default 64)")
    p.add_argument("--seconds", type=_positive_float, help="wall-clock limit of the search (default none)")
    p.add_argument("--threads", type=_positive, default=1, help="threads of the tuned kernel (default 1)")
    p.add_argument("--budget", type=_positive_float, default=0.2,
                   help="seconds of timed runs per candidate (default 0.2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the search's random choices (default 0)")
    p.add_argument("--algorithms", default="auto",
                   help="auto (default: direct, implicit_gemm, im2col and winograd where they apply) or a "
                        "comma-separated subset; the result says which won and by how much (--save saves the "
                        "winner, a Winograd plan too)")
    p.add_argument("--log", help="SQLite tuning log: trials are appended; logged ones are not measured again")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="compile and measure on the workers of this Dask scheduler (tcp://HOST:PORT; "
                        "'local': a LocalCluster of worker processes on this machine); needs pip install "
                        "-e '.[distributed]'")
    p.add_argument("--save", help="write the winner here as TOML (with provenance and its algorithm; a "
                                  "Winograd plan too: lo.load_schedule and --schedules read it back)")
    p.add_argument("--plot", help="write a PNG of the rate per trial and the best so far here")
    p.add_argument("--target", choices=target_names(),
                   help="search this target's kernels (default: the one --isa belongs to); cuda: the GPU "
                        "presets' tiles (--dtype float16: tensor cores), compiled on every core, timed on "
                        "the GPU one at a time, logged under the GPU's name; neon under emulation: ranked "
                        "by the kernel model, the best verified under qemu, nothing timed or logged")
    p.set_defaults(run=cmd_tune)


def cmd_onnx(args: argparse.Namespace) -> int:
    try:
        from .onnx.report import model_report
    except ImportError as error:
        raise UsageError(f"loopopt onnx needs the onnx package ({error}): "
                         "pip install 'loopopt[onnx]'") from error
    plot = _writable(args.plot)
    if args.log is not None:
        _writable(args.log)
    report = model_report(args.model, threads=args.threads, tune_trials=args.trials if args.tune else 0,
                          log=args.log, reuse=not args.no_reuse, budget=args.budget, isa=args.isa,
                          progress=sys.stderr.isatty() and not args.json)
    notes = [f"plot written to {report.plot(plot)}"] if plot else []
    data = {**report.to_dict(), "plot": str(plot) if plot else None}
    _print(args, data, "\n".join([report.table(), *notes]))
    return 0


def _onnx_parser(sub, json_flag: argparse.ArgumentParser) -> None:
    """The ``onnx`` subcommand: where a model's time goes, node by node."""
    description = ("Every compute node (Conv, QLinearConv, MatMul, QLinearMatMul, Gemm, and each fused "
                   "DequantizeLinear -> Conv/MatMul/Gemm -> QuantizeLinear group of a QDQ model) of an ONNX "
                   "model with static input shapes: its loopopt op, MFLOP, time with the backend's schedule "
                   "(and tuned with --tune), % of peak, DRAM traffic, onnxruntime's time for the node alone "
                   "when onnxruntime is installed, and for a quantized node how far loopopt's output is from "
                   "onnxruntime's (in steps of the output) and which one is exact where they differ; totals, "
                   "and a plot of where the time goes.")
    p = sub.add_parser("onnx", parents=[json_flag], help="per-node report of an ONNX model",
                       description=description, epilog=_examples("onnx"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="the .onnx file")
    p.add_argument("--tune", action="store_true", help="also tune each distinct node shape (lo.tune)")
    p.add_argument("--trials", type=_positive, default=16,
                   help="trials per distinct shape with --tune (default 16)")
    p.add_argument("--log", help="SQLite tuning log: its best schedules run the nodes; --tune appends to it")
    p.add_argument("--threads", type=_positive, default=1,
                   help="threads of loopopt and onnxruntime (default 1)")
    p.add_argument("--no-reuse", action="store_true", help="skip the reuse and traffic analysis")
    p.add_argument("--budget", type=_positive_float, default=0.5,
                   help="seconds of timed runs per schedule and node (default 0.5)")
    p.add_argument("--isa", default="auto", choices=("auto", *isa_names()),
                   help="ISA of the kernels, the tuning and the comparisons (default auto)")
    p.add_argument("--plot", help="write a PNG of the time per node here")
    p.set_defaults(run=cmd_onnx)


def _positive_float(text: str) -> float:
    """An argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def _positive(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def _op_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--layer", default="resnet50.conv2_x", help="layer name (see `loopopt layers`)")
    group.add_argument("--conv", metavar="SPEC",
                       help=f"any convolution, {CONV_SYNTAX} (e.g. 64,64,3,56,padding=1)")
    group.add_argument("--matmul", metavar="SPEC",
                       help=f"a matrix multiply instead of a layer, {MATMUL_SYNTAX} "
                            f"(e.g. 64,64,64,batch=8,trans_b=1)")
    group.add_argument("--contraction", metavar="EXPR",
                       help="any loop nest OUT[...] += IN0[...] * IN1[...] with affine indices "
                            "(e.g. 'C[i,j] += A[i,k] * B[k,j]'), with --sizes")
    parser.add_argument("--sizes", metavar="NAME=N,...",
                        help="--contraction's dim extents (and tensor shapes NAME=AxB), e.g. i=64,j=64,k=32")
    parser.add_argument("--padding", metavar="NAME,...",
                        help="--contraction's inputs read as zero outside their shape")
    parser.add_argument("--batch", type=_positive, help="batch size of the layer or --conv (default 1)")
    parser.add_argument("--isa", default="auto", choices=("auto", *isa_names()),
                        help="instruction set (amx: the AMX tile kernels of a quantized op)")
    parser.add_argument("--dtype", default="float32", choices=DTYPES,
                        help="element type of the inputs (bfloat16: rounded to bf16, float32 accumulation)")
    _quant_arguments(parser)


def _quant_arguments(parser: argparse.ArgumentParser) -> None:
    """``--int8`` and the QuantSpec choices (``_quantized``), for every command that builds an op."""
    from .quant import ACTIVATIONS, BINARY, OUTPUTS, WEIGHT_KINDS
    group = parser.add_argument_group("quantized op (QuantSpec)")
    group.add_argument("--int8", action="store_true",
                       help="quantize the op: integer kernels, exact int32 accumulation (default: uint8 "
                            "activations, int8 weights per output channel, symmetric, uint8 output)")
    group.add_argument("--activation", choices=(*ACTIVATIONS, BINARY),
                       help="with --int8: activations (default uint8; binary goes with --weight binary)")
    group.add_argument("--weight", choices=WEIGHT_KINDS, help="with --int8: weights (default int8)")
    group.add_argument("--per-tensor", action="store_true",
                       help="with --int8: one weight scale and zero point (default: per output channel)")
    group.add_argument("--asymmetric-weights", action="store_true",
                       help="with --int8: weights with any zero point (default symmetric)")
    group.add_argument("--quant-output", choices=OUTPUTS,
                       help="with --int8: the output (default uint8; float32: dequantized; int32: the "
                            "accumulators)")


def _compare_arguments(parser: argparse.ArgumentParser) -> None:
    _op_arguments(parser)
    parser.add_argument("--schedules",
                        help=f"comma-separated schedule names or TOML paths (default {DEFAULT_SCHEDULES})")
    parser.add_argument("--algorithms", nargs="?", const="auto",
                        help="instead of --schedules, one row per algorithm (auto: direct, implicit_gemm, "
                             "im2col, winograd where they apply, or a comma-separated subset): its best "
                             "schedule in --log, else the stored schedule of --layer / the presets / "
                             "Winograd F(4x4,3x3)")
    parser.add_argument("--log", help="with --algorithms: the tuning log to take each algorithm's best from")
    parser.add_argument("--threads", type=_positive, default=1,
                        help="threads for schedules with a parallel loop (default 1)")
    parser.add_argument("--no-reuse", action="store_true", help="skip the reuse-distance analysis")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--target", choices=target_names(),
                        help="build the schedules for this target (default: the host's); where it cannot "
                             "time them here (neon under qemu) each is verified and the kernel model's "
                             f"predicted time shown; cuda: an NVIDIA GPU, default schedules {GPU_SCHEDULES}, "
                             "%% of the GPU's FFMA peak")


def _examples(*commands: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for c in commands for line in EXAMPLES[c])


def parser() -> argparse.ArgumentParser:
    """The argument parser of the ``loopopt`` command."""
    json_flag = argparse.ArgumentParser(add_help=False)
    json_flag.add_argument("--json", action="store_true", help="machine-readable output")
    main_parser = argparse.ArgumentParser(prog="loopopt",
                                          description="Explore loop schedules of conv2d/matmul.",
                                          epilog=_examples(*EXAMPLES),
                                          formatter_class=argparse.RawDescriptionHelpFormatter)
    main_parser.add_argument("--version", action="version", version=f"%(prog)s {loopopt_version()}")
    sub = main_parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[json_flag], help=description, description=description,
                              epilog=_examples(name), formatter_class=argparse.RawDescriptionHelpFormatter)

    p = add("compare", "time and analyse schedules side by side")
    _compare_arguments(p)
    p.add_argument("--plot", help="write the comparison dashboard (PNG) here")
    p.add_argument("--csv", help="write the table as CSV here")
    p.set_defaults(run=cmd_compare)
    p = add("show", "print a schedule's loop nest and generated C")
    _op_arguments(p)
    p.add_argument("--schedule", default="naive", help="schedule name or TOML path")
    p.add_argument("--no-source", action="store_true", help="only the loop nest, no C")
    p.set_defaults(run=cmd_show)
    p = add("reuse", "reuse-distance report of a schedule")
    _op_arguments(p)
    p.add_argument("--schedule", default="naive", help="schedule name or TOML path")
    p.add_argument("--granularity", default="line", choices=("line", "element"))
    p.add_argument("--plot", help="write its reuse-distance histograms and miss-ratio curve (PNG) here")
    p.set_defaults(run=cmd_reuse)
    p = add("layers", "catalog of real layer shapes")
    p.add_argument("--filter", default="", help="only names containing this text (e.g. resnet50)")
    p.set_defaults(run=cmd_layers)
    p = add("report", "Markdown or HTML report with embedded plots")
    _compare_arguments(p)
    p.add_argument("--output", "-o", default="report.md", help="report file (.md, .html or .htm)")
    p.set_defaults(run=cmd_report)
    p = add("cache", "the kernel cache ($LOOPOPT_CACHE_DIR): what its space holds, trim or clear it")
    p.add_argument("action", choices=("info", "trim", "clear"),
                   help="info: path, kernels and precompiled headers with their sizes; trim: remove the "
                        "precompiled headers and failed sources, keep the kernels; clear: remove all")
    p.set_defaults(run=cmd_cache)
    _machine_parser(sub, json_flag)
    _tune_parser(sub, json_flag)
    _onnx_parser(sub, json_flag)
    return main_parser


def _run(argv: Sequence[str] | None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except BrokenPipeError:
        raise
    except (UsageError, ValueError, OSError, BuildError, MemoryLimitError, TargetUnavailableError) as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"loopopt: error: {message}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        if sys.stderr.isatty():
            sys.stderr.write("\n")          # after the terminal's ^C and a progress bar's line
        print(f"loopopt: interrupted{_interrupted_note(args)}", file=sys.stderr)
        return INTERRUPTED


def _interrupted_note(args: argparse.Namespace) -> str:
    """What an interrupted ``tune`` leaves: the trials measured so far in ``--log`` (a rerun resumes)."""
    if args.command != "tune":
        return ""
    if args.log is None:
        return "; no trial was kept (--log FILE keeps every trial, and a rerun resumes from it)"
    return f"; the trials measured so far are in the tuning log {args.log} (the same command resumes)"


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as the command's own lines (``loopopt: warning: ...``), without Python's source line."""
    print(f"loopopt: warning: {message}", file=file or sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``loopopt`` command; returns the exit status."""
    shown = warnings.showwarning
    warnings.showwarning = _one_line_warning
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()       # a closed pipe shows here, not as a warning at interpreter exit
    except BrokenPipeError:
        # the reader went away: what is left to print goes nowhere, and the command ends quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
    finally:
        warnings.showwarning = shown


if __name__ == "__main__":
    sys.exit(main())
