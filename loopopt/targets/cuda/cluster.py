"""Thread-block clusters (``sm_90``, ``Schedule.cluster``) of a tensorized kernel: TMA multicast of the
input the cluster's blocks share.

Blocks that lie next to each other along the cluster's axis (``block.x``: output rows, ``block.y``:
output columns) read the same tiles of the input that does not move along that axis (a Matmul's ``B``
along ``block.x``, its ``A`` along ``block.y``). In a cluster of ``size`` blocks each block (its
``%cluster_ctarank``) copies one ``1/size`` slice of rows of each such tile with
``cp.async.bulk.tensor ... .multicast::cluster`` into the same place of every block's shared memory,
completing on each block's barrier of the buffer, which expects the whole tiles' bytes: each tile is
read from L2 once for the cluster instead of once a block. A block must not refill a buffer that a
peer still reads: each buffer has a second, *empty* barrier of ``size`` arrivals; once a block's
products of a step retired, its issuing thread arrives on that buffer's empty barrier in every block
of the cluster, and waits on its own before refilling the buffer (both at the block's scope:
``specialize.py``). A cluster barrier after the
barriers' init (a peer's copy and arrivals land on them) and one at the end (no block leaves while a
peer may still arrive on its barriers).

The host emulation runs the blocks one after another: a block's buffer receives each rank's slice in
turn (the device's coordinates and offsets for each rank), and the barrier counts their bytes against
the whole tiles', so a wrong slice, offset or byte count fails the verification (``tma.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...schedule import Loop, Schedule, ScheduleError
from .tma import TmaOperand


@dataclass(frozen=True)
class Multicast:
    """``tensor``'s tiles shared by the ``size`` blocks of a cluster of ``dims`` (x, y)."""

    tensor: str
    size: int
    dims: tuple[int, int]

    @property
    def mask(self) -> int:
        """The ``ctaMask`` of a multicast copy: every block of the cluster."""
        return (1 << self.size) - 1

    def attribute(self, walks: bool = False) -> str:
        """The kernel's cluster shape: ``dims``, or a persistent kernel's row of ``size`` blocks (its grid
        is a row: ``persistent.py``)."""
        x, y = (self.size, 1) if walks else self.dims
        return f" __cluster_dims__({x}, {y}, 1)"


def shared_input(schedule: Schedule, blocks: list[Loop], reads: dict[str, frozenset[str]],
                 boxes: dict[str, TmaOperand]) -> Multicast | None:
    """The input a clustered ``schedule``'s blocks share (None without ``cluster``); ScheduleError
    naming what a cluster cannot share: a grid not in whole clusters, no TMA-staged shared input. (A
    wgmma tile's 64, 128 or 256 rows of 32 bytes split into slices of whole 8-row periods of the 32-byte
    swizzle for clusters of up to 8.)"""
    dims = schedule.cluster_dims
    if dims == (1, 1):
        return None
    size, axis = max(dims), "block.x" if dims[0] > 1 else "block.y"
    where = f"cluster({dims[0]}, {dims[1]})"
    loop = next(loop for loop in blocks if loop.axis == axis)
    if loop.extent % size:
        raise ScheduleError(f"{where}: {axis} launches {loop.extent} blocks ({loop.name!r}), not a "
                            f"multiple of the cluster's {size}: choose tiles that give whole clusters")
    # the input the axis's loop does not move (a tensorized block loop moves exactly one: tensorize)
    tensor = next(t for t in schedule.op.inputs if loop.name not in reads[t])
    if tensor not in boxes:
        raise ScheduleError(f"{where} multicasts {tensor}'s tiles, which only TMA copies: "
                            f"stage({tensor!r}, ..., engine='tma')")
    return Multicast(tensor, size, dims)


# --- device code -------------------------------------------------------------------------------
DEVICE = r"""
static __device__ __forceinline__ int lo_cluster_rank(void)
{
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return (int) rank;
}
static __device__ __forceinline__ void lo_cluster_sync(void)
{
    asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;"
                 ::: "memory");
}
static __device__ __forceinline__ void lo_release(unsigned long long *bar, int blocks)
{   /* one arrival on the barrier at bar's offset in every block of the cluster */
    for (int rank = 0; rank < blocks; ++rank)
        asm volatile("{ .reg .b32 remote; mapa.shared::cluster.u32 remote, %0, %1; "
                     "mbarrier.arrive.shared::cluster.b64 _, [remote]; }"
                     :: "r"(LO_SHARED(bar)), "r"(rank) : "memory");
}
static __device__ __forceinline__ void lo_tma_2d_multicast(void *dst, const lo_tensor_map *map, int x, int y,
                                                           unsigned long long *bar, unsigned short mask)
{   /* the box into dst of every block of mask, completing on the barrier at bar's offset in each */
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;"
                 :: "r"(LO_SHARED(dst)), "l"((unsigned long long) map), "r"(x), "r"(y), "r"(LO_SHARED(bar)),
                    "h"(mask)
                 : "memory");
}"""
