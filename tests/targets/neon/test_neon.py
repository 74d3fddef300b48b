"""The NEON target: its instruction tables lane by lane, and its kernels against the reference, run
under ``qemu-aarch64 -cpu max`` here (natively on an AArch64 machine). Skipped, with the reason, where
the cross compiler or the emulator is missing (README: how to install them)."""
import json
import warnings

import numpy as np
import pytest
import test_isa_bf16_tables as bf16_tables
import test_isa_int_tables as int_tables
import test_isa_tables as float_tables
from helpers import (
    HYPOTHESIS,
    SPECS,
    check,
    check_quantized,
    conv_ops,
    matmul_ops,
    quantized_schedules,
    schedules,
)
from helpers import tiers as both_tiers
from hypothesis import given, settings
from hypothesis import strategies as st

import loopopt as lo
from loopopt.cli import main
from loopopt.codegen.instr import BF16_MEANINGS, INT_MEANINGS, MEANINGS, SHARED_OPS
from loopopt.codegen.params import signature
from loopopt.measure import verify
from loopopt.targets import target
from loopopt.targets.neon import toolchain
from loopopt.targets.neon.isa import NEON, NEON_BF16, NEON_INT
from loopopt.targets.neon.target import function_driver

MISSING = toolchain.missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"neon kernels cannot run here: {MISSING}")
ISA = "neon"


def test_tables_have_every_operation_and_its_meaning():
    assert set(NEON.ops) == set(MEANINGS)
    assert set(NEON_INT.ops) == set(INT_MEANINGS) | set(SHARED_OPS)
    assert all(NEON.ops[name].meaning == MEANINGS[name] for name in NEON.ops)
    widening = ("value", "broadcast", "load", "load_mask", "gather", "gather_mask")
    assert set(NEON_BF16.ops) == set(widening) | set(SHARED_OPS) and set(widening) <= set(BF16_MEANINGS)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_float_instructions_match_their_scalar_meaning(seed):
    driver = function_driver(float_tables.harness(NEON), "probe", float_tables.PARAMS, NEON.compile_flags)
    float_tables.check_lanes(NEON, driver, seed)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_int_instructions_match_their_scalar_meaning(seed):
    source = int_tables.harness(NEON_INT, NEON)
    driver = function_driver(source, "probe", int_tables.PARAMS, NEON_INT.compile_flags)
    int_tables.check_lanes(NEON_INT, driver, seed)



@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_bf16_instructions_match_their_scalar_meaning(seed):
    source = bf16_tables.harness(NEON_BF16, NEON, NEON_INT)
    driver = function_driver(source, "probe", bf16_tables.PARAMS, NEON_BF16.compile_flags)
    bf16_tables.check_lanes(NEON_BF16, driver, seed)


# --- kernels against the reference ---------------------------------------------------------------

def random_conv_schedule(data):
    """A random legal schedule of a random fp32 conv (odd sizes, tails, padding, stride, dilation, groups,
    batch), within float32 rounding of the reference."""
    op = data.draw(conv_ops(max_hw=7))
    check(data.draw(schedules(op, ISA)), ISA)


test_random_conv_schedules_quick, test_random_conv_schedules = both_tiers(random_conv_schedule, 1, 6,
                                                                          data=st.data())


def random_bf16_conv_schedule(data):
    """A random legal schedule of a random bfloat16 conv: operands widened to fp32 lanes, within the bf16
    summation bound."""
    check(data.draw(schedules(data.draw(conv_ops(max_hw=6, dtype="bfloat16")), ISA)), ISA)


test_random_bf16_conv_schedules_quick, test_random_bf16_conv_schedules = both_tiers(
    random_bf16_conv_schedule, 1, 4, data=st.data())


def random_quantized_conv_schedule(data):
    """A random legal schedule of a random int8 conv (every QuantSpec; either compensation, sometimes
    dequantizing), bit-exact against quant.py's reference (float outputs within their bound)."""
    op = data.draw(conv_ops(max_hw=7)).with_quant(data.draw(SPECS))
    check_quantized(data.draw(quantized_schedules(op, ISA)), ISA)


test_random_quantized_conv_schedules_quick, test_random_quantized_conv_schedules = both_tiers(
    random_quantized_conv_schedule, 1, 6, data=st.data())


def check_random_schedule(data, op, quantized: bool) -> None:
    """A random legal schedule of float ``op`` or, ``quantized``, of ``op`` with a random QuantSpec (either
    compensation, sometimes dequantizing) agrees with the reference (int8 bit-exact)."""
    if quantized:
        check_quantized(data.draw(quantized_schedules(op.with_quant(data.draw(SPECS)), ISA)), ISA)
    else:
        check(data.draw(schedules(op, ISA)), ISA)


