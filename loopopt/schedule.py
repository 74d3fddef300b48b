"""Schedules: immutable loop-nest transformations of an op.

Every primitive returns a new ``Schedule``. A schedule is the ordered list of its
loops (each a leaf of the split/fuse tree over the op's dims), the relations that
tie loops back to the op's dims, per-loop annotations, storage layouts and the
steps that built it. Legality is decided from the op's isl dependences.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any, Literal, Optional, get_args

import islpy as isl

from .activation import Clip
from .cnames import check_user_name
from .epilogue import Epilogue
from .expr import Bound, Const, Expr, Var, linear_terms
from .layout import Layout
from .ops import STATEMENT, Op

if TYPE_CHECKING:
    from .kernel import Kernel
    from .targets.base import Target


class ScheduleError(ValueError):
    """A schedule request that names something wrong (a loop, a factor, a tensor)."""


class IllegalScheduleError(ScheduleError):
    """A schedule request that would violate a dependence of the op."""


Compensation = Literal["packed", "kernel"]        # Schedule.compensation choices (quantized ops)
QuantArithmetic = Literal["integer", "dequantize"]  # Schedule.arithmetic choices (quantized ops)
WeightFormat = Literal["int8", "i2_s", "tl1", "tl2", "s16"]   # Schedule.weight_format choices
WEIGHT_FORMATS: tuple[WeightFormat, ...] = get_args(WeightFormat)
COMPENSATIONS: tuple[Compensation, ...] = get_args(Compensation)
ARITHMETICS: tuple[QuantArithmetic, ...] = get_args(QuantArithmetic)


def box_constraints(loops: "Iterable[Loop]", suffix: str = "") -> list[str]:
    """isl constraints ``0 <= name < extent`` of ``loops`` (names with ``suffix`` appended)."""
    return [f"0 <= {loop.name}{suffix} < {loop.extent}" for loop in loops]


@dataclass(frozen=True)
class Loop:
    """One loop of the nest: name, trip count and annotations."""

    name: str
    extent: int
    vectorized: bool = False
    parallel: bool = False
    unroll: int = 0              # 0: not unrolled; n: unroll by n (the full extent when n >= extent)
    axis: str = ""               # "": a loop; else the GPU axis its iterations run across (``bind``)


@dataclass(frozen=True)
class Split:
    """``parent = outer * factor + inner`` with ``inner < factor``."""

    parent: str
    outer: str
    inner: str
    factor: int
    parent_extent: int


@dataclass(frozen=True)
class Fuse:
    """``outer = fused // inner_extent`` and ``inner = fused % inner_extent``."""

    outer: str
    inner: str
    fused: str
    inner_extent: int


def matrix_instruction(name: str, where: str):
    """The cuda target's matrix-instruction entry ``name`` (``targets/cuda/instructions.py``; a lazy
    facade, as ``compile``); ScheduleError starting with ``where`` that names the known ones."""
    from .targets.registry import target  # lazy facade: the table is the cuda target's
    try:
        return target("cuda").matrix_instruction(name)
    except ValueError as err:
        raise ScheduleError(f"{where}: {err}") from None


@dataclass(frozen=True)
class Step:
    """One primitive application, kept to print and to save a schedule."""

    primitive: str
    args: tuple = ()
    kwargs: tuple = ()

    def __str__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs]
        return f"{self.primitive}({', '.join(parts)})"


MAX_BLOCK_ELEMENTS = 1024   # output elements one register block may unroll into accumulators
BLOCK_OVERHANG = 64         # a split may cover its loop rounded up to this (a vector of the widest lanes)
# The GPU axes of ``bind`` and CUDA's limits on them (every compute capability from 3.0 on):
# the extent of each axis, and the threads of one block (the product of the thread axes).
# ``warp.x|y``: one warp (32 threads) each, for the warp-wide matrix instructions of ``tensorize``.
AXIS_LIMITS = {"block.x": 2**31 - 1, "block.y": 65535, "block.z": 65535,
               "thread.x": 1024, "thread.y": 1024, "thread.z": 64, "warp.x": 32, "warp.y": 32}
WARP_SIZE = 32
GPU_AXES = tuple(AXIS_LIMITS)
MAX_THREADS_PER_BLOCK = 1024
MAX_SHARED_BYTES = 48 * 1024   # CUDA's static shared memory per block (``stage``)
PIPELINE_STAGES = 3            # the ring's buffers by default: the copies run two steps ahead
# Who copies a staged tile (``stage(engine=)``): the block's threads (``cp.async``, any index: an im2col
# gather) or the tensor memory accelerator (``tma``: one thread issues a box of a 2-D tensor, or of a
# conv's N-D tensor whose tile is a box of output pixels)
STAGE_ENGINES = ("threads", "tma")
SWIZZLE_WIDTHS = (32, 64, 128)  # bytes of a staged tile's swizzled rows (``swizzle``)
MAX_PREFETCH_AHEAD = 1 << 20   # elements: a prefetch distance beyond this is no stream's (``prefetch``)
MAX_CLUSTER_BLOCKS = 8         # blocks of a thread-block cluster that every sm_90 GPU launches (``cluster``)


@dataclass(frozen=True)
class StagedBox:
    """The box of a staged input's logical index that one block reads inside the stage's loop ``at``:
    per axis its first index (an expression of the loops outside ``at``) and its size."""

    tensor: str
    at: str
    lower: tuple[Expr, ...]
    sizes: tuple[int, ...]

    @property
    def elements(self) -> int:
        count = 1
        for size in self.sizes:
            count *= size
        return count


def _check_factor(factor: Any, what: str, loop: Loop, limit: int) -> int:
    """``factor`` of a split or unroll of ``loop``: an integer from 1 to ``limit`` (ScheduleError naming
    the factor, the loop's extent and the limit otherwise)."""
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise ScheduleError(f"{what}: factor must be an integer >= 1, got {factor!r}")
    if factor > limit:
        beyond = "" if limit == loop.extent else (
            f" (one partial block may overhang its loop up to the extent rounded up to {BLOCK_OVERHANG} or "
            f"twice the extent)")
        raise ScheduleError(f"{what}: factor {factor} is larger than the extent {loop.extent} of loop "
                            f"{loop.name!r}; use a factor from 1 to {limit}{beyond}")
    return factor


