"""Binary ops (``QuantSpec(activation="binary", weight="binary")``): XNOR + popcount kernels.

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
inside, blocks of ``V`` vectors of output channels (8 uint64 lanes on AVX-512, 4 on AVX2, 1
scalar): the register block, ``R x V`` accumulators kept across the taps and words. Per tap and
word the block loads its ``V`` weight vectors once and broadcasts each position's activation
word once, then XORs, popcounts and adds ``R x V`` times: ``vpopcntq`` (AVX-512 VPOPCNTDQ), a
nibble table (``vpshufb`` twice, ``vpsadbw`` to 64-bit sums) or ``__builtin_popcountll``
(scalar). ``R`` and ``V`` come from the schedule's register block (``block_of``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...codegen.emit import KERNEL_NAME, Generated
from ...codegen.params import KernelParam, signature
from ...codegen.quantized import GroupShape, batch_dim, borders
from ...ops import Op, Window
from ...schedule import Schedule, ScheduleError
from .isa import INT_ISAS

WORD = 64
LANES = {"avx512": 8, "avx2": 4, "scalar": 1}
POPCOUNTS = {"avx512": ("vpopcntq", "nibble"), "avx2": ("nibble",), "scalar": ("builtin",)}
# the register block without a schedule step: (output positions, vectors of output channels)
DEFAULT_BLOCKS = {"avx512": (4, 4), "avx2": (3, 2), "scalar": (4, 4)}
MAX_ACCUMULATORS = 64   # R x V of one register block
BASE = "lo_base"        # the per-class, per-channel ``base`` table
NO_UNROLL = "    #pragma GCC unroll 1"


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


def block_of(schedule: Schedule, isa: str) -> tuple[int, int]:
    """``(R, V)``: output positions and vectors of output channels of the register block, from the
    schedule's ``tile(<position dim>=R, <channel dim>=V * lanes)`` (or ``split`` of either; a dim not
    split keeps the ISA's default); ScheduleError for any other step or a channel block that is not
    whole vectors of ``isa``."""
    op = schedule.op
    positions, channels = block_dims(op)
    lanes = LANES[isa]
    r, v = DEFAULT_BLOCKS[isa]
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


# --- C ----------------------------------------------------------------------------------------------

NIBBLE_TABLE = "0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4"
VECTOR = {
    "avx512": dict(t="__m512i", x="_mm512", set1="_mm512_set1_epi64",
                   load="_mm512_loadu_si512((const void *)({p}))",
                   table=f"_mm512_broadcast_i32x4(_mm_setr_epi8({NIBBLE_TABLE}))"),
    "avx2": dict(t="__m256i", x="_mm256", set1="_mm256_set1_epi64x",
                 load="_mm256_loadu_si256((const __m256i *)(const void *)({p}))",
                 table=f"_mm256_broadcastsi128_si256(_mm_setr_epi8({NIBBLE_TABLE}))"),
}
NIBBLE_C = """\
/* popcount of each uint64 lane: a 16-entry table of nibble counts (vpshufb on the low and high
 * nibbles), then the 8 byte counts of each lane summed by vpsadbw */
