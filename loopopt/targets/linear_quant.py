"""Per-tensor QuantizeLinear and DequantizeLinear over arrays as compiled C loops (``LinearQuant``), in
onnx.reference's float32 arithmetic, so the same bits as its numpy steps:

* dequantize: ``(float)q - zero_point``, exact for 8-bit values, then times ``scale``, rounded once;
* quantize: ``x / scale`` rounded once (a division, not a product with the reciprocal), ``rintf`` (to
  nearest, ties to even), plus the zero point (exact: an integer), clamped to the 8-bit range; a NaN
  becomes 0 as numpy's cast makes it;
* dequantize and add: the dequantized value plus a float32 residual, rounded once more, then optionally
  numpy's ``maximum(y, 0)`` (a NaN kept, -0.0 made +0.0): DequantizeLinear -> Add (-> Relu) of a QOperator
  residual block in one pass (``onnx/residual_add.py``);
* quantize rotated (``LinearQuant.rotated(rows)``): the quantize loop's values stored with each of ``batch``
  ``rows x cols`` matrices transposed, ``rows`` fixed in the C (an NCHW model input written NHWC, as the
  first conv stores it: ``onnx/elementwise.py``): 128 columns of each row quantized by the one-thread
  quantize loop into a tile, then the tile's columns stored one after another, a loop of constant trip
  counts the compiler vectorizes.

A product followed by a sum (dequantize and add) is kept two roundings by ``-ffp-contract=off``; no other
step is one, so no contraction into a fused multiply-add can change a
rounding (``-ffp-contract=off`` besides). The ONNX backend runs its per-tensor DequantizeLinear and
QuantizeLinear nodes of 8-bit values and float32 scales on them (``onnx/elementwise.py``); a target
gives the flags that let the compiler vectorize the loops (``Target.vector_flags``). Both run on the
threads the caller gives (``threaded_c``: contiguous chunks, one per OpenMP thread).
"""
from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from ..cbuild import compile_c
from ..openmp import OPENMP_FLAG
from .threaded_c import HEADER, THREADS_PARAM, threaded

C_TYPES = {np.dtype(np.uint8): "unsigned char", np.dtype(np.int8): "signed char"}
RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}
FLAGS = ("-ffp-contract=off",)


def quantize_serial(c_type: str) -> str:
    """The declaration of the one-thread quantize loop (a target's vector version defines it too)."""
    return (f"static void lo_quantize_serial(const float *restrict x, {c_type} *restrict q, float scale, "
            "float zero,\n                               long n)")


def portable_quantize_loop(c_type: str, low: int, high: int) -> str:
    """The C of the portable one-thread quantize loop (vectorized by the compiler where it can)."""
    return f"""{quantize_serial(c_type)}
{{
    for (long i = 0; i < n; ++i) {{
        float r = rintf(x[i] / scale) + zero;
        r = r < {low}.0f ? {low}.0f : r;
        r = r > {high}.0f ? {high}.0f : r;
        q[i] = ({c_type})(int)r;
    }}
}}
"""


def _functions(dtype: np.dtype, quantize_loop: str | None) -> tuple[str, str]:
    """The C declarations and definitions of the two loops for the 8-bit ``dtype``, the quantize loop's
    one-thread part ``quantize_loop`` (None: the portable one)."""
    c_type, (low, high) = C_TYPES[dtype], RANGES[dtype]
    dequantize = (f"void lo_dequantize(const {c_type} *q, float *x, float zero, float scale, long n, "
                  f"{THREADS_PARAM})")
    quantize = (f"void lo_quantize(const float *x, {c_type} *q, float scale, float zero, long n, "
                f"{THREADS_PARAM})")
    add = (f"void lo_dequantize_add(const {c_type} *q, const float *r, float *y, float zero, float scale, "
           f"int relu, long n, {THREADS_PARAM})")
    source = f"""#include <math.h>
{HEADER}
static void lo_dequantize_serial(const {c_type} *restrict q, float *restrict x, float zero, float scale,
                                 long n)
{{
    for (long i = 0; i < n; ++i)
        x[i] = ((float)q[i] - zero) * scale;
}}

static void lo_dequantize_add_serial(const {c_type} *restrict q, const float *r, float *y, float zero,
                                     float scale, int relu, long n)
{{
    if (relu)
        for (long i = 0; i < n; ++i) {{
            const float v = ((float)q[i] - zero) * scale + r[i];
            y[i] = v > 0.0f || v != v ? v : 0.0f;
        }}
    else
        for (long i = 0; i < n; ++i)
            y[i] = ((float)q[i] - zero) * scale + r[i];
}}

{quantize_loop or portable_quantize_loop(c_type, low, high)}
{threaded(dequantize, "lo_dequantize_serial(q + lo_begin, x + lo_begin, zero, scale, lo_end - lo_begin)")}
{threaded(quantize, "lo_quantize_serial(x + lo_begin, q + lo_begin, scale, zero, lo_end - lo_begin)")}
{threaded(add, "lo_dequantize_add_serial(q + lo_begin, r + lo_begin, y + lo_begin, zero, scale, relu, "
               "lo_end - lo_begin)")}"""
    return f"{dequantize};\n{quantize};\n{add};", source


