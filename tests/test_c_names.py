"""User-chosen names never meet the generated C's: contractions whose dims, tensors and layout letters
are named as the generators' own variables (loop names, split loops, epilogue and block variables)
compile and agree with the reference, float and quantized, on every ISA; names that cannot be C
variables of a kernel (C keywords, the ``lo_`` and ``_`` prefixes, the quantized kernels' own names) are
refused naming the bad name."""

import pytest
from helpers import ISAS, SPECS, check, check_quantized, quantized_schedules, quick_first, schedules, tiers
from hypothesis import strategies as st

import loopopt as lo
from loopopt.cnames import LOAD_STEMS, QUANTIZED_NAMES
from loopopt.targets.x86.isa import available_int_isas

# names the generators use: loop variables of conv/matmul presets and their splits, helper locals, the
# epilogue's letters (lo_a/j/r/t come from letters A, J, R, T), tensor names of the presets; the
# reserved ones among them (s, g, rc, cc, Y when quantized; tensors v, acc) are drawn now and then, to
# be refused
NAMES = ["i", "j", "k", "k_i", "k_o", "j_i", "n", "c", "t", "r", "a", "v", "x", "p", "m", "f", "u", "b", "s",
         "g", "rc", "cc", "mask", "bits", "idx", "pick", "even", "lane_bit", "kh", "ow", "oh", "A", "B", "C",
         "I", "O", "W", "X", "Y", "Z", "main", "lo", "Lo_j", "acc", "tc"]
RESERVED = sorted(QUANTIZED_NAMES | LOAD_STEMS)
LETTERS = "AJRTIKXY"


@st.composite
def named_contractions(draw, quant=None):
    """A matmul- or conv-shaped contraction (bias or not) whose names are drawn from ``NAMES`` and whose
    layout letters are the default or drawn from ``LETTERS``; None when a reserved name makes it
    refused (checked to be refused, naming why)."""
    free = [n for n in NAMES if n not in RESERVED]
    names = draw(st.lists(st.sampled_from(free), min_size=8, max_size=8, unique=True))
    if draw(st.integers(0, 3)) == 0:     # now and then one reserved name, to be refused
        names[draw(st.integers(0, 7))] = draw(st.sampled_from(RESERVED))
    i, j, k, d, a, b, c, z = names
    size = lambda high: draw(st.integers(1, high))
    bias = f"{z}[{j}]" if draw(st.booleans()) else None
    if draw(st.booleans()):
        left, right = draw(st.sampled_from([(f"{i},{k}", f"{k},{j}"), (f"{k},{i}", f"{j},{k}")]))
        expr, sizes = f"{c}[{i},{j}] += {a}[{left}] * {b}[{right}]", {i: size(9), j: size(20), k: size(7)}
        ranks = {a: 2, b: 2, c: 2}
    else:   # a 1-D conv: j the output channels, d the input channels, i the positions, k the taps
        expr = f"{c}[{j},{i}] += {a}[{d},{i}*{size(2)}+{k}] * {b}[{j},{d},{k}]"
        sizes, ranks = {i: size(7), j: size(19), k: size(3), d: size(3)}, {a: 2, b: 3, c: 2}
    letters = None
    if draw(st.booleans()):
        letters = {t: "".join(draw(st.permutations(LETTERS))[:rank]) for t, rank in ranks.items()}
        if bias:
            letters[z] = letters[c][0 if "*" in expr else 1]
    tensors = set(ranks) | ({z} if bias else set())
    quantized_clash = quant is not None and (set(sizes) | tensors) & QUANTIZED_NAMES
    reason = ("register-block loads" if tensors & LOAD_STEMS else
              "quantized kernels use" if quantized_clash else None)
    if reason is None:
        return lo.Contraction(expr, sizes=sizes, bias=bias, quant=quant, letters=letters)
    with pytest.raises(lo.ContractionError, match=reason):
        lo.Contraction(expr, sizes=sizes, bias=bias, quant=quant, letters=letters)
    return None


def float_kernel(isa, data):
    """A float contraction of adversarial names, randomly scheduled, agrees with its reference."""
    op = data.draw(named_contractions())
    if op is not None:
        schedule = data.draw(schedules(op, isa))
        check(schedule, isa, threads=2 if schedule.parallel_loop is not None else 1)


test_float_names_quick, test_float_names = tiers(
    float_kernel, 1, 16, isas=ISAS, data=st.data())


def quantized_kernel(isa, data):
    """A quantized contraction of adversarial names, randomly scheduled, agrees with its reference."""
    op = data.draw(named_contractions(quant=data.draw(SPECS)))
    if op is not None:
        schedule = data.draw(quantized_schedules(op, isa))
        check_quantized(schedule, isa, threads=2 if schedule.parallel_loop is not None else 1)


