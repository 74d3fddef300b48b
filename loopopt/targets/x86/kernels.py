"""The kernel classes of x86's own families, built on ``kernel.Kernel`` / ``QuantizedKernel``: AMX tile
kernels (``TileKernel``, ``Bf16TileKernel``), binary XNOR + popcount kernels (``BinaryKernel``) and
table-lookup ternary kernels (``LutKernel``); each packs its operands the way its generator reads them."""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import cached_property
from typing import Any

import numpy as np

from ...buffers import check_memory
from ...codegen import Generated
from ...driver import Driver
from ...kernel import Buffers, Kernel, QuantizedKernel
from ...quant import QuantParams, output_multipliers
from ...schedule import Schedule
from .amx_runtime import require_amx
from .binary import (
    BASE,
    LANES,
    BinaryShape,
    base_table,
    base_table_shape,
    block_of,
    pack_bits_activations,
    pack_bits_weights,
    packed_elements,
)
from .lut import LUT, lut_nest, pack_lut
from .lut_format import FORMATS
from .tiles import TileShape, activations_shape, pack_activations, pack_weights, tile_plan

NOT_PREPACKED = ("a binary kernel packs its weights to bits and their padding table on every call; "
                 "it has no prepacked form")


class TileBuffers:
    """How an AMX tile kernel (``codegen/tiles.py``) stores its inputs, for a kernel class below it
    in the MRO: the activations channels-last and padded, the weights in B tiles; and ``run`` asks
    Linux for the tile state first (``require_amx``)."""

    @cached_property
    def tile_shape(self) -> TileShape:
        """The op as the schedule's tile kernel sees it (gathered patches store unpadded channels)."""
        return tile_plan(self.schedule).shape

    def _elements(self, name: str) -> int:
        op = self.op
        if name == op.inputs[0]:
            return math.prod(activations_shape(op, self.tile_shape))
        if name == op.inputs[1]:
            return math.prod(self.tile_shape.packed_weights_shape)
        return super()._elements(name)

    def _pack(self, tensor: str, array: np.ndarray) -> np.ndarray:
        op, shape = self.op, self.tile_shape
        if tensor == op.inputs[0]:
            stored = self._zeros(tensor, activations_shape(op, shape), array.dtype)
            return pack_activations(op, array, stored, shape)
        if tensor == op.inputs[1]:
            packed = self._zeros(tensor, shape.packed_weights_shape, array.dtype)
            return pack_weights(op, array, packed, shape)
        return super()._pack(tensor, array)

    def run(self, buffers: Buffers) -> None:
        require_amx()
        super().run(buffers)


class TileKernel(TileBuffers, QuantizedKernel):
    """A quantized kernel on AMX tiles. The epilogue is fused at the tile store, so there are no raw
    int32 accumulators to read back."""

    def accumulators(self, buffers: Buffers) -> np.ndarray:
        raise ValueError("an AMX tile kernel applies the epilogue at each tile store: it keeps no int32 "
                         "accumulators of the whole output")


class Bf16TileKernel(TileBuffers, Kernel):
    """A bfloat16 kernel on AMX tiles (``_tile_dpbf16ps``, float32 accumulation)."""


