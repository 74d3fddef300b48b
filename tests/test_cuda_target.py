"""The cuda target without a GPU: its registry entry and refusals, the printed CUDA (golden and
structural), the host emulation of the bound nest against the reference over random ops and GPU
schedules, compile-only builds with nvcc (0 spills; skipped with the reason without nvcc), and
measure's timing hook; the host side of a device call (prepare and bind) on fake device arrays."""
from pathlib import Path

import numpy as np
import pytest
from helpers import conv_ops, gemm_ops, layout_tags, matmul_ops, needs, tiers
from hypothesis import strategies as st

import loopopt as lo
from loopopt.dataflows import GPU_PRESETS, gpu_mma, gpu_naive, gpu_staged, gpu_tiled, gpu_wgmma
from loopopt.epilogue import RESIDUAL
from loopopt.layers import get_layer
from loopopt.measure import tolerance
from loopopt.targets import TargetUnavailableError, target, target_of_isa
from loopopt.targets.cuda import device, toolchain
from loopopt.targets.cuda import kernel as cuda_kernel
from loopopt.targets.cuda import target as cuda_target
from loopopt.targets.cuda.emulate import emulate
from loopopt.targets.cuda.printer import CUDA, HOST, print_kernel
from loopopt.targets.x86.target import X86Target

GOLDEN = Path(__file__).parent / "data" / "cuda"
SMALL = lo.Conv2d(8, 16, 3, padding=1, height=10, width=10, batch=2)


needs_nvcc = needs(toolchain.nvcc)


def _bound(op=SMALL) -> lo.Schedule:
    return (lo.Schedule(op).split("k", 8).reorder("n", "k_o", "oh", "ow", "k_i")
            .bind("k_o", "block.x").bind("oh", "block.y").bind("ow", "thread.x").bind("k_i", "thread.y"))


# --- the target and its refusals ----------------------------------------------------------------------

def test_the_registry_has_the_cuda_target_and_its_architectures():
    cuda = target("cuda")
    assert cuda.name == "cuda" and cuda.isas()[0] == "sm_90"
    assert target_of_isa("sm_80") is cuda
    with pytest.raises(ValueError, match=r"unknown cuda architecture 'sm_91': choose 'auto' or one of sm_90"):
        cuda.resolve_isa("sm_91")
    with pytest.raises(ValueError, match=r"float32 kernels \(and float16, bfloat16 and int8 on tensor"):
        cuda.peak("sm_90", "float64")


@pytest.mark.parametrize("schedule, message", [
    (lo.Schedule(lo.Conv2d(4, 4, 3, dtype="bfloat16")), r"multiplies bfloat16, which the cuda target runs on "
                                                         r"tensor cores only: tensorize"),
    (lo.Schedule(lo.Conv2d(4, 4, 3, quant=lo.QuantSpec())), r"is quantized .*, which the cuda target runs on "
                                                             r"tensor cores only"),
    (lo.Schedule(SMALL).vectorize("kw"), r"loop 'kw' is vectorized, a CPU annotation .* bind loops"),
    (lo.Schedule(SMALL).parallel("n"), r"loop 'n' is parallel"),
    (lo.Schedule(SMALL).register_block("c").prefetch("W", 64), r"prefetch\('W', 64\) is a CPU register "
                                                                r"block's software prefetch"),
])
def test_schedules_the_target_cannot_run_are_refused_before_building(schedule, message):
    with pytest.raises(lo.ScheduleError, match=message):
        schedule.compile(target="cuda")


@pytest.mark.skipif(device.present(), reason="a GPU is here: the kernel runs (tests/test_cuda_gpu.py)")
@needs_nvcc
@pytest.mark.slow
def test_running_without_a_gpu_says_what_is_missing():
    kernel = _bound().compile(target="cuda")
    inputs = SMALL.random_inputs(0)
    with pytest.raises(TargetUnavailableError, match="running cuda kernels needs"):
        kernel(*(inputs[t] for t in SMALL.call_tensors))


# --- the printed kernel --------------------------------------------------------------------------------

def test_the_printed_kernel_matches_the_golden_file():
    """A change of the printed CUDA is deliberate: rewrite the file (the test says how) and review it."""
    golden = GOLDEN / "conv_bound.cu"
    source = print_kernel(_bound()).source
    assert source == golden.read_text(), f"printed CUDA changed; if meant: write print_kernel(...).source " \
                                         f"to {golden}"


