"""The cuda target's depthwise family (``targets/cuda/depthwise.py``, ``dataflows.gpu_depthwise``) without a
GPU: float16, bfloat16 and float32 depthwise convs over odd sizes, strides, dilations, asymmetric padding,
channel tails, batches, bias and filter shapes, host-emulated (every thread of the grid) against the op's
reference; the refusals with the value; lo.tune's candidates for a depthwise conv through the cost model;
an nvcc build for sm_90 without spills."""

import pytest
from helpers import needs, tiers
from hypothesis import assume
from hypothesis import strategies as st

import loopopt as lo
from loopopt.dataflows import gpu_depthwise
from loopopt.measure import checked
from loopopt.schedule import Schedule, ScheduleError
from loopopt.targets.cuda import toolchain
from loopopt.targets.cuda.emulate import emulate
from loopopt.targets.cuda.printer import CUDA, HOST, print_kernel
from loopopt.targets.cuda.search import CudaSearch, DepthwiseKnobs


@st.composite
def depthwise_cases(draw):
    """A depthwise Conv2d and gpu_depthwise's knobs (run, threads over channel vectors and runs)."""
    channels = draw(st.integers(1, 40))
    kernel = draw(st.sampled_from([(3, 3), (1, 1), (3, 5), (5, 3)]))
    stride, dilation = (draw(st.tuples(st.integers(1, 2), st.integers(1, 2))) for _ in range(2))
    pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(2))
    try:
        op = lo.Conv2d(channels, channels, kernel, stride, pads, dilation, groups=channels,
                       bias=draw(st.booleans()), batch=draw(st.integers(1, 3)),
                       height=draw(st.integers(1, 12)), width=draw(st.integers(1, 14)),
                       dtype=draw(st.sampled_from(["float16", "bfloat16", "float32"])))
    except ValueError:      # the filter spans more than the padded input
        assume(False)
    knobs = dict(run=draw(st.integers(1, 5)), threads_c=draw(st.sampled_from([None, 1, 3])),
                 threads_w=draw(st.sampled_from([None, 1, 2])))
    return op, knobs


def _check(case):
    op, knobs = case
    ok, error, _ = checked(emulate(gpu_depthwise(op, **knobs)), seed=5)
    assert ok, error


# each example builds a host kernel (about 0.5 s): one in the quick tier
test_depthwise_kernels_emulated, test_more_depthwise_kernels_emulated = tiers(_check, 1, 8, depthwise_cases())


DEPTHWISE = lo.Conv2d(12, 12, 3, padding=1, groups=12, batch=2, height=6, width=7, dtype="float16")


# the depthwise conv above written as a Contraction: its own dim names (y, x, r, s), letters and the
# channel index k + c; the same roles, so the same kernel
CONTRACTION = lo.Contraction("O[n,k,y,x] += I[n,k+c,y+r-1,x+s-1] * W[k,c,r,s]",
                             dict(n=2, k=12, y=6, x=7, c=1, r=3, s=3, I=(2, 12, 6, 7)), padding=["I"],
                             bias="B[k]", dtype="float16")


def test_a_contraction_with_a_depthwise_conv_s_roles_runs_the_same_kernel_and_is_exact():
    schedule = gpu_depthwise(CONTRACTION)
    assert [schedule.layout_of(t).tag for t in "IOW"] == ["NYXK", "NYXK", "RSCK"]
    assert [loop.name for loop in schedule.loops if loop.axis] == ["n_y", "k_o_o", "x_o_o", "k_o_i", "x_o_i"]
    body = lambda op: print_kernel(gpu_depthwise(op), CUDA).source.split(" */", 1)[1]
    assert body(CONTRACTION) == body(DEPTHWISE)     # only the header comment names the op and its steps
    assert "for n, y in 2 x 6:" in schedule.pseudocode()
    ok, error, _ = checked(emulate(schedule), seed=4)
    assert ok, error


