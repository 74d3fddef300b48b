"""Helpers shared by the tests: quick and slow tiers of hypothesis tests, random convs and legal
schedules, the float kernel check, and the pure-Python oracles of the reuse engines."""
from __future__ import annotations

import itertools
import math
import subprocess
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, seed, settings
from hypothesis import strategies as st

import loopopt as lo
from loopopt import codegen
from loopopt.analysis.items import item_space
from loopopt.cbuild import compile_c
from loopopt.codegen.instr import tables
from loopopt.codegen.params import KernelParam, signature
from loopopt.driver import CffiDriver
from loopopt.layout import Layout
from loopopt.measure import checked, tolerance
from loopopt.quant_reference import random_call, reference_output
from loopopt.quant_reference import tolerance as quant_tolerance
from loopopt.targets.cuda import toolchain
from loopopt.targets.x86 import amx_runtime
from loopopt.targets.x86.isa import available_int_isas

ISAS = lo.available_isas()
INT_ISAS = available_int_isas()                    # the quantized kernels' ISAs here, scalar last
SIMD_INT_ISAS = [isa for isa in INT_ISAS if isa != "scalar"]
HYPOTHESIS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


# --- instruction-table probes -----------------------------------------------------------------------

def in_process(source: str, function: str, params: tuple[KernelParam, ...],
               flags: tuple[str, ...]) -> CffiDriver:
    """A driver calling ``function`` (taking ``params``) of ``source``, built for this machine."""
    return CffiDriver(compile_c(source, signature(function, params, restrict=False) + ";", flags), function)


# --- tiers ------------------------------------------------------------------------------------------

_QUICK_ISA_TURN = itertools.count()


def tiers(body, quick: int, full: int, *strategies, marks=(), isas=None, **named_strategies):
    """Two hypothesis tests of ``body``, ``full`` examples in all: ``quick`` of them in the quick tier,
    the others marked slow; ``marks`` (e.g. a parametrize) apply to both. ``isas``: ``body`` takes an
    ``isa`` parameter; the slow test runs on every one of ``isas``, the quick one on a single ISA, taken
    in turn by successive calls so that the quick tier still runs each (one compile, not one per ISA).

    Derandomized (CI's profile), hypothesis seeds both tests from ``body`` alone, so the slow test
    would redraw the quick test's examples first: it gets a seed of its own instead, and, where both
    run on the same ISAs, ``quick`` fewer examples (the same ``full - quick`` distinct ones in the
    slow tier as before, without rebuilding the quick tier's)."""
    def variant(examples, *extra, slow_seed=False):
        test = settings(max_examples=examples, **HYPOTHESIS)(given(*strategies, **named_strategies)(body))
        if slow_seed:
            test = seed(zlib.crc32(f"{body.__module__}.{body.__qualname__} slow".encode()))(test)
        for mark in (*marks, *extra):
            test = mark(test)
        return test
    derandomized = settings.default.derandomize
    if isas is None:
        slow = max(full - 2 * quick, 1) if derandomized else full - quick
        return variant(quick), variant(slow, pytest.mark.slow, slow_seed=derandomized)
    turn = isas[next(_QUICK_ISA_TURN) % len(isas)]
    return (variant(quick, pytest.mark.parametrize("isa", [turn])),
            variant(full - quick, pytest.mark.slow, pytest.mark.parametrize("isa", isas),
                    slow_seed=derandomized))


def quick_first(values):
    """``values`` as parameters: the first in the quick tier, the others marked slow."""
    return [*values[:1], *(pytest.param(v, marks=pytest.mark.slow) for v in values[1:])]


def rotated(cases, options, quick=None):
    """``(*case, option)`` parameters, named ``{case name}-{option}``, for every case (a name, or a
    name: case dict) and option; the quick tier keeps each case (each named in ``quick`` if given)
    with one option, taking the options in turn, and the other pairs are slow."""
    named = cases.items() if isinstance(cases, dict) else [(case, case) for case in cases]
    params = []
    for i, (name, case) in enumerate(named):
        for j, option in enumerate(options):
            in_quick = (i - j) % len(options) == 0 and (quick is None or name in quick)
            params.append(pytest.param(*(case if isinstance(case, tuple) else (case,)), option,
                                       id=f"{name}-{option}", marks=() if in_quick else pytest.mark.slow))
    return params


