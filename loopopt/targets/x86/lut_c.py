"""x86's C of the table-lookup kernels (``targets/lut.py``): the table build and one lookup step on
AVX-512, AVX2 and scalar code.

The tables are built 16 entries at once on the vector ISAs: each activation of the group broadcast and
signed by its weight in every class (``vpsignw``), summed (AVX2: split into low and high bytes by
``vpshufb`` and ``vpermq``). One lookup step adds, for the 32 channels of a block, the entries of the two
groups of a byte to int16 sums: AVX-512 ``vpermw`` (the table broadcast, the indices as int16 lanes; TL2:
``vpsubw`` under the sign mask), AVX2 two ``vpshufb`` per group interleaved back to int16
(``vpunpck[lh]bw``, columns in the order 0-7, 16-23 | 8-15, 24-31; TL2: ``vpsignw`` with the sign bits
spread to the lanes by ``vpshufb``), scalar one column at a time.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...codegen import cprint
from ...codegen.instr import Isa
from ...schedule import Schedule, ScheduleError
from ..lut import Lookup, check_lut
from ..lut_format import COLUMNS, ENTRIES, LutFormat
from .isa import INT_ISAS

LUT_ISAS = ("avx512", "avx2", "scalar")


def check_lut_on(schedule: Schedule, isa: str) -> None:
    """ScheduleError with the reason unless x86's table-lookup kernel takes ``schedule`` on ``isa``."""
    if isa not in LUT_ISAS:
        raise ScheduleError(f"weight_format({schedule.weight_format_mode!r}) runs on {', '.join(LUT_ISAS)}, "
                            f"not on {isa!r}")
    check_lut(schedule)


