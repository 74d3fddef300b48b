"""x86's kernel families (targets/x86/families.py): the one place that picks how a schedule becomes C.
Each kind of schedule gets its family, the family its generator, and the kernel its class."""
from pathlib import Path

import pytest
from helpers import INT_ISAS, needs_amx, quick_first

import loopopt as lo
from loopopt.targets.binary import BinaryKernel
from loopopt.targets.lut import LutKernel
from loopopt.targets.x86 import kernels
from loopopt.targets.x86.families import FAMILIES, family_of

PACKAGE = Path(lo.__file__).parent
BINARY = lo.QuantSpec("binary", True, True, "int32", "binary")
TERNARY = lo.QuantSpec("int8", True, True, "int32", "ternary")
CONV = dict(in_channels=8, out_channels=16, kernel_size=3, padding=1, height=6, width=7)


def test_every_family_names_its_generator():
    assert [f.name for f in FAMILIES] == ["binary", "amx tiles", "table lookup", "simd"]
    for family in FAMILIES:
        assert (PACKAGE / family.generator).is_file(), family.generator


@pytest.mark.parametrize("isa", ["auto", "avx512", "avx2", "scalar", "amx"])
def test_the_family_of_each_kind_of_schedule(isa):
    binary = lo.Schedule(lo.Conv2d(**CONV, quant=BINARY))
    lut = lo.Schedule(lo.Matmul(4, 32, 96, quant=TERNARY)).weight_format("tl1")
    plain = lo.Schedule(lo.Conv2d(**CONV))
    assert family_of(binary, isa).name == "binary"          # on every variant: amx refuses it when built
    assert family_of(lut, isa).name == ("amx tiles" if isa == "amx" else "table lookup")
    assert family_of(plain, isa).name == ("amx tiles" if isa == "amx" else "simd")


# the quick tier on scalar (its lookup kernel's path only this test runs there); the SIMD ISAs' kernels of
# these families are built and checked by the quick tier's binary, ternary and quantized tests
@pytest.mark.parametrize("isa", quick_first(INT_ISAS[::-1]))
def test_each_family_builds_its_kernel_class(isa):
    assert isinstance(lo.Schedule(lo.Conv2d(**CONV, quant=BINARY)).compile(isa), BinaryKernel)
    lut = lo.Schedule(lo.Matmul(4, 32, 96, quant=TERNARY)).weight_format("tl1").compile(isa)
    assert isinstance(lut, LutKernel)
    quantized = lo.Schedule(lo.Conv2d(**CONV, quant=lo.QuantSpec())).compile(isa)
    assert type(quantized) is lo.kernel.QuantizedKernel
    assert type(lo.Schedule(lo.Conv2d(**CONV)).compile(isa)) is lo.kernel.Kernel


@needs_amx
def test_the_tile_family_builds_tile_kernels():
    assert isinstance(lo.Schedule(lo.Conv2d(**CONV, quant=lo.QuantSpec())).compile("amx"), kernels.TileKernel)
    assert isinstance(lo.Schedule(lo.Conv2d(**CONV, dtype="bfloat16")).compile("amx"), kernels.Bf16TileKernel)


def test_binary_ops_on_the_tiles_are_refused():
    with pytest.raises(lo.ScheduleError, match="isa 'amx' has no binary kernels; a binary op compiles to "
                                               "XNOR \\+ popcount on 'avx512', 'avx2' or 'scalar'"):
        lo.Schedule(lo.Conv2d(**CONV, quant=BINARY)).compile("amx")