# --- random convs and schedules ---------------------------------------------------------------------

CONVS = {1: lo.Conv1d, 2: lo.Conv2d, 3: lo.Conv3d}


@st.composite
def conv_ops(draw, max_hw: int = 9, spatial: int = 2, max_channels: int = 5, max_batch: int = 3,
             dtype: str = "float32"):
    """A small convolution over ``spatial`` dims with ``dtype`` inputs: groups (depthwise too), kernel,
    stride, padding (symmetric, per side, "same" or "valid"), dilation, bias, batch (sizes up to
    ``max_hw``, 5 in 3-D; channels per group up to ``max_channels``)."""
    groups = draw(st.sampled_from([1, 1, 2, 3, "depthwise"]))
    cg = draw(st.integers(1, max_channels))
    kg = draw(st.integers(1, max_channels))
    if groups == "depthwise":
        groups, cg, kg = draw(st.integers(2, 2 + max_channels)), 1, 1
    max_hw = max_hw if spatial < 3 else min(max_hw, 5)
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(spatial))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(spatial))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(spatial))
    kind = draw(st.sampled_from(["symmetric", "symmetric", "per side", "same", "valid"]))
    if kind == "same":
        stride = (1,) * spatial
    pads = {"symmetric": [(p, p) for p in (draw(st.integers(0, 2)) for _ in range(spatial))],
            "per side": [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(spatial)],
            "same": [(0, 0)] * spatial, "valid": [(0, 0)] * spatial}[kind]
    padding = {"symmetric": tuple(lo for lo, _ in pads), "per side": tuple(pads)}.get(kind, kind)
    span = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    sizes = [draw(st.integers(max(1, s - lo - hi), max(max_hw, s))) for s, (lo, hi) in zip(span, pads)]
    return CONVS[spatial](cg * groups, kg * groups, kernel, stride=stride, padding=padding,
                          dilation=dilation, groups=groups, bias=draw(st.booleans()),
                          batch=draw(st.integers(1, max_batch)), dtype=dtype,
                          **dict(zip(CONVS[spatial].SIZES, sizes)))


@st.composite
def matmul_ops(draw, max_mn: int = 20, max_k: int = 19, batched: bool = True, dtype: str = "float32"):
    """A small matmul of ``dtype`` inputs: odd sizes, 0 to 2 batch dims (none unless ``batched``), either
    operand transposed."""
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2 if batched else 0)))
    return lo.Matmul(draw(st.integers(1, max_mn)), draw(st.integers(1, max_mn + max_mn)),
                     draw(st.integers(1, max_k)), batch=batch, trans_a=draw(st.booleans()),
                     trans_b=draw(st.booleans()), dtype=dtype)


@st.composite
def gemm_ops(draw, max_mn: int = 20, max_k: int = 19, dtype: str = "float32"):
    """A small Gemm of ``dtype`` inputs: odd sizes, transposes, alpha and beta (1 too), every broadcast
    shape of C or none."""
    m, n, k = draw(st.integers(1, max_mn)), draw(st.integers(1, 2 * max_mn)), draw(st.integers(1, max_k))
    scale = st.sampled_from([1.0, 1.0, 0.5, -2.0, 0.0, 3.25])
    return lo.Gemm(m, n, k, trans_a=draw(st.booleans()), trans_b=draw(st.booleans()), alpha=draw(scale),
                   beta=draw(scale), c_shape=draw(st.sampled_from([(m, n), (n,), (1, n), (m, 1), (1,), (1, 1),
                                                                  None])), dtype=dtype)


LAYOUTS = {"NCHW": ["NCHW", "NHWC", "NCHW4c", "NCHW16c", "CHWN"],
           "OIHW": ["OIHW", "HWIO", "OHWI", "OIHW4i4o", "OIHW16i16o"],
           "MK": ["MK", "KM", "MK4k"], "KN": ["KN", "NK", "KN8n"]}


