"""Timing of kernels: runs interleaved over rounds within a time budget, noise detection, and
throughput as % of this machine's measured peak (``loopopt.machine``)."""
from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from . import team
from .buffers import MemoryLimitError, aligned_copy, check_memory
from .kernel import Kernel
from .machine import OTHERS_LIMIT, cpu_seconds, others_share, peak_gflops
from .ops import OUT_ROUNDOFF
from .progress import Progress
from .quant_reference import random_call, reference_output
from .quant_reference import tolerance as quant_tolerance
from .units import duration
from .winograd import AnyKernel, WinogradKernel

SPREAD_LIMIT = 0.10        # IQR / median above which a run is noisy
MAX_REPEATS = 200          # timed runs per kernel at most
ROUNDS = 5                 # rounds over which the runs of several kernels are interleaved
LONG_MEASUREMENT = 2.0     # s: timing expected to take longer shows progress (on a terminal, or when asked)
PROGRESS_INTERVAL = 1.0    # s between two progress updates
KERNEL_ONLY = "kernel run only, layout packing and unpacking excluded"
END_TO_END = "end to end: packing, kernel run and unpacking"
PREPACKED = "prepacked weights: activations packed per call, weights packed once, kernel run, unpacking"
GRAPH = "kernel runs replayed back to back inside a CUDA graph, L2 not flushed"

_clock: Callable[[], float] = time.perf_counter


@dataclass(frozen=True)
class Timing:
    """Runtime statistics of a kernel (seconds) with derived throughput and a noise verdict.

    ``end_to_end``: the timed call included packing into and unpacking from the schedule's
    storage layouts (``measure(..., end_to_end=True)``); by default only the kernel run is timed.
    ``noisy``: the run was unstable, ``noise`` says why (spread, other processes' CPU share);
    ``other_cpu_share``: the share of the machine's CPU time other processes used while timing
    (None where /proc/stat is unreadable)."""

    median: float
    min: float
    iqr: float
    repeats: int
    gflops: float
    percent_of_peak: float
    peak_gflops: float
    verified: bool
    max_error: float
    times: tuple[float, ...] = field(repr=False, default=())
    unit: str = "GFLOP/s"      # quantized kernels: GOP/s (2 integer ops per multiply-accumulate)
    end_to_end: bool = False
    noisy: bool = False
    other_cpu_share: float | None = None
    noise: str = ""
    unverified: str = ""       # why the output could not be verified (the reference needs too much memory)
    relative_error: float = float("nan")   # max_error / the reference output's largest magnitude
    algorithm: str = "direct"  # "direct" (one schedule's nest) or "winograd F(4x4,3x3)" (a pipeline)
    prepacked: bool = False    # whole calls with the weights packed once (``measure(..., prepacked=True)``)
    graph: bool = False        # kernel runs replayed in a CUDA graph (``measure(..., graph=True)``)

    @property
    def scope(self) -> str:
        """What the times cover: the kernel run only (default; on a GPU one launch with the L2 cache
        overwritten before it), runs replayed inside a CUDA graph, whole calls with the weights
        prepacked (the scope a comparison with a framework quotes), or whole calls."""
        if self.graph:
            return GRAPH
        return PREPACKED if self.prepacked else END_TO_END if self.end_to_end else KERNEL_ONLY

    def __str__(self) -> str:
        # a timing read back from a tuning log has no relative error (the log keeps the max error only)
        relative = (f", {self.relative_error:.1e} of the largest output" if math.isfinite(self.relative_error)
                    else "")
        check = (f"verified (max error {self.max_error:.2e}{relative})"
                 if self.verified else f"not verified: {self.unverified}" if self.unverified
                 else "NOT verified")
        algorithm = "" if self.algorithm == "direct" else f"{self.algorithm}: "
        text = (f"{algorithm}median {duration(self.median)} (min {duration(self.min)}, "
                f"IQR {duration(self.iqr)}, "
                f"n={self.repeats}; {self.scope}), {self.gflops:.2f} {self.unit} = "
                f"{self.percent_of_peak:.1f}% of {self.peak_gflops:.1f} {self.unit} peak, {check}")
        return text + (f"; NOISY: {self.noise}" if self.noisy else "")


