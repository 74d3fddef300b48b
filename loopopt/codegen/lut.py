"""Ternary GEMM by table lookup, ``Schedule.weight_format("tl1")`` (T-MAC / bitnet.cpp TL1 style).

Two ternary weights ``(w0, w1)`` of one output column and consecutive reduction rows form a pair
with one of 9 values, stored as a 4-bit index ``3 (w0 + 1) + (w1 + 1)``: two pairs per byte (pair
``2q`` in the low nibble, ``2q + 1`` in the high one), the bytes of 32 consecutive columns together
(``[column block][q][32 columns]``, columns and rows zero-padded). For every row of the activations
the kernel first builds, per pair of activations ``(x0, x1)``, the table of the 9 partial sums
``w0 x0 + w1 x1`` (int16, 16 entries); then for each block of 32 columns and each pair it looks the
32 columns' partial sums up in one instruction (AVX-512 ``vpermw``: the table broadcast to the
register, the 32 indices as int16 lanes), adds them in int16 for up to 64 pairs (``|sum| <= 64 *
510``) and widens into int32 sums. The raw sums ``P = sum x * w`` go to the int32 workspace and the
epilogue of ``codegen/quantized.py`` applies the compensation, bias and scales, so the result is
exact. The scalar target looks the tables up one column at a time.

AVX2 has no ``vpermw``: its tables are two 16-byte tables (the low and the high bytes of the int16
sums), looked up with two ``vpshufb`` per pair and interleaved back to int16 with ``vpunpck[lh]bw``
(which leaves the 32 columns in the order 0-7, 16-23 | 8-15, 24-31, undone when the sums widen).

The nest is fixed (rows, column blocks, pairs): schedule steps other than ``weight_format`` are
refused, as are ops with windows (convolutions: use ``i2_s``).
"""
from __future__ import annotations

import numpy as np

from ..expr import Var
from ..ops import Op
from ..schedule import Schedule, ScheduleError
from . import quantized
from .emit import KERNEL_NAME, Generated
from .isa import INT_ISAS
from .params import KernelParam, signature

COLUMNS = 32        # columns per block: the int16 lanes of a 512-bit register
CHUNK = 32          # bytes of pair indices (64 pairs) summed in int16 before widening
ISAS = ("avx512", "avx2", "scalar")


def check_lut(schedule: Schedule, isa: str) -> None:
    """ScheduleError with the reason unless the TL1 kernel takes ``schedule`` on ``isa``."""
    op = schedule.op
    if op.windows:
        raise ScheduleError(f"weight_format('tl1') is a table-lookup GEMM: {op!r} has windows (a "
                            f"convolution); use weight_format('i2_s')")
    steps = [str(s) for s in schedule.steps if s.primitive != "weight_format"]
    if steps:
        raise ScheduleError(f"weight_format('tl1') runs a fixed nest (codegen/lut.py); schedule steps are "
                            f"not applied to it: drop {', '.join(steps)}")


def shape(op: Op) -> tuple[int, int, int]:
    """(rows M, reduction K, columns N) of a GEMM op."""
    a, w = op.inputs
    m, k = op.tensor(a).shape
    return m, k, op.channels


