"""The last pipeline steps in halves (``Schedule.halves``): a one-wave kernel's output drain partly hidden.

A kernel whose blocks all fit in one wave drains its outputs after its last product with the tensor cores
idle (the GEMM 2000x3000x1000 on 192 x 256 tiles, H200: 12.7 MB in ~4.4 us, a fifth of the kernel).
``halves(S)`` multiplies the last S steps in halves of the instruction's N columns (the entry of N / 2:
``m64n256`` -> ``m64n128``), the left half's first: each tail step's left products, then the first tail
step's right products; once the left half's groups retired (``wgmma.wait_group 1``) its outputs are
staged in the lowest buffer of the ring that no tail step reads (``left_offset``; hence ``S <= stages -
1``. The buffer of the step before the tail, buffer 1 of 4 at S = 2, made ptxas serialize the wgmmas for
want of registers, C7511: 28.0 us against 23.8 at buffer 0 of the GEMM in no catalog, H200) and stored by
TMA while the right half's remaining products run; then the right half's, staged beside the left's
(``right_offset``). Each box has a staging buffer of its own, so no store
waits for another to read its buffer. The outputs are staged without the per-element bounds select
(the TMA stores clip their boxes) unless the value reads memory (a bias, a residual).

The host emulation runs the same order, the half products through ``lo_wgmma_cols`` (a fragment's
columns ``c0 .. c0 + n``), and stages each box in a buffer of its own.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...schedule import Schedule, ScheduleError
from . import tma_store
from .instructions import INSTRUCTIONS, MatrixInstruction

HOST = r"""
/* a wgmma of n columns into columns c0 .. c0 + n of a 64 x width fragment (``halves``) */
static void lo_wgmma_cols(float *acc, const LO_ELEMENT *smem, unsigned long long da, unsigned long long db,
                          int width, int c0, int n)
{
    for (int r = 0; r < 64; ++r)
        for (int c = 0; c < n; ++c)
            for (int q = 0; q < 16; ++q)
                acc[r * width + c0 + c] += lo_operand(smem, da, r, q) * lo_operand(smem, db, c, q);
}"""


@dataclass(frozen=True)
class Halves:
    """The tail of a kernel whose last ``steps`` of ``total`` pipeline steps run in halves of
    ``entry.n`` columns (``half``: the entry of N / 2); the left half's staging at byte ``left_offset``
    of shared memory, the right half's at ``right_offset``, ``half_bytes`` each."""

    steps: int
    total: int
    entry: MatrixInstruction
    half: MatrixInstruction
    left_offset: int
    right_offset: int
    half_bytes: int

    @property
    def first(self) -> int:
        """The first pipeline step in halves."""
        return self.total - self.steps

    @property
    def columns(self) -> int:
        """A half's columns of a fragment."""
        return self.entry.n // 2

    def macro(self) -> str:
        """``LO_WGMMA_HALF(d, da, db)``: the half entry's ``LO_WGMMA`` under its own name."""
        line = next(line for line in self.half.header.splitlines() if line.startswith("#define LO_WGMMA("))
        return line.replace("LO_WGMMA(", "LO_WGMMA_HALF(", 1)

    def host(self, element: str) -> str:
        """The host emulation's ``lo_wgmma_cols`` on tiles of ``element``."""
        return HOST.replace("LO_ELEMENT", element)

    def mma(self, device: bool, acc: str, a: str, b: str, half: int) -> str:
        """Half ``half`` (0 left, 1 right) of fragment ``acc``'s products of the operands ``a``, ``b`` (B's
        descriptor of that half's rows): on the device its registers from ``half x n / 4`` on."""
        if device:
            return f"LO_WGMMA_HALF({acc} + {half * self.columns // 2}, {a}, {b});"
        return (f"lo_wgmma_cols({acc}, lo_smem_h, {a}, {b}, {self.entry.n}, {half * self.columns}, "
                f"{self.columns});")

    def b_rows(self, half: int) -> int:
        """Bytes from a B tile's start to half ``half``'s rows (rows of the swizzle's width, contiguous)."""
        return half * self.columns * self.entry.row_bytes