class BinaryKernel(QuantizedKernel):
    """A binary op's XNOR + popcount kernel (``codegen/binary.py``), called like the int8 kernels:
    ``kernel(xq, wq, b, x_scale=, x_zero_point=0, w_scale=, w_zero_point=0)`` (no scales for an int32
    output). ``prepare`` checks that every value is -1 or +1, packs both operands to bits (the
    activations with their padding) and computes the ``base`` table of the padding correction; the
    kernel stores the output channels-last and ``output`` returns it in the logical layout."""

    def __init__(self, schedule: Schedule, generated: Generated, driver: Driver, popcount: str):
        super().__init__(schedule, generated, driver, None)
        self.popcount = popcount
        self.shape = BinaryShape.of(self.op, lanes=LANES[self.isa])

    @property
    def block(self) -> tuple[int, int]:
        """The register block the schedule asks for: (output positions, vectors of output channels)."""
        return block_of(self.schedule, self.isa)

    @property
    def _output_name(self) -> str:
        return self.op.output

    def _elements(self, name: str) -> int:
        if name in self.op.inputs:
            return packed_elements(self.op, self.isa, name)
        if name == BASE:
            return math.prod(base_table_shape(self.op))
        return self.op.channels if name.startswith("lo_") else Kernel._elements(self, name)

    def _values(self, *arrays: np.ndarray, **params: Any) -> dict[str, Any]:
        """Validate, pack both operands to bits, compute the multipliers ``sx * sw[k]`` and the
        ``base`` table."""
        op = self.op
        given = self._given(arrays)
        for tensor, array in zip(self.generated.arguments, given):
            if not isinstance(array, np.ndarray):
                raise TypeError(f"{tensor} must be a numpy array, got {type(array).__name__}")
            shape = op.tensor(tensor).shape
            if array.shape != shape and tensor != op.bias_tensor:
                raise ValueError(f"{tensor} has shape {array.shape}; {op!r} expects {shape}")
        qp = self.check_params(tuple(given), params)
        check_memory(f"the buffers of {op!r}", self.buffer_bytes())
        x, w = op.inputs
        weights = pack_bits_weights(op, self.shape, given[1])
        values: dict[str, Any] = {x: self._copy(x, pack_bits_activations(op, self.shape, given[0])),
                                  w: self._copy(w, weights),
                                  BASE: self._copy(BASE, base_table(op, self.shape, weights))}
        if op.bias:
            values[op.bias_tensor] = self._copy(op.bias_tensor, qp.bias)
        values[op.output] = self._zeros(op.output, self.shape.output_shape,
                                        np.float32 if op.quant.dequantized else np.int32)
        if op.quant.scaled:
            values["lo_mult"] = self._copy("lo_mult", output_multipliers(op.quant, qp, op.channels))
        return values

    def prepack(self, weights: np.ndarray) -> None:
        raise ValueError(NOT_PREPACKED)

    def with_constants(self, *constants: np.ndarray, **params: Any) -> Callable[[np.ndarray], np.ndarray]:
        raise ValueError(NOT_PREPACKED)

    def output(self, buffers: Buffers) -> np.ndarray:
        """The output of the last run, from channels-last to the op's logical layout."""
        stored = buffers.arrays[self.op.output].reshape(self.shape.output_shape)
        return np.ascontiguousarray(np.moveaxis(stored, -1, 1)).reshape(self.op.tensor(self.op.output).shape)

    def accumulators(self, buffers: Buffers) -> np.ndarray:
        raise ValueError("a binary kernel applies the epilogue per output: it keeps no raw accumulators")


class LutKernel(QuantizedKernel):
    """A ternary conv or GEMM with ``weight_format("tl1" | "tl2")`` (``codegen/lut.py``): ``prepare``
    packs the weights to 4-bit group indices (and sign bits) and allocates the tables workspace; the
    call, parameters and outputs are the int8 kernels'."""

    @property
    def format(self):
        """The table-lookup format (``codegen.lut_format.FORMATS``)."""
        return FORMATS[self.schedule.weight_format_mode]

    def _elements(self, name: str) -> int:
        if name == self.op.inputs[1]:
            return lut_nest(self.schedule).shape.packed_bytes
        if name == LUT:
            return lut_nest(self.schedule).table_entries
        return super()._elements(name)

    def _parameter_values(self, qp: QuantParams, wq: np.ndarray, out_shape) -> dict[str, Any]:
        values = super()._parameter_values(qp, wq, out_shape)
        return values | {LUT: self._zeros(LUT, (self._elements(LUT),), np.int16)}

    def _pack(self, tensor: str, array: np.ndarray) -> np.ndarray:
        if tensor == self.op.inputs[1]:
            return self._copy(tensor, pack_lut(self.op, array, self.format))
        return super()._pack(tensor, array)
