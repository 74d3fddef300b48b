"""What a kernel executes, as the kernel model (``model.py``) prices it: sites, each a piece of code run
``executions`` times doing one ``Work``, and the ``KernelCounts`` of a whole kernel. x86's counter
(``targets/x86/costs.py``) counts the table-driven SIMD nest of every C target; a target counts the
kernel families of its own (``Target.own_counts``: NEON's in ``targets/neon/counts.py``)."""
from __future__ import annotations

from dataclasses import dataclass, fields
from functools import reduce

from ..codegen.arith import GROUPS
from ..schedule import Schedule


@dataclass(frozen=True)
class Work:
    """Instructions and events of one execution of a site."""

    fma: float = 0.0             # multiply-adds: vector FMA / dot instructions, or scalar ones
    vector_ops: float = 0.0      # other vector ALU instructions (operand widening, selects, ...)
    loads: float = 0.0           # load instructions (a vector, or one element)
    broadcasts: float = 0.0      # one element to every lane
    gathers: float = 0.0         # gather instructions (strided or irregular lanes)
    stores: float = 0.0
    scatters: float = 0.0        # scatter instructions
    masked: float = 0.0          # of the vector instructions above, those under a lane mask
    masks: float = 0.0           # lane masks formed from bits
    hsums: float = 0.0           # horizontal sums of a vector
    spills: float = 0.0          # loads and stores of accumulators that do not fit in registers
    loop_iterations: float = 0.0  # scalar loop trips (compare, branch, increment)
    definitions: float = 0.0     # scalar index computations (dims defined in a loop, load addresses)
    divisions: float = 0.0       # of those, floor divisions and remainders (of fused loops' dims)
    guard_checks: float = 0.0    # scalar bounds checked
    lane_steps: float = 0.0      # scalar loop steps over lanes (mask bits, index arrays, lane-wise adds)
    output_accesses: float = 0.0  # loads and stores of the output in memory (partial sums)

    def __add__(self, other: Work) -> Work:
        # field by field (dataclasses.astuple deep-copies: it was a quarter of the model's time)
        return Work(*(getattr(self, name) + getattr(other, name) for name in WORK_FIELDS))

    def __mul__(self, factor: float) -> Work:
        return Work(*(getattr(self, name) * factor for name in WORK_FIELDS))


WORK_FIELDS = tuple(f.name for f in fields(Work))
SUBSETS = ("masked", "divisions", "output_accesses")     # fields that count instructions of other fields


@dataclass(frozen=True)
class Site:
    """A piece of the kernel run ``executions`` times per kernel run, each doing ``work``."""

    name: str
    executions: int
    work: Work
    lanes: int                   # lanes of its vector instructions (1: scalar code)
    chain: float = 0.0           # dependent accumulator updates each execution adds to the longest chain
    run: float = 0.0             # updates of one output in a row before the chain moves to another
    chain_memory: bool = False   # the chain stores a partial sum and loads it back


@dataclass(frozen=True)
class KernelCounts:
    """Everything one run of a kernel executes, by site (see the module docstring)."""

    schedule: Schedule           # what the kernel runs (a scalar nest: as the C compiler vectorized it)
    isa: str
    arithmetic: str              # float, integer, dot or dequantize (``arith.Arithmetic``)
    lanes: int                   # lanes of the vector instructions (1 when nothing is vectorized)
    sites: tuple[Site, ...]
    instances: int               # statement instances (multiply-accumulates the op performs)
    accumulators: int = 0        # register-block accumulators
    spilled: int = 0             # of those, kept in memory
    compiler_vectorized: str | None = None   # what the C compiler vectorized (a scalar nest)
    lane_products: int | None = None   # products one lane of a multiply-add adds, where not the arithmetic's
                                       # (GROUPS; a target's own families: NEON's mmla, lookups, popcounts)

    def total(self, name: str) -> float:
        """One ``Work`` field summed over the run."""
        return sum(site.executions * getattr(site.work, name) for site in self.sites)

    @property
    def work(self) -> Work:
        """Every field summed over the run."""
        return reduce(Work.__add__, (site.work * site.executions for site in self.sites), Work())

    @property
    def issued_lanes(self) -> float:
        """Lanes of the multiply-add instructions issued (a dot lane adds 4 products)."""
        return sum(site.executions * site.work.fma * site.lanes for site in self.sites)

    @property
    def useful_lanes(self) -> float:
        """Lanes that compute a product of the op (statement instances; dot: 4 per lane, bf16 dot: 2)."""
        return self.instances / (self.lane_products or GROUPS.get(self.arithmetic, 1))

    @property
    def gather_lanes(self) -> float:
        return sum(site.executions * site.work.gathers * site.lanes for site in self.sites)

    @property
    def scatter_lanes(self) -> float:
        return sum(site.executions * site.work.scatters * site.lanes for site in self.sites)

    @property
    def memory_accesses(self) -> float:
        """Loads and stores that reach memory (a gather or scatter counts each lane; register-block
        accumulators count only where they are set, stored or spilled)."""
        w = self.work
        return w.loads + w.broadcasts + w.stores + w.spills + self.gather_lanes + self.scatter_lanes

    @property
    def instructions(self) -> float:
        """Vector and scalar instructions, a scalar event (loop trip, guard, definition, lane step) as one
        (``masked``, ``divisions`` and ``output_accesses`` count instructions counted elsewhere)."""
        w = self.work
        return sum(getattr(w, name) for name in WORK_FIELDS if name not in SUBSETS)
