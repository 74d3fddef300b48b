"""The loopopt command: output, --json, and exit status 2 with one line for user mistakes."""
import contextlib
import json
import os
import pty
import select
import signal
import sqlite3
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
from helpers import quick_first
from json_schemas import check

import loopopt as lo
from loopopt.cli import _op, main, parse_conv, parser
from loopopt.layers import get_layer
from loopopt.machine import cpu_key, this_cpu
from loopopt.schedule_file import stored_schedule
from loopopt.targets.neon import toolchain
from loopopt.targets.x86 import isa as x86_isa
from loopopt.targets.x86.isa import bf16_dot_available

ROOT = Path(__file__).resolve().parent.parent

SMALL = ["--matmul", "8,16,8"]
PROVENANCE = {"loopopt", "fingerprint", "cpu", "vendor", "cpu_key", "isa", "compiler", "threads", "utc"}


def run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_layers(capsys):
    status, out, _ = run(capsys, "layers", "--filter", "resnet50")
    assert status == 0 and "resnet50.conv2_x " in out and "vgg16" not in out
    status, out, _ = run(capsys, "layers", "--json")
    check("layers", json.loads(out))
    rows = {r["name"]: r for r in json.loads(out)["layers"]}
    conv2_x = {"in_channels": 64, "out_channels": 64, "size": 56, "padding": 1,
               "flops": get_layer("resnet50.conv2_x").flops}
    assert status == 0 and rows["resnet50.conv2_x"].items() >= conv2_x.items()
    assert rows["mobilenetv2.block2.depthwise"]["kind"] == "depthwise"

    # the stored schedules of each layer, with the CPU they were searched on and whether it is this one
    stored = rows["resnet50.conv2_x"]["stored"]
    found = stored_schedule("resnet50.conv2_x")
    assert set(stored) >= {"fp32", "int8"} and rows["resnet50.conv2_x.expand"]["stored"] == {}
    assert stored["fp32"] == {"path": str(found.path), "cpu": found.cpu, "cpu_key": found.cpu_key,
                              "this_cpu": found.this_cpu}
    status, out, _ = run(capsys, "layers", "--filter", "resnet50.conv2_x")
    line = next(line for line in out.splitlines() if line.startswith("resnet50.conv2_x "))
    number = line.split("fp32 [")[1].split("]")[0]
    assert f"[{number}] {found.summary()}" in out.splitlines()
    status, out, _ = run(capsys, "layers", "--filter", "mobilenetv2.block2.depthwise")     # 5.35 MFLOP
    assert status == 0 and " 0.00535 " in out


# the quick tier's compare and report skip the reuse analysis and its six figures (3 CPU-s each); the slow
# tier's run it (the quick tier draws every panel in test_plot's ten-row dashboard)
NO_REUSE = ("--no-reuse",)


@pytest.mark.parametrize("reuse", [pytest.param(NO_REUSE, id="no-reuse"),
                                   pytest.param((), id="reuse", marks=pytest.mark.slow)])
def test_compare_json_and_plot(capsys, tmp_path, reuse):
    plot = tmp_path / "c.png"
    status, out, _ = run(capsys, "compare", *SMALL, "--schedules", "naive,output_stationary", *reuse,
                         "--plot", str(plot), "--json", "--quiet")
    data = json.loads(out)
    check("compare", data, rate="GFLOP/s")
    assert status == 0 and [r["name"] for r in data["rows"]] == ["naive", "output_stationary"]
    assert all(r["verified"] for r in data["rows"]) and plot.stat().st_size > 0
    assert set(data["provenance"]) == PROVENANCE
    assert data["timing"]["scope"].startswith("kernel run only") and data["timing"]["rounds"] == 5


def test_show_and_reuse(capsys):
    status, out, _ = run(capsys, "show", *SMALL, "--schedule", "tiled")
    assert status == 0 and "for i_o" in out and "generated C" in out
    status, out, _ = run(capsys, "reuse", *SMALL, "--schedule", "tiled", "--json")
    check("reuse", json.loads(out))
    assert status == 0 and set(json.loads(out)["tensors"]) == {"A", "B", "C"}
    assert set(json.loads(out)["provenance"]) == PROVENANCE - {"isa", "threads"}
    status, out, _ = run(capsys, "show", *SMALL, "--schedule", "tiled", "--json")
    check("show", json.loads(out))
    assert status == 0 and json.loads(out)["provenance"]["isa"] == json.loads(out)["isa"]


