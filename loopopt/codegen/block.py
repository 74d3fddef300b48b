"""Register blocks: the outputs of ``Schedule.register_block(at)`` kept in accumulators.

From loop ``at`` inward a schedule has reduction loops, then block loops (the output
depends on them). The block loops are unrolled completely: every combination of their
values (a vectorized block loop counts by vectors) is one accumulator. Accumulators are
set before ``at`` (to the bias when the block sees the whole reduction or, under a cache block
of the reduction, visits its outputs first; else loaded from the output) and stored after it;
in between only the operands are loaded, each distinct load once per reduction iteration.
A vectorized reduction loop innermost becomes a chunk loop inside the block whose lanes are
summed when the accumulator is stored.

Guards are placed by what they depend on: guards of outer or reduction loops skip
iterations as in the plain nest; guards of block loops only decide whether an
accumulator exists (checked once per block), unless they constrain a reduction dim
(padding taps); the others are checked per update. Where an accumulator may not exist, a
whole block (every existence test true) runs a second copy of the reduction without them.
A load is guarded only by the guards isl says it needs to stay inside its tensor.

Operand bases: where isl proves that the loads of a float input tensor lie at constant distances
from its first load over the whole loop box (a channels-last input's pixels, a packed weight
block's vectors), the body declares one pointer to that first element per reduction iteration
(``lo_base_<tensor>``) and indexes it by constants: the C compiler then addresses each load as
that register plus a displacement, instead of computing (and, beyond its integer registers,
spilling to the stack) one address per load. The base is taken even where its own load is guarded
off (a padding tap), so its offset is written exact in C (``vector.exact_offset``: the displacements
are floor divisions', where a spatially blocked input's block of a column left of the row is -1).
A prefetched operand (``Schedule.prefetch``) is fetched from its base, ahead, once per cache line.

Operands from memory: where a float block's accumulators, its vectors of a contiguous operand (the
weights) and a broadcast need more vector registers than the ISA has, and its table multiplies from
memory (``fma_memory``: AVX2's ``vfmadd231ps`` with a memory operand), the vectors beyond the registers
(the last displacements from the base) are not loaded: each update of them reads its vector itself,
unmasked and unguarded ones only (``memory_vectors``). A 7x16 block on AVX2 (14 accumulators, one
weight vector in a register, the other read by its 7 updates) so fills the 16 registers without a spill.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Protocol

from ..cnames import load_variable
from ..epilogue import RESIDUAL, Epilogue
from ..expr import Bound, Const, Expr, Var, divisions
from ..ops import Op
from ..schedule import Loop, Schedule, ScheduleError
from . import cprint, taps, ternary, wide
from .arith import Arithmetic, load
from .instr import Isa
from .quantized import MAP, SIMD_PRAGMA, epilogue_statements
from .vector import FROM_LANE_ZERO, AccessKind, classify_offset, exact_offset

CACHE_LINE = 64                                   # bytes a prefetch brings (``Schedule.prefetch``)
ELEMENT_BYTES = {"float": 4, "uint16_t": 2}       # by ``Arithmetic.element_type``


class NestEmitter(Protocol):
    """What a register block needs from the emitter of the nest around it."""

    schedule: Schedule
    op: Op
    isa: Isa
    kinds: dict[str, AccessKind]      # vector access kind per tensor (empty when not vectorized)
    arith: Arithmetic
    vector: Optional[Loop]            # the vectorized loop, if the target vectorizes it
    int_type: str                     # C type of loop variables, dims and offsets (params.index_ctype)

    def emit(self, indent: int, text: str) -> None:
        """Append one line of C at ``indent``."""

    def emit_loop(self, depth: int, indent: int, inside_block: bool = False) -> None:
        """Emit loop ``depth`` of the schedule and everything inside it."""

    def loop_depth(self, expr: Expr) -> int:
        """Index of the innermost loop among the loop variables of ``expr`` (-1 if none)."""


@dataclass(frozen=True)
class Accumulator:
    """One unrolled block position: constant values of the block loops."""

    name: str
    bindings: dict[str, Expr]
    valid_lanes: int            # lanes inside the vector loop's extent (all lanes if not vectorized)
    vector: str | None          # the vectorized block loop (bound to its vector's first lane)

    def guard(self, guard: Bound) -> Bound:
        """``guard`` at this position; the vectorized loop stays a variable (one value per lane)."""
        scalars = {n: v for n, v in self.bindings.items() if n != self.vector}
        return Bound(guard.expr.substitute(scalars), guard.lower, guard.upper)


@dataclass
class _Guards:
    """One accumulator's guards split by where they are checked."""

    store: list[str]            # scalar, block loops only: checked once per block
    store_lanes: list[Bound]    # lane-varying, block loops only
    update: list[str]           # scalar, involve reduction loops: checked per update
    update_lanes: list[Bound]   # lane-varying, involve reduction loops


