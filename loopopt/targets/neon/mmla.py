"""int8 GEMMs and convolutions on the 8-way int8 matrix multiplies of FEAT_I8MM: ``smmla`` (s8 x s8)
and ``usmmla`` (u8 x s8), each a 2x2 block of int32 outputs from two 8-byte rows of activations and two
8-byte columns of weights, the instruction chosen from the QuantSpec's activations as the int8 dot is.

The family applies to a quantized Matmul, or a convolution, whose weights are stored in
mmla's operand order: a layout whose two innermost blocks are 2 output channels and 8 input channels
(a Matmul's ``KN`` weights: ``NK2n8k``, with batch dims ``BNK2n8k``; a conv's ``OIHW``: e.g.
``HWOI2o8i``), so one 16-byte load is the instruction's second operand; ``prepare`` stores them so,
zero-padded (a partial last block of columns or channels multiplies by 0). The activations' rows (a
GEMM's rows, a conv's output positions along its last window) are read as they are stored (channels
innermost: ``MK``, ``NHWC``), 8 bytes a row and filter tap, two rows per 128-bit register; past the
last channel a row reads on into the next (times a zero weight); a row whose tap falls in the
padding is 8 zero bytes (not summed: the compensation counts the valid taps only).

From the schedule: ``tile(<rows>=R, <channels>=C)`` (``tile(i=R, j=C)``, ``tile(ow=R, k=C)``) is the
register block (``ceil(R/2) x C/2`` accumulators, each 2 rows x 2 columns of outputs), the loops
outside it in the schedule's order, ``parallel`` on one of them; the kernel steps the filter taps and
the channels, 8 at a time, itself. The sums are exact int32 (wrapping as the reference does) into the
workspace ``O``; the epilogue pass of ``codegen/quantized.py`` applies compensation, bias and scales,
as for the table-lookup kernels. A grouped convolution's register block lies in one group (its columns
divide a group's output channels), so its rows read that group's channels (past them, the next group's,
times zero weights). Steps that do not apply are refused with the reason."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...codegen import cprint, quantized
from ...codegen.emit import KERNEL_NAME, Generated, with_threads
from ...codegen.instr import Instr
from ...codegen.params import KernelParam, index_ctype, signature
from ...codegen.pseudocode import header
from ...expr import Bound, Const, Expr, Var
from ...ops import Op
from ...schedule import Schedule, ScheduleError
from .isa import NEON_INT

ROWS, COLUMNS, DEPTH = 2, 2, 8      # one instruction: 2 rows x 2 columns of outputs over 8 channels
ACCUMULATOR_REGISTERS = 32
ENTRIES = {
    "smmla": Instr("vmmlaq_s32({c}, {a}, {b})",
                   "int32 lane 2r+q = c_(2r+q) + sum over t<8 of a[8r+t] * b[8q+t] (a, b: int8 bytes, r, q "
                   "in 0..1; exact products, wrapping sum)"),
    "usmmla": Instr("vusmmlaq_s32({c}, {a}, {b})",
                    "int32 lane 2r+q = c_(2r+q) + sum over t<8 of a[8r+t] * b[8q+t] (a: uint8 bytes, b: int8 "
                    "bytes, r, q in 0..1; exact products, wrapping sum)"),
}


def preset(op: Op, rows: int = 4, columns: int = 8) -> Schedule:
    """The schedule of ``op`` (a quantized GEMM) on smmla/usmmla: weights in 2 column x 8 channel blocks,
    activation rows with their channels innermost, a register block of ``rows`` x ``columns`` outputs
    (clamped to the op; ``columns`` even)."""
    rows_dim, cols_dim, red = _dims(op)
    a, w = op.inputs
    letter = lambda t, dim: op.tensor(t).letters[op.axis(t, dim)]
    rest = lambda t, inner: "".join(x for x in op.tensor(t).letters if x not in inner)
    last_a = letter(a, red)
    pair = (letter(w, cols_dim), letter(w, red))
    columns = min(columns, op.extent(cols_dim) + op.extent(cols_dim) % COLUMNS)
    per_group = op.extent(cols_dim) // groups(op)
    if groups(op) > 1:      # the largest even block within a group (none where a group's count is odd)
        columns = max((c for c in range(COLUMNS, columns + 1, COLUMNS) if per_group % c == 0),
                      default=columns)
    return (Schedule(op).layout(a, rest(a, last_a) + last_a)
            .layout(w, rest(w, pair) + "".join(pair) + f"{COLUMNS}{pair[0].lower()}{DEPTH}{pair[1].lower()}")
            .tile(**{rows_dim: min(rows, op.extent(rows_dim)), cols_dim: columns}))


def instruction(schedule: Schedule) -> str:
    """``smmla`` for int8 activations, ``usmmla`` for uint8 ones (the weights are always stored s8)."""
    return "smmla" if schedule.op.quant.activation == "int8" else "usmmla"


def is_mmla(schedule: Schedule) -> bool:
    """Whether ``schedule`` stores a quantized op's weights in mmla's blocks (2 output channels x 8
    reduction channels innermost): this family's kernels."""
    op = schedule.op
    if op.quant is None or op.quant.binary:
        return False
    weights = op.inputs[1]
    letters, index = op.tensor(weights).letters, op.index(weights)
    letter = {dim: letters[index.index(Var(dim))] for dim in (op.channel_dim, op.reduction_channel_dim)
              if Var(dim) in index}
    if len(letter) < 2:
        return False
    inner = ((letter[op.channel_dim], COLUMNS), (letter[op.reduction_channel_dim], DEPTH))
    return tuple(schedule.layout_of(weights).order[-2:]) == inner


