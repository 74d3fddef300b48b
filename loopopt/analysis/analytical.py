"""The analytical engine: exact reuse distances from a few representative blocks of the trace.

The trace of a loop nest repeats itself. Take a block of the trace (its outer loops
fixed), the next loop ``L`` inside it, and call L's iterations blocks ``0 .. E-1``.
With isl the engine proves, for a period ``p``, which pairs of blocks ``c`` and
``c + p`` are translates: the guards select the same inner iterations and each
tensor's item moves by one constant (a whole number of lines at line granularity).
isl also bounds the lookback ``R``: an item of block ``b`` touched before was last
touched in blocks ``b-R .. b-1`` (per tensor, the largest ``b - c`` of two blocks
that share an item, or ``p`` for a tensor that stays put: block ``b`` then touches
the items of block ``b - p``). The distance of an
access depends only on the trace since the previous access to its item, so when
blocks ``b-p-R .. b`` are translates of blocks ``b-2p-R .. b-p``, block ``b`` has
exactly the histogram of block ``b - p``.

Of the representative blocks that remain, block 0 starts the enclosing block, so
it is analyzed the same way one loop deeper. Any other block ``b`` is analyzed the
same way as if it started the trace (its "local" histogram, in which its first
access to each item is cold), and then those first accesses get their true
distances: the items above ``x`` in the LRU stack before the block, which a pass
that only records last access times gives, plus the items the block touched
before, minus those counted twice (a Fenwick tree over stack ranks in the order
the block first touches its items, which the block's own passes record as well). Blocks too
small for isl to pay off, or without repetition, run through the trace engine's
stack code from the exact LRU stack before them. Nothing is approximated, so the
engine applies to every schedule; its work grows with the representative blocks,
not with the extents of the loops that repeat, and ``Analyzer.cost`` predicts it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import islpy as isl
import numpy as np

from ..cbuild import compile_c
from ..expr import Const, Var
from ..schedule import Schedule, box_constraints
from .items import ItemSpace, TensorItems
from .stack import TRACE_ACCESS_LIMIT
from .trace import CDEF, ENGINE_C, nest_c

#: regions with fewer accesses than this are simulated whole (isl costs more than the simulation)
SIMULATE_BELOW = 1 << 18
#: engine="auto" runs the trace engine on traces shorter than this (isl would cost more)
AUTO_TRACE_BELOW = 1 << 22
#: cost of an access in a touch pass relative to one through the stack engine (measured)
TOUCH_COST = 0.15
#: a loop of at most this extent whose blocks do not repeat is still split into its blocks when
#: that is less work (deeper loops may repeat)
PLAIN_SPLIT = 4
#: isl operations allowed for the analysis of one loop (about a second)
ISL_OPERATIONS = 400_000
#: isl names of the block index, an item and a placeholder loop (loops are not named so)
_B, _X, _NONE = "block__", "item__", "none__"
#: stop trying periods once at most this fraction of the blocks are representatives
GOOD_ENOUGH = 1 / 8
#: representative blocks cost this much besides their accesses (numpy set-up, in simulated accesses)
BLOCK_OVERHEAD = 20_000
#: periods tried for the repetition of a loop's blocks
PERIODS = tuple(range(1, 17)) + (32, 64)

REGION_CDEF = CDEF + """
void set_bounds(long long *lo, long long *hi, int n);
void touch_run(stack_state *s);
void both_run(stack_state *s);
void first_distances(long long count, long long *items, long long *rank, long long m, int *tree,
                     long long *out);
"""
REGION_C = """
/* The last access time of every item (touch), or both the last and the first one (both):
   the LRU stack before a block, the order in which a block first touches its items. */
static inline void touch_visit(stack_state *s, int tensor, long long item) { s->last[item] = ++s->now; }

/* both at once: last access times in last, first ones in owner */
static inline void both_visit(stack_state *s, int tensor, long long item) {
    long long now = ++s->now;
    s->last[item] = now;
    if (!s->owner[item]) s->owner[item] = now;
}

void both_run(stack_state *outer) {
    stack_state copy = *outer, *state = &copy;
#define VISIT both_visit
/*NEST*/
#undef VISIT
    outer->now = copy.now;
}

void set_bounds(long long *lo, long long *hi, int n) {
    for (int i = 0; i < n; i++) { LO[i] = lo[i]; HI[i] = hi[i]; }
}

