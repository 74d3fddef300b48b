"""A kernel's fused epilogue: what happens to each output once its sum is complete, before it is stored.

``out = clip(sum + bias + residual)``: ``Schedule.add_residual()`` adds the element of a second tensor of
the output's shape (the kernel's extra operand ``RESIDUAL``, stored in the output's layout: a ResNet
block's shortcut), then ``Schedule.clip(low, high)`` clips (``activation.Clip``: ReLU, ReLU6). The
reference applies it to the op's reference output (``apply``); the C emitters fuse it into their store
(``c`` for a scalar, ``vector`` through an instruction table's ``add``/``max``/``min``), or run it in a
pass over the output after the nest where their outputs are not final in registers.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from .activation import Clip

if TYPE_CHECKING:
    from .codegen.instr import Isa

RESIDUAL = "lo_residual"     # the kernel's parameter holding the residual (the output's layout and shape)


@dataclass(frozen=True)
class Epilogue:
    """The residual add (``residual``) and then the clip (``clip``) applied to each output."""

    clip: Optional[Clip] = None
    residual: bool = False

    def __str__(self) -> str:
        parts = (["+ residual"] if self.residual else []) + ([str(self.clip)] if self.clip else [])
        return ", then ".join(parts)

    @property
    def operations(self) -> int:
        """Vector operations per output vector (an add, a max, a min; the residual's load aside)."""
        return int(self.residual) + sum(b is not None for b in (self.clip.low, self.clip.high) if self.clip)

    def apply(self, values: np.ndarray, residual: np.ndarray | None = None) -> np.ndarray:
        """``values`` (the op's reference output) with the residual added, then clipped."""
        if self.residual:
            if residual is None:
                raise ValueError("this epilogue adds a residual: pass the residual array")
            values = values + residual
        return self.clip.apply(values) if self.clip else values

    def _written(self, value: str, add: Callable[[str], str], low: Callable[[str, float], str],
                 high: Callable[[str, float], str]) -> str:
        """``value`` through the epilogue, each of its operations written by its function."""
        if self.residual:
            value = add(value)
        if self.clip and self.clip.low is not None:
            value = low(value, float(self.clip.low))
        if self.clip and self.clip.high is not None:
            value = high(value, float(self.clip.high))
        return value

    def c(self, value: str, residual: str) -> str:
        """The C expression of float ``value`` through the epilogue (``residual``: its residual element).
        The clip is ``v < low ? low : v`` (NaN stays NaN, as ``np.clip``; C compilers vectorize it)."""
        return self._written(value, lambda v: f"({v} + {residual})", lambda v, b: f"lo_clip_low({v}, {b!r}f)",
                             lambda v, b: f"lo_clip_high({v}, {b!r}f)")

    def formula(self, value: str, residual: str) -> str:
        """The epilogue of ``value`` as pseudo-code reads it (``residual``: its residual element)."""
        return self._written(value, lambda v: f"{v} + {residual}", lambda v, b: f"max({v}, {b!r})",
                             lambda v, b: f"min({v}, {b!r})")

    def vector(self, isa: "Isa", value: str, residual: str, here: bool = False) -> str:
        """The vector expression of ``value`` through the epilogue on ``isa``'s float table
        (``residual``: a vector of its residual elements); ``here``: the clip's bounds broadcast where
        they are used (the table's ``broadcast_here``), for a block that leaves no register to hold them."""
        broadcast = isa.broadcast_here if here else isa.broadcast
        return self._written(value, lambda v: isa.add(a=v, b=residual),
                             lambda v, b: isa.max(a=broadcast(s=f"{b!r}f"), b=v),
                             lambda v, b: isa.min(a=broadcast(s=f"{b!r}f"), b=v))


# C helpers of ``Epilogue.c``, at file scope of a kernel that has an epilogue
HELPERS = """/* the clip of a fused epilogue: NaN stays NaN (np.clip) */
static inline float lo_clip_low(float v, float low) { return v < low ? low : v; }
static inline float lo_clip_high(float v, float high) { return v > high ? high : v; }
"""
