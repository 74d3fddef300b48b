"""Reading an ONNX model for the backend: loading and checking it, its runtime inputs, the shapes
and constants known before a run, and the checks of a run's inputs against the graph."""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from .lowering import Value

STANDARD_DOMAINS = ("", "ai.onnx")


def load_model(model: onnx.ModelProto | str | os.PathLike | bytes) -> onnx.ModelProto:
    """``model`` as a checked ModelProto (a path, serialized bytes or a ModelProto); ValueError
    naming the file and the problem if it is not a valid ONNX model or uses an opset newer than
    this onnx package knows."""
    name = "the model"
    if isinstance(model, (str, os.PathLike)):
        name = os.fspath(model)
        try:
            with open(model, "rb") as file:
                model = file.read()
        except OSError as error:
            raise ValueError(f"cannot read ONNX model {name}: {error}") from error
    if isinstance(model, bytes):
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(model)
        except Exception as error:   # protobuf's DecodeError
            raise ValueError(f"{name} is not an ONNX model (not a serialized ModelProto: {error})") from error
        model = proto
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"model must be an onnx.ModelProto, a path or bytes, got {type(model).__name__}")
    if not model.graph.node or not model.opset_import:
        raise ValueError(f"{name} is not an ONNX model (no graph nodes or no opset_import)")
    newest = onnx.defs.onnx_opset_version()
    for opset in model.opset_import:
        if opset.domain in STANDARD_DOMAINS and opset.version > newest:
            raise ValueError(f"{name} imports opset {opset.version} of the default domain; the installed "
                             f"onnx {onnx.__version__} runs opsets up to {newest}")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as error:
        raise ValueError(f"{name} is not a valid ONNX model: {str(error).splitlines()[0]}") from error
    return model


def node_label(node: onnx.NodeProto, index: int) -> str:
    """A node's name, or ``OpType_index`` for an unnamed node."""
    return node.name or f"{node.op_type}_{index}"


def runtime_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs a run must feed (those without an initializer)."""
    initialized = {init.name for init in model.graph.initializer}
    return [value for value in model.graph.input if value.name not in initialized]


def _dims(value: onnx.ValueInfoProto) -> list[int | str | None] | None:
    """A value's dims (int, a symbolic name, or None), or None if its shape is unknown."""
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim]


def dtype_of(value: onnx.ValueInfoProto) -> np.dtype | None:
    """The numpy dtype of a tensor value, or None when the model does not say."""
    elem = value.type.tensor_type.elem_type
    return _numpy_dtype(elem) if elem else None


@lru_cache(maxsize=64)
def _numpy_dtype(elem: int) -> np.dtype:
    """The numpy dtype of an ONNX element type (onnx's lookup takes 0.3 ms; a run checks every input)."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem))


def known_values(model: onnx.ModelProto) -> dict[str, Value]:
    """Every value whose shape is static before a run (inferred from the model's input shapes),
    with the data of initializers and Constant nodes."""
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:   # inference is best effort: unknown shapes are resolved at the first run
        inferred = model
    graph = inferred.graph
    values: dict[str, Value] = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        dims, dtype = _dims(info), dtype_of(info)
        if dims is not None and dtype is not None and all(isinstance(d, int) and d > 0 for d in dims):
            values[info.name] = Value(tuple(dims), dtype)
    for name, array in constants(model).items():
        values[name] = Value(array.shape, array.dtype, array)
    return values


def constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The values of the model's initializers, Constant nodes (those with a ``value`` tensor) and
    Identity nodes of either (PyTorch's exporter shares equal initializers, e.g. the zero biases of
    folded batch norms, through Identity nodes: a compute node binds them once at prepare)."""
    arrays = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    for node in model.graph.node:
        if node.domain not in STANDARD_DOMAINS:
            continue
        if node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value":
                    arrays[node.output[0]] = numpy_helper.to_array(attribute.t)
        elif node.op_type == "Identity" and node.input and node.input[0] in arrays:
            arrays[node.output[0]] = arrays[node.input[0]]
    return arrays


def feeds(model: onnx.ModelProto, inputs) -> dict[str, np.ndarray]:
    """A run's inputs (a list in graph order, a dict by name, or one array) checked against the
    graph's runtime inputs: their count, names, dtypes and static dims (ValueError/TypeError
    naming the input and the value)."""
    wanted = runtime_inputs(model)
    names = [value.name for value in wanted]
    if isinstance(inputs, np.ndarray):
        inputs = [inputs]
    if isinstance(inputs, Mapping):
        unknown = sorted(set(inputs) - set(names))
        missing = [n for n in names if n not in inputs]
        if unknown or missing:
            raise ValueError(f"the model's inputs are {names}; got {sorted(inputs)} "
                             f"(unknown: {unknown}, missing: {missing})")
        given = dict(inputs)
    elif isinstance(inputs, Sequence):
        if len(inputs) != len(names):
            raise ValueError(f"the model takes {len(names)} input(s) {names}, got {len(inputs)}")
        given = dict(zip(names, inputs))
    else:
        raise TypeError(f"inputs must be a list of arrays, a dict or an array, got {type(inputs).__name__}")
    return {value.name: _checked(value, given[value.name]) for value in wanted}


def _checked(value: onnx.ValueInfoProto, array) -> np.ndarray:
    array = np.asarray(array)
    dtype = dtype_of(value)
    if dtype is not None and array.dtype != dtype:
        raise TypeError(f"input {value.name!r} has dtype {array.dtype}; the model declares {dtype}")
    dims = _dims(value)
    if dims is None:
        return array
    if array.ndim != len(dims):
        raise ValueError(f"input {value.name!r} has shape {array.shape}; the model declares "
                         f"{len(dims)} dims {_shape_text(dims)}")
    for axis, (dim, size) in enumerate(zip(dims, array.shape)):
        if isinstance(dim, int) and dim > 0 and dim != size:
            raise ValueError(f"input {value.name!r} has shape {array.shape}; the model declares "
                             f"{_shape_text(dims)} (axis {axis} must be {dim})")
    return array


def _shape_text(dims: list) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def static_input_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """The shape of every runtime input; ValueError naming the input and the dim when one is
    dynamic (the caller must then give inputs to fix it)."""
    shapes = {}
    for value in runtime_inputs(model):
        dims = _dims(value)
        if dims is None:
            raise ValueError(f"input {value.name!r} has no shape in the model; give inputs to fix it")
        for axis, dim in enumerate(dims):
            if not (isinstance(dim, int) and dim > 0):
                raise ValueError(f"input {value.name!r} has a dynamic dim {dim!r} at axis {axis} "
                                 f"(shape {_shape_text(dims)}); give inputs to fix it")
        shapes[value.name] = tuple(dims)
    return shapes
