"""Compiled kernels: from a Schedule to a callable on numpy arrays (float32 and quantized).

``compile_schedule`` generates the C of a schedule for an ISA, builds it through the
cache and wraps it in a ``Kernel`` (float ops) or a ``QuantizedKernel`` (quantized ops,
called with ONNX ``QLinearConv`` parameter names). A call is split into ``prepare``
(validate, pack into the schedule's storage layouts, precompute per-channel terms),
``run`` (the timed part) and ``output`` (back to the logical layout). Every C parameter
is bound by the name codegen gave it (``Generated.params``).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .amx import require_amx
from .bf16 import BFLOAT16, bf16_bits, is_bf16_array
from .buffers import aligned_copy, aligned_zeros, check_memory
from .cbuild import compile_c, sanitizers
from .codegen import Generated, generate, taps
from .codegen.binary import (
    BASE,
    LANES,
    POPCOUNTS,
    BinaryShape,
    base_table,
    base_table_shape,
    block_of,
    generate_binary,
    pack_bits_activations,
    pack_bits_weights,
    packed_elements,
)
from .codegen.emit import KERNEL_NAME, THREADS_NAME
from .codegen.isa import INT_ISAS, ISAS, QUANT_FLAGS, bf16_dot_available, cpu_flags, resolve_isa
from .codegen.lut import LUT, generate_lut, lut_nest, pack_lut
from .codegen.lut_format import FORMATS
from .codegen.params import storage_elements
from .codegen.quantized import QuantPlan, compensation_entries, compensation_table, stored_weights
from .codegen.ternary import pack_i2s, packed_bytes
from .codegen.tiles import (
    TileShape,
    activations_shape,
    check_amx_cpu,
    generate_tiles,
    pack_activations,
    pack_weights,
    tile_plan,
)
from .driver import CffiDriver, Driver
from .quant import QuantParams, check_call, output_multipliers
from .schedule import Schedule, ScheduleError

CTYPE_BYTES = {"float": 4, "int32_t": 4, "uint8_t": 1, "int8_t": 1, "uint16_t": 2, "int16_t": 2,
               "uint64_t": 8}


@dataclass
class Buffers:
    """Storage-layout arrays of one call, ready for the C function."""

    arrays: dict[str, np.ndarray]
    pointers: tuple


class Kernel:
    """A compiled schedule: call it on numpy arrays in the op's logical layouts."""

    algorithm = "direct"     # one schedule's nest (a WinogradKernel says which Winograd it runs)
    target = None            # the Target that built it (set by the target's compile)

    def __init__(self, schedule: Schedule, generated: Generated, driver: Driver):
        self.schedule = schedule
        self.op = schedule.op
        self.generated = generated
        self.isa = generated.isa.name
        self.source = generated.source
        self.driver = driver          # how the compiled function is called (driver.py)
        self.threads = (int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))
                        if generated.openmp else 1)
        # built with sanitizers: every buffer ends where the kernel may stop reading
        self.exact = bool(sanitizers())
        self.hold_weights = False    # pack a weights array once and keep it (see ``prepack``)
        # id of a weights array given -> (that array, kept alive so that its id stays its own; packed)
        self._held: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def set_threads(self, n: int) -> None:
        """Run the schedule's parallel loop on ``n`` OpenMP threads (default: one per core)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"threads must be an integer >= 1, got {n!r}")
        if not self.generated.openmp:
            if n > 1:
                raise ValueError(f"this kernel has no parallel loop, so it runs on one thread; "
                                 f"add .parallel(<loop>) to the schedule to use {n}")
            return
        self.driver.set_threads(n)
        self.threads = n

    def __repr__(self) -> str:
        return f"<Kernel {self.isa} for {self.op!r}, {len(self.schedule.steps)} schedule steps>"

    @property
    def _output_name(self) -> str:
        """The parameter holding the output in storage layout."""
        return self.op.output

    def _elements(self, name: str) -> int:
        """Elements of the array parameter ``name`` (a tensor in its storage layout, or the bias)."""
        return storage_elements(self.schedule, name) if name in self.op.tensors else self.op.channels

    def buffer_bytes(self) -> dict[str, int]:
        """Bytes ``prepare`` allocates: ``packed buffers`` (the call's tensors in their storage
        layouts, blocked dims padded) and ``workspace`` (a quantized kernel's output and tables),
        each with the read-ahead the kernel declares."""
        return dict(self._buffer_parts)

    @cached_property
    def _buffer_parts(self) -> dict[str, int]:
        """``buffer_bytes``, counted once per kernel (every call's ``prepare`` checks it)."""
        parts = {"packed buffers": 0, "workspace": 0}
        for p in self.generated.params:
            if p.pointer:
                part = "packed buffers" if p.name in self.generated.arguments else "workspace"
                parts[part] += self._elements(p.name) * CTYPE_BYTES[p.ctype] + self._ahead(p.name)
        return parts

    def tensor_bytes(self, name: str) -> int:
        """Bytes of the parameter ``name`` as ``prepare`` stores it (in its storage layout and packed
        format, e.g. 2 bits per i2_s weight, 1 per binary value; no read-ahead)."""
        ctype = next((p.ctype for p in self.generated.params if p.name == name and p.pointer), None)
        if ctype is None:
            raise ValueError(f"{name!r} is not an array parameter of this kernel: use one of "
                             f"{', '.join(p.name for p in self.generated.params if p.pointer)}")
        return self._elements(name) * CTYPE_BYTES[ctype]

    @property
    def workspace_bytes(self) -> int:
        """Bytes of the buffers ``prepare`` allocates (``buffer_bytes``)."""
        return sum(self.buffer_bytes().values())

    def call_bytes(self) -> dict[str, int]:
        """Bytes of one call on new inputs, which ``measure`` checks before making them: the inputs
        as float32 (random data, which quantized inputs are made from), ``buffer_bytes`` and the
        output in logical layout."""
        op = self.op
        output = next(p for p in self.generated.params if p.name == self._output_name)
        inputs = 4 * sum(math.prod(op.tensor(t).shape) for t in op.call_tensors)
        return {"inputs": inputs, **self.buffer_bytes(),
                "output": math.prod(op.tensor(op.output).shape) * CTYPE_BYTES[output.ctype]}

    def _ahead(self, name: str) -> int:
        """Bytes the kernel may read past the end of parameter ``name``'s array."""
        return self.generated.read_ahead.get(name, 0)

    def _zeros(self, name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
        """A zero buffer for parameter ``name``, followed by its read-ahead bytes."""
        return aligned_zeros(shape, dtype, self._ahead(name), self.exact)

    def _copy(self, name: str, array: np.ndarray) -> np.ndarray:
        """A copy of ``array`` for parameter ``name`` (see ``_zeros``)."""
        return aligned_copy(array, self._ahead(name), self.exact)

    def _pack(self, tensor: str, array: np.ndarray) -> np.ndarray:
        """``array`` in ``tensor``'s storage layout (see ``_zeros``)."""
        return self.schedule.layout_of(tensor).to_storage(array, self._ahead(tensor), self.exact)

    def _check(self, name: str, array, shape: tuple[int, ...]) -> np.ndarray:
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name} must be a numpy array, got {type(array).__name__}")
        bf16_input = self.op.dtype == BFLOAT16 and name in self.op.inputs
        if array.dtype != np.float32 and not (bf16_input and is_bf16_array(array)):
            allowed = "float32 or ml_dtypes.bfloat16" if bf16_input else "float32"
            raise TypeError(f"{name} has dtype {array.dtype}; this kernel takes {allowed} "
                            f"(convert with {name}.astype(np.float32))")
        if array.shape != shape:
            raise ValueError(f"{name} has shape {array.shape}; {self.op!r} expects {shape}")
        if not array.flags.c_contiguous:
            raise ValueError(f"{name} is not C-contiguous; pass np.ascontiguousarray({name})")
        return array

    def _given(self, arrays: tuple) -> list:
        """The call's arrays, one per input argument (a trailing None bias dropped); ValueError if
        their number is wrong."""
        wanted = self.generated.arguments[:-1]
        given = list(arrays)
        if self.op.bias and len(given) == len(wanted) - 1:
            raise ValueError(f"{self.op!r} has a bias: call kernel(x, w, b)")
        if len(given) == len(wanted) + 1 and given[-1] is None:
            given.pop()
        if len(given) != len(wanted):
            raise ValueError(f"kernel takes {len(wanted)} arrays ({', '.join(wanted)}), got {len(given)}")
        return given

    def _bind(self, values: dict[str, Any]) -> tuple:
        """The C arguments, each parameter's value looked up by its name (the driver's form of them)."""
        return self.driver.bind(self.generated.params, values)

    def prepare(self, *arrays: np.ndarray) -> Buffers:
        """Validate logical-layout inputs and copy them into the schedule's storage layouts."""
        given = self._given(arrays)
        for tensor, array in zip(self.generated.arguments[:-1], given):
            self._check(tensor, array, self.op.tensor(tensor).shape)
        check_memory(f"the buffers of {self.op!r}", self.buffer_bytes())
        storage: dict[str, np.ndarray] = {}
        for tensor, array in zip(self.generated.arguments[:-1], given, strict=True):
            is_bias = self.op.bias and tensor == self.op.bias_tensor
            storage[tensor] = self._copy(tensor, array) if is_bias else self._packed(tensor, array)
        out = self.op.output
        storage[out] = self._zeros(out, self.schedule.layout_of(out).storage_shape(self.op.tensor(out).shape),
                                   np.float32)
        return Buffers(storage, self._bind(storage))

    def prepack(self, weights: np.ndarray) -> None:
        """Pack the constant operand ``weights`` (``op.inputs[1]``, logical layout) into its storage
        layout and format now: later calls given this same array object skip its packing (the array
        must not change meanwhile; calls given another array pack that one). With ``hold_weights``
        (an ONNX backend's kernels, whose weights are the model's constants; nodes of one shape share
        a kernel) a call packs each weights array it is given once and keeps it so."""
        tensor = self.op.inputs[1]
        shape = self.op.tensor(tensor).shape
        if not isinstance(weights, np.ndarray) or weights.shape != shape:
            given = weights.shape if isinstance(weights, np.ndarray) else type(weights).__name__
            raise ValueError(f"prepack takes the weights {tensor} as an array of shape {shape}, got {given}")
        self._held[id(weights)] = (weights, self._pack(tensor, self._element(tensor, weights)))

    def _packed(self, tensor: str, array: np.ndarray) -> np.ndarray:
        """``array`` of input ``tensor`` packed for the kernel (the weights prepacked when they are
        the array ``prepack`` was given)."""
        if tensor == self.op.inputs[1] and self._prepacked(array):
            return self._held[id(array)][1]
        if tensor == self.op.inputs[1] and self.hold_weights:
            self.prepack(array)
            return self._held[id(array)][1]
        return self._pack(tensor, self._element(tensor, array))

    def _prepacked(self, weights: np.ndarray) -> bool:
        """Whether ``weights`` is an array ``prepack`` was given (the same object)."""
        return id(weights) in self._held and self._held[id(weights)][0] is weights

    def _element(self, tensor: str, array: np.ndarray) -> np.ndarray:
        """An input array as the kernel stores its elements: float32, or bf16 bit patterns (rounded to
        nearest even here, before packing, so a tile layout packs the same bits)."""
        return bf16_bits(array, tensor) if self.op.dtype == BFLOAT16 else array

    def run(self, buffers: Buffers) -> None:
        """Execute the kernel on prepared buffers (the timed part)."""
        self.driver.call(buffers.pointers)

    def _logical(self, stored: np.ndarray) -> np.ndarray:
        out = self.op.output
        return self.schedule.layout_of(out).from_storage(stored, self.op.tensor(out).shape)

    def output(self, buffers: Buffers) -> np.ndarray:
        """The output of the last run, in the op's logical layout."""
        return self._logical(buffers.arrays[self._output_name])

    def bind(self, values: dict[str, Any]) -> Buffers:
        """Buffers of one value per C parameter, by name: arrays already in their storage layouts
        (no copy and no check: each must hold what the kernel reads, ``buffer_bytes`` says how
        much) and a quantized kernel's scalars."""
        return Buffers({n: v for n, v in values.items() if isinstance(v, np.ndarray)}, self._bind(values))

    def __call__(self, *arrays: np.ndarray) -> np.ndarray:
        buffers = self.prepare(*arrays)
        self.run(buffers)
        return self.output(buffers)


class QuantizedKernel(Kernel):
    """A compiled schedule of a quantized op (integer or dequantize-on-the-fly arithmetic).

    ``kernel(xq, wq, b, x_scale=, x_zero_point=, w_scale=, w_zero_point=, y_scale=, y_zero_point=)``
    (``y_*`` only for a requantized output; an int32 output takes only the zero points).
    ``prepare`` validates the parameters with ``quant.check_quant_params``, packs the arrays into
    the schedule's layouts (uint8 weights shifted to int8, ``quantized.stored_weights``; ternary
    weights to 2 bits with ``weight_format("i2_s")``, ``codegen.ternary``) and
    computes the per-channel terms (multipliers, and the weight compensation table when the
    schedule says ``compensation("packed")``) outside the timed ``run``.
    """

    def __init__(self, schedule: Schedule, generated: Generated, driver: Driver, plan: QuantPlan):
        super().__init__(schedule, generated, driver)
        self.plan = plan
        self._compensations: dict[tuple[int, bytes], np.ndarray] = {}   # see ``_compensation``

    @property
    def _output_name(self) -> str:
        return "Y" if self.plan.integer else self.op.output

    def _elements(self, name: str) -> int:
        op = self.op
        if name == "Y":
            return storage_elements(self.schedule, op.output)
        if name == "lo_comp":
            return compensation_entries(op, self.plan)
        if name == "lo_xsum":
            return op.output_positions if self.plan.activation_sums else 1
        if name == op.inputs[1] and self.plan.packed_weights:
            return packed_bytes(super()._elements(name))
        return op.channels if name.startswith("lo_") else super()._elements(name)

    def check_params(self, arrays: tuple, params: dict[str, Any]) -> QuantParams:
        """Validated parameters of one call (ValueError/TypeError naming the bad value;
        ``quant.check_call``)."""
        return check_call(self.op.quant, self.op.channels, repr(self.op), list(arrays), params)

    def _pack(self, tensor: str, array: np.ndarray) -> np.ndarray:
        """``array`` in ``tensor``'s storage layout; i2_s weights then packed to 2 bits each."""
        if tensor != self.op.inputs[1] or not self.plan.packed_weights:
            return super()._pack(tensor, array)
        return self._copy(tensor, pack_i2s(self.schedule.layout_of(tensor).to_storage(array)))

    def _element(self, tensor: str, array: np.ndarray) -> np.ndarray:
        """The logical array of input ``tensor`` as the kernel reads it (before packing)."""
        return stored_weights(self.plan, array) if tensor == self.op.inputs[1] else array

    def prepare(self, *arrays: np.ndarray, **params: Any) -> Buffers:
        """Validate, pack into the schedule's layouts, precompute per-channel terms."""
        op, plan = self.op, self.plan
        given = self._given(arrays)
        for tensor, array in zip(self.generated.arguments, given):
            if not isinstance(array, np.ndarray):
                raise TypeError(f"{tensor} must be a numpy array, got {type(array).__name__}")
        qp = self.check_params(tuple(given), params)
        check_memory(f"the buffers of {op!r}", self.buffer_bytes())
        values: dict[str, Any] = {}
        for tensor, array in zip(op.inputs, given):
            shape = op.tensor(tensor).shape
            if array.shape != shape:
                raise ValueError(f"{tensor} has shape {array.shape}; {op!r} expects {shape}")
            values[tensor] = self._packed(tensor, array)
        if op.bias:
            values[op.bias_tensor] = self._copy(op.bias_tensor, qp.bias)
        out_shape = self.schedule.layout_of(op.output).storage_shape(op.tensor(op.output).shape)
        values[op.output] = self._zeros(op.output, out_shape, np.int32 if plan.integer else np.float32)
        values.update(self._parameter_values(qp, given[1], out_shape))
        return self.bind(values)

    def _parameter_values(self, qp: QuantParams, wq: np.ndarray, out_shape) -> dict[str, Any]:
        op, spec, plan = self.op, self.op.quant, self.plan
        k = op.channels
        # the zero points of the weights as stored (zw' = zw + weight_shift)
        zw = self._copy("lo_zw", (qp.w_zero_point + plan.weight_shift).astype(np.int32))
        if not plan.integer:
            return {"lo_zw": zw, "lo_wscale": self._copy("lo_wscale", qp.w_scale.astype(np.float32)),
                    "lo_xscale": float(qp.x_scale), "lo_zx": int(qp.x_zero_point)}
        if plan.compensation == "packed":
            comp = self._compensation(wq, qp.w_zero_point)
        else:
            comp = self._zeros("lo_comp", (self._elements("lo_comp"),), np.int32)
        values = {"Y": self._zeros("Y", out_shape, spec.output), "lo_zw": zw, "lo_comp": comp,
                  "lo_xsum": self._zeros("lo_xsum", (self._elements("lo_xsum"),), np.int32),
                  "lo_zx": int(qp.x_zero_point), "lo_zy": int(qp.y_zero_point or 0)}
        mult = output_multipliers(spec, qp, k)
        if mult is not None:
            values["lo_mult"] = self._copy("lo_mult", mult)
        return values

    def _compensation(self, wq: np.ndarray, w_zero_point: np.ndarray) -> np.ndarray:
        """The weight compensation table of ``wq``, computed once per prepacked weights array and zero
        points (``prepack``)."""
        key = (id(wq), np.asarray(w_zero_point).tobytes())
        if key in self._compensations and self._prepacked(wq):
            return self._compensations[key]
        table = self._copy("lo_comp", compensation_table(self.op, self.plan, wq, w_zero_point))
        if self._prepacked(wq):
            self._compensations[key] = table
        return table

    def accumulators(self, buffers: Buffers) -> np.ndarray:
        """The raw int32 products ``P`` of the last run (before compensation), logical layout."""
        return self._logical(buffers.arrays[self.op.output])

    def __call__(self, *arrays: np.ndarray, **params: Any) -> np.ndarray:
        buffers = self.prepare(*arrays, **params)
        self.run(buffers)
        return self.output(buffers)


class TileBuffers:
    """How an AMX tile kernel (``codegen/tiles.py``) stores its inputs, for a kernel class below it
    in the MRO: the activations channels-last and padded, the weights in B tiles; and ``run`` asks
    Linux for the tile state first (``require_amx``)."""

    @cached_property
    def tile_shape(self) -> TileShape:
        """The op as the schedule's tile kernel sees it (gathered patches store unpadded channels)."""
        return tile_plan(self.schedule).shape

    def _elements(self, name: str) -> int:
        op = self.op
        if name == op.inputs[0]:
            return math.prod(activations_shape(op, self.tile_shape))
        if name == op.inputs[1]:
            return math.prod(self.tile_shape.packed_weights_shape)
        return super()._elements(name)

    def _pack(self, tensor: str, array: np.ndarray) -> np.ndarray:
        op, shape = self.op, self.tile_shape
        if tensor == op.inputs[0]:
            stored = self._zeros(tensor, activations_shape(op, shape), array.dtype)
            return pack_activations(op, array, stored, shape)
        if tensor == op.inputs[1]:
            packed = self._zeros(tensor, shape.packed_weights_shape, array.dtype)
            return pack_weights(op, array, packed, shape)
        return super()._pack(tensor, array)

    def run(self, buffers: Buffers) -> None:
        require_amx()
        super().run(buffers)


class TileKernel(TileBuffers, QuantizedKernel):
    """A quantized kernel on AMX tiles. The epilogue is fused at the tile store, so there are no raw
    int32 accumulators to read back."""

    def accumulators(self, buffers: Buffers) -> np.ndarray:
        raise ValueError("an AMX tile kernel applies the epilogue at each tile store: it keeps no int32 "
                         "accumulators of the whole output")


class Bf16TileKernel(TileBuffers, Kernel):
    """A bfloat16 kernel on AMX tiles (``_tile_dpbf16ps``, float32 accumulation)."""


class BinaryKernel(QuantizedKernel):
    """A binary op's XNOR + popcount kernel (``codegen/binary.py``), called like the int8 kernels:
    ``kernel(xq, wq, b, x_scale=, x_zero_point=0, w_scale=, w_zero_point=0)`` (no scales for an int32
    output). ``prepare`` checks that every value is -1 or +1, packs both operands to bits (the
    activations with their padding) and computes the ``base`` table of the padding correction; the
    kernel stores the output channels-last and ``output`` returns it in the logical layout."""

    def __init__(self, schedule: Schedule, generated: Generated, driver: Driver, popcount: str):
        super().__init__(schedule, generated, driver, None)
        self.popcount = popcount
        self.shape = BinaryShape.of(self.op, lanes=LANES[self.isa])

    @property
    def block(self) -> tuple[int, int]:
        """The register block the schedule asks for: (output positions, vectors of output channels)."""
        return block_of(self.schedule, self.isa)

    @property
    def _output_name(self) -> str:
        return self.op.output

    def _elements(self, name: str) -> int:
        if name in self.op.inputs:
            return packed_elements(self.op, self.isa, name)
        if name == BASE:
            return math.prod(base_table_shape(self.op))
        return self.op.channels if name.startswith("lo_") else Kernel._elements(self, name)

    def prepare(self, *arrays: np.ndarray, **params: Any) -> Buffers:
        """Validate, pack both operands to bits, compute the multipliers ``sx * sw[k]`` and the
        ``base`` table."""
        op = self.op
        given = self._given(arrays)
        for tensor, array in zip(self.generated.arguments, given):
            if not isinstance(array, np.ndarray):
                raise TypeError(f"{tensor} must be a numpy array, got {type(array).__name__}")
            shape = op.tensor(tensor).shape
            if array.shape != shape and tensor != op.bias_tensor:
                raise ValueError(f"{tensor} has shape {array.shape}; {op!r} expects {shape}")
        qp = self.check_params(tuple(given), params)
        check_memory(f"the buffers of {op!r}", self.buffer_bytes())
        x, w = op.inputs
        weights = pack_bits_weights(op, self.shape, given[1])
        values: dict[str, Any] = {x: self._copy(x, pack_bits_activations(op, self.shape, given[0])),
                                  w: self._copy(w, weights),
                                  BASE: self._copy(BASE, base_table(op, self.shape, weights))}
        if op.bias:
            values[op.bias_tensor] = self._copy(op.bias_tensor, qp.bias)
        values[op.output] = self._zeros(op.output, self.shape.output_shape,
                                        np.float32 if op.quant.dequantized else np.int32)
        if op.quant.scaled:
            values["lo_mult"] = self._copy("lo_mult", output_multipliers(op.quant, qp, op.channels))
        return self.bind(values)

    def prepack(self, weights: np.ndarray) -> None:
        raise ValueError("a binary kernel packs its weights to bits and their padding table on every call; "
                         "it has no prepacked form")

    def output(self, buffers: Buffers) -> np.ndarray:
        """The output of the last run, from channels-last to the op's logical layout."""
        stored = buffers.arrays[self.op.output].reshape(self.shape.output_shape)
        return np.ascontiguousarray(np.moveaxis(stored, -1, 1)).reshape(self.op.tensor(self.op.output).shape)

    def accumulators(self, buffers: Buffers) -> np.ndarray:
        raise ValueError("a binary kernel applies the epilogue per output: it keeps no raw accumulators")


class LutKernel(QuantizedKernel):
    """A ternary conv or GEMM with ``weight_format("tl1" | "tl2")`` (``codegen/lut.py``): ``prepare``
    packs the weights to 4-bit group indices (and sign bits) and allocates the tables workspace; the
    call, parameters and outputs are the int8 kernels'."""

    @property
    def format(self):
        """The table-lookup format (``codegen.lut_format.FORMATS``)."""
        return FORMATS[self.schedule.weight_format_mode]

    def _elements(self, name: str) -> int:
        if name == self.op.inputs[1]:
            return lut_nest(self.schedule).shape.packed_bytes
        if name == LUT:
            return lut_nest(self.schedule).table_entries
        return super()._elements(name)

    def _parameter_values(self, qp: QuantParams, wq: np.ndarray, out_shape) -> dict[str, Any]:
        values = super()._parameter_values(qp, wq, out_shape)
        return values | {LUT: self._zeros(LUT, (self._elements(LUT),), np.int16)}

    def _pack(self, tensor: str, array: np.ndarray) -> np.ndarray:
        if tensor == self.op.inputs[1]:
            return self._copy(tensor, pack_lut(self.op, array, self.format))
        return super()._pack(tensor, array)


def compile_binary(schedule: Schedule, isa: str = "auto", popcount: str = "auto") -> BinaryKernel:
    """The XNOR + popcount kernel of a binary op (``codegen/binary.py``) on ``isa``. ``popcount``:
    ``"vpopcntq"`` (AVX-512 VPOPCNTDQ), ``"nibble"`` (vpshufb table), ``"builtin"`` (scalar), or
    ``"auto"`` (vpopcntq where the CPU has it)."""
    name = resolve_isa(isa, integer=True)
    choices = POPCOUNTS[name]
    if popcount == "auto":
        popcount = "vpopcntq" if "vpopcntq" in choices and "avx512_vpopcntdq" in cpu_flags() else choices[-1]
    if popcount not in choices:
        raise ValueError(f"popcount={popcount!r} is not available on isa {name!r}; allowed: "
                         f"{', '.join(map(repr, choices))} (or 'auto')")
    if popcount == "vpopcntq" and "avx512_vpopcntdq" not in cpu_flags():
        raise ValueError("popcount='vpopcntq' needs AVX-512 VPOPCNTDQ (avx512_vpopcntdq in /proc/cpuinfo); "
                         "this CPU lacks it: use 'nibble'")
    generated = generate_binary(schedule, name, popcount)
    module = compile_c(generated.source, generated.cdef, generated.compile_flags + QUANT_FLAGS)
    driver = CffiDriver(module, KERNEL_NAME, THREADS_NAME if generated.openmp else None)
    return BinaryKernel(schedule, generated, driver, popcount)


def cffi_driver(generated: Generated, flags: tuple[str, ...]) -> CffiDriver:
    """``generated`` compiled with ``flags`` (and OpenMP's where it has a parallel loop) into a cffi
    module of the kernel cache, called in this process."""
    openmp = ("-fopenmp",) if generated.openmp else ()
    module = compile_c(generated.source, generated.cdef, flags + openmp, openmp)
    return CffiDriver(module, KERNEL_NAME, THREADS_NAME if generated.openmp else None)



def wrap(schedule: Schedule, generated: Generated, driver: Driver) -> Kernel:
    """The kernel of an emitted schedule (``codegen.generate``), called through ``driver``."""
    if generated.plan is not None:
        return QuantizedKernel(schedule, generated, driver, generated.plan)
    return Kernel(schedule, generated, driver)


def _compile_tiles(schedule: Schedule) -> Kernel:
    generated = generate_tiles(schedule)    # a schedule AMX cannot run is refused the same on every CPU
    check_amx_cpu()
    driver = cffi_driver(generated, generated.isa.compile_flags + QUANT_FLAGS)
    if generated.plan is None:
        return Bf16TileKernel(schedule, generated, driver)
    return TileKernel(schedule, generated, driver, generated.plan)


def compile_schedule(schedule: Schedule, isa: str = "auto") -> Kernel:
    """Generate C for ``schedule`` on ``isa``, build it through the cache, and wrap it
    (``isa="amx"``: the AMX tile kernel of a quantized op, ``codegen/tiles.py``)."""
    quantized = schedule.op.quant is not None
    if quantized and schedule.op.quant.binary:
        if isa == "amx":
            raise ScheduleError("isa 'amx' has no binary kernels; a binary op compiles to XNOR + popcount "
                             "on 'avx512', 'avx2' or 'scalar'")
        return compile_binary(schedule, isa)
    if isa == "amx":
        return _compile_tiles(schedule)
    isa_name = resolve_isa(isa, integer=quantized)
    if schedule.weight_format_mode in FORMATS:
        generated = generate_lut(schedule, isa_name)
        driver = cffi_driver(generated, generated.compile_flags + QUANT_FLAGS)
        return LutKernel(schedule, generated, driver, generated.plan)
    generated = generate(schedule, ISAS[isa_name], bf16_dot=bf16_dot_available(isa_name))
    # quantized kernels: the integer table's flags; float32 products without contraction (requantization
    # must match quant.py bit for bit) and wrapping int32 arithmetic (compensation terms)
    flags = INT_ISAS[isa_name].compile_flags + QUANT_FLAGS if quantized else generated.compile_flags
    if quantized and generated.plan.tap_dot is not None:
        flags += taps.compile_flags(isa_name)
    return wrap(schedule, generated, cffi_driver(generated, flags))
