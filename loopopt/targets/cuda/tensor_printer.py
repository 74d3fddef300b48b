"""CUDA C of a tensorized schedule (``Schedule.tensorize``): warps (or warpgroups) of tensor-core
fragments, their operands' tiles gathered into shared memory, in a ring of buffers; and the same
kernel as host C, where the fragment operations are their scalar meaning (``instructions.py``) and
warps and blocks loops.

The schedule's shape, outer to inner (a ScheduleError names the loop that breaks it):

* loops bound to ``block.*`` (the grid) and to ``warp.*`` (the warps of a block); no ``thread.*``;
* the *flat* reduction loops, up to the loop both inputs are staged at: one iteration of their
  product is one pipeline step;
* loops over the reduction (its steps inside one staged tile) and *fragment* loops over outputs
  (each warp holds one accumulator fragment per iteration of its fragment loops; a fragment loop
  moves one input only);
* the tensorized ``i, j, k``.

Each pipeline step copies, for each input, every value the block's warps read in that step into a
tile per iteration of the (warp, inner and fragment) loops the input varies with, ``m x k`` (``a``)
or ``n x k`` (``b``) elements (row: ``i`` for ``a``, ``j`` for ``b``; column: ``k``) laid out as the
instruction's ``LO_TILE`` says (padded rows for WMMA, 32-byte-swizzled rows for ``mma.sync`` and
``wgmma``): an im2col of any index the op has (padding, stride, dilation, fused loops), evaluated per
element with zero where a guard excludes it. Consecutive ``k`` of 16 bytes (8 halves, 16 int8) that lie
contiguously and 16-byte aligned in device memory are copied by one 16-byte ``cp.async``
(``__pipeline_memcpy_async``); the groups go to threads row by row across the step's whole depth, so a
warp reads whole 128-byte lines, in a loop over a count known to nvcc (unrolled). An input staged with
``engine="tma"`` is copied instead by the tensor memory accelerator, one box a tile, one thread issuing
a step's boxes on the buffer's mbarrier, which every thread waits on before the step (``tma.py``);
in clusters of blocks (``Schedule.cluster``) the input they share is multicast, a slice a block
(``cluster.py``).
The copies run ``stages - 1`` steps ahead of the products (``stage(..., stages=n)``; ``PIPELINE_STAGES``
= 3 buffers by default, in dynamic shared memory, which the launcher allows once with
``cudaFuncSetAttribute``); one barrier a step (wait, sync, copies into the buffer the last step
read, products). An asynchronous instruction (``wgmma.mma_async``: a warpgroup of 128 threads per
``warp.*`` iteration, the tiles read through matrix descriptors) runs ``stages - 2`` steps of copies
ahead: wait, ``fence.proxy.async``, sync, the step's products as one group, the copies into the
buffer of two steps before, then a wait for every group but the last. The sums end in float32
fragments, stored through shared memory to the output with the bias, a Gemm's scales, the ``clip``
epilogue and the output guards; under ``split_k`` each block adds its share with ``atomicAdd``
(``LO_ADD``) into the output the launcher zeroed.

A quantized op (any ``QuantSpec``: uint8, int8, ternary or binary values, any zero points) runs on the
int8 entry of its stored bytes' types, whose fragments sum the stored integers exactly in int32:
``P = sum x * w``. Where a guard excludes an activation (padding, a tail) its tile holds the
activations' zero point ``zx``, so that ``x - zx`` is 0 there, and a weights tile is filled (with 0) at
the reduction's tails only, where no weight exists; the exact accumulator
``acc = sum (x - zx) * (w - zw[k])`` is then ``P - zw[k] * S + lo_comp[k]`` (``quantized``), where the
activation sums ``S`` (only for weights whose zero point may be nonzero) are one more product per
activation fragment and step, against a fragment of ones (the entry's ``ones_a``/``ones_b``), stored
through the scratch beside the sums. A conv whose activations TMA copies as pixel boxes has its padding
filled with 0 instead; the epilogue adds the zero point's share back for the border pixels
(``padding_sums``). The epilogue is the CPU kernels' (``quant.requantize_output``):
int32, dequantized or requantized output; under ``split_k`` the int32 shares are added exactly with
integer atomics. On wgmma (no activation sums) it reads the accumulators where they lie, each thread
its own rows (``FragmentCode.rows``/``pairs``): a row's pixel and its border taps are worked out once
a row, the border term added into the accumulators of border rows only, then each fragment's outputs
are requantized into a staging tile in shared memory and copied out 16 bytes a thread
(``_row_epilogue``).
"""
from __future__ import annotations

import math
from dataclasses import replace
from functools import cached_property

import numpy as np

from ...codegen import cprint
from ...codegen.emit import kernel_arguments
from ...codegen.params import KernelParam, index_ctype
from ...codegen.quantized import C_TYPES
from ...epilogue import RESIDUAL
from ...expr import Add, Const, Expr, Mul, Var, linear_terms
from ...schedule import MAX_THREADS_PER_BLOCK, PIPELINE_STAGES, SWIZZLE_WIDTHS, Loop, Schedule, ScheduleError
from . import (
    cluster,
    halves,
    output_types,
    padding_sums,
    persistent,
    pixel_boxes,
    quantized,
    specialize,
    split_reduce,
    tma,
    tma_store,
)
from .instructions import instruction, with_swizzle
from .printer import ERROR_NAME, KERNEL_NAME, NEST_NAME, CudaSource, Syntax

COPY_BYTES = 16            # one cp.async
MAX_SHARED_BYTES = 227 * 1024   # dynamic shared memory of a block on sm_90 (the target checks the arch's)
REGISTERS_PER_SM = 65536   # 32-bit registers of an SM, which one block's threads share at most
SHARED_PER_SM = 228 * 1024      # shared memory of an sm_90 SM, of which each block takes 1 KB more
RESERVED_SHARED_BYTES = 1024
THREADS_PER_SM = 2048
NARROW_SWIZZLE = SWIZZLE_WIDTHS[0]     # tiles of one k-slice's 32-byte rows (``Schedule.swizzle``)