void touch_run(stack_state *outer) {
    stack_state copy = *outer, *state = &copy;
#define VISIT touch_visit
/*NEST*/
#undef VISIT
    outer->now = copy.now;
}

/* The distance of each first access of a block to an item x, in first-access order:
   the items above x in the LRU stack before the block (m - rank[x]), plus the items the
   block touched before (i), minus those counted twice (a Fenwick tree over ranks);
   -1 where x is not in that stack (rank 0). */
void first_distances(long long count, long long *items, long long *rank, long long m, int *tree,
                     long long *out) {
    long long ranked = 0;
    for (long long i = 0; i < count; i++) {
        long long r = rank[items[i]], below = 0;
        if (!r) { out[i] = -1; continue; }
        for (long long k = r; k > 0; k -= k & -k) below += tree[k];
        out[i] = i + (m - r) - (ranked - below);
        for (long long k = r; k <= m; k += k & -k) tree[k]++;
        ranked++;
    }
}
"""


def region_nest(schedule: Schedule, space: ItemSpace) -> str:
    """The trace engine's nest with each loop running over ``LO[i] .. HI[i]`` (a sub-box)."""
    return nest_c(schedule, space, [(f"LO[{i}]", f"HI[{i}]") for i in range(len(schedule.loops))])


def region_module(schedule: Schedule, space: ItemSpace):
    """Compiled (cached) stack and touch passes over a sub-box of the schedule's loops."""
    nest = region_nest(schedule, space)
    source = (f"static long long LO[{len(schedule.loops)}], HI[{len(schedule.loops)}];\n"
              + (ENGINE_C + REGION_C).replace("/*NEST*/", nest))
    return compile_c(source, REGION_CDEF, level="2")   # exact counts at any level; -O2 builds faster


@dataclass(frozen=True)
class Repetition:
    """What isl proved about the blocks of one loop: ``rep[b]`` is the block whose histogram block b
    has (period 0: none repeats, each block is its own representative)."""

    loop: int
    period: int
    lookback: int
    rep: tuple[int, ...]
    good: tuple[bool, ...] = ()     # good[c]: block c + period is block c translated

    @property
    def representatives(self) -> list[int]:
        return sorted(set(self.rep))