@pytest.mark.parametrize("op, message", [
    (lo.Conv2d(8, 8, 3, height=6, width=6, dtype="float16"), "groups=1 for 8 input and 8 output channels"),
    (lo.Conv2d(8, 16, 3, groups=8, height=6, width=6, dtype="float16"), "groups=8 for 8 input and 16 output"),
    (lo.Conv1d(8, 8, 3, groups=8, length=6, dtype="float16"),
     "has 1 sliding windows; .* take a convolution of 2"),
    (lo.Matmul(4, 8, 8, dtype="float16"), "has 0 sliding windows"),
    (lo.Contraction("O[n,y,x,k] += I[n,y+r,x+s,k+c] * W[r,s,c,k]", dict(n=1, y=4, x=4, k=8, c=1, r=3, s=3),
                    dtype="float16"), "has 0 sliding windows"),     # channels last: not a convolution's form
    (lo.Contraction("O[g,n,k,y,x] += I[g,n,k+c,y+r,x+s] * W[k,c,r,s]",
                    dict(g=2, n=1, k=8, y=4, x=4, c=1, r=3, s=3), dtype="float16"),
     r"position dims \('g', 'n'\); .* take one \(the batch\)"),
    (lo.Conv2d(8, 8, 3, groups=8, height=6, width=6, quant=lo.QuantSpec()),
     "take float16, bfloat16, float32"),
], ids=lambda value: value if isinstance(value, str) else repr(value)[:40])
def test_gpu_depthwise_refuses_what_is_no_depthwise_conv_naming_the_missing_role(op, message):
    with pytest.raises(ScheduleError, match=message):
        gpu_depthwise(op)


@pytest.mark.parametrize("change, message", [
    (lambda s: s.clip(0.0), "fuse no epilogue"),
    (lambda s: s.layout("I", "NCHW"), "I is in layout 'NCHW'; the cuda depthwise kernels take 'NHWC'"),
    (lambda s: s.unroll("kh"), "unroll"),
])
def test_the_depthwise_family_refuses_what_it_cannot_run(change, message):
    with pytest.raises(ScheduleError, match=message):
        print_kernel(change(gpu_depthwise(DEPTHWISE)), HOST)


def test_a_multiplied_depthwise_schedule_and_a_bad_run_are_refused_with_the_value():
    multiplied = lo.Conv2d(8, 16, 3, groups=8, height=6, width=6, dtype="float16")
    with pytest.raises(ScheduleError, match="groups=8 for 8 input and 16 output channels"):
        print_kernel(Schedule(multiplied).split("k", 8)
                     .reorder("n", "k_o", "oh", "ow", "c", "kh", "kw", "k_i").vectorize("k_i")
                     .bind("k_o", "block.y"), HOST)
    with pytest.raises(ValueError, match="run=0: must be a positive int"):
        gpu_depthwise(DEPTHWISE, run=0)


def test_tune_ranks_depthwise_candidates_by_the_cost_model_and_the_first_is_exact():
    """lo.tune's cuda candidates for a depthwise conv: the depthwise family's runs and blocks, priced by
    the cost model (a stride-1 MobileNetV2 layer's first is a run of 2, as timed fastest on an H200),
    and the first's kernel host-emulated against the reference."""
    rules = CudaSearch()
    layer = lo.Conv2d(144, 144, 3, padding=1, groups=144, bias=False, batch=32, height=56, width=56,
                      dtype="float16")
    ranked = rules.rank(rules.candidates(layer, "sm_90"))
    assert ranked and all(isinstance(c.knobs, DepthwiseKnobs) for c in ranked)
    assert not rules.unpriced(ranked[0]) and ranked[0].knobs.run == 2
    assert [c.figures["predicted_seconds"] for c in ranked] == sorted(c.figures["predicted_seconds"]
                                                                       for c in ranked)
    assert "gpu_depthwise runs of 2 pixels" in rules.describe(ranked[0].knobs.as_dict())
    assert (ranked[0].knobs.pixel_block, ranked[0].knobs.channel_block) == (14, 144)     # 18 x 7 threads
    first = rules.rank(rules.candidates(DEPTHWISE, "sm_90"))[0]
    ok, error, _ = checked(emulate(first.schedule), seed=2)
    assert ok, error


@pytest.mark.slow        # one nvcc build
@needs(toolchain.nvcc)
def test_a_mobilenet_depthwise_layer_builds_for_sm_90_without_spills():
    op = lo.Conv2d(96, 96, 3, stride=2, padding=1, groups=96, bias=False, batch=32, height=112, width=112,
                   dtype="float16")
    kernel = gpu_depthwise(op).compile(target="cuda", isa="sm_90")
    assert kernel.build.spill_bytes == 0 and kernel.build.registers <= 128
