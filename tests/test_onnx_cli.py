"""``loopopt onnx MODEL.onnx``: the per-node report of a model built in the tests, its JSON and plot,
tuning, and one-line errors for bad models."""
import json

import onnx
import pytest
from json_schemas import check
from onnx import TensorProto, helper
from onnx_models import model, quantized_model, small_cnn

from loopopt.cli import main
from loopopt.onnx.peer import config_entries, options_text
from loopopt.onnx.report import model_report

try:
    import onnxruntime  # noqa: F401
    HAVE_ORT = True
except ImportError:
    HAVE_ORT = False


def test_report_of_a_cnn(capsys, tmp_path):
    path, plot = tmp_path / "cnn.onnx", tmp_path / "where.png"
    onnx.save(small_cnn(), path)
    assert main(["onnx", str(path), "--json", "--no-reuse", "--budget", "0.01", "--plot", str(plot)]) == 0
    data = json.loads(capsys.readouterr().out)
    check("onnx", data)
    assert [n["node"] for n in data["nodes"]] == ["conv1", "depthwise", "pointwise", "fc"]
    for node in data["nodes"]:
        ran = node["loopopt"]["ran"]
        assert ran["median_s"] > 0 and ran["verified"] and node["flops"] > 0
        assert (node["onnxruntime_s"] is not None) == HAVE_ORT
        assert node["integer_check"] is None                                 # a float model
    assert data["onnxruntime_options"] == (config_entries() if HAVE_ORT else None)   # exact on this CPU
    # each Relu runs in its Conv's store (onnx.epilogues), timed with it on onnxruntime
    assert [n["absorbed"] for n in data["nodes"]] == [["Relu_1"], ["Relu_3"], [], []]
    assert data["total_s"]["loopopt"] > 0 and plot.stat().st_size > 0


def test_report_table_with_reuse_of_a_quantized_model():
    report = model_report(quantized_model(), budget=0.01)
    table = report.table()
    assert "qconv" in table and "Matmul(m=1, n=7, k=120, quant=" in table
    assert "total over the compute nodes" in table
    assert "whole model, each node timed in a run of the plan" in table and report.fallbacks == []
    assert set(report.engines_ms) == {"loopopt kernel", "numpy"}      # Quantize/DequantizeLinear, Flatten
    assert all(n.best.dram_bytes is not None for n in report.timed)
    if HAVE_ORT:     # each quantized node against onnxruntime's output and the exact reference
        assert "integer outputs vs onnxruntime" in table
        assert all(n.integer is not None and n.integer.max_lsb <= 1 for n in report.timed)
        assert f"onnxruntime ran with {options_text()}" in table
    else:
        assert "onnxruntime ran with" not in table and report.onnxruntime_options is None


@pytest.mark.slow
def test_tune_tunes_identical_shapes_once(tmp_path, capsys):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="first"),
             helper.make_node("MatMul", ["h", "w"], ["y"], name="second")]
    proto = model(nodes, [("x", TensorProto.FLOAT, [4, 8]), ("w", TensorProto.FLOAT, [8, 8])],
                  [("y", TensorProto.FLOAT, [4, 8])])
    path, log = tmp_path / "mm.onnx", tmp_path / "tune.db"
    onnx.save(proto, path)
    argv = ["onnx", str(path), "--tune", "--trials", "2", "--log", str(log), "--no-reuse", "--json",
            "--budget", "0.01"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert all("tuned" in n["loopopt"] for n in data["nodes"])
    report = model_report(path, log=log, reuse=False, budget=0.01)   # the log's best now runs the nodes
    assert {n.lowered.source for n in report.nodes} == {f"tuning log {log}"}


def test_bad_models_exit_2_with_one_line(tmp_path, capsys):
    junk = tmp_path / "junk.onnx"
    junk.write_text("hello")
    assert main(["onnx", str(junk)]) == 2
    assert "junk.onnx is not an ONNX model" in capsys.readouterr().err
    dynamic = tmp_path / "dynamic.onnx"
    onnx.save(model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                    [("a", TensorProto.FLOAT, ["N", 4]), ("b", TensorProto.FLOAT, [4, 3])],
                    [("y", TensorProto.FLOAT, ["N", 3])]), dynamic)
    assert main(["onnx", str(dynamic)]) == 2
    assert "input 'a' has a dynamic dim 'N' at axis 0" in capsys.readouterr().err
