"""Quasi-affine integer expressions over loop variables.

One small AST serves every consumer: isl strings (domains, access maps, schedule
maps), C code (kernels, trace generators) and numpy evaluation. Division is floor
division by a positive constant (isl's ``floor`` and ``mod``, numpy's ``//`` and ``%``).
C prints it as ``/`` and ``%``, which truncate toward zero and agree with it only for a
non-negative numerator: a numerator that can be negative (an input index in a conv's padding,
under a spatially blocked layout) is exact in C only once ``exact_in_c`` raised it, which code
that uses the value without a guard needs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Union

import numpy as np

ExprLike = Union["Expr", int]


class Expr:
    """Base class: supports ``+``, ``-``, ``*`` by an int, ``//`` and ``%`` by an int."""

    def __add__(self, other: ExprLike) -> Expr:
        other = lift(other)
        if isinstance(other, Const) and other.value == 0:
            return self
        if isinstance(self, Const) and self.value == 0:
            return other
        return Add(self, other)

    __radd__ = __add__

    def __sub__(self, other: ExprLike) -> Expr:
        return self + lift(other) * -1

    def __rsub__(self, other: ExprLike) -> Expr:
        return lift(other) + self * -1

    def __mul__(self, factor: int) -> Expr:
        if factor == 1:
            return self
        if factor == 0:
            return Const(0)
        if isinstance(self, Const):
            return Const(self.value * factor)
        return Mul(self, int(factor))

    __rmul__ = __mul__

    def __floordiv__(self, divisor: int) -> Expr:
        return self if divisor == 1 else FloorDiv(self, int(divisor))

    def __mod__(self, divisor: int) -> Expr:
        return Const(0) if divisor == 1 else Mod(self, int(divisor))

    def variables(self) -> frozenset[str]:
        raise NotImplementedError

    def to_c(self) -> str:
        raise NotImplementedError

    def to_isl(self) -> str:
        raise NotImplementedError

    def evaluate(self, env: Mapping[str, object]):
        """Value for integer (or numpy integer array) bindings of the variables."""
        raise NotImplementedError

    def substitute(self, bindings: Mapping[str, Expr]) -> Expr:
        raise NotImplementedError


