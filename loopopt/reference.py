"""Plain numpy reference implementations that every generated kernel is checked against.

They accumulate in a wide type (float64 for floating point, int64 for integers) so
their own rounding is far below a float32 kernel's.
"""
from __future__ import annotations

import numpy as np


def conv2d_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                     stride: tuple[int, int] = (1, 1), padding: tuple[int, int] = (0, 0),
                     dilation: tuple[int, int] = (1, 1), groups: int = 1,
                     acc_dtype: type = np.float64) -> np.ndarray:
    """PyTorch-semantics 2D convolution of ``x[N,C,H,W]`` with ``w[K,C/groups,KH,KW]``.

    Returns ``O[N,K,OH,OW]`` in ``acc_dtype`` (padding contributes nothing).
    """
    n, c, h, wd = x.shape
    k, cg, kh, kw = w.shape
    sh, sw = stride
    ph, pw = padding
    dh, dw = dilation
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    kg = k // groups
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw), dtype=acc_dtype)
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    wa = w.astype(acc_dtype)
    out = np.zeros((n, k, oh, ow), dtype=acc_dtype)
    for g in range(groups):
        xg = xp[:, g * cg:(g + 1) * cg]
        wg = wa[g * kg:(g + 1) * kg]
        for r in range(kh):
            for s in range(kw):
                patch = xg[:, :, r * dh: r * dh + sh * (oh - 1) + 1: sh,
                           s * dw: s * dw + sw * (ow - 1) + 1: sw]
                out[:, g * kg:(g + 1) * kg] += np.einsum("nchw,kc->nkhw", patch, wg[:, :, r, s])
    if b is not None:
        out += np.asarray(b, dtype=acc_dtype)[None, :, None, None]
    return out


def matmul_reference(a: np.ndarray, b: np.ndarray, acc_dtype: type = np.float64) -> np.ndarray:
    """``C[i,j] = sum_k A[i,k] * B[k,j]`` accumulated in ``acc_dtype``."""
    return a.astype(acc_dtype) @ b.astype(acc_dtype)
