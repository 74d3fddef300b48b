"""loopopt.onnx.peer: every comparison with onnxruntime runs its exact int8 kernels: the exact entry
where its default kernels saturate (x86 without VNNI), none where they are exact (the CPU's flags are
given, so the options are tested on any CPU)."""
import pytest
from onnx_models import quantized_model

from loopopt.onnx.peer import config_entries, int8_saturates, options_text, session_options
from loopopt.onnx.report import model_report

EXACT_ENTRY = "session.x64quantprecision"
AVX2 = frozenset({"sse2", "avx2", "fma"})
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl"}            # Skylake-X: no VNNI
ZEN4 = AVX512 | {"avx512_vnni", "avx512_bf16"}
ALDER_LAKE = AVX2 | {"avx_vnni"}
ARM = frozenset({"fp", "asimd", "asimddp"})                     # no flags line on ARM: these or none


@pytest.mark.parametrize(("flags", "saturates"), [(AVX2, True), (AVX512, True), (ZEN4, False),
                                                  (ALDER_LAKE, False), (ARM, False), (frozenset(), False)])
def test_only_x86_without_vnni_saturates(flags, saturates):
    assert int8_saturates(flags) is saturates
    assert config_entries(flags=flags) == ({EXACT_ENTRY: "1"} if saturates else {})


def test_exact_options_carry_the_entry_and_the_threads_where_int8_saturates():
    pytest.importorskip("onnxruntime")
    options = session_options(threads=3, flags=AVX2)
    assert options.get_session_config_entry(EXACT_ENTRY) == "1" and options.intra_op_num_threads == 3
    assert session_options(flags=AVX2).intra_op_num_threads == 0             # onnxruntime's default
    with pytest.raises(RuntimeError, match=EXACT_ENTRY):                      # not configured
        session_options(flags=ZEN4).get_session_config_entry(EXACT_ENTRY)


def test_default_mode_sets_no_entry():
    pytest.importorskip("onnxruntime")
    with pytest.raises(RuntimeError, match=EXACT_ENTRY):                    # not configured
        session_options(int8="default", flags=AVX2).get_session_config_entry(EXACT_ENTRY)
    assert config_entries("default", AVX2) == {}


def test_the_text_names_the_entry_or_why_there_is_none():
    assert options_text(flags=AVX2).startswith(f"{EXACT_ENTRY}=1: ")
    assert options_text(flags=ZEN4) == ("its default session options: its int8 kernels are exact on this CPU "
                                        "(VNNI, or not x86)")
    assert options_text("default", AVX2).startswith("its default session options: on an x86 CPU without VNNI")


def test_an_unknown_mode_is_refused_in_one_line():
    message = "onnxruntime int8 mode 'fast' is not known; one of exact, default"
    with pytest.raises(ValueError, match=message):
        session_options(int8="fast")
    with pytest.raises(ValueError, match=message):
        model_report(quantized_model(), ort_int8="fast")
