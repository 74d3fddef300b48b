"""The cuda target: bound schedules as float32 SIMT CUDA C (``printer``), built by nvcc into the
kernel cache (``toolchain``), run and timed through CuPy (``device``, ``kernel``), and emulated on
the host without a GPU (``emulate``)."""
from .target import TARGET

__all__ = ["TARGET"]
