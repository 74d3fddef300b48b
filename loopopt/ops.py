"""Operations as polyhedral objects: iteration domain, accesses, dependences, reference.

An op is one reduction statement ``out[...] += in0[...] * in1[...]`` over a box of named dimensions,
minus the instances excluded by ``guards`` (the padding taps of a convolution); its accesses are
quasi-affine expressions of the dimensions. ``Contraction`` is the one op class: it reads the statement
written out (the language of ``loopopt.contraction``) and derives the domain, accesses, guards, roles
and reference. ``Conv1d``/``Conv2d``/``Conv3d``, ``Matmul`` and ``Gemm`` are its constructors with
PyTorch's and ONNX's parameters: each writes the statement of its arguments.
"""
from __future__ import annotations

import math
import string
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Optional

import islpy as isl
import numpy as np

from .bf16 import BFLOAT16, bf16_values
from .buffers import available_memory, check_memory
from .cnames import check_user_name
from .contraction import ContractionError, axis_letters, linear_form, parse
from .expr import Bound, Expr, Var
from .quant import qcontraction_accumulators

if TYPE_CHECKING:
    from .quant import QuantSpec

STATEMENT = "S"
FLOAT16 = "float16"              # IEEE half inputs: the cuda target's tensor-core kernels (``tensorize``)
DTYPES = ("float32", BFLOAT16, FLOAT16)   # element types of a float op's inputs (quantized: quant=QuantSpec)
# the element type of a float op's output: float32, or its 16-bit inputs' type (the float32 sums rounded to
# nearest even once, at the store: the cuda target's tensor-core kernels)
OUT_DTYPES = {"float32": ("float32",), BFLOAT16: ("float32", BFLOAT16), FLOAT16: ("float32", FLOAT16)}
OUT_ROUNDOFF = {"float32": 0.0, BFLOAT16: 2.0 ** -8, FLOAT16: 2.0 ** -11}   # the output's unit roundoff
REFERENCE_BLOCK_BYTES = 256 * 2**20   # verification computes the reference in blocks of about this size


@dataclass(frozen=True)
class Window:
    """One sliding-window axis of an op: dim ``tap_dim`` runs over ``taps`` filter positions of an
    input of ``size``, dim ``out_dim`` over ``out`` output positions (input position
    ``out_dim * stride - pad + tap_dim * dilation``); the input is padded with ``pad`` zeros
    before its start and ``pad_end`` after its end."""

    out_dim: str
    tap_dim: str
    out: int
    taps: int
    stride: int
    pad: int
    dilation: int
    size: int
    pad_end: int = 0

    @property
    def padded(self) -> bool:
        """Whether some taps fall into the padding (they are excluded from the domain)."""
        return bool(self.pad or self.pad_end)

    @property
    def input_index(self) -> Expr:
        """The input position read at output ``out_dim`` and tap ``tap_dim``."""
        return Var(self.out_dim) * self.stride + Var(self.tap_dim) * self.dilation - self.pad


@dataclass(frozen=True)
class TensorInfo:
    """A tensor of an op: its logical shape, dimension letters and role."""

    name: str
    shape: tuple[int, ...]
    letters: str
    role: str            # "input", "output" or "bias"
    default_layout: str