def noise_verdict(times: Sequence[float], other_cpu_share: float | None, spread_limit: float = SPREAD_LIMIT,
                  others_limit: float = OTHERS_LIMIT) -> str:
    """Why a run with these ``times`` is unstable, or "" when it is not: its IQR exceeds
    ``spread_limit`` times its median, or other processes used more than ``others_limit`` of
    the machine's CPU time (``other_cpu_share``, None when unknown) while it ran."""
    reasons = []
    if len(times) >= 2:
        q75, q25, median = np.percentile(times, [75, 25, 50])
        spread = (q75 - q25) / median if median > 0 else 0.0
        if spread > spread_limit:
            reasons.append(f"IQR {100 * spread:.0f}% of the median (limit {100 * spread_limit:.0f}%)")
    if other_cpu_share is not None and other_cpu_share > others_limit:
        reasons.append(f"other processes used {100 * other_cpu_share:.0f}% of the CPU "
                       f"(limit {100 * others_limit:.0f}%)")
    return "; ".join(reasons)


def repeat_count(first: float, budget: float) -> int:
    """Timed runs of a kernel whose run took ``first`` seconds: as many as fit in ``budget``
    seconds, at least 1 (a run longer than the budget is timed once) and at most MAX_REPEATS."""
    return max(1, min(MAX_REPEATS, int(budget / max(first, 1e-9))))


