"""One lowered loop nest: a schedule's loops with their extents and annotations, each op dim's
definition and each guard placed at the loop where the nest computes or checks it. Built once from a
Schedule and read by the SIMD family's C emitter (``emit.py``) and its pseudo-code (``pseudocode.py``),
so that the two print the same nest by construction."""
from __future__ import annotations

from dataclasses import dataclass

from ..expr import Bound, Expr, Var
from ..schedule import PIPELINE_STAGES, Schedule

OUTSIDE = -1       # the depth of what the nest computes before its first loop


@dataclass(frozen=True)
class LoweredLoop:
    """A loop: its name, extent and annotations (parallel, vectorized, unroll, register block, ...)."""

    name: str
    extent: int
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Definition:
    """An op dim defined from the loop variables (``value``) at loop ``depth`` (its innermost loop)."""

    dim: str
    value: Expr
    depth: int


@dataclass(frozen=True)
class PlacedGuard:
    """A guard checked at loop ``depth``: a partial block's where its innermost loop opens, an op's
    where all its dims are defined; ``bound`` over the defined dims (as the C checks it),
    ``in_loops`` the same over the loop variables."""

    bound: Bound
    depth: int
    in_loops: Bound


@dataclass(frozen=True)
class LoweredNest:
    """The nest: loops outermost first, the dims' definitions (in the schedule's order) and the
    guards (in ``schedule.guards``' order), each placed at a depth (``OUTSIDE``: before every loop)."""

    loops: tuple[LoweredLoop, ...]
    definitions: tuple[Definition, ...]
    guards: tuple[PlacedGuard, ...]

    def definitions_at(self, depth: int) -> list[Definition]:
        return [d for d in self.definitions if d.depth == depth]

    def guards_at(self, depth: int) -> list[Bound]:
        return [g.bound for g in self.guards if g.depth == depth]


def lower(schedule: Schedule, dot: tuple[str, str] | None = None) -> LoweredNest:
    """The lowered nest of ``schedule``; ``dot``: the dot loop and the instruction that consumes it
    (a note on that loop), if the arithmetic has one."""
    position = {name: i for i, name in enumerate(schedule.loop_names)}
    depths = dim_depths(schedule)
    definitions = tuple(Definition(d, v, depths[d]) for d, v in schedule.dim_values.items() if v != Var(d))
    placed = [(g, max((position[v] for v in g.expr.variables()), default=OUTSIDE))
              for g in schedule.partial_guards]
    placed += [(g, max((depths[d] for d in g.expr.variables()), default=OUTSIDE)) for g in schedule.op.guards]
    guards = tuple(PlacedGuard(g, depth, in_loops)
                   for (g, depth), in_loops in zip(placed, schedule.guards, strict=True))
    loops = tuple(LoweredLoop(loop.name, loop.extent, _notes(schedule, loop.name, dot))
                  for loop in schedule.loops)
    return LoweredNest(loops, definitions, guards)


def dim_depths(schedule: Schedule) -> dict[str, int]:
    """The loop depth at which the nest defines each op dim (its innermost loop; -1: before all loops)."""
    position = {name: i for i, name in enumerate(schedule.loop_names)}
    return {d: max((position[v] for v in e.variables() if v in position), default=OUTSIDE)
            for d, e in schedule.dim_values.items()}


def _stage_note(schedule: Schedule, tensor: str, at: str) -> str:
    """What ``stage(tensor, at)`` copies: a box of the tensor, or (tensorized schedules) the operand's
    tile of the matrix product, gathered element by element (or copied as boxes by TMA) through a
    ring of buffers."""
    if schedule.tensorized:
        tma = tensor in schedule.tma_staged
        how = "copied as 2-D boxes by TMA" if tma else "gathered as a matrix operand"
        how += " from a producer warpgroup" if schedule.specialized else ""
        return (f"stage {tensor}'s tile in shared memory ({how}, "
                f"{schedule.pipeline_stages or PIPELINE_STAGES}-buffer ring)")
    return f"stage {tensor} in shared memory ({' x '.join(map(str, schedule.staged_box(tensor, at).sizes))})"


def _notes(schedule: Schedule, name: str, dot: tuple[str, str] | None) -> tuple[str, ...]:
    """The annotations of loop ``name``."""
    loop, op = schedule.loop(name), schedule.op
    notes = [text for flag, text in ((loop.parallel, "parallel"), (loop.vectorized, "vectorized")) if flag]
    notes += [f"unroll {loop.unroll}"] if loop.unroll else []
    notes += [f"bound to {loop.axis}"] if loop.axis else []
    notes += [_stage_note(schedule, t, at) for t, at in schedule.stages if at == name]
    blocked = schedule.block_loops() if schedule.register_block_at is not None else ((), ())
    if name == schedule.register_block_at:
        notes.append(f"register block: {op.output} over {', '.join(blocked[1]) or 'one element'} "
                     f"kept in registers from here")
    elif name in blocked[1]:
        notes.append("block loop (unrolled into accumulators)")
    if dot is not None and name == dot[0]:
        notes.append(f"dot loop: each {dot[1]} instruction consumes its {loop.extent} iterations")
    return tuple(notes)
