"""Warp specialization (``Schedule.specialize``, ``sm_90a``) of a tensorized kernel: the protocol between
the producer warpgroup, which only issues the TMA copies, and the consumer warpgroups, which only
multiply. ``PRODUCERS`` threads of the producer warpgroup issue, one a warp, each every
``PRODUCERS``-th step from its own (``lo_producer``): one thread's loop (the slot's wait, ``expect_tx``,
the boxes) bounded a 64 x 64 step.

The ring of ``stages`` buffers has two mbarriers a buffer: *full* (one arrival, the ``expect_tx`` of the
producer of the step, completed by the copies' bytes) and *empty* (one arrival a consumer warpgroup).
Step ``r`` lives in buffer ``r % stages``, in round ``r / stages`` of the ring:

* the step's producer, before filling step ``r >= stages``, waits until round ``r / stages - 1`` of the
  buffer's empty barrier completed (parity ``(r / stages + 1) & 1``): every consumer released step
  ``r - stages``;
* a consumer waits on round ``r / stages`` of the buffer's full barrier (parity ``(r / stages) & 1``),
  issues the step's products as one wgmma group, waits for every group but the last and so releases
  the buffer of step ``r - 1`` (one arrival on its empty barrier): one group always in flight. The
  consumers take the steps by rounds of the ring, unrolled over its buffers, so each buffer's barriers
  and tiles are constant addresses (``full_parity`` of the round's first step; BERT's 64 x 64 step on
  the H200 144 -> 95 ns, cuBLAS's 97); in a persistent walk where a tile's steps fill whole rounds
  (each tile starting at buffer 0), else step by step.

In a cluster (``cluster.py``) each producer multicasts its slice of the shared tiles into every block's
buffer, so a buffer is free once the consumers of every block of the cluster released it: a consumer
arrives on that buffer's empty barrier in each block (``consumers x blocks`` arrivals a round). Waits
and releases keep the block's scope (``mbarrier.try_wait``/``arrive`` unqualified, as CUTLASS's
``ClusterBarrier``): the products read the buffers through the async proxy and retired before the
release, and at the cluster's scope each step paid a GPU-wide fence before every remote arrive and an
L1 invalidation after every wait (clustered kernels 3-5x slower on the H200). The consumers hold the
accumulators; ``setmaxnreg`` gives them the producer's registers (``Registers``). After their last
group the consumers meet on a named barrier of their own and run the epilogue through the shared
memory the tiles leave.

The host emulation runs the same protocol (the same parities, printed by the functions below) on a
model of the mbarriers: the producer and the consumers are two loops one scheduler interleaves, the
producer running either as far ahead as its waits allow or only when the consumers wait, alternating by
block and by round of the ring. A consumer that reads a step before its full barrier completed reads
a buffer not yet filled (NaN at first, a stale step later), a producer that refills a buffer before
every consumer released it overwrites a step not yet read, and a protocol where neither can go on
(the GPU would hang) turns the block's sums to NaN: each misses the reference without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...schedule import MAX_THREADS_PER_BLOCK, ScheduleError

WARPGROUP = 128             # threads of one warpgroup
PRODUCERS = 2               # threads that issue the copies, one a warp of the producer warpgroup, each
#                             every PRODUCERS-th step (H200, BERT's 64x64 step: one 167 ns, two 144, four 141)
REGISTERS_PER_SM = 65536    # 32-bit registers of an SM (one block of such a kernel a SM)
MAX_REGISTERS = 240         # the most ``setmaxnreg.inc`` asks for a consumer (CUTLASS's ceiling)
ADDRESS_REGISTERS = 32      # a consumer's registers beside its accumulators (ptxas asked 154 for 128)


@dataclass(frozen=True)
class Registers:
    """``setmaxnreg``'s counts for a block of ``consumers`` consumer warpgroups and one producer, ``blocks``
    of them an SM: the block starts with ``entry`` registers a thread (``__launch_bounds__(threads,
    blocks)``); the producer gives back down to ``producer`` and the consumers take what that frees, in
    steps of 8."""

    consumers: int
    blocks: int = 1

    @property
    def threads(self) -> int:
        return WARPGROUP * (self.consumers + 1)

    @property
    def entry(self) -> int:
        return min(255, REGISTERS_PER_SM // (self.threads * self.blocks)) // 8 * 8

    @property
    def producer(self) -> int:
        return 40 if self.consumers <= 2 else 24

    @property
    def consumer(self) -> int:
        free = self.entry * self.threads - WARPGROUP * self.producer
        return min(MAX_REGISTERS, free // (WARPGROUP * self.consumers) // 8 * 8)

    @property
    def moves(self) -> bool:
        """Whether the consumers gain registers (a block of two warpgroups starts with more than they
        would ask for: no ``setmaxnreg``)."""
        return self.consumer > self.entry


def check(consumers: int, accumulators: int, asynchronous: bool, instruction: str,
          copied_by_threads: list[str], blocks: int = 1) -> Registers:
    """The register split of a specialized kernel whose consumers hold ``accumulators`` registers a
    thread; ScheduleError naming what specialization cannot take: an instruction that is not
    asynchronous, an input the threads copy, too many threads, or accumulators that do not fit the
    registers a thread starts with (ptxas allocates the whole kernel within them: 3 consumers start with
    128, under a 64 x 256 fragment's 128 and the addresses)."""
    if not asynchronous:
        raise ScheduleError(f"specialize(): the consumer warpgroups issue wgmma and keep one group in "
                            f"flight; {instruction} runs with its threads: tensorize onto a wgmma entry "
                            f"(gpu_wgmma)")
    if copied_by_threads:
        raise ScheduleError(f"specialize(): the producer warpgroup copies by TMA only; "
                            f"{copied_by_threads[0]} is copied by the threads: "
                            f"stage({copied_by_threads[0]!r}, ..., engine='tma')")
    registers = Registers(consumers, blocks)
    if fits(consumers, accumulators, blocks):
        return registers
    if registers.threads > MAX_THREADS_PER_BLOCK:
        raise ScheduleError(f"specialize(): {consumers} consumer warpgroups and the producer are "
                            f"{registers.threads} threads; CUDA allows at most {MAX_THREADS_PER_BLOCK}: bind "
                            f"fewer warp iterations")
    if accumulators + ADDRESS_REGISTERS > registers.entry:
        raise ScheduleError(f"specialize(): {consumers} consumer warpgroups and the producer start with "
                            f"{registers.entry} registers a thread, too few for {accumulators} accumulators "
                            f"and {ADDRESS_REGISTERS} more: bind fewer warpgroups or narrower tiles")
    return registers


def fits(consumers: int, accumulators: int, blocks: int = 1) -> bool:
    """Whether ``consumers`` warpgroups of ``accumulators`` registers a thread and the producer make a
    block, ``blocks`` an SM (``check``'s limits: the threads, the registers a thread starts with)."""
    registers = Registers(consumers, blocks)
    return (registers.threads <= MAX_THREADS_PER_BLOCK
            and accumulators + ADDRESS_REGISTERS <= registers.entry)


# --- the protocol, printed alike for the device and the host emulation -------------------------------

def full_parity(step: str, stages: int) -> str:
    """The parity of the full barrier's round that holds ``step``'s tiles."""
    return f"(unsigned) (({step}) / {stages}) & 1u"


def refill_ready(step: str, stages: int, try_wait: str, empty: str) -> str:
    """The condition under which the producer may fill ``step``: its buffer's first round, or the
    round of the empty barrier before ``step``'s completed (``try_wait(barrier, parity)`` spelled
    ``try_wait``, the empty barriers at ``empty``)."""
    return (f"({step}) < {stages} || {try_wait}({empty} + ({step}) % {stages}, "
            f"(unsigned) (({step}) / {stages} + 1) & 1u)")


def released(step: str) -> str:
    """The step whose buffer a consumer releases once ``step``'s group is issued and all but the last
    retired (``wgmma.wait_group 1``)."""
    return f"{step} - 1"


# --- device code -------------------------------------------------------------------------------
DEVICE = r"""
static __device__ __forceinline__ int lo_ready(unsigned long long *bar, unsigned parity)
{
    unsigned done;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                 "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(LO_SHARED(bar)), "r"(parity) : "memory");
    return (int) done;
}
static __device__ __forceinline__ void lo_arrive(unsigned long long *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(LO_SHARED(bar)) : "memory");
}"""


def set_registers(count: int, grow: bool) -> str:
    """A warpgroup's ``setmaxnreg``: up to ``count`` registers a thread (``grow``) or down to it."""
    return f'asm volatile("setmaxnreg.{"inc" if grow else "dec"}.sync.aligned.u32 {count};");'


def consumers_sync(consumers: int) -> str:
    """A named barrier of the consumer warpgroups alone (ids 1..consumers are each group's own)."""
    return f'asm volatile("bar.sync {consumers + 1}, {WARPGROUP * consumers};" ::: "memory");'


# --- the host emulation's mbarriers -----------------------------------------------------------------
HOST = r"""
/* an mbarrier: its completed rounds, the bytes its round awaits, the arrivals left and a round's */
typedef struct { long rounds, tx, left, count; } lo_mbar;
static void lo_mbar_init(lo_mbar *b, long count)
{
    b->rounds = 0; b->tx = 0; b->left = count; b->count = count;
}
static void lo_mbar_settle(lo_mbar *b)
{
    if (b->left == 0 && b->tx == 0) { b->rounds += 1; b->left = b->count; }
}
static void lo_arrive(lo_mbar *b) { b->left -= 1; lo_mbar_settle(b); }
static void lo_expect_arrive(lo_mbar *b, long bytes) { b->tx += bytes; b->left -= 1; }
/* try_wait.parity: true once the round of that parity before the current one completed */
static int lo_ready(const lo_mbar *b, unsigned parity) { return (unsigned) (b->rounds & 1) != parity; }"""
