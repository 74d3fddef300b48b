"""Where NEON kernels are built and run: natively (an AArch64 machine: cffi into the kernel cache, as
on x86) or, elsewhere, cross-compiled into a runner executable (``runner.py``) run under
``qemu-aarch64 -cpu max``, which emulates the dot-product, i8mm, bf16 and fp16 extensions.

The cross compiler is ``$LOOPOPT_NEON_CC`` or ``aarch64-linux-gnu-gcc``; the emulator
``qemu-aarch64`` (or ``qemu-aarch64-static``). Runners are static executables kept in the kernel cache
(``cbuild``: keyed by the source, the compiler's identity and the flags; built in a locked folder and
published with a record, each with an atomic rename).
"""
from __future__ import annotations

import hashlib
import os
import platform
import shlex
import shutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ...cbuild import BuildError, cache_dir, compiler_identity, publish, run_compiler
from ..base import TargetUnavailableError

NATIVE_MACHINES = ("aarch64", "arm64")
CROSS_CC_ENV = "LOOPOPT_NEON_CC"
CROSS_CC = "aarch64-linux-gnu-gcc"
EMULATORS = ("qemu-aarch64", "qemu-aarch64-static")
EMULATOR_CPU = ("-cpu", "max")
CROSS_FLAGS = ("-O2", "-std=c11", "-fno-strict-aliasing", "-Wno-unused-variable", "-Wno-unused-label",
               "-Wno-unused-function", "-static")
RUNNER_PREFIX = "_loopopt_neon_"
INSTALL_HINT = "apt-get install -y gcc-aarch64-linux-gnu qemu-user"


def native() -> bool:
    """Whether this machine is an AArch64 one (kernels then run in this process)."""
    return platform.machine() in NATIVE_MACHINES


@cache
def cpu_features() -> frozenset[str]:
    """The "Features" of this AArch64 CPU in /proc/cpuinfo (empty where unreadable or not ARM)."""
    try:
        with open("/proc/cpuinfo") as f:
            features = (line.split(":", 1)[1].split() for line in f if line.startswith("Features"))
            return frozenset(next(features, ()))
    except OSError:
        return frozenset()


@dataclass(frozen=True)
class Emulation:
    """The cross compiler and the emulator NEON kernels are built and run with here."""

    compiler: str
    emulator: str

    @property
    def command(self) -> tuple[str, ...]:
        return (self.emulator, *EMULATOR_CPU)


def missing() -> str | None:
    """Why NEON kernels cannot be built and run on this machine, or None."""
    if native():
        return None
    cc = os.environ.get(CROSS_CC_ENV, CROSS_CC)
    if shutil.which(shlex.split(cc)[0]) is None:
        return (f"the AArch64 cross compiler {cc!r} is not installed (set {CROSS_CC_ENV}, or: "
                f"{INSTALL_HINT})")
    if not any(shutil.which(name) for name in EMULATORS):
        return f"no AArch64 emulator ({' or '.join(EMULATORS)}) is installed ({INSTALL_HINT})"
    return None


def emulation() -> Emulation:
    """The cross toolchain; TargetUnavailableError saying what is missing and how to install it."""
    why = missing()
    if why is not None:
        raise TargetUnavailableError(f"target 'neon' cannot run kernels here: {why}")
    emulator = next(name for name in EMULATORS if shutil.which(name))
    return Emulation(os.environ.get(CROSS_CC_ENV, CROSS_CC), emulator)


def build_runner(source: str, flags: tuple[str, ...], tools: Emulation) -> Path:
    """The runner executable of ``source`` (a kernel and the runner's main) cross-compiled with
    ``flags``, from the kernel cache or built into it."""
    all_flags = CROSS_FLAGS + flags
    identity = compiler_identity(tools.compiler)
    key = hashlib.sha256("\0".join([source, tools.compiler, identity, " ".join(all_flags)]).encode())
    name = f"{RUNNER_PREFIX}{key.hexdigest()[:24]}"

    def build(built: Path) -> None:
        written = built.parent / f"{name}.c"
        written.write_text(source)
        command = [*shlex.split(tools.compiler), *all_flags, str(written), "-o", str(built)]
        run_compiler(command, name, written, built.parent.parent / name)

    try:
        return publish(cache_dir() / name, build)
    except FileNotFoundError as err:
        raise BuildError(f"the cross compiler {tools.compiler!r} could not be run: {err}") from None
