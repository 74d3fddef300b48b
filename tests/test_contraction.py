"""lo.Contraction: ops from a written statement schedule, compile, verify and analyse like the built-in
ones; their reference agrees with independent oracles; bad statements are refused naming the bad part."""

import itertools
from dataclasses import replace

import numpy as np
import pytest
from helpers import (
    ISAS,
    MISSING_AMX,
    SPECS,
    check,
    check_quantized,
    integer_calls,
    lru_stack,
    python_trace,
    quick_first,
    rotated,
    schedules,
    tiers,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import loopopt as lo
from loopopt.analysis import reuse
from loopopt.codegen import generate
from loopopt.expr import Const, Var
from loopopt.measure import verify
from loopopt.targets.x86.isa import ISAS as CODEGEN_ISAS
from loopopt.targets.x86.isa import available_int_isas
from loopopt.targets.x86.space import candidates

TENSOR = "C[i,j] += A[i,k,l] * B[l,k,j]"
STENCIL = "O[i,j] += I[i+di-1, j+dj-1] * W[di,dj]"
INT_ISAS = available_int_isas()


@st.composite
def contractions(draw):
    """A random contraction: the tensor contraction, a padded 2-D stencil, a strided and dilated 1-D
    conv with a bias, or an index with ``//`` and ``%`` (odd sizes throughout)."""
    kind = draw(st.sampled_from(["tensor", "stencil", "conv", "divmod"]))
    size = lambda high: draw(st.integers(1, high))
    if kind == "tensor":
        return lo.Contraction(TENSOR, sizes=dict(i=size(6), j=size(20), k=size(3), l=size(4)))
    if kind == "stencil":
        i, j = size(7), size(9)
        return lo.Contraction(STENCIL, sizes=dict(i=i, j=j, di=3, dj=3, I=(i, j)), padding="I")
    if kind == "conv":
        stride, dilation, taps, out = size(3), size(2), size(3), size(6)
        return lo.Contraction(
            f"O[n,k,o] += I[n,c,o*{stride}+t*{dilation}] * W[k,c,t]",
            sizes=dict(n=size(2), k=size(5), o=out, c=size(3), t=taps),
            bias="B[k]",
        )
    return lo.Contraction("O[i,j] += A[i//2, (j+k)%3] * B[k,j]", sizes=dict(i=size(7), j=size(9), k=size(4)))


def random_contraction_schedule(isa, data):
    """A random legal schedule of a random contraction."""
    op = data.draw(contractions())
    check(data.draw(schedules(op, isa)), isa)


test_random_contraction_schedules_quick, test_random_contraction_schedules = tiers(
    random_contraction_schedule, 1, 10, isas=ISAS, data=st.data()
)


# --- the required examples: schedule, compile on every ISA, verify, analyse --------------------------

EXAMPLES = {
    "tensor": lo.Contraction(TENSOR, sizes=dict(i=6, j=33, k=3, l=5)),
    "stencil": lo.Contraction(STENCIL, sizes=dict(i=9, j=17, di=3, dj=3, I=(9, 17)), padding=["I"]),
}
PRESETS = ["output_stationary", "naive", "interchanged", "tiled", "weight_stationary", "input_stationary"]


@pytest.mark.parametrize("op, preset", rotated(EXAMPLES, PRESETS, quick=EXAMPLES))
def test_examples_compile_and_verify_on_every_isa(op, preset):
    schedule = lo.dataflows.PRESETS[preset](op)
    for isa in ISAS:
        ok, error = verify(schedule.compile(isa))
        assert ok, (isa, error)


@pytest.mark.parametrize("op", EXAMPLES.values(), ids=EXAMPLES.keys())
@pytest.mark.slow
def test_examples_analyse(op):
    schedule = lo.dataflows.output_stationary(op)
    trace, analytical = reuse(schedule, engine="trace"), reuse(schedule, engine="analytical")
    np.testing.assert_array_equal(trace.counts, analytical.counts)
    assert lo.kernel_model(schedule).predicted_seconds > 0
    assert candidates(op, "avx512")


def test_engines_match_brute_force_on_a_contraction():
    op = lo.Contraction("O[i,j] += I[i+d, j//2] * W[d,j]", sizes=dict(i=4, j=5, d=2))
    schedule = lo.Schedule(op).tile(j=2).layout("I", "JI")
    items = [item for _, item in python_trace(schedule, "element", 64)]
    assert sum(reuse(schedule, "element", 64, engine="trace").counts.ravel()) == len(items)
    expected = lru_stack(items)
    assert reuse(schedule, "element", 64, engine="trace").misses(3) == sum(d >= 3 for d in expected)


# --- the reference against independent oracles ----------------------------------------------------


def test_tensor_contraction_reference_is_einsum():
    op = lo.Contraction(TENSOR, sizes=dict(i=3, j=4, k=2, l=5))
    a, b = (op.random_inputs()[t].astype(np.float64) for t in "AB")
    np.testing.assert_allclose(op.reference(a, b), np.einsum("ikl,lkj->ij", a, b), rtol=1e-12)
    assert op.dim_names == ("i", "j", "k", "l") and op.reduction_dims == {"k", "l"}
    assert [op.tensor(t).letters for t in "ABC"] == ["IKL", "LKJ", "IJ"]


def test_stencil_reference_is_brute_force():
    op = lo.Contraction(STENCIL, sizes=dict(i=4, j=5, di=3, dj=3, I=(4, 5)), padding="I")
    x, w = (op.random_inputs()[t].astype(np.float64) for t in "IW")
    expected = np.zeros((4, 5))
    for i, j, di, dj in itertools.product(range(4), range(5), range(3), range(3)):
        if 0 <= i + di - 1 < 4 and 0 <= j + dj - 1 < 5:
            expected[i, j] += x[i + di - 1, j + dj - 1] * w[di, dj]
    np.testing.assert_allclose(op.reference(x, w), expected, rtol=1e-12)
    assert op.macs == 4 * 5 * 9 - 2 * (4 + 5) * 3 + 4


HAND_CONV = "O[n,k,oh,ow] += I[n,(k//3)*2+c,oh*2+kh-1,ow*2+kw-1] * W[k,c,kh,kw]"
HAND_SIZES = dict(n=2, k=6, oh=4, ow=4, c=2, kh=3, kw=3, I=(2, 4, 7, 8))


def test_conv_written_as_a_contraction_matches_conv2d():
    conv = lo.Conv2d(4, 6, 3, stride=2, padding=1, groups=2, batch=2, height=7, width=8)
    op = lo.Contraction(HAND_CONV, sizes=HAND_SIZES, padding="I", bias="B[k]")
    x = conv.random_inputs()
    args = [x[t] for t in "IWB"]
    np.testing.assert_allclose(op.reference(*args), conv.reference(*args), rtol=1e-12, atol=1e-12)
    assert op.macs == conv.macs and op.call_tensors == ("I", "W", "B")
    # padded as far as the index reaches: the last column reads no padding, so its pad_end is 0 (Conv2d: 1)
    assert op.windows == (conv.windows[0], replace(conv.windows[1], pad_end=0)) and op.groups == 2
    check(lo.dataflows.output_stationary(op), ISAS[0])


def _source(schedule: lo.Schedule, isa: str) -> str:
    """The generated C but its first comment line, which names the op by its repr (or the refusal)."""
    try:
        source = generate(schedule, CODEGEN_ISAS[isa]).source
    except lo.ScheduleError as error:
        return f"refused: {type(error).__name__}"
    return "\n".join(line for line in source.splitlines() if "loopopt kernel for" not in line)


@pytest.mark.parametrize("isa", quick_first(ISAS))
def test_conv_written_as_a_contraction_is_scheduled_as_conv2d(isa):
    """A Contraction in a convolution's form has a Conv2d's roles (windows, groups, channels), so the
    same presets, register-block and tune candidates, and the same generated C for the same schedule."""
    conv = lo.Conv2d(4, 6, 3, stride=2, padding=1, groups=2, batch=2, height=7, width=8)
    op = lo.Contraction(HAND_CONV, sizes=HAND_SIZES, padding={"I": ((0, 0), (0, 0), (1, 1), (1, 1))},
                        bias="B[k]", letters=dict(I="NCHW", W="OIHW", O="NCHW", B="C"))
    assert (op.windows, op.groups, op.guards) == (conv.windows, conv.groups, conv.guards)
    for preset in lo.dataflows.PRESETS.values():
        ours, theirs = preset(op), preset(conv)
        assert lo.to_toml(ours) == lo.to_toml(theirs) and _source(ours, isa) == _source(theirs, isa)
    ours, theirs = candidates(op, isa), candidates(conv, isa)
    assert [c.knobs for c in ours] == [c.knobs for c in theirs]
    assert [lo.to_toml(c.schedule) for c in ours[:8]] == [lo.to_toml(c.schedule) for c in theirs[:8]]
    assert _source(ours[0].schedule, isa) == _source(theirs[0].schedule, isa)
    check(ours[0].schedule, isa)


@pytest.mark.parametrize("expr, sizes", [
    ("O[n,k,x] += I[n,x+t,c] * W[k,c,t]", dict(n=1, k=2, x=3, c=2, t=2)),        # channels last
    ("O[k,x] += I[c,x+t] * W[k,c,t]", dict(k=2, x=3, c=2, t=2)),                # no position dim
    ("O[n,k,x] += I[n,c,x+t] * W[k,c,t,x]", dict(n=1, k=2, x=3, c=2, t=2)),     # weights per position
    ("O[n,k,x] += I[n,k+c,x+t] * W[k,c,t]", dict(n=1, k=2, x=3, c=2, t=2)),     # not a grouped channel
])
def test_statements_not_in_a_convolutions_form_have_no_windows(expr, sizes):
    op = lo.Contraction(expr, sizes=sizes)
    assert (op.windows, op.groups) == ((), 1)


def test_batched_transposed_matmul_written_as_a_contraction_matches_matmul():
    mm = lo.Matmul(3, 5, 4, batch=2, trans_a=True, trans_b=True)
    op = lo.Contraction("C[b,i,j] += A[b,k,i] * B[b,j,k]", sizes=dict(b=2, i=3, j=5, k=4))
    a, b = (mm.random_inputs()[t] for t in "AB")
    np.testing.assert_allclose(op.reference(a, b), mm.reference(a, b), rtol=1e-12)
    assert op.domain.is_equal(mm.domain) and op.dependences["flow"].is_equal(mm.dependences["flow"])


# --- bad statements ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr, kwargs, message",
    [
        ("C[i,j] += A[i,k] B[k,j]", {}, "expected '\\*' between the two inputs at position 17"),
        ("C[i,j] += A[i,k) * B[k,j]", {}, "expected ',' or '\\]' at position 15"),
        ("C[i,j] = A[i,k] * B[k,j]", {}, "expected '\\+=' .* at position 7"),
        ("C[i,j] += A[i,k] * B[k,j] * D[j]", {}, "expected the end of the statement .* at position 26"),
        ("C[i,j] += A[i,k] * B[k,j] ?", {}, "expected an index, a name or an operator at position 26"),
        ("C[i,j] += A[i*k] * B[k,j]", {}, "not affine at position 13: '\\*' multiplies two dims"),
        (
            "C[i,j] += A[i//k] * B[k,j]",
            {},
            "not affine at position 13: '//' needs a positive constant divisor",
        ),
        ("C[i,i] += A[i,k] * B[k,i]", {}, "dim 'i' is used twice in the output C \\(axes 0 and 1\\)"),
        ("C[i+1,j] += A[i,k] * B[k,j]", {}, "output C axis 0 is indexed by '\\(i \\+ 1\\)'"),
        ("C[i,j] += A[i,k] * A[k,j]", {}, "a tensor appears twice"),
        ("C[i,A] += A[i,k] * B[k,A]", {}, "'A' is used both as a tensor and as a dim"),
        ("C[i,j] += A[i,k] * B[k,j]", dict(sizes=dict(i=2, j=2)), "sizes has no extent for dim\\(s\\) 'k'"),
        ("C[i,j] += A[i,k] * B[k,j]", dict(sizes=dict(i=2, j=2, k=2, x=3)), "sizes names 'x', neither a dim"),
        (
            "C[i,j] += A[i,k] * B[k,j]",
            dict(sizes=dict(i=2, j=0, k=2)),
            "extent of dim 'j' must be a positive",
        ),
        (
            "C[i,j] += A[i,k] * B[k,j]",
            dict(sizes=dict(i=2, j=2, k=2, A=(2, 1))),
            "A axis 1 is indexed by 'k', from 0 to 1, outside its size 1; pass padding=\\['A'\\]",
        ),
        (
            "O[i] += I[i-1] * W[i]",
            dict(sizes=dict(i=2)),
            "I axis 0 is indexed by '\\(i - 1\\)', from -1 to 0, outside its size 1",
        ),
        (
            "O[i] += I[(i-1)//2] * W[i]",
            dict(sizes=dict(i=2), padding="I"),
            "numerator '\\(i - 1\\)' of the division at position 15 reaches -1",
        ),
        ("O[i] += I[i] * W[i]", dict(sizes=dict(i=2), padding="O"), "padding names 'O', not an input"),
        (
            "O[i] += I[i,k] * W[k]",
            dict(sizes=dict(i=2, k=2), bias="B[k]"),
            "its index may use only the output dims i",
        ),
        (
            "O[i] += I[i-2] * W[i]",
            dict(sizes=dict(i=2), padding="I"),
            "I axis 0 is indexed by '\\(i - 2\\)', from -2 to -1, never inside the tensor; give its shape",
        ),
        (
            "O[i] += I[i-2] * W[i]",
            dict(sizes=dict(i=2, I=(2,)), padding={"I": ((1, 0),)}),
            "I axis 0 is indexed by '\\(i - 2\\)', from -2 to -1, outside its size 2 padded by \\(1, 0\\)",
        ),
        (
            "O[i] += I[i] * W[i]",
            dict(sizes=dict(i=2), padding={"I": ((1, 0), (0, 0))}),
            "padding\\['I'\\] must be 1 \\(begin, end\\) pairs of ints >= 0, got \\(\\(1, 0\\), ",
        ),
    ],
)
def test_bad_statements_name_the_bad_part(expr, kwargs, message):
    kwargs = {"sizes": dict(i=2, j=2, k=2), **kwargs}
    with pytest.raises(lo.ContractionError, match=message):
        lo.Contraction(expr, **kwargs)