def ring_bytes(stages: int, step_bytes: int, scratch_bytes: int, barriers: int) -> int:
    """Shared memory of a block whose ring has ``stages`` buffers of ``step_bytes`` (the epilogue's
    ``scratch_bytes`` reuse it) and ``barriers`` 8-byte mbarriers a buffer after it."""
    return -(-max(stages * step_bytes, scratch_bytes) // 8) * 8 + 8 * barriers * stages


def _staging_offset(stages: int, step_bytes: int) -> int:
    return -(-stages * step_bytes // tma_store.ALIGNMENT) * tma_store.ALIGNMENT


def store_staging_bytes(consumers: int, buffers: int = tma_store.BUFFERS) -> int:
    """Shared memory of ``consumers`` warpgroups' ``buffers`` staging buffers each of their TMA stores
    (``tma_store.py``)."""
    return consumers * buffers * tma_store.CHUNK_BYTES


def persistent_shared(stages: int, step_bytes: int, staging_bytes: int, barriers: int) -> int:
    """Shared memory of a persistent block that stages its outputs past its ring: ``stages`` buffers of
    ``step_bytes``, then (aligned for the 128-byte swizzle) ``staging_bytes``, then ``barriers`` 8-byte
    mbarriers a buffer."""
    return -(-(_staging_offset(stages, step_bytes) + staging_bytes) // 8) * 8 + 8 * barriers * stages


def staging_buffers(stages: int, step_bytes: int, consumers: int) -> int:
    """The staging buffers of its TMA stores (``tma_store.py``) each of a persistent kernel's ``consumers``
    warpgroups gets beside a ring of ``stages`` buffers of ``step_bytes`` and its two mbarriers a buffer:
    ``tma_store.BUFFERS`` where they fit, else one (each chunk's writes wait until the last store read
    the buffer), else none (the consumers store from registers)."""
    return next((buffers for buffers in (tma_store.BUFFERS, 1) if persistent_shared(
        stages, step_bytes, store_staging_bytes(consumers, buffers), 2) <= MAX_SHARED_BYTES), 0)


def staging_fits(stages: int, step_bytes: int, consumers: int) -> bool:
    """Whether a persistent kernel's staging of its TMA stores fits beside its ring (``staging_buffers``)."""
    return staging_buffers(stages, step_bytes, consumers) > 0


def stage_row(columns: int, output_bytes: int) -> int:
    """Elements of a row of a staging tile of requantized outputs (``TensorPrinter._open_staging``): a
    fragment's ``columns``, and 16 bytes more for bytes (the eight rows a warp writes at once fall in
    different banks)."""
    return columns + (COPY_BYTES if output_bytes == 1 else 0)


def row_staging_bytes(consumers: int, rows: int, columns: int, output_bytes: int) -> int:
    """Shared memory of ``consumers`` warpgroups' staging tiles of one fragment's requantized outputs,
    ``rows`` x ``columns`` of ``output_bytes`` each."""
    return consumers * rows * stage_row(columns, output_bytes) * output_bytes


def _even(expr: Expr) -> bool:
    """Whether ``expr`` is even for any values of its variables (even constants, terms with an even
    factor, and their sums; False where that is not evident)."""
    if isinstance(expr, Const):
        return expr.value % 2 == 0
    if isinstance(expr, Mul):
        return expr.factor % 2 == 0 or _even(expr.expr)
    if isinstance(expr, Add):
        return _even(expr.left) and _even(expr.right)
    return False


class TensorPrinter:
    """The kernel of a tensorized ``schedule`` in ``syntax`` (``printer.CUDA`` or ``printer.HOST``)."""

    def __init__(self, schedule: Schedule, syntax: Syntax):
        self.s, self.syntax, self.op = schedule, syntax, schedule.op
        i, j, k, name = schedule.tensorized
        self.i, self.j, self.k = i, j, k
        entry, width = instruction(name), schedule.tile_swizzle
        if width != NARROW_SWIZZLE and not entry.asynchronous:
            raise ScheduleError(f"swizzle({width}) lays tiles out for wgmma's descriptors; {name} reads the "
                                f"32-byte swizzle: tensorize onto a wgmma entry")
        self.ins = with_swizzle(entry, width)
        self.code = self.ins.cuda if syntax.device else self.ins.scalar
        self.group = COPY_BYTES // self.ins.element_bytes      # elements per 16-byte copy
        self.quant = quantized.check(schedule, self.ins) if schedule.op.quant is not None else None
        self.sums = self.quant is not None and quantized.needs_activation_sums(self.quant)
        self.out_type = output_types.of(schedule)
        self.a, self.b = schedule.tensor_roles()
        self.row = {self.a: i, self.b: j}
        self.rows = {self.a: self.ins.m, self.b: self.ins.n}       # a tile's rows: the fragment's m or n
        self.tile_elements = {self.a: self.ins.a_tile_elements, self.b: self.ins.b_tile_elements}
        self.int_type = index_ctype(schedule)
        self.pipeline = schedule.pipeline_stages or PIPELINE_STAGES
        self.lines: list[str] = []
        self._classify()
        self.tail = halves.check(schedule, self.ins, self.stored, self.pipeline, self.steps, self.step_bytes,
                                 self.warp_count * self.accumulators)

    # --- the schedule's shape ---------------------------------------------------------------
    def _reduction(self, loop: Loop) -> bool:
        return bool(self.s.dims_of(loop.name) & self.op.reduction_dims)

    def _classify(self) -> None:
        s = self.s
        staged = {tensor for tensor, _ in s.stages}
        if staged != set(self.op.inputs):
            raise ScheduleError(f"a tensorized kernel reads both inputs from shared memory: stage "
                                f"{' and '.join(sorted(set(self.op.inputs) - staged))} at a reduction loop "
                                f"(stage(tensor, loop))")
        threads = [loop.name for loop in s.bound_loops if loop.axis.startswith("thread.")]
        if threads:
            raise ScheduleError(f"loop {threads[0]!r} is bound to a thread axis; a tensorized kernel's "
                                f"threads "
                                f"are the lanes of its warps: bind loops to warp.x|y")
        self.at = at = s.position(s.stages[0][1])
        self.blocks = [loop for loop in s.loops if loop.axis.startswith("block.")]
        self.warps = [loop for loop in s.loops if loop.axis.startswith("warp.")]
        self.flat = [loop for loop in s.loops[:at + 1] if not loop.axis]
        for loop in self.flat:
            if not self._reduction(loop):
                raise ScheduleError(f"loop {loop.name!r} runs over outputs outside the stage at "
                                    f"{s.stages[0][1]!r}; bind it to a block axis or move it inside the "
                                    f"stage")
        if not self._reduction(s.loops[at]):
            raise ScheduleError(f"the inputs are staged at {s.stages[0][1]!r}, which runs over outputs; "
                                f"stage "
                                f"them at a reduction loop")
        self.inner = [loop for loop in s.loops[at + 1:-3] if self._reduction(loop)]
        width = s.tile_swizzle
        if width != NARROW_SWIZZLE:      # a step's whole depth a tile row, copied by TMA
            depth = math.prod(loop.extent for loop in self.inner) * self.ins.k * self.ins.element_bytes
            if depth > width:
                raise ScheduleError(f"swizzle({width}): a tile row holds one step's depth; the steps are "
                                    f"{depth} bytes deep: stage at a step of at most {width} bytes "
                                    f"(gpu_wgmma(depth={width // self.ins.element_bytes}))")
            copied = [t for t in self.op.inputs if t not in s.tma_staged]
            if copied:
                raise ScheduleError(f"swizzle({width}): the threads copy {copied[0]}'s tiles in the 32-byte "
                                    f"swizzle; stage({copied[0]!r}, ..., engine='tma')")
        self.fragments = {self.a: [], self.b: []}
        for loop in s.loops[at + 1:-3]:
            if self._reduction(loop):
                continue
            moves = [t for t in self.op.inputs if loop.name in self.reads[t]]
            if len(moves) != 1:
                raise ScheduleError(f"the fragment loop {loop.name!r} must move exactly one input's tiles "
                                    f"(it moves {', '.join(moves) or 'none'})")
            self.fragments[moves[0]].append(loop)
        self.count = {t: math.prod(loop.extent for loop in self.fragments[t]) for t in self.op.inputs}
        self.accumulators = self.count[self.a] * self.count[self.b]
        self.warp_count = math.prod(loop.extent for loop in self.warps)
        threads = self.ins.lanes * self.warp_count
        if threads > MAX_THREADS_PER_BLOCK:
            raise ScheduleError(f"a block of {self.warp_count} issuing groups of {self.ins.lanes} threads "
                                f"({self.ins.name}) has {threads} threads; CUDA allows at most "
                                f"{MAX_THREADS_PER_BLOCK}: bind fewer warp iterations")
        if self.ins.asynchronous and self.pipeline < 3:
            raise ScheduleError(f"{self.ins.name} runs behind its threads: the copies of a step go into the "
                                f"buffer of two steps before, so the ring needs 3 or more buffers, not "
                                f"stages={self.pipeline}")
        if self.quant is not None and self.s.split_k_loop and self.op.quant.output != "int32":
            raise ScheduleError(f"split_k({self.s.split_k_loop!r}) adds int32 shares exactly into an int32 "
                                f"output; {self.op!r} is requantized or dequantized "
                                f"(output={self.op.quant.output!r}), which needs each output's whole sum: "
                                f"drop split_k or quantize with output='int32'")
        self.last = bool(self.s.split_k_loop) and self.s.split_reduce == "last"
        if self.last and (self.quant is not None or self.s.persistent_tiles):
            raise ScheduleError(f"split_k({self.s.split_k_loop!r}, 'last') adds float32 shares in a tile's "
                                f"last block of a grid of tiles; "
                                + ("a quantized op's shares are int32: use reduce='atomic'" if self.quant
                                   else "a persistent block walks several tiles: drop persistent"))
        if self.s.split_k_loop and not self.last and self.out_type.converts:
            raise ScheduleError(f"split_k({self.s.split_k_loop!r}) adds float32 shares into the output; "
                                f"{self.op!r} stores {self.op.out_dtype}, rounded once from each output's "
                                f"whole sum: split_k(..., reduce='last') or out_dtype='float32'")
        if self.s.split_k_loop and not self.last and self.s.fused_epilogue:
            raise ScheduleError(f"the epilogue ({self.s.fused_epilogue}) needs each output's whole sum; "
                                f"split_k({self.s.split_k_loop!r}) adds partial sums: split_k(..., "
                                f"reduce='last') or drop one of them")
        if self.smem_bytes > MAX_SHARED_BYTES:
            deepest = self.deepest
            raise ScheduleError(f"stages={self.pipeline}: a tensorized block needs {self.smem_bytes} bytes "
                                f"of shared memory ({self.pipeline} buffers of {self.tiles[self.a]} + "
                                f"{self.tiles[self.b]} tiles of {self.tile_elements[self.a]} + "
                                f"{self.tile_elements[self.b]} elements of {self.ins.element_bytes} bytes"
                                + (f", {self.row_staging_bytes} bytes of staged rows past them"
                                   if self.s.persistent_tiles and self.staged_rows else "")
                                + f"); {MAX_SHARED_BYTES} at most: "
                                + (f"stages={deepest} is the deepest ring of these tiles" if deepest >= 2
                                   else "tile smaller"))
        # the inputs staged by the tensor memory accelerator (``stage(engine="tma")``), or its refusal
        self.tma = {t: tma.operand(self.s, t, self.ins, self.row[t], self.k, self.rows[t], self.guards[t],
                                   tuple(loop.name for loop in self.row_slices))
                    for t in self.s.tma_staged}
        # the input a cluster's blocks share (``cluster``): a slice of each tile a block, multicast
        self.multicast = cluster.shared_input(self.s, self.blocks, self.reads, self.tma)
        if self.multicast:
            shared, size = self.multicast.tensor, self.multicast.size
            if self.tma[shared].rank != 2:
                raise ScheduleError(f"cluster{self.s.cluster_dims} multicasts slices of 2-D boxes; {shared} "
                                    f"is copied in {self.tma[shared].rank}-D boxes of a conv: drop the "
                                    f"cluster")
            self.tma[shared] = replace(self.tma[shared], box_rows=self.rows[shared] // size, slices=size)
        # warp specialization (``specialize``): the register split of its producer and consumers
        self.registers = self._registers(1)
        if self.registers is not None and self.blocks_per_sm > 1:    # each block its share of the SM's
            self.registers = self._registers(self.blocks_per_sm)
        if self.s.persistent_tiles:
            persistent.check(self.s, bool(self.ins.cuda.elements) and not self.sums)
        # the variable whose count of pipeline steps picks a step's buffer and barrier: a persistent
        # kernel's counts its block's steps over all its tiles, the others' the tile's (``lo_step``)
        self.ring = "lo_ring" if self.s.persistent_tiles else "lo_step"

    def _registers(self, blocks: int) -> specialize.Registers | None:
        """A specialized kernel's register split, ``blocks`` blocks an SM (``specialize.check``)."""
        if not self.s.specialized:
            return None
        return specialize.check(self.warp_count, self.accumulators * self.ins.fragment_elements
                                // self.ins.lanes, self.ins.asynchronous, self.ins.name, self.threads_staged,
                                blocks)

    @property
    def threads_staged(self) -> list[str]:
        """The inputs the block's threads copy (``cp.async``)."""
        return [t for t in self.op.inputs if t not in self.s.tma_staged]

    @cached_property
    def reads(self) -> dict[str, frozenset[str]]:
        return {t: self.s.offset(t).variables() for t in self.op.inputs}

    @property
    def row_slices(self) -> list[Loop]:
        """The reduction loops inside a step whose k-slices share a tile's rows (a wider swizzle,
        ``Schedule.swizzle``): none in the 32-byte swizzle, where each slice is a tile."""
        return self.inner if self.s.tile_swizzle != NARROW_SWIZZLE else []

    def stored_loops(self, tensor: str) -> list[Loop]:
        """The loops whose iterations give ``tensor`` a tile of its own in a buffer, outer first."""
        return [loop for loop in self.tile_loops(tensor) if loop not in self.row_slices]

    def _slice_index(self, tensor: str) -> str:
        """The k-slice of ``row_slices`` the products read in a tile (``0``: the tile has one)."""
        index = "0"
        for loop in self.row_slices:
            if loop.name in self.reads[tensor]:
                index = f"({index}) * {loop.extent} + {loop.name}" if index != "0" else loop.name
        return index

    def _slice_offset(self, tensor: str) -> str:
        """The elements from a tile's start to the k-slice of ``row_slices`` the products read."""
        index = self._slice_index(tensor)
        return "" if index == "0" else f" + ({index}) * {self.ins.k}"

    def tile_loops(self, tensor: str) -> list[Loop]:
        """The loops whose iterations give ``tensor`` a tile of its own in one step, outer first."""
        inside = self.warps + list(self.s.loops[self.at + 1:-3])
        return [loop for loop in inside if loop.name in self.reads[tensor]]

    @cached_property
    def tiles(self) -> dict[str, int]:
        return {t: math.prod(loop.extent for loop in self.stored_loops(t)) for t in self.op.inputs}

    @property
    def output_elements(self) -> int:
        """The elements of the output's storage (zeroed before a ``split_k`` kernel adds to it)."""
        op = self.op
        return math.prod(self.s.layout_of(op.output).storage_shape(op.tensor(op.output).shape))

    @property
    def step_elements(self) -> int:
        return sum(self.tiles[t] * self.tile_elements[t] for t in self.op.inputs)

    @property
    def step_bytes(self) -> int:
        """Bytes of one buffer of the ring: both inputs' tiles of a step."""
        return self.ins.element_bytes * self.step_elements

    @property
    def barrier_offset(self) -> int:
        """Where the ring's mbarriers (one per buffer; TMA-staged inputs only) start in shared memory:
        after the tiles and the epilogue's scratch, or a persistent kernel's staging of the stores
        (``tma_store.py``) or of its requantized rows (``row_staging_bytes``)."""
        if self.s.persistent_tiles and self.stored is not None:
            return persistent_shared(self.pipeline, self.step_bytes, self.staging_bytes, 0)
        return self._ring_and_rows(self.pipeline, 0)

    def _ring_and_rows(self, stages: int, barriers: int) -> int:
        """Shared memory of a ring of ``stages`` buffers with ``barriers`` mbarriers a buffer (and the
        epilogue's scratch over it), or, in a persistent kernel that stages its requantized rows, those
        past it (``row_staging_bytes``)."""
        if self.s.persistent_tiles and self.staged_rows:
            return persistent_shared(stages, self.step_bytes, self.row_staging_bytes, barriers)
        return ring_bytes(stages, self.step_bytes, self.warp_count * self.scratch_elements * 4, barriers)

    @property
    def staging_offset(self) -> int:
        """Where a persistent kernel's staging buffers of the stores start: after the ring, aligned for
        the 128-byte swizzle."""
        return _staging_offset(self.pipeline, self.step_bytes)

    @property
    def maps(self) -> list:
        """The tensor maps the kernel takes: the TMA-staged inputs', and the output's where TMA stores it."""
        return [*self.tma.values(), *([self.stored] if self.stored is not None else [])]

    @property
    def staging_bytes(self) -> int:
        return store_staging_bytes(self.warp_count, self.staging_buffers)

    @property
    def staging_buffers(self) -> int:
        """A consumer warpgroup's staging buffers of its TMA stores: a persistent kernel's as fit beside its
        ring (``staging_buffers``)."""
        if self.s.persistent_tiles:
            return staging_buffers(self.pipeline, self.step_bytes, self.warp_count)
        return tma_store.BUFFERS

    @property
    def row_staging_bytes(self) -> int:
        """The warpgroups' staging tiles of one fragment's requantized outputs (``_open_staging``)."""
        return row_staging_bytes(self.warp_count, self.ins.m, self.ins.n, self._output_bytes)

    @cached_property
    def stored(self) -> tma_store.StoredOutput | None:
        """The output as TMA stores the consumers' chunks (``tma_store.py``): a persistent kernel's staged
        past its ring, another TMA kernel's over its tiles, where its epilogue's scratch would be (a 64 x N
        float fragment a warpgroup, N >= 64, holds the staging); or None: the consumers store from
        registers or through the scratch (another output, or no room beside a persistent kernel's ring)."""
        if not self.s.tma_staged or not self.ins.asynchronous:
            return None
        fits = not self.s.persistent_tiles or staging_fits(self.pipeline, self.step_bytes, self.warp_count)
        return tma_store.output(self.s, self.i, self.j, self.ins.n) if fits else None

    @property
    def barriers(self) -> int:
        """The mbarriers a buffer of the ring has: full (TMA-staged inputs) and empty (a cluster's or
        specialized warps')."""
        empty = self.s.cluster_dims != (1, 1) or self.s.specialized
        return (2 if empty else 1) if self.s.tma_staged else 0

    @property
    def smem_bytes(self) -> int:
        return self.barrier_offset + 8 * self.pipeline * self.barriers

    @property
    def deepest(self) -> int:
        """The most buffers a ring of this kernel's tiles may have within ``MAX_SHARED_BYTES``, with a
        persistent kernel's staged rows past it (0 where not even one fits; a kernel whose TMA stores'
        staging does not fit stores from its registers instead)."""
        stages = MAX_SHARED_BYTES // (self.step_bytes + 8 * self.barriers)
        while stages > 0 and self._ring_and_rows(stages, self.barriers) > MAX_SHARED_BYTES:
            stages -= 1
        return stages

    @property
    def scratch_elements(self) -> int:
        """Accumulator elements each warp stores through shared memory in the epilogue: a fragment, and
        its activation sums beside it where the op needs them."""
        return self.ins.fragment_elements * (2 if self.sums else 1)

    @cached_property
    def guards(self) -> dict[str, list[str]]:
        """The guards each input's copy applies (those over loops it knows), and ``out``'s: the
        iteration domain's own bounds (split tails) over no reduction loop. The op's guards (padding)
        only zero-fill input reads: an output they exclude every product of still gets its bias.
        A quantized op's weights take the domain's bounds only (see the module docstring).
        ScheduleError for a guard of the products that neither input knows."""
        reduction = {loop.name for loop in self.s.loops if self._reduction(loop)}
        outer = {loop.name for loop in self.blocks + self.flat}
        known = {t: outer | {loop.name for loop in self.tile_loops(t)} | {self.row[t], self.k}
                 for t in self.op.inputs}
        placed: dict[str, list[str]] = {t: [] for t in (*self.op.inputs, "out")}
        domain = len(self.s.partial_guards)          # s.guards: the domain's bounds, then the op's
        for index, guard in enumerate(self.s.guards):
            names = guard.expr.variables()
            fits = [t for t in self.op.inputs if names <= known[t]
                    and (self.quant is None or t == self.op.inputs[0] or index < domain)]
            if self.quant is not None and index < domain and names & reduction \
                    and not set(self.op.inputs) <= set(fits):
                raise ScheduleError(f"the guard {guard.to_c()} skips reduction steps an input's copy "
                                    f"cannot see; a quantized kernel fills the weights' tails with 0 and the "
                                    f"activations' with their zero point")
            for t in fits:
                placed[t].append(guard.to_c())
            if index < domain and not names & reduction:
                placed["out"].append(guard.to_c())
            elif not fits:
                raise ScheduleError(f"the guard {guard.to_c()} involves loops of both inputs; a tensorized "
                                    f"kernel zero-fills one input's tile per guard")
        return placed

    # --- text --------------------------------------------------------------------------------
    def emit(self, depth: int, text: str) -> None:
        self.lines.append(cprint.line(depth, text))

    def _define(self, depth: int, loops: list[Loop], flat: str) -> None:
        """Each of ``loops`` from the mixed-radix number ``flat`` (first loop most significant)."""
        stride = math.prod(loop.extent for loop in loops)
        for loop in loops:
            stride //= loop.extent
            value = f"{flat} / {stride}" if stride > 1 else flat
            wrap = f" % {loop.extent}" if stride * loop.extent < math.prod(x.extent for x in loops) else ""
            self.emit(depth, f"const {self.int_type} {loop.name} = ({self.int_type}) ({value}{wrap});")

    def _tile_index(self, tensor: str) -> str:
        index = "0"
        for loop in self.stored_loops(tensor):
            index = f"({index}) * {loop.extent} + {loop.name}" if index != "0" else loop.name
        return index

    def _buffer(self, tensor: str, step: str) -> str:
        """The first element of ``tensor``'s tiles in the buffer of pipeline step ``step``."""
        offset = 0 if tensor == self.a else self.tiles[self.a] * self.tile_elements[self.a]
        return f"(lo_smem_h + ({step}) % {self.pipeline} * {self.step_elements} + {offset})"

    def _units(self, tensor: str, step: str) -> str:
        """``tensor``'s tile that the products read in the buffer of step ``step`` as its offset from the
        shared memory's start in 16-byte units, a 64-bit sum of terms (constant terms fold, the warp's
        hoists out of the loop; ``_buffer``, ``_tile_index``, ``_slice_offset`` in elements)."""
        size = self.ins.element_bytes
        offset = 0 if tensor == self.a else self.tiles[self.a] * self.tile_elements[self.a]
        tile = self.tile_elements[tensor] * size // 16
        terms = [f"(unsigned long long) (({step}) % {self.pipeline}) * {self.step_elements * size // 16}",
                 f"{offset * size // 16}ull", f"(unsigned long long) ({self._tile_index(tensor)}) * {tile}"]
        index = self._slice_index(tensor)
        if index != "0":
            terms.append(f"(unsigned long long) ({index}) * {self.ins.k * size // 16}")
        return " + ".join(terms)

    def _check(self, guards: list[str]) -> str:
        return " && ".join(f"({g})" for g in guards) or "1"

    # --- the copies of one pipeline step ----------------------------------------------------
    def _copy(self, depth: int, step: str, ring: str = "") -> None:
        """The copies of the tile's pipeline step ``step`` (into the buffer of the block's step ``ring``
        in a persistent kernel)."""
        self.emit(depth, "{")
        self.emit(depth + 1, f"const {self.int_type} lo_step = {step};")
        if ring:
            self.emit(depth + 1, f"const int lo_ring = {ring};")
        self._define(depth + 1, self.flat, "lo_step")
        for tensor in self.threads_staged:
            self._copy_tensor(depth + 1, tensor)
        if self.tma:
            self._issue_boxes(depth + 1)
        self.emit(depth, "}")

    def _issue_boxes(self, depth: int) -> None:
        """The TMA-staged inputs' tiles of step ``lo_step``: one thread expects their bytes on the step's
        barrier and issues one box a tile (a specialized kernel's producer thread: ``specialize.py``;
        in its host emulation the barrier is the model's, settled once the boxes are in)."""
        device, producer = self.syntax.device, self.registers is not None
        if device and not producer:
            self.emit(depth, "if (lo_thread == 0) {")
            depth += 1
        barrier = f"{'lo_bar' if device else 'lo_tx'} + {self.ring} % {self.pipeline}"
        total = sum(self.tiles[t] * self.tma[t].tile_bytes for t in self.tma)
        if self.multicast and device and not producer:   # every block's last reader released the buffer
            empty = f"lo_bar + {self.pipeline} + lo_step % {self.pipeline}"
            self.emit(depth, f"if (lo_step >= {self.pipeline}) lo_wait({empty}, "
                             f"(unsigned) (lo_step / {self.pipeline} + 1) & 1u);")
        if producer and not device:
            self.emit(depth, f"lo_expect_arrive(lo_full + {self.ring} % {self.pipeline}, {total});")
            barrier = f"&lo_full[{self.ring} % {self.pipeline}].tx"
        else:
            self.emit(depth, f"lo_expect({barrier}, {total});")
        for tensor, box in self.tma.items():
            self.emit(depth, f"{self.syntax.unroll} {self.tiles[tensor]}")
            self.emit(depth, cprint.for_loop("int", "lo_t", self.tiles[tensor]) + " {")
            self._define(depth + 1, self.stored_loops(tensor), "lo_t")
            dst = (f"{self._buffer(tensor, self.ring)} + ({self._tile_index(tensor)}) * "
                   f"{self.tile_elements[tensor]}")
            if box.slices > 1:
                self._issue_slices(depth + 1, box, dst, barrier)
            else:
                self.emit(depth + 1, box.issue(dst, barrier, device))
            self.emit(depth, "}")
        if producer and not device:
            self.emit(depth, f"lo_mbar_settle(lo_full + {self.ring} % {self.pipeline});")
        if device and not producer:
            self.emit(depth - 1, "}")

    def _issue_slices(self, depth: int, box: tma.TmaOperand, dst: str, barrier: str) -> None:
        """A multicast tile: on the device this block's slice (``lo_rank``) into every block of the
        cluster; in the host emulation each rank's slice in turn (``cluster.py``)."""
        dst = f"{dst} + lo_rank * {box.box_rows * box.box_cols}"
        x, y = f"(int) ({box.x.to_c()})", f"(int) ({box.y.to_c()}) + lo_rank * {box.box_rows}"
        if self.syntax.device:
            self.emit(depth, f"lo_tma_2d_multicast({dst}, &{box.map_name}, {x}, {y}, {barrier}, "
                             f"(unsigned short) {self.multicast.mask});")
            return
        copy = (f"lo_tma_2d(lo_smem_h, {dst}, &{box.map_name}, {x}, {y}, {box.box_rows}, {box.box_cols}, "
                f"{barrier});")
        if not self.s.persistent_tiles:
            self.emit(depth, cprint.for_loop("int", "lo_rank", box.slices) + f" {copy}")
            return
        # a walk's peers copy their own tiles' slices: each rank's at that rank's tile of the cluster tile
        self.emit(depth, cprint.for_loop("int", "lo_rank", box.slices) + " {")
        self.emit(depth + 1, f"const int lo_tile = {self.walk.tile('lo_group', 'lo_rank')};")
        self._define_blocks(depth + 1)
        self.emit(depth + 1, copy)
        self.emit(depth, "}")

    def _cluster_sync(self, depth: int) -> None:
        """The cluster barrier of a clustered kernel on the device (``cluster.py``)."""
        if self.multicast and self.syntax.device:
            self.emit(depth, "lo_cluster_sync();")

    def _copy_tensor(self, depth: int, tensor: str) -> None:
        rows, group = self.rows[tensor], self.group
        groups = self.tiles[tensor] * rows * (self.ins.k // group)
        threads = math.prod(self.block)
        ragged = self.syntax.device and groups % threads != 0
        inner = depth + 1
        if self.syntax.device:     # a count known to nvcc: unrolled, the index arithmetic folds
            self.emit(depth, f"{self.syntax.unroll}")
            self.emit(depth, cprint.for_loop("int", "lo_u", -(-groups // threads)) + " {")
            self.emit(inner, f"const int lo_g = lo_thread + lo_u * {threads};")
            if ragged:
                self.emit(inner, f"if (lo_g < {groups}) {{")
                inner += 1
        else:
            self.emit(depth, cprint.for_loop("int", "lo_g", groups) + " {")
        # the groups in the order (tiles over outputs, row, tiles over the reduction, 16 bytes of k): a
        # row's consecutive k of the whole step go to consecutive threads (whole 128-byte lines a warp)
        per_row = self.ins.k // group
        along = [loop for loop in self.tile_loops(tensor) if loop in self.inner]
        across = [loop for loop in self.tile_loops(tensor) if loop not in self.inner]
        span = per_row * math.prod(loop.extent for loop in along)       # groups of one row in a step
        self._define(inner, across, f"lo_g / {rows * span}")
        row = self.row[tensor]
        self.emit(inner, f"const {self.int_type} {row} = lo_g / {span} % {rows};")
        if along:
            self._define(inner, along, f"(lo_g / {per_row} % {span // per_row})")
        self.emit(inner, f"const {self.int_type} lo_k0 = lo_g % {per_row} * {group};")
        tile = self._tile_index(tensor)
        self.emit(inner, f"{self.code.element} *lo_dst = {self._buffer(tensor, self.ring)} + ({tile}) * "
                         f"{self.tile_elements[tensor]} + LO_TILE({row}, lo_k0);")
        offset, valid = self.s.offset(tensor).to_c(), self._check(self.guards[tensor])
        k = self.k
        try:
            contiguous = linear_terms(self.s.offset(tensor), frozenset([k]))[0].get(k) == 1
        except ValueError:      # k inside a division: no run of consecutive elements
            contiguous = False
        if contiguous:
            self.emit(inner, "int lo_valid = 0;")
            self.emit(inner, f"{self.syntax.unroll} {group}")
            self.emit(inner, cprint.for_loop("int", "lo_e", group) + f" {{ const {self.int_type} {k} = "
                             f"lo_k0 + lo_e; lo_valid += ({valid}) ? 1 : 0; }}")
            self.emit(inner, f"{self.int_type} lo_first = 1;")
            self.emit(inner, f"if (lo_valid == {group}) {{ const {self.int_type} {k} = lo_k0; "
                             f"lo_first = {offset}; }}")
            self.emit(inner, f"if (lo_valid == {group} && lo_first % {group} == 0) {{")
            self.emit(inner + 1, f"LO_COPY16(lo_dst, {tensor} + lo_first);")
            self.emit(inner, "} else {")
            inner += 1
        self.emit(inner, f"{self.syntax.unroll} {group}")
        self.emit(inner, cprint.for_loop("int", "lo_e", group) + " {")
        self.emit(inner + 1, f"const {self.int_type} {k} = lo_k0 + lo_e;")
        self.emit(inner + 1, f"lo_dst[lo_e] = ({valid}) ? {tensor}[{offset}] : {self._fill(tensor)};")
        self.emit(inner, "}")
        if contiguous:
            self.emit(inner - 1, "}")
        if ragged:
            self.emit(depth + 1, "}")
        self.emit(depth, "}")

    def _fill(self, tensor: str) -> str:
        """What ``tensor``'s tile holds where a guard excludes the element: zero, or a quantized op's
        activation zero point (see the module docstring)."""
        if self.quant is None:
            return "LO_ZERO"
        return "lo_zx" if tensor == self.op.inputs[0] else "0"

    # --- the products of one pipeline step --------------------------------------------------
    def _acc(self, index: str) -> str:
        return f"lo_acc[{index}]" if self.syntax.device else f"lo_acc[lo_w * {self.accumulators} + {index}]"

    def _sums(self, index: str) -> str:
        """The activation sums' fragment ``index`` of the warp (one per activation fragment)."""
        count = self.count[self.op.inputs[0]]
        return f"lo_sums[{index}]" if self.syntax.device else f"lo_sums[lo_w * {count} + {index}]"

    def _products(self, depth: int, ring: str = "", rebased: bool = False, half: int | None = None) -> None:
        """A step's products from the buffer of step ``ring`` (default ``self.ring``); ``rebased``: the
        operands through ``load_rebased`` (from the base ``rebase`` declared); ``half``: only that half's
        columns (``halves.py``: B's rows of the half, the entry of N / 2)."""
        ring = ring or self.ring
        steps = math.prod(loop.extent for loop in self.inner)
        na, nb = self.count[self.a], self.count[self.b]
        self.emit(depth, f"{self.syntax.unroll} {steps}")
        self.emit(depth, cprint.for_loop("int", "lo_q", steps) + " {")
        inner = depth + 1
        self._define(inner, self.inner, "lo_q")
        self.emit(inner, self.code.declare_a.format(name="lo_a", count=na))
        self.emit(inner, self.code.declare_b.format(name="lo_b", count=nb))
        for tensor, name, load in ((self.a, "lo_a", self.code.load_a), (self.b, "lo_b", self.code.load_b)):
            self.emit(inner, f"{self.syntax.unroll} {self.count[tensor]}")
            self.emit(inner, cprint.for_loop("int", "lo_f", self.count[tensor]) + " {")
            self._define(inner + 1, self.fragments[tensor], "lo_f")
            rows = self.tail.b_rows(half) if half is not None and tensor == self.b else 0
            ptr = (f"({self._buffer(tensor, ring)} + ({self._tile_index(tensor)}) * "
                   f"{self.tile_elements[tensor]}{self._slice_offset(tensor)}"
                   f"{f' + {rows // self.ins.element_bytes}' if rows else ''})")
            units = self._units(tensor, ring) + (f" + {rows // 16}ull" if rows else "")
            self.emit(inner + 1, self.code.load_rebased.format(name=f"{name}[lo_f]", units=units) if rebased
                      else load.format(a=f"{name}[lo_f]", b=f"{name}[lo_f]", ptr=ptr))
            self.emit(inner, "}")
        self.emit(inner, f"{self.syntax.unroll} {na}")
        self.emit(inner, cprint.for_loop("int", "lo_fa", na) + " {")
        self.emit(inner + 1, f"{self.syntax.unroll} {nb}")
        self.emit(inner + 1, cprint.for_loop("int", "lo_fb", nb) + " {")
        acc = self._acc(f"lo_fa * {nb} + lo_fb")
        self.emit(inner + 2, self.code.mma.format(acc=acc, a="lo_a[lo_fa]", b="lo_b[lo_fb]") if half is None
                  else self.tail.mma(self.syntax.device, acc, "lo_a[lo_fa]", "lo_b[lo_fb]", half))
        self.emit(inner + 1, "}")
        self.emit(inner, "}")
        if self.sums:       # the activation tiles' row sums: their fragments times a fragment of ones
            activation = self.op.inputs[0]
            operands = ({"a": "lo_a[lo_f]", "b": "lo_ones[0]"} if activation == self.a
                        else {"a": "lo_ones[0]", "b": "lo_b[lo_f]"})
            self.emit(inner, f"{self.syntax.unroll} {self.count[activation]}")
            self.emit(inner, cprint.for_loop("int", "lo_f", self.count[activation]) + " { "
                             + self.code.mma.format(acc=self._sums("lo_f"), **operands) + " }")
        self.emit(depth, "}")

    # --- the output -------------------------------------------------------------------------
    def _store_statement(self, value: str = "lo_scratch[lo_e]") -> str:
        """The output element's store of its sums ``value``: ``sums (x alpha) + bias (x beta)``; under
        ``split_k`` each block's share is added (``LO_ADD``: ``atomicAdd`` on the GPU) and the first share
        brings the bias (a quantized op's: ``quantized.store``)."""
        out = f"{self.op.output}[{self.s.offset(self.op.output).to_c()}]"
        if self.quant is not None:
            channel = Var(self.op.channel_dim).substitute(self.s.dim_values).to_c()
            sums = f"lo_scratch[{self.ins.fragment_elements} + lo_e]" if self.sums else None
            return quantized.store(self.op, out, value, channel, self._bias, self.s.split_k_loop, sums)
        if not self.s.split_k_loop:
            return f"{out} = {self.out_type.value(self._output_value(value))};"
        value, bias = self._scaled(value)
        first = f" + ({self.s.split_k_loop} == 0 ? {bias} : 0.0f)" if bias else ""
        return f"LO_ADD({out}, {value}{first});"

    @property
    def _bias(self) -> str:
        """The output element's bias, or "" where the op has none."""
        return (f"{self.op.bias_tensor}[{self.op.bias_offset().substitute(self.s.dim_values).to_c()}]"
                if self.op.bias else "")

    def _scaled(self, value: str) -> tuple[str, str]:
        """The sums ``value`` and the bias, each times a Gemm's scale (``alpha``, ``beta``)."""
        if self.op.scales is None:
            return value, self._bias
        alpha, beta = self.op.scales
        bias = f"{float(beta)!r}f * {self._bias}" if self._bias and beta else ""
        return f"{float(alpha)!r}f * {value}", bias

    def _output_value(self, value: str) -> str:
        """The whole sum's output element, of its sums ``value``: scaled, plus the bias and the residual,
        through the ``clip`` epilogue (a float op without ``split_k``)."""
        value, bias = self._scaled(value)
        terms = (value, bias) if self.op.scales is not None else (bias, value)
        total = " + ".join(t for t in terms if t)
        if self.s.residual:         # the residual is stored in the output's layout
            total = f"({total}) + {RESIDUAL}[{self.s.offset(self.op.output).to_c()}]"
        return self.s.epilogue.c(total) if self.s.epilogue else total

    @property
    def rows_from_registers(self) -> bool:
        """Whether the outputs are requantized straight from the accumulators' registers row by row
        (``_row_epilogue``): a quantized op on an entry that says its registers' rows
        (``FragmentCode.rows``), without activation sums (those go through shared memory)."""
        return self.quant is not None and bool(self.code.rows) and not self.sums

    @property
    def staged_rows(self) -> bool:
        """Whether ``_row_epilogue`` stages each fragment's outputs in shared memory and copies them out
        16 bytes a thread (``_copy_out``): not under split-K (its shares are added element by element).
        A persistent kernel's stage lies past the ring, which its producer fills with the next tile's
        steps meanwhile (``row_staging_bytes``)."""
        return self.rows_from_registers and not self.s.split_k_loop

    def _row_epilogue(self, depth: int) -> None:
        """A quantized op's outputs from the accumulators' registers, each thread its own rows: an output
        pixel's positions and border taps (``padding_sums.row``) once a row, then the row's pairs of
        columns, each element requantized into the warpgroup's staging tile (``staged_rows``: copied out
        after each fragment) or stored."""
        nb, it = self.count[self.b], self.int_type
        staged = self.staged_rows
        if staged:
            self._open_staging(depth)
        inner = self._open_fragments(depth)
        if self.syntax.device:
            self.emit(inner, self.syntax.unroll)
        self.emit(inner, self.code.rows)
        row = inner + 1
        self.emit(row, f"const {it} {self.i} = lo_row;")
        acc = self._acc(f"lo_fa * {nb} + lo_fb")
        element, valid = f"{acc}[lo_e + lo_h]", self._check(self.guards["out"])
        channel = Var(self.op.channel_dim).substitute(self.s.dim_values).to_c()
        if padding_sums.compensated(self.s):    # a border pixel's term added first (the first share's)
            self.emit(row, padding_sums.row(self.op, self.s.dim_values))
            share = f" && {self.s.split_k_loop} == 0" if self.s.split_k_loop else ""
            self.emit(row, f"if (lo_edge{share}) {{")
            added = f"(unsigned) lo_zx * (unsigned) {padding_sums.outside(self.op, channel)}"
            self._each_in_pairs(row + 1, f"if ({valid}) {element} = (int) ((unsigned) {element} + {added});")
            self.emit(row, "}")
        if staged:
            stage = f"lo_stage[lo_row * {self._stage_row} + lo_col + lo_h]"
            self._each_in_pairs(row, f"if ({valid}) "
                                     + quantized.store(self.op, stage, element, channel, self._bias, None))
        else:
            self._pair(self._open_pairs(row), acc)
        self.emit(inner, "}")
        if staged:
            self._copy_out(inner)
        self.emit(depth + 1, "}")
        self.emit(depth, "}")

    @property
    def _stage_row(self) -> int:
        return stage_row(self.ins.n, self._output_bytes)

    @property
    def _output_bytes(self) -> int:
        return np.dtype(self.quant.output).itemsize

    def _open_staging(self, depth: int) -> None:
        """``lo_stage``: the warpgroup's tile of one fragment's outputs, over the tiles' shared memory once
        every warp is done with them (its scratch's place), in a persistent kernel past the ring (each
        warpgroup's own: ``_copy_out``'s barriers guard it); in the host emulation an array."""
        ctype, size = C_TYPES[self.quant.output], self.ins.m * self._stage_row
        if not self.syntax.device:
            self.emit(depth, f"{ctype} lo_stage[{size}];")
            return
        if self.s.persistent_tiles:
            self.emit(depth, f"{ctype} *lo_stage = ({ctype} *) (lo_smem + {self.staging_offset}) "
                             f"+ lo_w * {size};")
            return
        self._reuse_tiles(depth)
        self.emit(depth, f"{ctype} *lo_stage = ({ctype} *) lo_smem + lo_w * {size};")

    def _copy_out(self, depth: int) -> None:
        """The staged fragment to the output, row by row, each thread a chunk of 16 bytes at a time: one
        16-byte store where the output's columns are consecutive and unguarded and both ends are aligned,
        else element by element; between warpgroup barriers (the stage is written before, rewritten
        after)."""
        device, it = self.syntax.device, self.int_type
        vector = COPY_BYTES // self._output_bytes
        chunk = vector if self.ins.n % vector == 0 else 1
        chunks = self.ins.n // chunk
        lane, lanes = self._lanes
        if device:
            self.emit(depth, self.ins.group_sync)
        self.emit(depth, cprint.for_loop("int", "lo_q", self.ins.m * chunks, lane, step=lanes) + " {")
        body = depth + 1
        self.emit(body, f"const int lo_row = lo_q / {chunks}, lo_col = lo_q % {chunks} * {chunk};")
        self.emit(body, f"const {it} {self.i} = lo_row;")
        ctype = C_TYPES[self.quant.output]
        self.emit(body, f"const {ctype} *lo_from = lo_stage + lo_row * {self._stage_row} + lo_col;")
        out = f"{self.op.output}[{self.s.offset(self.op.output).to_c()}]"
        if chunk > 1 and self._columns_consecutive:
            self.emit(body, f"{{ const {it} {self.j} = lo_col; {ctype} *lo_to = &{out}; "
                            f"if (({self._check(self.guards['out'])}) "
                            f"&& (((size_t) lo_to | (size_t) lo_from) & {COPY_BYTES - 1}) == 0) "
                            f"{{ LO_STORE16(lo_to, lo_from); continue; }} }}")
        self.emit(body, cprint.for_loop("int", "lo_v", chunk) + f" {{ const {it} {self.j} = lo_col + lo_v; "
                        f"if ({self._check(self.guards['out'])}) {out} = lo_from[lo_v]; }}")
        self.emit(depth, "}")
        if device:
            self.emit(depth, self.ins.group_sync)

    @property
    def _columns_consecutive(self) -> bool:
        """Whether a fragment row's outputs lie consecutively in the output (the offset steps by 1 along
        its columns) and no guard of the output involves its columns, so that a chunk of them is one
        store."""
        reduction = {loop.name for loop in self.s.loops if self._reduction(loop)}
        domain = len(self.s.partial_guards)
        if any(index < domain and not guard.expr.variables() & reduction and self.j in guard.expr.variables()
               for index, guard in enumerate(self.s.guards)):
            return False
        return self._offset_but_columns is not None

    @property
    def _offset_but_columns(self) -> Expr | None:
        """The output's offset less its columns' term where that steps by 1 (a row's columns are
        consecutive outputs), else None."""
        try:
            steps, rest = linear_terms(self.s.offset(self.op.output), frozenset([self.j]))
        except ValueError:      # the column under a division or remainder: no fixed step
            return None
        return rest if steps.get(self.j) == 1 else None

    def _each_in_pairs(self, depth: int, statement: str) -> None:
        """``statement`` for each element of the row's pairs of columns (``j`` and ``lo_h`` defined)."""
        pair = self._open_pairs(depth)
        self.emit(pair, f"{self.syntax.unroll} 2")
        self.emit(pair, cprint.for_loop("int", "lo_h", 2) + " {")
        self.emit(pair + 1, f"const {self.int_type} {self.j} = lo_col + lo_h;")
        self.emit(pair + 1, statement)
        self.emit(pair, "}")
        self.emit(depth, "}")

    def _open_fragments(self, depth: int, unroll: bool = True) -> int:
        """Opens the loops over a warp's accumulator fragments (``lo_fa``, ``lo_fb``, their fragment
        loops' variables defined), unrolled where ``unroll``; returns the depth inside."""
        na, nb = self.count[self.a], self.count[self.b]
        if unroll:
            self.emit(depth, f"{self.syntax.unroll} {na}")
        self.emit(depth, cprint.for_loop("int", "lo_fa", na) + " {")
        self._define(depth + 1, self.fragments[self.a], "lo_fa")
        if unroll:
            self.emit(depth + 1, f"{self.syntax.unroll} {nb}")
        self.emit(depth + 1, cprint.for_loop("int", "lo_fb", nb) + " {")
        self._define(depth + 2, self.fragments[self.b], "lo_fb")
        return depth + 2

    @property
    def _meet(self) -> str:
        """The barrier of every consumer warp of the block: the consumers' own in a specialized kernel."""
        return (specialize.consumers_sync(self.warp_count) if self.registers is not None
                else "__syncthreads();")

    def _reuse_tiles(self, depth: int) -> None:
        """The consumers meet once every warp is done with the tiles, whose shared memory the epilogue
        then reuses."""
        self.emit(depth, f"{self._meet}   /* every warp is done with the tiles: reuse them */")

    @property
    def _lanes(self) -> tuple[str, int]:
        """A thread's first element of a fragment and the step to its next: the lanes of one instruction
        share the fragment on the GPU; the host emulation's one thread takes every element."""
        return (f"lo_thread % {self.ins.lanes}", self.ins.lanes) if self.syntax.device else ("0", 1)

    def _open_elements(self, depth: int) -> int:
        """Opens the loop over a fragment's elements ``lo_e`` a thread takes (``_lanes``); returns the
        depth inside."""
        lane, lanes = self._lanes
        self.emit(depth, cprint.for_loop("int", "lo_e", self.ins.fragment_elements, lane, step=lanes) + " {")
        return depth + 1

    def _element_position(self, depth: int) -> None:
        """Defines element ``lo_e``'s row and column in its fragment (``i``, ``j``)."""
        self.emit(depth, f"const {self.int_type} {self.i} = lo_e / {self.ins.n};")
        self.emit(depth, f"const {self.int_type} {self.j} = lo_e % {self.ins.n};")

    def _open_pairs(self, depth: int) -> int:
        """Opens the loop over a row's pairs of columns (``FragmentCode.pairs``: ``lo_col``, ``lo_e``);
        returns the depth inside."""
        if self.syntax.device:
            self.emit(depth, self.syntax.unroll)
        self.emit(depth, self.code.pairs)
        return depth + 1

    def _epilogue(self, depth: int) -> None:
        if self.rows_from_registers:
            if self.syntax.device and self.code.drain:     # every product done
                self.emit(depth, self.code.drain)
            self._row_epilogue(depth)
            return
        if self.stored is not None:
            self._staged_epilogue(depth)
            return
        nb, n, accumulator = self.count[self.b], self.ins.fragment_elements, self.code.accumulator
        device = self.syntax.device
        if device:
            if self.code.drain:
                self.emit(depth, self.code.drain)
            self._reuse_tiles(depth)
            self.emit(depth, f"{accumulator} *lo_scratch = ({accumulator} *) lo_smem + lo_w * "
                             f"{self.scratch_elements};")
        else:
            self.emit(depth, f"{accumulator} lo_scratch[{self.scratch_elements}];")
        sync = self.ins.group_sync if device else ""
        # unrolled on the GPU: the accumulators stay in registers (a run-time index would spill them)
        inner = self._open_fragments(depth, unroll=device)
        self.emit(inner, self.code.store.format(acc=self._acc(f"lo_fa * {nb} + lo_fb"), ptr="lo_scratch",
                                                ld=self.ins.n))
        if self.sums:
            fragment = "lo_fa" if self.op.inputs[0] == self.a else "lo_fb"
            self.emit(inner, self.code.store.format(acc=self._sums(fragment), ptr=f"(lo_scratch + {n})",
                                                    ld=self.ins.n))
        if sync:
            self.emit(inner, sync)
        self._open_elements(inner)
        if self.last:       # the whole fragment, the tails too: the last block reads its slots
            self.emit(inner + 1, f"{split_reduce.WORKSPACE}[{self._share_slot(self.s.split_k_loop)}] = "
                                 f"lo_scratch[lo_e];")
        else:
            self._element_position(inner + 1)
            self.emit(inner + 1, f"if ({self._check(self.guards['out'])}) {self._store_statement()}")
        self.emit(inner, "}")
        if sync:
            self.emit(inner, sync)
        self.emit(depth + 1, "}")
        self.emit(depth, "}")

    def _staged_epilogue(self, depth: int) -> None:
        """A tile's outputs stored by TMA (``_stored_epilogue``), staged over the tiles once every warp is
        done with them; the stores done before the block ends. (A 192 x 256 tile's scratch epilogue wrote
        its floats 8 lanes a bank.)"""
        if self.syntax.device:
            self.emit(depth, self.code.drain)
            self._reuse_tiles(depth)
            element = self.out_type.device
            self.emit(depth, f"{element} *lo_stage = ({element} *) lo_smem;")
        self._stored_epilogue(depth)
        if self.syntax.device:
            self.emit(depth, f"if (lo_thread % {specialize.WARPGROUP} == 0) LO_STORES_DONE();")

    @property
    def splits(self) -> int:
        """The blocks that share a tile's reduction (``split_k``), or 1."""
        return next((loop.extent for loop in self.blocks if loop.name == self.s.split_k_loop), 1)

    @property
    def _tile_number(self) -> str:
        """A block's output tile, numbered over the ``block.*`` loops but the split's."""
        number = "0"
        for loop in self.blocks:
            if loop.name != self.s.split_k_loop:
                number = loop.name if number == "0" else f"({number}) * {loop.extent} + {loop.name}"
        return number

    @property
    def _tile_element(self) -> str:
        """Element ``lo_e`` of fragment (``lo_fa``, ``lo_fb``) of warp ``lo_w``, numbered in its tile."""
        na, nb = self.count[self.a], self.count[self.b]
        return f"((lo_w * {na} + lo_fa) * {nb} + lo_fb) * {self.ins.fragment_elements} + lo_e"

    @property
    def tile_elements_all(self) -> int:
        """The sums of a block's tile: every warp's fragments."""
        return self.warp_count * self.accumulators * self.ins.fragment_elements

    @property
    def output_tiles(self) -> int:
        """The output's tiles: ``tile_count`` but the split's blocks (each split a share of every tile)."""
        return self.tile_count // self.splits

    def _share_slot(self, split: str) -> str:
        """The workspace slot of element ``_tile_element`` of split ``split``'s share of the block's tile."""
        return split_reduce.slot(split, self._tile_number, self.output_tiles, self._tile_element,
                                 self.tile_elements_all)

    def _last_share(self, depth: int) -> None:
        """Under ``split_k(..., reduce="last")``, after each warp wrote its fragments' shares: the block
        counts itself in, and the tile's last block adds the shares in split order and stores the outputs
        (``split_reduce.py``); on the host after the warps' loops, which it runs again."""
        if not self.last:
            return
        device, tile, splits = self.syntax.device, self._tile_number, self.splits
        if device:
            self.emit(depth, "__shared__ int lo_last_in;")
        for line in split_reduce.arrive(device, tile, splits, self._meet):
            self.emit(depth, line)
        self.emit(depth, "if (lo_last) {   /* every share of the tile is in: add them in split order */")
        body = depth + 1
        if device:
            self.emit(body, "__threadfence();")
        opened = 0 if device else self._warp_variables(body)
        inner = body + opened
        fragment = self._open_fragments(inner)
        lane, lanes = self._lanes
        batch = math.gcd(split_reduce.BATCH, self.ins.fragment_elements // lanes)
        self.emit(fragment, cprint.for_loop("int", "lo_e0", self.ins.fragment_elements, lane,
                                            step=lanes * batch) + " {")
        element = fragment + 1
        self.emit(element, f"float lo_adds[{batch}];   /* each share of {batch} elements read, then added */")
        self._open_batch(element, batch, lanes)
        share = f"LO_SHARE({split_reduce.WORKSPACE} + {self._share_slot('lo_s')})"
        self.emit(element + 1, f"lo_adds[lo_u] = 0.0f; {split_reduce.order('lo_s', splits)} "
                               f"lo_adds[lo_u] += {share};")
        self.emit(element, "}")
        self._open_batch(element, batch, lanes)
        self._element_position(element + 1)
        out = f"{self.op.output}[{self.s.offset(self.op.output).to_c()}]"
        self.emit(element + 1, f"if ({self._check(self.guards['out'])}) "
                               f"{out} = {self.out_type.value(self._output_value('lo_adds[lo_u]'))};")
        self.emit(element, "}")
        self.emit(fragment, "}")
        self.emit(inner + 1, "}")
        self.emit(inner, "}")
        self._close(body, opened)
        self.emit(body, split_reduce.reset(device, tile))
        self.emit(depth, "}")

    def _open_batch(self, depth: int, batch: int, lanes: int) -> None:
        """Opens the unrolled loop over a thread's ``batch`` elements from ``lo_e0`` (``lo_u``, ``lo_e``
        defined, ``lanes`` apart) of the last block's reduction."""
        self.emit(depth, f"{self.syntax.unroll} {batch}")
        self.emit(depth, cprint.for_loop("int", "lo_u", batch) + " {")
        self.emit(depth + 1, f"const int lo_e = lo_e0 + lo_u * {lanes};")

    def _direct_epilogue(self, depth: int) -> None:
        """The outputs stored straight from the accumulators' registers, each thread its own elements in
        pairs of consecutive columns (``FragmentCode.elements``; a persistent kernel's output that TMA
        does not store): one 8-byte store a pair where ``paired_stores`` and both are inside the output
        (and the output 8-byte aligned), else an element at a time."""
        nb = self.count[self.b]
        inner = self._open_fragments(depth)
        if self.syntax.device:
            self.emit(inner, self.syntax.unroll)
        self.emit(inner, self.code.elements.format(chunk=0, columns=self.ins.n))
        self.emit(inner + 1, f"const {self.int_type} {self.i} = lo_row;")
        self._pair(inner + 1, self._acc(f"lo_fa * {nb} + lo_fb"))
        self.emit(depth + 1, "}")
        self.emit(depth, "}")

    def _pair(self, body: int, acc: str) -> None:
        """The outputs of the pair of columns ``lo_col`` and ``lo_col + 1`` of row ``i`` from the
        fragment ``acc``'s elements ``lo_e`` and ``lo_e + 1``: one store of both where ``paired_stores``
        and both are inside the output (and the output aligned to the pair), else an element at a time;
        closes the pair's loop."""
        it, valid = self.int_type, self._check(self.guards["out"])
        out = f"{self.op.output}[{self.s.offset(self.op.output).to_c()}]"
        paired = self.paired_stores
        if paired:      # both values first, each only inside the output (its bias and residual too)
            self.emit(body, "float lo_v[2];")
            self.emit(body, "int lo_in[2];")
        self.emit(body, f"{self.syntax.unroll} 2")     # lo_v in registers
        self.emit(body, cprint.for_loop("int", "lo_h", 2) + " {")
        self.emit(body + 1, f"const {it} {self.j} = lo_col + lo_h;")
        if not paired:
            self.emit(body + 1, f"if ({valid}) {self._store_statement(f'{acc}[lo_e + lo_h]')}")
            self.emit(body, "}")
        else:
            self.emit(body + 1, f"lo_in[lo_h] = {valid};")
            value = self._output_value(f"{acc}[lo_e + lo_h]")
            self.emit(body + 1, f"lo_v[lo_h] = lo_in[lo_h] ? {value} : 0;")
            self.emit(body, "}")
            self.emit(body, f"const {it} {self.j} = lo_col;")
            aligned = 2 * self.out_type.size - 1
            first, second = (self.out_type.value(f"lo_v[{h}]") for h in (0, 1))
            self.emit(body, f"if (lo_in[0] && lo_in[1] && ((size_t) {self.op.output} & {aligned}) == 0) "
                            f"LO_STORE2({out}, lo_v[0], lo_v[1]);")
            self.emit(body, f"else {{ if (lo_in[0]) {out} = {first}; "
                            f"if (lo_in[1]) (&{out})[1] = {second}; }}")
        self.emit(body - 1, "}")

    @property
    def paired_stores(self) -> bool:
        """Whether the direct epilogue stores two consecutive columns at once: a float op's whole sums
        (no ``split_k``) into an output whose offset steps by 1 along the fragment's columns and by even
        counts along every other loop (a pair of an even column starts 8-byte aligned)."""
        if self.quant is not None or self.s.split_k_loop:
            return False
        rest = self._offset_but_columns
        return rest is not None and _even(rest)

    def _tile_epilogue(self, depth: int) -> None:
        """A persistent kernel's outputs of a tile: staged for TMA's stores where ``stored``, else from
        the registers."""
        if self.stored is not None:
            self._stored_epilogue(depth)
        elif self.rows_from_registers:
            self._row_epilogue(depth)
        else:
            self._direct_epilogue(depth)

    def _stored_epilogue(self, depth: int, half: int | None = None) -> None:
        """Each fragment a chunk of columns at a time through the warpgroup's two staging buffers, each
        chunk stored by TMA behind the warpgroup (``tma_store.py``; in the host emulation at once);
        ``half``: that half's chunks only, each in a buffer of its own (``halves.py``)."""
        nb, device = self.count[self.b], self.syntax.device
        width = self.stored.columns
        chunks = self.ins.n // width
        issuer = f"lo_thread % {specialize.WARPGROUP} == 0"
        self._open_fragments(depth)
        inner = depth + 3
        if half is None:
            self.emit(depth + 2, f"{self.syntax.unroll} {chunks}")
            self.emit(depth + 2, cprint.for_loop("int", "lo_c", chunks) + " {")
            buffers = self.staging_buffers
            self.emit(inner, f"const int lo_buffer = lo_w * {buffers} "
                             f"+ ((lo_fa * {nb} + lo_fb) * {chunks} + lo_c) % {buffers};")
        else:
            self._open_half_chunks(depth + 2, half, chunks)
        if device and half is None:     # the store that last read this buffer is done reading
            self.emit(inner, f"if ({issuer}) LO_STORES_READ_BUT({buffers - 1});")
            self.emit(inner, "LO_GROUP_SYNC();")
        if device:
            self.emit(inner, self.syntax.unroll)
        self.emit(inner, self.code.elements.format(chunk="lo_c", columns=width))
        acc, valid = self._acc(f"lo_fa * {nb} + lo_fb"), self._check(self.guards["out"])
        self.emit(inner + 1, f"const {self.int_type} {self.i} = lo_row;")
        self.emit(inner + 1, f"{self.syntax.unroll} 2")
        self.emit(inner + 1, cprint.for_loop("int", "lo_h", 2) + " {")
        self.emit(inner + 2, f"const {self.int_type} {self.j} = lo_col + lo_h;")
        at = tma_store.staged("lo_buffer", "lo_row", f"lo_col + lo_h - {width} * lo_c", self.out_type.size)
        value = self._output_value(f"{acc}[lo_e + lo_h]")
        if half is None or self.op.bias or self.s.residual:
            value = f"({valid}) ? {value} : 0.0f"
        self.emit(inner + 2, f"lo_stage[{at}] = {self.out_type.value(value)};")
        self.emit(inner + 1, "}")
        self.emit(inner, "}")
        store = self.stored.store(f"lo_stage + lo_buffer * {tma_store.CHUNK_ROWS * width}", "lo_c")
        if device:     # the writes, visible to the copy engine, before one thread stores the chunk
            self.emit(inner, self.code.publish)
            self.emit(inner, "LO_GROUP_SYNC();")
            self.emit(inner, f"if ({issuer}) {store}")
        else:
            self.emit(inner, store)
        self.emit(depth + 2, "}")
        self.emit(depth + 1, "}")
        self.emit(depth, "}")

    def _open_half_chunks(self, depth: int, half: int, chunks: int) -> None:
        """The loop over half ``half``'s chunks of a fragment (``lo_c``), each chunk's staging buffer its
        own (``lo_buffer``: the warpgroup's, from the half's staging; the host's staging holds both)."""
        nb, count = self.count[self.b], chunks // 2
        first = half * count
        self.emit(depth, f"{self.syntax.unroll} {count}")
        self.emit(depth, cprint.for_loop("int", "lo_c", first + count, first) + " {")
        base = "" if self.syntax.device else f"{half * self.warp_count * self.accumulators * count} + "
        self.emit(depth + 1, f"const int lo_buffer = {base}lo_w * {self.accumulators * count} "
                             f"+ (lo_fa * {nb} + lo_fb) * {count} + lo_c - {first};")

    def _halves_tail(self, depth: int, rebased: bool) -> None:
        """The last ``tail.steps`` pipeline steps in halves (``halves.py``): their left products, the
        first one's right products, the left half's outputs staged and stored once those retired, the
        other right products, the right half's outputs; a copy still ahead issued at the first of them."""
        tail, device, code = self.tail, self.syntax.device, self.code
        ahead = self.pipeline - 2
        self.emit(depth, f"/* steps {tail.first}-{self.steps - 1} in halves of {tail.columns} columns */")
        for step in range(tail.first, self.steps):
            self._wait_boxes(depth, str(step))
            if step == tail.first and step + ahead < self.steps:
                if device:
                    self.emit(depth, "__syncthreads();   /* every warp is done with the buffer refilled */")
                self._copy(depth, str(step + ahead))
            self._step_products(depth, str(step), rebased, 0)
        self._step_products(depth, str(tail.first), rebased, 1)
        if device:
            self.emit(depth, code.retire)
            self.emit(depth, "__syncthreads();   /* every left product retired: a free buffer stages them */")
        self._half_epilogue(depth, 0)
        for step in range(tail.first + 1, self.steps):
            self._step_products(depth, str(step), rebased, 1)
        if device:
            self.emit(depth, code.drain)
            self.emit(depth, "__syncthreads();   /* every product retired: the right half's staging */")
        self._half_epilogue(depth, 1)
        if device:
            self.emit(depth, f"if (lo_thread % {specialize.WARPGROUP} == 0) LO_STORES_DONE();")

    def _half_epilogue(self, depth: int, half: int) -> None:
        """Half ``half``'s outputs staged (on the device in the ring, at ``tail``'s offset) and stored."""
        self.emit(depth, "{")
        if self.syntax.device:
            element = self.out_type.device
            offset = (self.tail.left_offset, self.tail.right_offset)[half]
            self.emit(depth + 1, f"{element} *lo_stage = ({element} *) (lo_smem + {offset});")
        opened = 0 if self.syntax.device else self._warp_variables(depth + 1)
        self._stored_epilogue(depth + 1 + opened, half)
        self._close(depth + 1, opened)
        self.emit(depth, "}")

    def _wait_boxes(self, depth: int, step: str) -> None:
        """The wait until the boxes of step ``step`` (a name or a number) are in: the phase (``step`` /
        buffers) of its buffer's barrier (the host's model of it)."""
        buffers = self.pipeline
        if self.syntax.device:
            self.emit(depth, f"lo_wait(lo_bar + {step} % {buffers}, (unsigned) ({step} / {buffers}) & 1u);")
        else:
            self.emit(depth, f"lo_wait(lo_tx + {step} % {buffers}, {self._buffer(self.a, step)}, "
                             f"{self.step_elements});")

    def _step_products(self, depth: int, step: str, rebased: bool, half: int | None = None) -> None:
        """Step ``step``'s products (``half``: that half's, ``halves.py``), on the device one group."""
        device, code = self.syntax.device, self.code
        self.emit(depth, "{")
        self.emit(depth + 1, f"const {self.int_type} lo_step = {step};")
        opened = 0 if device else self._warp_variables(depth + 1)
        if device and code.begin:
            self.emit(depth + 1, code.begin)
        self._products(depth + 1 + opened, rebased=rebased, half=half)
        if device and code.end:
            self.emit(depth + 1, code.end)
        self._close(depth + 1, opened)
        self.emit(depth, "}")

    def _walk(self, depth: int, block: str, blocks: str, round: str) -> None:
        """A persistent kernel's tile of block ``block`` of ``blocks`` in its round ``round``: ``lo_tile``
        (in clusters, of its cluster tile ``lo_group``) and the block loops' variables (``persistent.py``:
        ``block.x`` fastest)."""
        walk, group = self.walk, self.walk.group(block, blocks, round)
        if walk.size > 1:
            rank = "lo_rank" if self.syntax.device else f"({block}) % {walk.size}"
            self.emit(depth, f"const int lo_group = {group};")
            group = walk.tile("lo_group", rank)
        self.emit(depth, f"const int lo_tile = {group};")
        self._define_blocks(depth)

    def _define_blocks(self, depth: int) -> None:
        """The block loops' variables of tile ``lo_tile`` (``block.x`` fastest)."""
        self._define(depth, sorted(self.blocks, key=lambda loop: "zyx".index(loop.axis[-1])), "lo_tile")

    @cached_property
    def walk(self) -> persistent.Walk:
        """A persistent kernel's walk over its tiles, by clusters where multicast (``persistent.py``)."""
        if not self.multicast:
            return persistent.Walk(self.tile_count)
        axis = "block.x" if self.multicast.dims[0] > 1 else "block.y"
        faster = [loop.extent for loop in self.blocks if "zyx".index(loop.axis[-1]) > "zyx".index(axis[-1])]
        return persistent.Walk(self.tile_count, self.multicast.size, math.prod(faster))

    @property
    def tile_count(self) -> int:
        """The output tiles: the iterations of the ``block.*`` loops."""
        return math.prod(loop.extent for loop in self.blocks)

    # --- the kernel ---------------------------------------------------------------------------
    @property
    def grid(self) -> tuple[int, int, int]:
        extent = {loop.axis: loop.extent for loop in self.blocks}
        return tuple(extent.get(f"block.{a}", 1) for a in "xyz")

    @property
    def block(self) -> tuple[int, int, int]:
        if self.registers is not None:      # the consumer warpgroups, then the producer, along x
            return (self.registers.threads, 1, 1)
        extent = {loop.axis: loop.extent for loop in self.warps}
        return (self.ins.lanes * extent.get("warp.x", 1), extent.get("warp.y", 1), 1)

    @cached_property
    def params(self) -> tuple[KernelParam, ...]:
        """The nest's parameters: the tensors (the inputs of the element type the tiles hold, float32
        bias and output) and a quantized op's (``quantized.parameters``)."""
        if self.quant is not None:
            return quantized.parameters(self.s)
        def ctype(tensor: str) -> str:
            if tensor in self.op.inputs:
                return self.code.element
            return self.out_type.ctype(self.syntax.device) if tensor == self.op.output else "float"
        return tuple(KernelParam(t, ctype(t), const=t != self.op.output) for t in kernel_arguments(self.s))

    def _signature(self, name: str, restrict: str) -> str:
        maps = [f"const __grid_constant__ lo_tensor_map {box.map_name}" for box in self.maps
                if self.syntax.device]
        params = ", ".join([p.declaration() if not p.pointer else
                            f"{'const ' if p.const else ''}{p.ctype} *{restrict} {p.name}"
                            for p in self.params] + maps)
        threads = math.prod(self.block)
        # a block whose threads could want more than the SM's registers (255 each): ptxas keeps to
        # REGISTERS_PER_SM / threads, or the launch fails (a 512-thread wgmma conv took 132 registers)
        bounds = (f" __launch_bounds__({threads})" if self.syntax.device and threads * 255 > REGISTERS_PER_SM
                  else "")
        if self.syntax.device and (self.registers is not None or self.blocks_per_sm > 1):
            bounds = f" __launch_bounds__({threads}, {self.blocks_per_sm})"    # setmaxnreg: the cap at entry
        if self.multicast and self.syntax.device:
            bounds += self.multicast.attribute(self.s.persistent_tiles)
        return f"{self.syntax.kernel}{bounds} {name}({params})"

    @property
    def _walkers(self) -> str:
        return "one block" if self.blocks_per_sm == 1 else f"{self.blocks_per_sm} blocks"

    @property
    def blocks_per_sm(self) -> int:
        """The blocks an SM holds at once that the kernel's register cap promises (``resident_blocks``):
        those of a kernel that requantizes from the registers (a specialized one's ``setmaxnreg`` within
        its block's share), else 1. A persistent kernel launches as many a multiprocessor: one's
        epilogue runs beside another's products."""
        return self.resident_blocks if self.rows_from_registers else 1

    @property
    def resident_blocks(self) -> int:
        """The blocks an SM holds by their shared memory and threads, and by registers where each thread
        keeps its accumulators and ``specialize.ADDRESS_REGISTERS`` more (at least 1). A kernel whose
        epilogue requantizes from the registers (``rows_from_registers``) caps its registers at that
        many blocks: unbounded, ptxas kept every channel's constants of the unrolled epilogue live (252
        registers a thread, one 64 x 128 specialized block an SM instead of two)."""
        threads = math.prod(self.block)
        accumulators = self.accumulators * self.ins.fragment_elements // self.ins.lanes
        by_shared = SHARED_PER_SM // (self.smem_bytes + RESERVED_SHARED_BYTES)
        by_registers = REGISTERS_PER_SM // (threads * (accumulators + specialize.ADDRESS_REGISTERS))
        return max(1, min(by_shared, THREADS_PER_SM // threads, by_registers))

    def _warp_variables(self, depth: int) -> int:
        """The warp loops' variables and ``lo_w`` (the warp's number in its block); host: loops (returns
        how many were opened)."""
        if self.syntax.device and self.registers is not None:    # lo_w is defined: y-major, as below
            self._define(depth, sorted(self.warps, key=lambda loop: loop.axis != "warp.y"), "lo_w")
            return 0
        if self.syntax.device:
            lanes = self.ins.lanes
            for loop in self.warps:
                source = f"threadIdx.x / {lanes}" if loop.axis == "warp.x" else "threadIdx.y"
                if self.ins.asynchronous:       # the wgmma descriptors' tile offsets
                    source = self._uniform(f"(int) ({source})")
                self.emit(depth, f"const {self.int_type} {loop.name} = ({self.int_type}) {source};")
            self.emit(depth, f"const int lo_w = (int) (threadIdx.y * (blockDim.x / {lanes}) + threadIdx.x / "
                             f"{lanes});")
            return 0
        for offset, loop in enumerate(self.warps):
            self.emit(depth + offset, cprint.for_loop(self.int_type, loop.name, loop.extent) + " {")
        by_axis = {loop.axis: loop.name for loop in self.warps}
        warps_x = next((loop.extent for loop in self.warps if loop.axis == "warp.x"), 1)
        self.emit(depth + len(self.warps), f"const int lo_w = (int) ({by_axis.get('warp.y', '0')} * "
                                           f"{warps_x} + {by_axis.get('warp.x', '0')});")
        return len(self.warps)

    @staticmethod
    def _uniform(value: str) -> str:
        """``value``, the same in every lane of a warp, broadcast from lane 0 (as CUTLASS's
        ``canonical_warp_group_idx``): ptxas keeps what derives from it (the warp's tile offsets in the
        wgmma descriptors) in uniform registers, no ``R2UR`` a product (BERT's step on the H200: 128 -> 95
        ns)."""
        return f"__shfl_sync(0xffffffffu, {value}, 0)"

    def _close(self, depth: int, count: int) -> None:
        for offset in reversed(range(count)):
            self.emit(depth + offset, "}")

    @property
    def steps(self) -> int:
        """The pipeline steps of a block."""
        return math.prod(loop.extent for loop in self.flat)

    def _open(self) -> int:
        """The nest's signature, shared memory and block variables (host: loops); returns the depth
        inside."""
        self.lines = [self._signature(NEST_NAME, self.syntax.restrict), "{"]
        device, half = self.syntax.device, self.code.element
        if device:
            self.emit(1, f"extern __shared__ __align__({self.ins.tile_alignment}) unsigned char lo_smem[];   "
                         f"/* {self.smem_bytes} bytes */")
            self.emit(1, "const int lo_thread = (int) (threadIdx.x + blockDim.x * threadIdx.y);")
            for loop in [] if self.s.persistent_tiles else self.blocks:   # a persistent kernel's: _walk
                self.emit(1, f"const {self.int_type} {loop.name} = ({self.int_type}) "
                             f"blockIdx.{loop.axis[-1]};")
            depth = 1
        else:
            self.emit(1, f"static {half} lo_smem_host[{self.pipeline * self.step_elements}];")
            if self.s.split_k_loop and not self.last:      # the shares are added: the output starts at zero
                self.emit(1, cprint.for_loop("size_t", "lo_o", self.output_elements) + " "
                             f"{self.op.output}[lo_o] = 0;")
            if self.s.persistent_tiles:     # each tile's stores counted (``persistent.py``)
                self.emit(1, f"static int lo_visits[{self.tile_count}];")
                self.emit(1, cprint.for_loop("int", "lo_t", self.tile_count) + " lo_visits[lo_t] = 0;")
            for depth, loop in enumerate(self.host_blocks, start=1):
                self.emit(depth, cprint.for_loop(self.int_type, loop.name, loop.extent) + " {")
            depth = len(self.host_blocks) + 1
        self.emit(depth, f"{half} *lo_smem_h = {'(' + half + ' *) lo_smem' if device else 'lo_smem_host'};")
        return depth

    @property
    def host_blocks(self) -> list[Loop]:
        """The loops the host emulation runs the blocks as: the ``block.*`` loops, or a persistent
        kernel's ``host_walkers`` (``lo_block``)."""
        if self.s.persistent_tiles:
            return [Loop("lo_block", self.host_walkers)]
        return self.blocks

    @property
    def host_walkers(self) -> int:
        """The blocks the host emulation of a persistent kernel runs: ``persistent.HOST_BLOCKS`` clusters."""
        return persistent.HOST_BLOCKS * self.walk.size

    def _close_blocks(self) -> None:
        """The host's block loops (and a persistent kernel's count of each tile's stores: a tile stored
        twice or never poisons the output) and the nest's end."""
        if not self.syntax.device:
            self._close(1, len(self.host_blocks))
        if self.s.persistent_tiles and not self.syntax.device:
            self.emit(1, cprint.for_loop("int", "lo_t", self.tile_count) + " if (lo_visits[lo_t] != 1) "
                         + cprint.for_loop("size_t", "lo_o", self.output_elements)
                         + f" {self.op.output}[lo_o] = {self._poison};")
        self.emit(0, "}")

    def _host_staging(self, depth: int) -> None:
        """The host emulation's map of the output and staging buffers where TMA stores it."""
        if self.stored is not None:
            self.emit(depth, self.stored.host_map())
            staged = (2 * self.tail.half_bytes if self.tail else self.staging_bytes) // self.out_type.size
            self.emit(depth, f"static {self.out_type.host} lo_stage[{staged}];   /* staged chunks */")

    def _declare_accumulators(self, depth: int) -> None:
        count = self.accumulators * (1 if self.syntax.device else self.warp_count)
        self.emit(depth, self.code.declare_acc.format(name="lo_acc", count=count))
        fill = self.code.fill.format(acc="lo_acc[lo_i]")
        self.emit(depth, cprint.for_loop("int", "lo_i", count) + f" {fill}")

    def _nest(self) -> list[str]:
        if self.registers is not None:
            return self._specialized_nest()
        depth = self._open()
        device, steps = self.syntax.device, self.steps
        if self.tma and device:     # a barrier a buffer, its phase flipping each round of the ring
            self.emit(depth, f"unsigned long long *lo_bar = (unsigned long long *) "
                             f"(lo_smem + {self.barrier_offset});")
            self.emit(depth, f"if (lo_thread == 0) lo_barriers_init(lo_bar, {self.pipeline});")
            if self.multicast:     # a peer's copies and arrivals land on this block's barriers: first init
                self.emit(depth, f"if (lo_thread == 0) lo_empty_init(lo_bar + {self.pipeline}, "
                                 f"{self.pipeline}, {self.multicast.size});")
                self.emit(depth, "const int lo_rank = lo_cluster_rank();")
                self._cluster_sync(depth)
            else:
                self.emit(depth, "__syncthreads();")
        elif self.tma:
            self.emit(depth, f"long lo_tx[{self.pipeline}] = {{0}};   /* bytes a barrier awaits */")
            for box in self.tma.values():
                self.emit(depth, box.host_map())
            self._host_staging(depth)
        self._declare_accumulators(depth)
        if self.sums:
            self._declare_sums(depth)
        warps = self._warp_variables(depth) if device else 0
        code = self.code
        # copies run ahead of the products: into the buffer the step before read, or, where the
        # products run behind the threads (async), the one two steps before (whose group retired)
        ahead = self.pipeline - (2 if self.ins.asynchronous else 1)
        commit = device and bool(self.threads_staged)
        for first in range(min(ahead, steps)):      # copy group g holds pipeline step g
            self._copy(depth, str(first))
            if commit:
                self.emit(depth, "__pipeline_commit();")
        for _ in range(ahead - min(ahead, steps)) if commit else ():
            self.emit(depth, "__pipeline_commit();")
        rebased = device and bool(code.rebase)
        if rebased:
            self.emit(depth, code.rebase)
        main = steps - self.tail.steps if self.tail else steps      # the steps before the halves
        self.emit(depth, cprint.for_loop("int", "lo_r", main) + " {")
        body = depth + 1
        if self.tma:     # step lo_r's boxes are in
            self._wait_boxes(body, "lo_r")
        if device:   # one barrier a step: step lo_r's copies are in, every warp is done with step lo_r - 1
            if commit:
                self.emit(body, f"__pipeline_wait_prior({ahead - 1});")
            if code.publish and self.threads_staged:    # the threads' copies, visible to the tensor cores
                self.emit(body, code.publish)
            self.emit(body, "__syncthreads();")
            if self.multicast and self.ins.asynchronous:    # step lo_r - 2 retired here: release its buffer
                self.emit(body, f"if (lo_thread == 0 && lo_r >= 2 && lo_r + {ahead} < {steps}) "
                                f"lo_release(lo_bar + {self.pipeline} + (lo_r - 2) % {self.pipeline}, "
                                f"{self.multicast.size});")
        if not self.ins.asynchronous:
            self._copy_ahead(body, ahead, steps)
        self._step_products(body, "lo_r", rebased)
        if self.ins.asynchronous:
            self._copy_ahead(body, ahead, steps)
            if device:
                self.emit(body, code.retire)
        self.emit(depth, "}")
        if self.tail:
            self._halves_tail(depth, rebased)
            self._close_blocks()
            return self.lines
        self._cluster_sync(depth)
        opened = warps if device else self._warp_variables(depth)
        self._epilogue(depth + opened)
        self._close(depth, opened)
        self._last_share(depth)
        self._close_blocks()
        return self.lines

    def _specialized_nest(self) -> list[str]:
        """The nest of a specialized kernel (``specialize.py``): on the device the producer warpgroup's
        branch and the consumers' (``setmaxnreg`` first in each), each walking the block's tiles in a
        persistent kernel (``persistent.py``); in the host emulation both as one scheduler over the model
        of the mbarriers."""
        depth = self._open()
        device, stages = self.syntax.device, self.pipeline
        consumers, registers = self.warp_count, self.registers
        walks = self.s.persistent_tiles
        empty = f"lo_bar + {stages}" if device else "lo_empty"
        refill = specialize.refill_ready("lo_p", stages, "lo_ready", empty)
        full = f"lo_ready({'lo_bar' if device else 'lo_full'} + lo_r % {stages}, " \
               f"{specialize.full_parity('lo_r', stages)})"
        release = self._release(empty, "lo_r")
        readers = consumers * (self.multicast.size if self.multicast else 1)
        if not device:
            self.emit(depth, cprint.for_loop("int", "lo_e", stages * self.step_elements)
                      + f" lo_smem_h[lo_e] = {self._poison};   /* a tile read before its copy landed */")
            self.emit(depth, f"lo_mbar lo_full[{stages}], lo_empty[{stages}];")
            self.emit(depth, cprint.for_loop("int", "lo_s", stages) + " { lo_mbar_init(lo_full + lo_s, 1); "
                             f"lo_mbar_init(lo_empty + lo_s, {consumers}); }}")
            for box in self.tma.values():
                self.emit(depth, box.host_map())
            self._host_staging(depth)
            self._declare_accumulators(depth)
            self._emulated_protocol(depth, empty, full, release)
            if not walks:       # a persistent kernel's consumers store each tile in the protocol
                opened = self._warp_variables(depth)
                self._epilogue(depth + opened)
                self._close(depth, opened)
                self._last_share(depth)
            self._close_blocks()
            return self.lines
        self.emit(depth, f"unsigned long long *lo_bar = (unsigned long long *) "
                         f"(lo_smem + {self.barrier_offset});   /* full, then empty */")
        self.emit(depth, f"if (lo_thread == 0) {{ lo_barriers_init(lo_bar, {stages}); "
                         f"lo_empty_init(lo_bar + {stages}, {stages}, {readers}); }}")
        if self.multicast:     # a peer's copies and arrivals land on this block's barriers: first init
            self.emit(depth, "const int lo_rank = lo_cluster_rank();")
            self._cluster_sync(depth)
        else:
            self.emit(depth, "__syncthreads();")
        self.emit(depth, f"const int lo_w = {self._uniform(f'lo_thread / {specialize.WARPGROUP}')};")
        if walks:
            self.emit(depth, f"const int lo_rounds = "
                             f"{self.walk.rounds('blockIdx.x', 'gridDim.x')};")
        self.emit(depth, f"if (lo_w == {consumers}) {{   /* the producer warpgroup: its producers copy */")
        inner = depth + 1
        if registers.moves:
            self.emit(inner, specialize.set_registers(registers.producer, grow=False))
        first = consumers * specialize.WARPGROUP
        self.emit(inner, f"if (lo_thread % 32 == 0 && lo_thread < {first + 32 * specialize.PRODUCERS}) {{"
                         f"   /* the producers */")
        self.emit(inner + 1, f"const int lo_producer = (lo_thread - {first}) / 32;")
        step = self._open_walk(inner + 1, "lo_p")
        self.emit(step, f"while (!({refill})) {{}}   /* every consumer released the buffer */")
        self._copy(step, "lo_k" if walks else "lo_p", "lo_p" if walks else "")
        self._close(inner + 1, step - inner - 1)
        self.emit(inner, "}")
        self.emit(depth, "} else {   /* a consumer warpgroup: multiplies */")
        if registers.moves:
            self.emit(inner, specialize.set_registers(registers.consumer, grow=True))
        self._warp_variables(inner)
        if not walks:
            self._declare_accumulators(inner)
        if self.stored is not None and walks:
            element = self.out_type.device
            self.emit(inner, f"{element} *lo_stage = ({element} *) (lo_smem + {self.staging_offset});")
        code = self.code
        # each buffer and its barriers constant addresses (BERT's step, H200: 144 -> 95 ns); a persistent
        # walk's tiles each start at buffer 0 where their steps fill whole rounds of the ring
        ring = bool(code.rebase) and (not walks or self.steps % stages == 0)
        if code.rebase:
            self.emit(inner, code.rebase)
        if ring:
            tile = self._open_tiles(inner, consumers=True) if walks else inner
            step = self._open_ring(tile)
            full = "lo_ready(lo_bar + lo_s, lo_parity)"
            release = self._release(empty, f"lo_s + {stages}")
        else:
            step = self._open_walk(inner, "lo_r")
            tile = step - 1
        self.emit(step, f"while (!{full}) {{}}   /* step lo_r's boxes are in */")
        self.emit(step, "{")
        if not ring:
            self._step_variables(step + 1, "lo_k" if walks else "lo_r")
        self.emit(step + 1, code.begin)
        self._products(step + 1, "lo_s" if ring else "", rebased=bool(code.rebase))
        self.emit(step + 1, code.end)
        self.emit(step, "}")
        self.emit(step, code.retire)
        self.emit(step, f"if (lo_r >= 1 && lo_thread % {specialize.WARPGROUP} == 0) {release}"
                        f"   /* step lo_r - 1 retired */")
        self._close(tile, step - tile)
        if walks:      # the tile's last group retired: its outputs, while the producer copies on
            self.emit(tile, code.drain)
            self._tile_epilogue(tile)
            self.emit(inner, "}")
            if self.stored is not None:     # the last stores done before the block's shared memory goes
                self.emit(inner, f"if (lo_thread % {specialize.WARPGROUP} == 0) LO_STORES_DONE();")
        else:
            self._epilogue(inner)
            self._last_share(inner)
        self.emit(depth, "}")
        self._cluster_sync(depth)      # no block leaves while a peer may still copy or arrive into it
        self._close_blocks()
        return self.lines

    def _release(self, empty: str, step: str) -> str:
        """A consumer's release of the buffer before ``step``'s (``specialize.released``), on every block's
        empty barrier in a cluster (``empty``: the empty barriers)."""
        released = f"{empty} + ({specialize.released(step)}) % {self.pipeline}"
        return (f"lo_release({released}, {self.multicast.size});" if self.multicast and self.syntax.device
                else f"lo_arrive({released});")

    def _open_ring(self, depth: int) -> int:
        """The consumers' loop over the steps of a tile, by rounds of the ring (``lo_o``, the round's
        ``lo_parity``), each unrolled over its buffers (``lo_s``, a constant in each copy: no address
        arithmetic a step), ``lo_r`` the block's step (a persistent kernel's counts on over its tiles
        ``lo_n``, each tile's steps whole rounds); a last round stops at the tile's steps. Returns the
        depth inside."""
        stages, steps = self.pipeline, self.steps
        first = f"lo_n * {steps} + " if self.s.persistent_tiles else ""
        self.emit(depth, f"{self.syntax.unroll} 1")
        self.emit(depth, f"for (int lo_o = 0; lo_o < {steps}; lo_o += {stages}) {{")
        self.emit(depth + 1, f"const unsigned lo_parity = {specialize.full_parity(first + 'lo_o', stages)};")
        self.emit(depth + 1, f"{self.syntax.unroll} {stages}")
        self.emit(depth + 1, cprint.for_loop("int", "lo_s", stages) + " {")
        self.emit(depth + 2, f"const int lo_r = {first}lo_o + lo_s;")
        if steps % stages:
            self.emit(depth + 2, f"if (lo_r >= {steps}) break;   /* the tile's last round */")
        return depth + 2

    def _open_walk(self, depth: int, counter: str) -> int:
        """A specialized kernel's loop over its pipeline steps, counted by ``counter`` (``lo_p``: a
        producer's, every ``specialize.PRODUCERS``-th from its ``lo_producer``; ``lo_r``: the
        consumers'); a persistent kernel's over its tiles (``_open_tiles``) and their steps (``lo_k``),
        ``counter`` going on over the tiles. Returns the depth inside."""
        producers = specialize.PRODUCERS if counter == "lo_p" else 1
        if not self.s.persistent_tiles:
            self.emit(depth, (cprint.for_loop("int", counter, self.steps) if producers == 1 else
                              f"for (int {counter} = lo_producer; {counter} < {self.steps}; "
                              f"{counter} += {producers})") + " {")
            return depth + 1
        tile = self._open_tiles(depth, consumers=counter == "lo_r")
        self.emit(tile, cprint.for_loop("int", "lo_k", self.steps) + " {")
        self.emit(tile + 1, f"const int {counter} = lo_n * {self.steps} + lo_k;")
        if producers > 1:
            self.emit(tile + 1, f"if ({counter} % {producers} != lo_producer) continue;   "
                                f"/* another producer's step */")
        return tile + 1

    def _open_tiles(self, depth: int, consumers: bool) -> int:
        """A persistent kernel's loop over the block's tiles (``lo_n``, ``persistent.py``), the
        ``consumers``' accumulators zeroed at each. Returns the depth inside."""
        self.emit(depth, cprint.for_loop("int", "lo_n", "lo_rounds") + " {")
        self._walk(depth + 1, "blockIdx.x", "gridDim.x", "lo_n")
        if consumers:
            self._declare_accumulators(depth + 1)
        return depth + 1

    def _step_variables(self, depth: int, step: str) -> None:
        """The consumers' ``lo_step`` (``step``: the tile's pipeline step they multiply) and, in a
        persistent kernel, ``lo_ring`` (the block's step ``lo_r``: its buffer)."""
        self.emit(depth, f"const {self.int_type} lo_step = {step};")
        if self.s.persistent_tiles:
            self.emit(depth, "const int lo_ring = lo_r;")

    def _emulated_protocol(self, depth: int, empty: str, full: str, release: str) -> None:
        """The host's scheduler of a specialized kernel's producers and consumers (``specialize.py``):
        a producer fills its next step where its wait allows (the producers tried in turn, the first
        one changing at each fill, so their steps land out of order), ahead of need on eager rounds
        (alternating by block and round), else only when the consumers wait; neither able to go on
        hangs the GPU: the block's sums turn NaN. A persistent kernel's block (``lo_block``) walks its
        tiles' steps as one count: each copy and product defines its tile, and the consumers store a
        tile after its last step, counting the tile's stores."""
        stages, steps, walks = self.pipeline, self.steps, self.s.persistent_tiles
        producers = specialize.PRODUCERS
        refill = specialize.refill_ready("lo_c", stages, "lo_ready", empty)
        blocks = " + ".join(loop.name for loop in self.host_blocks) or "0"
        total = "lo_total" if walks else str(steps)
        if walks:
            walked = self.walk.rounds("lo_block", str(self.host_walkers))
            self.emit(depth, f"const int lo_total = {walked} * {steps};   /* the steps of its tiles */")
        self.emit(depth, f"int lo_next[{producers}] = {{{', '.join(map(str, range(producers)))}}};   "
                         f"/* each producer's next step */")
        self.emit(depth, "int lo_turn = 0, lo_r = 0;   /* the producer tried first, the consumers' step */")
        self.emit(depth, f"while (lo_r < {total}) {{")
        inner = depth + 1
        self.emit(inner, f"const int lo_eager = (int) ((lo_r / {stages} + {blocks}) & 1);")
        self.emit(inner, "int lo_p = -1, lo_q = 0;   /* the step a producer may fill, that producer */")
        self.emit(inner, cprint.for_loop("int", "lo_j", producers) + " {")
        self.emit(inner + 1, f"const int lo_i = (lo_turn + lo_j) % {producers}, lo_c = lo_next[lo_i];")
        self.emit(inner + 1, f"if (lo_p < 0 && lo_c < {total} && ({refill})) {{ lo_p = lo_c; lo_q = lo_i; }}")
        self.emit(inner, "}")
        self.emit(inner, "const int lo_fill = lo_p >= 0;")
        self.emit(inner, f"const int lo_in = {full};")
        self.emit(inner, "if (lo_fill && (lo_eager || !lo_in)) {")
        if walks:
            self.emit(inner + 1, "{")
            self._walk(inner + 2, "lo_block", str(self.host_walkers), f"lo_p / {steps}")
            self._copy(inner + 2, f"lo_p % {steps}", "lo_p")
            self.emit(inner + 1, "}")
        else:
            self._copy(inner + 1, "lo_p")
        self.emit(inner + 1, f"lo_next[lo_q] += {producers};")
        self.emit(inner + 1, "++lo_turn;")
        self.emit(inner, "} else if (lo_in) {")
        body = inner + 1
        if walks:
            self.emit(body, "{")
            body += 1
            self._walk(body, "lo_block", str(self.host_walkers), f"lo_r / {steps}")
            count = self.accumulators * self.warp_count
            self.emit(body, f"if (lo_r % {steps} == 0) " + cprint.for_loop("int", "lo_i", count) + " "
                      + self.code.fill.format(acc="lo_acc[lo_i]"))
        self._step_variables(body, f"lo_r % {steps}" if walks else "lo_r")
        opened = self._warp_variables(body)
        self._products(body + opened)
        self.emit(body + opened, f"if (lo_r >= 1) {release}")
        self._close(body, opened)
        if walks:
            self.emit(body, f"if (lo_r % {steps} == {steps - 1}) {{   /* the tile's last step: store it */")
            self.emit(body + 1, "lo_visits[lo_tile] += 1;")
            opened = self._warp_variables(body + 1)
            self._tile_epilogue(body + 1 + opened)
            self._close(body + 1, opened)
            self.emit(body, "}")
            self.emit(inner + 1, "}")
        self.emit(inner + 1, "++lo_r;")
        self.emit(inner, "} else {   /* neither can go on: the GPU would hang */")
        count = self.accumulators * self.warp_count
        self.emit(inner + 1, cprint.for_loop("int", "lo_i", count) + " "
                  + cprint.for_loop("int", "lo_e", self.ins.fragment_elements)
                  + f" lo_acc[lo_i][lo_e] = {self._poison};")
        self.emit(inner + 1, "break;")
        self.emit(inner, "}")
        self.emit(depth, "}")

    @property
    def _poison(self) -> str:
        """What the host emulation writes where a value must not be read: NaN, or for integer tiles
        and sums a byte pattern the reference cannot give."""
        return "NAN" if not self.ins.integer else "0x5A"

    def _declare_sums(self, depth: int) -> None:
        """The activation sums' fragments, zeroed, and the fragment of ones they are multiplied by (the
        weights' operand)."""
        activation = self.op.inputs[0]
        count = self.count[activation] * (1 if self.syntax.device else self.warp_count)
        self.emit(depth, self.code.declare_acc.format(name="lo_sums", count=count))
        self.emit(depth, cprint.for_loop("int", "lo_i", count) + " "
                         + self.code.fill.format(acc="lo_sums[lo_i]"))
        declare, ones = ((self.code.declare_b, self.code.ones_b) if activation == self.a
                         else (self.code.declare_a, self.code.ones_a))
        self.emit(depth, declare.format(name="lo_ones", count=1))
        self.emit(depth, ones.format(a="lo_ones[0]", b="lo_ones[0]"))

    def _copy_ahead(self, depth: int, ahead: int, steps: int) -> None:
        """The copies of step ``lo_r + ahead`` and, on the device, their commit."""
        before = "step lo_r - 2 read (its group retired)" if self.ins.asynchronous else "step lo_r - 1 read"
        self.emit(depth, f"if (lo_r + {ahead} < {steps})   /* into the buffer {before} */")
        self._copy(depth + 1, f"lo_r + {ahead}")
        if self.syntax.device and self.threads_staged:
            self.emit(depth, "__pipeline_commit();")

    def _macros(self) -> list[str]:
        pixels = any(box.rank > 2 for box in self.tma.values())     # a conv's boxes (``pixel_boxes``)
        if self.syntax.device:
            return [self.ins.header, *([tma.DEVICE] if self.tma else []),
                    *([pixel_boxes.DEVICE] if pixels else []),
                    *([padding_sums.helpers(True)] if padding_sums.compensated(self.s) else []),
                    *([cluster.DEVICE] if self.multicast else []),
                    *([specialize.DEVICE] if self.registers else []),
                    *([tma_store.DEVICE] if self.stored is not None else []),
                    *([self.tail.macro()] if self.tail else []),
                    *([self.out_type.store2(True)] if self.s.persistent_tiles else []),
                    *([self.out_type.macros(True)] if self.out_type.converts else []),
                    *([self._workspace(True)] if self.last else []), self.ins.tile,
                    "#define LO_ADD(place, value) atomicAdd(&(place), (value))",
                    f"#define LO_ZERO (({self.code.element}) 0.0f)",
                    "#define LO_COPY16(dst, src) __pipeline_memcpy_async((dst), (src), 16)",
                    "#define LO_STORE16(to, from) (*(uint4 *) (to) = *(const uint4 *) (from))"]
        return ["#include <math.h>", "#include <string.h>",
                *([self.ins.host_header] if self.ins.host_header else []),
                *([tma.host(self.ins.element_bytes)] if self.tma else []),
                *([pixel_boxes.host(self.ins.element_bytes)] if pixels else []),
                *([padding_sums.helpers(False)] if padding_sums.compensated(self.s) else []),
                *([specialize.HOST] if self.registers else []),
                *([tma_store.host(self.out_type)] if self.stored is not None else []),
                *([self.tail.host(self.code.element)] if self.tail else []),
                *([self.out_type.macros(False)] if self.out_type.converts else []),
                *([self._workspace(False)] if self.last else []),
                *([self.out_type.store2(False)] if self.s.persistent_tiles else []), self.ins.tile,
                "#define LO_ADD(place, value) ((place) += (value))", "#define LO_ZERO 0.0f",
                f"#define LO_COPY16(dst, src) for (int lo_c = 0; lo_c < {self.group}; ++lo_c) "
                f"(dst)[lo_c] = (src)[lo_c]",
                "#define LO_STORE16(to, from) memcpy((to), (from), 16)"]

    def _workspace(self, device: bool) -> str:
        """``split_reduce.declarations`` of this kernel's tiles and shares."""
        return split_reduce.declarations(device, self.tile_count * self.tile_elements_all, self.output_tiles)

    def _header(self) -> list[str]:
        s = self.s
        loops = ", ".join(f"{loop.name}[{loop.extent}]" + (f" ({loop.axis})" if loop.axis else "")
                          for loop in s.loops)
        return ([f"/* loopopt {self.syntax.name} tensor-core kernel ({self.ins.name}) for {self.op!r}"]
                + [f" * step {n + 1}: {step}" for n, step in enumerate(s.steps)]
                + [" * layouts: " + ", ".join(f"{t} {tag}" for t, tag in s.layouts),
                   f" * loops: {loops}",
                   f" * grid {self.grid}, block {self.block}; {self.accumulators} accumulator "
                   f"fragment(s) per warp; {self.smem_bytes} bytes of shared memory",
                   *([f" * persistent: {self._walkers} a multiprocessor (at most {self.tile_count}) "
                      f"walk{'s' if self.blocks_per_sm == 1 else ''} the {self.tile_count} tiles of the grid"]
                     if self.s.persistent_tiles else []),
                   *([" * padding: TMA fills it with 0; the epilogue adds lo_zx x the weights at each output "
                      "pixel's taps outside the input (lo_taps, padding_sums.py)"]
                     if padding_sums.compensated(s) else []), " */"])

    def source(self) -> CudaSource:
        nest = self._nest()
        device = self.syntax.device
        parts = self._header() + ["#include <stddef.h>", "#include <stdint.h>"] + (
            ["#include <cuda_runtime.h>"] if device else [])
        parts += self._macros() + [""] + nest + [""]
        params = self.params
        arguments = kernel_arguments(self.s)      # the call's tensors (an integer output's bias: lo_comp)
        names = ", ".join(p.name for p in params)
        if device:      # the launcher takes untyped device addresses and the scalars
            decls = ", ".join(p.declaration() if not p.pointer else
                              f"{'const ' if p.const else ''}void *{p.name}" for p in params)
            casts = ", ".join(p.name if not p.pointer else
                              f"({'const ' if p.const else ''}{p.ctype} *) {p.name}" for p in params)
            head = f"int {KERNEL_NAME}({decls}, void *lo_stream)"
            attribute = (f"cudaFuncSetAttribute({NEST_NAME}, cudaFuncAttributeMaxDynamicSharedMemorySize, "
                         f"{self.smem_bytes})")
            zero = (f"    {{ cudaError_t lo_e = cudaMemsetAsync({self.op.output}, 0, "
                    f"{4 * self.output_elements}, (cudaStream_t) lo_stream); if (lo_e != cudaSuccess) "
                    f"return (int) lo_e; }}   /* split_k: the shares are added to zero */")
            maps = [tma.ENCODER, *(box.encode() for box in self.maps)] if self.tma else []
            casts = ", ".join([casts, *(box.map_name for box in self.maps)])
            walks = self.s.persistent_tiles     # one block a multiprocessor, at most one a tile
            grid = "(lo_blocks, 1, 1)" if walks else str(self.grid)
            parts += [*([tma.LAUNCHER] if self.tma else []), f'extern "C" {head}', "{",
                      "    static int lo_ready = 0;   /* the block's shared memory allowed, once */",
                      f"    if (!lo_ready) {{ cudaError_t lo_e = {attribute}; if (lo_e != cudaSuccess) "
                      f"return (int) lo_e; lo_ready = 1; }}",
                      *([zero] if self.s.split_k_loop and not self.last else []), *maps,
                      *([self.walk.launch_blocks(self.blocks_per_sm, NEST_NAME, self.block, self.smem_bytes)]
                        if walks else []),
                      f"    {NEST_NAME}<<<dim3{grid}, dim3{self.block}, {self.smem_bytes}, "
                      f"(cudaStream_t) lo_stream>>>({casts});",
                      "    return (int) cudaGetLastError();", "}", "",
                      f'extern "C" const char *{ERROR_NAME}(int code)',
                      "{", "    return cudaGetErrorString((cudaError_t) code);", "}"]
            cdef = f"{head};\nconst char *{ERROR_NAME}(int code);"
        else:
            decls = ", ".join(p.declaration(restrict=False) for p in params)
            parts += [f"void {KERNEL_NAME}({decls})", "{", f"    {NEST_NAME}({names});", "}"]
            cdef = f"void {KERNEL_NAME}({decls});"
        return CudaSource("\n".join(parts) + "\n", cdef, arguments, params, self.grid, self.block, True,
                          self.smem_bytes)
