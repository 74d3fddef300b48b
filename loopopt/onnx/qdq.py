"""QDQ-format models (``quantize_static(..., quant_format=QuantFormat.QDQ)``): each group
DequantizeLinear (activations, weights, optional int32 bias) -> Conv / MatMul / Gemm (->
QuantizeLinear) becomes one node of the ``loopopt.qdq`` domain (``QDQConv``, ``QDQMatMul``,
``QDQGemm``; inputs in QLinearConv's order) that runs on one quantized kernel.

This is what onnxruntime does with the same groups (it fuses them into QLinearConv,
QLinearMatMul or QGemm): integer accumulation of the quantized values, the int32 bias added at
the accumulator's scale, and one requantization to the QuantizeLinear's scale and zero point,
instead of the float arithmetic between a dequantization and a quantization that the graph
spells out (the two can differ by one step of the output's scale). Without a QuantizeLinear
after it (or when other nodes read the float result) the group's output is dequantized float32.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from .graph import STANDARD_DOMAINS, constants
from .lowering import FUSED_DOMAIN, NotSupported, Value, lower

ANCHORS = {"Conv": "QDQConv", "MatMul": "QDQMatMul", "Gemm": "QDQGemm"}
BIAS_INPUT = {"Conv": 2, "Gemm": 2}       # the anchor's bias input (MatMul has none)
QUANTIZED = (np.uint8, np.int8)
BIAS_RTOL = 1e-6      # how far a bias scale may be from x_scale * w_scale (float32 rounding of the product)


@dataclass(frozen=True)
class Group:
    """One fused group: the fused node (named as its Conv/MatMul/Gemm) and the original nodes it stands
    for, in graph order (the DequantizeLinear nodes, the anchor, the QuantizeLinear if absorbed)."""

    node: onnx.NodeProto
    members: tuple[onnx.NodeProto, ...]

    @property
    def absorbed(self) -> tuple[str, ...]:
        """The labels of the original nodes the fused node stands for."""
        return tuple(member.name for member in self.members)


@dataclass(frozen=True)
class Fused:
    """A model with its QDQ groups fused: ``model`` (every node named by its label), ``groups`` by the
    anchor's label, and ``skipped``: why a Conv/MatMul/Gemm with a dequantized input was not fused."""

    model: onnx.ModelProto
    groups: dict[str, Group]
    skipped: dict[str, str]


class _Graph:
    """Producers, consumers and constants of a model whose nodes are named by their labels."""

    def __init__(self, model: onnx.ModelProto, known: dict[str, Value]):
        self.nodes = list(model.graph.node)
        self.producer = {out: node for node in self.nodes for out in node.output if out}
        self.consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        for node in self.nodes:
            for name in node.input:
                self.consumers[name].append(node)
        self.outputs = {value.name for value in model.graph.output}
        self.constants = constants(model)
        self.known = known

    def op(self, name: str, op_type: str) -> onnx.NodeProto | None:
        """The default-domain ``op_type`` node that produces ``name``, if that is what produces it."""
        node = self.producer.get(name)
        return node if node is not None and _is(node, op_type) else None

    def constant(self, name: str) -> np.ndarray | None:
        return self.constants.get(name) if name else None


def _is(node: onnx.NodeProto, op_type: str) -> bool:
    return node.op_type == op_type and node.domain in STANDARD_DOMAINS


