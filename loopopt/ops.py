"""Operations as polyhedral objects: iteration domain, accesses, dependences, reference.

An op is one reduction statement ``out[...] += in0[...] * in1[...]`` over a box of
named dimensions, minus the instances excluded by ``guards`` (the padding taps of a
convolution). Its accesses are quasi-affine expressions of the dimensions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Optional

import islpy as isl
import numpy as np

from .bf16 import BFLOAT16, bf16_values
from .buffers import available_memory, check_memory
from .expr import Bound, Const, Expr, Var
from .quant import qconv2d_accumulators, qmatmul_accumulators
from .reference import conv_reference, matmul_reference

if TYPE_CHECKING:
    from .quant import QuantSpec

STATEMENT = "S"
DTYPES = ("float32", BFLOAT16)   # element types of a float op's inputs (a quantized op: quant=QuantSpec)
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
    """Common polyhedral view of a reduction op; subclasses fill in the specifics.

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
    bias: bool = False
    groups: int = 1
    channel_dim: str                 # the dim of the output channels (per-channel parameters)
    reduction_channel_dim: str       # the reduction dim over input channels (a VNNI dot group)
    weight_channel_axis: int         # axis of the output channels in the weights (inputs[1])
    output_channel_axis: int         # axis of the output channels in the output
    BIAS = "B"

    # --- provided by subclasses ------------------------------------------------
    def tensor(self, name: str) -> TensorInfo:
        raise NotImplementedError

    def index(self, name: str) -> tuple[Expr, ...]:
        """The logical index of tensor ``name`` accessed by the statement."""
        raise NotImplementedError

    @property
    def guards(self) -> tuple[Bound, ...]:
        """Constraints beyond the box that define the domain: the taps of a padded window axis
        that fall into the padding are excluded."""
        return tuple(Bound(w.input_index, 0, w.size) for w in self.windows if w.padded)

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
    def scales(self) -> Optional[tuple[float, float]]:
        """``(alpha, beta)`` of an output ``alpha * sum + beta * bias`` (a Gemm's), None for the plain
        ``sum + bias``: the scaled output is formed by a pass after the nest."""
        return None

    @property
    def call_tensors(self) -> tuple[str, ...]:
        """The tensors a call passes, in order: inputs, then the bias if the op has one."""
        return self.inputs + ((self.BIAS,) if self.bias else ())

    @property
    def channels(self) -> int:
        """Number of output channels: the length of the bias and of per-channel parameters."""
        return self.extent(self.channel_dim)

    @property
    def windows(self) -> tuple[Window, ...]:
        """The sliding-window axes (a convolution's rows and columns); () for a GEMM."""
        return ()

    @property
    def output_positions(self) -> int:
        """Output positions per output channel, times the groups: one activation sum each."""
        return int(np.prod(self.tensor(self.output).shape)) // self.channels * self.groups

    def with_quant(self, quant: Optional["QuantSpec"]) -> "Op":
        """The same op shape, quantized as ``quant`` describes (None: float32)."""
        return type(self)(**{**self.arguments, "quant": quant})

    def integer_accumulators(self, xq: np.ndarray, wq: np.ndarray, x_zero_point, w_zero_point) -> np.ndarray:
        """The exact int32 accumulators ``sum (x - zx) * (w - zw[channel])`` of quantized inputs."""
        raise NotImplementedError

    # --- polyhedral view -----------------------------------------------------------
    @property
    def dim_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.dims)

    def extent(self, dim: str) -> int:
        return dict(self.dims)[dim]

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

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Random logical-layout inputs for testing and timing."""
        raise NotImplementedError

    def operand_values(self, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        """The values the kernel multiplies: the inputs as given (float32), or rounded to bfloat16."""
        if self.dtype != BFLOAT16:
            return arrays
        return tuple(bf16_values(a, name) for a, name in zip(arrays, self.inputs))

    def reference(self, *arrays: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def magnitude(self, *arrays: np.ndarray) -> np.ndarray:
        """``sum |terms|`` of each output for non-negative ``arrays`` (the call's): the reference with
        every coefficient made non-negative, what an error bound scales with."""
        return self.reference(*arrays)

    # --- memory of the reference ---------------------------------------------------------
    @property
    def reference_sizes(self) -> tuple[int, int, int]:
        """Elements of one leading row (a conv's batch item, a matmul's row) of the padded
        activations and of the output, and of the weights: what the reference copies."""
        raise NotImplementedError

    def reference_bytes(self, rows: int) -> int:
        """Bytes the reference and the verification against it hold at once for ``rows`` leading
        rows: wide (8-byte) copies of the padded activations and weights, and a few output-sized
        arrays (reference, error bound, error)."""
        activations, outputs, weights = self.reference_sizes
        return 8 * (3 * weights + rows * (2 * activations + 8 * outputs))

    @property
    def leading_rows(self) -> bool:
        """The reference may run on slices of the leading axis of the output: that axis is also the
        leading axis of the first input and no other input's (a conv's batch, a matmul's rows)."""
        first = self.index(self.output)[0]
        return (isinstance(first, Var) and self.index(self.inputs[0])[0] == first
                and all(first.name not in e.variables()
                        for t in self.call_tensors[1:] for e in self.index(t)))

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


def _dtype_repr(op: Op) -> str:
    return f", dtype={op.dtype!r}" if op.dtype != "float32" else ""


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


class ConvNd(Op):
    """Convolution over 1, 2 or 3 spatial dims with PyTorch's semantics, e.g. in 2-D
    ``O[n,k,oh,ow] += I[n,c',ih,iw] * W[k,c,kh,kw]``.

    ``c`` runs over the input channels of ``k``'s group, ``c' = (k // (K/groups)) * (C/groups) + c``,
    ``ih = oh*stride_h - pad_h + kh*dil_h`` and likewise for every spatial dim. The spatial dims
    are lettered ``D, H, W`` (the last ones for fewer dims); their loops are ``o<letter>`` (output
    positions) and ``k<letter>`` (filter taps). Conv1d, Conv2d and Conv3d name the sizes.
    """

    inputs = ("I", "W")
    output = "O"
    channel_dim = "k"
    reduction_channel_dim = "c"
    weight_channel_axis = 0
    output_channel_axis = 1
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
        symmetric = all(lo == hi for lo, hi in self.pads)
        self.padding = tuple(lo for lo, _ in self.pads) if symmetric else self.pads
        self.groups = _positive(groups, "groups")
        self.batch = _positive(batch, "batch")
        self.sizes = tuple(_positive(v, name) for v, name in zip(sizes, self.SIZES))
        self.bias = _flag(bias, "bias")
        for what, channels in (("in_channels", self.in_channels), ("out_channels", self.out_channels)):
            if channels % self.groups:
                raise ValueError(f"{what}={channels} is not divisible by groups={self.groups}")
        self.dtype = _dtype(dtype, quant)
        self.quant = quant
        spans = tuple(d * (k - 1) + 1 for k, d in zip(self.kernel_size, self.dilation))
        padded = tuple(size + lo + hi for size, (lo, hi) in zip(self.sizes, self.pads))
        if any(span > size for span, size in zip(spans, padded)):
            raise ValueError(
                f"kernel_size={self.kernel_size} with dilation={self.dilation} spans "
                f"{'x'.join(map(str, spans))}, larger than the padded input {'x'.join(map(str, padded))}")
        self.out_sizes = tuple((size - span) // s + 1 for size, span, s in zip(padded, spans, self.stride))
        self.arguments = dict(in_channels=self.in_channels, out_channels=self.out_channels,
                              kernel_size=self.kernel_size, stride=self.stride, padding=self.pads,
                              dilation=self.dilation, groups=self.groups, bias=self.bias, batch=self.batch,
                              **dict(zip(self.SIZES, self.sizes)), dtype=self.dtype)
        self.letters = SPATIAL_LETTERS[len(SPATIAL_LETTERS) - spatial:]
        outs = tuple((f"o{x.lower()}", size) for x, size in zip(self.letters, self.out_sizes))
        taps = tuple((f"k{x.lower()}", size) for x, size in zip(self.letters, self.kernel_size))
        self.dims = ((("n", self.batch), ("k", self.out_channels)) + outs
                     + (("c", self.in_channels // self.groups),) + taps)
        self.reduction_dims = frozenset({"c"} | {name for name, _ in taps})

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

    def tensor(self, name: str) -> TensorInfo:
        activations, weights = "NC" + self.letters, "OI" + self.letters
        infos = {
            "I": TensorInfo("I", (self.batch, self.in_channels) + self.sizes, activations, "input",
                            activations),
            "W": TensorInfo("W", (self.out_channels, self.in_channels // self.groups) + self.kernel_size,
                            weights, "input", weights),
            "O": TensorInfo("O", (self.batch, self.out_channels) + self.out_sizes, activations, "output",
                            activations),
            "B": TensorInfo("B", (self.out_channels,), "C", "bias", "C"),
        }
        if name not in infos:
            raise ValueError(f"{type(self).__name__} has no tensor {name!r}: its tensors are I, W, O, B")
        return infos[name]

    @property
    def windows(self) -> tuple[Window, ...]:
        outs, taps = self.dim_names[2:2 + len(self.sizes)], self.dim_names[3 + len(self.sizes):]
        fields = zip(outs, taps, self.out_sizes, self.kernel_size, self.stride, self.pads, self.dilation,
                     self.sizes)
        return tuple(Window(out, tap, o, t, s, lo, d, size, hi)
                     for out, tap, o, t, s, (lo, hi), d, size in fields)

    def integer_accumulators(self, xq: np.ndarray, wq: np.ndarray, x_zero_point, w_zero_point) -> np.ndarray:
        return qconv2d_accumulators(xq, wq, x_zero_point, w_zero_point, self.stride, self.pads,
                                    self.dilation, self.groups)

    def index(self, name: str) -> tuple[Expr, ...]:
        n, k, c = Var("n"), Var("k"), Var("c")
        kg, cg = self.out_channels // self.groups, self.in_channels // self.groups
        windows = self.windows
        channel = c if self.groups == 1 else (k // kg) * cg + c
        table = {"I": (n, channel) + tuple(w.input_index for w in windows),
                 "W": (k, c) + tuple(Var(w.tap_dim) for w in windows),
                 "O": (n, k) + tuple(Var(w.out_dim) for w in windows), "B": (k,)}
        if name not in table:
            raise ValueError(f"{type(self).__name__} has no tensor {name!r}: its tensors are I, W, O, B")
        return table[name]

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        arrays = {t: rng.standard_normal(self.tensor(t).shape).astype(np.float32) for t in ("I", "W")}
        if self.bias:
            arrays["B"] = rng.standard_normal(self.out_channels).astype(np.float32)
        return arrays

    def reference(self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        """float64 reference output ``O[N,K,*OS]`` (bfloat16: of the inputs rounded to bf16)."""
        x, w = self.operand_values(x, w)
        return conv_reference(x, w, b, stride=self.stride, padding=self.pads, dilation=self.dilation,
                              groups=self.groups)

    @property
    def reference_sizes(self) -> tuple[int, int, int]:
        padded = math.prod(size + lo + hi for size, (lo, hi) in zip(self.sizes, self.pads))
        return (self.in_channels * padded, self.out_channels * math.prod(self.out_sizes),
                self.out_channels * self.in_channels // self.groups * math.prod(self.kernel_size))


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


class Matmul(Op):
    """Matrix multiply ``C[b..., i, j] += A[b..., i, k] * B[b..., k, j]``: A is ``batch + (m, k)``
    (``(k, m)`` if ``trans_a``), B ``batch + (k, n)`` (``(n, k)`` if ``trans_b``), C ``batch + (m, n)``.

    Batch dims are loops ``b`` (one) or ``b0, b1, ...`` and letters ``B, D, E, ...`` of the layouts
    (A ``MK``, B ``KN``, C ``MN`` after them).
    """

    inputs = ("A", "B")
    output = "C"
    channel_dim = "j"
    reduction_channel_dim = "k"

    def __init__(self, m: int, n: int, k: int, batch=(), trans_a: bool = False, trans_b: bool = False,
                 dtype: str = "float32", quant: Optional["QuantSpec"] = None):
        self.m, self.n, self.k = (_positive(v, name) for v, name in ((m, "m"), (n, "n"), (k, "k")))
        if _integer(batch):
            batch = (batch,)
        if not isinstance(batch, (tuple, list)) or len(batch) > len(BATCH_LETTERS):
            raise TypeError(f"batch must be an int or a tuple of at most {len(BATCH_LETTERS)} ints, "
                            f"got {batch!r}")
        self.batch = tuple(_positive(v, "batch") for v in batch)
        self.trans_a, self.trans_b = _flag(trans_a, "trans_a"), _flag(trans_b, "trans_b")
        self.dtype = _dtype(dtype, quant)
        self.quant = quant
        self.arguments = dict(m=self.m, n=self.n, k=self.k, batch=self.batch, trans_a=self.trans_a,
                              trans_b=self.trans_b, dtype=self.dtype)
        names = ("b",) if len(self.batch) == 1 else tuple(f"b{i}" for i in range(len(self.batch)))
        self.batch_dims = tuple(zip(names, self.batch))
        self.dims = self.batch_dims + (("i", self.m), ("j", self.n), ("k", self.k))
        self.reduction_dims = frozenset({"k"})
        self.weight_channel_axis = len(self.batch) + (0 if self.trans_b else 1)
        self.output_channel_axis = len(self.batch) + 1

    def __repr__(self) -> str:
        extra = "".join(f", {name}={value}" for name, value, default in (
            ("batch", self.batch, ()), ("trans_a", self.trans_a, False), ("trans_b", self.trans_b, False))
            if value != default)
        q = f", quant={self.quant}" if self.quant else ""
        return f"Matmul(m={self.m}, n={self.n}, k={self.k}{extra}{_dtype_repr(self)}{q})"

    def _axes(self) -> dict[str, tuple[tuple[str, str, int], ...]]:
        """Per tensor: (loop, letter, extent) of each logical axis."""
        batch = tuple((name, letter, size) for (name, size), letter in zip(self.batch_dims, BATCH_LETTERS))
        i, j, k = ("i", "M", self.m), ("j", "N", self.n), ("k", "K", self.k)
        return {"A": batch + ((k, i) if self.trans_a else (i, k)),
                "B": batch + ((j, k) if self.trans_b else (k, j)),
                self.output: batch + (i, j)}

    def _axes_of(self, name: str) -> tuple[tuple[str, str, int], ...]:
        axes = self._axes()
        if name not in axes:
            raise ValueError(f"{type(self).__name__} has no tensor {name!r}: its tensors are "
                             f"{', '.join(axes)}")
        return axes[name]

    def tensor(self, name: str) -> TensorInfo:
        axes = self._axes_of(name)
        letters = "".join(letter for _, letter, _ in axes)
        role = "output" if name == self.output else "bias" if name == self.bias_tensor else "input"
        return TensorInfo(name, tuple(size for _, _, size in axes), letters, role, letters)

    def index(self, name: str) -> tuple[Expr, ...]:
        """Each axis' dim; an axis of extent 1 of the bias (broadcast) is indexed 0."""
        broadcast = name == self.bias_tensor
        return tuple(Const(0) if broadcast and size == 1 else Var(loop)
                     for loop, _, size in self._axes_of(name))

    def integer_accumulators(self, xq: np.ndarray, wq: np.ndarray, x_zero_point, w_zero_point) -> np.ndarray:
        return qmatmul_accumulators(xq, wq, x_zero_point, w_zero_point, self.trans_a, self.trans_b)

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {t: rng.standard_normal(self.tensor(t).shape).astype(np.float32) for t in self.call_tensors}

    def reference(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """float64 reference ``C = op(A) @ op(B)`` (bfloat16: of the inputs rounded to bf16)."""
        return matmul_reference(*self.operand_values(a, b), trans_a=self.trans_a, trans_b=self.trans_b)

    @property
    def reference_sizes(self) -> tuple[int, int, int]:
        rows = self.tensor(self.output).shape[0]
        return (math.prod(self.tensor("A").shape) // rows, math.prod(self.tensor(self.output).shape) // rows,
                math.prod(self.tensor("B").shape))


class Gemm(Matmul):
    """ONNX's (and BLAS's) Gemm ``Y = alpha * op(A) @ op(B) + beta * C``: A is ``(m, k)`` (``(k, m)`` if
    ``trans_a``), B ``(k, n)`` (``(n, k)`` if ``trans_b``), Y ``(m, n)``; C (the op's bias, called
    as ``kernel(A, B, C)``) has ``c_shape``, broadcast to ``(m, n)``: ``(m, n)``, ``(n,)``, ``(1, n)``,
    ``(m, 1)``, ``(1,)`` or ``(1, 1)``; ``c_shape=None``: no C (``Y = alpha * op(A) @ op(B)``).

    Dims ``i, j, k`` as Matmul's; letters ``MK``, ``KN``, ``MN`` (C: the trailing ones of ``MN``). The
    kernel adds C in the nest (alpha = beta = 1) or forms ``alpha * sum + beta * C`` in a pass after it.
    """

    output = "Y"
    BIAS = "C"

    def __init__(self, m: int, n: int, k: int, trans_a: bool = False, trans_b: bool = False,
                 alpha: float = 1.0, beta: float = 1.0, c_shape="mn", dtype: str = "float32",
                 quant: Optional["QuantSpec"] = None):
        if quant is not None:
            raise ValueError("a Gemm is not quantized (got quant=...): quantize a Matmul, whose bias-free "
                             "output the quantized kernels scale")
        super().__init__(m, n, k, trans_a=trans_a, trans_b=trans_b, dtype=dtype)
        self.alpha, self.beta = _real(alpha, "alpha"), _real(beta, "beta")
        shapes = {(self.m, self.n), (self.n,), (1, self.n), (self.m, 1), (1,), (1, 1)}
        c_shape = (self.m, self.n) if c_shape == "mn" else c_shape
        if c_shape is not None and (not isinstance(c_shape, (tuple, list)) or tuple(c_shape) not in shapes):
            raise ValueError(f"c_shape {c_shape!r} does not broadcast to (m, n) = {(self.m, self.n)}: "
                             f"allowed "
                             f"{', '.join(map(str, sorted(shapes, key=len)))} or None (no C)")
        self.c_shape = None if c_shape is None else tuple(int(v) for v in c_shape)
        self.bias = self.c_shape is not None
        self.arguments = dict(m=self.m, n=self.n, k=self.k, trans_a=self.trans_a, trans_b=self.trans_b,
                              alpha=self.alpha, beta=self.beta, c_shape=self.c_shape, dtype=self.dtype)

    def __repr__(self) -> str:
        extra = "".join(f", {name}={value}" for name, value, default in (
            ("trans_a", self.trans_a, False), ("trans_b", self.trans_b, False), ("alpha", self.alpha, 1.0),
            ("beta", self.beta, 1.0), ("c_shape", self.c_shape, (self.m, self.n))) if value != default)
        return f"Gemm(m={self.m}, n={self.n}, k={self.k}{extra}{_dtype_repr(self)})"

    def _axes(self) -> dict[str, tuple[tuple[str, str, int], ...]]:
        axes = super()._axes()
        if self.c_shape is not None:
            axes[self.BIAS] = axes[self.output][len(axes[self.output]) - len(self.c_shape):]
            axes[self.BIAS] = tuple((loop, letter, size) for (loop, letter, _), size
                                    in zip(axes[self.BIAS], self.c_shape))
        return axes

    @property
    def scales(self) -> Optional[tuple[float, float]]:
        if self.alpha == 1.0 and (self.beta == 1.0 or not self.bias):
            return None
        return self.alpha, self.beta if self.bias else 0.0

    def reference(self, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
        """float64 reference ``Y = alpha * op(A) @ op(B) + beta * C`` (bfloat16: A and B rounded to bf16)."""
        return self._scaled(self.alpha, self.beta, super().reference(a, b), c)

    def magnitude(self, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
        return self._scaled(abs(self.alpha), abs(self.beta), super().reference(a, b), c)

    @staticmethod
    def _scaled(alpha: float, beta: float, product: np.ndarray, c: np.ndarray | None) -> np.ndarray:
        return alpha * product + (0.0 if c is None else beta * np.asarray(c, np.float64))


def _real(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value):
        raise TypeError(f"{what} must be a finite real number, got {value!r}")
    return float(value)