def half_entry(entry: MatrixInstruction) -> MatrixInstruction | None:
    """The wgmma entry of ``entry``'s types and N / 2 columns (``m64n256`` -> ``m64n128``), None where
    there is none."""
    if not entry.asynchronous or entry.n % 2:
        return None
    return INSTRUCTIONS.get(entry.name.replace(f"m64n{entry.n}k", f"m64n{entry.n // 2}k"))


def check(schedule: Schedule, entry: MatrixInstruction, stored: tma_store.StoredOutput | None, stages: int,
          total: int, step_bytes: int, fragments: int) -> Halves | None:
    """The tail of ``schedule``'s kernel (None without ``halves``): ``entry`` its instruction (in its
    swizzle), ``stored`` its output as TMA stores it, ``stages`` buffers of ``step_bytes`` in its ring,
    ``total`` pipeline steps, ``fragments`` accumulator fragments of the block (all its warpgroups').
    ScheduleError naming the value and what is allowed where the kernel cannot take it."""
    steps = schedule.halves_steps
    if not steps:
        return None
    step = f"halves({steps})"
    if half_entry(entry) is None:
        raise ScheduleError(f"{step}: the products run on {entry.name}; halves takes a wgmma entry whose N "
                            f"halves to another entry (m64n256 -> m64n128, m64n128 -> m64n64)")
    if schedule.specialized or schedule.persistent_tiles or schedule.cluster_dims != (1, 1) \
            or set(schedule.tma_staged) != set(schedule.op.inputs):
        raise ScheduleError(f"{step}: the kernel is specialized, persistent, clustered or copies an input by "
                            f"its threads; halves takes an unspecialized kernel of one tile a block, without "
                            f"clusters, whose inputs TMA copies (stage(..., engine='tma'))")
    if stored is None or entry.n // 2 % stored.columns:
        raise ScheduleError(f"{step}: {schedule.op.output} is not stored by TMA in whole chunks of a half's "
                            f"{entry.n // 2} columns; halves takes a kernel whose output TMA stores "
                            f"(a row-major Matmul or Gemm without split_k, stage(..., engine='tma'))")
    return fit(steps, entry, stored.columns, stages, total, step_bytes, fragments)


def fit(steps: int, entry: MatrixInstruction, columns: int, stages: int, total: int, step_bytes: int,
        fragments: int) -> Halves:
    """The tail of a kernel of ``entry`` (whose N halves to an entry: ``half_entry``) whose output TMA
    stores in chunks of ``columns``, its last ``steps`` steps in halves (``check``'s other arguments);
    ScheduleError where the steps or the half's staging do not fit its ring."""
    step = f"halves({steps})"
    if steps > min(stages - 1, total):
        raise ScheduleError(f"{step}: steps={steps}; at most stages - 1 = {stages - 1} (the left half is "
                            f"staged in the buffer of the step before them) and at most the kernel's "
                            f"{total} pipeline steps")
    boxes = fragments * entry.n // columns
    half_bytes = boxes // 2 * tma_store.CHUNK_BYTES
    read = {step % stages for step in range(total - steps, total)}     # the tail steps' buffers
    left = min(set(range(stages)) - read) * step_bytes
    right = 0 if half_bytes <= left else left + half_bytes
    if half_bytes > step_bytes or left % tma_store.ALIGNMENT or right + half_bytes > stages * step_bytes:
        raise ScheduleError(f"{step}: a half's {boxes // 2} output boxes ({half_bytes} bytes) do not fit "
                            f"{tma_store.ALIGNMENT}-byte aligned in a {step_bytes}-byte buffer of the ring "
                            f"and beside it in its {stages}; halves takes larger steps or more stages")
    return Halves(steps, total, entry, half_entry(entry), left, right, half_bytes)
