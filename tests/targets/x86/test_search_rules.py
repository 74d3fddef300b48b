"""x86's search rules behind the Target interface (targets/x86/search.py): the search space gives the
same candidates in the same order, and a seeded walk over them picks the same trials, as before the
rules moved out of tune/ (digests of the knobs taken at that commit), on any CPU (the AMX check is
bypassed: the tile candidates are pinned too). That tune/ reads no x86 module and spells no ISA name
is kept by the import contracts and tests/test_structure.py."""
import hashlib
import json

import pytest

import loopopt as lo
from loopopt.targets.base import Target
from loopopt.targets.registry import target
from loopopt.targets.search import Candidate
from loopopt.targets.x86 import rank, space
from loopopt.tune.choice import first_choice
from loopopt.tune.guide import Guide
from loopopt.tune.search import Walk

RULES = target("x86").search_rules()
QUANT = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="uint8")
OPS = {
    "conv": lo.Conv2d(5, 24, 3, stride=2, padding=1, height=11, width=9),
    "matmul": lo.Matmul(7, 40, 19),
    "qconv": lo.Conv2d(12, 20, 3, padding=1, height=6, width=7, quant=QUANT),
    "qdepthwise": lo.Conv2d(16, 16, 3, padding=1, groups=16, height=7, width=7, quant=QUANT),
    "ternary": lo.Conv2d(8, 64, 3, height=5, width=5, quant=lo.QuantSpec(weight="ternary")),
    "binary": lo.Conv2d(64, 64, 3, padding=1, height=6, width=6,
                        quant=lo.QuantSpec(activation="binary", weight="binary")),
}
# (op, isa, threads, auto) -> (count, digest of [isa, knobs] in order)
SPACES = {
    ("conv", "avx2", 1, False): (672, "41a4ad671afadeb8"),
    ("conv", "scalar", 2, False): (1056, "dc02526b0651ce3d"),
    ("matmul", "avx512", 2, False): (116, "c8932100f2ec7eb4"),
    ("qconv", "avx512", 1, True): (1009, "d7507ccc527439bb"),      # AMX tiles compete
    ("qconv", "amx", 2, False): (24, "63ed401d133e48a0"),
    ("qconv", "avx2", 1, False): (1984, "eb2ea73d6d89eca4"),       # + the emulated dot's 7x16 and s16 blocks
    ("qdepthwise", "avx512", 2, False): (58, "cc55ddaad81fa4f0"),  # tap dots
    ("ternary", "avx512", 1, False): (1099, "1a0aa8b4ea197320"),   # i2_s blocks, tl1 and tl2 lookups
    ("binary", "avx512", 1, False): (24, "084be69eac113788"),
    ("binary", "scalar", 2, False): (0, "4f53cda18c2baa0c"),
}
WALKS = {"conv": "91e0c885fff5faad", "qconv": "73bfdd8501221d5f"}   # 12 picks, seed 7, on avx512


def _digest(items) -> str:
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]


@pytest.fixture(autouse=True)
def _any_cpu(monkeypatch):
    monkeypatch.setattr(space, "check_amx_cpu", lambda: None)    # tile candidates on a CPU without AMX too


def test_the_search_space_is_what_it_was_before_the_move():
    found = {}
    for (name, isa, threads, auto), _ in SPACES.items():
        candidates = RULES.candidates(OPS[name], isa, threads, auto)
        knobs = [[c.isa, c.knobs.as_dict()] for c in candidates]
        found[name, isa, threads, auto] = (len(candidates), _digest(knobs))
    assert found == SPACES


def test_a_seeded_walk_picks_what_it_picked_before_the_move():
    """A fixed ranking (the space's order), no model, times derived from the knobs: the walk's picks
    depend only on the candidates, the guide's features (``SearchRules.traits``) and the seed."""
    def picks(op):
        ranked = [Candidate(c.op, c.isa, c.knobs, (("predicted_seconds", 1.0 + i),))
                  for i, c in enumerate(RULES.candidates(op, "avx512"))]
        walk, found = Walk(Guide(ranked, RULES, model=lambda _: None), 8, 7), []
        for _ in range(12):
            index, candidate = walk.next()
            found.append(candidate.knobs.as_dict())
            seconds = int(hashlib.sha256(json.dumps(found[-1]).encode()).hexdigest(), 16) % 1000
            walk.observe(index, 1.0 + seconds / 1000)
        return _digest(found)
    assert {name: picks(OPS[name]) for name in WALKS} == WALKS


def test_a_target_without_search_rules_says_so():
    class Bare(Target):           # the abstract interface alone
        name = "bare"
        isas = available_isas = resolve_isa = compile = peak = lambda self, *args: None

    with pytest.raises(ValueError, match=r"the bare target has no search rules: .* \(target='cuda'\)"):
        Bare().search_rules()


