"""Schedule.pseudocode() prints the nest each x86 kernel family runs (targets/x86/families.py: binary,
AMX tiles, table lookup, SIMD), and Int8WinogradPlan.pseudocode() its three stages: their loops, extents
and nesting are those of the generated C, for a few schedules per family (the C generated, not built:
the same on every CPU)."""
import re

import pytest

import loopopt as lo
from loopopt.codegen import generate
from loopopt.codegen.emit import KERNEL_NAME
from loopopt.targets.binary import generate_binary
from loopopt.targets.lut import generate_lut
from loopopt.targets.x86.binary import VARIANTS
from loopopt.targets.x86.isa import ISAS
from loopopt.targets.x86.lut_c import LookupC
from loopopt.targets.x86.space import candidates
from loopopt.targets.x86.tiles import generate_tiles
from loopopt.targets.x86.winograd_int8 import generate_winograd_int8
from loopopt.winograd_int8 import Int8WinogradPlan, shape_of

ISA = "avx2"                   # on every machine of the fleet
C_LOOP = re.compile(r"^(\s*)for \((?:const )?[\w ]+? (\w+) = (\w+); \2 < ([\w+ ]+?)[;&]")
PSEUDO_LOOP = re.compile(r"^(\s*)for (\w+) in (\w+)\.\.([^:\s]+)")
STEP = re.compile(r"for (\w+) in (\w+)\.\.(\S+) step (\d+):")
HELPER = "lo_"                 # the kernels' own helper loops (table builds, flushes, epilogue passes)


def pseudo_loops(text: str) -> list[tuple[str, str | None, str, str]]:
    """Each loop of pseudo-code (first occurrence of its name): (name, the loop it is nested in, begin,
    end), in order; nesting is the indentation."""
    found, open_loops, seen = [], [], set()
    for line in text.split("\n"):
        match = PSEUDO_LOOP.match(line)
        if not match:
            continue
        indent, name = len(match[1]), match[2]
        while open_loops and open_loops[-1][0] >= indent:
            open_loops.pop()
        if name not in seen:
            seen.add(name)
            found.append((name, open_loops[-1][1] if open_loops else None, match[3], match[4]))
        open_loops.append((indent, name))
    return found


def _end(lines: list[str], start: int) -> int:
    """The last line of the statement starting at ``lines[start]``: a braced block to its closing brace,
    a loop without a brace to the end of its one statement."""
    body = lines[start].split("/*")[0].rstrip()
    if body.endswith("{"):
        depth = 0
        for index in range(start, len(lines)):
            depth += lines[index].count("{") - lines[index].count("}")
            if depth == 0:
                return index
    if C_LOOP.match(lines[start]) and not body.endswith(";"):
        return _end(lines, start + 1)
    return start


def c_loops(source: str, helper: str | None = HELPER,
            strip: str = "") -> list[tuple[str, str | None, str, str]]:
    """The loops of the kernel function (first occurrence of each name; none starting with ``helper``;
    ``strip`` taken off the names), as ``pseudo_loops``: nesting from the braces and the one-statement
    bodies of loops without braces."""
    lines = source[source.index(f"void {KERNEL_NAME}("):].split("\n")
    loops = [(i, match) for i, match in ((i, C_LOOP.match(line)) for i, line in enumerate(lines)) if match]
    found, seen = [], set()
    for index, match in loops:
        name = match[2].removeprefix(strip)
        if (helper and match[2].startswith(helper)) or name in seen:
            continue
        seen.add(name)
        outer = [m[2].removeprefix(strip) for i, m in loops if i < index <= _end(lines, i)
                 and not (helper and m[2].startswith(helper))]
        found.append((name, outer[-1] if outer else None, match[3], match[4].strip()))
    return found


def check(schedule: lo.Schedule, isa: str, source: str, prefixed: bool = False) -> None:
    """The pseudo-code's loops are the kernel function's (``prefixed``: all of them, named ``lo_...``)."""
    printed = pseudo_loops(schedule.pseudocode(isa))
    generated = c_loops(source, *((None, HELPER) if prefixed else ()))
    assert printed and [(n, p) for n, p, _, _ in printed] == [(n, p) for n, p, _, _ in generated]
    for (name, _, begin, end), (_, _, c_begin, c_end) in zip(printed, generated):
        if begin.isdigit() and end.isdigit() and c_begin.isdigit() and c_end.isdigit():
            assert (begin, end) == (c_begin, c_end), name


