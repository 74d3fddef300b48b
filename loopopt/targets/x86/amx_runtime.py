"""Running AMX tile code: the Linux permission, the measured tile peaks, an int8 GEMM micro-kernel.

Linux gives a process the 8 KB of tile state only on request (``arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)``, Linux >= 5.16); a tile instruction before it kills the process with
SIGILL. ``require_amx`` checks the CPU flags and makes that request once per process (the
permission holds for every thread); everything here that runs tile code calls it first.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import time
from collections.abc import Callable
from functools import cache
from typing import Literal

import numpy as np

from ...bf16 import to_bf16
from ...buffers import ALIGNMENT, aligned_copy, aligned_zeros
from ...cbuild import DEFAULT_OPT_LEVEL, compile_c
from ...codegen import cprint
from .amx import AMX, BLOCK, MAX_COLSB, TILE, TileBlock, chunk_starts, vnni_pack
from .isa import cpu_flags

SYS_ARCH_PRCTL = 158            # x86-64 system call number
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18
REFUSALS = {                    # what each errno of the request means
    errno.EINVAL: "this kernel does not offer AMX tile data (Linux >= 5.16 and a CPU with AMX are needed)",
    errno.ENOSPC: "a thread's alternate signal stack (sigaltstack) is too small to hold the tile state",
    errno.EPERM: "the request is forbidden here (a seccomp filter or container policy)",
    errno.ENOSYS: "this kernel has no arch_prctl system call",
}


class AmxUnavailableError(RuntimeError):
    """This CPU, kernel or process cannot run AMX tile code."""


def _arch_prctl(code: int, argument: int) -> tuple[int, int]:
    """The raw ``arch_prctl`` system call: (return value, errno)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(code), ctypes.c_ulong(argument))
    return result, ctypes.get_errno()


_granted = False


def require_amx() -> None:
    """Make sure this process may run tile code; AmxUnavailableError saying why not otherwise."""
    global _granted
    if _granted:
        return
    if platform.machine() != "x86_64":
        raise AmxUnavailableError(f"AMX needs an x86-64 CPU; this machine is {platform.machine()!r}")
    missing = [flag for flag in AMX.cpu_flags if flag not in cpu_flags()]
    if missing:
        raise AmxUnavailableError(f"this CPU has no AMX: /proc/cpuinfo lacks {', '.join(missing)}")
    result, err = _arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
    if result != 0:
        name = errno.errorcode.get(err, f"errno {err}")
        raise AmxUnavailableError(
            f"Linux refused AMX: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) failed with {name} "
            f"({os.strerror(err)}): {REFUSALS.get(err, 'an unexpected error')}")
    _granted = True


def amx_available() -> bool:
    """Whether this CPU has AMX (int8 and bf16) and Linux lets this process use it."""
    try:
        require_amx()
    except AmxUnavailableError:
        return False
    return True


# --- the peak: 4 independent tile dot products per iteration, operands held in tiles ----------

_PEAK_SOURCE = """{prelude}
static const lo_tilecfg lo_config = {config};

void lo_amx_peak(long iterations, const char *a, const char *b, char *c)
{{
    {loadconfig};
{loads}
{zeros}
    for (long it = 0; it < iterations; ++it) {{
{dots}
    }}
{stores}
    {release};
}}
"""
_PEAK_CDEF = "void lo_amx_peak(long, const char *, const char *, char *);"
PEAK_DOTS = {"int8": "dpbusd", "bf16": "dpbf16ps"}


