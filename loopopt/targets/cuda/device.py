"""The GPU as the cuda target's kernels see it, through CuPy: whether one is here, its
architecture, its FFMA peak, device memory, and timing with CUDA events.

CuPy is imported on first use; without it (or without a GPU) every function that needs the device
raises TargetUnavailableError saying so, and building kernels still works.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import cache
from types import ModuleType

from ..base import TargetUnavailableError

# FP32 lanes (FFMA per clock) per multiprocessor, by architecture (CUDA C Programming Guide,
# "Arithmetic Instructions"): Volta/Turing and the A100 64, Ampere GA10x, Ada and Hopper 128.
FP32_LANES_PER_SM = {"sm_70": 64, "sm_75": 64, "sm_80": 64, "sm_86": 128, "sm_89": 128, "sm_90": 128}
# Dense float16 tensor-core flops per clock per multiprocessor, float32 accumulation (the vendor's
# V100, A100 and H100 datasheets: peak / (SMs x boost clock)); other architectures have no figure here.
TENSOR_F16_FLOPS_PER_SM = {"sm_70": 1024, "sm_80": 2048, "sm_90": 4096}
INT8_PER_F16 = 2           # dense int8 tensor-core ops per float16 flop (the A100 and H100 datasheets)
INSTALL_CUPY = "pip install cupy-cuda13x (or cupy-cuda12x, matching the driver's CUDA)"


@cache
def cupy() -> ModuleType:
    """CuPy, with a GPU it can use; TargetUnavailableError otherwise."""
    try:
        import cupy as cp
    except ImportError:
        raise TargetUnavailableError(f"running cuda kernels needs CuPy and an NVIDIA GPU: CuPy is not "
                                     f"installed ({INSTALL_CUPY})") from None
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except cp.cuda.runtime.CUDARuntimeError as err:
        raise TargetUnavailableError(f"running cuda kernels needs an NVIDIA GPU: {err}") from None
    if count == 0:
        raise TargetUnavailableError("running cuda kernels needs an NVIDIA GPU: CUDA sees none here")
    return cp


DLPACK_CUDA = 2             # DLPack's device type of CUDA device memory (kDLCUDA)


def on_device(array: object) -> bool:
    """Whether ``array`` lies in GPU memory: ``__cuda_array_interface__`` (CuPy, PyTorch, Numba) or a
    DLPack array on a CUDA device (JAX, ...)."""
    if hasattr(array, "__cuda_array_interface__"):
        return True
    dlpack_device = getattr(array, "__dlpack_device__", None)
    return dlpack_device is not None and dlpack_device()[0] == DLPACK_CUDA


def device_array(array: object, xp: ModuleType) -> object:
    """``array`` (``on_device``) as an array of ``xp`` (CuPy) over the same memory: no copy."""
    return xp.asarray(array) if hasattr(array, "__cuda_array_interface__") else xp.from_dlpack(array)


def present() -> bool:
    """Whether a GPU can run kernels here."""
    try:
        cupy()
    except TargetUnavailableError:
        return False
    return True


@cache
def arch() -> str:
    """The current device's architecture, e.g. ``sm_90``."""
    return f"sm_{cupy().cuda.Device().compute_capability}"


@cache
def name() -> str:
    """The current device's name, e.g. ``NVIDIA H200``."""
    cp = cupy()
    return cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()


def _attribute(attribute: str) -> int:
    cp = cupy()
    return cp.cuda.runtime.deviceGetAttribute(getattr(cp.cuda.runtime, attribute), cp.cuda.Device().id)


def multiprocessors() -> int:
    return _attribute("cudaDevAttrMultiProcessorCount")


def clock_mhz() -> float:
    """The device's boost clock (MHz) as CUDA reports it."""
    return _attribute("cudaDevAttrClockRate") / 1e3


@cache
def ffma_peak_gflops(architecture: str | None = None) -> float:
    """The device's FP32 FFMA peak: multiprocessors x boost clock x FP32 lanes per SM x 2 flops
    (``architecture`` defaults to the device's; its lanes from ``FP32_LANES_PER_SM``)."""
    architecture = architecture or arch()
    if architecture not in FP32_LANES_PER_SM:
        raise ValueError(f"no FP32 lane count for {architecture!r}; known: {', '.join(FP32_LANES_PER_SM)}")
    return multiprocessors() * clock_mhz() * FP32_LANES_PER_SM[architecture] * 2 / 1e3


@cache
def tensor_peak_gflops(architecture: str | None = None) -> float:
    """The device's dense float16 tensor-core peak: multiprocessors x boost clock x
    ``TENSOR_F16_FLOPS_PER_SM``."""
    architecture = architecture or arch()
    if architecture not in TENSOR_F16_FLOPS_PER_SM:
        raise ValueError(f"no float16 tensor-core rate for {architecture!r}; known: "
                         f"{', '.join(TENSOR_F16_FLOPS_PER_SM)}")
    return multiprocessors() * clock_mhz() * TENSOR_F16_FLOPS_PER_SM[architecture] / 1e3


@cache
def _flush_buffer():
    """Device memory twice the size of the L2 cache: writing it evicts whatever the L2 held."""
    return cupy().empty(2 * _attribute("cudaDevAttrL2CacheSize") // 4, dtype="float32")


GRAPH_LAUNCHES = 20        # kernel launches captured in one CUDA graph (graph_timer)


def elapsed(run: Callable[[], object], flush_l2: bool = True) -> float:
    """Seconds ``run`` takes on the device: CUDA events recorded before and after it on the default
    stream (the one the kernels launch on), waited for. ``flush_l2`` (default): the L2 cache is
    overwritten first, outside the events, so the run reads its inputs from device memory (cold),
    as in a network where other layers ran in between."""
    cp = cupy()
    if flush_l2:
        _flush_buffer().fill(0)
    start, end = cp.cuda.Event(), cp.cuda.Event()     # on the current stream, as the kernels launch
    start.record()
    run()
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / 1e3


def stream_pointer() -> int:
    """The current CuPy stream's handle (0: the default stream), on which the kernels launch."""
    return cupy().cuda.get_current_stream().ptr


def graph_timer(run: Callable[[], object], launches: int = GRAPH_LAUNCHES) -> Callable[[], float]:
    """A function of no arguments giving the seconds of one ``run`` replayed in a CUDA graph:
    ``launches`` runs (each launching on the current stream) captured once into one graph on a
    stream of its own, the graph replayed between CUDA events, the time divided by ``launches``. The
    runs follow each other with no host in between and the L2 cache is not overwritten: the cost of
    a kernel inside a captured network, without the per-call launch overhead (about 6 us from
    Python). ``run`` is called once before the capture (a launcher's first-call set-up)."""
    cp = cupy()
    stream = cp.cuda.Stream(non_blocking=True)
    run()
    with stream:
        stream.begin_capture()
        for _ in range(launches):
            run()
        graph = stream.end_capture()

    def timed() -> float:
        with stream:
            return elapsed(lambda: graph.launch(stream), flush_l2=False) / launches
    return timed