def layout_tags(letters: str) -> list[str]:
    """Storage layouts to draw for a tensor with logical dims ``letters``: the 2-D conv's and the
    matmul's usual ones, else the plain order, rotated, reversed and blocked by 4 on the second dim."""
    if letters in LAYOUTS:
        return LAYOUTS[letters]
    tags = [letters, letters[1:] + letters[0], letters[::-1], f"{letters}4{letters[1].lower()}"]
    return list(dict.fromkeys(tags))


def register_block_sites(schedule, isa=None):
    """Loops at which ``schedule.register_block`` is accepted (and generates code on ``isa``)."""
    sites = []
    for name in schedule.loop_names:
        try:
            blocked = schedule.register_block(name)
            if isa is not None:
                codegen.generate(blocked, tables(isa).floats)
        except lo.ScheduleError:
            continue
        sites.append(name)
    return sites


def _parallel_ok(schedule: lo.Schedule, name: str) -> bool:
    """``schedule.parallel(name)`` is accepted."""
    try:
        schedule.parallel(name)
    except lo.ScheduleError:
        return False
    return True


def _renaming(schedule: lo.Schedule, step, *args, **kwargs) -> lo.Schedule:
    """``step(*args, **kwargs)`` (a step of ``schedule``), or ``schedule`` where the step's new loop
    names are taken (a contraction's tensor ``j_i`` beside its dim ``j``) or reserved: refused, as
    test_c_names checks."""
    try:
        return step(*args, **kwargs)
    except lo.ScheduleError as err:
        if "new loop name" not in str(err):
            raise
        return schedule


MAX_UNROLL = 64      # a fully unrolled loop of thousands of iterations (a fused nest) takes gcc minutes


@st.composite
def schedules(draw, op, isa=None):
    """A random legal schedule: splits, tiles, reorders, layouts, unroll, parallel, vectorize,
    register blocks (only where they generate code on ``isa``)."""
    s = lo.Schedule(op)
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["split", "tile", "reorder", "fuse"]))
        names = s.loop_names
        if action == "split":
            s = _renaming(s, s.split, draw(st.sampled_from(names)), draw(st.integers(1, 6)))
        elif action == "tile":
            picked = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
            s = _renaming(s, s.tile, **{n: draw(st.integers(1, 5)) for n in picked})
        elif action == "reorder" and len(names) > 1:
            s = s.reorder(*draw(st.permutations(names)))
        elif len(names) > 1:
            pos = draw(st.integers(0, len(names) - 2))
            s = _renaming(s, s.fuse, names[pos], names[pos + 1])
    for tensor in op.tensors:
        s = s.layout(tensor, draw(st.sampled_from(layout_tags(op.tensor(tensor).letters))))
    short = [loop.name for loop in s.loops if loop.extent <= MAX_UNROLL]
    if short and draw(st.booleans()):
        s = s.unroll(draw(st.sampled_from(short)))
    if draw(st.booleans()):
        candidates = [n for n in s.loop_names if _parallel_ok(s, n)]
        if candidates:
            s = s.parallel(draw(st.sampled_from(candidates)))
    if draw(st.integers(0, 3)) and not s.loops[-1].parallel:
        s = s.vectorize(s.loop_names[-1])
    if draw(st.booleans()):
        sites = register_block_sites(s, isa)
        if sites:
            s = s.register_block(draw(st.sampled_from(sites)))
    return s


# activations blocked along a spatial axis: alone, both, under a channel block; with 4 input channels
# innermost (the u8 x s8 dot's activations)
SPATIALLY_BLOCKED = ("NCHW4w", "NCHW3w", "NCHW2h", "NCHW2h3w", "NHWC4w", "NCHW16c4w", "NCHW8c2w", "NCHW4c3w",
                     "NCHW16c2h", "NCHW4c3h")
DOT_SPATIALLY_BLOCKED = ("NCHW3w4c", "NCHW2h4c", "NHW2wC")


