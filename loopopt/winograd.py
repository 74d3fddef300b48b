"""Winograd convolution F(m x m, 3 x 3) (Lavin & Gray, 2016) as a pipeline of schedulable ops.

A 2-D fp32 convolution with a 3x3 kernel, stride 1 and dilation 1 is computed on tiles of
``m x m`` outputs from ``(m+2) x (m+2)`` input tiles:

    Y_tile = A^T [ sum_c (G g_kc G^T) . (B^T d_c B) ] A   (+ bias)

Every stage but the filter transform is a loopopt op with its own ``Schedule`` (so each is
transformed with the usual primitives and compiled by codegen on any ISA):

1. ``input_rows``  ``X[a,n,th,tw,j,c] += BT[a,i] * I[n,c,th*m+i-pad,tw*m+j-pad]``
   (a ``Contraction`` with the constant ``B^T``; the input's padding and the tiles that run past
   its end are the contraction's guards: zeros, never read);
2. ``input_cols``  ``V[a,b,n,th,tw,c] += X[a,n,th,tw,j,c] * BT[b,j]``;
3. ``gemm``        a ``Matmul(batch=((m+2)**2,))``: ``M[t,p,k] += V[t,p,c] * U[t,c,k]``;
4. ``output_rows`` ``Z[r,b,n,th,tw,k] += AT[r,a] * M[a,b,n,th,tw,k]``;
5. ``output_cols`` ``O[n,th,r,tw,s,k] += Z[r,b,n,th,tw,k] * AT[s,b] + B[k]``.

The transforms are written as dense contractions with constant matrices rather than a generated
transform stage, so that they need no code of their own and every primitive applies to them; the
price is the multiplications by the zeros of ``B^T`` / ``A^T`` (a few percent of the GEMM's work
for C, K >= 64). The filter transform ``U = G g G^T`` is done once, in float64, in ``prepare``.
Intermediate tensors keep their default (row-major) layouts, the contract between one stage's
output and the next stage's input. The output is written per whole tile and cropped (and moved
to NCHW) in ``output``, outside the timed run, like any layout unpacking.

A quantized op gets the exact int8 F(2x2, 3x3) of ``winograd_int8`` instead (``plan`` decides; the
checks of the kernel size, stride, dilation and groups here are shared).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction as F
from typing import TYPE_CHECKING, Any

import numpy as np

from .buffers import aligned_zeros, check_memory
from .ops import Contraction, Matmul, Op
from .schedule import Schedule
from .winograd_int8 import TILE as INT8_TILE
from .winograd_int8 import Int8WinogradKernel, Int8WinogradPlan, call_arrays
from .winograd_int8 import refusal as int8_refusal

if TYPE_CHECKING:
    from .kernel import Buffers, Kernel

TILES = (2, 4)
BLOCK_MARK = ", GEMM "       # algorithm_name of a plan with its GEMM block: "winograd F(2x2,3x3), GEMM 7x48"
LANES = 16

# Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks" (2016), section 4.1 / 4.2.
MATRICES: dict[int, dict[str, list[list[Any]]]] = {
    2: {"BT": [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        "G": [[1, 0, 0], [F(1, 2), F(1, 2), F(1, 2)], [F(1, 2), F(-1, 2), F(1, 2)], [0, 0, 1]],
        "AT": [[1, 1, 1, 0], [0, 1, -1, -1]]},
    4: {"BT": [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
               [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        "G": [[F(1, 4), 0, 0], [F(-1, 6), F(-1, 6), F(-1, 6)], [F(-1, 6), F(1, 6), F(-1, 6)],
              [F(1, 24), F(1, 12), F(1, 6)], [F(1, 24), F(-1, 12), F(1, 6)], [0, 0, 1]],
        "AT": [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]},
}


def transform_matrices(m: int) -> dict[str, np.ndarray]:
    """``BT`` ((m+2) x (m+2)), ``G`` ((m+2) x 3) and ``AT`` (m x (m+2)) of F(m x m, 3 x 3), float64."""
    return {name: np.array([[float(v) for v in row] for row in rows]) for name, rows in MATRICES[m].items()}


class WinogradError(ValueError):
    """An op Winograd F(m x m, 3 x 3) does not apply to; the message names the parameter."""


def algorithm_name(m: int, block: tuple[int, int] | None = None) -> str:
    """How measure, compare and tune name F(m x m, 3 x 3): ``"winograd F(4x4,3x3)"``; with ``block``
    (``gemm_rows, gemm_cols``), the name of that plan in a tuning log: ``"winograd F(2x2,3x3), GEMM
    7x48"``."""
    name = f"winograd F({m}x{m},3x3)"
    return name if block is None else f"{name}{BLOCK_MARK}{block[0]}x{block[1]}"


