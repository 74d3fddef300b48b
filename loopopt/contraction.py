"""The statement language of ``lo.Contraction``: ``OUT[index] += IN0[index] * IN1[index]``.

Each index is quasi-affine in the dims (``+``, ``-``, ``*`` by a constant, ``//`` and ``%`` by a positive
constant, parentheses). The dims of the output are its indices (each a plain dim, once); every other dim
is a reduction. ``parse`` reads a statement (and a bias access) into ``Access``es; the op itself, its
domain, roles and reference, is ``loopopt.ops.Contraction``.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Optional

from .expr import Add, Const, Expr, Mul, Var

_TOKEN = re.compile(r"\d+|[A-Za-z_]\w*|\+=|//|[-+*%\[\](),=]")


class ContractionError(ValueError):
    """A contraction statement that does not parse, or does not describe a valid op."""


@dataclass(frozen=True)
class Access:
    """``tensor[index]`` in the statement."""

    tensor: str
    index: tuple[Expr, ...]


class _Parser:
    """Recursive descent over the statement's tokens; errors name the position."""

    def __init__(self, text: str):
        self.text, self.tokens, self.at = text, [], 0
        self.numerators: list[tuple[Expr, int]] = []  # of // and %: checked >= 0 over the domain
        pos = 0
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos == len(text):
                break
            match = _TOKEN.match(text, pos)
            if match is None:
                self.fail(pos, "an index, a name or an operator")
            self.tokens.append((match.group(0), pos))
            pos = match.end()
        self.tokens.append(("", len(text)))

    def fail(self, position: int, wanted: str):
        raise ContractionError(
            f"contraction {self.text!r}: expected {wanted} at position {position}:\n"
            f"    {self.text}\n    {' ' * position}^"
        )

    def peek(self) -> str:
        return self.tokens[self.at][0]

    def position(self) -> int:
        return self.tokens[self.at][1]

    def take(self, wanted: str | None = None, what: str = "") -> str:
        token = self.peek()
        if (wanted is not None and token != wanted) or token == "":
            self.fail(self.position(), what or repr(wanted))
        self.at += 1
        return token

    def statement(self) -> tuple[Access, Access, Access]:
        out = self.access()
        self.take("+=", "'+=' (the statement is OUT[...] += IN0[...] * IN1[...])")
        first = self.access()
        self.take("*", "'*' between the two inputs")
        second = self.access()
        if self.peek():
            self.fail(self.position(), "the end of the statement (it has exactly two inputs)")
        return out, first, second

    def access(self) -> Access:
        position = self.position()
        name = self.take(None, "a tensor name")
        if not name[0].isalpha() and name[0] != "_":
            self.fail(position, "a tensor name")
        self.take("[", "'[' after the tensor name")
        index = [self.expr()]
        while self.peek() == ",":
            self.take(",")
            index.append(self.expr())
        self.take("]", "',' or ']'")
        return Access(name, tuple(index))

    def expr(self) -> Expr:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = value + self.term() if self.take() == "+" else value - self.term()
        return value

    def term(self) -> Expr:
        value = self.factor()
        while self.peek() in ("*", "//", "%"):
            position, op = self.position(), self.take()
            if op == "*":
                right = self.factor()
                if isinstance(right, Const):
                    value = value * right.value
                elif isinstance(value, Const):
                    value = right * value.value
                else:
                    raise ContractionError(
                        f"contraction {self.text!r}: the index is not affine at position "
                        f"{position}: '*' multiplies two dims (multiply by constants only)"
                    )
                continue
            divisor = self.factor()
            if not isinstance(divisor, Const) or divisor.value < 1:
                raise ContractionError(
                    f"contraction {self.text!r}: the index is not affine at position "
                    f"{position}: {op!r} needs a positive constant divisor"
                )
            self.numerators.append((value, position))
            value = value // divisor.value if op == "//" else value % divisor.value
        return value

    def factor(self) -> Expr:
        token, position = self.peek(), self.position()
        if token == "(":
            self.take("(")
            value = self.expr()
            self.take(")", "')'")
            return value
        if token == "-":
            self.take("-")
            return self.factor() * -1
        if token.isdigit():
            self.take()
            return Const(int(token))
        if token and (token[0].isalpha() or token[0] == "_"):
            self.take()
            return Var(token)
        self.fail(position, "a dim, an integer or '('")