def random_nd_conv_schedule(data, quantized):
    """A random legal schedule of a random Conv1d or Conv3d (per-side pads, stride, dilation, groups,
    batch), fp32 or int8 (every QuantSpec, either compensation)."""
    check_random_schedule(data, data.draw(conv_ops(max_hw=6, spatial=data.draw(st.sampled_from([1, 3])),
                                                    max_channels=4)), quantized)


test_random_nd_conv_schedules_quick, test_random_nd_conv_schedules = both_tiers(
    random_nd_conv_schedule, 1, 4, data=st.data(), quantized=st.booleans())


def random_matmul_schedule(data, quantized):
    """A random legal schedule of a random matmul (transposed operands, batch dims), fp32 or int8."""
    check_random_schedule(data, data.draw(matmul_ops(max_mn=9, max_k=13)), quantized)


test_random_matmul_schedules_quick, test_random_matmul_schedules = both_tiers(
    random_matmul_schedule, 1, 4, data=st.data(), quantized=st.booleans())


def usdot_conv(s: lo.Schedule) -> lo.Schedule:
    """4 input channels per lane of the weights: c_i is the dot loop (usdot), 4 output channels a vector."""
    return (s.layout("I", "NHWC").layout("O", "NHWC").layout("W", "OIHW4o4i").split("c", 4).tile(ow=3, k=4)
            .reorder("n", "k_o", "oh", "ow_o", "c_o", "kh", "kw", "ow_i", "c_i", "k_i").vectorize("k_i"))


@settings(max_examples=1, **HYPOTHESIS)
@given(spec=SPECS, block=st.booleans(), parallel=st.booleans())
def test_usdot_schedules_are_exact(spec, block, parallel):
    """The dot loop on vusdotq_s32 (int8 activations shifted to u8 in the kernel), with a register block
    or a parallel loop, padding, stride, groups and a channel count not a multiple of 4: bit-exact."""
    op = lo.Conv2d(12, 10, 3, stride=(1, 2), padding=1, groups=2, batch=2, height=5, width=7, quant=spec)
    s = usdot_conv(lo.Schedule(op))
    s = s.register_block("c_o") if block else s
    kernel = check_quantized(s.parallel("oh") if parallel else s, ISA, threads=2 if parallel else 1)
    assert kernel.plan.dot_loop == "c_i" and "vusdotq_s32" in kernel.source


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50.conv2_x", "resnet50.conv2_x.int8",
                                  "mobilenetv2.block2.depthwise.int8", "resnet50.conv1.int8"])
def test_stored_schedules_verify(name):
    """Stored x86 schedules of whole layers run on NEON and verify (int8 bit-exact)."""
    quant = lo.QuantSpec("uint8", True, True, "uint8") if name.endswith(".int8") else None
    op = lo.get_layer(name.removesuffix(".int8"), quant=quant)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # found on another (x86) CPU
        s = lo.load_schedule(name, op)
    ok, error = verify(s.compile(target="neon"))
    assert ok, error


TERNARY = lo.QuantSpec("int8", True, True, "int8", "ternary")


@pytest.mark.parametrize("build, reason", [
    (lambda: lo.Schedule(lo.Conv2d(4, 4, 3, height=5, width=5, quant=TERNARY)).weight_format("i2_s"), "i2_s"),
    (lambda: lo.Schedule(lo.Conv2d(4, 4, 3, height=5, width=5, quant=TERNARY)).weight_format("tl1"), "tbl"),
    (lambda: lo.Schedule(lo.Matmul(1, 8, 64, quant=lo.QuantSpec("binary", True, True, "int32", "binary"))),
     "XNOR"),
])
def test_what_neon_cannot_run_is_refused_with_the_reason(build, reason):
    with pytest.raises(lo.ScheduleError, match=reason):
        build().compile(target="neon")


def test_measure_refuses_an_emulated_time_and_predicts_one():
    if toolchain.native():
        pytest.skip("native AArch64: neon kernels are timed")
    op = lo.Conv2d(4, 8, 3, padding=1, height=6, width=6)
    s = lo.Schedule(op).reorder("n", "oh", "ow", "c", "kh", "kw", "k").vectorize("k")
    kernel = s.compile(target="neon")
    assert target("neon").timing_refusal() is not None
    with pytest.raises(lo.TimingRefusedError, match=r"emulator.*kernel model predicts \d+\.\d+ ms"):
        lo.measure(kernel)


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
    driver = function_driver(source, "probe", params, NEON.compile_flags)
    arrays = dict(x=np.zeros(4, np.float32), y=np.zeros(4, np.float32), idx=np.zeros(4, np.int32), bits=0,
                  out=np.zeros(4, np.float32), scattered=np.zeros(4, np.float32))
    with pytest.raises(RuntimeError, match="failed under qemu-aarch64"):
        driver.call(driver.bind(params, arrays))