def packed_shape(op: Op) -> tuple[int, int, int]:
    """``[column blocks][q][32 columns]`` bytes of the packed pair indices."""
    _, k, n = shape(op)
    return -(-n // COLUMNS), -(-k // 4), COLUMNS


def pack_tl1(op: Op, wq: np.ndarray) -> np.ndarray:
    """The TL1 bytes of ternary weights in logical layout (``[K, N]``, output channels on
    ``op.weight_channel_axis``)."""
    _, k, n = shape(op)
    blocks, q, _ = packed_shape(op)
    w = np.zeros((blocks * COLUMNS, 4 * q), dtype=np.int16)
    w[:n, :k] = np.moveaxis(np.asarray(wq, dtype=np.int16), op.weight_channel_axis, 0)
    index = 3 * (w[:, 0::2] + 1) + (w[:, 1::2] + 1)                  # [columns, pairs]
    packed = (index[:, 0::2] | (index[:, 1::2] << 4)).astype(np.uint8)  # [columns, q]
    return np.ascontiguousarray(packed.reshape(blocks, COLUMNS, q).transpose(0, 2, 1))


def _table(k: int, a: str, isa: str) -> list[str]:
    """C building the row's tables: per pair 16 int16 entries, entry 3 (w0 + 1) + (w1 + 1) (AVX2: 16
    low bytes, then 16 high bytes, of the same entries)."""
    pairs = 2 * -(-k // 4)
    store = ("{ uint8_t *lo_t = (uint8_t *)(lo_lut + lo_p * 16); lo_t[lo_e] = (uint8_t)(lo_s & 255); "
             "lo_t[16 + lo_e] = (uint8_t)((lo_s >> 8) & 255); }" if isa == "avx2"
             else "lo_lut[lo_p * 16 + lo_e] = (int16_t)lo_s;")
    return [f"for (int lo_p = 0; lo_p < {pairs}; ++lo_p) {{",
            f"    const int lo_x0 = 2 * lo_p < {k} ? (int){a}[lo_row + 2 * lo_p] : 0;",
            f"    const int lo_x1 = 2 * lo_p + 1 < {k} ? (int){a}[lo_row + 2 * lo_p + 1] : 0;",
            "    for (int lo_e = 0; lo_e < 9; ++lo_e) {",
            "        const int lo_s = (lo_e / 3 - 1) * lo_x0 + (lo_e % 3 - 1) * lo_x1;",
            f"        {store}",
            "    }",
            "}"]


def _avx2_lookups(block: str, q: int) -> list[str]:
    """AVX2: two vpshufb per pair (low and high bytes of the sums), interleaved to int16."""
    table = "_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)({p})))"
    look = ("_mm256_unpack{half}_epi8(_mm256_shuffle_epi8(lo_l{i}, lo_i{i}), "
            "_mm256_shuffle_epi8(lo_h{i}, lo_i{i}))")
    lines = ["__m256i lo_s0 = _mm256_setzero_si256(), lo_s1 = lo_s0, lo_s2 = lo_s0, lo_s3 = lo_s0;",
             f"for (int lo_q0 = 0; lo_q0 < {q}; lo_q0 += {CHUNK}) {{",
             "    /* int16 sums of the columns 0-7, 16-23 (lo_ua) and 8-15, 24-31 (lo_ub) */",
             "    __m256i lo_ua = _mm256_setzero_si256(), lo_ub = lo_ua;",
             f"    for (int lo_q = lo_q0; lo_q < lo_q0 + {CHUNK} && lo_q < {q}; ++lo_q) {{",
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


def _lookups(op: Op, isa: str) -> list[str]:
    """C summing one column block ``lo_b`` into ``lo_sum[32]``."""
    _, q, _ = packed_shape(op)
    w = op.inputs[1]
    block = f"({w} + lo_b * {q * COLUMNS})"
    if isa == "avx2":
        return _avx2_lookups(block, q)
    if isa == "scalar":
        return [f"for (int lo_c = 0; lo_c < {COLUMNS}; ++lo_c) {{",
                "    int lo_s = 0;",
                f"    for (int lo_q = 0; lo_q < {q}; ++lo_q) {{",
                f"        const int lo_v = {block}[lo_q * {COLUMNS} + lo_c];",
                "        lo_s += lo_lut[(2 * lo_q) * 16 + (lo_v & 15)] "
                "+ lo_lut[(2 * lo_q + 1) * 16 + (lo_v >> 4)];",
                "    }",
                "    lo_sum[lo_c] = lo_s;",
                "}"]
    return ["__m512i lo_lo = _mm512_setzero_si512(), lo_hi = _mm512_setzero_si512();",
            f"for (int lo_q0 = 0; lo_q0 < {q}; lo_q0 += {CHUNK}) {{",
            "    __m512i lo_acc = _mm512_setzero_si512();   /* int16: at most 64 pairs of |sum| <= 510 */",
            f"    for (int lo_q = lo_q0; lo_q < lo_q0 + {CHUNK} && lo_q < {q}; ++lo_q) {{",
            f"        const __m512i lo_v = _mm512_cvtepu8_epi16(_mm256_loadu_si256("
            f"(const __m256i *)(const void *)({block} + lo_q * {COLUMNS})));",
            "        const __m512i lo_t0 = _mm512_broadcast_i64x4(_mm256_loadu_si256("
            "(const __m256i *)(const void *)(lo_lut + 2 * lo_q * 16)));",
            "        const __m512i lo_t1 = _mm512_broadcast_i64x4(_mm256_loadu_si256("
            "(const __m256i *)(const void *)(lo_lut + (2 * lo_q + 1) * 16)));",
            "        lo_acc = _mm512_add_epi16(lo_acc, _mm512_permutexvar_epi16("
            "_mm512_and_si512(lo_v, _mm512_set1_epi16(15)), lo_t0));",
            "        lo_acc = _mm512_add_epi16(lo_acc, _mm512_permutexvar_epi16("
            "_mm512_srli_epi16(lo_v, 4), lo_t1));",
            "    }",
            "    lo_lo = _mm512_add_epi32(lo_lo, "
            "_mm512_cvtepi16_epi32(_mm512_castsi512_si256(lo_acc)));",
            "    lo_hi = _mm512_add_epi32(lo_hi, "
            "_mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(lo_acc, 1)));",
            "}",
            "_mm512_storeu_si512((void *)lo_sum, lo_lo);",
            "_mm512_storeu_si512((void *)(lo_sum + 16), lo_hi);"]


def generate_lut(schedule: Schedule, isa: str) -> Generated:
    """The C kernel of a ternary GEMM in TL1 on ``isa`` (``check_lut`` first)."""
    check_lut(schedule, isa)
    op = schedule.op
    qp = quantized.plan(schedule, 1)
    m, k, n = shape(op)
    a, w = op.inputs
    blocks, q, _ = packed_shape(op)
    args = op.call_tensors + (op.output,)
    params = (KernelParam(a, qp.activation_type, const=True), KernelParam(w, "uint8_t", const=True),
              *((KernelParam(op.bias_tensor, qp.bias_type, const=True),) if op.bias else ()),
              KernelParam(op.output, "int32_t"), *quantized.parameters(qp))
    info = op.tensor(op.output)
    index = (Var("lo_i"), Var("lo_col"))
    offset = schedule.layout_of(op.output).offset(index, info.shape).to_c()
    epilogue = quantized.epilogue_statements(schedule, qp, f"{op.output}[{offset}]", index=index)
    body = [*quantized.constants(schedule, qp),
            f"int16_t *lo_lut = (int16_t *)aligned_alloc(64, {2 * q * 16 * 2 + 64});",
            "if (!lo_lut) return;",
            f"for (int lo_i = 0; lo_i < {m}; ++lo_i) {{",
            f"    const ptrdiff_t lo_row = (ptrdiff_t)lo_i * {k};",
            *("    " + line for line in _table(k, a, isa)),
            f"    for (int lo_b = 0; lo_b < {blocks}; ++lo_b) {{",
            f"        int32_t lo_sum[{COLUMNS}];",
            *("        " + line for line in _lookups(op, isa)),
            f"        for (int lo_c = 0; lo_c < {COLUMNS} && lo_b * {COLUMNS} + lo_c < {n}; ++lo_c) {{",
            f"            const int lo_col = lo_b * {COLUMNS} + lo_c;",
            f"            {op.output}[{offset}] = lo_sum[lo_c];",
            *("            " + line for line in epilogue),
            "        }",
            "    }",
            "}",
            "free(lo_lut);"]
    header = (f"/* loopopt TL1 table-lookup kernel (codegen/lut.py) for {op!r}\n"
              f" * isa: {isa}; weights: ternary, tl1 (4 bits per pair, 32 columns per block) */")
    prelude = ["#include <stdint.h>", "#include <stddef.h>", "#include <stdlib.h>"]
    prelude += ["#include <immintrin.h>"] if isa != "scalar" else []
    source = "\n".join([header, *prelude, "", f"{signature(KERNEL_NAME, params)}\n{{",
                        *("    " + line for line in body), "}", ""])
    return Generated(source, signature(KERNEL_NAME, params, restrict=False) + ";", args, params,
                     INT_ISAS[isa], {}, False, plan=qp, compile_flags=INT_ISAS[isa].compile_flags)
