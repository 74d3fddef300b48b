"""``loopopt.onnx.backend``: an ONNX backend in the standard shape (``onnx.backend.base``).

Conv, ConvInteger, QLinearConv, MatMul, MatMulInteger, QLinearMatMul and Gemm nodes, and the
DequantizeLinear -> Conv/MatMul/Gemm (-> QuantizeLinear) groups of QDQ models (``qdq.fuse``),
run as loopopt kernels (the best schedule of a tuning log when ``log=`` is given, ``tune=N`` tuning
each op into it first, else the default register-blocked one) with their weights packed at prepare;
pooling nodes run as loopopt pooling kernels (``pooling.PoolRunner``: channels-last, the layout the
conv kernels hand on; numpy's ``pooling.POOLS`` where the op model refuses one), elementwise nodes
(``elementwise.ELEMENTWISE``) in numpy and compiled loops on the kernels' storage layouts (the compiled
ones on the model's threads; a QOperator residual's DequantizeLinear -> Add -> Relu in one:
``residual_add``);
every other node runs on onnx.reference. ``prepare`` builds the execution plan (``plan.Plan``)
that ``run`` walks. ``rep.lowered`` says, per compute node, which loopopt op and schedule ran it,
the nodes a fused group absorbed (or why the reference ran it); ``rep.fallbacks()`` lists every
node onnx.reference runs, with the reason, and ``rep.profile(inputs)`` what each node costs.
``strict=True`` raises NotImplementedError naming the node and what is missing instead of running
a compute node on the reference. ``device="CUDA"`` prepares a ``device_rep.DeviceRep`` instead: the
model's nodes on the GPU.
"""
from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import onnx
from onnx import helper, shape_inference
from onnx.backend.base import Backend, BackendRep
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun
from onnx.reference.ops import load_op

from ..kernel import Kernel
from ..pool import PoolSchedule
from ..targets.base import TargetUnavailableError
from ..targets.registry import host_target
from .device import GPU, Device, cuda_device
from .device_rep import DeviceRep
from .elementwise import ELEMENTWISE, VIEWS, fuse_lookups
from .epilogues import Chain, find
from .graph import STANDARD_DOMAINS, feeds, known_values, load_model, node_label
from .kernels import KernelCache, LoweredNode
from .lowering import FUSED, FUSED_DOMAIN, Lowering, NotSupported, Value, lower, lowerable
from .plan import KERNEL, NUMPY, REFERENCE, Calling, Plan, Step, viewing
from .pooling import POOLS, PoolRunner, pool_attributes, selects_elements
from .qdq import fuse
from .residual_add import fuse_residual_adds

DEVICES = ("CPU", GPU)
SMALL_INPUT = 4096     # elements: inputs up to this size key a node's lowering by their data too


