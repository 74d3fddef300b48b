"""Float32 elementwise loops over arrays as compiled C, on the threads the caller gives (``threaded_c``):
``relu`` (numpy's ``maximum(x, 0)``: a NaN kept, -0.0 made +0.0) and ``add``, ``subtract``, ``multiply``,
``divide`` of two arrays of one length (one IEEE operation each, so numpy's bits). The ONNX backend runs
its Relu and same-shape Add/Sub/Mul/Div nodes of float32 tensors stored in one memory order on them
(``onnx/elementwise.py``): numpy's ran on one thread, 11% and 15% of a one-thread run's node time in
ResNet-18 and ResNet-50 int8 (QOperator: the residual Add and Relu between a DequantizeLinear and a
QuantizeLinear); a target gives the flags that let the compiler vectorize them (``Target.vector_flags``).
"""
from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from ..cbuild import compile_c
from ..openmp import OPENMP_FLAG
from .threaded_c import HEADER, THREADS_PARAM, threaded

FLAGS = ("-ffp-contract=off",)
OPERATORS = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/"}   # numpy's name -> C's operator
UNARY = f"void lo_relu(const float *x, float *y, long n, {THREADS_PARAM})"


def _binary(name: str) -> str:
    return f"void lo_{name}(const float *a, const float *b, float *y, long n, {THREADS_PARAM})"


def _source() -> tuple[str, str]:
    """The C declarations and definitions of the loops."""
    serial = ["static void lo_relu_serial(const float *x, float *y, long n)\n{\n"
              "    for (long i = 0; i < n; ++i)\n"
              "        y[i] = x[i] > 0.0f || x[i] != x[i] ? x[i] : 0.0f;\n}\n",
              *(f"static void lo_{name}_serial(const float *a, const float *b, float *y, long n)\n{{\n"
                f"    for (long i = 0; i < n; ++i)\n        y[i] = a[i] {operator} b[i];\n}}\n"
                for name, operator in OPERATORS.items())]
    wrappers = [threaded(UNARY, "lo_relu_serial(x + lo_begin, y + lo_begin, lo_end - lo_begin)"),
                *(threaded(_binary(name), f"lo_{name}_serial(a + lo_begin, b + lo_begin, y + lo_begin, "
                                          "lo_end - lo_begin)") for name in OPERATORS)]
    cdef = "\n".join(f"{declaration};" for declaration in (UNARY, *map(_binary, OPERATORS)))
    return cdef, HEADER + "\n".join(serial + wrappers)


class FloatMap:
    """``relu(x, y, threads=1)`` and ``binary(name, a, b, y, threads=1)`` (``name`` one of ``OPERATORS``)
    over contiguous 1-D float32 arrays of one length (``y`` may be an input: in place)."""

    def __init__(self, flags: tuple[str, ...]):
        cdef, source = _source()
        module = compile_c(source, cdef, (*FLAGS, *flags, OPENMP_FLAG), (OPENMP_FLAG,))
        self._ffi, self._lib = module.ffi, module.lib

    def _buffers(self, *arrays: np.ndarray) -> list:
        """cffi buffers of the inputs and (last) the output, after checking them."""
        for array in arrays:
            if array.dtype != np.float32 or array.ndim != 1 or not array.flags.c_contiguous:
                raise ValueError(f"FloatMap takes contiguous 1-D float32 arrays, got dtype {array.dtype} "
                                 f"shape {array.shape}")
        if len({array.size for array in arrays}) != 1:
            raise ValueError(f"the arrays differ in size: {', '.join(str(a.size) for a in arrays)} elements")
        buffer = self._ffi.from_buffer
        *inputs, output = arrays
        return [*(buffer("float[]", a) for a in inputs), buffer("float[]", output, require_writable=True)]

    def bound_relu(self, x: np.ndarray, y: np.ndarray, threads: int = 1) -> tuple[Callable[..., None], tuple]:
        """The C function and arguments of ``relu`` (the arguments hold the arrays: a caller may repeat
        the call)."""
        return self._lib.lo_relu, (*self._buffers(x, y), x.size, threads)

    def bound_binary(self, name: str, a: np.ndarray, b: np.ndarray, y: np.ndarray,
                     threads: int = 1) -> tuple[Callable[..., None], tuple]:
        """The C function and arguments of ``binary``, as ``bound_relu``."""
        if name not in OPERATORS:
            raise ValueError(f"FloatMap computes {', '.join(OPERATORS)}, not {name!r}")
        return getattr(self._lib, f"lo_{name}"), (*self._buffers(a, b, y), a.size, threads)

    def relu(self, x: np.ndarray, y: np.ndarray, threads: int = 1) -> None:
        """``y[i] = maximum(x[i], 0)`` as numpy computes it, on ``threads`` threads."""
        function, arguments = self.bound_relu(x, y, threads)
        function(*arguments)

    def binary(self, name: str, a: np.ndarray, b: np.ndarray, y: np.ndarray, threads: int = 1) -> None:
        """``y[i] = a[i] OP b[i]`` for the numpy ufunc ``name`` (one of ``OPERATORS``), on ``threads``
        threads."""
        function, arguments = self.bound_binary(name, a, b, y, threads)
        function(*arguments)


@cache
def float_map(flags: tuple[str, ...] = ()) -> FloatMap:
    """The loops built with ``flags``, once per process."""
    return FloatMap(flags)
