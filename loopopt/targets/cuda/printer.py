"""CUDA C of a bound schedule (SIMT, float32), and the same kernel as host C for its emulation.

The x86 emitter (``codegen/emit.py``) is built around its SIMD vector loop, ISA tables and register
block of vectors, so its loop printer is not reused; this printer reads the same schedule
information (loops, dims, guards, layouts through ``schedule.layout_of``, the op's accesses) and the
target-neutral placement the x86 emitter uses: where each dim is defined (``dim_depths``), where
each guard is checked (``placed_guards``), the index type (``index_ctype``) and the output's
element passes (``output_elements``).

The nest is printed in schedule order. A loop bound to a GPU axis is no loop on the device: its
variable is ``blockIdx``/``threadIdx`` of that axis (the grid and the block are exactly the bound
extents, so it needs no bounds check); every other loop runs in each thread. Guards (partial
blocks, the op's padding, stride, dilation and group conditions) wrap what they skip.

Sums stay in registers: from the accumulator loop inward (``register_block(at)``'s loop, else the
outermost loop of the innermost run of loops the output does not move along) the thread adds its
products into ``lo_acc``, one float per element of the register block (whose loops are unrolled),
and stores them after it. Where no loop outside the accumulators runs over a reduction dim and no
op guard outside them skips an output, each output is stored once, bias included; otherwise a
first kernel sets the output to the bias (or zero) and the nest adds its sums to it.

``Syntax`` says how the same nest runs: on the GPU (``CUDA``: kernels, an ``extern "C"`` launcher)
or on the CPU (``HOST``: bound loops as ordinary loops, compiled as C: ``emulate.py``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ...codegen import cprint
from ...codegen.emit import kernel_arguments, output_elements, placed_guards
from ...codegen.nest import dim_depths
from ...codegen.params import KernelParam, index_ctype, signature
from ...expr import Bound, Var
from ...schedule import Schedule, ScheduleError
from . import output_types

KERNEL_NAME = "lo_kernel"            # the launcher (CUDA) or the whole kernel (host), as on x86
ERROR_NAME = "lo_error_string"       # CUDA: the message of a launcher's error code
INIT_NAME, NEST_NAME, SCALE_NAME = "lo_init", "lo_nest", "lo_scale"
PASS_THREADS = 256                   # threads per block of the element passes (init, scale)
PASS_BLOCKS = 4096                   # blocks of an element pass at most (each thread strides the rest)
AXES = ("x", "y", "z")


@dataclass(frozen=True)
class Syntax:
    """How the printed kernel runs: its functions' qualifiers and how a bound loop is opened."""

    name: str
    kernel: str          # qualifier of the nest and pass functions
    restrict: str
    unroll: str          # the unroll pragma, followed by the count
    device: bool         # bound loops are blockIdx/threadIdx (True) or CPU loops (False)


CUDA = Syntax("cuda", "__global__ void", "__restrict__", "#pragma unroll", True)
HOST = Syntax("host emulation", "static void", "restrict", "#pragma GCC unroll", False)


@dataclass(frozen=True)
class CudaSource:
    """A printed kernel: source, its C declaration (cffi), tensor arguments and launch shape."""

    source: str
    cdef: str
    arguments: tuple[str, ...]        # tensors: inputs, bias (if any), output
    params: tuple[KernelParam, ...]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    final: bool                       # each output stored once (no init pass)
    dynamic_shared_bytes: int = 0     # a tensorized kernel's shared memory (the arch must allow it)


