"""The loopopt command: output, --json, and exit status 2 with one line for user mistakes."""
import json

import pytest
from helpers import quick_first

from loopopt.cli import main

SMALL = ["--matmul", "8,16,8"]


def run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_layers(capsys):
    status, out, _ = run(capsys, "layers", "--filter", "resnet50")
    assert status == 0 and "resnet50.conv2_x " in out and "vgg16" not in out
    status, out, _ = run(capsys, "layers", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    conv2_x = {"C": 64, "K": 64, "HW": 56, "padding": 1}
    assert status == 0 and rows["resnet50.conv2_x"].items() >= conv2_x.items()
    assert rows["mobilenetv2.block2.depthwise"]["kind"] == "depthwise"


def test_compare_json_and_plot(capsys, tmp_path):
    plot = tmp_path / "c.png"
    status, out, _ = run(capsys, "compare", *SMALL, "--schedules", "naive,output_stationary",
                         "--plot", str(plot), "--json", "--quiet")
    data = json.loads(out)
    assert status == 0 and [r["name"] for r in data["rows"]] == ["naive", "output_stationary"]
    assert all(r["verified"] for r in data["rows"]) and plot.stat().st_size > 0


def test_show_and_reuse(capsys):
    status, out, _ = run(capsys, "show", *SMALL, "--schedule", "tiled")
    assert status == 0 and "for i_o" in out and "generated C" in out
    status, out, _ = run(capsys, "reuse", *SMALL, "--schedule", "tiled", "--json")
    assert status == 0 and set(json.loads(out)["tensors"]) == {"A", "B", "C"}


@pytest.mark.parametrize("suffix", quick_first(["md", "html"]))
def test_report(capsys, tmp_path, suffix):
    path = tmp_path / f"r.{suffix}"
    status, _, _ = run(capsys, "report", *SMALL, "--schedules", "naive", "--quiet", "-o", str(path))
    assert status == 0 and "data:image/png;base64," in path.read_text()


@pytest.mark.parametrize("argv, message", [
    (["compare", "--layer", "resnet50.conv2_y"], "did you mean 'resnet50.conv2_x'"),
    (["show", *SMALL, "--schedule", "tiledd"], "did you mean 'tiled'"),
    (["compare", *SMALL, "--plot", "/no/such/dir/x.png"], "cannot write /no/such/dir/x.png"),
    (["show", "--matmul", "8,x"], "--matmul wants M,N,K"),
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