@lru_cache(maxsize=1024)
def needed_guards(schedule: Schedule, tensor: str) -> frozenset[int]:
    """Indices into ``schedule.guards`` that keep ``tensor``'s index inside its shape.

    Greedy: drop each guard in turn if isl proves every access in the loop box that
    satisfies the remaining guards is in bounds. A guard over none of the index's loops cannot
    keep it in bounds (the loop box is a product); it is left out first, so that a nest whose
    guards exclude every iteration (a conv output that reads only padding) does not keep it.
    """
    index = schedule.index(tensor)
    shape = schedule.op.tensor(tensor).shape
    outside = " or ".join(f"({e.to_isl()}) < 0 or ({e.to_isl()}) >= {n}" for e, n in zip(index, shape))
    loops = frozenset().union(*(e.variables() for e in index))
    kept = {i for i, guard in enumerate(schedule.guards) if guard.expr.variables() & loops}
    for i in sorted(kept):
        trial = kept - {i}
        trial_guards = (schedule.guards[j].to_isl() for j in sorted(trial))
        if schedule.iterations(*trial_guards, f"({outside})").is_empty():
            kept = trial
    return frozenset(kept)


@dataclass(frozen=True)
class Base:
    """A pointer to one element of a tensor that a register block's body indexes by constants."""

    name: str                              # the C pointer declared per reduction iteration
    offset: str                            # its element's storage offset (C, vector.exact_offset)
    displacement: dict[str, int]           # each load's storage offset (C) -> elements from the base


def _displacement(schedule: Schedule, offset: Expr, base: Expr) -> int | None:
    """``offset - base`` where it is one constant over the loop box, else None: for affine offsets
    where no variable changes it (its value at the origin and one step along each variable), for
    others where isl proves it."""
    names = offset.variables() | base.variables()
    origin = {name: 0 for name in names}                   # inside the box
    distance = int(offset.evaluate(origin) - base.evaluate(origin))
    if not divisions(offset) | divisions(base):
        steps = ({**origin, name: 1} for name in names)
        return distance if all(offset.evaluate(x) - base.evaluate(x) == distance for x in steps) else None
    difference = f"({offset.to_isl()}) - ({base.to_isl()})"
    other = schedule.iterations(f"({difference} < {distance} or {difference} > {distance})")
    return distance if other.is_empty() else None


@lru_cache(maxsize=1024)
def operand_base(schedule: Schedule, tensor: str, offsets: tuple[Expr, ...]) -> Base | None:
    """The base of ``tensor``'s loads at ``offsets`` (the first one's element), or None where one of
    them is not at a constant distance from it."""
    displacement = {offsets[0].to_c(): 0}
    for offset in offsets[1:]:
        distance = _displacement(schedule, offset, offsets[0])
        if distance is None:
            return None
        displacement[offset.to_c()] = distance
    return Base(f"lo_base_{tensor}", exact_offset(schedule, offsets[0]), displacement)


