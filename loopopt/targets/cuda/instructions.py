"""The matrix instructions ``Schedule.tensorize`` maps three loops onto: for each, its fragment
shape (``m x n x k``), its element types, the architecture it needs, and two code templates of the
same operations on fragments: ``cuda`` (the warp-wide instruction) and ``scalar`` (its meaning as
plain C loops over one fragment's elements, which the host emulation compiles and runs).

A fragment operation's template is formatted with ``acc``/``a``/``b`` (fragment expressions),
``ptr`` (the shared-memory tile of its first element) and ``ld`` (the tile's row length in
elements). The tiles are row-major ``m x k`` (A), ``n x k`` (B, i.e. B column-major) and ``m x n``
(the accumulator, float32).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FragmentCode:
    """One spelling of an instruction's fragment operations (see the module docstring)."""

    half: str              # the element type of the inputs
    declare_a: str         # {name}, {count}: an array of A fragments
    declare_b: str
    declare_acc: str
    fill: str              # {acc} = 0
    load_a: str            # {a} <- tile {ptr}, {ld}
    load_b: str
    mma: str               # {acc} += {a} x {b}
    store: str             # tile {ptr}, {ld} (float) <- {acc}


@dataclass(frozen=True)
class MatrixInstruction:
    """A warp-wide matrix multiply-accumulate: ``acc[m x n] += a[m x k] @ b[k x n]``."""

    name: str
    m: int
    n: int
    k: int
    inputs: str            # the op dtype it multiplies
    accumulator: str
    arch: str              # the oldest architecture that has it (sm_XY)
    header: str            # what the CUDA source includes for it
    cuda: FragmentCode
    scalar: FragmentCode

    @property
    def fragment_elements(self) -> int:
        return self.m * self.n


_WMMA = "nvcuda::wmma::"
_FRAGMENT = f"{_WMMA}fragment<{_WMMA}{{role}}, 16, 16, 16, {{type}}{{layout}}> {{{{name}}}}[{{{{count}}}}];"


def _wmma_declaration(role: str, element: str, layout: str = "") -> str:
    return _FRAGMENT.format(role=role, type=element, layout=f", {_WMMA}{layout}" if layout else "")


_EACH = "for (int lo_e = 0; lo_e < 256; ++lo_e) "
WMMA_F16_F32 = MatrixInstruction(
    name="wmma_m16n16k16_f16_f32", m=16, n=16, k=16, inputs="float16", accumulator="float32", arch="sm_70",
    header="#include <mma.h>\n#include <cuda_fp16.h>\n#include <cuda_pipeline.h>",
    cuda=FragmentCode(
        half="__half",
        declare_a=_wmma_declaration("matrix_a", "__half", "row_major"),
        declare_b=_wmma_declaration("matrix_b", "__half", "col_major"),
        declare_acc=_wmma_declaration("accumulator", "float"),
        fill=f"{_WMMA}fill_fragment({{acc}}, 0.0f);",
        load_a=f"{_WMMA}load_matrix_sync({{a}}, {{ptr}}, {{ld}});",
        load_b=f"{_WMMA}load_matrix_sync({{b}}, {{ptr}}, {{ld}});",
        mma=f"{_WMMA}mma_sync({{acc}}, {{a}}, {{b}}, {{acc}});",
        store=f"{_WMMA}store_matrix_sync({{ptr}}, {{acc}}, {{ld}}, {_WMMA}mem_row_major);"),
    # the same on the host: a fragment is its 256 elements row by row (B: k rows of n)
    scalar=FragmentCode(
        half="float",
        declare_a="float {name}[{count}][256];",
        declare_b="float {name}[{count}][256];",
        declare_acc="float {name}[{count}][256];",
        fill=_EACH + "{acc}[lo_e] = 0.0f;",
        load_a=_EACH + "{a}[lo_e] = {ptr}[lo_e / 16 * {ld} + lo_e % 16];",
        load_b=_EACH + "{b}[lo_e] = {ptr}[lo_e % 16 * {ld} + lo_e / 16];",
        mma=(_EACH + "for (int lo_q = 0; lo_q < 16; ++lo_q) "
             "{acc}[lo_e] += {a}[lo_e / 16 * 16 + lo_q] * {b}[lo_q * 16 + lo_e % 16];"),
        store=_EACH + "{ptr}[lo_e / 16 * {ld} + lo_e % 16] = {acc}[lo_e];"))

INSTRUCTIONS = {i.name: i for i in (WMMA_F16_F32,)}


def instruction(name: str) -> MatrixInstruction:
    """The table's entry ``name``; ValueError naming the known ones."""
    if name not in INSTRUCTIONS:
        raise ValueError(f"unknown matrix instruction {name!r}; known: {', '.join(INSTRUCTIONS)}")
    return INSTRUCTIONS[name]
