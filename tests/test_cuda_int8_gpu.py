"""The cuda target's int8 and bfloat16 tensor-core kernels on an NVIDIA GPU (``-m gpu``; skipped with the
reason where there is none): quantized convs and matmuls on ``mma.sync.m16n8k32`` (int8 and uint8
activations; int8, uint8 (asymmetric too), ternary and binary weights; every output kind, split-K on
int32) bit for bit against quant.py's reference, a quantized call on CuPy and PyTorch device arrays,
bfloat16 on ``m16n8k16`` and WMMA within the float32 tolerance, and ``measure(..., graph=True)``; the
same bit for bit on ``wgmma`` m64nNk32 (s8 and u8 activations, symmetric int8 and ternary weights; TMA,
128-byte swizzle, warp specialization, split-K)."""
import numpy as np
import pytest
from test_cuda_gpu import needs_gpu

import loopopt as lo
from loopopt.dataflows import gpu_mma, gpu_wgmma, gpu_wmma
from loopopt.measure import GRAPH, checked
from loopopt.quant_reference import random_call, reference_output
from loopopt.targets.cuda import device

pytestmark = pytest.mark.gpu

SPECS = [lo.QuantSpec(activation="uint8", output="uint8"), lo.QuantSpec(activation="int8", output="int32"),
         lo.QuantSpec(activation="uint8", per_channel=False, output="float32"),
         lo.QuantSpec(activation="int8", output="int8"),
         lo.QuantSpec(activation="int8", weight="uint8", weight_symmetric=False, output="uint8"),
         lo.QuantSpec(activation="uint8", weight="uint8", output="int32"),
         lo.QuantSpec(activation="uint8", weight_symmetric=False, per_channel=False, output="float32"),
         lo.QuantSpec(activation="uint8", weight="ternary", output="int8"),
         lo.QuantSpec(activation="binary", weight="binary", output="int32")]
SHAPES = [lo.Conv2d(24, 40, 3, stride=2, padding=(1, 2), dilation=2, height=13, width=11, batch=2),
          lo.Conv2d(3, 20, 5, padding=2, height=17, width=19, batch=3),
          lo.Conv2d(64, 64, 3, padding=1, height=14, width=14, batch=4), lo.Matmul(300, 260, 200),
          lo.Matmul(37, 45, 13)]
SMALL = {"block_m": 32, "block_n": 48, "warps_m": 2, "warps_n": 3, "depth": 96}
VARIANTS = {"mma": lambda op: gpu_mma(op), "mma small": lambda op: gpu_mma(op, **SMALL),
            "mma stages=2": lambda op: gpu_mma(op, stages=2, depth=32),
            "mma split_k=3": lambda op: gpu_mma(op, **SMALL, split_k=3)}


def _cases():
    """Each shape under each spec with one of the unsplit variants in turn, and split-K on int32."""
    unsplit = [v for v in VARIANTS if "split_k" not in v]
    for i, shape in enumerate(SHAPES):
        for j, spec in enumerate(SPECS):
            chosen = [unsplit[(i + j) % len(unsplit)]] + (["mma split_k=3"] if spec.output == "int32" else [])
            for variant in chosen:
                weight = spec.weight + ("" if spec.weight_symmetric else "-asymmetric")
                yield pytest.param(type(shape)(**shape.arguments, quant=spec), variant,
                                   id=f"{shape!r}-{spec.activation}-{weight}-{spec.output}-{variant}")


@needs_gpu
@pytest.mark.parametrize("op, variant", list(_cases()))
def test_int8_kernels_match_the_reference_bit_for_bit_on_the_gpu(op, variant):
    ok, error, _ = checked(VARIANTS[variant](op).compile(target="cuda"), seed=11)
    assert ok, error


# wgmma m64nNk32 (sm_90a): the specs without activation sums, the threads' copies (convs too) and the
# 4096^3 GEMM's TMA-staged, 128-byte-swizzled, warp-specialized kernel on Matmuls with tails
WGMMA_VARIANTS = {
    "wgmma": lambda op: gpu_wgmma(op, block_m=64, block_n=64, warps_m=1, warps_n=1, depth=64, stages=3),
    "wgmma tma specialized": lambda op: gpu_wgmma(op, warps_m=1, warps_n=2, depth=128, stages=4, swizzle=128,
                                                  engine="tma", specialize=True),
    "wgmma tma split_k=2": lambda op: gpu_wgmma(op, block_m=128, block_n=128, depth=64, engine="tma",
                                                split_k=2)}
