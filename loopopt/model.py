"""The kernel model: a schedule's predicted time from what its generated kernel executes, as the
target of its instruction-set variant models it (x86: ``targets/x86/model.py``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .analysis import Machine, ReuseProfile
from .schedule import Schedule
from .targets.registry import target_of_isa

if TYPE_CHECKING:
    from .targets.x86.model import KernelModel


def kernel_model(schedule: Schedule, isa: str = "auto", profile: ReuseProfile | None = None,
                 traffic: bool = True, machine: Machine | None = None,
                 set_associative: bool = False) -> KernelModel:
    """The kernel model of ``schedule`` on ``isa`` (``Target.kernel_model``; x86: the counts of its
    kernel against one core's costs). ``profile``: the schedule's line-granularity reuse profile if
    already computed; ``traffic=False`` leaves the memory hierarchy out; ``set_associative=True``
    takes the L1 and L2 misses from a simulation of their sets and ways. ValueError for a variant
    its target has no model of (x86's ``amx``: ``tune.tile_model`` prices tile kernels)."""
    if not isinstance(schedule, Schedule):
        raise TypeError(f"kernel_model needs a lo.Schedule, got {type(schedule).__name__}")
    target = target_of_isa(isa)
    model = target.kernel_model(schedule, isa, profile=profile, traffic=traffic, machine=machine,
                                set_associative=set_associative)
    if model is None:
        raise ValueError(f"the {target.name} target has no kernel model of isa {isa!r}")
    return model