def test_packed_weights_of_a_weight_heavy_float_op_at_few_positions_are_prefetched():
    """``space.prefetched_weights``: a float conv (1x1 or 3x3) or GEMM whose weights exceed 512 KB and
    serve at most 64 output positions each prefetches its packed weights 8 KB ahead (its plain-weights
    candidates, small or quantized weights, more positions do not); the knob becomes the schedule's
    ``prefetch`` step and the description says so."""
    heavy = lo.Conv2d(320, 1280, 1, height=7, width=7)
    found = space.candidates(heavy, "avx2")
    packed = [c for c in found if c.knobs.weights == "packed"]
    assert packed and all(c.knobs.prefetch == 2048 for c in packed)
    assert all(c.knobs.prefetch == 0 for c in found if c.knobs.weights != "packed")
    assert str(packed[0].schedule.steps[-1]) == "prefetch('W', 2048)"
    assert RULES.describe(packed[0].knobs.as_dict()).endswith(", prefetch weights 2048 ahead")
    assert "prefetch" not in found[0].knobs.as_dict()
    assert space.prefetched_weights(lo.Matmul(1, 1000, 1280)) == 2048
    small = lo.Conv2d(64, 384, 1, height=14, width=14)
    assert not any(c.knobs.prefetch for c in space.candidates(small, "avx2"))
    assert space.prefetched_weights(lo.Conv2d(512, 512, 3, padding=1, height=7, width=7)) == 2048
    assert space.prefetched_weights(lo.Conv2d(256, 512, 3, stride=2, padding=1, height=14, width=14)) == 2048
    for light in (lo.Conv2d(256, 256, 3, padding=1, height=14, width=14),
                  lo.Conv2d(64, 64, 3, height=9, width=9), lo.Conv2d(1024, 256, 1, height=14, width=14),
                  lo.Conv2d(320, 1280, 1, height=7, width=7, quant=QUANT)):
        assert space.prefetched_weights(light) == 0, light


def test_an_emulated_dot_block_widens_each_broadcast_for_two_channel_vectors():
    """AVX2 emulates vpdpbusd (bytes widened to 16-bit halves, then vpmaddwd): its dot blocks may keep all
    but two registers as accumulators (``space.EMULATED_DOT_OPERANDS``: 7x16, not offered to plain or packed
    weights, nor to AVX-512's vpdpbusd at this width), and the ranking counts the widening of each operand
    (``rank.EMULATED_DOT_OPS``) and asks no register spare beyond those two, so a 3x3 int8 layer's first
    int8 block is 7x16, each widened broadcast shared by two channel vectors (on a Zen 3 core 1.07x the 3x32
    block the spare rule chose; its s16 blocks rank first: tests/test_wide_weights.py), and a depthwise
    int8 layer's is a packed block, not AVX2's tap dot (MobileNetV2's 32 channels at 112x112 on a Zen 3
    core: taps 16x4 0.71 ms, packed 4x16 0.26 ms)."""
    op = lo.Conv2d(64, 64, 3, padding=1, height=56, width=56, quant=QUANT)
    blocks = {(c.knobs.weights, c.knobs.pixel_block, c.knobs.channel_block)
              for c in space.candidates(op, "avx2")}
    assert ("dot", 7, 16) in blocks and ("packed", 7, 16) not in blocks and ("dot", 8, 16) not in blocks
    first = rank.best([c for c in space.candidates(op, "avx2") if c.knobs.weight_format == "int8"]).knobs
    assert (first.weights, first.pixel_block, first.channel_block) == ("dot", 7, 16)
    depthwise = lo.Conv2d(32, 32, 3, padding=1, groups=32, height=112, width=112, quant=QUANT)
    assert first_choice(depthwise, "avx2").knobs.weights == "packed"
    assert space.operand_registers("avx512", "dot", 2) == space.operand_registers("avx2", "packed", 2) == 3


@pytest.mark.slow
def test_an_emulated_dot_block_gains_nothing_from_a_cache_block(recorded_profile):
    """An emulated dot block's weights run from L2 as fast as from L1 (their widening hides the latency), so
    a cache block of the input channels that keeps them in L1 is priced without that gain: its partial sums
    stored and reloaded on every pass and the epilogue pass after the nest remain, and the block that sees
    the whole reduction and requantizes its own sums goes first (on a Zen 3 core, 512->512 3x3 at 7x7:
    1.76 against 1.97 ms on one thread, 0.92 against 1.04 ms on two). AVX-512's first choice keeps its
    cache block."""
    op = lo.Conv2d(512, 512, 3, padding=1, height=7, width=7, quant=QUANT)
    assert first_choice(op, "avx2", threads=2).knobs.cache_block == 0
    assert first_choice(op, "avx512", threads=2).knobs.cache_block == 128


