"""The NEON target: its instruction tables lane by lane, and its kernels against the reference, run
under ``qemu-aarch64 -cpu max`` here (natively on an AArch64 machine). Skipped, with the reason, where
the cross compiler or the emulator is missing (README: how to install them)."""
import json
import re
import shlex
import subprocess
import warnings
from fractions import Fraction
from functools import cache

import numpy as np
import pytest
import test_isa_bf16_tables as bf16_tables
import test_isa_int_tables as int_tables
import test_isa_tables as float_tables
from helpers import (
    HYPOTHESIS,
    SPECS,
    SPECS_BINARY,
    binary_convs,
    check,
    check_binary,
    check_quantized,
    conv_dot_schedule,
    conv_ops,
    even_conv_ops,
    matmul_ops,
    quantized_schedules,
    schedules,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ternary import extreme_call, lut_schedules

import loopopt as lo
from loopopt.bf16 import bf16_to_float32, to_bf16
from loopopt.cli import main
from loopopt.codegen.instr import (
    BF16_MEANINGS,
    F16_MEANINGS,
    INT_MEANINGS,
    MEANINGS,
    PACKED_MEANINGS,
    SHARED_OPS,
    SIGNED_DOT_MEANINGS,
)
from loopopt.codegen.params import KernelParam, scalar, signature
from loopopt.dataflows import output_stationary
from loopopt.measure import verify
from loopopt.targets import target
from loopopt.targets.binary import block_dims
from loopopt.targets.neon import mmla, profile, toolchain
from loopopt.targets.neon.isa import BFMMLA, INT_FEATURES, NEON, NEON_BF16, NEON_BFDOT, NEON_F16, NEON_INT
from loopopt.targets.neon.runner import RunnerCase
from loopopt.targets.neon.target import function_drivers, kernel_case
from loopopt.targets.peak import CHAINS, peak_source
from loopopt.tune import RankedResult
from loopopt.tune.guide import Guide
from loopopt.tune.search import BROAD, Walk

MISSING = toolchain.missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"neon kernels cannot run here: {MISSING}")
ISA = "neon"
TERNARY_SPECS = SPECS.map(lambda s: lo.QuantSpec(s.activation, s.per_channel, True, s.output, "ternary"))


def test_tables_have_every_operation_and_its_meaning():
    assert set(NEON.ops) == set(MEANINGS)
    optional = set(SIGNED_DOT_MEANINGS) | set(PACKED_MEANINGS)
    assert set(NEON_INT.ops) == set(INT_MEANINGS) | set(SHARED_OPS) | optional
    assert all(NEON.ops[name].meaning == MEANINGS[name] for name in NEON.ops)
    assert set(NEON_BF16.ops) == set(BF16_MEANINGS) | set(SHARED_OPS)
    assert all(NEON_BF16.ops[name].meaning == BF16_MEANINGS[name] for name in BF16_MEANINGS if name != "dot")
    assert "denormal operands and results kept" in NEON_BF16.ops["dot"].meaning
    assert set(NEON_F16.ops) == set(F16_MEANINGS) | set(SHARED_OPS)
    assert all(NEON_F16.ops[name].meaning == F16_MEANINGS[name] for name in F16_MEANINGS)


SIGNED_DOT_PARAMS = (KernelParam("a", "int32_t", const=True), KernelParam("b", "int32_t", const=True),
                     KernelParam("c", "int32_t", const=True), scalar("bits", "unsigned"),
                     KernelParam("out", "int32_t"))


def signed_dot_harness() -> str:
    """The C of a probe of the optional s8 x s8 dot (``SIGNED_DOT_MEANINGS``): ``dot_s8`` and ``dot_s8_mask``
    of the words ``a``, ``b`` and sums ``c``, under the mask of ``bits``; then smmla and usmmla
    (``mmla.ENTRIES``) of the same 16 bytes ``a``, ``b`` onto ``c``."""
    t = NEON_INT
    loads = {name: t.load(p=name) for name in "abc"}
    weights = f"vreinterpretq_s8_s32({loads['b']})"
    signed = mmla.ENTRIES["smmla"](c=loads["c"], a=f"vreinterpretq_s8_s32({loads['a']})", b=weights)
    unsigned = mmla.ENTRIES["usmmla"](c=loads["c"], a=f"vreinterpretq_u8_s32({loads['a']})", b=weights)
    return (f"{t.prelude}\n{signature('probe', SIGNED_DOT_PARAMS)}\n{{\n"
            f"    const {t.mask_type} m = {t.mask_bits(s='bits')};\n"
            f"    {t.store(p='out', v=t.dot_s8(**loads))};\n"
            f"    {t.store(p='out + 4', v=t.dot_s8_mask(**loads, m='m'))};\n"
            f"    {t.store(p='out + 8', v=signed)};\n    {t.store(p='out + 12', v=unsigned)};\n}}\n")


