"""Any affine contraction as an op, written as one statement: ``lo.Contraction("C[i,j] += A[i,k,l] *
B[l,k,j]", sizes={...})``.

The statement is ``OUT[index] += IN0[index] * IN1[index]``; each index is quasi-affine in the dims
(``+``, ``-``, ``*`` by a constant, ``//`` and ``%`` by a positive constant, parentheses). The dims of
the output are its indices (each a plain dim, once); every other dim is a reduction. The op's
domain, accesses and dependences come from ``Op`` as for any op; its reference is einsum over the
inputs gathered at their indices (float64), independent of the generated code.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Optional

import islpy as isl
import numpy as np

from .expr import Bound, Const, Expr, Var
from .ops import STATEMENT, Op, TensorInfo, _dtype, _dtype_repr
from .quant import qcontraction_accumulators

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


def _letters(index: tuple[Expr, ...]) -> str:
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


class Contraction(Op):
    """An op from a statement ``OUT[...] += IN0[...] * IN1[...]`` (see the module docstring).

    ``sizes`` gives the extent of every dim, and optionally an input's (or the bias') shape (by tensor
    name; default: the extents its indices reach). ``padding``: the inputs (names) read as zero outside
    their shape (e.g. a conv's input); an access of any other tensor outside its shape is an error.
    ``bias``: an addend of each output element, as an access of the output dims, e.g. ``"B[k]"``
    (called after the inputs). Dims are the loops, in the output's order then the reductions' order of
    appearance; inputs are called in the order they appear.
    """

    def __init__(
        self,
        expr: str,
        sizes: dict,
        padding=(),
        bias: Optional[str] = None,
        dtype: str = "float32",
        quant=None,
    ):
        if not isinstance(expr, str):
            raise TypeError(f"Contraction takes the statement as a string, got {expr!r}")
        self.expr, self.dtype, self.quant = expr, _dtype(dtype, quant), quant
        parser = _Parser(expr)
        out, first, second = parser.statement()
        addend = None
        if bias is not None:
            bias_parser = _Parser(bias if isinstance(bias, str) else repr(bias))
            addend = bias_parser.access()
            if bias_parser.peek():
                bias_parser.fail(bias_parser.position(), "the end of the bias access (e.g. 'B[k]')")
            parser.numerators += bias_parser.numerators
        self.accesses = {a.tensor: a for a in (first, second, out) + ((addend,) if addend else ())}
        if len(self.accesses) != 3 + (addend is not None):
            raise ContractionError(
                f"contraction {expr!r}: a tensor appears twice (tensors: "
                f"{', '.join(a.tensor for a in (out, first, second) + ((addend,) if addend else ()))}"
                f"); each access needs its own name"
            )
        self.inputs, self.output = (first.tensor, second.tensor), out.tensor
        self.BIAS = addend.tensor if addend else None
        self.bias = addend is not None
        out_dims = self._output_dims(out)
        reductions = [
            v for a in (first, second) for e in a.index for v in _ordered_variables(e) if v not in out_dims
        ]
        if addend is not None and not set().union(*(e.variables() for e in addend.index)) <= set(out_dims):
            raise ContractionError(
                f"bias {bias!r}: its index may use only the output dims {', '.join(out_dims)}"
            )
        names = list(out_dims) + list(dict.fromkeys(reductions))
        self._check_names(names)
        self.dims = tuple((name, self._extent(sizes, name)) for name in names)
        self.reduction_dims = frozenset(names[len(out_dims) :])
        self.shapes = self._shapes(sizes, padding, parser.numerators)
        self.padding = tuple(t for t in self.shapes if t in self._padded)
        self.arguments = dict(expr=expr, sizes=dict(sizes), padding=self.padding, bias=bias, dtype=self.dtype)
        self.channel_dim = next((d for d in reversed(out_dims) if Var(d) in second.index), out_dims[-1])
        plain = [d for d in names[len(out_dims) :] if Var(d) in first.index and Var(d) in second.index]
        self.reduction_channel_dim = (plain or names[len(out_dims) :] or [self.channel_dim])[-1]
        self.weight_channel_axis = (
            second.index.index(Var(self.channel_dim)) if Var(self.channel_dim) in second.index else 0
        )
        self.output_channel_axis = out.index.index(Var(self.channel_dim))
        if quant is not None:
            self._check_quantizable()

    # --- construction --------------------------------------------------------------------------
    def _check_quantizable(self) -> None:
        """ContractionError unless the quantized kernels compensate this statement exactly: the weights
        (second input) indexed by distinct plain dims, among them the output channel dim (per-channel
        parameters) and a reduction dim; the activations not indexed by the channel dim (one activation
        sum per output position); no padding taps (the compensation would vary with the position:
        a ConvNd's windows give it border classes); a bias per output channel."""
        x, w = self.inputs
        k = self.channel_dim
        index = self.index(w)
        plain = all(isinstance(e, Var) for e in index) and len(set(index)) == len(index)
        reasons = [
            (not plain, f"the weights {w} must be indexed by distinct plain dims, not "
                        f"[{', '.join(e.to_c() for e in index)}]"),
            (Var(k) not in self.index(w), f"the weights {w} must be indexed by the output channel dim {k!r}"),
            (not self.reduction_dims & {e.name for e in self.index(w) if isinstance(e, Var)},
             f"the weights {w} must be indexed by a reduction dim"),
            (any(k in e.variables() for e in self.index(x)),
             f"the activations {x} must not be indexed by the output channel dim {k!r}"),
            (bool(self.guards), f"padding {list(self.padding)} leaves taps out near the borders (quantize a "
                                f"Conv1d/2d/3d, whose windows give them border classes)"),
            (self.bias and self.bias_offset() != Var(k),
             f"the bias {self.BIAS} must be indexed by {k!r} alone"),
        ]
        bad = [reason for failed, reason in reasons if failed]
        if bad:
            raise ContractionError(f"contraction {self.expr!r} cannot be quantized: {'; '.join(bad)}")

    def _output_dims(self, out: Access) -> tuple[str, ...]:
        dims = []
        for axis, e in enumerate(out.index):
            if not isinstance(e, Var):
                raise ContractionError(
                    f"contraction {self.expr!r}: output {out.tensor} axis {axis} is indexed by "
                    f"{e.to_c()!r}; each output index must be a plain dim"
                )
            if e.name in dims:
                raise ContractionError(
                    f"contraction {self.expr!r}: dim {e.name!r} is used twice in the output "
                    f"{out.tensor} (axes {dims.index(e.name)} and {axis})"
                )
            dims.append(e.name)
        return tuple(dims)

    def _check_names(self, names: list[str]) -> None:
        clash = sorted(set(names) & set(self.accesses))
        if clash:
            raise ContractionError(
                f"contraction {self.expr!r}: {clash[0]!r} is used both as a tensor and as a dim"
            )

    def _extent(self, sizes: dict, name: str) -> int:
        if not isinstance(sizes, dict):
            raise TypeError(f"sizes must be a dict of dim extents (and tensor shapes), got {sizes!r}")
        known = set(self.accesses) | {
            v for a in self.accesses.values() for e in a.index for v in e.variables()
        }
        unknown = sorted(set(sizes) - known)
        if unknown:
            raise ContractionError(
                f"sizes names {', '.join(map(repr, unknown))}, neither a dim nor a tensor of {self.expr!r}"
            )
        if name not in sizes:
            missing = [d for d in known - set(self.accesses) - set(sizes)]
            raise ContractionError(
                f"sizes has no extent for dim(s) {', '.join(map(repr, sorted(missing)))} of {self.expr!r}"
            )
        value = sizes[name]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ContractionError(f"the extent of dim {name!r} must be a positive integer, got {value!r}")
        return int(value)

    def _box(self) -> isl.Set:
        names = ", ".join(self.dim_names)
        box = " and ".join(f"0 <= {n} < {e}" for n, e in self.dims)
        return isl.Set(f"{{ {STATEMENT}[{names}] : {box} }}")

    def _range(self, expr: Expr, box: isl.Set) -> tuple[int, int]:
        """The least and greatest value of ``expr`` over ``box``."""
        names = ", ".join(self.dim_names)
        values = isl.Map(f"{{ {STATEMENT}[{names}] -> [{expr.to_isl()}] }}").intersect_domain(box).range()
        point = lambda s: s.sample_point().get_coordinate_val(isl.dim_type.set, 0).to_python()
        return point(values.lexmin()), point(values.lexmax())

    def _shapes(self, sizes: dict, padding, numerators) -> dict[str, tuple[int, ...]]:
        """Every tensor's shape, checking that accesses stay inside (unless padded) and that the numerators of
        ``//`` and ``%`` are never negative."""
        padded = (padding,) if isinstance(padding, str) else tuple(padding)
        for name in padded:
            if name not in self.inputs:
                raise ContractionError(
                    f"padding names {name!r}, not an input of {self.expr!r} (inputs: "
                    f"{', '.join(self.inputs)})"
                )
        self._padded = frozenset(padded)
        box = self._box()
        for numerator, position in numerators:
            low, _ = self._range(numerator, box)
            if low < 0:
                raise ContractionError(
                    f"contraction {self.expr!r}: the numerator {numerator.to_c()!r} of the "
                    f"division at position {position} reaches {low}; it must stay >= 0"
                )
        shapes = {}
        for name, access in self.accesses.items():
            ranges = [self._range(e, box) for e in access.index]
            given = sizes.get(name)
            if name == self.output:
                shapes[name] = tuple(self.extent(e.name) for e in access.index)
                continue
            if given is None:
                given = tuple(high + 1 for _, high in ranges)
            elif not (isinstance(given, (tuple, list)) and len(given) == len(access.index)):
                raise ContractionError(
                    f"sizes[{name!r}] must be a shape of {len(access.index)} ints, got {given!r}"
                )
            for axis, ((low, high), size) in enumerate(zip(ranges, given)):
                if (low < 0 or high >= size) and name not in self._padded:
                    raise ContractionError(
                        f"contraction {self.expr!r}: {name} axis {axis} is indexed by "
                        f"{access.index[axis].to_c()!r}, from {low} to {high}, outside its size {size}; pass "
                        f"padding=[{name!r}] to read zeros there, or change the sizes"
                    )
            shapes[name] = tuple(int(v) for v in given)
        return shapes

    # --- Op ----------------------------------------------------------------------------------------
    def __repr__(self) -> str:
        sizes = ", ".join(f"{n}={e}" for n, e in self.dims)
        extra = (f", padding={list(self.padding)}" if self.padding else "") + (
            f", bias={self.arguments['bias']!r}" if self.bias else ""
        )
        quant = f", quant={self.quant}" if self.quant else ""
        return f"Contraction({self.expr!r}, {sizes}{extra}{_dtype_repr(self)}{quant})"

    def tensor(self, name: str) -> TensorInfo:
        if name not in self.accesses:
            raise ValueError(f"{self!r} has no tensor {name!r}: its tensors are {', '.join(self.accesses)}")
        letters = _letters(self.accesses[name].index)
        role = "output" if name == self.output else "bias" if name == self.BIAS else "input"
        return TensorInfo(name, self.shapes[name], letters, role, letters)

    def index(self, name: str) -> tuple[Expr, ...]:
        if name not in self.accesses:
            raise ValueError(f"{self!r} has no tensor {name!r}: its tensors are {', '.join(self.accesses)}")
        return self.accesses[name].index

    @property
    def guards(self) -> tuple[Bound, ...]:
        """``0 <= index < size`` on every axis of a padded input that its index leaves."""
        box = self._box()
        guards = []
        for name in self.padding:
            for expr, size in zip(self.index(name), self.shapes[name]):
                low, high = self._range(expr, box)
                if low < 0 or high >= size:
                    guards.append(Bound(expr, 0, size))
        return tuple(guards)

    @property
    def leading_rows(self) -> bool:
        """The reference always runs on the whole op (its inputs are gathered over every dim)."""
        return False

    def integer_accumulators(self, xq: np.ndarray, wq: np.ndarray, x_zero_point, w_zero_point) -> np.ndarray:
        return qcontraction_accumulators(self._product, xq, wq, x_zero_point, w_zero_point,
                                         self.weight_channel_axis)

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {t: rng.standard_normal(self.shapes[t]).astype(np.float32) for t in self.call_tensors}

    def _gathered(self, name: str, array: np.ndarray) -> tuple[np.ndarray, str]:
        """``array`` read at the tensor's index for every value of its dims (zero outside a padded
        input), and the einsum letters of those dims."""
        dims = sorted(set().union(*(e.variables() for e in self.index(name))), key=self.dim_names.index)
        grids = np.meshgrid(*(np.arange(self.extent(d)) for d in dims), indexing="ij")
        env = dict(zip(dims, grids))
        positions = [
            np.broadcast_to(np.asarray(e.evaluate(env)), grids[0].shape if grids else ())
            for e in self.index(name)
        ]
        inside = np.ones(grids[0].shape if grids else (), dtype=bool)
        for pos, size in zip(positions, self.shapes[name]):
            inside &= (pos >= 0) & (pos < size)
        clipped = tuple(np.clip(pos, 0, size - 1) for pos, size in zip(positions, self.shapes[name]))
        values = np.where(inside, np.asarray(array, np.float64)[clipped], 0.0)
        return values, "".join(self._letter(d) for d in dims)

    def _letter(self, dim: str) -> str:
        return string.ascii_letters[self.dim_names.index(dim)]

    def reference(self, *arrays: np.ndarray) -> np.ndarray:
        """float64 ``OUT = einsum(IN0 gathered, IN1 gathered) (+ bias, if given)`` (bfloat16: the inputs
        rounded to bf16)."""
        result = self._product(*self.operand_values(*arrays[:2]))
        if len(arrays) > 2:   # the bias (a conv's reference likewise takes it optionally)
            out = "".join(self._letter(e.name) for e in self.index(self.output))
            result = result + _expanded(*self._gathered(self.BIAS, arrays[2]), out)
        return result

    def _product(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """float64 ``einsum(IN0 gathered, IN1 gathered)``: the sum of the products, no bias."""
        (x, xs), (w, ws) = (self._gathered(t, a) for t, a in zip(self.inputs, (first, second)))
        out = "".join(self._letter(e.name) for e in self.index(self.output))
        return np.einsum(f"{xs},{ws}->{out}", x, w)

    @property
    def reference_sizes(self) -> tuple[int, int, int]:
        gathered = [
            int(np.prod([self.extent(d) for d in set().union(*(e.variables() for e in self.index(t)))]))
            for t in self.inputs
        ]
        return gathered[0], int(np.prod(self.shapes[self.output])), gathered[1]


def _expanded(values: np.ndarray, letters: str, out: str) -> np.ndarray:
    """``values`` over dims ``letters`` (a subset of ``out``) broadcast to the dims ``out``."""
    order = [c for c in out if c in letters]
    moved = np.einsum(f"{letters}->{''.join(order)}", values)
    return moved.reshape([moved.shape[order.index(c)] if c in letters else 1 for c in out])
