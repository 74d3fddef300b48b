"""A target's search rules: the candidates ``lo.tune`` measures, their first ranking, and what the
guide reads of them.

The search loop (``tune/``) is target-neutral: it asks the target of the ISA it searches for its
``SearchRules`` (``Target.search_rules()``), takes the candidates in the order ``candidates`` gives
them, ranks them with ``rank``, prices them with the kernel model (``lo.kernel_model``) or the rules'
own model (``family``, ``own_seconds``), and refits its prediction with the features ``traits`` gives.
A candidate is an op, the ISA it is compiled for and the rules' knobs, which build its schedule.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

from ..ops import Op
from ..schedule import Schedule, ScheduleError

KERNEL = "kernel"          # the family of candidates the kernel model prices (and whose fit corrects it)
# the shape of a register-blocked nest that neither model prices in full (``Traits.shape``): the logs of
# its block's pixels and channels, where the channel block, pixel block and cache block loops are among
# the outer loops and where the reduction channels are in the reduction order
SHAPE_FEATURES = ("pixels", "channels", "channel_loop", "pixel_loop", "cache_loop", "channels_order")


class Knobs(Protocol):
    """The choices that make one candidate, as a target's rules define them."""

    pixel_block: int               # the output block: positions ...
    channel_block: int             # ... times output channels

    def as_dict(self) -> dict:
        """The knobs as JSON values (what a trial and the tuning log record)."""

    def schedule(self, op: Op, isa: str) -> Schedule:
        """The schedule these knobs make of ``op`` on ``isa`` (a ScheduleError if it refuses them)."""


@dataclass(frozen=True)
class Candidate:
    """One point of a search space: an op, its ISA and the knobs; ``model`` holds the ranking's figures
    (empty until ranked); ``residual``: ranked as a kernel that adds a residual of the output's shape
    where it stores each block (``Schedule.add_residual``, a step its caller adds to the schedule);
    ``threads``: the thread count it is searched for (a target's ``candidates`` sets it)."""

    op: Op
    isa: str
    knobs: Knobs
    model: tuple[tuple[str, float], ...] = ()
    residual: bool = False
    threads: int = 1           # the threads it runs on: its figures are its busiest thread's

    @property
    def figures(self) -> dict[str, float]:
        return dict(self.model)

    @cached_property
    def schedule(self) -> Schedule:
        """The candidate's schedule (a ScheduleError if the schedule refuses it)."""
        return self.knobs.schedule(self.op, self.isa)

    @property
    def builds(self) -> bool:
        """Whether its schedule builds (no ScheduleError)."""
        try:
            return self.schedule is not None
        except ScheduleError:
            return False


Ranker = Callable[[Sequence[Candidate]], list[Candidate]]   # candidates -> best first, with their figures


@dataclass(frozen=True)
class Traits:
    """What the guide reads of a candidate besides its times."""

    tail: float = 1.0              # its time over that of whole blocks where the kernel model misses it
    imbalance: float = 1.0         # the busiest thread's share of the work over an even share
    strided: bool = False          # weight rows a channel row apart (plain weights of part of the channels)
    cache_block: bool = False      # a cache block of the reduction channels
    rolled: bool = False           # the innermost reduction loop steps (is not unrolled)
    shape: tuple[float, ...] = (0.0,) * len(SHAPE_FEATURES)   # ``SHAPE_FEATURES`` (zeros: not a block)


class SearchRules(ABC):
    """How one target's kernels are searched."""

    families: tuple[str, ...] = (KERNEL,)   # the models whose trials are fitted apart

    @abstractmethod
    def candidates(self, op: Op, isa: str, threads: int = 1, auto: bool = False) -> list[Candidate]:
        """Every candidate of ``op`` on ``isa`` (a resolved variant) for ``threads`` threads, in a fixed
        order; ``auto``: a search on the best variant (``isa="auto"``), where the target's other kinds
        of kernel compete too."""

    @abstractmethod
    def rank(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        """The candidates with the heuristic's figures (``predicted_seconds`` among them), best first."""

    def best(self, candidates: Sequence[Candidate]) -> Candidate | None:
        """``rank(candidates)[0]`` (None if there are none)."""
        ranked = self.rank(candidates)
        return ranked[0] if ranked else None

    def family(self, candidate: Candidate) -> str:
        """The model that prices ``candidate`` and whose fit corrects it: ``KERNEL`` (the kernel model
        prices its schedule) or another of ``families`` (``own_seconds``)."""
        return KERNEL

    def own_seconds(self, candidate: Candidate) -> float:
        """The rules' own model's time of a candidate of a family other than ``KERNEL``."""
        raise NotImplementedError(f"{type(self).__name__} has no model of its own")

    def unpriced(self, candidate: Candidate) -> bool:
        """Whether no model prices ``candidate`` (the heuristic's time stands in for the model's)."""
        return False

    def takes_epilogue(self, candidate: Candidate) -> bool:
        """Whether ``candidate``'s kernel can add a residual and clip its outputs in its store
        (``Schedule.add_residual``, ``Schedule.clip``): every kernel by default."""
        return True

    def traits(self, candidate: Candidate, threads: int) -> Traits:
        """What the guide's fit reads of ``candidate`` on ``threads`` threads besides its times."""
        return Traits()

    @abstractmethod
    def lanes(self, op: Op, isa: str) -> int:
        """Lanes of one vector of ``isa`` for ``op``'s accumulators."""

    @abstractmethod
    def registers(self, isa: str) -> int:
        """Vector registers of ``isa``."""

    def refusal(self, isa: str) -> str:
        """Why the other algorithms (GEMM forms, Winograd) are not searched on ``isa`` ("" if they are)."""
        return ""

    @abstractmethod
    def describe(self, knobs: dict) -> str:
        """A candidate's knobs (``Knobs.as_dict``) in a few words."""
