"""The kernel cache: unusable directories, corrupt entries rebuilt, killed builds cleaned, info and clear."""
import fcntl
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import quick_first

from loopopt import cbuild
from loopopt.cbuild import CacheError, cache_info, clear_cache, compile_c
from loopopt.cli import main

ROOT = Path(__file__).resolve().parent.parent
CDEF = "int lo_value(void);"


def source(value: int) -> str:
    return f"int lo_value(void) {{ return {value}; }}"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache directory of this test only, precompiling headers by the library's default."""
    path = tmp_path / "cache"
    monkeypatch.setenv("LOOPOPT_CACHE_DIR", str(path))
    monkeypatch.delenv(cbuild.PRECOMPILE_ENV, raising=False)
    return path


def python(code: str, cache: Path, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter on ``cache`` (a crash there fails the test, not the session)."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "LOOPOPT_CACHE_DIR": str(cache), **env}
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True,
                          check=False, timeout=120)


def load(value: int, cache: Path) -> subprocess.CompletedProcess:
    return python(f"from loopopt.cbuild import compile_c\n"
                  f"print(compile_c({source(value)!r}, {CDEF!r}).lib.lo_value())", cache)


def entry(cache: Path) -> Path:
    (so,) = [p for p in cache.iterdir() if p.name.endswith(".so")]
    return so


def test_cache_dir_that_is_a_file_or_under_one(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("LOOPOPT_CACHE_DIR", str(blocker))
    with pytest.raises(CacheError, match=f"kernel cache {blocker} .*LOOPOPT_CACHE_DIR.* is not a directory"):
        compile_c(source(1), CDEF)
    monkeypatch.setenv("LOOPOPT_CACHE_DIR", str(blocker / "sub"))
    expected = f"kernel cache {blocker / 'sub'} .*cannot be created: Not a directory"
    with pytest.raises(CacheError, match=expected):
        cbuild.cache_dir()


def unprivileged(command: list[str]) -> list[str]:
    """``command`` run without the right to write a directory it may not write (root included)."""
    if os.geteuid() != 0:
        return command
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: no way to make a directory unwritable")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", *command]


@pytest.mark.parametrize("command", [
    ["-m", "loopopt.cli", "show", "--matmul", "4,4,4"],
    ["-c", f"from loopopt.cbuild import compile_c; compile_c({source(2)!r}, {CDEF!r})"],
])
def test_read_only_cache_dir(tmp_path, command):
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "LOOPOPT_CACHE_DIR": str(read_only)}
    done = subprocess.run(unprivileged([sys.executable, *command]), env=environment, capture_output=True,
                          check=False, text=True, timeout=120)
    message = (f"kernel cache {read_only} (set by LOOPOPT_CACHE_DIR; point LOOPOPT_CACHE_DIR at a writable "
               f"directory) is not writable")
    assert done.returncode != 0 and message in done.stderr and "PermissionError" not in done.stderr
    if command[0] == "-m":      # the command: one line, status 2
        assert done.returncode == 2 and done.stderr.strip() == f"loopopt: error: {message}"
    assert list(read_only.iterdir()) == []