SPEC = {(spec.activation, spec.weight, spec.output): spec for spec in SPECS}
WGMMA_CASES = [(SHAPES[0], ("uint8", "int8", "uint8"), "wgmma"),
               (SHAPES[2], ("int8", "int8", "int32"), "wgmma"),
               (lo.Matmul(300, 260, 224), ("uint8", "int8", "uint8"), "wgmma tma specialized"),
               (lo.Matmul(300, 260, 224), ("uint8", "ternary", "int8"), "wgmma tma specialized"),
               (lo.Matmul(300, 260, 224), ("int8", "int8", "int32"), "wgmma tma split_k=2"),
               (lo.Matmul(1000, 520, 4096), ("int8", "int8", "int32"), "wgmma tma specialized")]


@needs_gpu
@pytest.mark.parametrize("op, variant", [
    pytest.param(type(shape)(**shape.arguments, quant=SPEC[types]), variant,
                 id=f"{shape!r}-{'-'.join(types)}-{variant}")
    for shape, types, variant in WGMMA_CASES])
def test_int8_wgmma_kernels_match_the_reference_bit_for_bit_on_the_gpu(op, variant):
    ok, error, _ = checked(WGMMA_VARIANTS[variant](op).compile(target="cuda"), seed=11)
    assert ok, error


@needs_gpu
def test_a_quantized_call_on_device_arrays_copies_nothing_and_gives_the_numpy_result():
    cp = device.cupy()
    spec = lo.QuantSpec(activation="int8", weight="uint8", weight_symmetric=False, output="int8")
    op = lo.Conv2d(24, 40, 3, stride=2, padding=(1, 2), height=13, width=11, batch=2, bias=True, quant=spec)
    schedule = gpu_mma(op, **SMALL)
    kernel = schedule.compile(target="cuda")
    arrays, params = random_call(op, seed=4)
    stored = [cp.asarray(schedule.layout_of(t).to_storage(a)) for t, a in zip(op.inputs, arrays)]
    expected = reference_output(op, arrays, params)
    out = kernel(*stored, arrays[2], **params)
    assert isinstance(out, cp.ndarray)
    output_layout = schedule.layout_of(op.output)
    np.testing.assert_array_equal(output_layout.from_storage(cp.asnumpy(out), expected.shape), expected)
    np.testing.assert_array_equal(kernel(*arrays, **params), expected)
    torch = pytest.importorskip("torch")
    tensors = [torch.as_tensor(a, device="cuda") for a in (*stored, arrays[2])]
    out = kernel(*tensors, **params)
    np.testing.assert_array_equal(output_layout.from_storage(cp.asnumpy(out), expected.shape), expected)
    with pytest.raises(TypeError, match="has dtype int16"):
        kernel(tensors[0].short(), *tensors[1:], **params)


@needs_gpu
@pytest.mark.parametrize("make", [gpu_mma, gpu_wmma])
@pytest.mark.parametrize("shape", SHAPES, ids=repr)
def test_bfloat16_kernels_match_the_reference_on_the_gpu(shape, make):
    op = type(shape)(**shape.arguments | {"dtype": "bfloat16"})
    ok, error, _ = checked(make(op).compile(target="cuda"), seed=11)
    assert ok, error


@needs_gpu
def test_measure_in_a_cuda_graph_names_its_scope_and_verifies():
    op = lo.Matmul(512, 512, 512, quant=lo.QuantSpec(activation="int8", output="int32"))
    timing = lo.measure(gpu_mma(op).compile(target="cuda"), repeats=5, graph=True)
    assert timing.verified and timing.scope == GRAPH and GRAPH in str(timing) and timing.unit == "GOP/s"
    assert 0 < timing.percent_of_peak < 100


