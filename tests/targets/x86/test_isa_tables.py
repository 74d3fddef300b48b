"""Each instruction-table entry does, lane by lane, what its recorded meaning says."""
import numpy as np
import pytest

from loopopt.cbuild import compile_c
from loopopt.codegen.instr import MEANINGS
from loopopt.targets.x86.isa import ISAS, available_isas

VECTOR_ISAS = [name for name in available_isas() if ISAS[name].vectorizes]

HARNESS = """{prelude}
void probe(const float *x, const float *y, const int *idx, unsigned bits, float *out, float *scattered)
{{
    const {mt} m = {mask_bits};
    const {it} index = {index_load};
    const {vt} a = {load}, b = {load_b}, c = {broadcast};
    {store_load_mask};
    {store_gather_mask};
    {store_fma_mask};
    {store_fma};
    {store_gather};
    out[5 * {n}] = {hsum};
    {scatter};
    const {it} stride = {stride_index};
    {store_strided};
    {store_count};
    {store_zero};
}}
"""


def build(isa_name):
    isa = ISAS[isa_name]
    n = isa.lanes
    out = lambda k: f"out + {k} * {n}"
    source = HARNESS.format(
        prelude=isa.prelude, vt=isa.vector_type, mt=isa.mask_type, it=isa.index_type, n=n,
        mask_bits=isa.mask_bits(s="bits"), index_load=isa.index_load(p="idx"),
        load=isa.load(p="x"), load_b=isa.load(p="y"), broadcast=isa.broadcast(s="x[1]"),
        store_load_mask=isa.store(p=out(0), v=isa.load_mask(p="x", m="m")),
        store_gather_mask=isa.store(p=out(1), v=isa.gather_mask(p="x", idx="index", m="m")),
        store_fma_mask=isa.store(p=out(2), v=isa.fma_mask(a="a", b="b", c="c", m="m")),
        store_fma=isa.store(p=out(3), v=isa.fma(a="a", b="b", c="c")),
        store_gather=isa.store(p=out(4), v=isa.gather(p="x", idx="index")),
        hsum=isa.hsum(v="a"),
        scatter=isa.scatter_mask(p="scattered", m="m", idx="index", v="a"),
        stride_index=isa.stride_index(s="3"),
        store_strided=isa.store(p=out(6), v=isa.gather(p="x", idx="stride")),
        store_count=isa.store_mask(p=out(7), m=isa.mask_count(n="3"), v="a"),
        store_zero=isa.store(p=out(8), v=isa.zero()),
    )
    cdef = "void probe(const float *, const float *, const int *, unsigned, float *, float *);"
    return compile_c(source, cdef, isa.compile_flags)


def test_every_instruction_has_a_meaning():
    for isa in ISAS.values():
        assert set(isa.ops) <= set(MEANINGS)
    for name in VECTOR_ISAS:
        assert set(ISAS[name].ops) == set(MEANINGS), name


@pytest.mark.parametrize("isa_name", VECTOR_ISAS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_instructions_match_their_scalar_meaning(isa_name, seed):
    n = ISAS[isa_name].lanes
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(4 * n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    idx = rng.permutation(4 * n)[:n].astype(np.int32)
    bits = int(rng.integers(0, 2 ** n))
    out = np.full(9 * n + 1, np.nan, dtype=np.float32)
    out[7 * n:8 * n] = -1.0
    scattered = np.zeros(4 * n, dtype=np.float32)
    module = build(isa_name)
    ffi = module.ffi
    ptr = lambda a, t="float *": ffi.cast(t, ffi.from_buffer(a))
    module.lib.probe(ptr(x), ptr(y), ptr(idx, "int *"), bits, ptr(out), ptr(scattered))
    mask = np.array([(bits >> j) & 1 for j in range(n)], dtype=bool)
    a, b, c = x[:n], y, np.full(n, x[1], dtype=np.float32)
    fused = (a.astype(np.float64) * b + c).astype(np.float32)
    lane = lambda k: out[k * n:(k + 1) * n]
    assert np.array_equal(lane(0), np.where(mask, a, 0))
    assert np.array_equal(lane(1), np.where(mask, x[idx], 0))
    np.testing.assert_allclose(lane(2), np.where(mask, fused, c), rtol=1e-6)
    np.testing.assert_allclose(lane(3), fused, rtol=1e-6)
    assert np.array_equal(lane(4), x[idx])
    assert out[5 * n] == pytest.approx(float(a.astype(np.float64).sum()), rel=1e-5, abs=1e-5)
    expected_scatter = np.zeros(4 * n, dtype=np.float32)
    expected_scatter[idx[mask]] = a[mask]
    assert np.array_equal(scattered, expected_scatter)
    assert np.array_equal(lane(6), x[np.arange(n) * 3])
    assert np.array_equal(lane(7), np.where(np.arange(n) < 3, a, -1.0))
    assert np.array_equal(lane(8), np.zeros(n))