def truncate(so: Path) -> None:
    os.truncate(so, so.stat().st_size // 2)


def flip_bytes(so: Path) -> None:
    data = bytearray(so.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(b ^ 0xFF for b in data[middle:middle + 64])
    so.write_bytes(bytes(data))


def drop_record(so: Path) -> None:          # a build killed between publishing the .so and its record
    so.with_name(so.name + ".sha256").unlink()


@pytest.mark.parametrize("damage", quick_first([truncate, flip_bytes, drop_record]))
def test_damaged_entry_is_rebuilt_before_it_is_loaded(cache, damage):
    first = load(3, cache)
    assert first.returncode == 0 and first.stdout == "3\n"
    so = entry(cache)
    good = so.read_bytes()
    damage(so)
    again = load(3, cache)
    assert again.returncode == 0 and again.stdout == "3\n", again.stderr
    rebuilt = entry(cache)
    assert rebuilt.stat().st_size == len(good)
    assert cbuild._trusted(rebuilt)


@pytest.mark.slow
def test_concurrent_compiles_of_one_kernel_all_succeed(cache):
    """Three processes building one kernel at once all succeed; one of them precompiles the prelude
    (precompiled at the first build here), the others wait for it and link it: one build counted."""
    code = f"from loopopt.cbuild import compile_c\nprint(compile_c({source(4)!r}, {CDEF!r}).lib.lo_value())"
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "LOOPOPT_CACHE_DIR": str(cache),
                   cbuild.PRECOMPILE_ENV: "0"}
    runs = [subprocess.Popen([sys.executable, "-c", code], env=environment, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0] and [out for out, _ in results] == ["4\n"] * 3
    assert cbuild._trusted(entry(cache)) and cache_info().builds == 0
    (uses,) = cache.glob(f"{cbuild.PCH_PREFIX}*{cbuild.PCH_USES}")
    assert uses.read_bytes() == b"." and cache_info().headers == 1


def old(path: Path) -> None:
    then = time.time() - 2 * cbuild.STALE_BUILD_SECONDS
    os.utime(path, (then, then))


def wait_until_unlocked(folder: Path, timeout: float = 60) -> None:
    """Wait until no process holds ``folder``'s build lock. ``wait()`` on a build killed with its process
    group returns when the build is gone, not its forked children: a child between fork and exec (the
    build starting its compiler) shares the lock's open file until it too has exited, which under load
    can be after the parent was reaped (a process forking in a loop, killed so: its lock outlived
    wait() in 2 of 40 runs on this loaded machine)."""
    deadline = time.time() + timeout
    handle = os.open(folder, os.O_RDONLY)
    try:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                assert time.time() < deadline, f"{folder} still locked {timeout} s after its build was killed"
                time.sleep(0.01)
    finally:
        os.close(handle)                           # releases the lock taken


def test_folder_of_a_killed_build_is_cleaned(cache, tmp_path):
    slow_cc = tmp_path / "slow-cc"
    slow_cc.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo slow-cc 1.0; exit 0; fi\nsleep 60\n')
    slow_cc.chmod(0o755)
    code = f"from loopopt.cbuild import compile_c; compile_c({source(5)!r}, {CDEF!r})"
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "LOOPOPT_CACHE_DIR": str(cache), "CC": str(slow_cc)}
    build = subprocess.Popen([sys.executable, "-c", code], env=environment, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while not (cache.is_dir() and cbuild._build_folders(cache)) and time.time() < deadline:
            time.sleep(0.05)
        (killed,) = cbuild._build_folders(cache)
    finally:
        os.killpg(build.pid, signal.SIGKILL)       # the build and its compiler, as a kill -9 of the job
        build.wait()
    wait_until_unlocked(killed)
    old(killed)
    young = cache / "build-young123"
    young.mkdir()                                  # may be a build that has not locked its folder yet
    running = cache / "build-running1"
    running.mkdir()
    old(running)
    held = os.open(running, os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)           # a build still running in another process
        assert compile_c(source(6), CDEF).lib.lo_value() == 6
        assert sorted(cbuild._build_folders(cache)) == [running, young]
    finally:
        os.close(held)
    assert len(list(cache.glob("*.so"))) == len(list(cache.glob("*.sha256"))) == 1   # only the finished build


def test_precompile_after_from_the_environment(cache, monkeypatch):
    """$LOOPOPT_PRECOMPILE_AFTER=0 (the test suite's) precompiles the headers at a flag set's first build;
    anything but a whole number is refused naming it."""
    monkeypatch.setenv(cbuild.PRECOMPILE_ENV, "0")
    assert compile_c(source(12), CDEF).lib.lo_value() == 12
    assert len(list(cache.glob(f"{cbuild.PCH_PREFIX}*.h.gch"))) == 1
    monkeypatch.setenv(cbuild.PRECOMPILE_ENV, "two")
    with pytest.raises(ValueError, match="LOOPOPT_PRECOMPILE_AFTER='two': expected a whole number of builds"):
        cbuild.precompile_after()


def test_opt_level_builds_and_keys_each_level_apart(cache, monkeypatch):
    """$LOOPOPT_OPT_LEVEL (the suite sets 1) builds at that -O level and is part of the cache key: a kernel
    built at one level is never loaded at another; unset means -O3; any other value is refused."""
    levels = []
    compile_once = cbuild.run_compiler
    monkeypatch.setattr(cbuild, "run_compiler", lambda command, *args: (
        levels.append([flag for flag in command if flag.startswith("-O")][-1]), compile_once(command, *args)))
    monkeypatch.setattr(cbuild, "_loaded", {})
    for level in ("1", "3", None, "1"):
        if level is None:
            monkeypatch.delenv(cbuild.OPT_LEVEL_ENV)
        else:
            monkeypatch.setenv(cbuild.OPT_LEVEL_ENV, level)
        assert compile_c(source(13), CDEF).lib.lo_value() == 13
    assert levels == ["-O1", "-O3"] and cache_info().entries == 2
    for bad in ("0", "fast", "-O2"):
        monkeypatch.setenv(cbuild.OPT_LEVEL_ENV, bad)
        with pytest.raises(ValueError, match=f"LOOPOPT_OPT_LEVEL='{bad}': not an optimization level; "
                                             f"allowed: 1, 2, 3"):
            compile_c(source(13), CDEF)



@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="-mfma is an x86 flag")
def test_every_level_rounds_a_multiply_add_alike_unfused(cache, monkeypatch):
    """Kernels build with -std=c11, under which GCC contracts no a*b + c into an FMA at any level: the
    suite's -O1 kernels round as users' -O3 ones. (1 + 2^-12)^2 - (1 + 2^-11) is 2^-24 fused, 0 rounded
    first; a build that contracts (the control: -O3 -ffp-contract=fast) gets the 2^-24."""
    monkeypatch.setenv(cbuild.PRECOMPILE_ENV, "99")      # three one-off flag sets: no precompiled headers
    code = "float lo_madd(float a, float b, float c) { return a * b + c; }"
    cdef = "float lo_madd(float, float, float);"
    a, c = 1 + 2.0 ** -12, -(1 + 2.0 ** -11)
    for level in ("1", "3"):
        assert compile_c(code, cdef, ("-mfma",), level=level).lib.lo_madd(a, a, c) == 0.0, level
    fused = compile_c(code, cdef, ("-mfma", "-ffp-contract=fast"), level="3")
    assert fused.lib.lo_madd(a, a, c) == 2.0 ** -24

def test_info_trim_and_clear(cache, capsys):
    """info lists kernels and precompiled headers apart; trim removes the headers, failed sources and
    abandoned build folders and keeps the kernels; clear removes all of loopopt's files."""
    for value in (7, 8, 9):                        # the third build of these flags precompiles the headers
        compile_c(source(value), CDEF)
    with pytest.raises(cbuild.BuildError, match="failed.c"):
        compile_c("int lo_value(void) { return }", CDEF)
    leftover = cache / "build-leftover"
    (leftover / "sub").mkdir(parents=True)
    (leftover / "sub" / "half.o").write_bytes(b"x" * 1000)
    mine = cache / "notes.txt"                     # not loopopt's: a cache dir pointed at a shared folder
    mine.write_text("keep me")
    info = cache_info()
    assert (info.path, info.entries, info.builds, info.failed, info.headers) == (cache, 3, 1, 1, 1)
    files = [p for p in cache.iterdir() if p.name.startswith("_loopopt_")]
    assert info.bytes == sum(p.stat().st_size for p in files) + 1000
    headers = [p for p in files if p.name.startswith(cbuild.PCH_PREFIX)]
    assert info.header_bytes == sum(p.stat().st_size for p in headers) > info.bytes / 2
    assert main(["cache", "info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data.pop("provenance")["loopopt"] and data.pop("units")["data"] == "bytes"
    assert data == {"action": "info", "path": str(cache), "entries": 3, "bytes": info.bytes, "builds": 1,
                    "failed": 1, "headers": 1, "header_bytes": info.header_bytes}
    assert main(["cache", "info"]) == 0
    assert f"3 kernels ({(info.bytes - info.header_bytes) / 1e6:.2f} MB with the rest), 1 precompiled " \
           f"headers ({info.header_bytes / 1e6:.2f} MB" in capsys.readouterr().out
    assert main(["cache", "trim"]) == 0
    assert capsys.readouterr().out.endswith(": 0 kernels, 1 precompiled headers, 1 build folders, 1 failed "
                                            "sources\n")
    kept = cache_info()
    assert (kept.entries, kept.headers, kept.header_bytes, kept.failed, kept.builds) == (3, 0, 0, 0, 0)
    assert all(cbuild._trusted(so) for so in cache.glob("*.so"))     # the kernels stay, loadable
    assert main(["cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"removed from {cache}: ") and ": 3 kernels, 0 precompiled headers" in out
    assert sorted(cache.iterdir()) == [mine]
    assert (cache_info().entries, cache_info().bytes) == (0, 0)
    assert clear_cache().entries == 0


INTRINSIC_SOURCE = ("#include <immintrin.h>\n"
                    "int lo_value(void) {{ return _mm_cvtsi128_si32(_mm_set1_epi32({})); }}")


def test_a_kernel_has_the_standard_headers_and_its_compile_errors_name_its_own_lines(cache):
    """A kernel is compiled as given, its prelude (``STANDARD_HEADERS``, the declarations it always had)
    included from the command line: the compiler's messages name the kernel's own lines and the kept
    source is the kernel's; a function called undeclared is an error, not a call guessed to return int."""
    uses_headers = "int lo_value(void) { ptrdiff_t n = INT8_MAX; return (int) fmaxf((float) n, 1.0f); }"
    assert compile_c(uses_headers, CDEF).lib.lo_value() == 127
    undeclared = "#include <stdint.h>\nint lo_value(void) { return (int) lo_missing(2.0f); }"
    with pytest.raises(cbuild.BuildError, match=r"\.c:2:\d+: error: implicit declaration of function "
                                                r".lo_missing.") as failed:
        compile_c(undeclared, CDEF)
    (kept,) = cache.glob("*.failed.c")
    assert kept.read_text() == undeclared and str(kept) in str(failed.value)


@pytest.mark.slow
def test_preludes_are_precompiled_once_they_pay_off_and_a_damaged_one_is_only_slower(cache):
    """Kernels of one compiler and flags share a precompiled prelude (the standard headers, and
    <immintrin.h> where the kernel includes it), made by the third build of those (a flag set used once or
    twice gets none); a damaged one is read as text, a missing one rebuilt."""
    def preludes():
        return sorted(p.name for p in cache.glob(f"{cbuild.PCH_PREFIX}*.h.gch"))

    assert [compile_c(INTRINSIC_SOURCE.format(v), CDEF).lib.lo_value() for v in (1, 2)] == [1, 2]
    assert preludes() == []
    assert compile_c(INTRINSIC_SOURCE.format(3), CDEF).lib.lo_value() == 3
    assert compile_c(source(4), CDEF).lib.lo_value() == 4     # no intrinsics: a prelude of its own, not yet
    assert len(first := preludes()) == 1
    assert compile_c(INTRINSIC_SOURCE.format(5), CDEF).lib.lo_value() == 5
    assert preludes() == first
    for compiled in cache.glob("*.gch"):
        compiled.write_bytes(b"not a precompiled header")
    assert compile_c(INTRINSIC_SOURCE.format(6), CDEF).lib.lo_value() == 6
    for compiled in cache.glob("*.gch"):
        compiled.unlink()
    assert compile_c(INTRINSIC_SOURCE.format(7), CDEF).lib.lo_value() == 7
    assert len(preludes()) == 1
    clear_cache()
    assert not list(cache.iterdir())
