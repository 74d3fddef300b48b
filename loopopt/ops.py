"""Operations as polyhedral objects: iteration domain, accesses, dependences, reference.

An op is one reduction statement ``out[...] += in0[...] * in1[...]`` over a box of
named dimensions, minus the instances excluded by ``guards`` (the padding taps of a
convolution). Its accesses are quasi-affine expressions of the dimensions.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Optional

import islpy as isl
import numpy as np

from .bf16 import BFLOAT16, bf16_values
from .buffers import available_memory, check_memory
from .expr import Bound, Expr, Var
from .quant import qconv2d_accumulators, qmatmul_accumulators
from .reference import conv2d_reference, matmul_reference

if TYPE_CHECKING:
    from .quant import QuantSpec

STATEMENT = "S"
DTYPES = ("float32", BFLOAT16)   # element types of a float op's inputs (a quantized op: quant=QuantSpec)
REFERENCE_BLOCK_BYTES = 256 * 2**20   # verification computes the reference in blocks of about this size


@dataclass(frozen=True)
class Window:
    """One sliding-window axis of an op: dim ``tap_dim`` runs over ``taps`` filter positions of an
    input of ``size``, dim ``out_dim`` over ``out`` output positions (input position
    ``out_dim * stride - pad + tap_dim * dilation``)."""

    out_dim: str
    tap_dim: str
    out: int
    taps: int
    stride: int
    pad: int
    dilation: int
    size: int

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
        """Constraints beyond the box that define the domain (padding taps excluded)."""
        return ()

    @property
    def tensors(self) -> tuple[str, ...]:
        return self.inputs + (self.output,)

    @property
    def bias_tensor(self) -> Optional[str]:
        """The name of the bias tensor (one value per output channel), or None without bias."""
        return self.BIAS if self.bias else None

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
        raise NotImplementedError

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

    def reference_blocks(self) -> list[slice]:
        """Slices of the leading axis of the activations and the output (a conv's batch, a matmul's
        rows) whose reference takes about ``REFERENCE_BLOCK_BYTES`` each (at least one row);
        MemoryLimitError if one row needs more memory than is available."""
        check_memory(f"the reference of {self!r} (one row of it)", {"reference": self.reference_bytes(1)})
        budget = min(REFERENCE_BLOCK_BYTES, available_memory()[0])
        per_row = self.reference_bytes(1) - self.reference_bytes(0)
        rows = max(1, (budget - self.reference_bytes(0)) // per_row)
        total = self.tensor(self.output).shape[0]
        return [slice(start, min(start + rows, total)) for start in range(0, total, rows)]


def _count(domain: isl.Set) -> int:
    card = domain.card()
    text = card.to_str()
    return int(text.strip("{} ").split()[0]) if "{" in text else int(text)


def _maps(union: isl.UnionMap) -> list[isl.Map]:
    maps: list[isl.Map] = []
    union.foreach_map(maps.append)
    return maps


def _pair(value, what: str) -> tuple[int, int]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value), int(value)
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
        return int(value[0]), int(value[1])
    raise TypeError(f"{what} must be an int or a pair of ints, got {value!r}")


def _positive(value, what: str) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
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


class Conv2d(Op):
    """2D convolution with PyTorch's semantics: ``O[n,k,oh,ow] += I[n,c',ih,iw] * W[k,c,kh,kw]``.

    ``c`` runs over the input channels of ``k``'s group, ``c' = (k // (K/groups)) * (C/groups) + c``,
    ``ih = oh*stride_h - pad_h + kh*dil_h`` and likewise ``iw``.
    """

    inputs = ("I", "W")
    output = "O"
    channel_dim = "k"
    reduction_channel_dim = "c"
    weight_channel_axis = 0
    output_channel_axis = 1

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, batch: int = 1,
                 height: int = 56, width: int = 56, dtype: str = "float32",
                 quant: Optional["QuantSpec"] = None):
        self.in_channels = _positive(in_channels, "in_channels")
        self.out_channels = _positive(out_channels, "out_channels")
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride = _pair(stride, "stride")
        self.padding = _pair(padding, "padding")
        self.dilation = _pair(dilation, "dilation")
        self.groups = _positive(groups, "groups")
        self.batch = _positive(batch, "batch")
        self.height = _positive(height, "height")
        self.width = _positive(width, "width")
        for what, pair, low in (("kernel_size", self.kernel_size, 1), ("stride", self.stride, 1),
                                ("dilation", self.dilation, 1), ("padding", self.padding, 0)):
            if min(pair) < low:
                raise ValueError(f"{what} must be >= {low}, got {pair}")
        if not isinstance(bias, bool):
            raise TypeError(f"bias must be True or False, got {bias!r}")
        self.bias = bias
        for what, channels in (("in_channels", self.in_channels), ("out_channels", self.out_channels)):
            if channels % self.groups:
                raise ValueError(f"{what}={channels} is not divisible by groups={self.groups}")
        self.dtype = _dtype(dtype, quant)
        self.quant = quant
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = self.kernel_size, self.stride, self.padding, self.dilation
        span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
        if span_h > self.height + 2 * ph or span_w > self.width + 2 * pw:
            raise ValueError(
                f"kernel_size={self.kernel_size} with dilation={self.dilation} spans {span_h}x{span_w}, "
                f"larger than the padded input {self.height + 2 * ph}x{self.width + 2 * pw}")
        self.out_height = (self.height + 2 * ph - span_h) // sh + 1
        self.out_width = (self.width + 2 * pw - span_w) // sw + 1
        cg = self.in_channels // self.groups
        self.dims = (("n", self.batch), ("k", self.out_channels), ("oh", self.out_height),
                     ("ow", self.out_width), ("c", cg), ("kh", kh), ("kw", kw))
        self.reduction_dims = frozenset({"c", "kh", "kw"})

    def __repr__(self) -> str:
        extra = "".join(f", {name}={value}" for name, value, default in (
            ("stride", self.stride, (1, 1)), ("padding", self.padding, (0, 0)),
            ("dilation", self.dilation, (1, 1)), ("groups", self.groups, 1)) if value != default)
        q = f", quant={self.quant}" if self.quant else ""
        return (f"Conv2d({self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}{extra}, "
                f"bias={self.bias}, batch={self.batch}, height={self.height}, width={self.width}"
                f"{_dtype_repr(self)}{q})")

    def tensor(self, name: str) -> TensorInfo:
        kh, kw = self.kernel_size
        input_shape = (self.batch, self.in_channels, self.height, self.width)
        weight_shape = (self.out_channels, self.in_channels // self.groups, kh, kw)
        output_shape = (self.batch, self.out_channels, self.out_height, self.out_width)
        infos = {
            "I": TensorInfo("I", input_shape, "NCHW", "input", "NCHW"),
            "W": TensorInfo("W", weight_shape, "OIHW", "input", "OIHW"),
            "O": TensorInfo("O", output_shape, "NCHW", "output", "NCHW"),
            "B": TensorInfo("B", (self.out_channels,), "C", "bias", "C"),
        }
        if name not in infos:
            raise ValueError(f"Conv2d has no tensor {name!r}: its tensors are I, W, O, B")
        return infos[name]

    @property
    def windows(self) -> tuple[Window, ...]:
        return tuple(Window(*fields) for fields in zip(
            ("oh", "ow"), ("kh", "kw"), (self.out_height, self.out_width), self.kernel_size, self.stride,
            self.padding, self.dilation, (self.height, self.width)))

    def with_quant(self, quant: Optional["QuantSpec"]) -> "Conv2d":
        return Conv2d(self.in_channels, self.out_channels, self.kernel_size, stride=self.stride,
                      padding=self.padding, dilation=self.dilation, groups=self.groups, bias=self.bias,
                      batch=self.batch, height=self.height, width=self.width, dtype=self.dtype, quant=quant)

    def integer_accumulators(self, xq: np.ndarray, wq: np.ndarray, x_zero_point, w_zero_point) -> np.ndarray:
        return qconv2d_accumulators(xq, wq, x_zero_point, w_zero_point, self.stride, self.padding,
                                    self.dilation, self.groups)

    def input_hw(self) -> tuple[Expr, Expr]:
        rows, cols = self.windows
        return rows.input_index, cols.input_index

    def index(self, name: str) -> tuple[Expr, ...]:
        v = {n: Var(n) for n in self.dim_names}
        kg, cg = self.out_channels // self.groups, self.in_channels // self.groups
        if name == "I":
            channel = v["c"] if self.groups == 1 else (v["k"] // kg) * cg + v["c"]
            return (v["n"], channel) + self.input_hw()
        if name == "W":
            return v["k"], v["c"], v["kh"], v["kw"]
        if name == "O":
            return v["n"], v["k"], v["oh"], v["ow"]
        raise ValueError(f"Conv2d has no accessed tensor {name!r}: I, W, O")

    @property
    def guards(self) -> tuple[Bound, ...]:
        ih, iw = self.input_hw()
        guards = []
        if self.padding[0]:
            guards.append(Bound(ih, 0, self.height))
        if self.padding[1]:
            guards.append(Bound(iw, 0, self.width))
        return tuple(guards)

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        arrays = {t: rng.standard_normal(self.tensor(t).shape).astype(np.float32) for t in ("I", "W")}
        if self.bias:
            arrays["B"] = rng.standard_normal(self.out_channels).astype(np.float32)
        return arrays

    def reference(self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        """float64 reference output ``O[N,K,OH,OW]`` (bfloat16: of the inputs rounded to bf16)."""
        x, w = self.operand_values(x, w)
        return conv2d_reference(x, w, b, stride=self.stride, padding=self.padding,
                                dilation=self.dilation, groups=self.groups)

    @property
    def reference_sizes(self) -> tuple[int, int, int]:
        padded = (self.height + 2 * self.padding[0]) * (self.width + 2 * self.padding[1])
        kh, kw = self.kernel_size
        return (self.in_channels * padded, self.out_channels * self.out_height * self.out_width,
                self.out_channels * self.in_channels // self.groups * kh * kw)


class Matmul(Op):
    """Matrix multiply ``C[i,j] += A[i,k] * B[k,j]`` with A of shape (m, k), B (k, n)."""

    inputs = ("A", "B")
    output = "C"
    channel_dim = "j"
    reduction_channel_dim = "k"
    weight_channel_axis = 1
    output_channel_axis = 1

    def __init__(self, m: int, n: int, k: int, dtype: str = "float32",
                 quant: Optional["QuantSpec"] = None):
        self.m, self.n, self.k = (_positive(v, name) for v, name in ((m, "m"), (n, "n"), (k, "k")))
        self.dtype = _dtype(dtype, quant)
        self.quant = quant
        self.dims = (("i", self.m), ("j", self.n), ("k", self.k))
        self.reduction_dims = frozenset({"k"})

    def __repr__(self) -> str:
        q = f", quant={self.quant}" if self.quant else ""
        return f"Matmul(m={self.m}, n={self.n}, k={self.k}{_dtype_repr(self)}{q})"

    def tensor(self, name: str) -> TensorInfo:
        infos = {"A": TensorInfo("A", (self.m, self.k), "MK", "input", "MK"),
                 "B": TensorInfo("B", (self.k, self.n), "KN", "input", "KN"),
                 "C": TensorInfo("C", (self.m, self.n), "MN", "output", "MN")}
        if name not in infos:
            raise ValueError(f"Matmul has no tensor {name!r}: its tensors are A, B, C")
        return infos[name]

    def index(self, name: str) -> tuple[Expr, ...]:
        i, j, k = Var("i"), Var("j"), Var("k")
        table = {"A": (i, k), "B": (k, j), "C": (i, j)}
        if name not in table:
            raise ValueError(f"Matmul has no tensor {name!r}: its tensors are A, B, C")
        return table[name]

    def with_quant(self, quant: Optional["QuantSpec"]) -> "Matmul":
        return Matmul(self.m, self.n, self.k, dtype=self.dtype, quant=quant)

    def integer_accumulators(self, xq: np.ndarray, wq: np.ndarray, x_zero_point, w_zero_point) -> np.ndarray:
        return qmatmul_accumulators(xq, wq, x_zero_point, w_zero_point)

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {t: rng.standard_normal(self.tensor(t).shape).astype(np.float32) for t in ("A", "B")}

    def reference(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """float64 reference ``C = A @ B`` (bfloat16: of the inputs rounded to bf16)."""
        return matmul_reference(*self.operand_values(a, b))

    @property
    def reference_sizes(self) -> tuple[int, int, int]:
        return self.k, self.n, self.k * self.n
