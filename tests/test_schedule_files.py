"""Schedule files: every stored schedule loads, round-trips, and bad files name file, line and step."""
import re
import tomllib
import warnings
from pathlib import Path

import pytest
from generated_corpus import stored_files

import loopopt as lo
from loopopt import dataflows, machine, schedule_file
from loopopt.machine import CpuIdentity, OtherMachineWarning, cpu_key, fingerprint, loopopt_version, this_cpu
from loopopt.schedule_file import ScheduleFileError, list_schedules, load_schedule, save_schedule, to_toml
from loopopt.targets.x86 import isa as x86_isa
from loopopt.targets.x86 import tiles
from loopopt.targets.x86.isa import available_int_isas
from loopopt.targets.x86.winograd_int8 import LANES

OP = lo.Conv2d(6, 10, 3, padding=1, height=9, width=11)
ROOT = Path(__file__).resolve().parent.parent


OP_OF = {"float32": OP, "int8": OP.with_quant(lo.QuantSpec()),      # the small op of each arithmetic
         "bfloat16": lo.Conv2d(6, 10, 3, padding=1, height=9, width=11, dtype="bfloat16")}
VARIANTS = {".int8": "int8", ".bf16": "bfloat16"}           # a layer file's name suffix -> its made_for


@pytest.mark.parametrize("path", [pytest.param(path, id=name) for name, path in stored_files()])
def test_stored_schedules_apply_to_small_op(path):
    """Every file, generic and per CPU, loaded on an op it was not written for (factors clamped) but of
    the arithmetic it was made for, runs every iteration exactly once."""
    op = OP_OF[tomllib.loads(path.read_text()).get("made_for", "float32")]
    schedule = load_schedule(path, op)
    assert schedule.isl_map.is_injective() and schedule.isl_map.domain().is_equal(op.domain)


@pytest.mark.parametrize("path", [pytest.param(path, id=name) for name, path in stored_files()])
def test_stored_layer_schedules_record_their_arithmetic(path):
    """A layer's file records the arithmetic of its name (plain: float32, .int8, .bf16; the int8 ones the
    QuantSpec benchmarks/tune_layers.py searched them with); the presets apply to any op (no made_for)."""
    document = tomllib.loads(path.read_text())
    layer = path.stem.removesuffix(".int8").removesuffix(".bf16")
    if layer not in lo.list_layers():
        assert "made_for" not in document and "quant" not in document
        return
    made_for = VARIANTS.get(path.stem.removeprefix(layer), "float32")
    assert document["made_for"] == made_for
    assert (made_for == "int8") == ("quant" in document)
    if made_for == "int8":
        assert lo.QuantSpec(**document["quant"]) == lo.QuantSpec(output="uint8")


@pytest.mark.parametrize("name", list(dataflows.PRESETS))
def test_preset_files_match_functions(name):
    op = lo.Conv2d(64, 64, 3, padding=1)
    assert load_schedule(name, op).steps == dataflows.PRESETS[name](op).steps


def test_round_trip(tmp_path):
    s = (lo.Schedule(OP).split("ow", 4).fuse("oh", "ow_o", "rows").reorder("c", "kh", "kw", "ow_i")
         .unroll("kw").layout("I", "NCHW16c").vectorize("ow_i"))
    path = save_schedule(s, tmp_path / "mine.toml", description='say "hi"\nthere')
    again = load_schedule(path, OP)
    assert again.steps == s.steps and again.loops == s.loops and again.layouts == s.layouts
    recorded = tomllib.loads(path.read_text())["provenance"]
    assert to_toml(again, "mine", 'say "hi"\nthere', provenance=recorded, made_for=True) == path.read_text()


