"""loopopt's team of OpenMP threads (``loopopt.team``): kernels on it give libgomp's results bit for bit,
from concurrent Python threads, in a forked child, under another OpenMP runtime in the global scope;
nested regions run alone; the environment's wait settings are read or refused."""
import ctypes
import os
import threading

import numpy as np
import pytest
from helpers import HYPOTHESIS
from hypothesis import given, settings
from hypothesis import strategies as st

import loopopt as lo
from loopopt import elf, team
from loopopt.cbuild import BuildError, compile_c
from loopopt.openmp import OPENMP_FLAG
from loopopt.quant_reference import random_call
from loopopt.tune.choice import first_choice

SIZES = """int lo_sizes(int threads, int *out) {
    omp_set_num_threads(threads);
    #pragma omp parallel
    {
        int outer = omp_get_thread_num(), size = omp_get_num_threads();
        #pragma omp parallel
        out[outer] = size * 100 + omp_get_num_threads() * 10 + omp_get_thread_num();
    }
    return 0;
}"""


def _sizes(threads: int) -> list[int]:
    """Per thread of a region of ``threads`` threads: its team size, and the size and thread number of
    the region it starts inside (size * 100 + inner size * 10 + inner number)."""
    library = compile_c("#include <omp.h>\n" + SIZES, "int lo_sizes(int threads, int *out);",
                        (OPENMP_FLAG,), (OPENMP_FLAG,))
    out = np.full(8, -1, dtype=np.int32)
    library.lib.lo_sizes(threads, library.ffi.cast("int *", out.ctypes.data))
    return out.tolist()


def test_regions_nested_and_of_one_thread_run_alone():
    assert _sizes(3) == [310, 310, 310, -1, -1, -1, -1, -1]
    assert _sizes(1) == [110, -1, -1, -1, -1, -1, -1, -1]


BARRIER = """int lo_barrier(int *out) {
    #pragma omp parallel num_threads(2)
    {
        out[omp_get_thread_num()] = omp_get_num_threads();
        #pragma omp barrier
    }
    return 0;
}"""


def test_a_kernel_needing_more_than_the_team_serves_is_refused(monkeypatch, tmp_path):
    """A kernel calling an OpenMP function the team does not define (``GOMP_barrier``) is a BuildError
    naming the runtime it would need; linked with libgomp as that error says, it builds and runs."""
    def build():
        return compile_c("#include <omp.h>\n" + BARRIER, "int lo_barrier(int *out);", (OPENMP_FLAG,),
                         (OPENMP_FLAG,))
    refused = r"beyond .*GOMP_parallel.* needs libgomp\.so\.1.*LOOPOPT_OPENMP=libgomp"
    with pytest.raises(BuildError, match=refused):
        build()
    monkeypatch.setenv(team.RUNTIME_ENV, team.LIBGOMP)
    out = np.zeros(2, dtype=np.int32)
    library = build()
    library.lib.lo_barrier(library.ffi.cast("int *", out.ctypes.data))
    assert out.tolist() == [2, 2]
    text = tmp_path / "not.so"
    text.write_text("not a shared object")
    with pytest.raises(ValueError, match="not an ELF file"):
        elf.needed(text)


def test_kernels_bind_to_the_team_under_libgomp_in_the_global_scope():
    """libgomp loaded first into the global scope (as ``import torch`` does): a kernel's region still
    runs on the team, which starts the workers it asks for."""
    ctypes.CDLL("libgomp.so.1", mode=os.RTLD_GLOBAL)
    assert _sizes(7)[:7] == [710] * 7 and team.workers() >= 6


@st.composite
def convs(draw):
    """A small conv, fp32 or uint8 x int8 (per-channel weights), on 2 or 3 threads."""
    quant = draw(st.sampled_from([None, lo.QuantSpec("uint8", True, False, "uint8")]))
    channels, filters = draw(st.integers(1, 24)), draw(st.integers(2, 40))
    size = draw(st.integers(3, 12))
    op = lo.Conv2d(channels, filters, 3, padding=1, height=size, width=draw(st.integers(3, 12)), quant=quant)
    return op, draw(st.integers(2, 3))


