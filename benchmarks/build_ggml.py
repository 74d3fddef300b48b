"""Build llama.cpp's ggml CPU libraries (``libggml-base``, ``libggml-cpu``) for bench_lowbit.py's llama.cpp
peer (``ggml_ternary.py``), from the ``llama-cpp-python`` source distribution on PyPI, into a cache directory.

``python benchmarks/build_ggml.py`` downloads the sdist (``pip download --no-deps --no-binary :all:
llama-cpp-python``, ``--version`` to pin one, ``--sdist FILE`` to use one already downloaded), unpacks its
``vendor/llama.cpp`` tree into a temporary directory, configures it with cmake (shared libraries,
``GGML_NATIVE=ON``: built for this CPU; llama.cpp's own library, tools, tests and examples off) and builds
only the ``ggml-base`` and ``ggml-cpu`` targets, one compile at a time
(``CMAKE_BUILD_PARALLEL_LEVEL=1``: the machine is shared; a few minutes), into
``~/.cache/loopopt/ggml/<version>/lib`` (``$XDG_CACHE_HOME`` if set, ``--cache`` to choose another root),
with llama.cpp's MIT licence beside it. bench_lowbit.py looks there first. Nothing of llama.cpp is kept in
this repository: it is built at run time on the machine that benchmarks it. Needs cmake and a C/C++ compiler.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "llama-cpp-python"
LLAMA_CPP = "vendor/llama.cpp"
TARGETS = ("ggml-base", "ggml-cpu")
LIBRARIES = ("libggml-base.so", "libggml-cpu.so")
CMAKE_OPTIONS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DGGML_NATIVE=ON",
                 "-DGGML_BACKEND_DL=OFF", "-DLLAMA_BUILD_COMMON=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                 "-DLLAMA_BUILD_TOOLS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF",
                 "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_OPENSSL=OFF")


def cache_root() -> Path:
    """Where the builds are kept: ``$XDG_CACHE_HOME/loopopt/ggml`` (default ``~/.cache/loopopt/ggml``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "loopopt" / "ggml"


def _complete(lib: Path) -> bool:
    return all((lib / name).exists() for name in LIBRARIES)


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name))


def cached_library_dir(root: Path | None = None) -> Path | None:
    """The ``lib`` directory of the newest complete build under ``root`` (default :func:`cache_root`), or
    None."""
    root = cache_root() if root is None else root
    if not root.is_dir():
        return None
    builds = [d / "lib" for d in root.iterdir() if _complete(d / "lib")]
    return max(builds, key=lambda d: _version_key(d.parent.name), default=None)


def download(version: str | None, into: Path) -> Path:
    """The sdist of ``llama-cpp-python`` (``version``, default the newest) downloaded by pip into ``into``."""
    requirement = PACKAGE if version is None else f"{PACKAGE}=={version}"
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                    "--dest", str(into), requirement], check=True)
    found = sorted(into.glob("llama_cpp_python-*.tar.gz"))
    if len(found) != 1:
        raise RuntimeError(f"pip download left {[f.name for f in found]} in {into}, not one sdist")
    return found[0]


def unpack(sdist: Path, into: Path) -> tuple[Path, str]:
    """The llama.cpp source tree of ``sdist`` (only it is unpacked) and the sdist's version."""
    version = sdist.name.removeprefix("llama_cpp_python-").removesuffix(".tar.gz")
    top = f"llama_cpp_python-{version}/{LLAMA_CPP}"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(top + "/")]
        names = {m.name for m in members}
        for needed in ("CMakeLists.txt", "ggml/CMakeLists.txt", "LICENSE"):
            if f"{top}/{needed}" not in names:
                raise RuntimeError(f"{sdist.name} has no {LLAMA_CPP}/{needed}: its layout is not the one "
                                   f"this script was written for")
        tar.extractall(into, members=members, filter="data")
    return into / top, version


def build(source: Path, work: Path, lib: Path) -> None:
    """Configure ``source`` (llama.cpp) in ``work``, build ggml's CPU libraries one job at a time, and copy
    them (with their versioned names) into ``lib`` and llama.cpp's licence beside ``lib``."""
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL="1")
    subprocess.run(["cmake", "-S", str(source), "-B", str(work), *CMAKE_OPTIONS], check=True, env=env)
    subprocess.run(["cmake", "--build", str(work), "--target", *TARGETS], check=True, env=env)
    stems = {name.removesuffix(".so") for name in LIBRARIES}
    built = [p for p in work.rglob("libggml-*.so*") if p.name.split(".so")[0] in stems]
    missing = [name for name in LIBRARIES if not any(p.name == name for p in built)]
    if missing:
        raise RuntimeError(f"the build in {work} made no {', '.join(missing)}")
    lib.mkdir(parents=True, exist_ok=True)
    for path in built:
        shutil.copy2(path, lib / path.name, follow_symlinks=False)
    shutil.copy2(source / "LICENSE", lib.parent / "LICENSE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", help=f"the {PACKAGE} release to build (default: the newest on PyPI)")
    parser.add_argument("--sdist", type=Path, help=f"a {PACKAGE} sdist already downloaded (no download)")
    parser.add_argument("--cache", type=Path, help=f"root of the builds (default {cache_root()})")
    parser.add_argument("--force", action="store_true", help="rebuild a version already in the cache")
    args = parser.parse_args()
    if shutil.which("cmake") is None:
        raise SystemExit("cmake is not on PATH: install it (apt-get install cmake, or pip install cmake)")
    root = cache_root() if args.cache is None else args.cache
    if args.version and not args.force and _complete(root / args.version / "lib"):
        print(root / args.version / "lib")
        return
    with tempfile.TemporaryDirectory(prefix="loopopt-ggml-") as tmp:
        sdist = args.sdist or download(args.version, Path(tmp))
        source, version = unpack(sdist, Path(tmp))
        lib = root / version / "lib"
        if _complete(lib) and not args.force:
            print(lib)
            return
        build(source, Path(tmp) / "build", lib)
    print(lib)


if __name__ == "__main__":
    main()
