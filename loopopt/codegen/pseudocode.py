"""A schedule as readable loop-nest pseudo-code."""
from __future__ import annotations

from ..epilogue import RESIDUAL
from ..schedule import Schedule
from .arith import arithmetic
from .emit import vector_access_kinds
from .instr import Isa, tables
from .nest import lower
from .quantized import has_signed_dot
from .quantized import plan as quant_plan


def header(schedule: Schedule) -> list[str]:
    """The first lines of every family's pseudo-code: the op and the schedule's steps."""
    return [f"# {schedule.op!r}"] + [f"# {step}" for step in schedule.steps]


def render(schedule: Schedule, target: Isa | None = None, bf16_dot: bool = False) -> str:
    """The loop nest of ``schedule``: loops with extents and annotations, dim definitions,
    guards, the statement, and notes (reassociation; with a float32 table ``target``, the dot loop,
    the quantized plan and the vector access kinds on it); ``bf16_dot``: a bfloat16 nest may use the
    table's pair dot."""
    op = schedule.op
    lines = header(schedule)
    quantized = op.quant is not None
    lines.append("# layouts: " + ", ".join(f"{t} {tag}" for t, tag in schedule.layouts))
    plan = quant_plan(schedule, target.lanes, has_signed_dot(target.name)) if quantized and target else None
    dot = arithmetic(schedule, target.name, plan, bf16_dot).dot_loop if target else None
    bf16 = tables(target.name).bf16 if target and not quantized else None
    pair = bf16.mnemonics.get("dot", "pair dot") if bf16 is not None else "pair dot"
    instruction = (f"bf16 pair dot ({pair})" if not quantized else
                   "s8 x s8 dot" if plan is not None and plan.dot_instruction == "dot_s8" else "u8 x s8 dot")
    nest = lower(schedule, (dot, instruction) if dot else None)
    indent = ""
    for loop in nest.loops:
        suffix = f"    # {', '.join(loop.notes)}" if loop.notes else ""
        lines.append(f"{indent}for {loop.name} in 0..{loop.extent}:{suffix}")
        indent += "  "
    if nest.definitions:
        lines.append(f"{indent}# {', '.join(f'{d.dim} = {d.value.to_c()}' for d in nest.definitions)}")
    if nest.guards:
        condition = " and ".join(g.in_loops.to_c().replace("&&", "and") for g in nest.guards)
        lines.append(f"{indent}if {condition}:")
        indent += "  "
    a, b = op.inputs
    index = {t: ", ".join(e.to_c() for e in op.index(t)) for t in op.tensors}
    lines.append(f"{indent}{op.output}[{index[op.output]}] += {a}[{index[a]}] * {b}[{index[b]}]")
    epilogue = schedule.fused_epilogue
    if epilogue is not None:
        element = f"{op.output}[{index[op.output]}]"
        lines.append(f"# epilogue, once each sum is complete, before its store: {element} = "
                     f"{epilogue.formula(element, f'{RESIDUAL}[{index[op.output]}]')}")
    if plan is not None:
        epilogue = ("none (float accumulation)" if not plan.integer else
                    "at the register block's store" if plan.fused_epilogue else
                    "a pass over the int32 accumulators")
        clipped = (f", then dequantized, {plan.requantized_clip} and quantized again (clip_quantized)"
                   if plan.requantized_clip is not None else "")
        lines.append(f"# quantized {op.quant}: arithmetic {plan.arithmetic}, "
                     f"compensation {plan.compensation}, epilogue {epilogue}{clipped}")
    if schedule.vector_loop is not None and target is not None:
        kinds = vector_access_kinds(schedule, target)
        text = ", ".join(f"{t} {k}" for t, k in kinds.items()) if kinds else "runs as a scalar loop"
        lines.append(f"# vector loop {schedule.vector_loop.name} on {target.name} "
                     f"({target.lanes} lanes): {text}")
    violation = schedule.reduction_order_violation() if op.quant is None else None
    if violation:
        lines.append(f"# note: reassociates the floating-point sum into {op.output} "
                     f"(e.g. {violation[1]} now runs before {violation[0]})")
    return "\n".join(lines)