@st.composite
def spatially_blocked_schedules(draw, isa, spec=None):
    """A register block over a tile of a random conv's output rows or columns (along a blocked axis of
    the activations, ``SPATIALLY_BLOCKED``) and output channels, its reduction loops in any order;
    quantized by ``spec`` if given (then sometimes in the u8 x s8 dot's form). That axis's stride is
    often a multiple of its block (the block's loads then lie at constant distances: one operand base)
    and its padding up to the stride, so a block's first load (its base, the first lane of a vector
    along the positions) falls in the padding, in block -1, and the others do not. Only schedules
    that generate code on ``isa``."""
    dot = spec is not None and draw(st.booleans())
    tag = draw(st.sampled_from(DOT_SPATIALLY_BLOCKED if dot else SPATIALLY_BLOCKED))
    layout = Layout.parse(tag, "NCHW")
    axis = draw(st.sampled_from([a for a in "HW" if layout.block(a) > 1]))
    block = layout.block(axis)
    geometry = []
    for along in (axis == "H", axis == "W"):
        kernel, dilation = draw(st.integers(1, 3 if along else 2)), draw(st.integers(1, 2))
        stride = draw(st.sampled_from([block, 2 * block, 1, 2, 3] if along else [1, 2]))
        padding = (draw(st.integers(int(along), stride)), draw(st.integers(0, 2)))
        span = dilation * (kernel - 1) + 1
        geometry.append((kernel, stride, padding, dilation,
                         draw(st.integers(max(1, span - sum(padding)), 9 if along else 4))))
    kernel, stride, padding, dilation, (height, width) = zip(*geometry)
    groups = draw(st.sampled_from([1, 1, 2]))
    op = lo.Conv2d(groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 10)), kernel, stride=stride,
                   padding=padding, dilation=dilation, groups=groups, bias=draw(st.booleans()),
                   batch=draw(st.integers(1, 2)), height=height, width=width, quant=spec)
    tiled, other = ("oh", "ow") if axis == "H" else ("ow", "oh")
    s = (lo.Schedule(op).layout("I", tag).layout("O", draw(st.sampled_from(["NHWC", "NCHW16c", "NCHW"])))
         .layout("W", "OIHW16o4i" if dot else draw(st.sampled_from(["HWIO", "OHWI", "OIHW16i16o"]))))
    if dot:
        s = s.split("c", 4)
    s = s.tile(**{tiled: draw(st.integers(2, 4)), "k": draw(st.sampled_from([4, 8, 16]))})
    reduction = draw(st.permutations(["c_o" if dot else "c", "kh", "kw"]))
    lanes = draw(st.permutations([f"{tiled}_i", "k_i"]))
    s = s.reorder("n", f"{tiled}_o", other, "k_o", *reduction, *(["c_i"] if dot else []), *lanes)
    try:
        s = s.vectorize(lanes[-1]).register_block(reduction[0])
    except lo.ScheduleError:
        assume(False)
    assume(generates(s, isa))
    return s


@st.composite
def even_conv_ops(draw, max_hw: int = 9):
    """A random bfloat16 conv with an even number of input channels per group (whole bf16 pairs) and
    at least 2 output channels (a vector loop of one lane is not a loop of the output: no dot)."""
    op = draw(conv_ops(max_hw, dtype="bfloat16"))
    pairs = draw(st.integers(1, 3))
    return lo.Conv2d(2 * pairs * op.groups, max(op.out_channels, 2), op.kernel_size, stride=op.stride,
                     padding=op.padding, dilation=op.dilation, groups=op.groups, bias=op.bias, batch=op.batch,
                     height=op.height, width=op.width, dtype="bfloat16")


def conv_wide_schedule(op: lo.Conv2d, block: int, pixels: int, dot_inner: bool, register_block: bool
                       ) -> lo.Schedule:
    """A quantized conv's dot form with s16 weights (codegen/wide.py): c split by 4, weights OIHW8o4i,
    lanes along k, ``block`` output channels by ``pixels`` columns, the dot loop innermost but for the
    vector loop (``dot_inner``; a register block's always) or outside the block's columns, register-blocked
    or not."""
    s = (lo.Schedule(op).layout("I", "NHWC").layout("O", "NHWC").layout("W", "OIHW8o4i").split("c", 4)
         .tile(ow=pixels, k=block))
    inner = ("c_i", "ow_i", "k_i") if dot_inner or register_block else ("ow_i", "c_i", "k_i")
    s = s.reorder("n", "k_o", "oh", "ow_o", "c_o", "kh", "kw", *inner).vectorize("k_i")
    return (s.register_block("c_o") if register_block else s).weight_format("s16")


