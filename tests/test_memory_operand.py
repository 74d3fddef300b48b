"""Float register blocks that multiply a weight vector from memory (codegen/block.py's operands from memory,
AVX2's ``fma_memory``): their kernels against the op's reference (hypothesis: odd sizes, pixel and channel
tails, stride, dilation, padding, groups, depthwise, batch, 1 and 2 threads, a fused residual and clip,
whose bounds such a block broadcasts where it stores: ``broadcast_here``), where the paths are taken, and
the space's and the ranking's 7x16 blocks (``space.memory_operand``, ``rank.MEMORY_OPERAND``)."""
import dataclasses

import pytest
from helpers import check, tiers
from hypothesis import strategies as st

import loopopt as lo
from loopopt.codegen import generate
from loopopt.targets.x86 import space
from loopopt.targets.x86.isa import ISAS, available_isas
from loopopt.tune.choice import first_choice

needs_avx2 = pytest.mark.skipif("avx2" not in available_isas(), reason="this CPU has no AVX2")
MEMORY = "lo_avx2_fma_memory("
HERE = "lo_avx2_broadcast_here("
CLIPS = [None, (0.0, None), (0.0, 6.0), (None, 0.25)]
BLOCKS = ((7, 16), (3, 32), (6, 16), (4, 24))     # two overflow the 16 registers by one vector, two fit


def block_schedule(op, pixel_block, channel_block, threads):
    """The best-ranked plain or packed register block of ``op`` on AVX2 for ``threads`` threads, resized to
    ``pixel_block`` x ``channel_block``."""
    found = next(c for c in space.candidates(op, "avx2", threads) if c.knobs.weights in ("plain", "packed"))
    knobs = dataclasses.replace(found.knobs, pixel_block=pixel_block, channel_block=channel_block)
    return knobs.schedule(op, "avx2")


@st.composite
def block_convs(draw):
    """A conv whose output channels are often whole 16- and 32-channel blocks (the models' are), else a
    tail: odd sizes, stride, dilation, padding (or none), groups, depthwise, batch."""
    groups = draw(st.sampled_from([1, 1, 1, 1, 2, "depthwise"]))
    channels = draw(st.sampled_from([32, 48, 96]) | st.sampled_from([16, 64, 96]) | st.integers(1, 40))
    if groups == "depthwise":
        groups, inputs = channels, channels
    else:
        channels, inputs = channels * groups, draw(st.integers(1, 12)) * groups
    rows, kernel, dilation = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    return lo.Conv2d(inputs, channels, (rows, kernel), stride=draw(st.integers(1, 2)),
                     padding=draw(st.integers(0, 2)), dilation=dilation, groups=groups,
                     bias=draw(st.booleans()),
                     batch=draw(st.integers(1, 3)), height=draw(st.integers(dilation * (rows - 1) + 1, 8)),
                     width=draw(st.sampled_from([7, 14, 17])
                                | st.integers(dilation * (kernel - 1) + 1, 17)))


def random_block(data, threads):
    """A random conv's block of 7x16, 3x32 or a size that fits the registers, with or without a fused
    residual and clip, agrees with the reference; an ungrouped conv whose block is whole along its rows and
    channels multiplies from memory exactly where its accumulators, weight vectors and a broadcast exceed
    the registers; a block's clip bounds are broadcast where stored exactly where it multiplies from
    memory."""
    op = data.draw(block_convs())
    pixel_block, channel_block = data.draw(st.sampled_from(BLOCKS))
    residual, clip = data.draw(st.booleans()), data.draw(st.sampled_from(CLIPS))
    try:
        schedule = block_schedule(op, pixel_block, channel_block, threads)
    except StopIteration:           # no plain or packed block (none for this op and thread count)
        return
    schedule = schedule.add_residual() if residual else schedule
    schedule = schedule.clip(*clip) if clip else schedule
    try:
        source = generate(schedule, ISAS["avx2"]).source
    except lo.ScheduleError as e:   # a grouped block whose channel tail splits a group's vector: refused
        assert op.groups > 1 and "needs a guard that varies across the lanes" in str(e)
        return
    vectors = channel_block // 8
    if op.groups == 1 and op.out_width >= pixel_block and op.channels % channel_block == 0:
        assert (MEMORY in source) == (pixel_block * vectors + vectors + 1 > ISAS["avx2"].registers)
    in_block = "over its storage after the nest" not in source     # else a pass after the nest clips
    assert (HERE in source) == (MEMORY in source and clip is not None and in_block)
    check(schedule, "avx2", threads=threads)


test_random_memory_blocks_quick, test_random_memory_blocks = tiers(
    random_block, 3, 40, data=st.data(), threads=st.sampled_from([1, 2]), marks=(needs_avx2,))


