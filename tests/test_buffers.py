"""Kernel buffers start on a cache line and hold exactly the copied data."""
import numpy as np

import loopopt as lo
from loopopt.buffers import ALIGNMENT, aligned_copy, aligned_zeros


def test_aligned_zeros_and_copy():
    for shape, dtype in (((3, 5), np.float32), ((7,), np.uint8), ((2, 3, 4), np.int32)):
        zeros = aligned_zeros(shape, dtype, tail_bytes=64)
        assert zeros.ctypes.data % ALIGNMENT == 0 and zeros.shape == shape and not zeros.any()
        source = np.arange(np.prod(shape)).reshape(shape).astype(dtype)[..., ::-1]
        copy = aligned_copy(source)
        assert copy.ctypes.data % ALIGNMENT == 0 and copy.flags.c_contiguous
        np.testing.assert_array_equal(copy, source)


def test_kernel_storage_is_aligned():
    op = lo.Conv2d(5, 7, 3, padding=1, height=6, width=9)
    kernel = lo.Schedule(op).layout("I", "NCHW16c").compile()
    x = op.random_inputs(0)
    buffers = kernel.prepare(x["I"], x["W"], x["B"])
    assert all(array.ctypes.data % ALIGNMENT == 0 for array in buffers.arrays.values())
