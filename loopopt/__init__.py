"""loopopt: explore loop schedules of convolution and matrix multiply.

Build an op (``Conv2d``, ``Matmul``), transform its ``Schedule``, compile it to a
SIMD C kernel, ``measure`` it, and analyse its data locality with ``reuse``.
"""
from .analysis import ReuseProfile, reuse
from .build import Kernel, available_isas
from .cbuild import BuildError
from .measure import Timing, measure, peak_gflops
from .ops import Conv2d, Matmul
from .quant import QuantSpec, dequantize, quant_error, quantize
from .schedule import IllegalScheduleError, Schedule, ScheduleError

__all__ = [
    "Conv2d", "Matmul", "Schedule", "ScheduleError", "IllegalScheduleError", "Kernel", "BuildError",
    "available_isas", "measure", "Timing", "peak_gflops", "reuse", "ReuseProfile",
    "QuantSpec", "quantize", "dequantize", "quant_error",
]
