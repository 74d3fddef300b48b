"""Each integer instruction-table entry does, lane by lane, what its recorded meaning says."""
import numpy as np
import pytest
from helpers import in_process

from loopopt.codegen.instr import (
    BYTE_MAP_MEANINGS,
    INT_MEANINGS,
    PACKED_MEANINGS,
    SHARED_OPS,
    WIDE_MEANINGS,
    Isa,
)
from loopopt.codegen.params import KernelParam, scalar, signature
from loopopt.targets.x86.isa import INT_ISAS, ISAS, available_int_isas, byte_permute_flags

VECTOR_ISAS = [name for name in available_int_isas() if INT_ISAS[name].vectorizes]

# One probe per entry; each writes its result vector (as int32 lanes) to out + k * lanes.
PROBES = {
    "zero": "{zero}",
    "load": "{load_p}",
    "load_mask": "{load_mask}",
    "broadcast": "{broadcast}",
    "broadcast_word": "{broadcast_word}",
    "fma": "{fma}",
    "fma_mask": "{fma_mask}",
    "sub": "{sub}",
    "gather": "{gather}",
    "gather_mask": "{gather_mask}",
    "load_u8": "{load_u8}",
    "load_s8": "{load_s8}",
    "load_u8_mask": "{load_u8_mask}",
    "load_s8_mask": "{load_s8_mask}",
    "gather_b": "{gather_b}",
    "gather_b_mask": "{gather_b_mask}",
    "extend_u8": "{extend_u8}",
    "extend_s8": "{extend_s8}",
    "flip": "{flip}",
    "dot": "{dot}",
    "dot_mask": "{dot_mask}",
    "pack_u8": "{pack_u8}",
    "pack_s8": "{pack_s8}",
    # the tap dot's and i2_s weights' byte operations (PACKED_MEANINGS)
    "mask_all": "{mask_all}",
    "iota": "{iota}",
    "offset_index": "{offset_index}",
    "sub_one_bytes": "{sub_one_bytes}",
    "tap_spread": "{tap_spread}",
    "zip_low": "{zip_low}",
    "zip_high": "{zip_high}",
    "map_bytes": "{map_bytes}",     # optional (BYTE_MAP_MEANINGS)
}
STRIDE = 2               # the tap spread probed: lane j's group of 4 bytes starts at byte 2 j

PARAMS = (KernelParam("x", "int", const=True), KernelParam("y", "int", const=True),
          KernelParam("bytes", "unsigned char", const=True), KernelParam("idx", "int", const=True),
          scalar("bits", "unsigned"), KernelParam("out", "int"), KernelParam("scattered", "int"),
          KernelParam("sums", "int"), KernelParam("floats", "float"),
          KernelParam("narrowed", "unsigned char"))

HARNESS = """{prelude}
{signature}
{{
    const {mt} m = {mask_bits};
    const {it} index = {index_load};
    const {vt} a = {load_a}, b = {load_b}, c = {load_c};
{stores}
    {store_mask};
    sums[0] = {hsum};
    {scatter};
    {store_float};
    {store_narrow};
    {store_narrow_mask};
    {store_bytes};
}}
"""


