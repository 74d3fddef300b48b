"""The kernel model: a schedule's predicted time from what its generated kernel executes.

``targets.x86.costs`` counts the kernel's sites (each a piece of code, its executions and the work of
one). The model adds up, over all sites, the cycles each resource of one core needs (``RESOURCES``):

* vector: multiply-adds (an integer update takes several instructions) and the other vector
  instructions, on ``vector_per_cycle`` ports;
* load and store: loads, broadcasts, spills, and gathered (scattered) lanes at their cost per lane;
* issue: every instruction through the front end, a scalar event (loop trip, guard check, index
  definition, division, lane step) counted as the instructions it takes;
* latency: the chains of dependent accumulator updates, each step the update's latency (plus a
  store-to-load forwarding when the partial sum goes through memory), divided by the number of
  runs of one output's updates that fit in the reorder window (short runs of independent outputs
  overlap);
* memory (with ``traffic``): the bytes each level beyond L1 delivers, from the reuse-distance
  profile (``lo.reuse``), over its bandwidth (``BANDWIDTH``).

The kernel takes as many cycles as its busiest resource (out-of-order execution overlaps the
others), at the clock implied by the measured peak (``lo.peak_gflops``: a cycle issues
``fma_per_cycle`` multiply-adds of the ISA's lanes), on one thread.

The constants (``core_costs``, one table per ISA from its target: x86's in ``targets/x86/costs.py``) are
those of the benchmark machine's core, an Intel Xeon of the Sapphire Rapids generation (Golden Cove): 2
FMA ports, 2 vector loads and 1 vector store per cycle, 6-wide rename, a 512-entry reorder buffer, FMA
latency 4, scalar add latency 2 (in ISO C mode the compiler does not contract ``a * b + c``), about 5
cycles of store forwarding. The gather and scatter costs per lane were measured with a microbenchmark on
that machine; the costs of a guard check, a lane step, an index definition and a division were chosen by
a grid search on ResNet-50 conv2_x schedules (docs/benchmarks.md, "Model vs measured"). The AVX2 table
differs where AVX2 has no mask registers and no scatter.
"""
from __future__ import annotations

from dataclasses import dataclass

from .analysis import Machine, ReuseProfile, reuse
from .codegen.instr import tables
from .schedule import Schedule
from .targets.core_costs import CoreCosts
from .targets.kernel_counts import KernelCounts, Site
from .targets.registry import target_of_isa
from .targets.x86.costs import count
from .targets.x86.isa import available_isas

UPDATE_INSTRUCTIONS = {"float": 1, "integer": 3, "dot": 1, "dequantize": 1,   # per vector update
                       "bf16": 1, "bf16_dot": 1,
                       "lookup": 1, "popcount": 6}  # the families a target counts (Target.own_counts): an
                                                    # int16 add of table entries; xor, popcount and the add
UPDATE_LATENCY = {"float": 4, "integer": 11, "dot": 5, "dequantize": 4,       # vpmulld + vpaddd: 10 + 1
                  "bf16": 4, "bf16_dot": 5,    # vdpbf16ps: taken as vpdpbusd's (not measured here)
                  "lookup": 2, "popcount": 2}  # the chain runs through the add alone

# bytes per cycle each level delivers to the one above it (L2 -> L1, L3 -> L2, DRAM -> L3), one core
BANDWIDTH = {"L2": 32.0, "L3": 10.0, "DRAM": 4.0}


RESOURCES = ("vector", "load", "store", "issue", "latency")


@dataclass(frozen=True)
class KernelModel:
    """A schedule's kernel as the model sees it: its counts and the cycles each resource needs."""

    counts: KernelCounts
    resources: dict[str, float]     # cycles per resource (RESOURCES), and "memory"
    hertz: float                    # the clock implied by the measured peak

    @property
    def cycles(self) -> float:
        return max(self.resources.values())

    @property
    def predicted_seconds(self) -> float:
        return self.cycles / self.hertz

    @property
    def bound(self) -> str:
        """The resource that needs the most cycles."""
        return max(self.resources, key=self.resources.get)

    def summary(self) -> str:
        c, w = self.counts, self.counts.work
        vectorized = f", the C compiler vectorized {c.compiler_vectorized}" if c.compiler_vectorized else ""
        useful = c.useful_lanes / max(c.issued_lanes, 1)
        return "\n".join([
            f"kernel model ({c.isa}, {c.arithmetic} arithmetic, {c.lanes} lane(s){vectorized}): predicted "
            f"{self.predicted_seconds * 1e3:.3f} ms ({self.cycles:.3g} cycles at {self.hertz / 1e9:.2f} GHz, "
            f"bound by {self.bound})",
            "  cycles: " + ", ".join(f"{name} {value:.3g}" for name, value in self.resources.items()),
            f"  instructions {c.instructions:.4g}: multiply-adds {w.fma:.4g} ({useful:.0%} of their lanes "
            f"useful), loads {w.loads:.4g}, "
            f"broadcasts {w.broadcasts:.4g}, gathered lanes {c.gather_lanes:.4g}, stores {w.stores:.4g}, "
            f"scattered lanes {c.scatter_lanes:.4g}, masked {w.masked:.4g}",
            f"  lane steps {w.lane_steps:.4g}, loop trips {w.loop_iterations:.4g}, guard checks "
            f"{w.guard_checks:.4g}, output accesses {w.output_accesses:.4g}, memory accesses "
            f"{c.memory_accesses:.4g}, accumulators {c.accumulators} (spilled {c.spilled})"])