def test_not_a_string():
    with pytest.raises(TypeError, match="takes the statement as a string"):
        lo.Contraction(3, sizes={})


# --- quantized contractions -------------------------------------------------------------------------

QUANTIZABLE = {
    "tensor": (TENSOR, dict(i=6, j=20, k=3, l=4), {}),
    "batched transposed, bias": ("C[b,i,j] += A[b,k,i] * B[b,j,k]", dict(b=3, i=5, j=9, k=7),
                                 dict(bias="Z[j]")),
    "strided conv, unpadded": ("O[n,k,x] += I[n,c,2*x+t] * W[k,c,t]", dict(n=2, k=5, x=4, c=3, t=3), {}),
    "padded conv (windows)": ("O[n,k,x] += I[n,c,x+t-1] * W[k,c,t]", dict(n=2, k=5, x=6, c=3, t=3),
                              dict(padding="I", shapes=lambda s: {"I": (s["n"], s["c"], s["x"])})),
    "weights not over every reduction": ("C[i,j] += A[i,k,l] * B[k,j]", dict(i=5, j=6, k=3, l=2), {}),
}


@st.composite
def quantized_contractions(draw):
    """A random contraction of a quantizable form (odd sizes) with a random QuantSpec."""
    expr, sizes, kwargs = QUANTIZABLE[draw(st.sampled_from(sorted(QUANTIZABLE)))]
    sizes = {d: draw(st.integers(1, high)) for d, high in sizes.items()}
    shapes = kwargs.get("shapes", lambda _: {})(sizes)
    kwargs = {k: v for k, v in kwargs.items() if k != "shapes"}
    return lo.Contraction(expr, sizes={**sizes, **shapes}, quant=draw(SPECS), **kwargs)


