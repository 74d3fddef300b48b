"""The cuda target's depthwise family: a 2-D convolution of one input channel per output channel
(``groups == in_channels == out_channels``), memory-bound, read once and written once. The op is read
by its roles (``DepthwiseRoles``: two windows, one batch dim, one channel a group), so a Contraction
of that form runs the same kernel; the names below are a Conv2d's (another op's: its roles' dims).

A schedule is taken (``takes``) when it binds loops to GPU axes and vectorizes one (a CPU annotation
the SIMT printer refuses): the vectorized loop is a thread's vector of channels. ``dataflows.
gpu_depthwise`` builds it:

* ``I`` and ``O`` in ``NHWC``, ``W`` in ``HWIO`` (the taps' channels contiguous);
* ``k`` split into the vector (``vector`` channels: 16 bytes of float16/bfloat16 or float32, the
  innermost loop, vectorized), a loop bound to ``thread.x`` and one bound to ``block.y``;
* ``ow`` split into the thread's run (``run`` output pixels, unbound), a loop bound to ``thread.y``
  and one bound to ``block.x``;
* ``n`` fused with ``oh`` (in that order) and bound to ``block.z``; ``c`` (of extent 1), ``kh`` and
  ``kw`` unsplit and unbound.

Each thread loads its channels' ``KH x KW`` weight vectors once into registers; then per filter row
``kh`` the input pixels its run of outputs reads along W, each one vector load, converted to float32
once and used by every output of the run and tap that reads it (a register sliding window: with
stride 1 and a 3x3 filter, ``run + 2`` loads for ``3 run`` products a row). Sums are float32 FMAs in
the order ``kh, kw`` from the bias (or zero); the output is float32, stored as 16-byte vectors.
Where ``out_channels`` is not a multiple of the vector (a channel tail, or rows not 16-byte aligned)
every load and store is per element, masked past the last channel. Padding (asymmetric too), stride
and dilation are selects, not branches: a pixel outside the input is loaded from inside it and
zeroed, so that the compiler can issue every row's loads before the first product (on an H200, against
a branch per row and pixel: MobileNetV2's 144-channel 56x56 layer at N=32 0.0858 -> 0.0524 ms at runs of 4,
0.0360 -> 0.0340 ms at runs of 2; the 112x112 stride-2 layer's best 0.0396 ms (runs of 2) -> 0.0436 ms
(runs of 1)). The host emulation (``printer.HOST``) runs
the same thread function for every thread of the grid, so CI checks the indexing, masks and sums.

Refused with the reason: an op without those roles (the one it misses), groups other than the
channels, quantized ops, a fused epilogue, other layouts and splits than the ones above.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...codegen.params import KernelParam
from ...depthwise_roles import DepthwiseRoles
from ...expr import linear_terms
from ...ops import Op
from ...schedule import Schedule, ScheduleError
from . import output_types
from .gemv import HOST_HALF
from .printer import ERROR_NAME, KERNEL_NAME, NEST_NAME, CudaSource, Syntax

STEPS = ("layout", "split", "reorder", "fuse", "bind", "vectorize")
HOST_UNROLL = "#pragma GCC unroll 1 //"    # the emulation's loops rolled (the count a comment): a fast gcc

# the input's C type on the device; the thread code reads its bits (lo_elem)
_DEVICE_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float"}
_DEVICE_FLOAT = {"float16": "__half2float(__ushort_as_half(e))",
                 "bfloat16": "__uint_as_float((uint32_t) e << 16)", "float32": "e"}
_HOST_FLOAT = {"float16": "lo_half(e)",
               "bfloat16": "lo_bits_float((uint32_t) e << 16)", "float32": "e"}

_DEVICE_PRELUDE = """\
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define LO_DEVICE static __device__ __forceinline__
#define LO_UNROLL _Pragma("unroll")
typedef uint4 lo_v16;
LO_DEVICE lo_v16 lo_load(const void *p) { return __ldg((const uint4 *) p); }
LO_DEVICE void lo_store(float *p, const float *v) { *(float4 *) p = make_float4(v[0], v[1], v[2], v[3]); }
"""
_HOST_PRELUDE = """\
#include <stdint.h>
#include <string.h>
#include <math.h>
#define LO_DEVICE static inline
#define LO_UNROLL _Pragma("GCC unroll 8")
typedef struct { uint32_t x, y, z, w; } lo_v16;
LO_DEVICE lo_v16 lo_load(const void *p) { lo_v16 v; memcpy(&v, p, sizeof v); return v; }
LO_DEVICE void lo_store(float *p, const float *v) { memcpy(p, v, 4 * sizeof *v); }
LO_DEVICE float lo_bits_float(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }
""" + HOST_HALF

_THREAD = """\
typedef {elem} lo_elem;
LO_DEVICE float lo_float(lo_elem e) {{ return {to_float}; }}

