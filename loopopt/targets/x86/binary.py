"""x86's binary XNOR + popcount variants (the kernel: ``targets/binary.py``): AVX-512 (8 uint64 lanes;
``vpopcntq`` where the CPU has AVX-512 VPOPCNTDQ, else a nibble table), AVX2 (4 lanes, the nibble
table: ``vpshufb`` twice, ``vpsadbw`` to 64-bit sums) and scalar (``__builtin_popcountll``)."""
from __future__ import annotations

from ..binary import BinaryVariant, Ops, Popcount
from .isa import INT_ISAS

WORD = 64
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


def _vector(isa: str, lanes: int, popcounts: dict[str, Popcount], block: tuple[int, int]) -> BinaryVariant:
    """An AVX variant: ``lanes`` uint64 lanes in one register."""
    v, bits = VECTOR[isa], lanes * WORD
    ops = Ops(v["t"], f"{v['x']}_setzero_si{bits}()", v["load"], f"{v['set1']}((long long)({{s}}))",
              f"{v['x']}_xor_si{bits}({{a}}, {{b}})", f"{v['x']}_add_epi64({{a}}, {{b}})",
              f"{v['x']}_storeu_si{bits}((void *)({{p}}), {{v}})")
    nibble = Popcount(NIBBLE_C.format(bits=bits, **v))
    return BinaryVariant(INT_ISAS[isa], lanes, ops, popcounts | {"nibble": nibble}, block,
                         ("#include <immintrin.h>",))


VARIANTS = {
    "avx512": _vector("avx512", 8, {"vpopcntq": Popcount(VPOPCNT_C, ("-mavx512vpopcntdq",))}, (4, 4)),
    "avx2": _vector("avx2", 4, {}, (3, 2)),
    "scalar": BinaryVariant(INT_ISAS["scalar"], 1,
                            Ops("uint64_t", "0", "*({p})", "{s}", "{a} ^ {b}", "{a} + {b}", "*({p}) = {v}"),
                            {"builtin": Popcount(SCALAR_C)}, (4, 4)),
}
LANES = {isa: variant.lanes for isa, variant in VARIANTS.items()}
POPCOUNTS = {isa: tuple(variant.popcounts) for isa, variant in VARIANTS.items()}