@pytest.mark.parametrize("op, build", [
    (lo.Conv1d(5, 12, 3, stride=2, padding=((0, 1),), length=17),
     lambda s: s.layout("I", "NWC").layout("W", "WIO").tile(ow=4, k=8).vectorize("k_i")),
    (lo.Matmul(9, 20, 7, batch=(2, 3), trans_b=True),
     lambda s: s.layout("B", "BDKN").fuse("b0", "b1", "b").tile(j=8).vectorize("j_i")),
], ids=["conv1d", "batched-matmul"])
def test_round_trip_of_new_ops(tmp_path, op, build):
    s = build(lo.Schedule(op))
    again = load_schedule(save_schedule(s, tmp_path / "mine.toml"), op)
    assert again.steps == s.steps and again.loops == s.loops and again.layouts == s.layouts


def test_saved_schedule_records_provenance(tmp_path):
    path = save_schedule(lo.Schedule(OP).vectorize("kw"), tmp_path / "p.toml", isa="avx2", threads=2)
    recorded = tomllib.loads(path.read_text())["provenance"]
    assert recorded == {**recorded, "fingerprint": fingerprint(), "cpu": this_cpu().model, "isa": "avx2",
                        "threads": 2, "loopopt": loopopt_version()}
    assert set(recorded) == {"loopopt", "fingerprint", "cpu", "vendor", "cpu_key", "isa", "compiler",
                             "threads", "utc"}
    assert recorded["cpu_key"] == cpu_key()
    with pytest.raises(ValueError, match="threads must be an integer >= 1, got 0"):
        save_schedule(lo.Schedule(OP), tmp_path / "q.toml", threads=0)


def test_schedule_from_another_machine_warns_once(tmp_path):
    path = tmp_path / "far.toml"
    path.write_text('name = "far"\n\n[provenance]\nfingerprint = "0000000000000000"\n'
                    'cpu = "Faraway CPU 9000"\n\n[[step]]\nvectorize = "kw"\n')
    with pytest.warns(OtherMachineWarning, match=f"Faraway CPU 9000.*{re.escape(this_cpu().model)}"):
        load_schedule(path, OP)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_schedule(path, OP)                                      # once per schedule and process
        load_schedule(save_schedule(lo.Schedule(OP), tmp_path / "here.toml"), OP)   # this machine: silent
    bad = tmp_path / "bad_provenance.toml"
    bad.write_text('provenance = 3\n[[step]]\nvectorize = "kw"\n')
    with pytest.raises(ScheduleFileError, match="'provenance' must be a table"):
        load_schedule(bad, OP)


def test_unknown_name_suggests_closest():
    with pytest.raises(ScheduleFileError, match="did you mean 'output_stationary'"):
        load_schedule("output_stationry", OP)