/* the {vector} channels k0.. of the row at p as floats ({masked}) */
LO_DEVICE void lo_vector(const lo_elem *p, int k0, float out[{vector}])
{{
{load}
}}

/* one thread: channels lo_cv * {vector}.., output pixels lo_ow0 .. lo_ow0 + {run} - 1 of row lo_oh of
 * image lo_n */
LO_DEVICE void lo_thread({declarations}, int lo_n, int lo_oh, int lo_cv, int lo_ow0)
{{
    const int k0 = lo_cv * {vector};
    if (k0 >= {channels} || lo_ow0 >= {out_width}) return;
    float lo_w[{kh}][{kw}][{vector}], lo_acc[{run}][{vector}];
    {unroll} {kh}
    for (int kh = 0; kh < {kh}; ++kh)
        {unroll} {kw}
        for (int kw = 0; kw < {kw}; ++kw)
            lo_vector((const lo_elem *) {w} + (kh * {kw} + kw) * {channels} + k0, k0, lo_w[kh][kw]);
    {unroll} {run}
    for (int r = 0; r < {run}; ++r)
        {unroll} {vector}
        for (int v = 0; v < {vector}; ++v) lo_acc[r][v] = {init};
    {unroll} {kh}
    for (int kh = 0; kh < {kh}; ++kh) {{    /* no branch: every row's loads can be in flight at once */
        const int ih = lo_oh * {stride_h} + kh * {dilation_h} - {pad_h}, row_in = ih >= 0 && ih < {height};
        const lo_elem *row = (const lo_elem *) {i}
                             + ((ptrdiff_t) lo_n * {height} + (row_in ? ih : 0)) * {width} * {channels} + k0;
        float lo_x[{span}][{vector}];    /* the input pixels the run reads in this row, each loaded once */
        {unroll} {span}
        for (int j = 0; j < {span}; ++j) {{    /* outside the input: a pixel inside it loaded, zeros kept */
            const int iw = lo_ow0 * {stride_w} - {pad_w} + j, in = row_in && iw >= 0 && iw < {width};
            lo_vector(row + (ptrdiff_t) (in ? iw : 0) * {channels}, k0, lo_x[j]);
            {unroll} {vector}
            for (int v = 0; v < {vector}; ++v) lo_x[j][v] = in ? lo_x[j][v] : 0.0f;
        }}
        {unroll} {run}
        for (int r = 0; r < {run}; ++r)
            {unroll} {kw}
            for (int kw = 0; kw < {kw}; ++kw)
                {unroll} {vector}
                for (int v = 0; v < {vector}; ++v)
                    lo_acc[r][v] = fmaf(lo_x[r * {stride_w} + kw * {dilation_w}][v], lo_w[kh][kw][v],
                                        lo_acc[r][v]);
    }}
    {unroll} {run}
    for (int r = 0; r < {run}; ++r) {{
        if (lo_ow0 + r >= {out_width}) break;
        float *out = {o} + (((ptrdiff_t) lo_n * {out_height} + lo_oh) * {out_width} + lo_ow0 + r) * {channels}
                     + k0;
{store}
    }}
}}
"""
_ALIGNED_LOAD = """\
    const lo_v16 raw = lo_load(p);
    const lo_elem *e = (const lo_elem *) &raw;
    {unroll} {vector}
    for (int v = 0; v < {vector}; ++v) out[v] = lo_float(e[v]);"""
_MASKED_LOAD = """\
    {unroll} {vector}
    for (int v = 0; v < {vector}; ++v) out[v] = k0 + v < {channels} ? lo_float(p[v]) : 0.0f;"""
_ALIGNED_STORE = """\
        {unroll} {stores}
        for (int q = 0; q < {stores}; ++q) lo_store(out + 4 * q, lo_acc[r] + 4 * q);"""
_MASKED_STORE = """\
        {unroll} {vector}
        for (int v = 0; v < {vector}; ++v) if (k0 + v < {channels}) out[v] = lo_acc[r][v];"""

_DEVICE_NEST = """\
__global__ void __launch_bounds__({threads}) {nest}({declarations})
{{
    const int lo_z = (int) blockIdx.z;
    lo_thread({names}, lo_z / {out_height}, lo_z % {out_height},
              (int) (blockIdx.y * {threads_c} + threadIdx.x),
              (int) (blockIdx.x * {threads_w} + threadIdx.y) * {run});
}}

