"""Instruction tables: one per ISA, each entry a C template with its scalar meaning.

The emitter only ever asks a table for an operation by name; a new ISA is a new
table. Templates use ``{p}`` (pointer), ``{m}`` (lane mask), ``{v}``/``{a}``/``{b}``/``{c}``
(vectors), ``{s}`` (scalar), ``{idx}`` (index vector), ``{n}`` (lane count).
Each ``Op`` entry records the scalar semantics it implements so tests can check
every template against it lane by lane.
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
    ops: dict[str, Instr] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Instr:
        try:
            return self.__dict__["ops"][name]
        except KeyError:
            raise AttributeError(f"ISA {self.__dict__.get('name')!r} has no instruction {name!r}") from None

    @property
    def vectorizes(self) -> bool:
        return self.lanes > 1


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
    "mask_bits": "mask with lane j set iff bit j of the unsigned {s}",
    "mask_count": "mask with lanes 0..n-1 set",
    "stride_index": "index vector lane j = j * s",
    "index_load": "index vector lane j = ((int*)p)[j]",
}


def _table(**templates: str) -> dict[str, Instr]:
    return {name: Instr(text, MEANINGS[name]) for name, text in templates.items()}


AVX512 = Isa(
    name="avx512", lanes=16, vector_type="__m512", mask_type="__mmask16", index_type="__m512i",
    cpu_flags=("avx512f",),
    compile_flags=("-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq", "-mavx2", "-mfma"),
    prelude="#include <immintrin.h>\n",
    ops=_table(
        zero="_mm512_setzero_ps()",
        load="_mm512_loadu_ps({p})",
        load_mask="_mm512_maskz_loadu_ps({m}, {p})",
        store="_mm512_storeu_ps({p}, {v})",
        store_mask="_mm512_mask_storeu_ps({p}, {m}, {v})",
        broadcast="_mm512_set1_ps({s})",
        fma="_mm512_fmadd_ps({a}, {b}, {c})",
        fma_mask="_mm512_mask3_fmadd_ps({a}, {b}, {c}, {m})",
        gather="_mm512_i32gather_ps({idx}, {p}, 4)",
        gather_mask="_mm512_mask_i32gather_ps(_mm512_setzero_ps(), {m}, {idx}, {p}, 4)",
        scatter_mask="_mm512_mask_i32scatter_ps({p}, {m}, {idx}, {v}, 4)",
        hsum="_mm512_reduce_add_ps({v})",
        mask_bits="((__mmask16)({s}))",
        mask_count="((__mmask16)((1u << ({n})) - 1u))",
        stride_index="_mm512_mullo_epi32(_mm512_set1_epi32({s}), "
                     "_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))",
        index_load="_mm512_loadu_si512((const void *)({p}))",
    ),
)

AVX2 = Isa(
    name="avx2", lanes=8, vector_type="__m256", mask_type="__m256i", index_type="__m256i",
    cpu_flags=("avx2", "fma"),
    compile_flags=("-mavx2", "-mfma"),
    prelude="""#include <immintrin.h>
/* AVX2 has no mask registers: a mask is a vector whose set lanes are all ones. */
static inline __m256i lo_avx2_mask_bits(unsigned bits) {
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), lane_bit), lane_bit);
}
/* AVX2 has no scatter: store the masked lanes one by one, in lane order. */
static inline void lo_avx2_scatter(float *p, __m256i mask, __m256i idx, __m256 v) {
    int m[8], i[8]; float x[8];
    _mm256_storeu_si256((__m256i *)m, mask); _mm256_storeu_si256((__m256i *)i, idx); _mm256_storeu_ps(x, v);
    for (int j = 0; j < 8; ++j) if (m[j]) p[i[j]] = x[j];
}
static inline float lo_avx2_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
""",
    ops=_table(
        zero="_mm256_setzero_ps()",
        load="_mm256_loadu_ps({p})",
        load_mask="_mm256_maskload_ps({p}, {m})",
        store="_mm256_storeu_ps({p}, {v})",
        store_mask="_mm256_maskstore_ps({p}, {m}, {v})",
        broadcast="_mm256_set1_ps({s})",
        fma="_mm256_fmadd_ps({a}, {b}, {c})",
        fma_mask="_mm256_blendv_ps({c}, _mm256_fmadd_ps({a}, {b}, {c}), _mm256_castsi256_ps({m}))",
        gather="_mm256_i32gather_ps({p}, {idx}, 4)",
        gather_mask="_mm256_mask_i32gather_ps(_mm256_setzero_ps(), {p}, {idx}, _mm256_castsi256_ps({m}), 4)",
        scatter_mask="lo_avx2_scatter({p}, {m}, {idx}, {v})",
        hsum="lo_avx2_hsum({v})",
        mask_bits="lo_avx2_mask_bits({s})",
        mask_count="lo_avx2_mask_bits((1u << ({n})) - 1u)",
        stride_index="_mm256_mullo_epi32(_mm256_set1_epi32({s}), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))",
        index_load="_mm256_loadu_si256((const __m256i *)({p}))",
    ),
)

# The scalar target ignores vector annotations: the vectorized loop runs as a plain loop.
SCALAR = Isa(name="scalar", lanes=1, vector_type="float", mask_type="unsigned", index_type="int",
             cpu_flags=(), compile_flags=(), prelude="", ops={})

ISAS: dict[str, Isa] = {isa.name: isa for isa in (AVX512, AVX2, SCALAR)}
