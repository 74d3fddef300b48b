"""The algorithms ``lo.tune`` chooses between, their candidates and their share of the trials.

* ``direct``: the register-blocked schedules of the search space (``space``), searched by the walk;
* ``implicit_gemm``: the conv as a GEMM (``dataflows.implicit_gemm``: ``n, oh, ow`` fused into
  ``m``, ``c, kh, kw`` into ``r``, an ``m x k`` output block in registers), the preset and a few
  register blocks of it;
* ``im2col``: the loop order of the GEMM on the im2col matrix (``dataflows.im2col``); the schedule
  system has no materialized buffers, so the im2col matrix is indexed, never copied: what is
  measured is Caffe's GEMM loop order, not its copy;
* ``winograd``: F(4x4,3x3) and F(2x2,3x3) (``dataflows.winograd``, default stage schedules); of a
  quantized conv, the exact int8 F(2x2,3x3) (``winograd_int8``) with its default GEMM block, then the
  ISA's other blocks (``winograd_int8.tune_blocks``).

The GEMM forms of a conv do not apply to an op without windows (a Matmul is a GEMM already: its
direct candidates are GEMM schedules). The alternatives are one-thread schedules; with several
threads or where the target's rules refuse them (x86: the AMX search) they are skipped with the reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..dataflows import im2col, implicit_gemm
from ..ops import Op
from ..schedule_file import ALGORITHMS, WINOGRAD, AnySchedule, schedule_from_toml, to_toml
from ..targets.registry import target_of_isa
from ..winograd import algorithm_name, from_name, refusal, tiles
from ..winograd_int8 import tune_blocks

SHARE = 8                  # each alternative gets at most trials // SHARE trials (at least 1) ...
DIRECT_SHARE = 2           # ... and all of them together at most trials // DIRECT_SHARE
GEMM_ROWS = (8, 4, 12)     # implicit GEMM output rows per register block (the preset's 8 first)
GEMM_VECTORS = (1, 2)      # implicit GEMM output channels per register block, in vectors
IM2COL_ROWS = (64, 16, 32, 128, 256)   # im2col GEMM columns per vector strip (the preset's 64 first)


@dataclass(frozen=True)
class Alternative:
    """One candidate of an algorithm other than ``direct``: what a worker compiles (a schedule's
    TOML or a Winograd algorithm's name) and the knobs the trial and the log record."""

    algorithm: str
    schedule: str
    knobs: dict[str, Any]


def selected(algorithms: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The algorithms ``algorithms`` asks for: ``"auto"`` (all of them) or a subset of ALGORITHMS."""
    if algorithms == "auto":
        return ALGORITHMS
    names = (algorithms,) if isinstance(algorithms, str) else tuple(algorithms)
    unknown = [a for a in names if a not in ALGORITHMS]
    if unknown or not names:
        raise ValueError(f"unknown algorithm(s) {', '.join(map(repr, unknown)) or '(none given)'}: "
                         f"algorithms is 'auto' or a subset of {', '.join(map(repr, ALGORITHMS))}")
    return tuple(a for a in ALGORITHMS if a in names)


def refusals(op: Op, algorithms: tuple[str, ...], isa: str, threads: int) -> dict[str, str]:
    """Why each of ``algorithms`` does not apply to ``op`` on ``isa`` with ``threads`` ("" if it does)."""
    if op.quant is not None and op.quant.binary:
        one = "a binary op has one kernel, XNOR + popcount, searched over its register blocks"
        return {name: "" if name == "direct" else one for name in algorithms}
    why, rules = {"direct": ""}, target_of_isa(isa).search_rules()
    for name in ("implicit_gemm", "im2col"):
        why[name] = ("an op without windows (a Matmul) is a GEMM already: its direct candidates are GEMM "
                     "schedules" if not op.windows else
                     f"the {name} candidates are one-thread schedules, not {threads}" if threads > 1 else
                     rules.refusal(isa))
    why["winograd"] = refusal(op) or (f"the Winograd pipeline runs on one thread, not {threads}"
                                      if threads > 1 else rules.refusal(isa))
    return {name: why[name] for name in algorithms}


def alternatives(op: Op, algorithm: str, isa: str) -> list[Alternative]:
    """The candidates of ``algorithm`` (not ``direct``) for ``op`` on ``isa``, the preset's first;
    register blocks that leave no spare vector register, and duplicates after clamping, are left out."""
    if algorithm == "winograd":
        names = [algorithm_name(m) for m in reversed(tiles(op))]
        if op.quant is not None:          # int8: other GEMM blocks too
            names += [algorithm_name(m, block) for m in tiles(op) for block in tune_blocks(isa)]
        return [Alternative("winograd", name, {"algorithm": "winograd", "plan": name}) for name in names]
    rules = target_of_isa(isa).search_rules()
    vector = rules.lanes(op, isa)
    if algorithm == "implicit_gemm":
        blocks = [{"m": m, "k": v * vector} for v in GEMM_VECTORS for m in GEMM_ROWS
                  if m * v + v + 1 <= rules.registers(isa)]
        schedules = [(implicit_gemm(op, **b), b) for b in blocks]
    else:
        schedules = [(im2col(op, m), {"m": m}) for m in IM2COL_ROWS]
    found: dict[str, Alternative] = {}
    for schedule, block in schedules:
        toml = to_toml(schedule)
        found.setdefault(toml, Alternative(algorithm, toml, {"algorithm": algorithm, **block}))
    return list(found.values())


def share(trials: int, sizes: dict[str, int], direct: bool = True) -> dict[str, int]:
    """Trials of each alternative algorithm (``sizes``: its candidates): one each in turn, up to
    ``max(1, trials // SHARE)`` and its candidates, while the alternatives together have fewer than
    ``trials // DIRECT_SHARE``; the direct search keeps the rest (at least half). An alternative
    left with 0 is not tried. Without the ``direct`` search the alternatives share all ``trials``."""
    spare, cap = (trials // DIRECT_SHARE, max(1, trials // SHARE)) if direct else (trials, trials)
    given = dict.fromkeys(sizes, 0)
    while spare:
        open_ = [a for a in sizes if given[a] < min(cap, sizes[a])][:spare]
        if not open_:
            break
        for name in open_:
            given[name] += 1
        spare -= len(open_)
    return given


def label(knobs: dict[str, Any]) -> str:
    """The algorithm of a trial by its knobs (``direct`` for a register-blocked candidate; a Winograd
    trial logged before the labels, ``{"algorithm": "winograd F(4x4,3x3)"}``, is ``winograd``)."""
    name = knobs.get("algorithm", "direct")
    return WINOGRAD if name.startswith(WINOGRAD) else name


def rebuild(op: Op, schedule: str, knobs: dict[str, Any], source: str) -> AnySchedule:
    """What a trial measured, on ``op``: a Winograd trial's plan (``schedule`` is its name), another
    trial's schedule (``schedule`` is its TOML; ``source`` names it in errors)."""
    return from_name(op, schedule) if label(knobs) == WINOGRAD else schedule_from_toml(schedule, op, source)