def check_schedule(schedule: Schedule) -> None:
    """ScheduleError unless the cuda target runs ``schedule``: a float32 op (float16, bfloat16 and
    quantized ops: tensorized), no CPU annotations (a warp axis without ``tensorize`` is the GEMV
    family's, ``gemv.py``; a vectorized loop beside bound ones the depthwise family's, ``depthwise.py``;
    no software prefetch; 16-bit outputs tensorized)."""
    output_types.check(schedule, bool(schedule.tensorized))
    op = schedule.op
    if op.quant is not None or op.dtype != "float32":
        if not schedule.tensorized:
            kind = f"quantized ({op.quant})" if op.quant is not None else f"multiplies {op.dtype}"
            raise ScheduleError(f"{op!r} is {kind}, which the cuda target runs on tensor cores only: "
                                f"tensorize(i, j, k, instruction) three innermost loops (dataflows.gpu_mma "
                                f"picks the instruction)")
    gpu_only = [what for what, given in ((f"split_k({schedule.split_k_loop!r})", schedule.split_k_loop),
                                         (f"stage(..., stages={schedule.pipeline_stages})",
                                          schedule.pipeline_stages is not None),
                                         (f"clip: {schedule.epilogue}", schedule.epilogue),
                                         (f"stage({', '.join(schedule.tma_staged)}, ..., engine='tma')",
                                          schedule.tma_staged),
                                         ("add_residual()", schedule.residual),
                                         (f"cluster{schedule.cluster_dims}", schedule.cluster_dims != (1, 1)),
                                         ("specialize()", schedule.specialized),
                                         (f"swizzle({schedule.tile_swizzle})", schedule.tile_swizzle != 32),
                                         ("persistent()", schedule.persistent_tiles))
                if given]
    if gpu_only and not schedule.tensorized:
        raise ScheduleError(f"{gpu_only[0]} needs a tensorized schedule (tensorize); the SIMT kernels stage "
                            f"one buffer, bind loops over outputs only and store plain sums")
    if schedule.prefetched:
        tensor, ahead = schedule.prefetched[0]
        raise ScheduleError(f"prefetch({tensor!r}, {ahead}) is a CPU register block's software prefetch; the "
                            f"cuda target stages its operands instead (stage(tensor, at))")
    for loop in schedule.loops:
        if loop.vectorized or loop.parallel:
            kind = "vectorized" if loop.vectorized else "parallel"
            raise ScheduleError(f"loop {loop.name!r} is {kind}, a CPU annotation the cuda target does not "
                                f"run; bind loops to GPU axes instead (bind(loop, 'thread.x'))")


def launch_shape(schedule: Schedule) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """The grid and the block: each axis the extent of the loop bound to it (1 where none is)."""
    extent = {loop.axis: loop.extent for loop in schedule.bound_loops}
    return (tuple(extent.get(f"block.{a}", 1) for a in AXES),
            tuple(extent.get(f"thread.{a}", 1) for a in AXES))


def print_kernel(schedule: Schedule, syntax: Syntax = CUDA) -> CudaSource:
    """The kernel of ``schedule`` in ``syntax`` (ScheduleError where the target cannot run it)."""
    from . import depthwise, gemv  # the families build on this module's names
    family = next((f for f in (gemv, depthwise) if f.takes(schedule)), None)
    if family is gemv:
        return gemv.print_gemv(schedule, syntax)
    if family is depthwise:
        return depthwise.print_depthwise(schedule, syntax)
    check_schedule(schedule)
    if schedule.tensorized:
        from .tensor_printer import TensorPrinter  # it builds on this module's names
        return TensorPrinter(schedule, syntax).source()
    return _Printer(schedule, syntax).source()