def harness(isa: Isa, floats: Isa) -> str:
    """The C of ``probe`` (``PARAMS``): every entry of the integer table ``isa`` (``floats``: the float
    table of the same variant, which stores the converted lanes) on the probe's arrays."""
    n = isa.lanes
    ops = dict(
        zero=isa.zero(), load_p=isa.load(p="x + 1"), load_mask=isa.load_mask(p="x + 1", m="m"),
        broadcast=isa.broadcast(s="x[2]"), broadcast_word=isa.broadcast_word(p="bytes + 1"),
        fma=isa.fma(a="a", b="b", c="c"),
        fma_mask=isa.fma_mask(a="a", b="b", c="c", m="m"), sub=isa.sub(a="a", b="b"),
        gather=isa.gather(p="x", idx="index"), gather_mask=isa.gather_mask(p="x", idx="index", m="m"),
        load_u8=isa.load_u8(p="bytes + 3"), load_s8=isa.load_s8(p="bytes + 3"),
        load_u8_mask=isa.load_u8_mask(p="bytes + 3", m="m"),
        load_s8_mask=isa.load_s8_mask(p="bytes + 3", m="m"),
        gather_b=isa.gather_b(p="bytes", idx="index"),
        gather_b_mask=isa.gather_b_mask(p="bytes", idx="index", m="m"),
        extend_u8=isa.extend_u8(v="a"), extend_s8=isa.extend_s8(v="a"), flip=isa.flip(v="a"),
        dot=isa.dot(a="a", b="b", c="c"), dot_mask=isa.dot_mask(a="a", b="b", c="c", m="m"),
        # lanes in the byte type's range: a, b, c, a narrowed (the low byte, as uint8 / int8)
        pack_u8=isa.pack_u8(**{k: isa.extend_u8(v=v) for k, v in zip("abcd", "abca")}),
        pack_s8=isa.pack_s8(**{k: isa.extend_s8(v=v) for k, v in zip("abcd", "abca")}),
    )
    if packed(isa):
        ops.update(
            mask_all=isa.fma_mask(a="a", b="b", c="c", m=isa.mask_all()), iota=isa.iota(),
            offset_index=isa.offset_index(s="x[2]", idx="index"), sub_one_bytes=isa.sub_one_bytes(v="a"),
            tap_spread=isa.tap_spread(v="a", **{k: ", ".join(map(str, v)) for k, v in spread(n).items()}),
            zip_low=isa.zip_low(a="a", b="b"), zip_high=isa.zip_high(a="a", b="b"))
    if "map_bytes" in isa.ops:
        ops.update(map_bytes=isa.map_bytes(v="a", p="bytes"))
    stores = "\n".join(f"    {isa.store(p=f'out + {k} * {n}', v=PROBES[name].format(**ops))};"
                       for k, name in enumerate(probes(isa)))
    return HARNESS.format(
        prelude=isa.prelude + isa.helpers.get("taps", "") + isa.helpers.get("map", ""),
        signature=signature("probe", PARAMS),
        vt=isa.vector_type, mt=isa.mask_type, it=isa.index_type,
        mask_bits=isa.mask_bits(s="bits"), index_load=isa.index_load(p="idx"),
        load_a=isa.load(p="x"), load_b=isa.load(p="y"), load_c=isa.load(p="y + 1"), stores=stores,
        store_mask=isa.store_mask(p=f"out + {len(PROBES)} * {n}", m="m", v="a"),
        hsum=isa.hsum(v="a"), scatter=isa.scatter_mask(p="scattered", m="m", idx="index", v="a"),
        store_float=floats.store(p="floats", v=isa.to_float(v="a")),
        store_narrow=isa.store_narrow(p="narrowed", v="a"),
        store_narrow_mask=isa.store_narrow_mask(p=f"narrowed + {n}", m="m", v="a"),
        store_bytes=isa.store_bytes(p=f"narrowed + {2 * n}", v="a", n=f"{4 * n} - 5"))


def packed(isa: Isa) -> bool:
    """Whether ``isa`` has the tap dot's and i2_s weights' byte operations (all of them or none)."""
    return set(PACKED_MEANINGS) <= set(isa.ops)


def probes(isa: Isa) -> list[str]:
    """The entries of ``PROBES`` that ``isa`` has, in order."""
    return [name for name in PROBES if (name not in PACKED_MEANINGS or packed(isa))
            and (name not in BYTE_MAP_MEANINGS or name in isa.ops)]