@pytest.mark.slow
@needs_avx2
def test_resnet_7x7_block_reads_its_second_weight_vector_from_memory():
    """ResNet's 3x3 512->512 conv at 7x7 in 7x16 blocks: 14 accumulators, the first weight vector loaded,
    the second read by each of its 7 updates; exact against the reference on 1 and 2 threads. ResNet-18's
    3x3/2 256->512 conv with its fused ReLU (and with a residual and ReLU6): each of the 14 stores
    broadcasts its bounds where it clips, on 1 and 2 threads."""
    op = lo.Conv2d(512, 512, 3, padding=1, height=7, width=7, bias=True)
    for threads in (1, 2):
        schedule = first_choice(op, "avx2", threads).schedule
        source = generate(schedule, ISAS["avx2"]).source
        assert source.count("lo_avx2_fma_memory(lo_I") == 7 and "lo_base_W[8], lo_acc1)" in source
        check(schedule, "avx2", threads=threads)
    strided = lo.Conv2d(256, 512, 3, stride=2, padding=1, height=14, width=14, bias=True)
    for threads in (1, 2):
        plain = next(c for c in space.candidates(strided, "avx2", threads)     # the models' first choice
                     if (c.knobs.pixel_block, c.knobs.channel_block, c.knobs.weights, c.knobs.cache_block,
                         c.knobs.outer[-1]) == (7, 16, "packed", 0, "oh")).schedule
        for schedule, bounds in ((plain.clip(0.0), 1), (plain.add_residual().clip(0.0, 6.0), 2)):
            source = generate(schedule, ISAS["avx2"]).source
            assert MEMORY in source and source.count(HERE) == 14 * bounds + 1     # and the helper's name
            check(schedule, "avx2", threads=threads)


def test_blocks_far_beyond_the_registers_and_other_isas_load_their_weights():
    """A block sized for AVX-512 (8x32: 32 accumulators) on AVX2 is left to the compiler as before, and no
    AVX-512 block reads from memory (its table has no ``fma_memory``)."""
    op = lo.Conv2d(64, 64, 3, padding=1, height=16, width=16)
    assert MEMORY not in generate(block_schedule(op, 8, 32, 1), ISAS["avx2"]).source
    assert "fma_memory" not in ISAS["avx512"].ops
    assert "fma_memory" not in generate(block_schedule(op, 7, 64, 1), ISAS["avx512"]).source


def test_space_offers_7x16_only_along_padded_windows():
    """7x16 (and 3x32) blocks are offered for a float conv of one group along a padded window on AVX2; not
    for a 1x1 conv, a grouped one, a quantized one, nor on AVX-512."""
    def blocks(op, isa="avx2"):
        return {(c.knobs.pixel_block, c.knobs.channel_block) for c in space.candidates(op, isa)
                if c.knobs.weights in ("plain", "packed")}
    padded = lo.Conv2d(32, 32, 3, padding=1, height=7, width=7)
    assert {(7, 16), (3, 32)} <= blocks(padded) and (8, 16) not in blocks(padded)
    for op in (lo.Conv2d(32, 32, 1, height=7, width=7), lo.Conv2d(32, 32, 3, height=9, width=9),
               lo.Conv2d(32, 32, 3, padding=1, groups=2, height=7, width=7)):
        assert (7, 16) not in blocks(op), op
    assert not any(space.reads_memory(c) for c in space.candidates(padded, "avx512"))


@pytest.mark.slow
def test_resnet_convs_at_7x7_rank_7x16_first(recorded_profile):
    """ResNet's 3x3 convs with 7x7 outputs rank 7x16 first on AVX2 (kernel only on a Zen 3 core, 1 thread:
    0.86-0.93x the 4x16 blocks' median, whose 7 = 4 + 3 columns run the last block's padding taps on 2-3
    positions); wider rows keep their 4x16 and 5x16 blocks, the stem and 1x1 convs theirs."""
    for op in (lo.Conv2d(512, 512, 3, padding=1, height=7, width=7),
               lo.Conv2d(256, 512, 3, stride=2, padding=1, height=14, width=14),
               lo.Conv2d(512, 512, 3, stride=2, padding=1, height=14, width=14)):
        for threads in (1, 2):
            knobs = first_choice(op, "avx2", threads).knobs
            assert (knobs.pixel_block, knobs.channel_block) == (7, 16), (op, threads)
    for op in (lo.Conv2d(256, 256, 3, padding=1, height=14, width=14),
               lo.Conv2d(128, 128, 3, padding=1, height=28, width=28),
               lo.Conv2d(64, 64, 3, padding=1, height=56, width=56),
               lo.Conv2d(3, 64, 7, stride=2, padding=3, height=224, width=224),
               lo.Conv2d(2048, 512, 1, height=7, width=7)):
        knobs = first_choice(op, "avx2", 1).knobs
        assert (knobs.pixel_block, knobs.channel_block) != (7, 16), op
