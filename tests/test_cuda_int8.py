"""The cuda target's int8 and bfloat16 tensor-core kernels without a GPU: the ``mma.sync.m16n8k32``
entries (s8 x s8 and u8 x s8 -> s32) over the quantization space (int8 or uint8 activations with any
zero point, symmetric int8 weights per tensor or per channel, int32, dequantized and requantized
outputs, split-K on int32), host-emulated through their scalar meaning and the swizzled byte tiles,
bit for bit against quant.py's reference; ``m16n8k16`` and WMMA on bfloat16 within the float32
tolerance; the refusals; an nvcc build with ``IMMA`` in its SASS."""
import subprocess

import pytest
from helpers import conv_ops, matmul_ops, needs, quick_first, tiers
from hypothesis import strategies as st

import loopopt as lo
from loopopt.dataflows import gpu_mma, gpu_wmma, tensor_entry
from loopopt.measure import checked
from loopopt.schedule import ScheduleError
from loopopt.targets.cuda import toolchain
from loopopt.targets.cuda.emulate import emulate
from loopopt.targets.cuda.instructions import INSTRUCTIONS

SPECS = st.builds(lo.QuantSpec, activation=st.sampled_from(["int8", "uint8"]), per_channel=st.booleans(),
                  output=st.sampled_from(lo.quant.OUTPUTS))
SMALL = {"block_m": 32, "block_n": 32, "warps_m": 2, "warps_n": 1}
TILES = st.sampled_from([{}, SMALL, SMALL | {"depth": 32, "stages": 2},
                         {"block_m": 32, "block_n": 48, "warps_m": 2, "warps_n": 3, "depth": 96,
                          "split_k": 2},
                         {"block_m": 64, "block_n": 32, "warps_m": 1, "warps_n": 2, "split_k": 3}])
INT8_CONV = lo.Conv2d(24, 40, 3, stride=2, padding=(1, 2), dilation=2, height=13, width=11, batch=2,
                      quant=lo.QuantSpec(activation="uint8", output="uint8"))


def _quantized(op, spec: lo.QuantSpec):
    return type(op)(**op.arguments, quant=spec)


def _check_int8(op, spec, tiles):
    op = _quantized(op, spec)
    if op.groups > 1:
        with pytest.raises(ScheduleError, match="not a matrix product"):
            gpu_mma(op, **tiles)
        return
    if tiles.get("split_k", 1) > 1 and spec.output != "int32":
        with pytest.raises(ScheduleError, match=r"adds int32 shares exactly into an int32 output"):
            emulate(gpu_mma(op, **tiles))
        return
    ok, error, _ = checked(emulate(gpu_mma(op, **tiles)), seed=3)
    assert ok, error       # int32 and requantized outputs: bit for bit


# each example builds a host kernel (seconds): the quick tier has the two examples below
_, test_int8_convs_emulated = tiers(_check_int8, 1, 3, conv_ops(max_hw=9, max_channels=40), SPECS, TILES)
_, test_int8_matmuls_emulated = tiers(_check_int8, 1, 3, matmul_ops(max_mn=40, max_k=70, batched=False),
                                      SPECS, TILES)


@pytest.mark.parametrize("activation", quick_first(["uint8", "int8"]))
def test_an_asymmetric_activation_padded_conv_is_exact(activation):
    """The padding taps hold the activations' zero point in the tiles: with zx far from 0 a zero fill
    would be off by zx x the padding taps' weights."""
    op = _quantized(INT8_CONV, lo.QuantSpec(activation=activation, output="int32"))
    schedule = gpu_mma(op, **SMALL)
    assert schedule.tensorized[3] == f"mma_m16n8k32_{'u8s8' if activation == 'uint8' else 's8'}_s32"
    ok, error, _ = checked(emulate(schedule), seed=7)
    assert ok, error


@pytest.mark.parametrize("make", quick_first([gpu_mma, gpu_wmma]))
def test_bfloat16_presets_emulated_match_the_reference(make):
    op = lo.Conv2d(24, 40, 3, stride=2, padding=(1, 2), dilation=2, height=13, width=11, batch=2,
                   dtype="bfloat16")
    schedule = make(op, **SMALL)
    wanted = "mma_m16n8k16_bf16_f32" if make is gpu_mma else "wmma_m16n16k16_bf16_f32"
    assert schedule.tensorized[3] == wanted
    ok, error, _ = checked(emulate(schedule), seed=4)
    assert ok, error


