"""What a generated kernel executes: its instructions and memory accesses per run, counted from
the decisions codegen makes (not from the C text).

The kernel is a set of sites, each a piece of code run ``executions`` times (counted exactly with
isl over the loops' box and the guards the nest checks above it) doing one ``Work`` per execution:

* one site per scalar loop: its control, the dims it defines and the guards it checks;
* the vectorized loop of the plain nest (``emit.vector_loop_plan``): operand loads by access kind
  (``emit.vector_access_kinds``), the lane loop that builds mask bits and gather indices, the update
  with the output loaded and stored (or one accumulator summed after the loop), and that sum;
* the scalar statement of a nest without vector loop; the output stays in a register across the
  innermost loop when it does not depend on it (as the C compiler's store motion does);
* a register block (``block.RegisterBlock``, driven through its emission so that it records its
  accumulators, guards and distinct loads): its setup and stores once per block, its body once per
  reduction iteration (one update per accumulator, each distinct load once; accumulators beyond the
  register file are spilled: a load and a store each per update);
* the output initialisation, the scaled output of a Gemm, and the quantized prologue and epilogue
  passes.

A site also says how many dependent accumulator updates one execution adds to its longest
chain (``chain``: one over the number of outputs updated in turn), how many updates of one output
come in a row (``run``) and whether the chain goes through memory (a partial sum stored, then
loaded by the next update of the same output). A scalar nest that the C compiler vectorizes is
counted as the vectorized schedule the compiler makes of it (``compiler_vectorized``;
``KernelCounts.compiler_vectorized`` says what it did).
"""
from __future__ import annotations

import math
import re
from dataclasses import replace

import islpy as isl

from ...codegen import taps
from ...codegen.arith import Arithmetic, arithmetic
from ...codegen.block import Accumulator, RegisterBlock
from ...codegen.emit import placed_guards, vector_access_kinds, vector_loop_plan
from ...codegen.instr import Isa, tables
from ...codegen.nest import dim_depths
from ...codegen.params import index_ctype, storage_elements
from ...codegen.quantized import QuantPlan, compensation_entries, has_signed_dot
from ...codegen.quantized import plan as quant_plan
from ...codegen.vector import AccessKind
from ...expr import Bound, Expr, Var, divisions
from ...schedule import Loop, Schedule, ScheduleError
from ..core_costs import CoreCosts
from ..kernel_counts import KernelCounts, Site, Work
from .isa import bf16_dot_available, table_variant

# Of a table's vector registers (``Isa.registers``: AVX-512 zmm0-31, AVX2 ymm0-15, scalar code xmm0-15),
# the ones a register block leaves to its operands.
OPERAND_REGISTERS = 2
# Vector instructions that turn a loaded operand into products' lanes, per arithmetic: widen bytes
# (integer); widen, subtract the zero point, convert, scale (dequantize).
OPERAND_OPS = {"float": 0, "integer": 1, "dot": 0, "dequantize": 4, "bf16": 2, "bf16_dot": 0}
ZIP_OPS = {"avx512": 1, "avx2": 2}     # instructions per vector a phase group's zip makes (taps.interleave)
TAP_SPREAD_OPS = 2       # and a tap dot's activations (codegen/taps.py): permute and shuffle after the load
EPILOGUE_OPS = 10        # vector instructions of a quantized epilogue per output vector


# the kernel model's constants (``model.py``) of the benchmark machine's core, a Sapphire Rapids
# generation Xeon (Golden Cove; the model's docstring says where each comes from)
GOLDEN_COVE = CoreCosts(fma_per_cycle=2, vector_per_cycle=2, loads_per_cycle=2, stores_per_cycle=1,
                        issue_per_cycle=6, gather_lane=0.4, scatter_lane=0.9, masked=0, mask=1, hsum=6,
                        loop_iteration=2, definition=1, division=8, guard_check=2, lane_step=1,
                        store_forward=5, scalar_add_latency=2, window=512)