def _libgomp_same(schedule: lo.Schedule, threads: int) -> None:
    """``schedule``'s kernel on ``threads`` threads of the team gives, bit for bit, what the same C gives
    on one thread and on libgomp's threads (``$LOOPOPT_OPENMP=libgomp``)."""
    op = schedule.op
    args, params = (random_call(op, 2) if op.quant is not None else
                    ([op.random_inputs(seed=2)[t] for t in op.call_tensors], {}))
    on_team = schedule.compile()
    os.environ[team.RUNTIME_ENV] = team.LIBGOMP
    try:
        on_libgomp = schedule.compile()
    finally:
        del os.environ[team.RUNTIME_ENV]
    results = []
    for kernel, count in ((on_team, threads), (on_team, 1), (on_libgomp, threads)):
        kernel.set_threads(count)
        results.append(kernel(*args, **params))
    assert all(np.array_equal(results[0], other) for other in results[1:])


def test_team_results_are_libgomps_and_one_threads_quick(threaded_kernel):
    _libgomp_same(threaded_kernel[0].schedule, 3)


@pytest.mark.slow
@settings(max_examples=12, **HYPOTHESIS)
@given(convs())
def test_team_results_are_libgomps_and_one_threads(drawn):
    """The first-choice kernels of drawn convs, fp32 and quantized (20-40 s on Zen 3)."""
    op, threads = drawn
    candidate = first_choice(op, "auto", threads)
    if candidate is not None and candidate.schedule.parallel_loop is not None:
        _libgomp_same(candidate.schedule, threads)


@pytest.fixture(scope="module")
def threaded_kernel():
    op = lo.Conv2d(16, 32, 3, padding=1, height=10, width=10)
    kernel = lo.Schedule(op).parallel("k").compile()
    args = [op.random_inputs(seed=4)[t] for t in op.call_tensors]
    kernel.set_threads(1)
    return kernel, args, kernel(*args)


def test_concurrent_python_threads_share_the_team(threaded_kernel):
    """Four Python threads call the kernel at once (cffi releases the GIL) on 2, 3 or 4 threads each:
    their regions take turns on the team, every result the one-thread result."""
    kernel, args, expected = threaded_kernel
    wrong = []

    def calls(threads: int) -> None:
        clone = kernel.schedule.compile()
        clone.set_threads(threads)
        for _ in range(20):
            if not np.array_equal(clone(*args), expected):
                wrong.append(threads)

    workers = [threading.Thread(target=calls, args=(n,)) for n in (2, 3, 4, 2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not wrong


def test_a_forked_child_starts_workers_of_its_own(threaded_kernel):
    kernel, args, expected = threaded_kernel
    kernel.set_threads(2)
    assert np.array_equal(kernel(*args), expected) and team.workers() >= 1
    child = os.fork()
    if child == 0:
        alone = team.workers() == 0
        same = np.array_equal(kernel(*args), expected)
        os._exit(0 if alone and same and team.workers() >= 1 else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_wait_rules_of_the_environment():
    assert team.wait_rule({}) == (team.SPIN, team.FOREVER)
    assert team.wait_rule({"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "5"}) == (0, 0)
    assert team.wait_rule({"OMP_WAIT_POLICY": "active"}) == (team.FOREVER, team.FOREVER)
    assert team.wait_rule({"GOMP_SPINCOUNT": "3k"}) == (3000, 3000)
    assert team.wait_rule({"GOMP_SPINCOUNT": "infinite"}) == (team.FOREVER, team.FOREVER)
    with pytest.raises(ValueError, match="GOMP_SPINCOUNT='3x': allowed: a count of spins"):
        team.wait_rule({"GOMP_SPINCOUNT": "3x"})
    with pytest.raises(ValueError, match="OMP_WAIT_POLICY='busy': allowed: active or passive"):
        team.wait_rule({"OMP_WAIT_POLICY": "busy"})


def test_default_threads_and_the_runtime_choice(monkeypatch):
    assert team.default_threads({"OMP_NUM_THREADS": "3,2"}) == 3
    assert team.default_threads({}) == len(os.sched_getaffinity(0))
    with pytest.raises(ValueError, match="OMP_NUM_THREADS='0': allowed: a positive thread count"):
        team.default_threads({"OMP_NUM_THREADS": "0"})
    assert team.serves("gcc (Debian 12.2.0-14) 12.2.0") and not team.serves("Debian clang version 14.0.6")
    monkeypatch.setenv(team.RUNTIME_ENV, "gomp")
    with pytest.raises(ValueError, match="LOOPOPT_OPENMP='gomp': allowed: team .* or libgomp"):
        team.serves("gcc")
