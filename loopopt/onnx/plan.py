"""A prepared model's execution plan: its nodes in order, each bound at prepare to what runs it (a
kernel with its weights packed, a numpy function, or onnx.reference), so that a run only feeds
arrays from step to step, with no per-node dispatch, validation or lowering.

Values pass between steps as logical arrays that may be views of a kernel's storage (its output
channels-last, say): the next kernel whose storage layout is the same reads that memory as it is,
and elementwise steps keep its order, so layouts are converted only where a consumer needs another
one, and at the model's outputs. A step may overwrite one of its inputs (``Step.overwrites``: its
first, or a conv's fused shortcut add its residual) when that value is a buffer of its producer's
own that no later step reads and no other step's output may view (its other readers own their
outputs): ``Step.reuse``, e.g. Relu in place on a conv's output, or a ResNet block's last conv
writing over its shortcut once the block's first conv has read it (as onnxruntime's Sum-fused conv
does: no buffer of its own to bring in from memory, no second stream).
A kernel step writes the same buffers on every run (``Kernel.with_constants``), so a run's values
are views the next run overwrites: ``outputs_of`` copies the model's outputs, ``run(keep=True)``
every value as its step gives it, and a plan runs one call at a time. After the first run the steps'
buffers share memory by liveness (``arena``: a buffer no later step reads is where a later step writes),
but those the model's outputs lie in; ``share = False`` before it keeps them apart.

Consecutive kernel, pooling and 8-bit lookup steps (``Step.last_call``; a view step's, Flatten's,
is no call: ``viewing``) that each read only buffers kernel steps write (or constants), in place,
make the same C calls on every run: after two runs in the shared memory (the second and third) that show
so (the same calls on the same arguments, the outputs in the same memory), a run makes those calls
one after another (``Repeat``), with no Python between them but the loop. The per-step path costs
3-4 us a step on a warm cache and 10-20 us on a cold one (the interpreter's and numpy's state evicted
between two runs, as a server's requests or another process leave it).
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .. import team
from .arena import Arena, Holder, share

KERNEL, NUMPY, REFERENCE = "loopopt kernel", "numpy", "onnx.reference"    # what runs a step
LastCall = Callable[[], "tuple[Callable[..., None], tuple] | None"]
Seen = dict[int, "tuple[tuple[Callable[..., None], tuple] | None, tuple[np.ndarray, ...]]"]


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
    reuse: bool = False     # it may write into the buffer of its input ``overwrites`` (set by Plan)
    overwrites: int = 0     # the input it can write over: its index in ``inputs`` (-1: the last)
    # each output element is one of its first input's (``pooling.selects_elements``): this maps them
    # through a table from then on (``PoolRunner.map_through``: a lookup chain's), else None
    selects: Callable[[np.ndarray], None] | None = None
    last_call: LastCall | None = None   # a kernel or lookup step: its last C call (``Kernel.with_constants``)
    storage: np.ndarray | None = None   # a bound kernel step: the buffer it writes on every run
    holders: tuple[Holder, ...] = ()    # what holds the buffers it writes on every run (``arena``)


@dataclass(frozen=True)
class Repeat:
    """Steps ``start`` to ``stop - 1``: their C calls, made as the last runs made them (and the arena's
    ``clears`` before them), the step each call is made for, the values they leave (the same arrays on
    every run) and the values no later step reads."""

    start: int
    stop: int
    calls: tuple[tuple[Callable[..., None], tuple], ...]
    values: dict[str, np.ndarray]
    dead: tuple[str, ...]
    owners: tuple[int, ...]


class BoundCalls:
    """A step's C calls (a lookup's, a pool's): ``bind(*arrays) -> (function, arguments)``, bound again
    only when the arrays' addresses, sizes and shapes change (a plan's step reads and writes the same buffers
    on every run); ``last_call()``: the last call made (``Step.last_call``: the plan may repeat it)."""

    def __init__(self, bind: Callable[..., tuple[Callable[..., None], tuple]]):
        self._bind = bind
        self._key: tuple = ()
        self._call: tuple[Callable[..., None], tuple] | None = None
        self.made = 0            # calls made so far

    def __call__(self, *arrays: np.ndarray) -> None:
        key = tuple((a.__array_interface__["data"][0], a.nbytes, a.shape) for a in arrays)
        if key != self._key or self._call is None:
            self._key, self._call = key, self._bind(*arrays)
        function, arguments = self._call
        function(*arguments)
        self.made += 1

    def last_call(self) -> tuple[Callable[..., None], tuple] | None:
        return self._call


class Calling:
    """A step's ``run(inputs, reuse)`` whose C work is one call through ``calls`` (``BoundCalls``), or on
    some inputs none (a case left to numpy); ``last_call()``: the call the last run made, None where
    it made none (``Step.last_call``: the plan may repeat it); ``holders``: of the buffers it writes."""

    def __init__(self, run: Callable[[Sequence[np.ndarray | None], bool], Sequence[np.ndarray]],
                 calls: BoundCalls, holders: tuple[Holder, ...] = ()):
        self.run, self.calls, self.holders = run, calls, holders
        self._made: tuple[Callable[..., None], tuple] | None = None

    def __call__(self, inputs: Sequence[np.ndarray | None], reuse: bool) -> Sequence[np.ndarray]:
        before = self.calls.made
        outputs = self.run(inputs, reuse)
        self._made = self.calls.last_call() if self.calls.made == before + 1 else None
        return outputs

    def last_call(self) -> tuple[Callable[..., None], tuple] | None:
        return self._made


def no_call() -> None:
    """What a view step's repeat runs: nothing (its output is the same view of the same memory)."""


