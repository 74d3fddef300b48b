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
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ...cbuild import BuildError, cache_dir, compiler_identity, link_prelude, publish, run_compiler
from ..base import TargetUnavailableError
from .isa import ARCH_FLAGS
from .runner import RunnerCase, case_name, case_unit, runner_main

NATIVE_MACHINES = ("aarch64", "arm64")
CROSS_CC_ENV = "LOOPOPT_NEON_CC"
CROSS_CC = "aarch64-linux-gnu-gcc"
EMULATORS = ("qemu-aarch64", "qemu-aarch64-static")
EMULATOR_CPU = ("-cpu", "max")
CROSS_FLAGS = ("-O2", "-std=c11", "-fno-strict-aliasing", "-Wno-unused-variable", "-Wno-unused-label",
               "-Wno-unused-function", "-pthread", "-static")
RUNNER_PREFIX = "_loopopt_neon_"
# precompiled with CROSS_FLAGS and ARCH_FLAGS, and OPENMP where a unit has it (GCC 12 crashes on OpenMP code
# after a header precompiled without), then used with every kernel's other flags (QUANT_FLAGS; -pthread on
# every unit defines the _REENTRANT of -fopenmp); GCC reads the header as text where it cannot use it
SIMD_HEADER = "#include <arm_neon.h>\n"
OPENMP = "-fopenmp"
INSTALL_HINT = "apt-get install -y gcc-aarch64-linux-gnu qemu-user"
CPUINFO = "/proc/cpuinfo"
AUXV = "/proc/self/auxv"
AT_HWCAP, AT_HWCAP2 = 16, 26
# the HWCAP bits (Linux, arch/arm64/include/uapi/asm/hwcap.h) of the features NEON kernels ask for, by
# their /proc/cpuinfo names
HWCAP_BITS = {"asimd": (AT_HWCAP, 1), "fphp": (AT_HWCAP, 9), "asimdhp": (AT_HWCAP, 10),
              "asimddp": (AT_HWCAP, 20), "i8mm": (AT_HWCAP2, 13), "bf16": (AT_HWCAP2, 14)}


def native() -> bool:
    """Whether this machine is an AArch64 one (kernels then run in this process)."""
    return platform.machine() in NATIVE_MACHINES


@cache
def cpu_features() -> frozenset[str]:
    """The features of this AArch64 CPU by their /proc/cpuinfo names: the HWCAP words Linux hands the
    process (``/proc/self/auxv``), else the "Features" line of ``/proc/cpuinfo``; empty on another
    machine or where neither can be read."""
    if not native():
        return frozenset()
    try:
        return hwcap_features(Path(AUXV).read_bytes())
    except (OSError, ValueError):
        pass
    try:
        return cpuinfo_features(Path(CPUINFO).read_text())
    except OSError:
        return frozenset()


def cpuinfo_features(text: str) -> frozenset[str]:
    """The names on the first "Features" line of an AArch64 ``/proc/cpuinfo`` (empty if none)."""
    lines = (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("Features"))
    return frozenset(next(lines, ()))


def hwcap_features(auxv: bytes) -> frozenset[str]:
    """The features of ``HWCAP_BITS`` that the AT_HWCAP and AT_HWCAP2 words of an auxiliary vector
    (pairs of native-endian uint64: type, value) set; ValueError where it has no AT_HWCAP."""
    words = dict(struct.iter_unpack("=QQ", auxv[:len(auxv) // 16 * 16]))
    if AT_HWCAP not in words:
        raise ValueError("the auxiliary vector has no AT_HWCAP")
    return frozenset(name for name, (word, bit) in HWCAP_BITS.items() if words.get(word, 0) >> bit & 1)


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


def build_runner(cases: Sequence[RunnerCase], tools: Emulation) -> Path:
    """The runner executable of ``cases`` (``runner.py``), from the kernel cache or built into it: the
    cases' translation units compiled with one compiler run per set of flags (``<arm_neon.h>``
    precompiled), then linked with the runner's ``main`` into one static executable."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for index, case in enumerate(cases):
        groups.setdefault(CROSS_FLAGS + case.flags, []).append(index)
    units = [case_unit(case, index) for index, case in enumerate(cases)]
    main = runner_main(cases)
    identity = compiler_identity(tools.compiler)
    link_flags = (OPENMP,) if any(case.threads for case in cases) else ()
    key = hashlib.sha256("\0".join([tools.compiler, identity, main, *link_flags,
                                    *(" ".join(flags) for flags in groups), *units]).encode())
    name = f"{RUNNER_PREFIX}{key.hexdigest()[:24]}"
    compiler = shlex.split(tools.compiler)

    def build(built: Path) -> None:
        folder = built.parent
        listing = folder / f"{name}.c"       # every unit, kept as the failed source if a build fails
        listing.write_text("\n".join(f"/* ---- {case_name(i)}.c ---- */\n{unit}"
                                     for i, unit in enumerate(units)))
        objects = []
        includes: dict[bool, str] = {}     # by OpenMP or not: the precompiled header's include, or ""
        for flags, indices in groups.items():
            call = (*compiler, *flags)
            openmp = OPENMP in flags
            if openmp not in includes:
                header = f"lo_neon{'_omp' * openmp}.h"
                units_of = sum(len(group) for other, group in groups.items() if (OPENMP in other) == openmp)
                precompiled = link_prelude((*compiler, *CROSS_FLAGS, *ARCH_FLAGS, *(OPENMP,) * openmp),
                                           identity, SIMD_HEADER, folder, header, units_of)
                includes[openmp] = f'#include "{header}"\n' if precompiled else ""
            include = includes[openmp]
            for index in indices:
                (folder / f"{case_name(index)}.c").write_text(include + units[index])
            run_compiler([*call, "-c", *(f"{case_name(index)}.c" for index in indices)], name, listing,
                         folder.parent / name, cwd=folder)
            objects += [str(folder / f"{case_name(index)}.o") for index in indices]
        (folder / "main.c").write_text(main)
        run_compiler([*compiler, *CROSS_FLAGS, *link_flags, str(folder / "main.c"), *objects,
                      "-o", str(built)], name, listing, folder.parent / name)

    try:
        return publish(cache_dir() / name, build)
    except FileNotFoundError as err:
        raise BuildError(f"the cross compiler {tools.compiler!r} could not be run: {err}") from None