static inline {t} lo_popcount(const {t} v) {{
    const {t} table = {table}, low = {x}_set1_epi8(0x0f);
    const {t} c = {x}_add_epi8({x}_shuffle_epi8(table, {x}_and_si{bits}(v, low)),
                              {x}_shuffle_epi8(table, {x}_and_si{bits}({x}_srli_epi64(v, 4), low)));
    return {x}_sad_epu8(c, {x}_setzero_si{bits}());
}}
"""
VPOPCNT_C = "static inline __m512i lo_popcount(const __m512i v) { return _mm512_popcnt_epi64(v); }\n"
SCALAR_C = ("static inline uint64_t lo_popcount(const uint64_t v) "
            "{ return (uint64_t)__builtin_popcountll(v); }\n")


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

    @classmethod
    def of(cls, isa: str) -> "Ops":
        if isa == "scalar":
            return cls("uint64_t", "0", "*({p})", "{s}", "{a} ^ {b}", "{a} + {b}", "*({p}) = {v}")
        v = VECTOR[isa]
        bits = LANES[isa] * WORD
        return cls(v["t"], f"{v['x']}_setzero_si{bits}()", v["load"], f"{v['set1']}((long long)({{s}}))",
                   f"{v['x']}_xor_si{bits}({{a}}, {{b}})", f"{v['x']}_add_epi64({{a}}, {{b}})",
                   f"{v['x']}_storeu_si{bits}((void *)({{p}}), {{v}})")


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
             "const uint64_t *restrict lo_w, uint64_t *restrict lo_sums)", "{",
             *(f"    const uint64_t *restrict lo_x{i} = lo_xp[{i}];" for i in range(r_count)),
             f"    {ops.t} {', '.join(f'{a} = {ops.zero}' for row in acc for a in row)};",
             # one loop over the taps and words (the weights' order; lo_xoff: the activation word of each
             # step): each step updates each accumulator once. Unrolled, gcc reassociates the sums of
             # several steps into trees of temporaries and spills the accumulators
             NO_UNROLL, f"    for (ptrdiff_t lo_s = 0; lo_s < {r.taps * c.taps * s.words}; ++lo_s) {{",
             "        const ptrdiff_t lo_t = lo_xoff[lo_s];",
             f"        const uint64_t *lo_wt = lo_w + lo_s * {s.kpad};",
             *(f"        const {ops.t} lo_w{j} = {ops.load.format(p=f'lo_wt + {j * lanes}')};"
               for j in range(v_count))]
    for i in range(r_count):
        lines.append(f"        {{ const {ops.t} lo_b = {ops.set1.format(s=f'lo_x{i}[lo_t]')};")
        for j in range(v_count):
            term = f"lo_popcount({ops.xor.format(a='lo_b', b=f'lo_w{j}')})"
            lines.append(f"          {acc[i][j]} = {ops.add.format(a=acc[i][j], b=term)};")
        lines.append("        }")
    lines += ["    }",
              *(f"    {ops.store.format(p=f'lo_sums + {(i * v_count + j) * lanes}', v=acc[i][j])};"
                for i in range(r_count) for j in range(v_count)),
              "}"]
    return lines


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
            return [f"        {next(iter(calls.values()))}"]
        out = []
        for (rc, vc), text in calls.items():
            conds = ([r_cond if rc == r_full else f"!({r_cond})"] if r_tail else []) + \
                    ([v_cond if vc == v_full else f"!({v_cond})"] if v_tail else [])
            keyword = "if" if not out else "else if" if len(out) < len(calls) - 1 else "else"
            test = f" ({' && '.join(conds)})" if keyword != "else" else ""
            out.append(f"        {keyword}{test} {text}")
        return out

    offsets = [(kh * r.dilation * pcols + kw * c.dilation) * s.words + cw
               for kh in range(r.taps) for kw in range(c.taps) for cw in range(s.words)]
    tables = [f"static const ptrdiff_t lo_xoff[{len(offsets)}] = {{{', '.join(map(str, offsets))}}};",
              f"static const int lo_rclass[{r.out}] = {{{', '.join(map(str, row_classes))}}};",
              f"static const int lo_cclass[{c.out}] = {{{', '.join(map(str, col_classes))}}};"]
    return tables, [
        f"for (ptrdiff_t lo_n = 0; lo_n < {s.batch}; ++lo_n)",
        f"for (ptrdiff_t lo_g = 0; lo_g < {s.groups}; ++lo_g) {{",
        f"    const uint64_t *lo_xg = {x} + (lo_n * {s.groups} + lo_g) * {prows * pcols * s.words};",
        f"    const uint64_t *lo_wg = {w} + lo_g * {r.taps * c.taps * s.words * s.kpad};",
        f"    for (ptrdiff_t lo_p = 0; lo_p < {s.positions}; lo_p += {r_full}) {{",
        f"        const uint64_t *lo_xp[{r_full}];",
        f"        for (int lo_r = 0; lo_r < {r_full}; ++lo_r) {{   /* past the end: the last position */",
        f"            const ptrdiff_t lo_q = lo_p + lo_r < {s.positions} ? lo_p + lo_r : {s.positions - 1};",
        f"            const ptrdiff_t lo_oh = lo_q / {c.out}, lo_ow = lo_q % {c.out};",
        f"            lo_xp[lo_r] = lo_xg + (lo_oh * {r.stride * pcols} + lo_ow * {c.stride}) * {s.words};",
        "        }",
        f"        for (ptrdiff_t lo_kb = 0; lo_kb < {s.kpad}; lo_kb += {v_full * lanes}) {{",
        f"            uint64_t lo_sums[{r_full * v_full * lanes}];",
        *("    " + line for line in choose(f"lo_p + {r_full} <= {s.positions}",
                                         f"lo_kb + {v_full * lanes} <= {s.kpad}")),
        f"            const int lo_v = lo_kb + {v_full * lanes} <= {s.kpad} ? {v_full * lanes} : "
        f"{v_tail * lanes};",
        f"            const int lo_jn = lo_v < {s.kg} - lo_kb ? lo_v : {s.kg} - lo_kb;",
        f"            for (int lo_r = 0; lo_r < {r_full} && lo_p + lo_r < {s.positions}; ++lo_r) {{",
        f"                const ptrdiff_t lo_oh = (lo_p + lo_r) / {c.out}, lo_ow = (lo_p + lo_r) % {c.out};",
        f"                const int32_t *lo_bp = {BASE} + (lo_rclass[lo_oh] * {col_count} "
        f"+ lo_cclass[lo_ow]) * {channels} + lo_g * {s.kg} + lo_kb;",
        "                const uint64_t *lo_sp = lo_sums + lo_r * lo_v;",
        f"                const ptrdiff_t lo_y0 = ((lo_n * {s.positions}) + lo_p + lo_r) * {channels} "
        f"+ lo_g * {s.kg} + lo_kb;",
        "                for (int lo_j = 0; lo_j < lo_jn; ++lo_j) {",
        f"                    const ptrdiff_t lo_ch = lo_g * {s.kg} + lo_kb + lo_j, lo_y = lo_y0 + lo_j;",
        "                    const int lo_acc = lo_bp[lo_j] - 2 * (int)lo_sp[lo_j];",
        f"                    {_epilogue(op)}",
        "                }",
        "            }",
        "        }",
        "    }",
        "}",
    ]


def generate_binary(schedule: Schedule, isa: str, popcount: str) -> Generated:
    """The C kernel of a binary op on ``isa`` with ``popcount`` (one of ``POPCOUNTS[isa]``)."""
    op = schedule.op
    shape = BinaryShape.of(op, lanes=LANES[isa])
    r_full, v_full = block_of(schedule, isa)
    vectors = shape.kpad // shape.lanes
    v_full = min(v_full, vectors)
    r_full = min(r_full, shape.positions)
    ops = Ops.of(isa)
    prelude = ["#include <stdint.h>", "#include <stddef.h>"]
    if isa == "scalar":
        prelude.append(SCALAR_C)
    else:
        prelude += ["#include <immintrin.h>",
                    VPOPCNT_C if popcount == "vpopcntq" else
                    NIBBLE_C.format(bits=shape.lanes * WORD, **VECTOR[isa])]
    blocks = sorted({(rc, vc) for rc in {r_full, shape.positions % r_full} - {0}
                     for vc in {v_full, vectors % v_full} - {0}}, reverse=True)
    params = parameters(op)
    header = (f"/* loopopt binary kernel (XNOR + popcount, codegen/binary.py) for {op!r}\n"
              f" * isa: {isa}, register block {r_full} output positions x {v_full} vector(s) of "
              f"{shape.lanes} uint64 lane(s) of output channels, popcount: {popcount} */")
    tables, nest = _nest(op, shape, (r_full, v_full))
    functions = [line for rc, vc in blocks for line in _block(shape, ops, rc, vc) + [""]]
    body = ["    " + line for line in nest]
    source = "\n".join([header, *prelude, "", *tables, "", *functions,
                        f"{signature(KERNEL_NAME, params)}\n{{", *body, "}", ""])
    flags = INT_ISAS[isa].compile_flags + (("-mavx512vpopcntdq",) if popcount == "vpopcntq" else ())
    arguments = op.call_tensors + (op.output,)
    return Generated(source, signature(KERNEL_NAME, params, restrict=False) + ";", arguments, params,
                     INT_ISAS[isa], {}, False, compile_flags=flags)


def pseudocode(schedule: Schedule, isa: str) -> list[str]:
    """The kernel's nest on ``isa`` as pseudo-code lines (what ``Schedule.pseudocode`` prints for a binary
    op): ``generate_binary``'s loops (named without their ``lo_`` prefix), the register block's taps and
    words summed in one loop of its block function."""
    op = schedule.op
    s = BinaryShape.of(op, lanes=LANES[isa])
    r_full, v_full = block_of(schedule, isa)
    r_full, v_full = min(r_full, s.positions), min(v_full, s.kpad // s.lanes)
    channels = v_full * s.lanes
    x, w = op.inputs
    steps = s.rows.taps * s.cols.taps * s.words
    return [f"# binary XNOR + popcount kernel (targets/x86/binary.py) on {isa}: register block {r_full} "
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


def packed_elements(op: Op, isa: str, name: str) -> int:
    """uint64 words of the packed activations or weights (``name``: the op's input)."""
    shape = BinaryShape.of(op, lanes=LANES[isa])
    return math.prod(shape.activations_shape if name == op.inputs[0] else shape.weights_shape)