def test_batched_transposed_matmul(capsys):
    status, out, _ = run(capsys, "reuse", "--matmul", "8,16,8,batch=2x3,trans_a=1", "--schedule", "tiled",
                         "--json")
    assert status == 0 and set(json.loads(out)["tensors"]) == {"A", "B", "C"}
    status, out, _ = run(capsys, "show", "--matmul", "8,16,8,batch=2,trans_b=1", "--no-source")
    assert status == 0 and "for b " in out and "B[" in out
def test_show_names_the_isa_asked(capsys):
    """The pseudo-code of ``show --isa X`` notes X's vector accesses, on any CPU (no kernel is built)."""
    for isa, lanes in (("avx512", 16), ("avx2", 8)):
        status, out, _ = run(capsys, "show", "--conv", "16,32,3,10,padding=1", "--schedule",
                             "output_stationary", "--isa", isa, "--no-source")
        assert status == 0 and f"on {isa} ({lanes} lanes)" in out


def test_bf16_dtype(capsys):
    """--dtype bfloat16 makes the op bf16; the stored bf16 layer schedule shows its dot loop where it runs."""
    status, out, _ = run(capsys, "show", "--conv", "4,16,3,6,padding=1", "--dtype", "bfloat16", "--schedule",
                         "resnet50.conv2_x.bf16", "--json")
    data = json.loads(out)
    assert status == 0 and "dtype='bfloat16'" in data["op"] and "uint16_t *restrict I" in data["source"]
    assert ("vdpbf16ps" in data["pseudocode"]) == bf16_dot_available(data["isa"])
    status, out, err = run(capsys, "compare", *SMALL, "--dtype", "bfloat16", "--schedules", "naive",
                           "--no-reuse")
    row = next(line for line in out.splitlines() if line.startswith("naive "))
    assert status == 0 and " yes " in row and err == ""     # verified; no progress bar: stderr is no terminal


def test_contraction(capsys):
    status, out, _ = run(capsys, "show", "--contraction", "O[i,j] += I[i+di-1, j+dj-1] * W[di,dj]", "--sizes",
                         "i=6,j=9,di=3,dj=3,I=6x9", "--padding", "I", "--schedule", "interchanged",
                         "--no-source")
    assert status == 0 and "for dj in 0..3" in out and "if 0 <= ((i + di) - 1) and ((i + di) - 1) < 6" in out
    status, out, _ = run(capsys, "reuse", "--contraction", "C[i,j] += A[i,k,l] * B[l,k,j]", "--sizes",
                         "i=4,j=8,k=2,l=3", "--schedule", "tiled", "--json")
    assert status == 0 and set(json.loads(out)["tensors"]) == {"A", "B", "C"}


def test_machine(capsys):
    import loopopt as lo
    status, out, _ = run(capsys, "machine")
    assert status == 0 and f"machine {lo.machine_profile().fingerprint}:" in out and "DRAM" in out
    status, out, _ = run(capsys, "machine", "--json")
    data = json.loads(out)
    assert status == 0 and lo.MachineProfile.from_dict({k: v for k, v in data.items() if k != "provenance"}) \
        == lo.machine_profile()
    assert set(data["provenance"]) == PROVENANCE - {"isa", "threads"}


@pytest.mark.parametrize("suffix, reuse", [pytest.param("md", NO_REUSE, id="md-no-reuse"),
                                           pytest.param("html", (), id="html-reuse", marks=pytest.mark.slow)])
def test_report(capsys, tmp_path, suffix, reuse):
    path = tmp_path / f"r.{suffix}"
    status, out, _ = run(capsys, "report", *SMALL, "--schedules", "naive", *reuse, "--quiet", "-o", str(path),
                         "--json")
    check("report", json.loads(out), rate="GFLOP/s")
    text = path.read_text()
    assert status == 0 and "data:image/png;base64," in text
    assert "measured on " in text and "kernel run only" in text       # provenance and what was timed