def test_an_emulated_dot_block_unrolls_at_most_one_reduction_loop(recorded_profile):
    """On AVX2 (16 registers, the dot emulated) a dot or tap-dot block that unrolls several reduction loops
    spills (GCC hoists the widened weights of every unrolled step): ResNet's int8 7x7 stem 5.49 against 3.23
    ms on a Zen 3 core; such candidates are priced as spilling, and the stem's first choice unrolls at most
    one loop. AVX-512's VNNI blocks are not: the rule leaves them as they are."""
    stem = lo.Conv2d(3, 64, 7, stride=2, padding=3, height=224, width=224, quant=QUANT)
    for threads in (1, 2):
        assert len(first_choice(stem, "avx2", threads=threads).knobs.unroll) <= 1
    unrolled = [c for c in space.candidates(stem, "avx2") if c.knobs.weights in ("dot", "taps")
                and len(c.knobs.unroll) > 1]
    assert unrolled and all(rank.spills_unrolled(c) for c in unrolled)
    assert not any(rank.spills_unrolled(c) for c in space.candidates(stem, "avx512")
                   if c.knobs.weights in ("dot", "taps") and len(c.knobs.unroll) > 1)


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
@pytest.mark.parametrize("quant", [None, QUANT], ids=["fp32", "int8"])
@pytest.mark.parametrize("shape", [(2, 32, 2), (6, 24, 3), (4, 64, 4), (8, 48, 4)])
@pytest.mark.slow
def test_grouped_channel_blocks_generate(shape, quant, isa):
    """Every channel block the space offers a grouped conv generates: where the groups hold whole
    vectors, a tail block would need a lane-varying guard on the input's broadcast, which the generator
    refuses (``Conv2d(2, 32, 1, groups=2)``: a block of 24 on AVX2 was offered); one candidate a block."""
    from loopopt.codegen import generate
    from loopopt.targets.x86.isa import ISAS

    cin, cout, groups = shape
    op = lo.Conv2d(cin, cout, 1, groups=groups, height=5, width=5, quant=quant)
    firsts = {}
    for candidate in space.candidates(op, isa):
        if isinstance(candidate.knobs, space.Knobs):
            firsts.setdefault(candidate.knobs.channel_block, candidate)
    assert len(firsts) >= 2
    for candidate in firsts.values():
        generate(candidate.schedule, ISAS[isa])


@pytest.mark.slow
def test_an_emulated_dot_block_unrolling_strided_taps_keeps_twelve_accumulators_s16_eight(recorded_profile):
    """On AVX2 a dot block that unrolls the taps of a stride-2 window (the int8 stems) ran slower with 14
    accumulators than with 12 (ResNet's 7x7 stem on a Zen 3 core: 7x16 3.31 ms, 6x16 2.88; MobileNet's
    3x3 stem 0.378 against 0.358 and 3x32's 0.340), and on s16 weights with 12 than with 8 (ResNet's stem
    3x32 2.91 ms, 4x16 2.43; MobileNet's 0.337 against 0.304), so the stems' first choices are s16 blocks
    of 8, on 1 and 2 threads, and the int8 ones keep 12; among int8 blocks a stride-1 window (7x16 fastest
    there) and the 3x3 and 1x1 convs, which unroll their input channels, keep 7x16, and AVX-512's VNNI
    blocks are not priced by the rule."""
    resnet = lo.Conv2d(3, 64, 7, stride=2, padding=3, height=224, width=224, quant=QUANT)
    mobilenet = lo.Conv2d(3, 32, 3, stride=2, padding=1, height=224, width=224, quant=QUANT)
    for stem in (resnet, mobilenet):
        for threads in (1, 2):
            first = first_choice(stem, "avx2", threads=threads).knobs
            assert first.weights == "dot" and first.weight_format == "s16"
            assert first.pixel_block * first.channel_block // 8 == 8
            assert dict(first.unroll) == {"kw": stem.kernel_size[1]}
        narrow = rank.best([c for c in space.candidates(stem, "avx2") if c.knobs.weight_format == "int8"
                            and c.knobs.weights == "dot"]).knobs
        assert narrow.pixel_block * narrow.channel_block // 8 == 12
    stride_one = lo.Conv2d(3, 64, 7, padding=3, height=112, width=112, quant=QUANT)
    for op in (stride_one, lo.Conv2d(64, 64, 3, padding=1, height=56, width=56, quant=QUANT),
               lo.Conv2d(64, 256, 1, height=56, width=56, quant=QUANT)):
        first = rank.best([c for c in space.candidates(op, "avx2") if c.knobs.weight_format == "int8"]).knobs
        assert (first.weights, first.pixel_block, first.channel_block) == ("dot", 7, 16)
    wide = [c for c in space.candidates(resnet, "avx512") if c.knobs.weights == "dot"
            and c.knobs.pixel_block * c.knobs.channel_block // 16 > rank.STRIDED_LIVE]
    assert wide and not any(rank.spills_strided(c, c.knobs.pixel_block * c.knobs.channel_block // 16)
                            for c in wide)
