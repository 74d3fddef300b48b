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

The functions below print the walk alike for the device and the host emulation, which runs the blocks
as ``HOST_BLOCKS`` loops (fewer than the tiles, so that each walks several, some one more than others)
and counts each tile's stores: a tile stored twice or never turns the whole output to its poison, so a
walk that skips or repeats a tile misses the reference without a GPU.
"""
from __future__ import annotations

from ...schedule import ScheduleError

HOST_BLOCKS = 3      # the blocks the host emulation runs


def check(schedule, consumers_store_directly: bool) -> None:
    """ScheduleError naming what a persistent tile loop cannot take: warps that are not specialized,
    a cluster, or an instruction whose fragments the consumers cannot store element by element."""
    if not schedule.specialized:
        raise ScheduleError("persistent(): the producer warpgroup runs into the next tile while the "
                            "consumers store; specialize() the warps first (gpu_wgmma(..., specialize=True))")
    if schedule.cluster_dims != (1, 1):
        raise ScheduleError(f"persistent(): a cluster{schedule.cluster_dims}'s blocks share each step's "
                            f"tiles, so they would have to walk the same tiles in step: drop the cluster")
    if not consumers_store_directly:
        raise ScheduleError("persistent(): the consumers store their fragments straight from registers; "
                            "the activation sums of a quantized op with weight zero points go through shared "
                            "memory: quantize the weights symmetrically or drop persistent")


def rounds(block: str, blocks: str, tiles: int) -> str:
    """The tiles block ``block`` of ``blocks`` walks."""
    return f"(({tiles}) - ({block}) + ({blocks}) - 1) / ({blocks})"


def tile(block: str, blocks: str, round: str) -> str:
    """The tile block ``block`` of ``blocks`` works on in its round ``round`` (from 0)."""
    return f"({block}) + ({round}) * ({blocks})"


def launch_blocks(tiles: int, per_sm: int = 1) -> str:
    """The launcher's statement defining ``lo_blocks``: ``per_sm`` blocks a multiprocessor of the current
    device (read once), at most ``tiles``."""
    held = f"{per_sm} * lo_sms" if per_sm > 1 else "lo_sms"
    return ("    static int lo_sms = 0;   /* the device's multiprocessors, read once */\n"
            "    if (!lo_sms) { int lo_d = 0; cudaError_t lo_e = cudaGetDevice(&lo_d); "
            "if (lo_e == cudaSuccess) "
            "lo_e = cudaDeviceGetAttribute(&lo_sms, cudaDevAttrMultiProcessorCount, lo_d); "
            "if (lo_e != cudaSuccess) return (int) lo_e; }\n"
            f"    const int lo_blocks = {held} < {tiles} ? {held} : {tiles};")