test_quantized_names_quick, test_quantized_names = tiers(
    quantized_kernel, 1, 16, isas=available_int_isas(), data=st.data())


@pytest.mark.parametrize("isa", quick_first(available_int_isas()))
def test_output_letter_of_the_requantized_value(isa):
    """An output lettered ``IP`` names its position ``lo_pp``: as ``lo_p`` the requantized value of the
    epilogue shadowed it, and the store's index was a float (found by the tests above)."""
    op = lo.Contraction("C[i,p] += A[k,p+j] * B[i,k,j]", sizes=dict(i=3, p=4, k=2, j=2),
                        quant=lo.QuantSpec("uint8", False, False, "uint8"))
    check_quantized(lo.Schedule(op), isa)


@pytest.mark.parametrize("expr, bad", [
    ("C[i,int] += A[k,i] * B[int,k]", "dim name 'int' is a C keyword"),
    ("for[i,j] += A[k,i] * B[j,k]", "tensor name 'for' is a C keyword"),
    ("C[i,j] += lo_x[k,i] * B[j,k]", "tensor name 'lo_x': names starting with '_' or 'lo_' or 't_' are"),
    ("C[i,t_c] += A[k,i] * B[t_c,k]", "dim name 't_c': names starting"),
    ("C[i,j] += v[k,i] * B[j,k]", "tensor name 'v' is a tensor name whose register-block loads would meet"),
    ("acc[i,j] += A[k,i] * B[j,k]", "tensor name 'acc' is a tensor name whose register-block loads"),
    ("C[i,lo_j] += A[k,i] * B[lo_j,k]", "dim name 'lo_j': names starting"),
    ("C[i,j] += A[_k,i] * B[j,_k]", "dim name '_k': names starting"),
    ("C[i,j] += A[k,i] * memcpy[j,k]", "tensor name 'memcpy' is a C library name"),
    ("C[i,j] += A[k,i] * B[j,k]", None),
])
def test_names_the_c_cannot_take_are_refused(expr, bad):
    """C keywords, C library names and the reserved prefixes are refused naming the bad name."""
    sizes = {d: 3 for d in ("i", "j", "k", "int", "lo_j", "_k", "t_c")}
    sizes = {d: n for d, n in sizes.items() if f"[{d}," in expr or f",{d}]" in expr}
    if bad is None:
        assert lo.Contraction(expr, sizes=sizes).dim_names == ("i", "j", "k")
        return
    with pytest.raises(lo.ContractionError, match=bad):
        lo.Contraction(expr, sizes=sizes)


@pytest.mark.parametrize("name", sorted(QUANTIZED_NAMES))
def test_quantized_kernels_names_are_refused_only_when_quantized(name):
    """The quantized kernels' own unprefixed names stay free for float kernels (Winograd's dim ``s``)."""
    expr, sizes = f"C[i,{name}] += A[k,i] * B[{name},k]", {"i": 3, name: 4, "k": 5}
    assert name in lo.Contraction(expr, sizes=sizes).dim_names
    with pytest.raises(lo.ContractionError, match=f"dim name {name!r} is a name the quantized kernels use"):
        lo.Contraction(expr, sizes=sizes, quant=lo.QuantSpec())


def test_quantized_output_buffer_name_is_refused_only_when_quantized():
    """``Y`` is the requantized output's parameter beside the int32 sums: free for a float kernel."""
    expr, sizes = "Y[i,j] += A[k,i] * B[j,k]", dict(i=3, j=4, k=5)
    assert lo.Contraction(expr, sizes=sizes).output == "Y"
    with pytest.raises(lo.ContractionError, match="tensor name 'Y' is a name the quantized kernels use"):
        lo.Contraction(expr, sizes=sizes, quant=lo.QuantSpec())


@pytest.mark.parametrize("step, bad", [
    (lambda s: s.split("j", 2), "the new loop name 'j_i' is already used"),
    (lambda s: s.split("lo", 2), "new loop name 'lo_o': names starting with '_' or 'lo_' or 't_' are"),
    (lambda s: s.fuse("lo", "j"), "new loop name 'lo_j': names starting"),
])
def test_new_loop_names_that_meet_a_name_are_refused(step, bad):
    """A split or fused loop named as a tensor, or with the reserved prefix, is refused."""
    schedule = lo.Schedule(lo.Contraction("C[lo,j] += A[k,lo] * j_i[j,k]", sizes=dict(lo=3, j=4, k=5)))
    with pytest.raises(lo.ScheduleError, match=bad):
        step(schedule)
