"""Emit the C source of a schedule for one ISA.

The nest is written loop by loop in schedule order. Each op dim is defined as a
``const int`` at the shallowest loop where all the loops it depends on are open,
and each guard (padding tap, partial block) skips the iteration there. The
vectorized innermost loop becomes SIMD code whose loads/stores follow the access
kinds proven by ``vector.classify``; lanes that fail a guard are masked off.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..cnames import letter_variable
from ..epilogue import HELPERS, RESIDUAL
from ..expr import Bound, Expr, Var
from ..schedule import Schedule
from . import claim, cprint, quantized, taps, ternary, wide
from .arith import Arithmetic, arithmetic, load
from .block import RegisterBlock
from .instr import Isa
from .nest import lower
from .params import KernelParam, check_lane_indices, index_ctype, signature, storage_elements
from .vector import FROM_LANE_ZERO, AccessKind, classify, exact_offset

KERNEL_NAME = "lo_kernel"
NEST_NAME = "lo_nest"
THREADS_NAME = "lo_set_threads"
THREADS_SOURCE = f"#include <omp.h>\nvoid {THREADS_NAME}(int n) {{ omp_set_num_threads(n); }}\n"
THREADS_CDEF = f"void {THREADS_NAME}(int n);"


def with_threads(source: str, cdef: str, openmp: bool) -> tuple[str, str]:
    """Source and cdef plus the OpenMP thread-count setter when the kernel is parallel."""
    return (source + THREADS_SOURCE, cdef + "\n" + THREADS_CDEF) if openmp else (source, cdef)


def thread_range(int_type: str, extent: int) -> list[str]:
    """C statements, inside an ``omp parallel`` region, of this thread's contiguous range
    ``[lo_begin, lo_end)`` of ``extent`` iterations (as ``schedule(static)``; empty for late threads)."""
    return ["const int lo_threads = omp_get_num_threads(), lo_thread = omp_get_thread_num();",
            f"const {int_type} lo_chunk = ({extent} + lo_threads - 1) / lo_threads;",
            f"const {int_type} lo_begin = lo_thread * lo_chunk;",
            f"const {int_type} lo_end = lo_begin + lo_chunk < {extent} ? lo_begin + lo_chunk : {extent};"]


@dataclass(frozen=True)
class Generated:
    """The C source of a kernel, its cffi declaration, argument tensors and access kinds."""

    source: str
    cdef: str
    arguments: tuple[str, ...]                   # tensor names: inputs, bias, residual (if any), output
    params: tuple[KernelParam, ...]              # every C parameter, tensors first
    isa: Isa
    access_kinds: dict[str, AccessKind]
    openmp: bool
    plan: quantized.QuantPlan | None = None     # quantized ops: what the kernel computes
    read_ahead: dict[str, int] = field(default_factory=dict)   # bytes read past an array's end, by param
    compile_flags: tuple[str, ...] = ()          # of the instructions the kernel uses
    output_over_residual: bool = False           # a call may give the output the residual's memory


def kernel_arguments(schedule: Schedule) -> tuple[str, ...]:
    """Tensor arguments of the kernel function, in order: inputs, bias (if any), the residual of
    ``add_residual`` (``epilogue.RESIDUAL``, if any), output."""
    return schedule.op.call_tensors + ((RESIDUAL,) if schedule.residual else ()) + (schedule.op.output,)


def vector_access_kinds(schedule: Schedule, isa: Isa) -> dict[str, AccessKind]:
    """Access kind per tensor along the vectorized loop (empty when nothing is vectorized)."""
    if schedule.vector_loop is None or not isa.vectorizes:
        return {}
    return {t: classify(schedule, t, isa.lanes) for t in schedule.op.tensors}


def placed_guards(schedule: Schedule) -> tuple[tuple[Bound, int], ...]:
    """The guards as the plain nest checks them, each with its loop depth, in the order of
    ``schedule.guards`` (``nest.lower``'s placement)."""
    return tuple((g.bound, g.depth) for g in lower(schedule).guards)


@dataclass(frozen=True)
class OutputElements:
    """The output over its logical index space, for passes over every output element (setting it to
    the bias, scaling it): one ``lo_<letter>`` variable per axis with its size, the output element
    they name in its storage layout, and the bias element added to it ("" without a bias)."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    element: str
    bias: str


def output_elements(schedule: Schedule) -> OutputElements:
    """The output element and bias element of each logical output index (``OutputElements``)."""
    op = schedule.op
    info = op.tensor(op.output)
    names = tuple(letter_variable(letter) for letter in info.letters)
    offset = schedule.layout_of(op.output).offset(tuple(Var(n) for n in names), info.shape).to_c()
    dims = {e.name: Var(name) for e, name in zip(op.index(op.output), names, strict=True)}
    bias = f"{op.bias_tensor}[{op.bias_offset().substitute(dims).to_c()}]" if op.bias else ""
    return OutputElements(names, info.shape, f"{op.output}[{offset}]", bias)


@dataclass(frozen=True)
class VectorLoopPlan:
    """How the plain nest runs its vectorized loop (a register block has its own plan)."""

    reduce: bool                 # the output is outside the loop: one accumulator, summed after it
    lane_wise: tuple[str, ...]   # tensors accessed lane by lane through index arrays (gathers, and a
                                 # broadcast output that is not a reduction), in tensor order
    masked: bool                 # lanes can be off: a guard on the loop or a partial last vector
    lane_loop: bool              # a scalar loop over the lanes builds the mask bits and index arrays


def vector_loop_plan(schedule: Schedule, isa: Isa, kinds: dict[str, AccessKind],
                     guards: int) -> VectorLoopPlan:
    """The plan of the vector loop of ``schedule`` with ``guards`` guards checked at its depth."""
    loop, out = schedule.vector_loop, schedule.op.output
    # Accumulate across lanes only when the output element is syntactically outside the
    # vector loop; an output that isl proves constant but is written in terms of the
    # vector variable goes through the per-lane path.
    reduce = kinds[out].kind == "broadcast" and loop.name not in schedule.offset(out).variables()
    lane_wise = tuple(t for t, k in kinds.items()
                      if k.kind == "gather" or (t == out and k.kind == "broadcast" and not reduce))
    return VectorLoopPlan(reduce, lane_wise, bool(guards) or loop.extent % isa.lanes != 0,
                          bool(guards) or bool(lane_wise))


def generate(schedule: Schedule, isa: Isa, bf16_dot: bool = True) -> Generated:
    """The complete C translation unit of ``schedule`` for ``isa`` (``bf16_dot``: a bfloat16 kernel
    may use ``vdpbf16ps``; the C of a schedule depends only on these arguments, not on this CPU)."""
    plan = (quantized.plan(schedule, isa.lanes, quantized.has_signed_dot(isa.name))
            if schedule.op.quant is not None else None)
    if plan is not None:
        schedule.refuse_epilogue("quantized SIMD", "their own epilogue (compensation, scales, "
                                 "requantization) ends in integers, where a float one is not the reference's")
    arith = arithmetic(schedule, isa.name, plan, bf16_dot)
    isa = arith.acc
    if plan is not None and plan.wide_weights:
        wide.check(schedule, arith.ints, plan.dot_loop, plan.tap_dot is not None)
    args = kernel_arguments(schedule)
    kinds = vector_access_kinds(schedule, isa)
    out = schedule.op.output
    params = tuple(KernelParam(t, _tensor_type(schedule, arith, t), const=t != out)
                   for t in args) + (quantized.parameters(plan) if plan else ())
    emitter = _Emitter(schedule, isa, kinds, arith, params)
    if emitter.output_over_residual:
        params = emitter.params = tuple(replace(p, aliased=p.name in (RESIDUAL, out)) for p in params)
    nest = emitter.nest_function()
    body = emitter.function_body()
    tables = quantized.static_tables(schedule, plan) if plan else ""
    if plan and plan.packed_weights:
        tables += ternary.helpers(arith.ints)
    if plan and plan.tap_dot:
        tables += taps.helpers(arith.ints)
    if plan and plan.wide_weights:
        tables += wide.helpers(arith.ints)
    if plan and plan.requantized_clip is not None and "map_bytes" in arith.ints.ops:
        tables += arith.ints.helpers["map"]
    if emitter.block is not None and emitter.block.reads_memory:
        tables += isa.helpers["fma_memory"]
    if emitter.block is not None and emitter.block.broadcasts_here:
        tables += isa.helpers["broadcast_here"]
    if schedule.fused_epilogue is not None:
        tables += HELPERS
    openmp = schedule.parallel_loop is not None
    source = "\n".join([_header(schedule, arith, kinds), arith.prelude, "#include <stddef.h>",
                        "#include <omp.h>" if openmp else "", tables, nest, "",
                        f"{signature(KERNEL_NAME, params)}\n{{", body, "}", ""])
    source, cdef = with_threads(source, signature(KERNEL_NAME, params, restrict=False) + ";", openmp)
    ahead = quantized.read_ahead(schedule, plan, isa.lanes) if plan else _bf16_read_ahead(arith)
    return Generated(source, cdef, args, params, isa, kinds, openmp, plan, ahead, arith.compile_flags,
                     emitter.output_over_residual)


def _tensor_type(schedule: Schedule, arith: Arithmetic, tensor: str) -> str:
    """The C element type of a kernel tensor argument."""
    if arith.plan is not None:
        return quantized.tensor_type(schedule, arith.plan, tensor)
    return arith.element_type if tensor in schedule.op.inputs else "float"     # the bias, residual, output


def _bf16_read_ahead(arith: Arithmetic) -> dict[str, int]:
    """Bytes a vectorized bf16 kernel may read past its inputs: a gather (and AVX2's masked load)
    reads 4 bytes at a 2-byte element."""
    if not arith.is_bf16 or arith.acc.lanes == 1:
        return {}
    return dict.fromkeys(arith.schedule.op.inputs, 2)


def _header(schedule: Schedule, arith: Arithmetic, kinds: dict[str, AccessKind]) -> str:
    isa = arith.acc
    lines = [f"/* loopopt kernel for {schedule.op!r}",
             f" * isa: {isa.name} ({isa.lanes} lane(s) of {arith.scalar_type}32), arithmetic: {arith.name}"]
    if arith.dot_loop:
        kind = ("u8 x s8 -> s32" if arith.plan is not None
                else f"bf16 pairs -> fp32, {arith.bf16.mnemonics.get('dot', 'pair dot')}")
        lines.append(f" * dot loop {arith.dot_loop}: its {arith.group} iterations are consumed by "
                     f"each dot instruction ({kind})")
    if arith.plan is not None and arith.plan.tap_dot:
        window = arith.plan.tap_dot.window
        lines.append(f" * tap dot: 4 taps of {window.tap_dim} per lane, the activations spread from "
                     f"windows of input columns along {window.out_dim} (codegen/taps.py)")
    if arith.plan is not None and arith.plan.packed_weights:
        lines.append(" * weights: ternary, i2_s (2 bits each), unpacked in registers (codegen/ternary.py)")
    if arith.plan is not None and arith.plan.wide_weights:
        lines.append(" * weights: s16, widened to int16 pairs when packed (codegen/wide.py)")
    lines += [f" * step {i + 1}: {step}" for i, step in enumerate(schedule.steps)] or [" * schedule: naive"]
    lines.append(" * layouts: " + ", ".join(f"{t} {tag}" for t, tag in schedule.layouts))
    lines.append(" * loops: " + ", ".join(f"{loop.name}[{loop.extent}]" for loop in schedule.loops))
    if kinds:
        lines.append(f" * vector loop {schedule.vector_loop.name}: " +
                     ", ".join(f"{t} {k}" for t, k in kinds.items()))
    return "\n".join(lines) + "\n */"


class _Emitter:
    """Writes the kernel body and the ranged nest function of one schedule (a ``NestEmitter``)."""

    def __init__(self, schedule: Schedule, isa: Isa, kinds: dict[str, AccessKind], arith: Arithmetic,
                 params: tuple[KernelParam, ...]):
        self.schedule, self.isa, self.kinds, self.arith, self.params = schedule, isa, kinds, arith, params
        self.op = schedule.op
        self.position = {name: i for i, name in enumerate(schedule.loop_names)}
        self.vector = schedule.vector_loop if kinds else None
        self.nest = lower(schedule)
        self.int_type = index_ctype(schedule)      # of loop variables, dims and offsets
        self.lines: list[str] = []
        self.block = RegisterBlock(self) if schedule.register_block_at is not None else None
        # a register block holding final sums applies the epilogue to its accumulators when storing
        # them; every other nest leaves sums in the output, and a pass after it applies the epilogue
        self.epilogue = schedule.fused_epilogue
        self.epilogue_pass = self.epilogue is not None and (self.block is None or self.block.epilogue is None)
        # each output stored once, from its final sum plus the residual element at the same offset read
        # just before: the output may be written over the residual (``Kernel.with_constants``)
        self.output_over_residual = schedule.residual and not self.epilogue_pass
        # A parallel loop with only single-iteration loops outside it runs as contiguous ranges that
        # the threads claim, each through one call of a separate nest function. Unlike a loop
        # outlined by ``omp parallel for`` (or inlined into one), that function is optimized like
        # a serial kernel (restrict arguments, register allocation of its own).
        par = schedule.parallel_loop
        self.ranged = par is not None and all(loop.extent == 1
                                              for loop in schedule.loops[:schedule.position(par.name)])

    # --- placement ---------------------------------------------------------------------
    def loop_depth(self, expr: Expr) -> int:
        """Index of the innermost loop among the loop variables of ``expr`` (-1 if none)."""
        return max((self.position[v] for v in expr.variables() if v in self.position), default=-1)

    def _guards_at(self, depth: int) -> list[Bound]:
        return self.nest.guards_at(depth)

    def _defs_at(self, depth: int) -> list[str]:
        return [f"const {self.int_type} {d.dim} = {d.value.to_c()};" for d in self.nest.definitions_at(depth)]

    def offset(self, tensor: str) -> str:
        return self._offset(tensor).to_c()

    def _offset(self, tensor: str) -> Expr:
        """``tensor``'s storage offset in the op's dims."""
        return self.schedule.layout_of(tensor).offset(self.op.index(tensor), self.op.tensor(tensor).shape)

    def ref(self, tensor: str) -> str:
        return wide.reference(self.schedule, tensor, self.offset(tensor))

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(cprint.line(depth + 1, text))

    # --- the function ------------------------------------------------------------------
    def function_body(self) -> str:
        self._emit_constants()
        if self.block is None or not self.block.starts_output:
            self._emit_output_init()
        plan = self.arith.plan
        for line in quantized.prologue(self.schedule, plan) if plan else []:
            self.emit(0, line)
        if self.ranged:
            self._emit_ranged_call()
        else:
            self._emit_nest()
        for line in quantized.epilogue(self.schedule, plan) if plan else []:
            self.emit(0, line)
        if self.op.scales is not None:
            self._emit_scaled_output()
        if self.epilogue_pass:
            self._emit_epilogue_pass()
        return "\n".join(self.lines)

    def _emit_nest(self) -> None:
        self.emit(0, "/* the reduction nest */")
        self.emit(0, "{")
        for line in self._defs_at(-1):
            self.emit(1, line)
        self.emit_loop(0, 1)
        self.emit(0, "}")

    def _emit_ranged_call(self) -> None:
        """Run the parallel loop as chunks that the threads claim as they go (``claim``), each through one
        call of the nest function."""
        loop = self.schedule.parallel_loop
        self.emit(0, f"/* the reduction nest: {loop.name} in chunks the threads claim as they go */")
        self.emit(0, claim.counter(self.int_type))
        self.emit(0, "#pragma omp parallel")
        self.emit(0, "{")
        call = f"{NEST_NAME}({', '.join(p.name for p in self.params)}, lo_begin, lo_end)"
        for line in claim.claimed(self.int_type, str(loop.extent), call):
            self.emit(1, line)
        self.emit(0, "}")

    def nest_function(self) -> str:
        """The C function running the nest over a range of the parallel loop ("" unless ranged)."""
        if not self.ranged:
            return ""
        outer, self.lines = self.lines, []
        self._emit_constants()
        self._emit_nest()
        body, self.lines = "\n".join(self.lines), outer
        # noinline: inlined into the omp-outlined region it would be optimized like one again
        declarations = ", ".join(p.declaration() for p in self.params)
        return (f"static __attribute__((noinline)) void {NEST_NAME}({declarations}, "
                f"{self.int_type} lo_begin, {self.int_type} lo_end)"
                f"\n{{\n{body}\n}}")

    def _emit_constants(self) -> None:
        for line in quantized.constants(self.schedule, self.arith.plan) if self.arith.plan else []:
            self.emit(0, line)
        for tensor, kind in self.kinds.items():
            check_lane_indices(self.schedule, tensor, kind.kind, kind.stride, self.isa.lanes)
            if kind.kind == "strided":
                self.emit(0, f"const {self.isa.index_type} lo_stride_{tensor} = "
                             f"{self.isa.stride_index(s=str(kind.stride))};")

    def _output_pass(self) -> tuple[list[str], str, str]:
        """A loop nest over the output's logical index space (``lo_<letter>`` variables, the parallel
        pragma of a parallel schedule): its lines, the output element and the bias element it adds."""
        elements = output_elements(self.schedule)
        parallel = self.schedule.parallel_loop is not None
        lines = ["#pragma omp parallel for schedule(static)"] if parallel else []
        lines += cprint.staircase([cprint.for_loop(self.int_type, name, size)
                                   for name, size in zip(elements.names, elements.sizes, strict=True)])
        return lines, elements.element, elements.bias

    def _emit_output_init(self) -> None:
        """Set the output to the bias (or zero) over its logical index space."""
        lines, element, bias = self._output_pass()
        zero = self.arith.zero(vectorized=False)
        value = bias if self.op.bias and self.arith.bias_in_nest else zero
        self.emit(0, f"/* {self.op.output} = {'bias' if value != zero else '0'} */")
        for line in lines:
            self.emit(0, line)
        self.emit(len(self.op.tensor(self.op.output).shape), f"{element} = {value};")

    def _emit_scaled_output(self) -> None:
        """The output ``alpha * sum + beta * bias`` of an op with ``scales``, over the sums the nest left."""
        alpha, beta = self.op.scales
        lines, element, bias = self._output_pass()
        term = f" + {float(beta)!r}f * {bias}" if bias and beta else ""
        self.emit(0, f"/* {self.op.output} = {alpha!r} * sum{f' + {beta!r} * bias' if term else ''} */")
        for line in lines:
            self.emit(0, line)
        depth = len(self.op.tensor(self.op.output).shape)
        self.emit(depth, f"{element} = {float(alpha)!r}f * {element}{term};")

    def _emit_epilogue_pass(self) -> None:
        """The epilogue over every output element after the nest (the residual is in the output's layout,
        so the pass runs over their storage elements in step)."""
        out = self.op.output
        self.emit(0, f"/* {out}: {self.epilogue}, over its storage after the nest */")
        if self.schedule.parallel_loop is not None:
            self.emit(0, "#pragma omp parallel for schedule(static)")
        self.emit(0, cprint.for_loop(self.int_type, "lo_i", storage_elements(self.schedule, out)))
        self.emit(1, f"{out}[lo_i] = {self.epilogue.c(f'{out}[lo_i]', f'{RESIDUAL}[lo_i]')};")

    def emit_loop(self, depth: int, indent: int, inside_block: bool = False) -> None:
        """Loop ``depth`` and everything inside it (a register block takes over at its loop)."""
        block = self.block
        if block is not None and depth == block.start and not inside_block:
            block.emit(indent)
            return
        if block is not None and depth == block.body_depth:
            block.emit_body(indent)
            return
        if depth == len(self.schedule.loops):
            a, b = self.op.inputs
            product = self.arith.product(self.ref(a), self.ref(b))
            self.emit(indent, f"{self.ref(self.op.output)} += {product};")
            return
        loop = self.schedule.loops[depth]
        if loop.name == self.arith.dot_loop:
            self._emit_dot_loop(depth, indent, inside_block)
            return
        if self.vector is not None and loop.name == self.vector.name:
            self._emit_vector_loop(depth, indent)
            return
        begin, end = ("lo_begin", "lo_end") if loop.parallel and self.ranged else ("0", str(loop.extent))
        if loop.parallel and not self.ranged:
            self.emit(indent, "#pragma omp parallel for schedule(static)")
        if loop.unroll and not loop.parallel:  # both pragmas must directly precede the loop
            self.emit(indent, f"#pragma GCC unroll {min(loop.unroll, loop.extent)}")
        self.emit(indent, cprint.for_loop(self.int_type, loop.name, end, begin) + " {")
        for line in self._defs_at(depth):
            self.emit(indent + 1, line)
        for guard in self._guards_at(depth):
            self.emit(indent + 1, f"if (!({guard.to_c()})) continue;")
        self.emit_loop(depth + 1, indent + 1, inside_block)
        self.emit(indent, "}")

    def _emit_dot_loop(self, depth: int, indent: int, inside_block: bool) -> None:
        """The dot loop runs once, at its first iteration: each dot instruction consumes all of it."""
        loop = self.schedule.loops[depth]
        guards = self._guards_at(depth)
        self.emit(indent, f"{{ const {self.int_type} {loop.name} = 0;   "
                          f"/* {loop.extent} iterations per dot instruction */")
        for line in self._defs_at(depth):
            self.emit(indent + 1, line)
        for guard in guards:
            self.emit(indent + 1, f"if ({guard.to_c()}) {{")
        self.emit_loop(depth + 1, indent + 1, inside_block)
        for _ in guards:
            self.emit(indent + 1, "}")
        self.emit(indent, "}")

    # --- the SIMD loop -------------------------------------------------------------------
    def _emit_vector_loop(self, depth: int, indent: int) -> None:
        isa, loop, out = self.isa, self.vector, self.op.output
        lanes_guards = self._guards_at(depth)
        v = loop.name
        plan = vector_loop_plan(self.schedule, isa, self.kinds, len(lanes_guards))
        reduce = plan.reduce
        self.emit(indent, f"/* vector loop {v}: {isa.lanes} lanes; " +
                  ", ".join(f"{t} {k}" for t, k in self.kinds.items()) + " */")
        self.emit(indent, "{")
        inner = indent + 1
        if reduce:
            self.emit(inner, f"{isa.vector_type} lo_acc = {isa.zero()};")
        if loop.unroll:
            self.emit(inner, f"#pragma GCC unroll {min(loop.unroll, -(-loop.extent // isa.lanes))}")
        self.emit(inner, cprint.for_loop(self.int_type, v, loop.extent, step=isa.lanes) + " {")
        body = inner + 1
        for line in self._defs_at(depth):
            self.emit(body, line)
        mask = self._emit_mask(body, lanes_guards, plan)
        a, b = self.op.inputs
        self.emit(body, f"const {self.arith.operand_type(True, a)} lo_a = {self._load(a, mask)};")
        self.emit(body, f"const {self.arith.operand_type(True, b)} lo_b = {self._load(b, mask)};")
        self._emit_update(body, out, mask, reduce, out in plan.lane_wise)
        self.emit(inner, "}")
        if reduce:
            self.emit(inner, f"{self.ref(out)} += {isa.hsum(v='lo_acc')};")
        self.emit(indent, "}")

    def _emit_mask(self, depth: int, guards: list[Bound], plan: VectorLoopPlan) -> str | None:
        """Declare the lane mask (None when every lane is always valid) and gather indices."""
        isa, v, extent = self.isa, self.vector.name, self.vector.extent
        gathered = plan.lane_wise
        if not plan.lane_loop:
            if not plan.masked:
                return None
            lanes = f"({extent} - {v} < {isa.lanes} ? {extent} - {v} : {isa.lanes})"
            self.emit(depth, f"const {isa.mask_type} lo_mask = {isa.mask_count(n=lanes)};")
            return "lo_mask"
        self.emit(depth, f"unsigned lo_bits = 0u; const {self.int_type} lo_v0 = {v};")
        for tensor in gathered:
            check_lane_indices(self.schedule, tensor, "gather", 0, isa.lanes)   # also a lane-wise output
            self.emit(depth, f"int lo_idx_{tensor}[{isa.lanes}];")
        self.emit(depth, cprint.for_loop("int", "lo_j", isa.lanes) + " {")
        self.emit(depth + 1, f"const {self.int_type} {v} = lo_v0 + lo_j;")
        for line in self._defs_at(self.position[v]):
            self.emit(depth + 1, line)
        for tensor in gathered:
            self.emit(depth + 1, f"lo_idx_{tensor}[lo_j] = {self.offset(tensor)};")
        conditions = [f"{v} < {extent}"] + [f"({g.to_c()})" for g in guards]
        self.emit(depth + 1, f"if ({' && '.join(conditions)}) lo_bits |= 1u << lo_j;")
        self.emit(depth, "}")
        if not plan.masked:
            return None
        self.emit(depth, f"const {isa.mask_type} lo_mask = {isa.mask_bits(s='lo_bits')};")
        return "lo_mask"

    def _load(self, tensor: str, mask: str | None) -> str:
        """A vector of ``tensor``: operands through the arithmetic, the output as accumulators."""
        isa, kind, offset = self.isa, self.kinds[tensor], self.offset(tensor)
        first = exact_offset(self.schedule, self._offset(tensor)) if kind.kind in FROM_LANE_ZERO else offset
        ref = ternary.reference(self.schedule, tensor, first)   # s16 weights: the operand points at it
        index = (f"lo_stride_{tensor}" if kind.kind == "strided"
                 else isa.index_load(p=f"lo_idx_{tensor}"))
        base = f"&{ref}" if kind.kind == "strided" else tensor
        if tensor in self.op.inputs:
            return self.arith.operand(tensor, kind, ref, base, index, mask, offset=offset)
        return load(isa, kind.kind, ref, base, index, mask)

    def _emit_update(self, depth: int, out: str, mask: str | None, reduce: bool, lane_wise: bool) -> None:
        isa, kind = self.isa, self.kinds[out]
        vt = isa.vector_type
        arith = self.arith
        if reduce:
            self.emit(depth, f"lo_acc = {arith.update('lo_a', 'lo_b', 'lo_acc', mask)};")
            return
        if lane_wise:
            # Lanes may name the same element: add them one at a time, in lane order.
            self.emit(depth, f"{arith.scalar_type} lo_prod[{isa.lanes}];")
            self.emit(depth, isa.store(p="lo_prod", v=arith.update("lo_a", "lo_b", isa.zero(), None)) + ";")
            valid = "(lo_bits >> lo_j) & 1u" if mask else "1"
            self.emit(depth, cprint.for_loop("int", "lo_j", isa.lanes) +
                             f" if ({valid}) {out}[lo_idx_{out}[lo_j]] += lo_prod[lo_j];")
            return
        self.emit(depth, f"{vt} lo_o = {self._load(out, mask)};")
        self.emit(depth, f"lo_o = {arith.update('lo_a', 'lo_b', 'lo_o', None)};")
        pointer = f"&{self.ref(out)}"
        if kind.kind == "contiguous":
            store = isa.store_mask(p=pointer, m=mask, v="lo_o") if mask else isa.store(p=pointer, v="lo_o")
        else:
            store = isa.scatter_mask(p=pointer, m=mask or isa.mask_count(n=str(isa.lanes)),
                                     idx=f"lo_stride_{out}", v="lo_o")
        self.emit(depth, f"{store};")
