"""loopopt: explore loop schedules of convolution and matrix multiply.

Build an op (``Conv2d``, ``Matmul``), transform its ``Schedule``, compile it to a
SIMD C kernel, ``measure`` it, and analyse its data locality with ``reuse``.
"""
from . import accuracy, dataflows, schedule_file
from .accuracy import AccuracyReport, quant_accuracy
from .analysis import Machine, ReuseProfile, reuse, reuse_distances
from .buffers import MemoryLimitError
from .codegen.isa import available_isas
from .kernel import Kernel
from .cbuild import BuildError
from .compare import Comparison, compare
from .layers import get_layer, list_layers
from .measure import Timing, measure, peak_gflops
from .ops import Conv2d, Matmul
from .quant import QuantSpec, dequantize, quant_error, quantize
from .schedule import IllegalScheduleError, Schedule, ScheduleError
from .schedule_file import ScheduleFileError, list_schedules, load_schedule, save_schedule, to_toml

__all__ = [
    "Conv2d", "Matmul", "Schedule", "ScheduleError", "IllegalScheduleError", "Kernel", "BuildError",
    "MemoryLimitError",
    "available_isas", "measure", "Timing", "peak_gflops", "reuse", "ReuseProfile", "reuse_distances", "Machine",
    "dataflows", "compare", "Comparison", "get_layer", "list_layers",
    "load_schedule", "save_schedule", "to_toml", "list_schedules", "ScheduleFileError",
    "QuantSpec", "quantize", "dequantize", "quant_error", "quant_accuracy", "AccuracyReport",
]
