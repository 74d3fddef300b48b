"""The floor under a decode GEMV on the GPU: what a launch and a plain read of the weights' bytes cost
when timed as ``bench_cuda_decode.py`` times its kernels (``cold``, ``graph``, ``stream``).

* ``empty``: a kernel that does nothing, one block of 32 threads and 1024 blocks of 256;
* ``read``: a streaming read of exactly ``n`` bytes (16-byte loads, consecutive threads on consecutive
  vectors, ``loads`` of them a thread issued before the first is used, so the whole grid's bytes can
  be in flight at once), folded into one word that is stored only if it is impossible: its time is
  launch + ramp-up + bytes, with no arithmetic. Each of ``LOADS`` is timed in the stream scope and the
  fastest is the floor of those bytes.

The kernels are CuPy ``RawKernel``s (NVRTC), launched on the current stream like loopopt's."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from loopopt.targets.cuda import device

THREADS = 256
LOADS = (1, 2, 4, 8, 16)     # 16-byte loads a thread of the read kernel
IMPOSSIBLE = 0x2545F491      # the read's folded word is stored only if it equals this (buffers hold zeros)

_SOURCE = r"""
struct lo_v4 { unsigned x, y, z, w; };

__device__ __forceinline__ lo_v4 lo_load(const lo_v4 *p)
{
    lo_v4 v;
    asm volatile("ld.global.nc.v4.u32 {%%0, %%1, %%2, %%3}, [%%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

extern "C" __global__ void lo_empty() {}

extern "C" __global__ void __launch_bounds__(%(threads)d, 1)
lo_read(const lo_v4 *__restrict__ p, long long n, unsigned *out)
{
    const long long first = (long long) blockIdx.x * %(threads)d + threadIdx.x;
    const long long stride = (long long) gridDim.x * %(threads)d;
    lo_v4 v[%(loads)d];
#pragma unroll
    for (int u = 0; u < %(loads)d; ++u) {
        const long long e = first + u * stride;
        if (e < n) v[u] = lo_load(p + e);
        else v[u].x = v[u].y = v[u].z = v[u].w = 0u;
    }
    unsigned acc = 0;
#pragma unroll
    for (int u = 0; u < %(loads)d; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    if (acc == %(impossible)du) out[0] = acc;
}
"""


@dataclass(frozen=True)
class Floor:
    """Seconds of one launch in each scope, and the read kernel's ``loads`` (0: the empty kernel)."""

    label: str
    nbytes: int
    loads: int
    cold: float
    graph: float
    stream: float


@cache
def _module(loads: int):
    cp = device.cupy()
    return cp.RawModule(code=_SOURCE % {"threads": THREADS, "loads": loads, "impossible": IMPOSSIBLE})


def empty_floors(cold: Callable, graph: Callable) -> list[Floor]:
    """The empty kernel, one warp and 1024 blocks of 256 threads, cold (events, L2 flushed) and in a
    graph (its stream scope is its graph scope: it reads nothing)."""
    kernel = _module(1).get_function("lo_empty")
    floors = []
    for blocks, threads in ((1, 32), (1024, THREADS)):
        def run(blocks=blocks, threads=threads):
            return kernel((blocks,), (threads,), ())
        g = graph(run)
        floors.append(Floor(f"empty kernel <<<{blocks}, {threads}>>>", 0, 0, cold(run), g, g))
    return floors


def read_floor(nbytes: int, copies: int, cold: Callable, graph: Callable,
               rotated: Callable[[Callable[[int], Callable[[], object]], int], float]) -> Floor:
    """The fastest read of ``nbytes`` (over ``LOADS``, by its stream time), timed in the three scopes:
    ``cold`` and ``graph`` on one buffer, ``stream`` over ``copies`` buffers in rotation."""
    cp = device.cupy()
    vectors = -(-nbytes // 16)
    buffers = cp.zeros((copies, vectors * 4), dtype=cp.uint32)
    out = cp.zeros(1, dtype=cp.uint32)
    best = None
    for loads in LOADS:
        kernel = _module(loads).get_function("lo_read")
        blocks = -(-vectors // (loads * THREADS))

        def launcher(r: int, kernel=kernel, blocks=blocks):
            return lambda: kernel((blocks,), (THREADS,), (buffers[r], cp.int64(vectors), out))
        stream = rotated(launcher, copies)
        if best is None or stream < best[0]:
            best = (stream, loads, launcher)
    stream, loads, launcher = best
    return Floor(f"streaming read, {loads} loads of 16 B a thread", nbytes, loads, cold(launcher(0)),
                 graph(launcher(0)), stream)