def tiles(op: Op) -> tuple[int, ...]:
    """The output tile sizes ``m`` Winograd offers ``op``: 4 and 2 for float32, 2 for a quantized op
    (``winograd_int8``: F(4x4,3x3) cannot be exact in int32)."""
    return (INT8_TILE,) if op.quant is not None else TILES


def from_name(op: Op, name: str) -> "AnyPlan | None":
    """The plan of ``op`` that ``name`` (an ``algorithm_name``, with or without a GEMM block) names,
    None for any other text (a tuning trial's schedule TOML)."""
    for m in TILES:
        base = algorithm_name(m)
        if name == base:
            return plan(op, m)
        if name.startswith(base + BLOCK_MARK):
            rows, cols = name.removeprefix(base + BLOCK_MARK).split("x")
            return plan(op, m, int(rows), int(cols))
    return None


def refusal(op: Op) -> str:
    """Why Winograd does not apply to ``op`` (the WinogradError message), "" when it does."""
    try:
        _check(op, tiles(op)[-1])
    except WinogradError as err:
        return str(err)
    return ""


def _check(op: Op, m: int) -> None:
    if m not in TILES:
        raise WinogradError(f"m (output tile size) must be one of {TILES}, got {m!r}")
    if op.dtype != "float32":
        raise WinogradError(f"winograd takes dtype float32, got dtype={op.dtype!r}")
    windows = op.windows
    if len(windows) != 2 or op.tensor(op.inputs[0]).letters != "NCHW":
        raise WinogradError(f"winograd takes a 2-D convolution (NCHW, 2 sliding windows), got {op!r} "
                            f"with {len(windows)} window(s)")
    if op.groups != 1:
        raise WinogradError(f"winograd takes groups=1, got groups={op.groups}")
    for name, values, wanted in (("kernel_size", tuple(w.taps for w in windows), 3),
                                 ("stride", tuple(w.stride for w in windows), 1),
                                 ("dilation", tuple(w.dilation for w in windows), 1)):
        if any(v != wanted for v in values):
            raise WinogradError(f"winograd F({m}x{m},3x3) takes {name}={wanted} on both spatial dims, "
                                f"got {name}={values}")
    if op.quant is not None and int8_refusal(op, m):
        raise WinogradError(int8_refusal(op, m))


@dataclass(frozen=True)
class Stage:
    """One stage of the pipeline: its name, its schedule, and where its inputs come from
    (a tensor of the call, a constant transform matrix, or the previous stage's output)."""

    name: str
    schedule: Schedule
    sources: tuple[str, ...]        # per call tensor of its op: "x", "U", "bias", "BT", "AT" or "prev"

    @property
    def op(self) -> Op:
        """The stage's op (its schedule's)."""
        return self.schedule.op


