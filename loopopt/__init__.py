"""loopopt: explore loop schedules of convolution and matrix multiply.

Build an op (``Conv2d``, ``Matmul``), transform its ``Schedule``, compile it to a
SIMD C kernel, ``measure`` it, and analyse its data locality with ``reuse``.
"""
from . import accuracy, dataflows, schedule_file
from .accuracy import AccuracyReport, quant_accuracy
from .analysis import Machine, ReuseProfile, reuse, reuse_distances
from .cbuild import BuildError
from .codegen.isa import available_isas
from .compare import Comparison, compare
from .kernel import Kernel
from .layers import get_layer, list_layers
from .measure import Timing, measure, peak_gflops
from .model import KernelModel, kernel_model
from .ops import Conv2d, Matmul
from .quant import QuantSpec, dequantize, quant_error, quantize
from .schedule import IllegalScheduleError, Schedule, ScheduleError
from .schedule_file import ScheduleFileError, list_schedules, load_schedule, save_schedule, to_toml

__all__ = [
    "Conv2d", "Matmul", "Schedule", "ScheduleError", "IllegalScheduleError", "Kernel", "BuildError",
    "available_isas", "measure", "Timing", "peak_gflops", "kernel_model", "KernelModel",
    "reuse", "ReuseProfile", "reuse_distances", "Machine",
    "dataflows", "compare", "Comparison", "get_layer", "list_layers",
    "load_schedule", "save_schedule", "to_toml", "list_schedules", "ScheduleFileError", "schedule_file",
    "QuantSpec", "quantize", "dequantize", "quant_error", "quant_accuracy", "AccuracyReport", "accuracy",
]