extern "C" {launcher}
{{
    {nest}<<<dim3({grid_x}, {grid_y}, {grid_z}), dim3({threads_c}, {threads_w}), 0,
             (cudaStream_t) lo_stream>>>({casts});
    return (int) cudaGetLastError();
}}

extern "C" const char *{error}(int code)
{{
    return cudaGetErrorString((cudaError_t) code);
}}
"""
_HOST_NEST = """\
void {kernel}({declarations})
{{
    for (int lo_z = 0; lo_z < {grid_z}; ++lo_z)
        for (int lo_by = 0; lo_by < {grid_y}; ++lo_by)
            for (int lo_bx = 0; lo_bx < {grid_x}; ++lo_bx)
                for (int lo_ty = 0; lo_ty < {threads_w}; ++lo_ty)
                    for (int lo_tx = 0; lo_tx < {threads_c}; ++lo_tx)
                        lo_thread({names}, lo_z / {out_height}, lo_z % {out_height},
                                  lo_by * {threads_c} + lo_tx,
                                  (lo_bx * {threads_w} + lo_ty) * {run});
}}
"""


def takes(schedule: Schedule) -> bool:
    """Whether the depthwise family builds ``schedule``: loops bound to GPU axes and one vectorized (the
    thread's channels), no ``tensorize``."""
    return not schedule.tensorized and bool(schedule.bound_loops) and schedule.vector_loop is not None


@dataclass(frozen=True)
class Shape:
    """A depthwise kernel's shape: ``vector`` channels and ``run`` output pixels a thread, ``threads_c``
    x ``threads_w`` threads a block (channels x pixels), the grid, and the op's roles."""

    vector: int
    run: int
    threads_c: int
    threads_w: int
    grid: tuple[int, int, int]
    roles: DepthwiseRoles

    @property
    def threads(self) -> int:
        return self.threads_c * self.threads_w


def is_depthwise(op: Op) -> bool:
    """Whether ``op`` is a depthwise 2-D convolution of a float type (``DepthwiseRoles``)."""
    return DepthwiseRoles.missing(op) is None


def _terms(schedule: Schedule, dim: str) -> dict[str, tuple[str, int]]:
    """The loops over ``dim`` by axis ("" for the unbound one), each with its coefficient in ``dim``;
    ScheduleError unless ``dim`` is a sum of them."""
    loops = [loop for loop in schedule.loops if dim in schedule.dims_of(loop.name)]
    terms, rest = linear_terms(schedule.dim_values[dim], frozenset(loop.name for loop in loops))
    by_axis = {loop.axis: (loop.name, terms.get(loop.name, 0)) for loop in loops}
    if len(by_axis) != len(loops) or rest.variables():
        raise ScheduleError(f"the cuda depthwise kernels take {dim} as a sum of loops on distinct axes "
                            f"(loops over {dim}: {', '.join(loop.name for loop in loops)})")
    return by_axis


def check(schedule: Schedule) -> Shape:
    """The kernel's shape; ScheduleError naming what the family cannot run."""
    op = schedule.op
    roles = DepthwiseRoles.of(op)
    schedule.refuse_epilogue("the cuda depthwise", "they store the sums and the bias")
    output_types.check(schedule, tensor_cores=False)
    other = [step for step in schedule.steps if step.primitive not in STEPS]
    if other:
        raise ScheduleError(f"{other[0]}: the cuda depthwise kernels take {', '.join(STEPS)} steps only")
    for tensor, wanted in roles.layouts.items():
        tag = schedule.layout_of(tensor).tag
        if tag != wanted:
            raise ScheduleError(f"{tensor} is in layout {tag!r}; the cuda depthwise kernels take {wanted!r}")
    vector, n, oh = roles.vector, roles.batch, roles.rows.out_dim
    k_name, ow_name = roles.channel, roles.columns.out_dim
    k, ow = _terms(schedule, k_name), _terms(schedule, ow_name)
    if set(k) != {"", "thread.x", "block.y"} or k[""][1] != 1 or schedule.vector_loop.name != k[""][0]:
        raise ScheduleError(f"the cuda depthwise kernels take {k_name} split into a vectorized loop of "
                            f"{vector} channels, one bound to thread.x and one to block.y (loops over "
                            f"{k_name} by axis: {k})")
    if set(ow) != {"", "thread.y", "block.x"} or ow[""][1] != 1:
        raise ScheduleError(f"the cuda depthwise kernels take {ow_name} split into an unbound run, one loop "
                            f"bound to thread.y and one to block.x (loops over {ow_name} by axis: {ow})")
    extent = {loop.name: loop.extent for loop in schedule.loops}
    run, threads_w, threads_c = extent[ow[""][0]], extent[ow["thread.y"][0]], extent[k["thread.x"][0]]
    if extent[k[""][0]] != vector:
        raise ScheduleError(f"the vectorized loop {k[''][0]!r} has {extent[k[''][0]]} channels; the cuda "
                            f"depthwise kernels of {op.dtype} load {vector} (16 bytes)")
    if (k["thread.x"][1], k["block.y"][1], ow["thread.y"][1], ow["block.x"][1]) != (
            vector, vector * threads_c, run, run * threads_w):
        raise ScheduleError(f"the cuda depthwise kernels take {k_name} = (block.y x threads + thread.x) x "
                            f"vector + lane and {ow_name} = (block.x x threads + thread.y) x run + r (split "
                            f"the inner loops first)")
    fused = [loop for loop in schedule.loops if schedule.dims_of(loop.name) == {n, oh}]
    z = fused[0].name if fused else ""
    values = schedule.dim_values
    if not fused or fused[0].axis != "block.z" or any(    # n outer: n = z // out_height, oh = z % out_height
            (values[n].evaluate({z: i}), values[oh].evaluate({z: i})) != divmod(i, roles.rows.out)
            for i in range(fused[0].extent)):
        raise ScheduleError(f"the cuda depthwise kernels take {n} fused with {oh} (fuse({n!r}, {oh!r}), {n} "
                            f"outer) and bound to block.z")
    for dim in (roles.reduction, roles.rows.tap_dim, roles.columns.tap_dim):
        loops = [loop for loop in schedule.loops if dim in schedule.dims_of(loop.name)]
        if len(loops) != 1 or loops[0].axis or schedule.dims_of(loops[0].name) != {dim}:
            raise ScheduleError(f"the cuda depthwise kernels take dim {dim!r} as one loop, unsplit and "
                                f"unbound (loops over it: {', '.join(loop.name for loop in loops)})")
    grid = (extent[ow["block.x"][0]], extent[k["block.y"][0]], extent[z])
    return Shape(vector, run, threads_c, threads_w, grid, roles)


def parameters(schedule: Schedule, syntax: Syntax) -> tuple[KernelParam, ...]:
    """The input and the weights (the host emulation's 16-bit floats as their bits), the float32 bias if
    the op has one, the float32 output."""
    op = schedule.op
    element = _DEVICE_TYPES[op.dtype] if syntax.device or op.dtype == "float32" else "uint16_t"
    bias = (KernelParam(op.bias_tensor, "float", const=True),) if op.bias else ()
    return (*(KernelParam(t, element, const=True) for t in op.inputs), *bias, KernelParam(op.output, "float"))


def print_depthwise(schedule: Schedule, syntax: Syntax) -> CudaSource:
    """The depthwise kernel of ``schedule`` in ``syntax`` (ScheduleError where the family cannot run it)."""
    shape = check(schedule)
    op, vector, run = schedule.op, shape.vector, shape.run
    rows, columns = shape.roles.rows, shape.roles.columns
    params = parameters(schedule, syntax)
    restrict = syntax.restrict
    declarations = ", ".join(p.declaration() if not p.pointer else
                             f"{'const ' if p.const else ''}{p.ctype} *{restrict} {p.name}" for p in params)
    names = ", ".join(p.name for p in params)
    aligned = op.channels % vector == 0
    fields = dict(
        vector=vector, run=run, unroll=syntax.unroll if syntax.device else HOST_UNROLL,
        channels=op.channels, kh=rows.taps, kw=columns.taps,
        stride_h=rows.stride, stride_w=columns.stride, dilation_h=rows.dilation, dilation_w=columns.dilation,
        pad_h=rows.pad, pad_w=columns.pad, height=rows.size, width=columns.size,
        out_height=rows.out, out_width=columns.out,
        span=(run - 1) * columns.stride + (columns.taps - 1) * columns.dilation + 1,
        i=op.inputs[0], w=op.inputs[1], o=op.output,
        stores=vector // 4, threads=shape.threads, threads_c=shape.threads_c, threads_w=shape.threads_w,
        grid_x=shape.grid[0], grid_y=shape.grid[1], grid_z=shape.grid[2], nest=NEST_NAME, kernel=KERNEL_NAME,
        error=ERROR_NAME, names=names, declarations=declarations,
        elem="float" if op.dtype == "float32" else "uint16_t",
        to_float=(_DEVICE_FLOAT if syntax.device else _HOST_FLOAT)[op.dtype],
        init=f"{op.bias_tensor}[k0 + v < {op.channels} ? k0 + v : 0]" if op.bias else "0.0f",
        masked="16-byte loads" if aligned else "per element, zero past the last channel")
    fields |= dict(load=(_ALIGNED_LOAD if aligned else _MASKED_LOAD).format(**fields),
                   store=(_ALIGNED_STORE if aligned else _MASKED_STORE).format(**fields))
    header = [f"/* loopopt {syntax.name} depthwise kernel (targets/cuda/depthwise.py) for {op!r}",
              *(f" * step {i + 1}: {step}" for i, step in enumerate(schedule.steps)),
              f" * a thread: {vector} channels x {run} output pixels along W; a block: {shape.threads_c} x "
              f"{shape.threads_w} threads; grid {shape.grid}", " */"]
    launcher = "int {}({}, void *lo_stream)".format(KERNEL_NAME, ", ".join(
        f"{'const ' if p.const else ''}void *{p.name}" for p in params))
    casts = ", ".join(f"({'const ' if p.const else ''}{p.ctype} *) {p.name}" for p in params)
    nest = (_DEVICE_NEST if syntax.device else _HOST_NEST).format(**fields, launcher=launcher, casts=casts)
    source = "\n".join([*header, _DEVICE_PRELUDE if syntax.device else _HOST_PRELUDE,
                        _THREAD.format(**fields), nest])
    host_declarations = ", ".join(p.declaration(restrict=False) for p in params)
    cdef = (f"{launcher};\nconst char *{ERROR_NAME}(int code);" if syntax.device
            else f"void {KERNEL_NAME}({host_declarations});")
    return CudaSource(source, cdef, tuple(p.name for p in params), params, shape.grid,
                      (shape.threads_c, shape.threads_w, 1), True)


def pseudocode(schedule: Schedule) -> list[str]:
    """The nest the depthwise kernel of ``schedule`` runs, after ``codegen.pseudocode.header``'s lines."""
    shape = check(schedule)
    op, roles = schedule.op, shape.roles
    n, oh, k, ow = roles.batch, roles.rows.out_dim, roles.channel, roles.columns.out_dim
    kh, kw = roles.rows.tap_dim, roles.columns.tap_dim
    vector = f"{k}0 : {k}0 + {shape.vector}"
    return [f"# layouts: {', '.join(f'{t} {tag}' for t, tag in schedule.layouts)}",
            f"# cuda depthwise kernel (targets/cuda/depthwise.py): grid {shape.grid}, block "
            f"{shape.threads_c} x {shape.threads_w}",
            f"for {n}, {oh} in {roles.batches} x {roles.rows.out}:    # block.z",
            f"  for {k}0 in 0..{roles.channels} step {shape.vector}:    # block.y, thread.x: channel vectors",
            f"    for {ow}0 in 0..{roles.columns.out} step {shape.run}:    # block.x, thread.y: a run of "
            "pixels",
            f"      w[{kh}][{kw}] = {op.inputs[1]}[{kh}, {kw}, 0, {vector}]    # in registers",
            f"      for {kh}:",
            f"        x[j] = {op.inputs[0]}[{n}, ih({kh}), iw({ow}0, j), {vector}]    # once",
            f"        for r in 0..{shape.run}, {kw}: acc[r] += x[r*stride + {kw}*dilation] * w[{kh}][{kw}]",
            f"      {op.output}[{n}, {oh}, {ow}0 + r, {vector}] = acc[r]"]