@dataclass(frozen=True)
class MmlaForm:
    """The kernel's shape from its schedule: the loops outside the register block (name, extent, whether
    parallel) and the block's rows and columns."""

    outer: tuple[tuple[str, int, bool], ...]
    rows: int
    columns: int

    @property
    def row_pairs(self) -> int:
        return -(-self.rows // ROWS)

    @property
    def column_pairs(self) -> int:
        return self.columns // COLUMNS


def mmla_form(schedule: Schedule) -> MmlaForm:
    """The form of an mmla schedule (``is_mmla``); ScheduleError naming what does not apply."""
    op = schedule.op
    rows_dim, cols_dim, red = _dims(schedule.op)
    if op.reduction_dims != {red, *_taps(op)}:
        raise ScheduleError(f"the int8 matrix multiply (smmla/usmmla, weights in 2x8 blocks) takes a GEMM or "
                            f"a convolution; {op!r} is not: store its weights in another layout")
    if schedule.weight_format_mode != "int8":
        raise ScheduleError(f"weight_format({schedule.weight_format_mode!r}): smmla/usmmla multiply int8 "
                            f"weights, one byte each")
    if schedule.arithmetic_mode == "dequantize":
        raise ScheduleError("arithmetic('dequantize'): smmla/usmmla sum int32 products; use the integer "
                            "arithmetic")
    activations = schedule.layout_of(op.inputs[0])
    k_letter = op.tensor(op.inputs[0]).letters[op.axis(op.inputs[0], red)]
    if any(block for _, block in activations.order) or activations.order[-1][0] != k_letter:
        raise ScheduleError(f"layout({op.inputs[0]!r}, {activations.tag!r}): smmla reads 8 channels of an "
                            f"activation row at once; store {op.inputs[0]} unblocked with {k_letter} "
                            f"innermost")
    names = schedule.loop_names
    block = (f"{rows_dim}_i", f"{cols_dim}_i")
    if not set(block) <= set(names):
        raise ScheduleError(f"the int8 matrix multiply takes its register block from tile({rows_dim}=R, "
                            f"{cols_dim}=C) (R x C outputs in ceil(R/2) x C/2 accumulators of 2x2): tile the "
                            f"rows and the columns")
    inner = {*op.reduction_dims, *block}
    depth = len(inner)
    if set(names[-depth:]) != inner:
        raise ScheduleError(f"the int8 matrix multiply runs {', '.join(sorted(inner))} innermost (its "
                            f"register block over the whole reduction, 8 channels a step); innermost now: "
                            f"{', '.join(names[-depth:])}")
    for loop in schedule.loops:
        if loop.vectorized or loop.unroll or (loop.parallel and loop.name in inner):
            raise ScheduleError(f"loop {loop.name!r}: the int8 matrix multiply vectorizes and unrolls its "
                                f"register block itself (parallel: an outer loop)")
    if schedule.register_block_at is not None:
        raise ScheduleError("register_block: the int8 matrix multiply keeps its tile in registers itself")
    batch = (d for d in op.dim_names if d not in op.reduction_dims and d not in (rows_dim, cols_dim))
    allowed = {*batch, f"{rows_dim}_o", f"{cols_dim}_o"}
    if set(names[:-depth]) != allowed:
        raise ScheduleError(f"the int8 matrix multiply runs the loops {', '.join(sorted(allowed))} around "
                            f"its register block (in any order); these are {', '.join(names[:-depth])}")
    rows, columns = schedule.loop(block[0]).extent, schedule.loop(block[1]).extent
    per_group = op.extent(cols_dim) // groups(op)
    if groups(op) > 1 and per_group % columns:
        raise ScheduleError(f"tile({cols_dim}={columns}): a register block of a grouped convolution reads "
                            f"one group's activations, so its columns must divide the {per_group} output "
                            f"channels of a group (and be even)")
    if columns % COLUMNS and columns != op.extent(cols_dim):
        raise ScheduleError(f"tile({cols_dim}={columns}): a weight block holds {COLUMNS} columns; tile the "
                            f"columns by an even number")
    form = MmlaForm(tuple((loop.name, loop.extent, loop.parallel) for loop in schedule.loops[:-depth]), rows,
                    -(-columns // COLUMNS) * COLUMNS)
    used = form.row_pairs * form.column_pairs + form.row_pairs + 1
    if used > ACCUMULATOR_REGISTERS:
        raise ScheduleError(f"tile({rows_dim}={rows}, {cols_dim}={columns}): {form.row_pairs} x "
                            f"{form.column_pairs} accumulators, {form.row_pairs} activation registers and a "
                            f"weight register are {used} of the {ACCUMULATOR_REGISTERS} vector registers")
    return form


def groups(op: Op) -> int:
    """The op's groups (1 for a GEMM)."""
    return getattr(op, "groups", 1)


def _taps(op: Op) -> tuple[str, ...]:
    """A convolution's filter tap dims (none for a GEMM)."""
    return tuple(w.tap_dim for w in op.windows)


def _dims(op: Op) -> tuple[str, str, str]:
    """The op's rows (the last output dim but the channels), columns and reduction channels."""
    outputs = [d for d in op.dim_names if d not in op.reduction_dims and d != op.channel_dim]
    return outputs[-1], op.channel_dim, op.reduction_channel_dim


def _offset(schedule: Schedule, tensor: str, values: dict[str, Expr]) -> str:
    """C of ``tensor``'s storage offset at its logical index with ``values`` substituted."""
    op = schedule.op
    index = tuple(e.substitute(values) for e in op.index(tensor))
    return schedule.layout_of(tensor).offset(index, op.tensor(tensor).shape).to_c()


def generate_mmla(schedule: Schedule) -> Generated:
    """The C kernel of an mmla schedule (module docstring)."""
    form = mmla_form(schedule)
    op = schedule.op
    rows_dim, cols_dim, red = _dims(schedule.op)
    qp = replace(quantized.plan(schedule, 1), fused_epilogue=False)
    a, w = op.inputs
    it = index_ctype(schedule)
    m, n, k = op.extent(rows_dim), op.extent(cols_dim), op.extent(red)
    steps, last_pair = -(-k // DEPTH), -(-n // COLUMNS) - 1
    unsigned = qp.activation_type == "uint8_t"
    byte, vector = ("u8", "uint8") if unsigned else ("s8", "int8")
    first_row = Var(f"{rows_dim}_o") * form.rows
    first_col = Var(f"{cols_dim}_o") * form.columns
    row = lambda r: _offset(schedule, a, {rows_dim: Var(r), red: Const(0), cols_dim: first_col})
    weights = _offset(schedule, w, {cols_dim: Var("lo_col"), red: Var("lo_s") * DEPTH})
    output = _offset(schedule, op.output, {rows_dim: Var("lo_r"), cols_dim: Var("lo_c")})
    mma = ENTRIES[instruction(schedule)]
    update = f"lo_acc[lo_p][lo_q] = {mma(c='lo_acc[lo_p][lo_q]', a='lo_x[lo_p]', b='lo_w')};"
    step = [_row_bytes(schedule, f"lo_h{half}", f"lo_r{half}", row(f"lo_r{half}"), vector, byte)
            for half in (0, 1)]
    body = [
        f"{vector}x16_t lo_x[{form.row_pairs}];",
        *cprint.block(cprint.for_loop("int", "lo_p", form.row_pairs), [
            f"const {it} lo_r0 = {first_row.to_c()} + 2 * lo_p < {m - 1} ? {first_row.to_c()} + 2 * lo_p : "
            f"{m - 1};",
            f"const {it} lo_r1 = lo_r0 + 1 < {m - 1} ? lo_r0 + 1 : {m - 1};",
            *step, f"lo_x[lo_p] = vcombine_{byte}(lo_h0, lo_h1);"]),
        *cprint.block(cprint.for_loop("int", "lo_q", form.column_pairs), [
            f"const {it} lo_pair = {first_col.to_c()} / 2 + lo_q < {last_pair} ? "
            f"{first_col.to_c()} / 2 + lo_q : {last_pair};",
            f"const {it} lo_col = 2 * lo_pair;",
            f"const int8x16_t lo_w = vld1q_s8(&{w}[{weights}]);",
            *cprint.block(cprint.for_loop("int", "lo_p", form.row_pairs), [update])]),
    ]
    store = [
        "int32_t lo_t[4];",
        "vst1q_s32(lo_t, lo_acc[lo_p][lo_q]);",
        *cprint.block(cprint.for_loop("int", "lo_e", 4), [
            "const int lo_dr = lo_e / 2, lo_dc = lo_e % 2;",
            f"const {it} lo_r = {first_row.to_c()} + 2 * lo_p + lo_dr, "
            f"lo_c = {first_col.to_c()} + 2 * lo_q + lo_dc;",
            f"if (2 * lo_p + lo_dr < {form.rows} && lo_r < {m} && 2 * lo_q + lo_dc < {form.columns} && "
            f"lo_c < {n}) {op.output}[{output}] = lo_t[lo_e];"]),
    ]
    block = [
        f"int32x4_t lo_acc[{form.row_pairs}][{form.column_pairs}];",
        *cprint.nest([cprint.for_loop("int", "lo_p", form.row_pairs), cprint.for_loop("int", "lo_q",
                      form.column_pairs)], ["lo_acc[lo_p][lo_q] = vdupq_n_s32(0);"]),
        *cprint.nest([cprint.for_loop(it, tap, op.extent(tap)) for tap in _taps(op)]
                     + [cprint.for_loop(it, "lo_s", steps)], body),
        *cprint.nest([cprint.for_loop("int", "lo_p", form.row_pairs), cprint.for_loop("int", "lo_q",
                      form.column_pairs)], store),
    ]
    loops = [quantized.PARALLEL_FOR * parallel + "\n" * parallel + cprint.for_loop(it, name, extent)
             for name, extent, parallel in form.outer]
    params = (KernelParam(a, qp.activation_type, const=True), KernelParam(w, "int8_t", const=True),
              *((KernelParam(op.bias_tensor, qp.bias_type, const=True),) if op.bias else ()),
              KernelParam(op.output, "int32_t"), *quantized.parameters(qp))
    kernel = [*quantized.constants(schedule, qp), *quantized.prologue(schedule, qp),
              *cprint.nest(loops, block), *quantized.epilogue(schedule, qp)]
    openmp = any(parallel for _, _, parallel in form.outer)
    described = (f"/* loopopt int8 matrix-multiply kernel (targets/neon/mmla.py) for {op!r}\n"
                 f" * {mma.template.split('(')[0]}: {form.rows} x {form.columns} outputs per register block "
                 f"({form.row_pairs} x {form.column_pairs} accumulators of 2x2), {DEPTH} channels a step */")
    prelude = ["#include <arm_neon.h>", "#include <stddef.h>", "#include <string.h>",
               quantized.static_tables(schedule, qp)] + (["#include <omp.h>"] if openmp else [])
    source = "\n".join([described, *prelude, "", f"{signature(KERNEL_NAME, params)}\n{{",
                        *cprint.indented(kernel), "}", ""])
    source, cdef = with_threads(source, signature(KERNEL_NAME, params, restrict=False) + ";", openmp)
    ahead = {a: steps * DEPTH - k}          # the last row's last step reads on past the end
    return Generated(source, cdef, op.call_tensors + (op.output,), params, NEON_INT, {}, openmp, plan=qp,
                     read_ahead=ahead, compile_flags=NEON_INT.compile_flags)


def _row_bytes(schedule: Schedule, name: str, row: str, offset: str, vector: str, byte: str) -> str:
    """C of ``name``, the 8 activation bytes of output row ``row`` at the current taps and step: zeros
    where a window reads the padding (the product of a padded tap is not summed: the compensation counts
    the valid taps only)."""
    op = schedule.op
    rows_dim = _dims(op)[0]
    load = f"vld1_{byte}((const {vector}_t *)&{op.inputs[0]}[{offset}] + {DEPTH} * lo_s)"
    valid = [f"({Bound(w.input_index.substitute({rows_dim: Var(row)}), 0, w.size).to_c()})"
             for w in op.windows]
    if not valid:
        return f"const {vector}x8_t {name} = {load};"
    return f"const {vector}x8_t {name} = ({' && '.join(valid)}) ? {load} : vdup_n_{byte}(0);"


def pseudocode(schedule: Schedule) -> list[str]:
    """The kernel of an mmla schedule in a few lines."""
    form = mmla_form(schedule)
    op = schedule.op
    rows_dim, cols_dim, red = _dims(schedule.op)
    a, w = op.inputs
    outer = [f"{'  ' * depth}for {name} in 0..{extent}:" + ("    # parallel" if parallel else "")
             for depth, (name, extent, parallel) in enumerate(form.outer)]
    pad = "  " * len(form.outer)
    name = instruction(schedule)
    layouts = "# layouts: " + ", ".join(f"{t} {tag}" for t, tag in schedule.layouts)
    taps = [f"{pad}{'  ' * depth}for {tap} in 0..{op.extent(tap)}:" for depth, tap in enumerate(_taps(op))]
    inner = pad + "  " * len(taps)
    return header(schedule) + [layouts] + outer + [
        f"{pad}acc[{form.row_pairs}][{form.column_pairs}] = 0    # 2x2 int32 outputs each", *taps,
        f"{inner}for s in 0..{-(-op.extent(red) // DEPTH)}:    # {DEPTH} {red} a step"
        + (" (a padded tap's rows: zeros)" if op.windows else ""),
        f"{inner}  x[p] = 8 bytes of {a} rows 2p, 2p+1 at {red} = 8s    # p < {form.row_pairs}",
        f"{inner}  acc[p][q] = {name}(acc[p][q], x[p], {w} block (columns 2q, 2q+1; {red} 8s..8s+7))",
        f"{pad}O[{rows_dim}, {cols_dim}] = acc    # int32 sums, in the block's bounds",
        "# epilogue pass over O: compensation, bias, scales (codegen/quantized.py)"]