def random_quantized_contraction_schedule(isa, data):
    """Quantized contractions (the compensation from the roles: per-channel weight sums, per-position
    activation sums over every reduction dim) are bit-exact against the integer reference."""
    op = data.draw(quantized_contractions())
    s = data.draw(schedules(op, isa))
    if data.draw(st.booleans()):
        s = s.compensation("kernel")
    check_quantized(s, isa, call=data.draw(st.none() | integer_calls(op)))


test_random_quantized_contractions_quick, test_random_quantized_contractions = tiers(
    random_quantized_contraction_schedule, 1, 16, isas=INT_ISAS,
    data=st.data())


@pytest.mark.parametrize("expr, sizes, kwargs, message", [
    (STENCIL, dict(i=4, j=4, di=3, dj=3, I=(4, 4)), dict(padding="I"),
     "the weights W must be indexed by the output channel dim 'j'; the activations I must not be indexed by "
     "the output channel dim 'j'; padding \\['I'\\] leaves taps out"),
    ("O[n,k,x] += I[n,x+t-1,c] * W[k,c,t]", dict(n=1, k=2, x=4, c=2, t=3), dict(padding="I"),
     "padding \\['I'\\] leaves taps out near the borders \\(quantize a Conv1d/2d/3d"),
    ("C[i,j] += A[i,k] * B[k+1,j]", dict(i=2, j=3, k=2), {},
     "indexed by distinct plain dims, not \\[\\(k \\+ 1\\), j\\]"),
    ("C[i,j] += A[i,k] * B[j]", dict(i=2, j=3, k=2), {}, "the weights B must be indexed by a reduction dim"),
    ("C[i,j] += A[i,k] * B[k,j]", dict(i=2, j=3, k=2), dict(bias="Z[i]"),
     "the bias Z must be indexed by 'j' alone"),
    ("C[i,j] += A[i,k] * B[k,j]", dict(i=2, j=3, k=2), dict(alpha=2.0),
     "the output is scaled \\(alpha=2.0, beta=1.0\\)"),
])
def test_quantization_refusals_name_the_reason(expr, sizes, kwargs, message):
    with pytest.raises(lo.ContractionError, match=f"cannot be quantized: .*{message}"):
        lo.Contraction(expr, sizes=sizes, quant=lo.QuantSpec(), **kwargs)