@pytest.mark.parametrize("make, message", [
    (lambda: gpu_mma(_quantized(INT8_CONV, lo.QuantSpec(weight_symmetric=False))),
     r"asymmetric weights; the cuda target's int8 kernels take symmetric int8 weights"),
    (lambda: gpu_mma(_quantized(INT8_CONV, lo.QuantSpec(weight="uint8"))),
     r"multiplies uint8 by uint8; the cuda target's mma.sync entries take float16 x float16, "
     r"bfloat16 x bfloat16, int8 x int8, uint8 x int8"),
    (lambda: gpu_wmma(INT8_CONV),
     r"the cuda target's WMMA entries take float16 x float16, bfloat16 x bfloat16$"),
    (lambda: gpu_wmma(INT8_CONV, instruction="mma_m16n8k32_u8s8_s32", depth=48),
     r"depth=48 is not a multiple of mma_m16n8k32_u8s8_s32's k \(32\)"),
    (lambda: gpu_mma(_quantized(INT8_CONV, lo.QuantSpec(weight="ternary"))), r"multiplies uint8 by ternary"),
    (lambda: gpu_wmma(INT8_CONV, instruction="mma_m16n8k32_s8_s32"),
     r"mma_m16n8k32_s8_s32 multiplies int8 \(the input moving with .*\) by int8; "
     r"Conv2d\(.*\) gives uint8 by int8"),
    (lambda: gpu_mma(INT8_CONV).clip(0.0, 6.0), r"clip \(.*\) applies to float outputs"),
    (lambda: gpu_mma(INT8_CONV).add_residual(), r"add_residual \(\+ residual\) applies to float outputs"),
])
def test_quantized_tensor_schedules_the_target_cannot_run_are_refused(make, message):
    with pytest.raises(ScheduleError, match=message):
        emulate(make())


def test_the_int8_entries_take_32_bytes_a_tile_row_in_the_halves_layout():
    s8, half = INSTRUCTIONS["mma_m16n8k32_s8_s32"], INSTRUCTIONS["mma_m16n8k16_f16_f32"]
    assert (s8.m, s8.n, s8.k, s8.operands, s8.accumulator, s8.arch) == (
        16, 16, 32, ("int8", "int8"), "int32", "sm_80")
    assert s8.row_bytes == half.row_bytes == 32 and "m16n8k32.row.col.s32.s8.s8.s32" in s8.header
    assert "s32.u8.s8.s32" in INSTRUCTIONS["mma_m16n8k32_u8s8_s32"].header
    assert tensor_entry(lo.Matmul(16, 16, 16, quant=lo.QuantSpec(activation="int8"))) == s8.name


@pytest.mark.slow        # an nvcc build
@needs(toolchain.nvcc)
def test_an_int8_split_k_kernel_builds_for_sm_90_with_imma_and_integer_atomics():
    op = lo.Conv2d(64, 64, 3, padding=1, height=56, width=56, quant=lo.QuantSpec(output="int32"))
    kernel = gpu_mma(op, split_k=4).compile(target="cuda", isa="sm_90")
    assert kernel.build.spill_bytes == 0, kernel.report
    cuobjdump, nvdisasm = toolchain.tool("cuobjdump"), toolchain.tool("nvdisasm")
    if cuobjdump is None or nvdisasm is None:
        pytest.skip("no cuobjdump and nvdisasm here (pip install nvidia-cuda-cuobjdump "
                    "nvidia-cuda-nvdisasm): the SASS is unchecked")
    sass = subprocess.run([str(cuobjdump), "--dump-sass", str(kernel.build.library)], capture_output=True,
                          text=True, check=True, env={"PATH": str(nvdisasm.parent)}).stdout
    assert "IMMA.16832.U8.S8" in sass and "LDSM.16.M88.4" in sass and "LDGSTS.E.BYPASS.128" in sass
    assert "RED.E.ADD.STRONG.GPU" in sass or "REDG.E.ADD.STRONG.GPU" in sass
