"""Binary ops (``QuantSpec(activation="binary", weight="binary")``): XNOR + popcount kernels.

Values in {-1, +1} are packed to bits (+1 -> 1) along the input channels of a group, 64 per
uint64 word; the bits past a group's last channel are 0 in both operands. Over one tap the
products of ``c`` channels sum to ``c - 2 * popcount(x XOR w)`` (XNOR counts the agreeing bits,
the pad bits agree and are not counted), so one output is

    acc = cg * taps(p) - 2 * sum popcount(x XOR w)

over its valid taps: ``taps(p)`` counts the filter positions inside the input, so padding taps
contribute 0, as in the real-valued conv of {-1, +1} inputs with zero padding (exact). The
epilogue adds the int32 bias (int32 output) or computes ``float(acc) * (sx * sw[k]) + b[k]``.

Layouts: activations ``[batch][group][rows][cols][words]``, weights
``[group][row taps][col taps][words][output channels of the group, padded to the lanes]``. The nest
is fixed: batch, group, output rows and columns, then a vector of output channels (8 uint64
lanes on AVX-512, 4 on AVX2, 1 scalar), the valid taps and the words; the activation word is
broadcast, XORed with the weights' words of the lanes' channels and popcounted:
``vpopcntq`` (AVX-512 VPOPCNTDQ), a nibble table (``vpshufb`` twice, ``vpsadbw`` to 64-bit sums)
or ``__builtin_popcountll`` (scalar).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ops import Op
from ..schedule import Schedule
from .emit import KERNEL_NAME, Generated
from .isa import INT_ISAS
from .params import KernelParam, signature
from .quantized import GroupShape

WORD = 64
LANES = {"avx512": 8, "avx2": 4, "scalar": 1}
POPCOUNTS = {"avx512": ("vpopcntq", "nibble"), "avx2": ("nibble",), "scalar": ("builtin",)}


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
    def activations_shape(self) -> tuple[int, ...]:
        return (self.batch, self.groups, self.rows.size, self.cols.size, self.words)

    @property
    def weights_shape(self) -> tuple[int, ...]:
        return (self.groups, self.rows.taps, self.cols.taps, self.words, self.kpad)


def _bits(values: np.ndarray, words: int) -> np.ndarray:
    """uint64 words of the signs of the last axis (+1 -> bit 1, channel i -> bit i % 64 of word i // 64)."""
    bits = np.zeros(values.shape[:-1] + (words * WORD,), dtype=bool)
    bits[..., :values.shape[-1]] = values > 0
    return np.packbits(bits, axis=-1, bitorder="little").view("<u8")


def pack_bits_activations(op: Op, shape: BinaryShape, xq: np.ndarray) -> np.ndarray:
    """``xq`` in logical layout ([batch, channels, one axis per window]) as packed words."""
    x = np.asarray(xq).reshape(shape.batch, shape.groups, shape.cg, shape.rows.size, shape.cols.size)
    return np.ascontiguousarray(_bits(np.moveaxis(x, 2, -1), shape.words))


def pack_bits_weights(op: Op, shape: BinaryShape, wq: np.ndarray) -> np.ndarray:
    """``wq`` in logical layout as packed words ``[group][row tap][col tap][word][channel]``."""
    w = np.moveaxis(np.asarray(wq), op.weight_channel_axis, 0)
    w = w.reshape(shape.groups, shape.kg, shape.cg, shape.rows.taps, shape.cols.taps)
    words = _bits(np.moveaxis(w, 2, -1), shape.words)               # [g, kg, taps, taps, words]
    packed = np.zeros(shape.weights_shape, dtype=np.uint64)
    packed[..., :shape.kg] = np.moveaxis(words, 1, -1)
    return packed


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


def parameters(op: Op) -> tuple[KernelParam, ...]:
    """The C parameters: packed activations and weights, the bias, the output, the multipliers."""
    x, w = op.inputs
    spec = op.quant
    values = "float" if spec.dequantized else "int32_t"
    bias = (KernelParam(op.bias_tensor, values, const=True),) if op.bias else ()
    mult = (KernelParam("lo_mult", "float", const=True),) if spec.scaled else ()
    return (KernelParam(x, "uint64_t", const=True), KernelParam(w, "uint64_t", const=True), *bias,
            KernelParam(op.output, values), *mult)


def _epilogue(op: Op) -> str:
    """C storing ``lo_acc`` (int) to the output element ``lo_y`` of channel ``lo_ch``."""
    bias = f" + {op.bias_tensor}[lo_ch]" if op.bias else ""
    if op.quant.scaled:
        return f"{op.output}[lo_y] = (float)lo_acc * lo_mult[lo_ch]{bias};"
    return f"{op.output}[lo_y] = lo_acc{bias};"


def _nest(op: Op, s: BinaryShape, vector: dict | None) -> list[str]:
    r, c = s.rows, s.cols
    x, w = op.inputs
    out_rows, out_cols = r.out, c.out
    if vector is None:
        acc_type, zero = "uint64_t", "0"
        load_x = "const uint64_t lo_x = lo_xs[lo_cw];"
        update = f"lo_sum += (uint64_t)__builtin_popcountll(lo_x ^ lo_w[lo_cw * {s.kpad}]);"
        sums = ["const uint64_t lo_lane[1] = {lo_sum};"]
    else:
        t, xp, bits = vector["t"], vector["x"], s.lanes * 64
        acc_type, zero = t, f"{xp}_setzero_si{bits}()"
        load_x = f"const {t} lo_x = {vector['set1']}((long long)lo_xs[lo_cw]);"
        wv = vector["load"].format(p=f"lo_w + lo_cw * {s.kpad}")
        update = f"lo_sum = {xp}_add_epi64(lo_sum, lo_popcount({xp}_xor_si{bits}(lo_x, {wv})));"
        sums = [f"uint64_t lo_lane[{s.lanes}];", f"{xp}_storeu_si{bits}((void *)lo_lane, lo_sum);"]
    return [
        f"for (ptrdiff_t lo_n = 0; lo_n < {s.batch}; ++lo_n)",
        f"for (ptrdiff_t lo_g = 0; lo_g < {s.groups}; ++lo_g)",
        f"for (ptrdiff_t lo_oh = 0; lo_oh < {out_rows}; ++lo_oh)",
        f"for (ptrdiff_t lo_ow = 0; lo_ow < {out_cols}; ++lo_ow)",
        f"for (ptrdiff_t lo_kb = 0; lo_kb < {s.kpad}; lo_kb += {s.lanes}) {{",
        f"    {acc_type} lo_sum = {zero};",
        "    int lo_taps = 0;",
        f"    for (ptrdiff_t lo_kh = 0; lo_kh < {r.taps}; ++lo_kh) {{",
        f"        const ptrdiff_t lo_ih = lo_oh * {r.stride} - {r.pad} + lo_kh * {r.dilation};",
        f"        if (lo_ih < 0 || lo_ih >= {r.size}) continue;   /* padding taps contribute 0 */",
        f"        for (ptrdiff_t lo_kw = 0; lo_kw < {c.taps}; ++lo_kw) {{",
        f"            const ptrdiff_t lo_iw = lo_ow * {c.stride} - {c.pad} + lo_kw * {c.dilation};",
        f"            if (lo_iw < 0 || lo_iw >= {c.size}) continue;",
        "            ++lo_taps;",
        f"            const uint64_t *lo_xs = {x} + (((lo_n * {s.groups} + lo_g) * {r.size} + lo_ih) "
        f"* {c.size} + lo_iw) * {s.words};",
        f"            const uint64_t *lo_w = {w} + ((lo_g * {r.taps} + lo_kh) * {c.taps} + lo_kw) * "
        f"{s.words * s.kpad} + lo_kb;",
        f"            for (ptrdiff_t lo_cw = 0; lo_cw < {s.words}; ++lo_cw) {{",
        f"                {load_x}",
        f"                {update}",
        "            }",
        "        }",
        "    }",
        *(f"    {line}" for line in sums),
        f"    for (int lo_j = 0; lo_j < {s.lanes} && lo_kb + lo_j < {s.kg}; ++lo_j) {{",
        f"        const ptrdiff_t lo_ch = lo_g * {s.kg} + lo_kb + lo_j;",
        f"        const ptrdiff_t lo_y = ((lo_n * {op.channels} + lo_ch) * {out_rows} + lo_oh) * {out_cols} "
        f"+ lo_ow;",
        f"        const int lo_acc = {s.cg} * lo_taps - 2 * (int)lo_lane[lo_j];",
        f"        {_epilogue(op)}",
        "    }",
        "}",
    ]


def generate_binary(schedule: Schedule, isa: str, popcount: str) -> Generated:
    """The C kernel of a binary op on ``isa`` with ``popcount`` (one of ``POPCOUNTS[isa]``)."""
    op = schedule.op
    shape = BinaryShape.of(op, lanes=LANES[isa])
    vector = None
    prelude = ["#include <stdint.h>", "#include <stddef.h>"]
    if isa != "scalar":
        bits = shape.lanes * 64
        vector = VECTOR[isa]
        prelude += ["#include <immintrin.h>",
                    VPOPCNT_C if popcount == "vpopcntq" else NIBBLE_C.format(bits=bits, **VECTOR[isa])]
    params = parameters(op)
    header = (f"/* loopopt binary kernel (XNOR + popcount, codegen/binary.py) for {op!r}\n"
              f" * isa: {isa}, {shape.lanes} uint64 lane(s) of output channels, popcount: {popcount} */")
    body = ["    " + line for line in _nest(op, shape, vector)]
    source = "\n".join([header, *prelude, "", f"{signature(KERNEL_NAME, params)}\n{{", *body, "}", ""])
    flags = INT_ISAS[isa].compile_flags + (("-mavx512vpopcntdq",) if popcount == "vpopcntq" else ())
    arguments = op.call_tensors + (op.output,)
    return Generated(source, signature(KERNEL_NAME, params, restrict=False) + ";", arguments, params,
                     INT_ISAS[isa], {}, False, compile_flags=flags)


def packed_elements(op: Op, isa: str, name: str) -> int:
    """uint64 words of the packed activations or weights (``name``: the op's input)."""
    shape = BinaryShape.of(op, lanes=LANES[isa])
    return math.prod(shape.activations_shape if name == op.inputs[0] else shape.weights_shape)
