"""Schedule primitives: names, semantics of split/tile/reorder, legality, errors."""
import pytest

import loopopt as lo

OP = lo.Conv2d(8, 32, 3, padding=1, height=10, width=12)


def test_default_order_and_split_names():
    s = lo.Schedule(OP)
    assert s.loop_names == ("n", "k", "oh", "ow", "c", "kh", "kw")
    s = s.split("ow", 5)
    assert s.loop_names == ("n", "k", "oh", "ow_o", "ow_i", "c", "kh", "kw")
    assert [loop.extent for loop in s.loops if loop.name.startswith("ow")] == [3, 5]
    assert [g.to_c() for g in s.partial_guards] == ["0 <= (5*ow_o + ow_i) && (5*ow_o + ow_i) < 12"]


def test_tile_keeps_outer_in_place_and_inner_innermost_in_given_order():
    s = lo.Schedule(OP).tile(ow=8, k=16)
    assert s.loop_names == ("n", "k_o", "oh", "ow_o", "c", "kh", "kw", "ow_i", "k_i")


def test_reorder_permutes_among_occupied_positions():
    s = lo.Schedule(OP).reorder("kw", "n")
    assert s.loop_names == ("kw", "k", "oh", "ow", "c", "kh", "n")


def test_schedule_is_immutable():
    s = lo.Schedule(OP)
    s.split("k", 4)
    assert s.loop_names[1] == "k"


def test_isl_map_is_a_bijection_onto_the_domain():
    s = lo.Schedule(OP).tile(ow=5, k=16).fuse("n", "k_o")
    assert s.isl_map.is_injective()
    assert s.isl_map.domain().is_equal(OP.domain)


def test_reassociation_is_noted_and_strict_mode_refuses():
    s = lo.Schedule(OP).reorder("kh", "c")
    assert "reassociates" in s.pseudocode("scalar")
    with pytest.raises(lo.IllegalScheduleError,
                       match=r"violates the flow dependence.*S\[n=.*must run before"):
        lo.Schedule(OP, reassociate=False).reorder("kh", "c")
    # moving a reduction loop outward without changing the summation order stays legal
    lo.Schedule(OP, reassociate=False).reorder("c", "oh")


def test_parallel_over_reduction_is_a_race():
    with pytest.raises(lo.IllegalScheduleError, match=r"parallel\('c'\).*race"):
        lo.Schedule(OP).parallel("c")
    assert lo.Schedule(OP).parallel("oh").parallel_loop.name == "oh"


def test_vectorizing_a_reduction_needs_reassociation():
    lo.Schedule(OP).vectorize("kw")
    with pytest.raises(lo.IllegalScheduleError, match="reassociates"):
        lo.Schedule(OP, reassociate=False).vectorize("kw")


@pytest.mark.parametrize("call, message", [
    (lambda s: s.split("q", 4), r"no loop named 'q'"),
    (lambda s: s.split("ohh", 4), r"did you mean 'oh'"),
    (lambda s: s.split("k", 0), r"factor must be an integer >= 1, got 0"),
    (lambda s: s.split("k", 2.5), r"factor must be an integer >= 1, got 2.5"),
    (lambda s: s.tile(), r"give at least one"),
    (lambda s: s.reorder("k"), r"at least two"),
    (lambda s: s.reorder("k", "k"), r"named twice"),
    (lambda s: s.vectorize("c"), r"only the innermost loop can be vectorized; 'c' is not innermost"),
    (lambda s: s.vectorize("kw").reorder("kw", "c"), r"must stay innermost"),
    (lambda s: s.fuse("k", "ow"), r"'ow' must be directly inside 'k'"),
    (lambda s: s.unroll("kw", 0), r"factor must be"),
    (lambda s: s.split("ow", 100), r"split\('ow', 100\): factor 100 is larger than the extent 12 of loop "
                                   r"'ow'; use a factor from 1 to 64 \(one partial block may overhang its "
                                   r"loop up to the extent rounded up to 64 or twice the extent\)"),
    (lambda s: s.tile(ow=4, k=65), r"tile\(ow=4, k=65\): factor 65 is larger than the extent 32 of loop 'k'"),
    (lambda s: s.unroll("ow", 1000), r"unroll\('ow', 1000\): factor 1000 is larger than the extent 12 of "
                                     r"loop 'ow'; use a factor from 1 to 12$"),
    (lambda s: s.split("ow", 4).unroll("ow_i", 5), r"factor 5 is larger than the extent 4 of loop 'ow_i'"),
    (lambda s: s.parallel("oh").parallel("ow"), r"already parallel"),
    (lambda s: s.layout("X", "NCHW"), r"no tensor 'X'"),
    (lambda s: s.layout("I", "NCHX"), r"not a valid format tag for I"),
    (lambda s: s.layout("W", "NCHW"), r"not a valid format tag for W with dims OIHW"),
    (lambda s: s.register_block("c").prefetch("O", 64), r"'O' is not an input of the op; prefetch one of "
                                                        r"I, W"),
    (lambda s: s.register_block("c").prefetch("W", 0), r"ahead must be a number of elements from 1 to "
                                                       r"1048576, got 0"),
    (lambda s: s.register_block("c").prefetch("W", True), r"ahead must be .* got True"),
    (lambda s: s.prefetch("W", 64), r"runs in a register block's reduction; call register_block first"),
    (lambda s: s.register_block("c").prefetch("W", 64).prefetch("W", 32), r"W is prefetched already"),
])
def test_bad_requests_name_the_problem(call, message):
    with pytest.raises(lo.ScheduleError, match=message):
        call(lo.Schedule(OP))


