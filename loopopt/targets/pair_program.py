"""Two 8-bit tensors combined element by element in float32 arithmetic that ends in a quantization to 8
bits (``PairProgram``: a quantized residual Add's DequantizeLinear of both, Add, Relu, QuantizeLinear), as a
compiled C function of a target (``PairArith``, ``Target.pair_arith``): the computed alternative to a
pair lookup in the 65,536-byte table of the same steps (``bytemap.PairMap``), whose one byte a pair is a
dependent load a CPU without a fast byte gather serializes on (AVX2: 133 us for 200,704 pairs, the
computed chain 50 us; AMD EPYC Zen 3). A program's C depends on its operations only; its constants
(scales, zero points) are an argument, so the programs of a model's residual adds share one build.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np

from ..cbuild import compile_c
from ..openmp import OPENMP_FLAG
from .threaded_c import HEADER, THREADS_PARAM, threaded

OPS = ("add", "sub", "mul", "max")       # float32 operations, each one IEEE rounding
FUNCTION = "lo_pairprog"
PARAMS = ("const unsigned char *a, const unsigned char *b, unsigned char *dst, const float *constants, "
          "long n")
CDEF = f"void {FUNCTION}({PARAMS}, {THREADS_PARAM});"
SERIAL = f"static void {FUNCTION}_serial({PARAMS})"        # what a target's source defines
Operand = tuple[str, int]     # ("value", index) or ("constant", index)


@dataclass(frozen=True)
class PairProgram:
    """Values 0 and 1: the 8-bit codes of ``a`` and ``b`` (of ``sources``' dtypes) as float32; each of
    ``ops`` (``(kind, lhs, rhs)``, kind one of ``OPS``) appends one value; value ``result`` quantized with
    the constants ``scale`` and ``zero`` (indices into ``constants``) to ``out``, as QuantizeLinear:
    ``saturate(rint(x / scale) + zero)``, a NaN 0."""

    sources: tuple[np.dtype, np.dtype]
    ops: tuple[tuple[str, Operand, Operand], ...]
    result: int
    scale: int
    zero: int
    out: np.dtype
    constants: tuple[float, ...]


@cache
def _compiled(source: str, flags: tuple[str, ...]):
    """The library of a program's ``source`` (one load a process for the programs that share it)."""
    chunk = f"{FUNCTION}_serial(a + lo_begin, b + lo_begin, dst + lo_begin, constants, lo_end - lo_begin)"
    return compile_c(HEADER + source + threaded(CDEF[:-1], chunk), CDEF, (*flags, OPENMP_FLAG),
                     (OPENMP_FLAG,))


class PairArith:
    """A target's compiled ``program`` (``source`` defines ``SERIAL``, built with ``flags``):
    ``pair_arith(a, b, dst, threads=1)`` over contiguous 1-D 8-bit arrays of one size (``dst`` may be
    ``a`` or ``b``), on ``threads`` threads; ``name`` says which code runs it."""

    def __init__(self, program: PairProgram, source: str, flags: tuple[str, ...], name: str):
        module = _compiled(source, flags)
        self.program, self.name = program, name
        self._ffi, self._function = module.ffi, module.lib.lo_pairprog
        self._constants = np.array(program.constants, np.float32)

    def bound(self, a: np.ndarray, b: np.ndarray, dst: np.ndarray,
              threads: int = 1) -> tuple[Callable[..., None], tuple]:
        """The C function and its arguments, after checking the arrays (the arguments hold them: a caller
        may repeat the call)."""
        wanted = (*self.program.sources, self.program.out)
        for name, array, dtype in zip(("a", "b", "dst"), (a, b, dst), wanted):
            if array.dtype != dtype or array.ndim != 1 or not array.flags.c_contiguous:
                raise ValueError(f"{name} must be a contiguous 1-D {np.dtype(dtype)} array, got dtype "
                                 f"{array.dtype} shape {array.shape}")
        if not a.size == b.size == dst.size:
            raise ValueError(f"a, b and dst differ in size: {a.size}, {b.size} and {dst.size} elements")
        buffer = self._ffi.from_buffer
        return self._function, (buffer(a), buffer(b), buffer(dst, require_writable=True),
                                buffer("float[]", self._constants), dst.size, threads)

    def __call__(self, a: np.ndarray, b: np.ndarray, dst: np.ndarray, threads: int = 1) -> None:
        function, arguments = self.bound(a, b, dst, threads)
        function(*arguments)

    def table(self) -> np.ndarray:
        """What it gives for every pair of codes, indexed by ``a``'s bit pattern times 256 plus ``b``'s
        (a pair lookup's table)."""
        patterns = np.arange(256, dtype=np.uint8)
        a, b = (grid.view(dtype) for grid, dtype in zip((np.repeat(patterns, 256), np.tile(patterns, 256)),
                                                        self.program.sources))
        out = np.empty(65536, self.program.out)
        self(a, b, out)
        return out
