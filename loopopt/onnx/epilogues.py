"""Elementwise nodes fused into the float32 Conv before them as its kernel's epilogue (``epilogue.Epilogue``).

A Conv whose output only an Add of a second float32 tensor of the same shape reads (a ResNet block's
shortcut), then only a Relu or a Clip with constant bounds, computes ``clip(conv + bias + residual)`` in
its kernel's store (``Schedule.add_residual``, ``Schedule.clip``) instead of the numpy steps over its
output: the same float32 roundings as those nodes (one addition, then a clip). Each link is taken only
where nothing else reads the value it consumes and it is no graph output; an Add of two Convs' outputs
(a downsampling shortcut) goes to the first of them in graph order, the other's output its residual.
``find`` returns the chains; the backend compiles the Conv's kernel with the epilogue, runs it where
the chain's last node was (the residual may be computed after the Conv) and drops the absorbed nodes.

Quantized nodes are left alone: a QLinearConv/QDQ group's output is requantized, so a fused float clip or
add would be taken before the rounding onnx.reference does after it (not the same bits).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np
import onnx

from ..activation import Clip
from ..epilogue import Epilogue
from ..schedule import Schedule
from .graph import STANDARD_DOMAINS
from .lowering import FLOAT32, Floats, Value


@dataclass(frozen=True)
class Chain:
    """A Conv's fused epilogue: the value added (``residual``, "" for none), the clip, the nodes absorbed
    (in order) and the value the kernel then writes (the last absorbed node's output)."""

    residual: str
    clip: Optional[Clip]
    absorbed: tuple[str, ...]
    output: str

    @property
    def epilogue(self) -> Epilogue:
        return Epilogue(self.clip, bool(self.residual))

    def apply(self, schedule: Schedule) -> Schedule:
        """``schedule`` with the chain's epilogue steps."""
        if self.residual:
            schedule = schedule.add_residual()
        return schedule.clip(**self.clip.bounds) if self.clip else schedule


def find(nodes: Sequence[onnx.NodeProto], known: Mapping[str, Value], outputs: Sequence[str],
         opset: int, floats: Floats = FLOAT32) -> dict[str, Chain]:
    """The fusable chains of ``nodes`` (named, in graph order), by Conv node name (``known``: the shapes,
    dtypes and constants of the values; ``outputs``: the graph's outputs; ``opset``: the default domain's;
    ``floats``: the dtypes of the Convs whose kernels take an epilogue)."""
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
        conv = node.op_type == "Conv" and node.domain in STANDARD_DOMAINS
        if not conv or not _float(known, node.output[0], floats):
            continue
        value, residual, clip, absorbed = node.output[0], "", None, []
        nxt = only_reader(value)
        if nxt is not None and nxt.op_type == "Add":
            others = [n for n in nxt.input if n != value]
            same = len(others) == 1 and _float(known, others[0], floats)
            if same and _alike(known[others[0]], known[value]):
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


def _alike(a: Value, b: Value) -> bool:
    return (a.shape, a.dtype) == (b.shape, b.dtype)


def _float(known: Mapping[str, Value], name: str, floats: Floats) -> bool:
    return name in known and known[name].dtype.name in floats and known[name].shape is not None


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