def _attribute(node: onnx.NodeProto, name: str, default):
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _dequantized(graph: _Graph, dq: onnx.NodeProto, what: str, dtypes, channel_axis: int | None = None,
                 channels: int = 1) -> tuple[str, str, str]:
    """The (quantized input, scale, zero point) names of DequantizeLinear ``dq``; NotSupported unless
    its scale and zero point are constants, per tensor or (``channel_axis``) per channel along that
    axis, its input of ``dtypes`` and it is not blocked."""
    names = list(dq.input) + [""] * (3 - len(dq.input))
    scale, zero = graph.constant(names[1]), graph.constant(names[2])
    if scale is None or scale.dtype != np.float32 or (names[2] and zero is None):
        raise NotSupported(f"the {what}' DequantizeLinear {dq.name} has a scale or zero point that is not "
                           "a float32 / integer constant")
    data = graph.known.get(names[0])
    dtype = data.dtype if data is not None else zero.dtype if zero is not None else None
    if dtype is None or dtype.type not in dtypes:
        raise NotSupported(f"the {what} {names[0]!r} are of {dtype or 'an unknown type'} "
                           f"(allowed: {', '.join(np.dtype(d).name for d in dtypes)})")
    if _attribute(dq, "block_size", 0):
        raise NotSupported(f"the {what}' DequantizeLinear {dq.name} is blocked (block_size)")
    if scale.size > 1:
        axis = _attribute(dq, "axis", 1) % (len(data.shape) if data is not None else 1)
        if channel_axis is None or axis != channel_axis or scale.shape != (channels,):
            allowed = f", or {channels} along axis {channel_axis}" if channel_axis is not None else ""
            raise NotSupported(f"the {what}' DequantizeLinear {dq.name} has scales of shape {scale.shape} "
                               f"along axis {axis} (per tensor{allowed})")
    return names[0], names[1], names[2]


def _weights_axis(anchor: onnx.NodeProto, rank: int) -> int:
    """The weights' output-channel axis: Conv's first, MatMul's last, Gemm's first with transB."""
    if anchor.op_type == "Conv":
        return 0
    if anchor.op_type == "Gemm":
        return 0 if _attribute(anchor, "transB", 0) else 1
    return rank - 1


def _bias(graph: _Graph, anchor: onnx.NodeProto, requantized: bool, x_scale: np.ndarray,
          w_scale: np.ndarray, channels: int) -> tuple[list[str], onnx.NodeProto | None]:
    """The fused node's bias inputs and the bias' DequantizeLinear (if any): ``[int32 bias]`` (its
    scale x_scale * w_scale, zero point 0), for a float output ``[int32 bias, its scale]`` or
    ``[float bias]``; [] if the anchor has none."""
    index = BIAS_INPUT.get(anchor.op_type)
    name = anchor.input[index] if index is not None and index < len(anchor.input) else ""
    if not name:
        return [], None
    dq = graph.op(name, "DequantizeLinear")
    if dq is None:
        if requantized:
            raise NotSupported(f"the bias {name!r} is not a DequantizeLinear of int32: it cannot be added "
                               "to the integer accumulators exactly")
        return [name], None
    rank = len(graph.known[dq.input[0]].shape) if dq.input[0] in graph.known else 1
    bias, scale, zero = _dequantized(graph, dq, "bias", (np.int32,), rank - 1, channels)
    if zero and np.any(graph.constant(zero) != 0):
        raise NotSupported(f"the bias' DequantizeLinear {dq.name} has a zero point that is not 0")
    if not requantized:
        return [bias, scale], dq
    want = np.float32(x_scale) * np.asarray(w_scale, np.float32)
    if not np.allclose(graph.constant(scale), want, rtol=BIAS_RTOL, atol=0):
        raise NotSupported(f"the bias scale of {dq.name} is not x_scale * w_scale (the int32 bias is added "
                           "to the accumulators at their scale)")
    return [bias], dq


def _output(graph: _Graph, anchor: onnx.NodeProto) -> onnx.NodeProto | None:
    """The QuantizeLinear the group absorbs: the only reader of the anchor's output, which is no graph
    output, with a constant float32 scale and an explicit uint8/int8 zero point per tensor."""
    out = anchor.output[0]
    readers = graph.consumers.get(out, [])
    if len(readers) != 1 or out in graph.outputs:
        return None
    q = readers[0]
    if not _is(q, "QuantizeLinear") or len(q.input) < 3 or _attribute(q, "block_size", 0):
        return None
    scale, zero = graph.constant(q.input[1]), graph.constant(q.input[2])
    if scale is None or zero is None or scale.dtype != np.float32 or scale.size != 1 or zero.size != 1 \
            or zero.dtype.type not in QUANTIZED:
        return None
    return q


