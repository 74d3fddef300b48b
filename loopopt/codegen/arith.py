"""The arithmetic of a kernel's statement: element types, operand loads and the update.

One ``Arithmetic`` per kernel tells the emitter (plain nest and register blocks alike)
how to load an operand for a vector access kind and how to fold two operands into an
accumulator:

* ``float``: float32 operands, ``fma``;
* ``integer``: stored bytes widened to int32 lanes, ``c + a * b`` (exact, wrapping);
* ``dot``: 4 bytes per lane (the dot loop of ``quantized.find_dot_loop``, or of ``taps.find``: 4
  taps of a window, the activations spread from a window of input bytes), ``vpdpbusd``
  (u8 activations x s8 weights; int8 activations are shifted by ``flip``);
* ``dequantize``: bytes widened, zero-point subtracted, converted to float32 and scaled
  inside the loop (``(x - zx) * sx`` and ``(w - zw[k]) * sw[k]``), then ``fma``;
* ``bf16``: bfloat16 operands (uint16 bit patterns) widened to float32 (a shift by 16), then
  ``fma`` into float32 accumulators (any ISA);
* ``bf16_dot``: pairs of bfloat16 per float32 lane (the dot loop of ``quantized.find_dot_loop``
  with groups of 2), ``vdpbf16ps`` (AVX-512 on a CPU with AVX512-BF16).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from ..schedule import Schedule, ScheduleError
from . import taps, ternary, wide
from .instr import Isa, tables
from .quantized import DOT, QuantPlan, find_dot_loop
from .vector import AccessKind, classify_offset

ArithmeticName = Literal["float", "integer", "dot", "dequantize", "bf16", "bf16_dot"]
BF16_PAIR = 2     # bf16 values per float32 lane consumed by one vdpbf16ps
GROUPS = {"dot": DOT, "bf16_dot": BF16_PAIR}   # reduction iterations per lane of a dot instruction


@dataclass(frozen=True)
class Arithmetic:
    """How the statement's products are formed (see the module docstring)."""

    name: ArithmeticName
    acc: Isa                          # table of the accumulator (and output) lanes
    schedule: Schedule
    plan: Optional[QuantPlan] = None
    dot_loop: Optional[str] = None    # the reduction loop each dot instruction consumes

    @property
    def ints(self) -> Isa:
        return tables(self.acc.name).ints

    @property
    def bf16(self) -> Isa:
        """The table of the op's narrow float operands: bfloat16, or float16 (widened the same way)."""
        variant = tables(self.acc.name)
        return variant.f16 if self.schedule.op.dtype == "float16" else variant.bf16

    @property
    def is_bf16(self) -> bool:
        return self.name in ("bf16", "bf16_dot")

    @property
    def group(self) -> int:
        """Reduction iterations each lane of the update consumes (a dot instruction's group)."""
        return GROUPS.get(self.name, 1)

    @property
    def prelude(self) -> str:
        """The C before the kernel: the accumulator table's, or the bf16 table's (which includes it)."""
        return self.bf16.prelude if self.is_bf16 else self.acc.prelude

    @property
    def compile_flags(self) -> tuple[str, ...]:
        """Compiler flags of the instructions the kernel uses."""
        return self.bf16.compile_flags if self.is_bf16 else self.acc.compile_flags

    @property
    def element_type(self) -> str:
        """The C type of the stored input elements (float32 kernels; bf16: bit patterns)."""
        return "uint16_t" if self.is_bf16 else "float"

    @property
    def scalar_type(self) -> str:
        return "int" if self.name in ("integer", "dot") else "float"

    @property
    def bias_in_nest(self) -> bool:
        """The accumulators start from the bias (integer kernels, and outputs scaled after the nest,
        add it in the epilogue)."""
        return self.name not in ("integer", "dot") and self.schedule.op.scales is None

    def vector_type(self, vectorized: bool = True) -> str:
        return self.acc.vector_type if vectorized else self.scalar_type

    def zero(self, vectorized: bool = True) -> str:
        return self.acc.zero() if vectorized else ("0" if self.scalar_type == "int" else "0.0f")

    def _wide(self, tensor: str | None, vectorized: bool) -> bool:
        """Whether a vector operand of ``tensor`` is a pointer to s16 weights (``wide``)."""
        return vectorized and tensor is not None and wide.wide(self.schedule, tensor)

    def operand_type(self, vectorized: bool = True, tensor: str | None = None) -> str:
        """The C type of a loaded operand of ``tensor`` (bf16: the stored bits as scalars, pairs in int
        lanes for a dot; s16 weights: a pointer to their block)."""
        if self._wide(tensor, vectorized):
            return "int16_t *"
        if self.name == "bf16_dot" and vectorized:
            return self.bf16.vector_type
        if self.is_bf16 and not vectorized:
            return self.element_type
        return self.vector_type(vectorized)

    def operand_zero(self, vectorized: bool = True, tensor: str | None = None) -> str:
        """A zero operand of ``tensor`` (of ``operand_type``)."""
        if self._wide(tensor, vectorized):
            return wide.ZERO
        if self.name == "bf16_dot" and vectorized:
            return self.bf16.pair_zero()
        return "0" if self.is_bf16 and not vectorized else self.zero(vectorized)

    # --- scalar code ----------------------------------------------------------------------
    def product(self, a_ref: str, b_ref: str, bindings: Optional[dict] = None) -> str:
        """The scalar product of two operand references (``bindings``: loops fixed to constants)."""
        if self.is_bf16:
            return f"{self.bf16.value(s=a_ref)} * {self.bf16.value(s=b_ref)}"
        if self.name != "dequantize":
            return f"{a_ref} * {b_ref}"
        ch = self.channel(bindings)
        return (f"((float)({a_ref} - lo_zx) * lo_xscale) * "
                f"((float)({b_ref} - lo_zw[{ch}]) * lo_wscale[{ch}])")

    def channel(self, bindings: Optional[dict] = None) -> str:
        """The output channel (per-channel parameters are indexed by it) in terms of the loops."""
        op = self.schedule.op
        return self.schedule.index(op.output)[op.output_channel_axis].substitute(bindings or {}).to_c()

    # --- vector code ----------------------------------------------------------------------
    def operand(self, tensor: str, access: AccessKind, ref: str, base: str, index: str,
                mask: str | None, bindings: Optional[dict] = None, offset: str = "", phased: bool = False,
                valid: int = 0) -> str:
        """A vector of ``tensor`` along the vector loop. ``ref`` is the C element at lane 0 (at storage
        ``offset``), ``base``/``index`` the pointer and index vector a gather uses, ``mask`` the lanes;
        a tap dot's activations: ``phased`` for one phase of a phase group (``taps.phases``), ``valid``
        the first lanes whose products are used (0: all)."""
        kind = access.kind
        if wide.wide(self.schedule, tensor):
            return wide.operand(self.schedule, self.ints, self.dot_loop, kind, access.stride, ref, mask)
        if ternary.packed(self.schedule, tensor):
            value = self._packed(access, offset, index, mask)
            return self._dequantized(value, False, mask, bindings) if self.name == "dequantize" else value
        if self.name == "float":
            return load(self.acc, kind, ref, base, index, mask)
        if self.name == "bf16":
            return load(self.bf16, kind, ref, base, index, mask)
        if self.name == "bf16_dot":
            return self._pairs(access, ref, base, index, mask)
        ints = self.ints
        activation = tensor == self.schedule.op.inputs[0]
        if self.name == "dot":
            tap = self.plan.tap_dot
            if activation and tap is not None:
                # bytes outside the input row: the activations' zero point (the compensation counts
                # those taps, QuantPlan.tap_fill), else 0 as the dot sees it (0x80 before the flip)
                column = taps.column(self.schedule, tap, bindings or {})
                fill = "lo_zx" if self.plan.tap_fill else str(0x80 if self.plan.shift else 0)
                lanes = valid or self.acc.lanes
                value = (taps.phase_operand(tap, ref, column, fill, lanes) if phased
                         else taps.operand(ints, tap, ref, column, fill, lanes))
            elif kind == "broadcast":
                # the group's 4 bytes, at any byte address (an int load there would be misaligned)
                value = ints.broadcast_word(p=f"&{ref}")
            elif kind == "strided" and access.stride == DOT:
                value = ints.load_mask(p=f"&{ref}", m=mask) if mask else ints.load(p=f"&{ref}")
            else:
                if kind == "contiguous":
                    base, index = f"&{ref}", ints.stride_index(s="1")
                value = (ints.gather_b_mask(p=base, idx=index, m=mask) if mask
                         else ints.gather_b(p=base, idx=index))
            return ints.flip(v=value) if activation and self.plan.shift else value
        signed = "s8" if not activation or self.plan.activation_type == "int8_t" else "u8"
        if kind == "broadcast":
            value = ints.broadcast(s=ref)
        elif kind == "contiguous":
            value = (getattr(ints, f"load_{signed}_mask")(p=f"&{ref}", m=mask) if mask
                     else getattr(ints, f"load_{signed}")(p=f"&{ref}"))
        else:
            raw = ints.gather_b_mask(p=base, idx=index, m=mask) if mask else ints.gather_b(p=base, idx=index)
            value = getattr(ints, f"extend_{signed}")(v=raw)
        if self.name == "integer":
            return value
        return self._dequantized(value, activation, mask, bindings)

    def _packed(self, access: AccessKind, offset: str, index: str, mask: str | None) -> str:
        """A vector of i2_s-packed ternary weights (``ternary``): dot groups or int32 lanes."""
        dot, ints = self.name == "dot", self.ints
        fast = (dot and access.kind == "strided" and access.stride == DOT
                and ternary.vectors_aligned(self.schedule, self.dot_loop, self.acc.lanes))
        lanes = "" if access.kind == "broadcast" else ternary.element_lanes(ints, access.kind, offset, index)
        return ternary.operand(ints, access.kind, dot, fast, self.schedule.op.inputs[1], offset, lanes, mask)

    def _pairs(self, access: AccessKind, ref: str, base: str, index: str, mask: str | None) -> str:
        """A vector of bf16 pairs (two consecutive reduction iterations per lane) for ``vdpbf16ps``."""
        bf, kind = self.bf16, access.kind
        if kind == "broadcast":
            return bf.broadcast_pair(p=f"&{ref}")
        if kind == "strided" and access.stride == BF16_PAIR:
            return bf.load_pairs_mask(p=f"&{ref}", m=mask) if mask else bf.load_pairs(p=f"&{ref}")
        if kind == "contiguous":
            base, index = f"&{ref}", bf.stride_index(s="1")
        return bf.gather_pairs_mask(p=base, idx=index, m=mask) if mask else bf.gather_pairs(p=base, idx=index)

    def _dequantized(self, value: str, activation: bool, mask: str | None, bindings: Optional[dict]) -> str:
        acc, ints = self.acc, self.ints
        if activation:
            zero, scale = ints.broadcast(s="lo_zx"), acc.broadcast(s="lo_xscale")
        else:
            zero, scale = self.channel_vectors(mask, bindings)
        return acc.fma(a=ints.to_float(v=ints.sub(a=value, b=zero)), b=scale, c=acc.zero())

    def channel_vectors(self, mask: str | None, bindings: Optional[dict]) -> tuple[str, str]:
        """The weight zero-point (int32) and scale (float32) vectors of the lanes' channels."""
        s, acc, ints = self.schedule, self.acc, self.ints
        value = s.index(s.op.output)[s.op.output_channel_axis]
        kind = classify_offset(s, value, acc.lanes)
        ch = self.channel(bindings)
        if kind.kind == "broadcast":
            return ints.broadcast(s=f"lo_zw[{ch}]"), acc.broadcast(s=f"lo_wscale[{ch}]")
        if kind.kind == "contiguous":
            return ints.load(p=f"&lo_zw[{ch}]"), acc.load(p=f"&lo_wscale[{ch}]")
        if kind.kind == "strided":
            idx, m = acc.stride_index(s=str(kind.stride)), mask or acc.mask_count(n=str(acc.lanes))
            return (ints.gather_mask(p=f"&lo_zw[{ch}]", idx=idx, m=m),
                    acc.gather_mask(p=f"&lo_wscale[{ch}]", idx=idx, m=m))
        raise ScheduleError(f"arithmetic('dequantize'): the output channel varies irregularly along the "
                            f"vector loop {s.vector_loop.name!r}; vectorize a loop along which it is "
                            f"constant, contiguous or strided")

    def update(self, a: str, b: str, c: str, mask: str | None) -> str:
        """``c`` plus the product of operand vectors ``a`` (activations) and ``b`` (weights)."""
        table = {"integer": self.ints, "dot": self.ints, "bf16_dot": self.bf16}.get(self.name, self.acc)
        if self.name in ("dot", "bf16_dot"):
            dot = self.plan.dot_instruction if self.name == "dot" else "dot"
            if mask:
                return getattr(table, f"{dot}_mask")(a=a, b=b, c=c, m=mask)
            return getattr(table, dot)(a=a, b=b, c=c)
        return table.fma_mask(a=a, b=b, c=c, m=mask) if mask else table.fma(a=a, b=b, c=c)


