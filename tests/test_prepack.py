"""Prepacked weights: ``Kernel.prepack`` and ``hold_weights`` (the ONNX backend's kernels) give the
outputs of unpacked calls, for the prepacked array and for any other one, float and int8 (bit-exact,
the compensation table kept with the weights), and refuse what they cannot take."""
from __future__ import annotations

import numpy as np
import pytest

import loopopt as lo
from loopopt.measure import _runner
from loopopt.quant_reference import random_call, reference_output

CONV = lo.Conv2d(5, 16, 3, stride=2, padding=(1, 2), height=9, width=8, batch=2)
QCONV = lo.Conv2d(6, 16, 3, padding=1, height=7, width=6,
                  quant=lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=False,
                                     output="uint8"))


def _float_call(seed: int) -> list[np.ndarray]:
    inputs = CONV.random_inputs(seed)
    return [inputs[t] for t in ("I", "W", "B")]


def test_prepacked_float_weights_give_the_unpacked_output():
    schedule = lo.Schedule(CONV).layout("W", "OIHW16i16o")
    kernel = schedule.compile()
    (x, w, b), (_, w2, _) = _float_call(1), _float_call(2)
    kernel.prepack(w)
    np.testing.assert_allclose(kernel(x, w, b), CONV.reference(x, w, b), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(kernel(x, w2, b), CONV.reference(x, w2, b), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(kernel(x, w, b), schedule.compile()(x, w, b))
    before = kernel(x, w, b)
    w *= 2        # the packed copy is what runs (which is why a prepacked array must not change)
    np.testing.assert_array_equal(kernel(x, w, b), before)


@pytest.mark.parametrize("compensation", ["packed", "kernel"])
def test_held_int8_weights_are_exact_for_every_weights_array(compensation):
    """A kernel shared by nodes of one shape holds each node's weights (and compensation table)."""
    kernel = lo.Schedule(QCONV).compensation(compensation).compile()
    kernel.hold_weights = True
    calls = [random_call(QCONV, seed) for seed in (1, 2)]
    for arrays, params in calls * 2:       # alternating arrays, each packed once and then reused
        np.testing.assert_array_equal(kernel(*arrays, **params), reference_output(QCONV, arrays, params))
    assert len(kernel._held) == 2
    arrays, params = calls[0]
    shifted = params | {"w_zero_point": params["w_zero_point"] + 1}    # same weights, other zero points
    np.testing.assert_array_equal(kernel(*arrays, **shifted), reference_output(QCONV, arrays, shifted))


def test_with_constants_gives_the_call_output_on_strided_activations():
    """``with_constants``: the weights, bias and int8 parameters bound once; activations given as a
    view of channels-last memory (a previous kernel's output) read as they are; the output a view of
    the kernel's storage in the logical layout."""
    schedule = lo.Schedule(CONV).layout("I", "NHWC").layout("O", "NHWC")
    kernel = schedule.compile()
    (x, w, b), (x2, _, _) = _float_call(1), _float_call(3)
    call = kernel.with_constants(w, b)
    for given in (x, np.ascontiguousarray(x2.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)):
        out = call(given)
        assert not out.flags.c_contiguous and out.base is not None          # NHWC storage, viewed as NCHW
        np.testing.assert_array_equal(out, kernel(np.ascontiguousarray(given), w, b))
    # the same array object again, its contents changed: read as it is (a view of NHWC memory, bound as
    # the last call bound it) and copied (NCHW, packed again): both give the new contents' output
    channels_last = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    for given, memory in ((channels_last.transpose(0, 3, 1, 2), channels_last), (x2, x2)):
        call(given)
        memory *= -1.5
        np.testing.assert_array_equal(call(given), kernel(np.ascontiguousarray(given), w, b))
    reshaped = channels_last.transpose(0, 3, 1, 2)      # read as it is, then its shape set in place:
    call(reshaped)                                      # the same object, refused
    reshaped.shape = (*reshaped.shape[:2], -1)
    with pytest.raises(ValueError, match=r"I has shape \(\d+, \d+, \d+\) and dtype float32; .* expects"):
        call(reshaped)
    with pytest.raises(ValueError, match=r"I has shape \(2, 5, 9, 7\) and dtype float32; .* expects"):
        call(np.zeros((2, 5, 9, 7), np.float32))
    qkernel = lo.Schedule(QCONV).compensation("packed").compile()      # test_held_int8_...'s kernel
    (qx, qw, qb), params = random_call(QCONV, 4)
    np.testing.assert_array_equal(qkernel.with_constants(qw, qb, **params)(qx),
                                  reference_output(QCONV, [qx, qw, qb], params))


def test_prepack_refuses_what_it_cannot_take():
    kernel = lo.Schedule(CONV).compile()
    with pytest.raises(ValueError, match=r"prepack takes the weights W as an array of shape \(16, 5, 3, 3\), "
                                         r"got \(16, 5, 3\)"):
        kernel.prepack(np.zeros((16, 5, 3), np.float32))
    binary = lo.Conv2d(64, 16, 1, height=3, width=3, quant=lo.QuantSpec(activation="binary", weight="binary"))
    binary_kernel = lo.Schedule(binary).compile("scalar")
    with pytest.raises(ValueError, match="a binary kernel packs its weights to bits"):
        binary_kernel.prepack(np.ones((16, 64, 1, 1), np.int8))
    with pytest.raises(ValueError, match="a binary kernel packs its weights to bits"):
        binary_kernel.with_constants(np.ones((16, 64, 1, 1), np.int8))


def test_measure_times_whole_calls_with_prepacked_weights():
    kernel = lo.Schedule(CONV).layout("W", "OIHW16i16o").compile()
    timing = lo.measure(kernel, repeats=3, prepacked=True)
    assert timing.verified and timing.prepacked and timing.end_to_end and len(timing.times) == 3
    assert timing.scope.startswith("prepacked weights") and "prepacked weights" in str(timing)
    for timed in (kernel, lo.Schedule(CONV).add_residual().compile()):   # the residual comes per call
        run = _runner(timed, 0, end_to_end=False, prepacked=True)
        assert np.shares_memory(run(), run())    # the calls of with_constants: buffers kept, no new ones
    winograd = lo.dataflows.winograd(lo.Conv2d(4, 4, 3, padding=1, height=8, width=8)).compile()
    with pytest.raises(ValueError, match="has no prepacked form"):
        lo.measure(winograd, repeats=1, prepacked=True)


def test_with_constants_per_call_takes_both_matmul_operands_each_call():
    """``per_call=2``: a batched matmul (odd sizes: vector tails; a packed B layout) takes both operands
    with every call, keeps its buffers (the output a view of one kept array), and gives each call's
    product; a bad count or a quantized op is refused with the reason."""
    op = lo.Matmul(13, 19, 7, batch=(3,))
    kernel = lo.Schedule(op).layout("B", "BNK16n").compile()
    call = kernel.with_constants(per_call=2)
    outputs = []
    for seed in (1, 2):
        x = op.random_inputs(seed)
        outputs.append(call(x["A"], x["B"]))
        np.testing.assert_allclose(outputs[-1], op.reference(x["A"], x["B"]), rtol=1e-4, atol=1e-4)
    assert np.shares_memory(*outputs)
    with pytest.raises(ValueError, match=r"takes 2 array\(s\) per call \(A, B\), got 1"):
        call(x["A"])
    for bad in (0, 3, True):
        with pytest.raises(ValueError, match=r"per_call must be .* 1 to 2 \(A, B\), got"):
            kernel.with_constants(per_call=bad)
    qkernel = lo.Schedule(QCONV).compile()
    with pytest.raises(ValueError, match="per_call=2 takes float operands"):
        qkernel.with_constants(per_call=2)