class RegisterBlock:
    """Emits the block of ``emitter``'s schedule (its ``at`` loop and everything inside)."""

    def __init__(self, emitter: NestEmitter):
        self.em = em = emitter
        s = em.schedule
        self.start = s.position(s.register_block_at)
        reduction, block = s.block_loops()
        declared = s.vector_loop.name if s.vector_loop is not None else None
        self.lanes = em.isa.lanes if em.vector is not None else 1
        self.vector = em.vector.name if em.vector is not None else None
        self.chunk_loop = declared if declared in reduction else None
        self.block = block
        self.reduction = [n for n in reduction if n != self.chunk_loop]
        first = block[0] if block else self.chunk_loop
        self.body_depth = s.position(first) if first else len(s.loops)
        self.bias = s.op.bias and em.arith.bias_in_nest
        self.bias_kind = (classify_offset(s, self._bias_value(), self.lanes).kind
                          if self.bias and self.vector is not None else "broadcast")
        self._check_kinds()
        self.initialises_output = s.block_holds_final_outputs() and self._bias_loadable()
        # the schedule's fused epilogue, applied to the accumulators when they are stored where they
        # end as final outputs (None: no epilogue, or the emitter's pass after the nest applies it)
        final = self.initialises_output and s.op.scales is None
        self.epilogue: Optional[Epilogue] = s.fused_epilogue if final else None
        self.first_pass = self._first_pass()
        self.starts_output = self.initialises_output or self.first_pass is not None
        self.accumulators = self._accumulators()
        # a tap dot's window load zeroes the bytes its padding guard excludes (codegen/taps.py)
        tap = em.arith.plan.tap_dot if em.arith.plan is not None else None
        self.guards = [(i, g, em.loop_depth(g.expr)) for i, g in enumerate(s.guards)
                       if tap is None or i != tap.guard]
        # a guard on a reduction dim (padding taps) only skips updates, even where its loop
        # variables are all block loops (a reduction dim fused into a block loop)
        self.skips_updates = {i for i, dims in enumerate(s.guard_dims) if dims & s.op.reduction_dims}
        self.inner_vars = set(self.reduction) | ({self.chunk_loop} if self.chunk_loop else set())
        self.loads_output = not self.initialises_output and self.chunk_loop is None
        self.loads: dict[tuple, str] = {}
        self.setup: dict[str, tuple[list[str], str | None, _Guards]] = {}
        self.known: frozenset[str] = frozenset()   # guards the reduction being emitted runs under
        self.bases = self._bases()
        self.from_memory = self.memory_vectors()
        self.reads_memory = False           # an update multiplied a vector from memory (``fma_memory``)
        self.broadcasts_here = False        # a store broadcast its clip bounds there (``broadcast_here``)
        self.phase_groups = self._phase_groups(tap)
        self._packable: set[str] = set()
        # a phase group member's activations: the window at its phase's first output (taps.phases)
        # (and the lanes whose products are used: outputs P*j + q of the group's valid ones)
        self.phased = {acc.name: Accumulator(acc.name, {**acc.bindings, self.vector: Const(
                           group[0].bindings[self.vector].value + q)},
                           -(-(sum(a.valid_lanes for a in group) - q) // len(group)), self.vector)
                       for group in self.phase_groups for q, acc in enumerate(group)}

    # --- structure ---------------------------------------------------------------------
    def _check_kinds(self) -> None:
        kinds, out = self.em.kinds, self.em.op.output
        if not kinds:
            return
        if self.chunk_loop is None and kinds[out].kind not in ("contiguous", "strided"):
            raise ScheduleError(f"register_block: {out} is {kinds[out]} along the vector loop "
                                f"{self.vector!r} on {self.em.isa.name}; a register block needs it "
                                f"contiguous or strided (choose a layout where it is)")

    def _bias_value(self) -> Expr:
        """The bias element (its offset) in terms of the loops."""
        return self.em.op.bias_offset().substitute(self.em.schedule.dim_values)

    def _bias_loadable(self) -> bool:
        """A complete block sets its accumulators to the bias itself when the bias loads as one vector."""
        return self.chunk_loop is not None or self.bias_kind in ("broadcast", "contiguous")

    def _first_pass(self) -> str | None:
        """The C condition under which a block that does not hold final outputs visits its outputs
        first (``Schedule.block_first_pass``: its outer reduction loops all at 0), where its
        accumulators start from the bias (integer arithmetic: from zero) instead of loading the output,
        so no pass sets the output first; None where the block cannot (it holds final outputs, sums
        lanes of a vector chunk, is quantized with other than integer arithmetic or loads a bias it
        cannot load as one vector)."""
        em = self.em
        loops = em.schedule.block_first_pass()
        plan = em.arith.plan
        if (not loops or self.initialises_output or self.chunk_loop is not None
                or (plan is not None and not plan.integer) or not self._bias_loadable()):
            return None
        return " && ".join(f"{name} == 0" for name in loops)

    def _accumulators(self) -> list[Accumulator]:
        s = self.em.schedule
        ranges = []
        for name in self.block:
            extent = s.loop(name).extent
            step = self.lanes if name == self.vector else 1
            ranges.append([(name, value, min(step, extent - value)) for value in range(0, extent, step)])
        accs = []
        for number, combo in enumerate(itertools.product(*ranges)):
            bindings = {name: Const(value) for name, value, _ in combo}
            valid = min([lanes for name, _, lanes in combo if name == self.vector], default=self.lanes)
            accs.append(Accumulator(f"lo_acc{number}", bindings, valid, self.vector))
        return accs

    def _bases(self) -> dict[str, Base]:
        """The operand base of each float input loaded as a vector or broadcast (no chunk loop)."""
        em, s = self.em, self.em.schedule
        if self.vector is None or self.chunk_loop is not None or em.arith.name != "float":
            return {}
        bases = {}
        for tensor in em.op.inputs:
            if em.kinds[tensor].kind not in ("contiguous", "broadcast") or ternary.packed(s, tensor):
                continue
            offsets = tuple(dict.fromkeys(s.offset(tensor).substitute(acc.bindings)
                                          for acc in self.accumulators))
            base = operand_base(s, tensor, offsets)
            if base is not None:
                bases[tensor] = base
        return bases

    def memory_vectors(self) -> dict[str, frozenset[int]]:
        """The weights' displacements from their base of the vectors that the updates read from memory
        (see the module's docstring), by tensor: the last ones, as many as the block's accumulators, the
        weight vectors and a broadcast exceed the ISA's registers by, where one weight vector still fits
        beside the accumulators and the broadcast (a block far beyond the registers, one sized for
        another ISA's, is left to the compiler as before); empty on a table without ``fma_memory``, for
        other than float arithmetic or weights not loaded as vectors from a base."""
        em, weights = self.em, self.em.op.inputs[1]
        base = self.bases.get(weights)
        if "fma_memory" not in em.isa.ops or base is None or em.kinds[weights].kind != "contiguous":
            return {}
        vectors = sorted(set(base.displacement.values()))
        over = len(self.accumulators) + len(vectors) + 1 - em.isa.registers
        return {weights: frozenset(vectors[len(vectors) - over:])} if 0 < over < len(vectors) else {}

    def _prefetch_offsets(self, tensor: str, ahead: int) -> list[int]:
        """The element offsets from ``tensor``'s base that ``Schedule.prefetch(tensor, ahead)`` fetches:
        ``ahead`` past each cache line that one reduction iteration's loads of it span."""
        base = self.bases.get(tensor)
        if base is None:
            raise ScheduleError(f"prefetch({tensor!r}, {ahead}): this register block does not read {tensor} "
                                f"at constant distances from one base (a float operand loaded as vectors or "
                                f"broadcasts, no chunk loop), where the prefetch is printed")
        width = self.lanes if self.em.kinds[tensor].kind == "contiguous" else 1
        element = ELEMENT_BYTES[self.em.arith.element_type]
        first, end = min(base.displacement.values()), max(base.displacement.values()) + width
        per_line = CACHE_LINE // element
        return [ahead + first + line * per_line for line in range(-(-(end - first) // per_line))]

    def _residual_prefetches(self) -> list[str]:
        """The residual offsets a vector block's store adds, one per accumulator, prefetched as the block
        starts: its reduction hides their latency, which the store would otherwise wait on after it.
        ResNet-50's 64->256 1x1 conv at 56x56 (64 reduction steps a block, 3.2 MB of output) ran its
        residual kernel in place 1.1-1.3x the time of the same block without the residual, 0.9-1.0x with
        the prefetch (AMD EPYC Zen 4, 1 thread, kernel only). None where the block prefetches an operand
        (``Schedule.prefetch``): with its weights prefetched, the 512->2048 conv at 7x7 ran 1.14x slower
        with the residual's prefetch at 2 threads (0.92x without the weights' prefetch). None where the
        threads split the vector loop's dim (the channels): ResNet-50's 256->1024 conv at 14x14 (parallel
        over its channel blocks) ran about 1.1x onnxruntime's node with it at 2 threads, 0.93-0.98x
        without (bench_steps, 2 runs each; one thread 0.88-0.92x main's time with it)."""
        schedule = self.em.schedule
        if not (self.epilogue and self.epilogue.residual and self.vector and self.chunk_loop is None
                and not schedule.prefetched):
            return []
        split = schedule.parallel_loop
        if split is not None and schedule.dims_of(split.name) & schedule.dims_of(self.vector):
            return []
        out = self.em.op.output
        return [schedule.offset(out).substitute(acc.bindings).to_c() for acc in self.accumulators]

    def _phase_groups(self, tap) -> list[list[Accumulator]]:
        """The accumulators of a tap dot computed in phase groups (``taps.phases``: ``P`` consecutive
        vectors of outputs, the ``q``-th one holding outputs ``P*j + q`` of the group until the
        reduction ends, then interleaved back): every ``P`` consecutive vectors of a block loop run,
        the first at a multiple of ``P`` vectors, the others alike, whose updates need no lane mask
        other than their valid lanes. None where the accumulators start from the output or from a
        bias that varies along the lanes."""
        count = taps.phases(tap, self.em.arith.ints) if tap is not None and self.vector else 1
        if (count == 1 or self.chunk_loop is not None or self.loads_output
                or (self.starts_output and self.bias and self.bias_kind != "broadcast")):
            return []
        width = count * self.lanes
        runs: dict[tuple, dict[int, Accumulator]] = {}
        for acc in self.accumulators:
            if self._split_guards(acc).update_lanes:
                continue
            others = tuple(sorted((n, v.to_c()) for n, v in acc.bindings.items() if n != self.vector))
            runs.setdefault(others, {})[acc.bindings[self.vector].value] = acc
        groups = []
        for run in runs.values():
            for first in sorted(v for v in run if v % width == 0):
                group = [run.get(first + q * self.lanes) for q in range(count)]
                if all(group):
                    groups.append(group)
        return groups

    # --- guards and masks ----------------------------------------------------------------
    def _split_guards(self, acc: Accumulator) -> _Guards:
        split = _Guards([], [], [], [])
        for i, guard, depth in self.guards:
            if depth < self.body_depth:
                continue            # checked by the loops outside the block body
            bound = acc.guard(guard)
            names = bound.expr.variables()
            lane = self.vector is not None and self.vector in names
            inner = bool(names & self.inner_vars) or i in self.skips_updates
            target = ((split.update_lanes if lane else split.update) if inner
                      else (split.store_lanes if lane else split.store))
            target.append(bound if lane else f"({bound.to_c()})")
        return split

    def _lane_bits(self, indent: int, name: str, base: str, bounds: list[Bound]) -> None:
        """``unsigned name``: bit j set iff every bound holds with the vector loop at ``base + j``."""
        em, v = self.em, self.vector
        em.emit(indent, f"unsigned {name} = 0u;")
        em.emit(indent, f"for ({em.int_type} lo_j = 0, lo_v0 = {base}; lo_j < {self.lanes}; ++lo_j) {{")
        em.emit(indent + 1, f"const {em.int_type} {v} = lo_v0 + lo_j;")
        em.emit(indent + 1, f"if ({' && '.join(f'({b.to_c()})' for b in bounds)}) {name} |= 1u << lo_j;")
        em.emit(indent, "}")

    def _base(self, acc: Accumulator) -> str:
        return acc.bindings[self.vector].to_c() if self.vector in acc.bindings else self.vector

    # --- emission ------------------------------------------------------------------------
    def emit(self, indent: int) -> None:
        """The block: accumulators set, the reduction loops with the updates, accumulators stored."""
        em = self.em
        reduction = ", ".join(self.reduction + ([self.chunk_loop] if self.chunk_loop else [])) or "nothing"
        em.emit(indent, f"{{ /* register block at {em.schedule.register_block_at}: {len(self.accumulators)} "
                        f"accumulator(s) over {', '.join(self.block) or 'one element'}, "
                        f"kept across {reduction} */")
        inner = indent + 1
        if self.first_pass is not None:
            em.emit(inner, f"const int lo_first = {self.first_pass};   /* the outputs' first visit */")
        guards = {acc.name: self._split_guards(acc) for acc in self.accumulators}
        for acc in self.accumulators:
            self._emit_setup(inner, acc, guards[acc.name])
        for offset in self._residual_prefetches():
            em.emit(inner, f"__builtin_prefetch(&{RESIDUAL}[{offset}]);")
        known = list(dict.fromkeys(g for acc in self.accumulators for g in guards[acc.name].store))
        if known:
            # a partial block's existence tests are loop invariants: a whole block runs the
            # reduction without them (and without the load guards they imply)
            em.emit(inner, f"if ({' && '.join(known)}) {{   /* every accumulator exists */")
            self.known = frozenset(known)
            em.emit_loop(self.start, inner + 1, inside_block=True)
            self.known = frozenset()
            em.emit(inner, "} else {")
            em.emit_loop(self.start, inner + 1, inside_block=True)
            em.emit(inner, "}")
        else:
            em.emit_loop(self.start, inner, inside_block=True)
        for group in self.phase_groups:
            for line in taps.interleave(em.arith.ints, [acc.name for acc in group]):
                em.emit(inner, line)
        for run in self._byte_runs():
            if len(run) > 1:
                self._emit_packed(inner, run)
            else:
                self._emit_store(inner, run[0])
        em.emit(indent, "}")

    def _vector_type(self) -> str:
        return self.em.arith.vector_type(bool(self.vector))

    def _zero(self) -> str:
        return self.em.arith.zero(bool(self.vector))

    def _emit_setup(self, indent: int, acc: Accumulator, guards: _Guards) -> None:
        """Declare the accumulator's existence test, lane mask and initial value."""
        em, isa = self.em, self.em.isa
        if guards.store:
            em.emit(indent, f"const int {acc.name}_ok = {' && '.join(guards.store)};")
        bits = []
        if self.vector and self.chunk_loop is None:
            if guards.store_lanes:
                self._lane_bits(indent, f"{acc.name}_live", self._base(acc), guards.store_lanes)
                bits.append(f"{acc.name}_live")
            if acc.valid_lanes < self.lanes:
                bits.append(f"((1u << {acc.valid_lanes}) - 1u)")
        mask = None
        if bits:
            mask = f"{acc.name}_mask"
            em.emit(indent, f"const {isa.mask_type} {mask} = {isa.mask_bits(s=' & '.join(bits))};")
        em.emit(indent, f"{self._vector_type()} {acc.name} = {self._initial(acc, mask, bool(guards.store))};")
        if self.loads_output:
            load = self._vector_access(em.op.output, acc, mask)
            conditions = [f"{acc.name}_ok"] if guards.store else []
            conditions += ["!lo_first"] if self.first_pass else []
            em.emit(indent, f"if ({' && '.join(conditions)}) {acc.name} = {load};" if conditions
                    else f"{acc.name} = {load};")
        self.setup[acc.name] = (bits, mask, guards)

    def _initial(self, acc: Accumulator, mask: str | None, guarded: bool) -> str:
        """The accumulator's value before the reduction: the bias (complete blocks) or zero. The
        bias of an accumulator that may not exist (``guarded``: past a partial block of output
        channels) is read only if it does."""
        if not (self.starts_output and self.bias) or self.chunk_loop is not None:
            return self._zero()
        ref = f"{self.em.op.bias_tensor}[{self._bias_value().substitute(acc.bindings).to_c()}]"
        value = load(self.em.isa, self.bias_kind, ref, f"&{ref}", "", mask) if self.vector else ref
        return f"{acc.name}_ok ? {value} : {self._zero()}" if guarded else value

    def _vector_access(self, tensor: str, acc: Accumulator, mask: str | None, indent: int = 0) -> str:
        """A load of ``tensor`` at ``acc``'s position (a vector along the vector loop); a gather
        first writes its lane offsets to an index array at ``indent``."""
        em = self.em
        phased = tensor == em.op.inputs[0] and acc.name in self.phased
        acc = self.phased[acc.name] if phased else acc
        value = em.schedule.offset(tensor).substitute(acc.bindings)
        offset = value.to_c()
        if not self.vector:
            return wide.reference(em.schedule, tensor, offset)
        kind, base = em.kinds[tensor], self.bases.get(tensor)
        first = exact_offset(em.schedule, value) if kind.kind in FROM_LANE_ZERO else offset
        ref = f"{base.name}[{base.displacement[offset]}]" if base else f"{tensor}[{first}]"
        base, index = f"&{ref}", f"lo_stride_{tensor}"
        if kind.kind == "gather":
            lanes_offset = em.schedule.offset(tensor).substitute(
                {n: v for n, v in acc.bindings.items() if n != self.vector}).to_c()
            array = f"lo_index{len(self.loads)}"
            em.emit(indent, f"int {array}[{self.lanes}];")
            em.emit(indent, f"for ({em.int_type} lo_j = 0, lo_v0 = {self._base(acc)}; lo_j < {self.lanes}; "
                            f"++lo_j) {{ const {em.int_type} {self.vector} = lo_v0 + lo_j; "
                            f"{array}[lo_j] = {lanes_offset}; }}")
            base, index = tensor, em.isa.index_load(p=array)
        if tensor in em.op.inputs:
            return em.arith.operand(tensor, kind, ref, base, index, mask, acc.bindings, offset, phased,
                                    acc.valid_lanes)
        return load(em.isa, kind.kind, ref, base, index, mask)

    def emit_body(self, indent: int) -> None:
        """One reduction iteration: operand loads (each once) and every accumulator's update."""
        em = self.em
        self.loads = {}
        chunk_bits = None
        if self.chunk_loop:
            loop = em.schedule.loop(self.chunk_loop)
            em.emit(indent, cprint.for_loop(em.int_type, loop.name, loop.extent, step=self.lanes) + " {")
            indent += 1
            if self.vector and loop.extent % self.lanes:
                left = f"({loop.extent} - {loop.name})"
                chunk_bits = f"({left} < {self.lanes} ? (1u << {left}) - 1u : ~0u)"
        for tensor, base in self.bases.items():
            em.emit(indent, f"const {em.arith.element_type} *{base.name} = &{tensor}[{base.offset}];")
        for tensor, ahead in em.schedule.prefetched:
            for offset in self._prefetch_offsets(tensor, ahead):
                em.emit(indent, f"__builtin_prefetch(&{self.bases[tensor].name}[{offset}]);")
        for acc in self.accumulators:
            self._emit_update(indent, acc, chunk_bits)
        if self.chunk_loop:
            em.emit(indent - 1, "}")

    def _emit_update(self, indent: int, acc: Accumulator, chunk_bits: str | None) -> None:
        em, isa = self.em, self.em.isa
        bits, mask, guards = self.setup[acc.name]
        extra = [chunk_bits] if chunk_bits else []          # lanes that vary per iteration
        if guards.update_lanes:
            self._lane_bits(indent, f"{acc.name}_bits", self._base(acc), guards.update_lanes)
            extra.append(f"{acc.name}_bits")
        if acc.name in self.phased:
            mask = None                         # every lane of a phase: its lanes are not the outputs'
        elif extra:
            mask = f"{acc.name}_now"
            em.emit(indent, f"const {isa.mask_type} {mask} = {isa.mask_bits(s=' & '.join(bits + extra))};")
        activations, weights = em.op.inputs
        memory = self._memory_reference(weights, acc, mask) if self.vector else None
        a = self._operand(indent, activations, acc, mask, guards)
        # a weight vector the update reads from memory is loaded by no statement of its own
        b = "" if memory is not None else self._operand(indent, weights, acc, mask, guards)
        conditions = ([f"{acc.name}_ok"] if guards.store and not self.known else []) + guards.update
        if not self.vector:
            update = f"{acc.name} += {em.arith.product(a, b, acc.bindings)};"
        elif memory is not None:
            self.reads_memory = True
            update = f"{acc.name} = {isa.fma_memory(a=a, p=memory, c=acc.name)};"
        else:
            update = f"{acc.name} = {em.arith.update(a, b, acc.name, mask)};"
        em.emit(indent, f"if ({' && '.join(conditions)}) {update}" if conditions else update)

    def _memory_reference(self, tensor: str, acc: Accumulator, mask: str | None) -> str | None:
        """The address of ``tensor``'s vector for ``acc`` where its update reads it from memory
        (``from_memory``; an unmasked update of a vector no guard protects), else None."""
        chosen = self.from_memory.get(tensor)
        if not chosen or mask is not None or self._protecting(tensor, acc):
            return None
        base = self.bases[tensor]
        distance = base.displacement[self.em.schedule.offset(tensor).substitute(acc.bindings).to_c()]
        return f"&{base.name}[{distance}]" if distance in chosen else None

    def _protecting(self, tensor: str, acc: Accumulator) -> list[str]:
        """The guards (C) that must hold for ``acc``'s load of ``tensor`` to stay inside it, beyond those
        the reduction being emitted runs under and the vector loop's lane mask."""
        em = self.em
        needed = needed_guards(em.schedule, tensor)
        protect = []
        for i, guard, depth in self.guards:
            if i in needed and depth >= self.body_depth:
                bound = acc.guard(guard)
                if self.vector is not None and self.vector in bound.expr.variables():
                    if em.kinds[tensor].kind == "broadcast":
                        raise ScheduleError(f"register_block: the broadcast of {tensor} needs a guard "
                                            f"that varies across the lanes of {self.vector!r}")
                    continue            # covered by the lane mask
                if f"({bound.to_c()})" not in self.known:
                    protect.append(f"({bound.to_c()})")
        return protect

    def _operand(self, indent: int, tensor: str, acc: Accumulator, mask: str | None, guards: _Guards) -> str:
        """The name of ``tensor``'s value for ``acc`` in this iteration, loaded once per distinct load."""
        em = self.em
        protect = self._protecting(tensor, acc)
        varying = self.vector is not None and em.kinds[tensor].kind != "broadcast"
        lanes = mask if varying else None
        # one load per distinct element (and lanes, and guards); a gather's index array is
        # written only with the load that first needs it
        phased = tensor == em.op.inputs[0] and acc.name in self.phased
        at = self.phased[acc.name] if phased else acc
        key = (tensor, em.schedule.offset(tensor).substitute(at.bindings).to_c(), lanes, tuple(protect),
               phased)
        if key not in self.loads:
            self.loads[key] = self._emit_load(indent, self._vector_access(tensor, acc, lanes, indent),
                                              protect, tensor)
        return self.loads[key]

    def _emit_load(self, indent: int, load: str, protect: list[str], tensor: str) -> str:
        """Declare ``load`` (zero where a protecting guard fails) and return its name."""
        name = load_variable(tensor, len(self.loads))
        arith, vectorized = self.em.arith, bool(self.vector)
        zero = arith.operand_zero(vectorized, tensor)
        value = f"({' && '.join(protect)}) ? {load} : {zero}" if protect else load
        self.em.emit(indent, f"const {arith.operand_type(vectorized, tensor)} {name} = {value};")
        return name

    def _emit_store(self, indent: int, acc: Accumulator) -> None:
        em, isa, out = self.em, self.em.isa, self.em.op.output
        plan = em.arith.plan
        if plan is not None and plan.fused_epilogue:
            self._emit_epilogue(indent, acc)
            return
        _, mask, guards = self.setup[acc.name]
        offset = em.schedule.offset(out).substitute(acc.bindings).to_c()
        epilogue, residual = self.epilogue, f"{RESIDUAL}[{offset}]"
        if self.chunk_loop:
            total = isa.hsum(v=acc.name) if self.vector else acc.name
            if self.initialises_output:
                bias = ""
                if self.bias:
                    bias_index = self._bias_value().substitute(acc.bindings).to_c()
                    bias = f"{self.em.op.bias_tensor}[{bias_index}] + "
                value = f"{bias}{total}"
                store = f"{out}[{offset}] = {epilogue.c(value, residual) if epilogue else value};"
            else:
                store = f"{out}[{offset}] += {total};"
        elif not self.vector:
            store = f"{out}[{offset}] = {epilogue.c(acc.name, residual) if epilogue else acc.name};"
        else:
            kind = em.kinds[out].kind
            value = acc.name
            if epilogue:
                # the residual is stored in the output's layout: loaded as the output is stored
                loaded = load(isa, kind, residual, f"&{residual}", f"lo_stride_{out}", mask)
                # a block multiplying from memory has no register to hold a bound across its loops
                here = self.reads_memory and epilogue.clip is not None and "broadcast_here" in isa.ops
                self.broadcasts_here |= here
                value = epilogue.vector(isa, acc.name, loaded, here)
            pointer = f"&{out}[{offset}]"
            if kind == "strided":
                store = isa.scatter_mask(p=pointer, m=mask or isa.mask_count(n=str(self.lanes)),
                                         idx=f"lo_stride_{out}", v=value) + ";"
            else:
                store = (isa.store_mask(p=pointer, m=mask, v=value) if mask
                         else isa.store(p=pointer, v=value)) + ";"
        em.emit(indent, f"if ({acc.name}_ok) {store}" if guards.store else store)

    def _byte_runs(self) -> list[list[Accumulator]]:
        """The accumulators in store order, in runs whose requantized bytes are packed and stored
        together (``_emit_packed``): up to 4 consecutive vectors along a contiguous output, all lanes
        live but the last one's past the vector loop's end, no existence test; the others alone."""
        em = self.em
        packs = (em.arith.plan is not None and em.arith.plan.fused_epilogue and em.op.quant.requantized
                 and self.vector is not None and self.chunk_loop is None and "pack_u8" in em.isa.ops
                 and em.kinds[em.op.output].kind == "contiguous")
        runs: list[list[Accumulator]] = []
        for acc in self.accumulators:
            bits, _, guards = self.setup[acc.name]
            fits = packs and not guards.store and not guards.store_lanes
            last = runs[-1][-1] if runs else None
            if (fits and last is not None and last.name in self._packable and len(runs[-1]) < 4
                    and last.valid_lanes == self.lanes and self._follows(last, acc)):
                runs[-1].append(acc)
            else:
                runs.append([acc])
            if fits:
                self._packable.add(acc.name)
        return runs

    def _follows(self, first: Accumulator, then: Accumulator) -> bool:
        """``then`` is the vector after ``first`` along the vector loop (the other block loops alike)."""
        v = self.vector
        same = {n: e for n, e in first.bindings.items() if n != v} == {
            n: e for n, e in then.bindings.items() if n != v}
        return same and then.bindings[v].value == first.bindings[v].value + self.lanes

    def _emit_packed(self, indent: int, run: list[Accumulator]) -> None:
        """A run of requantized accumulators (``_byte_runs``): each one's epilogue into its own int
        array, then their bytes packed into one vector (the table's ``pack_u8`` / ``pack_s8``: two
        saturating packs, exact on in-range lanes, and a dword permute, in place of a narrowing store
        per vector) and stored at once."""
        em, isa = self.em, self.em.isa
        names = [f"lo_r{i}" for i in range(len(run))]
        # clip_quantized's table: on the packed bytes where the table maps bytes, else in the lanes
        mapped = em.arith.plan.requantized_clip is not None and "map_bytes" in isa.ops
        em.emit(indent, f"{{ /* {', '.join(a.name for a in run)}: requantized, packed to bytes together */")
        inner = indent + 1
        em.emit(inner, f"{em.arith.scalar_type} {', '.join(f'{name}[{self.lanes}]' for name in names)};")
        for acc, name in zip(run, names):
            self._emit_epilogue(inner, acc, name, mapped=not mapped)
        vectors = [isa.load(p=name) for name in names] + [isa.zero()] * (4 - len(run))
        pack = isa.pack_u8 if em.arith.plan.output_type == "uint8_t" else isa.pack_s8
        value = pack(**dict(zip("abcd", vectors)))
        if mapped:
            value = isa.map_bytes(v=value, p=MAP)
        first = run[0]
        pointer = f"&Y[{em.schedule.offset(em.op.output).substitute(first.bindings).to_c()}]"
        count = self.lanes * (len(run) - 1) + run[-1].valid_lanes
        em.emit(inner, (isa.store(p=pointer, v=value) if count == 4 * self.lanes
                        else isa.store_bytes(p=pointer, v=value, n=str(count))) + ";")
        em.emit(indent, "}")

    def _narrowed(self, pointer: str, valid: int) -> str:
        """Store the int lanes of ``lo_r`` (the first ``valid``) as bytes at ``pointer``."""
        isa = self.em.isa
        value = isa.load(p="lo_r")
        if valid == self.lanes:
            return isa.store_narrow(p=pointer, v=value)
        return isa.store_narrow_mask(p=pointer, m=isa.mask_count(n=str(valid)), v=value)

    def _emit_epilogue(self, indent: int, acc: Accumulator, target: str | None = None,
                       mapped: bool = True) -> None:
        """Quantized kernels: the block holds final sums, so the epilogue (compensation, bias,
        scale or requantization) runs on them and writes the output ``Y``. A vector accumulator
        goes through stack arrays: its lanes' results are computed in one vectorizable loop,
        then copied to ``Y`` (one copy where the lanes are contiguous and all live). A requantized
        output is computed in int lanes (so the loop has no byte type and is vectorized at the full
        int32 width) and narrowed to bytes when stored (the table's ``store_narrow``); with ``target``
        (a run of ``_emit_packed``) the int lanes go to that array, declared and stored by the caller,
        which maps them itself where not ``mapped`` (``epilogue_statements``)."""
        em, plan = self.em, self.em.arith.plan
        bits, _, guards = self.setup[acc.name]
        index = em.schedule.index(em.op.output)
        em.emit(indent, f"if ({acc.name}_ok) {{" if guards.store else "{")
        inner = indent + 1
        if not (self.vector and self.chunk_loop is None):
            value = em.isa.hsum(v=acc.name) if self.vector else acc.name
            output_index = [e.substitute(acc.bindings) for e in index]
            for line in epilogue_statements(em.schedule, plan, value, output_index):
                em.emit(inner, line)
            em.emit(indent, "}")
            return
        lane = {self.vector: Var("lo_lane")}
        outer = {name: value for name, value in acc.bindings.items() if name != self.vector}
        index = [e.substitute(outer).substitute(lane) for e in index]
        # a packed run's last vector computes every lane (a dead one a clamped position's value, not stored)
        lanes = cprint.for_loop("int", "lo_j", self.lanes if target else acc.valid_lanes) + " {"
        first = f"const {em.int_type} lo_lane = {self._base(acc)} + lo_j;"
        whole = not bits and em.kinds[em.op.output].kind == "contiguous"
        narrow = em.op.quant.requantized          # int lanes, narrowed to bytes when stored
        result = em.arith.scalar_type if narrow else plan.output_type
        em.emit(inner, f"{em.arith.scalar_type} lo_t[{self.lanes}];" if target else
                f"{em.arith.scalar_type} lo_t[{self.lanes}]; {result} lo_r[{self.lanes}];")
        em.emit(inner, em.isa.store(p="lo_t", v=acc.name) + ";")
        em.emit(inner, SIMD_PRAGMA)
        em.emit(inner, lanes)
        em.emit(inner + 1, first)
        # lanes past a partial tile (not live) compute a clamped position's value, not stored
        clamp = frozenset({"lo_lane"}) if bits else frozenset()
        for line in epilogue_statements(em.schedule, plan, "lo_t[lo_j]", index,
                                        target=f"{target or 'lo_r'}[lo_j]", narrow=not narrow, clamp=clamp,
                                        mapped=mapped):
            em.emit(inner + 1, line)
        em.emit(inner, "}")
        if target:
            em.emit(indent, "}")
            return
        offset = em.schedule.offset(em.op.output).substitute(outer).substitute(lane)
        if whole:
            start = offset.substitute({"lo_lane": acc.bindings.get(self.vector, Var(self.vector))}).to_c()
            em.emit(inner, self._narrowed(f"&Y[{start}]", acc.valid_lanes) + ";" if narrow else
                    f"__builtin_memcpy(&Y[{start}], lo_r, sizeof(lo_r[0]) * {acc.valid_lanes});")
        else:
            em.emit(inner, lanes)
            if bits:
                em.emit(inner + 1, f"if (!((({' & '.join(bits)}) >> lo_j) & 1u)) continue;")
            em.emit(inner + 1, first)
            em.emit(inner + 1, f"Y[{offset.to_c()}] = ({plan.output_type})lo_r[lo_j];")
            em.emit(inner, "}")
        em.emit(indent, "}")
