"""The NEON target as it behaves on an AArch64 machine, with the machine faked (this one is x86): the
CPU features from the HWCAP words or /proc/cpuinfo, the in-process cffi build chosen over the emulator,
the variants and the bf16 pair dot by feature, timing allowed, and the peaks measured. No kernel runs
here; the peak loops themselves run under qemu in ``test_neon.py``."""
import struct
from types import SimpleNamespace

import pytest

import loopopt as lo
from loopopt.driver import CffiDriver
from loopopt.targets import target
from loopopt.targets.neon import profile, toolchain
from loopopt.targets.neon import target as neon_target
from loopopt.targets.neon.isa import ARCH_FLAGS
from loopopt.targets.neon.runner import RunnerCase

CPUINFO = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
"""


def auxv(hwcap: int, hwcap2: int | None = None) -> bytes:
    """An auxiliary vector with AT_HWCAP (and AT_HWCAP2), ended by AT_NULL."""
    pairs = [(6, 4096), (toolchain.AT_HWCAP, hwcap)] + ([(toolchain.AT_HWCAP2, hwcap2)] if hwcap2 is not None
                                                        else []) + [(0, 0)]
    return b"".join(struct.pack("=QQ", *pair) for pair in pairs)


@pytest.fixture
def arm(monkeypatch, tmp_path):
    """This machine posing as an AArch64 one whose /proc/self/auxv and /proc/cpuinfo are files of
    ``tmp_path`` (written by the test); every cached feature and peak forgotten before and after."""
    monkeypatch.setattr(toolchain, "native", lambda: True)
    monkeypatch.setattr(toolchain, "AUXV", str(tmp_path / "auxv"))
    monkeypatch.setattr(toolchain, "CPUINFO", str(tmp_path / "cpuinfo"))
    toolchain.cpu_features.cache_clear()
    profile.measured_peaks.cache_clear()
    yield tmp_path
    toolchain.cpu_features.cache_clear()
    profile.measured_peaks.cache_clear()


def test_features_come_from_hwcap_else_from_cpuinfo(arm):
    (arm / "cpuinfo").write_text(CPUINFO)
    (arm / "auxv").write_bytes(auxv(1 << 1 | 1 << 20, 1 << 13 | 1 << 14))      # asimd, asimddp; i8mm, bf16
    assert toolchain.cpu_features() == {"asimd", "asimddp", "i8mm", "bf16"}
    toolchain.cpu_features.cache_clear()
    (arm / "auxv").write_bytes(auxv(1 << 1 | 1 << 9 | 1 << 10))                  # no AT_HWCAP2: none of its
    assert toolchain.cpu_features() == {"asimd", "fphp", "asimdhp"}
    toolchain.cpu_features.cache_clear()
    (arm / "auxv").write_bytes(struct.pack("=QQ", 0, 0))                          # no AT_HWCAP: cpuinfo's
    assert toolchain.cpu_features() == toolchain.cpuinfo_features(CPUINFO)
    assert {"asimd", "asimddp", "fphp"} <= toolchain.cpu_features() and "i8mm" not in toolchain.cpu_features()
    toolchain.cpu_features.cache_clear()
    (arm / "auxv").unlink()
    (arm / "cpuinfo").unlink()
    assert toolchain.cpu_features() == frozenset()                               # neither readable


def test_another_machine_has_no_arm_features(monkeypatch):
    monkeypatch.setattr(toolchain, "native", lambda: False)
    toolchain.cpu_features.cache_clear()
    try:
        assert toolchain.cpu_features() == frozenset()     # this x86's own HWCAP words mean other things
    finally:
        toolchain.cpu_features.cache_clear()


def test_a_native_machine_builds_kernels_in_process_by_its_features(arm, monkeypatch):
    """The cffi build (not the emulator), with NEON's flags and the OpenMP setter; the variant, the int8
    kernels and the bf16 pair dot as the CPU's features allow; times not refused."""
    built = []

    def compile_c(source, cdef, flags, link_flags=()):
        built.append((source, cdef, flags, link_flags))
        return SimpleNamespace(ffi=None, lib=SimpleNamespace(lo_kernel=print, lo_kernel_threads=print))

    monkeypatch.setattr(neon_target, "compile_c", compile_c)
    monkeypatch.setattr(toolchain, "missing", lambda: pytest.fail("the emulator was asked for"))
    (arm / "auxv").write_bytes(auxv(1 << 1 | 1 << 20))          # a Neoverse N1: sdot, no i8mm or bf16
    neon = target("neon")
    case = RunnerCase("void lo_kernel(float *x) {}", "lo_kernel", (), ARCH_FLAGS, "lo_kernel_threads")
    [driver] = neon_target.function_drivers([case])
    assert isinstance(driver, CffiDriver) and built[0][2] == ARCH_FLAGS and built[0][3] == ("-fopenmp",)
    assert "void lo_kernel_threads(int n);" in built[0][1]
    assert neon.timing_refusal() is None and lo.available_isas("neon") == ("neon",)
    assert neon.available_isas() == ("neon",) and neon.available_isas(integer=True) == ()
    assert neon.resolve_isa("auto") == "neon" and not neon.bf16_dot("neon")
    with pytest.raises(ValueError, match="needs CPU features i8mm that this CPU lacks for integer kernels"):
        neon.resolve_isa("auto", integer=True)
    with pytest.raises(ValueError, match="isa 'neon_bfdot' needs CPU features bf16 that this CPU lacks"):
        neon.resolve_isa("neon_bfdot")
    toolchain.cpu_features.cache_clear()
    (arm / "auxv").write_bytes(auxv(1 << 1 | 1 << 20, 1 << 13 | 1 << 14))    # a Neoverse V1
    assert neon.available_isas(integer=True) == ("neon", "neon_bfdot") and neon.bf16_dot("neon")


def test_a_native_machine_measures_its_peaks(arm, monkeypatch):
    """fp32 fmla and int8 usdot (sdot without FEAT_I8MM, none without the dot product) loops measured once
    (``targets/peak.py``), bfloat16 and float16 at the fp32 peak; ``lo.tune`` measures them before its
    trials (``prepare_timing``)."""
    measured = []

    def peak_gops(table, update, values, ops):
        measured.append(update.split("(")[0])
        return {"vfmaq_f32": 50.0, "vusdotq_s32": 200.0, "vdotq_s32": 180.0}[update.split("(")[0]]

    monkeypatch.setattr(profile, "peak_gops", peak_gops)
    neon = target("neon")
    (arm / "auxv").write_bytes(auxv(1 << 1 | 1 << 20, 1 << 13))
    neon.prepare_timing()
    assert measured == ["vfmaq_f32", "vusdotq_s32"]
    dtypes = ("float32", "bfloat16", "float16", "int8")
    assert [neon.peak("neon", dtype) for dtype in dtypes] == [50, 50, 50, 200]
    assert len(measured) == 2                                    # once per process
    features = {"asimd", "asimddp"}
    assert profile.peak_kernels(frozenset(features))["int8"][1].startswith("vdotq_s32")
    assert "int8" not in profile.peak_kernels(frozenset({"asimd"}))
    toolchain.cpu_features.cache_clear()
    profile.measured_peaks.cache_clear()
    (arm / "auxv").write_bytes(auxv(1 << 1))
    with pytest.raises(ValueError, match="no int8 peak on this CPU: it lacks the dot product"):
        neon.peak("neon", "int8")
    with pytest.raises(ValueError, match="has no float64 kernels"):
        neon.peak("neon", "float64")
