"""Machine profile: fingerprint, OS caches, validation, on-disk cache (reuse, corruption, atomic
writes), provenance and the other-machine check. Nothing here asserts a measured speed."""
import dataclasses
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import MISSING_AMX

import loopopt as lo
from loopopt import machine
from loopopt.machine import (
    Bandwidth,
    Cache,
    CpuIdentity,
    MachineProfile,
    bandwidth_buffers,
    cpu_key,
    cpu_key_of,
    fingerprint,
    fingerprint_of,
    machine_mismatch,
    os_caches,
    parse_cpuinfo,
    profile_path,
    provenance,
    same_cpu,
    this_cpu,
)

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9R14 96-Core Processor
stepping\t: 1
flags\t\t: fpu sse2 avx2 avx512f avx512_vnni

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: not the first CPU
"""
CACHES = (Cache("L1", 32 << 10, 8, 64, 2), Cache("L2", 1 << 20, 8, 64, 2), Cache("L3", 32 << 20, 16, 64, 16))


def make_profile(**changes) -> MachineProfile:
    profile = MachineProfile(
        fingerprint=fingerprint(), cpu="Test CPU", vendor="TestVendor", cpus=2, compiler="gcc 12",
        kernel="6.1", loopopt="0.1.0", measured_utc="2026-01-01T00:00:00+00:00", other_cpu_share=0.01,
        caches=CACHES,
        peaks={"float32": {"avx512": 118.0, "avx2": 60.0}, "int8": {"avx512": 470.0, "avx2": 200.0},
               "bfloat16": {"avx512": 236.0}},
        bandwidth={"L1": Bandwidth(200.0, 16 << 10, 190.0, 7, 0.01),
                   "DRAM": Bandwidth(20.0, 128 << 20, 12.5, 7, None)})
    return dataclasses.replace(profile, **changes)


def test_parse_cpuinfo_reads_the_first_processor():
    cpu = parse_cpuinfo(CPUINFO, 4)
    assert (cpu.vendor, cpu.model, cpu.family, cpu.model_number, cpu.stepping, cpu.cpus) == (
        "AuthenticAMD", "AMD EPYC 9R14 96-Core Processor", "25", "17", "1", 4)
    assert cpu.flags == {"fpu", "sse2", "avx2", "avx512f", "avx512_vnni"}


def test_fingerprint_is_stable_and_names_the_hardware():
    cpu = parse_cpuinfo(CPUINFO, 4)
    shuffled_text = CPUINFO.replace("fpu sse2 avx2 avx512f avx512_vnni", "avx512_vnni avx2 fpu avx512f sse2")
    shuffled = parse_cpuinfo(shuffled_text, 4)
    assert fingerprint_of(cpu, CACHES) == fingerprint_of(shuffled, CACHES)
    assert len(fingerprint_of(cpu, CACHES)) == 16
    different = [dataclasses.replace(cpu, model="AMD EPYC 7763"), dataclasses.replace(cpu, cpus=8),
                 dataclasses.replace(cpu, flags=cpu.flags - {"avx512_vnni"})]
    assert fingerprint_of(cpu, CACHES) not in {fingerprint_of(c, CACHES) for c in different}
    assert fingerprint_of(cpu, CACHES) != fingerprint_of(cpu, CACHES[:2])
    assert fingerprint() == fingerprint_of(this_cpu(), os_caches())


def test_os_caches_from_sysfs(tmp_path):
    entries = {"index0": ("1", "Data", "48K", "12", "0"), "index1": ("1", "Instruction", "32K", "8", "0"),
               "index2": ("2", "Unified", "2048K", "16", "0-1"),
               "index3": ("3", "Unified", "32M", "16", "0-3,8")}
    for name, (level, kind, size, ways, shared) in entries.items():
        index = tmp_path / name
        index.mkdir()
        for file, value in (("level", level), ("type", kind), ("size", size), ("ways_of_associativity", ways),
                            ("coherency_line_size", "64"), ("shared_cpu_list", shared)):
            (index / file).write_text(value + "\n")
    assert os_caches(tmp_path) == (Cache("L1", 48 << 10, 12, 64, 1), Cache("L2", 2 << 20, 16, 64, 2),
                                   Cache("L3", 32 << 20, 16, 64, 5))
    (tmp_path / "index0" / "shared_cpu_list").unlink()
    assert os_caches(tmp_path)[0] == Cache("L1", 48 << 10, 12, 64, 1)
    (tmp_path / "index2" / "shared_cpu_list").unlink()
    assert os_caches(tmp_path)[1] == Cache("L2", 2 << 20, 16, 64, 1)
    assert os_caches(tmp_path / "missing") == ()


def test_bandwidth_buffers_lie_inside_each_level():
    sizes = bandwidth_buffers(CACHES, free_bytes=16 << 30)
    assert sizes == {"L1": 16 << 10, "L2": 128 << 10, "L3": 4 << 20, "DRAM": 128 << 20}   # DRAM: 4x L3
    for cache in CACHES:
        assert sizes[cache.name] <= cache.size // 2
    assert bandwidth_buffers(CACHES, free_bytes=64 << 20)["DRAM"] == 16 << 20      # a quarter of free memory
    tight = (Cache("L1", 32 << 10, 8, 64, 1), Cache("L2", 48 << 10, 8, 64, 1))    # L2 not twice L1: skipped
    assert set(bandwidth_buffers(tight, free_bytes=16 << 30)) == {"L1", "DRAM"}


def test_profile_round_trip_and_validation():
    profile = make_profile()
    assert MachineProfile.from_dict(json.loads(json.dumps(profile.to_dict()))) == profile
    broken = [({"format": 99}, "format"), ({"cpus": 0}, "cpus"),
              ({"peaks": {"float32": {"avx512": -1.0}}}, "peaks"),
              ({"caches": [{"name": "L1"}]}, r"caches\[0\]"),
              ({"bandwidth": {"L1": {"gbs": 1, "buffer_bytes": 1}}}, "bandwidth"),
              ({"bandwidth": {"DRAM": {"gbs": 1, "buffer_bytes": 1, "median_gbs": 1, "runs": 0,
                                       "other_cpu_share": None}}}, "bandwidth.DRAM"),
              ({"bandwidth": {"DRAM": {"gbs": 1, "buffer_bytes": 1, "median_gbs": 1, "runs": 7,
                                       "other_cpu_share": -0.5}}}, "bandwidth.DRAM"),
              ({"fingerprint": 7}, "fingerprint")]
    for change, field in broken:
        with pytest.raises(ValueError, match=field):
            MachineProfile.from_dict({**profile.to_dict(), **change})
    with pytest.raises(TypeError, match="JSON object"):
        MachineProfile.from_dict([1, 2])


def test_bandwidth_says_how_busy_the_machine_was():
    quiet, unknown = make_profile().bandwidth["L1"], make_profile().bandwidth["DRAM"]
    busy = dataclasses.replace(unknown, other_cpu_share=0.8)
    assert not quiet.busy and not unknown.busy and busy.busy
    assert make_profile().memory_bandwidth() == 20.0
    assert str(busy) == ("    20.0 GB/s best, 12.5 median of 7 runs (buffer 128 MiB; other processes "
                         "used 80% of the CPU, BUSY)")
    assert "used unknown of the CPU)" in str(unknown) and "DRAM " in str(make_profile())


def test_peak_lookup():
    profile = make_profile()
    assert profile.peak() == profile.peak("avx512") == profile.peak("scalar") == 118.0
    assert profile.peak("avx2", "int8") == 200.0 and profile.peak("auto", "int8") == 470.0
    with pytest.raises(ValueError, match="unknown isa 'sse9'"):
        profile.peak("sse9")
    with pytest.raises(ValueError, match="dtype='int4'"):
        profile.peak("auto", "int4")
    no_vnni = make_profile(peaks={"float32": {"avx512": 118.0}, "int8": {"avx2": 200.0}, "bfloat16": {}})
    with pytest.raises(ValueError, match="'avx512' cannot run int8 kernels"):
        no_vnni.peak("avx512", "int8")
    no_simd = make_profile(peaks={"float32": {"scalar": 3.0}, "int8": {}, "bfloat16": {}})
    assert no_simd.peak("auto", "int8") == no_simd.peak("scalar") == 3.0
    # bfloat16: the faster of the vdpbf16ps peak (where measured) and the float32 peak (widened operands)
    assert profile.peak("avx512", "bfloat16") == profile.peak("scalar", "bfloat16") == 236.0
    assert profile.peak("avx2", "bfloat16") == 60.0
    slow_dot = make_profile(peaks={"float32": {"avx512": 118.0}, "int8": {}, "bfloat16": {"avx512": 59.0}})
    assert slow_dot.peak("avx512", "bfloat16") == slow_dot.peak("auto", "bfloat16") == 118.0
    assert no_simd.peak("auto", "bfloat16") == 3.0
    assert profile.memory_bandwidth() == 20.0


def test_cache_sizes_are_the_reported_ones_else_typical():
    """One source of the cache sizes the x86 search space and its ranking read: an unreported L1 or L2
    is its typical size, an unreported L3 none."""
    assert [make_profile().cache_size(level) for level in ("L1", "L2", "L3")] == [32 << 10, 1 << 20, 32 << 20]
    only_l2 = make_profile(caches=(Cache("L2", 2 << 20, 16, 64, 1),))
    assert [only_l2.cache_size(level) for level in ("L1", "L2", "L3")] == [32 << 10, 2 << 20, 0]
    assert make_profile(caches=()).cache_size("L2") == 1 << 20
    with pytest.raises(ValueError, match="level='L4'; allowed: 'L1', 'L2', 'L3'"):
        only_l2.cache_size("L4")


def test_others_share_from_proc_stat_samples(monkeypatch):
    monkeypatch.setattr(machine, "cpu_seconds", lambda: (11.0, 111.5, 1.5))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    # 1 s of wall time on 2 CPUs: the machine was busy 1.5 s, this process 0.5 s of it
    assert machine.others_share((10.0, 110.0, 1.0)) == pytest.approx(0.5)
    assert machine.others_share(None) is None
    # clock ticks adding up to more than the wall time (a short interval): at most the whole machine
    assert machine.others_share((10.9, 110.0, 1.5)) == 1.0


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache directory, no profile in memory, and a fake measurement that counts its calls."""
    monkeypatch.setenv("LOOPOPT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(machine, "_profiles", {})
    calls = []

    def fake_measure():
        calls.append(1)
        return make_profile(measured_utc=f"2026-01-01T00:00:0{len(calls)}+00:00")
    monkeypatch.setattr(machine, "measure_profile", fake_measure)
    return calls


def test_profile_is_measured_once_then_read_from_the_cache(fresh_cache, monkeypatch):
    first = machine.machine_profile()
    assert len(fresh_cache) == 1 and machine.load_profile(profile_path()) == first
    monkeypatch.setattr(machine, "_profiles", {})              # as a new process: only the file is left
    assert machine.machine_profile() == first and len(fresh_cache) == 1
    again = machine.machine_profile(remeasure=True)
    assert len(fresh_cache) == 2 and again != first and machine.load_profile(profile_path()) == again


@pytest.mark.parametrize("content", ["", "{", "[]", '{"format": 1}', "\xff\xfe",
                                     json.dumps({**make_profile().to_dict(), "fingerprint": "0" * 16}),
                                     json.dumps({**make_profile().to_dict(),
                                                 "peaks": {"float32": {}, "int8": {}}})])
def test_corrupt_profile_is_measured_again(fresh_cache, content):
    path = profile_path()
    path.write_text(content)
    with pytest.warns(UserWarning, match="ignoring the machine profile"):
        profile = machine.machine_profile()
    assert len(fresh_cache) == 1 and machine.load_profile(path) == profile


def test_a_crash_while_storing_keeps_the_old_profile(fresh_cache, monkeypatch):
    path = profile_path()
    old = machine.machine_profile()
    text = path.read_text()

    def crash(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(os, "fsync", crash)                    # dies half way, before the rename
    with pytest.raises(KeyboardInterrupt):
        machine.store_profile(path, make_profile(cpu="new"))
    assert path.read_text() == text and machine.load_profile(path) == old
    assert [p.name for p in path.parent.iterdir()] == [path.name]    # no temporary file left behind


@pytest.mark.slow
def test_profile_is_shared_across_processes():
    """Two fresh processes read the profile this one measured (or read) in the same cache."""
    here = lo.machine_profile().to_dict()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    code = "import json, loopopt as lo; print(json.dumps(lo.machine_profile().to_dict()))"
    for _ in range(2):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                timeout=300, check=False)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == here


@pytest.mark.slow             # measures (10-40 s of one worker)
@pytest.mark.measured_profile
def test_the_measured_profile_is_this_machine_s_and_stored():
    """The one real measurement of the suite (the others return the recorded figures): this machine's
    identity and caches, every level's bandwidth and the ISAs' peaks positive, stored where the next
    process reads it; where the CPU has AMX, its int8 and bfloat16 tile peaks above the SIMD ones."""
    profile = machine.machine_profile()
    assert profile.fingerprint == fingerprint() and profile.caches == os_caches()
    assert list(profile.bandwidth) == [*(c.name for c in profile.caches), "DRAM"]
    assert all(b.gbs > 0 for b in profile.bandwidth.values())
    assert all(rate > 0 for rates in profile.peaks.values() for rate in rates.values())
    assert machine.load_profile(profile_path()) == profile
    if MISSING_AMX is None:
        assert profile.peak("amx", "int8") > profile.peak("avx512", "int8")
        assert profile.peak("auto", "bfloat16") < profile.peak("amx", "bfloat16")


def test_provenance_fields():
    record = provenance(isa="avx2", threads=2)
    assert list(record) == ["loopopt", "fingerprint", "cpu", "vendor", "cpu_key", "isa", "compiler",
                            "threads", "utc"]
    assert (record["fingerprint"], record["cpu"], record["isa"], record["threads"]) == (
        fingerprint(), this_cpu().model, "avx2", 2)
    assert datetime.datetime.fromisoformat(record["utc"]).utcoffset() == datetime.timedelta(0)
    assert "isa" not in provenance() and "threads" not in provenance()


def test_results_name_the_kernels_opt_level_when_it_is_not_the_default(monkeypatch):
    monkeypatch.setenv("LOOPOPT_OPT_LEVEL", "1")
    assert provenance()["compiler"] == machine.kernel_compiler() == f"{machine.compiler_version()} at -O1"
    monkeypatch.delenv("LOOPOPT_OPT_LEVEL")
    assert provenance()["compiler"] == machine.compiler_version()


def test_cpu_key_names_vendor_family_model_and_isa_features():
    zen4 = CpuIdentity("AuthenticAMD", "AMD EPYC 9R14", "25", "17", "1",
                       frozenset({"sse2", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                                  "avx512_bf16"}), 2)
    assert cpu_key_of(zen4) == "amd-25-17-avx2-avx512-vnni-bf16"
    sapphire = dataclasses.replace(zen4, vendor="GenuineIntel", model="Intel Xeon Platinum 8488C", family="6",
                       model_number="143", flags=zen4.flags | {"amx_tile", "amx_int8", "amx_bf16"})
    assert cpu_key_of(sapphire) == "intel-6-143-avx2-avx512-vnni-bf16-amx"
    # stepping, core count, model string and flags without a kernel of their own leave it alone
    same = dataclasses.replace(sapphire, model="Intel(R) Xeon(R) Processor", stepping="6", cpus=96,
                   flags=sapphire.flags | {"hypervisor", "avx512ifma"})
    assert cpu_key_of(same) == cpu_key_of(sapphire)
    assert cpu_key_of(dataclasses.replace(zen4, flags=frozenset({"avx2"}))) == "amd-25-17"   # avx2 needs fma
    odd = dataclasses.replace(zen4, vendor="Odd Vendor/2", flags=frozenset())
    assert cpu_key_of(odd) == "odd_vendor_2-25-17"
    assert cpu_key_of(parse_cpuinfo("", 1)) == "unknown-unknown-unknown"
    assert cpu_key() == cpu_key_of(this_cpu())


def test_same_cpu_by_key_then_fingerprint_then_vendor():
    assert same_cpu({"cpu_key": cpu_key(), "fingerprint": "0" * 16}) is True    # another machine, this CPU
    assert same_cpu({"cpu_key": "amd-25-17", "fingerprint": fingerprint()}) is False
    assert same_cpu({"fingerprint": fingerprint()}) is True
    assert same_cpu({"fingerprint": "0" * 16}) is False
    assert same_cpu({"vendor": "NotThisVendor"}) is False
    assert same_cpu({"vendor": this_cpu().vendor}) is None and same_cpu({}) is None
    assert machine_mismatch({"cpu_key": cpu_key(), "fingerprint": "0" * 16}) is None
    message = machine_mismatch({"cpu_key": "amd-25-17", "cpu": "Far CPU"})
    assert "Far CPU (cpu_key amd-25-17)" in message and f"CPU key {cpu_key()}" in message


def test_machine_mismatch_names_both_cpus():
    here = this_cpu()
    assert machine_mismatch({"fingerprint": fingerprint(), "cpu": "anything"}) is None
    assert machine_mismatch({"vendor": here.vendor}) is None
    assert machine_mismatch({"cpu": "no identity to compare"}) is None
    message = machine_mismatch({"fingerprint": "0" * 16, "cpu": "Elsewhere CPU", "vendor": here.vendor})
    assert "Elsewhere CPU" in message and here.model in message and fingerprint() in message
    assert "Other CPU" in machine_mismatch({"vendor": "NotThisVendor", "cpu": "Other CPU"})


@pytest.mark.slow
def test_stream_read_reads_its_whole_buffer_once():
    read = machine.StreamRead(5000)
    assert 5000 <= read.nbytes < 5000 + 4096 and read.nbytes % 64 == 0
    assert read() == read.nbytes // 4          # the sum of the buffer's ones, each read once
