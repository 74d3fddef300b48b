"""Limits refused up front: 64-bit indices where an index may exceed 2^31 - 1 (small kernels keep
int), lane indices that would overflow refused, and memory estimates checked before allocating."""
import mmap
import re
import tracemalloc

import numpy as np
import pytest

import loopopt as lo
from loopopt.buffers import MEMORY_ENV, available_memory
from loopopt.cli import main
from loopopt.codegen import generate
from loopopt.codegen.params import index_ctype
from loopopt.measure import tolerance, verify
from loopopt.quant_reference import random_call
from loopopt.targets.x86.isa import ISAS

# an input of 3 x 32768 x 32768 = 3.2e9 elements (12.9 GB), of which a stride of 257 reads 128 x 128
HUGE = dict(in_channels=3, out_channels=1, kernel_size=1, stride=257, height=32768, width=32768)
MAP_NORESERVE = 0x4000      # Linux: reserve no swap for the mapping (untouched pages cost nothing)


def test_index_type_follows_the_sizes():
    assert index_ctype(lo.Schedule(lo.Conv2d(**HUGE))) == "ptrdiff_t"
    assert index_ctype(lo.Schedule(lo.get_layer("resnet50.conv2_x", batch=64))) == "int"
    assert index_ctype(lo.Schedule(lo.Matmul(2**15, 2**15 - 1, 1))) == "int"       # C: just under 2^30
    assert index_ctype(lo.Schedule(lo.Matmul(2**15, 2**15, 1))) == "ptrdiff_t"
    # 16383 channels of 256 x 256 fit; blocked by 16 they are padded to 2^30 elements
    op = lo.Conv2d(16 * 1024 - 1, 1, 1, height=256, width=256)
    assert index_ctype(lo.Schedule(op)) == "int"
    assert index_ctype(lo.Schedule(op).layout("I", "NCHW16c")) == "ptrdiff_t"


@pytest.mark.parametrize("isa", ["avx512", "avx2", "scalar"])
@pytest.mark.parametrize("spec", [None, lo.QuantSpec("uint8", True, False, "uint8")],
                         ids=["float", "quantized"])
def test_huge_kernels_declare_wide_indices(isa, spec):
    s = (lo.Schedule(lo.Conv2d(**HUGE, quant=spec)).tile(ow=16).reorder("c", "kh", "kw", "ow_i")
         .vectorize("ow_i").register_block("c"))
    source = generate(s, ISAS[isa]).source
    body = source[source.index("void lo_kernel("):]
    loops = {name: ctype for ctype, name in re.findall(r"for \((\w+) (\w+) =", body)}
    assert {"n", "k", "oh", "ow_o", "c", "kh", "kw"} <= set(loops)
    assert {t for name, t in loops.items() if name != "lo_j"} == {"ptrdiff_t"}     # lanes stay int
    if spec is not None:      # the activation sums (asymmetric weights) and the fused epilogue's positions
        assert "for (ptrdiff_t oh = 0; oh < 128; ++oh)" in body
        assert set(re.findall(r"const (\w+) lo_[nchw] =", body)) == {"ptrdiff_t"}


def sparse_input(op, sample):
    """The op's input as a mapping of unbacked pages holding ``sample`` at the strided positions read."""
    shape = op.tensor("I").shape
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE
    pages = mmap.mmap(-1, int(np.prod(shape)) * 4, flags=flags)
    x = np.frombuffer(pages, dtype=np.float32).reshape(shape)
    x[:, :, ::op.stride[0], ::op.stride[1]] = sample
    return x


