"""A prepared model's execution plan: its nodes in order, each bound at prepare to what runs it (a
kernel with its weights packed, a numpy function, or onnx.reference), so that a run only feeds
arrays from step to step, with no per-node dispatch, validation or lowering.

Values pass between steps as logical arrays that may be views of a kernel's storage (its output
channels-last, say): the next kernel whose storage layout is the same reads that memory as it is,
and elementwise steps keep its order, so layouts are converted only where a consumer needs another
one, and at the model's outputs. A step may overwrite its first input when that value is a buffer
of its producer's own that no other step reads (``Step.reuse``: Relu in place on a conv's output).
A kernel step writes the same buffers on every run (``Kernel.with_constants``), so a run's values
are views the next run overwrites: ``outputs_of`` copies the model's outputs, ``run(keep=True)``
every value, and a plan runs one call at a time.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

KERNEL, NUMPY, REFERENCE = "loopopt kernel", "numpy", "onnx.reference"    # what runs a step


@dataclass
class Step:
    """One node of the plan: ``run(inputs, reuse) -> outputs`` on ``engine``."""

    node: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    run: Callable[[Sequence[np.ndarray | None], bool], Sequence[np.ndarray]]
    engine: str
    owns_outputs: bool      # its outputs are buffers of its own (not views of its inputs or constants)
    reason: str = ""        # why onnx.reference runs it (a pooling step on numpy: why its kernel does not)
    reuse: bool = False     # it may write into its first input's buffer (set by Plan)
    selects: bool = False   # each output element is one of its first input's (``pooling.selects_elements``)


class Plan:
    """Steps in graph order, with the constants they start from and the model's output names."""

    def __init__(self, steps: list[Step], constants: dict[str, np.ndarray], outputs: Sequence[str]):
        self.steps, self.constants, self.outputs = steps, constants, tuple(outputs)
        readers = Counter(name for step in steps for name in set(step.inputs) if name)
        owners = {name for step in steps if step.owns_outputs for name in step.outputs}
        last = {name: i for i, step in enumerate(steps) for name in step.inputs if name}
        for step in steps:
            first = step.inputs[0] if step.inputs else ""
            step.reuse = (first in owners and readers[first] == 1 and first not in self.outputs
                          and step.inputs.count(first) == 1)
        # after step i, the values no later step reads (freed, so their memory is reused)
        self._dead = [tuple(n for n in set(step.inputs) if n and last.get(n) == i and n not in self.outputs
                            and n not in constants) for i, step in enumerate(steps)]

    def run(self, given: dict[str, np.ndarray], keep: bool = False,
            times: dict[str, float] | None = None) -> dict[str, np.ndarray]:
        """The values of a run on ``given`` (the graph's inputs): the outputs, as views the next run
        overwrites, or with ``keep`` a copy of every value (and no step then overwrites an input).
        ``times``: each step's seconds, by node."""
        values = {"": None, **self.constants, **given}
        for step, dead in zip(self.steps, self._dead):
            start = time.perf_counter() if times is not None else 0.0
            outputs = step.run([values[name] for name in step.inputs], step.reuse and not keep)
            values.update(zip(step.outputs, outputs))
            if times is not None:
                times[step.node] = time.perf_counter() - start
            if not keep:
                for name in dead:
                    del values[name]
        del values[""]
        if keep:
            return {name: value if name in self.constants else np.array(value)
                    for name, value in values.items()}
        return values

    def outputs_of(self, given: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The model's outputs on ``given``, each a C-contiguous array of its own in its logical layout."""
        values = self.run(given)
        return [np.array(values[name], order="C") for name in self.outputs]
