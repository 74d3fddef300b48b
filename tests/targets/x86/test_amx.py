"""The AMX table: each entry does, element by element, what its meaning says; its preconditions are
checked; the Linux permission and its errors; the tile peaks; the int8 tile GEMM is exact."""
import errno
import re

import numpy as np
import pytest
from helpers import needs_amx

from loopopt.bf16 import bf16_to_float32, to_bf16
from loopopt.cbuild import compile_c
from loopopt.targets.x86 import amx_runtime
from loopopt.targets.x86.amx import AMX, CONFIG_BYTES, MAX_COLSB, MAX_ROWS, TileConfig, vnni_pack

DOTS = [name for name, instr in AMX.ops.items() if instr.dot is not None]
C, A, B = 3, 6, 1                   # tile numbers of the probe (any distinct literals)
FRESH, ROUND_TRIP, ZERO = -3, -2, -1  # probe operations; 0.. are the dot products in DOTS order

HARNESS = """{prelude}
void probe(int op, const char *config, const char *c, long ldc, const char *a, long lda, const char *b,
           long ldb, char *out, long ldo, char *config_loaded, char *config_released)
{{
    {loadconfig};
    {store_loaded};
    if (op != {fresh}) {{
        {load_c};
        switch (op) {{
        case {zero}: {zero_c}; break;
{dots}
        }}
    }}
    {store_c};
    {release};
    {store_released};
}}
"""
CDEF = ("void probe(int, const char *, const char *, long, const char *, long, const char *, long, "
        "char *, long, char *, char *);")


def build():
    loads = f"{AMX.loadd(t=A, p='a', stride='lda')}; {AMX.loadd(t=B, p='b', stride='ldb')};"
    dots = "\n".join(f"        case {k}: {loads} {AMX.ops[name](c=C, a=A, b=B)}; break;"
                     for k, name in enumerate(DOTS))
    source = HARNESS.format(
        prelude=AMX.prelude, loadconfig=AMX.loadconfig(p="config"),
        store_loaded=AMX.storeconfig(p="config_loaded"), fresh=FRESH,
        load_c=AMX.loadd(t=C, p="c", stride="ldc"), zero=ZERO, zero_c=AMX.zero(t=C), dots=dots,
        store_c=AMX.stored(t=C, p="out", stride="ldo"), release=AMX.release(),
        store_released=AMX.storeconfig(p="config_released"))
    return compile_c(source, CDEF, AMX.compile_flags)


def run_probe(op, config, c, a=None, b=None):
    """Run one probe: ``c``/``a``/``b`` are 2-D byte arrays (their row length is the stride); returns
    the stored C tile in a 2-D byte array with 8 spare bytes per row (sentinel 0xAB), and the
    configuration read back after loadconfig and after release."""
    module = build()
    ffi = module.ffi
    rows = max(config.rows(C), 1)
    out = np.full((rows, config.colsb(C) + 8), 0xAB, dtype=np.uint8)
    loaded, released = np.zeros(CONFIG_BYTES, np.uint8), np.full(CONFIG_BYTES, 0xAB, np.uint8)
    a = np.zeros((1, 1), np.uint8) if a is None else a
    b = np.zeros((1, 1), np.uint8) if b is None else b
    buf = lambda x: ffi.from_buffer("char[]", np.ascontiguousarray(x))
    raw = np.frombuffer(config.to_bytes(), np.uint8)
    module.lib.probe(op, buf(raw), buf(c), c.shape[1], buf(a), a.shape[1], buf(b), b.shape[1], buf(out),
                     out.shape[1], buf(loaded), buf(released))
    return out, loaded.tobytes(), released.tobytes()


def random_bytes(rng, rows, cols):
    return rng.integers(0, 256, (rows, cols), dtype=np.uint8)


def expect_stored(out, tile_bytes):
    """``out`` holds ``tile_bytes`` in its first rows/columns and the sentinel everywhere else."""
    expected = np.full_like(out, 0xAB)
    expected[:tile_bytes.shape[0], :tile_bytes.shape[1]] = tile_bytes
    np.testing.assert_array_equal(out, expected)


# --- the table itself (any CPU) -----------------------------------------------------------------

def test_every_entry_is_probed_and_documented():
    probed = {"loadconfig", "storeconfig", "loadd", "stored", "zero", "release", *DOTS}
    assert set(AMX.ops) == probed
    for name, instr in AMX.ops.items():
        assert instr.meaning and all(f"{{{o}}}" in instr.template for o in instr.tiles), name
    assert DOTS == ["dpbusd", "dpbssd", "dpbsud", "dpbuud", "dpbf16ps"]