@pytest.mark.parametrize("isa", lo.available_isas())
def test_a_kernel_indexes_past_two_to_the_31(isa):
    """The last input element read sits 3.2e9 elements in: int offsets would wrap (and crash). The
    input is a sparse mapping, so only the pages read are ever touched (about 50 MB)."""
    op = lo.Conv2d(**HUGE)
    s = lo.Schedule(op).reorder("c", "kh", "kw", "ow").vectorize("ow")        # I strided by 257 lanes
    kernel = s.compile(isa)
    rng = np.random.default_rng(0)
    sample = rng.standard_normal((1, 3, op.out_height, op.out_width)).astype(np.float32)
    w, b = rng.standard_normal((1, 3, 1, 1)).astype(np.float32), np.ones(1, np.float32)
    arrays = {"I": sparse_input(op, sample), "W": w, "B": b, "O": np.zeros(op.tensor("O").shape, np.float32)}
    kernel.run(kernel.bind(arrays))
    expected = np.einsum("nchw,kc->nkhw", sample.astype(np.float64), w[:, :, 0, 0].astype(np.float64)) + 1
    np.testing.assert_allclose(arrays["O"], expected, rtol=1e-5, atol=1e-5)


def test_lane_indices_that_would_overflow_are_refused():
    op = lo.Conv2d(**HUGE)
    # along c the input is strided by 32768 * 32768 elements: lane 15 would be 1.6e10 away
    strided = lo.Schedule(op).reorder("kh", "kw", "c").vectorize("c")
    for isa in ("avx512", "avx2"):
        with pytest.raises(lo.ScheduleError, match=r"stride of 1073741824 elements, too large for the 32-bit "
                                                   r"lane indices"):
            generate(strided, ISAS[isa])
    generate(strided, ISAS["scalar"])
    # along kw_c (filter column and channel fused) the input is gathered from its start, 3.2e9 elements
    wide = lo.Conv2d(**{**HUGE, "kernel_size": (1, 2)})
    gathered = lo.Schedule(wide).reorder("kh", "kw", "c").fuse("kw", "c").vectorize("kw_c")
    with pytest.raises(lo.ScheduleError, match=r"gathers I, whose 3221225472 elements are too many for the "
                                               r"32-bit lane indices"):
        generate(gathered, ISAS["avx512"])


# --- memory ---------------------------------------------------------------------------------------

def test_memory_limit_is_validated(monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, "8G")
    with pytest.raises(ValueError, match="LOOPOPT_MEMORY_LIMIT='8G' is not a number of bytes"):
        available_memory()
    monkeypatch.setenv(MEMORY_ENV, "123456")
    assert available_memory() == (123456, "LOOPOPT_MEMORY_LIMIT")
    monkeypatch.delenv(MEMORY_ENV)
    assert available_memory()[0] > 0


def test_buffers_are_refused_before_they_are_allocated(monkeypatch):
    op = lo.Conv2d(16, 16, 3, padding=1, height=32, width=32)
    kernel = lo.Schedule(op).layout("I", "NCHW16c").compile("scalar")
    parts = kernel.buffer_bytes()
    assert parts == {"packed buffers": 4 * (16 * 32 * 32 * 2 + 16 * 16 * 9 + 16), "workspace": 0}
    x = op.random_inputs()
    monkeypatch.setenv(MEMORY_ENV, str(sum(parts.values()) - 1))
    with pytest.raises(lo.MemoryLimitError, match=r"the buffers of Conv2d\(16, 16, .*\) needs 0.14 MB "
                                                  r"\(packed buffers 0.14 MB\) but 0.14 MB is available "
                                                  r"\(LOOPOPT_MEMORY_LIMIT; set LOOPOPT_MEMORY_LIMIT"):
        kernel(x["I"], x["W"], x["B"])
    monkeypatch.setenv(MEMORY_ENV, str(sum(parts.values())))
    kernel(x["I"], x["W"], x["B"])


def test_quantized_buffers_count_the_workspace():
    op = lo.Conv2d(6, 10, 3, padding=1, height=9, width=11, quant=lo.QuantSpec("uint8", True, False, "uint8"))
    kernel = lo.Schedule(op).compile("scalar")
    args, params = random_call(op)
    buffers = kernel.prepare(*args, **params)
    allocated = {name: array.nbytes for name, array in buffers.arrays.items()}
    packed = sum(allocated.pop(name) for name in ("I", "W", "B", "O"))
    assert kernel.buffer_bytes() == {"packed buffers": packed, "workspace": sum(allocated.values())}
    assert kernel.workspace_bytes == packed + sum(allocated.values())


