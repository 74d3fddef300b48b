"""Instruction tables, target-neutral: an ``Instr`` is a C template with the per-lane meaning it
implements, an ``Isa`` one instruction-set variant's table (vector width, C types, flags, templates).

The C emitter only ever asks a table for an operation by name; a target defines its tables (x86's in
``targets/x86/isa.py``) from the operation names and meanings here, so tests can check every template
against its meaning lane by lane. Templates use ``{p}`` (pointer), ``{m}`` (lane mask),
``{v}``/``{a}``/``{b}``/``{c}`` (vectors), ``{s}`` (scalar), ``{idx}`` (index vector), ``{n}`` (lane
count). ``MEANINGS`` are the float32 operations, ``INT_MEANINGS`` the integer (quantized) ones,
``BF16_MEANINGS`` the bfloat16 operand loads and pair dot.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Instr:
    """A C template and the per-lane semantics it implements (for tests and docs)."""

    template: str
    meaning: str

    def __call__(self, **operands: str) -> str:
        return self.template.format(**operands)


@dataclass(frozen=True)
class Isa:
    """An instruction set for float32 kernels: vector width, types, flags and templates."""

    name: str
    lanes: int
    vector_type: str
    mask_type: str
    index_type: str
    cpu_flags: tuple[str, ...]          # /proc/cpuinfo flags required
    compile_flags: tuple[str, ...]
    prelude: str
    registers: int                      # vector registers (scalar code: the float registers it uses)
    ops: dict[str, Instr] = field(default_factory=dict)
    # file-scope C helpers of the optional kernel features a variant has, by feature (``"taps"``: the tap
    # dot's window loads, codegen/taps.py; ``"i2_s"``: the packed ternary weights' unpacking, ternary.py)
    helpers: dict[str, str] = field(default_factory=dict)
    # the instructions an entry prints, where comments name them (``"dot"``: x86's ``vdpbf16ps``)
    mnemonics: dict[str, str] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Instr:
        try:
            return self.__dict__["ops"][name]
        except KeyError:
            raise AttributeError(f"ISA {self.__dict__.get('name')!r} has no instruction {name!r}") from None

    @property
    def vectorizes(self) -> bool:
        return self.lanes > 1


# plain C, no vector instructions: a target's scalar variant (x86's ``scalar``; the C each GPU thread
# runs); it ignores vector annotations, the vectorized loop runs as a plain loop
SCALAR = Isa(name="scalar", lanes=1, registers=16, vector_type="float", mask_type="unsigned",
             index_type="int", cpu_flags=(), compile_flags=(), prelude="", ops={})

MEANINGS = {
    "zero": "every lane 0.0",
    "load": "lane j = p[j]",
    "load_mask": "lane j = p[j] if mask bit j else 0.0 (masked-off lanes are not read)",
    "store": "p[j] = v lane j",
    "store_mask": "p[j] = v lane j where mask bit j (others untouched)",
    "broadcast": "every lane = s",
    "fma": "lane j = a_j * b_j + c_j (one rounding)",
    "fma_mask": "lane j = a_j * b_j + c_j where mask bit j, else c_j",
    "gather": "lane j = p[idx_j]",
    "gather_mask": "lane j = p[idx_j] where mask bit j, else 0.0",
    "scatter_mask": "p[idx_j] = v_j where mask bit j, lanes in order (distinct indices)",
    "hsum": "sum of the lanes",
    "add": "lane j = a_j + b_j",
    "max": "lane j = the larger of a_j and b_j; NaN where b_j is NaN (a_j is never NaN)",
    "min": "lane j = the smaller of a_j and b_j; NaN where b_j is NaN (a_j is never NaN)",
    "mask_bits": "mask with lane j set iff bit j of the unsigned {s}",
    "mask_count": "mask with lanes 0..n-1 set",
    "stride_index": "index vector lane j = j * s",
    "index_load": "index vector lane j = ((int*)p)[j]",
}
# a float table's optional multiply-add whose second operand the instruction reads from memory itself
# (a block that holds more accumulators than its registers leave to its weight vectors: codegen/block.py)
MEMORY_MEANINGS = {
    "fma_memory": "lane j = a_j * p[j] + c_j (one rounding), p[j] read by the multiply-add itself",
    "broadcast_here": "every lane = s, broadcast where it is written (no register holds it across loops)",
}


def table(**templates: str) -> dict[str, Instr]:
    """A float32 table's operations from their templates (each named in ``MEANINGS``)."""
    return {name: Instr(text, MEANINGS[name]) for name, text in templates.items()}


# --- integer tables (quantized kernels) ------------------------------------------------------
# The same operation names as the float tables, meaning int32 lanes (wrapping arithmetic), plus
# byte loads widened to int32 and the 4-way u8 x s8 dot product. Masks and index vectors are shared
# with the float table of the same variant.