class Op:
    """Common polyhedral view of a reduction op over its dims, tensor indices and guards (all given by
    ``Contraction``, the one op class).

    Besides the polyhedral view an op describes the roles of its dims and tensors, so that
    codegen, quantization and analysis never ask which class an op is: its output channels
    (``channels``, ``channel_dim``, the axes that carry them), the reduction dim that runs
    over input channels, its sliding windows, groups and bias.
    """

    dims: tuple[tuple[str, int], ...]
    arguments: dict                  # the constructor's arguments (normalized): the op rebuilt
    reduction_dims: frozenset[str]
    inputs: tuple[str, str]
    output: str
    quant: Optional["QuantSpec"]
    dtype: str
    out_dtype: str = "float32"       # the output's element type (``OUT_DTYPES``)
    bias: bool
    BIAS: Optional[str]              # the bias tensor's name
    guards: tuple[Bound, ...]        # constraints beyond the box: padding taps are excluded
    windows: tuple[Window, ...]      # the sliding-window axes (a convolution's rows and columns)
    groups: int
    channel_dim: str                 # the dim of the output channels (per-channel parameters)
    reduction_channel_dim: str       # the reduction dim over input channels (a VNNI dot group)
    weight_channel_axis: int         # axis of the output channels in the weights (inputs[1])
    output_channel_axis: int         # axis of the output channels in the output
    reference_sizes: tuple[int, int, int]   # elements the reference holds per leading row (and weights)

    def tensor(self, name: str) -> TensorInfo:
        raise NotImplementedError

    def index(self, name: str) -> tuple[Expr, ...]:
        """The logical index of tensor ``name`` accessed by the statement."""
        raise NotImplementedError

    def axis(self, tensor: str, dim: str) -> int:
        """The first axis of ``tensor`` whose index involves ``dim`` (a grouped conv's input channels:
        ``k // Kg * Cg + c``)."""
        return next(a for a, e in enumerate(self.index(tensor)) if dim in e.variables())

    @property
    def tensors(self) -> tuple[str, ...]:
        return self.inputs + (self.output,)

    @property
    def bias_tensor(self) -> Optional[str]:
        """The name of the bias tensor, the addend of every output element (a conv's value per
        output channel, a Gemm's C broadcast over the output), or None without one."""
        return self.BIAS if self.bias else None

    def bias_offset(self) -> Expr:
        """The element of the bias that the statement instance's output adds, as a row-major offset
        over the dims (``index(bias_tensor)`` flattened: a conv's ``k``, a Gemm's ``i * n + j``)."""
        offset: Expr | int = 0
        for expr, size in zip(self.index(self.bias_tensor), self.tensor(self.bias_tensor).shape, strict=True):
            offset = offset * size + expr
        return offset

    @property
    def call_tensors(self) -> tuple[str, ...]:
        """The tensors a call passes, in order: inputs, then the bias if the op has one."""
        return self.inputs + ((self.BIAS,) if self.bias else ())

    @property
    def channels(self) -> int:
        """Number of output channels: the length of the bias and of per-channel parameters."""
        return self.extent(self.channel_dim)

    @property
    def position_dims(self) -> tuple[str, ...]:
        """The output dims that are neither the channel nor a window's output (a conv's ``n``, a matmul's
        batch dims and ``i``): with the groups and the windows' outputs they index the activation sums."""
        windowed = {w.out_dim for w in self.windows}
        dims = [e.name for e in self.index(self.output) if isinstance(e, Var)]
        return tuple(d for d in dims if d != self.channel_dim and d not in windowed)

    @property
    def output_positions(self) -> int:
        """Output positions per output channel, times the groups: one activation sum each."""
        return int(np.prod(self.tensor(self.output).shape)) // self.channels * self.groups

    def with_quant(self, quant: Optional["QuantSpec"]) -> "Op":
        """The same op shape, quantized as ``quant`` describes (None: float32)."""
        return type(self)(**{**self.arguments, "quant": quant})

    # --- polyhedral view -----------------------------------------------------------
    @property
    def dim_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.dims)

    def extent(self, dim: str) -> int:
        return self._dim_extents[dim]

    @cached_property
    def _dim_extents(self) -> dict[str, int]:
        """``dims`` as a dict, built once (the search's ranking asks for extents per candidate)."""
        return dict(self.dims)

    def domain_constraints(self) -> list[str]:
        """isl constraints of the domain over the dim names."""
        box = [f"0 <= {name} < {extent}" for name, extent in self.dims]
        return box + [guard.to_isl() for guard in self.guards]

    @cached_property
    def domain(self) -> isl.Set:
        """The iteration domain ``{ S[dims] : box and guards }``."""
        names = ", ".join(self.dim_names)
        return isl.Set(f"{{ {STATEMENT}[{names}] : {' and '.join(self.domain_constraints())} }}")

    @cached_property
    def access_maps(self) -> dict[str, isl.Map]:
        """One isl map per tensor from the domain to the tensor's logical index space."""
        names = ", ".join(self.dim_names)
        maps = {}
        for tensor in self.tensors:
            index = ", ".join(e.to_isl() for e in self.index(tensor))
            relation = f"{{ {STATEMENT}[{names}] -> {tensor}[{index}] }}"
            maps[tensor] = isl.Map(relation).intersect_domain(self.domain)
        return maps

    @cached_property
    def original_schedule(self) -> isl.Map:
        """The naive order: the identity over the dims in their declared order."""
        names = ", ".join(self.dim_names)
        return isl.Map(f"{{ {STATEMENT}[{names}] -> [{names}] }}").intersect_domain(self.domain)

    @cached_property
    def dependences(self) -> dict[str, isl.Map]:
        """Dependences from isl's dataflow analysis, keyed ``flow`` (write -> read),
        ``output`` (write -> write) and ``anti`` (read -> write), each ``S[x] -> S[y]``.

        Each comes from the accumulation into the output, i.e. it is the order of
        the reduction, which reassociation may change.
        """
        out = isl.UnionMap.from_map(self.access_maps[self.output])
        return {"flow": self._dataflow(sink=out, source=out, must=True),
                "output": self._dataflow(sink=out, source=out, must=True),
                "anti": self._dataflow(sink=out, source=out, must=False)}

    @cached_property
    def conflicts(self) -> isl.Map:
        """Pairs of distinct instances that update the same output element, in either order.

        A loop that separates any such pair cannot run in parallel, even when the
        reduction may be reassociated.
        """
        out = self.access_maps[self.output]
        same = out.apply_range(out.reverse())
        return same.subtract(isl.Map.identity(same.get_space()))

    def _dataflow(self, sink: isl.UnionMap, source: isl.UnionMap, must: bool) -> isl.Map:
        info = isl.UnionAccessInfo.from_sink(sink)
        info = info.set_must_source(source) if must else info.set_may_source(source)
        flow = info.set_schedule_map(isl.UnionMap.from_map(self.original_schedule)).compute_flow()
        deps = flow.get_must_dependence() if must else flow.get_may_dependence()
        space = isl.Map.from_domain_and_range(self.domain, self.domain).get_space()
        result = isl.Map.empty(space)
        for piece in _maps(deps):
            result = result.union(piece)
        return result.coalesce()

    @property
    def flops(self) -> int:
        """Floating-point operations (2 per multiply-accumulate instance), bias excluded."""
        return 2 * self.macs

    @cached_property
    def macs(self) -> int:
        """Number of statement instances (multiply-accumulates), padding taps excluded."""
        return _count(self.domain)


    def operand_values(self, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        """The values the kernel multiplies: the inputs as given (float32), or rounded to bfloat16 or
        float16 (nearest even) and held as float32, so that the reference sums them in float32."""
        if self.dtype == FLOAT16:
            return tuple(np.asarray(a, np.float32).astype(np.float16).astype(np.float32) for a in arrays)
        if self.dtype != BFLOAT16:
            return arrays
        return tuple(bf16_values(a, name) for a, name in zip(arrays, self.inputs))


    # --- memory of the reference ---------------------------------------------------------
    def reference_bytes(self, rows: int) -> int:
        """Bytes the reference and the verification against it hold at once for ``rows`` leading
        rows: wide (8-byte) copies of the padded activations and weights, and a few output-sized
        arrays (reference, error bound, error)."""
        activations, outputs, weights = self.reference_sizes
        return 8 * (3 * weights + rows * (2 * activations + 8 * outputs))

    @property
    def leading_rows(self) -> bool:
        """The reference may run on slices of the leading axis of the output: that axis is also the
        leading axis of the first input, in no other axis of it and no other input (a conv's batch, a
        matmul's rows)."""
        first, (lead, *others) = self.index(self.output)[0], self.index(self.inputs[0])
        return (isinstance(first, Var) and lead == first
                and all(first.name not in e.variables()
                        for e in others + [e for t in self.call_tensors[1:] for e in self.index(t)]))

    def reference_blocks(self) -> list[slice]:
        """Slices of the leading axis of the activations and the output (a conv's batch, a matmul's
        rows) whose reference takes about ``REFERENCE_BLOCK_BYTES`` each (at least one row), or the
        whole op when it does not split (``leading_rows``); MemoryLimitError if one row (the whole
        op) needs more memory than is available."""
        total = self.tensor(self.output).shape[0]
        if not self.leading_rows:
            check_memory(f"the reference of {self!r}", {"reference": self.reference_bytes(total)})
            return [slice(None)]
        check_memory(f"the reference of {self!r} (one row of it)", {"reference": self.reference_bytes(1)})
        budget = min(REFERENCE_BLOCK_BYTES, available_memory()[0])
        per_row = self.reference_bytes(1) - self.reference_bytes(0)
        rows = max(1, (budget - self.reference_bytes(0)) // per_row)
        return [slice(start, min(start + rows, total)) for start in range(0, total, rows)]


class Contraction(Op):
    """An op from a statement ``OUT[...] += IN0[...] * IN1[...]`` (the language of ``loopopt.contraction``).

    ``sizes`` gives the extent of every dim, and optionally an input's (or the bias') shape (by tensor
    name; default: the extents its indices reach). ``padding``: the inputs read as zero outside their
    shape, as names (each axis padded as far as its index reaches) or as a dict of one ``(begin, end)``
    pair per axis by name; the instances that read the padding are excluded from the domain (``guards``).
    An access of any other tensor outside its shape is an error. ``bias``: an addend of each output
    element, as an access of output dims, e.g. ``"B[k]"`` (called after the inputs). The output is
    ``alpha * sum + beta * bias``. ``letters``: layout letters by tensor name (default: from the
    indices). Dims are the loops, in the output's order then the reductions' order of appearance.

    A statement in a convolution's form, ``O[p..., k, o...] += I[p..., c', o*s + r*d - pad, ...] *
    W[..., k, ..., c, ..., r, ...]`` (at least one position dim ``p``; ``c'`` is ``c`` or a grouped
    channel ``(k // (K/g)) * C/g + c``; each window's ``o`` an output dim the weights do not read,
    ``r`` a reduction dim they read plainly), has ``windows`` and ``groups`` as a ConvNd's.
    """

    def __init__(self, expr: str, sizes: dict, padding=(), bias: Optional[str] = None, dtype: str = "float32",
                 quant: Optional["QuantSpec"] = None, *, alpha: float = 1.0, beta: float = 1.0,
                 letters: Optional[dict] = None, out_dtype: str = "float32"):
        if not isinstance(expr, str):
            raise TypeError(f"Contraction takes the statement as a string, got {expr!r}")
        self.expr, self.dtype, self.quant = expr, _dtype(dtype, quant), quant
        self.out_dtype = _out_dtype(out_dtype, self.dtype, quant)
        self.alpha, self.beta = _real(alpha, "alpha"), _real(beta, "beta")
        statement = parse(expr, bias)
        self.accesses = statement.accesses
        (first, second), out = statement.inputs, statement.output
        self.inputs, self.output = (first.tensor, second.tensor), out.tensor
        self.BIAS, self.bias = (statement.bias.tensor, True) if statement.bias else (None, False)
        self.dims = tuple((name, self._extent(sizes, name)) for name in statement.dims)
        self.reduction_dims = statement.reductions
        self.shapes, self.input_pads = self._shapes(sizes, padding, statement.numerators)
        self.padding = tuple(self.input_pads)
        self.letters_of = {name: (letters or {}).get(name) or axis_letters(access.index)
                           for name, access in self.accesses.items()}
        self.arguments = dict(expr=expr, sizes=dict(sizes), padding=padding if isinstance(padding, dict) else
                              self.padding, bias=bias, dtype=self.dtype, alpha=self.alpha, beta=self.beta,
                              letters=letters, **_out_argument(self))
        out_dims = [e.name for e in out.index]
        self.channel_dim = k = next((d for d in reversed(out_dims) if Var(d) in second.index), out_dims[-1])
        # the reduction over input channels: read plainly by the weights, and by the activations in axes
        # without other output dims than the channels (a window's taps are read with its output positions)
        reductions = statement.dims[len(out_dims):]
        reading = lambda d: [e.variables() for e in first.index if d in e.variables()]
        channels = [d for d in reductions if Var(d) in second.index and reading(d)
                    and all(dims & set(out_dims) <= {k} for dims in reading(d))]
        self.reduction_channel_dim = (channels or list(reductions) or [k])[-1]
        self.weight_channel_axis = second.index.index(Var(k)) if Var(k) in second.index else 0
        self.output_channel_axis = out.index.index(Var(k))
        if quant is not None:
            self._check_quantizable()

    # --- construction --------------------------------------------------------------------------
    def _check_quantizable(self) -> None:
        """ContractionError unless the quantized kernels compensate this statement exactly: the weights
        (second input) indexed by distinct plain dims, among them the output channel dim (per-channel
        parameters) and a reduction dim; the activations not indexed by the channel dim but through
        groups (one activation sum per output position); no padding taps outside windows (the compensation
        would vary with the position: windows give it border classes); a bias per output channel; no
        alpha, beta; no dim or tensor named as the quantized kernels' own variables."""
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
            (self.groups == 1 and any(k in e.variables() for e in self.index(x)),
             f"the activations {x} must not be indexed by the output channel dim {k!r}"),
            (bool(self.guards) and not self.windows,
             f"padding {list(self.padding)} leaves taps out near the borders (quantize a Conv1d/2d/3d, or "
             f"a statement in its form, whose windows give them border classes)"),
            (self.bias and self.bias_offset() != Var(k),
             f"the bias {self.BIAS} must be indexed by {k!r} alone"),
            (self.scales is not None, f"the output is scaled (alpha={self.alpha}, beta={self.beta}): the "
                                      f"quantized kernels form sum * x_scale * w_scale (+ bias) only"),
        ]
        for names, kind in ((self.dim_names, "dim"), (self.accesses, "tensor")):
            for name in names:
                try:
                    check_user_name(name, kind, quantized=True)
                except ValueError as err:
                    reasons.append((True, str(err)))
        bad = [reason for failed, reason in reasons if failed]
        if bad:
            raise ContractionError(f"contraction {self.expr!r} cannot be quantized: {'; '.join(bad)}")

    def _extent(self, sizes: dict, name: str) -> int:
        if not isinstance(sizes, dict):
            raise TypeError(f"sizes must be a dict of dim extents (and tensor shapes), got {sizes!r}")
        known = set(self.accesses) | {v for a in self.accesses.values() for e in a.index
                                      for v in e.variables()}
        unknown = sorted(set(sizes) - known)
        if unknown:
            raise ContractionError(
                f"sizes names {', '.join(map(repr, unknown))}, neither a dim nor a tensor of {self.expr!r}")
        if name not in sizes:
            missing = [d for d in known - set(self.accesses) - set(sizes)]
            raise ContractionError(
                f"sizes has no extent for dim(s) {', '.join(map(repr, sorted(missing)))} of {self.expr!r}")
        value = sizes[name]
        if not _integer(value) or value < 1:
            raise ContractionError(f"the extent of dim {name!r} must be a positive integer, got {value!r}")
        return int(value)

    def _range(self, expr: Expr) -> tuple[int, int]:
        """The least and greatest value of ``expr`` over the box of the dims: of an affine one from its
        coefficients (each dim at 0 or its last value), of one with ``//`` or ``%`` by isl."""
        form = linear_form(expr)
        if form is None:
            return _box_range(self.dims, expr.to_isl())
        terms, constant = form
        extents = dict(self.dims)
        reaches = [c * (extents[dim] - 1) for dim, c in terms.items()]
        return constant + sum(min(0, r) for r in reaches), constant + sum(max(0, r) for r in reaches)

    def _padded(self, padding) -> dict:
        """``padding`` as a dict of the padded inputs: per-axis ``(begin, end)`` pairs, or None (as far as
        the index reaches)."""
        given = padding if isinstance(padding, dict) else dict.fromkeys(
            (padding,) if isinstance(padding, str) else tuple(padding))
        for name, pairs in given.items():
            if name not in self.inputs:
                raise ContractionError(f"padding names {name!r}, not an input of {self.expr!r} (inputs: "
                                       f"{', '.join(self.inputs)})")
            rank = len(self.accesses[name].index)
            if pairs is not None and not (len(pairs) == rank and all(
                    len(p) == 2 and all(_integer(v) and v >= 0 for v in p) for p in pairs)):
                raise ContractionError(f"padding[{name!r}] must be {rank} (begin, end) pairs of ints >= 0, "
                                       f"got {pairs!r}")
        return given

    def _shapes(self, sizes: dict, padding, numerators) -> tuple[dict, dict]:
        """Every tensor's shape and the padded inputs' per-axis pads, checking that accesses stay inside
        (with the padding) and that the numerators of ``//`` and ``%`` are never negative."""
        given_pads = self._padded(padding)
        for numerator, position in numerators:
            low, _ = self._range(numerator)
            if low < 0:
                raise ContractionError(
                    f"contraction {self.expr!r}: the numerator {numerator.to_c()!r} of the "
                    f"division at position {position} reaches {low}; it must stay >= 0")
        shapes, pads = {}, {}
        for name, access in self.accesses.items():
            if name == self.output:
                shapes[name] = tuple(self.extent(e.name) for e in access.index)
                continue
            ranges = [self._range(e) for e in access.index]
            given = sizes.get(name)
            if given is None:
                given = tuple(high + 1 for _, high in ranges)
                for axis, (low, high) in enumerate(ranges):
                    if high < 0:
                        raise ContractionError(
                            f"contraction {self.expr!r}: {name} axis {axis} is indexed by "
                            f"{access.index[axis].to_c()!r}, from {low} to {high}, never inside the tensor; "
                            f"give its shape in sizes")
            elif not (isinstance(given, (tuple, list)) and len(given) == len(access.index)):
                raise ContractionError(
                    f"sizes[{name!r}] must be a shape of {len(access.index)} ints, got {given!r}")
            pairs = given_pads.get(name) or tuple((max(0, -low), max(0, high + 1 - size))
                                                  for (low, high), size in zip(ranges, given))
            for axis, ((low, high), size, (begin, end)) in enumerate(zip(ranges, given, pairs)):
                where = (f"contraction {self.expr!r}: {name} axis {axis} is indexed by "
                         f"{access.index[axis].to_c()!r}, from {low} to {high}, outside its size {size}")
                if name not in given_pads and (low < 0 or high >= size):
                    raise ContractionError(f"{where}; pass padding=[{name!r}] to read zeros there, or change "
                                           f"the sizes")
                if low < -begin or high >= size + end:
                    raise ContractionError(f"{where} padded by {(begin, end)}")
            shapes[name] = tuple(int(v) for v in given)
            if name in given_pads:
                pads[name] = tuple((int(b), int(e)) for b, e in pairs)
        return shapes, pads

    # --- the op --------------------------------------------------------------------------------------
    def __repr__(self) -> str:
        sizes = ", ".join(f"{n}={e}" for n, e in self.dims)
        extra = "".join(f", {name}={value!r}" for name, value, default in (
            ("padding", list(self.padding), []), ("bias", self.arguments["bias"], None),
            ("alpha", self.alpha, 1.0), ("beta", self.beta, 1.0),
            ("letters", self.arguments["letters"], None))
            if value != default)
        quant = f", quant={self.quant}" if self.quant else ""
        return f"Contraction({self.expr!r}, {sizes}{extra}{_dtype_repr(self)}{quant})"

    def tensor(self, name: str) -> TensorInfo:
        info = self._tensors.get(name)
        return info if info is not None else self._tensors[self._known(name)]

    @cached_property
    def _tensors(self) -> dict[str, TensorInfo]:
        """Each tensor's ``TensorInfo`` by name, built once (the search's ranking asks per candidate)."""
        infos = {}
        for name, letters in self.letters_of.items():
            role = "output" if name == self.output else "bias" if name == self.BIAS else "input"
            infos[name] = TensorInfo(name, self.shapes[name], letters, role, letters)
        return infos

    def index(self, name: str) -> tuple[Expr, ...]:
        return self.accesses[self._known(name)].index

    def _known(self, name: str) -> str:
        if name not in self.accesses:
            raise ValueError(f"{self!r} has no tensor {name!r}: its tensors are {', '.join(self.accesses)}")
        return name

    @cached_property
    def guards(self) -> tuple[Bound, ...]:
        """``0 <= index < size`` on every padded axis of a padded input."""
        return tuple(Bound(expr, 0, size) for name, pairs in self.input_pads.items()
                     for expr, size, pair in zip(self.index(name), self.shapes[name], pairs)
                     if pair != (0, 0))

    @property
    def scales(self) -> Optional[tuple[float, float]]:
        """``(alpha, beta)`` of an output ``alpha * sum + beta * bias`` (a Gemm's), None for the plain
        ``sum + bias``: the scaled output is formed by a pass after the nest."""
        if self.alpha == 1.0 and (self.beta == 1.0 or not self.bias):
            return None
        return self.alpha, self.beta if self.bias else 0.0

    @property
    def windows(self) -> tuple[Window, ...]:
        """The sliding-window axes of a statement in a convolution's form (class docstring), else ()."""
        return self._convolution[0]

    @property
    def groups(self) -> int:
        """The channel groups of a statement in a convolution's form (class docstring), else 1."""
        return self._convolution[1]

    @cached_property
    def _convolution(self) -> tuple[tuple[Window, ...], int]:
        x, w = self.inputs
        k, c = self.channel_dim, self.reduction_channel_dim
        index, weights = self.index(x), self.index(w)
        windows: list[Window] = []
        while len(windows) < len(index) - 1:
            window = self._window(len(index) - 1 - len(windows))
            if window is None:
                break
            windows.insert(0, window)
        spatial = [d for win in windows for d in (win.out_dim, win.tap_dim)]
        positions = tuple(e for e in self.index(self.output) if e != Var(k) and e.name not in spatial)
        groups = self._groups(index[-len(windows) - 1])
        conv = (windows and groups and positions and index[:-len(windows) - 1] == positions
                and len(set(spatial)) == len(spatial) and c not in spatial and Var(k) in weights
                and Var(c) in weights)
        return (tuple(windows), groups) if conv else ((), 1)

    def _window(self, axis: int) -> Optional[Window]:
        """The window of the first input's ``axis``: its index ``o*s + r*d - pad`` (``o`` an output dim
        the weights do not read, ``r`` a reduction dim they read plainly, ``s, d >= 1``), else None."""
        x, w = self.inputs
        form = linear_form(self.index(x)[axis])
        if form is None:
            return None
        (terms, constant), weights = form, self.index(w)
        outs = [d for d in terms if d not in self.reduction_dims]
        taps = [d for d in terms if d in self.reduction_dims]
        if len(outs) != 1 or len(taps) != 1 or constant > 0 or min(terms.values()) < 1:
            return None
        (o,), (r,) = outs, taps
        if o == self.channel_dim or any(o in e.variables() for e in weights) or Var(r) not in weights:
            return None
        end = self.input_pads[x][axis][1] if x in self.input_pads else 0
        return Window(o, r, self.extent(o), self.extent(r), terms[o], -constant, terms[r],
                      self.shapes[x][axis], end)

    def _groups(self, channel: Expr) -> Optional[int]:
        """The groups of the activations' channel index: ``c`` 1, ``(k // (K/g)) * C/g + c`` g, else None."""
        k, c = self.channel_dim, self.reduction_channel_dim
        per_group = lambda g: (Var(k) // (self.channels // g)) * self.extent(c) + Var(c)
        grouped = lambda g: channel == (Var(c) if g == 1 else per_group(g))
        return next((g for g in range(1, self.channels + 1) if self.channels % g == 0 and grouped(g)), None)

    def integer_accumulators(self, xq: np.ndarray, wq: np.ndarray, x_zero_point, w_zero_point) -> np.ndarray:
        """The exact int32 accumulators ``sum (x - zx) * (w - zw[channel])`` of quantized inputs."""
        return qcontraction_accumulators(self._product, xq, wq, x_zero_point, w_zero_point,
                                         self.weight_channel_axis)

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Random logical-layout inputs (and bias) for testing and timing."""
        rng = np.random.default_rng(seed)
        return {t: rng.standard_normal(self.shapes[t]).astype(np.float32) for t in self.call_tensors}

    def reference(self, *arrays: np.ndarray) -> np.ndarray:
        """float64 ``alpha * einsum(IN0 gathered, IN1 gathered) + beta * bias`` (bfloat16: the inputs
        rounded to bf16), independent of the generated code: each input is read at its index for every
        value of its dims (zeros in the padding); the bias, if passed, is broadcast over the output."""
        return self._scaled(self.alpha, self.beta, *arrays)

    def magnitude(self, *arrays: np.ndarray) -> np.ndarray:
        """``sum |terms|`` of each output for non-negative ``arrays`` (the call's): the reference with
        every coefficient made non-negative, what an error bound scales with."""
        return self._scaled(abs(self.alpha), abs(self.beta), *arrays)

    def _scaled(self, alpha: float, beta: float, first, second, bias=None) -> np.ndarray:
        result = alpha * self._product(*self.operand_values(first, second))
        if bias is not None:
            extents = self._extents(first)
            out = "".join(self._letter(e.name) for e in self.index(self.output))
            result = result + beta * _expanded(*self._gathered(self.BIAS, bias, extents), out)
        return result

    def _product(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """float64 ``einsum(IN0 gathered, IN1 gathered)``: the sum of the products, no bias; on the rows of
        ``first`` given (``leading_rows``)."""
        extents = self._extents(first)
        (x, xs), (w, ws) = (self._gathered(t, a, extents) for t, a in zip(self.inputs, (first, second)))
        out = "".join(self._letter(e.name) for e in self.index(self.output))
        return np.einsum(f"{xs},{ws}->{out}", x, w, optimize=True)

    def _extents(self, first: np.ndarray) -> dict[str, int]:
        """The dims' extents, the leading one as many as ``first`` has rows (``leading_rows``)."""
        extents = dict(self.dims)
        if self.leading_rows:
            extents[self.index(self.output)[0].name] = np.shape(first)[0]
        return extents

    def _gathered(self, name: str, array: np.ndarray, extents: dict[str, int]) -> tuple[np.ndarray, str]:
        """``array`` read at the tensor's index for every value of its dims (zero in the padding), and the
        einsum letters of those dims; an array indexed by distinct dims over its whole shape is a view."""
        index, array = self.index(name), np.asarray(array, np.float64)
        if len(set(index)) == len(index) and all(isinstance(e, Var) and extents[e.name] == size
                                                 for e, size in zip(index, array.shape)):
            return array, "".join(self._letter(e.name) for e in index)
        dims = sorted(set().union(*(e.variables() for e in index)), key=self.dim_names.index)
        grids = np.meshgrid(*(np.arange(extents[d]) for d in dims), indexing="ij", sparse=True)
        positions = [np.asarray(e.evaluate(dict(zip(dims, grids)))) for e in index]
        padded = [axis for axis, pair in enumerate(self.input_pads.get(name, ())) if pair != (0, 0)]
        inside = [(positions[axis] >= 0) & (positions[axis] < array.shape[axis]) for axis in padded]
        for axis in padded:
            positions[axis] = np.clip(positions[axis], 0, array.shape[axis] - 1)
        values = np.asarray(array[tuple(positions)])
        for mask in inside:
            values *= mask
        return values, "".join(self._letter(d) for d in dims)

    def _letter(self, dim: str) -> str:
        return string.ascii_letters[self.dim_names.index(dim)]

    @property
    def reference_sizes(self) -> tuple[int, int, int]:
        """Elements of one leading row of the gathered first input and of the output, and of the gathered
        second input: what the reference holds."""
        gathered = [math.prod(self.extent(d) for d in set().union(*(e.variables() for e in self.index(t))))
                    for t in self.inputs]
        rows = self.shapes[self.output][0]
        return -(-gathered[0] // rows), math.prod(self.shapes[self.output]) // rows, gathered[1]


def _expanded(values: np.ndarray, letters: str, out: str) -> np.ndarray:
    """``values`` over dims ``letters`` (a subset of ``out``) broadcast to the dims ``out``."""
    order = [c for c in out if c in letters]
    moved = np.einsum(f"{letters}->{''.join(order)}", values)
    return moved.reshape([moved.shape[order.index(c)] if c in letters else 1 for c in out])


@lru_cache(maxsize=4096)
def _box_range(dims: tuple[tuple[str, int], ...], expr: str) -> tuple[int, int]:
    """The least and greatest value of the isl expression ``expr`` over the box ``0 <= dim < extent`` of
    ``dims`` (cached: ops of the same sizes share their index ranges, and parsing isl text is slow)."""
    names = ", ".join(name for name, _ in dims)
    box = " and ".join(f"0 <= {n} < {e}" for n, e in dims)
    values = isl.Map(f"{{ {STATEMENT}[{names}] -> [{expr}] : {box} }}").range()
    point = lambda s: s.sample_point().get_coordinate_val(isl.dim_type.set, 0).to_python()
    return point(values.lexmin()), point(values.lexmax())


def _count(domain: isl.Set) -> int:
    card = domain.card()
    text = card.to_str()
    return int(text.strip("{} ").split()[0]) if "{" in text else int(text)


def _maps(union: isl.UnionMap) -> list[isl.Map]:
    maps: list[isl.Map] = []
    union.foreach_map(maps.append)
    return maps


def _integer(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _positive(value, what: str) -> int:
    if not _integer(value) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def _dtype(dtype, quant) -> str:
    """The checked element type of an op's inputs (``DTYPES``); bfloat16 is not quantized."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported: allowed {', '.join(map(repr, DTYPES))} "
                         f"(for integer arithmetic pass quant=lo.QuantSpec(...))")
    if quant is not None and dtype != "float32":
        raise ValueError(f"dtype {dtype!r} cannot be quantized: pass quant=... with dtype='float32' "
                         f"(quantized inputs are integers), or dtype={dtype!r} without quant")
    return dtype


def _out_dtype(out_dtype, dtype: str, quant) -> str:
    """The checked element type of an op's output (``OUT_DTYPES``: float32, or the 16-bit inputs' type)."""
    allowed = ("float32",) if quant is not None else OUT_DTYPES[dtype]
    if out_dtype not in allowed:
        raise ValueError(f"out_dtype {out_dtype!r} is not supported for dtype={dtype!r}"
                         f"{' (quantized)' if quant is not None else ''}: allowed "
                         f"{', '.join(map(repr, allowed))}")
    return out_dtype


def _out_argument(op: Op) -> dict:
    """The constructor's ``out_dtype`` argument where it is not the default float32."""
    return {"out_dtype": op.out_dtype} if op.out_dtype != "float32" else {}


def _dtype_repr(op: Op) -> str:
    return ((f", dtype={op.dtype!r}" if op.dtype != "float32" else "")
            + (f", out_dtype={op.out_dtype!r}" if op.out_dtype != "float32" else ""))


def _flag(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be True or False, got {value!r}")
    return value


_TUPLE = {1: "a 1-tuple", 2: "a pair", 3: "a triple"}


def _per_dim(value, spatial: int, what: str, low: int = 1) -> tuple[int, ...]:
    """An int or one int per spatial dim, each >= ``low``."""
    if _integer(value):
        value = (value,) * spatial
    if not (isinstance(value, (tuple, list)) and len(value) == spatial and all(_integer(v) for v in value)):
        raise TypeError(f"{what} must be an int or {_TUPLE[spatial]} of ints, got {value!r}")
    if min(value) < low:
        raise ValueError(f"{what} must be >= {low}, got {tuple(value)}")
    return tuple(int(v) for v in value)


AUTO_PADS = ("SAME_UPPER", "SAME_LOWER", "VALID")


def auto_pad(mode: str, sizes, kernel_size, stride=1, dilation=1) -> tuple[tuple[int, int], ...]:
    """ONNX ``auto_pad`` as per-side pads ``((begin, end), ...)`` for a conv's ``padding=``: SAME_UPPER
    and SAME_LOWER pad so that the output has ``ceil(size / stride)`` positions, the odd extra pad at
    the end (UPPER) or at the beginning (LOWER); VALID pads nothing. ``sizes``: the input's spatial
    sizes."""
    if mode not in AUTO_PADS:
        raise ValueError(f"auto_pad {mode!r} is not one of {', '.join(AUTO_PADS)}")
    sizes = tuple(_positive(v, "size") for v in ((sizes,) if _integer(sizes) else sizes))
    spatial = len(sizes)
    kernel = _per_dim(kernel_size, spatial, "kernel_size")
    strides, dilations = _per_dim(stride, spatial, "stride"), _per_dim(dilation, spatial, "dilation")
    pads = []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        total = 0 if mode == "VALID" else max(0, (-(-size // s) - 1) * s + d * (k - 1) + 1 - size)
        small, large = total // 2, total - total // 2
        pads.append((large, small) if mode == "SAME_LOWER" else (small, large))
    return tuple(pads)


def _pads(padding, spatial: int, kernel: tuple[int, ...], stride: tuple[int, ...],
          dilation: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """Per-side pads of ``padding=``: an int, one int per spatial dim, one ``(begin, end)`` pair per
    dim, or PyTorch's "same" (stride 1; the odd extra pad at the end) / "valid"."""
    if padding == "valid":
        return ((0, 0),) * spatial
    if padding == "same":
        if max(stride) > 1:
            raise ValueError(f"padding='same' needs stride 1 (as in PyTorch), got stride={stride}; "
                             f"pass per-side pads, e.g. from lo.auto_pad('SAME_UPPER', ...)")
        return tuple((d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(kernel, dilation))
    if _integer(padding):
        padding = (padding,) * spatial
    pairs = isinstance(padding, (tuple, list)) and len(padding) == spatial and all(
        _integer(p) or (isinstance(p, (tuple, list)) and len(p) == 2 and all(_integer(v) for v in p))
        for p in padding)
    if not pairs:
        raise TypeError(f"padding must be an int, {_TUPLE[spatial]} of ints or of (begin, end) pairs, "
                        f"'same' or 'valid', got {padding!r}")
    pads = tuple((int(p), int(p)) if _integer(p) else (int(p[0]), int(p[1])) for p in padding)
    if min(min(pair) for pair in pads) < 0:
        raise ValueError(f"padding must be >= 0, got {padding!r}")
    return pads


SPATIAL_LETTERS = "DHW"


def _spatial(axis: int, out: bool = False) -> property:
    """A property of a conv's input (``out``: output) size along spatial ``axis``."""
    return property(lambda self: (self.out_sizes if out else self.sizes)[axis])


def _real(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value):
        raise TypeError(f"{what} must be a finite real number, got {value!r}")
    return float(value)


class ConvNd(Contraction):
    """Convolution over 1, 2 or 3 spatial dims with PyTorch's semantics, e.g. in 2-D the Contraction
    ``O[n,k,oh,ow] += I[n,c',oh*stride_h+kh*dil_h-pad_h,ow*stride_w+kw*dil_w-pad_w] * W[k,c,kh,kw]``
    (``+ B[k]``) with its input padded by the per-side pads.

    ``c`` runs over the input channels of ``k``'s group, ``c' = (k // (K/groups)) * (C/groups) + c``.
    The spatial dims are lettered ``D, H, W`` (the last ones for fewer dims); their loops are
    ``o<letter>`` (output positions) and ``k<letter>`` (filter taps). Conv1d, Conv2d and Conv3d name
    the sizes.
    """

    SIZES: tuple[str, ...] = ()      # the constructor's names of the input's spatial sizes

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride, padding, dilation,
                 groups: int, bias: bool, batch: int, sizes: tuple[int, ...], dtype: str,
                 quant: Optional["QuantSpec"]):
        spatial = len(self.SIZES)
        self.in_channels = _positive(in_channels, "in_channels")
        self.out_channels = _positive(out_channels, "out_channels")
        self.kernel_size = _per_dim(kernel_size, spatial, "kernel_size")
        self.stride = _per_dim(stride, spatial, "stride")
        self.dilation = _per_dim(dilation, spatial, "dilation")
        self.pads = _pads(padding, spatial, self.kernel_size, self.stride, self.dilation)
        groups, self.batch = _positive(groups, "groups"), _positive(batch, "batch")
        self.sizes = tuple(_positive(v, name) for v, name in zip(sizes, self.SIZES))
        bias = _flag(bias, "bias")
        for what, channels in (("in_channels", self.in_channels), ("out_channels", self.out_channels)):
            if channels % groups:
                raise ValueError(f"{what}={channels} is not divisible by groups={groups}")
        _dtype(dtype, quant)
        spans = tuple(d * (k - 1) + 1 for k, d in zip(self.kernel_size, self.dilation))
        padded = tuple(size + lo + hi for size, (lo, hi) in zip(self.sizes, self.pads))
        if any(span > size for span, size in zip(spans, padded)):
            raise ValueError(
                f"kernel_size={self.kernel_size} with dilation={self.dilation} spans "
                f"{'x'.join(map(str, spans))}, larger than the padded input {'x'.join(map(str, padded))}")
        self.out_sizes = tuple((size - span) // s + 1 for size, span, s in zip(padded, spans, self.stride))
        arguments = dict(in_channels=self.in_channels, out_channels=self.out_channels,
                         kernel_size=self.kernel_size, stride=self.stride, padding=self.pads,
                         dilation=self.dilation, groups=groups, bias=bias, batch=self.batch,
                         **dict(zip(self.SIZES, self.sizes)), dtype=dtype)
        self.letters = SPATIAL_LETTERS[len(SPATIAL_LETTERS) - spatial:]
        outs, taps = ([f"{prefix}{x.lower()}" for x in self.letters] for prefix in "ok")
        kg, cg = self.out_channels // groups, self.in_channels // groups
        channel = "c" if groups == 1 else f"(k//{kg})*{cg}+c"
        scaled = lambda dim, factor: dim if factor == 1 else f"{dim}*{factor}"
        positions = [f"{scaled(o, s)}+{scaled(t, d)}" + (f"-{lo}" if lo else "")
                     for o, t, s, d, (lo, _) in zip(outs, taps, self.stride, self.dilation, self.pads)]
        pads = {"I": ((0, 0), (0, 0)) + self.pads} if any(lo or hi for lo, hi in self.pads) else {}
        super().__init__(
            f"O[n,k,{','.join(outs)}] += I[n,{channel},{','.join(positions)}] * W[k,c,{','.join(taps)}]",
            dict(n=self.batch, k=self.out_channels, **dict(zip(outs, self.out_sizes)), c=cg,
                 **dict(zip(taps, self.kernel_size)), I=(self.batch, self.in_channels) + self.sizes),
            pads, "B[k]" if bias else None, dtype, quant,
            letters=dict(I="NC" + self.letters, W="OI" + self.letters, O="NC" + self.letters, B="C"))
        self.arguments = arguments
        symmetric = all(lo == hi for lo, hi in self.pads)
        self.padding = tuple(lo for lo, _ in self.pads) if symmetric else self.pads

    def __repr__(self) -> str:
        spatial = len(self.SIZES)
        extra = "".join(f", {name}={value}" for name, value, default in (
            ("stride", self.stride, (1,) * spatial), ("padding", self.padding, (0,) * spatial),
            ("dilation", self.dilation, (1,) * spatial), ("groups", self.groups, 1)) if value != default)
        q = f", quant={self.quant}" if self.quant else ""
        sizes = "".join(f", {name}={size}" for name, size in zip(self.SIZES, self.sizes))
        return (f"{type(self).__name__}({self.in_channels}, {self.out_channels}, "
                f"kernel_size={self.kernel_size}{extra}, bias={self.bias}, batch={self.batch}{sizes}"
                f"{_dtype_repr(self)}{q})")


class Conv1d(ConvNd):
    """1-D convolution (PyTorch's ``Conv1d``) over an input ``I[N, C, W]`` of ``length`` positions:
    loops ``n, k, ow, c, kw``; layouts lettered ``NCW`` / ``OIW``."""

    SIZES = ("length",)
    length, out_length = _spatial(0), _spatial(0, out=True)

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, batch: int = 1, *, length: int, dtype: str = "float32",
                 quant: Optional["QuantSpec"] = None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         batch, (length,), dtype, quant)


class Conv2d(ConvNd):
    """2-D convolution (PyTorch's ``Conv2d``) over ``I[N, C, H, W]``: loops ``n, k, oh, ow, c, kh, kw``;
    layouts lettered ``NCHW`` / ``OIHW``."""

    SIZES = ("height", "width")
    height, width = _spatial(0), _spatial(1)
    out_height, out_width = _spatial(0, out=True), _spatial(1, out=True)

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, batch: int = 1, height: int = 56, width: int = 56,
                 dtype: str = "float32", quant: Optional["QuantSpec"] = None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         batch, (height, width), dtype, quant)


class Conv3d(ConvNd):
    """3-D convolution (PyTorch's ``Conv3d``) over ``I[N, C, D, H, W]``: loops
    ``n, k, od, oh, ow, c, kd, kh, kw``; layouts lettered ``NCDHW`` / ``OIDHW``."""

    SIZES = ("depth", "height", "width")
    depth, height, width = _spatial(0), _spatial(1), _spatial(2)
    out_depth, out_height, out_width = _spatial(0, out=True), _spatial(1, out=True), _spatial(2, out=True)

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, batch: int = 1, *, depth: int, height: int, width: int,
                 dtype: str = "float32", quant: Optional["QuantSpec"] = None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         batch, (depth, height, width), dtype, quant)


BATCH_LETTERS = "BDEFGH"


class Matmul(Contraction):
    """Matrix multiply, the Contraction ``C[b..., i, j] += A[b..., i, k] * B[b..., k, j]``: A is
    ``batch + (m, k)`` (``(k, m)`` if ``trans_a``), B ``batch + (k, n)`` (``(n, k)`` if ``trans_b``), C
    ``batch + (m, n)``.

    Batch dims are loops ``b`` (one) or ``b0, b1, ...`` and letters ``B, D, E, ...`` of the layouts
    (A ``MK``, B ``KN``, C ``MN`` after them).
    """

    def __init__(self, m: int, n: int, k: int, batch=(), trans_a: bool = False, trans_b: bool = False,
                 dtype: str = "float32", quant: Optional["QuantSpec"] = None, *, out_dtype: str = "float32"):
        self._shape(m, n, k, batch, trans_a, trans_b)
        self._contract("C", dtype, quant, out_dtype=out_dtype)
        self.arguments = dict(m=self.m, n=self.n, k=self.k, batch=self.batch, trans_a=self.trans_a,
                              trans_b=self.trans_b, dtype=self.dtype, **_out_argument(self))

    def _shape(self, m, n, k, batch, trans_a, trans_b) -> None:
        """Check and set the shape arguments."""
        self.m, self.n, self.k = (_positive(v, name) for v, name in ((m, "m"), (n, "n"), (k, "k")))
        if _integer(batch):
            batch = (batch,)
        if not isinstance(batch, (tuple, list)) or len(batch) > len(BATCH_LETTERS):
            raise TypeError(f"batch must be an int or a tuple of at most {len(BATCH_LETTERS)} ints, "
                            f"got {batch!r}")
        self.batch = tuple(_positive(v, "batch") for v in batch)
        self.trans_a, self.trans_b = _flag(trans_a, "trans_a"), _flag(trans_b, "trans_b")

    def _contract(self, output: str, dtype: str, quant, c_shape=None, out_dtype: str = "float32",
                  **scales) -> None:
        """The statement of the shape into ``output`` (Gemm: plus the bias ``C`` of ``c_shape``)."""
        names = ("b",) if len(self.batch) == 1 else tuple(f"b{i}" for i in range(len(self.batch)))
        self.batch_dims = tuple(zip(names, self.batch))
        lead, letters = "".join(f"{b}," for b in names), BATCH_LETTERS[:len(self.batch)]
        bias = None
        if c_shape is not None:   # the trailing axes of the output, an axis of extent 1 broadcast (index 0)
            axes = (("i", self.m), ("j", self.n))[2 - len(c_shape):]
            bias = f"C[{','.join('0' if size == 1 else dim for (dim, _), size in zip(axes, c_shape))}]"
        super().__init__(
            f"{output}[{lead}i,j] += A[{lead}{'k,i' if self.trans_a else 'i,k'}] * "
            f"B[{lead}{'j,k' if self.trans_b else 'k,j'}]",
            dict(self.batch_dims, i=self.m, j=self.n, k=self.k, **({"C": c_shape} if c_shape else {})),
            bias=bias, dtype=dtype, quant=quant, out_dtype=out_dtype, **scales,
            letters={"C": "MN"[2 - len(c_shape or ()):], "A": letters + ("KM" if self.trans_a else "MK"),
                     "B": letters + ("NK" if self.trans_b else "KN"), output: letters + "MN"})

    def __repr__(self) -> str:
        extra = "".join(f", {name}={value}" for name, value, default in (
            ("batch", self.batch, ()), ("trans_a", self.trans_a, False), ("trans_b", self.trans_b, False))
            if value != default)
        q = f", quant={self.quant}" if self.quant else ""
        return f"Matmul(m={self.m}, n={self.n}, k={self.k}{extra}{_dtype_repr(self)}{q})"


class Gemm(Matmul):
    """ONNX's (and BLAS's) Gemm ``Y = alpha * op(A) @ op(B) + beta * C``: the Contraction ``Y[i,j] +=
    A[i,k] * B[k,j]`` with bias C and scales alpha, beta. A is ``(m, k)`` (``(k, m)`` if ``trans_a``), B
    ``(k, n)`` (``(n, k)`` if ``trans_b``), Y ``(m, n)``; C (called as ``kernel(A, B, C)``) has
    ``c_shape``, broadcast to ``(m, n)``: ``(m, n)``, ``(n,)``, ``(1, n)``, ``(m, 1)``, ``(1,)`` or
    ``(1, 1)``; ``c_shape=None``: no C (``Y = alpha * op(A) @ op(B)``).

    Dims ``i, j, k`` as Matmul's; letters ``MK``, ``KN``, ``MN`` (C: the trailing ones of ``MN``). The
    kernel adds C in the nest (alpha = beta = 1) or forms ``alpha * sum + beta * C`` in a pass after it.
    """

    def __init__(self, m: int, n: int, k: int, trans_a: bool = False, trans_b: bool = False,
                 alpha: float = 1.0, beta: float = 1.0, c_shape="mn", dtype: str = "float32",
                 quant: Optional["QuantSpec"] = None, *, out_dtype: str = "float32"):
        if quant is not None:
            raise ValueError("a Gemm is not quantized (got quant=...): ONNX has no quantized Gemm, and "
                             "onnxruntime's QGemm adds an int32 C broadcast over rows to the accumulators "
                             "and scales the sum by alpha, where the quantized kernels add a bias per output "
                             "channel and scale by x_scale * w_scale; quantize a Matmul, whose bias-free "
                             "output the quantized kernels scale")
        self._shape(m, n, k, (), trans_a, trans_b)
        _dtype(dtype, quant)
        alpha, beta = _real(alpha, "alpha"), _real(beta, "beta")
        shapes = {(self.m, self.n), (self.n,), (1, self.n), (self.m, 1), (1,), (1, 1)}
        c_shape = (self.m, self.n) if c_shape == "mn" else c_shape
        if c_shape is not None and (not isinstance(c_shape, (tuple, list)) or tuple(c_shape) not in shapes):
            raise ValueError(f"c_shape {c_shape!r} does not broadcast to (m, n) = {(self.m, self.n)}: "
                             f"allowed "
                             f"{', '.join(map(str, sorted(shapes, key=len)))} or None (no C)")
        self.c_shape = None if c_shape is None else tuple(int(v) for v in c_shape)
        self._contract("Y", dtype, None, self.c_shape, out_dtype, alpha=alpha, beta=beta)
        self.arguments = dict(m=self.m, n=self.n, k=self.k, trans_a=self.trans_a, trans_b=self.trans_b,
                              alpha=self.alpha, beta=self.beta, c_shape=self.c_shape, dtype=self.dtype,
                              **_out_argument(self))

    def __repr__(self) -> str:
        extra = "".join(f", {name}={value}" for name, value, default in (
            ("trans_a", self.trans_a, False), ("trans_b", self.trans_b, False), ("alpha", self.alpha, 1.0),
            ("beta", self.beta, 1.0), ("c_shape", self.c_shape, (self.m, self.n))) if value != default)
        return f"Gemm(m={self.m}, n={self.n}, k={self.k}{extra}{_dtype_repr(self)})"