def test_unknown_entry_is_an_attribute_error():
    with pytest.raises(AttributeError, match="'amx' has no instruction 'dpbusds'"):
        AMX.dpbusds  # noqa: B018 -- the attribute access is what raises


@pytest.mark.parametrize("shape", [(17, 64), (16, 68), (16, 62), (0, 4), (4, 0), (-1, 4)])
def test_config_refuses_shapes_that_are_not_tiles(shape):
    rows, colsb = shape
    with pytest.raises(ValueError, match=rf"tmm1: shape {rows} rows x {colsb} bytes is not a tile shape"):
        TileConfig(((16, 64), shape))


def test_config_has_at_most_8_tiles():
    with pytest.raises(ValueError, match="at most 8 tiles, got 9"):
        TileConfig(((1, 4),) * 9)


@pytest.mark.slow
def test_config_bytes_follow_palette_1_and_the_c_initializer_agrees():
    config = TileConfig(((16, 64), (0, 0), (3, 12), (1, 4)))
    raw = config.to_bytes()
    assert len(raw) == CONFIG_BYTES and raw[0] == 1 and raw[1:16] == bytes(15)
    assert np.frombuffer(raw[16:48], "<u2").tolist() == [64, 0, 12, 4] + [0] * 12
    assert list(raw[48:]) == [16, 0, 3, 1] + [0] * 12
    source = (f"{AMX.prelude}\n#include <string.h>\n"
              f"static const lo_tilecfg config = {config.c_initializer()};\n"
              "void copy(char *out) { memcpy(out, &config, sizeof config); }")
    module = compile_c(source, "void copy(char *);", AMX.compile_flags)
    out = np.zeros(CONFIG_BYTES, np.uint8)
    module.lib.copy(module.ffi.from_buffer("char[]", out))
    assert out.tobytes() == raw


def test_emit_fills_the_template_when_the_preconditions_hold():
    config = TileConfig(((16, 64), (16, 64), (16, 64)))
    assert config.emit("dpbusd", c=0, a=1, b=2) == "_tile_dpbusd(0, 1, 2)"
    assert config.emit("loadd", t=1, p="x", stride=64) == "_tile_loadd(1, x, 64)"


@pytest.mark.parametrize("shapes, operands, failure", [
    (((16, 64), (12, 64), (16, 64)), dict(c=0, a=1, b=2), "rows(c) == rows(a)"),
    (((16, 64), (16, 32), (16, 64)), dict(c=0, a=1, b=2), "rows(b) == colsb(a) / 4"),
    (((16, 64), (16, 64), (16, 60)), dict(c=0, a=1, b=2), "colsb(c) == colsb(b)"),
    (((16, 64), (16, 64)), dict(c=0, a=1, b=2), "tiles c, a, b are configured (rows > 0)"),
    (((16, 64), (16, 64)), dict(c=0, a=1, b=1), "c, a, b are distinct tiles"),
])
def test_emit_refuses_a_dot_whose_precondition_fails(shapes, operands, failure):
    with pytest.raises(ValueError, match=re.escape(f"dpbusd: precondition '{failure}' fails for c=tmm0 (")):
        TileConfig(shapes).emit("dpbusd", **operands)


def test_emit_refuses_a_tile_number_that_is_not_a_literal_tile():
    with pytest.raises(ValueError, match="operand t=8 is not a tile number 0..7"):
        TileConfig(((16, 64),)).emit("zero", t=8)
    with pytest.raises(ValueError, match="operand t='x' is not a tile number"):
        TileConfig(((16, 64),)).emit("zero", t="x")