def test_bound_loops_become_block_and_thread_indices_with_the_launch_shape():
    printed = print_kernel(_bound())
    assert (printed.grid, printed.block) == ((2, 10, 1), (10, 8, 1))
    text = printed.source
    for line in ("const int k_o = (int) blockIdx.x;", "const int oh = (int) blockIdx.y;",
                 "const int ow = (int) threadIdx.x;", "const int k_i = (int) threadIdx.y;",
                 "__global__ void lo_nest(",
                 "O[(((1600*n + 100*k) + 10*oh) + ow)] = B[k] + lo_acc;",
                 "lo_nest<<<dim3(2, 10, 1), dim3(10, 8, 1), 0, (cudaStream_t) lo_stream>>>(I, W, B, O);",
                 'extern "C" int lo_kernel(const float *I, const float *W, const float *B, float *O, '
                 'void *lo_stream)'):
        assert line in text, line
    assert "for (int n = 0; n < 2; ++n)" in text and "lo_init" not in text and printed.final
    host = print_kernel(_bound(), HOST).source
    assert "blockIdx" not in host
    assert "for (int k_o = 0; k_o < 2; ++k_o) {   /* bound to block.x on the GPU */" in host


def test_a_register_block_is_an_unrolled_accumulator_array():
    text = print_kernel(gpu_tiled(lo.Matmul(64, 64, 32))).source
    assert "float lo_acc[4][4] = {" in text and text.count("#pragma unroll 4") == 4
    assert "lo_acc[i_i_o][j_i_o] += A[" in text


def test_an_outer_reduction_loop_adds_to_the_output_after_an_init_pass():
    printed = print_kernel(lo.Schedule(SMALL).reorder("c", "n").bind("n", "thread.x"), CUDA)
    assert not printed.final
    assert "O[" in printed.source and "] += lo_acc;" in printed.source
    assert printed.source.index("lo_init<<<") < printed.source.index("lo_nest<<<")
    scaled = print_kernel(lo.Schedule(lo.Gemm(8, 8, 8, alpha=0.5, beta=2.0)).reorder("k", "i"), CUDA).source
    assert "lo_scale<<<" in scaled and "= 0.5f * " in scaled


def test_a_staged_kernel_copies_its_boxes_between_barriers_and_reads_them():
    op = lo.Matmul(37, 45, 13)
    schedule = (lo.Schedule(op).split("i", 16).split("k", 4).reorder("i_o", "i_i", "j", "k_o", "k_i")
                .bind("i_o", "block.x").bind("i_i", "thread.x").stage("A", "k_o"))
    text = print_kernel(schedule).source
    assert "__shared__ float lo_s_A[64];   /* 16 x 4 */" in text
    copy = text.index("lo_s_A[lo_t] = 0 <= lo_A0 && lo_A0 < 37 && 0 <= lo_A1 && lo_A1 < 13 ? "
                      "A[(13*lo_A0 + lo_A1)]")
    barriers = [text.index(f"__syncthreads();   /* the {what}") for what in ("last step", "boxes")]
    assert barriers[0] < copy < barriers[1]
    # the thread loop's partial guard lies outside the stage: checked at the product and the store instead
    assert ("if ((0 <= (16*i_o + i_i) && (16*i_o + i_i) < 37)) lo_acc += "
            "lo_s_A[(i - 16*i_o) * 4 + (k - 4*k_o)]") in text
    assert "if ((0 <= (16*i_o + i_i) && (16*i_o + i_i) < 37)) C[(45*i + j)] = lo_acc;" in text


# --- the host emulation against the reference ------------------------------------------------------------

@st.composite
def gpu_schedules(draw, op):
    """A GPU schedule of ``op``: a preset with random knobs, or the output dims' first loop on threads with
    a reduction loop outside the accumulators (the init pass), each with random storage layouts."""
    kind = draw(st.sampled_from(["naive", "tiled", "staged", "staged, deferred guards",
                                 "outer reduction"]))
    if kind == "naive":
        schedule = gpu_naive(op, threads=draw(st.integers(1, 40)))
    elif kind in ("tiled", "staged"):
        knobs = [draw(st.integers(1, 8)) for _ in range(2)] + [draw(st.integers(1, 4)) for _ in range(2)]
        schedule = (gpu_tiled(op, *knobs) if kind == "tiled"
                    else gpu_staged(op, *knobs, depth=draw(st.integers(1, 4))))
    elif kind == "staged, deferred guards":
        schedule = _thread_rows_staged(op, draw(st.integers(1, 8)), draw(st.integers(1, 4)))
    else:
        first = op.dim_names[0]
        reduction = next(d for d in op.dim_names if d in op.reduction_dims)
        schedule = lo.Schedule(op).reorder(reduction, first).bind(first, "block.x")
    for tensor in op.tensors:
        schedule = schedule.layout(tensor, draw(st.sampled_from(layout_tags(op.tensor(tensor).letters))))
    return schedule


