"""What calling a compiled kernel from Python costs: loopopt's build (a plain shared object, loaded with
cffi's ABI mode: the call goes through libffi) against the same source built as a cffi extension (API mode,
loopopt's build before session eleven: a compiled wrapper), on a function of a kernel's shape of call (four
float pointers, an int, a float) that does no work; rounds interleaved, CPU time (process_time).

    python benchmarks/bench_call.py --rounds 5
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import tempfile
import time

import cffi
import numpy as np

import loopopt as lo
from loopopt import cbuild

SIGNATURE = "void lo_kernel(const float *I, const float *W, const float *B, float *O, int n, float s)"
SOURCE = SIGNATURE + " { O[0] = I[0] * W[0] + B[0] + (float) n * s; }"


def abi(folder: str):
    """The ffi and lib of ``SOURCE`` built by loopopt into the kernel cache ``folder``."""
    os.environ[cbuild.CACHE_ENV] = folder
    library = cbuild.compile_c(SOURCE, SIGNATURE + ";")
    return library.ffi, library.lib


def api(folder: str):
    """The ffi and lib of ``SOURCE`` built as a cffi extension in ``folder``, at loopopt's level and flags."""
    ffi = cffi.FFI()
    ffi.cdef(SIGNATURE + ";")
    ffi.set_source("_bench_call", SOURCE, extra_compile_args=[f"-O{cbuild.opt_level()}", *cbuild.BASE_FLAGS])
    spec = importlib.util.spec_from_file_location("_bench_call", ffi.compile(tmpdir=folder))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ffi, module.lib


def call_microseconds(ffi, lib, calls: int) -> float:
    """CPU microseconds a call costs from Python, its pointers bound once (as a kernel's are)."""
    array = np.zeros(4, np.float32)
    pointer = ffi.cast("float *", ffi.from_buffer(array))
    arguments, function = (pointer, pointer, pointer, pointer, 3, 2.0), lib.lo_kernel
    start = time.process_time()
    for _ in range(calls):
        function(*arguments)
    return (time.process_time() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of each build's calls")
    parser.add_argument("--calls", type=int, default=200_000, help="calls a round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as extension:
        builds = {"ABI (loopopt: ffi.dlopen)": abi(cache), "API (cffi extension)": api(extension)}
        times: dict[str, list[float]] = {name: [] for name in builds}
        for _ in range(args.rounds):
            for name, (ffi, lib) in builds.items():
                times[name].append(call_microseconds(ffi, lib, args.calls))
    print(f"CPU: {lo.machine.this_cpu().model}; {args.rounds} rounds of {args.calls} calls, interleaved")
    for name, figures in times.items():
        print(f"{name}: {statistics.median(figures):.3f} CPU-us a call (median; min {min(figures):.3f})")


if __name__ == "__main__":
    main()
