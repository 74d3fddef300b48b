"""The persistent tile loop (``Schedule.persistent``) of a warp-specialized kernel: the launch holds one
block a multiprocessor, or as many as its register cap lets an SM hold (a requantizing kernel's: one
block's epilogue runs beside another's products), at most one a tile; block ``b`` of ``g`` walks the
output tiles ``b, b + g, b + 2g, ...`` (a tile: one iteration of the ``block.*`` loops, numbered with
``block.x`` fastest, the order the hardware launches a grid's blocks in). The ring of buffers and its
mbarriers outlive the tiles: the producer and the consumers count a block's pipeline steps over all its
tiles, so the parities of ``specialize.py`` hold across them, and the producer copies the next tile's
first steps while the consumers store the last one's outputs without touching the ring: through staging
buffers of their own and TMA (``tma_store.py``), a requantized output through each warpgroup's own
staging tile past the ring, or straight from their registers.

In clusters (``Schedule.cluster``, ``cluster.py``) the blocks of a cluster walk in step: the launch is
a row of clusters of ``size`` blocks (``__cluster_dims__(size, 1, 1)``: a block's rank in its cluster is
its index modulo ``size``), cluster ``c`` of ``g`` walks the *cluster tiles* ``c, c + g, ...`` (the tiles
numbered with the cluster's axis divided by ``size``), and its block of rank ``r`` takes the tile at
``size * t + r`` along that axis: the ``size`` tiles of a cluster tile share the multicast input's tiles,
so each of its steps' boxes is a slice from each block, as in an unpersistent cluster.

The functions below print the walk alike for the device and the host emulation, which runs the blocks
as ``HOST_BLOCKS`` loops (``HOST_BLOCKS`` clusters; fewer than the tiles, so that each walks several, some
one more than others) and counts each tile's stores: a tile stored twice or never turns the whole output
to its poison, so a walk that skips or repeats a tile misses the reference without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...schedule import ScheduleError

HOST_BLOCKS = 3      # the blocks the host emulation runs


def check(schedule, consumers_store_directly: bool) -> None:
    """ScheduleError naming what a persistent tile loop cannot take: warps that are not specialized,
    or an instruction whose fragments the consumers cannot store element by element."""
    if not schedule.specialized:
        raise ScheduleError("persistent(): the producer warpgroup runs into the next tile while the "
                            "consumers store; specialize() the warps first (gpu_wgmma(..., specialize=True))")
    if not consumers_store_directly:
        raise ScheduleError("persistent(): the consumers store their fragments straight from registers; "
                            "the activation sums of a quantized op with weight zero points go through shared "
                            "memory: quantize the weights symmetrically or drop persistent")


@dataclass(frozen=True)
class Walk:
    """The tiles of a grid of ``tiles`` walked by clusters of ``size`` blocks (1: unclustered) along an
    axis whose tiles lie ``before`` apart in the tiles' numbering (the product of the faster axes')."""

    tiles: int
    size: int = 1
    before: int = 1

    @property
    def groups(self) -> int:
        """The cluster tiles: ``size`` tiles each."""
        return self.tiles // self.size

    def cluster(self, block: str) -> str:
        """The cluster of block ``block`` (the clusters of ``block`` blocks: the same division)."""
        return f"({block}) / {self.size}" if self.size > 1 else block

    def rounds(self, block: str, blocks: str) -> str:
        """The tiles block ``block`` of ``blocks`` walks (its cluster's cluster tiles)."""
        clusters = self.cluster(blocks)
        return f"(({self.groups}) - ({self.cluster(block)}) + ({clusters}) - 1) / ({clusters})"

    def group(self, block: str, blocks: str, round: str) -> str:
        """The cluster tile block ``block`` of ``blocks`` works on in its round ``round`` (from 0)."""
        clusters = self.cluster(blocks)
        return f"({self.cluster(block)}) + ({round}) * ({clusters})"

    def tile(self, group: str, rank: str) -> str:
        """The tile of the block of rank ``rank`` in cluster tile ``group``."""
        if self.size == 1:
            return group
        return (f"({group}) % {self.before} + {self.before} * ({self.size} * (({group}) / {self.before}) "
                f"+ ({rank}))")

    def launch_blocks(self, per_sm: int, kernel: str, block: tuple[int, int, int], shared: int) -> str:
        """The launcher's statement defining ``lo_blocks``: ``per_sm`` blocks a multiprocessor of the
        current device (read once), at most a block a tile; in clusters, as many whole clusters of
        ``kernel`` (``block`` threads, ``shared`` bytes of dynamic shared memory) as the device holds at
        once (``cudaOccupancyMaxActiveClusters``, read once: a cluster's blocks share a GPC, so an SM
        may be left out), at most a block a tile."""
        if self.size == 1:
            held = f"{per_sm} * lo_sms" if per_sm > 1 else "lo_sms"
            return ("    static int lo_sms = 0;   /* the device's multiprocessors, read once */\n"
                    "    if (!lo_sms) { int lo_d = 0; cudaError_t lo_e = cudaGetDevice(&lo_d); "
                    "if (lo_e == cudaSuccess) "
                    "lo_e = cudaDeviceGetAttribute(&lo_sms, cudaDevAttrMultiProcessorCount, lo_d); "
                    "if (lo_e != cudaSuccess) return (int) lo_e; }\n"
                    f"    const int lo_blocks = {held} < {self.tiles} ? {held} : {self.tiles};")
        return ("    static int lo_held = 0;   /* the blocks of the clusters held at once, read once */\n"
                f"    if (!lo_held) {{ cudaLaunchConfig_t lo_c = {{}}; "
                f"lo_c.gridDim = dim3({self.size}, 1, 1); lo_c.blockDim = dim3{block}; "
                f"lo_c.dynamicSmemBytes = {shared}; "
                f"cudaError_t lo_e = cudaOccupancyMaxActiveClusters(&lo_held, {kernel}, &lo_c); "
                f"if (lo_e != cudaSuccess) return (int) lo_e; "
                f"if (!lo_held) return (int) cudaErrorInvalidConfiguration; lo_held *= {self.size}; }}\n"
                f"    const int lo_blocks = (lo_held < {self.tiles} ? lo_held : {self.tiles}) / {self.size}"
                f" * {self.size};   /* whole clusters */")
