"""Hypothesis strategies for random conv shapes and random legal schedules."""
from hypothesis import strategies as st

import loopopt as lo
from loopopt.codegen import ISAS, generate


@st.composite
def conv_ops(draw, max_hw: int = 9):
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
    return lo.Conv2d(cg * groups, kg * groups, kernel, stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
                     padding=padding, dilation=dilation, groups=groups, bias=draw(st.booleans()),
                     batch=draw(st.integers(1, 3)), height=height, width=width)


ACT_LAYOUTS = ["NCHW", "NHWC", "NCHW4c", "NCHW16c", "CHWN"]
W_LAYOUTS = ["OIHW", "HWIO", "OHWI", "OIHW4i4o", "OIHW16i16o"]


def register_block_sites(schedule, isa=None):
    """Loops at which ``schedule.register_block`` is accepted (and generates code on ``isa``)."""
    sites = []
    for name in schedule.loop_names:
        try:
            blocked = schedule.register_block(name)
            if isa is not None:
                generate(blocked, ISAS[isa])
        except lo.ScheduleError:
            continue
        sites.append(name)
    return sites


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
        s = s.layout("A", draw(st.sampled_from(["MK", "KM", "MK4k"]))).layout("B", draw(st.sampled_from(["KN", "NK", "KN8n"])))
    if draw(st.booleans()):
        s = s.unroll(draw(st.sampled_from(s.loop_names)))
    if draw(st.booleans()):
        candidates = [n for n in s.loop_names if s.carried_dependence(n) is None]
        if candidates:
            s = s.parallel(draw(st.sampled_from(candidates)))
    if draw(st.integers(0, 3)):
        s = s.vectorize(s.loop_names[-1])
    if draw(st.booleans()):
        sites = register_block_sites(s, isa)
        if sites:
            s = s.register_block(draw(st.sampled_from(sites)))
    return s