ROTATED_BLOCK = 128    # columns of a rotated quantize's tile (32: 40 us on a 3x224x224 input, 128: 35)


def _rotated_functions(dtype: np.dtype, quantize_loop: str | None, rows: int) -> tuple[str, str]:
    """The C declaration and definition of ``lo_quantize_rotated`` for the 8-bit ``dtype`` and ``rows``
    rows, over the quantize loop's one-thread part ``quantize_loop`` (None: the portable one); threaded
    over the ``batch * cols`` columns (each a run of ``rows`` codes of the output)."""
    c_type, (low, high) = C_TYPES[dtype], RANGES[dtype]
    block = ROTATED_BLOCK
    declaration = (f"void lo_quantize_rotated(const float *x, {c_type} *q, float scale, float zero, "
                   f"long cols, long n, {THREADS_PARAM})")
    source = f"""#include <math.h>
{HEADER}
{quantize_loop or portable_quantize_loop(c_type, low, high)}
static void lo_quantize_rotated_serial(const float *restrict x, {c_type} *restrict q, float scale,
                                       float zero, long cols, long begin, long end)
{{
    {c_type} tile[{rows}][{block}];
    long c = begin % cols;
    const float *from = x + begin / cols * {rows} * cols + c;
    for (long p = begin; p < end;) {{
        const long left = cols - c < end - p ? cols - c : end - p;
        const long count = left < {block} ? left : {block};
        {c_type} *to = q + p * {rows};
        for (long r = 0; r < {rows}; ++r)
            lo_quantize_serial(from + r * cols, tile[r], scale, zero, count);
        if (count == {block})
            for (long i = 0; i < {block}; ++i)
                for (long r = 0; r < {rows}; ++r)
                    to[i * {rows} + r] = tile[r][i];
        else
            for (long i = 0; i < count; ++i)
                for (long r = 0; r < {rows}; ++r)
                    to[i * {rows} + r] = tile[r][i];
        p += count;
        c += count;
        from += count;
        if (c == cols) {{      /* the next matrix */
            c = 0;
            from += ({rows} - 1) * cols;
        }}
    }}
}}

{threaded(declaration, "lo_quantize_rotated_serial(x, q, scale, zero, cols, lo_begin, lo_end)", block)}"""
    return f"{declaration};", source


class RotatedQuantize:
    """``quantize(x, q, scale, zero, batch, cols, threads=1)``: ``q`` (``batch x cols x rows`` codes) gets
    ``x`` (``batch x rows x cols`` float32 values) quantized, each matrix transposed, for one ``rows``."""

    def __init__(self, dtype: np.dtype, rows: int, flags: tuple[str, ...], quantize_loop: str | None):
        cdef, source = _rotated_functions(dtype, quantize_loop, rows)
        module = compile_c(source, cdef, (*FLAGS, *flags, OPENMP_FLAG), (OPENMP_FLAG,))
        self.dtype, self.rows, self._ffi, self._lib = dtype, rows, module.ffi, module.lib
        self._codes = f"{C_TYPES[dtype]}[]"

    def bound(self, x: np.ndarray, q: np.ndarray, scale: float, zero: float, batch: int, cols: int,
              threads: int = 1) -> tuple[Callable[..., None], tuple]:
        """The C function and arguments of ``quantize`` (the arguments hold the arrays: a caller may
        repeat the call)."""
        _check_codes(x, q, self.dtype)
        if x.size != batch * self.rows * cols:
            raise ValueError(f"x has {x.size} elements; {batch} x {self.rows} x {cols} rotated needs "
                             f"{batch * self.rows * cols}")
        buffer = self._ffi.from_buffer
        codes = buffer(self._codes, q, require_writable=True)
        return self._lib.lo_quantize_rotated, (buffer("float[]", x), codes, scale, zero, cols, batch * cols,
                                               threads)

    def quantize(self, x: np.ndarray, q: np.ndarray, scale: float, zero: float, batch: int, cols: int,
                 threads: int = 1) -> None:
        """``q[b, c, r] = saturate(rint(x[b, r, c] / scale) + zero)`` over the flat arrays, on ``threads``
        threads."""
        function, arguments = self.bound(x, q, scale, zero, batch, cols, threads)
        function(*arguments)


def _check_codes(floats: np.ndarray, codes: np.ndarray, dtype: np.dtype) -> None:
    """ValueError unless ``floats`` and ``codes`` are contiguous 1-D float32 and ``dtype`` arrays of one
    size."""
    for name, array, wanted in (("x", floats, np.dtype(np.float32)), ("q", codes, dtype)):
        if array.dtype != wanted or array.ndim != 1 or not array.flags.c_contiguous:
            raise ValueError(f"{name} must be a contiguous 1-D {wanted} array, got dtype {array.dtype} "
                             f"shape {array.shape}")
    if floats.size != codes.size:
        raise ValueError(f"x and q differ in size: {floats.size} and {codes.size} elements")


