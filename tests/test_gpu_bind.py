"""The GPU schedule step ``bind``: loops onto block and thread axes, checked and refused with the reason."""
import pytest

import loopopt as lo
from loopopt.schedule import AXIS_LIMITS, MAX_THREADS_PER_BLOCK
from loopopt.schedule_file import schedule_from_toml, to_toml

OP = lo.Conv2d(8, 16, 3, padding=1, height=10, width=10, batch=2)


def _bound() -> lo.Schedule:
    return (lo.Schedule(OP).split("k", 8).reorder("n", "k_o", "oh", "ow", "k_i")
            .bind("k_o", "block.x").bind("oh", "block.y").bind("ow", "thread.x").bind("k_i", "thread.y"))


def test_bind_records_the_axis_and_prints_it():
    s = _bound()
    assert [(loop.name, loop.axis) for loop in s.bound_loops] == [
        ("k_o", "block.x"), ("oh", "block.y"), ("ow", "thread.x"), ("k_i", "thread.y")]
    assert "for ow in 0..10:    # bound to thread.x" in s.pseudocode()
    assert str(s.steps[-1]) == "bind('k_i', 'thread.y')"


def test_bind_round_trips_through_a_schedule_file():
    s = _bound()
    text = to_toml(s)
    assert 'bind = ["k_o", "block.x"]' in text
    again = schedule_from_toml(text, OP)
    assert again.loops == s.loops and again.steps == s.steps


def test_binding_the_same_loop_to_the_same_axis_again_is_allowed():
    s = _bound()
    assert s.bind("ow", "thread.x").loops == s.loops


@pytest.mark.parametrize("loop", ["c", "kh", "kw"])
def test_a_loop_carrying_the_reduction_is_refused_with_a_pair_of_iterations(loop):
    with pytest.raises(lo.IllegalScheduleError, match=rf"loop '{loop}' carries the flow dependence .*"
                                                       r"iterations S\[.*\] and S\[.*\] .*would race"):
        lo.Schedule(OP).bind(loop, "thread.z")


def test_a_fused_loop_over_a_reduction_dim_is_refused():
    s = lo.Schedule(lo.Matmul(4, 4, 4)).fuse("j", "k")
    with pytest.raises(lo.IllegalScheduleError, match="j_k"):
        s.bind("j_k", "thread.x")


@pytest.mark.parametrize("call, message", [
    (lambda s: s.bind("nope", "block.z"), r"there is no loop named 'nope'"),
    (lambda s: s.bind("n", "lane.x"), r"'lane.x' is not a GPU axis; choose one of 'block.x'"),
    (lambda s: s.bind("n", "block.x"), r"block.x is already bound to loop 'k_o'"),
    (lambda s: s.bind("ow", "thread.z"), r"loop 'ow' is already bound to thread.x"),
    (lambda s: s.split("ow", 2), r"'ow' is bound to thread.x; split it before binding"),
    (lambda s: s.fuse("n", "k_o"), r"cannot fuse a loop bound to a GPU axis"),
    (lambda s: s.reorder("kh", "kw").vectorize("kw").bind("kw", "thread.z"), r"carries the flow"),
])
def test_bad_binds_are_refused_with_the_reason(call, message):
    with pytest.raises(lo.ScheduleError, match=message):
        call(_bound())


def test_an_axis_extent_over_cudas_limit_is_refused():
    with pytest.raises(lo.ScheduleError, match=rf"'i' bound to thread.x has 2048 iterations; CUDA allows "
                                               rf"at most {AXIS_LIMITS['thread.x']}"):
        lo.Schedule(lo.Matmul(2048, 8, 8)).bind("i", "thread.x")
    with pytest.raises(lo.ScheduleError, match=r"thread.z has 65 iterations; CUDA allows at most 64"):
        lo.Schedule(lo.Matmul(65, 8, 8)).bind("i", "thread.z")
    with pytest.raises(lo.ScheduleError, match=r"block.y has 70000 iterations"):
        lo.Schedule(lo.Matmul(70000, 8, 8)).bind("i", "block.y")
    assert lo.Schedule(lo.Matmul(70000, 8, 8)).bind("i", "block.x").bound_loops[0].extent == 70000


