import compileall
import dataclasses
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import settings

DATA = Path(__file__).resolve().parent / "data"

# Each test session builds into its own kernel cache unless one is given.
os.environ.setdefault("LOOPOPT_CACHE_DIR", os.path.join(tempfile.gettempdir(), "loopopt-test-cache"))
# The suite builds nearly every flag set many times: precompiling the headers at a flag set's first build
# spares the two builds that would parse them first (about 0.45 CPU-s each with an empty cache).
# tests/test_cache.py checks the default policy.
os.environ.setdefault("LOOPOPT_PRECOMPILE_AFTER", "0")
# Kernels are built at -O1 (LOOPOPT_OPT_LEVEL, docs/reference/build.md): the tests check what kernels
# compute, not how fast, and GCC 12 compiles the quick tier's kernels in 15% less CPU at -O1 than at -O2
# (89 kernels: 13.4 vs 15.7 CPU-s), -O2 in 23% less than -O3. Every level rounds alike: kernels build with
# -std=c11, which turns GCC's contraction of a*b+c into an FMA off at every level (tests/test_cache.py
# checks it), no level enables -ffast-math or reassociation, and quantized kernels build with
# -ffp-contract=off besides (bit-exact). Tests marked `optimized_build` build at the default level
# (fixture below): checks of the optimized code or its speed (none on x86 at present: the machine's
# probes are built at -O3 by loopopt itself) and the stored layer schedules (GCC 12's combiner takes
# 17 CPU-s on the stored conv4_x.int8 kernel at -O1, 1 s at -O3). LOOPOPT_OPT_LEVEL=3 runs them all at -O3.
os.environ.setdefault("LOOPOPT_OPT_LEVEL", "1")
# loopopt's bytecode, brought up to date here (a stat per module when it is): where PYTHONDONTWRITEBYTECODE
# is set, as on the team's machines, every python the suite starts (each xdist worker, the command-line
# tests' subprocesses, the sanitizer tier) would otherwise compile loopopt from source, 1.3 CPU-s each.
compileall.compile_dir(Path(__file__).resolve().parent.parent / "loopopt", quiet=1)
# The same for the test modules: pytest keeps each one's assertion-rewritten bytecode in tests/__pycache__
# unless bytecode is not to be written, and then each xdist worker rewrites every test module it collects
# (3.6 CPU-s a worker). The modules imported from here on write their bytecode.
sys.dont_write_bytecode = False

# CI draws the same examples on every run, so that whether a submission lands does not depend on
# the draw and a CI failure reproduces (with CI=true); local runs explore new examples each time.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def pytest_collection_modifyitems(items):
    """The sanitizer tier first (one test of minutes in a subprocess), then the slow tier (its tests
    take up to half a minute each), then the quick one: xdist hands tests out in this order, so the
    last ones are short and no worker waits long for another to finish a long test at the end (the
    tutorial, the searches and the Winograd tests sat near the end of the file order)."""
    items.sort(key=lambda item: (item.get_closest_marker("sanitize") is None,
                                 item.get_closest_marker("slow") is None))


def _cpu_seconds() -> tuple[float, float]:
    """User and system CPU seconds of this process and of its waited-for children (the compilers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item):
    """With LOOPOPT_TEST_CPU_LOG=FILE, each test's CPU seconds (setup, call and teardown; the compilers
    included, then theirs alone) and wall seconds are appended to FILE as ``cpu_s children_s wall_s
    nodeid`` lines (every xdist worker appends its own; the sanitizer tier's python marks its nodeids
    ``sanitized:``): the suite's time ranked by CPU, which a loaded machine inflates far less than
    the wall's."""
    log = os.environ.get("LOOPOPT_TEST_CPU_LOG")
    (own, children), wall = _cpu_seconds(), time.perf_counter()
    yield
    if log:
        from loopopt.cbuild import SANITIZE_ENV

        (own_after, children_after), wall_after = _cpu_seconds(), time.perf_counter()
        spent_children = children_after - children
        with open(log, "a") as out:
            tier = "sanitized:" if os.environ.get(SANITIZE_ENV) else ""
            out.write(f"{own_after - own + spent_children:.3f} {spent_children:.3f} {wall_after - wall:.3f} "
                      f"{tier}{item.nodeid}\n")


@pytest.fixture(autouse=True)
def optimized_build(request, monkeypatch):
    """A test marked ``optimized_build`` builds its kernels at the default level (-O3), not the suite's."""
    if request.node.get_closest_marker("optimized_build") is not None:
        from loopopt.cbuild import DEFAULT_OPT_LEVEL, OPT_LEVEL_ENV
        monkeypatch.setenv(OPT_LEVEL_ENV, DEFAULT_OPT_LEVEL)


def _recorded_measurement():
    """The figures recorded in tests/data/machine_profile.json (caches, peaks, bandwidths) under this
    machine's identity (fingerprint, CPU, compiler): what ``measure_profile`` returns in the suite."""
    from loopopt import machine

    recorded = machine.MachineProfile.from_dict(json.loads((DATA / "machine_profile.json").read_text()))
    cpu = machine.this_cpu()
    return dataclasses.replace(recorded, fingerprint=machine.fingerprint(), cpu=cpu.model,
                               vendor=cpu.vendor, cpus=cpu.cpus, compiler=machine.compiler_version(),
                               measured_utc=machine.utc_now())


@pytest.fixture(autouse=True)
def machine_measurement(request, monkeypatch, tmp_path_factory):
    """The machine profile's measurement (10-40 s of one worker, the quick tier's longest test wherever it
    fell first) is the recorded figures' (``_recorded_measurement``): the tests that rank or time read a
    profile but do not check its measurement, and the machine's cache, sharing and corruption logic runs
    as ever around it. A test marked ``measured_profile`` measures this machine for real, in a cache
    directory of its own (a stored profile is not read instead of measuring, nor left for the others)."""
    from loopopt import machine

    if request.node.get_closest_marker("measured_profile") is not None:
        monkeypatch.setenv("LOOPOPT_CACHE_DIR", str(tmp_path_factory.mktemp("measured")))
    else:
        monkeypatch.setattr(machine, "measure_profile", _recorded_measurement)


@pytest.fixture
def recorded_profile(monkeypatch):
    """This test's machine profile is the one recorded in tests/data/machine_profile.json (this 2-core
    Xeon, measured while no other process ran), not the one this run measured: measured during a
    test run on a loaded machine, the cache and DRAM bandwidths come out 3-8x lower and many ranked
    candidates tie at one predicted time, so a test of the ranking's order would depend on the load."""
    from loopopt import machine
    from loopopt.targets.x86 import rank

    remembered = (rank._caches, rank._peak, rank._operands)      # the ranking's figures of the profile
    for figures in remembered:
        figures.cache_clear()
    profile = machine.MachineProfile.from_dict(json.loads((DATA / "machine_profile.json").read_text()))
    monkeypatch.setitem(machine._profiles, machine.profile_path(), profile)
    yield profile
    for figures in remembered:
        figures.cache_clear()
