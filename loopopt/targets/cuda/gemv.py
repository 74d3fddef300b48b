"""The cuda target's GEMV family: decode-shaped matrix products (a ``Matmul``, or any op of a matrix
product's roles, ``GemvRoles``, of at most ``MAX_ROWS`` rows: a GEMV or a small-M GEMM) that stream
their weights once, in 16-byte loads, dequantized in registers: float16 weights (float32 sums), int8
weights and ternary weights (stored one byte each, or 2 bits each in the CPU's ``i2_s`` format,
``codegen/ternary.py``), with the CPU kernels' exact integer arithmetic and epilogue (``quantized.py``,
``quant.py``).

A schedule is taken (``takes``) when it binds a loop over outputs to a ``warp.*`` axis without
``tensorize``: one warp per ``columns`` consecutive outputs ``j``. ``dataflows.gpu_gemv`` builds it:

* ``j`` split into a loop bound to ``block.x`` (``warps`` warps a block), one bound to ``warp.x`` and
  the ``columns`` a warp holds (optional);
* the rows ``i`` (all of them in each warp's registers) and the reduction ``k``, unsplit and unbound:
  the kernel spreads ``k`` over the warp's 32 lanes itself, in vectors of 16 bytes of weights (as
  the table-lookup kernels vectorize their 32 channels themselves), and sums the lanes' partial
  sums with a butterfly of ``__shfl_xor_sync`` (the same order on every lane);
* the weights in ``NK{v}k`` and the activations in ``MK{v}k``, ``v`` the weights in 16 bytes (float16
  8, int8 16, i2_s 64): each output's weights and each row's activations start on a 16-byte
  boundary and the reduction's tail is zero-padded in both, so no load needs a guard;
* ternary weights: ``weight_format("i2_s")`` (16 bytes: 64 weights, a byte holding the elements
  ``i, i + 16, i + 32, i + 48`` of its block as codes ``w + 1``) or ``"int8"``;
* optionally ``unroll("k", depth)``: how many of a lane's rounds load their weights together
  (default: 8 vectors in flight, ``8 // columns`` rounds);
* optionally k split once (``split("k", chunk)``, ``chunk`` whole 16-byte vectors; ``unroll`` then
  names ``k_i``): the ``k_o`` shares run on that many warps of the block, each over its share's
  vectors, and the first share's warp adds the others' sums in order (shared memory) before it stores.

Each lane of a warp sums the products of the 16-byte vectors ``lane, lane + 32, ...`` (its *rounds*)
of its ``columns`` outputs' weights with the matching activations of every row. The rounds run in
batches of ``depth``: a batch's weight vectors are all loaded before the first is used, so a lane
keeps ``depth x columns`` 16-byte loads in flight; the rounds every lane has run in whole batches
without a guard, the rest (the reduction's tail among them) in one guarded batch. ptxas is told a
block an SM is enough (``__launch_bounds__(threads, 1)``): otherwise it moves each load down to its
use to save registers, leaving two rounds in flight whatever the source says. The epilogue's
per-channel arrays are sent to the L2 (``prefetch.global.L2``) before the weights stream, so the
store does not wait for device memory after the butterfly. The products: float16 in float32 FMAs,
int8 with ``dp4a`` (signed weights by int8 or uint8 activations), i2_s as the codes' ``dp4a`` with
the activations less the activations' sum (``sum x (w + 1) - sum x``), exact in int32, each 2-bit
field masked in place and its ``dp4a`` sum (``4^f`` times the field's) shifted back exactly. The
quantized epilogue is ``quantized.store``'s (``lo_comp``: minus the activations' zero point times
the channel's weight sum, plus an integer bias; scales; requantization). The host emulation
(``printer.HOST``) runs the same lane function for each lane of each warp and the butterfly over
arrays, so CI checks the kernel's indexing, unpacking, tails and epilogue bit for bit.

The op is read by its roles (``gemv_roles.GemvRoles``: one row dim, the outputs, one reduction), so a
Contraction of that form runs the same kernel; the names above (i, j, k; ``NK{v}k``) are a Matmul's.

Refused with the reason: more than ``MAX_ROWS`` rows, an op without a matrix product's roles (the one it
misses: a batch dim, a bias or scales as a ``Gemm``'s, windows, several reductions),
float32 or bfloat16 operands, uint8 or asymmetric weights, other layouts, splits of ``i``, splits of
``k`` other than one into shares of whole vectors, more than 1024 threads a block, an unroll of
another loop than ``k``'s (a share's), and steps beyond layout, split, reorder, bind,
weight_format and unroll.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ...codegen.params import KernelParam, storage_elements
from ...codegen.ternary import pack_i2s, packed_bytes
from ...expr import Var, linear_terms
from ...gemv_roles import GemvRoles
from ...quant import TERNARY
from ...schedule import MAX_SHARED_BYTES, MAX_THREADS_PER_BLOCK, Loop, Schedule, ScheduleError
from . import output_types, quantized
from .printer import ERROR_NAME, KERNEL_NAME, NEST_NAME, CudaSource, Syntax

MAX_ROWS = 8              # rows (M) a warp keeps in registers
WARP = 32
VECTOR_BYTES = 16         # one weight load
STEPS = ("layout", "split", "reorder", "bind", "weight_format", "unroll", "stage")
IN_FLIGHT = 8             # a lane's 16-byte weight vectors loaded before the first is used, by default


@dataclass(frozen=True)
class Kind:
    """How a 16-byte vector of weights is multiplied: ``weights`` per vector, the activations' 16-byte
    vectors per weight vector (``x_vectors``), the sums' C type, and the device and host C of
    ``lo_dot(w, x, acc)`` (and of the helpers it needs)."""

    name: str
    weights: int
    x_vectors: int
    sum_type: str
    dot: str


_F16_DOT = """\
LO_DEVICE float lo_dot(const lo_v16 w, const lo_v16 *x, float acc)
{
    const uint32_t ws[4] = {w.x, w.y, w.z, w.w}, xs[4] = {x[0].x, x[0].y, x[0].z, x[0].w};
    LO_UNROLL
    for (int q = 0; q < 4; ++q) {
        const float2 a = lo_halves(ws[q]), b = lo_halves(xs[q]);
        acc = fmaf(a.x, b.x, acc);
        acc = fmaf(a.y, b.y, acc);
    }
    return acc;
}
"""
_I8_DOT = """\
LO_DEVICE int lo_dot(const lo_v16 w, const lo_v16 *x, int acc)
{
    acc = LO_DOT4((int) w.x, x[0].x, acc);
    acc = LO_DOT4((int) w.y, x[0].y, acc);
    acc = LO_DOT4((int) w.z, x[0].z, acc);
    return LO_DOT4((int) w.w, x[0].w, acc);
}
"""
# i2_s: byte b of the 16 holds the codes of elements b, b + 16, b + 32, b + 48 at bits 0, 2, 4, 6, so
# field f of word q is the codes of elements 16 f + 4 q .. + 3, which activation vector f holds in word q.
# The fields are masked in place, not shifted down (one LOP3 a word and field, no SHF): field f's bytes
# are 4^f times the codes (0 .. 128, unsigned), so its dp4a sum is 4^f times the field's dot product,
# an exact multiple that an arithmetic shift divides back exactly (a vector's field: |sum| <= 16 x 128 x 255);
# four independent dp4a chains of 4 a vector instead of one of 16
_I2S_DOT = """\
LO_DEVICE int lo_dot(const lo_v16 w, const lo_v16 *x, int acc)
{
    const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
    int field[4];
    LO_UNROLL
    for (int f = 0; f < 4; ++f) {
        const uint32_t xs[4] = {x[f].x, x[f].y, x[f].z, x[f].w};
        field[f] = 0;
        LO_UNROLL
        for (int q = 0; q < 4; ++q)
            field[f] = LO_DOT4U((int) (ws[q] & (0x03030303u << (2 * f))), xs[q], field[f]);
    }
    return acc + field[0] + (field[1] >> 2) + (field[2] >> 4) + (field[3] >> 6);
}

