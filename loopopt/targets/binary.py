"""Binary ops (``QuantSpec(activation="binary", weight="binary")``): XNOR + popcount kernels, printed for
any target's SIMD variant (a ``BinaryVariant``: its lane type's C, its popcounts; x86's in
``targets/x86/binary.py``, NEON's in ``targets/neon/binary.py``).

Values in {-1, +1} are packed to bits (+1 -> 1) along the input channels of a group, 64 per
uint64 word; the bits past a group's last channel are 0 in both operands. Over one tap the
products of ``c`` channels sum to ``c - 2 * popcount(x XOR w)`` (XNOR counts the agreeing bits,
the pad bits agree and are not counted). ``prepare`` stores the activations with their padding
as words of 0, so the kernel sums ``S = sum popcount(x XOR w)`` over all the taps of an output,
with no test per tap; a padding tap adds ``popcount(w)`` there, so

    acc = cg * taps(p) - 2 * (S - P[k](p)) = base[k](p) - 2 * S,

where ``taps(p)`` counts the filter positions inside the input and ``P[k](p)`` sums the
popcounts of channel ``k``'s weights over the others: padding taps contribute 0, as in the
real-valued conv of {-1, +1} inputs with zero padding (exact). ``base`` depends on ``p`` only
through its border class along each window (``quantized.borders``) and is a table
``[row class][column class][K]`` that ``prepare`` computes with the packed weights. The
epilogue adds the int32 bias (int32 output) or computes ``float(acc) * (sx * sw[k]) + b[k]``
and stores channels-last (``[batch][rows][cols][K]``; ``output`` returns the logical layout).

Layouts: activations ``[batch][group][padded rows][padded cols][words]``, weights
``[group][row taps][col taps][words][output channels of the group, padded to the lanes]``. The
nest: batch, group, then blocks of ``R`` output positions (consecutive in row-major order) and,
inside, blocks of ``V`` vectors of output channels (the variant's uint64 lanes: 8 on AVX-512, 4 on
AVX2, 2 on NEON, 1 scalar): the register block, ``R x V`` accumulators kept across the taps and
words. Per tap and word the block loads its ``V`` weight vectors once and broadcasts each position's
activation word once, then XORs, popcounts and adds ``R x V`` times, with one of the variant's
popcounts (``lo_popcount``). ``R`` and ``V`` come from the schedule's register block (``block_of``).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ..buffers import check_memory
from ..codegen import cprint
from ..codegen.emit import KERNEL_NAME, Generated
from ..codegen.instr import Isa
from ..codegen.params import KernelParam, signature
from ..codegen.quantized import GroupShape, batch_dim, borders
from ..driver import Driver
from ..kernel import Buffers, Kernel, QuantizedKernel
from ..ops import Op, Window
from ..quant import output_multipliers
from ..schedule import Schedule, ScheduleError

WORD = 64
MAX_ACCUMULATORS = 64   # R x V of one register block
BASE = "lo_base"        # the per-class, per-channel ``base`` table
NO_UNROLL = "#pragma GCC unroll 1"
_loop = partial(cprint.for_loop, "ptrdiff_t")
NOT_PREPACKED = ("a binary kernel packs its weights to bits and their padding table on every call; "
                 "it has no prepacked form")
NO_EPILOGUE = "its epilogue turns popcounts into integer sums and scales them per output (binary kernels)"


def padded_extent(w: Window) -> int:
    """Input positions along ``w`` as the packed activations store them: the leading padding, the
    input, and as much trailing padding as the last output's last tap reads."""
    return max(w.pad + w.size, (w.out - 1) * w.stride + (w.taps - 1) * w.dilation + 1)