def conv_dot_schedule(op: lo.Conv2d, block: bool) -> lo.Schedule:
    """NHWC activations, weights in pairs of input channels (OIHW16o2i): c_i (2) is the bf16 dot loop
    (vdpbf16ps where the ISA and CPU have it)."""
    s = (lo.Schedule(op).layout("I", "NHWC").layout("O", "NHWC").layout("W", "OIHW16o2i")
         .split("k", 16).split("c", 2).reorder("n", "k_o", "oh", "ow", "c_o", "kh", "kw", "c_i", "k_i")
         .vectorize("k_i"))
    return s.register_block("c_o") if block else s


# --- float kernels ----------------------------------------------------------------------------------

def check(schedule: lo.Schedule, isa: str, threads: int = 1, kernel=None):
    """The kernel of ``schedule`` on ``isa`` (on ``threads`` threads; ``kernel``: that kernel, built
    already) agrees with the op's numpy reference; returns the kernel."""
    op = schedule.op
    inputs = op.random_inputs(seed=1)
    args = [inputs[t] for t in op.call_tensors]
    kernel = schedule.compile(isa) if kernel is None else kernel
    kernel.set_threads(threads)
    if kernel.epilogue is not None:      # a residual to add: measure's check makes one
        ok, error, _ = checked(kernel, seed=1)
        assert ok, (schedule.pseudocode(isa), error)
        return kernel
    result = kernel(*args)
    expected = op.reference(*args)
    assert result.shape == expected.shape
    error = np.abs(result - expected)
    bound = tolerance(op, inputs, kernel.sum_roundoff)
    assert np.all(error <= bound), (schedule.pseudocode(isa), float(error.max()))
    return kernel


@st.composite
def winograd_convs(draw, max_hw: int = 13, max_channels: int = 19, quant=None):
    """A 3x3 stride-1 conv with odd or even sizes, channels not a multiple of 16, batch up to 2,
    symmetric or asymmetric padding 0..2, with or without a bias; quantized as drawn from ``quant`` (a
    strategy of QuantSpecs) if given."""
    pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(2))
    h, w = (draw(st.integers(max(1, 3 - lo_ - hi), max_hw)) for lo_, hi in pads)
    return lo.Conv2d(draw(st.integers(1, max_channels)), draw(st.integers(1, max_channels)), 3, padding=pads,
                     bias=draw(st.booleans()), batch=draw(st.integers(1, 2)), height=h, width=w,
                     quant=quant if quant is None else draw(quant))


# --- quantized kernels ------------------------------------------------------------------------------

SPECS = st.builds(lo.QuantSpec, activation=st.sampled_from(lo.quant.ACTIVATIONS), per_channel=st.booleans(),
                  weight_symmetric=st.booleans(), output=st.sampled_from(lo.quant.OUTPUTS),
                  weight=st.sampled_from(lo.quant.WEIGHTS))


@st.composite
def quantized_schedules(draw, op, isa=None):
    """A random legal schedule of quantized ``op`` (``schedules``), either compensation, sometimes
    dequantizing (float32 output; only where that generates code on ``isa``: it needs the output
    channel constant, contiguous or strided along the vector loop)."""
    s = draw(schedules(op, isa))
    if draw(st.booleans()):
        s = s.compensation("kernel")
    if op.quant.dequantized and draw(st.integers(0, 3)) == 0 and generates(s.arithmetic("dequantize"), isa):
        s = s.arithmetic("dequantize")
    return s


def generates(schedule: lo.Schedule, isa) -> bool:
    """``schedule`` generates code on ``isa`` (always True when ``isa`` is None)."""
    try:
        if isa is not None:
            codegen.generate(schedule, tables(isa).floats)
    except lo.ScheduleError:
        return False
    return True


def raw_products(kernel, args, params):
    """What the nest must accumulate: sum of x' * w' over the valid taps (x' = x + shift, w' = w +
    weight_shift), and where a tap dot fills its window's padding bytes with the activations' zero
    point (``plan.tap_fill``) zx' * w' over those padding taps too, wrapped to int32."""
    op, plan = kernel.op, kernel.plan
    x = args[0].astype(np.int64) + plan.shift
    w = args[1].astype(np.int64) + plan.weight_shift
    p = op.reference(x, w).astype(np.int64)      # exact: float64 holds these sums exactly
    if plan.tap_fill:
        zx = int(np.asarray(params["x_zero_point"]).reshape(-1)[0]) + plan.shift
        p += zx * padding_tap_sums(op, w, op.windows.index(plan.tap_dot.window))[None]
    return p.astype(np.uint32).astype(np.int32)


