"""int8 weights pre-widened to int16 when packed (``Schedule.weight_format("s16")``, codegen/wide.py) for
AVX2's emulated dot: exact against quant.py's reference (hypothesis: odd sizes, tails, stride, dilation,
padding, groups, batch, 1 and 2 threads, both activation and weight signednesses, zero points), the
packing, the refusals, the space's s16 blocks and their ranking."""
import re
import shutil
import subprocess

import numpy as np
import pytest
from helpers import SPECS, conv_ops, generates, tiers
from helpers import check_quantized as check
from helpers import conv_wide_schedule as dot_form
from hypothesis import strategies as st

import loopopt as lo
from loopopt.cbuild import BASE_FLAGS, DEFAULT_OPT_LEVEL, compiler
from loopopt.codegen import generate
from loopopt.codegen.quantized import QUANT_FLAGS
from loopopt.codegen.wide import elements, pack_s16, unpack_s16
from loopopt.targets.x86 import space
from loopopt.targets.x86.isa import INT_ISAS, ISAS, available_int_isas
from loopopt.tune.choice import first_choice

AVX2 = "avx2" in available_int_isas()
needs_avx2 = pytest.mark.skipif(not AVX2, reason="this CPU has no AVX2")
QUANT = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="uint8")


def random_wide_conv(data, threads):
    """A random conv in the dot form with s16 weights, exact on ``threads`` threads (groups: where the
    weights' vectors are whole and aligned, else the one-line refusal)."""
    op = data.draw(conv_ops(max_hw=7, max_channels=11)).with_quant(data.draw(SPECS))
    s = dot_form(op, data.draw(st.sampled_from([8, 16, 24, 32])), data.draw(st.integers(1, 4)),
                 data.draw(st.booleans()), data.draw(st.booleans()))
    if op.groups > 1:
        try:
            generate(s, INT_ISAS["avx2"])
        except lo.ScheduleError as e:      # the s16 refusal, or one of the int8 form's own
            assert "weight_format('s16')" in str(e) or not generates(s.weight_format("int8"), "avx2")
            return
    if threads > 1:
        s = s.parallel("k_o")
    check(s, "avx2", seed=data.draw(st.integers(0, 99)), threads=threads)


test_random_wide_convs_quick, test_random_wide_convs = tiers(
    random_wide_conv, 2, 40, data=st.data(), threads=st.sampled_from([1, 2]), marks=(needs_avx2,))


@pytest.mark.slow
@pytest.mark.optimized_build     # GCC 12 compiles these asm blocks in 20-50% less CPU at -O3 than at -O1
@needs_avx2
@pytest.mark.parametrize("spec", [QUANT, lo.QuantSpec("int8", False, False, "int32", "uint8"),
                                  lo.QuantSpec("int8", True, False, "float32")], ids=str)
def test_resnet_blocks_and_compensation_in_the_kernel(spec):
    """The space's s16 blocks of a 3x3 conv with a channel tail and a column tail are exact, with the
    compensation packed or computed by the kernel (the scalar accessor ``lo_s16``), on 1 and 2 threads.
    9 input channels: two whole dot groups and a tail of one (21, as before, built the same block with the
    reduction unrolled 6 times, not 3: 2.5x the compile time for no other code path)."""
    op = lo.Conv2d(9, 40, 3, padding=1, height=7, width=11, batch=2, quant=spec)
    for threads in (1, 2):
        offered = {(c.knobs.pixel_block, c.knobs.channel_block): c
                   for c in space.candidates(op, "avx2", threads) if c.knobs.weight_format == "s16"}
        assert (3, 32) in offered and (7, 16) not in offered and (2, 32) not in offered   # 12, 3 rows
        schedule = offered[3, 32].schedule
        check(schedule, "avx2", threads=threads)
        check(schedule.compensation("kernel"), "avx2", threads=threads)


def wide_matmul(m, n, k, spec):
    """A matmul's s16 dot blocks (the first one the space offers) are exact."""
    wide = next(c for c in space.candidates(lo.Matmul(m, n, k, quant=spec), "avx2")
                if c.knobs.weight_format == "s16")
    check(wide.schedule, "avx2")


test_wide_matmuls_quick, test_wide_matmuls = tiers(
    wide_matmul, 1, 12, m=st.integers(3, 9), n=st.integers(2, 37), k=st.integers(2, 70), spec=SPECS,
    marks=(needs_avx2,))