def _sized(op: Op, m: int) -> dict[str, int]:
    """The pipeline's extents: batch, channels, input and output sizes, tiles per axis, pads."""
    n, c, h, w = op.tensor(op.inputs[0]).shape
    (wh, ww) = op.windows
    return dict(n=n, c=c, k=op.channels, h=h, w=w, oh=wh.out, ow=ww.out, th=-(-wh.out // m),
                tw=-(-ww.out // m), ph=wh.pad, pw=ww.pad)


def _register_blocked(schedule: Schedule, rows: str, vector: str, reduction: str, rows_tile: int,
                      lanes: int = LANES) -> Schedule:
    """``rows_tile`` values of ``rows`` times ``lanes`` of ``vector`` kept in registers across the
    ``reduction`` loop (``vector`` vectorized innermost); factors clamped to the extents."""
    fit = lambda loop, f: max(1, min(f, schedule.loop(loop).extent))
    schedule = schedule.tile(**{rows: fit(rows, rows_tile), vector: fit(vector, lanes)})
    outer = [d for d in schedule.loop_names if d not in (f"{rows}_i", f"{vector}_i", reduction)]
    schedule = schedule.reorder(*outer, reduction, f"{rows}_i", f"{vector}_i")
    return schedule.vectorize(f"{vector}_i").register_block(reduction)


def _stages(op: Op, m: int, gemm_rows: int, gemm_cols: int) -> tuple[Stage, ...]:
    """The five stages of F(m x m, 3 x 3) of ``op`` with their default schedules (module docstring)."""
    s = _sized(op, m)
    a = m + 2
    tiles = dict(n=s["n"], th=s["th"], tw=s["tw"])
    rows = Contraction(f"X[a,n,th,tw,j,c] += BT[a,i] * I[n,c,th*{m}+i-{s['ph']},tw*{m}+j-{s['pw']}]",
                       sizes=dict(a=a, **tiles, j=a, c=s["c"], i=a, I=(s["n"], s["c"], s["h"], s["w"])),
                       padding="I")
    cols = Contraction("V[a,b,n,th,tw,c] += X[a,n,th,tw,j,c] * BT[b,j]",
                       sizes=dict(a=a, b=a, **tiles, c=s["c"], j=a))
    gemm = Matmul(s["n"] * s["th"] * s["tw"], s["k"], s["c"], batch=(a * a,))
    out_rows = Contraction("Z[r,b,n,th,tw,k] += AT[r,a] * M[a,b,n,th,tw,k]",
                           sizes=dict(r=m, b=a, **tiles, k=s["k"], a=a))
    out_cols = Contraction("O[n,th,r,tw,s,k] += Z[r,b,n,th,tw,k] * AT[s,b]",
                           sizes={**tiles, "r": m, "s": m, "k": s["k"], "b": a},
                           bias="B[k]" if op.bias else None)
    return (
        Stage("input_rows", _register_blocked(Schedule(rows).layout("I", "NHWC"), "j", "c", "i", a),
              ("BT", "x")),
        Stage("input_cols", _register_blocked(Schedule(cols), "b", "c", "j", a), ("prev", "BT")),
        Stage("gemm", _register_blocked(Schedule(gemm), "i", "j", "k", gemm_rows, gemm_cols), ("prev", "U")),
        Stage("output_rows", _register_blocked(Schedule(out_rows), "r", "k", "a", m), ("AT", "prev")),
        Stage("output_cols", _register_blocked(Schedule(out_cols), "s", "k", "b", m),
              ("prev", "AT") + (("bias",) if op.bias else ())),
    )


class WinogradPlan:
    """Winograd F(m x m, 3 x 3) of a 2-D conv: its stages (each an op with a Schedule), compiled
    with ``compile``; ``gemm_rows`` x ``gemm_cols``: the register block the GEMM stage was built with.
    ``with_stage`` replaces one stage's schedule (a schedule of the same op)."""

    def __init__(self, op: Op, m: int, stages: tuple[Stage, ...], gemm_rows: int, gemm_cols: int):
        self.op, self.m, self.stages = op, m, stages
        self.gemm_rows, self.gemm_cols = gemm_rows, gemm_cols

    @property
    def schedules(self) -> dict[str, Schedule]:
        """Each stage's schedule by stage name, in pipeline order."""
        return {stage.name: stage.schedule for stage in self.stages}

    @property
    def algorithm(self) -> str:
        """``"winograd F(mxm,3x3)"`` (``algorithm_name``)."""
        return algorithm_name(self.m)

    def __repr__(self) -> str:
        return f"<WinogradPlan {self.algorithm} of {self.op!r}: {', '.join(s.name for s in self.stages)}>"

    def with_stage(self, name: str, schedule: Schedule) -> "WinogradPlan":
        """This plan with stage ``name``'s schedule replaced; intermediate tensors must keep their
        default layouts (ValueError naming the tensor otherwise)."""
        names = [s.name for s in self.stages]
        if name not in names:
            raise ValueError(f"no stage {name!r}; the stages are {', '.join(names)}")
        old = self.stages[names.index(name)]
        if repr(schedule.op) != repr(old.op):
            raise ValueError(f"the schedule of stage {name!r} must be a Schedule of {old.op!r}, "
                             f"got one of {schedule.op!r}")
        stages = tuple(Stage(s.name, schedule, s.sources) if s.name == name else s for s in self.stages)
        return WinogradPlan(self.op, self.m, stages, self.gemm_rows, self.gemm_cols)

    def _check_layouts(self) -> None:
        for stage in self.stages:
            op = stage.op
            chained = [t for t, src in zip(op.call_tensors, stage.sources) if src == "prev"]
            if stage is not self.stages[-1]:
                chained.append(op.output)
            for tensor in chained:
                layout = stage.schedule.layout_of(tensor)
                if layout.tag != op.tensor(tensor).letters:
                    raise ValueError(f"stage {stage.name!r}: tensor {tensor} passes between stages and must "
                                     f"keep its default layout {op.tensor(tensor).letters!r}, "
                                     f"got {layout.tag!r}")

    def compile(self, isa: str = "auto") -> "WinogradKernel":
        """Compile every stage for ``isa`` (``Schedule.compile``) into one callable kernel."""
        self._check_layouts()
        return WinogradKernel(self, [stage.schedule.compile(isa) for stage in self.stages])


def plan(op: Op, m: int | None = None, gemm_rows: int | None = None,
         gemm_cols: int | None = None) -> "AnyPlan":
    """The Winograd F(m x m, 3 x 3) pipeline of ``op`` (``m``: default 4 for float32, 2 for a quantized op).

    float32: a WinogradPlan (see the module docstring), the batched GEMM register-blocked ``gemm_rows``
    tiles x ``gemm_cols`` output channels over the input channels (default 7 x 64). Quantized: an
    exact ``winograd_int8.Int8WinogradPlan`` (F(2x2,3x3); GEMM blocks default to the ISA's).
    WinogradError naming the parameter for anything but a float32 or quantized 2-D conv with 3x3
    kernel, stride 1, dilation 1 and groups 1 (and for int8, ``winograd_int8.refusal``)."""
    m = tiles(op)[-1] if m is None else m
    _check(op, m)
    if op.quant is not None:
        return Int8WinogradPlan(op, gemm_rows, gemm_cols)
    rows, cols = int(gemm_rows or 7), int(gemm_cols or 4 * LANES)
    return WinogradPlan(op, m, _stages(op, m, rows, cols), rows, cols)


def filter_transform(w: np.ndarray, m: int) -> np.ndarray:
    """``U[t, c, k]`` = ``(G w[k, c] G^T)[t]`` over the ``(m+2)**2`` tile positions ``t``, float64."""
    g = transform_matrices(m)["G"]
    u = np.einsum("ai,kcij,bj->abck", g, w.astype(np.float64), g)
    return np.ascontiguousarray(u.reshape(-1, w.shape[1], w.shape[0]))


def _tiles(x: np.ndarray, m: int, pads: tuple[int, int], tiles: tuple[int, int]) -> np.ndarray:
    """The ``(m+2) x (m+2)`` input tiles ``D[n, c, th, tw, i, j]`` of ``x`` padded with zeros."""
    n, c, h, w = x.shape
    a = m + 2
    padded = np.zeros((n, c, tiles[0] * m + 2, tiles[1] * m + 2))
    padded[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + w] = x
    view = np.lib.stride_tricks.sliding_window_view(padded, (a, a), axis=(2, 3))
    return view[:, :, ::m, ::m][:, :, :tiles[0], :tiles[1]]


def winograd64(op: Op, m: int, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None,
               absolute: bool = False) -> np.ndarray:
    """F(m x m, 3 x 3) of ``op`` in float64 (NCHW); ``absolute``: with every matrix, input and
    weight replaced by its absolute value, the magnitude that bounds the rounding errors."""
    s = _sized(op, m)
    mats = {k: np.abs(v) if absolute else v for k, v in transform_matrices(m).items()}
    fix = np.abs if absolute else np.asarray
    d = _tiles(fix(x).astype(np.float64), m, (s["ph"], s["pw"]), (s["th"], s["tw"]))
    v = np.einsum("ai,nctuij,bj->abntuc", mats["BT"], d, mats["BT"])
    u = np.einsum("ai,kcij,bj->abck", mats["G"], fix(w).astype(np.float64), mats["G"])
    mm = np.einsum("abntuc,abck->abntuk", v, u)
    y = np.einsum("ra,abntuk,sb->nktrus", mats["AT"], mm, mats["AT"])
    y = y.reshape(s["n"], s["k"], s["th"] * m, s["tw"] * m)[:, :, :s["oh"], :s["ow"]]
    return y + (fix(b).astype(np.float64).reshape(1, -1, 1, 1) if b is not None else 0.0)


def error_bound(op: Op, m: int, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """Elementwise bound on ``|winograd - exact|`` of a float32 run: ``2 n eps`` times the
    magnitude (``winograd64(..., absolute=True)``), ``n`` the roundings along the longest path of
    one output: the filter transform (2 x 3 terms and the rounding of U), the input transform
    (2 x (m+2)), the product, the GEMM (C terms), the output transform (2 x (m+2)) and the bias."""
    a = m + 2
    terms = 2 * 3 + 1 + 2 * a + 1 + op.tensor(op.inputs[0]).shape[1] + 2 * a + 1
    eps = float(np.finfo(np.float32).eps)
    return 2 * terms * eps * winograd64(op, m, x, w, b, absolute=True) + 1e-6


class WinogradKernel:
    """A compiled WinogradPlan: ``kernel(x, w[, b])`` on logical NCHW/OIHW float32 arrays.

    ``prepare`` checks the arrays, transforms the filter (float64, once) and binds every stage's
    buffers (one stage's output array is the next one's input); ``run`` runs the stages in turn (the
    timed part); ``output`` crops the whole tiles to the output and moves it to NCHW."""

    threads = 1
    epilogue = None      # no clip fused (``Kernel.epilogue``)

    def __init__(self, plan: WinogradPlan, kernels: list["Kernel"]):
        self.plan, self.op, self.m, self.kernels = plan, plan.op, plan.m, kernels
        self.isa = kernels[0].isa
        self.algorithm = plan.algorithm

    def __repr__(self) -> str:
        return f"<WinogradKernel {self.algorithm} {self.isa} for {self.op!r}, {len(self.kernels)} stages>"

    @property
    def schedules(self) -> dict[str, Schedule]:
        """The plan's schedules by stage name."""
        return self.plan.schedules

    @property
    def sources(self) -> dict[str, str]:
        """The generated C of each stage, by stage name."""
        return {stage.name: kernel.source for stage, kernel in zip(self.plan.stages, self.kernels)}

    @property
    def source(self) -> str:
        """All stages' C, one after the other, each headed by its stage name."""
        return "\n".join(f"/* ---- stage {name} ---- */\n{text}" for name, text in self.sources.items())

    def set_threads(self, n: int) -> None:
        """Winograd kernels run on one thread; ValueError for more."""
        if n != 1:
            raise ValueError(f"the winograd pipeline runs on one thread (no parallel loop), "
                             f"got threads={n!r}")

    def buffer_bytes(self) -> dict[str, int]:
        """Bytes ``prepare`` allocates: every stage's buffers (intermediates counted once per stage)."""
        return {"packed buffers": sum(sum(k.buffer_bytes().values()) for k in self.kernels), "workspace": 0}

    def call_bytes(self) -> dict[str, int]:
        """Bytes of one call on new inputs (see ``Kernel.call_bytes``)."""
        op = self.op
        inputs = 4 * sum(math.prod(op.tensor(t).shape) for t in op.call_tensors)
        return {"inputs": inputs, **self.buffer_bytes(), "output": 4 * math.prod(op.tensor(op.output).shape)}

    def error_bound(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """The elementwise error bound of this kernel's output on ``inputs`` (by tensor name)."""
        return error_bound(self.op, self.m, *(inputs[t] for t in self.op.call_tensors))

    def _arrays(self, arrays: tuple) -> list[np.ndarray]:
        op = self.op
        given = call_arrays(op, arrays)
        for name, array in zip(op.call_tensors, given):
            if not isinstance(array, np.ndarray) or array.dtype != np.float32:
                raise TypeError(f"{name} must be a float32 numpy array, got "
                                f"{getattr(array, 'dtype', type(array).__name__)}")
            if array.shape != op.tensor(name).shape:
                raise ValueError(f"{name} has shape {array.shape}; {op!r} expects {op.tensor(name).shape}")
        return given

    def prepare(self, *arrays: np.ndarray) -> list["Buffers"]:
        """Check the call's arrays, transform the filter and bind every stage's buffers."""
        given = dict(zip(("x", "w", "bias"), self._arrays(arrays)))
        check_memory(f"the buffers of {self.algorithm} of {self.op!r}", self.buffer_bytes())
        mats = transform_matrices(self.m)
        values = {"x": given["x"], "U": filter_transform(given["w"], self.m).astype(np.float32),
                  "BT": mats["BT"].astype(np.float32), "AT": mats["AT"].astype(np.float32)}
        if "bias" in given:
            values["bias"] = given["bias"]
        buffers, previous = [], None
        for stage, kernel in zip(self.plan.stages, self.kernels):
            op = stage.op
            arrays = {t: previous.reshape(op.tensor(t).shape) if src == "prev" else values[src]
                      for t, src in zip(op.call_tensors, stage.sources)}
            prepared = kernel.prepare(*arrays.values()).arrays
            for tensor, src in zip(op.call_tensors, stage.sources):
                if src == "prev":            # the previous stage's output array itself (a view), not a copy
                    prepared[tensor] = arrays[tensor]
            if stage is not self.plan.stages[-1]:
                shape, ahead = op.tensor(op.output).shape, self._ahead(stage)
                previous = aligned_zeros(shape, np.float32, ahead, kernel.exact)
                prepared[op.output] = previous
            buffers.append(kernel.bind(prepared))
        return buffers

    def _ahead(self, stage: Stage) -> int:
        """Bytes the producer of ``stage``'s output or the next stage (its consumer) may read past its end."""
        index = self.plan.stages.index(stage)
        consumer, kernel = self.plan.stages[index + 1], self.kernels[index + 1]
        read = [t for t, src in zip(consumer.op.call_tensors, consumer.sources) if src == "prev"]
        return max([self.kernels[index].generated.read_ahead.get(stage.op.output, 0)]
                   + [kernel.generated.read_ahead.get(t, 0) for t in read])

    def run(self, buffers: list["Buffers"]) -> None:
        """Run the stages in turn on prepared buffers (the timed part)."""
        for kernel, stage_buffers in zip(self.kernels, buffers):
            kernel.run(stage_buffers)

    def output(self, buffers: list["Buffers"]) -> np.ndarray:
        """The output of the last run in the op's logical layout (NCHW)."""
        s = _sized(self.op, self.m)
        tiles = self.kernels[-1].output(buffers[-1])           # O[n, th, r, tw, s, k]
        y = tiles.reshape(s["n"], s["th"] * self.m, s["tw"] * self.m, s["k"])[:, :s["oh"], :s["ow"]]
        return np.ascontiguousarray(y.transpose(0, 3, 1, 2))

    def __call__(self, *arrays: np.ndarray) -> np.ndarray:
        buffers = self.prepare(*arrays)
        self.run(buffers)
        return self.output(buffers)


AnyPlan = WinogradPlan | Int8WinogradPlan          # what ``plan`` returns: float32 or int8
AnyKernel = WinogradKernel | Int8WinogradKernel    # what their ``compile`` returns
