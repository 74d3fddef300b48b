"""NEON kernels on a machine without an ARM core: a small runner executable, cross-compiled with the
kernel, run under ``qemu-aarch64 -cpu max`` for each call, its arrays through pipes.

The runner reads one call from stdin (little-endian, the layout of both machines): the thread count
(int32, 0: OpenMP's default), then each C parameter in order: an array as its byte count and
read-ahead (uint64 each) and its bytes (into a zeroed, 64-byte aligned buffer with the read-ahead
after it), an integer scalar as an int64, a float scalar as a double. It calls the kernel and writes
every writable array (the non-const parameters: outputs and workspaces) back to stdout, in order.
"""
from __future__ import annotations

import struct
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...codegen import cprint
from ...codegen.params import KernelParam
from ...driver import Driver

FLOAT_SCALARS = ("float", "double")
RUNNER_MAIN = """
/* ---- the runner: one call's arguments from stdin, the writable arrays back to stdout ---- */
#include <stdio.h>
#include <stdlib.h>
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
int main(void) {
    int32_t threads;
    lo_read(&threads, 4);
{body}
    return 0;
}
"""


def runner_source(source: str, function: str, params: tuple[KernelParam, ...],
                  threads: str | None = None) -> str:
    """``source`` (which defines ``function`` taking ``params``, and the thread-count setter
    ``threads`` if any) followed by the runner's ``main`` (module docstring)."""
    lines = [f"if (threads > 0) {threads}(threads);" if threads else "(void)threads;"]
    for p in params:
        if p.pointer:
            lines.append(f"size_t lo_size_{p.name}; {p.ctype} *{p.name} = lo_buffer(&lo_size_{p.name});")
        else:
            read = "lo_real()" if p.ctype in FLOAT_SCALARS else "lo_integer()"
            lines.append(f"const {p.ctype} {p.name} = ({p.ctype}){read};")
    lines.append(f"{function}({', '.join(p.name for p in params)});")
    lines += [f"fwrite({p.name}, 1, lo_size_{p.name}, stdout);" for p in params
              if p.pointer and not p.const]
    return source + RUNNER_MAIN.replace("{body}", cprint.text(lines, 1))


class EmulatedDriver(Driver):
    """Calls a runner executable (``runner_source``) under an emulator, once per call."""

    def __init__(self, command: tuple[str, ...], params: tuple[KernelParam, ...],
                 read_ahead: Mapping[str, int]):
        self.command, self.params, self.read_ahead = command, params, dict(read_ahead)
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
            raise RuntimeError(f"the kernel runner {Path(self.command[-1]).name} failed under "
                               f"{self.command[0]} (exit {done.returncode}): "
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
