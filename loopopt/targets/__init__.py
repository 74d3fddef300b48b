"""Targets: where a schedule runs. ``base`` is the interface, ``registry`` finds a target by name;
each target is a folder of its own (``x86/``), seen by the rest of loopopt only through these two."""
from .base import Target, TargetUnavailableError
from .registry import TARGETS, host_target, isa_names, target, target_names, target_of_isa

__all__ = ["Target", "TargetUnavailableError", "TARGETS", "host_target", "isa_names", "target",
           "target_names", "target_of_isa"]
