"""Sanitized kernels: the LOOPOPT_SANITIZE switch, and the sanitizer tier (``-m sanitize``), which runs
kernel tests in a python with AddressSanitizer preloaded and fails on any sanitizer report."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import loopopt as lo
from loopopt.cbuild import SANITIZE_ENV, BuildError, compiler, sanitize_flags, sanitizers
from loopopt.quant_reference import random_call

HERE = Path(__file__).parent
# the random kernels of sanitized_kernels.py, the regression tests of the two reads past an array
# that only a sanitizer sees, the quantized register blocks (vector ISAs, packed byte stores), the dot
# schedules and the loads addressed from an element in the padding of a spatially blocked input. The dot
# on every signedness: on uint8 weights only, with either activation; int8 weights give the same C but
# its first comment line (the weights' signedness is applied when they are packed, in numpy: over the 128
# schedules and specs that test draws from, on AVX-512 and AVX2), so the sanitizers would see the
# same kernels again
TIER = ("sanitized_kernels.py",
        "test_kernels.py::test_register_block_over_a_partial_channel_block_reads_the_bias_in_bounds",
        "test_kernels.py::test_operand_base_in_the_padding_of_a_spatial_block",
        "test_kernels.py::test_strided_vector_from_a_first_lane_in_the_padding",
        "test_qkernels.py::test_fused_epilogue_dead_lanes_read_the_tables_in_bounds",
        "test_qkernels.py::test_fused_epilogue_dead_lanes_past_the_last_column",
        "test_qkernels.py::test_register_blocks", "test_qkernels.py::test_dot_schedules",
        "test_qkernels.py::test_dot_on_every_signedness[int8xuint8]",
        "test_qkernels.py::test_dot_on_every_signedness[uint8xuint8]",
        "test_qkernels.py::test_exact_packed_runs_quick",
        "test_winograd.py::test_winograd_kernel_small",        # stages chained through shared buffers
        # the kernel tests on the best ISA here only: the reads past a buffer the tier looks for are
        # those of vector loads and stores; the other ISAs' kernels are the same nests, fewer lanes
        "-k", " and ".join(f"not {isa}" for isa in lo.available_isas()[1:]))


def asan_runtime() -> str | None:
    """The compiler's AddressSanitizer runtime (None if it has none)."""
    cc = compiler().split()[0]
    path = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


def run_sanitized(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    """``python *args`` in ``tests/`` with AddressSanitizer preloaded and LOOPOPT_SANITIZE=address,undefined;
    the result and the sanitizers' reports (written to files in ``tmp_path``)."""
    runtime = asan_runtime()
    if runtime is None:
        pytest.skip("the C compiler has no AddressSanitizer runtime (libasan.so)")
    env = dict(os.environ, LD_PRELOAD=runtime, **{SANITIZE_ENV: "address,undefined"},
               ASAN_OPTIONS=f"detect_leaks=0:log_path={tmp_path}/asan",     # python leaks by design
               UBSAN_OPTIONS=f"halt_on_error=1:print_stacktrace=1:log_path={tmp_path}/ubsan")
    # the timeout is a bound for a hung run, not a time limit: the tier is about 120 CPU-s, and on two cores
    # at load 11 it ran past 900 s
    result = subprocess.run([sys.executable, *args], cwd=HERE, env=env, capture_output=True, text=True,
                            timeout=3600)
    return result, "\n".join(path.read_text() for path in sorted(tmp_path.glob("*san.*")))


@pytest.mark.sanitize
@pytest.mark.slow
def test_the_tier_sees_a_read_past_a_kernel_buffer(tmp_path):
    # B of Matmul(3, 5, 7) holds 7 x 5 floats; a sanitized kernel's buffer ends right after them
    peek = ("import loopopt as lo; from loopopt.cbuild import compile_c; "
            "m = compile_c('float peek(const float *p, int i) { return p[i]; }', "
            "'float peek(const float *, int);'); "
            "k = lo.Schedule(lo.Matmul(3, 5, 7)).compile('scalar'); "
            "b = k.prepare(*(lo.Matmul(3, 5, 7).random_inputs()[t] for t in 'AB')); "
            "m.lib.peek(m.ffi.cast('float *', m.ffi.from_buffer(b.arrays['B'])), 7 * 5)")
    result, reports = run_sanitized(tmp_path, "-c", peek)
    assert result.returncode != 0 and "heap-buffer-overflow" in reports, result.stderr[-3000:]


@pytest.mark.sanitize
@pytest.mark.slow
def test_kernels_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    result, reports = run_sanitized(tmp_path, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *TIER)
    assert not reports, reports[:6000]
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]


def test_the_switch_is_validated(monkeypatch):
    monkeypatch.setenv(SANITIZE_ENV, "address,thread")
    with pytest.raises(ValueError, match="LOOPOPT_SANITIZE='address,thread': unknown sanitizer 'thread'; "
                                         "allowed: address, undefined"):
        sanitizers()
    monkeypatch.setenv(SANITIZE_ENV, " undefined , address,")
    assert sanitizers() == ("address", "undefined")
    assert sanitize_flags() == (("-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g",
                                 "-fno-var-tracking-assignments"), ("-fsanitize=address,undefined",))
    monkeypatch.delenv(SANITIZE_ENV)
    assert sanitizers() == () and sanitize_flags() == ((), ())


def test_address_sanitizer_needs_its_runtime_preloaded(monkeypatch, tmp_path):
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("this python has the AddressSanitizer runtime preloaded")
    monkeypatch.setenv(SANITIZE_ENV, "address")
    monkeypatch.setenv("LOOPOPT_CACHE_DIR", str(tmp_path))
    with pytest.raises(BuildError, match=r"runtime must be loaded first: run python with LD_PRELOAD="):
        lo.Schedule(lo.Matmul(2, 3, 4)).compile("scalar")


@pytest.mark.slow     # a sanitizer prelude of its own: the quick tier leaves it out
def test_sanitized_kernels_are_cache_entries_of_their_own_with_exact_buffers(monkeypatch, tmp_path):
    # the undefined-behaviour sanitizer's runtime loads with the kernel: no preloading needed
    monkeypatch.setenv("LOOPOPT_CACHE_DIR", str(tmp_path))
    op = lo.Conv2d(5, 6, 3, padding=1, height=5, width=7, quant=lo.QuantSpec("uint8", True, False, "float32"))
    schedule = lo.Schedule(op).layout("I", "NCHW4c").tile(ow=8).vectorize("ow_i").arithmetic("dequantize")
    schedule.compile()
    monkeypatch.setenv(SANITIZE_ENV, "undefined")
    kernel = schedule.compile()
    assert len(list(tmp_path.glob("*.so"))) == 2
    ahead, lanes = kernel.generated.read_ahead, kernel.generated.isa.lanes
    # dot groups and byte gathers read 3 bytes past a byte; per-channel vectors a vector past the last
    vector = 4 * (lanes - 1)
    assert ahead == ({} if lanes == 1 else {"I": 3, "W": 3, "lo_zw": vector, "lo_wscale": vector})
    args, params = random_call(op)
    buffers = kernel.prepare(*args, **params)
    for name, array in buffers.arrays.items():
        allocation = array.base if array.base is not None else array
        while allocation.base is not None:
            allocation = allocation.base
        assert array.ctypes.data == allocation.ctypes.data
        assert allocation.nbytes == array.nbytes + ahead.get(name, 0), name
    kernel.run(buffers)
    np.testing.assert_allclose(kernel.output(buffers), lo.Schedule(op).compile("scalar")(*args, **params),
                               rtol=1e-4, atol=1e-4)