@pytest.mark.parametrize("group", [4, 2])
def test_vnni_pack_puts_group_consecutive_k_of_a_column_together(group):
    b = np.arange(7 * 5, dtype=np.int16).reshape(7, 5) + 1
    packed = vnni_pack(b, group)
    assert packed.shape == (-(-7 // group), 5 * group)
    for k in range(packed.shape[0] * group):
        for n in range(5):
            assert packed[k // group, group * n + k % group] == (b[k, n] if k < 7 else 0)


def test_vnni_pack_refuses_bad_arguments():
    with pytest.raises(ValueError, match="group=3 must be 4"):
        vnni_pack(np.zeros((4, 4)), 3)
    with pytest.raises(ValueError, match=r"got shape \(4,\)"):
        vnni_pack(np.zeros(4), 4)


def test_bf16_rounds_to_nearest_even():
    one = np.float32(1.0)
    x = np.array([1.0, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-8 + 2.0**-20, -2.5, np.inf, 3.4e38, np.nan],
                 dtype=np.float32)
    bits = to_bf16(x)
    assert bits[:7].tolist() == [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC020, 0x7F80, 0x7F80]
    assert np.isnan(bf16_to_float32(bits[7]))
    assert bf16_to_float32(to_bf16(one)) == one


# --- the Linux permission (monkeypatched: any CPU) ----------------------------------------------

@pytest.fixture
def no_permission_yet(monkeypatch):
    monkeypatch.setattr(amx_runtime, "_granted", False)
    monkeypatch.setattr(amx_runtime, "cpu_flags", lambda: frozenset(AMX.cpu_flags) | {"avx512f"})
    monkeypatch.setattr(amx_runtime.platform, "machine", lambda: "x86_64")


@pytest.mark.parametrize("code, meaning", [
    (errno.EINVAL, "does not offer AMX tile data"),
    (errno.ENOSPC, "sigaltstack"),
    (errno.EPERM, "seccomp"),
    (errno.EIO, "an unexpected error"),
])
def test_a_refused_permission_names_the_errno_and_its_meaning(no_permission_yet, monkeypatch, code, meaning):
    monkeypatch.setattr(amx_runtime, "_arch_prctl", lambda op, feature: (-1, code))
    with pytest.raises(amx_runtime.AmxUnavailableError) as info:
        amx_runtime.require_amx()
    message = str(info.value)
    assert "arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)" in message
    assert errno.errorcode[code] in message and meaning in message
    assert not amx_runtime.amx_available()


def test_the_permission_is_requested_once(no_permission_yet, monkeypatch):
    calls = []
    monkeypatch.setattr(amx_runtime, "_arch_prctl", lambda op, feature: calls.append((op, feature)) or (0, 0))
    assert amx_runtime.amx_available() and amx_runtime.amx_available()
    amx_runtime.require_amx()
    assert calls == [(0x1023, 18)]


def test_a_cpu_without_amx_is_told_before_asking_linux(no_permission_yet, monkeypatch):
    monkeypatch.setattr(amx_runtime, "cpu_flags", lambda: frozenset({"avx512f", "amx_tile"}))
    monkeypatch.setattr(amx_runtime, "_arch_prctl", lambda op, feature: pytest.fail("asked Linux"))
    with pytest.raises(amx_runtime.AmxUnavailableError, match="/proc/cpuinfo lacks amx_int8, amx_bf16"):
        amx_runtime.require_amx()


def test_another_architecture_is_told(no_permission_yet, monkeypatch):
    monkeypatch.setattr(amx_runtime.platform, "machine", lambda: "aarch64")
    refusal = "needs an x86-64 CPU; this machine is 'aarch64'"
    with pytest.raises(amx_runtime.AmxUnavailableError, match=refusal):
        amx_runtime.require_amx()


@needs_amx
def test_the_real_request_succeeds_here():
    assert amx_runtime._arch_prctl(amx_runtime.ARCH_REQ_XCOMP_PERM, amx_runtime.XFEATURE_XTILEDATA) == (0, 0)


# --- element by element against the meaning (AMX CPUs) ------------------------------------------

@needs_amx
def test_loadconfig_configures_zeroed_tiles_and_release_unconfigures():
    config = TileConfig(((16, 64), (2, 8), (0, 0), (5, 36)))
    out, loaded, released = run_probe(FRESH, config, np.zeros((1, 1), np.uint8))
    expect_stored(out, np.zeros((5, 36), np.uint8))
    assert loaded == config.to_bytes()
    assert released == bytes(CONFIG_BYTES)


@needs_amx
@pytest.mark.parametrize("seed", range(4))
def test_loadd_and_stored_copy_rows_of_colsb_bytes_at_any_stride(seed):
    rng = np.random.default_rng(seed)
    rows, colsb = int(rng.integers(1, MAX_ROWS + 1)), 4 * int(rng.integers(1, MAX_COLSB // 4 + 1))
    source = random_bytes(rng, rows + 2, colsb + int(rng.integers(0, 40)))
    out, _, _ = run_probe(ROUND_TRIP, TileConfig(((0, 0),) * C + ((rows, colsb),)), source)
    expect_stored(out, source[:rows, :colsb])


@needs_amx
def test_zero_clears_a_loaded_tile():
    rng = np.random.default_rng(1)
    out, _, _ = run_probe(ZERO, TileConfig(((0, 0),) * C + ((7, 44),)), random_bytes(rng, 7, 50))
    expect_stored(out, np.zeros((7, 44), np.uint8))


def dot_config(m, n, colsb_a):
    shapes = [(0, 0)] * 8
    shapes[C], shapes[A], shapes[B] = (m, 4 * n), (m, colsb_a), (colsb_a // 4, 4 * n)
    return TileConfig(tuple(shapes))


def from_b_tile(b, group):
    """B[k, n] of a B tile in the VNNI layout: b[k // group][group * n + k % group]."""
    rows, width = b.shape
    return b.reshape(rows, width // group, group).transpose(0, 2, 1).reshape(rows * group, width // group)


# (M, N, bytes per A row): full tiles and tails in every dimension
DOT_SHAPES = [(16, 16, 64), (5, 11, 36), (1, 1, 4), (16, 3, 60), (9, 16, 8)]
INT_TYPES = {"u8": np.uint8, "s8": np.int8}


@needs_amx
@pytest.mark.parametrize("name", [n for n in DOTS if AMX.ops[n].dot.acc == "int32"])
@pytest.mark.parametrize("m, n, colsb_a", DOT_SHAPES)
def test_int8_dot_products_are_exact(name, m, n, colsb_a):
    dot = AMX.ops[name].dot
    rng = np.random.default_rng(m * 1000 + n * 100 + colsb_a)
    a, b = random_bytes(rng, m, colsb_a + 12), random_bytes(rng, colsb_a // 4, 4 * n + 20)
    c = rng.integers(-2**31, 2**31, (m, n + 3), dtype=np.int64).astype(np.int32)   # wraps when added to
    out, _, _ = run_probe(DOTS.index(name), dot_config(m, n, colsb_a), c.view(np.uint8), a, b)
    a_values = a[:, :colsb_a].view(INT_TYPES[dot.a]).astype(np.int64)
    b_values = from_b_tile(b[:, :4 * n].view(INT_TYPES[dot.b]), dot.group).astype(np.int64)
    expected = (c[:, :n] + a_values @ b_values).astype(np.uint32).astype(np.int32)   # int32 wrapping
    expect_stored(out, expected.view(np.uint8))


@needs_amx
@pytest.mark.parametrize("m, n, colsb_a", DOT_SHAPES)
def test_bf16_dot_product_is_within_the_float32_accumulation_bound(m, n, colsb_a):
    """bf16 inputs, fp32 accumulation: |C - exact| <= (K + 1) * 2**-24 * (|C0| + sum |a b|) with K
    products (each exact in fp32), i.e. one rounding per addition; the inputs are bf16 already."""
    k = colsb_a // 2
    rng = np.random.default_rng(m * 1000 + n * 100 + k)
    a = to_bf16(rng.standard_normal((m, k + 6)).astype(np.float32))
    b = to_bf16(rng.standard_normal((k // 2, 2 * n + 10)).astype(np.float32))
    c = rng.standard_normal((m, n + 3)).astype(np.float32)
    out, _, _ = run_probe(DOTS.index("dpbf16ps"), dot_config(m, n, colsb_a), c.view(np.uint8),
                          a.view(np.uint8), b.view(np.uint8))
    a_values = bf16_to_float32(a[:, :k]).astype(np.float64)
    b_values = bf16_to_float32(from_b_tile(b[:, :2 * n], 2)).astype(np.float64)
    exact = c[:, :n] + a_values @ b_values
    bound = (k + 1) * 2.0**-24 * (np.abs(c[:, :n]) + np.abs(a_values) @ np.abs(b_values))
    result = out[:m, :4 * n].copy().view(np.float32)
    assert np.all(np.abs(result - exact) <= bound), np.max(np.abs(result - exact) / bound)
    expect_stored(out, result.view(np.uint8))   # and nothing stored outside the tile


@needs_amx
@pytest.mark.parametrize("a, b, c", [
    (2.0**-133, 2.0**100, 0.0),     # denormal bf16 input
    (2.0**-70, 2.0**-70, 0.0),      # denormal product
    (0.0, 0.0, 2.0**-140),          # denormal accumulator
])
def test_bf16_dot_product_flushes_denormals_to_zero(a, b, c):
    """1 x 1 tiles of one bf16 pair: c + a * b + 0 * 0 is 0 where an operand or the result is denormal."""
    pair = lambda x: to_bf16(np.array([[x, 0.0]], np.float32)).view(np.uint8)
    accumulator = np.array([[c]], np.float32).view(np.uint8)
    out, _, _ = run_probe(DOTS.index("dpbf16ps"), dot_config(1, 1, 4), accumulator, pair(a), pair(b))
    expect_stored(out, np.zeros((1, 4), np.uint8))


# --- the peak and the GEMM micro-kernel (AMX CPUs) ----------------------------------------------

@needs_amx
@pytest.mark.slow
def test_amx_peaks():
    """Both peaks are measured (finite, positive); how they compare is the machine's and its load's
    (int8 came out only 1.1x bf16 with the suite's other worker compiling), so what is checked of
    their ratio is the work an instruction counts: a TDPBUSD's 64-deep dot, twice a TDPBF16PS's."""
    for dtype in amx_runtime.PEAK_DOTS:
        assert 0 < amx_runtime.amx_peak_gops(dtype) < float("inf")
    depth = {dtype: MAX_COLSB * AMX.ops[name].dot.group // 4 for dtype, name in amx_runtime.PEAK_DOTS.items()}
    assert depth == {"int8": 64, "bf16": 32}


def test_amx_peak_refuses_other_dtypes():
    with pytest.raises(ValueError, match="dtype='float32' is not supported; allowed: 'int8', 'bf16'"):
        amx_runtime.amx_peak_gops("float32")


def test_pack_b_follows_the_chunks():
    gemm = amx_runtime.AmxGemm(1, 21, 100)
    assert gemm.starts == (0, 36)
    b = np.random.default_rng(0).integers(-128, 128, (100, 21)).astype(np.int8)
    packed = gemm.pack_b(b)
    assert packed.shape == (2, 2, 16, 64)
    for t, q, g, byte in np.ndindex(packed.shape):
        k, n = gemm.starts[q] + 4 * g + byte % 4, 16 * t + byte // 4
        fresh = 64 * q <= k < 100 and n < 21           # the last chunk repeats k 36..63: zeros there
        assert packed[t, q, g, byte] == (b[k, n] if fresh else 0)


GEMM_SHAPES = [(1, 1, 1), (16, 16, 64), (32, 32, 128), (5, 3, 7), (37, 21, 100), (70, 50, 130), (33, 17, 63),
               (48, 40, 200)]


@needs_amx
@pytest.mark.parametrize("m, n, k", GEMM_SHAPES)
def test_amx_gemm_is_exact(m, n, k):
    rng = np.random.default_rng(m * n * k)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    gemm = amx_runtime.AmxGemm(m, n, k)
    out = np.full((m, n), -1, np.int32)
    assert gemm(a, gemm.pack_b(b), out) is out
    np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))


def off_a_cache_line(array, offset=16):
    """A copy of ``array`` whose data starts ``offset`` bytes past a 64-byte boundary."""
    raw = np.empty(array.nbytes + 64 + offset, np.uint8)
    start = -raw.ctypes.data % 64 + offset
    copy = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    copy[...] = array
    return copy


@needs_amx
def test_amx_gemm_takes_operands_off_a_cache_line():
    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, (40, 130)).astype(np.uint8)
    b = rng.integers(-128, 128, (130, 20)).astype(np.int8)
    gemm = amx_runtime.AmxGemm(40, 20, 130)
    packed = gemm.pack_b(b)
    assert packed.ctypes.data % 64 == 0
    out = off_a_cache_line(np.zeros((40, 20), np.int32), 4)
    gemm(off_a_cache_line(a), off_a_cache_line(packed, 32), out)
    np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))


def test_amx_gemm_refuses_bad_shapes_and_types():
    with pytest.raises(ValueError, match="AmxGemm: k=0 must be a positive int"):
        amx_runtime.AmxGemm(4, 4, 0)
    gemm = amx_runtime.AmxGemm(5, 3, 7)
    with pytest.raises(ValueError, match=r"b must be int8 of shape \(7, 3\), got uint8 \(7, 3\)"):
        gemm.pack_b(np.zeros((7, 3), np.uint8))
    packed = gemm.pack_b(np.zeros((7, 3), np.int8))
    with pytest.raises(ValueError, match=r"a must be uint8 of shape \(5, 7\), got int8 \(5, 7\)"):
        gemm(np.zeros((5, 7), np.int8), packed)
    with pytest.raises(ValueError, match=r"b_packed must be int8 of shape \(1, 1, 2, 64\)"):
        gemm(np.zeros((5, 7), np.uint8), packed[:, :, :1])
    with pytest.raises(ValueError, match=r"out must be C-contiguous int32 of shape \(5, 3\)"):
        gemm(np.zeros((5, 7), np.uint8), packed, np.zeros((5, 3), np.int64))