QUANT = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="uint8")
TERNARY = lo.QuantSpec(activation="uint8", per_channel=True, weight_symmetric=True, output="int32",
                       weight="ternary")
BINARY = lo.QuantSpec(activation="binary", weight="binary")


@pytest.mark.parametrize("threads", [1, 2])
def test_amx_tiles(threads):                # the tile candidates and their C, on any CPU
    op = lo.Conv2d(40, 24, 3, padding=1, height=6, width=20, quant=QUANT)
    for candidate in candidates(op, "amx", threads)[::5]:        # both block orders, both splits
        check(candidate.schedule, "amx", generate_tiles(candidate.schedule).source)


def test_amx_tiles_of_gathered_patches():
    op = lo.Conv2d(3, 32, 7, stride=2, padding=3, height=16, width=16, dtype="bfloat16")
    patched = [c for c in candidates(op, "amx") if c.knobs.patches]
    assert patched
    check(patched[0].schedule, "amx", generate_tiles(patched[0].schedule).source)


@pytest.mark.parametrize("schedule", [
    lo.Schedule(lo.Conv2d(8, 64, 3, padding=1, height=5, width=6, quant=TERNARY)).weight_format("tl1"),
    lo.Schedule(lo.Matmul(3, 70, 600, quant=TERNARY)).weight_format("tl2").tile(i=2, j=64)
    .register_block("i_i").parallel("j_o"),
    lo.Schedule(lo.Matmul(1, 64, 3000, quant=TERNARY)).weight_format("tl1"),    # int16 sums in chunks
], ids=["conv", "gemm-block-threads", "gemv-chunks"])
def test_table_lookup(schedule):
    check(schedule, ISA, generate_lut(schedule, LookupC(ISA)).source)


def test_binary():
    schedule = lo.Schedule(lo.Conv2d(64, 64, 3, padding=1, height=6, width=6, quant=BINARY))
    source = generate_binary(schedule, VARIANTS[ISA], "nibble").source
    check(schedule, ISA, source, prefixed=True)
    for name, begin, end, step in STEP.findall(schedule.pseudocode(ISA)):    # the position and channel blocks
        assert f"lo_{name} = {begin}; lo_{name} < {end}; lo_{name} += {step})" in source


def test_simd():
    op = lo.Conv2d(8, 16, 3, padding=1, height=6, width=7)
    schedule = (lo.Schedule(op).layout("I", "NHWC").layout("O", "NHWC")
                .reorder("n", "oh", "ow", "kh", "kw", "c", "k").vectorize("k"))
    check(schedule, ISA, generate(schedule, ISAS[ISA]).source)


ANY_LOOP = re.compile(r"for \(\w+ (\w+) = (\w+); \1(?: \+ \d+)? <=? (\w+); (?:\+\+\1|\1 \+= (\d+))\)")
STEPPED = re.compile(r"for (\w+) in (\w+)\.\.(\w+)(?: step (\d+))?:")


@pytest.mark.parametrize("width", [8, 13])
def test_int8_winograd_stages(width):
    """Every loop of the three stage functions and their block functions, with its bounds and step
    (the GEMM's whole blocks and tails), is one of the pseudo-code's and the other way round."""
    op = lo.Conv2d(16, 40, 3, padding=1, height=9, width=width, quant=QUANT)
    source = generate_winograd_int8(repr(op), shape_of(op, ISA), op.quant, op.bias, ISA)
    generated = sorted((name, begin, end, step or "1") for name, begin, end, step in ANY_LOOP.findall(source))
    printed = sorted((name, begin, end, step or "1")
                     for name, begin, end, step in STEPPED.findall(Int8WinogradPlan(op).pseudocode(ISA)))
    assert len(printed) > 8 and printed == generated
