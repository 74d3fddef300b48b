"""A compute node's kernel on a device (``device.Device``): its schedule, and its call on device arrays.

The schedule (``device_schedule``) is the tuning log's fastest verified trial of the op on this device
(``lo.tune(op, target="cuda", log=...)`` keys its trials by the GPU's name) when ``log`` has one, else
the first candidate of the target's search as its cost model ranks them (``SearchRules.rank``), which
the source says. A Conv whose Add/Relu/Clip nodes the epilogue can take (``epilogues.Chain``) gets them
in its kernel where the schedule's kernel takes them (the CUDA tensor-core kernels without split-K):
else the best-ranked candidate that does, where the cost model predicts it at most ``EPILOGUE_SLOWDOWN``
times the first's time; else the nodes run after it.

``DeviceKernel``: the constant inputs (weights, bias) are stored in the kernel's layouts on the host and
copied to the device once, at prepare; a call stores the activation (and the residual) in the kernel's
layouts with the device's array module, runs the kernel, and returns the node's outputs as views of its
output in the logical layout, of the node's dtype (a float16 node's kernel sums in float32).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..kernel import Kernel
from ..ops import FLOAT16, Op
from ..schedule import Schedule, ScheduleError
from ..schedule_file import SCHEDULE_ALGORITHMS
from ..targets.search import Candidate, SearchRules
from ..tune import best_trial
from ..tune.log import signature
from .device import Device
from .lowering import Inputs, Lowering, NotSupported

if TYPE_CHECKING:
    from .epilogues import Chain

RANKED = "first candidate of the search"                 # + its rank by the cost model and knobs
FUSING = "best-ranked candidate of the search that fuses the epilogue"
# a kernel that takes a chain's epilogue is taken where predicted at most this much slower than the first
# candidate (whose outputs the chain's nodes would read and write once more after it)
EPILOGUE_SLOWDOWN = 1.5
_RANKINGS: dict[tuple[str, str, str], list[Candidate]] = {}     # (op signature, target, isa) -> ranking


@dataclass(frozen=True)
class Choice:
    """A node's schedule on the device, with ``chain``'s epilogue where ``fused``, and its source; ``plain``
    and ``plain_source``: the one built instead where the target refuses the epilogue."""

    schedule: Schedule
    source: str
    fused: bool
    plain: Schedule
    plain_source: str

    def unfused(self) -> Choice:
        return replace(self, schedule=self.plain, source=self.plain_source, fused=False)


def device_schedule(op: Op, device: Device, log: str | os.PathLike | None, chain: Chain | None) -> Choice:
    """``op``'s schedule on ``device`` (see the module's docstring); ScheduleError where no candidate
    builds."""
    if log is not None:
        best = best_trial(op, log, None, device.isa, SCHEDULE_ALGORITHMS, device.fingerprint)
        if best is not None:
            schedule = best.to_schedule(op, f"tuning log {os.fspath(log)}")
            source = f"tuning log {os.fspath(log)} ({device.fingerprint})"
            fused = Choice(chain.apply(schedule), source, True, schedule, source) if chain else None
            return fused or Choice(schedule, source, False, schedule, source)
    rules = device.target.search_rules()
    ranked = _ranking(op, device, rules)
    first = next(((rank, c) for rank, c in enumerate(ranked) if c.builds), None)
    if first is None:
        raise ScheduleError(f"the {device.target.name} search has no candidate for {op!r}")
    plain = Choice(first[1].schedule, _ranked(RANKED, rules, *first), False, first[1].schedule,
                   _ranked(RANKED, rules, *first))
    if chain is None:
        return plain
    slowest = EPILOGUE_SLOWDOWN * first[1].figures["predicted_seconds"]     # the best-ranked that takes it
    taking = ((rank, c) for rank, c in enumerate(ranked)
              if rules.takes_epilogue(c) and c.figures["predicted_seconds"] <= slowest)
    rank, candidate = next(((rank, c) for rank, c in taking if c.builds), (None, None))
    if candidate is None:
        return plain
    what = RANKED if rank == first[0] else f"{FUSING} (within {EPILOGUE_SLOWDOWN}x the first's time)"
    return replace(plain, schedule=chain.apply(candidate.schedule), fused=True,
                   source=_ranked(what, rules, rank, candidate))


def compile_choices(choices: Sequence[Choice], device: Device) -> list[tuple[Kernel, Choice] | ScheduleError]:
    """The kernels of ``choices`` built together (``Device.compile_many``: nvcc in parallel on a GPU), each
    with the choice it ran (``unfused`` where the target refuses the epilogue), or the ScheduleError that
    refuses it."""
    try:
        return list(zip(device.compile_many([choice.schedule for choice in choices]), choices))
    except ScheduleError:                  # one by one, to find which (the others come from the cache)
        return [_compiled(choice, device) for choice in choices]


def _compiled(choice: Choice, device: Device) -> tuple[Kernel, Choice] | ScheduleError:
    try:
        return device.compile(choice.schedule), choice
    except ScheduleError as error:
        if not choice.fused:
            return error
    return _compiled(choice.unfused(), device)


def _ranking(op: Op, device: Device, rules: SearchRules) -> list[Candidate]:
    """The search's candidates of ``op`` on ``device``, ranked by its cost model (once per op signature and
    architecture in the process: a model's repeated layers share it)."""
    key = (signature(op), device.target.name, device.isa)
    if key not in _RANKINGS:
        _RANKINGS[key] = rules.rank(rules.candidates(op, device.isa))
    return _RANKINGS[key]