def lift(value: ExprLike) -> Expr:
    """An int becomes a ``Const``; an ``Expr`` stays."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, (int, np.integer)):
        return Const(int(value))
    raise TypeError(f"expected an integer expression, got {value!r}")


@dataclass(frozen=True, eq=True)
class Const(Expr):
    value: int

    def variables(self) -> frozenset[str]:
        return frozenset()

    def to_c(self) -> str:
        return str(self.value)

    to_isl = to_c

    def evaluate(self, env):
        return self.value

    def substitute(self, bindings):
        return self


@dataclass(frozen=True, eq=True)
class Var(Expr):
    name: str

    def variables(self) -> frozenset[str]:
        return frozenset([self.name])

    def to_c(self) -> str:
        return self.name

    to_isl = to_c

    def evaluate(self, env):
        return env[self.name]

    def substitute(self, bindings):
        return bindings.get(self.name, self)


@dataclass(frozen=True, eq=True)
class Add(Expr):
    left: Expr
    right: Expr

    def variables(self):
        return self.left.variables() | self.right.variables()

    def to_c(self):
        right = self.right
        if isinstance(right, Mul) and right.factor < 0:
            return f"({self.left.to_c()} - {(right.expr * -right.factor).to_c()})"
        if isinstance(right, Const) and right.value < 0:
            return f"({self.left.to_c()} - {-right.value})"
        return f"({self.left.to_c()} + {right.to_c()})"

    def to_isl(self):
        return f"({self.left.to_isl()} + {self.right.to_isl()})"

    def evaluate(self, env):
        return self.left.evaluate(env) + self.right.evaluate(env)

    def substitute(self, bindings):
        return self.left.substitute(bindings) + self.right.substitute(bindings)


@dataclass(frozen=True, eq=True)
class Mul(Expr):
    expr: Expr
    factor: int

    def variables(self):
        return self.expr.variables()

    def to_c(self):
        return f"{self.factor}*{self.expr.to_c()}"

    def to_isl(self):
        return f"{self.factor}*{self.expr.to_isl()}"

    def evaluate(self, env):
        return self.expr.evaluate(env) * self.factor

    def substitute(self, bindings):
        return self.expr.substitute(bindings) * self.factor


@dataclass(frozen=True, eq=True)
class FloorDiv(Expr):
    expr: Expr
    divisor: int

    def variables(self):
        return self.expr.variables()

    def to_c(self):
        return f"({self.expr.to_c()} / {self.divisor})"

    def to_isl(self):
        return f"floor(({self.expr.to_isl()})/{self.divisor})"

    def evaluate(self, env):
        return self.expr.evaluate(env) // self.divisor

    def substitute(self, bindings):
        return self.expr.substitute(bindings) // self.divisor


@dataclass(frozen=True, eq=True)
class Mod(Expr):
    expr: Expr
    divisor: int

    def variables(self):
        return self.expr.variables()

    def to_c(self):
        return f"({self.expr.to_c()} % {self.divisor})"

    def to_isl(self):
        return f"(({self.expr.to_isl()}) mod {self.divisor})"

    def evaluate(self, env):
        return self.expr.evaluate(env) % self.divisor

    def substitute(self, bindings):
        return self.expr.substitute(bindings) % self.divisor


def linear_terms(expr: Expr, names: frozenset[str]) -> tuple[dict[str, int], Expr]:
    """``expr`` as ``sum(coefficient * name) + rest`` over the variables ``names`` (``rest`` free of
    them): the coefficients and the rest. ValueError naming the variable where one of ``names`` lies
    under a floor division or remainder (``expr`` is not affine in it)."""
    if isinstance(expr, Var) and expr.name in names:
        return {expr.name: 1}, Const(0)
    if isinstance(expr, Add):
        (left, rest_left), (right, rest_right) = (linear_terms(e, names) for e in (expr.left, expr.right))
        return {n: left.get(n, 0) + right.get(n, 0) for n in left | right}, rest_left + rest_right
    if isinstance(expr, Mul):
        terms, rest = linear_terms(expr.expr, names)
        return {n: c * expr.factor for n, c in terms.items()}, rest * expr.factor
    inside = sorted(expr.variables() & names)
    if inside:
        raise ValueError(f"{inside[0]} lies under a floor division or remainder in {expr.to_c()}")
    return {}, expr


def divisions(expr: Expr) -> set[str]:
    """The floor divisions and remainders in ``expr`` (as C text, so that equal ones count once)."""
    found = {expr.to_c()} if isinstance(expr, FloorDiv | Mod) else set()
    for child in vars(expr).values():
        if isinstance(child, Expr):
            found |= divisions(child)
    return found


def exact_in_c(expr: Expr, least_inexact: Callable[[Expr, int], int | None]) -> Expr:
    """``expr`` written so that C's ``/`` and ``%`` compute its floor divisions and remainders: each
    numerator ``x`` that its divisor ``d`` does not divide at some negative value (``least_inexact``:
    the least value of ``x`` that ``d`` does not divide, None if none) raised by ``k`` divisors to be
    non-negative there, ``(x + k*d) // d - k`` and ``(x + k*d) % d``. ``expr`` itself where C's
    truncation toward zero already agrees."""
    if not divisions(expr):
        return expr
    fields = {name: exact_in_c(child, least_inexact) if isinstance(child, Expr) else child
              for name, child in vars(expr).items()}
    expr = type(expr)(**fields)
    if not isinstance(expr, FloorDiv | Mod):
        return expr
    least = least_inexact(expr.expr, expr.divisor)
    if least is None or least >= 0:
        return expr
    raised = -(least // expr.divisor)
    numerator = _plus_constant(expr.expr, raised * expr.divisor)
    if isinstance(expr, Mod):
        return Mod(numerator, expr.divisor)
    return FloorDiv(numerator, expr.divisor) - raised


def _plus_constant(expr: Expr, value: int) -> Expr:
    """``expr + value``, added to ``expr``'s constant term where it ends with one."""
    if isinstance(expr, Add) and isinstance(expr.right, Const):
        return expr.left + (expr.right.value + value)
    return expr + value


@dataclass(frozen=True)
class Bound:
    """The constraint ``lower <= expr < upper``."""

    expr: Expr
    lower: int
    upper: int

    def to_c(self) -> str:
        text = self.expr.to_c()
        return f"{self.lower} <= {text} && {text} < {self.upper}"

    def to_isl(self) -> str:
        return f"{self.lower} <= {self.expr.to_isl()} < {self.upper}"

    def evaluate(self, env):
        value = self.expr.evaluate(env)
        return (value >= self.lower) & (value < self.upper)
