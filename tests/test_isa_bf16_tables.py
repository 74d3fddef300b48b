"""Each bfloat16 instruction-table entry does, lane by lane, what its recorded meaning says."""
import numpy as np
import pytest
from helpers import in_process

from loopopt.bf16 import bf16_to_float32, to_bf16
from loopopt.cbuild import compile_c
from loopopt.codegen.instr import BF16_MEANINGS, SHARED_OPS, Isa
from loopopt.codegen.params import KernelParam, scalar, signature
from loopopt.targets.x86.isa import (
    BF16_DOT_FLAGS,
    BF16_ISAS,
    INT_ISAS,
    ISAS,
    available_isas,
    bf16_dot_available,
)

VECTOR_ISAS = [name for name in available_isas() if BF16_ISAS[name].vectorizes]
# entries whose lanes are float32 values, and those whose lanes are int32 bf16 pairs
FLOAT_PROBES = ("broadcast", "load", "load_mask", "gather", "gather_mask", "dot", "dot_mask")
PAIR_PROBES = ("pair_zero", "broadcast_pair", "load_pairs", "load_pairs_mask", "gather_pairs",
               "gather_pairs_mask")

PARAMS = (KernelParam("h", "uint16_t", const=True), KernelParam("idx", "int", const=True),
          scalar("bits", "unsigned"), KernelParam("c_in", "float", const=True), KernelParam("out", "float"),
          KernelParam("pairs", "int"))

HARNESS = """{prelude}
{signature}
{{
    const {mt} m = {mask_bits};
    const {it} index = {index_load};
    const {ft} c = {load_c};
{body}
}}
"""


def probes(bf: Isa) -> dict[str, tuple[str, str]]:
    """Per entry the bf16 table ``bf`` has: (result kind, C expression) on the harness's operands."""
    n = bf.lanes
    exprs = {
        "broadcast": bf.broadcast(s="h[3]") if "broadcast" in bf.ops else None,
        "load": bf.load(p="h + 1") if "load" in bf.ops else None,
        "load_mask": bf.load_mask(p="h + 1", m="m") if "load_mask" in bf.ops else None,
        "gather": bf.gather(p="h", idx="index") if "gather" in bf.ops else None,
        "gather_mask": bf.gather_mask(p="h", idx="index", m="m") if "gather_mask" in bf.ops else None,
    }
    if "dot" in bf.ops:
        a, b = bf.load_pairs(p="h"), bf.load_pairs(p=f"h + {2 * n}")
        exprs |= {"pair_zero": bf.pair_zero(), "broadcast_pair": bf.broadcast_pair(p="h + 5"),
                  "load_pairs": bf.load_pairs(p="h + 2"),
                  "load_pairs_mask": bf.load_pairs_mask(p="h + 2", m="m"),
                  "gather_pairs": bf.gather_pairs(p="h", idx="index"),
                  "gather_pairs_mask": bf.gather_pairs_mask(p="h", idx="index", m="m"),
                  "dot": bf.dot(a=a, b=b, c="c"), "dot_mask": bf.dot_mask(a=a, b=b, c="c", m="m")}
    return {name: ("float" if name in FLOAT_PROBES else "pairs", expr) for name, expr in exprs.items()
            if expr is not None}


def harness(bf: Isa, floats: Isa, ints: Isa) -> str:
    """The C of ``probe`` (``PARAMS``): every entry of the bf16 table ``bf``, its float32 lanes stored with
    the float table ``floats``, its pairs with the integer table ``ints``."""
    n = bf.lanes
    lines = []
    for k, (kind, expr) in enumerate(probes(bf).values()):
        store = floats.store(p=f"out + {k} * {n}", v=expr) if kind == "float" else \
            ints.store(p=f"pairs + {k} * {n}", v=expr)
        lines.append(f"    {store};")
    return HARNESS.format(prelude=bf.prelude, signature=signature("probe", PARAMS), mt=bf.mask_type,
                          it=bf.index_type, ft=floats.vector_type, mask_bits=bf.mask_bits(s="bits"),
                          index_load=bf.index_load(p="idx"), load_c=floats.load(p="c_in"),
                          body="\n".join(lines))