def block_limit(extent: int) -> int:
    """The largest split factor of a loop of ``extent``: a block larger than its loop is one partial
    block, which a block of whole vectors or threads needs on a short loop (one masked vector of 16 lanes
    over 10 channels, a register block kept whole on a small layer, a GPU block of threads x registers
    rounded up past the loop: less than twice the extent), so up to the larger of the extent rounded up
    to ``BLOCK_OVERHANG`` and twice the extent; a factor beyond (``split('ow', 100)`` on 14) would only
    add iterations that do not exist."""
    return max(-(-extent // BLOCK_OVERHANG) * BLOCK_OVERHANG, 2 * extent)


@dataclass(frozen=True)
class Schedule:
    """A loop schedule of ``op``. ``Schedule(op)`` is the naive nest in the op's dim order.

    ``reassociate`` (default True) allows reordering the floating-point reduction;
    with False any change of the summation order is refused as illegal.
    """

    op: Op
    loops: tuple[Loop, ...] = ()
    relations: tuple[Split | Fuse, ...] = ()
    layouts: tuple[tuple[str, str], ...] = ()
    steps: tuple[Step, ...] = ()
    reassociate: bool = True
    register_block_at: Optional[str] = None
    compensation_mode: Compensation = "packed"     # quantized ops: where zero-point compensation is computed
    arithmetic_mode: QuantArithmetic = "integer"   # quantized ops: integer sums or dequantize-on-the-fly
    weight_format_mode: WeightFormat = "int8"      # quantized weights: a byte, 2 bits (ternary), int16
    stages: tuple[tuple[str, str], ...] = ()       # (input, loop): staged in GPU shared memory (``stage``)
    tensorized: tuple[str, ...] = ()                # (i, j, k, instruction): ``tensorize``
    pipeline_stages: Optional[int] = None           # buffers of the staged tiles' ring (``stage(stages=)``)
    tma_staged: tuple[str, ...] = ()                # inputs staged by the tensor memory accelerator
    split_k_loop: Optional[str] = None              # the reduction loop across block.z (``split_k``)
    split_reduce: str = "atomic"                    # how ``split_k``'s shares meet: atomicAdd, or "last"
    epilogue: Optional[Clip] = None                 # applied to each output before its store (``clip``)
    residual: bool = False                          # a second tensor added to the outputs (``add_residual``)
    requantized_clip: Optional[Clip] = None         # requantized, clipped on a scale of its own
    cluster_dims: tuple[int, int] = (1, 1)          # blocks of a cluster along block.x, block.y (``cluster``)
    specialized: bool = False                       # a producer warpgroup copies, the others multiply
    tile_swizzle: int = 32                          # bytes of a staged tile's swizzled rows (``swizzle``)
    persistent_tiles: bool = False                  # one block an SM walks the output tiles (``persistent``)
    prefetched: tuple[tuple[str, int], ...] = ()    # (input, elements ahead): ``prefetch``
    halves_steps: int = 0                           # the last steps multiplied in halves (``halves``)

    def __post_init__(self):
        if not isinstance(self.op, Op):
            raise TypeError(f"Schedule needs an op (lo.Conv2d, lo.Matmul, lo.Contraction, ...), got "
                            f"{type(self.op).__name__}")
        if not self.loops:
            object.__setattr__(self, "loops", tuple(Loop(n, e) for n, e in self.op.dims))
        if not self.layouts:
            object.__setattr__(self, "layouts", tuple(
                (t, self.op.tensor(t).default_layout) for t in self.op.tensors))

    def __hash__(self) -> int:
        """The hash of the fields (as the dataclass's), computed once: codegen's caches key by schedule."""
        return self._fields_hash

    @cached_property
    def _fields_hash(self) -> int:
        return hash(tuple(getattr(self, f.name) for f in fields(self)))

    # --- naming ---------------------------------------------------------------
    @property
    def loop_names(self) -> tuple[str, ...]:
        return tuple(loop.name for loop in self.loops)

    def loop(self, name: str, primitive: str = "schedule") -> Loop:
        """The loop called ``name``; a ScheduleError naming the loops otherwise."""
        for loop in self.loops:
            if loop.name == name:
                return loop
        close = difflib.get_close_matches(str(name), self.loop_names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ScheduleError(f"{primitive}: there is no loop named {name!r}{hint}; "
                            f"the loops are {', '.join(self.loop_names)}")

    def position(self, name: str) -> int:
        return self.loop_names.index(name)

    @property
    def vector_loop(self) -> Optional[Loop]:
        return next((loop for loop in self.loops if loop.vectorized), None)

    @property
    def parallel_loop(self) -> Optional[Loop]:
        return next((loop for loop in self.loops if loop.parallel), None)

    @property
    def bound_loops(self) -> tuple[Loop, ...]:
        """The loops bound to GPU axes (``bind``), outermost first."""
        return tuple(loop for loop in self.loops if loop.axis)

    def layout_of(self, tensor: str) -> Layout:
        tag = dict(self.layouts)[tensor]
        info = self.op.tensor(tensor)
        return Layout.parse(tag, info.letters, tensor)

    # --- the tree from loops back to dims ----------------------------------------
    def value(self, name: str) -> Expr:
        """Expression of a dim or intermediate loop in terms of the current loops."""
        if name in self.loop_names:
            return Var(name)
        for rel in self.relations:
            if isinstance(rel, Split) and rel.parent == name:
                return self.value(rel.outer) * rel.factor + self.value(rel.inner)
            if isinstance(rel, Fuse) and name in (rel.outer, rel.inner):
                fused = self.value(rel.fused)
                return fused // rel.inner_extent if name == rel.outer else fused % rel.inner_extent
        raise ScheduleError(f"internal: {name!r} is not derived from any loop")

    @cached_property
    def dim_values(self) -> dict[str, Expr]:
        """Each op dim as an expression of the loops."""
        return {dim: self.value(dim) for dim in self.op.dim_names}

    @cached_property
    def partial_guards(self) -> tuple[Bound, ...]:
        """``parent < extent`` for every split whose factor does not divide its loop."""
        return tuple(Bound(self.value(r.parent), 0, r.parent_extent) for r in self.relations
                     if isinstance(r, Split) and r.parent_extent % r.factor)

    def dims_of(self, name: str) -> frozenset[str]:
        """The op dims a loop (or intermediate split/fused name) is derived from."""
        if name in self.op.dim_names:
            return frozenset([name])
        for rel in self.relations:
            if isinstance(rel, Split) and name in (rel.outer, rel.inner):
                return self.dims_of(rel.parent)
            if isinstance(rel, Fuse) and name == rel.fused:
                return self.dims_of(rel.outer) | self.dims_of(rel.inner)
        raise ScheduleError(f"internal: {name!r} is not derived from any dim")

    @cached_property
    def guard_dims(self) -> tuple[frozenset[str], ...]:
        """The op dims each of ``guards`` constrains, in the same order."""
        partial = tuple(self.dims_of(r.parent) for r in self.relations
                        if isinstance(r, Split) and r.parent_extent % r.factor)
        return partial + tuple(frozenset(g.expr.variables()) for g in self.op.guards)

    @cached_property
    def guards(self) -> tuple[Bound, ...]:
        """Constraints the loops' box needs to match the domain: partial blocks, then the op's."""
        op_guards = tuple(Bound(g.expr.substitute(self.dim_values), g.lower, g.upper) for g in self.op.guards)
        return self.partial_guards + op_guards

    def index(self, tensor: str) -> tuple[Expr, ...]:
        """The logical index of ``tensor`` in terms of the loops."""
        return tuple(e.substitute(self.dim_values) for e in self.op.index(tensor))

    @cached_property
    def _offsets(self) -> dict[str, Expr]:
        """``offset`` by tensor, built on first use."""
        return {}

    def offset(self, tensor: str) -> Expr:
        """Storage offset (elements) of ``tensor``'s accessed element, in terms of the loops."""
        if tensor not in self._offsets:
            shape = self.op.tensor(tensor).shape
            self._offsets[tensor] = self.layout_of(tensor).offset(self.index(tensor), shape)
        return self._offsets[tensor]

    # --- isl -----------------------------------------------------------------------
    @cached_property
    def isl_map(self) -> isl.Map:
        """The schedule map ``S[dims] -> [loops]`` restricted to the op's domain."""
        dims = ", ".join(self.op.dim_names)
        loops = ", ".join(self.loop_names)
        constraints = box_constraints(self.loops)
        constraints += [f"{d} = {v.to_isl()}" for d, v in self.dim_values.items()]
        text = f"{{ {STATEMENT}[{dims}] -> [{loops}] : {' and '.join(constraints)} }}"
        return isl.Map(text).intersect_domain(self.op.domain)

    @cached_property
    def _box_extents(self) -> tuple[tuple[str, int], ...]:
        """Each loop's name and extent, outermost first: all that ``iterations`` depends on."""
        return tuple((loop.name, loop.extent) for loop in self.loops)

    def iterations(self, *conditions: str) -> isl.Set:
        """The set ``{ [loops] : every loop in its box and every condition }`` over the loop
        variables (isl constraint texts; guards are not implied: pass them as conditions)."""
        return _iterations(self._box_extents, conditions)

    @cached_property
    def _least_values(self) -> dict[tuple[str, ...], Optional[int]]:
        """``least`` by the isl text of its expression and its conditions."""
        return {}

    def least(self, expr: Expr, *conditions: str) -> Optional[int]:
        """The least value of ``expr`` over the iterations of the loop box where every isl
        ``conditions`` holds (guards are not implied), None where none does."""
        key = (expr.to_isl(), *conditions)
        if key not in self._least_values:
            self._least_values[key] = self._least(key[0], self.iterations(*conditions))
        return self._least_values[key]

    def _least(self, expr: str, where: isl.Set) -> Optional[int]:
        if where.is_empty():
            return None
        names = ", ".join(self.loop_names)
        return isl.PwAff(f"{{ [{names}] -> [({expr})] }}").intersect_domain(where).min_val().to_python()

    def _scheduled(self, pairs: isl.Map) -> isl.Map:
        return pairs.apply_domain(self.isl_map).apply_range(self.isl_map)

    def _iteration(self, point_map: isl.Map) -> tuple[str, str]:
        """A concrete (source, sink) pair of iterations of a scheduled dependence map."""
        pair = point_map.sample()
        src = self.isl_map.reverse().intersect_domain(pair.domain()).range()
        dst = self.isl_map.reverse().intersect_domain(pair.range()).range()
        return _point(src.sample_point(), self.op.dim_names), _point(dst.sample_point(), self.op.dim_names)

    def reduction_order_violation(self) -> Optional[tuple[str, str]]:
        """A pair (earlier, later) of the reduction that this schedule runs in the opposite order."""
        scheduled = self._scheduled(self.op.dependences["flow"])
        backwards = scheduled.intersect(isl.Map.lex_ge(scheduled.get_space().domain()))
        return None if backwards.is_empty() else self._iteration(backwards)

    def carried_dependence(self, name: str) -> Optional[tuple[str, str]]:
        """A pair of iterations updating the same output element whose order is decided by
        loop ``name`` (a race if that loop ran in parallel)."""
        pos = self.position(name)
        scheduled = self._scheduled(self.op.conflicts)
        space = scheduled.get_space()
        carried = isl.Map.lex_lt_first(space, pos + 1).subtract(isl.Map.lex_lt_first(space, pos))
        hits = scheduled.intersect(carried)
        return None if hits.is_empty() else self._iteration(hits)

    # --- internal constructor ---------------------------------------------------------
    def _with(self, step: Step, **changes) -> "Schedule":
        new = replace(self, steps=self.steps + (step,), **changes)
        new._validate(step)
        return new

    def _validate(self, step: Step) -> None:
        vec = self.vector_loop
        if vec is not None and self.loops[-1].name != vec.name:
            raise ScheduleError(f"{step}: the vectorized loop {vec.name!r} must stay innermost "
                                f"(innermost would be {self.loops[-1].name!r})")
        self._check_parallel_outputs(step)
        self._check_bound(step)
        if self.stages:
            self._check_stages(step)
        if self.register_block_at is not None:
            self._check_register_block(step)
        if self.tensorized:
            self._check_tensorized(step)
        if self.op.quant is not None or not self.op.dtype.startswith("float"):
            return
        if not self.reassociate:
            violation = self.reduction_order_violation()
            if violation:
                raise IllegalScheduleError(
                    f"{step} violates the flow dependence of the reduction into "
                    f"{self.op.output}: iteration {violation[0]} must run before {violation[1]} "
                    f"but would run after it (pass reassociate=True to allow reordering the sum)")
        for loop in self.loops:
            if loop.vectorized and not self.reassociate:
                pair = self.carried_dependence(loop.name)
                if pair:
                    raise IllegalScheduleError(
                        f"{step}: vectorizing {loop.name!r} splits the reduction into "
                        f"{self.op.output} across lanes ({pair[0]} -> {pair[1]}), which reassociates "
                        f"the sum; pass reassociate=True to allow it")

    # --- primitives ---------------------------------------------------------------------
    def split(self, loop: str, factor: int) -> "Schedule":
        """Split ``loop`` into ``loop_o`` (outer) and ``loop_i`` (inner, extent ``factor``)."""
        step = Step("split", (loop, factor))
        split = self._split(step, loop, factor)
        return self._with(step, loops=split.loops, relations=split.relations)

    def tile(self, **factors: int) -> "Schedule":
        """Split each named loop; ``_o`` loops stay in place, ``_i`` loops go innermost in the given order."""
        step = Step("tile", (), tuple(factors.items()))
        if not factors:
            raise ScheduleError("tile: give at least one loop=factor, e.g. tile(ow=8, k=16)")
        split = self
        for name, factor in factors.items():
            split = split._split(step, name, factor)
        inner = [f"{name}_i" for name in factors]
        order = [loop for loop in split.loops if loop.name not in inner] + [split.loop(n) for n in inner]
        return self._with(step, loops=tuple(order), relations=split.relations)

    def _split(self, step: Step, name: str, factor: int) -> "Schedule":
        """The split of ``name`` as an unvalidated intermediate (no step recorded)."""
        target = self.loop(name, str(step))
        factor = _check_factor(factor, str(step), target, block_limit(target.extent))
        if target.vectorized:
            raise ScheduleError(f"{step}: {name!r} is vectorized; split it before vectorizing")
        if target.axis:
            raise ScheduleError(f"{step}: {name!r} is bound to {target.axis}; split it before binding")
        outer, inner = f"{name}_o", f"{name}_i"
        self._check_new_names(step, outer, inner)
        pos = self.position(name)
        new_loops = (Loop(outer, -(-target.extent // factor), parallel=target.parallel),
                     Loop(inner, factor, unroll=target.unroll))
        return replace(self, loops=self.loops[:pos] + new_loops + self.loops[pos + 1:],
                       relations=self.relations + (Split(name, outer, inner, factor, target.extent),))

    def reorder(self, *names: str) -> "Schedule":
        """Permute the named loops among the positions they occupy now."""
        step = Step("reorder", names)
        if len(names) < 2:
            raise ScheduleError(f"{step}: name at least two loops to reorder")
        for name in names:
            self.loop(name, str(step))
        if len(set(names)) != len(names):
            raise ScheduleError(f"{step}: a loop is named twice")
        slots = sorted(self.position(n) for n in names)
        loops = list(self.loops)
        for slot, name in zip(slots, names):
            loops[slot] = self.loop(name)
        return self._with(step, loops=tuple(loops))

    def fuse(self, outer: str, inner: str, name: Optional[str] = None) -> "Schedule":
        """Fuse ``outer`` and the loop directly inside it into one loop (default name ``outer_inner``)."""
        step = Step("fuse", (outer, inner) + ((name,) if name else ()))
        a, b = self.loop(outer, str(step)), self.loop(inner, str(step))
        pos = self.position(outer)
        if self.position(inner) != pos + 1:
            raise ScheduleError(f"{step}: {inner!r} must be directly inside {outer!r} "
                                f"(the order is {', '.join(self.loop_names)})")
        if a.vectorized or b.vectorized:
            raise ScheduleError(f"{step}: cannot fuse a vectorized loop")
        if a.axis or b.axis:
            raise ScheduleError(f"{step}: cannot fuse a loop bound to a GPU axis; fuse before binding")
        fused = name or f"{outer}_{inner}"
        self._check_new_names(step, fused)
        merged = Loop(fused, a.extent * b.extent, parallel=a.parallel)
        loops = self.loops[:pos] + (merged,) + self.loops[pos + 2:]
        relations = self.relations + (Fuse(outer, inner, fused, b.extent),)
        return self._with(step, loops=loops, relations=relations)

    def vectorize(self, loop: str) -> "Schedule":
        """Run the innermost loop ``loop`` in SIMD lanes (masked tail; gathers where strided)."""
        step = Step("vectorize", (loop,))
        self.loop(loop, str(step))
        if self.loops[-1].name != loop:
            raise ScheduleError(f"{step}: only the innermost loop can be vectorized; {loop!r} is not "
                                f"innermost (the innermost is {self.loops[-1].name!r}); reorder first")
        if self.vector_loop is not None and self.vector_loop.name != loop:
            raise ScheduleError(f"{step}: {self.vector_loop.name!r} is already vectorized")
        return self._annotate(step, loop, vectorized=True)

    def unroll(self, loop: str, factor: Optional[int] = None) -> "Schedule":
        """Unroll ``loop`` fully (default) or by ``factor``."""
        step = Step("unroll", (loop,) + ((factor,) if factor is not None else ()))
        target = self.loop(loop, str(step))
        factor = target.extent if factor is None else _check_factor(factor, str(step), target, target.extent)
        return self._annotate(step, loop, unroll=factor)

    def parallel(self, loop: str) -> "Schedule":
        """Run ``loop``'s iterations on threads (OpenMP); refused if it carries a dependence."""
        step = Step("parallel", (loop,))
        self.loop(loop, str(step))
        current = self.parallel_loop
        if current is not None and current.name != loop:
            raise ScheduleError(f"{step}: {current.name!r} is already parallel; fuse loops to "
                                f"parallelize over more than one")
        self._refuse_race(step, loop, "threads")
        return self._annotate(step, loop, parallel=True)

    def _refuse_race(self, step: Step, loop: str, workers: str) -> None:
        """IllegalScheduleError naming two iterations of ``loop`` that update one output element, if
        it carries the reduction (running them on different ``workers`` would race)."""
        race = self.carried_dependence(loop)
        if race:
            raise IllegalScheduleError(
                f"{step}: loop {loop!r} carries the flow dependence of the reduction into "
                f"{self.op.output}: iterations {race[0]} and {race[1]} update the same element, so "
                f"running them on different {workers} would race")

    def bind(self, loop: str, axis: str) -> "Schedule":
        """Run ``loop``'s iterations across a GPU axis (``block.x|y|z``: one block each,
        ``thread.x|y|z``: one thread of the block each, ``warp.x|y``: one warp of 32 threads each, for
        ``tensorize`` or, without it, the cuda GEMV kernels), on a GPU target. Refused for a loop that
        carries the reduction (its iterations update the same outputs: threads would race), for an
        axis already taken, and where an axis's extent or the threads of a block exceed CUDA's
        limits (``AXIS_LIMITS``, ``MAX_THREADS_PER_BLOCK``)."""
        step = Step("bind", (loop, axis))
        bound = self.loop(loop, str(step))
        if axis not in AXIS_LIMITS:
            raise ScheduleError(f"{step}: {axis!r} is not a GPU axis; choose one of "
                                f"{', '.join(map(repr, GPU_AXES))}")
        holder = next((other for other in self.bound_loops if other.axis == axis), None)
        if holder is not None and holder.name != loop:
            raise ScheduleError(f"{step}: {axis} is already bound to loop {holder.name!r}")
        if bound.axis and bound.axis != axis:
            raise ScheduleError(f"{step}: loop {loop!r} is already bound to {bound.axis}")
        self._refuse_race(step, loop, "GPU threads")
        return self._annotate(step, loop, axis=axis)

    def stage(self, tensor: str, at: str, stages: Optional[int] = None,
              engine: str = "threads") -> "Schedule":
        """Copy the box of input ``tensor`` that a block reads inside loop ``at`` (over the loops inside
        ``at`` and the thread loops; ``staged_box``) into GPU shared memory at each iteration of ``at``,
        by all the block's threads, zero where the box leaves the tensor (padding); the reads inside
        ``at`` then come from there. ``stages`` (tensorized schedules, 2 or more, as many as the
        target's shared memory holds; 3 when not given): the copies of one iteration of ``at`` go into a
        ring of that many buffers, ``stages - 1`` iterations ahead of the products. ``engine``
        (``STAGE_ENGINES``): ``"threads"``
        (``cp.async``) or ``"tma"``, the tensor memory accelerator (a ``wgmma`` kernel's operand that is
        a 2-D tensor, or a conv's whose tiles are boxes of output pixels; the cuda target refuses it
        elsewhere with the reason). Refused for a tensor that
        is not an input or is staged already, stages at different loops or of different depths, a bound
        loop inside ``at``, an index not affine in the loops inside (a fused loop there), and boxes over
        ``MAX_SHARED_BYTES`` together."""
        if engine == "threads":
            step = Step("stage", (tensor, at) + ((stages,) if stages is not None else ()))
        else:
            step = Step("stage", (), (("tensor", tensor), ("at", at))
                        + ((("stages", stages),) if stages is not None else ()) + (("engine", engine),))
        self.loop(at, str(step))
        if engine not in STAGE_ENGINES:
            raise ScheduleError(f"{step}: engine={engine!r}; choose one of "
                                f"{', '.join(map(repr, STAGE_ENGINES))}")
        if stages is not None and (isinstance(stages, bool) or not isinstance(stages, int) or stages < 2):
            raise ScheduleError(f"{step}: stages={stages!r}; a ring has 2 or more buffers (as many as the "
                                f"target's shared memory holds)")
        if stages is not None and self.pipeline_stages not in (None, stages):
            raise ScheduleError(f"{step}: the tensors staged already have stages={self.pipeline_stages}; "
                                f"stage every input with the same depth")
        if tensor not in self.op.inputs:
            raise ScheduleError(f"{step}: only the inputs are staged; choose one of "
                                f"{', '.join(self.op.inputs)}")
        if any(staged == tensor for staged, _ in self.stages):
            raise ScheduleError(f"{step}: {tensor} is staged already")
        return self._with(step, stages=self.stages + ((tensor, at),),
                          pipeline_stages=self.pipeline_stages if stages is None else stages,
                          tma_staged=self.tma_staged + ((tensor,) if engine == "tma" else ()))

    def clip(self, low: Optional[float] = None, high: Optional[float] = None) -> "Schedule":
        """Clip each output to ``[low, high]`` (after the bias, a Gemm's scales and the residual) in the
        kernel's store: a fused activation (ReLU: ``clip(low=0.0)``; ReLU6: ``clip(0.0, 6.0)``). The
        kernel then computes ``activation.Clip(low, high).apply(op.reference(...))``. Float kernels
        fuse it: the CPU SIMD emitter and the cuda target's tensor-core kernels (refused there with
        ``split_k``: a clip needs each output's whole sum); refused by the quantized families and the
        SIMT kernels; ValueError for bad bounds."""
        epilogue = Clip(low, high)
        step = Step("clip", (), tuple(epilogue.bounds.items()))
        if self.epilogue is not None:
            raise ScheduleError(f"{step}: the outputs are clipped already ({self.epilogue}); clip once")
        return self._with(step, epilogue=epilogue)

    def prefetch(self, tensor: str, ahead: int) -> "Schedule":
        """Prefetch input ``tensor`` ``ahead`` elements past where each iteration of the register block's
        reduction reads it (one ``__builtin_prefetch`` into L1 per cache line that iteration's loads of it
        span): a weight-heavy conv's or GEMM's packed weights, read in memory order, arrive from
        beyond L2 on the block's first pass faster than the hardware prefetchers bring them. The CPU SIMD
        emitter prints it where the register block reads ``tensor`` at constant distances from one base
        (a float operand loaded as vectors or broadcasts) and refuses it elsewhere; the results do not
        change (a prefetch reads nothing into registers and never faults)."""
        step = Step("prefetch", (tensor, ahead))
        if tensor not in self.op.inputs:
            raise ScheduleError(f"{step}: {tensor!r} is not an input of the op; prefetch one of "
                                f"{', '.join(self.op.inputs)}")
        if isinstance(ahead, bool) or not isinstance(ahead, int) or not 0 < ahead <= MAX_PREFETCH_AHEAD:
            raise ScheduleError(f"{step}: ahead must be a number of elements from 1 to {MAX_PREFETCH_AHEAD}, "
                                f"got {ahead!r}")
        if self.register_block_at is None:
            raise ScheduleError(f"{step}: a prefetch runs in a register block's reduction; call "
                                f"register_block first")
        if any(name == tensor for name, _ in self.prefetched):
            raise ScheduleError(f"{step}: {tensor} is prefetched already; prefetch it once")
        return self._with(step, prefetched=self.prefetched + ((tensor, ahead),))

    def add_residual(self) -> "Schedule":
        """Add a second tensor of the output's shape to each output once its sum is complete, before
        the store (and before ``clip``): ``out = clip(op.reference(...) + residual)``, a ResNet block's
        shortcut. The kernel takes the residual as one more array after the op's inputs and bias, in
        the output's layout (``epilogue.RESIDUAL``). Float kernels of the CPU SIMD emitter and the cuda
        target's tensor-core kernels fuse it (refused there with ``split_k``); refused by the quantized
        families and the SIMT kernels."""
        step = Step("add_residual", ())
        if self.residual:
            raise ScheduleError(f"{step}: the residual is added already; add it once")
        if self.epilogue is not None:
            raise ScheduleError(f"{step}: the outputs are clipped already ({self.epilogue}), and the "
                                f"residual is added before the clip: add_residual() first, then clip")
        return self._with(step, residual=True)

    def clip_quantized(self, low: Optional[float] = None, high: Optional[float] = None) -> "Schedule":
        """Requantized outputs, then a quantized activation in the kernel's store: each output ``y`` is
        dequantized (``(y - y_zero_point) * y_scale``), clipped to ``[low, high]`` and quantized again
        with the call's ``clip_scale=`` and ``clip_zero_point=`` (``saturate(rint(v / clip_scale) +
        clip_zero_point)``), each step one float32 rounding as ONNX's DequantizeLinear -> Clip ->
        QuantizeLinear after a QLinearConv (a ReLU6 whose output has a scale of its own;
        ``quant.clip_requantized`` is the reference). Requantized outputs only; the families
        whose epilogue is not ``codegen.quantized``'s refuse it when the kernel is built."""
        clip = Clip(low, high)
        step = Step("clip_quantized", (), tuple(clip.bounds.items()))
        quant = self.op.quant
        if quant is None or not quant.requantized:
            outputs = "float32" if quant is None else quant.output
            raise ScheduleError(f"{step}: it clips requantized 8-bit outputs; {self.op!r} has {outputs} "
                                "outputs (float outputs: clip)")
        if self.requantized_clip is not None:
            raise ScheduleError(f"{step}: the outputs are clipped already ({self.requantized_clip}); "
                                "clip once")
        return self._with(step, requantized_clip=clip)

    def cluster(self, x: int, y: int) -> "Schedule":
        """Launch the blocks in clusters of ``x`` blocks along ``block.x`` by ``y`` along ``block.y``
        (``sm_90``): the blocks of a cluster share the tiles of the input that does not move along the
        cluster's axis, each copying ``1/size`` of them with TMA multicast into every block's shared
        memory. One axis of 2, 4 or 8 blocks; the cuda target refuses it where no TMA-staged input is
        shared or the grid does not split into whole clusters."""
        step = Step("cluster", (x, y))
        sizes = (x, y)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in sizes) \
                or sorted(sizes)[0] != 1 or max(sizes) not in (2, 4, MAX_CLUSTER_BLOCKS):
            raise ScheduleError(f"{step}: cluster sizes {x!r} x {y!r}; one axis of 2, 4 or "
                                f"{MAX_CLUSTER_BLOCKS} blocks and the other 1")
        axis = "block.x" if x > 1 else "block.y"
        if not any(loop.axis == axis for loop in self.bound_loops):
            raise ScheduleError(f"{step}: no loop is bound to {axis}, the cluster's axis; "
                                f"bind(loop, {axis!r}) first")
        if self.cluster_dims != (1, 1):
            raise ScheduleError(f"{step}: the blocks are clustered already ({self.cluster_dims[0]} x "
                                f"{self.cluster_dims[1]}); cluster once")
        return self._with(step, cluster_dims=(x, y))

    def swizzle(self, width: int) -> "Schedule":
        """Lay the staged tiles out in the ``width``-byte swizzle (32, 64 or 128; 32 by default): each row
        of a tile holds a whole pipeline step's ``width`` bytes of the reduction (its wgmma k-slices 32
        bytes apart), so TMA copies one box a tile a step, ``width`` bytes a row, instead of one a
        k-slice of 32 bytes. The cuda target refuses it unless a wgmma entry multiplies, TMA copies both
        inputs and a step's depth is at most ``width`` bytes (a shallower step's boxes read the row's
        rest, which its products skip)."""
        step = Step("swizzle", (width,))
        if isinstance(width, bool) or width not in SWIZZLE_WIDTHS:
            raise ScheduleError(f"{step}: width={width!r}; choose one of "
                                f"{', '.join(map(str, SWIZZLE_WIDTHS))} bytes")
        return self._with(step, tile_swizzle=width)

    def specialize(self) -> "Schedule":
        """Warp specialization (``sm_90a``): one more warpgroup, the *producer*, only issues the copies
        of the staged tiles into the ring of buffers, refilling a buffer once its *empty* mbarrier says
        every consumer released it; the ``warp.*`` warpgroups, the *consumers*, only wait on a buffer's
        *full* mbarrier, multiply, and release the buffer once their products of it retired;
        ``setmaxnreg`` moves registers from the producer to the consumers. The cuda target refuses it
        unless a wgmma entry multiplies and TMA copies both inputs (``stage(engine="tma")``), and with
        ``cluster``."""
        step = Step("specialize", ())
        if self.specialized:
            raise ScheduleError(f"{step}: the warps are specialized already; specialize once")
        return self._with(step, specialized=True)

    def persistent(self) -> "Schedule":
        """A persistent tile loop: the kernel launches one block a multiprocessor (at most one a tile),
        each walking the output tiles (the iterations of the ``block.*`` loops, ``block.x`` fastest) from
        its own index in strides of the grid; the producer warpgroup of a specialized kernel copies the
        next tile's first steps while the consumers store the last one's outputs (staged for TMA's
        stores, or from their registers); in clusters (``cluster``) each cluster walks the tiles the
        cluster's blocks take together. The cuda target refuses it unless the warps are specialized
        (``specialize``)."""
        step = Step("persistent", ())
        if self.persistent_tiles:
            raise ScheduleError(f"{step}: the tile loop is persistent already; persistent once")
        return self._with(step, persistent_tiles=True)

    def halves(self, steps: int) -> "Schedule":
        """Multiply the last ``steps`` pipeline steps in halves of the instruction's columns, the left
        half's first, so that the left half's outputs are staged and stored while the right half's
        remaining products run: a one-wave kernel's output drain, which otherwise follows its last
        product with the tensor cores idle, partly hidden. The cuda target refuses it unless an
        unspecialized, unclustered TMA kernel on a wgmma entry whose N halves to another entry stores its
        output by TMA, and ``steps`` <= stages - 1 (``targets/cuda/halves.py``)."""
        step = Step("halves", (steps,))
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ScheduleError(f"{step}: steps={steps!r}; a positive number of the last pipeline steps")
        if self.halves_steps:
            raise ScheduleError(f"{step}: the last {self.halves_steps} steps are in halves already; "
                                f"halves once")
        return self._with(step, halves_steps=steps)

    @property
    def fused_epilogue(self) -> Optional[Epilogue]:
        """What the kernel applies to each output before its store (``add_residual``, ``clip``), or None."""
        if self.epilogue is None and not self.residual:
            return None
        return Epilogue(self.epilogue, self.residual)

    def refuse_epilogue(self, family: str, reason: str) -> None:
        """ScheduleError naming ``family`` and ``reason`` where this schedule fuses an epilogue (a kernel
        family that has none)."""
        if self.fused_epilogue is not None:
            raise ScheduleError(f"{family} kernels fuse no epilogue ({self.fused_epilogue}): {reason}; "
                                f"leave out clip/add_residual and apply it after the kernel")

    def split_k(self, loop: str, reduce: str = "atomic") -> "Schedule":
        """Split-K: run the iterations of ``loop``, a loop over the reduction, across ``block.z``; each block
        sums its share of the reduction and adds it to the outputs with ``atomicAdd`` (the output is zeroed
        before the launch; the bias and a Gemm's ``beta * C`` come with the first share); with
        ``reduce="last"`` it writes its share to a workspace and the tile's last block adds the shares in
        split order and stores the outputs (a 16-bit output, a fused epilogue:
        ``targets/cuda/split_reduce.py``). For the shapes whose output tiles alone launch too few blocks to
        fill the GPU (split the reduction loop first: ``split(loop, factor)``, then ``split_k`` the outer
        part). Refused for a loop over outputs (``bind`` it to a block axis), a loop bound already, and a
        taken ``block.z``."""
        step = Step("split_k", (loop,) if reduce == "atomic" else (loop, reduce))
        if reduce not in ("atomic", "last"):
            raise ScheduleError(f"{step}: reduce={reduce!r}; allowed 'atomic' (atomicAdd into the output) or "
                                f"'last' (the tile's last block adds the shares)")
        bound = self.loop(loop, str(step))
        if not self._reduction_dims_over(loop) or self.dims_of(loop) - self.op.reduction_dims:
            dims = ", ".join(sorted(self.dims_of(loop)))
            raise ScheduleError(f"{step}: loop {loop!r} (dims {dims}) must run over the reduction only; "
                                f"bind a loop over outputs to a block axis")
        if bound.axis:
            raise ScheduleError(f"{step}: loop {loop!r} is already bound to {bound.axis}")
        holder = next((other for other in self.bound_loops if other.axis == "block.z"), None)
        if holder is not None:
            raise ScheduleError(f"{step}: block.z is already bound to loop {holder.name!r}")
        return replace(self, split_k_loop=loop, split_reduce=reduce)._annotate(step, loop, axis="block.z")

    def tensorize(self, i: str, j: str, k: str, instruction: str) -> "Schedule":
        """Run the three innermost loops ``i, j, k`` (in this order) as one warp-wide matrix
        instruction of the cuda target's table (``targets/cuda/instructions.py``): ``out[i, j] +=
        a[i, k] * b[k, j]`` on fragments of ``m x n x k`` elements. ``i`` and ``j`` run over outputs
        only, ``k`` over the reduction only; one input (``a``) varies with ``i`` and ``k``, the other
        with ``j`` and ``k``, the output with ``i`` and ``j``. The loops' extents are the fragment's
        (split a loop by it; partial tiles are zero-filled by the guards). The kernel takes each
        input's tiles from shared memory (``stage`` both inputs at one reduction loop) and runs one
        warp per bound ``warp.x|y`` iteration."""
        step = Step("tensorize", (i, j, k, instruction))
        entry = matrix_instruction(instruction, str(step))
        for name, size, role in ((i, entry.m, "m"), (j, entry.n, "n"), (k, entry.k, "k")):
            extent = self.loop(name, str(step)).extent
            if extent != size:
                raise ScheduleError(f"{step}: loop {name!r} has {extent} iterations; {instruction}'s "
                                    f"{role} is {size} (split the loop by {size}: a partial last tile is "
                                    f"zero-filled)")
        tensorized = self._with(step, tensorized=(i, j, k, instruction))
        given = tuple(tensorized.operand_dtype(t) for t in tensorized.tensor_roles())
        if given != entry.operands:
            a, b = entry.operands
            raise ScheduleError(f"{step}: {instruction} multiplies {a} (the input moving with {i}) by {b}; "
                                f"{self.op!r} gives {given[0]} by {given[1]} (build the op with the dtype or "
                                f"QuantSpec it takes, or pick the entry of its types)")
        return tensorized

    def operand_dtype(self, tensor: str) -> str:
        """The element type input ``tensor`` is multiplied in: the op's dtype, or a quantized op's
        stored integers (``QuantSpec.activation_dtype`` for the first input, ``weight_dtype`` for the
        second: ternary and binary values are int8)."""
        if self.op.quant is None:
            return self.op.dtype
        quant = self.op.quant
        return (quant.activation_dtype if tensor == self.op.inputs[0] else quant.weight_dtype).name

    def tensor_roles(self) -> tuple[str, str]:
        """The inputs of a tensorized schedule as (a, b): ``a`` varies with ``i``, ``b`` with ``j``."""
        i, j = self.tensorized[:2]
        first, second = self.op.inputs
        return (first, second) if i in self.offset(first).variables() else (second, first)

    def _check_tensorized(self, step: Step) -> None:
        i, j, k, instruction = self.tensorized
        names = self.loop_names
        if any(name not in names for name in (i, j, k)) or names[-3:] != (i, j, k):
            raise ScheduleError(f"{step}: the loops tensorized onto {instruction} ({i}, {j}, {k}) must "
                                f"stay the three innermost, in that order (innermost now: "
                                f"{', '.join(names[-3:])})")
        reduction = self.op.reduction_dims
        for name, over_reduction in ((i, False), (j, False), (k, True)):
            loop = self.loop(name)
            if loop.axis or loop.vectorized or loop.parallel or loop.unroll:
                raise ScheduleError(f"{step}: the tensorized loop {name!r} takes no other annotation")
            if bool(self.dims_of(name) & reduction) != over_reduction or (
                    over_reduction and self.dims_of(name) - reduction):
                kind = "the reduction only" if over_reduction else "outputs only"
                dims = ", ".join(sorted(self.dims_of(name)))
                raise ScheduleError(f"{step}: loop {name!r} (dims {dims}) must "
                                    f"run over {kind} as {instruction}'s {'k' if over_reduction else 'm/n'}")
        reads = {t: self.offset(t).variables() for t in self.op.inputs}
        first, second = self.op.inputs
        roles = [(a, b) for a, b in ((first, second), (second, first))
                 if {i, k} <= reads[a] and j not in reads[a] and {j, k} <= reads[b] and i not in reads[b]]
        written = self.offset(self.op.output).variables()
        if not roles or not {i, j} <= written or k in written:
            raise ScheduleError(f"{step}: {i}, {j}, {k} are not a matrix product: one input must vary with "
                                f"{i} and {k} (not {j}), the other with {j} and {k} (not {i}), the output "
                                f"with {i} and {j} (not {k})")

    def staged_box(self, tensor: str, at: str) -> StagedBox:
        """The box of ``tensor``'s logical index read over the thread loops and the loops inside
        ``at`` (``stage``), the other loops fixed; ScheduleError where an index is not affine in them."""
        inside = {loop.name: loop.extent for loop in self.loops[self.position(at) + 1:]}
        inside |= {loop.name: loop.extent for loop in self.bound_loops if loop.axis.startswith("thread.")}
        lower, sizes = [], []
        for axis, expr in enumerate(self.index(tensor)):
            try:
                terms, rest = linear_terms(expr, frozenset(inside))
            except ValueError as err:
                raise ScheduleError(f"stage({tensor!r}, {at!r}): axis {axis} of {tensor} is not affine in "
                                    f"the loops inside the stage ({err}); stage at a loop inside") from None
            low = sum((c * (inside[n] - 1) for n, c in terms.items() if c < 0), 0)
            lower.append(rest + Const(low) if low else rest)
            sizes.append(1 + sum(abs(c) * (inside[n] - 1) for n, c in terms.items()))
        return StagedBox(tensor, at, tuple(lower), tuple(sizes))

    def refuse_gpu_steps(self, target: str, float16: bool = False) -> None:
        """ScheduleError where this schedule binds loops to GPU axes, stages tensors in shared memory,
        maps loops onto a matrix instruction or multiplies float16 (unless ``float16``: the target
        widens it), which the CPU target ``target`` has not (such a schedule compiles with
        target='cuda')."""
        if self.op.dtype == "float16" and not float16:
            raise ScheduleError(f"{self.op!r} multiplies float16, which the {target} target has no kernels "
                                f"for: compile it with target='cuda' (tensor cores: tensorize), or use "
                                f"dtype='float32' or 'bfloat16'")
        if self.op.out_dtype != "float32":
            raise ScheduleError(f"{self.op!r} writes {self.op.out_dtype} outputs, which the {target} target "
                                f"has no kernels for: compile it with target='cuda' (tensor cores: "
                                f"tensorize), or use out_dtype='float32'")
        if self.tensorized:
            raise ScheduleError(f"loops {', '.join(self.tensorized[:3])} are tensorized onto "
                                f"{self.tensorized[3]}, a GPU instruction; the {target} target has none: "
                                f"compile with target='cuda'")
        if self.bound_loops:
            loop = self.bound_loops[0]
            raise ScheduleError(f"loop {loop.name!r} is bound to the GPU axis {loop.axis}; the {target} "
                                f"target has no GPU axes: compile with target='cuda'")
        if self.stages:
            raise ScheduleError(f"{self.stages[0][0]} is staged in GPU shared memory; the {target} target "
                                f"has none: compile with target='cuda'")

    def _check_stages(self, step: Step) -> None:
        ats = {at for _, at in self.stages}
        for at in ats:
            if at not in self.loop_names:
                raise ScheduleError(f"{step}: a tensor is staged at loop {at!r}, which no longer exists "
                                    f"(split or fuse it before stage)")
        if len(ats) > 1:
            raise ScheduleError(f"{step}: the tensors are staged at different loops "
                                f"({', '.join(sorted(ats))}); stage them at one")
        at = next(iter(ats))
        inside = [loop for loop in self.loops[self.position(at):] if loop.axis]
        if inside:
            raise ScheduleError(f"{step}: the loop {inside[0].name!r} bound to {inside[0].axis} lies inside "
                                f"the stage at {at!r}; stage at a loop inside every bound loop")
        if self.tensorized:
            return      # tiles gathered per iteration (any index): the cuda printer sizes them
        total = sum(4 * self.staged_box(tensor, at).elements for tensor, _ in self.stages)
        if total > MAX_SHARED_BYTES:
            boxes = ", ".join(f"{t} {' x '.join(map(str, self.staged_box(t, at).sizes))}"
                              for t, _ in self.stages)
            raise ScheduleError(f"{step}: the staged boxes ({boxes}) take {total} bytes of shared memory; at "
                                f"most {MAX_SHARED_BYTES} per block (stage at an inner loop or tile smaller)")

    def layout(self, tensor: str, tag: str) -> "Schedule":
        """Store ``tensor`` in the layout of oneDNN format ``tag`` (e.g. NHWC, NCHW16c, OIHW16i16o)."""
        step = Step("layout", (tensor, tag))
        if tensor not in self.op.tensors:
            raise ScheduleError(f"{step}: {self.op.__class__.__name__} has no tensor {tensor!r} "
                                f"with a layout; choose one of {', '.join(self.op.tensors)}")
        if not isinstance(tag, str):
            raise ScheduleError(f"{step}: the layout must be a format tag string")
        try:
            Layout.parse(tag, self.op.tensor(tensor).letters, tensor)
        except ValueError as err:
            raise ScheduleError(f"{step}: {err}") from None
        layouts = tuple((t, tag if t == tensor else old) for t, old in self.layouts)
        return self._with(step, layouts=layouts)

    def register_block(self, at: str) -> "Schedule":
        """Keep the block of outputs updated inside loop ``at`` in registers across it.

        From ``at`` inward the reduction loops (the output does not depend on them) come
        first and the block loops (it does) innermost. The block loops are unrolled
        completely, one accumulator per output vector, loaded (or set to the bias when the
        block sees the whole reduction) before ``at`` and stored after it; loads shared by
        unrolled copies are issued once. The vectorized loop is either a block loop or the
        innermost reduction loop (then each accumulator sums lanes, added up when stored).
        """
        step = Step("register_block", (at,))
        self.loop(at, str(step))
        return self._with(step, register_block_at=at)

    def block_loops(self) -> tuple[list[str], list[str]]:
        """(reduction loops, block loops) from the register block's ``at`` inward."""
        start = self.position(self.register_block_at)
        varying = self.offset(self.op.output).variables()
        inner = self.loops[start:]
        return ([loop.name for loop in inner if loop.name not in varying],
                [loop.name for loop in inner if loop.name in varying])

    def block_holds_final_outputs(self) -> bool:
        """True iff the register block writes every output's final value: no loop outside it
        runs over a reduction dim (its accumulators start from the bias and end as complete
        sums) and no op guard outside it skips an output (one whose taps are all padding)."""
        return self.block_first_pass() == ()

    def block_first_pass(self) -> Optional[tuple[str, ...]]:
        """The loops outside the register block that run over reduction dims (a cache block's outer
        loop), if the block visits every output first where they are all 0, so starting its
        accumulators from the bias there (not loading the output) sets every output: each of them
        runs over reduction dims only and no op guard outside the block skips an output. None
        otherwise; () when the block holds final outputs (``block_holds_final_outputs``)."""
        outside = self.loop_names[:self.position(self.register_block_at)]
        reduction = self.op.reduction_dims
        loops = tuple(name for name in outside if self.dims_of(name) & reduction)
        skipping = any(g.expr.variables() <= set(outside) and dims & reduction
                       for g, dims in zip(self.guards, self.guard_dims))
        if skipping or any(not self.dims_of(name) <= reduction for name in loops):
            return None
        return loops

    def _check_parallel_outputs(self, step: Step) -> None:
        """A parallel loop is not the vector loop, and it runs over outputs only. Where it also runs
        over a reduction dim, isl may see no two threads updating one output (padding guards leave
        one valid iteration), yet the kernel reads and writes an output outside those guards (a
        vector loop's lane sum, a register block's accumulators), so threads would race on it."""
        par = self.parallel_loop
        if par is None:
            return
        if par.vectorized:
            raise ScheduleError(f"{step}: loop {par.name!r} would be both parallel and vectorized; split it, "
                                f"parallelize the outer part and vectorize the inner one")
        summed = self._reduction_dims_over(par.name)
        if summed:
            raise IllegalScheduleError(
                f"{step}: the parallel loop {par.name!r} runs over the reduction dim(s) {', '.join(summed)}: "
                f"threads would race on the outputs the kernel reads and writes around its guarded "
                f"updates; parallelize a loop over outputs only")

    def _reduction_dims_over(self, loop: str) -> list[str]:
        """The reduction dims whose value loop ``loop`` takes part in, sorted (threads or GPU threads
        over such a loop would race on the outputs)."""
        return sorted(d for d in self.op.reduction_dims if loop in self.dim_values[d].variables())

    def _check_bound(self, step: Step) -> None:
        """A bound loop is not vectorized or parallel (CPU annotations), runs over outputs only (as
        a parallel loop), and every axis and the threads of a block stay within CUDA's limits."""
        threads = 1
        for loop in self.bound_loops:
            if loop.vectorized or loop.parallel:
                kind = "vectorized" if loop.vectorized else "parallel"
                raise ScheduleError(f"{step}: loop {loop.name!r} is bound to {loop.axis} and {kind}; a "
                                    f"bound loop takes no CPU annotation")
            summed = self._reduction_dims_over(loop.name)
            if summed and loop.name != self.split_k_loop:
                raise IllegalScheduleError(
                    f"{step}: the loop {loop.name!r} bound to {loop.axis} runs over the reduction dim(s) "
                    f"{', '.join(summed)}: GPU threads would race on the outputs they add to; bind a "
                    f"loop over outputs only")
            if loop.extent > AXIS_LIMITS[loop.axis]:
                raise ScheduleError(f"{step}: loop {loop.name!r} bound to {loop.axis} has {loop.extent} "
                                    f"iterations; CUDA allows at most {AXIS_LIMITS[loop.axis]} on that axis "
                                    f"(split it and bind the parts to two axes)")
            threads *= 1 if loop.axis.startswith("block.") else loop.extent
        if any(loop.axis.startswith("warp.") for loop in self.bound_loops):
            threads *= WARP_SIZE
        if threads > MAX_THREADS_PER_BLOCK:
            sizes = " x ".join(f"{loop.name}[{loop.extent}]"
                               + (" warps" if loop.axis.startswith("warp.") else "")
                               for loop in self.bound_loops if not loop.axis.startswith("block."))
            raise ScheduleError(f"{step}: a block would have {threads} threads ({sizes}); CUDA allows at "
                                f"most {MAX_THREADS_PER_BLOCK} per block (bind smaller loops to thread axes)")

    def _check_register_block(self, step: Step) -> None:
        at = self.register_block_at
        if at not in self.loop_names:
            raise ScheduleError(f"{step}: the register block is at loop {at!r}, which no longer exists "
                                f"(split or fuse it before register_block)")
        start = self.position(at)
        if any(loop.parallel for loop in self.loops[start:]):
            raise ScheduleError(f"{step}: the parallel loop {self.parallel_loop.name!r} lies inside the "
                                f"register block at {at!r}; parallelize a loop outside it")
        inside = [loop.name for loop in self.loops[start:] if loop.axis]
        if inside:
            raise ScheduleError(f"{step}: the loop {inside[0]!r} bound to a GPU axis lies inside the "
                                f"register block at {at!r}; bind loops outside it")
        reduction, block = self.block_loops()
        scalar_reduction = [n for n in reduction if not self.loop(n).vectorized]
        if block and scalar_reduction and self.position(scalar_reduction[-1]) > self.position(block[0]):
            raise ScheduleError(
                f"{step}: the reduction loop {scalar_reduction[-1]!r} lies inside the block loop "
                f"{block[0]!r}; from {at!r} inward the reduction loops must come first and the block "
                f"loops ({', '.join(block)}) innermost (reorder first)")
        aliased = self._block_aliasing(block)
        if aliased:
            raise ScheduleError(
                f"{step}: two iterations of the block loops ({', '.join(block)}) update the same "
                f"output element ({aliased}); a block loop must move the output at every step, so a "
                f"loop that mixes output positions with the reduction (e.g. a fused i_j_k) cannot be "
                f"in a register block")
        count = 1
        for name in block:
            count *= self.loop(name).extent
        if count > MAX_BLOCK_ELEMENTS:
            raise ScheduleError(f"{step}: the register block holds {count} output elements "
                                f"({' x '.join(f'{n}[{self.loop(n).extent}]' for n in block)}); at most "
                                f"{MAX_BLOCK_ELEMENTS} are unrolled into accumulators")

    def compensation(self, where: str) -> "Schedule":
        """Where a quantized kernel's zero-point compensation terms are computed.

        ``"packed"`` (default): the weight-side terms (per output channel, and per border
        class of output positions whose set of valid taps differs) are computed when the
        weights are packed, outside the timed run. ``"kernel"``: the kernel computes them
        from the weights on every run. Activation sums (needed by asymmetric weights) are
        always computed in the kernel.
        """
        step = Step("compensation", (where,))
        self._check_quant_choice(step, where, COMPENSATIONS)
        return self._with(step, compensation_mode=where)

    def arithmetic(self, kind: str) -> "Schedule":
        """How a quantized op accumulates: ``"integer"`` (default: exact int32, products of the
        stored integers, VNNI where the schedule allows) or ``"dequantize"`` (the naive
        design: weights and activations converted to float32 inside the loop, summed in float;
        float32 output only)."""
        step = Step("arithmetic", (kind,))
        self._check_quant_choice(step, kind, ARITHMETICS)
        if kind == "dequantize" and not self.op.quant.dequantized:
            raise ScheduleError(f"{step}: dequantize-on-the-fly accumulates in float and produces a "
                                f"float32 output; this op's output is {self.op.quant.output!r} "
                                f"(use QuantSpec(output='float32'))")
        return self._with(step, arithmetic_mode=kind)

    def weight_format(self, fmt: str) -> "Schedule":
        """How quantized weights are stored: ``"int8"`` (default, one byte per weight), ``"s16"`` (each
        weight widened to int16 by ``prepare``, a dot group's pairs interleaved for AVX2's emulated dot:
        ``codegen/wide.py``), or, for ternary weights (``QuantSpec(weight="ternary")``), ``"i2_s"`` (2
        bits per weight, packed by ``prepare`` in the weights' storage order and unpacked in registers
        by the kernel), ``"tl1"`` (4-bit indices of weight pairs into tables of activation sums per
        pixel, a table-lookup kernel under the schedule's splits, order and register block) or
        ``"tl2"`` (the same with triples: a 4-bit index and a sign bit per 3 weights); see
        docs/reference/quant.md."""
        step = Step("weight_format", (fmt,))
        self._check_quant_choice(step, fmt, WEIGHT_FORMATS)
        if fmt in ("int8", "s16"):
            return self._with(step, weight_format_mode=fmt)
        if not self.op.quant.ternary:
            raise ScheduleError(f"{step}: the 2-bit formats store ternary weights (-1, 0, +1); this op's "
                                f"weights are {self.op.quant.weight!r} (use QuantSpec(weight='ternary'))")
        return self._with(step, weight_format_mode=fmt)

    def _check_quant_choice(self, step: Step, value: Any, allowed: tuple[str, ...]) -> None:
        if self.op.quant is None:
            raise ScheduleError(f"{step}: the op is not quantized (pass quant=lo.QuantSpec(...) to it)")
        if value not in allowed:
            choices = ", ".join(map(repr, allowed))
            raise ScheduleError(f"{step}: {value!r} is not a choice; allowed: {choices}")

    def _block_aliasing(self, block: list[str]) -> Optional[str]:
        """A pair of distinct block positions with the same output element (None if injective).

        Only the guards over output dims count (they decide which accumulators exist): a guard over
        a reduction dim (a padding tap) leaves the accumulator in place, so two block positions that
        meet the same element under different taps would both store it."""
        if not block:
            return None
        names = list(self.loop_names)
        primed = {n: Var(n + "_2") for n in block}
        offset = self.offset(self.op.output)
        guards = [g for g, dims in zip(self.guards, self.guard_dims) if not dims & self.op.reduction_dims]
        box = box_constraints(self.loops) + [g.to_isl() for g in guards]
        box += box_constraints((self.loop(n) for n in block), suffix="_2")
        box += [Bound(g.expr.substitute(primed), g.lower, g.upper).to_isl() for g in guards]
        differ = " or ".join(f"{n} != {n}_2" for n in block)
        text = (f"{{ [{', '.join(names + [n + '_2' for n in block])}] : {' and '.join(box)} and "
                f"({differ}) and {offset.to_isl()} = {offset.substitute(primed).to_isl()} }}")
        point = _sample(text)
        if point is None:
            return None
        values = [point[names.index(n)] for n in block]
        twins = point[len(names):]
        return (", ".join(f"{n}={v}" for n, v in zip(block, values)) + " and " +
                ", ".join(f"{n}={v}" for n, v in zip(block, twins)))

    def _annotate(self, step: Step, name: str, **annotations) -> "Schedule":
        loops = tuple(replace(loop, **annotations) if loop.name == name else loop for loop in self.loops)
        return self._with(step, loops=loops)

    def _check_new_names(self, step: Step, *names: str) -> None:
        """ScheduleError unless each new loop name is free: no loop's, dim's or tensor's, and one the
        generated C can take (``loopopt.cnames.check_user_name``: a dim ``lo`` split into ``lo_o``)."""
        taken = set(self.loop_names) | set(self.op.dim_names) | set(self.op.tensors) | {
            n for r in self.relations for n in (getattr(r, "parent", None), getattr(r, "fused", None))}
        for name in names:
            if name in taken:
                raise ScheduleError(f"{step}: the new loop name {name!r} is already used (by a loop, a dim "
                                    f"or a tensor)")
            try:
                check_user_name(name, "new loop", quantized=self.op.quant is not None)
            except ValueError as err:
                raise ScheduleError(f"{step}: {err} (rename the dim)") from None

    # --- outputs -------------------------------------------------------------------------
    def compile(self, isa: str = "auto", target: "str | Target | None" = None) -> "Kernel":
        """Generate, build (cached) and load the kernel of this schedule for ``target`` (a registry
        name, ``loopopt.targets.TARGETS``; default: the target ``isa`` belongs to, the host's for
        ``"auto"``) and its instruction-set variant ``isa``.

        A lazy facade: the targets sit above the schedule, so the registry is imported here."""
        from .targets.registry import target as named_target
        from .targets.registry import target_of_isa
        chosen = target_of_isa(isa) if target is None else named_target(target)
        return chosen.compile(self, isa)

    def pseudocode(self, isa: Optional[str] = None) -> str:
        """The loop nest as readable pseudo-code (with vector access kinds for ``isa``; None: the
        host's best, or the cuda target's default architecture for a schedule bound to GPU axes), as
        the target ``isa`` belongs to prints it (a lazy facade, as ``compile``)."""
        from .targets.registry import target, target_of_isa
        if isa is None and (self.tensorized or self.bound_loops):
            return target("cuda").pseudocode(self, "auto")
        return target_of_isa(isa or "auto").pseudocode(self, isa or "auto")

    def __str__(self) -> str:
        return self.pseudocode()


@lru_cache(maxsize=4096)
def _loop_box(box: tuple[tuple[str, int], ...]) -> isl.Set:
    """The set ``{ [loops] : every loop in its box }`` of loops of these (name, extent) pairs."""
    names = ", ".join(name for name, _ in box)
    return isl.Set(f"{{ [{names}] : {' and '.join(box_constraints(Loop(n, e) for n, e in box))} }}")


@lru_cache(maxsize=4096)
def _iterations(box: tuple[tuple[str, int], ...], conditions: tuple[str, ...]) -> isl.Set:
    """``Schedule.iterations`` over loops of these (name, extent) pairs (cached: the schedules a step
    derives share their loop box, and parsing isl text is slow)."""
    if not conditions:
        return _loop_box(box)
    names = ", ".join(name for name, _ in box)
    return isl.Set(f"{{ [{names}] : {' and '.join(conditions)} }}").intersect(_loop_box(box))


@lru_cache(maxsize=4096)
def _sample(text: str) -> Optional[tuple[int, ...]]:
    """The coordinates of a point of the isl set ``text``, None if it is empty (cached by the text:
    the steps after ``register_block`` ask the same question again)."""
    found = isl.Set(text)
    if found.is_empty():
        return None
    return _coordinates(found.sample_point(), found.dim(isl.dim_type.set))


def _coordinates(point: isl.Point, count: int) -> tuple[int, ...]:
    """The first ``count`` set coordinates of ``point``."""
    return tuple(point.get_coordinate_val(isl.dim_type.set, i).to_python() for i in range(count))


def _point(point: isl.Point, names: tuple[str, ...]) -> str:
    values = _coordinates(point, len(names))
    return f"{STATEMENT}[{', '.join(f'{n}={v}' for n, v in zip(names, values))}]"
