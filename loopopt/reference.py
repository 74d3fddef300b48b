"""Plain numpy reference implementations that every generated kernel is checked against.

They accumulate in a wide type (float64 for floating point, int64 for integers) so
their own rounding is far below a float32 kernel's.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

PerDim = int | Sequence[int]
Pads = int | Sequence[int] | Sequence[tuple[int, int]]


def _per_dim(value: PerDim, spatial: int) -> tuple[int, ...]:
    return (int(value),) * spatial if np.ndim(value) == 0 else tuple(int(v) for v in value)


def _pads(value: Pads, spatial: int) -> tuple[tuple[int, int], ...]:
    """Per-side pads from an int, one int per spatial dim, or one ``(begin, end)`` pair per dim."""
    if np.ndim(value) == 0:
        return ((int(value), int(value)),) * spatial
    return tuple((int(p), int(p)) if np.ndim(p) == 0 else (int(p[0]), int(p[1])) for p in value)


def conv_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                   stride: PerDim = 1, padding: Pads = 0, dilation: PerDim = 1, groups: int = 1,
                   acc_dtype: type = np.float64) -> np.ndarray:
    """PyTorch-semantics N-d convolution of ``x[N,C,*S]`` with ``w[K,C/groups,*T]`` (1, 2 or 3
    spatial dims); ``padding`` per dim or per side (``((begin, end), ...)``, zeros).

    Returns ``O[N,K,*OS]`` in ``acc_dtype`` (padding contributes nothing).
    """
    spatial = x.ndim - 2
    n, c = x.shape[:2]
    k, cg = w.shape[:2]
    taps = w.shape[2:]
    strides, dilations, pads = _per_dim(stride, spatial), _per_dim(dilation, spatial), _pads(padding, spatial)
    padded = tuple(size + lo + hi for size, (lo, hi) in zip(x.shape[2:], pads))
    outs = tuple((size - d * (t - 1) - 1) // s + 1 for size, t, s, d in zip(padded, taps, strides, dilations))
    kg = k // groups
    xp = np.zeros((n, c) + padded, dtype=acc_dtype)
    inside = tuple(slice(lo, lo + size) for size, (lo, _) in zip(x.shape[2:], pads))
    xp[(slice(None), slice(None)) + inside] = x
    wa = w.astype(acc_dtype)
    out = np.zeros((n, k) + outs, dtype=acc_dtype)
    for g in range(groups):
        xg = xp[:, g * cg:(g + 1) * cg]
        wg = wa[g * kg:(g + 1) * kg]
        for tap in itertools.product(*(range(t) for t in taps)):
            window = tuple(slice(t * d, t * d + s * (o - 1) + 1, s)
                           for t, d, s, o in zip(tap, dilations, strides, outs))
            patch = xg[(slice(None), slice(None)) + window]
            tap_weights = wg[(slice(None), slice(None)) + tap]
            out[:, g * kg:(g + 1) * kg] += np.einsum("nc...,kc->nk...", patch, tap_weights)
    if b is not None:
        out += np.asarray(b, dtype=acc_dtype).reshape((k,) + (1,) * spatial)
    return out


def matmul_reference(a: np.ndarray, b: np.ndarray, acc_dtype: type = np.float64, trans_a: bool = False,
                     trans_b: bool = False) -> np.ndarray:
    """``C[..., i, j] = sum_k op(A)[..., i, k] * op(B)[..., k, j]`` accumulated in ``acc_dtype``
    (``op`` transposes the last two axes when ``trans_a`` / ``trans_b``)."""
    a, b = a.astype(acc_dtype), b.astype(acc_dtype)
    return (np.swapaxes(a, -1, -2) if trans_a else a) @ (np.swapaxes(b, -1, -2) if trans_b else b)