def _group(graph: _Graph, anchor: onnx.NodeProto) -> Group | None:
    """The fused group of ``anchor`` (None if neither operand is dequantized); NotSupported naming what
    keeps a group with a dequantized operand from fusing."""
    x_dq, w_dq = (graph.op(anchor.input[i], "DequantizeLinear") for i in (0, 1))
    if x_dq is None and w_dq is None:
        return None
    for dq, index, what in ((x_dq, 0, "activations"), (w_dq, 1, "weights")):
        if dq is None:
            raise NotSupported(f"the {what} {anchor.input[index]!r} are not dequantized "
                               "(both operands must be)")
    weights = graph.known.get(w_dq.input[0])
    if weights is None or weights.data is None:
        raise NotSupported(f"the weights {w_dq.input[0]!r} are not a constant")
    axis = _weights_axis(anchor, len(weights.shape))
    channels = weights.shape[axis]
    x = _dequantized(graph, x_dq, "activations", QUANTIZED)
    w = _dequantized(graph, w_dq, "weights", QUANTIZED, axis, channels)
    q = _output(graph, anchor)
    bias, bias_dq = _bias(graph, anchor, q is not None, graph.constant(x[1]), graph.constant(w[1]), channels)
    inputs = [*x, *w, *([q.input[1], q.input[2]] if q is not None else ["", ""]), *bias]
    node = helper.make_node(ANCHORS[anchor.op_type], inputs, list((q or anchor).output), name=anchor.name,
                            domain=FUSED_DOMAIN)
    node.attribute.extend(anchor.attribute)
    values = [graph.known.get(name) if name else None for name in inputs]
    if all(v is not None for v, name in zip(values, inputs) if name):
        lower(node, values)        # NotSupported if the op model cannot take the group
    members = {id(m): m for m in (x_dq, w_dq, bias_dq, anchor, q) if m is not None}
    return Group(node, tuple(n for n in graph.nodes if id(n) in members))


def fuse(model: onnx.ModelProto, labels: Sequence[str], known: dict[str, Value]) -> Fused:
    """``model`` with every QDQ group the op model can run fused into one node (its nodes renamed to
    ``labels``); ``known``: the values known before a run (shapes, constants), to lower each group."""
    named = onnx.ModelProto()
    named.CopyFrom(model)
    for node, label in zip(named.graph.node, labels):
        node.name = label
    graph = _Graph(named, known)
    groups, skipped = {}, {}
    for anchor in graph.nodes:
        if not any(_is(anchor, op_type) for op_type in ANCHORS):
            continue
        try:
            group = _group(graph, anchor)
        except NotSupported as error:
            skipped[anchor.name] = error.reason
            continue
        if group is not None:
            groups[anchor.name] = group
    if not groups:
        return Fused(named, {}, skipped)
    dropped = {id(member) for group in groups.values() for member in group.members
               if not (member.op_type == "DequantizeLinear" and _read_elsewhere(graph, member, groups))}
    nodes = [groups[node.name].node if node.name in groups else node for node in graph.nodes
             if node.name in groups or id(node) not in dropped]
    fused = onnx.ModelProto()      # a new model: the groups keep their members, which live in ``named``
    fused.CopyFrom(named)
    del fused.graph.node[:]
    fused.graph.node.extend(nodes)
    fused.opset_import.append(helper.make_opsetid(FUSED_DOMAIN, 1))
    return Fused(fused, groups, skipped)


def _read_elsewhere(graph: _Graph, dq: onnx.NodeProto, groups: dict[str, Group]) -> bool:
    """True if a node outside the fused groups' anchors reads the DequantizeLinear's output (or it is a
    graph output): it then stays in the graph for them."""
    out = dq.output[0]
    return out in graph.outputs or any(reader.name not in groups for reader in graph.consumers.get(out, []))