def test_huge_ops_are_refused_before_measuring(monkeypatch):
    kernel = lo.Schedule(lo.Matmul(100_000, 100_000, 100_000)).compile("scalar")
    assert kernel.call_bytes() == {"inputs": 8 * 10**10, "packed buffers": 12 * 10**10, "workspace": 0,
                                   "output": 4 * 10**10}
    monkeypatch.setenv(MEMORY_ENV, str(10**11))     # the check does not depend on this machine's memory
    with pytest.raises(lo.MemoryLimitError, match=r"measuring Matmul\(m=100000, n=100000, k=100000\) needs "
                                                  r"240.00 GB \(inputs 80.00 GB, packed buffers 120.00 GB, "
                                                  r"output 40.00 GB\) but 100.00 GB is available"):
        lo.measure(kernel)


def test_cli_prints_the_memory_error_on_one_line(monkeypatch, capsys):
    monkeypatch.setenv(MEMORY_ENV, str(10**9))
    assert main(["compare", "--matmul", "100000,100000,100000", "--schedules", "naive", "--no-reuse",
                 "--quiet", "--isa", "scalar"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "GB" in err
    assert err.startswith("loopopt: error: measuring Matmul(m=100000, n=100000, k=100000) needs 240.00 GB")


@pytest.mark.parametrize("op", [lo.Conv2d(16, 24, 3, padding=1, batch=3, height=20, width=20),
                                lo.Conv2d(8, 8, 3, padding=1, groups=8, batch=2, height=30, width=30),
                                lo.Matmul(40, 300, 200)], ids=["conv", "depthwise", "matmul"])
def test_the_reference_estimate_bounds_what_verification_holds(op):
    inputs = op.random_inputs()
    block = [inputs[t][:1] if t == op.inputs[0] else inputs[t] for t in op.call_tensors]
    result = np.zeros((1,) + op.tensor(op.output).shape[1:], np.float32)
    tracemalloc.start()
    expected, bound = op.reference(*block), tolerance(op, dict(zip(op.call_tensors, block, strict=True)))
    np.all(np.abs(result - expected) <= bound)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak <= op.reference_bytes(1) <= 4 * peak


def test_the_reference_is_computed_in_blocks(monkeypatch):
    op = lo.Conv2d(4, 8, 3, padding=1, batch=7, height=12, width=12)
    kernel = lo.Schedule(op).tile(k=8).vectorize("k_i").compile()
    assert op.reference_blocks() == [slice(0, 7)]
    whole = verify(kernel)
    monkeypatch.setattr(lo.ops, "REFERENCE_BLOCK_BYTES", op.reference_bytes(3))
    assert op.reference_blocks() == [slice(0, 3), slice(3, 6), slice(6, 7)]
    assert verify(kernel) == whole and whole[0]
    # a wrong value in the last block is seen
    right = kernel.output
    last = (np.arange(7) == 6)[:, None, None, None]
    monkeypatch.setattr(kernel, "output", lambda buffers: right(buffers) + last)
    ok, error = verify(kernel)
    assert not ok and error > 0.5


def test_an_unverifiable_reference_is_reported_not_passed(monkeypatch):
    op = lo.Conv2d(4, 8, 3, padding=1, batch=2, height=12, width=12)
    kernel = lo.Schedule(op).compile("scalar")
    limit = op.reference_bytes(1) - 1          # enough for the call, not for one batch item's reference
    assert sum(kernel.call_bytes().values()) < limit
    monkeypatch.setenv(MEMORY_ENV, str(limit))
    timing = lo.measure(kernel, repeats=3)
    assert not timing.verified and np.isnan(timing.max_error)
    assert timing.unverified.startswith(f"the reference of {op!r} (one row of it) needs")
    assert "not verified: the reference of" in str(timing)
