"""Compile C source through cffi into an on-disk cache and load it.

The cache key is a hash of the source, the cdef, the compiler's identity and the
flags. Builds happen in a private temporary directory and are published with an
atomic rename, so two processes compiling the same kernel at once both succeed.
The cache lives in ``$LOOPOPT_CACHE_DIR`` (default ``~/.cache/loopopt``).
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from types import ModuleType

import cffi

BASE_FLAGS = ("-O3", "-std=c11", "-fno-strict-aliasing", "-Wno-unused-variable", "-Wno-unused-label")


class BuildError(RuntimeError):
    """The C compiler is missing or rejected generated code."""


def cache_dir() -> Path:
    """Where compiled modules are kept (``$LOOPOPT_CACHE_DIR`` overrides the default)."""
    path = Path(os.environ.get("LOOPOPT_CACHE_DIR") or Path.home() / ".cache" / "loopopt")
    path.mkdir(parents=True, exist_ok=True)
    return path


def compiler() -> str:
    """The C compiler command (``$CC`` or ``cc``); BuildError if it cannot be found."""
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc.split()[0]) is None:
        raise BuildError(f"no C compiler found: {cc!r} is not on PATH; install gcc (or clang) "
                         f"or point the CC environment variable at one")
    return cc


@lru_cache(maxsize=None)
def _compiler_identity(cc: str) -> str:
    try:
        return subprocess.run(cc.split() + ["--version"], capture_output=True, text=True,
                              timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired) as err:
        raise BuildError(f"the C compiler {cc!r} did not answer --version: {err}") from None


_loaded: dict[str, ModuleType] = {}


def compile_c(source: str, cdef: str, flags: tuple[str, ...] = (), link_flags: tuple[str, ...] = ()) -> ModuleType:
    """Build (or fetch from the cache) a cffi extension of ``source`` exposing ``cdef``.

    Returns the loaded module; use ``module.lib`` and ``module.ffi``.
    """
    cc = compiler()
    all_flags = BASE_FLAGS + tuple(flags)
    key = hashlib.sha256("\0".join([source, cdef, cc, _compiler_identity(cc), " ".join(all_flags),
                                    " ".join(link_flags), sys.version]).encode()).hexdigest()[:24]
    if key in _loaded:
        return _loaded[key]
    name = f"_loopopt_{key}"
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    target = cache_dir() / f"{name}{suffix}"
    if not target.exists():
        _build(name, source, cdef, all_flags, tuple(link_flags), target, cc)
    spec = importlib.util.spec_from_file_location(name, target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _loaded[key] = module
    return module


def _build(name: str, source: str, cdef: str, flags: tuple[str, ...], link_flags: tuple[str, ...],
           target: Path, cc: str) -> None:
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    ffi.set_source(name, source, extra_compile_args=list(flags), extra_link_args=list(link_flags))
    with tempfile.TemporaryDirectory(prefix="build-", dir=target.parent) as tmp:
        env_cc = os.environ.get("CC")
        os.environ["CC"] = cc
        try:
            built = ffi.compile(tmpdir=tmp, verbose=False)
        except Exception as err:  # distutils/setuptools raise several unrelated types
            generated = Path(tmp) / f"{name}.c"
            if generated.exists():
                shutil.copy(generated, target.with_suffix(".failed.c"))
            raise BuildError(f"compiling {name} failed ({type(err).__name__}: {err}); the source is in "
                             f"{target.with_suffix('.failed.c')}") from None
        finally:
            if env_cc is None:
                os.environ.pop("CC", None)
            else:
                os.environ["CC"] = env_cc
        os.replace(built, target)
