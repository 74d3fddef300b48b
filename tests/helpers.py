"""Helpers shared by the tests: quick and slow tiers of hypothesis tests, random convs and legal
schedules, the float kernel check, and the pure-Python oracles of the reuse engines."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loopopt as lo
from loopopt import amx, codegen
from loopopt.analysis.items import item_space
from loopopt.measure import tolerance
from loopopt.quant_reference import random_call, reference_output
from loopopt.quant_reference import tolerance as quant_tolerance
from loopopt.reference import conv2d_reference, matmul_reference

ISAS = lo.available_isas()
HYPOTHESIS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


# --- tiers ------------------------------------------------------------------------------------------

def tiers(body, quick: int, full: int, *strategies, marks=(), **named_strategies):
    """Two hypothesis tests of ``body``, ``full`` examples in all: ``quick`` of them in the quick tier,
    the others marked slow; ``marks`` (e.g. a parametrize) apply to both."""
    def variant(examples, *extra):
        test = settings(max_examples=examples, **HYPOTHESIS)(given(*strategies, **named_strategies)(body))
        for mark in (*marks, *extra):
            test = mark(test)
        return test
    return variant(quick), variant(full - quick, pytest.mark.slow)


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

@st.composite
def conv_ops(draw, max_hw: int = 9, dtype: str = "float32"):
    """A small Conv2d: groups (depthwise too), kernel, stride, padding, dilation, bias, batch."""
    groups = draw(st.sampled_from([1, 1, 2, 3, "depthwise"]))
    cg = draw(st.integers(1, 5))
    kg = draw(st.integers(1, 5))
    if groups == "depthwise":
        groups, cg, kg = draw(st.integers(2, 6)), 1, 1
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    span = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    height = draw(st.integers(max(1, span[0] - 2 * padding[0]), max_hw))
    width = draw(st.integers(max(1, span[1] - 2 * padding[1]), max_hw))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    return lo.Conv2d(cg * groups, kg * groups, kernel, stride=stride, padding=padding, dilation=dilation,
                     groups=groups, bias=draw(st.booleans()), batch=draw(st.integers(1, 3)),
                     height=height, width=width, dtype=dtype)


ACT_LAYOUTS = ["NCHW", "NHWC", "NCHW4c", "NCHW16c", "CHWN"]
W_LAYOUTS = ["OIHW", "HWIO", "OHWI", "OIHW4i4o", "OIHW16i16o"]


def register_block_sites(schedule, isa=None):
    """Loops at which ``schedule.register_block`` is accepted (and generates code on ``isa``)."""
    sites = []
    for name in schedule.loop_names:
        try:
            blocked = schedule.register_block(name)
            if isa is not None:
                codegen.generate(blocked, codegen.ISAS[isa])
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


@st.composite
def schedules(draw, op, isa=None):
    """A random legal schedule: splits, tiles, reorders, layouts, unroll, parallel, vectorize,
    register blocks (only where they generate code on ``isa``)."""
    s = lo.Schedule(op)
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["split", "tile", "reorder", "fuse"]))
        names = s.loop_names
        if action == "split":
            s = s.split(draw(st.sampled_from(names)), draw(st.integers(1, 6)))
        elif action == "tile":
            picked = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
            s = s.tile(**{n: draw(st.integers(1, 5)) for n in picked})
        elif action == "reorder" and len(names) > 1:
            s = s.reorder(*draw(st.permutations(names)))
        elif len(names) > 1:
            pos = draw(st.integers(0, len(names) - 2))
            s = s.fuse(names[pos], names[pos + 1])
    if isinstance(op, lo.Conv2d):
        s = s.layout("I", draw(st.sampled_from(ACT_LAYOUTS))).layout("O", draw(st.sampled_from(ACT_LAYOUTS)))
        s = s.layout("W", draw(st.sampled_from(W_LAYOUTS)))
    else:
        s = s.layout("A", draw(st.sampled_from(["MK", "KM", "MK4k"])))
        s = s.layout("B", draw(st.sampled_from(["KN", "NK", "KN8n"])))
    if draw(st.booleans()):
        s = s.unroll(draw(st.sampled_from(s.loop_names)))
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


# --- float kernels ----------------------------------------------------------------------------------

def check(schedule: lo.Schedule, isa: str) -> None:
    """The kernel of ``schedule`` on ``isa`` agrees with the op's numpy reference."""
    op = schedule.op
    inputs = op.random_inputs(seed=1)
    args = [inputs[t] for t in op.call_tensors]
    result = schedule.compile(isa)(*args)
    expected = op.reference(*args)
    assert result.shape == expected.shape
    error = np.abs(result - expected)
    assert np.all(error <= tolerance(op, inputs)), (schedule.pseudocode(isa), float(error.max()))


