"""AMX tile kernels of quantized and bfloat16 ops: an implicit GEMM with output pixels as tile rows.

``compile(isa="amx")`` maps an integer quantized or a bfloat16 Conv2d or Matmul onto the AMX tiles
(``targets/x86/amx.py``). The op is read through its roles as a GEMM per group: rows are output
pixels, columns output channels, the reduction runs over the window taps and, inside each tap,
the group's input channels in 64-byte chunks (one ``_tile_dpbusd`` for uint8 activations, or
``_tile_dpbssd`` for int8 ones: no +128 shift, so the compensation has no shift term;
``_tile_dpbf16ps`` on pairs of bf16 with float32 accumulators for bfloat16).

* Activations are stored channels-last and padded by the op's padding (zeros: a padding tap
  adds nothing to the raw products ``P``, which is what the compensation of
  ``codegen/quantized.py`` expects of taps that do not exist), each group's channels padded with
  zeros to whole 64-byte chunks (so tile rows of layers with 64-byte multiples of channels start
  on cache lines, and no chunk reads another group's values; int8 of one group and more than 64
  channels unpadded: ``TileShape.pitch``). Where nothing is padded, a channels-last input (a
  previous kernel's output) is read where it is, without a copy (``activations_in_place``). Then
  every tap of a run of pixels of one output row is one tile load per chunk with row stride
  ``stride * C`` bytes: no im2col, no bounds checks in the tile loop. An op whose windows are
  trivial (1x1, stride 1, no padding: also a GEMM) is one long row of ``batch * OH * OW`` pixels,
  so tiles run across output rows. A
  stride-1 conv numbers its output pixels over the padded input's width (``TileShape.wide``, where
  that takes fewer tiles): every tap of consecutive numbers is then at stride ``C`` across output
  rows too, and the numbers past an output row's last pixel are computed and not stored.
  int8 with one group and undilated columns folds the column taps into the reduction (they are
  contiguous in the stored input) when that takes fewer chunks: conv1's 7 taps x 3 channels are
  one 28-byte chunk per filter row instead of 7 chunks of 4 bytes.
* Gathered patches (``patches``: a schedule whose one loop fuses all the reduction dims, taps then
  channels): the channels are stored unpadded and the kernel copies each output pixel's whole patch
  (``KH x KW x C`` values, its runs of ``KW x C`` consecutive stored values) into a per-thread
  buffer, one row of whole 64-byte chunks per pixel (zeros past the patch), once per pixel block
  (the channel blocks after it reuse it); the tiles load their rows from there: conv1's 147 bytes
  in 3 K-steps instead of 7 filter rows. Each pixel's window is found from its place among all the
  output pixels, so the blocks run across output rows and images as a GEMM's do (``flat``): tile
  rows are not left empty at the end of an output row (VGG conv5_1's 19-pixel rows fill 19 of the
  32 rows of a 2-tile block per output row, its 361 pixels 361 of 384 in one line). The copy is
  inside the timed call (the input is runtime data): an int8 run of at most 64 bytes is one whole
  16/32/64-byte vector load and store (what it writes past the run is overwritten by the next run
  or meets zero weights; what it reads past the input's end is its declared read-ahead), others
  exact.
* Weights are packed once (``pack_weights``, in ``prepare``) in the B-tile layout
  ``[group][16-channel tile][kh][kw][K chunk][c / 4][4 * 16]`` (VNNI-4; bf16: VNNI-2, ``[c / 2]
  [2 * 16]``), zero past the group's channels and outputs.
* An output block is 1 or 2 tile rows (16 pixels each) x 1 or 2 tile columns (16 channels),
  its accumulators kept in tiles across all taps and chunks, then stored to a small scratch over
  which the epilogue writes the output in the schedule's output layout: int8, the quantized
  epilogue (compensation and bias as one table ``quantized.FOLDED`` filled at the call's start,
  activation sums, requantization into an int row narrowed in a second pass, by masked ``vpmovdb``
  stores where the output's channels are contiguous, or scaling); bf16, ``acc + bias``. A row of all
  the block's columns (all but a shifted last block's) runs loops of a constant trip count.
* Tails need no second tile configuration: the last pixel block of a row and the last channel
  block are shifted back to end at the edge (recomputing a few outputs, which their epilogue does
  not write again); a row shorter than a tile, fewer than 16 channels or fewer than 64 bytes of a
  tap shrink the tiles instead.

The schedule chooses the block and the order, as it chooses a register block: a split of the
pixel dim (a conv's ``ow``, a GEMM's ``i``) by 16 or 32 sets the pixel block, a split of the
channel dim by 16 or 32 the channel block (default 32 x 32; a split by the whole extent of a
dim shorter than 32, as a schedule file stores a larger split, is the block that covers it), and
the channel block's loop outside the pixel loops (the default order) keeps a block's weights hot
across all pixels; a pixel loop outside it keeps the pixels' activations hot across the channel
blocks. Its output layout is the output's. A loop fusing all the reduction dims gathers patches
(above). The loop nest itself is fixed; other steps have no effect here.

Threads: ``parallel`` on a loop over the output's pixel dims (the pixel block's loop, a conv's
rows or batch) splits the pixel blocks of all lines (``lines x blocks per line``) over OpenMP
threads, on a loop over the output channels (the channel block's loop) the channel blocks of each
group; either as one contiguous range of whole blocks per thread (``schedule(static)``). Each
thread loads the tile configuration, runs its blocks in the schedule's order and releases the
tiles (``_tile_loadconfig`` / ``_tile_release`` act on the calling thread's tiles only). Linux's
AMX permission (``amx_runtime.require_amx``) is per process: threads started before or after the
request may use the tiles, each getting its tile state buffer on its first tile instruction. No
output element is written by two threads (the tails above).
Refused (``TileError``): float32 ops, ``arithmetic("dequantize")``, a parallel loop over both pixels
and channels, depthwise convs, a fused reduction loop in another order or of an op with groups,
more than 2 windows (a Conv3d) or more than one batch dim (a batched Matmul).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property, partial

import numpy as np

from ...codegen import cprint, quantized
from ...codegen.emit import KERNEL_NAME, Generated, kernel_arguments, thread_range, with_threads
from ...codegen.params import KernelParam, index_ctype, signature
from ...expr import Var
from ...ops import Op
from ...schedule import Fuse, Schedule, ScheduleError
from .amx import AMX, MAX_COLSB, TILE, TileBlock
from .isa import INT_ISAS, cpu_flags

WIDE_SHARE = 0.9     # tiles over the padded width against row by row, at most (``TileShape.wide``):
                     # int8 2x2-tile blocks, quiet machine, interleaved: VGG conv5_1 (25 of 38 tiles)
                     # 0.806 -> 0.569 ms; ResNet-50 conv2_x (203 of 224) 0.078 -> 0.080-0.085 ms and
                     # conv3_x (53 of 56) 0.075-0.078 -> 0.081 ms, slower: the saving must be large
BLOCKS = (16, 32)                # pixels (channels) per output block: 1 or 2 tile rows (columns)
SPLITS = {"pixels": "the pixel blocks of all lines",        # what a parallel tile kernel splits over
          "channels": "the channel blocks of each group"}     # threads
BYTES = {"int8": 1, "bfloat16": 2}   # bytes per value of each element type the tiles multiply
AMX_INT = replace(INT_ISAS["avx512"], name="amx", cpu_flags=INT_ISAS["avx512"].cpu_flags + AMX.cpu_flags,
                  compile_flags=INT_ISAS["avx512"].compile_flags + AMX.compile_flags,
                  prelude=AMX.prelude)   # AVX-512 for the epilogue, AMX for the tiles


class TileError(ScheduleError):
    """A schedule or op that the AMX tile kernels do not take, with the reason."""


def check_amx_cpu() -> None:
    """ValueError naming the missing flags if this CPU has no AMX (int8) and AVX-512 VNNI."""
    missing = sorted(set(AMX_INT.cpu_flags) - cpu_flags())
    if missing:
        raise ValueError(f"isa 'amx' needs CPU features {', '.join(missing)} that this CPU lacks "
                         f"(AMX is on Intel Xeon 4th generation (Sapphire Rapids) and later); "
                         f"use isa='auto'")


@dataclass(frozen=True)
class TileShape(quantized.GroupShape):
    """An op as the tile kernel sees it: per group a GEMM of pixels x channels over taps x chunks."""

    element: int = 1                 # bytes per value: 1 (int8), 2 (bfloat16)
    patch: bool = False              # each pixel's whole patch gathered into one run (``patches``)

    @classmethod
    def of(cls, op: Op, patch: bool = False) -> TileShape:
        return super().of(op, element=BYTES[_element(op)], patch=patch)

    @property
    def group(self) -> int:
        """Values per 32-bit group of a B tile: 4 int8 (VNNI-4), 2 bf16 (VNNI-2)."""
        return 4 // self.element

    @property
    def values(self) -> int:
        """Values of a full 64-byte chunk."""
        return MAX_COLSB // self.element

    @property
    def pitch(self) -> int:
        """Channels stored per group: padded with zeros to whole 64-byte chunks (to a 32-bit group
        within one chunk), so tile rows start on cache lines where the channels fill chunks and no
        chunk reads past its group (a bf16 value there would meet a 0 of B, and inf x 0 is NaN).
        Gathered patches store the channels unpadded (the patch's runs are then ``KW * C`` values), and
        so do int8 ops of one group and more than 64 channels: a pixel's last chunk reads the next
        pixel's values (or the read-ahead), which meet zeros of B (int8 x 0 = 0), and a previous
        kernel's channels-last output is read where it is (``unpadded``: MobileNetV2's 96 and 144)."""
        if self.patch or (self.element == 1 and self.groups == 1 and self.cg > self.values):
            return self.cg
        return _round_up(self.cg, self.group if self.cg <= self.values else self.values)

    @property
    def fold(self) -> bool:
        """One group and undilated columns: the column taps of a row are contiguous in the stored
        input, so the reduction of a tap row is ``KW * pitch`` consecutive values, taken by as few
        chunks as possible (conv1's 7 taps x 4 channels: 1 chunk instead of 7), when that takes
        fewer chunks. bf16 folds only when the chunks end at the row's last value (past it are
        the next pixels' values, which B multiplies by 0, and inf x 0 is NaN)."""
        cols = self.cols
        folded = cols.taps * self.pitch
        exact = folded <= self.values or folded % self.values == 0
        fewer = -(-folded // self.values) < cols.taps * -(-self.pitch // self.values)
        return (not self.patch and self.groups == 1 and cols.dilation == 1 and cols.taps > 1 and fewer
                and (self.element == 1 or exact))

    @property
    def row_taps(self) -> int:
        """Row taps the kernel loops over (1 with gathered patches)."""
        return 1 if self.patch else self.rows.taps

    @property
    def column_taps(self) -> int:
        """Column taps the kernel loops over (1 when folded or with gathered patches)."""
        return 1 if self.fold or self.patch else self.cols.taps

    @property
    def depth(self) -> int:
        """Consecutive values one tap reduces: the pitch, ``KW * pitch`` folded, or the whole patch
        ``KH * KW * C`` gathered."""
        if self.patch:
            return self.rows.taps * self.cols.taps * self.pitch
        return self.cols.taps * self.pitch if self.fold else self.pitch

    @property
    def patch_pitch(self) -> int:
        """Values between two pixels' gathered patches: the patch padded with zeros to whole chunks."""
        return len(self.starts) * self.chunk

    @property
    def copy_bytes(self) -> int:
        """Bytes each gathered run is copied by: int8 runs of at most 64 bytes by one whole vector
        load and store (16, 32 or 64 bytes; the next run overwrites what it writes past its end,
        past a patch's last run the weights are 0, and int8 x 0 = 0), others exactly."""
        size = self.runs[1] * self.element
        if self.element != 1 or size > MAX_COLSB:
            return size
        return next(v for v in (16, 32, 64) if v >= size)

    @property
    def runs(self) -> tuple[int, int]:
        """(runs per patch, values per run) of the contiguous stored values a patch gathers: one run of
        ``KW * C`` per filter row with undilated columns, else one of ``C`` per tap."""
        if self.cols.dilation == 1:
            return self.rows.taps, self.cols.taps * self.pitch
        return self.rows.taps * self.cols.taps, self.pitch

    @property
    def channels(self) -> int:
        """Stored input channels (all groups): the pixel pitch of the stored activations."""
        return self.pitch * self.groups

    @property
    def unpadded(self) -> bool:
        """The stored activations are the logical ones channels-last: no padded rows, columns or channels
        (so a channels-last input is read where it is: ``activations_in_place``)."""
        return self.padded == (self.rows.size, self.cols.size) and self.pitch == self.cg

    @property
    def gemm(self) -> bool:
        """Trivial windows: pixels are consecutive in the input across rows and images."""
        return all(w.taps == 1 and w.stride == 1 and w.pad == 0 for w in (self.rows, self.cols))

    @property
    def padded(self) -> tuple[int, int]:
        return (self.rows.size + self.rows.pad + self.rows.pad_end,
                self.cols.size + self.cols.pad + self.cols.pad_end)

    @property
    def wide(self) -> bool:
        """Tile rows over the padded width: a stride-1 conv's output pixels numbered as if each output
        row were as wide as a stored input row (``padded``), so that every tap of consecutive numbers
        is at a constant stride in the stored input across output rows; the numbers past an output
        row's last pixel are computed and not stored. Where that takes ``WIDE_SHARE`` of the 16-row
        tiles of the output rows one by one or fewer (VGG conv5_1's 19 x 19: 25 tiles of 397 numbers
        against 38 of 19 x 19)."""
        rows, cols = self.rows, self.cols
        if self.gemm or self.patch or rows.stride != 1 or cols.stride != 1 or rows.out == 1:
            return False
        return -(-self.wide_pixels // TILE) <= WIDE_SHARE * rows.out * -(-cols.out // TILE)

    @property
    def wide_pixels(self) -> int:
        """Numbers of one image's output pixels over the padded width, up to its last pixel."""
        return (self.rows.out - 1) * self.padded[1] + self.cols.out

    @property
    def flat(self) -> bool:
        """One line of all output pixels, across rows and images: a GEMM (its pixels are consecutive
        in the input), or gathered patches (each pixel's patch copied on its own)."""
        return self.gemm or self.patch

    @property
    def lines(self) -> int:
        """Runs of output pixels the tile rows take in order: one per image and output row (one in all
        when ``flat``)."""
        return 1 if self.flat else self.batch if self.wide else self.batch * self.rows.out

    @property
    def pixels(self) -> int:
        """Output pixels per line."""
        if self.flat:
            return self.batch * self.rows.out * self.cols.out
        return self.wide_pixels if self.wide else self.cols.out

    @property
    def chunk(self) -> int:
        """Values of a K chunk: a full one, or the tap's values rounded up to whole 32-bit groups."""
        return self.values if self.depth >= self.values else _round_up(self.depth, self.group)

    @property
    def chunk_bytes(self) -> int:
        return self.chunk * self.element

    @property
    def starts(self) -> tuple[int, ...]:
        """The first value of each chunk in a tap's values."""
        return tuple(range(0, self.depth, self.values))

    @property
    def read_ahead(self) -> int:
        """Values a folded tap's last chunk reads past its taps (the next pixels; B is 0 there); with
        gathered patches, what the copy of a run reads past it."""
        if self.patch:
            return (self.copy_bytes - self.runs[1] * self.element) // self.element
        return len(self.starts) * self.chunk - self.depth

    @property
    def channel_tiles(self) -> int:
        """16-channel tiles per group (the last one zero-padded)."""
        return -(-self.kg // TILE)

    @property
    def tile_bytes(self) -> int:
        """Bytes of one packed B tile."""
        return self.chunk_bytes * TILE

    @property
    def packed_weights_shape(self) -> tuple[int, ...]:
        return (self.groups, self.channel_tiles, self.row_taps, self.column_taps, len(self.starts),
                self.chunk // self.group, self.group * TILE)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class TilePlan:
    """What the schedule chose: the output block and the order of its loops."""

    shape: TileShape
    pixel_block: int
    channel_block: int
    channels_outer: bool
    dot: str                         # dpbusd (uint8 activations) or dpbssd (int8)
    parallel: str | None = None      # one of SPLITS: the blocks split over threads; None: one thread

    @property
    def row_tiles(self) -> int:
        return 2 if self.pixel_block == 32 and self.shape.pixels > TILE else 1

    @property
    def block_pixels(self) -> int:
        """Pixels of every block (the last one of a line shifted back to end at its edge)."""
        return min(self.pixel_block, self.shape.pixels)

    @property
    def col_tiles(self) -> int:
        return 2 if self.channel_block == 32 and self.shape.channel_tiles > 1 else 1

    @cached_property
    def block(self) -> TileBlock:
        rows = min(TILE, self.shape.pixels)
        cols = min(TILE, self.shape.kg)
        return TileBlock.of((rows,) * self.row_tiles, (cols,) * self.col_tiles, self.shape.chunk_bytes)

    @property
    def scratch_columns(self) -> int:
        return TILE * self.col_tiles

    @property
    def pixel_blocks(self) -> int:
        """Pixel blocks per line."""
        return -(-self.shape.pixels // self.block_pixels)

    @property
    def channel_blocks(self) -> int:
        """Channel blocks per group."""
        return -(-self.shape.channel_tiles // self.col_tiles)

    @property
    def units(self) -> int:
        """Blocks the threads share: pixel blocks of all lines, or channel blocks of a group (1 on
        one thread)."""
        return {None: 1, "pixels": self.shape.lines * self.pixel_blocks,
                "channels": self.channel_blocks}[self.parallel]


def _split_factor(schedule: Schedule, dim: str) -> int:
    """The factor of the split of op dim ``dim`` (32 if it is not split)."""
    split = next((r for r in schedule.relations if getattr(r, "parent", None) == dim), None)
    if split is None:
        return BLOCKS[-1]
    if split.factor == split.parent_extent < BLOCKS[-1]:      # a split clamped to the dim (schedule files)
        return next(b for b in BLOCKS if b >= split.factor)
    if split.factor not in BLOCKS:
        raise TileError(f"isa 'amx': the split of {dim!r} by {split.factor} is not a tile block: split it "
                        f"by 16 (one tile) or 32 (two tiles), or not at all (32)")
    return split.factor


def _outer_position(schedule: Schedule, dim: str) -> int:
    split = next((r for r in schedule.relations if getattr(r, "parent", None) == dim), None)
    name = split.outer if split else dim
    return schedule.position(name) if name in schedule.loop_names else -1


def pixel_dim(op: Op) -> str:
    """The output dim along a tile's rows: the column window's (a conv's ``ow``), else the batch dim."""
    return op.windows[-1].out_dim if op.windows else quantized.batch_dim(op)


def _element(op: Op) -> str:
    """The element type the tiles multiply (a key of BYTES); TileError for other ops."""
    element = "int8" if op.quant is not None else op.dtype
    if element not in BYTES:
        raise TileError(f"isa 'amx' runs quantized (int8 tiles) and bfloat16 ops; {op!r} is {op.dtype}: "
                        f"give it quant=lo.QuantSpec(...) or dtype='bfloat16', or use isa='auto'")
    return element


def _check_statement(op: Op) -> None:
    """TileError unless the op's statement is the (grouped) convolution or GEMM the tile kernels
    compute, read through its roles: ``O[batch, k, window outputs] += I[batch, channel, window
    inputs] * W[k, c, window taps]`` (the weights' output-channel axis anywhere), reduced over ``c``
    and the taps."""
    windows = op.windows
    k, c = op.channel_dim, op.reduction_channel_dim
    refusal = TileError(f"isa 'amx' computes convolutions and matrix multiplies of the form "
                        f"O[batch, k, outputs] += I[batch, channel, inputs] * W[k, c, taps]; {op!r} is not "
                        f"one (use isa='auto')")
    outputs = op.index(op.output)
    others = [e for e in outputs if not (isinstance(e, Var) and e.name in {k, *(w.out_dim for w in windows)})]
    if len(windows) > 2 or len(others) > 1:
        raise TileError(f"isa 'amx' tiles ops of at most 2 window axes and one batch dim; {op!r} has "
                        f"{len(windows)} window axes and {len(others)} batch dims "
                        f"({', '.join(e.to_c() for e in others)}): use isa='avx512' (VNNI)")
    if len(others) != 1 or not isinstance(others[0], Var):
        raise refusal
    batch = others[0].name
    taps = [Var(w.tap_dim) for w in windows]
    if op.groups == 1:
        channel = Var(c)
    else:
        channel = (Var(k) // (op.channels // op.groups)) * op.extent(c) + Var(c)
    weights = list(op.index(op.inputs[1]))
    moved = [weights.pop(op.weight_channel_axis)] + weights if weights else []
    expected = {op.inputs[0]: (Var(batch), channel, *(w.input_index for w in windows)),
                op.inputs[1]: (Var(k), Var(c), *taps)}
    found = {op.inputs[0]: tuple(op.index(op.inputs[0])), op.inputs[1]: tuple(moved)}
    names = {e.name for e in outputs if isinstance(e, Var)}
    if (found != expected or set(op.reduction_dims) != {c, *(w.tap_dim for w in windows)}
            or names != {batch, k, *(w.out_dim for w in windows)} or len(outputs) != len(names)):
        raise refusal
    if op.scales is not None or (op.bias and op.bias_offset() != Var(k)):
        raise TileError(f"isa 'amx' takes a bias per output channel and no scaled output; {op!r} is not "
                        f"such an op (use isa='auto')")


def tile_plan(schedule: Schedule) -> TilePlan:
    """The tile plan of ``schedule``; TileError saying why when the tile kernels do not take it."""
    op = schedule.op
    _element(op)
    _check_statement(op)
    shape = TileShape.of(op, patches(schedule))
    if op.quant is not None and schedule.arithmetic_mode != "integer":
        raise TileError("isa 'amx' computes integer products; arithmetic('dequantize') has none")
    if schedule.weight_format_mode != "int8":
        raise TileError(f"isa 'amx' reads int8 weights into tiles; weight_format"
                        f"({schedule.weight_format_mode!r}) packs them to 2 bits (use the VNNI kernels)")
    if shape.groups > 1 and shape.cg == 1 and shape.kg == 1:
        raise TileError(f"isa 'amx' refuses the depthwise {op!r}: one input and one output channel per "
                        f"group fill 1 of the 64 bytes of a tile row and 1 of its 16 columns; use the "
                        f"VNNI kernels (isa='avx512')")
    pixel, channel = pixel_dim(op), op.channel_dim
    return TilePlan(shape, _split_factor(schedule, pixel), _split_factor(schedule, channel),
                    _outer_position(schedule, channel) <= _outer_position(schedule, pixel),
                    _dot(op), _parallel_split(schedule))


def patches(schedule: Schedule) -> bool:
    """Whether the schedule fuses all the reduction dims of a windowed op into one loop, taps then
    channels (``fuse("kh", "kw").fuse("kh_kw", "c")``): the kernel then gathers each output pixel's
    patch into one run of a buffer (an im2col row) and reduces over it in 64-byte chunks. TileError
    for such a loop in another order, over a split dim, or of an op with groups or without windows."""
    op = schedule.op
    reduction = set(op.reduction_dims)
    fused = [name for name in schedule.loop_names
             if len(reduction) > 1 and schedule.dims_of(name) == reduction]
    if not fused:
        return False
    taps = tuple(w.tap_dim for w in op.windows)
    wanted = (*taps, op.reduction_channel_dim)
    order = _fused_order(schedule, fused[0])
    if not taps or op.groups != 1 or order != wanted:
        raise TileError(f"isa 'amx' gathers patches for a loop fusing all the reduction dims of a conv with "
                        f"one group, taps then channels ({', '.join(wanted)}); {fused[0]!r} fuses "
                        f"{', '.join(order)} of {op!r}")
    return True


def _fused_order(schedule: Schedule, name: str) -> tuple[str, ...]:
    """The op dims of a fused loop, outermost first (a split dim in it named by its split loop)."""
    for rel in schedule.relations:
        if isinstance(rel, Fuse) and rel.fused == name:
            return _fused_order(schedule, rel.outer) + _fused_order(schedule, rel.inner)
    return (name,)


def _parallel_split(schedule: Schedule) -> str | None:
    """What the schedule's parallel loop splits over threads (one of SPLITS): the pixel blocks for a
    loop over the output's pixel dims, the channel blocks for one over its channels; None without a
    parallel loop; TileError for a loop over both."""
    loop = schedule.parallel_loop
    if loop is None:
        return None
    op = schedule.op
    pixels = {quantized.batch_dim(op), *(w.out_dim for w in op.windows)}
    dims = schedule.dims_of(loop.name)
    if dims <= {op.channel_dim}:
        return "channels"
    if dims <= pixels:
        return "pixels"
    raise TileError(f"isa 'amx' splits over threads either the pixel blocks (parallel on a loop over "
                    f"{', '.join(sorted(pixels))}) or the channel blocks (a loop over {op.channel_dim!r}); "
                    f"parallel({loop.name!r}) runs over {', '.join(sorted(dims))}")


def _dot(op: Op) -> str:
    """The tile dot product: bf16 pairs, or u8/s8 activations times s8 weights (uint8 weights are
    stored shifted to int8, ``quantized.stored_weights``)."""
    if op.quant is None:
        return "dpbf16ps"
    return "dpbusd" if op.quant.activation == "uint8" else "dpbssd"


# --- packing (numpy, in the kernel's prepare) ----------------------------------------------------

def pack_activations(op: Op, x: np.ndarray, out: np.ndarray, shape: TileShape | None = None) -> np.ndarray:
    """Logical activations ``[batch, channel, rows, cols]`` (a GEMM's ``[M, K]``; int8 or bf16 bit
    patterns) into ``out`` (zeros), channels-last and zero-padded: ``[batch][padded rows][padded
    cols][group][pitch]`` (``shape``: the plan's, default ``TileShape.of(op)``)."""
    s = shape or TileShape.of(op)
    rows, cols = s.rows, s.cols
    image = np.asarray(x).reshape(s.batch, s.groups, s.cg, rows.size, cols.size).transpose(0, 3, 4, 1, 2)
    grouped = out.reshape(s.batch, *s.padded, s.groups, s.pitch)
    grouped[:, rows.pad:rows.pad + rows.size, cols.pad:cols.pad + cols.size, :, :s.cg] = image
    return out


def activations_in_place(op: Op, x: np.ndarray, shape: TileShape) -> np.ndarray | None:
    """The logical activations ``x`` of an op whose stored activations are ``unpadded`` as the stored
    form, viewing its memory, where that memory is channels-last (a previous kernel's output); else None
    (``pack_activations`` copies)."""
    s = shape
    image = np.asarray(x).reshape(s.batch, s.groups, s.cg, s.rows.size, s.cols.size).transpose(0, 3, 4, 1, 2)
    if not (image.flags.c_contiguous and image.flags.aligned):
        return None
    return image.reshape(s.batch, s.rows.size, s.cols.size, s.channels)


def activations_shape(op: Op, shape: TileShape | None = None) -> tuple[int, int, int, int]:
    shape = shape or TileShape.of(op)
    return (shape.batch, *shape.padded, shape.channels)


def pack_weights(op: Op, w: np.ndarray, out: np.ndarray, shape: TileShape | None = None) -> np.ndarray:
    """Logical weights (int8, or bf16 bit patterns) into ``out`` of ``TileShape.packed_weights_shape``
    (module docstring): B tiles of ``group`` consecutive values per 32-bit group, a tap's values
    ordered as the stored input (channels padded to the pitch; folded: column tap, then channel;
    gathered patches: row tap, column tap, channel), zero past the tap's values and the group's
    output channels (``shape``: the plan's, default ``TileShape.of(op)``)."""
    s = shape or TileShape.of(op)
    kh, kw = s.rows.taps, s.cols.taps
    logical = np.moveaxis(np.asarray(w), op.weight_channel_axis, 0).reshape(s.groups, s.kg, s.cg, kh, kw)
    values = np.zeros((s.groups, s.channel_tiles * TILE, kh, kw, s.pitch), dtype=out.dtype)
    values[:, :s.kg, :, :, :s.cg] = logical.transpose(0, 1, 3, 4, 2)
    taps = values.reshape(s.groups, s.channel_tiles * TILE, s.row_taps, s.column_taps, s.depth)
    chunks = np.zeros(taps.shape[:4] + (len(s.starts) * s.chunk,), dtype=out.dtype)
    chunks[..., :s.depth] = taps
    # [g, tile * 16 + n, kh, kw, q * chunk + group r + t] -> [g, tile, kh, kw, q, r, group n + t]
    tiles = chunks.reshape(s.groups, s.channel_tiles, TILE, s.row_taps, s.column_taps, len(s.starts),
                           s.chunk // s.group, s.group)
    out[...] = tiles.transpose(0, 1, 3, 4, 5, 6, 2, 7).reshape(s.packed_weights_shape)
    return out


# --- C -------------------------------------------------------------------------------------------

_SOURCE = """/* loopopt AMX tile kernel for {op!r}
 * implicit GEMM per group: {pixels} output pixels per line x {lines} line(s), {kg} channels, over
 * {taps} tap(s) x {chunks} chunk(s) of {chunk} input bytes ({dot}{patches}); output blocks of {rt} x {ct}
 * tiles ({bp} pixels x {bc} channels), {order}; epilogue fused at the tile store{threads}
{steps} */
{prelude}#include <stddef.h>
#include <stdint.h>
{omp}{tables}
static const lo_tilecfg lo_config = {config};
static const int lo_starts[{chunks}] = {{{starts}}};

{signature}
{{
{body}
}}
"""


def _activation_sums(plan: TilePlan, x_name: str, it: str) -> list[str]:
    """``lo_xsum`` of asymmetric weights: the sum of the stored activations over each output
    position's taps (padding taps add the stored zeros)."""
    s = plan.shape
    rows, cols = s.rows, s.cols
    hp, wp = s.padded
    x = (f"{x_name}[(((ptrdiff_t)t_n * {hp} + t_oh * {rows.stride} + t_kh * {rows.dilation}) * {wp} + "
         f"t_ow * {cols.stride} + t_kw * {cols.dilation}) * {s.channels} + t_g * {s.pitch} + t_c]")
    loop = partial(cprint.for_loop, it)
    threads = ["#pragma omp parallel for collapse(3) schedule(static)"] if plan.parallel else []
    positions = [loop("t_n", s.batch), loop("t_g", s.groups), loop("t_oh", rows.out), loop("t_ow", cols.out)]
    taps = [loop("t_kh", rows.taps), loop("t_kw", cols.taps), f"{loop('t_c', s.cg)} s += {x};"]
    total = f"lo_xsum[((t_n * {s.groups} + t_g) * {rows.out} + t_oh) * {cols.out} + t_ow] = s;"
    return ["/* activation sums S over each output position's taps (asymmetric weights) */", *threads,
            *cprint.loop_nest(positions, ["int s = 0;", *cprint.staircase(taps), total])]


def _pixel_position(plan: TilePlan, it: str, batch: str) -> list[str]:
    """C defining the op's output dims (``batch`` and the windows' outputs) of pixel ``t_p0 + t_r``
    of line ``t_line``."""
    op_dims = []
    s = plan.shape
    rows, cols = s.rows, s.cols
    if s.flat:
        op_dims.append(f"const {it} t_p = t_p0 + t_r;")
        batch_value, row, col = _flat_position(s)
    elif s.wide:
        wp = s.padded[1]
        op_dims.append(f"const {it} t_p = t_p0 + t_r;")
        batch_value, row, col = "t_line", f"t_p / {wp}", f"t_p % {wp}"
    else:
        batch_value, row, col = f"t_line / {rows.out}", f"t_line % {rows.out}", "t_p0 + t_r"
    dims = op_dims + [f"const {it} {name} = {value};" for name, value in
                      ((batch, batch_value), (rows.out_dim, row), (cols.out_dim, col)) if name]
    # a number past its output row's last pixel: computed, not stored
    junk = s.wide and s.padded[1] > cols.out
    return dims + ([f"if ({cols.out_dim} >= {cols.out}) continue;"] if junk else [])


@dataclass(frozen=True)
class Flavour:
    """What differs between the int8 and the bf16 tile kernels: C types, the statements before the
    tiles, the scratch of each thread and the epilogue of one output element (from
    ``lo_acc[t_r * columns + t_c]``)."""

    activation_type: str
    weight_type: str
    acc_type: str
    prologue: list[str]
    epilogue: list[str]
    narrow: list[str]            # a second pass over the row's channels (``lo_row`` to the output)
    scratch: list[str]           # declarations of per-thread buffers (besides ``lo_acc``)
    vector_narrow: Callable[[int], list[str]] | None = None   # the second pass as masked vector stores


def _block_loops(plan: TilePlan) -> list[tuple[str, str, str, str]]:
    """The loops over a kernel's output blocks, outermost first: (name, begin, end, what it runs over);
    a thread runs its range ``lo_begin .. lo_end`` of the split blocks."""
    s, split = plan.shape, plan.parallel
    threads = ("lo_begin", "lo_end")
    channels = threads if split == "channels" else ("0", str(plan.channel_blocks))
    loops = {"g": ("t_g", "0", str(s.groups), "groups"),
             "c": ("t_cb", *channels, f"channel blocks of {plan.col_tiles} tile(s) of {TILE} channels"
                   + (f" ({plan.channel_blocks}), split over the threads" if split == "channels" else "")),
             "l": ("t_line", "0", str(s.lines), "output lines"),
             "p": ("t_pb", "0", str(plan.pixel_blocks),
                   f"pixel blocks of {plan.block_pixels} pixels (the last shifted back to the line's end)"),
             "u": ("t_lp", *threads,
                   f"the pixel blocks of all lines ({s.lines * plan.pixel_blocks}), split over the threads")}
    order = "gclp" if plan.channels_outer else "glpc"
    return [loops[key] for key in (order.replace("lp", "u") if split == "pixels" else order)]


def pseudocode(schedule: Schedule) -> list[str]:
    """The kernel's nest as pseudo-code lines (what ``Schedule.pseudocode`` prints for ``isa="amx"``):
    ``generate_tiles``' loops over output blocks, the gathered patches, the tap and K-chunk loops of the
    tile dots and the block's store through its epilogue."""
    plan = tile_plan(schedule)
    s, op = plan.shape, schedule.op
    x, w = op.inputs
    what = "int8" if s.element == 1 else "bfloat16"
    lines = [f"# AMX tile kernel (targets/x86/tiles.py), {what}: output blocks of {plan.block_pixels} "
             f"pixels x {plan.col_tiles * TILE} channels in {plan.row_tiles} x {plan.col_tiles} accumulator "
             f"tile(s), {op.output} channels-last"]
    if op.quant is not None:
        qp = tile_quant_plan(schedule)
        if _folded(schedule, qp):
            lines.append(f"for t_e in 0..{quantized.compensation_entries(op, qp)}:    # {quantized.FOLDED} = "
                         f"bias - (zx + shift) x compensation, per compensation entry")
        if qp.activation_sums:
            sums = [("t_n", s.batch), ("t_g", s.groups), ("t_oh", s.rows.out), ("t_ow", s.cols.out),
                    ("t_kh", s.rows.taps), ("t_kw", s.cols.taps), ("t_c", s.cg)]
            lines += ["  " * i + f"for {name} in 0..{extent}:" for i, (name, extent) in enumerate(sums)]
            lines.append("  " * len(sums) + f"lo_xsum[t_n, t_g, t_oh, t_ow] += {x}[...]    # activation sums "
                         "over each output position's taps (asymmetric weights)")
    depth = 0
    for name, begin, end, note in _block_loops(plan):
        lines.append("  " * depth + f"for {name} in {begin}..{end}:    # {note}")
        depth += 1
    count, length = s.runs
    body = [f"for t_r in 0..{plan.block_pixels}:    # gather each pixel's patch into lo_patch (once per "
            f"pixel block)",
            f"  for t_u in 0..{count}:    # runs of {length} consecutive values"] if s.patch else []
    body += ["# zero the accumulator tiles",
             f"for t_kh in 0..{s.row_taps}:",
             f"  for t_kw in 0..{s.column_taps}:",
             f"    for t_q in 0..{len(s.starts)}:    # K chunks of {s.chunk_bytes} bytes",
             f"      {plan.dot}: {plan.row_tiles} A tile(s) of {x} x {plan.col_tiles} B tile(s) of {w} into "
             f"the accumulators",
             "# store the accumulator tiles to lo_acc",
             f"for t_r in t_r1..{plan.block_pixels}:    # the block's rows the block before it did not write",
             f"  for t_c in t_c1..t_cols:    # its columns (whole rows: 0..{plan.scratch_columns})",
             f"    {op.output}[pixel, t_g, t_c0 + t_c] = epilogue(lo_acc[t_r, t_c])"]
    return lines + ["  " * depth + line for line in body]


def _body(schedule: Schedule, plan: TilePlan, flavour: Flavour) -> list[str]:
    """The kernel function's statements (pointer offsets in values, tile strides in bytes)."""
    op, s, block = schedule.op, plan.shape, plan.block
    it = index_ctype(schedule)
    rows, cols = s.rows, s.cols
    hp, wp = s.padded
    sw = 1 if s.gemm else cols.stride
    step = sw * s.channels                                                 # values between tile rows
    per_tile = s.row_taps * s.column_taps * len(s.starts) * s.tile_bytes // s.element   # a tile column's
    bp, sc = plan.block_pixels, plan.scratch_columns
    blocks_p = plan.pixel_blocks
    line_base = ("0" if s.gemm else f"(ptrdiff_t)t_line * {hp * wp}" if s.wide else
                 f"((ptrdiff_t)(t_line / {rows.out}) * {hp} + t_line % {rows.out} * {rows.stride}) * {wp}")
    outer = _block_loops(plan)
    inner = []
    if plan.parallel == "pixels":
        inner.append(f"const {it} t_line = t_lp / {blocks_p}, t_pb = t_lp % {blocks_p};")
    tiles = [f"{flavour.acc_type} lo_acc[{bp * sc}] __attribute__((aligned(64)));   /* one output block */",
             f"{AMX.loadconfig(p='&lo_config')};"]
    tiles += cprint.staircase([cprint.for_loop(it, name, end, begin) for name, begin, end, _ in outer])
    inner += [f"const {it} t_p0 = t_pb * {bp} < {s.pixels - bp} ? t_pb * {bp} : {s.pixels - bp};",
             f"const {it} t_j0 = t_cb * {plan.col_tiles} < {s.channel_tiles - plan.col_tiles} ? "
             f"t_cb * {plan.col_tiles} : {s.channel_tiles - plan.col_tiles};   /* first channel tile */",
             f"const {flavour.activation_type} *t_a = {op.inputs[0]} + "
             + (f"t_g * {s.pitch};" if s.patch else       # the gather finds each pixel's window
                f"({line_base} + (ptrdiff_t)t_p0 * {sw}) * {s.channels} + t_g * {s.pitch};"),
             f"const {flavour.weight_type} *t_b = {op.inputs[1]} + "
             f"((ptrdiff_t)t_g * {s.channel_tiles} + t_j0) * {per_tile};"]
    if s.patch:       # the block's patches, gathered once per pixel block (its channel blocks share them)
        slack = s.copy_bytes // s.element          # the last run's copy writes past the last patch
        tiles[:0] = [f"{flavour.activation_type} lo_patch[{bp * s.patch_pitch + slack}] "
                     "__attribute__((aligned(64)));",
                     "memset(lo_patch, 0, sizeof lo_patch);   /* the zeros past each patch */",
                     f"{it} lo_line = -1, lo_p0 = -1;   /* the pixel block lo_patch holds */"]
        inner += _gather(plan, it, flavour.activation_type)
        inner.append("t_a = lo_patch;")
        step = s.patch_pitch
    inner += block.zeros()
    row_offset = lambda i: 0 if i == 0 else bp - TILE
    tap_loops = [cprint.for_loop("int", "t_kh", s.row_taps), cprint.for_loop("int", "t_kw", s.column_taps),
                 cprint.for_loop("int", "t_q", len(s.starts))]
    tap = [f"const {flavour.activation_type} *t_at = t_a + ((ptrdiff_t)t_kh * {rows.dilation * wp} + t_kw * "
           f"{cols.dilation}) * {s.channels} + lo_starts[t_q];",
           f"const {flavour.weight_type} *t_bt = t_b + "
           f"((t_kh * {s.column_taps} + t_kw) * {len(s.starts)} + t_q) * {s.tile_bytes // s.element};"]
    tap += block.loads(lambda i: f"t_at + {row_offset(i) * step}", step * s.element,
                       lambda j: f"t_bt + {j * per_tile}", MAX_COLSB)
    tap += block.dots(plan.dot)
    inner += cprint.loop_nest(tap_loops, tap)
    inner += block.stores(lambda i, j: f"lo_acc + {row_offset(i) * sc + j * TILE}", 4 * sc)
    # a shifted last block writes only what the block before it did not
    inner += [f"const {it} t_c0 = t_j0 * {TILE}, t_cols = {s.kg} - t_c0 < {sc} ? {s.kg} - t_c0 : {sc};",
              f"const {it} t_r1 = t_pb * {bp} - t_p0, t_c1 = (t_cb * {plan.col_tiles} - t_j0) * {TILE};"]
    row = _pixel_position(plan, it, quantized.batch_dim(op))
    for statements in (flavour.epilogue, flavour.narrow) if flavour.narrow else (flavour.epilogue,):
        if statements is flavour.narrow and flavour.vector_narrow:
            row += cprint.block("", [f"const {it} {op.channel_dim} = t_g * {s.kg} + t_c0;",
                                     *flavour.vector_narrow(sc)])
            continue
        # a row of all the block's columns (most rows) runs a loop of constant trip count: whole vectors
        for condition, begin, end in ((f"if (t_c1 == 0 && t_cols == {sc})", "0", str(sc)),
                                      ("else", "t_c1", "t_cols")):
            columns = f"{quantized.SIMD_PRAGMA}\n{cprint.for_loop(it, 't_c', end, begin)}"
            row += cprint.block(condition, cprint.block(
                columns, [f"const {it} {op.channel_dim} = t_g * {s.kg} + t_c0 + t_c;", *statements]))
    inner += cprint.block(cprint.for_loop(it, "t_r", bp, "t_r1"), row)
    tiles += cprint.block("", inner, len(outer))
    tiles.append(f"{AMX.release()};")
    if plan.parallel is None:
        return flavour.prologue + flavour.scratch + tiles
    # each thread: its scratch, its range of whole blocks, its own tile configuration
    ranged = thread_range(it, plan.units) + cprint.block("if (lo_begin < lo_end)", tiles)
    return flavour.prologue + [f"/* {SPLITS[plan.parallel]} split over the threads */",
                               "#pragma omp parallel", *cprint.block("", flavour.scratch + ranged)]


def _flat_position(shape: TileShape) -> tuple[str, str, str]:
    """C of the image, output row and output column of pixel ``t_p`` of the one line of all output
    pixels (``TileShape.flat``)."""
    rows, cols = shape.rows, shape.cols
    return f"t_p / {rows.out * cols.out}", f"t_p / {cols.out} % {rows.out}", f"t_p % {cols.out}"


def _window(shape: TileShape) -> str:
    """C of the offset (in values) of pixel ``t_p`` (of the one line of all output pixels) in the
    stored input: its image, output row and column, through the strides into the padded input."""
    image, row, col = _flat_position(shape)
    hp, wp = shape.padded
    return (f"(((ptrdiff_t)({image}) * {hp} + {row} * {shape.rows.stride}) * {wp} + {col} * "
            f"{shape.cols.stride}) * {shape.channels}")


def _gather(plan: TilePlan, it: str, value_type: str) -> list[str]:
    """C gathering the patches of the block's pixels (``t_a`` the group's first stored value, each
    pixel's window found from its place in the line of all output pixels) into ``lo_patch``, one row
    of ``patch_pitch`` values per pixel, unless it holds them already; then a compiler barrier (the
    tile loads do not tell the compiler that they read ``lo_patch``)."""
    s = plan.shape
    rows, cols = s.rows, s.cols
    wp = s.padded[1]
    count, length = s.runs
    per_row = count // rows.taps               # runs per filter row: 1, or the column taps
    source = (f"(ptrdiff_t)(t_u / {per_row}) * {rows.dilation * wp * s.channels} + "
              f"t_u % {per_row} * {cols.dilation * s.channels}" if per_row > 1 else
              f"(ptrdiff_t)t_u * {rows.dilation * wp * s.channels}")
    target = f"lo_patch + t_r * {s.patch_pitch} + t_u * {length}"
    origin = f"t_w + {source}"
    size, vector = length * s.element, s.copy_bytes
    if vector != size:          # a whole vector: bytes past the run are overwritten or meet zero weights
        kind = {16: "__m128i", 32: "__m256i", 64: "__m512i"}[vector]
        width = {16: "", 32: "256", 64: "512"}[vector]
        copy = (f"_mm{width}_storeu_si{vector * 8}(({kind} *)({target}), "
                f"_mm{width}_loadu_si{vector * 8}((const {kind} *)({origin})));")
    elif size <= MAX_COLSB:     # one masked load and store of the run's bytes (none read past it)
        mask = f"{(1 << size) - 1:#x}ULL"
        copy = f"_mm512_mask_storeu_epi8({target}, {mask}, _mm512_maskz_loadu_epi8({mask}, {origin}));"
    else:
        copy = f"memcpy({target}, {origin}, {size});"
    runs = f"{cprint.for_loop('int', 't_u', count)}   /* runs of {length} consecutive values */"
    pixel = [f"const {it} t_p = t_p0 + t_r;",
             f"const {value_type} *t_w = t_a + {_window(s)};   /* the pixel's window */",
             *cprint.staircase([runs, copy])]
    return cprint.block("if (t_line != lo_line || t_p0 != lo_p0)", [
        "lo_line = t_line, lo_p0 = t_p0;",
        *cprint.block(cprint.for_loop(it, "t_r", plan.block_pixels), pixel),
        '__asm__ volatile("" ::: "memory");'])


def tile_quant_plan(schedule: Schedule) -> quantized.QuantPlan:
    """The quantized plan of a tile kernel: integer products with no shift, the compensation
    table from ``prepare``, the epilogue fused at the tile store."""
    return replace(quantized.plan(schedule, 1), compensation="packed", dot_loop=None, shift=0,
                   fused_epilogue=True)


def _folded(schedule: Schedule, qp: quantized.QuantPlan) -> bool:
    """Whether the int8 epilogue adds one folded value per compensation entry (``folded_offsets``)."""
    return quantized.tap_window_index(schedule.op, qp) is None and not schedule.op.quant.dequantized


def _int8(schedule: Schedule, plan: TilePlan, value: str) -> tuple[Flavour, tuple[KernelParam, ...],
                                                                     quantized.QuantPlan, str]:
    op = schedule.op
    qp = tile_quant_plan(schedule)
    prologue = quantized.constants(schedule, qp)
    folded = _folded(schedule, qp)
    if folded:
        prologue += quantized.folded_offsets(schedule, qp)
    if qp.activation_sums:
        prologue += _activation_sums(plan, op.inputs[0], index_ctype(schedule))
    narrow, scratch, vector_narrow = [], [], None
    if op.quant.requantized:
        # requantized values stay ints in a row buffer, narrowed to bytes in a second pass: a loop
        # without byte types vectorizes at the full int32 width (mobilenetv2.block2.project: 88 -> 38 us)
        scratch = [f"int lo_row[{plan.scratch_columns}] __attribute__((aligned(64)));"]
        narrow = [f"Y[{_output_offset(schedule)}] = ({qp.output_type})lo_row[t_c];"]
        if _channels_contiguous(schedule):
            vector_narrow = partial(_narrow_stores, qp.output_type, _output_offset(schedule))
    epilogue = quantized.epilogue_statements(schedule, qp, value, op.index(op.output),
                                             target="lo_row[t_c]" if narrow else None, narrow=not narrow,
                                             folded=folded)
    params = tuple(KernelParam(t, quantized.tensor_type(schedule, qp, t), const=True)
                   for t in kernel_arguments(schedule) if t != op.output) + quantized.parameters(qp)
    flavour = Flavour(qp.activation_type, "int8_t", "int32_t", prologue, epilogue, narrow, scratch,
                      vector_narrow)
    return flavour, params, qp, quantized.static_tables(schedule, qp)


LANES = 16          # int32 lanes of an AVX-512 vector
LANE_MASK = """static inline __mmask16 lo_lanes(int lo, int hi)   /* lanes lo..hi-1 of 0..15 */
{
    lo = lo < 0 ? 0 : lo;
    hi = hi > 16 ? 16 : hi;
    return hi <= lo ? 0 : (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
}
"""


def _channels_contiguous(schedule: Schedule) -> bool:
    """Whether the output layout stores all the output channels of a pixel one after another."""
    op = schedule.op
    info = op.tensor(op.output)
    offset = schedule.layout_of(op.output).offset(op.index(op.output), info.shape)
    at = lambda k: offset.evaluate({**dict.fromkeys(op.dim_names, 0), op.channel_dim: k})
    return all(at(k) - at(0) == k for k in range(op.channels))


def _narrow_stores(output_type: str, offset: str, columns: int) -> list[str]:
    """The row's requantized ints (``lo_row`` lanes ``t_c1..t_cols - 1``, already in the output type's
    range) stored as bytes from the output element of ``offset`` (channel ``k`` the row's first):
    one masked narrowing store (vpmovdb) per 16 lanes; ``LANE_MASK`` defines ``lo_lanes``."""
    lines = [f"{output_type} *t_y = Y + {offset};"]
    for v in range(0, columns, LANES):
        lines.append(f"_mm512_mask_cvtepi32_storeu_epi8(t_y + {v}, lo_lanes(t_c1 - {v}, t_cols - {v}), "
                     f"_mm512_load_si512(lo_row + {v}));")
    return lines


def _output_offset(schedule: Schedule) -> str:
    """C of the output element's storage offset, over the op's dims as C variables."""
    op = schedule.op
    return schedule.layout_of(op.output).offset(op.index(op.output), op.tensor(op.output).shape).to_c()


def _bf16(schedule: Schedule, value: str) -> tuple[Flavour, tuple[KernelParam, ...]]:
    op = schedule.op
    bias = f" + {op.bias_tensor}[{op.channel_dim}]" if op.bias else ""
    epilogue = [f"{op.output}[{_output_offset(schedule)}] = {value}{bias};"]
    params = tuple(KernelParam(t, "uint16_t" if t in op.inputs else "float", const=t != op.output)
                   for t in kernel_arguments(schedule))
    return Flavour("uint16_t", "uint16_t", "float", [], epilogue, [], []), params


def generate_tiles(schedule: Schedule) -> Generated:
    """The C translation unit of ``schedule``'s AMX tile kernel (TileError if it has none)."""
    plan = tile_plan(schedule)
    s, op = plan.shape, schedule.op
    value = f"lo_acc[t_r * {plan.scratch_columns} + t_c]"
    if op.quant is not None:
        flavour, params, qp, tables = _int8(schedule, plan, value)
    else:
        (flavour, params), qp, tables = _bf16(schedule, value), None, ""
    steps = ("\n".join(f" * step {i + 1}: {step}" for i, step in enumerate(schedule.steps))
             or " * schedule: naive")
    source = _SOURCE.format(
        patches=", each pixel's patch gathered" if s.patch else "", op=op, pixels=s.pixels, lines=s.lines,
        kg=s.kg, taps=s.row_taps * s.column_taps,
        chunks=len(s.starts),
        chunk=s.chunk_bytes, dot=AMX.ops[plan.dot].template.split("(")[0], rt=plan.row_tiles,
        ct=plan.col_tiles, bp=plan.block_pixels, bc=plan.scratch_columns,
        order=("channel blocks outside the pixels" if plan.channels_outer
               else "pixels outside the channel blocks"),
        threads=f";\n * {SPLITS[plan.parallel]} split over OpenMP threads" if plan.parallel else "",
        steps=steps, prelude=AMX_INT.prelude,
        omp=("#include <omp.h>\n" if plan.parallel else "") + ("#include <string.h>\n" if s.patch else ""),
        tables=tables + (LANE_MASK if flavour.vector_narrow else ""),
        config=plan.block.config.c_initializer(), starts=", ".join(map(str, s.starts)),
        signature=signature(KERNEL_NAME, params), body=cprint.text(_body(schedule, plan, flavour), 1))
    openmp = plan.parallel is not None
    source, cdef = with_threads(source, signature(KERNEL_NAME, params, restrict=False) + ";", openmp)
    ahead = {op.inputs[0]: s.read_ahead * s.element} if s.read_ahead else {}
    return Generated(source, cdef, kernel_arguments(schedule), params, AMX_INT, {}, openmp, qp, ahead)
