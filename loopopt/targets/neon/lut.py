"""NEON's C of the table-lookup kernels (``targets/lut.py``), as bitnet.cpp and T-MAC do on ARM: the
same weight formats and int16 tables as x86, each step a ``tbl`` (``vqtbl1q_u8``) per byte half.

A group's table (16 int16 entries) is built 8 entries at a time: the classes' weights as int16 lanes,
times each activation of the group (``vmulq_n_s16``, ``vmlaq_n_s16``; exact, |entry| <= 765). A step
loads a table with ``vld2q_u8``, which splits the entries into their 16 low bytes and 16 high bytes, and
the 32 index bytes of a column block (two 16-byte halves, the groups' nibbles masked and shifted);
per group and half, two ``vqtbl1q_u8`` look up the low and high bytes of the 16 columns' entries and
``vzip1q_u8`` / ``vzip2q_u8`` put them back together as int16 lanes in column order (0-7, 8-15). TL2
negates the entries of columns whose sign bit is set (``vtstq_u16`` of the sign word's byte against the
lane's bit, ``vbslq_s16`` of the negated entry). The 32 int16 sums are four ``int16x8_t``, widened to
int32 (``vmovl_s16``) every ``fmt.chunk`` steps.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...codegen.instr import Isa
from ..lut import Lookup
from ..lut_format import COLUMNS, ENTRIES, LutFormat
from .isa import NAME, NEON_INT

PARTS = COLUMNS // 8        # int16x8_t sums per accumulator


@dataclass(frozen=True)
class NeonLookup(Lookup):
    """The C of the table build and the lookup steps on NEON."""

    @property
    def name(self) -> str:
        return NAME

    @property
    def table_isa(self) -> Isa:
        return NEON_INT

    @property
    def includes(self) -> list[str]:
        return ["#include <stdint.h>", "#include <arm_neon.h>"]

    @property
    def vector(self) -> bool:
        return True

    def constants(self, fmt: LutFormat) -> list[str]:
        """The classes' weights: row ``j`` holds weight ``j`` of each class, 0 past the classes."""
        rows = ", ".join("{" + ", ".join(str(c[j]) for c in fmt.classes)
                         + ", 0" * (ENTRIES - len(fmt.classes)) + "}" for j in range(fmt.group))
        return [f"static const int16_t lo_coef[{fmt.group}][{ENTRIES}] = {{{rows}}};"]

    def entries(self, fmt: LutFormat, table: str, xs: list[str]) -> list[str]:
        lines = []
        for half in (0, 1):
            coef = [f"vld1q_s16(lo_coef[{j}] + {8 * half})" for j in range(len(xs))]
            entries = f"vmulq_n_s16({coef[0]}, (int16_t){xs[0]})"
            for j in range(1, len(xs)):
                entries = f"vmlaq_n_s16({entries}, {coef[j]}, (int16_t){xs[j]})"
            lines.append(f"vst1q_s16(({table}) + {8 * half}, {entries});")
        return lines

    def declare(self, acc: str) -> list[str]:
        rest = ", ".join(f"{acc}{k} = {acc}0" for k in range(1, PARTS))
        return [f"int16x8_t {acc}0 = vdupq_n_s16(0), {rest};", f"int {acc}_t[{COLUMNS}] = {{0}};"]

    def indices(self, name: str, at: str, signs: str | None) -> list[str]:
        """``name<h><p>``: the indices of group ``h`` (low or high nibble) of columns ``16 p`` to
        ``16 p + 15``; ``name s<h><k>``: the sign masks of group ``h``, columns ``8 k`` to ``8 k + 7``."""
        lines = [f"const uint8x16_t {name}_v0 = vld1q_u8({at}), {name}_v1 = vld1q_u8(({at}) + 16);"]
        lines.append("const uint8x16_t " + ", ".join(
            f"{name}0{p} = vandq_u8({name}_v{p}, vdupq_n_u8(15)), {name}1{p} = vshrq_n_u8({name}_v{p}, 4)"
            for p in (0, 1)) + ";")
        if signs:
            for h in (0, 1):
                byte = "(uint16_t)((({})[{}] >> {}) & 255u)"
                masks = ", ".join(f"{name}s{h}{k} = vtstq_u16(vdupq_n_u16({byte.format(signs, h, 8 * k)}), "
                                  f"lo_bit)" for k in range(PARTS))
                lines.append(f"const uint16x8_t {masks};")
        return lines

    def table(self, name: str, at: str) -> list[str]:
        load = "vld2q_u8((const uint8_t *)(const void *)({}))"
        second = load.format(f"({at}) + {ENTRIES}")
        return [f"const uint8x16x2_t {name}0 = {load.format(at)}, {name}1 = {second};"]

    def step(self, acc: str, ind: str, tab: str, signed: bool) -> list[str]:
        lines = []
        for h in (0, 1):
            for p in (0, 1):
                index = f"{ind}{h}{p}"
                low, high = (f"vqtbl1q_u8({tab}{h}.val[{b}], {index})" for b in (0, 1))
                for k, zip_ in ((2 * p, "vzip1q_u8"), (2 * p + 1, "vzip2q_u8")):
                    entry = f"vreinterpretq_s16_u8({zip_}({low}, {high}))"
                    if signed:
                        lines.append(f"{{ const int16x8_t lo_e = {entry}; {acc}{k} = vaddq_s16({acc}{k}, "
                                     f"vbslq_s16({ind}s{h}{k}, vnegq_s16(lo_e), lo_e)); }}")
                    else:
                        lines.append(f"{acc}{k} = vaddq_s16({acc}{k}, {entry});")
        return lines

    def widen(self, acc: str) -> list[str]:
        lines = []
        for k in range(PARTS):
            for at, half in ((8 * k, f"vget_low_s16({acc}{k})"), (8 * k + 4, f"vget_high_s16({acc}{k})")):
                total = f"{acc}_t + {at}"
                lines.append(f"vst1q_s32({total}, vaddq_s32(vld1q_s32({total}), vmovl_s16({half})));")
        return lines + [f"{acc}{k} = vdupq_n_s16(0);" for k in range(PARTS)]

    def totals(self, acc: str) -> str:
        return f"{acc}_t"

    def prelude(self) -> list[str]:
        """The bit of each int16 lane's column within a byte of a sign word (TL2)."""
        return ["static const uint16_t lo_bits[8] = {1, 2, 4, 8, 16, 32, 64, 128};",
                "const uint16x8_t lo_bit = vld1q_u16(lo_bits);"]


LOOKUP = NeonLookup()
