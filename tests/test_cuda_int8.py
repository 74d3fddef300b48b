"""The cuda target's int8 and bfloat16 tensor-core kernels without a GPU: the ``mma.sync.m16n8k32``
entries (s8 and u8 on either side -> s32) over the whole quantization space (``EVERY_SPEC``: int8 or
uint8 activations with any zero point; int8, uint8 or ternary weights, symmetric or not, per tensor or
per channel; binary; int32, dequantized and requantized outputs; split-K on int32), host-emulated
through their scalar meaning and the swizzled byte tiles, bit for bit against quant.py's reference;
the values of a call on device arrays (CuPy posed by numpy); ``m16n8k16`` and WMMA on bfloat16 within
the float32 tolerance; the refusals; an nvcc build with ``IMMA`` in its SASS."""
import itertools

import numpy as np
import pytest
from helpers import conv_ops, matmul_ops, needs, quick_first, sass, tiers
from hypothesis import strategies as st

import loopopt as lo
from loopopt.dataflows import gpu_gemv, gpu_mma, gpu_wgmma, gpu_wmma, tensor_entry
from loopopt.measure import checked
from loopopt.quant_reference import random_call, reference_output
from loopopt.schedule import ScheduleError
from loopopt.targets.cuda import device, quantized, toolchain
from loopopt.targets.cuda import kernel as cuda_kernel
from loopopt.targets.cuda import target as cuda_target
from loopopt.targets.cuda.emulate import emulate
from loopopt.targets.cuda.instructions import INSTRUCTIONS, with_swizzle
from loopopt.targets.cuda.printer import print_kernel


def _every_spec() -> list[lo.QuantSpec]:
    """Every valid QuantSpec (84), the ones whose weights' zero point may be nonzero first (the quick
    tier's examples: hypothesis tries the first value first)."""
    specs = []
    for activation, weight, per_channel, symmetric, output in itertools.product(
            (*lo.quant.ACTIVATIONS, lo.quant.BINARY), lo.quant.WEIGHT_KINDS, (True, False), (False, True),
            lo.quant.OUTPUTS):
        try:
            specs.append(lo.QuantSpec(activation, per_channel, symmetric, output, weight))
        except ValueError:
            continue
    return sorted(specs, key=lambda spec: not quantized.needs_activation_sums(spec))


EVERY_SPEC = _every_spec()
SPECS = st.sampled_from(EVERY_SPEC)
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
    _check_preset(gpu_mma, op, spec, tiles)


def _check_preset(preset, op, spec, tiles):
    """``preset(op with spec, **tiles)`` in the host emulation bit for bit, or its refusal."""
    op = _quantized(op, spec)
    if op.groups > 1:
        with pytest.raises(ScheduleError, match="not a matrix product"):
            preset(op, **tiles)
        return
    if tiles.get("split_k", 1) > 1 and spec.output != "int32":
        with pytest.raises(ScheduleError, match=r"adds int32 shares exactly into an int32 output"):
            emulate(preset(op, **tiles))
        return
    ok, error, _ = checked(emulate(preset(op, **tiles)), seed=3)
    assert ok, error       # int32 and requantized outputs: bit for bit


# wgmma m64nNk32: the specs whose weights' zero point is 0 (no activation sums), int8 or uint8
# activations; the threads' im2col copies, or TMA boxes (in 32-, 64- and 128-byte swizzles, warp-
# specialized) of a Matmul whose rows take whole 32-byte k-slices
WGMMA_SPECS = st.sampled_from([spec for spec in EVERY_SPEC if not quantized.needs_activation_sums(spec)])
WGMMA_THREADS = [{"block_m": 64, "block_n": 64, "warps_m": 1, "warps_n": 1, "depth": 32, "stages": 3},
                 {"block_m": 128, "block_n": 48, "warps_m": 2, "warps_n": 1, "depth": 96, "split_k": 2}]
WGMMA_TMA = [{"block_m": 64, "block_n": 256, "warps_m": 1, "warps_n": 2, "depth": 128, "engine": "tma",
              "swizzle": 128, "specialize": True},
             {"block_m": 128, "block_n": 64, "warps_m": 2, "warps_n": 1, "stages": 3, "engine": "tma",
              "swizzle": 64},
             {"block_m": 64, "block_n": 128, "warps_m": 1, "warps_n": 1, "depth": 96, "engine": "tma",
              "split_k": 2}]