class LoopoptRep(BackendRep):
    """A prepared model: ``run(inputs) -> list[np.ndarray]``; ``lowered`` per compute node; ``prepared``: the
    model that runs (every node named by its label, QDQ groups fused: ``groups``, and ``skipped``: why a
    Conv/MatMul/Gemm with a dequantized operand was not fused)."""

    def __init__(self, model: onnx.ModelProto, strict: bool = False,
                 log: str | os.PathLike | None = None, threads: int = 1, isa: str = "auto", tune: int = 0):
        self.model = model
        self.strict = strict
        self.kernels = KernelCache(log, threads, isa, tune)
        self.lowered: dict[str, LoweredNode] = {}
        self._runs: dict[tuple, tuple[Lowering, Kernel] | None] = {}    # execute's lowerings, by run_key
        self._check_nodes()
        known = known_values(model)
        self.constants = {name: value.data for name, value in known.items() if value.data is not None}
        fused = fuse(model, [node_label(node, i) for i, node in enumerate(model.graph.node)], known)
        self.prepared, self.groups, self.skipped = fused.model, fused.groups, fused.skipped
        self._evaluator = ReferenceEvaluator(self.prepared, new_ops=_fused_classes(self))
        self._bound: dict[str, Any] = {}     # node -> its kernel with the node's constants packed
        self._pools: dict[str, tuple[PoolRunner, str]] = {}     # pooling node -> what runs it, its input
        opset = next((o.version for o in self.prepared.opset_import if o.domain in STANDARD_DOMAINS), 1)
        outputs = [value.name for value in self.prepared.graph.output]
        # Conv node -> the elementwise nodes after it that its kernel's epilogue runs (``epilogues``)
        self.chains = find(self.prepared.graph.node, known, outputs, opset)
        self._lower_static(known)
        self.plan = self._plan(known)

    def _check_nodes(self) -> None:
        for index, node in enumerate(self.model.graph.node):
            if node.domain not in STANDARD_DOMAINS:
                raise NotImplementedError(f"node {node_label(node, index)}: domain {node.domain!r} of "
                                          f"{node.op_type} is not supported (only the default ONNX domain)")

    def _lower_static(self, known: dict[str, Value]) -> None:
        """Lower and compile every compute node whose input shapes are static in the model, in graph
        order, each preferring a schedule that stores its activations in the memory order they arrive
        in (``order``); one whose inputs after the first are constants gets its kernel bound to them
        (``Lowering.bind``)."""
        order: dict[str, tuple[int, ...]] = {}     # value -> its axes in memory order, where not logical
        reads: dict[str, list[tuple[int, ...] | None]] = {}    # value -> the orders bound kernels read it in
        for node in self.prepared.graph.node:
            if lowerable(node) and all(not n or n in known for n in node.input):
                values = [known[n] if n else None for n in node.input]
                constant = all(v is None or v.data is not None for v in values[1:])
                chain = self.chains.get(node.name) if constant else None
                lowered = self._lowering(node, values, order.get(node.input[0]), chain)
                if lowered is not None and constant:
                    lowering, kernel = lowered
                    self._bound[node.name] = lowering.bind(kernel, [v.data if v else None for v in values])
                    written = chain.output if chain is not None else node.output[0]
                    order[written] = lowering.output_order(kernel)
                    reads.setdefault(node.input[0], []).append(lowering.input_order(kernel))
                else:
                    self.chains.pop(node.name, None)     # its nodes run as they are
            elif any(node.name in chain.absorbed for chain in self.chains.values()):
                continue                                  # the kernel before them writes their output
            elif node.op_type in POOLS and node.domain in STANDARD_DOMAINS and node.input[0] in known:
                rank = len(known[node.input[0]].shape)    # pools compute channels-last
                order[node.output[0]] = (0, *range(2, rank), 1)
            elif node.op_type in ELEMENTWISE and node.op_type not in VIEWS and node.input[0] in order:
                order[node.output[0]] = order[node.input[0]]    # numpy keeps its first input's order
        self.chains = {conv: chain for conv, chain in self.chains.items() if conv in self._bound}
        self._quantized = self._quantized_orders(reads, order)
        self._orders = {name: axes for name, axes in {**order, **self._quantized}.items() if axes is not None}

    def _quantized_orders(self, reads: dict[str, list[tuple[int, ...] | None]],
                          order: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
        """The outputs of QuantizeLinear nodes that every reader reads as the first input of a bound
        kernel storing it in one permutation other than the order its quantize's input arrives in (a
        model's NCHW input, the first conv's NHWC), with that order: the quantize writes it so
        (``elementwise.quantize_linear``), and the kernel reads it without packing it."""
        readers = Counter(name for node in self.prepared.graph.node for name in node.input if name)
        outputs = {value.name for value in self.prepared.graph.output}
        wanted = {}
        for node in self.prepared.graph.node:
            value = node.output[0]
            orders = reads.get(value, [])
            if (node.op_type != "QuantizeLinear" or node.domain not in STANDARD_DOMAINS or not orders
                    or len(set(orders)) != 1 or orders[0] is None or readers[value] != len(orders)
                    or value in outputs):
                continue
            if orders[0] != (order.get(node.input[0]) or tuple(range(len(orders[0])))):
                wanted[value] = orders[0]
        return wanted

    def _plan(self, known: dict[str, Value]) -> Plan:
        """The execution plan: one step per node of ``prepared`` (Constant nodes are constants)."""
        opset = {o.domain or "": o.version for o in self.prepared.opset_import}
        steps = []
        fused = {chain.absorbed[-1]: conv for conv, chain in self.chains.items()}   # runs where chain ends
        absorbed = {name for chain in self.chains.values() for name in chain.absorbed}
        nodes = {node.name: (node, runtime) for node, runtime in zip(self.prepared.graph.node,
                                                                     self._evaluator.rt_nodes_)}
        for node, runtime in nodes.values():
            if all(name in self.constants for name in node.output) or node.name in self.chains:
                continue
            if node.name in fused:
                conv, chain = nodes[fused[node.name]][0], self.chains[fused[node.name]]
                residual = (chain.residual,) if chain.residual else ()
                steps.append(Step(conv.name, conv.op_type, (*conv.input, *residual), (chain.output,),
                                  self._kernel_step(conv, runtime), KERNEL, owns_outputs=True,
                                  last_call=self._bound[conv.name].last_call,
                                  storage=self._bound[conv.name].storage, overwrites=-1 if residual else 0,
                                  holders=(self._bound[conv.name],)))
                continue
            if node.name in absorbed:
                continue
            values = [known.get(n) if n else None for n in node.input]
            step = dict(node=node.name, op_type=node.op_type, inputs=tuple(node.input),
                        outputs=tuple(node.output))
            if lowerable(node):
                engine = self._kernel_engine(node)
                bound = self._bound.get(node.name)
                steps.append(Step(**step, run=self._kernel_step(node, runtime),
                                  owns_outputs=engine["engine"] == KERNEL, **engine,
                                  last_call=bound.last_call if bound is not None else None,
                                  storage=bound.storage if bound is not None else None,
                                  holders=(bound,) if bound is not None else ()))
            elif node.op_type in POOLS and node.domain in STANDARD_DOMAINS:
                value = known.get(node.input[0])
                selects = selects_elements(node.op_type, value and value.shape, pool_attributes(node),
                                           node.output)
                pool = PoolRunner(node.op_type, pool_attributes(node), node.output, self.kernels.threads)
                self._pools[node.name] = (pool, node.input[0])
                steps.append(Step(**step, **_pool_step(pool, runtime, value), owns_outputs=True,
                                  selects=pool.map_through if selects else None, holders=(pool,)))
            elif node.op_type in ELEMENTWISE and node.domain in STANDARD_DOMAINS:
                try:
                    planned = {"order": self._quantized[node.output[0]]} \
                        if node.output[0] in self._quantized else {}
                    run = ELEMENTWISE[node.op_type](node, values, opset.get(node.domain, 1),
                                                    threads=self.kernels.threads, **planned)
                    views = node.op_type in VIEWS
                    calling = isinstance(run, Calling)
                    run, last_call = viewing(run) if views else (run, run.last_call if calling else None)
                    steps.append(Step(**step, run=run, engine=NUMPY, owns_outputs=not views,
                                      last_call=last_call, holders=run.holders if calling else ()))
                except NotSupported as error:
                    steps.append(Step(**step, run=_reference_step(runtime), engine=REFERENCE,
                                      owns_outputs=False, reason=error.reason))
            else:
                steps.append(Step(**step, run=_reference_step(runtime), engine=REFERENCE, owns_outputs=False,
                                  reason=f"no loopopt or numpy implementation of {node.op_type}"))
        outputs = [value.name for value in self.prepared.graph.output]
        threads = self.kernels.threads
        steps = fuse_lookups(steps, self.constants, known, outputs, threads)
        steps = fuse_residual_adds(steps, self.constants, known, outputs, threads)
        plan = Plan(steps, self.constants, outputs)
        self._build_pools(known)
        return plan

    def _build_pools(self, known: dict[str, Value]) -> None:
        """Build the pooling kernels the plan runs, all from one C file: each pooling step's on its
        input, and each pool that maps 8-bit values through a lookup chain's table (``fuse_lookups``) on
        the input of the DequantizeLinear its input comes from, through elementwise nodes; each reading
        its input channels-first where it arrives so (``_orders``: a conv's NCHW output, the model's
        inputs)."""
        producers = {name: node for node in self.prepared.graph.node for name in node.output}
        wanted = []
        for pool, source in self._pools.values():
            if pool.table is not None:       # in a lookup: the values its input was dequantized from
                while source in producers and producers[source].op_type != "DequantizeLinear":
                    source = producers[source].input[0]
                source = producers[source].input[0] if source in producers else ""
            value, order = known.get(source), self._orders.get(source)
            first = order is None or order == tuple(range(len(order)))
            schedule = None if value is None else pool.schedule(value.shape, value.dtype, first)
            if isinstance(schedule, PoolSchedule):
                wanted.append((pool, schedule))
        if wanted:
            kernels = host_target().pool_kernels([schedule for _, schedule in wanted])
            for (pool, _), kernel in zip(wanted, kernels):
                pool.adopt(kernel)

    def _kernel_engine(self, node: onnx.NodeProto) -> dict[str, str]:
        """A compute node's engine, and the reason when it runs on the reference (known at prepare)."""
        lowered = self.lowered.get(node.name)
        if lowered is not None and not lowered.on_kernel:
            return dict(engine=REFERENCE, reason=lowered.reason)
        return dict(engine=KERNEL)

    def _kernel_step(self, node: onnx.NodeProto, runtime: OpRun) -> Any:
        """A compute node's run: its bound kernel, else ``execute`` (lowered once per run_key) and the
        reference where the op model cannot express it."""
        if node.name in self._bound:
            bound = self._bound[node.name]
            if node.name in self.chains and self.chains[node.name].residual:     # its last input
                over = bound.over_residual     # the kernel may write its output over the residual
                return lambda inputs, reuse: bound(inputs[0], inputs[-1], over_residual=reuse and over)
            return lambda inputs, reuse: bound(inputs[0])

        def run(inputs: Sequence[np.ndarray | None], reuse: bool) -> list[np.ndarray]:
            outputs = self.execute(node, inputs)
            return list(runtime.run(*inputs)) if outputs is None else outputs

        return run

    def _lowering(self, node: onnx.NodeProto, values: Sequence[Value | None],
                  arrives: tuple[int, ...] | None = None, chain: Chain | None = None):
        """The node's lowering and compiled kernel (recorded in ``lowered``); None when the op
        model cannot express it (non-strict: recorded with the reason). ``arrives``: the memory order
        of the first input's axes where it is not the logical one; ``chain``: the nodes after it that
        its kernel's epilogue runs."""
        label = node.name
        absorbed = self.groups[label].absorbed if label in self.groups else ()
        try:
            lowering = lower(node, values)
        except NotSupported as error:
            if self.strict:
                raise NotImplementedError(f"node {label} ({node.op_type}) cannot run as a loopopt "
                                          f"kernel: {error}") from error
            self.lowered[label] = LoweredNode(label, node.op_type, reason=error.reason, absorbed=absorbed)
            return None
        compiled = self.kernels.get(lowering.op, lowering.input_layout(arrives), chain)
        skipped = f"not fused with its DequantizeLinear inputs: {self.skipped[label]}" \
            if label in self.skipped else ""
        epilogue = f"fused epilogue: {chain.epilogue}" if chain is not None else ""
        note = "; ".join(text for text in (lowering.note, skipped, epilogue) if text)
        absorbed += chain.absorbed if chain is not None else ()
        self.lowered[label] = LoweredNode(label, node.op_type, lowering.op, compiled.schedule,
                                          compiled.source, compiled.kernel.isa, note, absorbed=absorbed)
        return lowering, compiled.kernel

    def execute(self, node: onnx.NodeProto, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
        """One compute node on its kernel; None if it must run on the reference. The node is lowered
        once per ``run_key`` of its inputs, not on every run."""
        key = (node.name, *map(run_key, inputs))
        if key not in self._runs:
            self._runs[key] = self._lowering(node, [None if a is None else Value(a.shape, a.dtype, a)
                                                    for a in inputs])
        if self._runs[key] is None:
            return None
        lowering, kernel = self._runs[key]
        return lowering.call(kernel, inputs)

    def reference(self, node: onnx.NodeProto, inputs: Sequence[np.ndarray | None],
                  run_params: dict) -> tuple[np.ndarray, ...]:
        """``node`` on onnx.reference (a fused node: the original nodes of its group, in order)."""
        members = self.groups[node.name].members if node.name in self.groups else (node,)
        values = {**self.constants, **dict(zip(node.input, inputs))}
        for member in members:
            version = run_params["opsets"][member.domain]
            op = load_op(member.domain, member.op_type, version)(member, run_params)
            values.update(zip(member.output, op.run(*(values[n] if n else None for n in member.input))))
        return tuple(values[n] for n in node.output)

    def run(self, inputs: Any, **kwargs: Any) -> list[np.ndarray]:
        """The model's outputs for ``inputs`` (a list in graph-input order, a dict, or one array)."""
        return self.plan.outputs_of(feeds(self.model, inputs))

    def values(self, inputs: Any) -> dict[str, np.ndarray]:
        """Every value of ``prepared`` on ``inputs``: the constants, the inputs and each node's outputs."""
        return self.plan.run(feeds(self.model, inputs), keep=True)

    def profile(self, inputs: Any, runs: int = 3) -> dict[str, float]:
        """Each node's median seconds over ``runs`` runs of the plan on ``inputs``, by node name."""
        given = feeds(self.model, inputs)
        times: list[dict[str, float]] = []
        for _ in range(runs):
            times.append({})
            self.plan.run(given, times=times[-1])
        return {node: float(np.median([t[node] for t in times])) for node in times[0]}

    def fallbacks(self) -> list[Step]:
        """The nodes onnx.reference runs (``Step.reason`` says why): those known at prepare, and compute
        nodes of dynamic shapes whose lowering a run found the op model cannot express."""
        lowered = self.lowered
        return [replace(step, engine=REFERENCE, reason=lowered[step.node].reason)
                if step.node in lowered and not lowered[step.node].on_kernel else step
                for step in self.plan.steps
                if step.engine == REFERENCE or (step.node in lowered and not lowered[step.node].on_kernel)]


def run_key(array: np.ndarray | None) -> tuple | None:
    """What a node's lowering depends on in one input: its shape and dtype, and the data of a small
    input (the lowerings read the data of scales and zero points, never of activations or weights)."""
    if array is None:
        return None
    array = np.asarray(array)
    return (array.shape, array.dtype.str, array.tobytes() if array.size <= SMALL_INPUT else None)


class _FusedGroup(OpRun):
    """A fused QDQ node on onnx.reference: the original nodes of its group (``LoopoptRep.reference``)."""

    op_domain = FUSED_DOMAIN
    rep: LoopoptRep

    def _run(self, *inputs, **kwargs):
        return self.rep.reference(self.onnx_node, inputs, self.run_params)


def _fused_classes(rep: LoopoptRep) -> list[type[OpRun]]:
    """One OpRun class per op type of ``FUSED`` (ReferenceEvaluator finds them by domain and class name)."""
    return [type(op_type, (_FusedGroup,), {"rep": rep}) for op_type in FUSED]


def _reference_step(runtime: OpRun) -> Any:
    """A node's run on its onnx.reference implementation."""
    return lambda inputs, reuse: runtime.run(*inputs)


def _pool_step(pool: PoolRunner, runtime: OpRun, value: Value | None) -> dict[str, Any]:
    """A pooling node's run and engine: ``pool``'s kernel (where the input's shape is known, the kernel
    of ``LoopoptRep._build_pools``), else numpy, ``reason`` saying why; else onnx.reference. An input
    of unknown shape is marked for the kernel; its first run decides (``PoolRunner``)."""

    def run(inputs: Sequence[np.ndarray | None], reuse: bool) -> Sequence[np.ndarray]:
        pooled = pool(inputs[0])
        return runtime.run(*inputs) if pooled is None else [pooled]

    engine, reason = (KERNEL, "") if value is None else pool.engine(value)
    return dict(run=run, engine=engine, reason=reason, last_call=pool.last_call)


class LoopoptBackend(Backend):
    """The ONNX backend API over ``LoopoptRep`` (the CPU) and ``DeviceRep`` (a GPU: ``device="CUDA"``)."""

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """The CPU; the GPU where CuPy sees one."""
        name = str(device).upper()
        if name == GPU:
            try:
                cuda_device()
            except TargetUnavailableError:
                return False
        return name in DEVICES

    @classmethod
    def _device(cls, device: str | Device) -> Device | None:
        """The device ``device`` names (None: the CPU); a ValueError for an unknown name, the GPU's
        TargetUnavailableError where it is missing."""
        if isinstance(device, Device):
            return device
        if str(device).upper() not in DEVICES:
            raise ValueError(f"device {device!r} is not supported; loopopt runs on {', '.join(DEVICES)}")
        return cuda_device() if str(device).upper() == GPU else None

    @classmethod
    def prepare(cls, model, device: str | Device = "CPU", strict: bool = False,
                log: str | os.PathLike | None = None, threads: int = 1, isa: str = "auto", tune: int = 0,
                **kwargs: Any) -> LoopoptRep | DeviceRep:
        """A rep of ``model`` (ModelProto, path or bytes); compute nodes with static shapes are
        lowered and compiled now, the others at the first run; kernels for ``isa`` ("auto": the
        best this CPU has, and a logged schedule on the ISA it was measured on). ``tune``: first tune
        each distinct compute op with that many trials into the tuning log ``log`` (one line on
        stderr per op; trials already in the log are not measured again), whose best schedules then
        run the nodes. ``device="CUDA"`` (or a ``device.Device``, e.g. ``emulated_device()``): the
        model runs on the GPU (``DeviceRep``: the log's trials of that GPU, else the search's first
        candidate by its cost model; ``threads``, ``isa`` and ``tune`` are the CPU's)."""
        chosen = cls._device(device)
        if chosen is not None:
            if tune or threads != 1 or isa != "auto":
                raise ValueError(f"tune, threads and isa choose the CPU's kernels; on {chosen} give log= "
                                 f"(a tuning log of lo.tune(op, target=\"cuda\")) and strict= only")
            return DeviceRep(load_model(model), chosen, strict=strict, log=log)
        return LoopoptRep(load_model(model), strict=strict, log=log, threads=threads, isa=isa, tune=tune)

    @classmethod
    def run_model(cls, model, inputs: Any, device: str = "CPU", **kwargs: Any) -> list[np.ndarray]:
        """``prepare(model, device, **kwargs).run(inputs)``."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU", outputs_info=None,
                 strict: bool = False, opset_version: int | None = None, **kwargs: Any) -> list[np.ndarray]:
        """One node on ``inputs`` (arrays in the node's input order; empty names are skipped), as a
        one-node model of the default opset (or ``opset_version``)."""
        cls._device(device)
        names = [n for n in node.input if n]
        if len(inputs) != len(names):
            raise ValueError(f"node {node.name or node.op_type} has {len(names)} inputs {names}, "
                             f"got {len(inputs)} arrays")
        arrays = [np.asarray(a) for a in inputs]
        graph = helper.make_graph(
            [node], f"run_node_{node.op_type}",
            [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
             for n, a in zip(names, arrays)],
            [helper.make_empty_tensor_value_info(n) for n in node.output if n])
        version = opset_version or onnx.defs.onnx_opset_version()
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)])
        model = shape_inference.infer_shapes(model)   # types the outputs
        return cls.prepare(model, device, strict=strict, **kwargs).run(arrays)


prepare = LoopoptBackend.prepare
run_model = LoopoptBackend.run_model
run_node = LoopoptBackend.run_node
supports_device = LoopoptBackend.supports_device
is_compatible = LoopoptBackend.is_compatible