/* the sum of the 64 activations of x[0..3] added to s (the codes are w + 1) */
LO_DEVICE int lo_xsum(const lo_v16 *x, int s)
{
    LO_UNROLL
    for (int f = 0; f < 4; ++f) {
        s = LO_DOT4(0x01010101, x[f].x, s);
        s = LO_DOT4(0x01010101, x[f].y, s);
        s = LO_DOT4(0x01010101, x[f].z, s);
        s = LO_DOT4(0x01010101, x[f].w, s);
    }
    return s;
}
"""
KINDS = {"float16": Kind("float16", 8, 1, "float", _F16_DOT),
         "int8": Kind("int8", 16, 1, "int", _I8_DOT),
         "i2_s": Kind("i2_s", 64, 4, "int", _I2S_DOT)}

# what each syntax defines for the lane code: a 16-byte vector and its load, the dp4a of signed weight
# bytes by int8 (ss) or uint8 (su) activation bytes, two halves as floats
_DEVICE_PRELUDE = """\
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#define LO_DEVICE static __device__ __forceinline__
#define LO_UNROLL _Pragma("unroll")
typedef uint4 lo_v16;
LO_DEVICE lo_v16 lo_load(const void *p) { return __ldg((const uint4 *) p); }
LO_DEVICE int lo_dot4_ss(int a, uint32_t b, int c) { return __dp4a(a, (int) b, c); }
LO_DEVICE int lo_dot4_su(int a, uint32_t b, int c)
{
    int d;
    asm("dp4a.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
LO_DEVICE int lo_dot4_us(int a, uint32_t b, int c)
{
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
LO_DEVICE int lo_dot4_uu(int a, uint32_t b, int c) { return (int) __dp4a((uint32_t) a, b, (uint32_t) c); }
LO_DEVICE float2 lo_halves(uint32_t u) { return __half22float2(*(const __half2 *) &u); }
LO_DEVICE void lo_prefetch(const void *p) { asm volatile("prefetch.global.L2 [%0];" :: "l"(p)); }
"""
# IEEE half bits as a float on the host (no __half2float there), exactly
HOST_HALF = """\
LO_DEVICE float lo_half(uint32_t h)    /* IEEE half bits as float, exactly */
{
    const uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 31u, mantissa = h & 1023u;
    float value = exponent == 0 ? ldexpf((float) mantissa, -24)
                : exponent == 31 ? (mantissa ? NAN : INFINITY)
                : ldexpf((float) (mantissa | 1024u), (int) exponent - 25);
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    bits |= sign;
    memcpy(&value, &bits, sizeof value);
    return value;
}
"""
_HOST_PRELUDE = """\
#include <stdint.h>
#include <string.h>
#include <math.h>
#define LO_DEVICE static inline
#define LO_UNROLL _Pragma("GCC unroll 4")
typedef struct { uint32_t x, y, z, w; } lo_v16;
typedef struct { float x, y; } float2;
LO_DEVICE lo_v16 lo_load(const void *p) { lo_v16 v; memcpy(&v, p, sizeof v); return v; }
LO_DEVICE int lo_dot4(int a, uint32_t b, int c, int a_signed, int b_signed)
{
    uint32_t sum = (uint32_t) c;          /* int32 wraps, as dp4a's */
    for (int e = 0; e < 4; ++e) {
        const int wa = (int) (((uint32_t) a >> (8 * e)) & 255u), xb = (int) ((b >> (8 * e)) & 255u);
        sum += (uint32_t) ((a_signed ? (int) (int8_t) wa : wa) * (b_signed ? (int) (int8_t) xb : xb));
    }
    return (int) sum;
}
LO_DEVICE int lo_dot4_ss(int a, uint32_t b, int c) { return lo_dot4(a, b, c, 1, 1); }
LO_DEVICE int lo_dot4_su(int a, uint32_t b, int c) { return lo_dot4(a, b, c, 1, 0); }
LO_DEVICE int lo_dot4_us(int a, uint32_t b, int c) { return lo_dot4(a, b, c, 0, 1); }
LO_DEVICE int lo_dot4_uu(int a, uint32_t b, int c) { return lo_dot4(a, b, c, 0, 0); }
""" + HOST_HALF + """\
LO_DEVICE float2 lo_halves(uint32_t u) { float2 f = {lo_half(u & 0xffffu), lo_half(u >> 16)}; return f; }
"""


def takes(schedule: Schedule) -> bool:
    """Whether the GEMV family builds ``schedule``: a loop bound to a warp axis, no ``tensorize``."""
    return not schedule.tensorized and any(loop.axis.startswith("warp.") for loop in schedule.bound_loops)


def kind_of(schedule: Schedule) -> Kind:
    """The weights' kind; ScheduleError for an op (``GemvRoles``) or operands the family has no kernel for."""
    op = schedule.op
    roles = GemvRoles.of(op)
    spec = op.quant
    if spec is None and op.dtype != "float16":
        raise ScheduleError(f"{op!r} multiplies {op.dtype}; the cuda GEMV kernels (a loop bound to a "
                            f"warp axis without tensorize) take float16, int8 or ternary weights (the "
                            f"float32 SIMT kernels bind thread axes)")
    if spec is not None and (spec.weight not in ("int8", TERNARY) or not spec.weight_symmetric):
        weights = spec.weight if spec.weight_symmetric else f"asymmetric {spec.weight}"
        raise ScheduleError(f"{op!r} has {weights} weights; the cuda GEMV kernels take symmetric int8 or "
                            f"ternary weights")
    if roles.m > MAX_ROWS:
        raise ScheduleError(f"{op!r} has {roles.m} rows; the cuda GEMV kernels keep at most {MAX_ROWS} rows "
                            f"in registers (gpu_mma for larger M)")
    if spec is None:
        return KINDS["float16"]
    return KINDS["i2_s" if schedule.weight_format_mode == "i2_s" else "int8"]


@dataclass(frozen=True)
class Shape:
    """A GEMV kernel's shape: the weights' kind, ``warps`` a block over outputs, ``columns`` a warp,
    ``vectors`` of 16 bytes of weights per output (the padded reduction), ``blocks`` in the grid,
    ``depth``: the rounds of a lane's loop (one vector of each column a round) whose weights are loaded
    together, and the split of k: ``split`` warps of the block (``warps`` each) sum a ``share`` of
    consecutive vectors each (the last one ``vectors - (split - 1) * share``); ``staged``: the
    activations copied once a block into shared memory (``stage``)."""

    kind: Kind
    warps: int
    columns: int
    vectors: int
    blocks: int
    depth: int
    split: int = 1
    share: int = 0
    staged: bool = False

    @property
    def rounds(self) -> int:
        """Rounds of each lane's loop: the warp's lanes take a share's vectors 32 at a time."""
        return -(-self.share // WARP)

    @property
    def last(self) -> int:
        """Vectors of the last share (all of them unsplit)."""
        return self.vectors - (self.split - 1) * self.share

    @property
    def threads(self) -> int:
        return self.warps * self.split * WARP

    def staged_bytes(self, rows: int) -> int:
        """Shared memory of the staged activations of ``rows`` rows (0 unstaged)."""
        return rows * self.vectors * self.kind.x_vectors * VECTOR_BYTES if self.staged else 0


def check(schedule: Schedule) -> Shape:
    """The kernel's shape; ScheduleError naming what the family cannot run."""
    kind = kind_of(schedule)
    op, roles = schedule.op, GemvRoles.of(schedule.op)
    i, j, k = roles.rows, roles.outputs, roles.reduction
    schedule.refuse_epilogue("the cuda GEMV", "they store plain sums")
    output_types.check(schedule, tensor_cores=False)     # a 16-bit output goes to the tensor-core kernels
    other = [step for step in schedule.steps if step.primitive not in STEPS]
    if other:
        raise ScheduleError(f"{other[0]}: the cuda GEMV kernels take {', '.join(STEPS)} steps only")
    if schedule.weight_format_mode not in (None, "int8", "i2_s"):
        raise ScheduleError(f"weight_format({schedule.weight_format_mode!r}): the cuda GEMV kernels take "
                            f"ternary weights as 'int8' or 'i2_s'")
    b = roles.weights
    layouts = roles.layouts(kind.weights)
    for tensor in (b, roles.activations):
        tag = schedule.layout_of(tensor).tag
        if tag != layouts[tensor]:
            raise ScheduleError(f"{tensor} is in layout {tag!r}; the cuda GEMV kernels of {kind.name} "
                                f"weights take {layouts[tensor]!r} (16-byte vectors along {k}, each row "
                                f"padded)")
    if schedule.layout_of(op.output).tag != layouts[op.output]:
        raise ScheduleError(f"{op.output} is in layout {schedule.layout_of(op.output).tag!r}; the cuda GEMV "
                            f"kernels store {layouts[op.output]!r}")
    unrolled = [loop for loop in schedule.loops if loop.unroll and schedule.dims_of(loop.name) != {k}]
    if unrolled:
        raise ScheduleError(f"unroll({unrolled[0].name!r}): the cuda GEMV kernels unroll only dim {k!r} (the "
                            f"rounds of each lane's loop over its weight vectors)")
    loops = [loop for loop in schedule.loops if i in schedule.dims_of(loop.name)]
    if len(loops) != 1 or schedule.dims_of(loops[0].name) != {i} or loops[0].axis:
        raise ScheduleError(f"the cuda GEMV kernels take dim {i!r} as one loop, unsplit and unbound "
                            f"(loops over it: {', '.join(loop.name for loop in loops)})")
    outputs = [loop for loop in schedule.loops if j in schedule.dims_of(loop.name)]
    terms, _ = linear_terms(schedule.dim_values[j], frozenset(loop.name for loop in outputs))
    axes = {loop.axis: loop for loop in outputs}
    columns = [loop for loop in outputs if not loop.axis]
    shape = (set(axes) == {"block.x", "warp.x", ""} if columns else set(axes) == {"block.x", "warp.x"})
    if not shape or len(columns) > 1 or any(schedule.dims_of(loop.name) != {j} for loop in outputs):
        found = ", ".join(f"{loop.name} ({loop.axis or 'unbound'})" for loop in outputs)
        raise ScheduleError(f"the cuda GEMV kernels take {j} split into a loop bound to block.x, one bound "
                            f"to warp.x and at most one of columns (loops over {j}: {found})")
    cols = columns[0].extent if columns else 1
    warps = axes["warp.x"].extent
    wanted = {axes["block.x"].name: warps * cols, axes["warp.x"].name: cols} | (
        {columns[0].name: 1} if columns else {})
    if terms != wanted:
        raise ScheduleError(f"the cuda GEMV kernels take {j} = block x {warps * cols} + warp x {cols} + "
                            f"column (split {j} by warps x columns, then the inner part by columns)")
    vectors = schedule.layout_of(b).storage_shape(op.tensor(b).shape)[1]
    groups = -(-roles.n // cols)           # warps with outputs
    k_loop, split, share = _shares(schedule, kind, vectors, k)
    if warps * split * WARP > MAX_THREADS_PER_BLOCK:
        raise ScheduleError(f"{warps} warps x {split} shares of k: {warps * split * WARP} threads a block; "
                            f"the cuda GEMV kernels run at most {MAX_THREADS_PER_BLOCK}")
    depth = min(-(-share // WARP), k_loop.unroll or max(1, IN_FLIGHT // cols))
    shape = Shape(kind, warps, cols, vectors, -(-groups // warps), depth, split, share,
                  _staged(schedule, roles, columns))
    stage = next((step for step in schedule.steps if step.primitive == "stage"), None)
    if shape.staged_bytes(roles.m) > MAX_SHARED_BYTES:
        raise ScheduleError(f"{stage}: {roles.m} row(s) of {shape.staged_bytes(1)} bytes of activations "
                            f"take {shape.staged_bytes(roles.m)} bytes of shared memory; the cuda GEMV "
                            f"kernels stage at most {MAX_SHARED_BYTES} a block")
    return shape


def _staged(schedule: Schedule, roles: GemvRoles, columns: list[Loop]) -> bool:
    """Whether the activations are staged in shared memory (``stage(activations, columns' loop)``: the
    rows a warp's columns read over all of k, the same for every warp, so copied once a block);
    ScheduleError for any other stage."""
    if not schedule.stages:
        return False
    (tensor, at), *_ = schedule.stages
    step = next(step for step in schedule.steps if step.primitive == "stage")
    if tensor != roles.activations or len(schedule.stages) > 1:
        weights = roles.weights if tensor == roles.weights else schedule.stages[1][0]
        raise ScheduleError(f"stage({weights!r}, ...): the cuda GEMV kernels stage only the activations "
                            f"{roles.activations!r} (each weight is read once)")
    if schedule.pipeline_stages is not None or schedule.tma_staged:
        raise ScheduleError(f"{step}: the cuda GEMV kernels stage the activations once a block by its "
                            f"threads: no ring of stages and no TMA engine")
    if not columns or at != columns[0].name:
        loop = f"the loop of a warp's columns {columns[0].name!r}" if columns else (
            f"a loop of a warp's columns (split {roles.outputs} by columns)")
        raise ScheduleError(f"{step}: the cuda GEMV kernels stage whole rows of the activations once a "
                            f"block: stage at {loop}")
    return True


def _shares(schedule: Schedule, kind: Kind, vectors: int, k: str) -> tuple[Loop, int, int]:
    """The loop of a warp's share of the reduction ``k`` (the one ``unroll`` may name), the warps of a
    block that split it and the 16-byte vectors of a share: k one loop (one share of every vector), or
    split once into ``k_o`` (the shares) and ``k_i`` (a share: whole vectors); ScheduleError otherwise."""
    loops = [loop for loop in schedule.loops if k in schedule.dims_of(loop.name)]
    if len(loops) > 2 or any(schedule.dims_of(loop.name) != {k} or loop.axis for loop in loops):
        raise ScheduleError(f"the cuda GEMV kernels take dim {k!r} as one loop, or split once into warps' "
                            f"shares (split({k!r}, chunk)), unbound (loops over it: "
                            f"{', '.join(loop.name for loop in loops)})")
    if len(loops) == 1:
        return loops[0], 1, vectors
    terms, rest = linear_terms(schedule.dim_values[k], frozenset(loop.name for loop in loops))
    outer, inner = sorted(loops, key=lambda loop: -terms.get(loop.name, 0))
    chunk = terms.get(outer.name, 0)
    if terms.get(inner.name) != 1 or rest.variables() or chunk != inner.extent or chunk % kind.weights:
        raise ScheduleError(f"split({k!r}, {inner.extent}): the cuda GEMV kernels split {k} into warps' "
                            f"shares of whole 16-byte vectors (a multiple of {kind.weights} {kind.name} "
                            f"weights), {outer.name!r} outside {inner.name!r}")
    if outer.unroll:
        raise ScheduleError(f"unroll({outer.name!r}): the cuda GEMV kernels run the shares of {k} on "
                            f"{outer.extent} warps; unroll {inner.name!r}, the rounds of a share")
    return inner, outer.extent, chunk // kind.weights


def parameters(schedule: Schedule, kind: Kind, syntax: Syntax) -> tuple[KernelParam, ...]:
    """The kernel's parameters: a quantized op's (``quantized.parameters``; i2_s weights as bytes),
    else the two float16 inputs (the host emulation's as their bits) and the float32 output."""
    op = schedule.op
    if op.quant is None:
        half = "__half" if syntax.device else "uint16_t"
        return (*(KernelParam(t, half, const=True) for t in op.inputs), KernelParam(op.output, "float"))
    params = quantized.parameters(schedule)
    if kind.name == "i2_s":
        params = tuple(replace(p, ctype="uint8_t") if p.name == op.inputs[1] else p for p in params)
    return params


_LANE = """\
{stage_code}\
/* a lane's rounds lo_t .. lo_t + count - 1 (count <= {depth}, a constant once inlined) of its share of k
 * (vectors lo_base .. lo_base + lo_end - 1), one 16-byte vector of each column a round: their weights
 * loaded before any is used; where lo_tail, the rounds past the {full} that every lane has check for
 * the share's end */
LO_DEVICE void lo_rounds({declarations}, const uint8_t *const lo_w[{cols}], int lo_lane, int lo_base,
                         int lo_end, int lo_t, int count, int lo_tail,
                         {sum_type} lo_acc[{rows}][{cols}]{xs_param}{sx_param})
{{
    lo_v16 lo_wv[{depth}][{cols}];
    {unroll} {depth}
    for (int d = 0; d < {depth}; ++d) {{
        const int v = lo_lane + {warp} * (lo_t + d);
        if (d < count && (!lo_tail || lo_t + d < {full} || v < lo_end))
            {unroll} {cols}
            for (int c = 0; c < {cols}; ++c) lo_wv[d][c] = lo_load(lo_w[c] + (ptrdiff_t) v * 16);
    }}{stage_hook}
    {unroll} {depth}
    for (int d = 0; d < {depth}; ++d) {{
        const int v = lo_lane + {warp} * (lo_t + d);
        if (d >= count || (lo_tail && lo_t + d >= {full} && v >= lo_end)) continue;
        lo_v16 lo_x[{rows}][{x_vectors}];
        for (int i = 0; i < {rows}; ++i) for (int q = 0; q < {x_vectors}; ++q)
            {x_load}
        for (int c = 0; c < {cols}; ++c) for (int i = 0; i < {rows}; ++i)
            lo_acc[i][c] = lo_dot(lo_wv[d][c], lo_x[i], lo_acc[i][c]);{xs_sum}
    }}
}}

/* a lane's sums over the share of k of vectors lo_base .. lo_base + lo_end - 1 */
LO_DEVICE void lo_lane_sums({declarations}, int lo_warp, int lo_lane, int lo_base, int lo_end,
                            {sum_type} lo_acc[{rows}][{cols}]{xs_param}{sx_param})
{{
    const uint8_t *lo_w[{cols}];
    for (int c = 0; c < {cols}; ++c) {{    /* past the last column: read the last one's weights */
        const int j = lo_warp * {cols} + c;
        lo_w[c] = (const uint8_t *) {b} + (ptrdiff_t) (j < {n} ? j : {n} - 1) * {row_bytes}
                  + (ptrdiff_t) lo_base * 16;
    }}
{batches}{rest}
}}

LO_DEVICE void lo_store({declarations}, int i, int j, {sum_type} lo_sum)
{{
    {store}
}}
"""
_XS_SUM = """
        for (int i = 0; i < {rows}; ++i) lo_xs[i] = lo_xsum(lo_x[i], lo_xs[i]);"""
# the activations staged in shared memory (``_Kernel._staging``)
_STAGE = """\
/* thread lo_t of the block's {threads} copies the activations' 16-byte vectors lo_t, lo_t + {threads}, ...
 * of each row to shared memory, vector q of weight vector v at lo_sx[(i * {x_vectors} + q) * {vectors} + v]
 * (a warp's lanes then read consecutive vectors); on the GPU asynchronously (cp.async), before any weight
 * load */
LO_DEVICE void lo_stage_copy({declarations}, int lo_t, lo_v16 *lo_sx)
{{
    for (int i = 0; i < {rows}; ++i)
        for (int e = lo_t; e < {all}; e += {threads})
            LO_STAGE16(&lo_sx[(i * {x_vectors} + e % {x_vectors}) * {vectors} + e / {x_vectors}],
                       (const uint8_t *) {a} + (ptrdiff_t) i * {x_bytes} + (ptrdiff_t) e * 16);{commit}
}}

{sums_code}"""
_STAGE_BLOCK = """\
/* the thread's copies landed{block_note}; then the block waits for all of them */
LO_DEVICE void lo_stage_block(lo_v16 *lo_sx{xwarps})
{{
    __pipeline_wait_prior(0);{reduce}
    __syncthreads();
}}

"""
_STAGE_HOOK = """
    if (lo_t == 0)    /* the first batch's weights are on their way: the staged activations, landed */
        lo_stage_block(lo_sx{xwarps_arg});"""
_STAGE_SHARED = """
    __shared__ lo_v16 lo_sx[{sx}];{shared_xwarps}
    lo_stage_copy({names}, (int) threadIdx.x, lo_sx);    /* the activations' copies first: first to land */"""
_STAGE_HOST_SHARED = """
    lo_v16 lo_sx[{sx}];{host_xwarps}"""
_STAGE_HOST = """
        if (lo_warp % {warps} == 0) {{    /* a block's first warp: its threads stage the activations first */
            memset(lo_sx, 0xa5, sizeof lo_sx);    /* what no thread stages reads as garbage */
            for (int t = 0; t < {threads}; ++t) lo_stage_copy({names}, t, lo_sx);{host_sums}
        }}"""
# i2_s: the sums of the staged bytes (the codes' correction), by warp, then added in warp order
_STAGE_SUMS = {
    "block_note": " and each warp's sums of their bytes go to lo_xwarps[warp][row]",
    "sums_code": """\
/* the sums by row of the bytes thread lo_t copied (lo_stage_copy), read back */
LO_DEVICE void lo_stage_sums(int lo_t, const lo_v16 *lo_sx, int lo_sums[{rows}])
{{
    for (int i = 0; i < {rows}; ++i) {{
        lo_sums[i] = 0;
        for (int e = lo_t; e < {all}; e += {threads}) {{
            const lo_v16 x = lo_sx[(i * {x_vectors} + e % {x_vectors}) * {vectors} + e / {x_vectors}];
            lo_sums[i] = LO_DOT4(0x01010101, x.x, lo_sums[i]);
            lo_sums[i] = LO_DOT4(0x01010101, x.y, lo_sums[i]);
            lo_sums[i] = LO_DOT4(0x01010101, x.z, lo_sums[i]);
            lo_sums[i] = LO_DOT4(0x01010101, x.w, lo_sums[i]);
        }}
    }}
}}

""",
    "reduce": """
    int lo_sums[{rows}];
    lo_stage_sums((int) threadIdx.x, lo_sx, lo_sums);
    {unroll} {rows}
    for (int i = 0; i < {rows}; ++i) {{
        for (int lo_o = {warp} / 2; lo_o >= 1; lo_o /= 2)
            lo_sums[i] += __shfl_xor_sync(0xffffffffu, lo_sums[i], lo_o);
        if (threadIdx.x % {warp} == 0) lo_xwarps[threadIdx.x / {warp} * {rows} + i] = lo_sums[i];
    }}""",
    "shared_xwarps": "\n    __shared__ int lo_xwarps[{block_warps} * {rows}];",
    "host_xwarps": "\n    int lo_xwarps[{block_warps} * {rows}];",
    "host_sums": """
            memset(lo_xwarps, 0, sizeof lo_xwarps);
            for (int t = 0; t < {threads}; ++t) {{
                int s[{rows}];
                lo_stage_sums(t, lo_sx, s);
                for (int i = 0; i < {rows}; ++i) lo_xwarps[t / {warp} * {rows} + i] += s[i];
            }}"""}
# one 16-byte copy of the staging: cp.async on the GPU (cuda_pipeline.h), a plain copy on the host
_STAGE_COPY = {True: "#include <cuda_pipeline.h>\n"
                     "#define LO_STAGE16(dst, src) __pipeline_memcpy_async((dst), (src), 16)\n",
               False: "#define LO_STAGE16(dst, src) memcpy((dst), (src), 16)\n"}
_STAGE_IN_ORDER = ("for (int i = 0; i < {rows}; ++i) {{ {{x}} = 0; for (int w = 0; w < {block_warps}; ++w) "
                   "{{x}} += lo_xwarps[w * {rows} + i]; }}")
_DEVICE_NEST = """\
/* at least 1 block an SM: without it ptxas moves each weight load down to its use to save registers,
 * and a warp has 2 rounds of loads in flight whatever the depth */
__global__ void __launch_bounds__({threads}, 1) {nest}({declarations})
{{
    const int lo_lane = (int) threadIdx.x % {warp};
    const int lo_warp = (int) blockIdx.x * {warps} + (int) threadIdx.x / {warp}{of_warps};{share_index}
    {sum_type} lo_acc[{rows}][{cols}];{shared}
    for (int i = 0; i < {rows}; ++i) for (int c = 0; c < {cols}; ++c) lo_acc[i][c] = 0;{xs_zero}{prefetch}
    lo_lane_sums({names}, lo_warp, lo_lane, {base}, {end}, lo_acc{xs_arg}{sx_arg});
#pragma unroll
    for (int lo_o = {warp} / 2; lo_o >= 1; lo_o /= 2) {{    /* the butterfly: every lane gets the sums */
        for (int i = 0; i < {rows}; ++i) for (int c = 0; c < {cols}; ++c)
            lo_acc[i][c] += __shfl_xor_sync(0xffffffffu, lo_acc[i][c], lo_o);{xs_shuffle}
    }}{gather}{xs_staged}
    for (int i = 0; i < {rows}; ++i) for (int c = 0; c < {cols}; ++c) {{    /* lane e % 32 stores element e */
        const int j = lo_warp * {cols} + c;
        if (lo_lane == (i * {cols} + c) % {warp} && j < {n}) lo_store({names}, i, j, {final});
    }}
}}

extern "C" {launcher}
{{
    {nest}<<<{blocks}, {threads}, 0, (cudaStream_t) lo_stream>>>({casts});
    return (int) cudaGetLastError();
}}

extern "C" const char *{error}(int code)
{{
    return cudaGetErrorString((cudaError_t) code);
}}
"""
_HOST_NEST = """\
static void {nest}({declarations})
{{{host_shared}
    for (int lo_warp = 0; lo_warp < {all_warps}; ++lo_warp) {{    /* each share's warp: lanes, butterfly */
        {sum_type} lo_total[{rows}][{cols}];
        int lo_xtotal[{rows}];{host_stage}
        for (int lo_share = 0; lo_share < {split}; ++lo_share) {{
            {sum_type} lo_acc[{warp}][{rows}][{cols}], lo_old[{warp}][{rows}][{cols}];
            int lo_xs[{warp}][{rows}], lo_xold[{warp}][{rows}];
            memset(lo_acc, 0, sizeof lo_acc);
            memset(lo_xs, 0, sizeof lo_xs);
            for (int lo_lane = 0; lo_lane < {warp}; ++lo_lane)
                lo_lane_sums({names}, lo_warp, lo_lane, {base}, {end}, lo_acc[lo_lane]{xs_lane}{sx_arg});
            for (int lo_o = {warp} / 2; lo_o >= 1; lo_o /= 2) {{
                memcpy(lo_old, lo_acc, sizeof lo_acc);
                memcpy(lo_xold, lo_xs, sizeof lo_xs);
                for (int l = 0; l < {warp}; ++l) for (int i = 0; i < {rows}; ++i) {{
                    for (int c = 0; c < {cols}; ++c)
                        lo_acc[l][i][c] = lo_old[l][i][c] + lo_old[l ^ lo_o][i][c];
                    lo_xs[l][i] = lo_xold[l][i] + lo_xold[l ^ lo_o][i];
                }}
            }}
            for (int i = 0; i < {rows}; ++i) {{    /* the shares added in order, as the first's warp does */
                for (int c = 0; c < {cols}; ++c)
                    lo_total[i][c] = lo_share ? lo_total[i][c] + lo_acc[0][i][c] : lo_acc[0][i][c];
                lo_xtotal[i] = lo_share ? lo_xtotal[i] + lo_xs[0][i] : lo_xs[0][i];
            }}
        }}{host_xs_staged}
        for (int i = 0; i < {rows}; ++i) for (int c = 0; c < {cols}; ++c) {{
            const int j = lo_warp * {cols} + c;
            if (j < {n}) lo_store({names}, i, j, {host_final});
        }}
    }}
}}

void {kernel}({host_declarations})
{{
    {nest}({names});
}}
"""


class _Kernel:
    """The C of one GEMV schedule in one syntax."""

    def __init__(self, schedule: Schedule, syntax: Syntax):
        self.s, self.syntax, self.op = schedule, syntax, schedule.op
        self.shape = shape = check(schedule)
        self.roles = GemvRoles.of(schedule.op)
        self.kind, self.warps, self.columns = shape.kind, shape.warps, shape.columns
        self.vectors, self.blocks, self.depth = shape.vectors, shape.blocks, shape.depth
        self.rounds = shape.rounds
        self.params = parameters(schedule, self.kind, syntax)

    def _fields(self) -> dict[str, object]:
        op, kind = self.op, self.kind
        declarations = self._fields_declarations()
        out = op.output
        index = tuple(Var("i" if e.name == self.roles.rows else "j") for e in op.index(out))   # the C's names
        offset = self.s.layout_of(out).offset(index, op.tensor(out).shape).to_c()
        store = (f"{out}[{offset}] = lo_sum;" if op.quant is None
                 else quantized.store(op, f"{out}[{offset}]", "lo_sum", "j", "", None))
        ternary = kind.name == "i2_s"
        final = "(int) ((unsigned) lo_acc[i][c] - (unsigned) lo_xs[i])" if ternary else "lo_acc[i][c]"
        rows, shape = self.roles.m, self.shape
        full = shape.last // WARP                       # rounds every lane of every share has
        batched = full // self.depth * self.depth      # of them, those in whole batches of depth rounds
        names = ", ".join(p.name for p in self.params)
        staged = shape.staged
        lane_xs = ternary and not staged          # each lane sums its activations (staged: the block once)
        xs_arg = ", lo_xs" if lane_xs else ""
        sx_arg = ", lo_sx" + (", lo_xwarps" if ternary else "") if staged else ""
        split = shape.split > 1
        return dict(
            declarations=declarations, names=names, sum_type=kind.sum_type,
            rows=rows, cols=self.columns, a=op.inputs[0], b=op.inputs[1], n=self.roles.n, warp=WARP,
            warps=self.warps,
            row_bytes=VECTOR_BYTES * self.vectors, vectors=self.vectors, x_vectors=kind.x_vectors,
            x_bytes=self.vectors * kind.x_vectors * VECTOR_BYTES, unroll=self.syntax.unroll,
            depth=self.depth, full=full, batches=(    # the rounds every lane has, depth at a time
                "" if not batched else
                f"\n    lo_rounds({names}, lo_w, lo_lane, lo_base, lo_end, 0, {self.depth}, 0, "
                f"lo_acc{xs_arg}{sx_arg});"
                if batched == self.depth else
                f"\n    {self.syntax.unroll} 1\n"
                f"    for (int lo_t = 0; lo_t < {batched}; lo_t += {self.depth})\n"
                f"        lo_rounds({names}, lo_w, lo_lane, lo_base, lo_end, lo_t, {self.depth}, 0, "
                f"lo_acc{xs_arg}{sx_arg});"), rest=(    # the rounds left, the tail among them
                f"\n    lo_rounds({names}, lo_w, lo_lane, lo_base, lo_end, {batched}, "
                f"{self.rounds - batched}, 1, lo_acc{xs_arg}{sx_arg});" if self.rounds > batched else ""),
            split=shape.split, of_warps=f" % {self.warps}" if split else "",
            share_index=(f"\n    const int lo_share = (int) threadIdx.x / {WARP * self.warps};"
                         if split else ""),
            base=f"lo_share * {shape.share}" if split else "0",
            end=str(self.vectors) if not split else str(shape.share) if shape.last == shape.share else (
                f"lo_share == {shape.split - 1} ? {shape.last} : {shape.share}"),
            gather=self._gather() if split else "", sx_arg=sx_arg,
            store=store, nest=NEST_NAME, kernel=KERNEL_NAME, error=ERROR_NAME, threads=shape.threads,
            blocks=self.blocks, all_warps=self.blocks * self.warps,
            xs_param=f", int lo_xs[{rows}]" if lane_xs else "",
            xs_sum=_XS_SUM.format(rows=rows) if lane_xs else "",
            xs_zero=(f"\n    int lo_xs[{rows}];\n    for (int i = 0; i < {rows}; ++i) lo_xs[i] = 0;"
                     if lane_xs else ""),
            xs_arg=xs_arg,
            xs_shuffle=(f"\n        for (int i = 0; i < {rows}; ++i) "
                        f"lo_xs[i] += __shfl_xor_sync(0xffffffffu, lo_xs[i], lo_o);") if lane_xs else "",
            xs_lane=", lo_xs[lo_lane]" if lane_xs else "",
            **self._staging(names),
            prefetch=self._prefetch(),
            final=final, host_final=final.replace("lo_acc[i][c]", "lo_total[i][c]").replace(
                "lo_xs[i]", "lo_xtotal[i]"),
            launcher=self._launcher(),
            casts=", ".join(p.name if not p.pointer else
                            f"({'const ' if p.const else ''}{p.ctype} *) {p.name}" for p in self.params),
            host_declarations=", ".join(p.declaration(restrict=False) for p in self.params))

    def _staging(self, names: str) -> dict[str, str]:
        """The fields of the activations' staging (``stage``; ``_STAGE_*``): each block's threads copy
        the rows' 16-byte vectors into shared memory once, vector ``q`` of weight vector ``v`` at
        ``[i][q][v]`` (a warp's lanes then read consecutive vectors: no bank conflicts), right after a
        lane's first batch of weight loads is issued (the copy waits under them), then the block's
        barrier; i2_s: each warp's sums of the bytes it copied (the codes' correction, ``sum x``) go to
        ``lo_xwarps``, added in warp order before the store (the lanes no longer sum their
        activations). The host emulation stages a block's threads one after another into a buffer
        poisoned first, so a vector no thread copies reads as garbage. Unstaged: the lanes' loads."""
        shape, rows, kind, a = self.shape, self.roles.m, self.kind, self.op.inputs[0]
        x_vectors, vectors = kind.x_vectors, self.vectors
        x_bytes = vectors * x_vectors * VECTOR_BYTES
        if not shape.staged:
            return dict(sx_param="", stage_hook="", stage_code="", shared="", xs_staged="", host_shared="",
                        host_stage="", host_xs_staged="", x_load=(
                            f"lo_x[i][q] = lo_load((const uint8_t *) {a} + (ptrdiff_t) i * {x_bytes}\n"
                            + " " * 33 + f"+ ((ptrdiff_t) (lo_base + v) * {x_vectors} + q) * 16);"))
        ternary, device = kind.name == "i2_s", self.syntax.device
        fields = dict(declarations=self._fields_declarations(), names=names, rows=rows, a=a, warp=WARP,
                      x_vectors=x_vectors, vectors=vectors, x_bytes=x_bytes, all=vectors * x_vectors,
                      threads=shape.threads, warps=self.warps, block_warps=self.warps * shape.split,
                      commit="\n    __pipeline_commit();" if device else "",
                      unroll=self.syntax.unroll, sx=rows * x_vectors * vectors,
                      xwarps=", int *lo_xwarps" if ternary else "",
                      xwarps_arg=", lo_xwarps" if ternary else "")
        fields |= {name: text.format(**fields) if ternary else "" for name, text in _STAGE_SUMS.items()}
        in_order = _STAGE_IN_ORDER.format(**fields)
        return dict(
            sx_param=", lo_v16 *lo_sx{xwarps}".format(**fields),
            x_load=f"lo_x[i][q] = lo_sx[(i * {x_vectors} + q) * {vectors} + lo_base + v];",
            stage_hook=_STAGE_HOOK.format(**fields) if device else "",
            stage_code=(_STAGE_COPY[device] + _STAGE.format(**fields)
                        + (_STAGE_BLOCK.format(**fields) if device else "")),
            shared=_STAGE_SHARED.format(**fields), host_shared=_STAGE_HOST_SHARED.format(**fields),
            host_stage=_STAGE_HOST.format(**fields),
            xs_staged=(f"\n    int lo_xs[{rows}];    /* the activations' sums: the block's warps' in order */"
                       f"\n    {in_order.replace('{x}', 'lo_xs[i]')}" if ternary else ""),
            host_xs_staged=f"\n        {in_order.replace('{x}', 'lo_xtotal[i]')}" if ternary else "")

    def _fields_declarations(self) -> str:
        restrict = self.syntax.restrict
        return ", ".join(p.declaration() if not p.pointer else
                         f"{'const ' if p.const else ''}{p.ctype} *{restrict} {p.name}" for p in self.params)

    def _gather(self) -> str:
        """The device nest's sums of a split k: the warps of the shares past the first write theirs to
        shared memory, and the first share's warp adds them in order (int32: exact) before it stores."""
        shape, rows, cols, unroll = self.shape, self.roles.m, self.columns, "#pragma unroll"
        parts, mine = f"[{shape.split - 1}][{self.warps}][{rows}]", f"(i * {cols} + c) % {WARP}"
        ternary = self.kind.name == "i2_s" and not shape.staged    # staged: the block's sums once
        return "".join([
            "\n    {    /* the shares of k: the warps past the first hand their sums over, the first adds */",
            f"\n        __shared__ {self.kind.sum_type} lo_part{parts}[{cols}];",
            f"\n        __shared__ int lo_xpart{parts};" if ternary else "",
            f"\n        const int lo_group = (int) threadIdx.x / {WARP} % {self.warps};",
            f"\n        {unroll}\n        for (int i = 0; i < {rows}; ++i) for (int c = 0; c < {cols}; ++c)",
            f"\n            if (lo_share > 0 && lo_lane == {mine})",
            "\n                lo_part[lo_share - 1][lo_group][i][c] = lo_acc[i][c];",
            f"\n        {unroll}\n        for (int i = 0; i < {rows}; ++i) "
            "if (lo_share > 0 && lo_lane == 0) lo_xpart[lo_share - 1][lo_group][i] = lo_xs[i];"
            if ternary else "",
            "\n        __syncthreads();",
            "\n        if (lo_share > 0) return;",
            f"\n        {unroll}\n        for (int s = 0; s < {shape.split - 1}; ++s)",
            f" for (int i = 0; i < {rows}; ++i) {{",
            f"\n            {unroll}\n            for (int c = 0; c < {cols}; ++c)",
            f"\n                if (lo_lane == {mine}) lo_acc[i][c] += lo_part[s][lo_group][i][c];",
            "\n            lo_xs[i] += lo_xpart[s][lo_group][i];" if ternary else "",
            "\n        }",
            "\n    }"])

    def _prefetch(self) -> str:
        """The device nest's first statement for the epilogue's per-channel arrays (``lo_comp``,
        ``lo_mult``): each column's values sent to the L2 by one lane while the weights stream, so
        that the store after the butterfly does not wait for device memory ("" if there are none)."""
        channel = [p.name for p in self.params if p.pointer and p.const and p.name not in self.op.inputs]
        if not channel:
            return ""
        fetches = " ".join(f"lo_prefetch({name} + j);" for name in channel)
        return (f"\n    for (int c = 0; c < {self.columns}; ++c) {{    /* the epilogue's per-channel values "
                f"on their way to the L2 */\n        const int j = lo_warp * {self.columns} + c;\n"
                f"        if (lo_lane == c % {WARP} && j < {self.roles.n}) {{ {fetches} }}\n    }}")

    def _launcher(self) -> str:
        decls = ", ".join(p.declaration() if not p.pointer else f"{'const ' if p.const else ''}void *{p.name}"
                          for p in self.params)
        return f"int {KERNEL_NAME}({decls}, void *lo_stream)"

    def source(self) -> CudaSource:
        s, op, kind, device = self.s, self.op, self.kind, self.syntax.device
        header = [f"/* loopopt {self.syntax.name} GEMV kernel (targets/cuda/gemv.py) for {op!r}",
                  *(f" * step {i + 1}: {step}" for i, step in enumerate(s.steps)),
                  f" * {kind.name} weights, {self.vectors} vectors of 16 bytes per output over {WARP} lanes; "
                  f"{self.warps} warps a block, {self.columns} column(s) a warp, {self.roles.m} row(s); "
                  f"grid {self.blocks}; {self.depth} of a lane's {self.rounds} rounds loaded together"
                  + (f"; k split over {self.shape.split} warps, {self.shape.share} vectors each"
                     if self.shape.split > 1 else "")
                  + (f"; activations staged once a block in shared memory "
                     f"({self.shape.staged_bytes(self.roles.m)} bytes)" if self.shape.staged else ""), " */"]
        signed = op.quant is not None and op.quant.activation == "int8"
        fields = self._fields()
        parts = [*header, _DEVICE_PRELUDE if device else _HOST_PRELUDE,
                 f"#define LO_DOT4 lo_dot4_{'ss' if signed else 'su'}",
                 f"#define LO_DOT4U lo_dot4_{'us' if signed else 'uu'}", "", kind.dot,
                 _LANE.format(**fields), (_DEVICE_NEST if device else _HOST_NEST).format(**fields)]
        if device:
            cdef = f"{self._launcher()};\nconst char *{ERROR_NAME}(int code);"
        else:
            cdef = f"void {KERNEL_NAME}({fields['host_declarations']});"
        return CudaSource("\n".join(parts), cdef, (*op.inputs, op.output), self.params, (self.blocks, 1, 1),
                          (self.shape.threads, 1, 1), True)


def print_gemv(schedule: Schedule, syntax: Syntax) -> CudaSource:
    """The GEMV kernel of ``schedule`` in ``syntax`` (ScheduleError where the family cannot run it)."""
    return _Kernel(schedule, syntax).source()


def pseudocode(schedule: Schedule) -> list[str]:
    """The nest the GEMV kernel of ``schedule`` runs, after ``codegen.pseudocode.header``'s lines."""
    shape = check(schedule)
    kind, warps, columns, vectors = shape.kind, shape.warps, shape.columns, shape.vectors
    op, roles = schedule.op, GemvRoles.of(schedule.op)
    a, b = op.inputs
    per = kind.weights
    block, warp = (next(loop.name for loop in schedule.bound_loops if loop.axis == axis)
                   for axis in ("block.x", "warp.x"))
    sums = {"float16": "float32 FMAs of the halves", "int8": "dp4a of the bytes",
            "i2_s": "dp4a of the 2-bit codes (w + 1), less the activations' dp4a sum"}[kind.name]
    store = "" if op.quant is None else f" (quantized epilogue: {op.quant.output})"
    return [f"# layouts: {', '.join(f'{t} {tag}' for t, tag in schedule.layouts)}",
            f"# cuda GEMV kernel (targets/cuda/gemv.py): {kind.name} weights, {per} a 16-byte vector",
            f"for {block} in 0..{shape.blocks}:    # block.x",
            *([f"  stage {a}[0..{roles.m}, :] in shared memory    # once a block, by all its threads, "
               f"under the first weight loads"] if shape.staged else []),
            f"  for {warp} in 0..{warps}:    # warp.x: {columns} column(s) j = {warps * columns}*{block} "
            f"+ {columns}*{warp} + c",
            *([f"   for share in 0..{shape.split}:    # k over {shape.split} warps of a block, {shape.share} "
               f"vectors each; added in order (shared memory)"] if shape.split > 1 else []),
            f"    for lane in 0..{WARP}:    # the warp's lanes",
            f"      for v in lane..{vectors if shape.split == 1 else 'the share'} step {WARP}:    # 16-byte "
            f"weight vectors; {shape.depth} rounds' weights loaded first",
            f"        for i in 0..{roles.m}:",
            f"          for c in 0..{columns}:",
            f"            acc[lane][i][c] += {a}[i, {per}v : {per}v + {per}] . "
            f"{b}[{per}v : {per}v + {per}, j]    # {sums}",
            f"    sum[i][c] = butterfly of acc over the {WARP} lanes    # __shfl_xor_sync 16, 8, 4, 2, 1",
            f"    if j < {roles.n}: {op.output}[i, j] = sum[i][c]{store}"]


def packs_weights(schedule: Schedule) -> bool:
    """Whether the kernel takes its weights i2_s-packed (``codegen/ternary.py``)."""
    return takes(schedule) and schedule.weight_format_mode == "i2_s"


class PackedWeights:
    """What a quantized GEMV kernel (device or host emulation) binds: ``quantized.call_values`` with
    i2_s weights packed to 2 bits each, and their byte count as the weights' elements."""

    schedule: Schedule

    def call_values(self, arrays: tuple, params: dict[str, Any]) -> dict[str, Any]:
        values = quantized.call_values(self, arrays, params)
        if packs_weights(self.schedule):
            weights = self.schedule.op.inputs[1]
            values[weights] = pack_i2s(values[weights])
        return values

    def _elements(self, name: str) -> int:
        if packs_weights(self.schedule) and name == self.schedule.op.inputs[1]:
            return packed_bytes(storage_elements(self.schedule, name))
        return super()._elements(name)

    def _shape(self, name: str) -> tuple[int, ...]:
        if packs_weights(self.schedule) and name == self.schedule.op.inputs[1]:
            return (self._elements(name),)
        return super()._shape(name)