def viewing(run: Callable[[Sequence[np.ndarray | None], bool], Sequence[np.ndarray]]) -> tuple[
        Callable[[Sequence[np.ndarray | None], bool], Sequence[np.ndarray]], LastCall]:
    """A view step's ``run`` (Flatten, Reshape, Identity) and its ``last_call``: ``no_call`` where the
    last run's outputs were views of its first input (a reshape that had to copy: None)."""
    made: list[tuple[Callable[..., None], tuple] | None] = [None]

    def viewed(inputs: Sequence[np.ndarray | None], reuse: bool) -> Sequence[np.ndarray]:
        outputs = run(inputs, reuse)
        shared = all(np.may_share_memory(output, inputs[0]) for output in outputs)
        made[0] = (no_call, ()) if shared else None
        return outputs

    return viewed, lambda: made[0]


class Plan:
    """Steps in graph order, with the constants they start from and the model's output names."""

    def __init__(self, steps: list[Step], constants: dict[str, np.ndarray], outputs: Sequence[str]):
        self.steps, self.constants, self.outputs = steps, constants, tuple(outputs)
        owners = {name for step in steps if step.owns_outputs for name in step.outputs}
        last = {name: i for i, step in enumerate(steps) for name in step.inputs if name}
        # per value, the steps reading it whose outputs may be views of their inputs
        viewers = Counter(name for step in steps if not step.owns_outputs for name in set(step.inputs)
                          if name)
        for index, step in enumerate(steps):
            value = step.inputs[step.overwrites] if step.inputs else ""
            step.reuse = (value in owners and last.get(value) == index and value not in self.outputs
                          and step.inputs.count(value) == 1 and viewers[value] == (not step.owns_outputs))
        # after step i, the values no later step reads (freed, so their memory is reused)
        self._dead = [tuple(n for n in set(step.inputs) if n and last.get(n) == i and n not in self.outputs
                            and n not in constants) for i, step in enumerate(steps)]
        self.repeats: dict[int, Repeat] = {}     # by first step, once two runs showed them (``_learn``)
        self._seen: list[Seen] = []              # the kernel steps' calls and outputs in the runs so far
        self.share = True                        # share the steps' buffers after the first run (``arena``)
        self.arena: Arena | None = None          # the shared memory, once shared

    def run(self, given: dict[str, np.ndarray], keep: bool = False,
            times: dict[str, float] | None = None) -> dict[str, np.ndarray]:
        """The values of a run on ``given`` (the graph's inputs): the outputs, as views the next run
        overwrites, or with ``keep`` a copy of every value, taken as its step gives it (no step then
        overwrites an input). ``times``: each step's seconds, by node (each step then runs on its own, as
        ``keep`` does). The first run that is neither shares the steps' buffers after it (``_share``).
        The kernels' threads spin between steps while it runs (``loopopt.team.hold``)."""
        with team.hold():
            return self._run(given, keep, times)

    def _run(self, given: dict[str, np.ndarray], keep: bool,
             times: dict[str, float] | None) -> dict[str, np.ndarray]:
        values = {"": None, **self.constants, **given}
        copies = {name: np.array(value) for name, value in given.items()} if keep else {}
        alone = keep or times is not None
        repeats = {} if alone else self.repeats
        seen: Seen | None = None if alone or len(self._seen) == 2 else {}
        # the first ordinary run: each step's outputs, by name (the buffers are shared after it)
        named: dict[str, np.ndarray] | None = {} if self.share and self.arena is None and not alone else None
        clears = {} if self.arena is None else self.arena.clears
        index = 0
        while index < len(self.steps):
            repeat = repeats.get(index)
            if repeat is not None:
                for function, arguments in repeat.calls:
                    function(*arguments)
                values.update(repeat.values)
                for name in repeat.dead:
                    del values[name]
                index = repeat.stop
                continue
            step = self.steps[index]
            start = time.perf_counter() if times is not None else 0.0
            for function, arguments in clears.get(index, ()):
                function(*arguments)
            inputs = [values[name] for name in step.inputs]
            outputs = step.run(inputs, step.reuse and not keep)
            values.update(zip(step.outputs, outputs))
            if times is not None:
                times[step.node] = time.perf_counter() - start
            if keep:
                copies.update((name, np.array(value)) for name, value in zip(step.outputs, outputs))
            if named is not None:
                named.update((n, a) for n, a in zip(step.outputs, outputs) if isinstance(a, np.ndarray))
            if seen is not None and step.last_call is not None:
                seen[index] = (step.last_call(), tuple(outputs))
            for name in self._dead[index]:
                del values[name]
            index += 1
        del values[""]
        if seen is not None:
            self._learn(seen)
        if named is not None:
            self._share(named)
        if keep:
            return {**self.constants, **copies}
        return values

    def _share(self, named: dict[str, np.ndarray]) -> None:
        """Move the steps' buffers into one arena by the liveness of the first run's arrays (``named``: each
        step's outputs): a step reads the memory of its inputs, and of an input that a step which may give
        views of its inputs gave (``owns_outputs`` false: Flatten, onnx.reference), that step's inputs'
        memory too, views in the first run or not; the repeats are learnt from the next two runs, in the
        arena."""
        producers = {name: step for step in self.steps for name in step.outputs}

        def memory(name: str) -> list[np.ndarray]:
            """The arrays whose memory value ``name`` may lie in."""
            step, own = producers.get(name), [named[name]] if name in named else []
            viewed = step is not None and not step.owns_outputs
            return own + [a for n in step.inputs if n for a in memory(n)] if viewed else own

        self.arena = share([holder for step in self.steps for holder in step.holders],
                           [[a for n in step.inputs if n for a in memory(n)] for step in self.steps],
                           [[named[n] for n in step.outputs if n in named] for step in self.steps],
                           [a for name in self.outputs for a in memory(name)])
        for step in self.steps:      # a kernel step's storage: where its holder moved it
            held = step.holders[0].held() if step.storage is not None and step.holders else None
            if held is not None:
                step.storage = held[0]
        self._seen.clear()

    def _learn(self, seen: Seen) -> None:
        """Keep ``seen``; after two runs, the ``repeats``: the longest runs of steps that made the same
        C call on the same arguments and left their outputs in the same memory in both, each reading
        only constants and steady values: outputs of such steps, and views of a kernel step's
        ``storage`` left in the same memory in both runs (whatever that step read)."""
        self._seen.append(seen)
        if len(self._seen) < 2:
            return
        first, second = self._seen
        same = {i for i in second if i in first and _same(first[i], second[i])}
        steady = set(self.constants)     # values in the same memory on every run
        runs: list[list[int]] = []
        for index, step in enumerate(self.steps):
            repeats = index in same and all(not name or name in steady for name in step.inputs)
            if repeats and runs and runs[-1][-1] == index - 1:
                runs[-1].append(index)
            elif repeats:
                runs.append([index])
            if index in same or _stored(step, first.get(index), second.get(index)):
                steady.update(step.outputs)
        for run in runs:
            written = {name: value for i in run for name, value in zip(self.steps[i].outputs, second[i][1])}
            dead = tuple(name for i in run for name in self._dead[i])
            clears = {} if self.arena is None else self.arena.clears
            made = [(i, call) for i in run for call in (*clears.get(i, ()), second[i][0])]
            self.repeats[run[0]] = Repeat(run[0], run[-1] + 1, tuple(call for _, call in made), written, dead,
                                          tuple(i for i, _ in made))

    def outputs_of(self, given: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The model's outputs on ``given``, each a C-contiguous array of its own in its logical layout."""
        values = self.run(given)
        return [np.array(values[name], order="C") for name in self.outputs]


def _same(first: tuple, second: tuple) -> bool:
    """Whether a step's two seen runs made the same C call on the same argument objects and left
    their outputs in the same memory, as arrays of the same shape, strides and dtype."""
    (call, outputs), (again, outputs_again) = first, second
    return (call is not None and again is not None and call[0] is again[0]
            and len(call[1]) == len(again[1]) and all(a is b for a, b in zip(call[1], again[1]))
            and len(outputs) == len(outputs_again) and all(map(_same_memory, outputs, outputs_again)))


def _stored(step: Step, first: tuple | None, second: tuple | None) -> bool:
    """Whether a kernel step's outputs in two seen runs are views of its ``storage`` in the same memory."""
    if step.storage is None or first is None or second is None:
        return False
    outputs, again = first[1], second[1]
    return (len(outputs) == len(again) and all(map(_same_memory, outputs, again))
            and all(np.may_share_memory(output, step.storage) for output in again))


def _same_memory(first: np.ndarray, second: np.ndarray) -> bool:
    return (first.__array_interface__["data"][0] == second.__array_interface__["data"][0]
            and first.shape == second.shape and first.strides == second.strides
            and first.dtype == second.dtype)
