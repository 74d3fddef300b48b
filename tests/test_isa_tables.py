"""Each instruction-table entry does, lane by lane, what its recorded meaning says."""
import numpy as np
import pytest
from helpers import in_process

from loopopt.codegen.instr import MEANINGS, MEMORY_MEANINGS, Isa
from loopopt.codegen.params import KernelParam, scalar, signature
from loopopt.targets.x86.isa import ISAS, available_isas

VECTOR_ISAS = [name for name in available_isas() if ISAS[name].vectorizes]

PARAMS = (KernelParam("x", "float", const=True), KernelParam("y", "float", const=True),
          KernelParam("idx", "int", const=True), scalar("bits", "unsigned"), KernelParam("out", "float"),
          KernelParam("scattered", "float"))

HARNESS = """{prelude}
{signature}
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
    {store_add};
    {store_max};
    {store_min};
    const {vt} nan = {broadcast_nan};
    {store_max_nan};
    {store_min_nan};
}}
"""


def harness(isa: Isa) -> str:
    """The C of ``probe`` (``PARAMS``): every entry of the float table ``isa`` on the probe's arrays."""
    n = isa.lanes
    out = lambda k: f"out + {k} * {n}"
    return HARNESS.format(
        prelude=isa.prelude, signature=signature("probe", PARAMS), vt=isa.vector_type, mt=isa.mask_type,
        it=isa.index_type, n=n,
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
        store_add=isa.store(p=out(9), v=isa.add(a="a", b="b")),
        store_max=isa.store(p=out(10), v=isa.max(a="c", b="a")),
        store_min=isa.store(p=out(11), v=isa.min(a="c", b="a")),
        broadcast_nan=isa.broadcast(s='__builtin_nanf("")'),
        store_max_nan=isa.store(p=out(12), v=isa.max(a="c", b="nan")),
        store_min_nan=isa.store(p=out(13), v=isa.min(a="c", b="nan")),
    )


def check_lanes(isa: Isa, driver, seed: int) -> None:
    """Run ``probe`` through ``driver`` on random lanes and compare each entry with its meaning."""
    n = isa.lanes
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(4 * n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    idx = rng.permutation(4 * n)[:n].astype(np.int32)
    bits = int(rng.integers(0, 2 ** n))
    out = np.full(14 * n + 1, np.nan, dtype=np.float32)
    out[7 * n:8 * n] = -1.0
    scattered = np.zeros(4 * n, dtype=np.float32)
    driver.call(driver.bind(PARAMS, dict(x=x, y=y, idx=idx, bits=bits, out=out, scattered=scattered)))
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
    assert np.array_equal(lane(9), a + b)
    assert np.array_equal(lane(10), np.maximum(c, a)) and np.array_equal(lane(11), np.minimum(c, a))
    assert np.isnan(lane(12)).all() and np.isnan(lane(13)).all()    # NaN where b is


def test_every_instruction_has_a_meaning():
    for isa in ISAS.values():
        assert set(isa.ops) <= set(MEANINGS) | set(MEMORY_MEANINGS)
        assert all(isa.ops[name].meaning == (MEANINGS | MEMORY_MEANINGS)[name] for name in isa.ops)
    for name in VECTOR_ISAS:
        assert set(MEANINGS) <= set(ISAS[name].ops), name
    assert "fma_memory" in ISAS["avx2"].ops and "fma_memory" in ISAS["avx2"].helpers
    assert "broadcast_here" in ISAS["avx2"].ops and "broadcast_here" in ISAS["avx2"].helpers


MEMORY_PARAMS = (KernelParam("x", "float", const=True), KernelParam("y", "float", const=True),
                 KernelParam("out", "float"))


@pytest.mark.parametrize("isa_name", [name for name in VECTOR_ISAS if "fma_memory" in ISAS[name].ops])
@pytest.mark.parametrize("seed", [0, 1])
def test_fma_memory_is_one_rounding_of_a_times_p_plus_c(isa_name, seed):
    isa = ISAS[isa_name]
    body = (f"{{ const {isa.vector_type} a = {isa.load(p='x')}, c = {isa.load(p='x + ' + str(isa.lanes))};\n"
            f"  {isa.store(p='out', v=isa.fma_memory(a='a', p='y', c='c'))};\n"
            f"  {isa.store(p='out + ' + str(isa.lanes), v=isa.fma(a='a', b=isa.load(p='y'), c='c'))}; }}\n")
    source = isa.prelude + isa.helpers["fma_memory"] + signature("probe", MEMORY_PARAMS) + "\n" + body
    n, rng = isa.lanes, np.random.default_rng(seed)
    x = rng.standard_normal(2 * n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.full(2 * n, np.nan, dtype=np.float32)
    driver = in_process(source, "probe", MEMORY_PARAMS, isa.compile_flags)
    driver.call(driver.bind(MEMORY_PARAMS, dict(x=x, y=y, out=out)))
    assert np.array_equal(out[:n], out[n:])                  # bit for bit the table's fma of p's vector
    np.testing.assert_allclose(out[:n], (x[:n].astype(np.float64) * y + x[n:]).astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize("isa_name", [name for name in VECTOR_ISAS if "broadcast_here" in ISAS[name].ops])
def test_broadcast_here_sets_every_lane(isa_name):
    """``broadcast_here`` of a float literal (as a fused clip's bound is written) and of a scalar read at
    run time: every lane, bit for bit the table's ``broadcast``; NaN, infinities and -0.0 too."""
    isa = ISAS[isa_name]
    n = isa.lanes
    values = np.array([6.0, -0.0, np.inf, np.nan, -0.25, 1e-40], dtype=np.float32)
    lines = [f"  {isa.store(p=f'out + {2 * n * i}', v=isa.broadcast_here(s=f'x[{i}]'))};\n"
             f"  {isa.store(p=f'out + {2 * n * i + n}', v=isa.broadcast(s=f'x[{i}]'))};\n"
             for i in range(len(values))]
    lines.append(f"  {isa.store(p=f'out + {2 * n * len(values)}', v=isa.broadcast_here(s='6.0f'))};\n")
    body = "{\n" + "".join(lines) + "}\n"
    source = isa.prelude + isa.helpers["broadcast_here"] + signature("probe", MEMORY_PARAMS) + "\n" + body
    out = np.zeros(2 * n * len(values) + n, dtype=np.float32)
    driver = in_process(source, "probe", MEMORY_PARAMS, isa.compile_flags)
    driver.call(driver.bind(MEMORY_PARAMS, dict(x=values, y=values, out=out)))
    pairs = out[:-n].reshape(len(values), 2, n)
    assert np.array_equal(pairs[:, 0].view(np.uint32), pairs[:, 1].view(np.uint32))
    assert np.array_equal(pairs[:, 0].view(np.uint32), np.repeat(values.view(np.uint32)[:, None], n, axis=1))
    assert np.array_equal(out[-n:], np.full(n, 6.0, dtype=np.float32))


@pytest.mark.parametrize("isa_name", VECTOR_ISAS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_instructions_match_their_scalar_meaning(isa_name, seed):
    isa = ISAS[isa_name]
    check_lanes(isa, in_process(harness(isa), "probe", PARAMS, isa.compile_flags), seed)
