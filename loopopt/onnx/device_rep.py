"""A model prepared for a device beside the host (``prepare(model, device="CUDA")``, ``device.Device``).

At prepare each compute node (Conv, MatMul, Gemm of a float dtype the device's kernels take,
``Device.floats``) whose inputs have static shapes and whose weights are constants is lowered as on the
CPU (``lowering.lower``), given its schedule and compiled once, its weights copied to the device once
(``device_kernels``); a Conv's Add/Relu/Clip chain (``epilogues.find``) runs in its kernel's epilogue
where the kernel takes it. The glue nodes run on device arrays through the device's array module, by
the same builders the CPU path runs on numpy (``GLUE``: Relu, Clip, Add, Sub, Mul, Div, Concat;
Flatten, Reshape and Identity as views; ``pooling.POOLS``). ``run`` copies the inputs to the device
once, walks the plan (``plan.Plan``) on device arrays, and copies the outputs back once.

A node the device cannot run (a quantized or float64 node, an op type without a device implementation,
weights computed at run time) raises NotImplementedError naming it, its op type and why with
``strict=True``; otherwise it runs on the host (onnx.reference) with its inputs copied there and its
outputs back, and ``fallbacks()`` lists it with the reason. ``lowered`` says, per compute node, its op
and where its schedule came from.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import BackendRep
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

from ..kernel import Kernel
from ..schedule import ScheduleError
from .device import Device
from .device_kernels import Choice, DeviceKernel, compile_choices, device_schedule
from .elementwise import VIEWS, binary, clip, concat, flatten, identity, relu, reshape
from .epilogues import Chain, find
from .graph import STANDARD_DOMAINS, feeds, known_values, node_label
from .kernels import LoweredNode
from .lowering import Lowering, NotSupported, Value, lower, lowerable
from .plan import Plan, Step
from .pooling import POOLS, pool_attributes, unsupported

DEVICE_KERNEL, DEVICE_ARRAYS, HOST = "loopopt kernel on the device", "device arrays", "host (onnx.reference)"
GLUE = {"Relu": relu, "Clip": clip, "Add": binary(np.add), "Sub": binary(np.subtract),
        "Mul": binary(np.multiply), "Div": binary(np.divide), "Flatten": flatten, "Reshape": reshape,
        "Identity": identity, "Concat": concat}
PARAMETERS = {"Clip": 1, "Reshape": 1}    # op type -> its inputs from this index on are host parameters
Chosen = tuple[Lowering, Choice, list, np.dtype]    # a compute node's lowering, schedule, constants, dtype


class DeviceRep(BackendRep):
    """A model prepared for ``device``: ``run(inputs) -> list[np.ndarray]``, ``lowered`` per compute node,
    ``fallbacks()`` the nodes run on the host."""

    def __init__(self, model: onnx.ModelProto, device: Device, strict: bool = False,
                 log: str | os.PathLike | None = None):
        self.model, self.device, self.strict, self.log = model, device, strict, log
        self.prepared = onnx.ModelProto()
        self.prepared.CopyFrom(model)
        for index, node in enumerate(self.prepared.graph.node):
            node.name = node_label(node, index)
        known = known_values(self.prepared)
        constants = {name: value.data for name, value in known.items() if value.data is not None}
        self.opset = next((o.version for o in self.prepared.opset_import if o.domain in STANDARD_DOMAINS), 1)
        outputs = [value.name for value in self.prepared.graph.output]
        self.chains = find(self.prepared.graph.node, known, outputs, self.opset, device.floats)
        self.lowered: dict[str, LoweredNode] = {}
        steps = self._steps(known, ReferenceEvaluator(self.prepared).rt_nodes_)
        data = {name for step in steps if step.engine != HOST
                for name in step.inputs[:PARAMETERS.get(step.op_type, len(step.inputs))]}
        self.plan = Plan(steps, {name: device.to_device(array) if name in data else array
                                 for name, array in constants.items()}, outputs)

    def _steps(self, known: dict[str, Value], runtimes: Sequence[OpRun]) -> list[Step]:
        """One step per node that computes something; a Conv with its chain's epilogue where the chain
        ends (its Add may read a value computed after the Conv). The compute nodes' kernels are built
        together first (``compile_choices``)."""
        nodes = self.prepared.graph.node
        chosen = {node.name: self._choose(node, known) for node in nodes
                  if node.domain in STANDARD_DOMAINS and lowerable(node)}
        pending = {name: choice for name, choice in chosen.items() if choice is not None}
        choices = [choice for _, choice, _, _ in pending.values()]
        built = dict(zip(pending, compile_choices(choices, self.device)))
        steps: list[Step] = []
        at_end: dict[str, tuple[onnx.NodeProto, DeviceKernel, Chain]] = {}    # chain's last node -> its Conv
        absorbed: set[str] = set()
        for node, runtime in zip(nodes, runtimes):
            if node.name in at_end:
                conv, call, chain = at_end[node.name]
                steps.append(Step(conv.name, conv.op_type, (conv.input[0], chain.residual), (chain.output,),
                                  lambda inputs, reuse, call=call: call(*inputs), DEVICE_KERNEL, True))
            elif node.name in absorbed or all(name in known and known[name].data is not None
                                              for name in node.output):
                continue
            elif node.domain not in STANDARD_DOMAINS:
                steps.append(self._host(node, runtime, f"domain {node.domain!r}"))
            elif lowerable(node):
                call = self._kernel(node, pending.get(node.name), built.get(node.name))
                chain = self.chains.get(node.name)
                if call is None:
                    steps.append(self._host(node, runtime, self.lowered[node.name].reason))
                elif chain is not None:
                    at_end[chain.absorbed[-1]] = (node, call, chain)
                    absorbed.update(chain.absorbed)
                else:
                    steps.append(Step(node.name, node.op_type, (node.input[0],), (node.output[0],),
                                      lambda inputs, reuse, call=call: call(inputs[0]), DEVICE_KERNEL, True))
            else:
                steps.append(self._glue(node, known, runtime))
        return steps

    def _choose(self, node: onnx.NodeProto, known: dict[str, Value]) -> Chosen | None:
        """The compute node's lowering, schedule, constant inputs and dtype, or None (the reason recorded)."""
        values = [known.get(name) if name else None for name in node.input]
        try:
            if any(name and value is None for name, value in zip(node.input, values)):
                raise NotSupported("an input of unknown shape at prepare")
            if any(value is not None and value.data is None for value in values[1:]):
                raise NotSupported("weights computed at run time (the device path binds constant weights)")
            lowering = lower(node, values, self.device.floats)
            if lowering.op.quant is not None:
                raise NotSupported(f"a quantized op ({lowering.op.quant}): the device path runs float nodes")
            choice = device_schedule(lowering.op, self.device, self.log, self.chains.get(node.name))
        except (NotSupported, ScheduleError) as error:
            self._unlowered(node, getattr(error, "reason", str(error)))
            return None
        return lowering, choice, [None if v is None else v.data for v in values], values[0].dtype

    def _unlowered(self, node: onnx.NodeProto, reason: str) -> None:
        """Record why the compute node runs on the host (strict: NotImplementedError); its chain's nodes
        run as they are."""
        self.chains.pop(node.name, None)
        self._refuse(node, reason)
        self.lowered[node.name] = LoweredNode(node.name, node.op_type, reason=reason)

    def _kernel(self, node: onnx.NodeProto, pending: Chosen | None,
                built: tuple[Kernel, Choice] | ScheduleError | None) -> DeviceKernel | None:
        """The compute node's kernel on the device (recorded in ``lowered``), or None (the reason recorded;
        strict: NotImplementedError); its chain is dropped where the kernel does not run it."""
        if pending is None:
            return None
        if isinstance(built, ScheduleError):
            self._unlowered(node, str(built))
            return None
        lowering, _, constants, dtype = pending
        kernel, choice = built
        try:
            call = DeviceKernel(kernel, lowering, constants, self.device, dtype)
        except NotSupported as error:
            self._unlowered(node, error.reason)
            return None
        chain = self.chains.get(node.name)
        if not choice.fused:
            self.chains.pop(node.name, None)
        epilogue = f"fused epilogue: {chain.epilogue}" if choice.fused else ""
        note = "; ".join(text for text in (lowering.note, epilogue, f"on {self.device}") if text)
        self.lowered[node.name] = LoweredNode(node.name, node.op_type, lowering.op, kernel.schedule,
                                              choice.source, self.device.isa, note,
                                              absorbed=chain.absorbed if choice.fused else ())
        return call

    def _glue(self, node: onnx.NodeProto, known: dict[str, Value], runtime: OpRun) -> Step:
        """A glue node's step on device arrays (``GLUE``, ``POOLS``), else on the host."""
        values = [known.get(name) if name else None for name in node.input]
        step = dict(node=node.name, op_type=node.op_type, inputs=tuple(node.input),
                    outputs=tuple(node.output), engine=DEVICE_ARRAYS)
        xp = self.device.xp
        if node.op_type in GLUE:
            try:
                run = GLUE[node.op_type](node, values, self.opset, xp)
            except NotSupported as error:
                return self._host(node, runtime, error.reason)
            return Step(**step, run=run, owns_outputs=node.op_type not in VIEWS)
        if node.op_type in POOLS:
            attributes = pool_attributes(node)
            refusal = "input of unknown shape" if values[0] is None else unsupported(
                node.op_type, values[0], attributes, node.output)
            if refusal is not None:
                return self._host(node, runtime, refusal)
            pool = POOLS[node.op_type]
            return Step(**step, run=lambda inputs, reuse: [pool(inputs[0], attributes, xp)],
                        owns_outputs=True)
        return self._host(node, runtime, f"no implementation of {node.op_type} on device arrays")

    def _refuse(self, node: onnx.NodeProto, reason: str) -> None:
        if self.strict:
            raise NotImplementedError(f"node {node.name} ({node.op_type}) cannot run on {self.device}: "
                                      f"{reason}")

    def _host(self, node: onnx.NodeProto, runtime: OpRun, reason: str) -> Step:
        """The node on onnx.reference on the host: its inputs copied there, its outputs back (strict:
        NotImplementedError naming it)."""
        self._refuse(node, reason)
        return Step(node.name, node.op_type, tuple(node.input), tuple(node.output),
                    _on_host(runtime, self.device), HOST, True, reason=reason)

    def run(self, inputs: Any, **kwargs: Any) -> list[np.ndarray]:
        """The model's outputs for ``inputs``: copied to the device once, the outputs back once."""
        given = {name: self.device.to_device(array) for name, array in feeds(self.model, inputs).items()}
        values = self.plan.run(given)
        return [np.ascontiguousarray(self.device.to_host(values[name])) for name in self.plan.outputs]

    def fallbacks(self) -> list[Step]:
        """The steps that run on the host, ``Step.reason`` saying why."""
        return [step for step in self.plan.steps if step.engine == HOST]


def _on_host(runtime: OpRun, device: Device) -> Callable[[Sequence[Any], bool], list[Any]]:
    def run(inputs: Sequence[Any], reuse: bool) -> list[Any]:
        outputs = runtime.run(*(None if a is None else device.to_host(a) for a in inputs))
        return [device.to_device(np.asarray(out)) for out in outputs]
    return run