def test_schedule_needs_an_op():
    with pytest.raises(TypeError, match="needs an op"):
        lo.Schedule("conv")


def test_pseudocode_shows_loops_definitions_and_vector_kinds():
    s = lo.Schedule(OP).layout("O", "NHWC").layout("W", "HWIO").tile(k=16).vectorize("k_i")
    text = s.pseudocode("avx512")
    assert "for k_i in 0..16:    # vectorized" in text
    assert "k = (16*k_o + k_i)" in text
    assert "I broadcast, W contiguous, O contiguous" in text


def test_parallel_checks_every_conflict_not_only_immediate_dependences():
    # after the interchange, no immediate dependence is carried by k_o, yet k and k+4 share C[i, j]
    s = lo.Schedule(lo.Matmul(3, 4, 19)).split("k", 4).reorder("k_i", "k_o")
    with pytest.raises(lo.IllegalScheduleError, match=r"parallel\('k_o'\).*race"):
        s.parallel("k_o")


def test_parallel_loops_run_over_outputs_only():
    # kw = 2*kw_o + kw_i_o + kw_i_i: padding leaves only kw = 0, so isl sees no two threads updating one
    # output, but a vector loop's lane sum or a register block reads and writes O in every thread
    op = lo.Conv2d(3, 1, (3, 1), bias=False, height=3, width=1)
    s = lo.Schedule(op).tile(kw=2).split("kw_i", 1)
    message = r"parallel loop 'kw_i_o' runs over the reduction dim\(s\) kw"
    with pytest.raises(lo.IllegalScheduleError, match=message):
        s.parallel("kw_i_o")
    with pytest.raises(lo.IllegalScheduleError, match="threads would race"):
        lo.Schedule(op).parallel("k").fuse("k", "oh").fuse("k_oh", "ow").fuse("k_oh_ow", "c")
    assert s.parallel("oh").parallel_loop.name == "oh"


def test_a_loop_is_not_both_parallel_and_vectorized():
    # the threads' ranges of a vector loop were ignored: every thread ran all of it and added twice
    op = lo.Matmul(1, 2, 1)
    fused = lo.Schedule(op).fuse("i", "j").fuse("i_j", "k")
    for schedule in (lambda: fused.parallel("i_j_k").vectorize("i_j_k"),
                     lambda: fused.vectorize("i_j_k").parallel("i_j_k")):
        with pytest.raises(lo.ScheduleError, match="both parallel and vectorized; split it"):
            schedule()
    assert fused.split("i_j_k", 1).parallel("i_j_k_o").vectorize("i_j_k_i").parallel_loop.name == "i_j_k_o"


def test_register_block_refuses_block_positions_that_alias_under_different_padding_taps():
    # kw fused with the batch: for each ow only one kw is a valid tap (width 1, padding 1), so no two
    # domain instances of the block loop share an output, but both accumulators exist and would both
    # store O[n, k, oh, ow] (the second overwrote the first: a wrong output, found by hypothesis)
    op = lo.Conv2d(1, 1, (1, 2), padding=(0, 1), bias=False, height=1, width=1)
    s = lo.Schedule(op).tile(n=2).fuse("kw", "n_i")
    with pytest.raises(lo.ScheduleError, match=r"kw_n_i=0 and kw_n_i=2.*cannot be in a register block"):
        s.register_block("c")


def test_a_block_may_overhang_a_short_loop_as_one_partial_block():
    """split/tile factors up to the extent rounded up to 64 or twice the extent are one partial block (a
    masked vector of 16 lanes over 10 channels, a register block kept whole on a small layer, a GPU
    block of threads x registers): accepted, guarded; beyond, refused."""
    s = lo.Schedule(OP).tile(k=16, ow=64)              # ow has 12 iterations, k 32
    assert s.loop("ow_i").extent == 64 and s.loop("ow_o").extent == 1
    assert s.isl_map.is_injective() and s.isl_map.domain().is_equal(OP.domain)
    wide = lo.Schedule(lo.Conv2d(8, 100, 1, height=2, width=2))
    assert wide.split("k", 199).loop("k_i").extent == 199
    assert lo.dataflows.gpu_tiled(lo.Matmul(100, 100, 40), threads_x=33, regs_x=4).loop("j_i_i").extent == 33
    with pytest.raises(lo.ScheduleError, match="factor 201 is larger than the extent 100 of loop 'k'; use a "
                                               "factor from 1 to 200"):
        wide.split("k", 201)
