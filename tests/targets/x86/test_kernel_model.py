"""The kernel model: counts of what a generated kernel executes, checked by hand on small schedules."""
import pytest

import loopopt as lo
from loopopt.targets.x86.costs import count
from loopopt.targets.x86.isa import INT_ISAS, ISA_PREFERENCE, ISAS

VECTOR_ISAS = [isa for isa in ISA_PREFERENCE if isa != "scalar"]     # counted on any CPU: nothing runs


def channels_last(schedule: lo.Schedule) -> lo.Schedule:
    return schedule.layout("I", "NHWC").layout("W", "HWIO").layout("O", "NHWC")


def tiles_2x4(isa: str) -> lo.Schedule:
    """A 1x1 convolution in tiles of 2 (ow) x 4 vectors (k) of outputs, vectorized along k."""
    lanes = ISAS[isa].lanes
    op = lo.Conv2d(8, 4 * lanes, 1, height=4, width=8, bias=False)
    return channels_last(lo.Schedule(op)).tile(ow=2, k=4 * lanes).vectorize("k_i")


def block_2x4(isa: str) -> lo.Schedule:
    """The tiles' outputs kept in registers (8 accumulators) across c."""
    return tiles_2x4(isa).register_block("c")


def site(counts, prefix: str):
    return next(s for s in counts.sites if s.name.startswith(prefix))


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_register_block_counts(isa):
    schedule, lanes = block_2x4(isa), ISAS[isa].lanes
    counts = count(schedule, isa)
    macs = schedule.op.macs
    bodies = macs // (8 * lanes)                  # one body per (oh, ow block, c): 8 vector updates
    assert counts.accumulators == 8 and counts.spilled == 0
    assert counts.total("fma") == macs // lanes and counts.issued_lanes == counts.useful_lanes == macs
    body = site(counts, "register block body")
    assert body.executions == bodies
    assert (body.work.fma, body.work.loads, body.work.broadcasts) == (8, 4, 2)   # 4 weight vectors, 2 inputs
    assert body.work.stores == body.work.output_accesses == 0                      # no output per update
    outputs = schedule.op.tensor("O").shape
    vectors = outputs[0] * outputs[1] * outputs[2] * outputs[3] // lanes
    assert counts.total("stores") == counts.total("output_accesses") == vectors    # each stored once
    assert counts.total("loads") == 4 * bodies


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_without_register_block_the_output_goes_to_memory_per_update(isa):
    blocked, plain = count(block_2x4(isa), isa), count(tiles_2x4(isa), isa)
    updates = plain.total("fma")
    assert updates == blocked.total("fma")
    loop = site(plain, "vector loop k_i")
    w = loop.work
    assert (w.loads, w.broadcasts, w.stores, w.output_accesses) == (2, 1, 1, 2)      # W, O; I; O; O twice
    assert plain.total("output_accesses") == 2 * updates
    assert plain.memory_accesses > 2 * blocked.memory_accesses


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_removing_vectorize_multiplies_the_instructions_by_the_lanes(isa):
    lanes = ISAS[isa].lanes
    scalar = channels_last(lo.Schedule(tiles_2x4(isa).op)).tile(ow=2, k=4 * lanes)
    vector = count(tiles_2x4(isa), isa)
    emitted = count(scalar, isa, compiler_vectorizes=False)
    statement, loop = site(emitted, "statement"), site(vector, "vector loop k_i")
    assert statement.executions == lanes * loop.executions and statement.lanes == 1
    for name, per_update in (("fma", 1), ("stores", 1), ("output_accesses", 2)):
        assert getattr(statement.work, name) == getattr(loop.work, name) == per_update
    assert statement.work.loads == loop.work.loads + loop.work.broadcasts == 3   # I, W, O
    assert emitted.issued_lanes == vector.issued_lanes and emitted.compiler_vectorized is None
    # the C compiler vectorizes that innermost loop itself (unit stride, no guard, not a reduction)
    compiled = count(scalar, isa)
    assert compiled.compiler_vectorized == "loop k_i" and compiled.total("fma") == vector.total("fma")


