"""Compile C source into a shared object in an on-disk cache and load it with cffi's ABI mode.

The cache key is a hash of the source, the cdef, the compiler's identity, the
flags and the prelude's standard headers. An entry is the shared object ``_loopopt_<key>.so`` and its record
``<that>.sha256`` (SHA-256 and size of the shared object). A build runs in a private
``build-*`` folder (locked while it runs), then publishes the shared object and after it
the record, each with an atomic rename, so two processes compiling the same kernel at
once both succeed. An entry is loaded only if its record matches it; otherwise (a build
killed before its record, a truncated or corrupt file, which would crash the process
when loaded) it is rebuilt. Build folders left by killed builds (unlocked and older than
``STALE_BUILD_SECONDS``) are removed by the next build.

The compiler builds the source as it is, in one step, into a plain shared object (no Python extension:
no ``<Python.h>``, no cffi wrappers to compile) with the flags of this interpreter's own extensions (less
debug information), and ``ffi.dlopen`` loads it with the functions the cdef declares. Measured on an AMD
EPYC (Zen 3, GCC 12), 60 of the quick test tier's kernels drawn at random: 0.103 CPU-s a build (compiler
and this process) against 0.146 as a cffi extension (API mode), and every function of all 416 compared
the same machine code both ways; a call costs about 0.26 us more through libffi (0.40 against 0.14 us of
CPU with a kernel's six arguments: ``benchmarks/bench_call.py``). Ahead of the source, from the command
line so that the compiler's messages name the source's own lines, comes its prelude: ``STANDARD_HEADERS``
(what the extension's C gave every kernel) and ``<immintrin.h>`` or ``<arm_neon.h>`` for SIMD kernels.
Preludes are precompiled per compiler and flags into the cache (``_loopopt_pch_*.h.gch``, published like
an entry) once they pay off: parsing them is most of a small kernel's compile time (about 0.37 s of 0.42 s
with GCC and ``<immintrin.h>``), but a precompiled header takes about 1 s to build and up to 26 MB of disk,
and every flag set (each ISA's, the quantized kernels', the analysis engines') needs its own, as GCC reads
one only under the flags it was made with. So the first ``PRECOMPILE_AFTER`` builds of a compiler and
flag set parse the headers (each appends a byte to ``_loopopt_pch_*.h.uses``) and the next one
precompiles them: flag sets used once or twice (the machine profile's peak probes) never get one.
``$LOOPOPT_PRECOMPILE_AFTER`` overrides the count (the test suite, which builds nearly every flag set
many times, sets 0: precompiled at the first build). A
precompiled header the compiler finds unusable it reads as text; a missing one is built again.
``trim_cache`` removes them (and failed sources and abandoned build folders), keeping the kernels.

The cache lives in ``$LOOPOPT_CACHE_DIR`` (default ``~/.cache/loopopt``); a directory that
cannot be created or written raises CacheError naming it.

Kernels are built at ``-O3``. ``$LOOPOPT_OPT_LEVEL`` (``1``, ``2`` or ``3``) builds them at another
level: for builds whose results, not speed, matter (the test suite sets 1: about 15% less compile time
than -O2, 35% less than -O3; with ``-std=c11`` no level contracts a*b + c, so every level rounds alike).
The level is part of the cache key, so an entry is only ever loaded at the level it was built at. The
machine's probes (peaks, bandwidth) pass ``level=DEFAULT_OPT_LEVEL``: they measure the machine, whose
profile must not depend on the setting.

A module linked with ``-fopenmp`` built by GCC is linked instead with loopopt's team of threads
(``loopopt.team``: its entry points' object and its shared object are cache entries built once); the
link flags are part of the cache key, so kernels on libgomp (``$LOOPOPT_OPENMP=libgomp``) are entries of
their own.

``$LOOPOPT_SANITIZE`` (e.g. ``address,undefined``) builds every module with those sanitizers
(``-fsanitize=...``, frame pointers, line information; without variable tracking, which takes
GCC minutes on large unrolled kernels); the flags are part of the cache key, so sanitized modules
are cache entries of their own.
"""
from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import BinaryIO

import cffi

from . import team
from .openmp import OPENMP_FLAG, load_runtime