def _peak_operands(dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Two 16 x 64-byte tiles of random operands (small bf16 values: the sums stay finite)."""
    if dtype == "int8":
        return rng.integers(-128, 128, (2, TILE, MAX_COLSB)).astype(np.int8)
    return to_bf16(rng.uniform(-1e-3, 1e-3, (2, TILE, MAX_COLSB // 2)).astype(np.float32))


def _best_time(function: Callable[[], object], runs: int) -> float:
    """The fastest of ``runs`` calls (s): the least disturbed by other processes on a busy machine."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


@cache
def amx_peak_gops(dtype: Literal["int8", "bf16"] = "int8") -> float:
    """Measured single-thread AMX peak (G ops/s): ``"int8"`` TDPBUSD, ``"bf16"`` TDPBF16PS.

    A loop of 2 x 2 independent 16 x 16 accumulator tiles on operands held in tiles; each
    instruction does 16 x 16 x K multiply-adds = 2 x that many ops (K = 64 int8, 32 bf16)."""
    if dtype not in PEAK_DOTS:
        raise ValueError(f"amx_peak_gops: dtype={dtype!r} is not supported; allowed: 'int8', 'bf16'")
    require_amx()
    block, name = TileBlock.of((TILE, TILE), (TILE, TILE), MAX_COLSB), PEAK_DOTS[dtype]
    tile_bytes = TILE * MAX_COLSB
    source = _PEAK_SOURCE.format(
        prelude=AMX.prelude, config=block.config.c_initializer(), loadconfig=AMX.loadconfig(p="&lo_config"),
        loads=cprint.text(block.loads(lambda i: f"a + {i * tile_bytes}", MAX_COLSB,
                                  lambda j: f"b + {j * tile_bytes}", MAX_COLSB), 1),
        zeros=cprint.text(block.zeros(), 1), dots=cprint.text(block.dots(name), 2),
        stores=cprint.text(block.stores(lambda i, j: f"c + {(2 * i + j) * tile_bytes}", MAX_COLSB), 1),
        release=AMX.release())
    module = compile_c(source, _PEAK_CDEF, AMX.compile_flags, level=DEFAULT_OPT_LEVEL)
    rng = np.random.default_rng(0)
    a, b = _peak_operands(dtype, rng), _peak_operands(dtype, rng)
    c = np.zeros((4, TILE, MAX_COLSB), dtype=np.uint8)
    ffi = module.ffi
    pa, pb, pc = (ffi.from_buffer(x) for x in (a, b, c))
    iterations = 20_000
    best = _best_time(lambda: module.lib.lo_amx_peak(iterations, pa, pb, pc), 40)
    k = MAX_COLSB * AMX.ops[name].dot.group // 4
    return iterations * len(block.accumulators) * TILE * TILE * k * 2 / best / 1e9


# --- int8 GEMM micro-kernel: C (M x N int32) = A (M x K uint8) x B (K x N int8) -------------------

_GEMM_SOURCE = """{prelude}
/* C = A x B: A {m} x {k} uint8 (rows of {lda} bytes), B packed by AmxGemm.pack_b, C {m} x {n} int32.
   Output blocks of 2 x 2 accumulator tiles (32 x 32); K in {chunks} chunks of {kc} bytes starting at
   lo_starts (the last one ends at K; B holds zeros for the k it shares with the previous chunk). */
static const long lo_starts[{chunks}] = {{{starts}}};
{configs}
void lo_amx_gemm(const unsigned char *a, const signed char *b, int *c)
{{
{regions}
    {release};
}}
"""

_GEMM_CDEF = "void lo_amx_gemm(const unsigned char *, const signed char *, int *);"
_REGION = """    {loadconfig};   /* rows {rows}, columns {cols} */
    for (long mb = {mb0}; mb < {mb1}; ++mb)
        for (long nb = {nb0}; nb < {nb1}; ++nb) {{
            const unsigned char *a_block = a + mb * {block_a};
            const signed char *b_block = b + nb * {block_b};
            int *c_block = c + mb * {block_c} + nb * {block};
{zeros}
            for (long q = 0; q < {chunks}; ++q) {{
{loads}
{dots}
            }}
{stores}
        }}
"""


def _edge_blocks(extent: int) -> list[tuple[int, int, tuple[int, ...]]]:
    """(first block, end block, tile extents) of the full 32-wide blocks and of the tail block."""
    full, tail = divmod(extent, BLOCK)
    regions = [(0, full, (TILE, TILE))] if full else []
    if tail:
        regions.append((full, full + 1, (TILE, tail - TILE) if tail > TILE else (tail,)))
    return regions


class AmxGemm:
    """Exact ``C = A @ B`` (uint8 A of M x K, int8 B of K x N, int32 C) on AMX tiles (TDPBUSD).

    Output blocks of 2 x 2 accumulator tiles (32 x 32), one tile configuration for each kind of
    block (full, or cut by the M or N edge); K runs in 64-byte chunks, the last one shifted
    back to end at K, so no tile reads past A. B is packed once by ``pack_b`` (into a buffer
    that starts on a cache line); A is read in place if it does too, else copied to one first
    (a tile row that straddles two cache lines made the kernel up to 2.8x slower), and when
    K < 64 is not a multiple of 4 (its rows are padded to whole 4-byte groups)."""

    def __init__(self, m: int, n: int, k: int) -> None:
        for name, value in (("m", m), ("n", n), ("k", k)):
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"AmxGemm: {name}={value!r} must be a positive int")
        self.m, self.n, self.k = m, n, k
        self.lda = k if k >= MAX_COLSB else -(-k // 4) * 4   # short rows are padded to 4-byte groups
        self.kc = min(MAX_COLSB, self.lda)                   # bytes of A per chunk
        self.starts = chunk_starts(self.lda)
        self.n_tiles = -(-n // TILE)
        self.packed_shape = (self.n_tiles, len(self.starts), self.kc // 4, 4 * TILE)
        self.source = self._source()
        self._module = compile_c(self.source, _GEMM_CDEF, AMX.compile_flags)

    def _source(self) -> str:
        chunks, tile_b = len(self.starts), self.kc // 4 * 4 * TILE
        configs, regions = [], []
        for mb0, mb1, rows in _edge_blocks(self.m):
            for nb0, nb1, cols in _edge_blocks(self.n):
                block, name = TileBlock.of(rows, cols, self.kc), f"lo_config{len(configs)}"
                configs.append(f"static const lo_tilecfg {name} = {block.config.c_initializer()};")
                loads = block.loads(lambda i: f"a_block + {i * TILE * self.lda} + lo_starts[q]", self.lda,
                                    lambda j: f"b_block + ({j * chunks} + q) * {tile_b}", 4 * TILE)
                stores = block.stores(lambda i, j: f"c_block + {i * TILE * self.n + j * TILE}", 4 * self.n)
                regions.append(_REGION.format(
                    loadconfig=AMX.loadconfig(p=f"&{name}"), rows=rows, cols=cols, mb0=mb0, mb1=mb1, nb0=nb0,
                    nb1=nb1, block_a=BLOCK * self.lda, block_b=2 * chunks * tile_b, block_c=BLOCK * self.n,
                    block=BLOCK, chunks=chunks, zeros=cprint.text(block.zeros(), 3),
                    loads=cprint.text(loads, 4), dots=cprint.text(block.dots("dpbusd"), 4),
                    stores=cprint.text(stores, 3)))
        return _GEMM_SOURCE.format(
            prelude=AMX.prelude, m=self.m, n=self.n, k=self.k, lda=self.lda, chunks=chunks, kc=self.kc,
            starts=", ".join(map(str, self.starts)), configs="\n".join(configs), regions="\n".join(regions),
            release=AMX.release())

    def pack_b(self, b: np.ndarray) -> np.ndarray:
        """B (K x N int8) in tiles: ``[N / 16 tile column][K chunk][k / 4][4 n + k % 4]``, zero-padded."""
        if b.shape != (self.k, self.n) or b.dtype != np.int8:
            raise ValueError(f"AmxGemm.pack_b: b must be int8 of shape ({self.k}, {self.n}), "
                             f"got {b.dtype} {b.shape}")
        chunks = len(self.starts)
        k_of = np.array(self.starts)[:, None] + np.arange(self.kc)          # [chunk, byte] -> k
        fresh = (k_of >= MAX_COLSB * np.arange(chunks)[:, None]) & (k_of < self.k)
        chosen = np.zeros((chunks, self.kc, self.n_tiles * TILE), dtype=np.int8)
        chosen[:, :, :self.n] = np.where(fresh[..., None], b[np.minimum(k_of, self.k - 1)], 0)
        tiles = vnni_pack(chosen.reshape(-1, self.n_tiles * TILE), 4)
        packed = aligned_zeros(self.packed_shape, np.int8)
        packed[...] = tiles.reshape(chunks, self.kc // 4, self.n_tiles, 4 * TILE).transpose(2, 0, 1, 3)
        return packed

    def __call__(self, a: np.ndarray, b_packed: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """C = A @ B (int32, exact) from uint8 A (M x K) and ``pack_b(B)``; into ``out`` if given."""
        if a.shape != (self.m, self.k) or a.dtype != np.uint8:
            raise ValueError(f"AmxGemm: a must be uint8 of shape ({self.m}, {self.k}), "
                             f"got {a.dtype} {a.shape}")
        if b_packed.shape != self.packed_shape or b_packed.dtype != np.int8:
            raise ValueError(f"AmxGemm: b_packed must be int8 of shape {self.packed_shape} (from pack_b), "
                             f"got {b_packed.dtype} {b_packed.shape}")
        if out is None:
            out = aligned_zeros((self.m, self.n), np.int32)
        elif out.shape != (self.m, self.n) or out.dtype != np.int32 or not out.flags.c_contiguous:
            raise ValueError(f"AmxGemm: out must be C-contiguous int32 of shape ({self.m}, {self.n}), "
                             f"got {out.dtype} {out.shape}")
        if self.lda != self.k:          # short rows padded to whole 4-byte groups (B is 0 there)
            padded = aligned_zeros((self.m, self.lda), np.uint8)
            padded[:, :self.k] = a
            a = padded
        require_amx()
        ffi = self._module.ffi
        self._module.lib.lo_amx_gemm(ffi.from_buffer("unsigned char[]", _on_a_line(a)),
                                     ffi.from_buffer("signed char[]", _on_a_line(b_packed)),
                                     ffi.from_buffer("int[]", out))
        return out


def _on_a_line(array: np.ndarray) -> np.ndarray:
    """``array`` if it is C-contiguous and starts on a cache line, else such a copy of it."""
    if array.flags.c_contiguous and array.ctypes.data % ALIGNMENT == 0:
        return array
    return aligned_copy(array)
