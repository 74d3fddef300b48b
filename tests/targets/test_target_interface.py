"""The Target interface's defaults (targets/base.py): what a new target gets before it says more."""
import loopopt as lo
from loopopt.targets.base import Target


class Bare(Target):
    """A target that answers only the abstract methods."""

    name, description = "bare", "a target with no printer and no model of its own"

    def isas(self):
        return ("v1",)

    def available_isas(self, integer=False):
        return ("v1",)

    def resolve_isa(self, isa, integer=False):
        return "v1"

    def compile(self, schedule, isa="auto"):
        raise lo.ScheduleError("bare builds nothing")

    def peak(self, isa, dtype):
        return 1.0


OP = lo.Conv2d(4, 8, 3, height=6, width=6, quant=lo.QuantSpec())
SCHEDULE = lo.Schedule(OP).tile(ow=4).vectorize("ow_i")
NOTES = ("# vector loop ", "# quantized ")      # what an instruction set adds


def test_the_default_pseudocode_is_the_target_neutral_nest():
    text = Bare().pseudocode(SCHEDULE, "v1")
    assert "for ow_i in 0..4:    # vectorized" in text and "O[n, k, oh, ow] += " in text
    assert not [line for line in text.splitlines() if line.startswith(NOTES)]
    x86 = SCHEDULE.pseudocode("avx2").splitlines()
    assert len([line for line in x86 if line.startswith(NOTES)]) == 2
    assert text.splitlines() == [line for line in x86 if not line.startswith(NOTES)]


def test_the_default_allows_timing():
    assert Bare().timing_refusal() is None
