"""The search space of ``lo.tune``: register-blocked schedules generated from an op's roles.

Every candidate has the structure of the stored layer schedules, generalized from what the op
says about itself (``channel_dim``, ``reduction_channel_dim``, ``windows``, ``reduction_dims``,
``groups``), never from which class it is:

* an output block of ``pixel_block`` positions of the innermost output dim that is not the
  channel dim (a conv's ``ow``, a GEMM's ``i``) times ``channel_block`` output channels (the
  vector lanes), kept in vector registers (``register_block``) across the reduction loops; also
  along each other position dim whose window has more taps than that dim's (``pixel_dims``: a 7x1
  conv's ``oh``), where consecutive positions of the block share the broadcasts of neighbouring taps;
  and on AVX2 along a pointwise conv's spatial dims fused into one (``fused_pixel``: ``oh_ow``, its
  positions contiguous channels-last, as one GEMM over them);
* the reduction loops around it in one of their orders (the window taps keep their order);
* channels-last activations and output (a float op of one group with at most ``FEW_CHANNELS``
  reduction channels, an image's, has each candidate also with its first input channels-first, the
  op's logical layout, ``Knobs.activations``: as a caller's NCHW image arrives, copied by no call;
  ranked as its channels-last twin, which the search's first choice stays, so
  ``tune.choice.first_reading`` takes it where the image arrives so); weights stored in the order the
  loops read them,
  plain (``HWIO``-like), packed by channel block (``OHWI32o``; for a GEMM the packed ``B``
  panels of GotoBLAS) or, for quantized ops, in dot groups of 4 reduction channels
  (``OIHW16o4i``: ``c`` split by 4, consumed by one VNNI ``vpdpbusd`` per vector); bfloat16 ops
  in pairs (``OIHW16o2i``, ``vdpbf16ps``) where this CPU runs it and the channels per group are
  even (a half pair is widened instead); packed weights of a weight-heavy float op with few positions are
  prefetched ahead of their reads (``Knobs.prefetch``, ``prefetched_weights``);
* for quantized convs, also tap dot candidates (``codegen/taps.py``: a depthwise conv's or a stem's
  few input channels fill a dot group poorly): the output block runs over ``pixel_block`` positions
  (the vector lanes) times ``channel_block`` output channels on channels-first activations and output,
  the weights with the last window's taps blocked by 4 (``OIHW4w``), the taps split by 4 (when more)
  and their inner loop innermost, consumed by one ``vpdpbusd`` per vector;
* optionally a cache block of the reduction channels (``c``/``k`` split, its outer loop among
  the outer loops: the block accumulates into the output across it; ``cache_block_sizes``);
* every order of the loops outside the block; short inner reduction loops (taps) unrolled, or the
  innermost reduction loop unrolled by 4;
* for a float pointwise op whose packed weights exceed half of L2 (GEMM 512x1024x1024, ResNet-50's
  1024->256 1x1 at 14x14), on one thread, also packed-weights blocks without a cache block in channel panels
  (``Knobs.channel_panel``, ``channel_panel``): the channel block loop split, its outer part outermost
  and its inner part innermost, so a panel's weights stay in L2 while every row passes them;
* with ``threads > 1``, ``parallel`` on the outermost loop (it must carry no reduction).

An ungrouped quantized op's emulated-dot blocks (AVX2) come in two weight formats: int8 and ``s16``
(``Schedule.weight_format("s16")``, knob ``weight_format``: pre-widened weights, ``WIDE_DOT_OPERANDS``).
A ternary op (``QuantSpec(weight="ternary")``) also searches the weight formats: its register-blocked
candidates (tap dot ones included) store the weights in ``i2_s`` (``Schedule.weight_format("i2_s")``,
knob ``weight_format``), and table-lookup candidates (``LutKnobs``, ``targets/lut.py``) in ``tl1``
and ``tl2``:
channels-last activations and output, a register block of ``pixel_block`` positions times
``channel_block`` output channels (1-4 or 8 whole column blocks of 32 below the channel count, or all
the channels: each group's start a column block; 8 blocks stream 8 rows of indices at once, which a
GEMV from DRAM needs to keep the hardware prefetcher busy), at most ``MAX_ACCUMULATORS`` column blocks in the
block, every order of the reduction dims (taps in their order) inside every order of the loops
outside the block (the kernel refuses vectorize and unroll; it vectorizes a column block itself);
with ``threads > 1``, ``parallel`` on the outermost loop between the table build and the register
block (``targets.lut.lut_nest``; the kernel refuses it around the table build), where it has at
least ``threads`` iterations in table-lookup units.

A binary op (``QuantSpec(activation="binary", weight="binary")``) has one kernel, XNOR + popcount
(``targets/x86/binary.py``), whose one schedule step is its register block: its candidates
(``BinaryKnobs``, one thread) are ``tile(<position dim>=R, <channel dim>=V * lanes)`` for 1 to
``BINARY_MAX_POSITIONS`` positions and 1 to ``CHANNEL_VECTORS`` vectors of the ISA's uint64 lanes,
where the accumulators, the weight vectors and a broadcast leave a register spare.

On a CPU with AMX, a search on the best ISA (``isa="auto"``) of a quantized or bfloat16 op that the
tile kernels take (``targets/x86/tiles.py``: not depthwise) also has AMX candidates (ISA ``TILE_ISA``): a
pixel block and a channel block of 16 or 32 (1 or 2 tiles each) and which of the two block loops is
outside, on channels-last output; with ``threads > 1``, each with ``parallel`` on the pixel block's
loop and each with it on the channel block's, where that splits at least ``threads`` blocks. A conv
of one group whose whole patch (taps x channels) takes fewer 64-byte tile K-steps than its taps do
(ResNet-50 conv1: 147 bytes in 3 steps, not 7 filter rows) has each of them twice: as it is, and
with its reduction dims fused, taps then channels (knob ``patches``: the kernel gathers each pixel's
patch into a buffer, ``targets.x86.tiles.patches``).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

from ...codegen.arith import BF16_PAIR
from ...codegen.taps import fits
from ...dataflows import activations_last, table_lookup
from ...layout import moved_last
from ...machine import machine_profile
from ...ops import Op, Window
from ...schedule import Schedule, ScheduleError
from ..binary import BinaryKnobs, register_blocks
from ..lut import MAX_ACCUMULATORS, lut_nest, lut_shape
from ..lut_format import COLUMNS, FORMATS
from ..search import Candidate
from .binary import LANES as BINARY_LANES
from .isa import INT_ISAS, ISAS, TILE_ISA, bf16_dot_available
from .lut_c import LUT_ISAS, check_lut_on
from .tiles import BLOCKS, SPLITS, TileError, check_amx_cpu, pixel_dim, tile_plan

DOT = 4                        # reduction channels per int32 lane of a dot instruction (vpdpbusd)
MAX_PIXEL_BLOCK = 16           # output positions per register block at most
CHANNEL_VECTORS = 4            # channel blocks of 1..4 vectors
FUSED_ISAS = ("avx2",)         # ISAs whose blocks may also run along fused positions (``fused_pixel``):
                               # AVX2's 16 registers hold no block of a 7-wide row whole (ResNet-50's 1x1
                               # convs at 7x7, see ``fusable_positions``); AVX-512's hold 7x32 (not measured)
# Registers a dot block leaves to its operands where the table emulates the dot (AVX2's lo_avx2_dpbusd:
# bytes widened to 16-bit halves, two vpmaddwd): a broadcast and one weight vector; the compiler keeps the
# rest of the weights' halves in L1. A 7x16 block (14 accumulators) ran fastest of ResNet-18's 3x3 int8
# layers' blocks on a Zen 3 core (AMD EPYC, 1 thread, SCHED_FIFO, one interleaved run): 64, 128, 256 and
# 512 channels at 56, 28, 14 and 7 pixels 1.96 / 1.92 / 1.79 / 1.86 ms, the 14x8 or 7x8 block these
# layers had before 2.22 / 2.10 / 2.38 / 2.03 ms, 4x16 2.06 / 1.97 / 2.08 / 1.80 ms.
EMULATED_DOT_OPERANDS = {"avx2": 2}
# The same dot with the weights pre-widened when packed (``Schedule.weight_format("s16")``,
# ``codegen/wide.py``), multiplied from memory: a broadcast's two 16-bit halves, a product and the halves'
# mask stay in registers.
# Its blocks of 12 accumulators hold them (3x32 kernel-only 0.87-0.93x the int8 7x16 first choice on
# ResNet's 1x1 and 3x3 layers, AMD EPYC Zen 3, 1 thread); 14 spill.
WIDE_DOT_OPERANDS = {"avx2": 4}
# ... and rows of at least this many positions: each of the 12 interleaved kernel-only runs of ResNet's 1x1
# and 3x3 int8 layers (1 and 2 threads) ran 3x32 faster than 2x32 (2x32 0.89-1.10x the int8 7x16, 3x32
# 0.86-0.97x), also at 28 and 14 columns, where the ranking priced 3x32's partial last block above it
WIDE_DOT_ROWS = 3
CACHE_BLOCKS = (64, 128, 256, 512)   # reduction channels per cache block (only below the extent)
EVEN_BLOCK = 64                # an even share of the reduction channels is a cache block if a multiple
MAX_UNROLLED = 8               # inner reduction loops up to this extent may be unrolled completely
UNROLL = 4                     # factor of the partly unrolled innermost reduction loop
MAX_TAP_CHANNELS = 8           # output channels per tap dot block at most (each its own weight broadcast)
FEW_CHANNELS = 4               # reduction channels up to which a float op's register blocks also
                               # read their first input channels-first (an RGB image: MobileNetV2's stem,
                               # 3->32 3x3 stride 2 at 224x224, 8x32 blocks, per call with the weights
                               # prepacked: 226 us reading NCHW, 343 us copying it to NHWC first; its
                               # kernel alone alike, minimum of 40 interleaved calls, shared Xeon with AMX)
ACTIVATIONS = ("last", "first")   # the first input channels-last, or channels-first (its logical layout)
WEIGHTS = ("plain", "packed", "dot", "taps", "planes")
LUT_FORMATS = ("tl1", "tl2")   # the table-lookup weight formats of ternary ops
LUT_COLUMN_BLOCKS = (1, 2, 3, 4, 8)   # column blocks of 32 channels in a table-lookup register block
BINARY_MAX_POSITIONS = 8       # output positions per binary register block at most
PREFETCHED_WEIGHTS = 512 << 10  # bytes: a float pointwise op's weights beyond this are prefetched
PREFETCH_AHEAD = 8 << 10        # bytes ahead of the weights' reads that ``Schedule.prefetch`` fetches
PREFETCH_POSITIONS = 64         # ... where at most this many output positions use each weight
PANEL_SHARE = 4                 # a channel panel's packed weights fill at most this share of L2


@dataclass(frozen=True)
class Knobs:
    """The choices that make one candidate (loop names are those after tiling)."""

    pixel_block: int
    channel_block: int
    reduction: tuple[str, ...]     # the op's reduction dims in loop order, outermost first
    outer: tuple[str, ...]         # the loops outside the block, outermost first
    weights: str                   # one of WEIGHTS
    cache_block: int = 0           # reduction channels per cache block; 0: no cache block
    unroll: tuple[tuple[str, int], ...] = ()   # (loop, factor)
    parallel: str | None = None
    weight_format: str = "int8"    # Schedule.weight_format: "i2_s" for ternary ops
    pixel: str | None = None       # the position dim of the block where it is not ``Roles.pixel``
    activations: str = "last"      # one of ACTIVATIONS: where the first input's channels are stored
    prefetch: int = 0              # weight elements ahead that each reduction step prefetches; 0: none
    channel_panel: int = 0         # output channels per panel (``channel_panel``); 0: none

    def as_dict(self) -> dict:
        """The knobs as JSON values (``weight_format``, ``pixel``, ``activations``, ``prefetch`` and
        ``channel_panel`` only where not the default)."""
        fmt = {} if self.weight_format == "int8" else {"weight_format": self.weight_format}
        along = {} if self.pixel is None else {"pixel": self.pixel}
        first = {} if self.activations == "last" else {"activations": self.activations}
        ahead = {"prefetch": self.prefetch} if self.prefetch else {}
        panel = {"channel_panel": self.channel_panel} if self.channel_panel else {}
        return {"pixel_block": self.pixel_block, "channel_block": self.channel_block,
                "reduction": list(self.reduction), "outer": list(self.outer), "weights": self.weights,
                "cache_block": self.cache_block, "unroll": [list(u) for u in self.unroll],
                "parallel": self.parallel, **fmt, **along, **first, **ahead, **panel}

    def schedule(self, op: Op, isa: str) -> Schedule:
        return build(op, self, lanes(op, isa))


@dataclass(frozen=True)
class LutKnobs:
    """The choices of a table-lookup candidate of a ternary op: its format (``"tl1"``, ``"tl2"``), a
    register block of ``pixel_block`` positions x ``channel_block`` output channels (a multiple of
    32, or all of them), the reduction dims in loop order, the loops outside the block, outermost first,
    and the loop run on threads (None: one thread)."""

    weight_format: str
    pixel_block: int
    channel_block: int
    reduction: tuple[str, ...]
    outer: tuple[str, ...]
    parallel: str | None = None

    def as_dict(self) -> dict:
        """The knobs as JSON values (``parallel`` only where there is one)."""
        threads = {} if self.parallel is None else {"parallel": self.parallel}
        return {"weight_format": self.weight_format, "pixel_block": self.pixel_block,
                "channel_block": self.channel_block, "reduction": list(self.reduction),
                "outer": list(self.outer), **threads}

    def schedule(self, op: Op, isa: str) -> Schedule:
        return build_lut(op, self)


@dataclass(frozen=True)
class TileKnobs:
    """The choices of an AMX candidate: output block (pixels x channels), its loop order and what
    the threads split (``targets.x86.tiles.SPLITS``; None: one thread)."""

    pixel_block: int
    channel_block: int
    channels_outer: bool
    parallel: str | None = None
    patches: bool = False          # the reduction dims fused: each pixel's patch gathered

    def as_dict(self) -> dict:
        return {"isa": TILE_ISA, "pixel_block": self.pixel_block, "channel_block": self.channel_block,
                "channels_outer": self.channels_outer, "parallel": self.parallel, "patches": self.patches}

    def schedule(self, op: Op, isa: str) -> Schedule:
        return build_tiles(op, self)


@dataclass(frozen=True)
class Roles:
    """The dims of an op by the part they play in a register-blocked schedule."""

    channel: str                   # output channels: the vector lanes of the block
    pixel: str                     # the output dim blocked next to the channels
    others: tuple[str, ...]        # the remaining output dims (outer loops)
    reduction: tuple[str, ...]     # reduction dims in the op's order
    rc: str                        # the reduction dim over input channels
    taps: tuple[str, ...]          # window tap dims
    fused: tuple[str, ...] = ()    # the position dims that ``pixel`` fuses (``fused_pixel``), outermost first

    @classmethod
    def of(cls, op: Op, pixel: str | None = None) -> Roles:
        """The roles of ``op``'s dims with the block along ``pixel`` (None: the innermost position dim
        of extent > 1; ``fused_pixel(op)``: the spatial dims fused into one); found once per op and pixel
        (the ranking asks per candidate)."""
        return _roles(cls, op, pixel)

    @classmethod
    def _of(cls, op: Op, pixel: str | None) -> Roles:
        outputs = [d for d in op.dim_names if d not in op.reduction_dims]
        positions = [d for d in outputs if d != op.channel_dim]
        wide = [d for d in positions if op.extent(d) > 1]
        fused = fusable_positions(op) if pixel is not None and pixel == fused_pixel(op) else ()
        pixel = pixel or (wide or positions)[-1]
        return cls(op.channel_dim, pixel, tuple(d for d in positions if d != pixel and d not in fused),
                   tuple(d for d in op.dim_names if d in op.reduction_dims), op.reduction_channel_dim,
                   tuple(w.tap_dim for w in op.windows), fused)

    def extent(self, op: Op, dim: str) -> int:
        """The extent of ``dim``, an op dim or the fused pixel (the product of the dims it fuses)."""
        if self.fused and dim == self.pixel:
            return math.prod(op.extent(d) for d in self.fused)
        return op.extent(dim)

    @property
    def step(self) -> str:
        """The op dim that consecutive positions of a block step along: the pixel, or the innermost dim
        it fuses."""
        return self.fused[-1] if self.fused else self.pixel

    def dims_of(self, loop: str) -> tuple[str, ...]:
        """The op dims an outer loop runs over (``outer_dim``; the fused pixel's loop: the dims it fuses)."""
        dim = outer_dim(loop)
        return self.fused if self.fused and dim == self.pixel else (dim,)


@lru_cache(maxsize=4096)
def _roles(cls: type[Roles], op: Op, pixel: str | None) -> Roles:
    return cls._of(op, pixel)


def pixel_dims(op: Op, isa: str) -> list[str | None]:
    """The position dims a register block may run along (``Knobs.pixel``): None (``Roles.pixel``),
    each other dim of extent > 1 whose window has more taps than ``Roles.pixel``'s (none: 1 tap), and on
    an ISA of ``FUSED_ISAS`` the spatial dims fused into one (``fused_pixel``) where they fuse."""
    default = Roles.of(op).pixel
    taps = {w.out_dim: w.taps for w in op.windows}
    fused = fused_pixel(op) if isa in FUSED_ISAS else None
    longer = [d for d in Roles.of(op).others if op.extent(d) > 1 and taps.get(d, 1) > taps.get(default, 1)]
    return [None, *longer, *([fused] if fused else [])]


@lru_cache(maxsize=1024)
def fusable_positions(op: Op) -> tuple[str, ...]:
    """The position dims of ``op`` that one loop can run over as one (``Schedule.fuse``), outermost first:
    the two innermost position dims where they are a pointwise conv's spatial dims (a window of one tap,
    stride 1 and no padding along each: a position's input is the output's own, so channels-last
    positions stay contiguous across rows), both wider than 1; none otherwise."""
    outputs = [d for d in op.dim_names if d not in op.reduction_dims and d != op.channel_dim]
    windows = {w.out_dim: w for w in op.windows}
    inner = tuple(outputs[-2:])
    if len(inner) < 2 or any(op.extent(d) == 1 for d in inner):
        return ()
    plain = all(d in windows and windows[d].taps == 1 and windows[d].stride == 1 and not windows[d].padded
                for d in inner)
    return inner if plain else ()


def fused_pixel(op: Op) -> str | None:
    """The name of the loop that fuses ``fusable_positions`` (``Knobs.pixel``), None where none fuse."""
    dims = fusable_positions(op)
    return "_".join(dims) if dims else None


@dataclass(frozen=True)
class Names:
    """The loop names of a candidate's split reduction channel dim."""

    cache: str | None              # outer loop of the cache block (among the outer loops), if any
    reduction: str                 # the rc loop the block is kept across
    dot: str | None                # the innermost loop of a group of channels a dot instruction consumes

    @classmethod
    def of(cls, rc: str, cache_block: int, dot: bool) -> Names:
        """The names, made once per reduction dim, cache block and dot (the ranking asks per candidate)."""
        return _names(cls, rc, cache_block, dot)


@lru_cache(maxsize=1024)
def _names(cls: type[Names], rc: str, cache_block: int, dot: bool) -> Names:
    inner = f"{rc}_i" if cache_block else rc
    return cls(f"{rc}_o" if cache_block else None, f"{inner}_o" if dot else inner,
               f"{inner}_i" if dot else None)


def panel_loops(channel: str) -> tuple[str, str]:
    """The loops of a channel panel (``Knobs.channel_panel``): the panels' and, inside it, the panel's
    channel blocks' (the channel block loop ``{channel}_o`` split)."""
    return f"{channel}_o_o", f"{channel}_o_i"


def outer_dim(loop: str) -> str:
    """The op dim an outer loop runs over: its name without the ``_o`` / ``_i`` of its splits."""
    while loop.endswith(("_o", "_i")):
        loop = loop[:-2]
    return loop


def is_table_lookup(candidate: Candidate) -> bool:
    """True for a table-lookup (``tl1``, ``tl2``) candidate."""
    return isinstance(candidate.knobs, LutKnobs)


def is_binary(candidate: Candidate) -> bool:
    """True for a binary op's XNOR + popcount candidate."""
    return isinstance(candidate.knobs, BinaryKnobs)


def dot_elements(op: Op) -> int:
    """Reduction channels one lane of the op's dot instruction consumes: 4 (quantized, vpdpbusd) or
    2 (bfloat16, vdpbf16ps)."""
    return DOT if op.quant is not None else BF16_PAIR


def has_dot(op: Op, isa: str) -> bool:
    """Whether ``op`` on ``isa`` has dot candidates: quantized ops on a SIMD ISA; bfloat16 ops where
    this CPU runs vdpbf16ps and the reduction channels are whole pairs."""
    rc = op.extent(op.reduction_channel_dim)
    if op.quant is not None:
        return isa != "scalar" and rc >= 2
    return op.dtype == "bfloat16" and bf16_dot_available(isa) and rc % BF16_PAIR == 0


def registers(isa: str) -> int:
    """Vector registers of ``isa`` (its table's ``registers``)."""
    return ISAS[isa].registers


def lanes(op: Op, isa: str) -> int:
    """fp32 (quantized ops: int32) lanes of a vector of ``isa``."""
    return (ISAS if op.quant is None else INT_ISAS)[isa].lanes


def layouts(op: Op, knobs: Knobs, vector: int) -> dict[str, str]:
    """Storage layout tags: channels-last activations (or the first input channels-first:
    ``Knobs.activations``) and output, weights in loop order."""
    roles = Roles.of(op)
    weights = op.inputs[1]
    tags = activations_last(op)
    if knobs.activations == "first":
        tags[op.inputs[0]] = op.tensor(op.inputs[0]).letters
    letters = op.tensor(weights).letters
    channel = letters[op.weight_channel_axis]
    reduction = "".join(letters[op.axis(weights, d)] for d in knobs.reduction)
    outer = "".join(letter for letter in letters if letter not in reduction + channel)   # batch dims
    tags[weights] = {"plain": outer + reduction + channel,
                     "packed": f"{outer}{channel}{reduction}{knobs.channel_block}{channel.lower()}",
                     "dot": f"{outer}{channel}{reduction}{vector}{channel.lower()}{dot_elements(op)}"
                            f"{letters[op.axis(weights, roles.rc)].lower()}"}[knobs.weights]
    return tags


@lru_cache(maxsize=4096)
def tap_window(op: Op, pixel: str | None = None) -> Window | None:
    """The window along the op's pixel dim (``Roles.pixel`` of a block along ``pixel``: ``pixel_dims``),
    whose taps a tap dot runs along; None where no window runs along it (fused positions); found once
    per op and pixel (the ranking asks per candidate)."""
    return next((w for w in op.windows if w.out_dim == Roles.of(op, pixel).pixel), None)


def has_taps(op: Op, isa: str) -> bool:
    """Whether ``op`` on ``isa`` has tap dot candidates: a quantized op on a SIMD ISA with a window
    along its pixel dim whose stride and dilation fit the instructions (``codegen/taps.py``)."""
    window = tap_window(op)
    return op.quant is not None and isa != "scalar" and window is not None and fits(window)


def tap_loops(op: Op, reduction: tuple[str, ...]) -> list[str]:
    """The reduction loops of a tap dot candidate, outermost first: the taps of ``tap_window`` split
    by 4 where there are more, their inner loop (the dot loop) last."""
    window = tap_window(op)
    if window.taps <= DOT:
        return list(reduction)
    return [f"{d}_o" if d == window.tap_dim else d for d in reduction] + [f"{window.tap_dim}_i"]


def build_taps(op: Op, knobs: Knobs) -> Schedule:
    """The schedule of a tap dot candidate (``knobs.weights == "taps"``): channels-first activations
    and output (the op's default layouts), the weights' tap dim blocked by 4, lanes along the pixels
    (without its weight format and ``parallel``: ``build`` adds them)."""
    roles = Roles.of(op)
    window = tap_window(op)
    weights = op.inputs[1]
    letters = op.tensor(weights).letters
    tap_letter = letters[op.axis(weights, window.tap_dim)]
    schedule = Schedule(op).layout(weights, f"{letters}{DOT}{tap_letter.lower()}")
    if window.taps > DOT:
        schedule = schedule.split(window.tap_dim, DOT)
    schedule = schedule.tile(**{roles.channel: knobs.channel_block, roles.pixel: knobs.pixel_block})
    loops = tap_loops(op, knobs.reduction)
    schedule = schedule.reorder(*knobs.outer, *loops).vectorize(f"{roles.pixel}_i")
    for loop, factor in knobs.unroll:
        schedule = schedule.unroll(loop, factor)
    return schedule.register_block(loops[0])


def has_planes(op: Op, isa: str) -> bool:
    """Whether ``op`` on ``isa`` has plane candidates: a float op on a SIMD ISA whose every group has
    one input channel (a depthwise conv), with a window of several taps along its pixel dim."""
    window = tap_window(op)
    return (op.quant is None and isa != "scalar" and op.extent(op.reduction_channel_dim) == 1
            and window is not None and window.taps > 1)


def build_planes(op: Op, knobs: Knobs) -> Schedule:
    """The schedule of a plane candidate (``knobs.weights == "planes"``): the op's channels-first
    layouts (NCHW, OIHW: a channel's plane of positions is contiguous, as a caller's numpy array has
    it, so a call packs nothing), lanes along the pixels, a block of ``channel_block`` channels times
    ``pixel_block`` positions in registers across the taps (without ``parallel``: ``build`` adds it)."""
    roles = Roles.of(op)
    schedule = Schedule(op).tile(**{roles.channel: knobs.channel_block, roles.pixel: knobs.pixel_block})
    schedule = schedule.reorder(*knobs.outer, *knobs.reduction).vectorize(f"{roles.pixel}_i")
    for loop, factor in knobs.unroll:
        schedule = schedule.unroll(loop, factor)
    return schedule.register_block(knobs.reduction[0])


def build(op: Op, knobs: Knobs, vector: int) -> Schedule:
    """The schedule of ``knobs`` on ``op`` (``vector``: lanes of the ISA's vectors)."""
    builders = {"taps": build_taps, "planes": build_planes}
    schedule = (builders[knobs.weights](op, knobs) if knobs.weights in builders
                else _blocked(op, knobs, vector))
    if knobs.weight_format != "int8":
        schedule = schedule.weight_format(knobs.weight_format)
    if knobs.prefetch:
        schedule = schedule.prefetch(op.inputs[1], knobs.prefetch)
    return schedule.parallel(knobs.parallel) if knobs.parallel else schedule


def _blocked(op: Op, knobs: Knobs, vector: int) -> Schedule:
    """The schedule of a register-block candidate with the lanes along the channels, without its
    weight format and ``parallel``."""
    roles = Roles.of(op, knobs.pixel)
    names = Names.of(roles.rc, knobs.cache_block, knobs.weights == "dot")
    schedule = Schedule(op)
    for tensor, tag in layouts(op, knobs, vector).items():
        schedule = schedule.layout(tensor, tag)
    if knobs.cache_block:
        schedule = schedule.split(roles.rc, knobs.cache_block)
    if names.dot:
        inner = names.reduction.removesuffix("_o")
        schedule = schedule.split(inner, min(dot_elements(op), schedule.loop(inner).extent))
    if roles.fused:
        schedule = schedule.fuse(*roles.fused, roles.pixel)
    schedule = schedule.tile(**{roles.pixel: knobs.pixel_block, roles.channel: knobs.channel_block})
    if knobs.channel_panel:
        schedule = schedule.split(f"{roles.channel}_o", knobs.channel_panel // knobs.channel_block)
    reduction = [names.reduction if d == roles.rc else d for d in knobs.reduction]
    schedule = schedule.reorder(*knobs.outer, *reduction, *([names.dot] if names.dot else []))
    schedule = schedule.vectorize(f"{roles.channel}_i")
    for loop, factor in knobs.unroll:
        schedule = schedule.unroll(loop, factor)
    return schedule.register_block(reduction[0])


def build_lut(op: Op, knobs: LutKnobs) -> Schedule:
    """The schedule of a table-lookup candidate (``dataflows.table_lookup`` with its block and order,
    and ``parallel`` on its parallel loop)."""
    schedule = table_lookup(op, knobs.weight_format, knobs.pixel_block, knobs.channel_block,
                            Roles.of(op).pixel, (*knobs.outer, *knobs.reduction))
    return schedule.parallel(knobs.parallel) if knobs.parallel else schedule


def ternary(op: Op) -> bool:
    """True if ``op`` has ternary weights (the weight formats are searched)."""
    return op.quant is not None and op.quant.ternary


def lut_columns(op: Op, channel_block: int) -> int:
    """Column blocks of 32 output channels in a table-lookup block of ``channel_block`` channels (all
    of them: each group's channels start a column block)."""
    if channel_block < op.channels:
        return -(-channel_block // COLUMNS)
    return lut_shape(op, FORMATS[LUT_FORMATS[0]]).blocks


def lut_candidates(op: Op, isa: str, threads: int = 1) -> list[Candidate]:
    """The table-lookup candidates of a ternary ``op`` on ``isa`` for ``threads`` threads (for several,
    those with a loop to split: ``_lut_parallel_loop``); none for another op, an ISA the kernel does
    not run on or an op form it does not take (``targets.x86.lut_c.check_lut_on``)."""
    if not ternary(op) or isa not in LUT_ISAS:
        return []
    roles = Roles.of(op)
    extents = dict(op.dims)
    # the op form, probed with one column block (a block of all the channels may hold too many outputs)
    split = COLUMNS < op.channels
    probe = LutKnobs(LUT_FORMATS[0], 1, COLUMNS if split else op.channels, roles.reduction,
                     (*roles.others, f"{roles.pixel}_o", *([f"{roles.channel}_o"] if split else [])))
    try:
        check_lut_on(build_lut(op, probe), isa)
    except ScheduleError:
        return []
    # 1-4 or 8 column blocks below the channel count, and all the channels where a block of one position
    # holds them
    channel_blocks = [m * COLUMNS for m in LUT_COLUMN_BLOCKS if m * COLUMNS < op.channels]
    channel_blocks += [op.channels] if lut_columns(op, op.channels) <= MAX_ACCUMULATORS else []
    found = []
    for cb in channel_blocks:
        columns = lut_columns(op, cb)
        for pb in _blocks(extents[roles.pixel], min(MAX_PIXEL_BLOCK, MAX_ACCUMULATORS // columns)):
            outer = {d: extents[d] for d in roles.others}
            outer[f"{roles.pixel}_o"] = -(-extents[roles.pixel] // pb)
            if cb < op.channels:
                outer[f"{roles.channel}_o"] = -(-op.channels // cb)
            for fmt, reduction, order in itertools.product(LUT_FORMATS, _reduction_orders(roles, extents),
                                                           _outer_orders(outer)):
                knobs = LutKnobs(fmt, pb, cb, reduction, order)
                parallel = _lut_parallel_loop(op, knobs, threads)
                if threads == 1 or parallel:
                    found.append(Candidate(op, isa, replace(knobs, parallel=parallel)))
    return found


def _lut_parallel_loop(op: Op, knobs: LutKnobs, threads: int) -> str | None:
    """The loop of a one-thread table-lookup candidate to split over ``threads``: the outermost of extent
    > 1 (in table-lookup units) between the table build and the register block, if it has at least
    ``threads`` iterations; None otherwise (and for one thread)."""
    if threads == 1:
        return None
    nest = lut_nest(build_lut(op, knobs))
    between = [(name, extent) for name, extent in nest.loops[nest.table_at:nest.region] if extent > 1]
    return between[0][0] if between and between[0][1] >= threads else None


def build_tiles(op: Op, knobs: TileKnobs) -> Schedule:
    """The schedule of an AMX candidate: channels-last output, the pixel and channel dims split by
    the blocks, the pixel block's loop outside the channel block's unless ``channels_outer``, and
    ``parallel`` on the block loop of the dim whose blocks the threads split."""
    pixel, channel = pixel_dim(op), op.channel_dim
    output = moved_last(op.tensor(op.output).letters, op.output_channel_axis)
    schedule = Schedule(op).layout(op.output, output)
    schedule = schedule.tile(**{pixel: knobs.pixel_block, channel: knobs.channel_block})
    if not knobs.channels_outer:
        schedule = schedule.reorder(f"{pixel}_o", f"{channel}_o")
    if knobs.patches:
        schedule = fused_reduction(schedule)
    if knobs.parallel is None:
        return schedule
    return schedule.parallel(f"{pixel if knobs.parallel == 'pixels' else channel}_o")


def fused_reduction(schedule: Schedule) -> Schedule:
    """``schedule`` with the op's reduction dims fused into one loop, taps then channels (the tile
    kernels then gather each pixel's patch, ``targets.x86.tiles.patches``)."""
    op = schedule.op
    dims = [*(w.tap_dim for w in op.windows), op.reduction_channel_dim]
    schedule = schedule.reorder(*dims)
    for name in dims[1:]:
        schedule = schedule.fuse(dims[0], name, f"{dims[0]}_{name}")
        dims[0] = f"{dims[0]}_{name}"
    return schedule


def _gathers_fewer_steps(op: Op) -> bool:
    """Whether gathering patches takes fewer tile K-steps than the taps (a conv of one group)."""
    if not op.windows or op.groups != 1 or len(op.reduction_dims) < 2:
        return False
    plain = tile_plan(Schedule(op)).shape
    gathered = tile_plan(fused_reduction(Schedule(op))).shape
    steps = lambda s: s.row_taps * s.column_taps * len(s.starts)
    return steps(gathered) < steps(plain)


def tile_candidates(op: Op, threads: int = 1) -> list[Candidate]:
    """The AMX candidates of ``op`` for ``threads`` threads, on any CPU (none for an op the tile kernels
    refuse; for several threads, those that split at least ``threads`` blocks)."""
    try:
        if op.quant is None and op.dtype != "bfloat16":
            return []
        tile_plan(Schedule(op))
    except (ValueError, TileError):
        return []
    splits = [None] if threads == 1 else list(SPLITS)
    gathers = (False, True) if _gathers_fewer_steps(op) else (False,)
    found = [Candidate(op, TILE_ISA, TileKnobs(pb, cb, outer, split, patch))
             for patch, pb, cb, outer, split in itertools.product(gathers, BLOCKS, BLOCKS, (True, False),
                                                                  splits)]
    return [c for c in found if threads == 1 or tile_plan(c.schedule).units >= threads]


def _blocks(extent: int, limit: int) -> list[int]:
    """Block sizes 1..limit (at most ``extent``)."""
    return [b for b in range(1, min(limit, extent) + 1)]


def _reduction_orders(roles: Roles, extents: dict[str, int]) -> list[tuple[str, ...]]:
    """Orders of the reduction dims keeping the taps in their order; orders that differ only in
    where loops of extent 1 go count once, as the one of them with the fewest such loops innermost
    (a 1x1 conv's ``kh, kw, c``: its innermost loop, the channels, is the one ``_unrolls`` unrolls;
    ``c, kh, kw`` left it rolled: ResNet-50's 256->64 1x1 conv at 56x56, 8x32 blocks, ran 0.79-0.81 ms
    so and 0.75-0.77 ms with ``c`` unrolled by 4, minimum thread times of 40 interleaved calls on this
    project's shared 2-core Xeon with AMX)."""
    orders: dict[tuple[str, ...], tuple[str, ...]] = {}
    for order in itertools.permutations(roles.reduction):
        if [d for d in order if d in roles.taps] != list(roles.taps):
            continue
        key = tuple(d for d in order if extents[d] > 1)
        if key not in orders or _trailing_ones(order, extents) < _trailing_ones(orders[key], extents):
            orders[key] = order
    return list(orders.values())


def _trailing_ones(order: tuple[str, ...], extents: dict[str, int]) -> int:
    """How many loops of extent 1 ``order`` ends with."""
    return next((i for i, d in enumerate(reversed(order)) if extents[d] > 1), len(order))


def _outer_orders(loops: dict[str, int]) -> list[tuple[str, ...]]:
    """Every order of the outer loops of extent > 1 (loops of extent 1 first, in place)."""
    trivial = tuple(name for name, extent in loops.items() if extent == 1)
    wide = [name for name, extent in loops.items() if extent > 1]
    return [trivial + order for order in itertools.permutations(wide)]


def _unrolls(reduction: list[str], extents: dict[str, int],
             long_first: bool = False) -> list[tuple[tuple[str, int], ...]]:
    """No unroll; the short reduction loops inside the first one (a depthwise conv's taps) unrolled
    completely; the innermost reduction loop unrolled by UNROLL (before the short ones with
    ``long_first``: candidates that the ranking ties are tried in this order)."""
    short = tuple((d, extents[d]) for d in reduction[1:] if 1 < extents[d] <= MAX_UNROLLED)
    innermost = ((reduction[-1], UNROLL),) if extents[reduction[-1]] >= 2 * UNROLL else ()
    choices = [innermost, short] if long_first else [short, innermost]
    return [()] + [choice for choice in choices if choice]


def _streaming_first(orders: list[tuple[str, ...]], rc: str) -> list[tuple[str, ...]]:
    """The reduction orders with the input channels innermost first (the others after them, in their
    order): on channels-last activations and weights packed in loop order, consecutive iterations then
    read consecutive elements of both operands, and a cache line of the input serves a vector's worth
    of iterations in a row (with the taps innermost, a block of a many-channel layer reads tap x pixel
    lines a pixel's channels apart per iteration, which share few L1 sets, before coming back to
    them). Candidates the ranking ties are tried in this order. Measured in thread CPU time against
    PyTorch NHWC on the shared Xeon, one interleaved run each: YOLOv3's stride-2 layer 9x32 block
    0.87x with the taps innermost, 1.08x with c innermost (unrolled by 4); VGG conv5_1 10x32 1.00x vs
    1.05x; DeepLab's dilated layer 7x32 1.14x (c between the taps) vs 1.20x."""
    return sorted(orders, key=lambda order: order[-1] != rc)


def cache_block_sizes(extent: int) -> list[int]:
    """Reduction channels per cache block for a reduction of ``extent`` channels: the
    ``CACHE_BLOCKS`` below it, and its even shares (``extent / n``, no partial last block) that are
    multiples of ``EVEN_BLOCK`` in their range (768: 384 and 192 too)."""
    shares = {extent // n for n in range(2, extent // EVEN_BLOCK + 1)
              if extent % n == 0 and (extent // n) % EVEN_BLOCK == 0}
    return sorted({b for b in CACHE_BLOCKS if b < extent}
                  | {b for b in shares if CACHE_BLOCKS[0] <= b <= CACHE_BLOCKS[-1]})


def candidates(op: Op, isa: str, threads: int = 1, tiles: bool = False) -> list[Candidate]:
    """Every candidate of the search space of ``op`` on ``isa`` (a resolved ISA name; ``TILE_ISA``: the
    AMX candidates only, on any CPU); ``tiles``: add the AMX candidates where the CPU has AMX (a search
    on the best ISA, ``isa="auto"``); each for ``threads`` threads (``Candidate.threads``)."""
    if op.quant is not None and op.quant.binary:
        found = binary_candidates(op, isa, threads)
    elif isa == TILE_ISA:
        found = tile_candidates(op, threads)
    else:
        found = [c for pixel in pixel_dims(op, isa) for c in _register_blocks(op, isa, threads, pixel)]
        found += tap_candidates(op, isa, threads) if has_taps(op, isa) else []
        found += plane_candidates(op, isa, threads) if has_planes(op, isa) else []
        found += tile_candidates(op, threads) if tiles and _has_amx() else []
        found += lut_candidates(op, isa, threads)
    return [c if c.threads == threads else replace(c, threads=threads) for c in found]


def _has_amx() -> bool:
    """Whether this CPU has the AMX flags the tile kernels need (``check_amx_cpu``)."""
    try:
        check_amx_cpu()
    except ValueError:
        return False
    return True


def emulates_dot(isa: str, weights: str) -> bool:
    """Whether a register block of ``weights`` on ``isa`` runs the table's emulated dot (AVX2's
    ``lo_avx2_dpbusd``: ``EMULATED_DOT_OPERANDS``; on s16 weights ``lo_avx2_dot_s16``)."""
    return weights == "dot" and isa in EMULATED_DOT_OPERANDS


def operand_registers(isa: str, weights: str, vectors: int, fmt: str = "int8") -> int:
    """Vector registers a register block of ``vectors`` channel vectors leaves to its operands: the
    weights and a broadcast, or ``EMULATED_DOT_OPERANDS`` where ``isa`` emulates the dot
    (``WIDE_DOT_OPERANDS`` on weights in ``fmt`` s16)."""
    if not emulates_dot(isa, weights):
        return vectors + 1
    return (WIDE_DOT_OPERANDS if fmt == "s16" else EMULATED_DOT_OPERANDS)[isa]


def memory_operand(op: Op, isa: str, weights: str, vectors: int, pixel: str | None) -> bool:
    """Whether a register block of ``op`` on ``isa`` of ``vectors`` channel vectors may hold one accumulator
    row more than its registers leave beside all its weight vectors, its last weight vector multiplied from
    memory by each update (``codegen/block.py``'s operands from memory, the table's ``fma_memory``): a float32
    op of one group, plain or packed weights, two or more vectors, along a padded window (where the wider
    block covers a row without a partial block's padding-guarded copy, as 7 columns in one 7x16 block against
    4x16's 4 + 3). ResNet's 3x3 convs at 7x7 on a Zen 3 core (AMD EPYC, 1 thread, kernel only, thread times of
    21 interleaved calls): 512->512 7x16 0.85x the 4x16 first choice's median, 256->512 stride 2 0.93x,
    512->512 stride 2 from 14x14 0.89x; at 14x14 and wider 1.08-1.11x (15 loads a row of 14 multiply-adds
    against 4x16's 6 of 8: ``MEMORY_OPERAND``); 1x1 convs 1.2-1.5x (not offered)."""
    window = tap_window(op, pixel)
    return ("fma_memory" in ISAS[isa].ops and op.quant is None and op.dtype == "float32" and op.groups == 1
            and weights in WEIGHTS[:2] and vectors >= 2 and window is not None
            and bool(window.pad or window.pad_end))


def reads_memory(candidate: Candidate) -> bool:
    """Whether a register-blocked candidate multiplies a weight vector from memory (``memory_operand``):
    its accumulators, weight vectors and a broadcast exceed its ISA's registers."""
    knobs, isa = candidate.knobs, candidate.isa
    if not isinstance(knobs, Knobs) or isa == TILE_ISA or knobs.weights not in WEIGHTS[:2]:
        return False
    vectors = -(-knobs.channel_block // lanes(candidate.op, isa))
    return (memory_operand(candidate.op, isa, knobs.weights, vectors, knobs.pixel)
            and (knobs.pixel_block + 1) * vectors + 1 > registers(isa))


def weight_formats(op: Op, isa: str, weights: str) -> list[str]:
    """The weight formats of ``op``'s register blocks of ``weights`` on ``isa``: i2_s for a ternary op,
    else int8, and s16 too for an emulated dot's blocks of an ungrouped op of several output channels
    (``WIDE_DOT_OPERANDS``; a vector loop of one channel reads no whole dot vector)."""
    if ternary(op):
        return ["i2_s"]
    wide = emulates_dot(isa, weights) and isa in WIDE_DOT_OPERANDS and op.groups == 1 and op.channels > 1
    return ["int8", "s16"] if wide else ["int8"]


def _register_blocks(op: Op, isa: str, threads: int, pixel: str | None) -> list[Candidate]:
    """The register-blocked candidates of ``op`` on ``isa`` with the block along ``pixel``
    (``pixel_dims``) and the lanes along the channels."""
    roles = Roles.of(op, pixel)
    vector = lanes(op, isa)
    extents = {**dict(op.dims), roles.pixel: roles.extent(op, roles.pixel)}
    rc_extent = extents[roles.rc]
    weight_kinds = ["plain", "packed"]
    if has_dot(op, isa):
        weight_kinds.append("dot")
    channel_blocks = channel_block_sizes(op, vector)
    cache_blocks = [0] + cache_block_sizes(rc_extent)
    ahead = prefetched_weights(op)
    activations = activation_choices(op)
    kinds = [(weights, fmt) for weights in weight_kinds for fmt in weight_formats(op, isa, weights)]
    found = []
    for cb, (weights, fmt), cache_block in itertools.product(channel_blocks, kinds, cache_blocks):
        if weights == "packed" and cb == op.channels:
            continue                       # one channel block: packed is the plain layout
        if fmt == "s16" and cache_block and rc_extent % cache_block:
            continue                       # s16's dot loop in a partial cache block: codegen refuses it
        vectors = -(-cb // vector)
        spare = ISAS[isa].registers - operand_registers(isa, weights, vectors, fmt)
        spare += memory_operand(op, isa, weights, vectors, pixel)      # a weight vector from memory
        names = Names.of(roles.rc, cache_block, weights == "dot")
        panel = channel_panel(op, cb) if weights == "packed" and not cache_block and threads == 1 else 0
        red_extents = {**extents, names.reduction: min(cache_block or rc_extent, rc_extent)}
        if weights == "dot":
            red_extents[names.reduction] = -(-red_extents[names.reduction] // dot_elements(op))
        for pb in _blocks(extents[roles.pixel], min(MAX_PIXEL_BLOCK, spare // vectors)):
            if fmt == "s16" and pb < WIDE_DOT_ROWS:
                continue
            outer = {d: extents[d] for d in roles.others}
            outer[f"{roles.pixel}_o"] = -(-extents[roles.pixel] // pb)
            outer[f"{roles.channel}_o"] = -(-op.channels // cb)
            if names.cache:
                outer[names.cache] = -(-rc_extent // cache_block)
            for reduction in _streaming_first(_reduction_orders(roles, extents), roles.rc):
                loops = [names.reduction if d == roles.rc else d for d in reduction]
                unrolls = _unrolls(loops, red_extents, long_first=True)
                for order, unroll in itertools.product(_outer_orders(outer), unrolls):
                    parallel = _parallel_loop(order, outer, threads, names.cache)
                    if threads == 1 or parallel:
                        found += [Candidate(op, isa, Knobs(pb, cb, reduction, order, weights, cache_block,
                                                           unroll, parallel, fmt, pixel, activations=where,
                                                           prefetch=ahead if weights == "packed" else 0),
                                            threads=threads) for where in activations]
                if panel:
                    plain = Knobs(pb, cb, reduction, (), weights, 0, (), None, fmt, pixel, prefetch=ahead)
                    found += [Candidate(op, isa, replace(in_panels(op, plain, panel), unroll=unroll),
                                        threads=threads) for unroll in unrolls]
    return found


def channel_block_sizes(op: Op, vector: int) -> list[int]:
    """The channel blocks of ``op``'s register blocks: 1 to ``CHANNEL_VECTORS`` vectors of ``vector``
    lanes (or all channels). A grouped conv whose groups hold whole vectors broadcasts each vector's
    input channel, which a tail block could not guard lane by lane (``codegen.block`` refuses it): there,
    only blocks that divide the channels (``Conv2d(2, 32, 1, groups=2)`` on AVX2: 8, 16 and 32, not 24)."""
    sizes = sorted({min(m * vector, op.channels) for m in range(1, CHANNEL_VECTORS + 1)})
    if op.groups > 1 and (op.channels // op.groups) % vector == 0:
        return [cb for cb in sizes if op.channels % cb == 0]
    return sizes


def in_panels(op: Op, knobs: Knobs, panel: int) -> Knobs:
    """``knobs`` (a register block without a cache block, one thread) in channel panels of ``panel``
    channels, a multiple of its channel block: the panels' loop outermost, then the other dims and the
    pixel blocks, the panel's channel blocks innermost (``panel_loops``)."""
    roles = Roles.of(op, knobs.pixel)
    panels, blocks = panel_loops(roles.channel)
    return replace(knobs, outer=(panels, *roles.others, f"{roles.pixel}_o", blocks), channel_panel=panel)


def channel_panel(op: Op, channel_block: int) -> int:
    """Output channels per panel of a packed-weights register block of ``channel_block`` channels without
    a cache block (``Knobs.channel_panel``; 0: none): the most channel blocks, a power of two and at least
    two, whose weights fill at most ``1 / PANEL_SHARE`` of L2, below all the channels, for a float32
    pointwise op of one group whose packed weights exceed half of L2 (GotoBLAS's panel of packed B: every
    row passes a panel while its weights stay in L2, the whole reduction at once, each output stored once;
    a cache block instead reloads the partial sums on every pass, beyond L2 where the output outgrows it;
    where it fits, panels still ran faster: ResNet-50's 1x1 1024->256 conv at 14x14, 0.2 MB of output, in
    32-channel panels 0.90-0.93x the 128-deep cache blocks' time kernel-only and 0.91-0.97x by minimum in
    the model, on the AMD EPYC Zen 3, whose float blocks' panels are priced by ``rank.l2_fit``). GEMM
    512x1024x1024 from row-major A, 8x32 blocks, kernel calls with the weights prepacked, median / minimum
    thread times of 16 interleaved rounds under ``chrt -f 10`` (this project's shared Xeon with AMX, load
    7, four runs): 128-channel panels 11.36 / 8.30, 10.46 / 8.48, 11.47 / 9.81, 11.27 / 8.87 ms; 256-deep
    cache blocks (the first choice before) 12.32 / 8.88, 11.71 / 9.06, 12.00 / 9.96, 12.12 / 8.65 ms;
    torch.matmul 10.97 / 8.83, 10.29 / 9.61, 11.20 / 9.81, 10.85 / 8.83 ms. 256-channel panels (1 MB)
    ran 4-6% slower than 128 in three runs, 64 alike."""
    l2 = machine_profile().cache_size("L2")
    per_channel = math.prod(op.tensor(op.inputs[1]).shape) // op.channels * 4
    if (op.quant is not None or op.dtype != "float32" or op.groups != 1
            or any(window.taps > 1 for window in op.windows)
            or per_channel * op.channels <= l2 // 2):
        return 0
    panel = channel_block
    while 2 * panel < op.channels and 2 * panel * per_channel <= l2 // PANEL_SHARE:
        panel *= 2
    return panel if panel > channel_block else 0


def prefetched_weights(op: Op) -> int:
    """The weight elements ahead that a packed-weights register block of ``op`` prefetches
    (``Schedule.prefetch``; 0: none): ``PREFETCH_AHEAD`` bytes for a float32 op (a conv of any window, a
    GEMM) whose weights exceed ``PREFETCHED_WEIGHTS`` and serve at most ``PREFETCH_POSITIONS`` output
    positions each: a layer bound by streaming its weights. Such weights do not stay in L2 beside a
    model's activations from one run to the next, and each block's first pass over them waits on them
    from beyond L2; the hardware prefetchers do not run that far ahead. Alone (median / minimum thread
    times of 21-25 interleaved calls, the weights out of L2 before each, this project's shared 2-core
    Xeon with AMX), MobileNetV2's 1x1 convs at 7x7: 320->1280 465 / 383 -> 385 / 345 us, 960->320
    314 / 287 -> 260 / 240 us, 960->160 171 / 162 -> 134 / 128 us, 160->960 171 / 155 -> 149 / 137
    us; ResNet-50's 2048->512 at 7x7 1308 / 1212 -> 1186 / 1129 us, 1024->2048 stride 2 to 7x7
    2095 / 1954 -> 1834 / 1759 us; with the weights in L2 they ran as before or faster. ResNet's 3x3
    convs at 7x7 alike (15 interleaved calls, L2 overwritten before each, under ``chrt -f 10``, load 8):
    512->512 2336 / 2134 -> 1922 / 1799 us, 256->512 stride 2 from 14x14 1203 / 1123 -> 1020 / 965 us.
    Where more positions share each weight its later passes read it from L2 and the prefetches only
    cost: ResNet-50's 1024->256 at 14x14 ran 3-4% slower with them (714 -> 737 us), ResNet-18's
    256->256 3x3 at 14x14 1532 / 1488 -> 1632 / 1564 us; 64->384 (98 KB) gained nothing."""
    weights = math.prod(op.tensor(op.inputs[1]).shape) * 4
    positions = math.prod(op.tensor(op.output).shape) // op.channels
    if (op.quant is not None or op.dtype != "float32" or weights <= PREFETCHED_WEIGHTS
            or positions > PREFETCH_POSITIONS):
        return 0
    return PREFETCH_AHEAD // 4


def activation_choices(op: Op) -> tuple[str, ...]:
    """Where a register block of ``op`` may store its first input's channels (``ACTIVATIONS``): last, and
    first too for a float op of one group with at most ``FEW_CHANNELS`` reduction channels whose logical
    layout is not channels-last: its lanes (output channels) share each input element, a broadcast read
    from either layout. Not with groups (each lane reads its own group's channel: a gather from
    channels-first), nor quantized (a dot group needs its 4 channels adjacent)."""
    source = op.inputs[0]
    few = op.quant is None and op.groups == 1 and op.extent(op.reduction_channel_dim) <= FEW_CHANNELS
    moved = activations_last(op)[source] != op.tensor(source).letters
    return ACTIVATIONS if few and moved else ACTIVATIONS[:1]


def binary_candidates(op: Op, isa: str, threads: int = 1) -> list[Candidate]:
    """The register blocks of a binary op on ``isa`` (none with more than one thread or on AMX: the
    XNOR + popcount kernel runs on one thread of a SIMD ISA or scalar)."""
    if threads > 1 or isa not in BINARY_LANES:
        return []
    return [Candidate(op, isa, knobs) for knobs in register_blocks(op, BINARY_LANES[isa], ISAS[isa].registers,
                                                                    BINARY_MAX_POSITIONS, CHANNEL_VECTORS)]


def tap_candidates(op: Op, isa: str, threads: int = 1) -> list[Candidate]:
    """The tap dot candidates of ``op`` on ``isa`` (``has_taps``): ``_pixel_lanes`` blocks, the reduction
    orders that end with the window's taps, the short taps unrolled or not."""
    window = tap_window(op)
    extents = dict(op.dims)
    red_extents = {**extents, f"{window.tap_dim}_o": -(-window.taps // DOT)}
    orders = [order for order in _reduction_orders(Roles.of(op), extents) if order[-1] == window.tap_dim]
    return _pixel_lanes(op, isa, threads, "taps", orders,
                        lambda order: _unrolls(tap_loops(op, order)[:-1], red_extents))


def plane_candidates(op: Op, isa: str, threads: int = 1) -> list[Candidate]:
    """The plane candidates of ``op`` on ``isa`` (``has_planes``): ``_pixel_lanes`` blocks, every
    reduction order, the short taps unrolled or not."""
    extents = dict(op.dims)
    return _pixel_lanes(op, isa, threads, "planes", _reduction_orders(Roles.of(op), extents),
                        lambda order: _unrolls(list(order), extents))


def _pixel_lanes(op: Op, isa: str, threads: int, weights: str, orders: list[tuple[str, ...]],
                 unrolls: Callable[[tuple[str, ...]], list]) -> list[Candidate]:
    """Candidates with the lanes along the pixels (``weights``: "taps" or "planes"): 1 to
    ``CHANNEL_VECTORS`` vectors of positions (or all of them) times 1 to 8 output channels (as many
    accumulators as the registers leave), each reduction order of ``orders`` with each of its
    ``unrolls``, every order of the outer loops."""
    roles = Roles.of(op)
    vector, extents = lanes(op, isa), dict(op.dims)
    pixels = extents[roles.pixel]
    found = []
    for pb in sorted({min(m * vector, pixels) for m in range(1, CHANNEL_VECTORS + 1)}):
        vectors = -(-pb // vector)
        fit = (ISAS[isa].registers - 2 * vectors - 2) // vectors
        for cb in _blocks(op.channels, min(MAX_TAP_CHANNELS, fit)):
            outer = {d: extents[d] for d in roles.others}
            outer[f"{roles.pixel}_o"] = -(-pixels // pb)
            outer[f"{roles.channel}_o"] = -(-op.channels // cb)
            for reduction in orders:
                for order, unroll in itertools.product(_outer_orders(outer), unrolls(reduction)):
                    parallel = _parallel_loop(order, outer, threads, None)
                    if threads == 1 or parallel:
                        knobs = Knobs(pb, cb, reduction, order, weights, 0, unroll, parallel,
                                      "i2_s" if ternary(op) else "int8")
                        found.append(Candidate(op, isa, knobs, threads=threads))
    return found


def _parallel_loop(order: tuple[str, ...], extents: dict[str, int], threads: int,
                   reduction: str | None) -> str | None:
    """The loop to split over ``threads``: the outermost of extent > 1 if it has at least
    ``threads`` iterations and is not a reduction loop; None otherwise (and for one thread)."""
    if threads == 1:
        return None
    first = next((name for name in order if extents[name] > 1), None)
    return first if first is not None and first != reduction and extents[first] >= threads else None
