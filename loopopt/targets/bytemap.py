"""Table lookups over byte arrays as compiled C functions: an 8-bit one, ``dst[i] = table[src[i]]``
(``ByteMap``): the portable loop (``PORTABLE``) that ``Target.byte_map`` builds by default, or a
target's vector version of the same function (x86: AVX-512 VBMI's byte permutes,
``targets/x86/bytemap_c.py``); and one of two bytes, ``dst[i] = table[a[i] * 256 + b[i]]`` in a table
of 65,536 bytes (``PairMap``, ``Target.pair_map``). The ONNX backend runs an elementwise chain on
one 8-bit tensor (DequantizeLinear -> Relu/Clip -> QuantizeLinear between int8 kernels) as one byte
lookup, and one on two (a residual block's DequantizeLinear, Add, Relu, QuantizeLinear) as one pair
lookup. Both run on the threads the caller gives (``threaded_c``: contiguous chunks, one per OpenMP
thread).
"""
from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from ..cbuild import compile_c
from ..openmp import OPENMP_FLAG
from .threaded_c import HEADER, THREADS_PARAM, threaded

FUNCTION = "lo_bytemap"
PARAMS = "const unsigned char *table, const unsigned char *src, unsigned char *dst, long n"
CDEF = f"void {FUNCTION}({PARAMS}, {THREADS_PARAM});"
SERIAL = f"static void {FUNCTION}_serial({PARAMS})"      # what a target's source defines
PORTABLE = f"""{SERIAL}
{{
    for (long i = 0; i < n; ++i)
        dst[i] = table[src[i]];
}}
"""
PAIR_FUNCTION = "lo_pairmap"
PAIR_PARAMS = ("const unsigned char *table, const unsigned char *a, const unsigned char *b, "
               "unsigned char *dst, long n")
PAIR_CDEF = f"void {PAIR_FUNCTION}({PAIR_PARAMS}, {THREADS_PARAM});"
PAIR_SERIAL = f"static void {PAIR_FUNCTION}_serial({PAIR_PARAMS})"
PAIR_PORTABLE = f"""{PAIR_SERIAL}
{{
    for (long i = 0; i < n; ++i)
        dst[i] = table[(unsigned)a[i] << 8 | b[i]];
}}
"""


def _check_bytes(table: np.ndarray, entries: int, **arrays: np.ndarray) -> None:
    """ValueError unless ``table`` is ``entries`` contiguous bytes and ``arrays`` contiguous 1-D byte
    arrays of one size."""
    if table.dtype.itemsize != 1 or table.shape != (entries,) or not table.flags.c_contiguous:
        raise ValueError(f"table must be {entries} contiguous bytes, got dtype {table.dtype} shape "
                         f"{table.shape}")
    for name, array in arrays.items():
        if array.dtype.itemsize != 1 or array.ndim != 1 or not array.flags.c_contiguous:
            raise ValueError(f"{name} must be a contiguous 1-D array of 1-byte elements, got dtype "
                             f"{array.dtype} shape {array.shape}")
    sizes = {name: array.size for name, array in arrays.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"{' and '.join(sizes)} differ in size: "
                         f"{' and '.join(str(n) for n in sizes.values())} elements")


class _Lookup:
    """A compiled lookup (``function``, declared by ``cdef``) in a table of ``entries`` bytes, from a
    source that defines its one-thread loop (``{function}_serial``, whose call on a chunk is ``chunk``),
    built with ``flags``; ``name`` says which code runs it."""

    cdef: str
    function: str
    chunk: str
    entries: int

    def __init__(self, source: str, flags: tuple[str, ...], name: str):
        self.source, self.flags = source, flags
        module = compile_c(HEADER + source + threaded(self.cdef[:-1], self.chunk), self.cdef,
                           (*flags, OPENMP_FLAG), (OPENMP_FLAG,))
        self._ffi, self._function, self.name = module.ffi, getattr(module.lib, self.function), name

    def bound(self, table: np.ndarray, dst: np.ndarray, threads: int = 1,
              **sources: np.ndarray) -> tuple[Callable[..., None], tuple]:
        """The C function and its arguments on ``table``, the ``sources`` in order and ``dst`` on ``threads``
        threads, after checking them all (the arguments hold the arrays: a caller may repeat the call)."""
        _check_bytes(table, self.entries, **sources, dst=dst)
        buffer = self._ffi.from_buffer
        return self._function, (buffer(table), *map(buffer, sources.values()),
                                buffer(dst, require_writable=True), dst.size, threads)

    def _run(self, table: np.ndarray, dst: np.ndarray, threads: int, **sources: np.ndarray) -> None:
        """The function on ``table``, the ``sources`` in order and ``dst`` on ``threads`` threads, after
        checking them all."""
        function, arguments = self.bound(table, dst, threads, **sources)
        function(*arguments)


class ByteMap(_Lookup):
    """``byte_map(table, src, dst, threads=1)``: ``dst[i] = table[src[i]]`` over 1-byte arrays (``dst`` may
    be ``src``: in place), on ``threads`` threads."""

    cdef, function, entries = CDEF, FUNCTION, 256
    chunk = f"{FUNCTION}_serial(table, src + lo_begin, dst + lo_begin, lo_end - lo_begin)"

    def __call__(self, table: np.ndarray, src: np.ndarray, dst: np.ndarray, threads: int = 1) -> None:
        self._run(table, dst, threads, src=src)


class PairMap(_Lookup):
    """``pair_map(table, a, b, dst, threads=1)``: ``dst[i] = table[a[i] * 256 + b[i]]`` over 1-byte arrays
    (``dst`` may be ``a`` or ``b``: in place), on ``threads`` threads."""

    cdef, function, entries = PAIR_CDEF, PAIR_FUNCTION, 65536
    chunk = f"{PAIR_FUNCTION}_serial(table, a + lo_begin, b + lo_begin, dst + lo_begin, lo_end - lo_begin)"

    def __call__(self, table: np.ndarray, a: np.ndarray, b: np.ndarray, dst: np.ndarray,
                 threads: int = 1) -> None:
        self._run(table, dst, threads, a=a, b=b)


@cache
def portable_byte_map() -> ByteMap:
    """The portable C loop, built once per process."""
    return ByteMap(PORTABLE, (), "portable C")


@cache
def portable_pair_map() -> PairMap:
    """The portable C loop of the pair lookup, built once per process."""
    return PairMap(PAIR_PORTABLE, (), "portable C")
