"""The kernel model's constants of one core (``model.py``): each target gives its variants' through
``Target.core_costs``."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CoreCosts:
    """Throughputs (per cycle) and latencies (cycles) of one core running one ISA's kernels."""

    fma_per_cycle: float        # vector multiply-add instructions per cycle (the peak's unit)
    vector_per_cycle: float     # vector instructions per cycle, multiply-adds included (same ports)
    loads_per_cycle: float
    stores_per_cycle: float
    issue_per_cycle: float      # instructions per cycle through the front end
    gather_lane: float          # load-port cycles per gathered lane
    scatter_lane: float         # store-port cycles per scattered lane
    masked: float               # extra vector instructions of a masked load, store or update
    mask: float                 # instructions forming a lane mask from bits
    hsum: float                 # instructions of a horizontal sum
    loop_iteration: float       # instructions of a scalar loop trip
    definition: float           # instructions of a scalar index computation
    division: float             # instructions of a floor division or remainder by a constant
    guard_check: float          # instructions of a scalar bound check
    lane_step: float            # instructions of one step of a scalar loop over lanes
    store_forward: float        # cycles from a store to a load of the same address
    scalar_add_latency: float   # scalar code: the chain's add (products are not contracted)
    window: float               # instructions in flight (the reorder buffer)