@dataclass(frozen=True)
class BinaryShape(GroupShape):
    """The extents of a binary op's packed arrays and nest."""

    lanes: int = 1   # uint64 lanes of the output-channel vector

    @property
    def words(self) -> int:
        return -(-self.cg // WORD)

    @property
    def kpad(self) -> int:
        return -(-self.kg // self.lanes) * self.lanes

    @property
    def positions(self) -> int:
        """Output positions of one image (rows x columns)."""
        return self.rows.out * self.cols.out

    @property
    def activations_shape(self) -> tuple[int, ...]:
        return (self.batch, self.groups, padded_extent(self.rows), padded_extent(self.cols), self.words)

    @property
    def weights_shape(self) -> tuple[int, ...]:
        return (self.groups, self.rows.taps, self.cols.taps, self.words, self.kpad)

    @property
    def output_shape(self) -> tuple[int, ...]:
        """The channels-last output the kernel stores."""
        return (self.batch, self.rows.out, self.cols.out, self.groups * self.kg)


def block_dims(op: Op) -> tuple[str, str]:
    """The loops a binary schedule's register block splits: the output positions' innermost dim (a
    conv's ``ow``, a matmul's ``i``) and the output channels (``k``, a matmul's ``j``)."""
    return (op.windows[-1].out_dim if op.windows else batch_dim(op)), op.channel_dim


def _bits(values: np.ndarray, words: int) -> np.ndarray:
    """uint64 words of the signs of the last axis (+1 -> bit 1, channel i -> bit i % 64 of word i // 64)."""
    bits = np.zeros(values.shape[:-1] + (words * WORD,), dtype=bool)
    bits[..., :values.shape[-1]] = values > 0
    return np.packbits(bits, axis=-1, bitorder="little").view("<u8")


def pack_bits_activations(op: Op, shape: BinaryShape, xq: np.ndarray) -> np.ndarray:
    """``xq`` in logical layout ([batch, channels, one axis per window]) as packed words, the padding
    words 0."""
    r, c = shape.rows, shape.cols
    x = np.asarray(xq).reshape(shape.batch, shape.groups, shape.cg, r.size, c.size)
    packed = np.zeros(shape.activations_shape, dtype=np.uint64)
    packed[:, :, r.pad:r.pad + r.size, c.pad:c.pad + c.size] = _bits(np.moveaxis(x, 2, -1), shape.words)
    return packed


def pack_bits_weights(op: Op, shape: BinaryShape, wq: np.ndarray) -> np.ndarray:
    """``wq`` in logical layout as packed words ``[group][row tap][col tap][word][channel]``."""
    w = np.moveaxis(np.asarray(wq), op.weight_channel_axis, 0)
    w = w.reshape(shape.groups, shape.kg, shape.cg, shape.rows.taps, shape.cols.taps)
    words = _bits(np.moveaxis(w, 2, -1), shape.words)               # [g, kg, taps, taps, words]
    packed = np.zeros(shape.weights_shape, dtype=np.uint64)
    packed[..., :shape.kg] = np.moveaxis(words, 1, -1)
    return packed


def base_table(op: Op, shape: BinaryShape, packed_weights: np.ndarray) -> np.ndarray:
    """``base[row class][column class][K]`` (int32): ``cg`` times the valid taps of the class plus twice
    the popcounts of each channel's weights over its padding taps."""
    valid_rows, valid_cols = (np.array(v, dtype=np.int64) for v in borders_of(op))
    valid = valid_rows[:, None, :, None] * valid_cols[None, :, None, :]          # [rc, cc, kh, kw]
    ones = np.bitwise_count(packed_weights).sum(axis=3, dtype=np.int64)[..., :shape.kg]   # [g, kh, kw, kg]
    pad = np.einsum("abhw,ghwk->abgk", 1 - valid, ones).reshape(valid.shape[:2] + (-1,))
    return (shape.cg * valid.sum(axis=(2, 3))[..., None] + 2 * pad).astype(np.int32)


def base_table_shape(op: Op) -> tuple[int, int, int]:
    """``(row classes, column classes, output channels)`` of the ``base`` table."""
    rows, cols = borders_of(op)
    return len(rows), len(cols), op.channels


def borders_of(op: Op) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Per window (rows, columns: ``row_col_windows``, a missing one last), per border class: 1 per valid
    tap."""
    valid = borders(op).valid
    return valid + (((1,),),) * (2 - len(valid))      # a missing window: one class, one valid tap


def border_classes(op: Op) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The border class of each output row and each output column."""
    classes = borders(op).classes
    return classes + ((0,),) * (2 - len(classes))


def block_of(schedule: Schedule, variant: BinaryVariant) -> tuple[int, int]:
    """``(R, V)``: output positions and vectors of output channels of the register block, from the
    schedule's ``tile(<position dim>=R, <channel dim>=V * lanes)`` (or ``split`` of either; a dim not
    split keeps the ISA's default); ScheduleError for any other step or a channel block that is not
    whole vectors of ``variant``."""
    op = schedule.op
    positions, channels = block_dims(op)
    lanes, isa = variant.lanes, variant.name
    r, v = variant.default_block
    factors: dict[str, int] = {}
    for step in schedule.steps:
        given = dict(step.kwargs) if step.primitive == "tile" else (
            {step.args[0]: step.args[1]} if step.primitive == "split" else None)
        if given is None or not set(given) <= {positions, channels}:
            raise ScheduleError(
                f"binary kernels (XNOR + popcount, codegen/binary.py) take one schedule step, the register "
                f"block: tile({positions}=R, {channels}=KB) (R output positions x KB output channels, or a "
                f"split of either); {step} is not one")
        factors |= given
    r = factors.get(positions, r)
    if channels in factors:
        if factors[channels] % lanes:
            raise ScheduleError(f"binary register block: {channels}={factors[channels]} output channels is "
                                f"not a multiple of the {lanes} uint64 lanes of {isa}")
        v = factors[channels] // lanes
    if r * v > MAX_ACCUMULATORS:
        raise ScheduleError(f"binary register block: {r} x {v} accumulators; at most {MAX_ACCUMULATORS}")
    return r, v


@dataclass(frozen=True)
class BinaryKnobs:
    """The choices of a binary op's search candidate (``targets/search.py``): its register block of
    ``pixel_block`` output positions x ``channel_block`` output channels (whole vectors of the ISA's
    uint64 lanes); the kernel runs on one thread."""

    pixel_block: int
    channel_block: int

    def as_dict(self) -> dict:
        return {"kernel": "binary", "pixel_block": self.pixel_block, "channel_block": self.channel_block}

    def schedule(self, op: Op, isa: str) -> Schedule:
        """Its register block as a ``tile`` step."""
        positions, channels = block_dims(op)
        return Schedule(op).tile(**{positions: self.pixel_block, channels: self.channel_block})


def register_blocks(op: Op, lanes: int, registers: int, positions: int, vectors: int) -> list[BinaryKnobs]:
    """The register blocks of a binary op searched on an ISA of ``lanes`` uint64 lanes and ``registers``
    vector registers: 1 to ``vectors`` vectors of channels (at most a group's) x 1 to ``positions``
    output positions whose accumulators, a weight vector each and two more fit the registers."""
    in_group = -(-(op.channels // op.groups) // lanes)
    extent = op.extent(block_dims(op)[0])
    return [BinaryKnobs(r, v * lanes) for v in range(1, min(vectors, in_group) + 1)
            for r in range(1, min(positions, max(extent, 1)) + 1) if r * v + v + 2 <= registers]


# --- C ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ops:
    """The C of one lane group: its type and the expressions the register block is written in."""

    t: str
    zero: str
    load: str      # {p}: a pointer to uint64 words
    set1: str      # {s}: a uint64
    xor: str       # {a}, {b}
    add: str
    store: str     # {p}, {v}


@dataclass(frozen=True)
class Popcount:
    """One way a variant counts bits: ``c`` defines ``lo_popcount`` (each uint64 lane's count, in the
    lane type), built with the extra ``flags``."""

    c: str
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class BinaryVariant:
    """A SIMD variant's binary kernels: its integer table (name, flags), uint64 ``lanes`` per vector,
    the C of its lane type (``ops``), its popcounts by name (the last one always available), the
    register block without a schedule step (output positions, vectors of output channels) and the
    headers its C needs."""

    table: Isa
    lanes: int
    ops: Ops
    popcounts: dict[str, Popcount]
    default_block: tuple[int, int]
    includes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.table.name


def parameters(op: Op) -> tuple[KernelParam, ...]:
    """The C parameters: packed activations and weights, the bias, the output, the multipliers and
    the ``base`` table."""
    x, w = op.inputs
    spec = op.quant
    values = "float" if spec.dequantized else "int32_t"
    bias = (KernelParam(op.bias_tensor, values, const=True),) if op.bias else ()
    mult = (KernelParam("lo_mult", "float", const=True),) if spec.scaled else ()
    return (KernelParam(x, "uint64_t", const=True), KernelParam(w, "uint64_t", const=True), *bias,
            KernelParam(op.output, values), *mult, KernelParam(BASE, "int32_t", const=True))


def _epilogue(op: Op) -> str:
    """C storing ``lo_acc`` (int) to the output element ``lo_y`` of channel ``lo_ch``."""
    bias = f" + {op.bias_tensor}[lo_ch]" if op.bias else ""
    if op.quant.scaled:
        return f"{op.output}[lo_y] = (float)lo_acc * lo_mult[lo_ch]{bias};"
    return f"{op.output}[lo_y] = lo_acc{bias};"


def _block(s: BinaryShape, ops: Ops, r_count: int, v_count: int) -> list[str]:
    """A static function summing ``popcount(x XOR w)`` over all taps and words into ``r_count x
    v_count`` accumulators and storing them to ``lo_sums[r][v * lanes + lane]``."""
    r, c, lanes = s.rows, s.cols, s.lanes
    acc = [[f"lo_a{i}_{j}" for j in range(v_count)] for i in range(r_count)]
    lines = [f"static inline void lo_block_{r_count}x{v_count}(const uint64_t *const *lo_xp, "
             "const uint64_t *restrict lo_w, uint64_t *restrict lo_sums)"]
    step = ["const ptrdiff_t lo_t = lo_xoff[lo_s];",
            f"const uint64_t *lo_wt = lo_w + lo_s * {s.kpad};",
            *(f"const {ops.t} lo_w{j} = {ops.load.format(p=f'lo_wt + {j * lanes}')};"
              for j in range(v_count))]
    for i in range(r_count):
        step.append(f"{{ const {ops.t} lo_b = {ops.set1.format(s=f'lo_x{i}[lo_t]')};")
        for j in range(v_count):
            term = f"lo_popcount({ops.xor.format(a='lo_b', b=f'lo_w{j}')})"
            step.append(f"  {acc[i][j]} = {ops.add.format(a=acc[i][j], b=term)};")   # in the braces above
        step.append("}")
    # one loop over the taps and words (the weights' order; lo_xoff: the activation word of each
    # step): each step updates each accumulator once. Unrolled, gcc reassociates the sums of
    # several steps into trees of temporaries and spills the accumulators
    steps = f"{NO_UNROLL}\n{_loop('lo_s', r.taps * c.taps * s.words)}"
    body = [*(f"const uint64_t *restrict lo_x{i} = lo_xp[{i}];" for i in range(r_count)),
            f"{ops.t} {', '.join(f'{a} = {ops.zero}' for row in acc for a in row)};",
            *cprint.block(steps, step),
            *(f"{ops.store.format(p=f'lo_sums + {(i * v_count + j) * lanes}', v=acc[i][j])};"
              for i in range(r_count) for j in range(v_count))]
    return lines + cprint.block("", body)


def _nest(op: Op, s: BinaryShape, block: tuple[int, int]) -> tuple[list[str], list[str]]:
    """The tables (each step's activation offset, the border classes) and the kernel's body."""
    r, c, lanes = s.rows, s.cols, s.lanes
    x, w = op.inputs
    r_full, v_full = block
    vectors = s.kpad // lanes
    r_tail, v_tail = s.positions % r_full, vectors % v_full
    prows, pcols = padded_extent(r), padded_extent(c)
    row_classes, col_classes = border_classes(op)
    col_count = len(borders_of(op)[1])
    channels = s.groups * s.kg

    def call(rc: str, vc: str) -> str:
        return f"lo_block_{rc}x{vc}(lo_xp, lo_wg + lo_kb, lo_sums);"

    def choose(r_cond: str, v_cond: str) -> list[str]:
        """The block call for the full or tail extents (tails only where the extents leave one)."""
        calls = {(rc, vc): call(rc, vc) for rc in {r_full, r_tail} - {0} for vc in {v_full, v_tail} - {0}}
        if len(calls) == 1:
            return [next(iter(calls.values()))]
        out = []
        for (rc, vc), text in calls.items():
            conds = ([r_cond if rc == r_full else f"!({r_cond})"] if r_tail else []) + \
                    ([v_cond if vc == v_full else f"!({v_cond})"] if v_tail else [])
            keyword = "if" if not out else "else if" if len(out) < len(calls) - 1 else "else"
            test = f" ({' && '.join(conds)})" if keyword != "else" else ""
            out.append(f"{keyword}{test} {text}")
        return out

    offsets = [(kh * r.dilation * pcols + kw * c.dilation) * s.words + cw
               for kh in range(r.taps) for kw in range(c.taps) for cw in range(s.words)]
    tables = [f"static const ptrdiff_t lo_xoff[{len(offsets)}] = {{{', '.join(map(str, offsets))}}};",
              f"static const int lo_rclass[{r.out}] = {{{', '.join(map(str, row_classes))}}};",
              f"static const int lo_cclass[{c.out}] = {{{', '.join(map(str, col_classes))}}};"]
    channel = [f"const ptrdiff_t lo_ch = lo_g * {s.kg} + lo_kb + lo_j, lo_y = lo_y0 + lo_j;",
               "const int lo_acc = lo_bp[lo_j] - 2 * (int)lo_sp[lo_j];", _epilogue(op)]
    position = [f"const ptrdiff_t lo_oh = (lo_p + lo_r) / {c.out}, lo_ow = (lo_p + lo_r) % {c.out};",
                f"const int32_t *lo_bp = {BASE} + (lo_rclass[lo_oh] * {col_count} "
                f"+ lo_cclass[lo_ow]) * {channels} + lo_g * {s.kg} + lo_kb;",
                "const uint64_t *lo_sp = lo_sums + lo_r * lo_v;",
                f"const ptrdiff_t lo_y0 = ((lo_n * {s.positions}) + lo_p + lo_r) * {channels} "
                f"+ lo_g * {s.kg} + lo_kb;", *cprint.block(cprint.for_loop("int", "lo_j", "lo_jn"), channel)]
    stored = f"{r_full} && lo_p + lo_r < {s.positions}"          # the block's rows, the last one's end
    columns = [f"uint64_t lo_sums[{r_full * v_full * lanes}];",
               *choose(f"lo_p + {r_full} <= {s.positions}", f"lo_kb + {v_full * lanes} <= {s.kpad}"),
               f"const int lo_v = lo_kb + {v_full * lanes} <= {s.kpad} ? {v_full * lanes} : "
               f"{v_tail * lanes};",
               f"const int lo_jn = lo_v < {s.kg} - lo_kb ? lo_v : {s.kg} - lo_kb;",
               *cprint.block(cprint.for_loop("int", "lo_r", stored), position)]
    pointers = [f"const ptrdiff_t lo_q = lo_p + lo_r < {s.positions} ? lo_p + lo_r : {s.positions - 1};",
                f"const ptrdiff_t lo_oh = lo_q / {c.out}, lo_ow = lo_q % {c.out};",
                f"lo_xp[lo_r] = lo_xg + (lo_oh * {r.stride * pcols} + lo_ow * {c.stride}) * {s.words};"]
    rows = [f"const uint64_t *lo_xp[{r_full}];",
            *cprint.block(cprint.for_loop("int", "lo_r", r_full), pointers,
                          note="   /* past the end: the last position */"),
            *cprint.block(_loop("lo_kb", s.kpad, step=v_full * lanes), columns)]
    group = [f"const uint64_t *lo_xg = {x} + (lo_n * {s.groups} + lo_g) * {prows * pcols * s.words};",
             f"const uint64_t *lo_wg = {w} + lo_g * {r.taps * c.taps * s.words * s.kpad};",
             *cprint.block(_loop("lo_p", s.positions, step=r_full), rows)]
    return tables, [_loop("lo_n", s.batch), *cprint.block(_loop("lo_g", s.groups), group)]


def generate_binary(schedule: Schedule, variant: BinaryVariant, popcount: str) -> Generated:
    """The C kernel of a binary op on ``variant`` with ``popcount`` (one of its ``popcounts``)."""
    op = schedule.op
    isa = variant.name
    shape = BinaryShape.of(op, lanes=variant.lanes)
    r_full, v_full = block_of(schedule, variant)
    vectors = shape.kpad // shape.lanes
    v_full = min(v_full, vectors)
    r_full = min(r_full, shape.positions)
    ops = variant.ops
    prelude = ["#include <stdint.h>", "#include <stddef.h>", *variant.includes, variant.popcounts[popcount].c]
    blocks = sorted({(rc, vc) for rc in {r_full, shape.positions % r_full} - {0}
                     for vc in {v_full, vectors % v_full} - {0}}, reverse=True)
    params = parameters(op)
    header = (f"/* loopopt binary kernel (XNOR + popcount, codegen/binary.py) for {op!r}\n"
              f" * isa: {isa}, register block {r_full} output positions x {v_full} vector(s) of "
              f"{shape.lanes} uint64 lane(s) of output channels, popcount: {popcount} */")
    tables, nest = _nest(op, shape, (r_full, v_full))
    functions = [line for rc, vc in blocks for line in _block(shape, ops, rc, vc) + [""]]
    body = cprint.indented(nest)
    source = "\n".join([header, *prelude, "", *tables, "", *functions,
                        f"{signature(KERNEL_NAME, params)}\n{{", *body, "}", ""])
    flags = variant.table.compile_flags + variant.popcounts[popcount].flags
    arguments = op.call_tensors + (op.output,)
    return Generated(source, signature(KERNEL_NAME, params, restrict=False) + ";", arguments, params,
                     variant.table, {}, False, compile_flags=flags)


def pseudocode(schedule: Schedule, variant: BinaryVariant) -> list[str]:
    """The kernel's nest on ``variant`` as pseudo-code lines (what ``Schedule.pseudocode`` prints for a
    binary op): ``generate_binary``'s loops (named without their ``lo_`` prefix), the register block's
    taps and words summed in one loop of its block function."""
    op = schedule.op
    isa = variant.name
    s = BinaryShape.of(op, lanes=variant.lanes)
    r_full, v_full = block_of(schedule, variant)
    r_full, v_full = min(r_full, s.positions), min(v_full, s.kpad // s.lanes)
    channels = v_full * s.lanes
    x, w = op.inputs
    steps = s.rows.taps * s.cols.taps * s.words
    return [f"# binary XNOR + popcount kernel (targets/binary.py) on {isa}: register block {r_full} "
            f"output positions x {v_full} vector(s) of {s.lanes} output channel(s), kept across the taps and "
            f"words",
            f"for n in 0..{s.batch}:",
            f"  for g in 0..{s.groups}:",
            f"    for p in 0..{s.positions} step {r_full}:    # blocks of {r_full} output positions (rows x "
            f"columns, row-major)",
            f"      for r in 0..{r_full}:    # each position's input window (past the end: the last one)",
            f"      for kb in 0..{s.kpad} step {channels}:    # blocks of {channels} output channels",
            f"        S[r, k] += popcount({x}_bits[n, g, window(p + r) + tap, word] XOR "
            f"{w}_bits[g, tap, word, kb + k])    # one loop over the {s.rows.taps} x {s.cols.taps} taps x "
            f"{s.words} words ({steps} steps), {r_full} x {channels} accumulators",
            f"        for r in 0..{r_full}:    # the block's positions in the output",
            f"          for j in 0..{channels}:    # its channels in the output",
            f"            {op.output}[n, p + r, kb + j] = epilogue(base[class(oh), class(ow), kb + j] "
            f"- 2 * S[r, j])    # base: the padding correction ({op.output} stored channels-last)"]


def packed_elements(op: Op, lanes: int, name: str) -> int:
    """uint64 words of the packed activations or weights (``name``: the op's input) with ``lanes``
    uint64 lanes per vector."""
    shape = BinaryShape.of(op, lanes=lanes)
    return math.prod(shape.activations_shape if name == op.inputs[0] else shape.weights_shape)


class BinaryKernel(QuantizedKernel):
    """A binary op's XNOR + popcount kernel (``codegen/binary.py``), called like the int8 kernels:
    ``kernel(xq, wq, b, x_scale=, x_zero_point=0, w_scale=, w_zero_point=0)`` (no scales for an int32
    output). ``prepare`` checks that every value is -1 or +1, packs both operands to bits (the
    activations with their padding) and computes the ``base`` table of the padding correction; the
    kernel stores the output channels-last and ``output`` returns it in the logical layout."""

    def __init__(self, schedule: Schedule, generated: Generated, driver: Driver, variant: BinaryVariant,
                 popcount: str):
        super().__init__(schedule, generated, driver, None)
        self.variant, self.popcount = variant, popcount
        self.shape = BinaryShape.of(self.op, lanes=variant.lanes)

    @property
    def block(self) -> tuple[int, int]:
        """The register block the schedule asks for: (output positions, vectors of output channels)."""
        return block_of(self.schedule, self.variant)

    @property
    def _output_name(self) -> str:
        return self.op.output

    def _elements(self, name: str) -> int:
        if name in self.op.inputs:
            return packed_elements(self.op, self.variant.lanes, name)
        if name == BASE:
            return math.prod(base_table_shape(self.op))
        return self.op.channels if name.startswith("lo_") else Kernel._elements(self, name)

    def _values(self, *arrays: np.ndarray, **params: Any) -> dict[str, Any]:
        """Validate, pack both operands to bits, compute the multipliers ``sx * sw[k]`` and the
        ``base`` table."""
        op = self.op
        given = self._given(arrays)
        for tensor, array in zip(self.generated.arguments, given):
            if not isinstance(array, np.ndarray):
                raise TypeError(f"{tensor} must be a numpy array, got {type(array).__name__}")
            shape = op.tensor(tensor).shape
            if array.shape != shape and tensor != op.bias_tensor:
                raise ValueError(f"{tensor} has shape {array.shape}; {op!r} expects {shape}")
        qp = self.check_params(tuple(given), params)
        check_memory(f"the buffers of {op!r}", self.buffer_bytes())
        x, w = op.inputs
        weights = pack_bits_weights(op, self.shape, given[1])
        values: dict[str, Any] = {x: self._copy(x, pack_bits_activations(op, self.shape, given[0])),
                                  w: self._copy(w, weights),
                                  BASE: self._copy(BASE, base_table(op, self.shape, weights))}
        if op.bias:
            values[op.bias_tensor] = self._copy(op.bias_tensor, qp.bias)
        values[op.output] = self._zeros(op.output, self.shape.output_shape,
                                        np.float32 if op.quant.dequantized else np.int32)
        if op.quant.scaled:
            values["lo_mult"] = self._copy("lo_mult", output_multipliers(op.quant, qp, op.channels))
        return values

    def prepack(self, weights: np.ndarray) -> None:
        raise ValueError(NOT_PREPACKED)

    def with_constants(self, *constants: np.ndarray, **params: Any) -> Callable[[np.ndarray], np.ndarray]:
        raise ValueError(NOT_PREPACKED)

    def output(self, buffers: Buffers) -> np.ndarray:
        """The output of the last run, from channels-last to the op's logical layout."""
        stored = buffers.arrays[self.op.output].reshape(self.shape.output_shape)
        return np.ascontiguousarray(np.moveaxis(stored, -1, 1)).reshape(self.op.tensor(self.op.output).shape)

    def accumulators(self, buffers: Buffers) -> np.ndarray:
        raise ValueError("a binary kernel applies the epilogue per output: it keeps no raw accumulators")
