"""The ranking's memos (``knob_memo.by_knobs``) against the functions they remember: over every register
block of drawn ops' search spaces (convs of any window, stride, groups, int8 or float, matmuls; 1-2
threads; AVX2, AVX-512 and scalar, which need not run here), each memo answers each candidate as its
function does, though candidates that differ in fields the memo does not read share its answers; a
memo keeps its answers to itself; a memo past its limit starts over."""
from helpers import tiers
from hypothesis import strategies as st

import loopopt as lo
from loopopt.quant import QuantSpec
from loopopt.targets.x86 import knob_memo, rank
from loopopt.targets.x86.space import Knobs, candidates

CALLS = {rank.outer_extents: [((), {})],
         rank.out_of_order: [((), {}), ((), {"channels_first": True})],
         rank.streamed_inputs: [((1 << 10,), {}), ((1 << 18,), {"threads": 2}), ((64 << 20, 2), {})]}


def ops(draw) -> lo.ops.Op:
    quant = QuantSpec() if draw(st.booleans()) else None
    if draw(st.integers(0, 4)) == 0:
        return lo.Matmul(draw(st.integers(1, 40)), draw(st.integers(1, 80)), draw(st.integers(1, 600)),
                         quant=quant)
    groups = draw(st.sampled_from([1, 1, 2, "depthwise"]))
    channels = draw(st.integers(1, 24)) * (2 if groups == 2 else 1)
    out = channels if groups == "depthwise" else draw(st.integers(1, 40)) * (2 if groups == 2 else 1)
    kernel = draw(st.sampled_from([1, 3, (1, 3), 5]))
    return lo.Conv2d(channels, out, kernel, stride=draw(st.sampled_from([1, 2])),
                     padding=draw(st.sampled_from([0, 1])),
                     groups=channels if groups == "depthwise" else groups,
                     height=draw(st.integers(5, 10)), width=draw(st.integers(5, 10)), quant=quant)


def memos_answer_as_their_functions(isa, data):
    op = data.draw(st.composite(ops)())
    threads = data.draw(st.integers(1, 2))
    blocks = [c.knobs for c in candidates(op, isa, threads) if isinstance(c.knobs, Knobs)]
    for memo, calls in CALLS.items():
        for knobs in blocks:
            for args, kwargs in calls:
                assert memo(op, knobs, *args, **kwargs) == memo.__wrapped__(op, knobs, *args, **kwargs), (
                    memo.__name__, knobs, args, kwargs)


test_memos_answer_as_their_functions_quick, test_memos_answer_as_their_functions = tiers(
    memos_answer_as_their_functions, 2, 24, isas=["avx2", "avx512", "scalar"], data=st.data())


def test_a_memo_keeps_its_answers_to_itself():
    op = lo.Conv2d(8, 16, 3, padding=1, height=6, width=6)
    knobs = Knobs(2, 8, ("kh", "kw", "c"), ("n", "oh", "ow_o", "k_o"), "packed")
    rank.outer_extents(op, knobs)["k_o"] = 99
    assert rank.outer_extents(op, knobs)["k_o"] == 2


def test_a_memo_past_its_limit_starts_over(monkeypatch):
    monkeypatch.setattr(knob_memo, "LIMIT", 2)
    calls = []

    @knob_memo.by_knobs("pixel_block")
    def blocks(op, knobs):
        calls.append(knobs.pixel_block)
        return knobs.pixel_block

    op = lo.Matmul(4, 8, 8)
    for pixel_block in (1, 2, 1, 3, 1):
        assert blocks(op, Knobs(pixel_block, 8, ("k",), ("i_o", "j_o"), "packed")) == pixel_block
    assert calls == [1, 2, 3, 1]          # 3 found the memo full: it started over, so 1 came again
