"""loopopt: explore loop schedules of convolution and matrix multiply.

Build an op (``Conv1d``, ``Conv2d``, ``Conv3d``, ``Matmul``, ``Gemm``, any ``Contraction``),
transform its ``Schedule``, compile it to a SIMD C kernel, ``measure`` it, and analyse its data
locality with ``reuse``; or let ``tune`` search the fastest schedule of an op.
"""
from . import accuracy, dataflows, schedule_file
from .accuracy import AccuracyReport, quant_accuracy
from .analysis import Machine, ReuseProfile, reuse, reuse_distances
from .buffers import MemoryLimitError
from .cbuild import BuildError
from .compare import Comparison, compare
from .contraction import ContractionError
from .kernel import Kernel
from .layers import get_layer, list_layers
from .machine import MachineProfile, machine_profile, peak_gflops
from .measure import Timing, TimingRefusedError, measure, measure_all
from .model import KernelModel, kernel_model
from .ops import Contraction, Conv1d, Conv2d, Conv3d, ConvNd, Gemm, Matmul, auto_pad
from .pool import Pool, PoolSchedule
from .quant import QuantSpec, dequantize, quant_error, quantize, quantize_binary, quantize_ternary
from .schedule import IllegalScheduleError, Schedule, ScheduleError
from .schedule_file import (
    ScheduleFileError,
    list_schedules,
    load_schedule,
    save_schedule,
    stored_isa,
    stored_schedule,
    to_toml,
)
from .targets.registry import available_isas
from .tune import TuneError, TuneResult, TuningLogError, best_schedule, best_trial, tune

__all__ = [
    "AccuracyReport",
    "BuildError",
    "Comparison",
    "Contraction",
    "ContractionError",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvNd",
    "Gemm",
    "IllegalScheduleError",
    "Kernel",
    "KernelModel",
    "Machine",
    "MachineProfile",
    "MemoryLimitError",
    "Matmul",
    "Pool",
    "PoolSchedule",
    "QuantSpec",
    "ReuseProfile",
    "Schedule",
    "ScheduleError",
    "ScheduleFileError",
    "Timing",
    "TimingRefusedError",
    "TuneError",
    "TuneResult",
    "TuningLogError",
    "accuracy",
    "auto_pad",
    "available_isas",
    "best_schedule",
    "best_trial",
    "compare",
    "dataflows",
    "dequantize",
    "get_layer",
    "kernel_model",
    "list_layers",
    "list_schedules",
    "load_schedule",
    "machine_profile",
    "measure",
    "measure_all",
    "peak_gflops",
    "quant_accuracy",
    "quant_error",
    "quantize",
    "quantize_binary",
    "quantize_ternary",
    "reuse",
    "reuse_distances",
    "save_schedule",
    "schedule_file",
    "stored_isa",
    "stored_schedule",
    "to_toml",
    "tune",
]