def padding_tap_sums(op, w, filled):
    """Per output channel and position of conv ``op``: the sum of weights ``w`` (``[K, C/g, *taps]``)
    over the taps in window ``filled``'s padding whose other windows' taps are valid."""
    masks = []
    for i, window in enumerate(op.windows):
        start = np.arange(window.out)[:, None] * window.stride - window.pad
        column = start + np.arange(window.taps) * window.dilation
        inside = (column >= 0) & (column < window.size)
        masks.append((~inside if i == filled else inside).astype(np.int64))
    taps = "abc"[:len(masks)]
    spec = f"kc{taps}," + ",".join(f"{t.upper()}{t}" for t in taps) + "->k" + taps.upper()
    return np.einsum(spec, w, *masks)


@st.composite
def integer_calls(draw, op):
    """``(arrays, params)`` of a call of quantized ``op`` that calibration (``random_call``) would not
    make: full-range integers and any zero points, the ends of their dtype's range included
    (symmetric weights: ``symmetric_zero_point``), scales such that requantized outputs both round
    and saturate, and a bias of ``spec.bias_dtype``."""
    spec, k = op.quant, op.channels
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def integers(dtype, shape):
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max + 1, shape)
        ends = rng.random(shape)
        return np.where(ends < 0.1, info.min, np.where(ends > 0.9, info.max, values)).astype(dtype)

    arrays = [integers(spec.activation, op.tensor(op.inputs[0]).shape),
              integers(spec.weight, op.tensor(op.inputs[1]).shape)]
    per_weight = (k,) if spec.per_channel else ()
    if spec.weight_symmetric:
        zw = np.full(per_weight, lo.quant.symmetric_zero_point(spec.weight), spec.weight)
    else:
        zw = integers(spec.weight, per_weight)
    params = {"x_zero_point": integers(spec.activation, ()), "w_zero_point": zw}
    if spec.scaled:
        params |= {"x_scale": np.float32(2.0 ** draw(st.integers(-8, 0))),
                   "w_scale": rng.uniform(0.001, 0.05, per_weight).astype(np.float32)}
    if spec.requantized:
        largest = params["x_scale"] * np.max(params["w_scale"])
        params |= {"y_scale": np.float32(largest * 2.0 ** draw(st.integers(0, 14))),
                   "y_zero_point": integers(spec.output, ())}
    if op.bias:
        arrays.append(rng.integers(-2**20, 2**20, k).astype(np.int32) if spec.bias_dtype == np.int32
                      else rng.standard_normal(k).astype(np.float32))
    return arrays, params


def tap_schedule(op: lo.Conv2d, pixels: int, channels: int, block_at: str = "c", unroll: bool = False):
    """Channels-first activations and output, the weights' kw blocked by 4, kw split by 4 when longer,
    a register block of ``channels`` output channels times ``pixels`` columns (the lanes) at ``block_at``
    (``c``: the block holds final sums; ``kh``: c outside it, partial sums in the int32 workspace)."""
    taps = ["kw_o", "kw_i"] if op.windows[-1].taps > 4 else ["kw"]
    s = lo.Schedule(op).layout("W", "OIHW4w")
    if len(taps) > 1:
        s = s.split("kw", 4)
    s = s.tile(k=channels, ow=pixels).reorder("n", "k_o", "oh", "ow_o", "c", "kh", *taps).vectorize("ow_i")
    return (s.unroll("kh") if unroll else s).register_block(block_at)