def _thread_rows_staged(op, threads: int, depth: int) -> lo.Schedule:
    """The first output dim split over ``threads`` threads, the input channels in steps of ``depth``
    staged: the partial guard of the thread loop lies outside the stage (deferred to the products)."""
    first, channel = op.dim_names[0], op.reduction_channel_dim
    schedule = lo.Schedule(op).split(first, min(threads, op.extent(first))).split(channel, depth)
    reduction = [f"{channel}_o", f"{channel}_i"] + [d for d in op.dim_names
                                                    if d in op.reduction_dims and d != channel]
    others = [d for d in op.dim_names if d not in op.reduction_dims and d != first]
    schedule = schedule.reorder(f"{first}_o", f"{first}_i", *others, *reduction)
    schedule = schedule.bind(f"{first}_o", "block.x").bind(f"{first}_i", "thread.x")
    for tensor in op.inputs:
        schedule = _staged_if_affine(schedule, tensor, f"{channel}_o")
    return schedule


def _staged_if_affine(schedule: lo.Schedule, tensor: str, at: str) -> lo.Schedule:
    try:
        schedule.staged_box(tensor, at)
    except lo.ScheduleError:
        return schedule
    return schedule.stage(tensor, at)


def emulated(schedule: lo.Schedule) -> None:
    op = schedule.op
    inputs = op.random_inputs(seed=2)
    args = [inputs[t] for t in op.call_tensors]
    error = np.abs(emulate(schedule)(*args) - op.reference(*args))
    assert np.all(error <= tolerance(op, inputs)), (schedule.pseudocode(), float(error.max()))


def random_conv(data):
    op = data.draw(conv_ops())
    emulated(data.draw(gpu_schedules(op)))


def random_matmul(data):
    op = data.draw(st.one_of(matmul_ops(), gemm_ops()))
    emulated(data.draw(gpu_schedules(op)))


test_emulated_convs_quick, test_emulated_convs = tiers(random_conv, 3, 10, data=st.data())
test_emulated_matmuls_quick, test_emulated_matmuls = tiers(random_matmul, 2, 6, data=st.data())


# --- nvcc ------------------------------------------------------------------------------------------------

@needs_nvcc
@pytest.mark.parametrize("layer, preset", [
    (layer, preset) if (layer, preset) == ("conv3_x", "gpu_staged") else
    pytest.param(layer, preset, marks=pytest.mark.slow)      # the quick tier builds one, the richest
    for layer in ("conv3_x", "conv2_x", "conv4_x", "gemm") for preset in GPU_PRESETS])
def test_nvcc_builds_the_presets_without_spills(layer, preset):
    op = lo.Matmul(4096, 4096, 4096) if layer == "gemm" else get_layer(f"resnet50.{layer}", batch=32)
    kernel = GPU_PRESETS[preset](op).compile(target="cuda", isa="sm_90")
    assert kernel.isa == "sm_90" and kernel.build.library.is_file()
    assert "for 'sm_90'" in kernel.report
    assert kernel.build.registers > 0 and kernel.build.spill_bytes == 0, kernel.report


@needs_nvcc
@pytest.mark.slow
def test_a_build_is_cached_by_source_nvcc_and_architecture():
    source = print_kernel(_bound()).source
    first, again, other = toolchain.build(source, "sm_90"), toolchain.build(source, "sm_90"), \
        toolchain.build(source, "sm_80")
    assert first.library == again.library != other.library
    assert "for 'sm_80'" in other.report


def test_the_pip_wheels_nvcc_is_found_when_installed():
    wheel = toolchain._wheel_nvcc()
    if wheel is None:
        pytest.skip("the [cuda] extra's nvidia-cuda-nvcc wheel is not installed")
    assert wheel.name == "nvcc" and wheel.is_file()