# quantized convs on TMA pixel boxes (``padding_sums``): TMA fills the padding with 0 and the epilogue
# adds the activations' zero point times the weights at each border pixel's taps outside; 1-D to 3-D,
# stride 2, dilation, asymmetric padding, batch > 1, channel tails, boxes overhanging the output
BOX_OPS = [lo.Conv2d(32, 40, 3, stride=2, padding=((1, 0), (2, 1)), dilation=2, height=13, width=11, batch=2),
           lo.Conv2d(16, 20, 5, padding=2, height=17, width=19, batch=3),
           lo.Conv2d(64, 64, 3, padding=1, height=14, width=14, batch=4),
           lo.Conv2d(48, 72, 1, height=7, width=9, bias=False),
           lo.Conv1d(16, 24, 3, stride=2, padding=((2, 1),), length=37, batch=3),
           lo.Conv3d(16, 16, 3, stride=(1, 2, 1), padding=1, dilation=(2, 1, 1), depth=7, height=6, width=7,
                     batch=2)]
BOX_SPECS = [SPECS[0], SPECS[1], SPECS[2], SPECS[3],
             lo.QuantSpec(activation="uint8", weight="ternary", output="int32")]
BOX_VARIANTS = {"specialized 64-byte swizzle": {"block_m": 128, "block_n": 64, "warps_m": 1, "depth": 64,
                                                "swizzle": 64, "specialize": True},
                "defaults": {},
                "128-byte swizzle": {"block_m": 128, "block_n": 64, "warps_m": 2, "depth": 128,
                                     "swizzle": 128},
                "specialized small split_k=3": {"block_m": 64, "block_n": 64, "warps_m": 1, "depth": 32,
                                                "split_k": 3, "stages": 3, "specialize": True},
                "persistent": {"block_m": 64, "block_n": 64, "warps_m": 1, "depth": 32, "stages": 3,
                               "specialize": True, "persistent": True},
                "persistent two warpgroups": {"block_m": 128, "block_n": 64, "warps_m": 2, "depth": 64,
                                              "swizzle": 64, "specialize": True, "persistent": True}}


def _box_cases():
    """Each shape under each variant, the specs in turn (split-K on the int32 specs only)."""
    int32 = [spec for spec in BOX_SPECS if spec.output == "int32"]
    for i, shape in enumerate(BOX_OPS):
        for j, variant in enumerate(BOX_VARIANTS):
            specs = int32 if "split_k" in variant else BOX_SPECS
            spec = specs[(i + j) % len(specs)]
            yield pytest.param(type(shape)(**shape.arguments, quant=spec), variant,
                               id=f"{shape!r}-{spec.activation}-{spec.weight}-{spec.output}-{variant}")


@needs_gpu
@pytest.mark.parametrize("op, variant", list(_box_cases()))
def test_quantized_conv_pixel_boxes_match_the_reference_bit_for_bit_on_the_gpu(op, variant):
    if device.arch() != "sm_90":
        pytest.skip(f"wgmma runs on sm_90 (Hopper) only; this GPU is {device.arch()}")
    schedule = gpu_wgmma(op, **BOX_VARIANTS[variant], engine="tma")
    ok, error, _ = checked(schedule.compile(target="cuda"), seed=13)
    assert ok, error


@needs_gpu
def test_a_quantized_pixel_box_conv_on_device_arrays_sums_its_padding_table_there():
    """The padding's table made from device weights (CuPy) gives the numpy call's output."""
    if device.arch() != "sm_90":
        pytest.skip(f"wgmma runs on sm_90 (Hopper) only; this GPU is {device.arch()}")
    cp = device.cupy()
    op = type(BOX_OPS[0])(**BOX_OPS[0].arguments, quant=SPECS[0])
    schedule = gpu_wgmma(op, **BOX_VARIANTS["specialized 64-byte swizzle"], engine="tma")
    kernel = schedule.compile(target="cuda")
    arrays, params = random_call(op, seed=6)
    stored = [cp.asarray(schedule.layout_of(t).to_storage(a)) for t, a in zip(op.inputs, arrays)]
    expected = reference_output(op, arrays, params)
    out = cp.asnumpy(kernel(*stored, arrays[2], **params))
    np.testing.assert_array_equal(schedule.layout_of(op.output).from_storage(out, expected.shape), expected)
