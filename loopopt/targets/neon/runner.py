"""NEON kernels on a machine without an ARM core: a small runner executable, cross-compiled with one or
more C functions (``RunnerCase``: a kernel, or a table probe), run under ``qemu-aarch64 -cpu max`` for
each call, its arrays through pipes.

Each case is a translation unit of its own (its static helpers may repeat another's), its function
and thread-count setter renamed ``lo_case<i>`` and ``lo_case<i>_threads``; the runner's ``main`` takes
the case's index as its argument. Building many cases into one runner costs one link and one
compiler run per set of flags instead of one each (``toolchain.build_runner``).

The runner reads one call from stdin (little-endian, the layout of both machines): the thread count
(int32, 0: OpenMP's default), then each C parameter in order: an array as its byte count and
read-ahead (uint64 each) and its bytes (into a zeroed, 64-byte aligned buffer with the read-ahead
after it), an integer scalar as an int64, a float scalar as a double. It calls the case's function
and writes every writable array (the non-const parameters: outputs and workspaces) back to stdout, in
order.
"""
from __future__ import annotations

import struct
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...codegen.params import KernelParam, signature
from ...driver import Driver

FLOAT_SCALARS = ("float", "double")
RUNNER_MAIN = """/* ---- the runner: one call's arguments from stdin, the writable arrays to stdout ---- */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static void lo_read(void *p, size_t n) {
    if (n && fread(p, 1, n, stdin) != n) { fputs("loopopt runner: input ended early\\n", stderr); exit(2); }
}
static void *lo_buffer(size_t *size) {
    uint64_t n, ahead;
    lo_read(&n, 8); lo_read(&ahead, 8);
    const size_t total = (size_t)((n + ahead + 63) / 64 + 1) * 64;
    void *p = aligned_alloc(64, total);
    if (!p) { fputs("loopopt runner: out of memory\\n", stderr); exit(3); }
    memset(p, 0, total);
    lo_read(p, (size_t)n);
    *size = (size_t)n;
    return p;
}
static int64_t lo_integer(void) { int64_t v; lo_read(&v, 8); return v; }
static double lo_real(void) { double v; lo_read(&v, 8); return v; }
{declarations}
int main(int argc, char **argv) {
    if (argc != 2) { fputs("usage: runner CASE < arguments\\n", stderr); return 4; }
    int32_t threads;
    lo_read(&threads, 4);
    switch (atoi(argv[1])) {
{cases}
    default: fputs("loopopt runner: no such case\\n", stderr); return 5;
    }
    return 0;
}
"""


@dataclass(frozen=True)
class RunnerCase:
    """One C function a runner calls: ``function`` of ``source`` taking ``params``, built with ``flags``
    (``-fopenmp`` among them for one with the OpenMP thread-count setter ``threads``); ``read_ahead``:
    bytes the function may read past each named array."""

    source: str
    function: str
    params: tuple[KernelParam, ...]
    flags: tuple[str, ...]
    threads: str | None = None
    read_ahead: Mapping[str, int] = field(default_factory=dict)


def case_name(index: int) -> str:
    return f"lo_case{index}"


def case_unit(case: RunnerCase, index: int) -> str:
    """The translation unit of case ``index``: its source with its function and setter renamed."""
    names = {case.function: case_name(index)}
    if case.threads:
        names[case.threads] = f"{case_name(index)}_threads"
    return "".join(f"#define {old} {new}\n" for old, new in names.items()) + case.source


def runner_main(cases: Sequence[RunnerCase]) -> str:
    """The runner's ``main`` calling case ``argv[1]`` of ``cases`` (module docstring)."""
    declarations, bodies = [], []
    for index, case in enumerate(cases):
        name = case_name(index)
        declarations.append(f"{signature(name, case.params, restrict=False)};")
        lines = [f"    case {index}: {{"]
        if case.threads:
            declarations.append(f"void {name}_threads(int n);")
            lines.append(f"        if (threads > 0) {name}_threads(threads);")
        for p in case.params:
            if p.pointer:
                lines.append(f"        size_t lo_size_{p.name}; "
                             f"{p.ctype} *{p.name} = lo_buffer(&lo_size_{p.name});")
            else:
                read = "lo_real()" if p.ctype in FLOAT_SCALARS else "lo_integer()"
                lines.append(f"        const {p.ctype} {p.name} = ({p.ctype}){read};")
        lines.append(f"        {name}({', '.join(p.name for p in case.params)});")
        lines += [f"        fwrite({p.name}, 1, lo_size_{p.name}, stdout);" for p in case.params
                  if p.pointer and not p.const]
        bodies += [*lines, "        break;", "    }"]
    return (RUNNER_MAIN.replace("{declarations}", "\n".join(declarations))
            .replace("{cases}", "\n".join(bodies)))


class EmulatedDriver(Driver):
    """Calls case ``index`` of a runner executable (``runner_main``) under an emulator, once per call."""

    def __init__(self, command: tuple[str, ...], index: int, case: RunnerCase):
        self.command, self.params = (*command, str(index)), case.params
        self.read_ahead = dict(case.read_ahead)
        self.threads = 0

    def bind(self, params: tuple[KernelParam, ...], values: Mapping[str, Any]) -> tuple:
        return tuple(values[p.name] for p in params)

    def call(self, arguments: tuple) -> None:
        chunks = [struct.pack("<i", self.threads)]
        for p, value in zip(self.params, arguments, strict=True):
            if p.pointer:
                data = np.ascontiguousarray(value).tobytes()
                chunks += [struct.pack("<QQ", len(data), self.read_ahead.get(p.name, 0)), data]
            else:
                chunks.append(struct.pack("<d" if p.ctype in FLOAT_SCALARS else "<q", value))
        done = subprocess.run(self.command, input=b"".join(chunks), capture_output=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the kernel runner {Path(self.command[-2]).name} (case {self.command[-1]}) "
                               f"failed under {self.command[0]} (exit {done.returncode}): "
                               f"{done.stderr.decode(errors='replace').strip()[-2000:]}")
        at = 0
        for p, value in zip(self.params, arguments, strict=True):
            if p.pointer and not p.const:
                flat = value.reshape(-1).view(np.uint8)
                flat[:] = np.frombuffer(done.stdout, np.uint8, flat.size, at)
                at += flat.size
        if at != len(done.stdout):
            raise RuntimeError(f"the kernel runner wrote {len(done.stdout)} bytes; {at} expected")

    def set_threads(self, n: int) -> None:
        self.threads = n