def load(isa: Isa, kind: str, ref: str, base: str, index: str, mask: str | None) -> str:
    """A vector of ``isa``'s lane type: broadcast, contiguous load or gather (masked if ``mask``)."""
    if kind == "broadcast":
        return isa.broadcast(s=ref)
    if kind == "contiguous":
        return isa.load_mask(p=f"&{ref}", m=mask) if mask else isa.load(p=f"&{ref}")
    return isa.gather_mask(p=base, idx=index, m=mask) if mask else isa.gather(p=base, idx=index)


def arithmetic(schedule: Schedule, isa_name: str, plan: Optional[QuantPlan],
               bf16_dot: bool = True) -> Arithmetic:
    """The arithmetic of ``schedule`` on ``isa_name``. ``bf16_dot``: a bfloat16 kernel may use the
    table's ``vdpbf16ps`` (kernels compiled to run here pass ``isa.bf16_dot_available``)."""
    table = tables(isa_name)
    if schedule.op.dtype == "float16":       # widened to float32 lanes like bfloat16, without a pair dot
        _check_table(table.f16, isa_name, "float16")
        return Arithmetic("bf16", table.floats, schedule)
    if schedule.op.dtype == "bfloat16":
        _check_table(table.bf16, isa_name, "bfloat16")
        dot = (find_dot_loop(schedule, table.floats.lanes, BF16_PAIR, padded_groups=False)
               if bf16_dot and "dot" in table.bf16.ops else None)
        return Arithmetic("bf16_dot" if dot else "bf16", table.floats, schedule, dot_loop=dot)
    if plan is None:
        return Arithmetic("float", table.floats, schedule)
    _check_table(table.ints, isa_name, "quantized")
    if plan.arithmetic == "dequantize":
        return Arithmetic("dequantize", table.floats, schedule, plan)
    return Arithmetic("dot" if plan.dot_loop else "integer", table.ints, schedule, plan, plan.dot_loop)


def _check_table(table: Isa | None, isa_name: str, kind: str) -> None:
    """ScheduleError if variant ``isa_name`` has no table for ``kind`` kernels."""
    if table is None:
        raise ScheduleError(f"isa {isa_name!r} has no {kind} kernels yet (no {kind} instruction table); "
                            f"use dtype='float32' on it, or another isa")