@st.composite
def tap_convs(draw):
    """Depthwise convs and stems (few input channels, long kernels), any stride, dilation and per-side
    padding, widths that leave a partial vector, batch 1 or 2, every QuantSpec."""
    kind = draw(st.sampled_from(["depthwise", "stem", "grouped"]))
    if kind == "depthwise":
        groups = draw(st.integers(1, 5))
        cin, cout = groups, groups * draw(st.integers(1, 2))
    else:
        groups = 1 if kind == "stem" else 2
        cin, cout = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 8))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 5)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 3)))
    padding = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(2))
    rows = max(1, dilation[0] * (kh - 1) + 1 - sum(padding[0]))
    height = draw(st.integers(rows, max(rows, 6)))
    width = draw(st.integers(max(1, dilation[1] * (kw - 1) + 1 - sum(padding[1])), 45))
    return lo.Conv2d(cin, cout, (kh, kw), stride=stride, padding=padding, dilation=dilation, groups=groups,
                     batch=draw(st.integers(1, 2)), height=height, width=width, bias=draw(st.booleans()),
                     quant=draw(SPECS))


def check_quantized(schedule: lo.Schedule, isa: str, seed: int = 1, call=None, threads: int = 1, kernel=None,
                    runs: int = 1):
    """The quantized kernel of ``schedule`` on ``isa`` (on ``threads`` threads; ``kernel``: that kernel,
    built already) agrees with quant.py's exact reference (raw products exactly, requantized and int32
    outputs bit for bit, float outputs within their bound), on ``call`` (``(arrays, params)``) or else
    on ``random_call(op, seed)``, after ``runs`` runs on the same buffers (2: no sum is added to the
    last run's)."""
    op = schedule.op
    kernel = schedule.compile(isa) if kernel is None else kernel
    kernel.set_threads(threads)
    args, params = call if call is not None else random_call(op, seed)
    buffers = kernel.prepare(*args, **params)
    for _ in range(runs):
        kernel.run(buffers)
    result = kernel.output(buffers)
    expected = reference_output(op, args, params)
    assert result.dtype == expected.dtype and result.shape == expected.shape
    where = (schedule.pseudocode(), isa)
    if kernel.plan.integer and not kernel.plan.fused_epilogue:
        assert np.array_equal(kernel.accumulators(buffers), raw_products(kernel, args, params)), where
    if not op.quant.dequantized:
        assert np.array_equal(result, expected), (where, np.abs(result.astype(int) - expected).max())
    else:
        bound = quant_tolerance(op, args, params, schedule.arithmetic_mode == "dequantize")
        assert np.all(np.abs(result - expected) <= bound), (where, float(np.abs(result - expected).max()))
    return kernel


# --- binary kernels -------------------------------------------------------------------------------

SPECS_BINARY = st.builds(lambda per_channel, output: lo.QuantSpec("binary", per_channel, True, output,
                                                                  "binary"),
                         st.booleans(), st.sampled_from(["int32", "float32"]))


def check_binary(kernel, seed: int = 1):
    """A binary op's XNOR + popcount ``kernel`` against quant.py's reference on a random call (int32
    outputs bit for bit, float outputs within their bound); returns the kernel."""
    op = kernel.op
    args, params = random_call(op, seed)
    result = kernel(*args, **params)
    expected = reference_output(op, args, params)
    assert result.dtype == expected.dtype and result.shape == expected.shape
    if op.quant.dequantized:
        assert np.all(np.abs(result - expected) <= quant_tolerance(op, args, params, False))
    else:
        assert np.array_equal(result, expected), np.abs(result.astype(int) - expected).max()
    return kernel


