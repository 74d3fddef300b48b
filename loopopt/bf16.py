"""bfloat16 values: rounding float32 to bf16 bit patterns, their float32 values, and call inputs.

A bf16 is the upper half of a float32 (sign, 8 exponent bits, 7 mantissa bits), so it is
stored as a ``uint16`` bit pattern and widened to float32 by a shift of 16. float32 inputs are
rounded to nearest even (NaN stays NaN); ``ml_dtypes.bfloat16`` arrays are taken bit for bit,
recognised by their dtype name (numpy has no bfloat16 and loopopt does not import ml_dtypes).
"""
from __future__ import annotations

import numpy as np

BFLOAT16 = "bfloat16"
QUIET_NAN = 0x7FC0


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to nearest even bfloat16, as their uint16 bit patterns (NaN stays NaN)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(QUIET_NAN), rounded)


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 bit patterns (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def is_bf16_array(array: np.ndarray) -> bool:
    """Whether ``array`` holds bfloat16 values (an ``ml_dtypes.bfloat16`` array: by dtype name)."""
    return array.dtype.name == BFLOAT16 and array.dtype.itemsize == 2


def bf16_bits(array: np.ndarray, name: str) -> np.ndarray:
    """The bf16 bit patterns (uint16) of a call input: a float32 array rounded to nearest even,
    or an ``ml_dtypes.bfloat16`` array as it is; TypeError for any other dtype."""
    if is_bf16_array(array):
        return np.ascontiguousarray(array).view(np.uint16)
    if array.dtype == np.float32:
        return to_bf16(array)
    raise TypeError(f"{name} has dtype {array.dtype}; a bfloat16 kernel takes float32 (rounded to bfloat16 "
                    f"to nearest even) or ml_dtypes.bfloat16 arrays")


def bf16_values(array: np.ndarray, name: str = "array") -> np.ndarray:
    """The float32 values a bfloat16 kernel computes with: ``array`` rounded to bf16 (see ``bf16_bits``)."""
    return bf16_to_float32(bf16_bits(np.asarray(array), name))