INT_MEANINGS = {
    "zero": "every lane 0",
    "load": "lane j = ((int32 *)p)[j] (p may be any byte address)",
    "load_mask": "lane j = ((int32 *)p)[j] if mask bit j else 0",
    "store": "((int32 *)p)[j] = v lane j",
    "store_mask": "((int32 *)p)[j] = v lane j where mask bit j (others untouched)",
    "broadcast": "every lane = (int32) s",
    "broadcast_word": "every lane = the int32 at byte address p (any alignment)",
    "fma": "lane j = c_j + a_j * b_j (int32, wrapping)",
    "fma_mask": "lane j = c_j + a_j * b_j where mask bit j, else c_j",
    "sub": "lane j = a_j - b_j (int32, wrapping)",
    "gather": "lane j = ((int32 *)p)[idx_j]",
    "gather_mask": "lane j = ((int32 *)p)[idx_j] where mask bit j, else 0",
    "scatter_mask": "((int32 *)p)[idx_j] = v_j where mask bit j, lanes in order (distinct indices)",
    "hsum": "sum of the lanes (int32, wrapping)",
    "load_u8": "lane j = ((uint8 *)p)[j]",
    "load_s8": "lane j = ((int8 *)p)[j]",
    "load_u8_mask": "lane j = ((uint8 *)p)[j] where mask bit j, else 0 (may read 3 bytes past a lane)",
    "load_s8_mask": "lane j = ((int8 *)p)[j] where mask bit j, else 0 (may read 3 bytes past a lane)",
    "gather_b": "lane j = the int32 at byte address (char *)p + idx_j (reads 4 bytes)",
    "gather_b_mask": "lane j = the int32 at byte address (char *)p + idx_j where mask bit j, else 0",
    "extend_u8": "lane j = low byte of v_j as uint8",
    "extend_s8": "lane j = low byte of v_j as int8",
    "flip": "every byte b of v becomes b ^ 0x80 (int8 x + 128 as uint8)",
    "dot": "lane j = c_j + sum over q < 4 of uint8 byte 4j+q of a * int8 byte 4j+q of b (exact)",
    "dot_mask": "dot where mask bit j, else c_j",
    "to_float": "lane j = (float32) v_j, rounded to nearest even",
    "store_narrow": "((uint8 *)p)[j] = low byte of v lane j",
    "store_narrow_mask": "((uint8 *)p)[j] = low byte of v lane j where mask bit j (others untouched)",
    "pack_u8": "byte L*q + j = lane j of the q-th of a, b, c, d (L lanes), each lane in [0, 255]",
    "pack_s8": "byte L*q + j = lane j of the q-th of a, b, c, d (L lanes), each lane in [-128, 127]",
    "store_bytes": "((uint8 *)p)[i] = byte i of v for i < n (n: 1 to 4 L; the others untouched)",
}
SHARED_OPS = ("mask_bits", "mask_count", "stride_index", "index_load")
# an integer table's optional s8 x s8 dot (int8 activations then feed it unshifted: codegen/quantized.py)
SIGNED_DOT_MEANINGS = {
    "dot_s8": "lane j = c_j + sum over q < 4 of int8 byte 4j+q of a * int8 byte 4j+q of b (exact)",
    "dot_s8_mask": "dot_s8 where mask bit j, else c_j",
}
# an integer table's optional dot of int16 weights (codegen/wide.py's s16 format): b points at the
# weights' block of 32 int16, a lane's pairs (w0, w2) in the first 16 and (w1, w3) in the next
WIDE_MEANINGS = {
    "dot_s16": "lane j = c_j + sum over q < 4 of uint8 byte 4j+q of a * "
               "((int16 *)b)[16 (q % 2) + 2j + q / 2] (exact)",
    "dot_s16_mask": "dot_s16 where mask bit j, else c_j (reads the whole block)",
    "s16_block_mask": "the block pointer p where the mask has a lane set, else lo_s16_zero (a block of "
                      "zeros: a vector past the weights' last block reads none of them)",
}
# the byte operations of two optional features, in the integer tables of the variants that have them:
# tap dots (codegen/taps.py: a window of activation bytes spread into dot groups; phase groups zipped back
# in order) and i2_s ternary weights (codegen/ternary.py: codes w + 1 unpacked to signed bytes)
PACKED_MEANINGS = {
    "mask_all": "mask with every lane set",
    "iota": "index vector lane j = j",
    "offset_index": "index vector lane j = (int) s + idx_j",
    "sub_one_bytes": "every byte b of v becomes b - 1 (wrapping)",
    "tap_spread": "byte i of the result = byte picks_i of v (picks, dwords and bytes are int32 index "
                  "vectors: picks byte-wise; dwords then bytes the same picks as a dword permute of v "
                  "followed by a byte shuffle within each 128-bit lane)",
    "zip_low": "lane 2j = a_j, lane 2j+1 = b_j for j < n/2 (n lanes)",
    "zip_high": "lane 2j = a_{n/2+j}, lane 2j+1 = b_{n/2+j} for j < n/2 (n lanes)",
}


# an integer table's optional byte lookup (``Schedule.clip_quantized``'s table on packed output bytes)
BYTE_MAP_MEANINGS = {
    "map_bytes": "byte i of the result = ((uint8 *)p)[byte i of v] (p: a table of 256 bytes)",
}