def test_malformed_toml(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("name = \n")
    with pytest.raises(ScheduleFileError, match="bad.toml: malformed TOML"):
        load_schedule(path, OP)


def test_step_error_names_file_line_and_step(tmp_path):
    path = tmp_path / "wrong.toml"
    path.write_text('name = "wrong"\n\n[[step]]\nsplit = ["ow", 2]\n\n[[step]]\nvectorize = "ow_i"\n')
    message = r"wrong.toml:6: step 2: vectorize\(.ow_i.\): only the innermost"
    with pytest.raises(ScheduleFileError, match=message):
        load_schedule(path, OP)


def test_unknown_primitive(tmp_path):
    path = tmp_path / "typo.toml"
    path.write_text('[[step]]\nvectorise = "ow"\n')
    with pytest.raises(ScheduleFileError, match=r"typo.toml:1: step 1: .*did you mean 'vectorize'"):
        load_schedule(path, OP)


@pytest.mark.parametrize("text", ["", 'name = "mine"\ndescription = "steps lost"\n'])
def test_file_without_steps_is_refused(tmp_path, text):
    path = tmp_path / "empty.toml"
    path.write_text(text)
    with pytest.raises(ScheduleFileError, match=r"empty.toml: no \[\[step\]\] tables; .* must say so with "
                                                 r"'step = \[\]'"):
        load_schedule(path, OP)


def test_no_steps_on_purpose_is_the_naive_schedule(tmp_path):
    assert load_schedule("naive", OP).steps == ()
    path = save_schedule(lo.Schedule(OP), tmp_path / "plain.toml")
    assert "step = []" in path.read_text() and load_schedule(path, OP).steps == ()


def stored(directory: Path, name: str, step: str, provenance: str = "") -> Path:
    """Write the schedule file ``directory/name.toml``: one unroll ``step``, after ``provenance`` lines."""
    directory.mkdir(parents=True, exist_ok=True)
    table = f"[provenance]\n{provenance}\n" if provenance else ""
    path = directory / f"{name}.toml"
    path.write_text(f'name = "{name}"\n{table}\n[[step]]\nunroll = "{step}"\n')
    return path


@pytest.mark.filterwarnings("default::loopopt.machine.OtherMachineWarning")
def test_this_cpus_schedule_comes_first_then_the_generic_then_the_closest_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOPOPT_SCHEDULES", str(tmp_path))
    vendor, family, model, *features = cpu_key().split("-")
    # near: this model with other features (one fewer, or avx2 where it has none); far: another
    # vendor's CPU with this one's features
    near = "-".join([vendor, family, model, *(features[:-1] if features else ["avx2"])])
    far = "-".join(["aaa", "1", "2", *features])
    stored(tmp_path / far, "probe.layer", "c", f'cpu = "Far CPU"\ncpu_key = "{far}"')
    stored(tmp_path / near, "probe.layer", "kh", f'cpu = "Near CPU"\ncpu_key = "{near}"')
    stored(tmp_path / far, "probe.far_only", "c", f'cpu = "Far CPU"\ncpu_key = "{far}"')
    assert {"probe.layer", "probe.far_only"} <= set(list_schedules())

    def unrolled(name: str) -> str:
        return next(loop.name for loop in load_schedule(name, OP).loops if loop.unroll)

    with pytest.warns(OtherMachineWarning, match="Near CPU"):        # no silent fallback
        assert unrolled("probe.layer") == "kh"                       # the closest CPU's, not the first name
    found = lo.stored_schedule("probe.layer")
    assert (found.path.parent.name, found.cpu, found.cpu_key) == (near, "Near CPU", near)
    assert found.this_cpu is False
    assert found.summary() == (f"searched on Near CPU [{near}]; NOT this CPU ({this_cpu().model} "
                               f"[{cpu_key()}])")
    stored(tmp_path, "probe.layer", "kw")                                  # a generic file, no provenance
    assert unrolled("probe.layer") == "kw" and lo.stored_schedule("probe.layer").this_cpu is None
    assert lo.stored_schedule("probe.layer").summary().startswith("no provenance")
    stored(tmp_path / cpu_key(), "probe.layer", "ow", f'cpu = "{this_cpu().model}"\ncpu_key = "{cpu_key()}"')
    assert unrolled("probe.layer") == "ow"
    here = lo.stored_schedule("probe.layer")
    assert here.this_cpu is True and here.summary().endswith("; this CPU") and here.name == "probe.layer"
    assert lo.stored_schedule(stored(tmp_path / "elsewhere", "other", "kw")).path.parent.name == "elsewhere"


AVX2 = frozenset({"sse4_2", "avx", "avx2", "fma"})
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
VNNI = AVX512 | {"avx512_vnni", "avx512_bf16"}
CPUS = {      # fake identities: the lookup's CPU key and the ISAs the targets see
    "zen3": CpuIdentity("AuthenticAMD", "AMD EPYC 7R13", "25", "1", "1", AVX2, 2),
    "zen2": CpuIdentity("AuthenticAMD", "AMD EPYC 7R32", "23", "49", "0", AVX2, 2),
    "haswell": CpuIdentity("GenuineIntel", "Intel Xeon E5-2676 v3", "6", "63", "2", AVX2, 2),
    "skylake_sp": CpuIdentity("GenuineIntel", "Intel Xeon Platinum 8175M", "6", "85", "4", AVX512, 2),
    "zen4": CpuIdentity("AuthenticAMD", "AMD EPYC 9R14", "25", "17", "1", VNNI, 2),
    "sapphire_rapids": CpuIdentity("GenuineIntel", "Intel Xeon Platinum 8488C", "6", "143", "8",
                                   VNNI | {"amx_tile", "amx_int8", "amx_bf16"}, 2),
    "xeon_167": CpuIdentity("GenuineIntel", "Intel(R) Xeon(R) Processor", "6", "167", "1",
                            VNNI | {"amx_tile", "amx_int8", "amx_bf16"}, 2),
}


def fake_cpu(monkeypatch, name: str) -> CpuIdentity:
    """Act as CPU ``name`` of ``CPUS``: its identity (CPU key, model) and its flags (ISAs, AMX)."""
    identity = CPUS[name]
    for module in (machine, schedule_file):
        monkeypatch.setattr(module, "this_cpu", lambda: identity)
    for module in (x86_isa, tiles):
        monkeypatch.setattr(module, "cpu_flags", lambda: identity.flags)
    return identity


@pytest.mark.parametrize("cpu, isa, made_for, fit", [
    ("zen3", "avx2", "float32", 0), ("zen3", "avx512", "float32", 2), ("zen3", "amx", "int8", 2),
    ("zen4", "avx512", "int8", 0), ("zen4", "avx2", "float32", 1), ("zen4", "amx", "int8", 2),
    ("skylake_sp", "avx512", "float32", 0), ("skylake_sp", "avx512", "int8", 2),   # no VNNI
    ("skylake_sp", "avx2", "int8", 0), ("sapphire_rapids", "amx", "int8", 1),
    ("zen3", None, "float32", 0), ("zen3", "no_such_isa", None, 2)])
def test_isa_fit_ranks_the_recorded_isa_on_this_cpu(monkeypatch, cpu, isa, made_for, fit):
    fake_cpu(monkeypatch, cpu)
    assert schedule_file.isa_fit({} if isa is None else {"isa": isa}, made_for) == fit


def isa_file(directory: Path, name: str, step: str, isa: str, key: str | None,
             made_for: str = "float32") -> Path:
    """A stored schedule searched for ``isa`` on the CPU of ``key`` (None: a Zen 4 without a recorded
    key, as the generic files record), made for ``made_for``."""
    path = stored(directory, name, step, f'cpu = "CPU {key or "Zen 4"}"\nisa = "{isa}"'
                  + (f'\ncpu_key = "{key}"' if key else ""))
    path.write_text(f'made_for = "{made_for}"\n' + path.read_text())
    return path


@pytest.mark.filterwarnings("default::loopopt.machine.OtherMachineWarning")
def test_a_cpu_finds_a_schedule_of_an_isa_it_has_before_one_of_an_isa_it_lacks(tmp_path, monkeypatch):
    """An AVX2-only CPU finds another AVX2 CPU's file ahead of the generic and AVX-512 ones (whose
    register blocks spill on it); an AVX-512 CPU keeps its own directory, then the generic AVX-512 file,
    then another CPU's AVX-512 file ahead of a closer CPU's AVX2 one; where only files of an ISA this CPU
    lacks are stored, the lookup's order holds and the file says so, loading it warns."""
    monkeypatch.setenv("LOOPOPT_SCHEDULES", str(tmp_path))
    zen3, intel = "amd-25-1-avx2", "intel-6-143-avx2-avx512-vnni-bf16-amx"
    isa_file(tmp_path, "probe.layer", "c", "avx512", None)                    # generic: a Zen 4's search
    isa_file(tmp_path / zen3, "probe.layer", "kh", "avx2", zen3)
    isa_file(tmp_path / intel, "probe.layer", "kw", "avx512", intel)
    isa_file(tmp_path / intel, "probe.layer.int8", "kw", "amx", intel, "int8")
    isa_file(tmp_path / zen3, "probe.layer.int8", "kh", "avx2", zen3, "int8")

    def found(cpu: str, name: str = "probe.layer") -> str:
        fake_cpu(monkeypatch, cpu)
        return lo.stored_schedule(name).path.parent.name

    assert found("zen3") == zen3 and lo.stored_schedule("probe.layer").this_cpu is True
    for avx2_only in ("zen2", "haswell"):            # not Intel's closer AVX-512 key, not the generic file
        assert found(avx2_only) == found(avx2_only, "probe.layer.int8") == zen3
        here = lo.stored_schedule("probe.layer")
        assert (here.this_cpu, here.isa, here.isa_here) == (False, "avx2", True)
        assert here.summary().startswith(f"searched on CPU {zen3} [{zen3}] for avx2; NOT this CPU")
        assert "lacks" not in here.summary()
    assert found("zen4") == tmp_path.name and lo.stored_schedule("probe.layer").isa_here   # the generic file
    assert found("skylake_sp", "probe.layer.int8") == zen3          # AVX-512 without VNNI: AVX2's int8
    assert found("sapphire_rapids") == found("sapphire_rapids", "probe.layer.int8") == intel    # its own
    (tmp_path / "probe.layer.toml").unlink()
    assert found("zen4") == intel                     # another CPU's AVX-512 file before Zen 3's AVX2 one
    for directory in (zen3, intel):
        (tmp_path / directory / "probe.layer.toml").unlink()
    isa_file(tmp_path / intel, "probe.layer", "kw", "avx512", intel)
    isa_file(tmp_path, "probe.layer", "c", "avx512", None)
    assert found("zen3") == tmp_path.name             # only AVX-512 files: the generic first, as before
    lacking = lo.stored_schedule("probe.layer")
    assert (lacking.this_cpu, lacking.isa, lacking.isa_here) == (False, "avx512", False)
    assert lacking.summary() == (f"searched on CPU Zen 4 for avx512; NOT this CPU (AMD EPYC 7R13 [{zen3}]), "
                                 f"which lacks avx512: {schedule_file.LACKING_ISA}")
    with pytest.warns(OtherMachineWarning, match="which lacks avx512"):    # no silent 'stored best'
        load_schedule("probe.layer", OP)


def test_the_shipped_files_serve_each_cpu_its_isa(monkeypatch):
    """Of the stored layer files, an AVX2-only CPU (not only the Zen 3 that searched them) gets the AVX2
    search's, a Zen 4 the generic AVX-512 ones, the Xeon whose directory exists its own."""
    monkeypatch.delenv("LOOPOPT_SCHEDULES", raising=False)
    avx2 = ROOT / "schedules" / "amd-25-1-avx2"
    xeon = ROOT / "schedules" / "intel-6-167-avx2-avx512-vnni-bf16-amx"
    assert len(list(avx2.glob("*.toml"))) == 18              # nine layers, fp32 and int8
    for cpu, directory in [("zen3", avx2), ("zen2", avx2), ("haswell", avx2), ("zen4", ROOT / "schedules"),
                           ("xeon_167", xeon)]:
        fake_cpu(monkeypatch, cpu)
        for name in (path.stem for path in (xeon if cpu == "xeon_167" else avx2).glob("*.toml")):
            assert lo.stored_schedule(name).path == directory / f"{name}.toml", (cpu, name)


def test_cpu_directories_hold_their_cpus_schedules_and_are_installed():
    """Each schedules/<cpu key>/ holds schedules searched on that CPU and is in pyproject's data-files."""
    data_files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    assert data_files["share/loopopt/schedules"] == ["schedules/*.toml"]
    for directory in (d for d in (ROOT / "schedules").iterdir() if d.is_dir()):
        key = directory.name
        assert data_files[f"share/loopopt/schedules/{key}"] == [f"schedules/{key}/*.toml"]
        for path in directory.glob("*.toml"):
            assert tomllib.loads(path.read_text())["provenance"]["cpu_key"] == key, path


WINO_OP = lo.Conv2d(5, 12, 3, padding=1, bias=True, height=7, width=9)


def _same_plan(a, b) -> bool:
    return (type(a), a.m, a.gemm_rows, a.gemm_cols) == (type(b), b.m, b.gemm_rows, b.gemm_cols) and \
        {n: s.steps for n, s in a.schedules.items()} == {n: s.steps for n, s in b.schedules.items()}


# 2 tiles x 2 vectors of int32 (not a default block) of the integer ISA this CPU runs the plan on
HOST_BLOCK = (2, 2 * LANES[available_int_isas()[0]])


# the quick tier: the int8 plans, with and without their GEMM block (a float plan's TOML round trip is
# test_winograd_plan_with_replaced_stages_round_trips's; the float plans' kernels, test_winograd's); the
# float plans, which build slower (1.1 CPU-s each), are slow
@pytest.mark.parametrize("op, m, block", [
    pytest.param(WINO_OP, 4, (7, 48), marks=pytest.mark.slow),
    pytest.param(WINO_OP, 2, (None, None), marks=pytest.mark.slow),
    (WINO_OP.with_quant(lo.QuantSpec(output="uint8")), 2, (None, None)),
    (WINO_OP.with_quant(lo.QuantSpec(activation="int8", per_channel=False)), 2, HOST_BLOCK)])
def test_winograd_plan_saves_and_loads_like_a_schedule(tmp_path, op, m, block):
    """A Winograd plan (float32 or int8, with or without its GEMM block) saves as algorithm = "winograd"
    with its tile and block, and loads back as the same plan, which compiles and is verified."""
    from loopopt.measure import verify
    plan = lo.dataflows.winograd(op, m, *block)
    path = save_schedule(plan, tmp_path / "wino.toml", description="a plan")
    document = tomllib.loads(path.read_text())
    assert document["algorithm"] == "winograd" and "step" not in document
    assert document["winograd"]["tile"] == m and document["provenance"]["isa"]
    loaded = load_schedule(path, op)
    assert _same_plan(loaded, plan) and to_toml(loaded) == to_toml(plan)
    assert verify(loaded.compile())[0]


def test_winograd_plan_with_replaced_stages_round_trips(tmp_path):
    """Stages whose schedule differs from the default plan's are written step by step (a stage with no
    steps too); the others are not."""
    plan = lo.dataflows.winograd(WINO_OP, 2)
    gemm = plan.schedules["gemm"]
    changed = plan.with_stage("gemm", lo.Schedule(gemm.op)).with_stage(
        "output_cols", lo.Schedule(plan.schedules["output_cols"].op).split("k", 4).unroll("k_i", 2))
    text = to_toml(changed)
    assert set(tomllib.loads(text)["winograd"]["stages"]) == {"gemm", "output_cols"}
    assert _same_plan(lo.schedule_file.schedule_from_toml(text, WINO_OP), changed)


@pytest.mark.parametrize("table, message", [
    ("[winograd]\ntile = 3", r"m \(output tile size\) must be one of \(2, 4\), got 3"),
    ("[winograd]\ntile = 4\ngemm = 7", "no key 'gemm'; allowed: tile, gemm_rows, gemm_cols, stages"),
    ("[winograd]\ngemm_rows = 7", "a \\[winograd\\] table with tile = 2 or 4"),
    ("step = []\n[winograd]\ntile = 4", "a winograd plan has no \\[\\[step\\]\\] tables"),
    ("[winograd]\ntile = 4\n[winograd.stages]\nfilter = []", "names stage 'filter'; the stages with a"),
    ("[winograd]\ntile = 4\n[winograd.stages]\ngemm = [{ split = ['q', 2] }]", "stage gemm step 1: .*'q'"),
])
def test_bad_winograd_files_say_what_is_wrong(tmp_path, table, message):
    path = tmp_path / "bad.toml"
    path.write_text(f'name = "bad"\nalgorithm = "winograd"\n{table}\n')
    with pytest.raises(ScheduleFileError, match=f"bad.toml: .*{message}"):
        load_schedule(path, WINO_OP)


def test_winograd_file_on_an_op_it_does_not_apply_to(tmp_path):
    path = save_schedule(lo.dataflows.winograd(WINO_OP), tmp_path / "wino.toml")
    with pytest.raises(ScheduleFileError, match=r"wino.toml: winograd F\(4x4,3x3\) takes stride=1"):
        load_schedule(path, lo.Conv2d(5, 12, 3, stride=2, height=9, width=9))


def test_schedule_files_say_their_algorithm(tmp_path):
    """A loop nest saved with its algorithm records it (and loads as before); an unknown algorithm, or
    a [winograd] table in a loop nest's file, is refused."""
    schedule = lo.dataflows.im2col(OP)
    path = save_schedule(schedule, tmp_path / "cols.toml", algorithm="im2col")
    assert tomllib.loads(path.read_text())["algorithm"] == "im2col"
    assert load_schedule(path, OP).steps == schedule.steps
    assert "algorithm" not in to_toml(schedule)          # the tuning log's text of a candidate is unchanged
    with pytest.raises(ValueError, match="the algorithm of a schedule .* is one of 'direct', "
                                         "'implicit_gemm', 'im2col', got 'winograd'"):
        to_toml(schedule, algorithm="winograd")
    path.write_text(path.read_text().replace('"im2col"', '"fft"'))
    with pytest.raises(ScheduleFileError, match="algorithm must be one of 'direct', .*'winograd', got 'fft'"):
        load_schedule(path, OP)
    path.write_text(path.read_text().replace('"fft"', '"direct"') + "\n[winograd]\ntile = 4\n")
    with pytest.raises(ScheduleFileError, match="a \\[winograd\\] table goes with algorithm = 'winograd'"):
        load_schedule(path, OP)


@pytest.mark.parametrize("made, other", [("float32", "int8"), ("int8", "float32"), ("bfloat16", "float32"),
                                         ("float32", "bfloat16")])
def test_a_file_refuses_an_op_of_another_arithmetic(tmp_path, made, other):
    """save_schedule records the arithmetic (and a quantized op's QuantSpec); loading on an op of another
    arithmetic is refused in one line with the way out, any_arithmetic=True replays it anyway."""
    schedule = dataflows.output_stationary(OP_OF[made])
    path = save_schedule(schedule, tmp_path / "made.toml")
    document = tomllib.loads(path.read_text())
    assert document["made_for"] == made
    assert ("quant" in document) == (made == "int8")
    way_out = {"int8": "op.with_quant(QuantSpec(activation='uint8', per_channel=True, weight_symmetric=True, "
                       "output='float32', weight='int8')); on the command line: --int8",
               "float32": "a float32 op", "bfloat16": "--dtype bfloat16"}[made]
    with pytest.raises(ScheduleFileError, match=f"made.toml was made for {made} ops, not {other} ones like "
                                                f"Conv2d.*{re.escape(way_out)}.*any_arithmetic=True") as err:
        load_schedule(path, OP_OF[other])
    assert "\n" not in str(err.value)
    assert load_schedule(path, OP_OF[other], any_arithmetic=True).steps == schedule.steps


def test_another_quantspec_of_the_same_arithmetic_loads(tmp_path):
    """Within int8, another QuantSpec (output, zero points, scale granularity) is the same integer kernel with
    another epilogue: the file applies."""
    path = save_schedule(dataflows.output_stationary(OP_OF["int8"]), tmp_path / "q.toml")
    other = OP.with_quant(lo.QuantSpec(activation="int8", per_channel=False, weight_symmetric=False,
                                       output="int32"))
    assert load_schedule(path, other).steps == dataflows.output_stationary(other).steps
    path.write_text(path.read_text().replace('made_for = "int8"', 'made_for = "int4"'))
    with pytest.raises(ScheduleFileError, match="made_for must be one of 'float32', 'bfloat16', 'int8', "
                                                "'binary', got 'int4'"):
        load_schedule(path, OP_OF["int8"])