def test_packing_round_trip_and_layout():
    """Element e of a 32-element block is the int16 at 16 (q % 2) + 2 j + q // 2 (lane j = e // 4, q = e % 4),
    padded with zeros to whole blocks; ``unpack_s16`` inverts it."""
    rng = np.random.default_rng(0)
    stored = rng.integers(-128, 128, 77).astype(np.int8)
    packed = pack_s16(stored)
    assert packed.dtype == np.int16 and packed.size == elements(77) == 96
    for e in range(77):
        block, j, q = e // 32, e % 32 // 4, e % 4
        assert packed[32 * block + 16 * (q % 2) + 2 * j + q // 2] == stored[e]
    used = [32 * (e // 32) + 16 * (e % 4 % 2) + 2 * (e % 32 // 4) + e % 4 // 2 for e in range(77)]
    assert not packed[np.setdiff1d(np.arange(96), used)].any()
    assert np.array_equal(unpack_s16(packed, 77), stored)


@needs_avx2
def test_a_vector_past_the_channels_points_at_the_zero_block():
    """A channel block's vectors past the last channels (40 channels in blocks of 24: lanes 40-47) multiply
    the zero block, not memory past the weights (a 4x24 block of 512 channels read past them and crashed;
    AddressSanitizer does not see the asm's memory operand)."""
    op = lo.Conv2d(5, 40, 3, padding=1, height=4, width=5, quant=QUANT)
    for register_block in (True, False):
        source = generate(dot_form(op, 24, 3, True, register_block), INT_ISAS["avx2"]).source
        assert "? lo_s16_zero : &W[" in source


@pytest.mark.slow
def test_weights_take_twice_the_bytes():
    op = lo.Conv2d(16, 32, 3, padding=1, height=5, width=5, quant=QUANT)
    wide = dot_form(op, 16, 3, True, True).compile("avx2")
    plain = (lo.Schedule(op).layout("I", "NHWC").layout("O", "NHWC").layout("W", "OIHW8o4i").split("c", 4)
             .tile(ow=3, k=16).reorder("n", "k_o", "oh", "ow_o", "c_o", "kh", "kw", "c_i", "ow_i", "k_i")
             .vectorize("k_i").register_block("c_o")).compile("avx2")
    assert wide.tensor_bytes("W") == 2 * plain.tensor_bytes("W")


def test_refusals():
    """s16 needs the emulated dot's table (AVX-512's VNNI has its own dot), a dot loop along the reduction
    and whole, aligned dot vectors of the weights: each refusal is one line naming the format."""
    op = lo.Conv2d(16, 32, 3, padding=1, height=5, width=5, quant=QUANT)
    vnni = dot_form(op, 16, 3, True, True)
    with pytest.raises(lo.ScheduleError, match=r"weight_format\('s16'\): isa 'avx512' has no int16-weight"):
        generate(vnni, INT_ISAS["avx512"])
    no_dot = (lo.Schedule(op).layout("I", "NHWC").layout("O", "NHWC")
              .reorder("n", "oh", "ow", "c", "kh", "kw", "k").vectorize("k").weight_format("s16"))
    with pytest.raises(lo.ScheduleError, match=r"weight_format\('s16'\): the weights are read by a dot loop"):
        generate(no_dot, INT_ISAS["avx2"])
    unaligned = (lo.Schedule(op).layout("I", "NHWC").layout("O", "NHWC").layout("W", "OHWI").split("c", 4)
                 .reorder("n", "oh", "ow", "c_o", "kh", "kw", "c_i", "k").vectorize("k").weight_format("s16"))
    with pytest.raises(lo.ScheduleError, match=r"must be read as whole dot vectors of 8 lanes x 4"):
        generate(unaligned, INT_ISAS["avx2"])


@pytest.mark.slow
def test_space_offers_s16_to_ungrouped_emulated_dots_only():
    """Every s16 block the space offers generates (one a block shape); none on AVX-512, none for grouped
    or depthwise convs or a single output channel, none of more than 12 accumulators or fewer than 3 rows."""
    for op in (lo.Conv2d(3, 64, 7, stride=2, padding=3, height=30, width=30, quant=QUANT),
               lo.Conv2d(21, 40, 3, padding=1, height=7, width=11, quant=QUANT),
               lo.Matmul(5, 70, 33, quant=QUANT)):
        shapes = {}
        for c in space.candidates(op, "avx2"):
            if isinstance(c.knobs, space.Knobs) and c.knobs.weight_format == "s16":
                shapes.setdefault((c.knobs.pixel_block, c.knobs.channel_block, c.knobs.pixel), c)
        assert shapes and all(pb * -(-cb // 8) <= 12 and pb >= 3 for pb, cb, _ in shapes)
        for c in shapes.values():
            generate(c.schedule, INT_ISAS["avx2"])
        assert not any(getattr(c.knobs, "weight_format", "") == "s16" for c in space.candidates(op, "avx512"))
    for op in (lo.Conv2d(16, 32, 3, padding=1, groups=2, height=7, width=7, quant=QUANT),
               lo.Matmul(4, 1, 9, quant=QUANT)):
        assert not any(getattr(c.knobs, "weight_format", "") == "s16" for c in space.candidates(op, "avx2"))
    assert space.operand_registers("avx2", "dot", 4, "s16") == 4 < ISAS["avx2"].registers


def test_s16_blocks_in_cache_blocks_divide_the_reduction_and_generate():
    """MobileNetV2-shaped 1x1s whose reduction is no multiple of some cache blocks (320: 64 divides it, 128
    and 256 do not; 144: neither 64 nor 128): the space offers s16 blocks in dividing cache blocks only (a
    partial cache block leaves a dot loop codegen refuses: a ``prepare`` that chose one failed), and each
    offered (one per block shape and cache block) generates."""
    def cached(op: lo.Conv2d) -> dict:
        found: dict = {}
        for c in space.candidates(op, "avx2"):
            if isinstance(c.knobs, space.Knobs) and c.knobs.weight_format == "s16" and c.knobs.cache_block:
                found.setdefault((c.knobs.pixel_block, c.knobs.channel_block, c.knobs.cache_block), c)
        return found

    offered = cached(lo.Conv2d(320, 32, 1, height=8, width=8, quant=QUANT))
    assert offered and {block for _, _, block in offered} == {64}
    for c in offered.values():
        generate(c.schedule, INT_ISAS["avx2"])
    assert not cached(lo.Conv2d(144, 24, 1, height=8, width=8, quant=QUANT))


@pytest.mark.slow
def test_resnet_convs_rank_s16_blocks_first(recorded_profile):
    """On AVX2 the emulated dot on s16 weights (no widening of the weights per step, each weight vector an
    address, a broadcast's halves shared by its row; rows of 3 positions at least) ranks first for ResNet's
    1x1 and 3x3 int8 convs down to 14x14: the 3x32 block, on 1 and 2 threads (kernel-only on a Zen 3 core:
    0.86-0.93x the int8 7x16 blocks that ranked first before); at 7x7 the 4x16 block (0.87-0.93x the int8
    7x16 blocks there, which an int8 block's ``rank.NARROW_DOT`` puts below it; the 3x3 at 7x7 on one
    thread: ``test_emulated_dot_blocks_rank_cache_blocks_below``). The 3x3 blocks unroll their window's
    taps (``rank._taps_rolled``: kernel-only 0.80-0.98x the same block unrolling its input channels)."""
    for op in (lo.Conv2d(64, 256, 1, height=56, width=56, quant=QUANT),
               lo.Conv2d(256, 64, 1, height=56, width=56, quant=QUANT),
               lo.Conv2d(1024, 256, 1, height=14, width=14, quant=QUANT),
               lo.Conv2d(64, 64, 3, padding=1, height=56, width=56, quant=QUANT),
               lo.Conv2d(128, 128, 3, padding=1, height=28, width=28, quant=QUANT),
               lo.Conv2d(256, 256, 3, padding=1, height=14, width=14, quant=QUANT)):
        for threads in (1, 2):
            first = first_choice(op, "avx2", threads=threads).knobs
            assert (first.weights, first.weight_format, first.pixel_block, first.channel_block) == \
                ("dot", "s16", 3, 32), (op, threads)
            assert op.kernel_size == (1, 1) or unrolls_taps(first), (op, threads)
    for op, threads in ((lo.Conv2d(512, 512, 3, padding=1, height=7, width=7, quant=QUANT), 2),
                        (lo.Conv2d(1024, 2048, 1, stride=2, height=14, width=14, quant=QUANT), 1)):
        first = first_choice(op, "avx2", threads=threads).knobs
        assert (first.weights, first.weight_format, first.pixel_block, first.channel_block) == \
            ("dot", "s16", 4, 16), (op, threads)
        assert op.kernel_size == (1, 1) or unrolls_taps(first), (op, threads)


def unrolls_taps(knobs) -> bool:
    """Whether a 3x3 conv's dot block runs its reduction kh, c, kw with the kw taps unrolled."""
    return tuple(knobs.reduction) == ("kh", "c", "kw") and dict(knobs.unroll) == {"kw": 3}


@st.composite
def windowed_convs(draw) -> lo.Conv2d:
    """An ungrouped quantized conv with a 2x2 or 3x3 window (stride 1 or 2) on a small input."""
    return lo.Conv2d(draw(st.integers(2, 11)), draw(st.integers(8, 40)), draw(st.integers(2, 3)),
                     stride=draw(st.integers(1, 2)), padding=draw(st.integers(0, 1)),
                     height=draw(st.integers(3, 9)), width=draw(st.integers(3, 9)),
                     batch=draw(st.integers(1, 2)), quant=draw(SPECS))


def taps_unrolled_conv(data, op, threads):
    """One of the space's s16 blocks of ``op`` that unroll the column window's taps alone (the first choice
    of ResNet's 3x3 convs on AVX2: reduction kh, c, kw, kw unrolled), exact on ``threads`` threads."""
    taps = {w.tap_dim for w in op.windows if w.out_dim == "ow"}
    offered = [c for c in space.candidates(op, "avx2", threads)
               if c.knobs.weight_format == "s16" and set(dict(c.knobs.unroll)) == taps]
    if offered:
        check(data.draw(st.sampled_from(offered)).schedule, "avx2", threads=threads)


test_taps_unrolled_convs_quick, test_taps_unrolled_convs = tiers(
    taps_unrolled_conv, 2, 30, data=st.data(), op=windowed_convs(), threads=st.sampled_from([1, 2]),
    marks=(needs_avx2,))


@pytest.mark.slow
def test_emulated_dot_blocks_rank_cache_blocks_below(recorded_profile):
    """An emulated dot's cache block costs its int32 sums' passes through memory and a requantizing pass
    (``rank.EMULATED_PASSES``): ResNet-50's int8 1x1 stride-2 512->1024 conv from 28x28 ranks first a 3x32
    s16 block without one (kernel-only on a Zen 3 core, its column blocks outside the channel blocks:
    0.76-0.88x the 256-channel cache blocks that ranked first there before), and its 3x3 512->512 at 7x7
    the s16 4x16 block without one (with the recorded profile, 4x16 s16 blocks in 128-channel cache
    blocks ranked first without the cost)."""
    down = first_choice(lo.Conv2d(512, 1024, 1, stride=2, height=28, width=28, quant=QUANT), "avx2").knobs
    assert (down.weight_format, down.pixel_block, down.cache_block) == ("s16", 3, 0)
    last = first_choice(lo.Conv2d(512, 512, 3, padding=1, height=7, width=7, quant=QUANT), "avx2").knobs
    assert (last.weight_format, last.pixel_block, last.channel_block, last.cache_block) == ("s16", 4, 16, 0)


def dot_loops(disassembly: str) -> list[list[str]]:
    """The instructions of each loop (a backward jump's span) of ``disassembly`` (objdump -d) that
    holds a ``vpmaddwd``."""
    lines = [line for line in disassembly.splitlines() if re.match(r"\s+[0-9a-f]+:\t", line)]
    address = [int(line.split(":")[0], 16) for line in lines]
    loops = []
    for end, line in enumerate(lines):
        jump = re.search(r"\tj\w+\s+([0-9a-f]+) <", line)
        if jump and int(jump.group(1), 16) < address[end]:
            body = lines[address.index(int(jump.group(1), 16)):end + 1]
            if any("vpmaddwd" in op for op in body):
                loops.append(body)
    return loops


@pytest.mark.slow      # a check of the -O3 machine code (a 56x56 layer's kernel and objdump), not of results
@pytest.mark.skipif(shutil.which("objdump") is None, reason="no objdump to read the compiled loop")
def test_s16_dot_loop_keeps_its_accumulators_in_registers(tmp_path):
    """At -O3 the dot loop of ResNet's 3x3 64->64 conv at 56x56 in its 3x32 s16 block (the first choice
    on AVX2) moves no vector register to or from the stack: both products of a dot and their sums are one
    asm reading the block's halves from one address register (with an asm a product, GCC kept an address
    a half and spilled one of the 12 accumulators, a load and a store a step)."""
    op = lo.Conv2d(64, 64, 3, padding=1, height=56, width=56, quant=QUANT)
    s = (lo.Schedule(op).layout("I", "NHWC").layout("O", "NHWC").layout("W", "OHWI8o4i").split("c", 4)
         .tile(ow=3, k=32).reorder("n", "oh", "ow_o", "k_o", "kh", "kw", "c_o", "c_i").vectorize("k_i")
         .unroll("c_o", 4).register_block("kh").weight_format("s16"))
    source, obj = tmp_path / "kernel.c", tmp_path / "kernel.o"
    source.write_text(generate(s, INT_ISAS["avx2"]).source)
    flags = (f"-O{DEFAULT_OPT_LEVEL}", *BASE_FLAGS, *INT_ISAS["avx2"].compile_flags, *QUANT_FLAGS)
    subprocess.run([*compiler().split(), *flags, "-c", str(source), "-o", str(obj)], check=True)
    loops = dot_loops(subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(obj)], check=True,
                                     capture_output=True, text=True).stdout)
    innermost = min((body for body in loops if sum("vpmaddwd" in op for op in body) == 24), key=len)
    assert not [op for op in innermost if "%ymm" in op and "(%rsp)" in op], "\n".join(innermost)
