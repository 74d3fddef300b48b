"""Kernels at the numpy boundary: validation, ISA choice, cache, compiler errors, measure."""
import numpy as np
import pytest

import loopopt as lo
from loopopt import cbuild
from loopopt.openmp import SPIN_COUNT, USER_SETTINGS
from loopopt.targets.x86 import isa as x86_isa
from loopopt.targets.x86.isa import ISAS, named_isa, resolve_isa
from loopopt.targets.x86.target import TARGET
from loopopt.team import LIBGOMP, RUNTIME_ENV
from loopopt.tune.choice import first_choice

OP = lo.Conv2d(3, 5, 3, padding=1, height=6, width=7)


@pytest.fixture(scope="module")
def kernel():
    return lo.Schedule(OP).compile("scalar")


def test_bad_arrays(kernel):
    x, w, b = (OP.random_inputs()[t] for t in "IWB")
    with pytest.raises(TypeError, match="I has dtype float64; this kernel takes float32"):
        kernel(x.astype(np.float64), w, b)
    with pytest.raises(ValueError, match=r"W has shape \(5, 3, 3\); .* expects \(5, 3, 3, 3\)"):
        kernel(x, w[..., 0], b)
    with pytest.raises(ValueError, match="I is not C-contiguous"):
        kernel(np.asfortranarray(x), w, b)
    with pytest.raises(ValueError, match="has a bias"):
        kernel(x, w)
    with pytest.raises(TypeError, match="must be a numpy array"):
        kernel(x.tolist(), w, b)


def test_isa_errors():
    with pytest.raises(ValueError, match="unknown isa 'neon'"):
        resolve_isa("neon")
    assert resolve_isa("auto") == lo.available_isas()[0]
    assert "scalar" in lo.available_isas()


def test_a_named_isa_is_planned_on_any_cpu_and_refused_where_a_kernel_is_built(monkeypatch, recorded_profile):
    """On a CPU with AVX2 only, AVX-512 schedules are chosen, counted and printed; compiling one is the
    one-line refusal naming the missing features, after the refusals every CPU gives."""
    monkeypatch.setattr(x86_isa, "cpu_flags", lambda: frozenset(ISAS["avx2"].cpu_flags))
    assert (named_isa("avx512"), named_isa("auto"), TARGET.variant("amx")) == ("avx512", "avx2", "amx")
    with pytest.raises(ValueError, match="unknown isa 'neon'"):
        named_isa("neon")
    op = lo.Conv2d(3, 32, 3, padding=1, height=6, width=7)
    s = lo.Schedule(op).layout("O", "NHWC").layout("W", "HWIO").tile(k=16).vectorize("k_i")
    assert "# vector loop k_i on avx512 (16 lanes)" in s.pseudocode("avx512")
    assert lo.kernel_model(s, "avx512", traffic=False).predicted_seconds > 0
    assert first_choice(op, "avx512").isa == "avx512"
    with pytest.raises(ValueError, match=r"^isa 'avx512' needs CPU features avx512f that this CPU lacks; "
                                         r"available: avx2, scalar$"):
        s.compile("avx512")
    quantized = lo.Conv2d(4, 32, 3, quant=lo.QuantSpec(), height=6, width=6)
    with pytest.raises(ValueError, match="needs CPU features avx512_vnni, avx512bw, avx512f, avx512vl that "
                                         "this CPU lacks for integer kernels"):
        lo.dataflows.winograd(quantized).compile("avx512")
    with pytest.raises(ValueError, match="multiple of the 16 int32 lanes of avx512"):   # refused first
        lo.dataflows.winograd(quantized, gemm_cols=24).compile("avx512")
    binary = lo.Conv2d(64, 8, 3, height=5, width=6, quant=lo.QuantSpec(activation="binary", weight="binary"))
    with pytest.raises(lo.ScheduleError, match="k=3 output channels is not a multiple of the 8 uint64 lanes"):
        lo.Schedule(binary).tile(ow=2, k=3).compile("avx512")
    with pytest.raises(ValueError, match="isa 'avx512' needs CPU features .* for integer kernels"):
        lo.Schedule(binary).compile("avx512")


def test_missing_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", "no-such-compiler-xyz")
    monkeypatch.setenv("LOOPOPT_CACHE_DIR", str(tmp_path))
    with pytest.raises(lo.BuildError, match="no C compiler found: 'no-such-compiler-xyz'"):
        lo.Schedule(OP).split("ow", 3).compile("scalar")