# --- quantized kernels ------------------------------------------------------------------------------

SPECS = st.builds(lo.QuantSpec, activation=st.sampled_from(lo.quant.ACTIVATIONS), per_channel=st.booleans(),
                  weight_symmetric=st.booleans(), output=st.sampled_from(lo.quant.OUTPUTS),
                  weight=st.sampled_from(lo.quant.WEIGHTS))


def raw_products(kernel, args):
    """What the nest must accumulate: sum of x' * w' over the valid taps (x' = x + shift, w' = w +
    weight_shift), wrapped to int32."""
    op, plan = kernel.op, kernel.plan
    x = args[0].astype(np.int64) + plan.shift
    w = args[1].astype(np.int64) + plan.weight_shift
    if isinstance(op, lo.Conv2d):
        p = conv2d_reference(x, w, None, stride=op.stride, padding=op.padding, dilation=op.dilation,
                             groups=op.groups, acc_dtype=np.int64)
    else:
        p = matmul_reference(x, w, acc_dtype=np.int64)
    return p.astype(np.uint32).astype(np.int32)


def check_quantized(schedule: lo.Schedule, isa: str, seed: int = 1):
    """The quantized kernel of ``schedule`` on ``isa`` agrees with quant.py's exact reference (raw
    products exactly, requantized and int32 outputs bit for bit, float outputs within their bound)."""
    op = schedule.op
    kernel = schedule.compile(isa)
    args, params = random_call(op, seed)
    buffers = kernel.prepare(*args, **params)
    kernel.run(buffers)
    result = kernel.output(buffers)
    expected = reference_output(op, args, params)
    assert result.dtype == expected.dtype and result.shape == expected.shape
    where = (schedule.pseudocode(), isa)
    if kernel.plan.integer and not kernel.plan.fused_epilogue:
        assert np.array_equal(kernel.accumulators(buffers), raw_products(kernel, args)), where
    if not op.quant.dequantized:
        assert np.array_equal(result, expected), (where, np.abs(result.astype(int) - expected).max())
    else:
        bound = quant_tolerance(op, args, params, schedule.arithmetic_mode == "dequantize")
        assert np.all(np.abs(result - expected) <= bound), (where, float(np.abs(result - expected).max()))
    return kernel


# --- reuse distances --------------------------------------------------------------------------------

GRANULARITIES = [("element", 64), ("line", 16), ("line", 64)]


@st.composite
def reuse_schedules(draw):
    """Tiny convs (padding, stride, groups, batch) and matmuls under splits, partial tiles, reorders,
    fusions and layouts: traces short enough for the pure-Python oracles."""
    if draw(st.booleans()):
        op = lo.Matmul(draw(st.integers(1, 6)), draw(st.integers(1, 6)), draw(st.integers(1, 6)))
        tags = {"A": ["MK", "KM"], "B": ["KN", "NK", "KN4n"]}
    else:
        groups = draw(st.sampled_from([1, 1, 2]))
        channels = (groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3)))
        op = lo.Conv2d(*channels, draw(st.integers(1, 3)), stride=draw(st.integers(1, 2)),
                       padding=draw(st.integers(0, 2)), groups=groups, batch=draw(st.integers(1, 2)),
                       height=draw(st.integers(3, 7)), width=draw(st.integers(3, 7)))
        tags = {"I": ["NCHW", "NHWC", "NCHW2c"], "W": ["OIHW", "HWIO", "OIHW2i2o"],
                "O": ["NCHW", "NHWC", "NCHW4c"]}
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
        amx.require_amx()
    except amx.AmxUnavailableError as err:
        return str(err)
    return None


MISSING_AMX = _missing_amx()       # why this process cannot run tile code (None: it can)
needs_amx = pytest.mark.skipif(MISSING_AMX is not None, reason=f"needs AMX: {MISSING_AMX}")