def _check_wgmma(op, spec, tiles):
    """``gpu_wgmma`` on a quantized ``op`` bit for bit (a TMA-staged Matmul's k rounded up to 32)."""
    if tiles.get("engine") == "tma":
        op = lo.Matmul(**op.arguments | {"k": -(-op.arguments["k"] // 32) * 32})
    _check_preset(gpu_wgmma, op, spec, tiles)


def test_the_space_has_every_combination():
    assert len(EVERY_SPEC) == 84 == len(set(map(repr, EVERY_SPEC)))
    assert sum(map(quantized.needs_activation_sums, EVERY_SPEC)) == 48


# each example builds a host kernel (seconds): the quick tier has the two examples below
_, test_int8_convs_emulated = tiers(_check_int8, 1, 4, conv_ops(max_hw=9, max_channels=40), SPECS, TILES)
_, test_int8_matmuls_emulated = tiers(_check_int8, 1, 4, matmul_ops(max_mn=40, max_k=70, batched=False),
                                      SPECS, TILES)

ENTRIES = {("uint8", "int8"): "u8s8", ("int8", "int8"): "s8", ("int8", "uint8"): "s8u8",
           ("uint8", "uint8"): "u8u8"}


# hypothesis's first example is the smallest (a 1 x 1 op): the quick tier's are chosen below instead
_, test_int8_wgmma_convs_emulated = tiers(_check_wgmma, 1, 4, conv_ops(max_hw=9, max_channels=40),
                                          WGMMA_SPECS, st.sampled_from(WGMMA_THREADS))
_, test_int8_wgmma_matmuls_emulated = tiers(_check_wgmma, 1, 5, matmul_ops(max_mn=150, max_k=150,
                                                                           batched=False),
                                            WGMMA_SPECS, st.sampled_from(WGMMA_TMA + WGMMA_THREADS))


@pytest.mark.parametrize("op, spec, tiles", [
    (lo.Conv2d(8, 24, 3, stride=2, padding=(1, 2), dilation=2, height=9, width=7, batch=2), INT8_CONV.quant,
     WGMMA_THREADS[0]),
    (lo.Matmul(70, 200, 320, trans_a=True), lo.QuantSpec(activation="int8", output="int32"), WGMMA_TMA[0])],
    ids=["conv u8s8 requantized threads", "matmul s8 int32 tma specialized 128-byte swizzle"])
def test_int8_wgmma_kernels_emulated_bit_for_bit(op, spec, tiles):
    _check_wgmma(op, spec, tiles)


@pytest.mark.parametrize("types", quick_first([("int8", "uint8"), ("uint8", "uint8")]), ids="-".join)
def test_asymmetric_zero_points_on_a_padded_conv_are_exact(types):
    """The padding taps and the reduction's tails hold the activations' zero point in the tiles and the
    weights' zero point is taken off through the activation sums: with zx and zw far from 0 a zero
    fill, or sums without the tails, would be off."""
    activation, weight = types
    op = _quantized(INT8_CONV, lo.QuantSpec(activation=activation, weight=weight, weight_symmetric=False,
                                            output="int32"))
    schedule = gpu_mma(op, **SMALL)
    assert schedule.tensorized[3] == f"mma_m16n8k32_{ENTRIES[activation, weight]}_s32"
    ok, error, _ = checked(emulate(schedule), seed=7)
    assert ok, error


@pytest.mark.slow
def test_activation_sums_of_the_b_operand_are_exact():
    """A schedule whose activations are the instruction's B operand (they move with ``j``): the sums
    come from a ones fragment as A."""
    op = lo.Matmul(40, 37, 70, quant=lo.QuantSpec(activation="int8", weight="uint8", weight_symmetric=False,
                                                  output="uint8"))
    schedule = (lo.Schedule(op).layout("B", "NK").split("i", 16).split("j", 16).split("k", 32)
                .reorder("j_o", "i_o", "k_o", "j_i", "i_i", "k_i").bind("j_o", "block.x")
                .bind("i_o", "block.y")
                .stage("A", "k_o").stage("B", "k_o").tensorize("j_i", "i_i", "k_i", "mma_m16n8k32_u8s8_s32"))
    assert schedule.tensor_roles() == ("B", "A")
    ok, error, _ = checked(emulate(schedule), seed=2)
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


# --- a call on device arrays, without a GPU: numpy posing as CuPy ---------------------------------------

class _DeviceArray(np.ndarray):
    """A host array posing as a device array (``__cuda_array_interface__`` of its memory)."""

    @property
    def __cuda_array_interface__(self):
        return self.__array_interface__


class _FakeCupy:
    """The CuPy calls a quantized call on device arrays makes, on host memory."""

    @staticmethod
    def asarray(array, dtype=None):
        if isinstance(array, _DeviceArray) and dtype in (None, array.dtype):
            return array            # as CuPy's: the same array
        return np.ascontiguousarray(array, dtype).view(_DeviceArray)

    @staticmethod
    def empty(shape, dtype):
        return np.full(shape, 77, dtype).view(_DeviceArray)      # poisoned

    @staticmethod
    def from_dlpack(array):
        return array.array.view(_DeviceArray)

    any, isin, asnumpy = np.any, np.isin, np.asarray


class _DLPackArray:
    """A host array posing as a DLPack array on a CUDA device (as JAX's), without
    ``__cuda_array_interface__``."""

    def __init__(self, array: np.ndarray):
        self.array = array

    def __dlpack_device__(self):
        return (device.DLPACK_CUDA, 0)


class _NoLaunch:
    """A driver that binds the arguments and launches nothing (no library is built)."""

    def __init__(self, build, printed):
        pass

    def bind(self, params, values):
        return tuple(values[p.name] for p in params)


# the first: the quick tier's padded conv (its host kernel built once for both tests)
DEVICE_CASES = {"s8 x asymmetric u8 conv with bias, int32": (INT8_CONV, lo.QuantSpec(
                    activation="int8", weight="uint8", weight_symmetric=False, output="int32")),
                "ternary matmul, float": (lo.Matmul(37, 45, 70),
                                          lo.QuantSpec(weight="ternary", per_channel=False))}


def _device_call(op, monkeypatch):
    """The CUDA kernel of ``op`` (built by nobody), its call on the host, and the same call's device
    arrays (in their storage layouts) and parameters."""
    monkeypatch.setattr(cuda_target.toolchain, "build", lambda source, arch: None)
    monkeypatch.setattr(cuda_kernel, "CudaDriver", _NoLaunch)
    monkeypatch.setattr(device, "cupy", lambda: _FakeCupy)
    schedule = gpu_mma(op, **SMALL)
    arrays, params = random_call(op, seed=5)
    stored = [_FakeCupy.asarray(schedule.layout_of(t).to_storage(a)) for t, a in zip(op.inputs, arrays)]
    return schedule, arrays, stored + arrays[2:], params


@pytest.mark.parametrize("case", DEVICE_CASES)
def test_a_call_on_device_arrays_binds_what_a_host_call_copies(case, monkeypatch):
    """Device arrays go to the launcher as given; every per-channel value (the weights' sums taken on
    the device) equals a numpy call's."""
    schedule, arrays, on_device, params = _device_call(_quantized(*DEVICE_CASES[case]), monkeypatch)
    kernel = schedule.compile(target="cuda", isa="sm_90")
    host, dev = kernel.prepare(*arrays, **params).arrays, kernel.prepare(*on_device, **params).arrays
    for name in (*schedule.op.inputs, "lo_comp"):
        assert isinstance(dev[name], _DeviceArray)
    for given, name in zip(on_device, schedule.op.inputs):             # the tensors are not copied
        assert dev[name].__cuda_array_interface__["data"] == given.__cuda_array_interface__["data"]
    for name, value in host.items():
        if name != schedule.op.output:
            assert np.array_equal(np.asarray(value), np.asarray(dev[name])), name
    assert sorted(host) == sorted(dev)


def test_a_dlpack_array_is_taken_without_a_copy(monkeypatch):
    schedule, arrays, on_device, params = _device_call(_quantized(*DEVICE_CASES["ternary matmul, float"]),
                                                       monkeypatch)
    kernel = schedule.compile(target="cuda", isa="sm_90")
    dev = kernel.prepare(*(_DLPackArray(a) for a in on_device), **params).arrays
    host = kernel.prepare(*on_device, **params).arrays
    for given, name in zip(on_device, schedule.op.inputs):
        assert dev[name].__cuda_array_interface__["data"] == given.__cuda_array_interface__["data"]
    assert np.array_equal(dev["lo_comp"], host["lo_comp"])


def test_a_gemv_kernel_of_packed_weights_refuses_device_arrays(monkeypatch):
    op = lo.Matmul(1, 64, 128, quant=lo.QuantSpec(weight="ternary", output="int32"))
    _, arrays, on_device, params = _device_call(op, monkeypatch)
    kernel = gpu_gemv(op).compile(target="cuda", isa="sm_90")
    with pytest.raises(TypeError, match=r"takes its weights i2_s-packed, which loopopt packs on the host: "
                                        r"pass numpy arrays, or build it with weight_format\('int8'\)"):
        kernel(*on_device, **params)


def test_a_call_on_device_arrays_refuses_what_does_not_fit(monkeypatch):
    schedule, arrays, on_device, params = _device_call(_quantized(*DEVICE_CASES["ternary matmul, float"]),
                                                                  monkeypatch)
    kernel = schedule.compile(target="cuda", isa="sm_90")
    bad = on_device[1].copy()
    bad[3, 4] = 2
    with pytest.raises(ValueError, match=r"ternary weights must be -1, 0 or \+1: weight\[3, 4\] = 2"):
        kernel.prepare(on_device[0], bad, *on_device[2:], **params)
    with pytest.raises(TypeError, match=r"A has dtype int8; Matmul\(.*\) takes uint8"):
        kernel.prepare(on_device[0].view(np.int8), *on_device[1:], **params)
    with pytest.raises(ValueError, match=r"B has shape \(70, 45\); .* takes device arrays in their storage "
                                         r"layout, \(45, 70\)"):
        kernel.prepare(on_device[0], _FakeCupy.asarray(arrays[1]), *on_device[2:], **params)


@pytest.mark.slow
def test_the_values_of_a_device_call_run_exactly_in_the_emulation(monkeypatch):
    """The values a call on device arrays binds, run by the host emulation, give quant.py's output."""
    op = _quantized(*DEVICE_CASES["s8 x asymmetric u8 conv with bias, int32"])
    schedule, arrays, on_device, params = _device_call(op, monkeypatch)
    kernel = emulate(schedule)
    values = quantized.device_call_values(kernel, tuple(on_device), params, _FakeCupy)
    buffers = kernel.bind({n: np.asarray(v) if isinstance(v, np.ndarray) else v for n, v in values.items()})
    kernel.run(buffers)
    assert np.array_equal(kernel.output(buffers), reference_output(op, arrays, params))


@pytest.mark.parametrize("make, message", [
    (lambda: gpu_wmma(INT8_CONV),
     r"the cuda target's WMMA entries take float16 x float16, bfloat16 x bfloat16$"),
    (lambda: gpu_wmma(INT8_CONV, instruction="mma_m16n8k32_u8s8_s32", depth=48),
     r"depth=48 is not a multiple of mma_m16n8k32_u8s8_s32's k \(32\)"),
    (lambda: gpu_wmma(INT8_CONV, instruction="mma_m16n8k32_s8_s32"),
     r"mma_m16n8k32_s8_s32 multiplies int8 \(the input moving with .*\) by int8; "
     r"Conv2d\(.*\) gives uint8 by int8"),
    (lambda: gpu_mma(INT8_CONV).clip(0.0, 6.0), r"clip \(.*\) applies to float outputs"),
    (lambda: gpu_wgmma(_quantized(INT8_CONV, lo.QuantSpec(weight_symmetric=False))),
     r"wgmma_m64n64k32_u8s8_s32 reads both operands from shared memory, so it has no fragment of ones "
     r"for the activation sums that QuantSpec\(.*weight_symmetric=False.*\) needs"),
    (lambda: gpu_wgmma(_quantized(INT8_CONV, lo.QuantSpec(weight="uint8"))),
     r"multiplies uint8 by uint8; the wgmma entries take float16 x float16, bfloat16 x bfloat16, "
     r"int8 x int8, uint8 x int8 \(gpu_mma takes the others\)$"),
    (lambda: gpu_mma(INT8_CONV).add_residual(), r"add_residual \(\+ residual\) applies to float outputs"),
])
def test_quantized_tensor_schedules_the_target_cannot_run_are_refused(make, message):
    with pytest.raises(ScheduleError, match=message):
        emulate(make())


def test_a_persistent_requantizing_ring_is_refused_naming_a_depth_that_fits_beside_its_staged_rows():
    """64 x 128 tiles of depth 128 (24 KB a step) and a float32 fragment staged past the ring (32 KB): 9
    buffers are refused naming 8, which fits (a ring alone would take 9)."""
    op = lo.Matmul(4096, 4096, 4096, quant=lo.QuantSpec(activation="int8", output="float32"))
    tiles = {"block_m": 64, "block_n": 128, "warps_m": 1, "warps_n": 1, "depth": 128, "engine": "tma",
             "swizzle": 128, "specialize": True, "persistent": True}
    with pytest.raises(ScheduleError, match=r"^stages=9: a tensorized block needs 254096 bytes of shared "
                                            r"memory \(.*, 32768 bytes of staged rows past them\); 232448 at "
                                            r"most: stages=8 is the deepest ring of these tiles$"):
        print_kernel(gpu_wgmma(op, **tiles, stages=9))
    assert print_kernel(gpu_wgmma(op, **tiles, stages=8)).dynamic_shared_bytes <= 232448


def test_the_int8_entries_take_32_bytes_a_tile_row_in_the_halves_layout():
    s8, half = INSTRUCTIONS["mma_m16n8k32_s8_s32"], INSTRUCTIONS["mma_m16n8k16_f16_f32"]
    assert (s8.m, s8.n, s8.k, s8.operands, s8.accumulator, s8.arch) == (
        16, 16, 32, ("int8", "int8"), "int32", "sm_80")
    assert s8.row_bytes == half.row_bytes == 32 and "m16n8k32.row.col.s32.s8.s8.s32" in s8.header
    assert "s32.u8.s8.s32" in INSTRUCTIONS["mma_m16n8k32_u8s8_s32"].header
    wide = INSTRUCTIONS["wgmma_m64n256k32_u8s8_s32"]     # wgmma: 32 bytes of k a row, as f16's 16 halves
    assert (wide.m, wide.n, wide.k, wide.operands, wide.accumulator, wide.arch, wide.row_bytes) == (
        64, 256, 32, ("uint8", "int8"), "int32", "sm_90a", 32)
    assert "wgmma.mma_async.sync.aligned.m64n256k32.s32.u8.s8 {" in wide.header
    assert '"+r"((d)[127])' in wide.header and "p; }" in wide.header      # no scale or transpose immediates
    half = INSTRUCTIONS["wgmma_m64n256k16_f16_f32"]
    assert with_swizzle(wide, 128).row_elements == 128 == 2 * with_swizzle(half, 128).row_elements
    assert tensor_entry(lo.Matmul(16, 16, 16, quant=lo.QuantSpec(activation="int8"))) == s8.name


@pytest.mark.slow        # an nvcc build
@needs(toolchain.nvcc)
def test_an_int8_split_k_kernel_builds_for_sm_90_with_imma_and_integer_atomics():
    """With asymmetric weights: the activation sums' products too, without spills."""
    op = lo.Conv2d(64, 64, 3, padding=1, height=56, width=56,
                   quant=lo.QuantSpec(weight_symmetric=False, output="int32"))
    kernel = gpu_mma(op, split_k=4).compile(target="cuda", isa="sm_90")
    assert kernel.build.spill_bytes == 0, kernel.report
    code = sass(kernel)
    assert "IMMA.16832.U8.S8" in code and "LDSM.16.M88.4" in code and "LDGSTS.E.BYPASS.128" in code
    assert "RED.E.ADD.STRONG.GPU" in code or "REDG.E.ADD.STRONG.GPU" in code
