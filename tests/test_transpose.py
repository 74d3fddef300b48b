"""The compiled activation packing (``targets/transpose.py``): layout changes that are batched 2-D
transposes (``Layout.rotation``) copied by C loops give numpy's bytes exactly, for every element size,
whole and partial 16 x 16 tiles, padded blocks and batches; the x86 AVX-512 or AVX2 tiles (the host's)
and the portable loops alike; a kernel call packs through them."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import tiers
from hypothesis import strategies as st

import loopopt as lo
from loopopt.layout import Layout
from loopopt.targets.registry import target
from loopopt.targets.transpose import portable_transpose

DTYPES = (np.uint8, np.float16, np.float32)
TAGS = ("NHWC", "NCHW16c", "NCHW8c", "NHWC16c", "NCHW")


def _transposes():
    return {"portable": portable_transpose(), "host": target("x86").transpose()}


def _packs_as_numpy(dtype, tag, n, c, h, w, into):
    rng = np.random.default_rng(n * 1000 + c * 100 + h * 10 + w)
    array = rng.integers(0, 255, (n, c, h, w)).astype(dtype)
    layout = Layout.parse(tag, "NCHW")
    want = layout.to_storage(array, 64)
    block = layout.block("C")
    whole = (n, -(-c // block) * block, h, w)                  # C padded to whole blocks
    rotation = layout.rotation(whole)
    for name, transpose in _transposes().items():
        calls = []
        kept = np.full_like(want, 7) if into and whole == array.shape else None

        def recorded(*arguments, transpose=transpose, calls=calls):
            calls.append(arguments[2:])
            transpose(*arguments)
        got = layout.to_storage(array, 64, into=kept, transpose=recorded)
        assert got.shape == want.shape and np.array_equal(got, want), (name, tag, array.shape)
        assert calls == ([] if rotation is None else [rotation])           # the C loops copied it
        assert kept is None or got is kept
        np.testing.assert_array_equal(layout.logical_view(got, array.shape), array)


test_packing_copies_numpys_bytes, test_packing_copies_numpys_bytes_more = tiers(
    _packs_as_numpy, 12, 80, st.sampled_from(DTYPES), st.sampled_from(TAGS), st.integers(1, 3),
    st.integers(1, 40), st.integers(1, 9), st.integers(1, 40), st.booleans())


def test_rotations_are_the_layout_changes_that_transpose_matrices():
    assert Layout.parse("NHWC", "NCHW").rotation((2, 240, 28, 28)) == (2, 240, 784)
    assert Layout.parse("NCHW16c", "NCHW").rotation((1, 32, 5, 5)) == (2, 16, 25)
    assert Layout.parse("NHWC8c", "NCHW").rotation((1, 16, 3, 3)) == (1, 16, 9)
    assert Layout.parse("KM", "MK").rotation((4, 8)) == (1, 4, 8)
    assert Layout.parse("NCHW", "NCHW").rotation((1, 3, 4, 4)) is None          # no change
    assert Layout.parse("HWCN", "NCHW").rotation((2, 3, 4, 5)) is None          # N moves too
    assert Layout.parse("NWHC", "NCHW").rotation((1, 2, 3, 4)) is None


@pytest.mark.parametrize("rows, cols", [(16, 16), (48, 784), (17, 33), (1, 5)])
def test_whole_and_partial_tiles_of_every_element_size(rows, cols):
    for dtype in (np.uint8, np.uint16, np.float32):
        src = np.random.default_rng(rows).integers(0, 60000, (3, rows, cols)).astype(dtype)
        for name, transpose in _transposes().items():
            dst = np.zeros((3, cols, rows), dtype)
            transpose(src, dst, 3, rows, cols)
            np.testing.assert_array_equal(dst, src.transpose(0, 2, 1), err_msg=f"{name} {dtype.__name__}")


def test_bad_arrays_are_refused_with_the_value():
    transpose = portable_transpose()
    with pytest.raises(ValueError, match=r"one element size among \[1, 2, 4\] bytes, got float64"):
        transpose(np.zeros((2, 3)), np.zeros((3, 2)), 1, 2, 3)
    with pytest.raises(ValueError, match=r"src must be contiguous .* shape \(3, 2\) \(not contiguous\)"):
        transpose(np.zeros((2, 3), np.float32).T, np.zeros((3, 2), np.float32), 1, 2, 3)
    with pytest.raises(ValueError, match=r"dst must be contiguous with 1 x 2 x 3 elements, got shape \(4,\)"):
        transpose(np.zeros((2, 3), np.float32), np.zeros(4, np.float32), 1, 2, 3)


@pytest.mark.slow                 # (the quick tier's kernel tests from NCHW into NHWC pack through them too)
def test_a_prepacked_call_from_nchw_packs_through_the_transposes():
    op = lo.Conv2d(20, 20, 5, padding=(2, 1), stride=(1, 2), groups=20, height=9, width=11, batch=2)
    kernel = lo.Schedule(op).layout("I", "NHWC").layout("O", "NHWC").compile()
    inputs = op.random_inputs(3)
    call = kernel.with_constants(inputs["W"], inputs["B"])
    for seed in (4, 5):                          # the packed buffer reused by the second call
        x = op.random_inputs(seed)["I"]
        np.testing.assert_allclose(call(x), op.reference(x, inputs["W"], inputs["B"]), rtol=1e-4, atol=1e-4)
