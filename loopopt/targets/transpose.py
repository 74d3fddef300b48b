"""Batched 2-D transposes as compiled C loops: ``dst[b][c][r] = src[b][r][c]`` over contiguous arrays of
1-, 2- or 4-byte elements (``Transpose``). A kernel call packs its activations with them where the
storage layout moves a run of dims past the ones after them (``Layout.rotation``: NCHW -> NHWC is one
image's C x HW matrix transposed, NCHW -> NCHW16c each block of 16 channels' 16 x HW), instead of
numpy's strided copy. The loops walk 16 x 16 tiles; a target may give a whole tile of an element size
its own vector code (x86: AVX-512 or AVX2 shuffles of 4-byte elements, SSE2 unpacks of bytes,
``targets/x86/transpose_c.py``) and the flags that let the compiler vectorize the rest
(``Target.vector_flags``).
"""
from __future__ import annotations

from collections.abc import Mapping
from functools import cache

import numpy as np

from ..cbuild import compile_c

C_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int"}
TILE = 16
SCALAR_TILE = """for (long c = 0; c < {tile}; ++c)
                        for (long r = 0; r < {tile}; ++r)
                            dst[(c0 + c) * rows + r0 + r] = src[(r0 + r) * cols + c0 + c];"""


def source(tiles: Mapping[int, str] | None = None, prelude: str = "", storage: str = "") -> tuple[str, str]:
    """The C declarations and definitions of the transposes, one per element size; ``tiles``: by element
    size, the C of a whole 16 x 16 tile at ``src + r0 * cols + c0`` into ``dst + c0 * rows + r0`` (a
    function of ``prelude``), else the scalar loops; ``storage``: the functions' storage class
    (``"static "`` where another kernel's C file holds them)."""
    cdefs, bodies = [], []
    for size, c_type in C_TYPES.items():
        signature = (f"{storage}void lo_transpose_{size}(const {c_type} *src, {c_type} *dst, long batch, "
                     "long rows, long cols)")
        tile = (tiles or {}).get(size) or SCALAR_TILE.format(tile=TILE)
        cdefs.append(f"{signature};")
        bodies.append(f"""{signature.replace('*src', '*restrict src').replace('*dst', '*restrict dst')}
{{
    for (long b = 0; b < batch; ++b, src += rows * cols, dst += rows * cols)
        for (long r0 = 0; r0 < rows; r0 += {TILE})
            for (long c0 = 0; c0 < cols; c0 += {TILE}) {{
                const long r1 = r0 + {TILE} < rows ? r0 + {TILE} : rows;
                const long c1 = c0 + {TILE} < cols ? c0 + {TILE} : cols;
                if (r1 - r0 == {TILE} && c1 - c0 == {TILE}) {{
                    {tile}
                }} else {{
                    for (long c = c0; c < c1; ++c)
                        for (long r = r0; r < r1; ++r)
                            dst[c * rows + r] = src[r * cols + c];
                }}
            }}
}}
""")
    return "\n".join(cdefs), prelude + "\n".join(bodies)


class Transpose:
    """``transpose(src, dst, batch, rows, cols)``: ``dst`` (contiguous, ``batch x cols x rows``) gets
    ``src`` (contiguous, ``batch x rows x cols``) with each matrix transposed; ``name`` says which code
    runs it; ``static_source``: the same loops as static C functions ``lo_transpose_<size>`` (for a
    kernel's C file that transposes blocks of its own; built with the same ``flags``)."""

    def __init__(self, flags: tuple[str, ...], name: str, tiles: Mapping[int, str] | None = None,
                 prelude: str = ""):
        cdef, code = source(tiles, prelude)
        module = compile_c(code, cdef, flags)
        self._ffi, self._lib, self.name = module.ffi, module.lib, name
        self.static_source = source(tiles, prelude, "static ")[1]

    def __call__(self, src: np.ndarray, dst: np.ndarray, batch: int, rows: int, cols: int) -> None:
        size = src.dtype.itemsize
        if size not in C_TYPES or dst.dtype.itemsize != size:
            raise ValueError(f"transpose takes arrays of one element size among {sorted(C_TYPES)} bytes, got "
                             f"{src.dtype} and {dst.dtype}")
        for name, array in (("src", src), ("dst", dst)):
            if not array.flags.c_contiguous or array.size != batch * rows * cols:
                strided = "" if array.flags.c_contiguous else " (not contiguous)"
                raise ValueError(f"{name} must be contiguous with {batch} x {rows} x {cols} elements, got "
                                 f"shape {array.shape}{strided}")
        pointer, buffer = f"{C_TYPES[size]}[]", self._ffi.from_buffer
        run = getattr(self._lib, f"lo_transpose_{size}")
        run(buffer(pointer, src), buffer(pointer, dst, require_writable=True), batch, rows, cols)


@cache
def portable_transpose(flags: tuple[str, ...] = ()) -> Transpose:
    """The scalar tile loops built with ``flags`` (a target's ``vector_flags``), once per process."""
    return Transpose(flags, f"portable C {' '.join(flags)}".strip())