def mmla_meaning(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The scalar meaning of smmla / usmmla (``a``'s bytes as int8 or uint8): the 2x2 block c + A @ B^T of
    the 2x8 rows of ``a`` and of ``b``, row-major, wrapping int32."""
    block = a.astype(np.int64).reshape(2, 8) @ b.astype(np.int64).reshape(2, 8).T
    return (c.astype(np.int64) + block.reshape(4)).astype(np.int32)


class SignedDotProbe:
    """``check_lanes`` of the s8 x s8 dot against its meaning, and of smmla / usmmla against
    ``mmla_meaning``, on random bytes (the ends of the range among them) and sums (wrapping)."""

    @staticmethod
    def check_lanes(isa, driver, seed: int) -> None:
        rng = np.random.default_rng(seed)
        a, b = (rng.integers(-128, 128, (4, 4), dtype=np.int8) for _ in range(2))
        a[0, :2], b[0, :2] = [-128, 127], [-128, -128]
        c = rng.integers(-2**31, 2**31, 4, dtype=np.int64).astype(np.int32)
        bits = int(rng.integers(0, 16))
        out = np.zeros(16, np.int32)
        values = dict(a=a.view(np.int32).reshape(-1), b=b.view(np.int32).reshape(-1), c=c, bits=bits, out=out)
        driver.call(driver.bind(SIGNED_DOT_PARAMS, values))
        dot = (c.astype(np.int64) + (a.astype(np.int64) * b).sum(axis=1)).astype(np.int32)   # wrapping
        mask = (bits >> np.arange(4)) & 1 == 1
        assert np.array_equal(out[:4], dot) and np.array_equal(out[4:8], np.where(mask, dot, c)), (out, dot)
        assert np.array_equal(out[8:12], mmla_meaning(c, a, b)), (out[8:12], mmla_meaning(c, a, b))
        assert np.array_equal(out[12:], mmla_meaning(c, a.view(np.uint8), b)), out[12:]


F16_PARAMS = (KernelParam("h", "uint16_t", const=True), KernelParam("idx", "int32_t", const=True),
              scalar("bits", "unsigned"), KernelParam("out", "float"))


def f16_harness() -> str:
    """The C of a probe of the float16 table: each widening entry on the halves ``h`` (lanes 0-3 of
    ``out`` per entry, the scalar ``value`` last)."""
    t, f = NEON_F16, NEON
    entries = [t.broadcast(s="h[3]"), t.load(p="h + 1"), t.load_mask(p="h + 1", m="m"),
               t.gather(p="h", idx="index"), t.gather_mask(p="h", idx="index", m="m")]
    stores = "".join(f"    {f.store(p=f'out + {4 * k}', v=v)};\n" for k, v in enumerate(entries))
    return (f"{t.prelude}\n{signature('probe', F16_PARAMS)}\n{{\n"
            f"    const {t.mask_type} m = {t.mask_bits(s='bits')};\n"
            f"    const {t.index_type} index = {t.index_load(p='idx')};\n{stores}"
            f"    out[20] = {t.value(s='h[5]')};\n}}\n")


class F16Probe:
    """``check_lanes`` of the float16 table against its meanings (``F16_MEANINGS``): halves including
    subnormals, signed zeros and infinities, widened exactly."""

    @staticmethod
    def check_lanes(isa, driver, seed: int) -> None:
        rng = np.random.default_rng(seed)
        h = rng.normal(0, 1000, 16).astype(np.float16)
        h[[0, 5, 9, 12]] = np.array([6e-8, -0.0, np.inf, -3e-5], np.float16)      # subnormal, -0, inf
        idx = rng.integers(0, 16, 4).astype(np.int32)
        bits = int(rng.integers(0, 16))
        out = np.zeros(21, np.float32)
        driver.call(driver.bind(F16_PARAMS, dict(h=h.view(np.uint16), idx=idx, bits=bits, out=out)))
        x = h.astype(np.float32)
        mask = (bits >> np.arange(4)) & 1 == 1
        expected = np.concatenate([np.full(4, x[3]), x[1:5], np.where(mask, x[1:5], 0), x[idx],
                                   np.where(mask, x[idx], 0), [x[5]]]).astype(np.float32)
        assert np.array_equal(out.view(np.uint32), expected.view(np.uint32)), (out, expected)


class Bf16DenormalProbe:
    """``check_lanes`` of the bf16 pair dot (bfmlalt, bfmlalb) on denormal products: kept, not flushed as
    x86's vdpbf16ps (and NEON's bfdot) flush them; through the bf16 table's probe."""

    @staticmethod
    def check_lanes(isa, driver, seed: int) -> None:
        rng = np.random.default_rng(seed)
        n = isa.lanes
        h = to_bf16(rng.standard_normal(4 * n + 8).astype(np.float32))
        h[:2 * n] = to_bf16(rng.uniform(1, 2, 2 * n).astype(np.float32) * np.float32(2.0 ** -130))
        h[2] = 0x0005                                # lane 1's low a: a denormal bf16 operand
        c_in = np.zeros(n, np.float32)
        c_in[1] = np.float32(2.0 ** -126)            # the smallest normal plus denormal products
        table = bf16_tables.probes(isa)
        out = np.zeros(len(table) * n, np.float32)
        pairs = np.zeros(len(table) * n, np.int32)
        driver.call(driver.bind(bf16_tables.PARAMS, dict(h=h, idx=np.zeros(n, np.int32), bits=0, c_in=c_in,
                                                         out=out, pairs=pairs)))
        value, lanes = bf16_to_float32(h), np.arange(n)
        a_lo, a_hi, b_lo, b_hi = (value[base + 2 * lanes + half] for base in (0, 2 * n) for half in (0, 1))
        dot = (c_in + a_hi * b_hi) + a_lo * b_lo               # numpy float32: denormals kept
        k = list(table).index("dot")
        assert np.all(dot != 0) and np.any(np.abs(dot) < 2.0 ** -126), dot     # the probe reaches denormals
        assert np.array_equal(out[k * n:(k + 1) * n].view(np.uint32), dot.view(np.uint32)), (out, dot)


ROUND_TO_ODD_VECTORS = 64
ROUND_TO_ODD_PARAMS = (KernelParam("a", "int32_t", const=True), KernelParam("b", "int32_t", const=True),
                       KernelParam("c", "float", const=True), scalar("bits", "unsigned"),
                       KernelParam("out", "float"))


def round_to_odd_harness() -> str:
    """The C of a probe of ``bfdot``, its masked form (the ``neon_bfdot`` table's ``dot``, ``dot_mask``) and
    ``bfmmla`` over ``ROUND_TO_ODD_VECTORS`` vectors of bf16 pairs ``a``, ``b`` and sums ``c``."""
    t, f = NEON_BFDOT, NEON
    a, b, c = "lo_a", "lo_b", "lo_c"
    results = [t.dot(a=a, b=b, c=c), BFMMLA(a=a, b=b, c=c), t.dot_mask(a=a, b=b, c=c, m="m")]
    n = 4 * ROUND_TO_ODD_VECTORS
    stores = "".join(f"        {f.store(p=f'out + {k * n} + 4 * v', v=r)};\n" for k, r in enumerate(results))
    return (f"{t.prelude}\n{signature('probe', ROUND_TO_ODD_PARAMS)}\n{{\n"
            f"    const {t.mask_type} m = {t.mask_bits(s='bits')};\n"
            f"    for (int v = 0; v < {ROUND_TO_ODD_VECTORS}; ++v) {{\n"
            f"        const int32x4_t {a} = {NEON_INT.load(p='a + 4 * v')}, "
            f"{b} = {NEON_INT.load(p='b + 4 * v')};\n"
            f"        const float32x4_t {c} = {f.load(p='c + 4 * v')};\n{stores}    }}\n}}\n")


FLT_MIN = Fraction(2) ** -126


def round_to_odd(x: Fraction) -> Fraction:
    """``x`` rounded to float32 as bfdot rounds (``isa.BF16_ROUND_TO_ODD``): 0 below the smallest normal
    (tininess before rounding), else truncated to 24 bits with the last set where inexact (finite ``x``)."""
    if abs(x) < FLT_MIN:
        return Fraction(0)
    size = abs(x)
    exponent = size.numerator.bit_length() - size.denominator.bit_length()
    exponent -= Fraction(2) ** exponent > size
    unit = Fraction(2) ** (exponent - 23)
    digits = size // unit
    digits |= digits * unit != size
    return (1 if x > 0 else -1) * digits * unit


def bfdot_meaning(c: Fraction, a: tuple[Fraction, Fraction], b: tuple[Fraction, Fraction]) -> Fraction:
    """One lane of bfdot: c + (a_lo b_lo + a_hi b_hi), denormal operands flushed, each step rounded to odd."""
    flush = lambda v: v if abs(v) >= FLT_MIN else Fraction(0)
    products = [round_to_odd(flush(x) * flush(y)) for x, y in zip(a, b, strict=True)]
    return round_to_odd(flush(c) + round_to_odd(products[0] + products[1]))


class RoundToOddProbe:
    """``check_lanes`` of bfdot, its masked form and bfmmla against ``bfdot_meaning`` lane by lane, on normal
    bf16 values, denormal operands and sums, and products below the smallest normal; the probe reaches lanes
    where rounding to odd or the flush differ from the reference's round to nearest."""

    @staticmethod
    def check_lanes(isa, driver, seed: int) -> None:
        rng = np.random.default_rng(seed)
        n = 4 * ROUND_TO_ODD_VECTORS
        scales = np.float32(2.0) ** rng.integers(-8, 9, 4 * n)
        h = to_bf16(rng.standard_normal(4 * n).astype(np.float32) * scales)
        for at in (0, 2 * n):         # lanes 0-7: products below the smallest normal
            h[at:at + 16] = to_bf16(rng.uniform(1, 2, 16).astype(np.float32) * np.float32(2.0 ** -70))
        h[16:20] = [0x0005, 0x8003, 0x0040, 0x007f]              # denormal operands
        c = rng.standard_normal(n).astype(np.float32)
        c[:8] = np.float32(2.0 ** -126) * np.array([1, -1, 3, 0.5, 0.25, -0.5, 1.5, 2], np.float32)
        bits = int(rng.integers(0, 16))
        out = np.zeros(3 * n, np.float32)
        a_words, b_words = h[:2 * n].view(np.int32), h[2 * n:].view(np.int32)
        driver.call(driver.bind(ROUND_TO_ODD_PARAMS, dict(a=a_words, b=b_words, c=c, bits=bits, out=out)))
        value = [Fraction(float(v)) for v in bf16_to_float32(h)]
        a, b = value[:2 * n], value[2 * n:]
        pair = lambda x, lane: (x[2 * lane], x[2 * lane + 1])
        dot = [bfdot_meaning(Fraction(float(c[j])), pair(a, j), pair(b, j)) for j in range(n)]
        block = [bfdot_meaning(bfdot_meaning(Fraction(float(c[j])), pair(a, j - j % 4 + j % 4 // 2 * 2),
                                             pair(b, j - j % 4 + j % 2 * 2)),
                               pair(a, j - j % 4 + j % 4 // 2 * 2 + 1), pair(b, j - j % 4 + j % 2 * 2 + 1))
                 for j in range(n)]
        mask = np.tile((bits >> np.arange(4)) & 1 == 1, ROUND_TO_ODD_VECTORS)
        expected = np.concatenate([np.array(dot, np.float64), np.array(block, np.float64),
                                   np.where(mask, np.array(dot, np.float64), c)]).astype(np.float32)
        assert np.array_equal(out, expected), np.flatnonzero(out != expected)[:8]
        nearest = (c.astype(np.float64) + (np.array(a[0::2], np.float64) * np.array(b[0::2], np.float64)
                                           + np.array(a[1::2], np.float64) * np.array(b[1::2], np.float64)))
        assert np.any(out[:n] != nearest.astype(np.float32))       # the probe tells the two roundings apart
        assert np.any((out[:n] == 0) & (nearest != 0))                  # and reaches the flush


PEAK_PARAMS = (KernelParam("n", "int64_t", const=True), KernelParam("out", "float"))
PEAK_FEATURES = {"fmla": frozenset(INT_FEATURES), "usdot": frozenset(INT_FEATURES),
                 "sdot": frozenset({"asimddp"})}     # the features whose peak loops use each instruction


def peak_harness(name: str) -> tuple[str, object]:
    """The C of the peak loop ``name`` of ``targets/neon/profile.py`` (measured on an ARM machine) with
    ``probe`` calling it for ``n[0]`` iterations, and its table."""
    dtype = "float32" if name == "fmla" else "int8"
    table, update, values, _ = profile.peak_kernels(PEAK_FEATURES[name])[dtype]
    return (f"#define lo_peak lo_peak_{name}\n{peak_source(table, update, values)}\n"
            f"void probe(const int64_t *n, float *out) {{ out[0] = lo_peak((long)n[0]); }}\n"), table


class PeakLoopProbe:
    """``check_lanes`` of a peak loop run briefly: the sum of its chains is the work it is counted for
    (fmla: each lane's chain tends to 1; a dot: 10 per int32 lane and update, 4 multiply-adds)."""

    def __init__(self, name: str):
        self.name = name

    def check_lanes(self, isa, driver, seed: int) -> None:
        n = 1000 + seed
        out = np.zeros(1, np.float32)
        driver.call(driver.bind(PEAK_PARAMS, dict(n=np.array([n], np.int64), out=out)))
        if self.name == "fmla":
            assert out[0] == pytest.approx(CHAINS * isa.lanes * (1 - 0.999 ** n), rel=1e-3), out
        else:
            assert out[0] == CHAINS * isa.lanes * 10 * n, out


@cache
def probes() -> dict[str, tuple]:
    """Each table's probe (the x86 table tests' harnesses, and the s8 x s8 dot's) as a case of one runner:
    its module, table and driver."""
    harnesses = {"float": (float_tables, float_tables.harness(NEON), NEON, float_tables.PARAMS),
                 "int": (int_tables, int_tables.harness(NEON_INT, NEON), NEON_INT, int_tables.PARAMS),
                 "bf16": (bf16_tables, bf16_tables.harness(NEON_BF16, NEON, NEON_INT), NEON_BF16,
                          bf16_tables.PARAMS),
                 "signed dot": (SignedDotProbe, signed_dot_harness(), NEON_INT, SIGNED_DOT_PARAMS),
                 "float16": (F16Probe, f16_harness(), NEON_F16, F16_PARAMS),
                 "bfdot, bfmmla": (RoundToOddProbe, round_to_odd_harness(), NEON_BFDOT, ROUND_TO_ODD_PARAMS)}
    harnesses |= {f"peak {name}": (PeakLoopProbe(name), *peak_harness(name), PEAK_PARAMS)
                  for name in PEAK_FEATURES}
    cases = [RunnerCase(source, "probe", params, table.compile_flags)
             for _, source, table, params in harnesses.values()]
    drivers = function_drivers(cases)
    built = {name: (module, table, driver)
             for (name, (module, _, table, _)), driver in zip(harnesses.items(), drivers, strict=True)}
    return built | {"bf16 denormals": (Bf16DenormalProbe, *built["bf16"][1:])}


@pytest.mark.parametrize("table", ["float", "int", "bf16", "signed dot", "float16", "bf16 denormals",
                                   "bfdot, bfmmla", "peak fmla", "peak usdot", "peak sdot"])
@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_instructions_match_their_scalar_meaning(table, seed):
    """Every entry of the float, int, bf16 and float16 tables, and the s8 x s8 dot, lane by lane against its
    scalar meaning."""
    module, isa, driver = probes()[table]
    module.check_lanes(isa, driver, seed)


# --- kernels against the reference ---------------------------------------------------------------

def quantized_or_not(op_strategy):
    """Schedules of an fp32 op drawn from ``op_strategy``, or of it with a random QuantSpec."""
    @st.composite
    def draw_schedule(draw):
        op = draw(op_strategy)
        if draw(st.booleans()):
            return draw(quantized_schedules(op.with_quant(draw(SPECS)), ISA))
        return draw(schedules(op, ISA))
    return draw_schedule()


def conv_schedules(max_hw: int, dtype: str = "float32"):
    """Schedules of random convs of ``dtype``."""
    return conv_ops(max_hw=max_hw, dtype=dtype).flatmap(lambda op: schedules(op, ISA))


@st.composite
def i2s_dot_schedules(draw):
    """The dot form of a random ternary conv in i2_s (c split by 4, 4 input channels innermost in the
    weights) under random output-channel blocks and tiles, vectorized along output channels (aligned
    vectors or gathered dot groups) or along output columns (broadcast dot groups)."""
    op = draw(conv_ops(max_hw=6)).with_quant(draw(TERNARY_SPECS))
    s = (lo.Schedule(op).layout("I", "NHWC").layout("O", "NHWC")
         .layout("W", draw(st.sampled_from(["OIHW4o4i", "OIHW16o4i", "OHWI"]))).split("c", 4)
         .tile(ow=draw(st.integers(1, 4)), k=draw(st.sampled_from([4, 8])))
         .reorder("k_o", "oh", "ow_o", "c_o", "kh", "kw", "c_i", "ow_i", "k_i"))
    if draw(st.booleans()):
        s = s.reorder("k_o", "oh", "ow_o", "c_o", "kh", "kw", "c_i", "k_i", "ow_i")
    return s.vectorize(s.loop_names[-1]).weight_format("i2_s")


@st.composite
def binary_schedules(draw, op_strategy):
    """Schedules of a binary op drawn from ``op_strategy``: the default register block or a random one
    (1 to 7 output positions x 1 to 3 vectors of 2 output channels)."""
    op = draw(op_strategy)
    s = lo.Schedule(op)
    if draw(st.booleans()):
        positions, channels = block_dims(op)
        s = s.tile(**{positions: draw(st.integers(1, 7)), channels: 2 * draw(st.integers(1, 3))})
    return s


def mmla_schedules(op_strategy):
    """Schedules of a quantized GEMM or conv drawn from ``op_strategy`` on smmla/usmmla (``mmla.preset``:
    weights in 2 column x 8 channel blocks, activation rows with their channels innermost), a register
    block of 1 to 7 rows x 2 to 8 columns (grouped: the largest even block in a group up to that), one of
    the two outermost loops parallel or none."""
    @st.composite
    def draw_schedule(draw):
        s = mmla.preset(draw(op_strategy), draw(st.integers(1, 7)), 2 * draw(st.integers(1, 4)))
        parallel = draw(st.sampled_from([None, *s.loop_names[:2]]))
        return s.parallel(parallel) if parallel else s
    return draw_schedule()


FAMILIES = {
    # fp32 conv (odd sizes, tails, padding, stride, dilation, groups, batch)
    "float32 conv": conv_schedules(7),
    # a residual add and a clip fused into the store (vaddq, vmaxq, vminq) or a pass after the nest
    "float32 conv + epilogue": st.tuples(conv_schedules(6), st.sampled_from([(0.0, 6.0), (None, 0.5)])).map(
        lambda drawn: drawn[0].add_residual().clip(*drawn[1])),
    # bfloat16 operands widened to fp32 lanes, within the bf16 summation bound, or in pairs of input
    # channels (OIHW16o2i) on bfmlalt + bfmlalb
    "bfloat16 conv": st.one_of(conv_schedules(6, "bfloat16"), even_conv_ops(6).flatmap(
        lambda op: st.booleans().map(lambda block: conv_dot_schedule(op, block)))),
    # int8 GEMMs on smmla (int8 activations) / usmmla (uint8): 2x2 output blocks, every QuantSpec, bit-exact
    # and convs (1-3 spatial dims, padding, stride, dilation, batch; padded taps read as zeros; groups of an
    # even number of output channels: a block in one group)
    "int8 mmla matmul or conv": mmla_schedules(st.one_of(matmul_ops(max_mn=9, max_k=40), st.sampled_from(
        [1, 2, 3]).flatmap(lambda spatial: conv_ops(max_hw=5, spatial=spatial, max_channels=12)).filter(
        lambda op: op.groups == 1 or op.channels // op.groups % 2 == 0)).flatmap(
        lambda op: SPECS.map(op.with_quant))),
    # float16 widened to fp32 lanes (vcvt_f32_f16), summed in float32 as the reference does
    "float16 conv or matmul": st.one_of(
        conv_schedules(6, "float16"),
        matmul_ops(max_mn=9, max_k=13, dtype="float16").flatmap(lambda op: schedules(op, ISA))),
    # every QuantSpec, either compensation, sometimes dequantizing: bit-exact
    "int8 conv": conv_ops(max_hw=7).flatmap(lambda op: SPECS.flatmap(
        lambda spec: quantized_schedules(op.with_quant(spec), ISA))),
    # Conv1d or Conv3d (per-side pads, stride, dilation, groups, batch), fp32 or int8
    "1-d/3-d conv": quantized_or_not(st.sampled_from([1, 3]).flatmap(
        lambda spatial: conv_ops(max_hw=6, spatial=spatial, max_channels=4))),
    # transposed operands, batch dims, fp32 or int8
    "matmul": quantized_or_not(matmul_ops(max_mn=9, max_k=13)),
    # ternary weights stored as i2_s (2 bits each), unpacked in registers: bit-exact
    "i2_s conv": conv_ops(max_hw=7).flatmap(lambda op: TERNARY_SPECS.flatmap(
        lambda spec: quantized_schedules(op.with_quant(spec), ISA))).map(lambda s: s.weight_format("i2_s")),
    "i2_s dot conv": i2s_dot_schedules(),
    # binary XNOR + popcount (cnt), 1 or 2 words of input channels per group, register-block tails
    "binary conv": binary_schedules(binary_convs(2)),
    "binary matmul": binary_schedules(st.builds(lo.Matmul, st.integers(1, 9), st.integers(1, 27),
                                                st.integers(1, 200), quant=SPECS_BINARY)),
    "i2_s matmul": matmul_ops(max_mn=9, max_k=70).flatmap(lambda op: TERNARY_SPECS.flatmap(
        lambda spec: schedules(op.with_quant(spec), ISA))).map(lambda s: s.weight_format("i2_s")),
    # ternary table lookups (tbl): random splits (column blocks, index bytes), orders, register blocks,
    # parallel loops and activation/output layouts of a conv in TL1 and a matmul in TL2: bit-exact
    "tl1 conv": conv_ops(max_hw=6, max_channels=14, spatial=2).flatmap(lambda op: TERNARY_SPECS.flatmap(
        lambda spec: lut_schedules(op.with_quant(spec), "tl1"))),
    "tl2 matmul": st.builds(lo.Matmul, st.integers(1, 4), st.integers(1, 70), st.integers(1, 300),
                            trans_a=st.booleans(), trans_b=st.booleans()).flatmap(
        lambda op: TERNARY_SPECS.flatmap(lambda spec: lut_schedules(op.with_quant(spec), "tl2"))),
}


def check_batch(batch: list[lo.Schedule]) -> None:
    """The schedules' kernels, built into one runner, each against its reference (int8 bit-exact)."""
    for schedule, kernel in zip(batch, target("neon").compile_many(batch), strict=True):
        if schedule.op.quant is not None and schedule.op.quant.binary:
            check_binary(kernel)
        elif schedule.op.quant is not None:
            check_quantized(schedule, ISA, threads=2 if schedule.parallel_loop else 1, kernel=kernel)
        else:
            check(schedule, ISA, kernel=kernel)


def every_family(per_family: int):
    """``per_family`` random legal schedules of every family of ``FAMILIES``, in one list."""
    lists = (st.lists(family, min_size=per_family, max_size=per_family) for family in FAMILIES.values())
    return st.tuples(*lists).map(lambda drawn: [s for batch in drawn for s in batch])


@settings(max_examples=1, **HYPOTHESIS)
@given(batch=every_family(1))
def test_random_schedules_of_every_family_quick(batch):
    """A random schedule of each family, one runner for them all."""
    check_batch(batch)


@pytest.mark.slow
@settings(max_examples=2, **HYPOTHESIS)
@given(batch=every_family(1))
def test_random_schedules_of_every_family(batch):
    """Two more runners of a random schedule of each family."""
    check_batch(batch)


def check_bfdot(schedules: list[lo.Schedule]) -> None:
    """The schedules' kernels on the opt-in ``neon_bfdot`` (one runner): each bf16 pair dot a ``bfdot``,
    each kernel within the bf16 bound at bfdot's unit roundoff, 2^-23 (its sums round to odd), by
    ``verify`` and against the reference."""
    for schedule, kernel in zip(schedules, target("neon").compile_many(schedules, "neon_bfdot"), strict=True):
        assert kernel.isa == "neon_bfdot" and kernel.sum_roundoff == 2.0 ** -23
        assert "vbfdotq_f32" in kernel.source and "vbfmlal" not in kernel.source
        assert "bfdot" in kernel.schedule.pseudocode("neon_bfdot")
        check(schedule, "neon_bfdot", kernel=kernel)
        assert verify(kernel)[0]


def bfdot_batches(size: int):
    """``size`` random bf16 pair-dot convs (OIHW16o2i; one group: with or without a register block), and
    a grouped, strided one with asymmetric padding and a register block."""
    grouped = conv_dot_schedule(lo.Conv2d(4, 6, 3, stride=(2, 1), padding=((1, 0), (0, 2)), groups=2, batch=2,
                                          height=6, width=5, dtype="bfloat16"), True)
    return st.lists(st.tuples(even_conv_ops(6), st.booleans()), min_size=size, max_size=size).map(
        lambda drawn: [conv_dot_schedule(op, block and op.groups == 1) for op, block in drawn] + [grouped])


@pytest.mark.parametrize("size, runners", [(0, 1), pytest.param(2, 1, marks=pytest.mark.slow)])
def test_bfdot_kernels_verify_within_their_stated_bound(size, runners):
    """``runners`` runners of ``size`` random bf16 pair-dot convs and a grouped one on bfdot."""
    @settings(max_examples=runners, **HYPOTHESIS)
    @given(bfdot_batches(size))
    def run(batch):
        check_bfdot(batch)
    run()


def usdot_conv(s: lo.Schedule, weights: str = "OIHW4o4i") -> lo.Schedule:
    """Input channels innermost in the ``weights`` layout: c_i is the dot loop (usdot), 4 output channels
    a vector."""
    return (s.layout("I", "NHWC").layout("O", "NHWC").layout("W", weights).split("c", 4)
            .tile(ow=3, k=4).reorder("n", "k_o", "oh", "ow_o", "c_o", "kh", "kw", "ow_i", "c_i", "k_i")
            .vectorize("k_i"))


@settings(max_examples=1, **HYPOTHESIS)
@given(spec=SPECS, ternary=TERNARY_SPECS, block=st.booleans(), parallel=st.booleans())
@pytest.mark.slow
def test_dot_schedules_are_exact(spec, ternary, block, parallel):
    """The dot loop on vusdotq_s32 (uint8 activations) or vdotq_s32 (int8 activations) over int8 weights and
    over i2_s ternary weights (a 16-weight vector one load in blocks of 4 or 16 output channels; per lane
    dot groups, 4 codes each, from OHWI), with a register block or a parallel loop, padding, stride,
    groups and a channel count not a multiple of 4: bit-exact."""
    def dot_form(quant: lo.QuantSpec, channels: int, weights: str) -> lo.Schedule:
        op = lo.Conv2d(channels, 10, 3, stride=(1, 2), padding=1, groups=2, batch=2, height=5, width=7,
                       quant=quant)
        s = usdot_conv(lo.Schedule(op), weights)
        s = s.register_block("c_o") if block else s
        return s.parallel("oh") if parallel else s

    signed, unsigned = (lo.QuantSpec(activation, spec.per_channel, spec.weight_symmetric, spec.output,
                                     spec.weight) for activation in ("int8", "uint8"))
    batch = [dot_form(signed, 12, "OIHW4o4i"), dot_form(unsigned, 12, "OIHW4o4i"),
             dot_form(ternary, 12, "OIHW4o4i").weight_format("i2_s"),
             dot_form(ternary, 12, "OIHW16o4i").weight_format("i2_s"),
             dot_form(ternary, 16, "OHWI").weight_format("i2_s")]
    packed = ["", "", "lo_i2s_vector(W", "lo_i2s_vector(W", "lo_i2s_groups(W"]
    for schedule, kernel, form in zip(batch, target("neon").compile_many(batch), packed, strict=True):
        check_quantized(schedule, ISA, threads=2 if parallel else 1, kernel=kernel)
        dot = "vdotq_s32" if schedule.op.quant.activation == "int8" else "vusdotq_s32"
        assert kernel.plan.dot_loop == "c_i" and dot in kernel.source and form in kernel.source


def test_the_kernel_model_counts_no_shift_for_int8_activations_on_neon():
    """int8 activations feed vdotq_s32 as they are on NEON: no flip to count, the same predicted time as
    uint8 ones (x86's u8 x s8 dot would count one per activation vector)."""
    def predicted(activation: str, isa: str) -> float:
        spec = lo.QuantSpec(activation, True, False, "int8")
        op = lo.Conv2d(16, 16, 3, padding=1, height=8, width=8, quant=spec)
        return lo.kernel_model(usdot_conv(lo.Schedule(op)), isa, traffic=False).predicted_seconds

    assert predicted("int8", "neon") == predicted("uint8", "neon")


@pytest.mark.slow
def test_stored_schedules_verify():
    """Stored x86 schedules of whole layers run on NEON (one runner for them all) and verify (int8
    bit-exact)."""
    names = ["resnet50.conv2_x", "resnet50.conv2_x.int8", "mobilenetv2.block2.depthwise.int8",
             "resnet50.conv1.int8"]
    stored = []
    for name in names:
        quant = lo.QuantSpec("uint8", True, True, "uint8") if name.endswith(".int8") else None
        op = lo.get_layer(name.removesuffix(".int8"), quant=quant)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # found on another (x86) CPU
            stored.append(lo.load_schedule(name, op))
    for name, kernel in zip(names, target("neon").compile_many(stored), strict=True):
        ok, error = verify(kernel)
        assert ok, (name, error)


TERNARY = lo.QuantSpec("int8", True, True, "int8", "ternary")
INT8 = lo.QuantSpec("uint8", True, False, "uint8")


@pytest.mark.slow
@settings(max_examples=1, **HYPOTHESIS)
@given(data=st.data(), fmt=st.sampled_from(["tl1", "tl2"]), k=st.integers(1, 700))
def test_table_lookups_at_the_int16_limits_are_exact(data, fmt, k):
    """TL1 and TL2 (the other format too) with activations at the ends of their range half of the time:
    the GEMV of bench_lowbit (8 column blocks in registers over a reduction longer than the int16 chunk,
    a partial last block), a grouped, strided conv with more than one column block per group, and
    another conv on 2 threads; bit-exact."""
    other = "tl2" if fmt == "tl1" else "tl1"
    gemv = lo.Matmul(2, data.draw(st.integers(225, 300)), k, quant=data.draw(TERNARY_SPECS))
    conv = lo.Conv2d(6, 2 * data.draw(st.integers(33, 40)), 3, stride=(2, 1), padding=((1, 0), (2, 1)),
                     groups=2, batch=2, height=7, width=6, quant=data.draw(TERNARY_SPECS))
    threaded = lo.Conv2d(8, 40, 3, padding=1, height=5, width=5, quant=data.draw(TERNARY_SPECS))
    batch = [lo.Schedule(gemv).split("j", 256).reorder("i", "j_o", "k", "j_i").register_block("k")
             .weight_format(fmt), lo.Schedule(conv).weight_format(other),
             lo.Schedule(threaded).reorder("n", "k", "oh", "ow", "c", "kh", "kw").parallel("k")
             .weight_format(fmt)]
    for schedule, kernel in zip(batch, target("neon").compile_many(batch), strict=True):
        check_quantized(schedule, ISA, call=extreme_call(schedule.op, 1, data),
                        threads=2 if schedule.parallel_loop else 1, kernel=kernel)
        assert "vqtbl1q_u8" in kernel.source and "vld2q_u8" in kernel.source


@pytest.mark.parametrize("build, reason", [
    (lambda: lo.Schedule(lo.Conv2d(4, 40, 3, height=5, width=5, quant=TERNARY)).split("k", 8)
     .weight_format("tl1"),
     r"split\('k', 8\): the kernel steps k in column blocks of 32"),
    (lambda: lo.Schedule(lo.Matmul(3, 8, 64, quant=lo.QuantSpec("binary", True, True, "int32", "binary")))
     .tile(i=2, j=3), r"j=3 output channels is not a multiple of the 2 uint64 lanes of neon"),
    (lambda: lo.Schedule(lo.Conv2d(4, 12, 3, groups=2, height=5, width=5, quant=INT8)).layout("I", "NHWC")
     .layout("W", "HWOI2o8i").tile(ow=2, k=4),
     r"tile\(k=4\): a register block of a grouped convolution reads one group's activations, so its columns "
     r"must divide the 6 output channels"),
    (lambda: lo.Schedule(lo.Matmul(4, 6, 16, quant=INT8)).layout("B", "NK2n8k"), r"tile\(i=R, j=C\)"),
    (lambda: lo.Schedule(lo.Matmul(4, 6, 16, quant=INT8)).layout("B", "NK2n8k").tile(i=2, j=3),
     r"tile\(j=3\): a weight block holds 2 columns"),
    (lambda: lo.Schedule(lo.Matmul(40, 40, 16, quant=INT8)).layout("B", "NK2n8k").tile(i=12, j=16),
     r"6 x 8 accumulators, 6 activation registers and a weight register are 55 of the 32"),
    (lambda: lo.Schedule(lo.Matmul(4, 6, 16, quant=INT8, trans_a=True)).layout("B", "NK2n8k").tile(i=2, j=2),
     r"layout\('A', 'KM'\): smmla reads 8 channels of an activation row"),
])
def test_what_neon_cannot_run_is_refused_with_the_reason(build, reason):
    with pytest.raises(lo.ScheduleError, match=reason):
        build().compile(target="neon")


@pytest.mark.slow
@settings(max_examples=1, **HYPOTHESIS)
@given(spec=SPECS, rows=st.integers(1, 7))
def test_grouped_convs_on_mmla_are_exact(spec, rows):
    """smmla/usmmla on grouped convs (a register block in one group): strided, dilated, asymmetrically
    padded, batch 2, 2 threads, a group's channels not a multiple of 8 and depthwise-like groups of 2
    input channels; bit-exact."""
    ops = [lo.Conv2d(6, 8, 3, groups=2, padding=1, stride=(2, 1), height=6, width=7, batch=2, quant=spec),
           lo.Conv2d(12, 12, 3, groups=3, padding=((1, 0), (0, 2)), dilation=(1, 2), height=7, width=7,
                     quant=spec),
           lo.Conv2d(16, 16, 3, groups=8, padding=1, height=5, width=5, quant=spec)]
    batch = [mmla.preset(op, rows, 4) for op in ops]
    batch[2] = batch[2].parallel(batch[2].loop_names[1])
    for schedule, kernel in zip(batch, target("neon").compile_many(batch), strict=True):
        check_quantized(schedule, ISA, threads=2 if schedule.parallel_loop else 1, kernel=kernel)
        assert "mmlaq_s32" in kernel.source


@pytest.mark.slow
def test_register_blocks_multiply_by_lane():
    """fmla by lane: the table multiplies a weight vector by a broadcast activation (``vfmaq_f32`` of
    ``vdupq_n_f32``), and GCC issues it as ``fmla v.4s, v.4s, v.s[i]`` (each activation a lane of a
    register, no dup): in the output-stationary conv2_x kernel the fmla by lane outnumber the
    vector-by-vector ones more than 4 to 1."""
    case, _ = kernel_case(output_stationary(lo.get_layer("resnet50.conv2_x")))
    compiler = ["cc"] if toolchain.native() else shlex.split(toolchain.emulation().compiler)
    flags = [flag for flag in (*toolchain.CROSS_FLAGS, *case.flags) if flag != "-static"]
    done = subprocess.run([*compiler, *flags, "-S", "-o", "-", "-x", "c", "-"], input=case.source,
                          capture_output=True, text=True, check=True)
    by_lane = re.findall(r"\bfmla\s+v\d+\.4s,\s*v\d+\.4s,\s*v\d+\.s\[\d\]", done.stdout)
    by_vector = re.findall(r"\bfmla\s+v\d+\.4s,\s*v\d+\.4s,\s*v\d+\.4s", done.stdout)
    assert len(by_lane) >= 24 and len(by_lane) > 4 * len(by_vector), (len(by_lane), len(by_vector))


def test_the_mmla_instruction_follows_the_activations():
    """usmmla for uint8 activations, smmla for int8 ones (the weights are stored s8 either way)."""
    for activation, instruction in (("uint8", "vusmmlaq_s32"), ("int8", "vmmlaq_s32")):
        op = lo.Matmul(5, 6, 17, quant=lo.QuantSpec(activation, True, False, "int8"))
        source = mmla.generate_mmla(lo.Schedule(op).layout("B", "NK2n8k").tile(i=4, j=4)).source
        other = "vmmlaq_s32" if instruction == "vusmmlaq_s32" else "vusmmlaq_s32"
        assert instruction in source and other not in source


def test_measure_refuses_an_emulated_time_and_predicts_one():
    if toolchain.native():
        pytest.skip("native AArch64: neon kernels are timed")
    op = lo.Conv2d(4, 8, 3, padding=1, height=6, width=6)
    s = lo.Schedule(op).reorder("n", "oh", "ow", "c", "kh", "kw", "k").vectorize("k")
    binary = lo.Schedule(lo.Matmul(3, 8, 64, quant=lo.QuantSpec("binary", True, True, "int32", "binary")))
    kernel, binary_kernel = target("neon").compile_many([s, binary])
    assert target("neon").timing_refusal() is not None
    with pytest.raises(lo.TimingRefusedError, match=r"emulator.*kernel model predicts \d+\.\d+ ms"):
        lo.measure(kernel)
    with pytest.raises(lo.TimingRefusedError, match=r"emulator.*kernel model predicts \d+\.\d+ ms"):
        lo.measure(binary_kernel)


BINARY = lo.QuantSpec("binary", True, True, "int32", "binary")


@pytest.mark.parametrize("build, quant, products", [
    (lambda op: mmla.preset(op, 4, 8), INT8, 32),                         # smmla/usmmla: 2x2 outputs x 8
    (lambda op: lo.Schedule(op).weight_format("tl1"), TERNARY, 2 * 8),    # an int16 add of 8 entries of 2
    (lambda op: lo.Schedule(op).weight_format("tl2"), TERNARY, 3 * 8),    # ... of 3 weights each
    (lambda op: lo.Schedule(op), BINARY, 64 * 2),                          # a popcount update of 2 words
])
def test_the_kernel_model_counts_neons_own_families(build, quant, products):
    """smmla/usmmla, TL1/TL2 lookups and binary kernels are counted (``targets/neon/counts.py``): on a GEMM
    their blocks divide, each multiply-add instruction adds ``products`` of the op's products and none is
    wasted; a ragged GEMM wastes lanes and costs more per product; both times are predicted."""
    even, ragged = (build(lo.Matmul(m, n, k, quant=quant)) for m, n, k in ((8, 64, 192), (9, 65, 193)))
    model, worse = (lo.kernel_model(s, ISA, traffic=False) for s in (even, ragged))
    assert model.counts.total("fma") * products == even.op.macs
    assert model.counts.useful_lanes == model.counts.issued_lanes
    assert worse.counts.useful_lanes < worse.counts.issued_lanes
    assert worse.predicted_seconds / ragged.op.macs > model.predicted_seconds / even.op.macs > 0


def test_compare_verifies_every_schedule_and_shows_predicted_times(capsys):
    if toolchain.native():
        pytest.skip("native AArch64: neon kernels are timed")
    assert main(["compare", "--target", "neon", "--conv", "6,8,3,7,padding=1", "--schedules",
                 "naive,output_stationary", "--no-reuse", "--quiet", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [row["isa"] for row in data["rows"]] == ["neon", "neon"]
    assert all(r["verified"] and r["median_s"] is None and r["predicted_s"] > 0 for r in data["rows"])
    assert data["peak"] == target("neon").peak("neon", "float32")
    assert main(["compare", "--target", "neon", "--matmul", "4,4,4", "--plot", "x.png"]) != 0
    assert "--plot draws measured times" in capsys.readouterr().err


def test_a_runner_that_fails_is_an_error_with_its_message():
    """A kernel that traps is an error naming the emulator and the exit status, never a silent result."""
    if toolchain.native():
        pytest.skip("native AArch64: no runner")
    params = float_tables.PARAMS
    source = f"#include <stdint.h>\n{signature('probe', params)} {{ (void)x; __builtin_trap(); }}\n"
    [driver] = function_drivers([RunnerCase(source, "probe", params, NEON.compile_flags)])
    arrays = dict(x=np.zeros(4, np.float32), y=np.zeros(4, np.float32), idx=np.zeros(4, np.int32), bits=0,
                  out=np.zeros(4, np.float32), scattered=np.zeros(4, np.float32))
    with pytest.raises(RuntimeError, match="failed under qemu-aarch64"):
        driver.call(driver.bind(params, arrays))


# --- the search ------------------------------------------------------------------------------------

def check_untimed_search(op, trials: int, threads: int, tmp_path) -> RankedResult:
    """``lo.tune(op, target="neon")`` under emulation: every candidate priced by the kernel model, in its
    order, the best ``trials`` built and verified, nothing timed, nothing logged."""
    log = tmp_path / "tune.db"
    result = lo.tune(op, trials=trials, threads=threads, target="neon", log=str(log), progress=False)
    predicted = [c.predicted_seconds for c in result.candidates]
    assert predicted == sorted(predicted) and all(p > 0 for p in predicted)
    assert [c.verified for c in result.candidates[:trials]] == [True] * trials
    assert all(c.verified is None for c in result.candidates[trials:])
    assert result.best.op == op and result.winner.rank == 1 and not log.exists()
    text = str(result)
    assert "not timed: neon kernels run under an emulator" in text and "nothing was timed" in text
    data = json.loads(json.dumps(result.to_dict()))
    assert data["timed"] is False and "median_s" not in json.dumps(data) and data["best"]["verified"]
    if threads > 1:
        assert all(c.knobs["parallel"] for c in result.candidates)
    return result


@pytest.mark.slow
def test_tune_under_emulation_ranks_by_the_model_and_verifies_the_best(tmp_path):
    """An fp32 conv, and a binary one (its XNOR + popcount blocks, counted by the kernel model)."""
    if toolchain.native():
        pytest.skip("native AArch64: lo.tune times neon kernels")
    check_untimed_search(lo.Conv2d(5, 6, 3, padding=1, stride=(1, 2), height=4, width=5), 1, 1, tmp_path)
    binary = lo.Conv2d(70, 10, 3, padding=1, groups=2, height=5, width=4, quant=BINARY)
    binary = check_untimed_search(binary, 2, 1, tmp_path)
    assert "XNOR + popcount" in binary.candidates[0].description


@pytest.mark.slow
def test_tune_under_emulation_of_an_int8_matmul_on_threads(tmp_path, capsys):
    """An int8 GEMM on 2 threads (a parallel loop per candidate), and the command line: the winner saved
    with how it was found (no time), --plot refused."""
    if toolchain.native():
        pytest.skip("native AArch64: lo.tune times neon kernels")
    spec = lo.QuantSpec("int8", True, False, "int8")
    result = check_untimed_search(lo.Matmul(9, 13, 21, quant=spec), 2, 2, tmp_path)
    assert "smmla" in result.candidates[0].description       # the model's pick: the int8 matrix multiply
    saved = tmp_path / "best.toml"
    assert main(["tune", "--target", "neon", "--matmul", "5,8,7", "--trials", "1", "--save", str(saved)]) == 0
    assert "without timing" in saved.read_text() and "rank 1 saved" in capsys.readouterr().out
    assert main(["tune", "--target", "neon", "--matmul", "5,8,7", "--plot", str(tmp_path / "x.png")]) != 0
    assert "--plot draws measured times" in capsys.readouterr().err


@pytest.mark.slow
def test_the_timed_search_walks_both_families():
    """What ``lo.tune`` does natively (here without timing: made-up times): the guide prices the SIMD
    blocks and the mmla blocks by the kernel model, and the walk reaches both."""
    rules = target("neon").search_rules()
    op = lo.Matmul(16, 24, 64, quant=INT8)
    walk = Walk(Guide(rules.rank(rules.candidates(op, ISA)), rules), BROAD, 0)
    families = set()
    for step in range(6):
        index, candidate = walk.next()
        walk.observe(index, 1e-6 * (1 + step))
        families.add(candidate.knobs.as_dict().get("kernel", "simd"))
    assert families == {"simd", "mmla"}


def test_the_neon_search_space_fits_the_registers_with_binary_and_lookup_blocks_on_one_thread():
    rules = target("neon").search_rules()
    op = lo.Conv2d(8, 20, 3, height=9, width=9)
    space = rules.candidates(op, ISA)
    for c in space:
        vectors = -(-c.knobs.channel_block // 4)
        assert vectors * c.knobs.pixel_block + vectors + 1 <= 32
    assert {c.knobs.channel_block for c in space} == {4, 8, 12, 16}
    assert not rules.candidates(lo.Conv2d(8, 20, 3, height=3, width=3, batch=1), ISA, threads=64)
    gemm = rules.candidates(lo.Matmul(9, 13, 21, quant=INT8), ISA)
    mmla_blocks = [c for c in gemm if c.knobs.as_dict().get("kernel") == "mmla"]
    assert mmla_blocks and all(c.knobs.channel_block % 2 == 0 for c in mmla_blocks)
    assert all(mmla.is_mmla(c.schedule) for c in mmla_blocks)
    assert all(lo.kernel_model(c.schedule, ISA, traffic=False).predicted_seconds > 0 for c in mmla_blocks)
    binary = lo.Conv2d(64, 20, 3, height=6, width=5, quant=BINARY)
    blocks = rules.candidates(binary, ISA)
    vectors = [(c.knobs.pixel_block, c.knobs.channel_block // 2) for c in blocks]
    assert blocks and all(r * v + v + 2 <= 32 for r, v in vectors)
    assert {v for _, v in vectors} == {1, 2, 3, 4} and {r for r, _ in vectors} == {1, 2, 3}     # ow: 3
    assert "XNOR + popcount" in rules.describe(blocks[0].knobs.as_dict())
    with pytest.raises(ValueError, match="binary kernels .* run on one thread: tune .* with threads=1"):
        rules.candidates(binary, ISA, threads=2)
    ternary = lo.Matmul(3, 72, 64, quant=TERNARY)
    lookups = [c for c in rules.candidates(ternary, ISA) if c.knobs.as_dict().get("kernel") == "lookup"]
    assert {(c.knobs.weight_format, c.knobs.channel_block) for c in lookups} == {
        (fmt, channels) for fmt in ("tl1", "tl2") for channels in (32, 64, 72)}
    assert all(c.schedule.weight_format_mode == c.knobs.weight_format for c in lookups)
    assert all(lo.kernel_model(c.schedule, ISA, traffic=False).predicted_seconds > 0 for c in lookups[::5])
    assert "tl2 table lookup" in rules.describe(lookups[-1].knobs.as_dict())
    threaded = rules.candidates(ternary, ISA, threads=2)
    assert threaded and not any(c.knobs.as_dict().get("kernel") == "lookup" for c in threaded)
