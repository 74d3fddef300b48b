"""codegen/nest.py: the SIMD family's C (codegen/emit.py) and its pseudo-code (codegen/pseudocode.py)
print one lowered nest: the same loops with their annotations, each dim defined and each guard
checked inside the loop the nest places it at (the C generated, not built)."""
import re

import loopopt as lo
from loopopt.codegen import generate
from loopopt.codegen.nest import OUTSIDE, lower
from loopopt.codegen.pseudocode import render
from loopopt.targets.x86.isa import ISAS


def _inside(lines: list[str], headers: list[int], depth: int, text: str) -> bool:
    """``text`` is on a line inside loop ``depth``'s header and before the next loop's."""
    first = headers[depth] if depth != OUTSIDE else 0
    last = headers[depth + 1] if depth + 1 < len(headers) else len(lines)
    return any(text in line for line in lines[first:last])


def test_c_and_pseudocode_print_one_nest():
    op = lo.Conv2d(8, 16, 3, padding=1, stride=2, height=9, width=7)      # padding guards, strided dims
    schedule = (lo.Schedule(op).tile(ow=3).reorder("n", "k", "oh", "ow_o", "kh", "ow_i", "kw", "c")
                .parallel("k"))
    nest = lower(schedule)
    assert nest.definitions and nest.guards and any(g.depth != nest.guards[0].depth for g in nest.guards)
    pseudo = render(schedule).split("\n")
    assert [line.strip() for line in pseudo if line.lstrip().startswith("for ")] == [
        f"for {loop.name} in 0..{loop.extent}:" + (f"    # {', '.join(loop.notes)}" if loop.notes else "")
        for loop in nest.loops]
    definitions = ", ".join(f"{d.dim} = {d.value.to_c()}" for d in nest.definitions)
    assert f"# {definitions}" in {line.strip() for line in pseudo}
    lines = generate(schedule, ISAS["scalar"]).source.split("\n")
    headers = [next(i for i, line in enumerate(lines) if re.search(rf"for \(\w+ {loop.name} = ", line))
               for loop in nest.loops]
    assert headers == sorted(headers)
    for d in nest.definitions:
        assert _inside(lines, headers, d.depth, f" {d.dim} = {d.value.to_c()};"), d
    for g in nest.guards:
        assert _inside(lines, headers, g.depth, f"if (!({g.bound.to_c()})) continue;"), g