# --- measure's timing hook ---------------------------------------------------------------------------

class _DeviceTimed(X86Target):
    """The host's target, but its timer says every run took 2 ms, against a peak of 1 GFLOP/s."""

    def run_timer(self):
        return lambda run: (run(), 0.002)[1]

    def peak(self, isa, dtype):
        return 1.0


def test_measure_times_runs_with_the_kernels_targets_timer_and_peak():
    kernel = emulate(gpu_naive(lo.Matmul(8, 8, 8)))
    kernel.target = _DeviceTimed()
    timing = lo.measure(kernel, repeats=3)
    assert timing.verified and timing.times == (0.002,) * 3
    assert timing.peak_gflops == 1.0 and timing.percent_of_peak == pytest.approx(100 * timing.gflops)


@pytest.mark.skipif(device.present(), reason="a GPU is here: compare runs (benchmarks/bench_cuda.py)")
def test_compare_on_the_cuda_target_without_a_gpu_ends_with_one_line_saying_why(capsys):
    from loopopt.cli import main
    assert main(["compare", "--target", "cuda", "--matmul", "16,16,16", "--quiet"]) != 0
    error = capsys.readouterr().err.strip().splitlines()
    assert error[-1].startswith("loopopt: error: running cuda kernels needs CuPy and an NVIDIA GPU")


def test_a_host_target_refuses_cuda_graph_timing():
    with pytest.raises(ValueError, match=r"graph=True times kernels replayed in a CUDA graph; the x86 "
                                         r"target.s kernels run on the host"):
        target("x86").graph_timer(lambda: None)


# --- the host side of a device call, without a GPU ----------------------------------------------------

class _DeviceArray:
    """A host array posing as a device array (``__cuda_array_interface__`` of its memory)."""

    def __init__(self, array: np.ndarray):
        self.array = np.ascontiguousarray(array)
        self.__cuda_array_interface__ = self.array.__array_interface__


class _FakeCupy:
    """The few CuPy calls ``CudaKernel.prepare`` makes, on host memory."""

    @staticmethod
    def asarray(array: np.ndarray) -> _DeviceArray:
        return _DeviceArray(array)

    @staticmethod
    def full(shape, value, dtype) -> _DeviceArray:
        return _DeviceArray(np.full(shape, value, dtype))


class _NoLaunch:
    """A driver that binds the arguments and launches nothing (no library is built)."""

    def __init__(self, build, printed):
        pass

    def bind(self, params, values):
        return tuple(values[p.name] for p in params)


@pytest.mark.parametrize("make", [
    lambda: gpu_mma(lo.Gemm(30, 20, 70, alpha=0.5, beta=2.0, dtype="float16")),
    lambda: gpu_mma(lo.Conv2d(8, 16, 3, padding=1, height=9, width=7, dtype="bfloat16")),
    lambda: gpu_wgmma(lo.Matmul(37, 45, 13, dtype="float16")).add_residual()],
    ids=["fp16 gemm (bias C)", "bf16 conv (bias)", "wgmma residual"])
def test_prepare_gives_each_parameter_its_device_shape_and_type(make, monkeypatch):
    """The arrays ``CudaKernel.prepare`` hands the launcher pass its shape and type checks: the bias in
    its logical shape, tensors and the residual in their storage layouts (both once broke only on the
    GPU: the host emulation does not go through this path)."""
    monkeypatch.setattr(cuda_target.toolchain, "build", lambda source, arch: None)
    monkeypatch.setattr(cuda_kernel, "CudaDriver", _NoLaunch)
    monkeypatch.setattr(device, "cupy", lambda: _FakeCupy)
    schedule = make()
    kernel = schedule.compile(target="cuda", isa="sm_90")
    op = schedule.op
    arrays = [np.random.default_rng(0).standard_normal(op.tensor(t).shape).astype(np.float32)
              for t in op.call_tensors]
    if schedule.residual:
        arrays.append(np.arange(np.prod(op.tensor(op.output).shape), dtype=np.float32)
                      .reshape(op.tensor(op.output).shape))
    buffers = kernel.prepare(*arrays)
    stored = buffers.arrays
    if schedule.residual:
        expected = schedule.layout_of(op.output).to_storage(arrays[-1])
        assert np.array_equal(stored[RESIDUAL].array, expected)
    if op.bias:
        assert stored[op.bias_tensor].array.shape == op.tensor(op.bias_tensor).shape