X86_CORE_COSTS = {
    "avx512": GOLDEN_COVE,
    # 256-bit loads on 3 ports; no mask registers: a masked load or update is a blend, a mask 3
    # instructions, a scatter lane by lane
    "avx2": replace(GOLDEN_COVE, loads_per_cycle=3, masked=1, mask=3, scatter_lane=2, hsum=5),
    "scalar": GOLDEN_COVE,
}


def count(schedule: Schedule, isa: str = "auto", compiler_vectorizes: bool = True) -> KernelCounts:
    """The counts of ``schedule``'s kernel on ``isa`` (``"auto"``: the best this CPU runs).

    ``compiler_vectorizes=False`` counts the code as emitted, without what the C compiler's
    vectorizer makes of a scalar nest (``compiler_vectorized``)."""
    quantized = schedule.op.quant is not None
    name = table_variant(isa, integer=quantized)
    vectorized = compiler_vectorized(schedule, name) if compiler_vectorizes else None
    if vectorized is not None:
        return replace(_Counter(vectorized[0], name).counts(), compiler_vectorized=vectorized[1])
    return _Counter(schedule, name).counts()


def compiler_vectorized(schedule: Schedule, isa: str) -> tuple[Schedule, str] | None:
    """The schedule that the C compiler's vectorizer (GCC -O3) makes of a scalar float nest on
    ``isa``, and what it did; None when it leaves the nest scalar.

    It vectorizes the innermost loop when no guard is checked in it, the output is contiguous along
    it and each input contiguous or invariant (a float reduction is not reassociated without
    -ffast-math). When the innermost loop is a reduction without guards, it vectorizes the loop
    around it on the same conditions (outer-loop vectorization) with the output vectors kept in
    registers across the reduction: that loop split by the lanes, its lanes innermost, a register
    block at the reduction. A register block is not vectorized (its scalar accumulators stay)."""
    table = arithmetic(schedule, isa, None).acc
    if (schedule.vector_loop is not None or schedule.op.quant is not None or schedule.register_block_at
            or not table.vectorizes):
        return None
    loops, n = schedule.loops, len(schedule.loops)
    guarded = {depth for _, depth in placed_guards(schedule)}
    inner = loops[-1]
    if n - 1 in guarded:
        return None
    if _vectorizable(schedule, inner, table):
        return schedule.vectorize(inner.name), f"loop {inner.name}"
    reduction = inner.name not in schedule.offset(schedule.op.output).variables()
    if n < 2 or not reduction or n - 2 in guarded:
        return None
    outer = loops[-2]
    try:
        if not _vectorizable(schedule.reorder(inner.name, outer.name), outer, table):
            return None
        lanes = f"{outer.name}_i"
        vectorized = (schedule.split(outer.name, table.lanes).reorder(inner.name, lanes).vectorize(lanes)
                      .register_block(inner.name))
    except ScheduleError:           # a loop name taken by the split, or an order the schedule forbids
        return None
    return vectorized, f"loop {outer.name} around the reduction {inner.name}"


def _vectorizable(schedule: Schedule, loop: Loop, table: Isa) -> bool:
    """``loop`` (innermost) has lanes to fill, the output is contiguous along it and each input
    contiguous or invariant."""
    if loop.extent < 2 or loop.parallel:
        return False
    kinds = vector_access_kinds(schedule.vectorize(loop.name), table)
    return kinds[schedule.op.output].kind == "contiguous" and all(
        kinds[t].kind in ("contiguous", "broadcast") for t in schedule.op.inputs)


