"""x86's search rules (``SearchRules``): the search space (``space.py``), the ranking heuristic
(``rank.py``), the tile model of AMX candidates (``tile_model.py``) and what the guide reads of a
register block."""
from __future__ import annotations

import math
from collections.abc import Sequence

from ...ops import Op
from ..search import KERNEL, Candidate, SearchRules, Traits
from . import rank, space
from .isa import TILE_ISA
from .space import Knobs, Roles
from .tile_model import tile_time

TILES = "tiles"            # the family of AMX candidates: the tile model prices them, a fit of their own


class X86Search(SearchRules):
    """Register blocks (SIMD), AMX tiles, table lookups and binary kernels, searched on x86."""

    families = (KERNEL, TILES)

    def candidates(self, op: Op, isa: str, threads: int = 1, auto: bool = False) -> list[Candidate]:
        return space.candidates(op, isa, threads, tiles=auto)

    def rank(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        return rank.rank(candidates)

    def best(self, candidates: Sequence[Candidate]) -> Candidate | None:
        return rank.best(candidates)

    def family(self, candidate: Candidate) -> str:
        return TILES if candidate.isa == TILE_ISA else KERNEL

    def own_seconds(self, candidate: Candidate) -> float:
        return tile_time(candidate.schedule, candidate.threads).predicted_seconds

    def unpriced(self, candidate: Candidate) -> bool:
        return space.is_table_lookup(candidate) or space.is_binary(candidate)

    def traits(self, candidate: Candidate, threads: int) -> Traits:
        knobs = candidate.knobs
        if not isinstance(knobs, Knobs):             # AMX tiles, table lookups, binary kernels
            return Traits()
        return Traits(rank.tail(candidate), rank.imbalance(candidate, threads),
                      rank.plain_rows(candidate.op, knobs),
                      knobs.cache_block > 0, rank.rolled(candidate), shape(candidate))

    def lanes(self, op: Op, isa: str) -> int:
        return space.lanes(op, isa)

    def registers(self, isa: str) -> int:
        return space.registers(isa)

    def refusal(self, isa: str) -> str:
        return "the AMX search has only tile candidates" if isa == TILE_ISA else ""

    def describe(self, knobs: dict) -> str:
        return describe(knobs)


def shape(candidate: Candidate) -> tuple[float, ...]:
    """The ``SHAPE_FEATURES`` (``targets.search``) of a register-blocked candidate: the logs of its
    block's pixels and channels; the places of the channel block, pixel block and cache block loops among the
    outer loops (0 outermost, 1 innermost, -1 absent) and of the reduction channels in the reduction order (0
    outermost, 1 innermost or alone). Within one search the measured trials tell these apart where the models
    do not: over the 11 one-thread searches of ``bench_tune.py`` on a quiet machine
    (``benchmarks/bench_rank.py``) the median Spearman of the prediction each trial was picked by went from
    +0.51 to +0.58 with them, of the final fit (leave one out) from +0.51 to +0.67; over 9 fp32 and 9 int8
    catalog searches, +0.53 -> +0.67 and +0.68 -> +0.64, and +0.72 -> +0.80 and +0.75 -> +0.79."""
    knobs = candidate.knobs
    roles = Roles.of(candidate.op, knobs.pixel)

    def place(names: tuple[str, ...], name: str) -> float:
        if name not in names:
            return -1.0
        return names.index(name) / (len(names) - 1) if len(names) > 1 else 1.0

    loops = [place(knobs.outer, f"{dim}_o") for dim in (roles.channel, roles.pixel, roles.rc)]
    order = place(knobs.reduction, roles.rc)
    return (math.log(knobs.pixel_block), math.log(knobs.channel_block), *loops, order)


def describe(k: dict) -> str:
    """A direct candidate's knobs in a few words: an AMX candidate's, a binary op's, a table-lookup
    candidate's, or a register block's, with its weight format if not int8."""
    if k.get("isa") == TILE_ISA:
        order = "channel blocks outer" if k["channels_outer"] else "pixels outer"
        split = f", {k['parallel']} split over threads" if k.get("parallel") else ""
        gathered = ", patches gathered" if k.get("patches") else ""
        return f"AMX tiles, {k['pixel_block']}x{k['channel_block']} block, {order}{split}{gathered}"
    if k.get("kernel") == "binary":
        return f"XNOR + popcount, {k['pixel_block']}x{k['channel_block']} block"
    if "weights" not in k:
        return (f"{k['weight_format']} table lookup, {k['pixel_block']}x{k['channel_block']} block, "
                f"reduction {','.join(k['reduction'])}, outer {','.join(k['outer'])}"
                + (f", parallel {k['parallel']}" if k.get("parallel") else ""))
    fmt = f"{k['weight_format']} " if "weight_format" in k else ""
    along = f" along {k['pixel']}" if "pixel" in k else ""
    return (f"{k['pixel_block']}x{k['channel_block']} block{along}, {fmt}weights {k['weights']}, reduction "
            f"{','.join(k['reduction'])}, outer {','.join(k['outer'])}"
            + (f", cache block {k['cache_block']}" if k["cache_block"] else "")
            + (f", channel panel {k['channel_panel']}" if k.get("channel_panel") else "")
            + (f", unroll {','.join(f'{n}:{f}' for n, f in k['unroll'])}" if k["unroll"] else "")
            + (f", parallel {k['parallel']}" if k["parallel"] else "")
            + (f", input channels-{k['activations']}" if "activations" in k else "")
            + (f", prefetch weights {k['prefetch']} ahead" if k.get("prefetch") else ""))