BASE_FLAGS = ("-std=c11", "-fno-strict-aliasing", "-Wno-unused-variable", "-Wno-unused-label",
              "-Werror=implicit-function-declaration")
CACHE_ENV = "LOOPOPT_CACHE_DIR"
ENTRY_PREFIX = "_loopopt_"          # every file of the cache: shared objects, records, failed sources
RECORD_SUFFIX = ".sha256"
BUILD_PREFIX = "build-"
STALE_BUILD_SECONDS = 600
OPT_LEVEL_ENV = "LOOPOPT_OPT_LEVEL"
OPT_LEVELS = ("1", "2", "3")          # -O<level> of kernels; -O0 would make the suite's kernels crawl
DEFAULT_OPT_LEVEL = "3"
SANITIZE_ENV = "LOOPOPT_SANITIZE"
SANITIZERS = ("address", "undefined")
INTRINSICS = ("#include <immintrin.h>\n", "#include <arm_neon.h>\n")   # SIMD headers, precompiled if used
# the declarations a cffi extension's C (<Python.h> in it) gave every kernel before its own lines, under the
# feature macro pyconfig.h defines (GNU and POSIX names visible beside -std=c11's); a kernel still missing
# one is an error (BASE_FLAGS), not a call assumed to return int
STANDARD_HEADERS = "#define _GNU_SOURCE 1\n" + "".join(
    f"#include <{name}.h>\n" for name in ("stddef", "stdint", "stdlib", "string", "math", "limits"))
LIBRARY_SUFFIX = ".so"
PCH_PREFIX = f"{ENTRY_PREFIX}pch_"   # precompiled preludes (standard, SIMD headers) of a compiler and flags
PCH_NAME = "lo_prelude.h"             # the prelude's name in a build folder, next to the kernel's source
PCH_USES = ".uses"                    # a prelude's builds without its precompiled form, one byte each
PRECOMPILE_AFTER = 2                  # builds of a flag set that parse the headers before precompiling them
PRECOMPILE_ENV = "LOOPOPT_PRECOMPILE_AFTER"   # overrides it (the test suite sets 0)
_BUILD_FOLDER = re.compile(rf"{BUILD_PREFIX}[a-z0-9_]{{8}}")   # the names tempfile.mkdtemp gives


class BuildError(RuntimeError):
    """The C compiler is missing or rejected generated code."""


class CacheError(BuildError):
    """The kernel cache directory cannot be created or written."""