@pytest.mark.parametrize("argv, message", [
    (["compare", "--layer", "resnet50.conv2_y"], "did you mean 'resnet50.conv2_x'"),
    (["show", *SMALL, "--schedule", "tiledd"], "did you mean 'tiled'"),
    (["compare", *SMALL, "--plot", "/no/such/dir/x.png"], "cannot write /no/such/dir/x.png"),
    (["show", "--matmul", "8,x"], "--matmul wants M,N,K"),
    (["show", "--matmul", "8,8,8,trans_c=1"], "--matmul field 'trans_c=1' is not one of batch=B[xB2...]"),
    (["show", "--matmul", "8,8,8,batch=2x0"],
     "--matmul 8,8,8,batch=2x0: batch must be a positive integer, got 0"),
    (["show", *SMALL, "--batch", "2"], "--batch applies to --layer and --conv, not to --matmul"),
    (["show", "--contraction", "C[i,j] += A[i,k] * B[k,j]"], "--contraction needs --sizes"),
    (["show", "--contraction", "C[i,j] += A[i,k] * B[k,j]", "--sizes", "i=2,j"],
     "--sizes field 'j' is not"),
    (["show", "--contraction", "C[i,j] += A[i*k] * B[k,j]", "--sizes", "i=2,j=2,k=2"],
     "the index is not affine at position 13"),
    (["show", *SMALL, "--sizes", "i=2"], "--sizes and --padding go with --contraction"),
    (["report", *SMALL, "-o", "r.pdf"], ("cannot write a report to r.pdf: its suffix must be one of "
                                         ".md (Markdown), .html (HTML), .htm (HTML), got .pdf")),
    (["report", *SMALL, "-o", "report"], "got none"),
    (["tune", *SMALL, "--int8", "--dtype", "bfloat16"], "--int8 quantizes float32 inputs"),
])
def test_user_errors_exit_2(capsys, argv, message):
    status, _, err = run(capsys, *argv)
    assert status == 2 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_malformed_schedule_file(capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[step]\n")
    status, _, err = run(capsys, "show", *SMALL, "--schedule", str(bad))
    assert status == 2 and "malformed TOML" in err


def test_usage_error_from_argparse(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--isa", "sse9"])
    assert exit_info.value.code == 2


@pytest.mark.slow
def test_threads_and_dotted_schedule_names(capsys):
    code = main(["compare", "--layer", "mobilenetv2.block3.depthwise", "--schedules",
                 "naive,mobilenetv2.block3.depthwise", "--threads", "2", "--no-reuse", "--quiet"])
    assert code == 0
    assert "mobilenetv2.block3.depthwise" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--matmul", "8,16,8", "--threads", "0", "--quiet"])
    assert exit_info.value.code == 2
    assert "must be an integer >= 1, got '0'" in capsys.readouterr().err


def test_quantized_catalog_layer():
    import loopopt as lo
    spec = lo.QuantSpec(output="uint8")
    op = lo.get_layer("resnet50.conv2_x", quant=spec)
    assert op.quant == spec and op.out_channels == 64
    assert "resnet50.conv2_x" in lo.list_schedules()


@pytest.mark.parametrize("spec, expected", [
    ("64,64,3,56,padding=1", {"in_channels": 64, "out_channels": 64, "kernel_size": (3, 3), "stride": (1, 1),
                              "padding": (1, 1), "dilation": (1, 1), "groups": 1, "bias": True,
                              "height": 56, "width": 56}),
    (" 8, 4, 3x1, 20x10, stride=2x1, padding=1x0, dilation=2, groups=4, bias=0",
     {"in_channels": 8, "out_channels": 4, "kernel_size": (3, 1), "stride": (2, 1), "padding": (1, 0),
      "dilation": (2, 2), "groups": 4, "bias": False, "height": 20, "width": 10}),
])
def test_conv_spec(spec, expected):
    op = parse_conv(spec, batch=3)
    assert {name: getattr(op, name) for name in expected} == expected and op.batch == 3


@pytest.mark.parametrize("spec, message", [
    ("64,64,3", ("--conv wants C,K,KH[xKW],H[xW][,stride=S][,padding=P][,dilation=D][,groups=G][,bias=0|1] "
                 "(e.g. 64,64,3,56,padding=1): C, K, kernel and input size come first, got 3 such fields")),
    ("64,64,padding=1,3,56", "got 2 such fields"),
    ("64,64,3,56,stride=2,7", "--conv field '7' comes after key=value fields"),
    ("0,64,3,56", "--conv field C (input channels) must be a positive integer, got '0'"),
    ("64,6.5,3,56", "--conv field K (output channels) must be a positive integer, got '6.5'"),
    ("64,64,3x,56", "--conv field KH[xKW] (kernel size) must be N or NxM with integers >= 1, got '3x'"),
    ("64,64,3,56x56x3", "--conv field H[xW] (input size) must be N or NxM with integers >= 1, got '56x56x3'"),
    ("64,64,3,56,padding=-1", "--conv field padding must be N or NxM with integers >= 0, got '-1'"),
    ("64,64,3,56,stride=0", "--conv field stride must be N or NxM with integers >= 1, got '0'"),
    ("64,64,3,56,groups=two", "--conv field groups must be a positive integer, got 'two'"),
    ("64,64,3,56,bias=yes", "--conv field bias must be 0 or 1, got 'yes'"),
    ("64,64,3,56,pad=1", ("--conv has no field 'pad': did you mean 'padding'? allowed: stride, padding, "
                          "dilation, groups, bias")),
    ("64,64,3,56,batch=2", "(the batch size is given with --batch)"),
    ("64,64,3,56,padding=1,padding=2", "--conv field 'padding' is given twice"),
    ("64,64,3,56,groups=3", "--conv 64,64,3,56,groups=3: in_channels=64 is not divisible by groups=3"),
    ("64,64,9,5", "spans 9x9, larger than the padded input 5x5"),
])
def test_conv_spec_errors(capsys, spec, message):
    status, _, err = run(capsys, "show", "--conv", spec, "--no-source")
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1


def test_conv_spec_wherever_a_layer_is_accepted(capsys):
    conv = ["--conv", "4,6,3,7x5,stride=2,padding=1,groups=2", "--batch", "2"]
    status, out, _ = run(capsys, "compare", *conv, "--schedules", "naive,tiled", "--json", "--quiet",
                         "--no-reuse")
    data = json.loads(out)
    assert status == 0 and "groups=2" in data["op"] and "batch=2" in data["op"]
    assert [r["verified"] for r in data["rows"]] == [True, True]
    status, out, _ = run(capsys, "show", *conv, "--no-source", "--json")
    assert status == 0 and json.loads(out)["op"] == data["op"]
    status, out, _ = run(capsys, "reuse", *conv, "--json")
    assert status == 0 and set(json.loads(out)["tensors"]) == {"I", "W", "O"}
    with pytest.raises(SystemExit):
        main(["show", "--conv", "4,6,3,7", "--layer", "resnet50.conv2_x"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_version_and_examples(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out == f"loopopt {metadata.version('loopopt')}\n"
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "examples:\n  loopopt layers" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["show", "--help"])
    out = capsys.readouterr().out
    assert "--conv SPEC" in out and "examples:\n  loopopt show --conv" in out


@pytest.mark.parametrize("argv", quick_first([["layers"], ["layers", "--json"]]))
@pytest.mark.slow
def test_closed_pipe_ends_quietly(argv):
    reader, writer = os.pipe()
    os.close(reader)                     # the reader is gone before the first line, as after `| head -0`
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-m", "loopopt.cli", *argv], stdout=writer,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=120, check=False)
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (141, "")


def test_compare_says_where_a_stored_schedule_was_searched(capsys, tmp_path, monkeypatch):
    path = tmp_path / "far.toml"
    path.write_text('name = "far"\n\n[provenance]\ncpu = "Faraway CPU"\ncpu_key = "amd-25-17"\n\n'
                    '[[step]]\nunroll = "k"\n')
    status, out, _ = run(capsys, "compare", *SMALL, "--schedules", f"naive,{path}", "--no-reuse", "--quiet")
    origin = f"far: stored schedule {path}, searched on Faraway CPU [amd-25-17]; NOT this CPU"
    assert status == 0 and origin in out
    assert not [line for line in out.splitlines() if line.startswith("naive: ")]   # a preset has no origin
    status, out, _ = run(capsys, "compare", *SMALL, "--schedules", f"naive,{path}", "--no-reuse", "--quiet",
                         "--json")
    assert status == 0 and list(json.loads(out)["origins"]) == ["far"]
    # searched for an ISA this CPU lacks (here: AVX-512 on a CPU that shows AVX2 only), the note says so
    monkeypatch.setattr(x86_isa, "cpu_flags", lambda: frozenset(x86_isa.ISAS["avx2"].cpu_flags))
    wide = tmp_path / "wide.toml"
    wide.write_text('name = "wide"\n\n[provenance]\ncpu = "Wide CPU"\nvendor = "AuthenticAMD"\n'
                    'isa = "avx512"\n\n[[step]]\nunroll = "k"\n')
    status, out, _ = run(capsys, "compare", *SMALL, "--schedules", f"naive,{wide}", "--no-reuse", "--quiet")
    assert status == 0 and (f"wide: stored schedule {wide}, searched on Wide CPU for avx512; NOT this CPU "
                            f"({this_cpu().model} [{cpu_key()}]), which lacks avx512") in out
    # a stored name and a file of the same stem: each row labelled apart, each with its note
    copy = tmp_path / "naive.toml"
    copy.write_text(wide.read_text())
    status, out, _ = run(capsys, "compare", *SMALL, "--schedules", f"naive,{copy},naive", "--no-reuse",
                         "--quiet", "--json")
    data = json.loads(out)
    assert status == 0 and [r["name"] for r in data["rows"]] == ["naive", str(copy), "naive"]
    assert list(data["origins"]) == [str(copy)]


@pytest.mark.slow
def test_tune_scheduler_errors_are_one_line(capsys, monkeypatch):
    from loopopt.tune import cluster
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", 1.0)
    status, _, err = run(capsys, "tune", *SMALL, "--trials", "1", "--scheduler", "tcp://127.0.0.1:9")
    assert status == 2 and "cannot reach the Dask scheduler at 'tcp://127.0.0.1:9' within 1 s" in err
    monkeypatch.setitem(sys.modules, "dask", None)                      # Dask not installed
    status, _, err = run(capsys, "tune", *SMALL, "--trials", "1", "--scheduler", "local")
    assert status == 2 and "pip install -e '.[distributed]'" in err


@pytest.mark.slow           # a LocalCluster takes a few seconds to start
def test_tune_on_a_local_dask_cluster(capsys, tmp_path):
    pytest.importorskip("dask.distributed")
    log = tmp_path / "tune.db"
    status, out, _ = run(capsys, "tune", *SMALL, "--trials", "2", "--budget", "0.02", "--scheduler", "local",
                         "--log", str(log), "--json")
    data = json.loads(out)
    assert status == 0 and len(data["trials"]) == 2
    import loopopt as lo
    assert lo.best_trial(lo.Matmul(8, 16, 8), log=log).isa == data["isa"]


@pytest.mark.filterwarnings("default::loopopt.machine.OtherMachineWarning")
def test_warnings_print_as_one_line(capsys, tmp_path):
    path = tmp_path / "far.toml"
    path.write_text('name = "far"\n\n[provenance]\nfingerprint = "0000000000000000"\ncpu = "Faraway CPU"\n'
                    '\n[[step]]\nvectorize = "k"\n')
    status, _, err = run(capsys, "show", *SMALL, "--schedule", str(path), "--no-source")
    lines = [line for line in err.splitlines() if "Faraway CPU" in line]
    assert status == 0 and len(lines) == 1 and lines[0].startswith("loopopt: warning: ")
    assert "warnings.warn" not in err and "Warning:" not in err


QUANT_FLAGS = ["--int8", "--activation", "int8", "--per-tensor", "--asymmetric-weights", "--quant-output",
               "int32"]


@pytest.mark.parametrize("command", ["compare", "tune", "show", "reuse", "report"])
def test_int8_and_the_quantspec_choices_on_every_command(command):
    """Every command that builds an op takes --int8 and the QuantSpec choices (one argument code)."""
    args = parser().parse_args([command, "--conv", "4,8,3,6", *QUANT_FLAGS])
    assert _op(args).quant == lo.QuantSpec("int8", per_channel=False, weight_symmetric=False, output="int32")
    default = _op(parser().parse_args([command, "--conv", "4,8,3,6", "--int8"]))
    assert default.quant == lo.QuantSpec("uint8", True, True, "uint8")
    assert _op(parser().parse_args([command, "--conv", "4,8,3,6"])).quant is None


@pytest.mark.parametrize("argv, message", [
    (["--quant-output", "float32"], "--quant-output is a choice of the quantized op; it goes with --int8"),
    (["--per-tensor"], "--per-tensor is a choice of the quantized op; it goes with --int8"),
    (["--int8", "--weight", "binary"], "--int8: QuantSpec: binary activations and weights go together"),
    (["--int8", "--dtype", "bfloat16"], "--int8 quantizes float32 inputs; it does not combine with --dtype"),
    (["--schedules", "naive,resnet50.conv2_x.int8"],
     "resnet50.conv2_x.int8.toml was made for int8 ops, not float32 ones like Conv2d"),
])
def test_quantization_mistakes_are_one_line(capsys, argv, message):
    status, _, err = run(capsys, "compare", "--conv", "4,8,3,6", "--no-reuse", "--quiet", *argv)
    assert status == 2 and message in err and err.count("\n") == 1


def test_compare_int8_runs_the_stored_int8_schedule(capsys):
    """compare --int8 compares integer kernels (GOP/s, bit-exact verification), a stored int8 schedule
    among them; a quantized op refuses a float schedule file with the way out."""
    conv = ["--conv", "8,16,3,7,padding=1", "--no-reuse", "--quiet", "--json"]
    status, out, _ = run(capsys, "compare", *conv, "--int8", "--quant-output", "int8", "--schedules",
                         "naive,resnet50.conv2_x.int8")
    data = json.loads(out)
    check("compare", data, rate="GOP/s")
    assert status == 0 and "output='int8'" in data["op"] and all(r["verified"] for r in data["rows"])
    assert data["rows"][1]["name"] == "resnet50.conv2_x.int8" and data["rows"][1]["max_error"] == 0
    status, _, err = run(capsys, "compare", *conv, "--int8", "--schedules", "resnet50.conv2_x")
    assert status == 2 and "made for float32 ops, not int8 ones" in err and "without --int8" in err


def _as_a_foreground_command() -> None:
    """Run in the child before exec: SIGINT at its default, as a terminal's foreground command has it. A
    suite started as a background job of a script (``pytest ... &``) ignores SIGINT, its commands inherit
    that, and a python started with SIGINT ignored keeps ignoring it: a Ctrl-C test then saw the command
    run to its end with status 0."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _started(argv: list[str], ready) -> tuple[subprocess.Popen, list[str]]:
    """``loopopt argv`` in a session of its own (so a signal to its group is what a Ctrl-C on its terminal
    sends), once ``ready(stderr lines so far)`` says it is under way (polled; generous deadline)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "loopopt.cli", *argv], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                               preexec_fn=_as_a_foreground_command)
    lines: list[str] = []
    deadline = time.monotonic() + 180
    while not ready(lines) and process.poll() is None and time.monotonic() < deadline:
        readable, _, _ = select.select([process.stderr], [], [], 0.2)
        if readable:
            lines.append(process.stderr.readline())
    return process, lines


def _interrupted(process: subprocess.Popen, lines: list[str]) -> tuple[int, list[str]]:
    """Ctrl-C (SIGINT to the process group) and wait for the end: exit status and every stderr line."""
    assert process.poll() is None, "the command ended before it could be interrupted"
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=180)
    return process.returncode, lines + err.splitlines(keepends=True)


@pytest.mark.slow
def test_ctrl_c_during_tune_is_one_line_and_status_130(tmp_path):
    """A real SIGINT to the group of a running tune (its worker process included, as a terminal sends it):
    one line saying where the trials are, status 130, no traceback; the logged trials are kept."""
    log = tmp_path / "tune.db"

    def measured(_lines) -> bool:           # at least one trial in the log: the search is under way
        try:
            with sqlite3.connect(f"file:{log}?mode=ro", uri=True) as connection:
                return connection.execute("SELECT count(*) FROM trials").fetchone()[0] > 0
        except sqlite3.Error:
            return False

    process, lines = _started(["tune", "--conv", "32,64,3,28,padding=1", "--trials", "64", "--budget", "0.05",
                               "--log", str(log)], measured)
    status, err = _interrupted(process, lines)
    assert status == 130 and "Traceback" not in "".join(err) and "KeyboardInterrupt" not in "".join(err)
    assert err[-1].strip() == (f"loopopt: interrupted; the trials measured so far are in the tuning log "
                               f"{log} (the same command resumes)")
    assert measured(None)


def test_ctrl_c_during_compare_is_one_line_and_status_130():
    """A real SIGINT during compare (here while it compiles or times a slow naive kernel), its stderr a
    terminal: the progress bar shows there (only there: a pipe gets none), then one line, status 130."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    terminal, stderr = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "loopopt.cli", "compare", "--conv",
                                "128,128,3,56,padding=1", "--schedules", "naive,tiled", "--no-reuse"],
                               env=env, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True,
                               preexec_fn=_as_a_foreground_command)
    os.close(stderr)
    shown = b""
    while b"naive: compile" not in shown and process.poll() is None:
        shown += os.read(terminal, 4096)
    os.killpg(process.pid, signal.SIGINT)
    status = process.wait(timeout=180)
    with contextlib.suppress(OSError):          # EIO: the terminal's other end closed
        while chunk := os.read(terminal, 4096):
            shown += chunk
    os.close(terminal)
    text = shown.decode().replace("\r\n", "\n")
    assert status == 130 and "[" in text and "Traceback" not in text, (status, text)
    assert text.endswith("\nloopopt: interrupted\n"), text


@pytest.mark.parametrize("command", quick_first(["reuse", "show"]))   # one refusal, one compare quick
def test_show_and_reuse_of_a_winograd_plan_say_where_it_runs(capsys, tmp_path, command):
    """A saved Winograd plan is not one loop nest: show and reuse refuse it in one line; compare runs it."""
    conv = ["--conv", "4,8,3,6,padding=1"]
    path = lo.save_schedule(lo.dataflows.winograd(parse_conv("4,8,3,6,padding=1"), 2), tmp_path / "w.toml")
    status, _, err = run(capsys, command, *conv, "--schedule", str(path))
    assert status == 2 and err == (f"loopopt: error: --schedule {path} is a winograd F(2x2,3x3) plan, a "
                                   f"pipeline of stages, not one loop nest: {command} takes a schedule; "
                                   f"compare runs the plan (loopopt compare --schedules {path})\n")
    status, out, _ = run(capsys, "compare", *conv, "--schedules", f"naive,{path}", "--no-reuse", "--quiet",
                         "--json")
    assert status == 0 and json.loads(out)["rows"][1]["algorithm"] == "winograd F(2x2,3x3)"


@pytest.mark.skipif(toolchain.native(), reason="native AArch64: neon needs no cross toolchain")
def test_compare_on_a_target_without_its_toolchain_is_a_one_line_error(capsys, monkeypatch):
    monkeypatch.setenv(toolchain.CROSS_CC_ENV, "no-such-aarch64-gcc")
    assert main(["compare", "--target", "neon", "--matmul", "4,4,4", "--schedules", "naive", "--quiet"]) != 0
    err = capsys.readouterr().err
    assert "'no-such-aarch64-gcc' is not installed" in err and "apt-get install" in err
    assert len(err.strip().splitlines()) == 1