def test_cache_is_reused(tmp_path, monkeypatch):
    """A kernel built once is loaded from the disk cache, not built again, once the table of modules
    loaded in this process is emptied (as in a new process)."""
    monkeypatch.setenv("LOOPOPT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cbuild, "_loaded", {})
    lo.Schedule(OP).split("ow", 2).compile("scalar")
    built = list(tmp_path.glob("*.so"))
    assert len(built) == 1
    monkeypatch.setattr(cbuild, "_loaded", {})
    build = cbuild._build
    monkeypatch.setattr(cbuild, "_build", lambda *args: pytest.fail("built again instead of loaded"))
    kernel = lo.Schedule(OP).split("ow", 2).compile("scalar")
    assert list(tmp_path.glob("*.so")) == built
    monkeypatch.setattr(cbuild, "_build", build)   # a call may build the packing transpose (once)
    x, w, b = (OP.random_inputs()[t] for t in "IWB")
    np.testing.assert_allclose(kernel(x, w, b), OP.reference(x, w, b), rtol=1e-4, atol=1e-4)


def test_source_is_commented_with_the_schedule():
    source = lo.Schedule(OP).tile(k=4).vectorize("k_i").compile().source
    assert "step 1: tile(k=4)" in source and "vector loop k_i" in source


def test_measure_reports_verified_timing(kernel):
    timing = lo.measure(kernel, repeats=3)
    assert timing.verified and timing.repeats == 3
    assert timing.min <= timing.median and timing.gflops > 0 and 0 < timing.percent_of_peak
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        lo.measure(kernel, repeats=0)


def test_set_threads_runs_the_parallel_loop_on_that_many_threads():
    op = lo.Conv2d(3, 8, 3, padding=1, height=6, width=7)
    kernel = lo.Schedule(op).parallel("k").compile()
    x, w, b = (op.random_inputs(0)[t] for t in ("I", "W", "B"))
    for threads in (1, 2):
        kernel.set_threads(threads)
        assert kernel.threads == threads
        np.testing.assert_allclose(kernel(x, w, b), op.reference(x, w, b), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="integer >= 1"):
        kernel.set_threads(0)
    serial = lo.Schedule(op).compile()
    serial.set_threads(1)
    with pytest.raises(ValueError, match="no parallel loop"):
        serial.set_threads(2)


@pytest.mark.parametrize("build, ranged", [
    (lambda s: s.parallel("k"), True),                       # only n (extent 1) outside: one range per thread
    (lambda s: s.reorder("oh", "k").parallel("k"), False),   # oh outside: omp parallel for inside it
])
def test_parallel_loop_as_thread_ranges_or_omp_for(build, ranged):
    op = lo.Conv2d(2, 3, 3, padding=1, batch=1, height=5, width=4)   # k has 3 iterations for 2 threads
    kernel = build(lo.Schedule(op)).compile()
    assert ("lo_nest(" in kernel.source) == ranged
    x, w, b = (op.random_inputs(1)[t] for t in ("I", "W", "B"))
    for threads in (1, 2):
        kernel.set_threads(threads)
        np.testing.assert_allclose(kernel(x, w, b), op.reference(x, w, b), rtol=1e-4, atol=1e-4)


def test_measure_of_a_schedule_says_to_compile_it_first():
    message = r"measure takes a compiled Kernel, got a Schedule; call \.compile\(\) first"
    with pytest.raises(TypeError, match=message):
        lo.measure(lo.Schedule(OP))
    with pytest.raises(TypeError, match="measure takes a compiled Kernel, got a str$"):
        lo.measure("tiled")


def _spin_count(environment: dict[str, str]) -> str:
    """libgomp's spin count in a fresh process that loads an OpenMP module through ``compile_c`` with
    ``environment`` added, its kernels on libgomp (``$LOOPOPT_OPENMP``), and that process's
    OMP_WAIT_POLICY and GOMP_SPINCOUNT afterwards."""
    import os
    import subprocess
    import sys
    code = ("import ctypes, os\nfrom loopopt.cbuild import compile_c\n"
            "compile_c('int lo_threads(void){int n=0;\\n#pragma omp parallel\\n{\\n#pragma omp atomic\\nn++;}"
            "return n;}', 'int lo_threads(void);', ('-fopenmp',), ('-fopenmp',))\n"
            "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))\n"
            "ctypes.CDLL('libgomp.so.1').omp_display_env(1)\n")
    inherited = {name: value for name, value in os.environ.items() if name not in USER_SETTINGS}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**inherited, RUNTIME_ENV: LIBGOMP, **environment})
    spin = next(line.split("=")[1].strip(" '") for line in done.stderr.splitlines() if "SPINCOUNT" in line)
    return f"{spin} {done.stdout.strip()}"


def test_openmp_threads_spin_briefly_and_the_environment_is_put_back():
    """Kernels on libgomp: it loads with GOMP_SPINCOUNT=300 (libgomp's default 300000) and the process's
    environment stays as it was (other OpenMP runtimes, child processes)."""
    assert _spin_count({}) == f"{SPIN_COUNT} None None"


@pytest.mark.slow
def test_openmp_wait_set_by_the_user_is_kept():
    assert _spin_count({"OMP_WAIT_POLICY": "active"}) == "30000000000 active None"
    assert _spin_count({"OMP_WAIT_POLICY": "passive"}) == "0 passive None"
    assert _spin_count({"GOMP_SPINCOUNT": "1234"}) == "1234 None 1234"
