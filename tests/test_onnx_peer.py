"""loopopt.onnx.peer: the session options of every comparison with onnxruntime carry its exact int8
entry (whether onnxruntime then saturates depends on the CPU, so the options are tested, not the CPU)."""
import pytest
from onnx_models import quantized_model

from loopopt.onnx.peer import config_entries, options_text, session_options
from loopopt.onnx.report import model_report

EXACT_ENTRY = "session.x64quantprecision"


def test_exact_options_carry_the_entry_and_the_threads():
    pytest.importorskip("onnxruntime")
    options = session_options(threads=3)
    assert options.get_session_config_entry(EXACT_ENTRY) == "1" and options.intra_op_num_threads == 3
    assert session_options().get_session_config_entry(EXACT_ENTRY) == "1"
    assert session_options().intra_op_num_threads == 0                     # onnxruntime's default


def test_default_mode_sets_no_entry():
    pytest.importorskip("onnxruntime")
    with pytest.raises(RuntimeError, match=EXACT_ENTRY):                    # not configured
        session_options(int8="default").get_session_config_entry(EXACT_ENTRY)
    assert config_entries("default") == {}


def test_the_text_names_the_entry():
    assert options_text().startswith(f"{EXACT_ENTRY}=1: ")
    assert options_text("default").startswith("its default session options")


def test_an_unknown_mode_is_refused_in_one_line():
    message = "onnxruntime int8 mode 'fast' is not known; one of exact, default"
    with pytest.raises(ValueError, match=message):
        session_options(int8="fast")
    with pytest.raises(ValueError, match=message):
        model_report(quantized_model(), ort_int8="fast")
