"""The cuda target's GEMV family (``targets/cuda/gemv.py``, ``dataflows.gpu_gemv``) without a GPU: float16,
int8 and ternary (i2_s and one byte a weight) weights over odd sizes, reduction tails, several 16-byte
vectors a lane, transposed operands, up to 8 rows and every QuantSpec the family takes, host-emulated
(each warp's lanes, then the butterfly) against the op's reference, integers bit for bit; the
refusals; an nvcc build for sm_90 without spills."""

import pytest
from helpers import needs, sass, tiers
from hypothesis import strategies as st

import loopopt as lo
from loopopt.dataflows import gpu_gemv
from loopopt.measure import checked
from loopopt.schedule import ScheduleError
from loopopt.targets.cuda import gemv, toolchain
from loopopt.targets.cuda.emulate import emulate
from loopopt.targets.cuda.gemv import MAX_ROWS

SPECS = st.one_of(st.none(), st.builds(lo.QuantSpec, activation=st.sampled_from(["int8", "uint8"]),
                                       per_channel=st.booleans(), output=st.sampled_from(lo.quant.OUTPUTS),
                                       weight=st.sampled_from(["int8", "ternary"])))


@st.composite
def gemv_cases(draw):
    """A decode-shaped Matmul (float16 where ``spec`` is None), the weights' format and the knobs (warps,
    columns, the rounds loaded together, the warps splitting k, the activations staged in shared memory)."""
    spec = draw(SPECS)
    op = lo.Matmul(draw(st.integers(1, MAX_ROWS)), draw(st.integers(1, 70)), draw(st.integers(1, 2300)),
                   trans_a=draw(st.booleans()), trans_b=draw(st.booleans()),
                   dtype="float16" if spec is None else "float32", quant=spec)
    ternary_format = draw(st.sampled_from(["i2_s", "int8"])) if spec is not None and spec.ternary else None
    weights = 8 if spec is None else 64 if ternary_format == "i2_s" else 16
    split = min(draw(st.sampled_from([None, 2, 3])) or 1, -(-op.k // weights))
    knobs = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.sampled_from([None, 1, 3])), split
    return op, ternary_format, *knobs, draw(st.booleans())


def _check(case):
    op, weight_format, warps, columns, depth, split, stage = case
    ok, error, _ = checked(emulate(gpu_gemv(op, warps, columns, weight_format, depth, split, stage)), seed=5)
    assert ok, error        # integer and requantized outputs: bit for bit


# each example builds a host kernel (about 0.5 s): one in the quick tier
test_gemv_kernels_emulated, test_more_gemv_kernels_emulated = tiers(_check, 1, 5, gemv_cases())


def test_a_ternary_i2s_gemv_of_two_rounds_of_lanes_is_exact():
    """2200 inputs: 35 i2_s vectors of 64 a row, so lanes 0-2 take two and the last one's tail is padding;
    uint8 activations with their zero point, requantized to uint8."""
    op = lo.Matmul(2, 9, 2200, trans_a=True, quant=lo.QuantSpec(weight="ternary", output="uint8"))
    schedule = gpu_gemv(op, warps=3, columns=2)
    assert schedule.layout_of("B").tag == "NK64k" and schedule.weight_format_mode == "i2_s"
    kernel = emulate(schedule)
    assert kernel.tensor_bytes("B") == 9 * 35 * 16          # 2 bits a weight, each row padded to 64
    ok, error, _ = checked(kernel, seed=9)
    assert ok, error


def test_a_gemv_of_whole_batches_then_the_rest_with_the_tail_is_exact():
    """k = 1000 in float16: 125 vectors, 4 rounds a lane (lanes 29-31 have 3); depth 2 runs one whole batch
    of 2 rounds, then the 2 left with the tail's guard (the i2_s test above: no whole batch)."""
    kernel = emulate(gpu_gemv(lo.Matmul(3, 21, 1000, dtype="float16"), warps=2, columns=3, depth=2))
    assert "lo_end, 0, 2, 0, lo_acc);" in kernel.source and "lo_end, 2, 2, 1, lo_acc);" in kernel.source
    ok, error, _ = checked(kernel, seed=11)
    assert ok, error


def test_a_gemv_with_k_split_over_warps_in_uneven_shares_is_exact():
    """k = 2200 in i2_s: 35 vectors in 3 shares of 12, 12 and 11 (a warp each, 3 x 3 warps a block);
    the last share's lanes 11-31 have no vector, and the shares are added in order."""
    op = lo.Matmul(2, 9, 2200, trans_a=True, quant=lo.QuantSpec(weight="ternary", output="uint8"))
    schedule = gpu_gemv(op, warps=3, columns=2, split=3)
    assert schedule.steps[-1].primitive == "split"
    assert [loop.extent for loop in schedule.loops][-2:] == [3, 768]
    kernel = emulate(schedule)
    assert "k split over 3 warps, 12 vectors each" in kernel.source
    assert "lo_share == 2 ? 11 : 12" in kernel.source
    ok, error, _ = checked(kernel, seed=9)
    assert ok, error
    assert "k over 3 warps of a block, 12 vectors each; added in order" in schedule.pseudocode()


def test_the_i2s_decode_masks_its_fields_in_place_without_shifts():
    """Each 2-bit field is masked where it lies (4^f times the code) and its dp4a sum divided back by an
    arithmetic shift: no shift of the weights. A decode that forgot the division would be 4-64x off."""
    source = emulate(gpu_gemv(lo.Matmul(1, 8, 256, quant=lo.QuantSpec(weight="ternary")))).source
    assert "ws[q] & (0x03030303u << (2 * f))" in source and ">> (2 * f)" not in source
    assert "field[0] + (field[1] >> 2) + (field[2] >> 4) + (field[3] >> 6)" in source


TERNARY = lo.QuantSpec(weight="ternary")
# i2_s, k in 3 uneven shares (12, 12, 11 vectors): the 3 warps (96 threads) of a block copy the 140 vectors
# of each of 2 rows, threads 0-43 two of them
STAGED = (lo.Matmul(2, 9, 2200, trans_a=True, quant=lo.QuantSpec(weight="ternary", output="uint8")),
          {"warps": 1, "columns": 3, "split": 3})


@pytest.mark.parametrize("op, knobs", [
    STAGED,
    pytest.param(lo.Matmul(3, 21, 1000, dtype="float16"), {"warps": 2, "columns": 3, "depth": 2},
                 marks=pytest.mark.slow),
    pytest.param(lo.Matmul(5, 29, 77, quant=lo.QuantSpec(activation="uint8", output="int8")),
                 {"warps": 2, "columns": 1, "split": 2}, marks=pytest.mark.slow)],
    ids=["i2_s", "float16", "int8"])
def test_gemvs_with_their_activations_staged_once_a_block_are_exact(op, knobs):
    """The emulation copies each block's rows thread by thread into a buffer poisoned first (a vector no
    thread copies reads as garbage), the lanes read them there, and i2_s's activation sums come from the
    block's warps, added in order."""
    schedule = gpu_gemv(op, stage=True, **knobs)
    assert schedule.stages == ((op.inputs[0], "j_i_i"),)
    kernel = emulate(schedule)
    assert "activations staged once a block in shared memory" in kernel.source
    ok, error, _ = checked(kernel, seed=9)
    assert ok, error
    assert f"stage {op.inputs[0]}[0..{op.m}, :] in shared memory" in schedule.pseudocode()


def _staged_transposed(monkeypatch):      # copied row-major, read as [row][field][vector]
    monkeypatch.setattr(gemv, "_STAGE", gemv._STAGE.replace(
        "lo_sx[(i * {x_vectors} + e % {x_vectors}) * {vectors} + e / {x_vectors}],",
        "lo_sx[i * {all} + e],"))


def _a_vector_left_unstaged(monkeypatch):    # each thread copies its first vector of a row only
    monkeypatch.setattr(gemv, "_STAGE", gemv._STAGE.replace("e += {threads})\n            LO_STAGE16",
                                                            "e += {all})\n            LO_STAGE16"))


def _one_warp_s_sums(monkeypatch):      # the activations' sum of the block's first warp only
    monkeypatch.setattr(gemv, "_STAGE_IN_ORDER", gemv._STAGE_IN_ORDER.replace("w < {block_warps}", "w < 1"))


@pytest.mark.parametrize("mutate", [
    pytest.param(_a_vector_left_unstaged, id="a vector left unstaged"),
    pytest.param(_staged_transposed, id="staged in another layout", marks=pytest.mark.slow),
    pytest.param(_one_warp_s_sums, id="the sums of one warp", marks=pytest.mark.slow)])
def test_the_emulation_of_a_staged_gemv_misses_when_the_staging_is_wrong(monkeypatch, mutate):
    mutate(monkeypatch)
    ok, error, _ = checked(emulate(gpu_gemv(STAGED[0], stage=True, **STAGED[1])), seed=9)
    assert not ok, error


def test_a_contraction_with_a_matrix_product_s_roles_runs_the_gemv_kernel_and_is_exact():
    """Its own dim names (r, c, d) and letters: the layouts and loops follow the roles."""
    op = lo.Contraction("O[r,c] += X[r,d] * W[c,d]", dict(r=3, c=9, d=70), quant=TERNARY)
    schedule = gpu_gemv(op, warps=2, columns=2)
    assert schedule.layouts == (("X", "RD64d"), ("W", "CD64d"), ("O", "RC"))
    assert [loop.axis for loop in schedule.loops if loop.name in ("c_o", "c_i_o")] == ["block.x", "warp.x"]
    ok, error, _ = checked(emulate(schedule), seed=3)
    assert ok, error



@pytest.mark.parametrize("make, message", [
    (lambda: gpu_gemv(lo.Matmul(9, 64, 64, dtype="float16")), r"has 9 rows; .* at most 8 rows"),
    (lambda: lo.Schedule(lo.Matmul(1, 64, 64, batch=2, dtype="float16")).split("j", 4).bind("j_o", "block.x")
     .bind("j_i", "warp.x"), r"position dims \('b', 'i'\); .* take one \(the rows\)"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 64)), r"multiplies float32; .* take float16, int8 or ternary"),
    (lambda: gpu_gemv(lo.Gemm(1, 64, 64, dtype="float16")),
     r"Gemm\(.*\) adds a bias or scales its sums; the cuda GEMV kernels .* take a plain matrix product"),
    (lambda: gpu_gemv(lo.Conv2d(8, 8, 1, height=2, width=2, dtype="float16")), r"has 2 sliding windows"),
    (lambda: gpu_gemv(lo.Contraction("Y[r,c] += X[r,d,e] * W[c,d,e]", dict(r=1, c=8, d=4, e=4),
                                     dtype="float16")),
     r"reduces over \['d', 'e'\] .* take one reduction dim"),
    (lambda: gpu_gemv(lo.Contraction("O[r,c] += X[r,c,d] * W[c,d]", dict(r=1, c=8, d=4), dtype="float16")),
     r"reads X\[r,c,d\]; .* take the activations at \(r, d\) and the weights at \(c, d\)"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 64, quant=lo.QuantSpec(weight="uint8"))), r"has uint8 weights"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 64, quant=lo.QuantSpec(weight_symmetric=False))),
     r"has asymmetric int8 weights"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 64, quant=TERNARY)).layout("B", "NK16k"),
     r"B is in layout 'NK16k'; the cuda GEMV kernels of i2_s weights take 'NK64k'"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 64, quant=TERNARY)).split("k", 16),
     r"split\('k', 16\): the cuda GEMV kernels split k into warps' shares of whole 16-byte vectors "
     r"\(a multiple of 64 i2_s weights\)"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 512, quant=TERNARY)).split("k", 256).split("k_i", 64),
     r"dim 'k' as one loop, or split once into warps' shares"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 512, quant=TERNARY), split=2).unroll("k_o"),
     r"unroll\('k_o'\): the cuda GEMV kernels run the shares of k on 2 warps; unroll 'k_i'"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 64, quant=TERNARY), split=2),
     r"split=2: the GEMV's k holds 1 vectors of 64 weights; split it into 1 to 1"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 4096, dtype="float16"), warps=16, split=3),
     r"16 warps x 3 shares of k: 1536 threads a block; the cuda GEMV kernels run at most 1024"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 64, dtype="float16")).unroll("i"), r"unroll\('i'\): .* only dim 'k'"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 64, dtype="float16")).vectorize("k"), r"vectorize\(.*\): .* layout"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 64, dtype="float16")).clip(0.0, 1.0), r"fuse no epilogue"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 64, quant=TERNARY), weight_format="tl1"),
     r"weight_format\('tl1'\): the cuda GEMV kernels take ternary weights as 'int8' or 'i2_s'"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 64, dtype="float16"), weight_format="i2_s"),
     r"stores ternary weights"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 64, dtype="float16")).stage("B", "j_i_i"),
     r"stage\('B', \.\.\.\): the cuda GEMV kernels stage only the activations 'A' \(each weight is read "
     r"once\)"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 64, dtype="float16")).stage("A", "k"),
     r"stage\('A', 'k'\): .* stage whole rows of the activations once a block: stage at the loop of a "
     r"warp's columns 'j_i_i'"),
    (lambda: gpu_gemv(lo.Matmul(1, 64, 64, dtype="float16")).stage("A", "j_i_i", stages=2),
     r"stage\('A', 'j_i_i', 2\): .* by its threads: no ring of stages and no TMA engine"),
    (lambda: gpu_gemv(lo.Matmul(5, 64, 6000, dtype="float16"), stage=True),
     r"stage\('A', 'j_i_i'\): 5 row\(s\) of 12000 bytes of activations take 60000 bytes of shared memory; "
     r"the cuda GEMV kernels stage at most 49152 a block"),
])
def test_gemv_schedules_the_family_cannot_run_are_refused(make, message):
    with pytest.raises(ScheduleError, match=message):
        emulate(make())


