"""The schedule's access trace as a generated C loop nest.

The nest runs the schedule's loops in order (vector, unroll and parallel
annotations ignored), skips instances whose guards fail, and for each instance
calls a visitor on input 0, input 1, output (read) and output (write), passing the
tensor's position and the item touched. The visitors (stack distances,
set-associative caches) live in ``engine.c``; nothing else is materialized.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from ..cbuild import compile_c
from ..schedule import Schedule
from .items import ItemSpace

ENGINE_C = (Path(__file__).parent / "engine.c").read_text()
CDEF = """
typedef struct { long long nitems; long long cap; long long now; long long seen;
                 long long *last; long long *owner; int *tree; long long *hist; } stack_state;
typedef struct { long long sets; long long ways; long long *tags; long long *stamps;
                 long long clock; long long *misses; } sa_cache;
typedef struct { int ncaches; sa_cache *caches; } sa_state;
void stack_run(stack_state *s);
void sa_run(sa_state *s);
"""
# tensor positions in the trace: read input 0, read input 1, read output, write output
ACCESS_ORDER = (0, 1, 2, 2)


def nest_c(schedule: Schedule, space: ItemSpace, bounds: Optional[Sequence[tuple[str, str]]] = None) -> str:
    """The C body that walks the trace, calling ``VISIT(state, tensor_position, item)``.

    ``bounds``: per loop, the C expressions of its first and past-the-end values (default:
    ``0`` and its extent, the whole nest)."""
    if bounds is None:
        bounds = [("0", str(loop.extent)) for loop in schedule.loops]
    lines, indent = [], "    "
    for loop, (begin, end) in zip(schedule.loops, bounds, strict=True):
        lines.append(f"{indent}for (long long {loop.name} = {begin}; {loop.name} < {end}; {loop.name}++)")
        indent += "  "
    guard = " && ".join(f"({g.to_c()})" for g in schedule.guards) or "1"
    lines.append(f"{indent}if ({guard}) {{")
    for position in ACCESS_ORDER:
        t = space.tensors[position]
        offset = schedule.offset(t.name).to_c()
        item = f"{t.base}LL + ((({offset}) * {t.element_bytes}) >> {t.shift})"
        lines.append(f"{indent}  VISIT(state, {position}, {item});")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def trace_module(schedule: Schedule, space: ItemSpace):
    """The compiled (cached) trace engine of ``schedule`` over ``space``."""
    source = ENGINE_C.replace("/*NEST*/", nest_c(schedule, space))
    return compile_c(source, CDEF, level="2")   # exact counts at any level; -O2 builds faster
