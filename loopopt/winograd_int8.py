"""int8 Winograd F(2x2, 3x3) of a quantized 2-D conv, exact: the accumulators are the direct conv's.

With ``d = x - zx`` (the zero-point-shifted activations; padding is ``d = 0``) and ``w' = w - zw[k]``:

    4 acc = A^T [ sum_c ((2G) w' (2G)^T) . (B^T d B) ] A

``2G`` is an integer matrix (Lavin & Gray's G has halves), so every stage is integer arithmetic:

* input transform ``V = B^T d B``: ``|d| <= 255`` and each row of ``B^T`` has two entries +-1, so
  ``|V| <= 4 * 255``: int16;
* filter transform ``U = (2G) w' (2G)^T`` (in ``prepare``, int64, stored int16): ``|U| <= 9 * 255``;
* batched GEMM ``M = sum_c V U`` in int32 on int16 pairs (``vpdpwssd`` on AVX-512 VNNI, ``vpmaddwd``
  on AVX2);
* output transform ``Y' = A^T M A`` in int32, then ``acc = Y' >> 2`` and the direct kernels'
  epilogue (bias, scales, requantization).

Exactness: every stage is a ring operation (additions and multiplications by integers), so with
wrapping int32 arithmetic (``-fwrapv``) ``Y'`` is ``4 acc`` modulo 2^32, and it is ``4 acc`` itself
whenever ``|acc| < 2^29``. The worst case ``|acc| <= 9 C 255 max|w'|`` stays below that for ``C <=
max_channels(spec)`` (1827 input channels for symmetric weights, where ``|w'| <= 128``; 917 for
weights with any zero point, ``|w'| <= 255``): larger ops are refused.

F(4x4, 3x3) is refused: its ``G`` has denominators 4, 6 and 24 per axis, so an integer version scales
the accumulators by 576 = 2^6 * 9 and int32 keeps them only modulo 2^26 (exact for ``|acc| < 2^25``),
which the worst case exceeds from C = 115 input channels on (and its input transform reaches
``100 * 255``, within int16 only just).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .buffers import aligned_zeros, check_memory
from .cbuild import compile_c
from .codegen.quantized import QUANT_FLAGS
from .ops import Op
from .quant import check_call, output_multipliers
from .targets.x86.isa import INT_ISAS, named_isa, require_cpu
from .targets.x86.winograd_int8 import (
    BLOCKS,
    CTYPES,
    G2,
    LANES,
    POSITIONS,
    TEMPORARIES,
    TILE,
    TUNE_BLOCKS,
    Int8WinogradShape,
    cdef,
    compile_flags,
    generate_winograd_int8,
)
from .targets.x86.winograd_int8 import pseudocode as stage_pseudocode

ALGORITHM = "winograd F(2x2,3x3)"      # winograd.algorithm_name(2)
EXACT_LIMIT = 2**29                    # |acc| below this: 4 acc fits int32
STAGES = ("input_transform", "gemm", "output_transform")


def tune_blocks(isa: str) -> tuple[tuple[int, int], ...]:
    """The GEMM blocks (``gemm_rows``, ``gemm_cols``) ``lo.tune`` tries besides the default on ``isa``."""
    return TUNE_BLOCKS.get(isa, ())


def largest_weight(spec) -> int:
    """The largest ``|w - zw|`` ``spec``'s weights allow: 128 for symmetric weights (int8 with zero
    point 0, uint8 with 128), 255 for any zero point."""
    return 128 if spec.weight_symmetric else 255


def max_channels(spec) -> int:
    """The most input channels for which ``4 acc`` fits int32 for every input (module docstring)."""
    return (EXACT_LIMIT - 1) // (9 * 255 * largest_weight(spec))


def refusal(op: Op, m: int) -> str:
    """Why int8 Winograd F(m x m, 3x3) does not apply to the quantized 2-D conv ``op`` ("" if it does);
    the caller has checked the kernel size, stride, dilation and groups."""
    spec = op.quant
    if m != TILE:
        return (f"int8 winograd is F(2x2,3x3) only (m=2), got m={m}: F(4x4,3x3)'s filter transform has "
                f"denominators 4, 6 and 24 per axis, so exact integer arithmetic scales the accumulators "
                f"by 576 = 2^6 * 9 and int32 keeps them only modulo 2^26, exact for |acc| < 2^25, which "
                f"3x3 sums of 8-bit products exceed from 115 input channels on")
    if spec.ternary or spec.binary:
        return (f"int8 winograd takes int8 or uint8 weights and activations, got {spec!r}; ternary and "
                f"binary ops have kernels of their own")
    channels = op.tensor(op.inputs[0]).shape[1]
    if channels > max_channels(spec):
        kind = "symmetric" if spec.weight_symmetric else "asymmetric"
        return (f"int8 winograd is exact while 4 x the accumulator fits int32: with {kind} {spec.weight} "
                f"weights (|w - zw| <= {largest_weight(spec)}) that holds for every input up to "
                f"{max_channels(spec)} input channels, got {channels}")
    return ""


def shape_of(op: Op, isa: str, rows: int | None = None, channels: int | None = None) -> Int8WinogradShape:
    """The pipeline's extents for ``op`` on ``isa``, the GEMM register-blocked ``rows`` tiles x ``channels``
    output channels (a multiple of the ISA's int32 lanes; defaults ``BLOCKS``)."""
    n, c, h, w = op.tensor(op.inputs[0]).shape
    (wh, ww) = op.windows
    lanes = LANES[isa]
    default_rows, default_vectors = BLOCKS[isa]
    rows = default_rows if rows is None else rows
    vectors = default_vectors if channels is None else channels // lanes
    if channels is not None and (channels % lanes or channels < lanes):
        raise ValueError(f"gemm_cols={channels} must be a positive multiple of the {lanes} int32 lanes of "
                         f"{isa}")
    spare, registers = TEMPORARIES[isa], INT_ISAS[isa].registers
    if rows < 1 or rows * vectors + vectors + spare > registers:
        raise ValueError(f"a {rows} x {vectors} block of int32 vectors and its operands do not fit the "
                         f"{registers} vector registers of {isa}: choose gemm_rows * gemm_cols / "
                         f"{lanes} + gemm_cols / {lanes} + {spare} <= {registers}")
    return Int8WinogradShape(n, c, op.channels, h, w, wh.out, ww.out, wh.pad, ww.pad, lanes, rows, vectors)


class Int8WinogradPlan:
    """int8 Winograd F(2x2, 3x3) of a quantized 2-D conv: a fixed three-stage pipeline (input
    transform, batched int16 GEMM, output transform with the epilogue), whose GEMM is register-blocked
    ``gemm_rows`` tiles x ``gemm_cols`` output channels (None: the ISA's default, ``BLOCKS``).
    ``compile`` builds it for an ISA."""

    m = TILE
    algorithm = ALGORITHM
    stages = STAGES

    def __init__(self, op: Op, gemm_rows: int | None = None, gemm_cols: int | None = None):
        self.op, self.gemm_rows, self.gemm_cols = op, gemm_rows, gemm_cols

    def __repr__(self) -> str:
        return f"<Int8WinogradPlan {self.algorithm} of {self.op!r}: {', '.join(self.stages)}>"

    @property
    def schedules(self) -> dict:
        """No stage is a Schedule (the three stages are generated as they are): empty."""
        return {}

    def pseudocode(self, isa: str = "auto") -> str:
        """The three stages' loop nests for ``isa`` as readable pseudo-code (``Schedule.pseudocode``'s
        counterpart: the stages are generated C, not schedules)."""
        name = named_isa(isa, integer=True)
        shape = shape_of(self.op, name, self.gemm_rows, self.gemm_cols)
        return "\n".join([f"# {self.op!r}", f"# {self.algorithm}", *stage_pseudocode(shape, name)])

    def compile(self, isa: str = "auto") -> "Int8WinogradKernel":
        """Generate and build the three stages for ``isa`` (``auto``: the best integer ISA here)."""
        name = named_isa(isa, integer=True)
        shape = shape_of(self.op, name, self.gemm_rows, self.gemm_cols)    # a bad block: on every CPU
        source = generate_winograd_int8(repr(self.op), shape, self.op.quant, self.op.bias, name)
        require_cpu(name, integer=True)
        module = compile_c(source, cdef(self.op.quant), compile_flags(name) + QUANT_FLAGS)
        return Int8WinogradKernel(self, shape, name, source, module)


def filter_transform(wq: np.ndarray, w_zero_point: np.ndarray, s: Int8WinogradShape) -> np.ndarray:
    """``U[t][c / 2][k][2]`` = ``((2G) (w - zw[k]) (2G)^T)[t]`` of channel pair ``c / 2``, int16, channels
    zero-padded to ``s.cpad`` and ``s.kpad``."""
    w = wq.astype(np.int64) - np.asarray(w_zero_point, np.int64).reshape(-1, 1, 1, 1)
    g = np.array(G2, np.int64)
    u = np.einsum("ai,kcij,bj->abck", g, w, g).reshape(POSITIONS, s.c, s.k)
    padded = np.zeros((POSITIONS, s.cpad, s.kpad), np.int16)
    padded[:, :s.c, :s.k] = u
    return np.ascontiguousarray(padded.reshape(POSITIONS, s.cpad // 2, 2, s.kpad).transpose(0, 1, 3, 2))


def pack_activations(xq: np.ndarray, x_zero_point: int, s: Int8WinogradShape) -> np.ndarray:
    """``xq`` (NCHW) as padded NHWC: the padding, the rows and columns the last tiles run past and the
    channels past ``C`` hold the zero point (``d = x - zx = 0``)."""
    packed = aligned_zeros(s.activations_shape, xq.dtype)
    packed[...] = x_zero_point
    packed[:, s.ph:s.ph + s.h, s.pw:s.pw + s.w, :s.c] = xq.transpose(0, 2, 3, 1)
    return packed


def call_arrays(op: Op, arrays: tuple) -> list:
    """A Winograd kernel call's arrays, one per call tensor of ``op`` (a trailing None bias dropped);
    ValueError if their number is wrong."""
    given = list(arrays)
    if len(given) == len(op.call_tensors) + 1 and given[-1] is None:
        given.pop()
    if len(given) != len(op.call_tensors):
        raise ValueError(f"kernel takes {len(op.call_tensors)} arrays ({', '.join(op.call_tensors)}), "
                         f"got {len(given)}")
    return given


@dataclass
class Int8WinogradBuffers:
    """The arrays of one call and each stage's C arguments."""

    arrays: dict[str, np.ndarray]
    arguments: dict[str, tuple]


class Int8WinogradKernel:
    """A compiled Int8WinogradPlan, called like the direct quantized kernels:
    ``kernel(xq, wq, b, x_scale=, x_zero_point=, w_scale=, w_zero_point=, y_scale=, y_zero_point=)``.

    ``prepare`` validates the call (``quant.check_call``), packs the activations (padded NHWC),
    transforms the filter and computes the multipliers; ``run`` runs the three stages (the timed
    part); ``output`` moves the NHWC output to NCHW."""

    threads = 1
    epilogue = None      # no clip fused (``Kernel.epilogue``)

    def __init__(self, plan: Int8WinogradPlan, shape: Int8WinogradShape, isa: str, source: str, module):
        self.plan, self.op, self.shape, self.isa, self.source = plan, plan.op, shape, isa, source
        self.algorithm = plan.algorithm
        self._ffi, self._lib = module.ffi, module.lib

    def __repr__(self) -> str:
        return f"<Int8WinogradKernel {self.algorithm} {self.isa} for {self.op!r}>"

    def set_threads(self, n: int) -> None:
        """The pipeline runs on one thread; ValueError for more."""
        if n != 1:
            raise ValueError(f"the int8 winograd pipeline runs on one thread (no parallel loop), "
                             f"got threads={n!r}")

    def buffer_bytes(self) -> dict[str, int]:
        """Bytes ``prepare`` allocates: packed activations and filter, the intermediate ``V`` and ``M``."""
        s, dtype = self.shape, np.dtype(self.op.quant.activation)
        packed = math.prod(s.activations_shape) * dtype.itemsize + 2 * math.prod(s.filter_shape)
        return {"packed buffers": packed,
                "workspace": 2 * math.prod(s.input_shape) + 4 * math.prod(s.product_shape)}

    def call_bytes(self) -> dict[str, int]:
        """Bytes of one call on new inputs (see ``Kernel.call_bytes``)."""
        op = self.op
        inputs = 4 * sum(math.prod(op.tensor(t).shape) for t in op.call_tensors)
        output = math.prod(op.tensor(op.output).shape) * np.dtype(op.quant.output).itemsize
        return {"inputs": inputs, **self.buffer_bytes(), "output": output}

    def _given(self, arrays: tuple) -> list[np.ndarray]:
        op = self.op
        given = call_arrays(op, arrays)
        for name, array in zip(op.call_tensors, given):
            if not isinstance(array, np.ndarray):
                raise TypeError(f"{name} must be a numpy array, got {type(array).__name__}")
            if name in op.inputs and array.shape != op.tensor(name).shape:
                raise ValueError(f"{name} has shape {array.shape}; {op!r} expects {op.tensor(name).shape}")
        return given

    def prepare(self, *arrays: np.ndarray, **params: Any) -> Int8WinogradBuffers:
        """Validate the call, pack the activations, transform the filter, bind the stages' arguments."""
        op, s, spec = self.op, self.shape, self.op.quant
        given = self._given(arrays)
        qp = check_call(spec, op.channels, repr(op), given, params)
        check_memory(f"the buffers of {self.algorithm} of {op!r}", self.buffer_bytes())
        bias_dtype = np.float32 if spec.dequantized else np.int32
        mult = output_multipliers(spec, qp, op.channels)
        values = {"X": pack_activations(given[0], int(qp.x_zero_point), s),
                  "U": filter_transform(given[1], qp.w_zero_point, s),
                  "V": aligned_zeros(s.input_shape, np.int16), "M": aligned_zeros(s.product_shape, np.int32),
                  "Y": aligned_zeros((s.n, s.oh, s.ow, s.k), spec.output),
                  "B": np.ascontiguousarray(qp.bias if qp.bias is not None else np.zeros(1), bias_dtype),
                  "mult": np.ones(1, np.float32) if mult is None else mult}
        ctypes = {"X": CTYPES[spec.activation], "U": "int16_t", "V": "int16_t", "M": "int32_t",
                  "Y": CTYPES[spec.output], "B": "float" if spec.dequantized else "int32_t", "mult": "float"}
        ptr = {name: self._ffi.cast(f"{ctypes[name]} *", self._ffi.from_buffer(array))
               for name, array in values.items()}
        arguments = {"input_transform": (ptr["X"], ptr["V"], int(qp.x_zero_point)),
                     "gemm": (ptr["V"], ptr["U"], ptr["M"]),
                     "output_transform": (ptr["M"], ptr["Y"], ptr["B"], ptr["mult"],
                                          int(qp.y_zero_point or 0))}
        return Int8WinogradBuffers(values, arguments)

    def run_stage(self, stage: str, buffers: Int8WinogradBuffers) -> None:
        """Run one stage (``STAGES``) on prepared buffers."""
        getattr(self._lib, f"lo_{stage}")(*buffers.arguments[stage])

    def run(self, buffers: Int8WinogradBuffers) -> None:
        """Run the three stages in turn (the timed part)."""
        for stage in STAGES:
            self.run_stage(stage, buffers)

    def output(self, buffers: Int8WinogradBuffers) -> np.ndarray:
        """The output of the last run, NCHW."""
        return np.ascontiguousarray(buffers.arrays["Y"].transpose(0, 3, 1, 2))

    def __call__(self, *arrays: np.ndarray, **params: Any) -> np.ndarray:
        buffers = self.prepare(*arrays, **params)
        self.run(buffers)
        return self.output(buffers)