class LinearQuant:
    """``dequantize(q, x, zero, scale, threads=1)``, ``quantize(x, q, scale, zero, threads=1)`` and
    ``dequantize_add(q, r, y, zero, scale, relu=False, threads=1)`` of one 8-bit dtype over contiguous 1-D
    arrays (float32 ``x``, ``r``, ``y``), the quantize loop's one-thread part ``quantize_loop`` where a
    target gives one (its C defines ``quantize_serial``); ``rotated(rows)``: the quantize of
    ``RotatedQuantize``; ``name`` says how it was built."""

    def __init__(self, dtype: np.dtype, flags: tuple[str, ...], quantize_loop: str | None = None,
                 name: str | None = None):
        cdef, source = _functions(np.dtype(dtype), quantize_loop)
        module = compile_c(source, cdef, (*FLAGS, *flags, OPENMP_FLAG), (OPENMP_FLAG,))
        self.dtype, self._ffi, self._lib = np.dtype(dtype), module.ffi, module.lib
        self._codes = f"{C_TYPES[self.dtype]}[]"
        self._flags, self._quantize_loop = flags, quantize_loop
        self._rotated: dict[int, RotatedQuantize] = {}
        self.name = name or f"C loops ({' '.join(flags) or 'no vector flags'})"

    def _check(self, floats: np.ndarray, codes: np.ndarray) -> None:
        _check_codes(floats, codes, self.dtype)

    def rotated(self, rows: int) -> RotatedQuantize:
        """The rotated quantize of ``rows`` rows (built on the first request, with this one's flags and
        quantize loop)."""
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise ValueError(f"rows must be a positive integer, got {rows!r}")
        if rows not in self._rotated:
            self._rotated[rows] = RotatedQuantize(self.dtype, rows, self._flags, self._quantize_loop)
        return self._rotated[rows]

    def bound_dequantize(self, q: np.ndarray, x: np.ndarray, zero: float, scale: float,
                         threads: int = 1) -> tuple[Callable[..., None], tuple]:
        """The C function and arguments of ``dequantize`` (the arguments hold the arrays: a caller may
        repeat the call)."""
        self._check(x, q)
        buffer = self._ffi.from_buffer
        return self._lib.lo_dequantize, (buffer(self._codes, q), buffer("float[]", x, require_writable=True),
                                         zero, scale, q.size, threads)

    def bound_quantize(self, x: np.ndarray, q: np.ndarray, scale: float, zero: float,
                       threads: int = 1) -> tuple[Callable[..., None], tuple]:
        """The C function and arguments of ``quantize``, as ``bound_dequantize``."""
        self._check(x, q)
        buffer = self._ffi.from_buffer
        return self._lib.lo_quantize, (buffer("float[]", x), buffer(self._codes, q, require_writable=True),
                                       scale, zero, x.size, threads)

    def bound_dequantize_add(self, q: np.ndarray, r: np.ndarray, y: np.ndarray, zero: float, scale: float,
                             relu: bool, threads: int = 1) -> tuple[Callable[..., None], tuple]:
        """The C function and arguments of ``dequantize_add``, as ``bound_dequantize``."""
        self._check(r, q)
        self._check(y, q)
        buffer = self._ffi.from_buffer
        return self._lib.lo_dequantize_add, (buffer(self._codes, q), buffer("float[]", r),
                                             buffer("float[]", y, require_writable=True), zero, scale,
                                             int(relu), q.size, threads)

    def dequantize_add(self, q: np.ndarray, r: np.ndarray, y: np.ndarray, zero: float, scale: float,
                       relu: bool = False, threads: int = 1) -> None:
        """``y[i] = (q[i] - zero) * scale + r[i]`` in float32 (each operation rounded), then with ``relu``
        ``maximum(y[i], 0)``, on ``threads`` threads; ``y`` may be ``r`` (in place)."""
        function, arguments = self.bound_dequantize_add(q, r, y, zero, scale, relu, threads)
        function(*arguments)

    def dequantize(self, q: np.ndarray, x: np.ndarray, zero: float, scale: float, threads: int = 1) -> None:
        """``x[i] = (q[i] - zero) * scale`` in float32, on ``threads`` threads."""
        function, arguments = self.bound_dequantize(q, x, zero, scale, threads)
        function(*arguments)

    def quantize(self, x: np.ndarray, q: np.ndarray, scale: float, zero: float, threads: int = 1) -> None:
        """``q[i] = saturate(rint(x[i] / scale) + zero)`` in float32, on ``threads`` threads."""
        function, arguments = self.bound_quantize(x, q, scale, zero, threads)
        function(*arguments)


@cache
def linear_quant(dtype: np.dtype, flags: tuple[str, ...] = ()) -> LinearQuant:
    """The loops of the 8-bit ``dtype`` built with ``flags``, once per process."""
    return LinearQuant(np.dtype(dtype), flags)
