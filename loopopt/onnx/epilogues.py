"""Elementwise nodes fused into the float32 Conv before them as its kernel's epilogue (``epilogue.Epilogue``).

A Conv whose output only an Add of a second float32 tensor of the same shape reads (a ResNet block's
shortcut), then only a Relu or a Clip with constant bounds, computes ``clip(conv + bias + residual)`` in
its kernel's store (``Schedule.add_residual``, ``Schedule.clip``) instead of the numpy steps over its
output: the same float32 roundings as those nodes (one addition, then a clip). Each link is taken only
where nothing else reads the value it consumes and it is no graph output; an Add of two Convs' outputs
(a downsampling shortcut) goes to the first of them in graph order, the other's output its residual.
``find`` returns the chains; the backend compiles the Conv's kernel with the epilogue, runs it where
the chain's last node was (the residual may be computed after the Conv) and drops the absorbed nodes.

A requantized Conv (QLinearConv, or a QDQ group that ends in a QuantizeLinear) whose output only a
DequantizeLinear of the same scale and zero point reads, then only a Relu or a constant Clip, then only a
QuantizeLinear to the same 8-bit type (MobileNetV2's ReLU6 between two scales) computes the three in its
kernel's store (``Schedule.clip_quantized``, ``QuantizedClip``), where its arithmetic gives the nodes'
bits for every 8-bit value of the Conv's output (checked at prepare; the kernel multiplies by the
reciprocal of the scale where QuantizeLinear divides). Float clips or adds are not fused into quantized
Convs: they would be taken before the rounding onnx.reference does after them (not the same bits).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np
import onnx

from ..activation import Clip
from ..epilogue import Epilogue
from ..quant_reference import clip_requantized
from ..schedule import Schedule
from .elementwise import ELEMENTWISE
from .graph import STANDARD_DOMAINS
from .lowering import FUSED_DOMAIN, Value

REQUANTIZED_CONVS = (("QLinearConv", STANDARD_DOMAINS), ("QDQConv", (FUSED_DOMAIN,)))   # op type, domains
Y_SCALE, Y_ZERO_POINT = 6, 7       # the inputs of their output's quantization (QLinearConv's order)


@dataclass(frozen=True)
class QuantizedClip:
    """A requantized Conv's DequantizeLinear -> Relu/Clip -> QuantizeLinear in its store
    (``Schedule.clip_quantized``): the clip, and the scale and zero point of the QuantizeLinear."""

    clip: Clip
    scale: np.float32
    zero_point: np.ndarray     # 0-d, of the Conv output's 8-bit dtype

    def __str__(self) -> str:
        bounds = ", ".join(f"{name}={value!r}" for name, value in self.clip.bounds.items())
        return (f"dequantized, clip({bounds}), quantized again (scale {float(self.scale)!r}, "
                f"zero point {int(self.zero_point)})")


@dataclass(frozen=True)
class Chain:
    """A Conv's fused epilogue: the value added (``residual``, "" for none), the clip, the nodes absorbed
    (in order) and the value the kernel then writes (the last absorbed node's output)."""

    residual: str
    clip: Optional[Clip]
    absorbed: tuple[str, ...]
    output: str
    requantized: Optional[QuantizedClip] = None    # a requantized Conv's clip (then no clip nor residual)

    @property
    def epilogue(self) -> Epilogue | QuantizedClip:
        return self.requantized if self.requantized is not None else Epilogue(self.clip, bool(self.residual))

    @property
    def params(self) -> dict[str, np.ndarray]:
        """The kernel call's parameters of the epilogue (``clip_quantized``'s scale and zero point)."""
        if self.requantized is None:
            return {}
        return dict(clip_scale=self.requantized.scale, clip_zero_point=self.requantized.zero_point)

    def apply(self, schedule: Schedule) -> Schedule:
        """``schedule`` with the chain's epilogue steps."""
        if self.requantized is not None:
            return schedule.clip_quantized(**self.requantized.clip.bounds)
        if self.residual:
            schedule = schedule.add_residual()
        return schedule.clip(**self.clip.bounds) if self.clip else schedule


def find(nodes: Sequence[onnx.NodeProto], known: Mapping[str, Value], outputs: Sequence[str],
         opset: int) -> dict[str, Chain]:
    """The fusable chains of ``nodes`` (named, in graph order), by Conv node name (``known``: the shapes,
    dtypes and constants of the values; ``outputs``: the graph's outputs; ``opset``: the default domain's)."""
    readers = Counter(name for node in nodes for name in set(node.input) if name)
    reader = {name: node for node in nodes for name in node.input if name}

    claimed: set[str] = set()          # nodes a chain absorbs already (an Add of two Convs' outputs)

    def only_reader(value: str) -> onnx.NodeProto | None:
        """The node that alone reads ``value`` (a graph output has the graph as another reader), unless
        another chain absorbs it."""
        fits = readers[value] == 1 and value not in outputs and reader[value].domain in STANDARD_DOMAINS
        return reader[value] if fits and reader[value].name not in claimed else None

    chains = {}
    for node in nodes:
        if any(node.op_type == kind and node.domain in domains for kind, domains in REQUANTIZED_CONVS):
            chain = _quantized_clip(node, known, opset, only_reader)
            if chain is not None:
                chains[node.name] = chain
                claimed.update(chain.absorbed)
            continue
        conv = node.op_type == "Conv" and node.domain in STANDARD_DOMAINS
        if not conv or not _float32(known, node.output[0]):
            continue
        value, residual, clip, absorbed = node.output[0], "", None, []
        nxt = only_reader(value)
        if nxt is not None and nxt.op_type == "Add":
            others = [n for n in nxt.input if n != value]
            same = len(others) == 1 and _float32(known, others[0])
            if same and known[others[0]].shape == known[value].shape:
                residual, value = others[0], nxt.output[0]
                absorbed.append(nxt.name)
                nxt = only_reader(value)
        if nxt is not None and nxt.op_type in ("Relu", "Clip"):
            clip = _clip(nxt, known, opset)
            if clip is not None:
                value = nxt.output[0]
                absorbed.append(nxt.name)
        if absorbed:
            chains[node.name] = Chain(residual, clip, tuple(absorbed), value)
            claimed.update(absorbed)
    return chains


def _quantized_clip(conv: onnx.NodeProto, known: Mapping[str, Value], opset: int,
                    only_reader: Callable[[str], onnx.NodeProto | None]) -> Chain | None:
    """The chain of a requantized Conv's DequantizeLinear -> Relu/Clip -> QuantizeLinear (each the only
    reader of the value before it), if the kernel's ``clip_quantized`` gives their bits for every
    value of the Conv's output; else None."""
    value = conv.output[0]
    y_scale, y_zero = (_constant(known, conv.input[i]) if len(conv.input) > i else None
                       for i in (Y_SCALE, Y_ZERO_POINT))
    if y_scale is None or y_zero is None or value not in known or known[value].dtype != y_zero.dtype:
        return None
    dequantize = only_reader(value)
    if dequantize is None or dequantize.op_type != "DequantizeLinear" or _attributes(dequantize) - {"axis"}:
        return None
    scale, zero = (_constant(known, name) for name in (*dequantize.input[1:3], "")[:2])
    if scale is None or zero is None or scale.dtype != y_scale.dtype or scale != y_scale or zero != y_zero:
        return None
    activation = only_reader(dequantize.output[0])
    clips = activation is not None and activation.op_type in ("Relu", "Clip")
    clip = _clip(activation, known, opset) if clips else None
    quantize = only_reader(activation.output[0]) if clip is not None else None
    if quantize is None or quantize.op_type != "QuantizeLinear" or _attributes(quantize) - {"axis"}:
        return None
    scale, zero = (_constant(known, name) for name in (*quantize.input[1:3], "")[:2])
    if scale is None or zero is None or scale.dtype != np.float32 or zero.dtype != y_zero.dtype:
        return None
    members = (dequantize, activation, quantize)
    values = np.arange(256, dtype=np.uint8).view(y_zero.dtype)
    if not np.array_equal(_steps(members, values, known, opset),
                          clip_requantized(values, y_scale, y_zero, clip, scale, zero)):
        return None
    return Chain("", None, tuple(node.name for node in members), quantize.output[0],
                 QuantizedClip(clip, np.float32(scale), zero))


def _steps(nodes: Sequence[onnx.NodeProto], values: np.ndarray, known: Mapping[str, Value],
           opset: int) -> np.ndarray:
    """``values`` through the elementwise ``nodes`` in order, each as the plan runs it (``ELEMENTWISE``)."""
    for node in nodes:
        run = ELEMENTWISE[node.op_type](node, [known.get(n) if n else None for n in node.input], opset)
        values = run([values, *(known[n].data if n else None for n in node.input[1:])], False)[0]
    return values


def _constant(known: Mapping[str, Value], name: str) -> np.ndarray | None:
    """The value of the one-element constant ``name`` as a 0-d array, or None."""
    data = known[name].data if name and name in known else None
    return None if data is None or data.size != 1 else data.reshape(())


def _attributes(node: onnx.NodeProto) -> set[str]:
    return {a.name for a in node.attribute}


def _float32(known: Mapping[str, Value], name: str) -> bool:
    return name in known and known[name].dtype == np.float32 and known[name].shape is not None


def _clip(node: onnx.NodeProto, known: Mapping[str, Value], opset: int) -> Optional[Clip]:
    """The clip of a Relu or of a Clip with constant scalar bounds (inputs from opset 11, attributes
    before); None where it has none or they are not constants."""
    if node.op_type == "Relu":
        return Clip(low=0.0)
    if opset >= 11:
        if node.attribute:
            return None
        bounds = []
        for index in (1, 2):
            name = node.input[index] if index < len(node.input) else ""
            if name and (name not in known or known[name].data is None or known[name].data.size != 1):
                return None
            bounds.append(float(known[name].data.reshape(())) if name else None)
    else:
        given = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if set(given) - {"min", "max"}:
            return None
        bounds = [given.get("min"), given.get("max")]
    if bounds == [None, None] or any(b is not None and not np.isfinite(b) for b in bounds):
        return None
    if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
        return None
    return Clip(*bounds)
