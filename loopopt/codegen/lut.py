"""Ternary GEMM by table lookup, ``Schedule.weight_format("tl1" | "tl2")`` (T-MAC / bitnet.cpp style).

Two ternary weights ``(w0, w1)`` of one output column and consecutive reduction rows form a pair
with one of 9 values, stored as a 4-bit index ``3 (w0 + 1) + (w1 + 1)``: two pairs per byte (pair
``2q`` in the low nibble, ``2q + 1`` in the high one), the bytes of 32 consecutive columns together
(``[column block][q][32 columns]``, columns and rows zero-padded). For every row of the activations
the kernel first builds, per pair of activations ``(x0, x1)``, the table of the 9 partial sums
``w0 x0 + w1 x1`` (int16, 16 entries, in the workspace ``lo_lut`` that ``prepare`` allocates);
then for each block of 32 columns and each pair it looks the 32 columns' partial sums up in one
instruction (AVX-512 ``vpermw``: the table broadcast to the register, the 32 indices as int16
lanes), adds them in int16 for up to 64 pairs (``|sum| <= 64 * 510``) and widens into int32 sums.
The raw sums ``P = sum x * w`` go to the int32 workspace and the epilogue of
``codegen/quantized.py`` applies the compensation, bias and scales, so the result is exact. The
scalar target looks the tables up one column at a time.

AVX2 has no ``vpermw``: its tables are two 16-byte tables (the low and the high bytes of the int16
sums), looked up with two ``vpshufb`` per pair and interleaved back to int16 with ``vpunpck[lh]bw``
(which leaves the 32 columns in the order 0-7, 16-23 | 8-15, 24-31, undone when the sums widen).

TL2 takes triples: 27 weight triples, but a triple and its negation share an entry up to the sign,
so the table holds the 13 triples whose first nonzero weight is +1 and (0, 0, 0) (14 entries, a
4-bit index) and one sign bit per triple and column (a uint32 per 32 columns, after the indices)
negates the entry: AVX-512 adds it and subtracts it again twice in the lanes of the sign mask
(``vpsubw`` under a mask), 1.67 bits per weight. TL2 runs on AVX-512 and scalar (AVX2 is refused).

The nest is fixed (rows, column blocks, pairs): schedule steps other than ``weight_format`` are
refused, as are ops with windows (convolutions: use ``i2_s``).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..expr import Var
from ..ops import Op
from ..schedule import Schedule, ScheduleError
from . import quantized
from .emit import KERNEL_NAME, Generated
from .isa import INT_ISAS
from .params import KernelParam, signature

COLUMNS = 32        # columns per block: the int16 lanes of a 512-bit register
LUT = "lo_lut"      # the kernel parameter holding one row's tables (allocated by prepare)
INT16_MAX = 32767


@dataclass(frozen=True)
class LutFormat:
    """A table-lookup format: ``group`` weights per index, the weight groups of each table entry
    (``classes``), and whether a sign bit per group negates the entry (TL2's mirror symmetry)."""

    name: str
    group: int
    classes: tuple[tuple[int, ...], ...]
    signed: bool
    isas: tuple[str, ...]

    @property
    def bound(self) -> int:
        """The largest |table entry| (uint8 activations)."""
        return 255 * self.group

    @property
    def chunk(self) -> int:
        """Bytes of indices (2 groups each) summed in int16 before widening."""
        return INT16_MAX // self.bound // 2

    def encode(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(class index, sign) of weight groups ``w[..., group]``."""
        codes = list(itertools.product((-1, 0, 1), repeat=self.group))
        index, sign = np.zeros(len(codes), np.uint8), np.zeros(len(codes), np.uint8)
        for i, code in enumerate(codes):
            negative = self.signed and next((v for v in code if v), 0) < 0
            index[i] = self.classes.index(tuple(-v for v in code) if negative else code)
            sign[i] = negative
        code = sum((w[..., j].astype(np.int64) + 1) * 3 ** (self.group - 1 - j) for j in range(self.group))
        return index[code], sign[code]


TRIPLES = tuple(t for t in itertools.product((-1, 0, 1), repeat=3) if next((v for v in t if v), 1) > 0)
FORMATS = {
    "tl1": LutFormat("tl1", 2, tuple(itertools.product((-1, 0, 1), repeat=2)), False,
                     ("avx512", "avx2", "scalar")),
    # the 13 triples whose first nonzero weight is +1, and (0, 0, 0) first: 14 entries and a sign bit
    "tl2": LutFormat("tl2", 3, ((0, 0, 0),) + tuple(t for t in TRIPLES if any(t)), True,
                     ("avx512", "scalar")),
}


def check_lut(schedule: Schedule, isa: str) -> None:
    """ScheduleError with the reason unless the table-lookup kernel takes ``schedule`` on ``isa``."""
    op, fmt = schedule.op, schedule.weight_format_mode
    if op.windows:
        raise ScheduleError(f"weight_format({fmt!r}) is a table-lookup GEMM: {op!r} has windows (a "
                            f"convolution); use weight_format('i2_s')")
    steps = [str(s) for s in schedule.steps if s.primitive != "weight_format"]
    if steps:
        raise ScheduleError(f"weight_format({fmt!r}) runs a fixed nest (codegen/lut.py); schedule steps are "
                            f"not applied to it: drop {', '.join(steps)}")
    if isa not in FORMATS[fmt].isas:
        raise ScheduleError(f"weight_format({fmt!r}) runs on {', '.join(FORMATS[fmt].isas)}, not on {isa!r}")


def shape(op: Op) -> tuple[int, int, int]:
    """(rows M, reduction K, columns N) of a GEMM op."""
    a, w = op.inputs
    m, k = op.tensor(a).shape
    return m, k, op.channels


def packed_shape(op: Op, fmt: LutFormat) -> tuple[int, int]:
    """(column blocks, bytes of indices per column: two groups each) of the packed weights."""
    _, k, n = shape(op)
    return -(-n // COLUMNS), -(-k // (2 * fmt.group))


def lut_bytes(op: Op, fmt: LutFormat) -> int:
    """Bytes of the packed weights: the indices ``[block][q][32 columns]``, then (signed formats) one
    uint32 of sign bits (bit c: column c) per block and group ``[block][2 q]``."""
    blocks, q = packed_shape(op, fmt)
    return blocks * q * COLUMNS + (blocks * 2 * q * 4 if fmt.signed else 0)


def pack_lut(op: Op, wq: np.ndarray, fmt: LutFormat) -> np.ndarray:
    """The packed bytes of ternary weights in logical layout (``[K, N]``, output channels on
    ``op.weight_channel_axis``)."""
    _, k, n = shape(op)
    blocks, q = packed_shape(op, fmt)
    w = np.zeros((blocks * COLUMNS, 2 * q * fmt.group), dtype=np.int16)
    w[:n, :k] = np.moveaxis(np.asarray(wq, dtype=np.int16), op.weight_channel_axis, 0)
    index, sign = fmt.encode(w.reshape(blocks * COLUMNS, 2 * q, fmt.group))       # [columns, groups]
    packed = (index[:, 0::2] | (index[:, 1::2] << 4)).astype(np.uint8)           # [columns, q]
    indices = packed.reshape(blocks, COLUMNS, q).transpose(0, 2, 1).reshape(-1)
    if not fmt.signed:
        return np.ascontiguousarray(indices)
    bits = sign.reshape(blocks, COLUMNS, 2 * q).transpose(0, 2, 1).astype(np.uint32)   # [block, group, col]
    words = (bits << np.arange(COLUMNS, dtype=np.uint32)).sum(axis=2, dtype=np.uint32)
    return np.concatenate([indices, words.astype("<u4").reshape(-1).view(np.uint8)])


def table_entries(op: Op, fmt: LutFormat) -> int:
    """int16 entries of one row's tables: 16 per group of activations."""
    return 2 * packed_shape(op, fmt)[1] * 16


def _table(k: int, a: str, isa: str, fmt: LutFormat) -> list[str]:
    """C building the row's tables: per group of activations 16 int16 entries, entry i the dot product
    with ``fmt.classes[i]`` (AVX2: 16 low bytes, then 16 high bytes, of the same entries)."""
    groups = 2 * -(-k // (2 * fmt.group))
    store = ("{ uint8_t *lo_t = (uint8_t *)(lo_lut + lo_p * 16); lo_t[lo_e] = (uint8_t)(lo_s & 255); "
             "lo_t[16 + lo_e] = (uint8_t)((lo_s >> 8) & 255); }" if isa == "avx2"
             else "lo_lut[lo_p * 16 + lo_e] = (int16_t)lo_s;")
    coef = ", ".join("{" + ", ".join(map(str, c)) + "}" for c in fmt.classes)
    x = [f"const int lo_x{j} = {fmt.group} * lo_p + {j} < {k} ? "
         f"(int){a}[lo_row + {fmt.group} * lo_p + {j}] : 0;" for j in range(fmt.group)]
    dot = " + ".join(f"lo_coef[lo_e][{j}] * lo_x{j}" for j in range(fmt.group))
    return [f"static const signed char lo_coef[{len(fmt.classes)}][{fmt.group}] = {{{coef}}};",
            f"for (int lo_p = 0; lo_p < {groups}; ++lo_p) {{",
            *("    " + line for line in x),
            f"    for (int lo_e = 0; lo_e < {len(fmt.classes)}; ++lo_e) {{",
            f"        const int lo_s = {dot};",
            f"        {store}",
            "    }",
            "}"]


def _avx2_lookups(block: str, q: int, chunk: int) -> list[str]:
    """AVX2: two vpshufb per pair (low and high bytes of the sums), interleaved to int16."""
    table = "_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)({p})))"
    look = ("_mm256_unpack{half}_epi8(_mm256_shuffle_epi8(lo_l{i}, lo_i{i}), "
            "_mm256_shuffle_epi8(lo_h{i}, lo_i{i}))")
    lines = ["__m256i lo_s0 = _mm256_setzero_si256(), lo_s1 = lo_s0, lo_s2 = lo_s0, lo_s3 = lo_s0;",
             f"for (int lo_q0 = 0; lo_q0 < {q}; lo_q0 += {chunk}) {{",
             "    /* int16 sums of the columns 0-7, 16-23 (lo_ua) and 8-15, 24-31 (lo_ub) */",
             "    __m256i lo_ua = _mm256_setzero_si256(), lo_ub = lo_ua;",
             f"    for (int lo_q = lo_q0; lo_q < lo_q0 + {chunk} && lo_q < {q}; ++lo_q) {{",
             f"        const __m256i lo_v = _mm256_loadu_si256((const __m256i *)(const void *)"
             f"({block} + lo_q * {COLUMNS}));",
             "        const __m256i lo_i0 = _mm256_and_si256(lo_v, _mm256_set1_epi8(15));",
             "        const __m256i lo_i1 = _mm256_and_si256(_mm256_srli_epi16(lo_v, 4), "
             "_mm256_set1_epi8(15));"]
    for i in (0, 1):
        lines += [f"        const __m256i lo_l{i} = {table.format(p=f'lo_lut + (2 * lo_q + {i}) * 16')};",
                  f"        const __m256i lo_h{i} = "
                  f"{table.format(p=f'(const uint8_t *)(lo_lut + (2 * lo_q + {i}) * 16) + 16')};",
                  f"        lo_ua = _mm256_add_epi16(lo_ua, {look.format(half='lo', i=i)});",
                  f"        lo_ub = _mm256_add_epi16(lo_ub, {look.format(half='hi', i=i)});"]
    return lines + [
        "    }",
        *(f"    lo_s{j} = _mm256_add_epi32(lo_s{j}, _mm256_cvtepi16_epi32({half}(lo_u{acc}{arg})));"
          for j, acc, half, arg in ((0, "a", "_mm256_castsi256_si128", ""),
                                    (1, "b", "_mm256_castsi256_si128", ""),
                                    (2, "a", "_mm256_extracti128_si256", ", 1"),
                                    (3, "b", "_mm256_extracti128_si256", ", 1"))),
        "}",
        *(f"_mm256_storeu_si256((__m256i *)(void *)(lo_sum + {8 * j}), lo_s{j});" for j in range(4))]


def _lookups(op: Op, isa: str, fmt: LutFormat) -> list[str]:
    """C summing one column block ``lo_b`` into ``lo_sum[32]``: per byte of indices two groups, each
    entry negated where the group's sign bit is set (signed formats)."""
    blocks, q = packed_shape(op, fmt)
    w = op.inputs[1]
    block = f"({w} + lo_b * {q * COLUMNS})"
    signs = f"((const uint32_t *)(const void *)({w} + {blocks * q * COLUMNS}) + lo_b * {2 * q})"
    if isa == "avx2":
        return _avx2_lookups(block, q, fmt.chunk)
    if isa == "scalar":
        entry = "lo_lut[(2 * lo_q + {h}) * 16 + ({v})]"
        terms = [entry.format(h=h, v=v) for h, v in ((0, "lo_v & 15"), (1, "lo_v >> 4"))]
        if fmt.signed:
            terms = [f"(((lo_sg[2 * lo_q + {h}] >> lo_c) & 1u) ? -{t} : {t})" for h, t in enumerate(terms)]
        return [f"const uint32_t *lo_sg = {signs};" if fmt.signed else "",
                f"for (int lo_c = 0; lo_c < {COLUMNS}; ++lo_c) {{",
                "    int lo_s = 0;",
                f"    for (int lo_q = 0; lo_q < {q}; ++lo_q) {{",
                f"        const int lo_v = {block}[lo_q * {COLUMNS} + lo_c];",
                f"        lo_s += {' + '.join(terms)};",
                "    }",
                "    lo_sum[lo_c] = lo_s;",
                "}"]
    lookups = []
    for h, index in ((0, "_mm512_and_si512(lo_v, _mm512_set1_epi16(15))"), (1, "_mm512_srli_epi16(lo_v, 4)")):
        lookups += [f"        const __m512i lo_t{h} = _mm512_broadcast_i64x4(_mm256_loadu_si256("
                    f"(const __m256i *)(const void *)(lo_lut + (2 * lo_q + {h}) * 16)));",
                    f"        const __m512i lo_e{h} = _mm512_permutexvar_epi16({index}, lo_t{h});"]
        lookups.append(f"        lo_acc = _mm512_mask_sub_epi16(_mm512_add_epi16(lo_acc, lo_e{h}), "
                       f"_cvtu32_mask32(lo_sg[2 * lo_q + {h}]), lo_acc, lo_e{h});" if fmt.signed
                       else f"        lo_acc = _mm512_add_epi16(lo_acc, lo_e{h});")
    return [f"const uint32_t *lo_sg = {signs};" if fmt.signed else "",
            "__m512i lo_lo = _mm512_setzero_si512(), lo_hi = _mm512_setzero_si512();",
            f"for (int lo_q0 = 0; lo_q0 < {q}; lo_q0 += {fmt.chunk}) {{",
            f"    __m512i lo_acc = _mm512_setzero_si512();   /* int16: at most {2 * fmt.chunk} groups of "
            f"|sum| <= {fmt.bound} */",
            f"    for (int lo_q = lo_q0; lo_q < lo_q0 + {fmt.chunk} && lo_q < {q}; ++lo_q) {{",
            f"        const __m512i lo_v = _mm512_cvtepu8_epi16(_mm256_loadu_si256("
            f"(const __m256i *)(const void *)({block} + lo_q * {COLUMNS})));",
            *lookups,
            "    }",
            "    lo_lo = _mm512_add_epi32(lo_lo, "
            "_mm512_cvtepi16_epi32(_mm512_castsi512_si256(lo_acc)));",
            "    lo_hi = _mm512_add_epi32(lo_hi, "
            "_mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(lo_acc, 1)));",
            "}",
            "_mm512_storeu_si512((void *)lo_sum, lo_lo);",
            "_mm512_storeu_si512((void *)(lo_sum + 16), lo_hi);"]


def generate_lut(schedule: Schedule, isa: str) -> Generated:
    """The C kernel of a ternary GEMM in the schedule's table-lookup format on ``isa`` (``check_lut``
    first)."""
    check_lut(schedule, isa)
    op, fmt = schedule.op, FORMATS[schedule.weight_format_mode]
    qp = quantized.plan(schedule, 1)
    m, k, n = shape(op)
    a, w = op.inputs
    blocks, q = packed_shape(op, fmt)
    args = op.call_tensors + (op.output,)
    params = (KernelParam(a, qp.activation_type, const=True), KernelParam(w, "uint8_t", const=True),
              *((KernelParam(op.bias_tensor, qp.bias_type, const=True),) if op.bias else ()),
              KernelParam(op.output, "int32_t"), *quantized.parameters(qp), KernelParam(LUT, "int16_t"))
    info = op.tensor(op.output)
    index = (Var("lo_i"), Var("lo_col"))
    offset = schedule.layout_of(op.output).offset(index, info.shape).to_c()
    epilogue = quantized.epilogue_statements(schedule, qp, f"{op.output}[{offset}]", index=index)
    body = [*quantized.constants(schedule, qp),
            *_table(k, a, isa, fmt)[:1],
            f"for (int lo_i = 0; lo_i < {m}; ++lo_i) {{",
            f"    const ptrdiff_t lo_row = (ptrdiff_t)lo_i * {k};",
            *("    " + line for line in _table(k, a, isa, fmt)[1:]),
            f"    for (int lo_b = 0; lo_b < {blocks}; ++lo_b) {{",
            f"        int32_t lo_sum[{COLUMNS}];",
            *("        " + line for line in _lookups(op, isa, fmt)),
            f"        for (int lo_c = 0; lo_c < {COLUMNS} && lo_b * {COLUMNS} + lo_c < {n}; ++lo_c) {{",
            f"            const int lo_col = lo_b * {COLUMNS} + lo_c;",
            f"            {op.output}[{offset}] = lo_sum[lo_c];",
            *("            " + line for line in epilogue),
            "        }",
            "    }",
            "}"]
    header = (f"/* loopopt table-lookup kernel (codegen/lut.py) for {op!r}\n"
              f" * isa: {isa}; weights: ternary, {fmt.name} (a 4-bit index per {fmt.group} weights"
              f"{' and a sign bit' if fmt.signed else ''}, 32 columns per block) */")
    prelude = ["#include <stdint.h>", "#include <stddef.h>", "#include <stdlib.h>"]
    prelude += ["#include <immintrin.h>"] if isa != "scalar" else []
    source = "\n".join([header, *prelude, "", f"{signature(KERNEL_NAME, params)}\n{{",
                        *("    " + line for line in body), "}", ""])
    return Generated(source, signature(KERNEL_NAME, params, restrict=False) + ";", args, params,
                     INT_ISAS[isa], {}, False, plan=qp, compile_flags=INT_ISAS[isa].compile_flags)