def interleaved_order(counts: Sequence[int], rounds: int) -> list[int]:
    """The kernel index of each timed run when kernel ``i`` runs ``counts[i]`` times: in each of
    ``rounds`` rounds every kernel does an even share of its runs back to back, the kernels in
    turn starting with kernel ``round mod n``, so all of them meet the same noise."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    order = []
    for r in range(rounds):
        for j in range(len(counts)):
            i = (r + j) % len(counts)
            order += [i] * (counts[i] * (r + 1) // rounds - counts[i] * r // rounds)
    return order


def _timed(function: Callable[[], object]) -> float:
    start = _clock()
    function()
    return _clock() - start


def tolerance(op, inputs: dict[str, np.ndarray], sum_roundoff: float | None = None) -> np.ndarray:
    """Elementwise error bound of a float32 kernel: 2 * n * eps * sum |terms| (+ tiny); of a
    bfloat16 kernel: ``bf16_tolerance`` (``sum_roundoff``: of a kernel whose sums round coarser than
    to nearest, ``Kernel.sum_roundoff``); of a float16 one (tensor cores): the same bound with a
    unit roundoff of 2^-22 for the sums, as the tensor cores' float32 accumulation truncates the
    aligned products rather than rounding them to nearest."""
    if op.dtype == "bfloat16":
        return bf16_tolerance(op, inputs, sum_roundoff or 2.0 ** -24)
    if op.dtype == "float16":
        return bf16_tolerance(op, inputs, sum_roundoff=2.0 ** -22)
    magnitude = op.magnitude(*(np.abs(inputs[t]) for t in op.call_tensors))
    reduction = max(1, op.macs // max(1, int(np.prod(op.tensor(op.output).shape))))
    terms = reduction + (2 if op.scales else 0)         # the scaled output: a product and a sum more
    return 2 * terms * np.finfo(np.float32).eps * magnitude + 1e-6


def output_rounded(op, expected: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """``bound`` on a float32 result widened by its one rounding, to nearest, into a 16-bit output
    (``OUT_ROUNDOFF``; a float32 output: ``bound`` as it is)."""
    return bound + OUT_ROUNDOFF[op.out_dtype] * (np.abs(expected) + bound)


def _gamma(terms: int, unit_roundoff: float) -> float:
    """``n u / (1 - n u)``: the relative error bound of a sum of ``n`` terms in any order."""
    return terms * unit_roundoff / (1 - terms * unit_roundoff)


def bf16_tolerance(op, inputs: dict[str, np.ndarray], sum_roundoff: float = 2.0 ** -24) -> np.ndarray:
    """Elementwise error bound of a bfloat16 kernel against ``op.reference`` (float64 of the inputs
    rounded to bf16, as the kernel rounds them). The products of two bf16 are exact in float32
    (8-bit significands), so only the float32 sums of the ``n`` terms of an output (its reduction
    extent, plus the bias) round, in whatever order the schedule sums them:

        |y - ref| <= (gamma_n(2^-24) + gamma_n(2^-53)) * (|b| + sum |x w|)
                     + 2^-126 * n * (2 + max |x| + max |w|)

    with ``gamma_n(u) = n u / (1 - n u)`` (the second gamma: the float64 reference's own
    rounding) and the last term for ``vdpbf16ps``, which flushes denormal inputs, products and
    sums to zero."""
    values = op.operand_values(*(inputs[t] for t in op.inputs))
    magnitudes = [np.abs(v) for v in values] + [np.abs(inputs[t]) for t in op.call_tensors[len(op.inputs):]]
    terms = math.prod(op.extent(d) for d in op.reduction_dims) + int(op.bias) + (2 if op.scales else 0)
    relative = _gamma(terms, sum_roundoff) + _gamma(terms, 2.0 ** -53)
    flushed = 2.0 ** -126 * terms * (2 + sum(float(m.max(initial=0.0)) for m in magnitudes[:2]))
    return relative * op.magnitude(*magnitudes) + flushed


Measurable = Kernel | AnyKernel


class TimingRefusedError(RuntimeError):
    """A kernel that cannot be timed here (its target's ``timing_refusal``): says why, and what the
    kernel model predicts instead."""


def check_timeable(kernel: Measurable) -> None:
    """TimingRefusedError if ``kernel``'s target cannot time it here (e.g. it runs under an emulator),
    with the kernel model's predicted time of its schedule.

    The model sits above measure; it is imported here, where a refusal needs it (a lazy facade)."""
    target = getattr(kernel, "target", None)        # a Winograd pipeline has none: it runs on the host
    refusal = target.timing_refusal() if target is not None else None
    if refusal is None:
        return
    from .model import kernel_model
    try:
        predicted = kernel_model(kernel.schedule, kernel.isa, traffic=False).predicted_seconds
    except ValueError as err:       # a kernel the model does not price
        raise TimingRefusedError(f"{refusal}: no time measured, and no prediction: {err}") from None
    raise TimingRefusedError(f"{refusal}: no time measured; the kernel model predicts "
                             f"{predicted * 1e3:.3f} ms on its modelled core "
                             f"(lo.kernel_model(schedule, isa={kernel.isa!r}))")


def _call_arguments(kernel: Measurable, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The kernel's input arrays (inputs, then bias if any) picked from ``inputs`` by tensor name."""
    return [inputs[t] for t in kernel.op.call_tensors]


def _call(kernel: Measurable, seed: int) -> tuple[list[np.ndarray], dict]:
    """Random arrays and keyword parameters of one call (quantized: calibrated parameters; a kernel
    adding a residual: a random one last), each array 64-byte aligned: an input already in its
    storage layout is run as it is (``Layout.to_storage``), so schedules compare on equal memory."""
    if kernel.op.quant is not None:
        arrays, params = random_call(kernel.op, seed)
    else:
        arrays, params = _call_arguments(kernel, kernel.op.random_inputs(seed)), {}
        if kernel.epilogue is not None and kernel.epilogue.residual:
            shape = kernel.op.tensor(kernel.op.output).shape
            arrays.append(np.random.default_rng(seed + 1).standard_normal(shape).astype(np.float32))
    return [aligned_copy(a) for a in arrays], params


def verify(kernel: Measurable, seed: int = 0) -> tuple[bool, float]:
    """Run ``kernel`` on random inputs and compare with the reference; (ok, max abs error)
    (``checked``, without the largest magnitude of the reference)."""
    return checked(kernel, seed)[:2]


def checked(kernel: Measurable, seed: int = 0) -> tuple[bool, float, float]:
    """Run ``kernel`` on random inputs and compare with the reference: (ok, max abs error, largest
    magnitude of the reference output).

    A Winograd kernel's bound is its own (``winograd.error_bound``: its transforms round more than a
    direct sum does); a direct float kernel's is ``tolerance``.

    Quantized kernels are checked against quant.py's exact reference: requantized and int32
    outputs bit for bit, float32 outputs within float32 rounding (``quant_reference.tolerance``).
    The reference is computed in blocks of the batch (``Op.reference_blocks``, which raises
    MemoryLimitError if one batch item's reference does not fit the available memory).
    """
    op = kernel.op
    blocks = op.reference_blocks()
    args, params = _call(kernel, seed)
    result = kernel(*args, **params)
    ok, worst, largest = True, 0.0, 0.0
    for rows in blocks:
        block = [args[0][rows], *args[1:len(op.call_tensors)]]
        if op.quant is None:
            inputs = dict(zip(op.call_tensors, block, strict=True))
            expected = op.reference(*block)
            winograd = isinstance(kernel, WinogradKernel)
            bound = kernel.error_bound(inputs) if winograd else tolerance(op, inputs, kernel.sum_roundoff)
            if kernel.epilogue is not None:
                residual = args[-1][rows] if kernel.epilogue.residual else None
                expected = kernel.epilogue.apply(expected, residual)
                bound = bound + np.finfo(np.float32).eps * np.abs(expected)   # the residual's one rounding
            bound = output_rounded(op, expected, bound)
        else:
            expected = reference_output(op, block, params)
            bound = (np.zeros(expected.shape) if not op.quant.dequantized else
                     quant_tolerance(op, block, params, kernel.algorithm == "direct"
                                     and kernel.schedule.arithmetic_mode == "dequantize"))
        error = np.abs(result[rows].astype(np.float64) - expected.astype(np.float64))
        ok, worst = ok and bool(np.all(error <= bound)), max(worst, float(error.max(initial=0.0)))
        largest = max(largest, float(np.abs(expected).max(initial=0.0)))
    return ok, worst, largest


def measure(kernel: Measurable, repeats: int | None = None, warmup: int = 1, budget: float = 1.0,
            verify_output: bool = True, seed: int = 0, end_to_end: bool = False,
            progress: bool | None = None, prepacked: bool = False, graph: bool = False) -> Timing:
    """Time ``kernel`` (see ``measure_all``, of which this is the one-kernel case)."""
    return measure_all([kernel], repeats, warmup, budget, verify_output=verify_output, seed=seed,
                       prepacked=prepacked, end_to_end=end_to_end, progress=progress, graph=graph)[0]


def measure_all(kernels: Sequence[Measurable], repeats: int | None = None, warmup: int = 1,
                budget: float = 1.0,
                rounds: int = ROUNDS, verify_output: bool = True, seed: int = 0, end_to_end: bool = False,
                progress: bool | None = None, prepacked: bool = False, graph: bool = False) -> list[Timing]:
    """Time several kernels on the same noise: ``warmup`` untimed runs of each (the first sizes
    its repeat count), then ``repeats`` timed runs of each (default: as many as fit ``budget``
    seconds per kernel, see ``repeat_count``) interleaved over ``rounds`` rounds
    (``interleaved_order``); then each output is verified against the reference.

    By default only ``kernel.run`` on buffers prepared once is timed (packing into and unpacking
    from the storage layouts excluded); ``end_to_end=True`` times the whole call; ``prepacked=True``
    the whole call with the weights packed once before and the buffers kept
    (``Kernel.with_constants``: what a framework's call costs, the scope to quote against one).
    ``graph=True`` (a GPU target's kernels): each timed sample is the kernel run replayed
    ``device.GRAPH_LAUNCHES`` times inside a CUDA graph, per run: the time inside a captured
    network, without the per-call launch overhead and L2 flush. ``progress``: a progress bar on
    stderr for timing expected to last over LONG_MEASUREMENT seconds (default: when stderr is a
    terminal)."""
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1):
        raise ValueError(f"repeats must be >= 1 (an integer), got {repeats!r}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if not budget > 0:
        raise ValueError(f"budget must be > 0 seconds, got {budget}")
    if graph and (end_to_end or prepacked):
        raise ValueError("graph=True replays the kernel run alone; it excludes end_to_end and prepacked")
    for kernel in kernels:
        if not isinstance(kernel, Measurable):
            hint = ("; call .compile() first: measure(schedule.compile())" if hasattr(kernel, "compile")
                    else "")
            raise TypeError(f"measure takes a compiled Kernel, got a {type(kernel).__name__}{hint}")
    for kernel in kernels:          # before any input is made
        check_timeable(kernel)
        check_memory(f"measuring {kernel.op!r}", kernel.call_bytes())
    runners = [_runner(kernel, seed, end_to_end, prepacked) for kernel in kernels]
    timers = [_graph_timer(kernel, run) if graph else _timer(kernel) for kernel, run in zip(kernels, runners)]
    firsts = [timer(run) for timer, run in zip(timers, runners)]
    for _ in range(max(0, warmup - 1)):
        for run in runners:
            run()
    counts = [repeats or repeat_count(first, budget) for first in firsts]
    expected = sum(count * first for count, first in zip(counts, firsts))
    show = (sys.stderr.isatty() if progress is None else progress) and expected > LONG_MEASUREMENT
    start = cpu_seconds()
    with team.hold():               # the kernels' threads spin between timed calls, as in a plan run
        times = _run_interleaved(runners, timers, interleaved_order(counts, rounds), show)
    share = others_share(start)
    return [replace(_timing(kernel, kernel_times, share, end_to_end or prepacked, verify_output, seed),
                    prepacked=prepacked, graph=graph) for kernel, kernel_times in zip(kernels, times)]


def _runner(kernel: Measurable, seed: int, end_to_end: bool, prepacked: bool) -> Callable[[], object]:
    """What one timed run calls: the whole call; with ``prepacked`` the call of
    ``Kernel.with_constants`` (weights, bias and parameters packed once now, the buffers a run writes
    kept across calls, as the ONNX backend binds a node) on the activations (and residual); or the
    kernel run on buffers prepared now."""
    args, params = _call(kernel, seed)
    if prepacked:
        if not hasattr(kernel, "with_constants"):
            raise ValueError(f"{kernel!r} has no prepacked form (a pipeline transforms its weights on "
                             f"every call): time it end_to_end=True")
        inputs = len(kernel.op.call_tensors)
        call = kernel.with_constants(*args[1:inputs], **params)
        return partial(call, args[0], *args[inputs:])
    if end_to_end:
        return partial(kernel, *args, **params)
    return partial(kernel.run, kernel.prepare(*args, **params))


def _timer(kernel: Measurable) -> Callable[[Callable[[], object]], float]:
    """What times one run of ``kernel``: its target's device timer (``Target.run_timer``), else the
    host clock (``_timed``; also for kernels built outside a target: Winograd pipelines, the tuner's)."""
    target = getattr(kernel, "target", None)
    return (target.run_timer() if target is not None else None) or _timed


def _graph_timer(kernel: Measurable, run: Callable[[], object]) -> Callable[[Callable[[], object]], float]:
    """What times one sample of ``kernel`` with ``graph=True``: ``run`` replayed inside a CUDA graph
    (``Target.graph_timer``; ValueError for a kernel of no device target)."""
    target = getattr(kernel, "target", None)
    if target is None:
        raise ValueError(f"graph=True times a device target's kernels; {kernel!r} was built by none")
    replay = target.graph_timer(run)
    return lambda _run: replay()


def _peak(kernel: Measurable, dtype: str) -> float:
    """The peak "% of peak" of ``kernel`` is against: its target's, else this CPU's profile."""
    target = getattr(kernel, "target", None)
    return target.peak(kernel.isa, dtype) if target is not None else peak_gflops(kernel.isa, dtype)


def _run_interleaved(runners: Sequence[Callable[[], object]], timers: Sequence[Callable[[Callable], float]],
                     order: list[int], show: bool) -> list[list[float]]:
    times: list[list[float]] = [[] for _ in runners]
    bar, shown = Progress(len(order), show), _clock()
    for done, index in enumerate(order, 1):
        times[index].append(timers[index](runners[index]))
        if show and _clock() - shown >= PROGRESS_INTERVAL:
            bar.update(done, "timing runs")
            shown = _clock()
    bar.update(len(order), "timed")
    return times


def _timing(kernel: Measurable, times: list[float], share: float | None, end_to_end: bool,
            verify_output: bool,
            seed: int) -> Timing:
    op = kernel.op
    ok, error, largest, unverified = False, float("nan"), float("nan"), ""
    if verify_output:
        try:
            ok, error, largest = checked(kernel, seed)
        except MemoryLimitError as err:
            unverified = str(err)
    median = float(np.median(times))
    q75, q25 = np.percentile(times, [75, 25])
    gflops = op.flops / median / 1e9
    dtype = op.dtype if op.quant is None else "int8"   # quantized: GOP/s against the int8 dot peak
    peak = _peak(kernel, dtype) * kernel.threads
    noise = noise_verdict(times, share)
    unit = "GFLOP/s" if op.quant is None else "GOP/s"
    return Timing(median, float(min(times)), float(q75 - q25), len(times), gflops, 100 * gflops / peak, peak,
                  ok, error, tuple(times), unit, end_to_end, bool(noise), share, noise, unverified,
                  error / largest if largest > 0 else error, kernel.algorithm)