def int_table(floats: Isa, **templates: str) -> dict[str, Instr]:
    """An integer table's operations: ``floats``' shared ones and these (each named in ``INT_MEANINGS``,
    ``PACKED_MEANINGS``, ``BYTE_MAP_MEANINGS`` or ``WIDE_MEANINGS``)."""
    shared = {name: floats.ops[name] for name in SHARED_OPS}
    meanings = INT_MEANINGS | PACKED_MEANINGS | BYTE_MAP_MEANINGS | WIDE_MEANINGS
    return shared | {name: Instr(text, meanings[name]) for name, text in templates.items()}


# --- bfloat16 tables -----------------------------------------------------------------------
# bf16 operands stored as uint16 bit patterns, accumulated in the float table's float32 lanes: either
# widened to float32 (a shift by 16) and multiply-added with the float table's ``fma``, or consumed in
# pairs along the reduction by a pair dot (``dot``), each int32 lane holding two consecutive bf16 (the
# lower address in the low half). Masks and index vectors are the float table's.

BF16_MEANINGS = {
    "value": "the float32 value of the bf16 bits s (exact)",
    "broadcast": "every lane = the float32 value of the bf16 bits s",
    "load": "lane j = float32 value of ((uint16 *)p)[j]",
    "load_mask": "lane j = float32 value of ((uint16 *)p)[j] where mask bit j, else 0.0 "
                 "(may read 2 bytes past a lane)",
    "gather": "lane j = float32 value of ((uint16 *)p)[idx_j] (reads 4 bytes)",
    "gather_mask": "lane j = float32 value of ((uint16 *)p)[idx_j] where mask bit j, else 0.0 "
                   "(reads 4 bytes)",
    "pair_zero": "every int32 lane = two bf16 zeros",
    "broadcast_pair": "every int32 lane = the bf16 pair ((uint16 *)p)[0] (low half), [1] (high half)",
    "load_pairs": "int32 lane j = the bf16 pair ((uint16 *)p)[2j] (low), [2j+1] (high)",
    "load_pairs_mask": "int32 lane j = the bf16 pair ((uint16 *)p)[2j], [2j+1] where mask bit j, else 0",
    "gather_pairs": "int32 lane j = the bf16 pair ((uint16 *)p)[idx_j], [idx_j + 1]",
    "gather_pairs_mask": "int32 lane j = the bf16 pair ((uint16 *)p)[idx_j], [idx_j + 1] where mask bit j, "
                         "else 0",
    "dot": "lane j = (c_j + a_hi_j * b_hi_j) + a_lo_j * b_lo_j of the bf16 pairs of lane j (float32: "
           "products exact, each sum rounded to nearest even; denormal operands and results flushed to 0)",
    "dot_mask": "dot where mask bit j, else c_j",
}


BF16_PRELUDE = """#include <stdint.h>
#include <string.h>
/* The float32 value of a bfloat16 bit pattern: its upper half. */
static inline float lo_bf16(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f;
}
"""


# float16 operands (IEEE half bit patterns) widened to the float table's float32 lanes, where a variant
# converts them (e.g. NEON's vcvt_f32_f16): the bf16 widening entries' names with half meanings
F16_MEANINGS = {
    "value": "the float32 value of the half bits s (exact)",
    "broadcast": "every lane = the float32 value of the half bits s",
    "load": "lane j = float32 value of the half ((uint16 *)p)[j]",
    "load_mask": "lane j = float32 value of the half ((uint16 *)p)[j] where mask bit j, else 0.0",
    "gather": "lane j = float32 value of the half ((uint16 *)p)[idx_j]",
    "gather_mask": "lane j = float32 value of the half ((uint16 *)p)[idx_j] where mask bit j, else 0.0",
}


def bf16_table(floats: Isa, **templates: str) -> dict[str, Instr]:
    """A bfloat16 table's operations: ``floats``' shared ones and these (each named in ``BF16_MEANINGS``)."""
    shared = {name: floats.ops[name] for name in SHARED_OPS}
    return shared | {name: Instr(text, BF16_MEANINGS[name]) for name, text in templates.items()}


# --- every target's tables, by variant name ----------------------------------------------------

@dataclass(frozen=True)
class IsaTables:
    """The tables of one instruction-set variant: float32, integer (quantized kernels), bfloat16 and
    float16 operands widened to float32 (None where the variant has no such kernels yet)."""

    floats: Isa
    ints: Isa | None
    bf16: Isa | None
    f16: Isa | None = None


TABLES: dict[str, IsaTables] = {}      # variant name -> its tables, as each target registers them


def register_tables(tables: IsaTables) -> IsaTables:
    """Make a target's variant known to the emitter (its tables module registers it when imported)."""
    TABLES[tables.floats.name] = tables
    return tables


def tables(name: str) -> IsaTables:
    """The tables of variant ``name``; ValueError naming the known variants."""
    if name not in TABLES:
        raise ValueError(f"no instruction tables for isa {name!r}: known: {', '.join(map(repr, TABLES))} "
                         f"(another target's variants are known once its target is loaded, e.g. "
                         f"loopopt.targets.target('neon'))")
    return TABLES[name]
