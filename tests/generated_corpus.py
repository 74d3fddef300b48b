"""A fixed corpus of (schedule, ISA) pairs whose generated C is hashed, so that a refactor of
codegen can prove it left every kernel byte-identical (tests/test_generated_c.py)."""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

from helpers import conv_dot_schedule

import loopopt as lo
from loopopt.analysis.analytical import region_nest
from loopopt.analysis.items import item_space
from loopopt.analysis.trace import nest_c
from loopopt.codegen import generate
from loopopt.codegen.instr import tables
from loopopt.dataflows import output_stationary
from loopopt.targets.binary import generate_binary
from loopopt.targets.neon import mmla
from loopopt.targets.neon.binary import POPCOUNT as BINARY_POPCOUNT
from loopopt.targets.neon.binary import VARIANT as BINARY_VARIANT
from loopopt.targets.neon.isa import BFDOT_NAME, NEON
from loopopt.targets.x86.isa import ISAS

SCHEDULES = Path(__file__).resolve().parent.parent / "schedules"
CODEGEN_ISAS = ("avx512", "avx2", "scalar")
# corpus entries also printed from the NEON tables (every tier: a few)
NEON_ENTRIES = ("resnet50.conv2_x@resnet50.conv2_x", "resnet50.conv2_x.int8@resnet50.conv2_x",
                "mobilenetv2.block2.depthwise.int8@mobilenetv2.block2.depthwise",
                "output_stationary@strided.q1", "output_stationary@conv.q0.dequantize")
QUANT_SPECS = (lo.QuantSpec("uint8", True, True, "float32"), lo.QuantSpec("int8", True, False, "uint8"),
               lo.QuantSpec("uint8", False, False, "int8"),
               lo.QuantSpec("int8", True, False, "int32", weight="uint8"))
SMALL_CONVS = (
    ("conv", dict(in_channels=6, out_channels=10, kernel_size=3, padding=1, height=9, width=11)),
    ("strided", dict(in_channels=5, out_channels=7, kernel_size=(3, 2), stride=(2, 1), padding=(1, 0),
                     dilation=(1, 2), batch=2, height=10, width=9)),
    ("grouped", dict(in_channels=6, out_channels=9, kernel_size=3, groups=3, padding=1, height=7, width=8,
                     bias=False)),
    ("depthwise", dict(in_channels=20, out_channels=20, kernel_size=3, groups=20, padding=1, height=9,
                       width=13)),
)


# a layer schedule's variant suffix and the op it is meant for
VARIANTS = {".int8": dict(quant=lo.QuantSpec()), ".bf16": dict(dtype="bfloat16")}


def _ops(name: str) -> Iterator[tuple[str, Callable[[], object]]]:
    """The ops the stored schedule ``name`` is meant for, each a label and what makes it."""
    variant = next((suffix for suffix in VARIANTS if name.endswith(suffix)), "")
    layer = name.removesuffix(variant)
    if layer in lo.list_layers():
        yield layer, partial(lo.get_layer, layer, **VARIANTS.get(variant, {}))
        return
    for label, kwargs in SMALL_CONVS:
        yield label, partial(lo.Conv2d, **kwargs)
        for i, spec in enumerate(QUANT_SPECS):
            yield f"{label}.q{i}", partial(lo.Conv2d, **kwargs, quant=spec)
    yield "conv.bf16", partial(lo.Conv2d, **SMALL_CONVS[0][1], dtype="bfloat16")
    yield "conv2_x", partial(lo.get_layer, "resnet50.conv2_x")
    yield "matmul", partial(lo.Matmul, 33, 47, 29)
    yield "matmul.q1", partial(lo.Matmul, 33, 47, 29, quant=QUANT_SPECS[1])
    yield "matmul.bf16", partial(lo.Matmul, 33, 47, 29, dtype="bfloat16")


def stored_files() -> list[tuple[str, Path]]:
    """Every schedule file of the source tree, generic and per CPU, with its corpus name: the file's
    name, ``<cpu key>/<name>`` in a CPU's directory (every file, whichever CPU runs the tests)."""
    return sorted((path.relative_to(SCHEDULES).with_suffix("").as_posix(), path)
                  for path in SCHEDULES.rglob("*.toml"))


def corpus(pick: Callable[[int, str], bool] = lambda number, pair: True
           ) -> Iterator[tuple[int, str, lo.Schedule]]:
    """Every stored schedule on the ops it is meant for (layer schedules: their layer; presets:
    small odd convs, float and quantized, a layer and a matmul), where it applies; quantized ones
    also with the compensation computed in the kernel and, for float outputs, dequantized: each entry
    with its key and the number of its pair of a stored file and an op (``file@op``, numbered in order).
    ``pick(number, pair)`` says which pairs to build (the others' ops and schedules are not made)."""
    pairs = ((name, path, label, make) for name, path in stored_files() for label, make in _ops(path.stem))
    for number, (name, path, label, make) in enumerate(pairs):
        if not pick(number, f"{name}@{label}"):
            continue
        op = make()
        try:
            schedule = lo.load_schedule(path, op)
        except (lo.ScheduleError, lo.ScheduleFileError, ValueError):
            continue
        yield number, f"{name}@{label}", schedule
        if op.quant is not None:
            yield number, f"{name}@{label}.kernel", schedule.compensation("kernel")
            if op.quant.dequantized:
                yield number, f"{name}@{label}.dequantize", schedule.arithmetic("dequantize")


