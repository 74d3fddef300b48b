"""C syntax in one place: the indentation, blocks, ``for`` loops and nests that every C-like printer
writes (the SIMD emitter, x86's families, NEON's runner, CUDA's printers). Target-neutral: no
instruction, type or pragma of a target is spelled here; the printers pass them in."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

INDENT = "    "          # one nesting level


def line(depth: int, text: str) -> str:
    """``text`` as a line ``depth`` levels in."""
    return INDENT * depth + text


def indented(lines: Iterable[str], depth: int = 1) -> list[str]:
    """Each of ``lines`` ``depth`` levels further in."""
    return [INDENT * depth + text for text in lines]


def for_loop(int_type: str, name: str, end: object, begin: object = 0, step: object = None) -> str:
    """The header ``for (int_type name = begin; name < end; ++name)`` (``name += step`` with a step)."""
    advance = f"++{name}" if step is None else f"{name} += {step}"
    return f"for ({int_type} {name} = {begin}; {name} < {end}; {advance})"


def block(header: str, body: Iterable[str], depth: int = 0, note: str = "") -> list[str]:
    """``header {``, ``body`` one level in, ``}``, all at ``depth``; an empty header opens a bare
    block. A header of several lines (a pragma before a loop) puts each at ``depth``; ``note`` (a
    comment) follows the opening brace."""
    *before, last = header.split("\n")
    return [*(line(depth, text) for text in before), line(depth, f"{last} {{" if last else "{") + note,
            *indented(body, depth + 1), line(depth, "}")]


def nest(headers: Sequence[str], body: Iterable[str], depth: int = 0) -> list[str]:
    """``body`` inside the blocks of ``headers`` (loops or guards), the first outermost."""
    if not headers:
        return indented(body, depth) if depth else list(body)
    return block(headers[0], nest(headers[1:], body), depth)


def staircase(headers: Sequence[str], depth: int = 0) -> list[str]:
    """``headers`` each one level further in, without braces (a loop whose body is the next loop)."""
    return [line(depth + level, header) for level, header in enumerate(headers)]


def loop_nest(headers: Sequence[str], body: Iterable[str], depth: int = 0) -> list[str]:
    """``body`` in the block of the innermost of ``headers``, each outer loop's one statement the
    next loop (a staircase without braces)."""
    return staircase(headers[:-1], depth) + block(headers[-1], body, depth + len(headers) - 1)


def text(lines: Iterable[str], depth: int = 0) -> str:
    """``lines`` ``depth`` levels in, joined into one text (a template's slot)."""
    return "\n".join(indented(lines, depth))
