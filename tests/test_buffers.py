"""Kernel buffers start on a cache line and hold exactly the copied data; an input whose memory already is
the storage layout, with the bytes a kernel reads past its end zeros of its allocation, is not copied."""
import numpy as np

import loopopt as lo
from loopopt.buffers import ALIGNMENT, aligned_copy, aligned_empty_like, aligned_zeros, zeros_follow
from loopopt.layout import Layout


def test_aligned_zeros_and_copy():
    for shape, dtype in (((3, 5), np.float32), ((7,), np.uint8), ((2, 3, 4), np.int32)):
        zeros = aligned_zeros(shape, dtype, tail_bytes=64)
        assert zeros.ctypes.data % ALIGNMENT == 0 and zeros.shape == shape and not zeros.any()
        source = np.arange(np.prod(shape)).reshape(shape).astype(dtype)[..., ::-1]
        copy = aligned_copy(source)
        assert copy.ctypes.data % ALIGNMENT == 0 and copy.flags.c_contiguous
        np.testing.assert_array_equal(copy, source)


def _at_offset(array: np.ndarray, offset: int) -> np.ndarray:
    """A copy of ``array`` whose data starts ``offset`` bytes past a 64-byte boundary."""
    raw = aligned_zeros((array.nbytes + ALIGNMENT,), np.uint8)
    placed = raw[offset:offset + array.nbytes].view(array.dtype).reshape(array.shape)
    placed[...] = array
    return placed


def test_kernel_storage_is_aligned_except_inputs_already_in_their_layout():
    """Packed inputs, the bias and the output get 64-byte-aligned buffers; an input whose memory is its
    storage layout (here the plain OIHW weights, at an odd offset) runs as it is: no copy."""
    op = lo.Conv2d(5, 7, 3, padding=1, height=6, width=9)
    kernel = lo.Schedule(op).layout("I", "NCHW16c").compile()
    x = op.random_inputs(0)
    w = _at_offset(x["W"], 20)
    buffers = kernel.prepare(x["I"], w, x["B"])
    assert buffers.arrays["W"].ctypes.data == w.ctypes.data
    assert all(array.ctypes.data % ALIGNMENT == 0 for name, array in buffers.arrays.items() if name != "W")
    kernel.run(buffers)
    want = op.reference(x["I"], x["W"], x["B"])
    np.testing.assert_allclose(kernel.output(buffers), want, rtol=1e-4, atol=1e-4)


def test_row_major_operands_at_any_offset_run_without_a_copy():
    """A batched matmul whose operands' storage layouts are row-major (odd sizes: vector tails) reads
    the caller's arrays at every 4-byte offset from a cache line, as they are, and computes the product."""
    op = lo.Matmul(13, 19, 7, batch=(3,))
    kernel = lo.Schedule(op).compile()
    x = op.random_inputs(1)
    want = op.reference(x["A"], x["B"])
    for offset in range(0, ALIGNMENT, 4):
        a, b = _at_offset(x["A"], offset), _at_offset(x["B"], ALIGNMENT - 4 - offset)
        buffers = kernel.prepare(a, b)
        assert [buffers.arrays[t].ctypes.data for t in "AB"] == [a.ctypes.data, b.ctypes.data]
        kernel.run(buffers)
        np.testing.assert_allclose(kernel.output(buffers), want, rtol=1e-4, atol=1e-4)


def test_zeros_after_an_input_spare_its_copy():
    """``zeros_follow`` reads the bytes after an array inside its allocation: zeros after a kernel's
    buffer or ``aligned_empty_like``'s array (in the given array's memory order), not a non-zero byte or
    bytes past the allocation; ``to_storage`` with read-ahead then returns the array itself, else a
    copy followed by zeros."""
    raw = aligned_zeros((100,), np.uint8, tail_bytes=8)
    assert zeros_follow(raw[:90], 10) and zeros_follow(raw, 8) and not zeros_follow(np.zeros(90, np.uint8), 1)
    raw[95] = 1
    assert not zeros_follow(raw[:90], 10) and zeros_follow(raw[:90], 5)
    stored = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(1, 2, 3, 4).transpose(0, 3, 1, 2)    # NHWC memory
    empty = aligned_empty_like(stored, np.int8)
    assert empty.shape == stored.shape and empty.dtype == np.int8 and empty.strides == (24, 1, 12, 4)
    assert empty.ctypes.data % ALIGNMENT == 0 and zeros_follow(empty.transpose(0, 2, 3, 1), 64)
    empty[...] = stored
    layout = Layout.parse("NHWC", "NCHW", "I")
    assert np.shares_memory(layout.to_storage(empty, tail_bytes=3), empty)
    for given in (stored, np.asarray(empty, order="C")):      # nothing known after it; another memory order
        copy = layout.to_storage(given, tail_bytes=3)
        assert not np.shares_memory(copy, given) and zeros_follow(copy, 3)
        np.testing.assert_array_equal(copy, stored.transpose(0, 2, 3, 1))