@dataclass(frozen=True)
class LookupC(Lookup):
    """The C of the table build and the lookup steps of one x86 ISA (``avx512``, ``avx2``, ``scalar``)."""

    isa: str

    @property
    def name(self) -> str:
        return self.isa

    @property
    def table_isa(self) -> Isa:
        return INT_ISAS[self.isa]

    @property
    def includes(self) -> list[str]:
        return ["#include <immintrin.h>"] if self.isa != "scalar" else []

    @property
    def vector(self) -> bool:
        return self.isa != "scalar"

    def constants(self, fmt: LutFormat) -> list[str]:
        """C constants of the table build: the classes' weights (vector ISAs: one int16 vector per weight of
        a group, lane ``e`` the weight of class ``e``, 0 past the classes; AVX2: the shuffle that splits
        int16 entries into their low and high bytes)."""
        if self.isa == "scalar":
            coef = ", ".join("{" + ", ".join(map(str, c)) + "}" for c in fmt.classes)
            return [f"static const signed char lo_coef[{len(fmt.classes)}][{fmt.group}] = {{{coef}}};"]
        lines = []
        for j in range(fmt.group):
            lanes = [c[j] for c in fmt.classes] + [0] * (ENTRIES - len(fmt.classes))
            lines.append(f"const __m256i lo_coef{j} = _mm256_setr_epi16({', '.join(map(str, lanes))});")
        if self.isa == "avx2":
            halves = ", ".join(map(str, [*range(0, 16, 2), *range(1, 16, 2)]))
            lines.append(f"const __m256i lo_split = _mm256_setr_epi8({halves}, {halves});")
        return lines

    def entries(self, fmt: LutFormat, table: str, xs: list[str]) -> list[str]:
        """C storing the ``ENTRIES`` table slots at int16 pointer ``table`` of one group of activations
        ``xs`` (C ints): entry ``e`` the dot product with ``fmt.classes[e]`` (vector ISAs: the 16 entries
        at once, each activation broadcast and signed by its weight with ``vpsignw``; AVX2 stores the 16
        low bytes of the entries, then their 16 high bytes)."""
        if self.isa == "scalar":
            dot = " + ".join(f"lo_coef[lo_e][{j}] * {x}" for j, x in enumerate(xs))
            loop = cprint.for_loop("int", "lo_e", len(fmt.classes))
            return [f"{loop} ({table})[lo_e] = (int16_t)({dot});"]
        terms = [f"_mm256_sign_epi16(_mm256_set1_epi16((short){x}), lo_coef{j})" for j, x in enumerate(xs)]
        entries = terms[0]
        for term in terms[1:]:
            entries = f"_mm256_add_epi16({entries}, {term})"
        if self.isa == "avx2":
            # per 128-bit lane: 8 low bytes, then 8 high bytes; the quadwords reordered to 16 + 16
            entries = f"_mm256_permute4x64_epi64(_mm256_shuffle_epi8({entries}, lo_split), 0xd8)"
        return [f"_mm256_storeu_si256((__m256i *)(void *)({table}), {entries});"]

    def declare(self, acc: str) -> list[str]:
        """Zeroed int16 sums of accumulator ``acc`` (in registers) and its int32 totals (an array, out
        of the way of the registers the steps need)."""
        if self.isa == "avx512":
            return [f"__m512i {acc} = _mm512_setzero_si512();", f"int {acc}_t[{COLUMNS}] = {{0}};"]
        if self.isa == "avx2":
            return [f"__m256i {acc}a = _mm256_setzero_si256(), {acc}b = {acc}a;",
                    f"int {acc}_t[{COLUMNS}] = {{0}};"]
        return [f"int {acc}[{COLUMNS}] = {{0}};"]

    def indices(self, name: str, at: str, signs: str | None) -> list[str]:
        """Load the 32 index bytes at ``at`` (a uint8 pointer) as ``name``: the two groups' indices
        (and, signed, their sign masks from the uint32 words at ``signs``)."""
        if self.isa == "avx512":
            lines = [f"const __m512i {name}_v = _mm512_cvtepu8_epi16(_mm256_loadu_si256("
                     f"(const __m256i *)(const void *)({at})));",
                     f"const __m512i {name}0 = _mm512_and_si512({name}_v, _mm512_set1_epi16(15)), "
                     f"{name}1 = _mm512_srli_epi16({name}_v, 4);"]
            if signs:
                lines.append(f"const __mmask32 {name}s0 = _cvtu32_mask32(({signs})[0]), "
                             f"{name}s1 = _cvtu32_mask32(({signs})[1]);")
            return lines
        if self.isa == "avx2":
            lines = [f"const __m256i {name}_v = _mm256_loadu_si256((const __m256i *)(const void *)({at}));",
                     f"const __m256i {name}0 = _mm256_and_si256({name}_v, _mm256_set1_epi8(15)), "
                     f"{name}1 = _mm256_and_si256(_mm256_srli_epi16({name}_v, 4), _mm256_set1_epi8(15));"]
            if signs:
                # vpsignw operands: -1 in the int16 lanes of negated columns (0-7, 16-23 | 8-15, 24-31),
                # else 1: the word broadcast, each lane given the byte of its column's bit (vpshufb),
                # that bit tested
                spread = ("_mm256_or_si256(_mm256_cmpeq_epi16(_mm256_and_si256(_mm256_shuffle_epi8({w}, "
                          "{bytes}), lo_bit), lo_bit), _mm256_set1_epi16(1))")
                for h in (0, 1):
                    word = f"{name}w{h}"
                    lines += [f"const __m256i {word} = _mm256_set1_epi32((int)({signs})[{h}]);",
                              f"const __m256i {name}s{h}a = {spread.format(w=word, bytes='lo_bytes_a')}, "
                              f"{name}s{h}b = {spread.format(w=word, bytes='lo_bytes_b')};"]
            return lines
        lines = [f"const uint8_t *{name} = {at};"]
        return lines + ([f"const uint32_t *{name}s = {signs};"] if signs else [])

    def table(self, name: str, at: str) -> list[str]:
        """Load the two groups' tables at int16 pointer ``at`` as ``name``."""
        if self.isa == "avx512":
            load = "_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)({p})))"
            return [f"const __m512i {name}0 = {load.format(p=at)}, {name}1 = {load.format(p=f'{at} + 16')};"]
        if self.isa == "avx2":
            load = "_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)({p})))"
            parts = [f"{name}{h}{half} = {load.format(p=f'(const uint8_t *)({at} + {16 * h}) + {off}')}"
                     for h in (0, 1) for half, off in (("l", 0), ("h", 16))]
            return [f"const __m256i {', '.join(parts)};"]
        return [f"const int16_t *{name} = {at};"]

    def step(self, acc: str, ind: str, tab: str, signed: bool) -> list[str]:
        """Add the entries of both groups of one byte, looked up in ``tab`` by ``ind``, to ``acc``."""
        lines = []
        for h in (0, 1):
            if self.isa == "avx512":
                entry = f"_mm512_permutexvar_epi16({ind}{h}, {tab}{h})"
                lines.append(f"{acc} = _mm512_mask_sub_epi16(_mm512_add_epi16({acc}, {entry}), {ind}s{h}, "
                             f"{acc}, {entry});" if signed else f"{acc} = _mm512_add_epi16({acc}, {entry});")
            elif self.isa == "avx2":
                lo, hi = (f"_mm256_shuffle_epi8({tab}{h}{half}, {ind}{h})" for half in "lh")
                for part, unpack in (("a", "lo"), ("b", "hi")):
                    entry = f"_mm256_unpack{unpack}_epi8({lo}, {hi})"
                    if signed:
                        entry = f"_mm256_sign_epi16({entry}, {ind}s{h}{part})"
                    lines.append(f"{acc}{part} = _mm256_add_epi16({acc}{part}, {entry});")
            else:
                value = f"{tab}[{16 * h} + (({ind}[lo_c] >> {4 * h}) & 15)]"
                if signed:
                    value = f"((({ind}s[{h}] >> lo_c) & 1u) ? -{value} : {value})"
                lines.append(cprint.for_loop("int", "lo_c", COLUMNS) + f" {acc}[lo_c] += {value};")
        return lines

    def widen(self, acc: str) -> list[str]:
        """Add the int16 sums of ``acc`` to its int32 totals and zero them (vector ISAs)."""
        if self.isa == "avx512":
            halves = ((0, "_mm512_castsi512_si256({})"), (16, "_mm512_extracti64x4_epi64({}, 1)"))
            return [f"_mm512_storeu_si512((void *)({acc}_t + {at}), _mm512_add_epi32(_mm512_loadu_si512("
                    f"(const void *)({acc}_t + {at})), _mm512_cvtepi16_epi32({half.format(acc)})));"
                    for at, half in halves] + [f"{acc} = _mm512_setzero_si512();"]
        if self.isa == "avx2":
            # the int16 lanes hold columns 0-7, 16-23 (a) and 8-15, 24-31 (b)
            low, high = "_mm256_castsi256_si128({})", "_mm256_extracti128_si256({}, 1)"
            parts = ((0, "a", low), (8, "b", low), (16, "a", high), (24, "b", high))
            total = "(__m256i *)(void *)({}_t + {})"
            return [f"_mm256_storeu_si256({total.format(acc, at)}, _mm256_add_epi32(_mm256_loadu_si256("
                    f"{total.format(acc, at)}), _mm256_cvtepi16_epi32({half.format(acc + p)})));"
                    for at, p, half in parts] + [f"{acc}a = _mm256_setzero_si256(); {acc}b = {acc}a;"]
        return []

    def totals(self, acc: str) -> str:
        """The int array of the 32 int32 totals of ``acc`` (after ``widen``)."""
        return f"{acc}_t" if self.vector else acc

    def prelude(self) -> list[str]:
        """Constants of the steps (AVX2, to spread sign bits: per int16 lane the byte of the sign word
        holding its column's bit, in the lanes of sums a and b, and that bit)."""
        if self.isa == "avx2":
            spread = lambda low, high: ", ".join([str(low)] * 16 + [str(high)] * 16)
            bits = ", ".join(str(1 << (j % 8)) for j in range(16))
            return [f"const __m256i lo_bytes_a = _mm256_setr_epi8({spread(0, 2)});",
                    f"const __m256i lo_bytes_b = _mm256_setr_epi8({spread(1, 3)});",
                    f"const __m256i lo_bit = _mm256_setr_epi16({bits});"]
        return []