def _ranked(what: str, rules: SearchRules, rank: int, candidate: Candidate) -> str:
    return f"{what}, rank {rank} by the cost model: {rules.describe(candidate.knobs.as_dict())}"


def _elements(xp: Any, array: Any, dtype: np.dtype) -> Any:
    """A C-contiguous copy of ``array`` (of the array module ``xp``) of element type ``dtype``: uint16 holds
    float16 bit patterns (a kernel that widens halves itself), every other type the values."""
    if dtype == np.uint16:
        return xp.ascontiguousarray(array, dtype=np.float16).view(np.uint16)
    return xp.ascontiguousarray(array, dtype=dtype)


class DeviceKernel:
    """A compute node's kernel on device arrays, its constant inputs on the device (see the module)."""

    def __init__(self, kernel: Kernel, lowering: Lowering, inputs: Inputs, device: Device, dtype: np.dtype):
        arrays, params = lowering.constants(inputs)
        if params:
            raise NotSupported(f"a quantized node on {device} (its parameters {', '.join(params)})")
        self.kernel, self.lowering, self.device, self.dtype = kernel, lowering, device, np.dtype(dtype)
        op, names = kernel.op, kernel.generated.arguments
        self.first, self.output = names[0], names[-1]
        self.residual = names[len(arrays) + 1] if len(names) > len(arrays) + 2 else None
        self.layouts = {name: kernel.schedule.layout_of(op.output if name in (self.residual, self.output)
                                                       else name) for name in names if name in op.tensors
                        or name in (self.residual, self.output)}
        self.constants = {}
        for name, array in zip(names[1:], arrays):
            element = _elements(np, array, kernel.parameter_dtype(name))
            stored = element if op.bias and name == op.bias_tensor else self.layouts[name].to_storage(element)
            self.constants[name] = device.to_device(stored)
        self.out_shape = op.tensor(op.output).shape
        self.storage_shape = self.layouts[self.output].storage_shape(self.out_shape)

    def _stored(self, name: str, array: Any) -> Any:
        """A logical device array in parameter ``name``'s layout and element type (a copy on the device)."""
        view = self.layouts[name].storage_view(array)
        if view is None:
            raise ValueError(f"{self.kernel.op!r}: the {self.layouts[name].tag} layout of {name} pads a "
                             "blocked dim; the device path stores activations in unpadded layouts only")
        return _elements(self.device.xp, view, self.kernel.parameter_dtype(name))

    def __call__(self, x: Any, residual: Any = None) -> list[Any]:
        """The node's outputs on device arrays: ``x`` its first input, ``residual`` what the epilogue adds."""
        values = dict(self.constants)
        values[self.first] = self._stored(self.first, self.lowering.activation(x))
        if self.residual is not None:
            values[self.residual] = self._stored(self.residual, residual)
        out = self.device.xp.zeros(self.storage_shape, self.kernel.parameter_dtype(self.output))
        values[self.output] = out
        self.kernel.run(self.kernel.bind(values))
        logical = self.layouts[self.output].logical_view(out, self.out_shape)
        if self.kernel.op.out_dtype == FLOAT16:     # the output's bit patterns (uint16): their values
            logical = logical.view(np.float16)
        return self.lowering.result(logical if logical.dtype == self.dtype else logical.astype(self.dtype))