def spread(lanes: int) -> dict[str, list[int]]:
    """The index vectors of a tap spread (codegen/taps.py) of stride ``STRIDE``, unit dilation."""
    groups = [sum((j * STRIDE + t) << (8 * t) for t in range(4)) for j in range(4)] * (lanes // 4)
    return {"dwords": [q * STRIDE + i for q in range(lanes // 4) for i in range(4)], "bytes": groups,
            "picks": [p + (j // 4) * 4 * STRIDE * 0x01010101 for j, p in enumerate(groups)]}


def test_every_int_instruction_has_a_meaning():
    """Every entry has a meaning; the optional byte map and AVX2's s16 dot (WIDE_MEANINGS: probed through
    whole kernels, tests/test_wide_weights.py) aside, every vector table has them all."""
    every = set(INT_MEANINGS) | set(SHARED_OPS) | set(PACKED_MEANINGS)
    optional = set(BYTE_MAP_MEANINGS) | set(WIDE_MEANINGS)
    for isa in INT_ISAS.values():
        assert set(isa.ops) <= every | optional
    for name in VECTOR_ISAS:
        assert set(INT_ISAS[name].ops) - optional == every, name
        assert set(PROBES) | {"store", "store_mask", "hsum", "scatter_mask", "to_float", "store_narrow",
                              "store_narrow_mask", "store_bytes"} == (set(INT_MEANINGS) | set(PACKED_MEANINGS)
                                                                      | set(BYTE_MAP_MEANINGS))
    assert "map_bytes" in INT_ISAS["avx512"].ops
    assert set(WIDE_MEANINGS) <= set(INT_ISAS["avx2"].ops)
    assert not set(WIDE_MEANINGS) & set(INT_ISAS["avx512"].ops)


@pytest.mark.parametrize("isa_name", VECTOR_ISAS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_int_instructions_match_their_scalar_meaning(isa_name, seed):
    isa = INT_ISAS[isa_name]
    # seed 2 without AVX512-VBMI's flag: lo_map_bytes' other branch (the others: VBMI's where the CPU has it)
    flags = isa.compile_flags + (byte_permute_flags(isa_name) if seed < 2 else ())
    check_lanes(isa, in_process(harness(isa, ISAS[isa_name]), "probe", PARAMS, flags), seed)


def check_lanes(isa: Isa, driver, seed: int) -> None:
    """Run ``probe`` through ``driver`` on random lanes and compare each entry with its meaning."""
    n = isa.lanes
    rng = np.random.default_rng(seed)
    x = rng.integers(-2**31, 2**31, 4 * n, dtype=np.int64).astype(np.int32)
    x[:n] = rng.integers(-2**20, 2**20, n)            # a: small enough to convert to float exactly
    y = rng.integers(-2**31, 2**31, n + 1, dtype=np.int64).astype(np.int32)
    raw = rng.integers(0, 256, max(8 * n, 256), dtype=np.int64).astype(np.uint8)     # a byte map's table
    idx = rng.permutation(4 * n)[:n].astype(np.int32)
    bits = int(rng.integers(0, 2 ** n))
    out = np.full((len(PROBES) + 1) * n, -7, dtype=np.int32)
    scattered = np.zeros(4 * n, dtype=np.int32)
    sums = np.zeros(1, dtype=np.int32)
    floats = np.zeros(n, dtype=np.float32)
    narrowed = np.full(6 * n, 0xAB, dtype=np.uint8)
    values = dict(x=x, y=y, bytes=raw, idx=idx, bits=bits, out=out, scattered=scattered, sums=sums,
                  floats=floats, narrowed=narrowed)
    driver.call(driver.bind(PARAMS, values))
    mask = np.array([(bits >> j) & 1 for j in range(n)], dtype=bool)
    a, b, c = x[:n].astype(np.int64), y[:n].astype(np.int64), y[1:n + 1].astype(np.int64)
    wrap = lambda v: np.asarray(v, dtype=np.int64).astype(np.uint32).astype(np.int32)
    word = lambda offsets: raw.view(np.uint8)[offsets[:, None] + np.arange(4)].copy().view("<i4")[:, 0]
    au8 = a.astype(np.int32).view(np.uint8).reshape(n, 4).astype(np.int64)
    bs8 = b.astype(np.int32).view(np.int8).reshape(n, 4).astype(np.int64)
    dot = wrap(c + (au8 * bs8).sum(axis=1))
    picks = np.array(spread(n)["picks"], dtype="<u4").view(np.uint8)         # the spread's source bytes
    expected = {
        "zero": np.zeros(n), "load": x[1:n + 1], "load_mask": np.where(mask, x[1:n + 1], 0),
        "broadcast": np.full(n, x[2]), "broadcast_word": np.full(n, word(np.array([1]))[0]),
        "fma": wrap(c + a * b), "fma_mask": np.where(mask, wrap(c + a * b), c),
        "sub": wrap(a - b), "gather": x[idx], "gather_mask": np.where(mask, x[idx], 0),
        "load_u8": raw[3:3 + n], "load_s8": raw[3:3 + n].view(np.int8),
        "load_u8_mask": np.where(mask, raw[3:3 + n], 0),
        "load_s8_mask": np.where(mask, raw[3:3 + n].view(np.int8), 0),
        "gather_b": word(idx), "gather_b_mask": np.where(mask, word(idx), 0),
        "extend_u8": a & 255, "extend_s8": a.astype(np.int8), "flip": wrap(a ^ 0x80808080),
        "dot": dot, "dot_mask": np.where(mask, dot, c),
        "pack_u8": np.concatenate([a, b, c, a]).astype(np.uint8).view(np.int32),
        "pack_s8": np.concatenate([a, b, c, a]).astype(np.int8).view(np.int32),
        "mask_all": wrap(c + a * b), "iota": np.arange(n), "offset_index": wrap(x[2] + idx.astype(np.int64)),
        "sub_one_bytes": (a.astype(np.int32).view(np.uint8) - np.uint8(1)).view(np.int32),
        "tap_spread": a.astype(np.int32).view(np.uint8)[picks].view(np.int32),
        "zip_low": np.stack([a[:n // 2], b[:n // 2]], axis=1).reshape(-1),
        "zip_high": np.stack([a[n // 2:], b[n // 2:]], axis=1).reshape(-1),
        "map_bytes": raw[a.astype(np.int32).view(np.uint8)].view(np.int32),
    }
    for k, name in enumerate(probes(isa)):
        assert np.array_equal(out[k * n:(k + 1) * n], wrap(expected[name])), name
    assert np.array_equal(out[len(PROBES) * n:], np.where(mask, x[:n], -7)), "store_mask"
    assert sums[0] == wrap(a.sum()), "hsum"
    expected_scatter = np.zeros(4 * n, dtype=np.int32)
    expected_scatter[idx[mask]] = x[:n][mask]
    assert np.array_equal(scattered, expected_scatter), "scatter_mask"
    assert np.array_equal(floats, x[:n].astype(np.float32)), "to_float"
    low = x[:n].astype(np.uint8)                                  # the low byte of each lane
    assert np.array_equal(narrowed[:n], low), "store_narrow"
    assert np.array_equal(narrowed[n:2 * n], np.where(mask, low, 0xAB)), "store_narrow_mask"
    stored = np.r_[x[:n].view(np.uint8)[:4 * n - 5], [0xAB] * 5]           # the first 4n - 5 bytes of a
    assert np.array_equal(narrowed[2 * n:], stored), "store_bytes"