def test_every_bf16_instruction_has_a_meaning():
    for isa in BF16_ISAS.values():
        assert set(isa.ops) <= set(BF16_MEANINGS) | set(SHARED_OPS)
        assert "value" in isa.ops, isa.name
    assert set(BF16_ISAS["avx512"].ops) == set(BF16_MEANINGS) | set(SHARED_OPS)
    assert set(FLOAT_PROBES) | set(PAIR_PROBES) | {"value"} == set(BF16_MEANINGS)


@pytest.mark.parametrize("isa_name", VECTOR_ISAS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bf16_instructions_match_their_scalar_meaning(isa_name, seed):
    bf = BF16_ISAS[isa_name]
    if "dot" in bf.ops and not bf16_dot_available(isa_name):
        pytest.skip(f"this CPU lacks {', '.join(BF16_DOT_FLAGS)}: the {isa_name} bf16 table's vdpbf16ps "
                    f"entries cannot run here")
    source = harness(bf, ISAS[isa_name], INT_ISAS[isa_name])
    check_lanes(bf, in_process(source, "probe", PARAMS, bf.compile_flags), seed)


def check_lanes(bf: Isa, driver, seed: int) -> None:
    """Run ``probe`` through ``driver`` on random lanes and compare each entry with its meaning."""
    n = bf.lanes
    rng = np.random.default_rng(seed)
    h = to_bf16(rng.standard_normal(4 * n + 8).astype(np.float32))
    idx = rng.integers(0, 2 * n, n).astype(np.int32)
    bits = int(rng.integers(0, 2 ** n))
    c_in = rng.standard_normal(n).astype(np.float32)
    table = probes(bf)
    out = np.full(len(table) * n, -7.0, dtype=np.float32)
    pairs = np.full(len(table) * n, -7, dtype=np.int32)
    driver.call(driver.bind(PARAMS, dict(h=h, idx=idx, bits=bits, c_in=c_in, out=out, pairs=pairs)))
    mask = np.array([(bits >> j) & 1 for j in range(n)], dtype=bool)
    value = bf16_to_float32(h)
    pair = lambda low: (h[low].astype(np.uint32) | (h[low + 1].astype(np.uint32) << 16)).view(np.int32)
    lanes = np.arange(n)
    a_lo, a_hi = value[2 * lanes], value[2 * lanes + 1]
    b_lo, b_hi = value[2 * n + 2 * lanes], value[2 * n + 2 * lanes + 1]
    # float32 arithmetic: each bf16 product is exact, each of the two sums rounds (high pair first)
    dot = (c_in + a_hi * b_hi) + a_lo * b_lo
    expected = {
        "broadcast": np.full(n, value[3]), "load": value[1:n + 1],
        "load_mask": np.where(mask, value[1:n + 1], 0.0), "gather": value[idx],
        "gather_mask": np.where(mask, value[idx], 0.0), "dot": dot, "dot_mask": np.where(mask, dot, c_in),
        "pair_zero": np.zeros(n, np.int32), "broadcast_pair": np.full(n, pair(np.array(5))),
        "load_pairs": pair(2 + 2 * lanes), "load_pairs_mask": np.where(mask, pair(2 + 2 * lanes), 0),
        "gather_pairs": pair(idx), "gather_pairs_mask": np.where(mask, pair(idx), 0),
    }
    for k, (name, (kind, _)) in enumerate(table.items()):
        got = (out if kind == "float" else pairs)[k * n:(k + 1) * n]
        assert np.array_equal(got, np.asarray(expected[name], dtype=got.dtype)), (name, got, expected[name])


def test_scalar_value_is_the_upper_half_of_a_float32():
    bf = BF16_ISAS["scalar"]
    source = bf.prelude + f"float probe(unsigned short b) {{ return {bf.value(s='b')}; }}\n"
    module = compile_c(source, "float probe(unsigned short b);", bf.compile_flags)
    bits = to_bf16(np.array([0.0, -1.5, 3.0e38, 1e-40, np.inf, -np.inf], dtype=np.float32))
    for b in bits:
        assert np.float32(module.lib.probe(int(b))).tobytes() == bf16_to_float32(b).tobytes()