class _Recorder:
    """A ``block.NestEmitter`` that writes no C: it runs a register block's emission once so that
    the block records its accumulators, their guards and masks, and its distinct loads."""

    def __init__(self, schedule: Schedule, arith: Arithmetic, kinds: dict[str, AccessKind]):
        self.schedule, self.op, self.arith, self.kinds = schedule, schedule.op, arith, kinds
        self.isa = arith.acc
        self.vector = schedule.vector_loop if kinds else None
        self.int_type = index_ctype(schedule)
        self.position = {name: i for i, name in enumerate(schedule.loop_names)}
        self.block = RegisterBlock(self)
        self.block.emit(0)

    def emit(self, indent: int, text: str) -> None:
        """The C text is not needed: the block keeps what it decided."""

    def emit_loop(self, depth: int, indent: int, inside_block: bool = False) -> None:
        if depth == self.block.body_depth:
            self.block.emit_body(indent)
        else:
            self.emit_loop(depth + 1, indent, inside_block)

    def loop_depth(self, expr: Expr) -> int:
        return max((self.position[v] for v in expr.variables() if v in self.position), default=-1)


class _Counter:
    """Builds the sites of one schedule's kernel on one ISA."""

    def __init__(self, schedule: Schedule, isa: str):
        self.schedule, self.op = schedule, schedule.op
        self.plan: QuantPlan | None = None
        if self.op.quant is not None:
            self.plan = quant_plan(schedule, tables(isa).floats.lanes, has_signed_dot(isa))
        self.arith = arithmetic(schedule, isa, self.plan, bf16_dot_available(isa))
        self.kinds = vector_access_kinds(schedule, self.arith.acc)
        self.lanes = self.arith.acc.lanes if self.kinds else 1
        self.vector = schedule.vector_loop if self.kinds else None
        self.placed = [(bound, depth) for bound, (_, depth)
                       in zip(schedule.guards, placed_guards(schedule), strict=True)]
        depths = dim_depths(schedule)
        defined = [[v for d, v in schedule.dim_values.items() if depths[d] == i and v != Var(d)]
                   for i in range(len(schedule.loops))]
        self.defs = [len(values) for values in defined]
        self.divisions = [len(set().union(*map(divisions, values))) for values in defined]
        self.dot = self.arith.dot_loop
        self.out_vars = schedule.offset(self.op.output).variables()

    # --- iteration counts ------------------------------------------------------------------
    def passing(self, depth: int) -> int:
        """Iterations of loops 0..depth whose guards (checked at those depths) all hold."""
        return self._card(self._conditions(depth), depth) if depth >= 0 else 1

    def _conditions(self, depth: int) -> list[str]:
        """isl constraints of the iterations of loops 0..depth that the nest runs."""
        conditions = [b.to_isl() for b, at in self.placed if at <= depth]
        if self.dot is not None and self.schedule.position(self.dot) <= depth:
            conditions.append(f"{self.dot} = 0")      # the dot loop runs its first iteration only
        return conditions

    def _card(self, conditions: list[str], depth: int) -> int:
        inner = len(self.schedule.loops) - depth - 1
        points = self.schedule.iterations(*conditions).project_out(isl.dim_type.set, depth + 1, inner)
        card = points.card()            # barvinok: a constant without parameters
        return card.eval(isl.Point.zero(card.get_domain_space())).to_python()

    def instances(self) -> int:
        return self._card([b.to_isl() for b, _ in self.placed], len(self.schedule.loops) - 1)

    def trips(self, loop: Loop) -> int:
        """Iterations of ``loop`` per entry: vectors for the vector loop, one for the dot loop."""
        if loop.name == self.dot:
            return 1
        return -(-loop.extent // self.lanes) if self.vector is not None and loop.name == self.vector.name \
            else loop.extent

    def chain(self, loops: tuple[Loop, ...]) -> tuple[float, float]:
        """(chain, run) of a statement inside ``loops``: the output is updated in turn with the others
        of the loops inside the innermost loop it does not depend on (chain = 1 / their trips), and
        as many times in a row as the trips of the band of such loops around it (run). (0, 0) when
        no loop comes back to an output."""
        reductions = [i for i, loop in enumerate(loops) if loop.name not in self.out_vars]
        if not reductions:
            return 0.0, 0.0
        last = first = reductions[-1]
        while first > 0 and loops[first - 1].name not in self.out_vars:
            first -= 1
        turns = math.prod(self.trips(loop) for loop in loops[last + 1:])
        return 1 / turns, math.prod(self.trips(loop) for loop in loops[first:last + 1])

    def guards_at(self, depth: int) -> int:
        return sum(1 for _, at in self.placed if at == depth)

    # --- sites -----------------------------------------------------------------------------
    def counts(self) -> KernelCounts:
        s = self.schedule
        block = _Recorder(s, self.arith, self.kinds).block if s.register_block_at is not None else None
        inner = block.body_depth if block is not None else len(s.loops)
        if self.vector is not None and block is None:
            inner = s.position(self.vector.name)
        sites = [self._loop_site(d) for d in range(inner)]
        if block is not None:
            sites += self._block_sites(block)
        elif self.vector is not None:
            sites += self._vector_sites()
        else:
            sites += self._scalar_sites()
        if block is None or not block.starts_output:
            sites.append(self._output_init())
        if self.op.scales is not None:
            sites.append(self._scaled_output())
        sites += self._quant_sites()
        epilogue = s.fused_epilogue
        if epilogue is not None and (block is None or block.epilogue is None):   # a pass after the nest
            lanes = self.arith.acc.lanes
            vectors = -(-storage_elements(s, self.op.output) // lanes)
            work = Work(loads=1 + int(epilogue.residual), stores=1, vector_ops=epilogue.operations,
                        loop_iterations=1)
            sites.append(Site("epilogue", vectors, work, lanes))
        accumulators = len(block.accumulators) if block is not None else 0
        return KernelCounts(s, self.arith.acc.name, self.arith.name, self.lanes, tuple(sites),
                            self.instances(), accumulators, self._spilled(accumulators))

    def _loop_site(self, depth: int) -> Site:
        loop = self.schedule.loops[depth]
        work = Work(loop_iterations=1 if self.trips(loop) > 1 else 0, definitions=self.defs[depth],
                    divisions=self.divisions[depth], guard_checks=self.guards_at(depth))
        return Site(f"loop {loop.name}", self.passing(depth - 1) * self.trips(loop), work, 1)

    def _load(self, kind: str, masked: bool, count: int = 1) -> Work:
        """``count`` loads of one instruction kind (load, broadcast or gather), masked or not."""
        mask = count if masked and kind != "broadcast" else 0
        return {"load": Work(loads=count, masked=mask), "broadcast": Work(broadcasts=count),
                "gather": Work(gathers=count, masked=mask)}[kind]

    def _instruction(self, access: AccessKind) -> str:
        """The instruction ``arith.Arithmetic.operand`` loads an access with: a dot arithmetic reads
        a group (4 bytes, 2 bf16) per lane, so only a stride of one group is a plain load (a
        contiguous one is a gather); the others load what the access kind says (``arith.load``)."""
        group = self.arith.group
        if group > 1 and access.kind != "broadcast":
            return "load" if access.kind == "strided" and access.stride == group else "gather"
        return {"broadcast": "broadcast", "contiguous": "load"}.get(access.kind, "gather")

    def _operand(self, tensor: str, masked: bool, phased: bool = False) -> Work:
        """One vector (or element) of an input operand, as the arithmetic forms it: the load, the
        instructions that widen or dequantize it, and the weights' zero points and scales
        (``phased``: a tap dot's activations for one phase of a phase group, the window as loaded)."""
        kind = self._instruction(self.kinds[tensor]) if self.lanes > 1 else "load"
        activation = tensor == self.op.inputs[0]
        extra = OPERAND_OPS[self.arith.name] + (1 if self.arith.name == "dot" and self.plan.shift
                                                 and activation else 0)
        if activation and self.plan is not None and self.plan.tap_dot is not None:
            # a byte-masked window load, its mask from the column, a dword permute and a byte shuffle
            # (none for a phase: the window as loaded, taps.phases)
            spread = 0 if phased else TAP_SPREAD_OPS
            return self._load("load", True) + Work(vector_ops=extra + spread, masks=1)
        work = self._load(kind, masked) + Work(vector_ops=extra)
        if self.arith.name == "dequantize" and tensor == self.op.inputs[1]:
            work += self._load(kind, masked, 2)
        return work

    def _vector_sites(self) -> list[Site]:
        s, loop = self.schedule, self.vector
        depth = s.position(loop.name)
        out = self.op.output
        guards = self.guards_at(depth)
        plan = vector_loop_plan(s, self.arith.acc, self.kinds, guards)
        trips = self.trips(loop)
        work = Work(loop_iterations=1 if trips > 1 else 0, definitions=self.defs[depth],
                    divisions=self.divisions[depth], masks=1 if plan.masked else 0)
        if plan.lane_loop:      # the lane loop defines the dims again at each lane
            work += Work(lane_steps=self.lanes, guard_checks=self.lanes * (guards + 1),
                         definitions=self.lanes * (self.defs[depth] + len(plan.lane_wise)),
                         divisions=self.lanes * self.divisions[depth])
        for tensor in self.op.inputs:
            work += self._operand(tensor, plan.masked)
        update = Work(fma=1, masked=1 if plan.masked else 0)
        executions = self.passing(depth - 1) * trips
        name = f"vector loop {loop.name}"
        if plan.reduce:
            result = Work(hsums=1, loads=1, stores=1, output_accesses=2)
            return [Site(name, executions, work + update, self.lanes, 1.0, trips),
                    Site(f"sum of vector loop {loop.name}", self.passing(depth - 1), result, 1,
                         *self.chain(s.loops[:depth]), True)]
        if out in plan.lane_wise:       # lanes may name one element: added one at a time
            update += Work(stores=1, lane_steps=self.lanes)
            output = Work(loads=self.lanes, stores=self.lanes, output_accesses=2 * self.lanes)
        elif self.kinds[out].kind == "contiguous":
            output = Work(loads=1, stores=1, masked=2 if plan.masked else 0, output_accesses=2)
            if trips == 1 and depth > 0:        # one vector: the statement of the loop around it
                return self._statement_sites(name, executions, work + update, output, depth - 1)
        else:
            output = Work(gathers=1, scatters=1, masked=2, output_accesses=2)
        return [Site(name, executions, work + update + output, self.lanes, *self.chain(s.loops), True)]

    def _scalar_sites(self) -> list[Site]:
        n = len(self.schedule.loops)
        statement = Work(fma=1) + sum((self._operand(t, False) for t in self.op.inputs), Work())
        output = Work(loads=1, stores=1, output_accesses=2)
        return self._statement_sites("statement", self.passing(n - 1), statement, output, n - 1)

    def _statement_sites(self, name: str, executions: int, work: Work, output: Work,
                         depth: int) -> list[Site]:
        """The statement inside loop ``depth`` and its ``output`` load and store. The C compiler keeps
        the output in a register across that loop when the output does not depend on it (store
        motion): loaded before it and stored after it. Otherwise every update goes through memory."""
        s, loop = self.schedule, self.schedule.loops[depth]
        chain, run = self.chain(s.loops)
        if loop.name in self.out_vars or loop.extent == 1:
            return [Site(name, executions, work + output, self.lanes, chain, run, True)]
        return [Site(name, executions, work, self.lanes, chain, run),
                Site(f"output around loop {loop.name}", self.passing(depth - 1), output, self.lanes)]

    def _spilled(self, accumulators: int) -> int:
        return max(0, accumulators - (self.arith.acc.registers - OPERAND_REGISTERS))

    def _block_sites(self, block: RegisterBlock) -> list[Site]:
        s = self.schedule
        vector = self.vector is not None
        setup = store = Work()
        setup_masks: set[tuple[str, ...]] = set()
        for acc in block.accumulators:
            bits, mask, guards = block.setup[acc.name]
            setup += Work(guard_checks=len(guards.store), masks=1 if bits else 0)
            if guards.store_lanes:
                setup_masks.add(self._lane_mask(acc, guards.store_lanes))
            if block.starts_output and block.bias and block.chunk_loop is None:
                kind = {"broadcast": "broadcast", "contiguous": "load"}[block.bias_kind] if vector else "load"
                setup += self._load(kind, mask is not None)
            if block.loads_output:
                setup += self._output_access(mask is not None, load=True)
            store += Work(guard_checks=1 if guards.store else 0) + self._block_store(block, mask is not None)
        setup += self._lane_masks(setup_masks)
        for group in block.phase_groups:      # the phase groups interleaved back (taps.interleave)
            store += Work(vector_ops=ZIP_OPS[self.arith.ints.name] * taps.zips(len(group)))
        # the C compiler evaluates a condition, or builds a lane mask, once however many updates use it
        body, conditions, masks = Work(), set(), set()
        inside = [*block.reduction, *([block.chunk_loop] if block.chunk_loop else [])]
        for tensor, _, lanes, protect, phased in block.loads:
            # and the select of a guarded one, unless its guards name no reduction loop of the block: then
            # they hold or fail for the whole block, and the compiler takes them out of the loop
            address = Work(definitions=1, vector_ops=1 if _varies(protect, inside) else 0)
            body += self._operand(tensor, lanes is not None, phased) + address
            conditions.update(protect)
            if vector and self.kinds[tensor].kind == "gather":     # its index array, lane by lane
                body += Work(lane_steps=self.lanes, definitions=self.lanes)
        chunk = s.loop(block.chunk_loop) if block.chunk_loop else None
        chunk_tail = vector and chunk is not None and chunk.extent % self.lanes != 0
        bodies = self.passing(block.body_depth - 1)
        for acc in block.accumulators:
            bits, _, guards = block.setup[acc.name]
            extra = bool(guards.update_lanes) or chunk_tail
            updates = self._updates(block, acc) / bodies       # the share of bodies that update acc
            # its existence test (acc_ok) does not change across the reduction: the compiler hoists it
            body += Work(fma=updates, masked=updates if bits or extra else 0, masks=1 if extra else 0)
            conditions.update(guards.update)
            if guards.update_lanes:
                masks.add(self._lane_mask(acc, guards.update_lanes))
        spilled = self._spilled(len(block.accumulators))
        body += Work(spills=2 * spilled, guard_checks=len(conditions)) + self._lane_masks(masks)
        trips = self.trips(chunk) if chunk is not None else 1
        if chunk is not None:
            body += Work(loop_iterations=1)
        run = trips * math.prod(self.trips(s.loop(name)) for name in block.reduction)
        blocks = self.passing(block.start - 1)
        return [Site("register block setup", blocks, setup, self.lanes),
                Site("register block body", bodies * trips, body, self.lanes, 1.0, run, spilled > 0),
                Site("register block store", blocks, store, self.lanes)]

    def _updates(self, block: RegisterBlock, acc: Accumulator) -> int:
        """Bodies of ``block`` in which ``acc`` is updated: its guards that do not vary across the
        lanes hold (those that do only mask lanes off)."""
        conditions = self._conditions(block.body_depth - 1)
        for _, guard, depth in block.guards:
            bound = acc.guard(guard)
            if depth >= block.body_depth and not (self.vector and self.vector.name in bound.expr.variables()):
                conditions.append(bound.to_isl())
        return self._card(conditions, block.body_depth - 1)

    def _lane_mask(self, acc: Accumulator, bounds: list[Bound]) -> tuple[str, ...]:
        """What identifies the lane mask of ``bounds`` at ``acc``: its first lane and its conditions."""
        first = acc.bindings.get(self.vector.name, Var(self.vector.name))
        return (first.to_c(),) + tuple(bound.to_c() for bound in bounds)

    def _lane_masks(self, masks: set[tuple[str, ...]]) -> Work:
        """Distinct lane masks, each a scalar loop over the lanes checking its bounds."""
        return Work(lane_steps=self.lanes * len(masks),
                    guard_checks=self.lanes * sum(len(mask) - 1 for mask in masks))

    def _output_access(self, masked: bool, load: bool) -> Work:
        """One accumulator's output vector (or element) loaded or stored."""
        strided = self.vector is not None and self.kinds[self.op.output].kind == "strided"
        if strided:
            work = Work(gathers=1) if load else Work(scatters=1)
            return work + Work(masked=1, output_accesses=1)
        work = Work(loads=1) if load else Work(stores=1)
        return work + Work(masked=1 if masked else 0, output_accesses=1)

    def _block_store(self, block: RegisterBlock, masked: bool) -> Work:
        if self.plan is not None and self.plan.fused_epilogue:
            return Work(stores=2, loads=3, vector_ops=EPILOGUE_OPS, output_accesses=1)
        if block.epilogue is not None:          # its residual loaded, added and clipped before the store
            fused = Work(loads=int(block.epilogue.residual), vector_ops=block.epilogue.operations)
            return fused + self._block_store_of_sums(block, masked)
        return self._block_store_of_sums(block, masked)

    def _block_store_of_sums(self, block: RegisterBlock, masked: bool) -> Work:
        if block.chunk_loop:
            total = Work(hsums=1 if self.vector is not None else 0, stores=1, output_accesses=1)
            if block.initialises_output:
                return total + Work(loads=1 if block.bias else 0)
            return total + Work(loads=1, output_accesses=1)
        return self._output_access(masked, load=False)

    def _output_init(self) -> Site:
        """The output set to the bias or zero, a loop the C compiler vectorizes."""
        info = self.op.tensor(self.op.output)
        lanes = self.arith.acc.lanes
        vectors = -(-math.prod(info.shape) // lanes)
        bias = self.op.bias and self.arith.bias_in_nest
        return Site("output init", vectors, Work(stores=1, loads=1 if bias else 0, loop_iterations=1), lanes)

    def _scaled_output(self) -> Site:
        """The pass forming ``alpha * sum + beta * bias`` after the nest (vectorized by the C compiler)."""
        lanes = self.arith.acc.lanes
        vectors = -(-math.prod(self.op.tensor(self.op.output).shape) // lanes)
        bias = self.op.bias and bool(self.op.scales[1])
        work = Work(fma=1 if bias else 0, vector_ops=0 if bias else 1, loads=2 if bias else 1, stores=1,
                    loop_iterations=1)
        return Site("scaled output", vectors, work, lanes)

    def _quant_sites(self) -> list[Site]:
        """The integer plan's passes around the nest: kernel-computed compensation, activation sums,
        and the epilogue (unless a register block applies it when storing)."""
        qp = self.plan
        if qp is None or not qp.integer:
            return []
        op, lanes = self.op, self.arith.acc.lanes
        reduction = math.prod(op.extent(d) for d in op.reduction_dims)
        add = Work(loads=1, definitions=1, loop_iterations=1)        # a scalar sum over the reduction
        sites = []
        if qp.compensation == "kernel":
            sites.append(Site("weight compensation", compensation_entries(op, qp) * reduction, add, 1))
        if qp.activation_sums:
            positions = math.prod(self.op.tensor(self.op.output).shape) // op.channels
            sites.append(Site("activation sums", positions * op.groups * reduction, add, 1))
        if not qp.fused_epilogue:
            vectors = -(-math.prod(op.tensor(op.output).shape) // lanes)
            sites.append(Site("epilogue", vectors, Work(loads=4, stores=1, vector_ops=EPILOGUE_OPS,
                                                        loop_iterations=1), lanes))
        return sites


def _varies(guards: tuple[str, ...], loops: list[str]) -> bool:
    """Whether any of ``guards`` (C conditions) names one of ``loops``."""
    return any(re.search(rf"\b{re.escape(loop)}\b", guard) for guard in guards for loop in loops)


