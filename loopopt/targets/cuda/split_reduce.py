"""Split-K shares reduced by the last block of a tile (``Schedule.split_k(loop, reduce="last")``): each block
writes its float32 share of the tile's sums to a workspace slot of its own (one per split and tile, in the
order of its warps' fragments), fences, and counts itself in on the tile's counter; the block that counts
last adds the tile's shares from the workspace in split order 0, 1, ... (the same result whichever block
is last), brings the bias, scales and epilogue, converts (``output_types``: a 16-bit output) and stores,
and sets the counter back to 0 for the next launch. No zeroing of the output, no atomic adds into it: the
output can be float16 or bfloat16 and take a fused epilogue. The workspace and counters are static device
arrays of the kernel's module (``__device__``), so concurrent launches of one kernel on several streams
would share them (one at a time per kernel). Its cost is the workspace's traffic, the reads on the
last blocks' SMs alone (``costs.split_reduce_bytes_per_s``), and their latency: a thread of the last
block reads every share of ``BATCH`` elements before it adds and stores the first. (One element at a
time, BERT's 128 x 64 tiles in 2-3 shares spent 9-16 us in the reduction on the H200, one L2 round trip
a thread in flight; an unrolled loop alone keeps that order in the SASS, each element's loads behind
the previous output store, which may alias them.) The host emulation runs the blocks in order and keeps
the same counters: a share added twice or never, or in another order, misses the reference without a
GPU.
"""
from __future__ import annotations

WORKSPACE, COUNTERS = "lo_work", "lo_count"
BATCH = 8       # the elements whose shares a thread of the last block reads before it adds and stores


def declarations(device: bool, shares: int, tiles: int) -> str:
    """The workspace of ``shares`` floats and the ``tiles`` counters (zero at load), and ``LO_SHARE``
    (a share read past L1, which other blocks wrote)."""
    storage = "__device__" if device else "static"
    read = "__ldcg(p)" if device else "(*(p))"
    return (f"{storage} float {WORKSPACE}[{shares}];   /* the split shares of every tile */\n"
            f"{storage} unsigned {COUNTERS}[{tiles}];   /* the shares of a tile in so far */\n"
            f"#define LO_SHARE(p) {read}")


def order(split: str, splits: int) -> str:
    """The loop over the shares the last block adds, in split order."""
    return f"for (int {split} = 0; {split} < {splits}; ++{split})"


def slot(split: str, tile: str, tiles: int, local: str, elements: int) -> str:
    """The workspace offset of element ``local`` of split ``split``'s share of tile ``tile``."""
    return f"((size_t) ({split}) * {tiles} + ({tile})) * {elements} + ({local})"


def arrive(device: bool, tile: str, splits: int, meet: str) -> list[str]:
    """The statements after a block wrote its share: on the device every thread's writes fenced, one
    thread counts the block in, all learn whether it was the last (``lo_last``); on the host the count."""
    if not device:
        return [f"const int lo_last = ++{COUNTERS}[{tile}] == {splits};"]
    return ["__threadfence();   /* this thread's share written, before the count */", meet,
            f"if (lo_thread == 0) lo_last_in = atomicAdd({COUNTERS} + ({tile}), 1u) == {splits - 1};", meet,
            "const int lo_last = lo_last_in;"]


def reset(device: bool, tile: str) -> str:
    """The last block's statement setting the tile's counter back to 0 (for the next launch)."""
    return f"if (lo_thread == 0) {COUNTERS}[{tile}] = 0;" if device else f"{COUNTERS}[{tile}] = 0;"