def axis_letters(index: tuple[Expr, ...]) -> str:
    """Layout letters of a tensor's axes: the upper-cased last character of the axis' first dim (``oh``:
    ``H``), else its first character, else the first free letter."""
    letters = ""
    for expr in index:
        names = _ordered_variables(expr)
        candidates = (
            [n[-1].upper() for n in names] + [n[0].upper() for n in names] + list(string.ascii_uppercase)
        )
        letters += next(c for c in candidates if c not in letters and c.isalpha())
    return letters


def _ordered_variables(expr: Expr) -> list[str]:
    """The dims of ``expr`` in the order they are written."""
    if isinstance(expr, Var):
        return [expr.name]
    children = [
        getattr(expr, f) for f in ("left", "right", "expr") if isinstance(getattr(expr, f, None), Expr)
    ]
    return [name for child in children for name in _ordered_variables(child)]


@dataclass(frozen=True)
class Statement:
    """A parsed statement: the output, the two inputs, the optional bias access, the dims (the output's
    in its order, then the reductions in the order they are first written) and the numerators of ``//``
    and ``%`` with their positions (to be checked ``>= 0`` over the domain)."""

    text: str
    output: Access
    inputs: tuple[Access, Access]
    bias: Optional[Access]
    dims: tuple[str, ...]
    reductions: frozenset[str]
    numerators: tuple[tuple[Expr, int], ...]

    @property
    def accesses(self) -> dict[str, Access]:
        """Every access by tensor name: the inputs, the output, then the bias."""
        return {a.tensor: a for a in self.inputs + (self.output,) + ((self.bias,) if self.bias else ())}


def parse(text: str, bias: Optional[str] = None) -> Statement:
    """The statement ``text`` (and the bias access ``bias``, e.g. ``"B[k]"``), checked: the output indexed
    by distinct plain dims, each tensor once, no name both a tensor and a dim, the bias over output dims."""
    parser = _Parser(text)
    out, first, second = parser.statement()
    addend = None
    if bias is not None:
        bias_parser = _Parser(bias if isinstance(bias, str) else repr(bias))
        addend = bias_parser.access()
        if bias_parser.peek():
            bias_parser.fail(bias_parser.position(), "the end of the bias access (e.g. 'B[k]')")
        parser.numerators += bias_parser.numerators
    accesses = (out, first, second) + ((addend,) if addend else ())
    if len({a.tensor for a in accesses}) != len(accesses):
        raise ContractionError(f"contraction {text!r}: a tensor appears twice (tensors: "
                               f"{', '.join(a.tensor for a in accesses)}); each access needs its own name")
    out_dims = _output_dims(text, out)
    if addend is not None and not set().union(*(e.variables() for e in addend.index)) <= set(out_dims):
        raise ContractionError(f"bias {bias!r}: its index may use only the output dims {', '.join(out_dims)}")
    reductions = [v for a in (first, second) for e in a.index for v in _ordered_variables(e)
                  if v not in out_dims]
    dims = out_dims + tuple(dict.fromkeys(reductions))
    clash = sorted(set(dims) & {a.tensor for a in accesses})
    if clash:
        raise ContractionError(f"contraction {text!r}: {clash[0]!r} is used both as a tensor and as a dim")
    return Statement(text, out, (first, second), addend, dims, frozenset(reductions),
                     tuple(parser.numerators))


def _output_dims(text: str, out: Access) -> tuple[str, ...]:
    dims: list[str] = []
    for axis, e in enumerate(out.index):
        if not isinstance(e, Var):
            raise ContractionError(f"contraction {text!r}: output {out.tensor} axis {axis} is indexed by "
                                   f"{e.to_c()!r}; each output index must be a plain dim")
        if e.name in dims:
            raise ContractionError(f"contraction {text!r}: dim {e.name!r} is used twice in the output "
                                   f"{out.tensor} (axes {dims.index(e.name)} and {axis})")
        dims.append(e.name)
    return tuple(dims)


def linear_form(expr: Expr) -> Optional[tuple[dict[str, int], int]]:
    """``expr`` as ``sum coefficient * dim + constant`` (the coefficients by dim, the constant), or None
    when it has a ``//`` or ``%``."""
    if isinstance(expr, Const):
        return {}, expr.value
    if isinstance(expr, Var):
        return {expr.name: 1}, 0
    if isinstance(expr, Mul):
        inner = linear_form(expr.expr)
        return inner and ({d: c * expr.factor for d, c in inner[0].items()}, inner[1] * expr.factor)
    if isinstance(expr, Add):
        left, right = linear_form(expr.left), linear_form(expr.right)
        if left is None or right is None:
            return None
        terms = dict(left[0])
        for d, c in right[0].items():
            terms[d] = terms.get(d, 0) + c
        return {d: c for d, c in terms.items() if c}, left[1] + right[1]
    return None
