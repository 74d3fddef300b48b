"""nvcc: found, asked its version, and run into the kernel cache.

nvcc is looked up as ``$LOOPOPT_NVCC``, then on ``PATH``, then ``$CUDA_HOME/bin``, then in the pip
wheels of the ``[cuda]`` extra (``nvidia-cuda-nvcc``, ``nvidia-cuda-runtime``, ``nvidia-cuda-cccl``,
which install a CUDA tree under ``nvidia/cu*``). A kernel is built into a shared object with the
CUDA runtime linked statically (nvcc's default), so loading it needs no CUDA library and no GPU:
only running it does. The cache entry's name hashes the source, nvcc's version, the architecture
and the flags; the build's ``-Xptxas -v`` report (registers, spills) is kept beside it.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ...atomic import write_text_atomically
from ...cbuild import ENTRY_PREFIX, BuildError, cache_dir
from ..base import TargetUnavailableError

NVCC_ENV = "LOOPOPT_NVCC"
FLAGS = ("-O3", "-std=c++17", "-Xcompiler", "-fPIC", "-shared", "-Xptxas", "-v")
PREFIX = f"{ENTRY_PREFIX}cuda_"
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")


@dataclass(frozen=True)
class Build:
    """A built kernel: its shared object and nvcc's resource report (``-Xptxas -v``)."""

    library: Path
    report: str

    @property
    def spill_bytes(self) -> int:
        """Bytes spilled to local memory (stores + loads), over every function."""
        return sum(int(a) + int(b) for a, b in _SPILLS.findall(self.report))

    @property
    def registers(self) -> int:
        """The most registers one function of the kernel uses per thread."""
        return max((int(n) for n in _REGISTERS.findall(self.report)), default=0)


def _wheel_nvcc() -> Path | None:
    """nvcc of the pip wheels (``nvidia/cu*/bin/nvcc`` in any ``nvidia`` package folder)."""
    found = [folder / "nvcc" for folder in _wheel_bins() if (folder / "nvcc").is_file()]
    return found[-1] if found else None


def _wheel_bins() -> list[Path]:
    """The ``nvidia/cu*/bin`` folders of the pip wheels (nvcc's, cuobjdump's, nvdisasm's)."""
    try:
        import nvidia
    except ImportError:
        return []
    return sorted(p for root in nvidia.__path__ for p in Path(root).glob("cu*/bin"))


@cache
def nvcc() -> Path:
    """The nvcc to build with; TargetUnavailableError saying where it was looked for."""
    candidates = [os.environ.get(NVCC_ENV), shutil.which("nvcc")]
    if os.environ.get("CUDA_HOME"):
        candidates.append(str(Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc"))
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    wheel = _wheel_nvcc()
    if wheel is None:
        raise TargetUnavailableError(
            f"the cuda target needs nvcc: none in ${NVCC_ENV}, on PATH, in $CUDA_HOME/bin or in the pip "
            f"wheels (pip install 'loopopt[cuda]' installs nvidia-cuda-nvcc, -runtime and -cccl)")
    return wheel


def tool(name: str) -> Path | None:
    """A CUDA tool (``cuobjdump``, ``nvdisasm``) beside nvcc, in the pip wheels or on PATH; None if none."""
    folders = [nvcc().parent] + _wheel_bins()
    found = next((folder / name for folder in folders if (folder / name).is_file()), None)
    return found or (Path(shutil.which(name)) if shutil.which(name) else None)


@cache
def nvcc_version() -> str:
    """nvcc's release line, e.g. ``Cuda compilation tools, release 13.0, V13.0.88``."""
    text = subprocess.run([str(nvcc()), "--version"], capture_output=True, text=True, check=True).stdout
    return next((line for line in text.splitlines() if "release" in line), text.strip())


def build(source: str, arch: str) -> Build:
    """The shared object of CUDA ``source`` for ``arch`` (e.g. ``sm_90``), from the cache or built."""
    number = arch.removeprefix("sm_")
    flags = (*FLAGS, f"-gencode=arch=compute_{number},code=sm_{number}")
    key = hashlib.sha256("\0".join([source, nvcc_version(), arch, *flags]).encode()).hexdigest()[:24]
    folder = cache_dir()
    library, report = folder / f"{PREFIX}{key}.so", folder / f"{PREFIX}{key}.ptxas.txt"
    if library.is_file() and report.is_file():
        return Build(library, report.read_text())
    with tempfile.TemporaryDirectory(dir=folder, prefix="build-cuda-") as work:
        cu, so = Path(work) / "kernel.cu", Path(work) / "kernel.so"
        cu.write_text(source)
        done = subprocess.run([str(nvcc()), *flags, "-o", str(so), str(cu)], capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError(f"nvcc failed on the generated CUDA:\n{done.stderr[-4000:]}")
        write_text_atomically(report, done.stderr)     # first: a published library has its report
        os.replace(so, library)
    return Build(library, done.stderr)