def cache_dir() -> Path:
    """Where compiled modules are kept (``$LOOPOPT_CACHE_DIR`` overrides the default), created if
    missing; CacheError if it cannot be created or written."""
    configured = os.environ.get(CACHE_ENV)
    path = Path(configured) if configured else Path.home() / ".cache" / "loopopt"
    origin = (f"set by {CACHE_ENV}; point {CACHE_ENV} at a writable directory" if configured
              else f"the default; set {CACHE_ENV} to a writable directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise CacheError(f"kernel cache {path} ({origin}) is not a directory") from None
    except OSError as err:
        raise CacheError(f"kernel cache {path} ({origin}) cannot be created: {err.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise CacheError(f"kernel cache {path} ({origin}) is not writable")
    return path


def compiler() -> str:
    """The C compiler command (``$CC`` or ``cc``); BuildError if it cannot be found."""
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc.split()[0]) is None:
        raise BuildError(f"no C compiler found: {cc!r} is not on PATH; install gcc (or clang) "
                         f"or point the CC environment variable at one")
    return cc


@cache
def compiler_identity(cc: str) -> str:
    try:
        return subprocess.run(cc.split() + ["--version"], capture_output=True, text=True, check=False,
                              timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired) as err:
        raise BuildError(f"the C compiler {cc!r} did not answer --version: {err}") from None


def opt_level() -> str:
    """The C optimization level kernels are built at: ``$LOOPOPT_OPT_LEVEL`` (one of ``OPT_LEVELS``) or
    ``DEFAULT_OPT_LEVEL``; ValueError naming any other value and the allowed ones."""
    value = os.environ.get(OPT_LEVEL_ENV, DEFAULT_OPT_LEVEL)
    if value not in OPT_LEVELS:
        raise ValueError(f"{OPT_LEVEL_ENV}={value!r}: not an optimization level; allowed: "
                         f"{', '.join(OPT_LEVELS)} (-O1 .. -O3; default {DEFAULT_OPT_LEVEL})")
    return value


def sanitizers() -> tuple[str, ...]:
    """The sanitizers ``$LOOPOPT_SANITIZE`` asks for (comma-separated, in ``SANITIZERS`` order; empty
    when unset); ValueError naming an unknown one and the allowed values."""
    value = os.environ.get(SANITIZE_ENV, "")
    names = {name.strip() for name in value.split(",") if name.strip()}
    unknown = sorted(names - set(SANITIZERS))
    if unknown:
        raise ValueError(f"{SANITIZE_ENV}={value!r}: unknown sanitizer {unknown[0]!r}; allowed: "
                         f"{', '.join(SANITIZERS)}, comma-separated (e.g. {SANITIZE_ENV}=address,undefined)")
    return tuple(name for name in SANITIZERS if name in names)


def sanitize_flags() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Compile and link flags of the sanitizers ``$LOOPOPT_SANITIZE`` asks for (both empty if none)."""
    names = sanitizers()
    if not names:
        return (), ()
    flag = f"-fsanitize={','.join(names)}"
    return (flag, "-fno-omit-frame-pointer", "-g", "-fno-var-tracking-assignments"), (flag,)


@dataclass(frozen=True)
class Library:
    """A compiled shared object loaded with cffi's ABI mode: ``lib`` holds the functions its ``cdef``
    declares, ``ffi`` casts and wraps buffers for them."""

    ffi: cffi.FFI
    lib: object


_loaded: dict[str, Library] = {}


def compile_c(source: str, cdef: str, flags: tuple[str, ...] = (),
              link_flags: tuple[str, ...] = (), level: str | None = None) -> Library:
    """Build (or fetch from the cache) a shared object of ``source``, loaded with the functions ``cdef``
    declares, at ``-O<level>`` (default: ``opt_level()``, the kernels' level).

    Returns the loaded library; use ``library.lib`` and ``library.ffi``.
    """
    cc = compiler()
    sanitize, sanitize_link = sanitize_flags()
    if "address" in sanitizers() and not hasattr(ctypes.CDLL(None), "__asan_init"):
        # loading an instrumented library would abort the process
        raise BuildError(f"{SANITIZE_ENV}={os.environ[SANITIZE_ENV]} builds kernels with AddressSanitizer, "
                         f"whose runtime must be loaded first: run python with LD_PRELOAD=$({cc.split()[0]} "
                         f"-print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0")
    all_flags = (f"-O{level or opt_level()}", *BASE_FLAGS, *flags, *sanitize)
    on_team = OPENMP_FLAG in link_flags and team.serves(compiler_identity(cc))
    if on_team:
        link_flags = tuple(flag for flag in link_flags if flag != OPENMP_FLAG) + team_link(cc)
    link_flags = tuple(link_flags) + sanitize_link
    parts = [STANDARD_HEADERS, source, cdef, cc, compiler_identity(cc), " ".join(all_flags),
             " ".join(link_flags), sys.version]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]
    if key in _loaded:
        return _loaded[key]
    target = cache_dir() / f"{ENTRY_PREFIX}{key}{LIBRARY_SUFFIX}"
    if not _trusted(target):
        _build(source, all_flags, link_flags, target, cc, on_team)
    if OPENMP_FLAG in link_flags:
        load_runtime()              # loopopt's threads spin briefly, then sleep, unless the user says
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    _loaded[key] = Library(ffi, ffi.dlopen(str(target)))
    return _loaded[key]


def team_link(cc: str) -> tuple[str, ...]:
    """The link flags of a kernel on loopopt's team (``loopopt.team``): its OpenMP entry points' object,
    each built once into the cache, and the team's shared object loaded, before the kernel."""
    runtime, entry = (_team_part(cc, source, suffix, flags) for source, suffix, flags in
                      ((team.RUNTIME_SOURCE, LIBRARY_SUFFIX, team.RUNTIME_FLAGS),
                       (team.ENTRY_SOURCE, ".o", team.ENTRY_FLAGS)))
    team.load(runtime)
    return (str(entry), *team.LINK_FLAGS)


def _team_part(cc: str, source: Path, suffix: str, flags: tuple[str, ...]) -> Path:
    """``source`` (a C file of the team) built with ``flags`` into the cache, its entry named by a hash of
    the source, the compiler and the flags."""
    text = source.read_text()
    key = hashlib.sha256("\0".join([text, cc, compiler_identity(cc), *flags]).encode()).hexdigest()[:24]
    target = cache_dir() / f"{ENTRY_PREFIX}{source.stem}_{key}{suffix}"
    return publish(target, lambda built: run_compiler(
        [*shlex.split(cc), *flags, str(source), "-o", str(built)], source.name, source, target))


def _record_of(entry: Path) -> Path:
    return entry.with_name(entry.name + RECORD_SUFFIX)


def _describe(path: Path) -> str:
    """The record line of ``path``: its SHA-256 and size."""
    data = path.read_bytes()
    return f"{hashlib.sha256(data).hexdigest()} {len(data)}\n"


def _trusted(entry: Path) -> bool:
    """Whether ``entry`` is a complete published shared object: its record exists and matches it."""
    try:
        record = _record_of(entry).read_text()
        size = int(record.split()[1])
        return entry.stat().st_size == size and _describe(entry) == record
    except (OSError, ValueError, IndexError):
        return False


@cache
def library_flags() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Compile and link flags of a shared object: those this interpreter built its own extensions with
    (``sysconfig`` CFLAGS and CCSHARED; LDSHARED less the compiler), without debug information, which
    only costs compile time here."""
    config = sysconfig.get_config_vars()
    python_flags = shlex.split(f"{config.get('CFLAGS') or ''} {config.get('CCSHARED') or ''}")
    compile_flags = [flag for flag in python_flags if not flag.startswith("-g")]
    link = shlex.split(config.get("LDSHARED") or "cc -shared")[1:]
    return tuple(compile_flags), tuple(link)


def _build(source: str, flags: tuple[str, ...], link_flags: tuple[str, ...], target: Path, cc: str,
           on_team: bool) -> None:
    """Compile ``source`` in a locked private folder, its prelude (``STANDARD_HEADERS`` and the SIMD
    header it uses) included first, precompiled once that pays off; then publish the shared object and
    its record. A kernel linked for the team (``on_team``) that still needs another OpenMP runtime is a
    BuildError, not an entry."""
    def build(built: Path) -> None:
        folder = built.parent
        name = target.name.removesuffix(LIBRARY_SUFFIX)
        kernel = folder / f"{name}.c"
        kernel.write_text(source)
        compile_flags, link = library_flags()
        prelude = STANDARD_HEADERS + "".join(header for header in INTRINSICS if header in source)
        compiler_call = (*shlex.split(cc), *compile_flags, *flags)
        if not link_prelude(compiler_call, compiler_identity(cc), prelude, folder):
            (folder / PCH_NAME).write_text(prelude)
        run_compiler([*compiler_call, "-include", str(folder / PCH_NAME), str(kernel), "-o", str(built),
                      *link, *link_flags], name, kernel, target)
        runtime = team.foreign_runtime(built) if on_team else None
        if runtime is not None:
            raise BuildError(f"{name} calls OpenMP functions beyond the ones loopopt's team serves "
                             f"({', '.join(team.SERVED)}), so it needs {runtime}, whose threads would run "
                             f"apart from the team's; build it with {team.RUNTIME_ENV}={team.LIBGOMP}")

    publish(target, build)


def run_compiler(command: list[str], name: str, source: Path, target: Path, cwd: Path | None = None) -> None:
    """Run a compiler ``command`` (in folder ``cwd``) on ``source``; BuildError with its messages if it
    fails (the source kept next to ``target`` as ``*.failed.c``)."""
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=cwd)
    if done.returncode != 0:
        failed = target.with_suffix(".failed.c")
        shutil.copy(source, failed)
        raise BuildError(f"compiling {name} failed ({command[0]} exited with {done.returncode}: "
                         f"{done.stderr.strip()[-2000:]}); the source is in {failed}")


def publish(target: Path, build: Callable[[Path], None]) -> Path:
    """The cache entry ``target``: if it is not a trusted entry already, ``build(path)`` makes it at
    ``path`` in a locked private build folder of the cache, then it is published with its record, each
    with an atomic rename (module docstring)."""
    if _trusted(target):
        return target
    remove_stale_builds(target.parent)
    folder = Path(tempfile.mkdtemp(prefix=BUILD_PREFIX, dir=target.parent))
    lock = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released when the process dies: unlocked means abandoned
        built = folder / target.name
        build(built)
        record = folder / "record"
        record.write_text(_describe(built))
        os.replace(built, target)
        os.replace(record, _record_of(target))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(lock)
    return target


def link_prelude(compiler_call: tuple[str, ...], identity: str, prelude: str, folder: Path,
                 name: str = PCH_NAME, uses: int = 1) -> bool:
    """Put the cache's precompiled ``prelude`` (``STANDARD_HEADERS``, or a cross toolchain's headers, then
    the SIMD header the kernel uses, of ``INTRINSICS``: parsing those headers is most of a small kernel's
    compile) for this ``compiler_call`` (compiler and flags) into the build ``folder`` (in the cache) as
    ``name`` (for ``uses`` translation units of the build), building it first if the cache has none and it
    pays off (``_pays_off``). Hard links, so that a cache
    cleared meanwhile cannot take it from the build. False if it does not pay off yet or this compiler
    cannot precompile it (one it finds unusable, it reads as text). Processes needing a prelude that is
    missing take turns (an ``flock`` on its ``.uses`` counter): one precompiles it, the others wait and
    link it (two test workers starting on one flag set each built it: 26 builds of 21 headers)."""
    key = hashlib.sha256("\0".join([*compiler_call, identity, prelude]).encode()).hexdigest()[:24]
    header = folder.parent / f"{PCH_PREFIX}{key}.h"
    compiled = header.with_name(header.name + ".gch")
    if _hard_link(header, compiled, folder / name):
        return True
    with header.with_name(header.name + PCH_USES).open("ab") as counter:
        fcntl.flock(counter, fcntl.LOCK_EX)      # released when the file closes, or its process dies
        if _hard_link(header, compiled, folder / name):      # precompiled while this process waited
            return True
        return _pays_off(counter, uses) and _precompile(compiler_call, prelude, header, compiled, folder) \
            and _hard_link(header, compiled, folder / name)


def precompile_after() -> int:
    """Builds of a flag set that parse the headers before the next precompiles them: ``PRECOMPILE_AFTER``,
    or ``$LOOPOPT_PRECOMPILE_AFTER`` (a whole number; ValueError naming anything else)."""
    value = os.environ.get(PRECOMPILE_ENV, str(PRECOMPILE_AFTER))
    if not value.isdigit():
        raise ValueError(f"{PRECOMPILE_ENV}={value!r}: expected a whole number of builds (0 precompiles the "
                         f"headers at a flag set's first build; default {PRECOMPILE_AFTER})")
    return int(value)


def _pays_off(counter: BinaryIO, count: int = 1) -> bool:
    """Count ``count`` more builds of a prelude in its ``.uses`` file ``counter`` (a byte appended each);
    True once ``precompile_after()`` builds went without its precompiled form."""
    counter.write(b"." * count)
    counter.flush()
    return os.fstat(counter.fileno()).st_size > precompile_after()


def _hard_link(header: Path, compiled: Path, link: Path) -> bool:
    """Link ``header`` and its ``compiled`` form as ``link`` and ``link.gch``; False if either is gone."""
    try:
        os.link(header, link)
        os.link(compiled, link.with_name(link.name + ".gch"))
        return True
    except OSError:
        link.unlink(missing_ok=True)
        return False


def _precompile(compiler_call: tuple[str, ...], prelude: str, header: Path, compiled: Path,
                folder: Path) -> bool:
    """Precompile ``prelude`` in ``folder``, then publish it as ``compiled`` and its text as ``header``,
    each with an atomic rename."""
    draft = folder / "prelude.h"
    draft.write_text(prelude)
    done = subprocess.run([*compiler_call, "-x", "c-header", str(draft), "-o", f"{draft}.gch"],
                          capture_output=True, check=False)
    if done.returncode != 0:
        return False
    os.replace(f"{draft}.gch", compiled)
    os.replace(draft, header)
    return True


def _build_folders(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if _BUILD_FOLDER.fullmatch(p.name) and p.is_dir()]


@dataclass(frozen=True)
class CacheInfo:
    """What the kernel cache holds (``cache_info``) or what was removed from it."""

    path: Path
    entries: int        # compiled kernels (shared objects)
    bytes: int          # loopopt's files and build folders in the directory
    builds: int         # build folders: running builds, or leftovers of killed ones
    failed: int         # sources of failed compiles (*.failed.c)
    headers: int = 0    # precompiled headers (one per compiler and flag set that paid off)
    header_bytes: int = 0     # their files, included in ``bytes``

    def __str__(self) -> str:
        rest, headers = (self.bytes - self.header_bytes) / 1e6, self.header_bytes / 1e6
        return (f"{self.path}: {self.bytes / 1e6:.2f} MB: {self.entries} kernels ({rest:.2f} MB with the "
                f"rest), {self.headers} precompiled headers ({headers:.2f} MB: each speeds up the builds of "
                f"one compiler and flag set; `loopopt cache trim` removes them), {self.builds} build "
                f"folders, {self.failed} failed sources")

    def removed(self) -> str:
        """What ``trim_cache`` or ``clear_cache`` removed, in one line."""
        return (f"removed from {self.path}: {self.bytes / 1e6:.2f} MB: {self.entries} kernels, "
                f"{self.headers} precompiled headers, {self.builds} build folders, {self.failed} failed "
                f"sources")


def _size(path: Path) -> int:
    """Bytes of a file or of the files under a folder (0 if it vanished meanwhile)."""
    try:
        if path.is_dir():
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        return path.stat().st_size
    except OSError:
        return 0


def _entry_files(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.name.startswith(ENTRY_PREFIX) and p.is_file()]


def _summary(directory: Path, files: list[Path], folders: list[Path]) -> CacheInfo:
    headers = [f for f in files if f.name.startswith(PCH_PREFIX)]
    return CacheInfo(directory, sum(f.name.endswith(LIBRARY_SUFFIX) for f in files),
                     sum(_size(p) for p in files + folders), len(folders),
                     sum(f.name.endswith(".failed.c") for f in files),
                     sum(f.name.endswith(".gch") for f in headers), sum(_size(p) for p in headers))


def remove_stale_builds(directory: Path, older_than: float = STALE_BUILD_SECONDS) -> CacheInfo:
    """Remove the build folders in ``directory`` that no running build holds and that were last
    modified more than ``older_than`` seconds ago; returns what was removed."""
    removed = []
    for folder in _build_folders(directory):
        try:
            if time.time() - folder.stat().st_mtime < older_than:
                continue
            lock = os.open(folder, os.O_RDONLY)
        except OSError:          # removed meanwhile by another process
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            removed.append((folder, _size(folder)))
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:          # a running build holds it (or the file system has no locks)
            pass
        finally:
            os.close(lock)
    return CacheInfo(directory, 0, sum(size for _, size in removed), len(removed), 0)


def cache_info() -> CacheInfo:
    """The cache's path, number of kernels, size, build folders and failed sources."""
    directory = cache_dir()
    return _summary(directory, _entry_files(directory), _build_folders(directory))


def clear_cache() -> CacheInfo:
    """Remove every kernel, record, failed source and build folder not held by a running build;
    returns what was removed. Kernels already loaded by running processes keep working."""
    directory = cache_dir()
    # records first: a clear interrupted midway leaves kernels without a record, which are rebuilt
    files = sorted(_entry_files(directory), key=lambda p: not p.name.endswith(RECORD_SUFFIX))
    removed = _summary(directory, files, [])
    for path in files:
        path.unlink(missing_ok=True)
    builds = remove_stale_builds(directory, older_than=0)
    return CacheInfo(directory, removed.entries, removed.bytes + builds.bytes, builds.builds, removed.failed,
                     removed.headers, removed.header_bytes)


def trim_cache() -> CacheInfo:
    """Remove the precompiled headers (rebuilt once they pay off again), the sources of failed compiles
    and the build folders no running build holds, keeping every kernel; returns what was removed."""
    directory = cache_dir()
    files = [f for f in _entry_files(directory)
             if f.name.startswith(PCH_PREFIX) or f.name.endswith(".failed.c")]
    removed = _summary(directory, files, [])
    for path in files:
        path.unlink(missing_ok=True)
    builds = remove_stale_builds(directory, older_than=0)
    return replace(removed, bytes=removed.bytes + builds.bytes, builds=builds.builds)
