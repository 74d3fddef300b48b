"""onnxruntime as the peer of a comparison with loopopt: the session options every comparison uses.

On an x86 CPU without VNNI (AVX2; AVX-512 without VNNI) onnxruntime's default int8 GEMMs multiply
uint8 by int8 with ``vpmaddubsw``, which adds each pair of neighbouring products in saturating
int16 arithmetic: wrong wherever a pair passes 32767 (255 * 127 * 2 = 64770), where loopopt's int8
kernels are exact. ``session.x64quantprecision = 1`` makes onnxruntime rewrite constant int8
weights to uint8 (``w + 128``, zero point likewise) and take its exact uint8 x uint8 kernels. What it
does not reach still saturates on such a CPU whatever the options: an int8 operand fed at run time; a
ConvInteger's int8 activations against uint8 weights (its GEMM takes the weights as the unsigned
operand); a QLinearMatMul of opset 21 or later (onnxruntime 1.32's rewrite lists QLinearMatMul's
opset-10 version only). With VNNI (``vpdpbusd``: four products summed into int32) its default kernels
are exact, and the entry would only slow them: onnxruntime still rewrites the weights, and its uint8 x
uint8 kernels do without VNNI (ResNet-18 int8 on one thread of an AMD EPYC Zen 4: 28.0 ms with the
entry, 12.6 ms without).

``INT8_MODES``: ``"exact"`` (onnxruntime's exact int8 kernels: like with like against loopopt's; the
entry where its default kernels saturate, none elsewhere; the default everywhere) and ``"default"``
(onnxruntime's own choice: faster where it saturates).
"""
from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from ..machine import parse_cpuinfo

if TYPE_CHECKING:
    import onnxruntime

EXACT, DEFAULT = "exact", "default"
INT8_MODES: dict[str, dict[str, str]] = {
    EXACT: {"session.x64quantprecision": "1"},        # set where onnxruntime's default int8 kernels saturate
    DEFAULT: {},
}
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni"})   # /proc/cpuinfo flags of x86's vpdpbusd


@cache
def cpu_flags() -> frozenset[str]:
    """This CPU's /proc/cpuinfo flags as onnxruntime sees them (``LOOPOPT_HIDE_CPU_FLAGS`` does not hide
    them from it); empty where unreadable (read once per process)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    return parse_cpuinfo(text, 1).flags


def int8_saturates(flags: frozenset[str]) -> bool:
    """Whether onnxruntime's default uint8 x int8 kernels saturate on a CPU of ``flags``: x86 (its flags
    name sse2) without VNNI."""
    return "sse2" in flags and not flags & VNNI_FLAGS


def config_entries(int8: str = EXACT, flags: frozenset[str] | None = None) -> dict[str, str]:
    """The session config entries of int8 mode ``int8`` (a key of ``INT8_MODES``) on a CPU of ``flags``
    (None: this one's): ``"exact"`` sets its entries only where the default kernels saturate."""
    if int8 not in INT8_MODES:
        raise ValueError(f"onnxruntime int8 mode {int8!r} is not known; one of {', '.join(INT8_MODES)}")
    if int8 == EXACT and not int8_saturates(cpu_flags() if flags is None else flags):
        return {}
    return dict(INT8_MODES[int8])


def session_options(threads: int | None = None, int8: str = EXACT,
                    flags: frozenset[str] | None = None) -> onnxruntime.SessionOptions:
    """New ``onnxruntime.SessionOptions`` with the config entries of ``int8`` on a CPU of ``flags``
    (``config_entries``) and ``threads`` intra-op threads (None: onnxruntime's default)."""
    import onnxruntime

    entries = config_entries(int8, flags)
    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    for key, value in entries.items():
        options.add_session_config_entry(key, value)
    return options


def options_text(int8: str = EXACT, flags: frozenset[str] | None = None) -> str:
    """What a peer of int8 mode ``int8`` ran with on a CPU of ``flags`` (None: this one's), for a report
    or a table heading."""
    flags = cpu_flags() if flags is None else flags
    entries = config_entries(int8, flags)
    if not entries and not int8_saturates(flags):
        return "its default session options: its int8 kernels are exact on this CPU (VNNI, or not x86)"
    if not entries:
        return ("its default session options: on an x86 CPU without VNNI its uint8 x int8 kernels add pairs "
                "of products in saturating int16")
    return (", ".join(f"{key}={value}" for key, value in entries.items())
            + ": exact int8 products for constant int8 weights; on x86 without VNNI a QLinearMatMul of "
              "opset 21 or later still saturates")