class _Printer:
    def __init__(self, schedule: Schedule, syntax: Syntax):
        self.schedule, self.syntax, self.op = schedule, syntax, schedule.op
        self.position = {name: i for i, name in enumerate(schedule.loop_names)}
        self.dim_depth = dim_depths(schedule)
        self.placed = placed_guards(schedule)
        self.int_type = index_ctype(schedule)
        self.grid, self.block = launch_shape(schedule)
        self.lines: list[str] = []
        out = self.op.output
        self.params = tuple(KernelParam(t, "float", const=t != out) for t in kernel_arguments(schedule))
        self.stage_at = self.position[schedule.stages[0][1]] if schedule.stages else None
        self.boxes = {t: schedule.staged_box(t, at) for t, at in schedule.stages}
        threads = {loop.name for loop in schedule.bound_loops if loop.axis.startswith("thread.")}
        # guards over thread loops outside the stage are checked at the products and the store instead,
        # so that every thread of the block reaches the stage's barriers
        self.deferred = frozenset(
            index for index, ((_, at), guard) in enumerate(zip(self.placed, schedule.guards))
            if self.stage_at is not None and at < self.stage_at and guard.expr.variables() & threads)

    # --- where the sums are kept ---------------------------------------------------------
    @cached_property
    def acc_depth(self) -> int:
        """The loop depth at which the accumulators start (see the module docstring)."""
        if self.schedule.register_block_at is not None:
            return self.position[self.schedule.register_block_at]
        varying = self.schedule.offset(self.op.output).variables()
        depth = len(self.schedule.loops)
        while depth > 0 and self.schedule.loops[depth - 1].name not in varying:
            depth -= 1
        return depth

    @cached_property
    def block_loops(self) -> tuple[str, ...]:
        """The loops inside the accumulators that move the output: one accumulator per iteration."""
        varying = self.schedule.offset(self.op.output).variables()
        return tuple(loop.name for loop in self.schedule.loops[self.acc_depth:] if loop.name in varying)

    @cached_property
    def final(self) -> bool:
        """Each output is stored once: no reduction loop and no op guard outside the accumulators."""
        reduction = self.op.reduction_dims
        outer = self.schedule.loop_names[:self.acc_depth]
        partial = len(self.schedule.partial_guards)
        return (not any(self.schedule.dims_of(name) & reduction for name in outer)
                and not any(at < self.acc_depth for _, at in self.placed[partial:]))

    def _accumulator(self) -> str:
        return "lo_acc" + "".join(f"[{name}]" for name in self.block_loops)

    def _output_guard(self, index: int) -> bool:
        """Whether guard ``index`` (of ``placed``) skips outputs rather than products."""
        return not self.schedule.guard_dims[index] & self.op.reduction_dims

    # --- text --------------------------------------------------------------------------------
    def emit(self, depth: int, text: str) -> None:
        self.lines.append(cprint.line(depth, text))

    def _declaration(self, param: KernelParam) -> str:
        return f"{'const ' if param.const else ''}float *{self.syntax.restrict} {param.name}"

    def _function(self, name: str, params: tuple[KernelParam, ...]) -> str:
        # no __launch_bounds__: with it ptxas spilled a staged conv3_x kernel at 48 registers (56 without)
        return f"{self.syntax.kernel} {name}({', '.join(map(self._declaration, params))})"

    def _ref(self, tensor: str) -> str:
        """The element of ``tensor`` the statement reads or writes (a staged input's from its box)."""
        if tensor in self.boxes:
            box, stride, terms = self.boxes[tensor], 1, []
            for index, lower, size in reversed(list(zip(self.op.index(tensor), box.lower, box.sizes))):
                if size > 1:
                    scale = f" * {stride}" if stride > 1 else ""
                    terms.append(f"({index.to_c()} - {lower.to_c()}){scale}")
                stride *= size
            return f"lo_s_{tensor}[{' + '.join(reversed(terms)) or '0'}]"
        layout = self.schedule.layout_of(tensor)
        return f"{tensor}[{layout.offset(self.op.index(tensor), self.op.tensor(tensor).shape).to_c()}]"

    def _stage(self, indent: int) -> None:
        """Each staged box copied in: by the block's threads in turn (host: one thread copies it all),
        zero where it leaves the tensor, between barriers."""
        device = self.syntax.device
        threads = math.prod(self.block)
        first = ("(int) (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))" if device
                 else "0")
        step = threads if device else 1
        if device:
            self.emit(indent, "__syncthreads();   /* the last step's reads of the staged boxes are done */")
        for tensor, box in self.boxes.items():
            info = self.op.tensor(tensor)
            if not device:
                self.emit(indent, f"float lo_s_{tensor}[{box.elements}];")
            self.emit(indent, cprint.for_loop("int", "lo_t", box.elements, first, step=step) + " {")
            names, stride = [f"lo_{tensor}{axis}" for axis in range(len(box.sizes))], box.elements
            for name, lower, size in zip(names, box.lower, box.sizes):
                stride //= size
                step_in = "lo_t" if stride == 1 else f"lo_t / {stride}"
                wrap = "" if stride * size == box.elements else f" % {size}"
                place = "" if size == 1 else f" + {step_in}{wrap}"
                self.emit(indent + 1, f"const {self.int_type} {name} = {lower.to_c()}{place};")
            inside = " && ".join(f"0 <= {n} && {n} < {extent}" for n, extent in zip(names, info.shape))
            offset = self.schedule.layout_of(tensor).offset(tuple(Var(n) for n in names), info.shape).to_c()
            self.emit(indent + 1, f"lo_s_{tensor}[lo_t] = {inside} ? {tensor}[{offset}] : 0.0f;")
            self.emit(indent, "}")
        if device:
            self.emit(indent, "__syncthreads();   /* the boxes are in */")

    def _deferred(self, outputs_only: bool = False) -> str:
        """``if (...) `` of the deferred guards (those over outputs only), or ""."""
        guards = [self.placed[i][0].to_c() for i in sorted(self.deferred)
                  if not outputs_only or self._output_guard(i)]
        return f"if ({' && '.join(f'({g})' for g in guards)}) " if guards else ""

    def _defs_at(self, depth: int, dims: frozenset[str] | None = None) -> list[str]:
        return [f"const {self.int_type} {d} = {v.to_c()};" for d, v in self.schedule.dim_values.items()
                if self.dim_depth[d] == depth and v.to_c() != d and (dims is None or d in dims)]

    def _guards_at(self, depth: int, outputs_only: bool = False) -> list[Bound]:
        return [guard for index, (guard, at) in enumerate(self.placed)
                if at == depth and index not in self.deferred
                and (not outputs_only or self._output_guard(index))]

    def _open(self, depth: int, indent: int, unroll: int = 0) -> None:
        """Open loop ``depth``: a bound loop's variable from its axis, else a for loop."""
        loop = self.schedule.loops[depth]
        if loop.axis and self.syntax.device:
            kind, axis = loop.axis.split(".")
            source = "blockIdx" if kind == "block" else "threadIdx"
            self.emit(indent, f"{{ const {self.int_type} {loop.name} = ({self.int_type}) {source}.{axis};"
                              f"   /* {loop.extent} iterations on {loop.axis} */")
            return
        count = unroll or loop.unroll
        if count:
            self.emit(indent, f"{self.syntax.unroll} {min(count, loop.extent)}")
        note = f"   /* bound to {loop.axis} on the GPU */" if loop.axis else ""
        self.emit(indent, cprint.for_loop(self.int_type, loop.name, loop.extent) + f" {{{note}")

    def _open_guards(self, guards: list[Bound], indent: int) -> int:
        for depth, guard in enumerate(guards):
            self.emit(indent + depth, f"if ({guard.to_c()}) {{")
        return len(guards)

    def _close(self, indent: int, count: int) -> None:
        for depth in reversed(range(count)):
            self.emit(indent + depth, "}")

    # --- the nest ----------------------------------------------------------------------------
    def _nest(self, depth: int, indent: int) -> None:
        if depth == self.acc_depth:
            self._accumulate(indent)
            return
        self._loop(depth, indent, self._nest)

    def _loop(self, depth: int, indent: int, inner) -> None:
        """Loop ``depth`` with its dims and guards, ``inner(depth + 1, ...)`` inside."""
        self._open(depth, indent, unroll=self._block_unroll(depth))
        for line in self._defs_at(depth):
            self.emit(indent + 1, line)
        if depth == self.stage_at:
            self._stage(indent + 1)
        opened = self._open_guards(self._guards_at(depth), indent + 1)
        inner(depth + 1, indent + 1 + opened)
        self._close(indent + 1, opened)
        self.emit(indent, "}")

    def _block_unroll(self, depth: int) -> int:
        name = self.schedule.loops[depth].name
        return self.schedule.loops[depth].extent if name in self.block_loops else 0

    def _accumulate(self, indent: int) -> None:
        """The accumulators: zeroed, summed over the loops from ``acc_depth`` inward, stored."""
        sizes = "".join(f"[{self.schedule.loop(name).extent}]" for name in self.block_loops)
        count = math.prod(self.schedule.loop(name).extent for name in self.block_loops)
        zeros = "0.0f" if not self.block_loops else "{" + ", ".join(["0.0f"] * count) + "}"
        self.emit(indent, "{")
        self.emit(indent + 1, f"float lo_acc{sizes} = {zeros};")
        self._sum(self.acc_depth, indent + 1)
        self._store(self.acc_depth, indent + 1)
        self.emit(indent, "}")

    def _sum(self, depth: int, indent: int) -> None:
        if depth == len(self.schedule.loops):
            a, b = self.op.inputs
            self.emit(indent, f"{self._deferred()}{self._accumulator()} += {self._ref(a)} * {self._ref(b)};")
            return
        self._loop(depth, indent, self._sum)

    def _store(self, depth: int, indent: int) -> None:
        """The block loops again (unrolled), each accumulator into its output element."""
        loops = self.schedule.loops
        while depth < len(loops) and loops[depth].name not in self.block_loops:
            depth += 1
        if depth == len(loops):
            self.emit(indent, self._deferred(outputs_only=True) + self._store_statement())
            return
        self._open(depth, indent, unroll=loops[depth].extent)
        for line in self._defs_at(depth, self._output_dims):
            self.emit(indent + 1, line)
        opened = self._open_guards(self._guards_at(depth, outputs_only=True), indent + 1)
        self._store(depth + 1, indent + 1 + opened)
        self._close(indent + 1, opened)
        self.emit(indent, "}")

    @cached_property
    def _output_dims(self) -> frozenset[str]:
        return frozenset(v for e in self.op.index(self.op.output) for v in e.variables())

    def _store_statement(self) -> str:
        out, acc = self._ref(self.op.output), self._accumulator()
        if not self.final:
            return f"{out} += {acc};"
        bias = f"{self.op.bias_tensor}[{self.op.bias_offset().to_c()}]" if self.op.bias else ""
        if self.op.scales is not None:
            alpha, beta = self.op.scales
            term = f" + {float(beta)!r}f * {bias}" if bias and beta else ""
            return f"{out} = {float(alpha)!r}f * {acc}{term};"
        return f"{out} = {f'{bias} + ' if bias else ''}{acc};"

    # --- passes over every output element -------------------------------------------------------
    def _element_pass(self, name: str, statement: str) -> list[str]:
        """A function applying ``statement`` to each output element (its ``lo_<letter>`` indices)."""
        elements = output_elements(self.schedule)
        total = math.prod(elements.sizes)
        self.lines = [self._function(name, self.params), "{"]
        if self.syntax.device:
            self.emit(1, f"for ({self.int_type} lo_i = ({self.int_type}) blockIdx.x * blockDim.x + "
                         f"threadIdx.x; lo_i < {total}; lo_i += ({self.int_type}) gridDim.x * blockDim.x) {{")
        else:
            self.emit(1, cprint.for_loop(self.int_type, "lo_i", total) + " {")
        stride = total
        for letter, size in zip(elements.names, elements.sizes):
            stride //= size
            self.emit(2, f"const {self.int_type} {letter} = lo_i / {stride} % {size};")
        self.emit(2, statement.format(element=elements.element, bias=elements.bias))
        self.emit(1, "}")
        self.emit(0, "}")
        return self.lines

    def _passes(self) -> dict[str, list[str]]:
        """The element passes this kernel needs, by name: setting the output before the nest adds to
        it, and scaling it after (an op with ``scales`` whose outputs are not stored once)."""
        if self.final:
            return {}
        passes = {}
        start = "{bias}" if self.op.bias and self.op.scales is None else "0.0f"
        passes[INIT_NAME] = self._element_pass(INIT_NAME, f"{{element}} = {start};")
        if self.op.scales is not None:
            alpha, beta = self.op.scales
            term = f" + {float(beta)!r}f * {{bias}}" if self.op.bias and beta else ""
            passes[SCALE_NAME] = self._element_pass(SCALE_NAME,
                                                    f"{{element}} = {float(alpha)!r}f * {{element}}{term};")
        return passes

    def _nest_function(self) -> list[str]:
        self.lines = [self._function(NEST_NAME, self.params), "{"]
        for tensor, box in self.boxes.items() if self.syntax.device else ():
            sizes = " x ".join(map(str, box.sizes))
            self.emit(1, f"__shared__ float lo_s_{tensor}[{box.elements}];   /* {sizes} */")
        for line in self._defs_at(-1):
            self.emit(1, line)
        opened = self._open_guards(self._guards_at(-1), 1)
        self._nest(0, 1 + opened)
        self._close(1, opened)
        self.emit(0, "}")
        return self.lines

    # --- the translation unit -----------------------------------------------------------------
    def _header(self) -> list[str]:
        s = self.schedule
        loops = ", ".join(f"{loop.name}[{loop.extent}]" + (f" ({loop.axis})" if loop.axis else "")
                          for loop in s.loops)
        count = math.prod(s.loop(name).extent for name in self.block_loops)
        sums = f"{count} accumulator(s) per thread from loop depth {self.acc_depth}"
        stored = ("each output stored once (bias + sum)" if self.final
                  else f"{INIT_NAME} sets the output, the nest adds to it")
        lines = [f"/* loopopt {self.syntax.name} kernel for {self.op!r}"]
        lines += [f" * step {i + 1}: {step}" for i, step in enumerate(s.steps)] or [" * schedule: naive"]
        lines += [" * layouts: " + ", ".join(f"{t} {tag}" for t, tag in s.layouts),
                  f" * loops: {loops}",
                  f" * grid {self.grid}, block {self.block}; {sums}; {stored}",
                  " */"]
        return lines

    def source(self) -> CudaSource:
        passes = self._passes()
        nest = self._nest_function()
        parts = self._header() + ["#include <stddef.h>"]
        if self.syntax.device:
            parts.append("#include <cuda_runtime.h>")
        for lines in passes.values():
            parts += [""] + lines
        parts += [""] + nest + [""]
        launcher, cdef = (self._launcher(passes) if self.syntax.device else self._host_entry(passes))
        return CudaSource("\n".join(parts + launcher) + "\n", cdef, kernel_arguments(self.schedule),
                          self.params, self.grid, self.block, self.final)

    def _arguments(self) -> str:
        return ", ".join(p.name for p in self.params)

    def _launcher(self, passes: dict[str, list[str]]) -> tuple[list[str], str]:
        """``extern "C" int lo_kernel(tensors..., void *stream)``: the launches in order on ``stream``,
        returning the launch error (0: cudaSuccess); and ``lo_error_string``."""
        declarations = ", ".join(f"{'const ' if p.const else ''}float *{p.name}" for p in self.params)
        head = f"int {KERNEL_NAME}({declarations}, void *lo_stream)"
        total = math.prod(self.op.tensor(self.op.output).shape)
        pass_blocks = min(PASS_BLOCKS, -(-total // PASS_THREADS))
        call = f"({self._arguments()})"
        pass_launch = f"<<<{pass_blocks}, {PASS_THREADS}, 0, (cudaStream_t) lo_stream>>>{call};"
        lines = [f'extern "C" {head}', "{"]
        if INIT_NAME in passes:
            lines.append(f"    {INIT_NAME}{pass_launch}")
        shape = f"dim3{self.grid}, dim3{self.block}"
        lines.append(f"    {NEST_NAME}<<<{shape}, 0, (cudaStream_t) lo_stream>>>{call};")
        if SCALE_NAME in passes:
            lines.append(f"    {SCALE_NAME}{pass_launch}")
        lines += ["    return (int) cudaGetLastError();", "}", "",
                  f'extern "C" const char *{ERROR_NAME}(int code)',
                  "{", "    return cudaGetErrorString((cudaError_t) code);", "}"]
        return lines, f"{head};\nconst char *{ERROR_NAME}(int code);"

    def _host_entry(self, passes: dict[str, list[str]]) -> tuple[list[str], str]:
        """``void lo_kernel(tensors...)``: the passes and the nest in the launcher's order."""
        calls = ([INIT_NAME] if INIT_NAME in passes else []) + [NEST_NAME] + (
            [SCALE_NAME] if SCALE_NAME in passes else [])
        lines = [signature(KERNEL_NAME, self.params), "{"]
        lines += [f"    {name}({self._arguments()});" for name in calls] + ["}"]
        return lines, signature(KERNEL_NAME, self.params, restrict=False) + ";"