def test_the_compiler_vectorizes_the_loop_around_an_innermost_reduction():
    isa = VECTOR_ISAS[0]
    counts = count(lo.Schedule(lo.Matmul(4, 4 * ISAS[isa].lanes, 8)), isa)     # i, j, k: k is a reduction
    assert counts.compiler_vectorized == "loop j around the reduction k"
    assert counts.accumulators == 1 and counts.total("fma") == 4 * 4 * 8
    assert counts.total("output_accesses") == 4 * 4        # each vector of C set in a register, stored once


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_a_gather_is_counted_per_lane(isa):
    lanes = ISAS[isa].lanes
    op = lo.Conv2d(8, 2 * lanes, 1, height=4, width=4, bias=False)        # NCHW, OIHW: k strided in W and O
    counts = count(lo.Schedule(op).reorder("kw", "k").vectorize("k"), isa)
    loop = site(counts, "vector loop k")
    assert (loop.work.broadcasts, loop.work.gathers, loop.work.scatters) == (1, 2, 1)   # I; W and O; O
    assert counts.gather_lanes == lanes * counts.total("gathers") == lanes * 2 * loop.executions
    assert counts.scatter_lanes == lanes * loop.executions
    w = counts.work
    lanewise = counts.gather_lanes + counts.scatter_lanes
    assert counts.memory_accesses == w.loads + w.broadcasts + w.stores + lanewise


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_a_masked_tail_is_counted(isa):
    lanes = ISAS[isa].lanes
    op = lo.Conv2d(8, lanes + 4, 1, height=2, width=2, bias=False)         # k = one vector and 4 lanes
    schedule = channels_last(lo.Schedule(op)).reorder("oh", "ow", "c", "kh", "kw", "k").vectorize("k")
    counts = count(schedule, isa)
    loop = site(counts, "vector loop k")
    assert loop.executions == 2 * op.macs // (lanes + 4)                   # two vectors per (oh, ow, c)
    assert (loop.work.masked, loop.work.masks) == (4, 1)                   # W load, O load and store, fma
    assert counts.useful_lanes == op.macs and counts.issued_lanes == 2 * lanes * op.macs // (lanes + 4)


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_lanes_that_cross_the_padding_build_their_mask_lane_by_lane(isa):
    lanes = ISAS[isa].lanes
    op = lo.Conv2d(1, 1, 3, padding=1, height=4, width=2 * lanes, bias=False)
    counts = count(lo.dataflows.interchanged(op), isa)                    # ow vectorized, iw guarded
    loop = site(counts, "vector loop ow")
    assert loop.work.lane_steps == lanes and loop.work.guard_checks == 2 * lanes   # iw and the extent
    assert counts.useful_lanes == counts.instances < counts.issued_lanes


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_a_dot_lane_does_four_products(isa):
    op = lo.Matmul(7, 32, 16, quant=lo.QuantSpec("int8", True, False, "int8"))
    s = (lo.Schedule(op).layout("B", "KN16n4k").split("k", 4).tile(j=16).reorder("k_o", "k_i", "j_o")
         .vectorize("j_i"))
    counts = count(s, isa)
    assert counts.arithmetic == "dot" and counts.useful_lanes == op.macs / 4
    assert counts.issued_lanes == counts.useful_lanes                  # every lane of every dot is a product
    blocked = count(s.register_block("k_o"), isa)                       # the dot loop inside the block
    assert blocked.accumulators == 32 // INT_ISAS[isa].lanes          # a vector of the 32 columns each
    assert blocked.issued_lanes == counts.issued_lanes


def test_kernel_model_sees_the_register_block():
    isa = VECTOR_ISAS[0]
    fast, slow = (lo.kernel_model(s, isa, traffic=False) for s in (block_2x4(isa), tiles_2x4(isa)))
    assert fast.counts.total("output_accesses") < slow.counts.total("output_accesses")
    assert 0 < fast.predicted_seconds < slow.predicted_seconds
    assert fast.bound in fast.resources and "bound by" in fast.summary()
    with pytest.raises(TypeError, match="Schedule"):
        lo.kernel_model(tiles_2x4(isa).op)


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_a_guard_that_holds_for_the_whole_block_costs_no_select(isa):
    lanes = ISAS[isa].lanes
    # the last block of 3 rows of 8 is short: its row guards name no reduction loop (hoisted)
    matmul = lo.Schedule(lo.Matmul(8, 2 * lanes, 16)).tile(i=3, j=2 * lanes).vectorize("j_i")
    matmul = matmul.register_block("k")
    assert site(count(matmul, isa), "register block body").work.vector_ops == 0
    # a padded conv's input rows: the guards name kh, a reduction loop of the block (a select per load)
    conv = channels_last(lo.Schedule(lo.Conv2d(4, lanes, 3, padding=1, height=5, width=6)))
    conv = conv.tile(ow=3, k=lanes).reorder("n", "k_o", "oh", "ow_o", "kh", "kw", "c").vectorize("k_i")
    body = site(count(conv.register_block("kh"), isa), "register block body")
    assert body.work.vector_ops > 0


def test_the_neon_model_runs_on_its_modelled_core():
    """NEON (no ARM core here: modelled): 4 lanes, 4 fmla pipes at the profile's 2.6 GHz; the dot of a
    quantized schedule is counted on it too, and a register block is cheaper than none."""
    s = block_2x4("avx2")
    model = lo.kernel_model(s, "neon", traffic=False)
    assert model.counts.lanes == 4 and model.hertz == pytest.approx(2.6e9)
    unblocked = lo.kernel_model(tiles_2x4("avx2"), "neon", traffic=False)
    assert 0 < model.predicted_seconds < unblocked.predicted_seconds
    op = lo.Matmul(7, 32, 16, quant=lo.QuantSpec("int8", True, False, "int8"))
    dot = (lo.Schedule(op).layout("B", "KN4n4k").split("k", 4).tile(j=4).reorder("k_o", "k_i", "j_o")
           .vectorize("j_i"))
    assert count(dot, "neon").arithmetic == "dot" and count(dot, "neon").useful_lanes == op.macs / 4