@st.composite
def binary_convs(draw, words):
    """A random 2-D or 1-D binary conv (padding symmetric or per side, stride, dilation, groups,
    depthwise, batch, bias) with 1 to ``words`` words of input channels per group (not a multiple of
    64), up to 3 vectors and a tail of output channels per group."""
    base = draw(conv_ops(max_hw=7, spatial=draw(st.sampled_from([2, 2, 1]))))
    cg = draw(st.integers(1, 64 * words))
    kg = draw(st.one_of(st.just(base.out_channels // base.groups), st.integers(1, 27)))
    conv = type(base)
    return conv(cg * base.groups, kg * base.groups, base.kernel_size, stride=base.stride, padding=base.pads,
                dilation=base.dilation, groups=base.groups, bias=base.bias, batch=base.batch,
                quant=draw(SPECS_BINARY), **dict(zip(conv.SIZES, base.sizes)))


# --- reuse distances --------------------------------------------------------------------------------

GRANULARITIES = [("element", 64), ("line", 16), ("line", 64)]


@st.composite
def reuse_schedules(draw):
    """Tiny convs (1 to 3 spatial dims, padding, stride, groups, batch) and matmuls (batch dims,
    transposes) under splits, partial tiles, reorders, fusions and layouts: traces short enough for
    the pure-Python oracles."""
    kind = draw(st.sampled_from(["matmul", "conv", "conv", "conv"]))
    if kind == "matmul":
        op = draw(matmul_ops(max_mn=6, max_k=6))
    else:
        spatial = draw(st.sampled_from([1, 2, 2, 3]))
        op = draw(conv_ops(max_hw={1: 9, 2: 7, 3: 3}[spatial], spatial=spatial, max_channels=2, max_batch=2))
    tags = {t: layout_tags(op.tensor(t).letters) for t in op.tensors}
    s = lo.Schedule(op)
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["split", "tile", "reorder", "fuse", "layout"]))
        names = s.loop_names
        try:
            if kind == "tile":
                picked = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
                s = s.tile(**{name: draw(st.integers(1, 4)) for name in picked})
            elif kind == "split":
                s = s.split(draw(st.sampled_from(names)), draw(st.integers(1, 4)))
            elif kind == "reorder":
                s = s.reorder(*draw(st.permutations(names)))
            elif kind == "fuse" and len(names) > 1:
                pos = draw(st.integers(0, len(names) - 2))
                s = s.fuse(names[pos], names[pos + 1])
            elif kind == "layout":
                tensor = draw(st.sampled_from(sorted(tags)))
                s = s.layout(tensor, draw(st.sampled_from(tags[tensor])))
        except lo.ScheduleError:
            pass
    return s


def lru_stack(trace):
    """Independent oracle: stack distance as the number of distinct items since the last use."""
    last, out = {}, []
    for t, item in enumerate(trace):
        out.append(len(set(trace[last[item] + 1:t])) if item in last else math.inf)
        last[item] = t
    return out


def python_trace(schedule, granularity, line_size):
    """(tensor, item) of every access, by enumerating the loops in Python."""
    space = item_space(schedule, granularity, line_size)
    names = [loop.name for loop in schedule.loops]
    offsets = [(t, schedule.offset(t.name)) for t in space.tensors]
    trace = []
    for values in itertools.product(*(range(loop.extent) for loop in schedule.loops)):
        env = dict(zip(names, values))
        if all(g.evaluate(env) for g in schedule.guards):
            for t, off in offsets[:2] + offsets[2:] * 2:
                trace.append((t.name, t.base + (off.evaluate(env) * t.element_bytes >> t.shift)))
    return trace


# --- AMX ----------------------------------------------------------------------------------------------

def _missing_amx() -> str | None:
    try:
        amx_runtime.require_amx()
    except amx_runtime.AmxUnavailableError as err:
        return str(err)
    return None


MISSING_AMX = _missing_amx()       # why this process cannot run tile code (None: it can)
needs_amx = pytest.mark.skipif(MISSING_AMX is not None, reason=f"needs AMX: {MISSING_AMX}")


def needs(probe) -> pytest.MarkDecorator:
    """Skip where ``probe()`` (a toolchain or device lookup) raises TargetUnavailableError, with its
    reason."""
    try:
        probe()
    except lo.targets.TargetUnavailableError as err:
        return pytest.mark.skipif(True, reason=str(err))
    return pytest.mark.skipif(False, reason="available")


def sass(kernel) -> str:
    """The SASS of a built cuda kernel (``cuobjdump --dump-sass``); the test is skipped where there are no
    cuobjdump and nvdisasm."""
    cuobjdump, nvdisasm = toolchain.tool("cuobjdump"), toolchain.tool("nvdisasm")
    if cuobjdump is None or nvdisasm is None:
        pytest.skip("no cuobjdump and nvdisasm here (pip install nvidia-cuda-cuobjdump "
                    "nvidia-cuda-nvdisasm): the SASS is unchecked")
    return subprocess.run([str(cuobjdump), "--dump-sass", str(kernel.build.library)], capture_output=True,
                          text=True, check=True, env={"PATH": str(nvdisasm.parent)}).stdout