def test_more_threads_per_block_than_cuda_allows_are_refused():
    with pytest.raises(lo.ScheduleError, match=rf"a block would have 4096 threads \(i\[64\] x j\[64\]\); "
                                               rf"CUDA allows at most {MAX_THREADS_PER_BLOCK}"):
        lo.Schedule(lo.Matmul(64, 64, 8)).bind("i", "thread.x").bind("j", "thread.y")


def test_a_later_step_cannot_break_the_limits_or_the_register_block():
    s = lo.Schedule(lo.Matmul(32, 32, 8)).bind("i", "thread.x")
    with pytest.raises(lo.ScheduleError, match="bound to a GPU axis lies inside the register block"):
        s.register_block("i")
    with pytest.raises(lo.ScheduleError, match="bound to thread.x and parallel"):
        s.parallel("i")


def test_the_x86_target_refuses_a_bound_schedule():
    with pytest.raises(lo.ScheduleError, match=r"bound to the GPU axis block.x; the x86 target has no GPU "
                                               r"axes: compile with target='cuda'"):
        _bound().compile(target="x86")


# --- stage: a block's box of an input in shared memory ------------------------------------------------

def _gemm_tiles() -> lo.Schedule:
    return (lo.Schedule(lo.Matmul(37, 45, 13)).split("i", 16).split("k", 4)
            .reorder("i_o", "i_i", "j", "k_o", "k_i").bind("i_o", "block.x").bind("i_i", "thread.x"))


def test_stage_records_the_box_a_block_reads_inside_its_loop():
    s = _gemm_tiles().stage("A", "k_o").stage("B", "k_o")
    assert s.stages == (("A", "k_o"), ("B", "k_o"))
    a, b = s.staged_box("A", "k_o"), s.staged_box("B", "k_o")
    assert [e.to_c() for e in a.lower] == ["16*i_o", "4*k_o"] and a.sizes == (16, 4)
    assert [e.to_c() for e in b.lower] == ["4*k_o", "j"] and b.sizes == (4, 1)
    assert "stage A in shared memory (16 x 4), stage B in shared memory (4 x 1)" in s.pseudocode()
    again = schedule_from_toml(to_toml(s), s.op)
    assert again.stages == s.stages


def test_a_padded_conv_box_spans_the_window_of_its_threads():
    box = lo.dataflows.gpu_staged(OP).staged_box("I", "c_o")
    assert box.sizes == (1, 8, 3, 10 + 2)      # one image, 8 channels, 3 rows, the columns and the halo


@pytest.mark.parametrize("call, message", [
    (lambda s: s.stage("C", "k_o"), r"only the inputs are staged; choose one of A, B"),
    (lambda s: s.stage("A", "k_o").stage("A", "k_o"), r"A is staged already"),
    (lambda s: s.stage("A", "k_o").stage("B", "k_i"), r"staged at different loops \(k_i, k_o\)"),
    (lambda s: s.stage("A", "nope"), r"there is no loop named 'nope'"),
    (lambda s: s.stage("A", "i_i"), r"the loop 'i_i' bound to thread.x lies inside the stage at 'i_i'"),
    (lambda s: s.stage("A", "k_o").split("k_o", 2), r"staged at loop 'k_o', which no longer exists"),
    (lambda s: s.fuse("k_o", "k_i").stage("A", "j"), r"axis 1 of A is not affine in the loops inside"),
])
def test_bad_stages_are_refused_with_the_reason(call, message):
    with pytest.raises(lo.ScheduleError, match=message):
        call(_gemm_tiles())


def test_boxes_over_the_shared_memory_are_refused():
    s = (lo.Schedule(lo.Matmul(64, 64, 4096)).split("i", 64).reorder("i_o", "i_i", "j", "k")
         .bind("i_o", "block.x").bind("i_i", "thread.x"))
    with pytest.raises(lo.ScheduleError, match=r"the staged boxes \(A 64 x 4096\) take 1048576 bytes of "
                                               r"shared memory; at most 49152 per block"):
        s.stage("A", "j")


def test_the_x86_target_refuses_a_staged_schedule():
    with pytest.raises(lo.ScheduleError, match="A is staged in GPU shared memory; the x86 target"):
        lo.Schedule(lo.Matmul(8, 8, 8)).stage("A", "k").compile(target="x86")