@pytest.mark.slow        # three nvcc builds
@needs(toolchain.nvcc)
def test_decode_gemvs_build_for_sm_90_without_spills():
    """No local memory (the ternary kernels with k split over 2 warps a block and with the activations
    staged too). The staged kernel copies its activations by cp.async (``LDGSTS``) ahead of its first weight
    load and, before the block's barrier, waits for its copies' group (``DEPBAR.LE SB0``) while its
    weights stay in flight. The float16 kernel at k = 11008 (43 rounds a lane: 5 batches of 8, then 3
    with the tail) issues a batch's 16 loads (8 weight vectors and 8 of activations) before its first
    FMA: ptxas keeps them together (``__launch_bounds__(threads, 1)``) and no round's guard splits them."""
    for op, knobs in ((lo.Matmul(1, 4096, 4096, quant=lo.QuantSpec(activation="int8", weight="ternary")),
                       {"warps": 4, "columns": 2, "split": 2}),
                      (lo.Matmul(1, 4096, 11008, quant=lo.QuantSpec(activation="int8", weight="ternary")),
                       {"warps": 8, "columns": 4, "stage": True}),
                      (lo.Matmul(1, 4096, 11008, dtype="float16"), {})):
        kernel = gpu_gemv(op, **knobs).compile(target="cuda", isa="sm_90")
        assert kernel.build.spill_bytes == 0 and 0 < kernel.build.registers <= 255, kernel.report
        assert " 0 bytes stack frame" in kernel.report, kernel.report     # the split's sums stay in registers
        assert ("#define LO_DOT4 lo_dot4_ss" in kernel.printed.source) == (op.quant is not None)
        code = sass(kernel)
        if "stage" in knobs:
            first_weight, barrier = code.index("LDG.E.128"), code.index("BAR.SYNC")
            assert "LDGSTS.E" in code[:first_weight] and "LDGDEPBAR" in code[:first_weight]
            assert "DEPBAR.LE SB0, 0x0" in code[first_weight:barrier], code[:barrier]
    before_first_fma = code[:code.index(" FFMA ")]
    assert before_first_fma.count("LDG.E.128") == 16, before_first_fma