@pytest.mark.parametrize("isa", INT_ISAS)
def test_output_letters_that_name_epilogue_variables(isa):
    """An output lettered ``IJ`` (a hand-written contraction's default) names its channel variable
    ``lo_jj``: as ``lo_j`` it shadowed the epilogue's lane loop, and a register block over a vector
    loop that is not the channels stored garbage."""
    op = lo.Contraction("C[i,j] += A[k,i] * B[j,k]", sizes=dict(i=3, j=2, k=5), bias="Z[j]",
                        quant=lo.QuantSpec(per_channel=False, weight_symmetric=False))
    check_quantized(lo.Schedule(op).reorder("j", "k", "i").vectorize("i").register_block("k"), isa)


def test_quantized_contraction_on_amx_is_exact_or_refused():
    """The tile kernels take a contraction whose roles read as their GEMM, else refuse it clearly."""
    op = lo.Contraction("C[i,j] += A[i,k] * B[k,j]", sizes=dict(i=9, j=20, k=70), quant=lo.QuantSpec())
    if MISSING_AMX is None:
        check_quantized(lo.Schedule(op), "amx")
    tensor = lo.Contraction(TENSOR, sizes=dict(i=5, j=7, k=3, l=4), quant=lo.QuantSpec())
    with pytest.raises(lo.schedule.ScheduleError, match="isa 'amx' computes convolutions and matrix"):
        lo.Schedule(tensor).compile("amx")


@settings(max_examples=60)
@given(st.lists(st.tuples(st.sampled_from("ijk"), st.integers(-3, 3)), max_size=5), st.integers(-4, 4),
       st.integers(1, 4), st.integers(1, 5), st.integers(1, 3), st.sampled_from([None, 2, 3]))
def test_index_ranges_are_the_least_and_greatest_values_over_the_box(terms, constant, ei, ej, ek, divisor):
    """An index's range (affine: from its coefficients; with ``//`` or ``%``: by isl) is the least and
    greatest value it takes over every point of the dims' box."""
    op = lo.Contraction("C[i,j] += A[i,k] * B[k,j]", sizes=dict(i=ei, j=ej, k=ek))
    expr = sum((Var(dim) * c for dim, c in terms), Const(constant))
    expr = expr if divisor is None else expr // divisor
    values = [expr.evaluate(dict(i=i, j=j, k=k))
              for i, j, k in itertools.product(range(ei), range(ej), range(ek))]
    assert op._range(expr) == (min(values), max(values))