def site_resources(site: Site, costs: CoreCosts, arithmetic: str) -> dict[str, float]:
    """Cycles each resource needs for all executions of ``site`` (RESOURCES).

    The latency of its chain counts in full only when one output's run of updates fills the
    out-of-order window (``CoreCosts.window``); shorter runs of independent outputs overlap."""
    w = site.work
    scalar = site.lanes == 1
    update = 2 if scalar else UPDATE_INSTRUCTIONS[arithmetic]          # scalar: multiply, then add
    vector = (w.fma * update + w.vector_ops + w.masked * costs.masked + w.masks * costs.mask
              + w.hsums * costs.hsum)
    loads = w.loads + w.broadcasts + w.spills / 2 + w.gathers * site.lanes * costs.gather_lane
    stores = w.stores + w.spills / 2 + w.scatters * site.lanes * costs.scatter_lane
    events = (w.loop_iterations * costs.loop_iteration + w.definitions * costs.definition
              + w.divisions * costs.division + w.guard_checks * costs.guard_check
              + w.lane_steps * costs.lane_step)
    issued = vector + w.loads + w.broadcasts + w.gathers + w.stores + w.scatters + w.spills + events
    latency = 0.0
    if site.chain:
        step = (costs.scalar_add_latency if scalar else UPDATE_LATENCY[arithmetic]) \
            + (costs.store_forward if site.chain_memory else 0)
        overlap = max(1.0, costs.window * site.chain / max(site.run * issued, 1.0))
        latency = site.chain * step / overlap
    per_execution = (vector / costs.vector_per_cycle, loads / costs.loads_per_cycle,
                     stores / costs.stores_per_cycle, issued / costs.issue_per_cycle, latency)
    return {name: site.executions * value for name, value in zip(RESOURCES, per_execution, strict=True)}


def memory_cycles(profile: ReuseProfile, machine: Machine | None = None,
                  set_associative: bool = False) -> float:
    """Cycles to move the bytes each level beyond L1 delivers, level after level: the misses of the
    level above it, fully associative, or with ``set_associative`` simulated in that level's sets and
    ways where the hierarchy simulates them (L1, L2; see ``analysis.predict``)."""
    levels = profile.hierarchy(machine, set_associative=set_associative).levels
    cycles = 0.0
    for above, level in zip(levels, levels[1:], strict=False):
        if level.name in BANDWIDTH:
            misses = above.set_assoc_misses
            cycles += (level.bytes if misses is None else misses * profile.line_size) / BANDWIDTH[level.name]
    return cycles


def core_costs(isa: str) -> CoreCosts | None:
    """The constants of the core that runs ``isa``'s kernels (``Target.core_costs``), or None where
    the model has none (x86's AMX tiles)."""
    return target_of_isa(isa).core_costs(isa)


def clock(isa: str) -> float:
    """Cycles per second implied by the peak of ``isa`` (its target's: measured on x86, modelled for
    neon; scalar: of the best ISA this CPU runs)."""
    name = isa if tables(isa).floats.vectorizes else available_isas()[0]
    lanes = tables(name).floats.lanes
    return target_of_isa(name).peak(name, "float32") * 1e9 / (2 * lanes * core_costs(name).fma_per_cycle)


def kernel_model(schedule: Schedule, isa: str = "auto", profile: ReuseProfile | None = None,
                 traffic: bool = True, machine: Machine | None = None,
                 set_associative: bool = False) -> KernelModel:
    """The kernel model of ``schedule`` on ``isa`` (module docstring).

    ``profile``: the schedule's line-granularity reuse profile if already computed (not used when the
    C compiler reorders a scalar nest: the reordered nest is analysed); ``traffic=False`` leaves the
    memory hierarchy out; ``set_associative=True`` takes the L1 and L2 misses from a simulation of
    their sets and ways (a pass over the whole trace: seconds on a layer) instead of a fully
    associative LRU."""
    if not isinstance(schedule, Schedule):
        raise TypeError(f"kernel_model needs a lo.Schedule, got {type(schedule).__name__}")
    chosen = target_of_isa(isa)         # (loads the target that registers isa's tables)
    unmodelled = chosen.unmodelled(schedule)
    if unmodelled:
        raise ValueError(unmodelled)
    counts = chosen.own_counts(schedule, isa)
    if counts is None and schedule.op.quant is not None and schedule.op.quant.binary:
        raise ValueError(f"the kernel model does not price binary (XNOR + popcount) kernels on {isa!r}; it "
                         f"prices float, bfloat16 and int8 SIMD nests (and what a target counts itself)")
    counts = counts or count(schedule, isa)
    costs = core_costs(counts.isa)
    resources = dict.fromkeys(RESOURCES, 0.0)
    for site in counts.sites:
        for name, cycles in site_resources(site, costs, counts.arithmetic).items():
            resources[name] += cycles
    if traffic:
        if profile is None or counts.schedule.loop_names != schedule.loop_names:
            profile = reuse(counts.schedule, granularity="line")
        resources["memory"] = memory_cycles(profile, machine, set_associative)
    return KernelModel(counts, resources, clock(counts.isa))