class Analyzer:
    """Reuse-distance histograms of ``schedule`` over ``space`` by representative blocks."""

    def __init__(self, schedule: Schedule, space: ItemSpace):
        self.schedule, self.space = schedule, space
        self.loops = schedule.loops
        self.n = space.size
        self.simulated = 0        # accesses run through the stack engine
        self.touched = 0          # accesses run through the touch and first passes
        self.blocks = 0           # representative blocks run after others
        self.plan: list[Repetition] = []
        self._repetitions: dict[tuple[int, ...], Optional[Repetition]] = {}
        self._plans: dict = {}
        self._lookbacks: dict = {}

    @cached_property
    def module(self):
        return region_module(self.schedule, self.space)

    # --- isl: which blocks repeat -------------------------------------------------------
    def _item(self, t: TensorItems, bindings: dict) -> str:
        offset = self.schedule.offset(t.name).substitute(bindings).to_isl()
        return f"floor(({offset})*{t.element_bytes}/{1 << t.shift})"

    def _guards(self, bindings: dict) -> str:
        return " and ".join(_bound_isl(g, bindings) for g in self.schedule.guards) or "true"

    def repetition(self, prefix: tuple[int, ...]) -> Optional[Repetition]:
        """The repetition of the blocks of loop ``j = len(prefix)`` (the outer loops at ``prefix``),
        or None if isl finds none."""
        if prefix not in self._repetitions:
            canonical = self._canonical(prefix)
            self._repetitions[prefix] = (self._bounded(prefix) if canonical == prefix
                                         else self.repetition(canonical))
        return self._repetitions[prefix]

    def _bounded(self, prefix: tuple[int, ...]) -> Optional[Repetition]:
        """``_repetition`` within ``ISL_OPERATIONS`` of isl work: beyond, no repetition is proved
        (nested divisions can make isl's projections explode)."""
        context = isl.DEFAULT_CONTEXT
        on_error = context.get_on_error()
        context.set_max_operations(ISL_OPERATIONS)
        context.set_on_error(isl.on_error.CONTINUE)
        context.reset_operations()
        try:
            return self._repetition(prefix)
        except isl.Error:
            return None
        finally:
            context.set_max_operations(0)
            context.set_on_error(on_error)
            context.reset_operations()

    def _canonical(self, fixed: tuple[int, ...]) -> tuple[int, ...]:
        """The earliest block that isl proved block ``fixed`` a translate of (itself if none):
        both have the same inner repetition and the same work."""
        for i in range(len(fixed)):
            parent = self._repetitions.get(fixed[:i])
            b = fixed[i]
            if parent is not None and parent.period and b >= parent.period and parent.good[b - parent.period]:
                return self._canonical(fixed[:i] + (b - parent.period,) + fixed[i + 1:])
        return fixed

    def _repetition(self, prefix: tuple[int, ...]) -> Optional[Repetition]:
        j = len(prefix)
        extent = self.loops[j].extent
        inner = ", ".join([loop.name for loop in self.loops[j + 1:]] + [_NONE])     # never empty
        box = " and ".join(box_constraints(self.loops[j + 1:]) + [f"{_NONE} = 0"])
        zero = {loop.name: Const(v) for loop, v in zip(self.loops, prefix)}
        at_b = dict(zero, **{self.loops[j].name: Var(_B)})
        best: Optional[Repetition] = None
        for p in (p for p in PERIODS if p < extent):
            at_bp = dict(zero, **{self.loops[j].name: Var(_B) + p})
            good = self._same_guards(inner, box, extent, p, at_b, at_bp)
            lookback = 0
            for t in self.space.tensors:
                if not good.any():
                    break
                moved, still = self._translated(t, inner, box, extent, p, at_b, at_bp)
                good &= moved
                bound = self._pairs_lookback(t, inner, box, extent, at_b)
                bound = min(bound, p) if still else bound
                if bound > 1:
                    bound = min(bound, self._last_lookback(t, inner, box, extent, at_b))
                lookback = max(lookback, bound)
            if not good.any():
                continue
            rep = list(range(extent))
            for b in range(extent):
                first = b - p - lookback
                if first >= 0 and good[first:b - p + 1].all():
                    rep[b] = rep[b - p]
            found = Repetition(j, p, lookback, tuple(rep), tuple(bool(g) for g in good))
            if best is None or len(found.representatives) < len(best.representatives):
                best = found
            if len(best.representatives) <= max(GOOD_ENOUGH * extent, 2 * p + lookback + 4):
                break
        return best if best is not None and len(best.representatives) < extent else None

    def _same_guards(self, inner, box, extent, p, at_b, at_bp) -> np.ndarray:
        """``good[c]``: blocks c and c + p select the same inner iterations."""
        good = np.zeros(extent, bool)
        good[:extent - p] = True
        if not self.schedule.guards:
            return good
        sets = [isl.Set(f"{{ [{_B}, {inner}] : 0 <= {_B} < {extent - p} and {box} and {self._guards(at)} }}")
                for at in (at_b, at_bp)]
        differ = sets[0].subtract(sets[1]).union(sets[1].subtract(sets[0]))
        for b in _values(differ.project_out(isl.dim_type.set, 1, differ.dim(isl.dim_type.set) - 1)):
            good[b] = False
        return good

    def _translated(self, t, inner, box, extent, p, at_b, at_bp) -> tuple[np.ndarray, bool]:
        """Where block c + p touches the items of ``t`` that block c touches moved by one constant
        (the commonest such constant over c), and whether that constant is 0."""
        moved = np.zeros(extent, bool)
        diff = isl.Map(f"{{ [{_B}] -> [{_X}] : exists ({inner} : 0 <= {_B} < {extent - p} and {box} and "
                       f"{self._guards(at_b)} and {_X} = {self._item(t, at_bp)} - {self._item(t, at_b)}) }}")
        constant = diff.lexmin().intersect(diff.lexmax())
        by_shift: dict[int, list[int]] = {}
        for b, d in _pairs(constant):
            by_shift.setdefault(d, []).append(b)
        if not by_shift:
            return moved, False
        shift = max(by_shift, key=lambda d: len(by_shift[d]))
        moved[by_shift[shift]] = True
        return moved, shift == 0

    def _pairs_lookback(self, t, inner, box, extent, at_b) -> int:
        """Largest ``b - c`` over blocks c < b of the loop that touch a common item of ``t``."""
        key = (t.name, inner, box, extent, tuple(sorted((k, str(v)) for k, v in at_b.items())))
        if key not in self._lookbacks:
            items = isl.Map(f"{{ [{_B}] -> [{_X}] : exists ({inner} : 0 <= {_B} < {extent} and {box} and "
                            f"{self._guards(at_b)} and {_X} = {self._item(t, at_b)}) }}")
            gaps = items.apply_range(items.reverse()).intersect(isl.Map("{ [b] -> [c] : c < b }")).deltas()
            self._lookbacks[key] = 0 if gaps.is_empty() else -min(_values(gaps.lexmin()))   # gaps: c - b
        return self._lookbacks[key]

    def _last_lookback(self, t, inner, box, extent, at_b) -> int:
        """Largest ``b - c`` where c is the last block before b to touch an item of ``t`` that block
        b touches: tighter than ``_pairs_lookback`` but a harder problem for isl, so it gets
        ``ISL_OPERATIONS // 4`` operations and is infinite when they do not suffice."""
        key = ("last", t.name, inner, box, extent, tuple(sorted((k, str(v)) for k, v in at_b.items())))
        if key not in self._lookbacks:
            context = isl.DEFAULT_CONTEXT
            context.set_max_operations(ISL_OPERATIONS // 4)
            context.reset_operations()
            try:
                items = isl.Map(f"{{ [{_B}] -> [{_X}] : exists ({inner} : 0 <= {_B} < {extent} and {box} and "
                                f"{self._guards(at_b)} and {_X} = {self._item(t, at_b)}) }}")
                earlier = items.range_map().apply_range(items.reverse())
                earlier = earlier.intersect(isl.Map("{ [[b] -> [x]] -> [c] : c < b }")).lexmax()
                gaps = earlier.wrap().apply(isl.Map("{ [[[b] -> [x]] -> [c]] -> [b - c] }"))
                self._lookbacks[key] = 0 if gaps.is_empty() else max(_values(gaps.lexmax()))
            except isl.Error:
                self._lookbacks[key] = extent
            finally:
                context.set_max_operations(ISL_OPERATIONS)
                context.reset_operations()
        return self._lookbacks[key]

    # --- running the C passes over sub-boxes -----------------------------------------------------
    def _box(self, fixed: tuple[int, ...], lo: int = 0, hi: Optional[int] = None):
        """Loops before ``len(fixed)`` at ``fixed``, the next over ``lo .. hi``, the others whole."""
        lows = np.zeros(len(self.loops), np.int64)
        highs = np.array([loop.extent for loop in self.loops], np.int64)
        lows[:len(fixed)] = fixed
        highs[:len(fixed)] = np.asarray(fixed, np.int64) + 1
        if hi is not None:
            lows[len(fixed)], highs[len(fixed)] = lo, hi
        return lows, highs

    def _accesses(self, fixed: tuple[int, ...], lo: int = 0, hi: Optional[int] = None) -> int:
        """Accesses of the box (guards ignored)."""
        lows, highs = self._box(fixed, lo, hi)
        return int(np.prod(highs - lows)) * 4

    def _bounds(self, fixed: tuple[int, ...], lo: int = 0, hi: Optional[int] = None) -> int:
        """Let the C passes run over the box; returns its accesses."""
        lows, highs = self._box(fixed, lo, hi)
        ffi = self.module.ffi
        self.module.lib.set_bounds(ffi.cast("long long *", ffi.from_buffer(lows)),
                                   ffi.cast("long long *", ffi.from_buffer(highs)), len(self.loops))
        return int(np.prod(highs - lows)) * 4

    def _stack(self, order: np.ndarray, accesses: int) -> np.ndarray:
        """Run the stack engine over the bounded sub-box (``accesses`` at most) from an LRU stack
        (``order``: least recent first)."""
        n, m = self.n, len(order)
        cap = 1 << (2 * min(n, m + accesses)).bit_length()     # more than the live items
        last = np.zeros(n, np.int64)
        last[order] = np.arange(1, m + 1)
        owner = np.full(cap + 1, -1, np.int64)
        owner[1:m + 1] = order
        t = np.arange(cap + 1)
        tree = np.clip(np.minimum(t, m) - (t - (t & -t)), 0, None).astype(np.int32)
        tree[0] = 0
        hist = np.zeros((3, n + 1), np.int64)
        self._run("stack_run", {"cap": cap, "now": m, "seen": m}, last=last, owner=owner, tree=tree,
                  hist=hist)
        return hist

    def _run(self, function: str, fields: dict, **arrays: np.ndarray) -> int:
        """Run engine pass ``function`` over the bounded sub-box; the state's clock after it."""
        ffi = self.module.ffi
        state = ffi.new("stack_state *", dict(fields, nitems=self.n))
        for name, array in arrays.items():
            setattr(state, name, ffi.cast(ffi.typeof(getattr(state, name)), ffi.from_buffer(array)))
        getattr(self.module.lib, function)(state)
        return state.now

    def _times(self, fixed: tuple[int, ...], lo: int, hi: int, times: np.ndarray,
               firsts: Optional[np.ndarray] = None) -> np.ndarray:
        """Items in the order of their last access after blocks ``lo .. hi-1`` of loop ``len(fixed)``,
        continuing ``times`` (last access times, updated) and, if given, ``firsts`` (first ones)."""
        self.touched += self._bounds(fixed, lo, hi)
        now = {"now": int(times.max(initial=0))}
        if firsts is None:
            self._run("touch_run", now, last=times)
        else:
            self._run("both_run", now, last=times, owner=firsts)
        return _order(times)

    # --- the recursion -----------------------------------------------------------------------------
    def histograms(self) -> np.ndarray:
        """Dense histograms ``[tensor position, distance]`` (cold last), as the trace engine's."""
        return self.local(())

    def _plan(self, fixed: tuple[int, ...],
              context: bool) -> tuple[float, tuple[int, ...], Optional[Repetition]]:
        """How to compute block ``fixed`` (after a context if ``context``): its work in simulated
        accesses (a touch or first pass costs ``TOUCH_COST`` of one), the prefix of the loop whose
        blocks it splits into and their repetition, or None to simulate it whole."""
        j = next((i for i in range(len(fixed), len(self.loops)) if self.loops[i].extent > 1), len(self.loops))
        prefix = fixed + (0,) * (j - len(fixed))
        key = (self._canonical(fixed), context)
        if key not in self._plans:
            simulate = self._accesses(fixed)
            best = (simulate, None)
            if j < len(self.loops) and simulate >= SIMULATE_BELOW:
                repetition = self.repetition(prefix)
                if repetition is None and self.loops[j].extent <= PLAIN_SPLIT:
                    repetition = Repetition(j, 0, 0, tuple(range(self.loops[j].extent)))
                if repetition is not None:
                    reps = repetition.representatives
                    touched = simulate if context else self._accesses(prefix, 0, reps[-1])
                    work = self.cost(prefix + (0,)) + TOUCH_COST * touched
                    work += sum(self.cost(prefix + (b,), True) + BLOCK_OVERHEAD for b in reps[1:])
                    if work < simulate:
                        best = (work, repetition)
            self._plans[key] = best
        work, repetition = self._plans[key]
        return work, (prefix if repetition else fixed), repetition

    def cost(self, fixed: tuple[int, ...] = (), context: bool = False) -> float:
        """Work of ``local`` (``in_context`` if ``context``) in simulated accesses, without running it."""
        return self._plan(fixed, context)[0]

    def local(self, fixed: tuple[int, ...]) -> np.ndarray:
        """Histograms of the block ``fixed`` (loops ``0 .. len(fixed)-1`` at those values) as if
        its trace were the whole trace (items it touches first are cold)."""
        _, prefix, repetition = self._plan(fixed, False)
        if repetition is None:
            accesses = self._bounds(fixed)
            self.simulated += accesses
            return self._stack(np.zeros(0, np.int64), accesses)
        return self._repeated(prefix, repetition)

    def _repeated(self, prefix: tuple[int, ...], repetition: Repetition,
                  firsts: Optional[np.ndarray] = None) -> np.ndarray:
        """Histograms of the blocks of loop ``len(prefix)`` from its representatives; with ``firsts``,
        also the first access time of every item over all the blocks."""
        self.plan.append(repetition)
        hists = {0: self.local(prefix + (0,))}
        times, done = np.zeros(self.n, np.int64), 0
        for b in repetition.representatives[1:]:
            self.blocks += 1
            hists[b] = self.in_context(prefix + (b,), self._times(prefix, done, b, times, firsts))
            done = b
        if firsts is not None:
            self._times(prefix, done, len(repetition.rep), times, firsts)
        copies = Counter(repetition.rep)
        return sum(hists[r] * copies[r] for r in hists)

    def in_context(self, fixed: tuple[int, ...], order: np.ndarray) -> np.ndarray:
        """Histograms of block ``fixed`` after a trace that left the LRU stack ``order``."""
        _, prefix, repetition = self._plan(fixed, True)
        if repetition is None:
            accesses = self._bounds(fixed)
            self.simulated += accesses
            return self._stack(order, accesses)
        firsts = np.zeros(self.n, np.int64)
        hist = self._repeated(prefix, repetition, firsts)
        first = _order(firsts)
        rank = np.zeros(self.n, np.int64)
        rank[order] = np.arange(1, len(order) + 1)
        distances = np.empty(len(first), np.int64)
        tree = np.zeros(len(order) + 1, np.int32)
        ffi = self.module.ffi
        self.module.lib.first_distances(
            len(first), *(ffi.cast("long long *", ffi.from_buffer(a)) for a in (first, rank)),
            len(order), ffi.cast("int *", ffi.from_buffer(tree)),
            ffi.cast("long long *", ffi.from_buffer(distances)))
        reused = distances >= 0
        positions = np.searchsorted([t.base for t in self.space.tensors], first[reused], side="right") - 1
        np.subtract.at(hist, (positions, -1), 1)
        np.add.at(hist, (positions, distances[reused]), 1)
        return hist


def _bound_isl(bound, bindings: dict) -> str:
    return f"{bound.lower} <= {bound.expr.substitute(bindings).to_isl()} < {bound.upper}"


def _order(times: np.ndarray) -> np.ndarray:
    """The items with a nonzero time, by increasing time."""
    seen = np.flatnonzero(times)
    return seen[np.argsort(times[seen])]


def _points(s: isl.Set) -> list[tuple[int, ...]]:
    """The integer points of a set; isl.Error if isl could not list them all (e.g. out of quota)."""
    out: list[tuple[int, ...]] = []
    failures: list[Exception] = []

    def visit(point: isl.Point) -> None:
        try:
            out.append(tuple(point.get_coordinate_val(isl.dim_type.set, i).to_python()
                             for i in range(s.dim(isl.dim_type.set))))
        except Exception as err:        # islpy would only warn about an error in a callback
            failures.append(err)

    s.foreach_point(visit)
    if failures:
        raise isl.Error(f"listing the points of a set failed: {failures[0]}")
    return out


def _values(s: isl.Set) -> list[int]:
    """The integer points of a one-dimensional set."""
    return [point[0] for point in _points(s)]


def _pairs(m: isl.Map) -> list[tuple[int, int]]:
    """The (input, output) pairs of a map between one-dimensional spaces."""
    return _points(m.wrap())


def analytical_histograms(schedule: Schedule, space: ItemSpace,
                          analyzer: Optional[Analyzer] = None) -> np.ndarray:
    """Dense histograms of ``schedule`` over ``space``, equal to ``stack_histograms``; ValueError
    if even its representative blocks are more work than ``TRACE_ACCESS_LIMIT`` accesses."""
    analyzer = analyzer or Analyzer(schedule, space)
    work = analyzer.cost()
    if work > TRACE_ACCESS_LIMIT:
        raise ValueError(f"the analytical engine found too little repetition in {schedule.op!r} under this "
                         f"schedule: its representative blocks are about {work:.3g} simulated accesses, more "
                         f"than the limit of {TRACE_ACCESS_LIMIT:.3g} (TRACE_ACCESS_LIMIT); analyze a "
                         f"smaller layer (fewer channels, batch 1)")
    return analyzer.histograms()


def choose_engine(schedule: Schedule, space: ItemSpace) -> tuple[str, Optional[Analyzer]]:
    """``engine="auto"``: the trace engine for short traces, else the engine with less work."""
    accesses = 4 * schedule.op.macs
    if accesses < AUTO_TRACE_BELOW:
        return "trace", None
    analyzer = Analyzer(schedule, space)
    return ("analytical", analyzer) if analyzer.cost() < accesses else ("trace", None)
