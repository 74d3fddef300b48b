"""The kernel classes of x86's own families, built on ``kernel.Kernel`` / ``QuantizedKernel``: AMX tile
kernels (``TileKernel``, ``Bf16TileKernel``); each packs its operands the way its generator reads them
(binary kernels: ``targets/binary.py``'s ``BinaryKernel``, table-lookup ones: ``targets/lut.py``'s
``LutKernel``)."""
from __future__ import annotations

import math
from functools import cached_property

import numpy as np

from ...buffers import zeros_follow
from ...kernel import Buffers, Kernel, QuantizedKernel
from .amx_runtime import require_amx
from .tiles import (
    TileShape,
    activations_in_place,
    activations_shape,
    pack_activations,
    pack_weights,
    tile_plan,
)


class TileBuffers:
    """How an AMX tile kernel (``codegen/tiles.py``) stores its inputs, for a kernel class below it
    in the MRO: the activations channels-last and padded, the weights in B tiles; and ``run`` asks
    Linux for the tile state first (``require_amx``)."""

    @cached_property
    def tile_shape(self) -> TileShape:
        """The op as the schedule's tile kernel sees it (gathered patches store unpadded channels)."""
        return tile_plan(self.schedule).shape

    @cached_property
    def _reads_in_place(self) -> bool:
        """Whether a channels-last input is read where it is (no copy: ``TileShape.unpadded``; not in a
        sanitizer build, whose buffers end exactly at their read-ahead)."""
        return self.tile_shape.unpadded and not self.exact

    def _elements(self, name: str) -> int:
        op = self.op
        if name == op.inputs[0]:
            return math.prod(activations_shape(op, self.tile_shape))
        if name == op.inputs[1]:
            return math.prod(self.tile_shape.packed_weights_shape)
        return super()._elements(name)

    def _pack(self, tensor: str, array: np.ndarray, into: np.ndarray | None = None) -> np.ndarray:
        op, shape = self.op, self.tile_shape
        if tensor == op.inputs[0]:       # ``into``'s padding is still zero: packing writes the interior only
            in_place = activations_in_place(op, array, shape) if self._reads_in_place else None
            if in_place is not None and zeros_follow(in_place, self._ahead(tensor)):
                return in_place          # already stored so (a previous kernel's channels-last output)
            stored = self._zeros(tensor, activations_shape(op, shape), array.dtype) if into is None else into
            return pack_activations(op, array, stored, shape)
        if tensor == op.inputs[1]:
            packed = self._zeros(tensor, shape.packed_weights_shape, array.dtype)
            return pack_weights(op, array, packed, shape)
        return super()._pack(tensor, array, into)

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
