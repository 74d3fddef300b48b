"""ONNX's own backend test cases for the seven compute op types, through loopopt.onnx.backend in strict
mode: the node cases generated from ``onnx.backend.test.case.node`` (the installed onnx ships no node
data directory) and the pytorch-converted / pytorch-operator cases it ships. Every case is listed here:
those the op model cannot express yet are strict xfails with the reason (they flip when support
lands; none now); a case the installed onnx adds fails ``test_every_case_is_listed`` until it is listed."""
from __future__ import annotations

import functools
import os
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from loopopt.onnx import backend
from loopopt.onnx.lowering import LOWERINGS

NODE_CASES = {
    "test_basic_conv_with_padding": None, "test_basic_conv_without_padding": None,
    "test_conv_with_strides_padding": None, "test_conv_with_strides_no_padding": None,
    "test_conv_with_strides_and_asymmetric_padding": None,   # pads [1, 0, 1, 0]: symmetric per axis
    "test_conv_with_autopad_same": None,
    "test_convinteger_without_padding": None, "test_convinteger_with_padding": None,
    "test_gemm_default_zero_bias": None, "test_gemm_default_no_bias": None,
    "test_gemm_default_scalar_bias": None, "test_gemm_default_single_elem_vector_bias": None,
    "test_gemm_default_vector_bias": None, "test_gemm_default_matrix_bias": None,
    "test_gemm_transposeA": None, "test_gemm_transposeB": None, "test_gemm_alpha": None,
    "test_gemm_beta": None, "test_gemm_all_attributes": None,
    "test_matmul_2d": None, "test_matmul_3d": None, "test_matmul_4d": None, "test_matmul_bcast": None,
    "test_matmul_1d_3d": None, "test_matmul_4d_1d": None, "test_matmul_1d_1d": None,
    "test_matmulinteger": None, "test_qlinearconv": None,
    **{f"test_qlinearmatmul_{d}_{t}_{f}": None
       for t in ("uint8", "int8") for d in ("2D", "3D") for f in ("float32", "float16")},
}
SHIPPED_CASES = {
    **{f"pytorch-converted/test_Conv1d{s}": None
       for s in ("", "_dilated", "_groups", "_pad1", "_pad1size1", "_pad2", "_pad2size1", "_stride")},
    **{f"pytorch-converted/test_Conv2d{s}": None
       for s in ("", "_depthwise", "_depthwise_padded", "_depthwise_strided", "_depthwise_with_multiplier",
                 "_dilated", "_groups", "_groups_thnn", "_no_bias", "_padding", "_strided")},
    **{f"pytorch-converted/test_Conv3d{s}": None
       for s in ("", "_dilated", "_dilated_strided", "_groups", "_no_bias", "_stride", "_stride_padding")},
    "pytorch-converted/test_Linear": None, "pytorch-converted/test_Linear_no_bias": None,
    "pytorch-operator/test_operator_conv": None, "pytorch-operator/test_operator_mm": None,
    "pytorch-operator/test_operator_addmm": None,
}
# one case per lowering path in the quick tier; the sweep is slow (kernels compile on a fresh cache)
QUICK = {"pytorch-converted/test_Conv1d_groups", "pytorch-converted/test_Conv2d_depthwise_strided",
         "pytorch-operator/test_operator_addmm", "pytorch-converted/test_Conv3d"}
DATA = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data"


@functools.cache
def node_cases() -> dict:
    """ONNX's node test cases whose model is one node of an op type loopopt lowers."""
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():   # the generators of other ops' cases divide by zero on purpose
        warnings.simplefilter("ignore", RuntimeWarning)
        cases = collect_testcases()
    return {case.name: case for case in cases
            if len(case.model.graph.node) == 1 and case.model.graph.node[0].op_type in LOWERINGS}


def _shipped(name: str) -> tuple[onnx.ModelProto, list, list]:
    folder = DATA / name
    load = lambda kind: [numpy_helper.to_array(onnx.load_tensor(str(p)))
                         for p in sorted((folder / "test_data_set_0").glob(f"{kind}_*.pb"))]
    return onnx.load(str(folder / "model.onnx")), load("input"), load("output")


def _params(cases: dict, quick: set[str] = frozenset()) -> list:
    params = []
    for name, reason in cases.items():
        marks = [] if name in quick else [pytest.mark.slow]
        if reason:
            marks.append(pytest.mark.xfail(strict=True, raises=NotImplementedError, reason=reason))
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def _check(model: onnx.ModelProto, inputs: list, outputs: list, rtol: float, atol: float) -> None:
    got = backend.prepare(model, strict=True).run(inputs)
    assert len(got) == len(outputs)
    for g, want in zip(got, outputs):
        np.testing.assert_allclose(g, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", _params(NODE_CASES))
def test_node_case(name):
    case = node_cases()[name]
    inputs, outputs = case.data_sets[0]
    _check(case.model, inputs, outputs, case.rtol, case.atol)


@pytest.mark.parametrize("name", _params(SHIPPED_CASES, QUICK))
def test_shipped_case(name):
    model, inputs, outputs = _shipped(name)
    _check(model, inputs, outputs, 1e-3, 1e-7)


@pytest.mark.slow
def test_every_case_is_listed():
    assert set(node_cases()) == set(NODE_CASES)
    shipped = {f"{p.parent.name}/{p.name}" for group in ("pytorch-converted", "pytorch-operator")
               for p in (DATA / group).iterdir()
               if {n.op_type for n in onnx.load(str(p / "model.onnx")).graph.node} & set(LOWERINGS)}
    assert shipped == set(SHIPPED_CASES)
