"""onnxruntime as the peer of a comparison with loopopt: the session options every comparison uses.

On an x86 CPU without VNNI (AVX2; AVX-512 without VNNI) onnxruntime's default int8 GEMMs multiply
uint8 by int8 with ``vpmaddubsw``, which adds each pair of neighbouring products in saturating
int16 arithmetic: wrong wherever a pair passes 32767 (255 * 127 * 2 = 64770), where loopopt's int8
kernels are exact. ``session.x64quantprecision = 1`` makes onnxruntime rewrite constant int8
weights to uint8 (``w + 128``, zero point likewise) and take its exact uint8 x uint8 kernels; on
other CPUs (VNNI, AMX, ARM) it changes nothing. What it does not reach still saturates on such a
CPU whatever the options: an int8 operand fed at run time; a ConvInteger's int8 activations against
uint8 weights (its GEMM takes the weights as the unsigned operand); a QLinearMatMul of opset 21 or
later (onnxruntime 1.32's rewrite lists QLinearMatMul's opset-10 version only).

``INT8_MODES``: ``"exact"`` (the option set: like with like against loopopt's exact kernels; the
default everywhere) and ``"default"`` (onnxruntime's own choice: faster where it saturates).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnxruntime

EXACT, DEFAULT = "exact", "default"
INT8_MODES: dict[str, dict[str, str]] = {
    EXACT: {"session.x64quantprecision": "1"},
    DEFAULT: {},
}


def config_entries(int8: str = EXACT) -> dict[str, str]:
    """The session config entries of int8 mode ``int8`` (a key of ``INT8_MODES``)."""
    if int8 not in INT8_MODES:
        raise ValueError(f"onnxruntime int8 mode {int8!r} is not known; one of {', '.join(INT8_MODES)}")
    return dict(INT8_MODES[int8])


def session_options(threads: int | None = None, int8: str = EXACT) -> onnxruntime.SessionOptions:
    """New ``onnxruntime.SessionOptions`` with the config entries of ``int8`` (``config_entries``) and
    ``threads`` intra-op threads (None: onnxruntime's default)."""
    import onnxruntime

    entries = config_entries(int8)
    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    for key, value in entries.items():
        options.add_session_config_entry(key, value)
    return options


def options_text(int8: str = EXACT) -> str:
    """What a peer of int8 mode ``int8`` ran with, for a report or a table heading."""
    entries = config_entries(int8)
    if not entries:
        return ("its default session options: on an x86 CPU without VNNI its uint8 x int8 kernels add pairs "
                "of products in saturating int16")
    return (", ".join(f"{key}={value}" for key, value in entries.items())
            + ": exact int8 products for constant int8 weights; on x86 without VNNI a QLinearMatMul of "
              "opset 21 or later still saturates")
