"""The registry of targets: name -> the module that defines it, imported on first use.

A target module exposes ``TARGET``, an instance of ``targets.base.Target``. Adding a target is a
folder under ``targets/`` and one line in ``TARGETS``.
"""
from __future__ import annotations

import importlib
import platform
from functools import cache

from .base import Target

TARGETS: dict[str, str] = {
    "x86": "loopopt.targets.x86.target",
    "neon": "loopopt.targets.neon.target",
    "cuda": "loopopt.targets.cuda.target",
}
# platform.machine() -> the target that runs natively
HOST_MACHINES = {"x86_64": "x86", "AMD64": "x86", "aarch64": "neon", "arm64": "neon"}


def target_names() -> tuple[str, ...]:
    return tuple(TARGETS)


@cache
def target(name: str | Target) -> Target:
    """The target called ``name`` (a Target passes through); ValueError naming the known ones."""
    if isinstance(name, Target):
        return name
    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r}: choose one of {', '.join(map(repr, TARGETS))}")
    return importlib.import_module(TARGETS[name]).TARGET


def host_target() -> Target:
    """The target this machine runs natively."""
    machine = platform.machine()
    if machine not in HOST_MACHINES:
        raise ValueError(f"no target runs natively on a {machine!r} machine; known targets: "
                         f"{', '.join(map(repr, TARGETS))} (pass target=... to build for one)")
    return target(HOST_MACHINES[machine])


def available_isas(name: str | Target | None = None) -> tuple[str, ...]:
    """The variants of target ``name`` (None: the one this machine runs natively) that this machine
    builds and runs and that compute every op, best first (``Target.general_isas``; x86: its SIMD
    tables and ``scalar``; neon: ``neon`` natively or under an emulator)."""
    return (host_target() if name is None else target(name)).general_isas()


def isa_names() -> tuple[str, ...]:
    """Every target's instruction-set variants (what ``isa=`` and ``--isa`` accept besides ``"auto"``)."""
    return tuple(isa for name in TARGETS for isa in target(name).isas())


def target_of_isa(isa: str) -> Target:
    """The target an instruction-set variant belongs to (``"auto"``: the host's); ValueError if none."""
    if isa == "auto":
        return host_target()
    for name in TARGETS:
        if isa in target(name).isas():
            return target(name)
    known = ", ".join(f"{name}: {', '.join(target(name).isas())}" for name in TARGETS)
    raise ValueError(f"unknown isa {isa!r}: choose 'auto' or one of ({known})")
