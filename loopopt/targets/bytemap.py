"""An 8-bit table lookup over a byte array, ``dst[i] = table[src[i]]``, as a compiled C function
(``ByteMap``): the portable loop (``PORTABLE``) that ``Target.byte_map`` builds by default, or a
target's vector version of the same function (x86: AVX-512 VBMI's byte permutes,
``targets/x86/bytemap_c.py``). The ONNX backend runs an elementwise chain on an 8-bit tensor
(DequantizeLinear -> Relu/Clip -> QuantizeLinear between int8 kernels) as one such lookup.
"""
from __future__ import annotations

from functools import cache

import numpy as np

from ..cbuild import compile_c

FUNCTION = "lo_bytemap"
CDEF = f"void {FUNCTION}(const unsigned char *table, const unsigned char *src, unsigned char *dst, long n);"
PORTABLE = f"""{CDEF[:-1]}
{{
    for (long i = 0; i < n; ++i)
        dst[i] = table[src[i]];
}}
"""


class ByteMap:
    """``byte_map(table, src, dst)``: ``dst[i] = table[src[i]]`` over 1-byte arrays (``dst`` may be
    ``src``: in place); ``name`` says which code runs it."""

    def __init__(self, source: str, flags: tuple[str, ...], name: str):
        module = compile_c(source, CDEF, flags)
        self._ffi, self._function, self.name = module.ffi, getattr(module.lib, FUNCTION), name

    def __call__(self, table: np.ndarray, src: np.ndarray, dst: np.ndarray) -> None:
        if table.dtype.itemsize != 1 or table.shape != (256,) or not table.flags.c_contiguous:
            raise ValueError(f"table must be 256 contiguous bytes, got dtype {table.dtype} shape "
                             f"{table.shape}")
        for name, array in (("src", src), ("dst", dst)):
            if array.dtype.itemsize != 1 or array.ndim != 1 or not array.flags.c_contiguous:
                raise ValueError(f"{name} must be a contiguous 1-D array of 1-byte elements, got dtype "
                                 f"{array.dtype} shape {array.shape}")
        if src.size != dst.size:
            raise ValueError(f"src and dst differ in size: {src.size} and {dst.size} elements")
        buffer = self._ffi.from_buffer
        self._function(buffer(table), buffer(src), buffer(dst, require_writable=True), src.size)


@cache
def portable_byte_map() -> ByteMap:
    """The portable C loop, built once per process."""
    return ByteMap(PORTABLE, (), "portable C")