def _dot_form(quant: lo.QuantSpec) -> lo.Schedule:
    """A conv whose input channels are the dot loop (4 innermost in the weights), 4 output channels a
    vector."""
    op = lo.Conv2d(12, 10, 3, stride=(1, 2), padding=1, groups=2, batch=2, height=5, width=7, quant=quant)
    return (lo.Schedule(op).layout("I", "NHWC").layout("O", "NHWC").layout("W", "OIHW4o4i").split("c", 4)
            .tile(ow=3, k=4).reorder("n", "k_o", "oh", "ow_o", "c_o", "kh", "kw", "ow_i", "c_i", "k_i")
            .vectorize("k_i"))


def neon_kernels() -> Iterator[tuple[str, str]]:
    """NEON's own kernel forms (every tier): the s8 x s8 and u8 x s8 dot, i2_s weights, binary (cnt), the
    bf16 pair dot (bfmlalt + bfmlalb; the opt-in neon_bfdot's bfdot) and int8 convs on usmmla (one group;
    grouped)."""
    ternary = lo.QuantSpec("int8", True, True, "int8", "ternary")
    binary = lo.QuantSpec("binary", True, True, "float32", "binary")
    yield "dot.s8/neon", _source(_dot_form(lo.QuantSpec("int8", True, False, "uint8")), NEON)
    yield "dot.u8/neon", _source(_dot_form(lo.QuantSpec("uint8", True, False, "int8")), NEON)
    yield "dot.i2_s/neon", _source(_dot_form(ternary).weight_format("i2_s"), NEON)
    conv = lo.Conv2d(70, 10, 3, padding=1, groups=2, height=6, width=5, quant=binary)
    conv = lo.Schedule(conv).tile(ow=3, k=4)
    generated = generate_binary(conv, BINARY_VARIANT, BINARY_POPCOUNT)
    yield "binary.conv/neon", generated.source + "\0" + generated.cdef
    pairs = conv_dot_schedule(lo.Conv2d(6, 8, 3, padding=1, height=5, width=5, dtype="bfloat16"), True)
    yield "bf16.pairs/neon", _source(pairs, NEON)
    yield "bf16.pairs/neon_bfdot", _source(pairs, tables(BFDOT_NAME).floats)
    quant = lo.QuantSpec("uint8", True, False, "uint8")
    generated = mmla.generate_mmla(mmla.preset(lo.Conv2d(13, 6, 3, stride=2, padding=1, batch=2, height=7,
                                                         width=9, quant=quant), 3, 4))
    yield "mmla.conv/neon", generated.source + "\0" + generated.cdef
    generated = mmla.generate_mmla(mmla.preset(lo.Conv2d(12, 12, 3, padding=((1, 0), (0, 2)), groups=3,
                                                         height=6, width=7, quant=quant), 3, 4))
    yield "mmla.grouped_conv/neon", generated.source + "\0" + generated.cdef


def epilogue_kernels() -> Iterator[tuple[str, str]]:
    """Fused epilogues (every tier): a residual and ReLU6 on a register block's accumulators (x86 and
    NEON), a clip in the pass after a Gemm's scaled output."""
    block = output_stationary(lo.Conv2d(**SMALL_CONVS[1][1])).add_residual().clip(0.0, 6.0)
    yield "epilogue.block/avx512", _source(block, ISAS["avx512"])
    yield "epilogue.block/neon", _source(block, NEON)
    gemm = lo.Schedule(lo.Gemm(9, 13, 7, alpha=0.5, beta=2.0)).reorder("i", "k", "j").vectorize("j")
    gemm = gemm.clip(high=1.0)
    yield "epilogue.pass/avx2", _source(gemm, ISAS["avx2"])


def hashes(every: int = 1) -> dict[str, str]:
    """sha256 of the generated source and cdef of every corpus entry on every ISA (or the error), and of
    the reuse engines' trace nests (float ops); with ``every=n`` only the entries of each n-th pair of a
    stored file and an op (and the NEON entries), no other schedule built."""
    result = {key: _sha(source) for key, source in (*neon_kernels(), *epilogue_kernels())}
    neon_pairs = {entry.removesuffix(".dequantize").removesuffix(".kernel") for entry in NEON_ENTRIES}
    for number, key, schedule in corpus(lambda number, pair: number % every == 0 or pair in neon_pairs):
        if key in NEON_ENTRIES:
            result[f"{key}/neon"] = _sha(_source(schedule, NEON))
        if number % every:
            continue
        for isa in CODEGEN_ISAS:
            result[f"{key}/{isa}"] = _sha(_source(schedule, ISAS[isa]))
        if schedule.op.quant is None:
            space = item_space(schedule, "line", 64)
            result[f"{key}/trace"] = _sha(nest_c(schedule, space) + "\0" + region_nest(schedule, space))
    return result


def _source(schedule: lo.Schedule, isa) -> str:
    """The generated source and cdef of ``schedule`` on ``isa`` (or the error)."""
    try:
        generated = generate(schedule, isa)
        return generated.source + "\0" + generated.cdef
    except lo.ScheduleError as err:
        return f"error: {err}"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
