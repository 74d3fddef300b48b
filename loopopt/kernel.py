"""Compiled kernels: from a Schedule to a callable on numpy arrays (float32 and quantized).

A target (``targets/``) generates the C of a schedule, builds it through the cache and wraps it
in a ``Kernel`` (float ops) or a ``QuantizedKernel`` (quantized ops, called with ONNX
``QLinearConv`` parameter names; ``wrap``), or a kernel class of its own families built on these,
each calling the compiled function through a driver (``driver.py``; ``cffi_driver`` in this
process). A call is split into ``prepare`` (validate, pack into the schedule's storage layouts,
precompute per-channel terms), ``run`` (the timed part) and ``output`` (back to the logical
layout). Every C parameter is bound by the name codegen gave it (``Generated.params``).
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .bf16 import BFLOAT16, bf16_bits, bf16_to_float32, bf16_values, is_bf16_array
from .buffers import ALIGNMENT, aligned_copy, aligned_zeros, check_memory
from .cbuild import compile_c, sanitizers
from .codegen import Generated
from .codegen.emit import KERNEL_NAME, THREADS_NAME
from .codegen.params import storage_elements
from .codegen.quantized import MAP, QuantPlan, compensation_entries, compensation_table, stored_weights
from .codegen.ternary import pack_i2s, packed_bytes
from .codegen.wide import elements as wide_elements
from .codegen.wide import pack_s16
from .driver import CffiDriver, Driver
from .epilogue import RESIDUAL
from .layout import Layout, Transposer
from .openmp import OPENMP_FLAG
from .ops import FLOAT16
from .quant import QuantParams, check_call, clip_requantized, output_multipliers
from .schedule import Schedule, ScheduleError

CTYPE_BYTES = {"float": 4, "int32_t": 4, "uint8_t": 1, "int8_t": 1, "uint16_t": 2, "int16_t": 2,
               "uint64_t": 8, "__half": 2, "__nv_bfloat16": 2}     # the last two: CUDA's 16-bit floats


# the element type an array parameter of each C type holds (a host kernel's 16-bit floats and CUDA's
# bfloat16 as their bit patterns)
CTYPE_DTYPES = {"float": np.dtype(np.float32), "uint16_t": np.dtype(np.uint16), "int32_t": np.dtype(np.int32),
                "int8_t": np.dtype(np.int8), "uint8_t": np.dtype(np.uint8), "int16_t": np.dtype(np.int16),
                "__half": np.dtype(np.float16),
                "__nv_bfloat16": np.dtype(np.uint16)}


@dataclass
class Buffers:
    """Storage-layout arrays of one call, ready for the C function."""

    arrays: dict[str, np.ndarray]
    pointers: tuple


class Kernel:
    """A compiled schedule: call it on numpy arrays in the op's logical layouts."""

    algorithm = "direct"     # one schedule's nest (a WinogradKernel says which Winograd it runs)
    target = None            # the Target that built it (set by the target's compile)
    sum_roundoff: float | None = None   # a bfloat16 kernel's unit roundoff of its float32 sums where coarser
                                        # than round to nearest (NEON's bfdot rounds to odd), for ``verify``

    def __init__(self, schedule: Schedule, generated: Generated, driver: Driver):
        self.schedule = schedule
        self.op = schedule.op
        self.epilogue = schedule.fused_epilogue   # residual add and clip of the outputs: the reference's too
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
        """Elements of the array parameter ``name`` (a tensor or the residual in its storage layout, or
        the bias)."""
        name = self._tensor_of(name)
        return storage_elements(self.schedule, name) if name in self.op.tensors else self.op.channels

    def _tensor_of(self, name: str) -> str:
        """The op tensor whose layout and shape the array parameter ``name`` has (the residual's: the
        output)."""
        return self.op.output if name == RESIDUAL else name

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
        (and a residual) as float32 (random data, which quantized inputs are made from), ``buffer_bytes``
        and the output in logical layout."""
        op = self.op
        output = next(p for p in self.generated.params if p.name == self._output_name)
        given = op.call_tensors + ((op.output,) if self.schedule.residual else ())    # the residual's shape
        inputs = 4 * sum(math.prod(op.tensor(t).shape) for t in given)
        return {"inputs": inputs, **self.buffer_bytes(),
                "output": math.prod(op.tensor(op.output).shape) * CTYPE_BYTES[output.ctype]}

    def _ahead(self, name: str) -> int:
        """Bytes the kernel may read past the end of parameter ``name``'s array."""
        return self.generated.read_ahead.get(name, 0)

    def _zeros(self, name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
        """A zero buffer for parameter ``name``, followed by its read-ahead bytes, and by at least
        ``ALIGNMENT`` zero bytes (but in a sanitizer build): a kernel that reads a little past the end
        of its input (an AMX tile row's last chunk) reads another kernel's output where it is."""
        ahead = self._ahead(name)
        return aligned_zeros(shape, dtype, ahead if self.exact else max(ahead, ALIGNMENT), self.exact)

    def _copy(self, name: str, array: np.ndarray) -> np.ndarray:
        """A copy of ``array`` for parameter ``name`` (see ``_zeros``)."""
        return aligned_copy(array, self._ahead(name), self.exact)

    def _pack(self, tensor: str, array: np.ndarray, into: np.ndarray | None = None) -> np.ndarray:
        """``array`` in ``tensor``'s storage layout (see ``_zeros``); ``into``: a buffer an earlier
        packing of this tensor returned, written where a copy is needed (``Layout.to_storage``)."""
        if tensor not in self._packing:
            transpose = self.target.transpose() if self.target is not None else None
            self._packing[tensor] = (self.schedule.layout_of(self._tensor_of(tensor)), self._ahead(tensor),
                                     transpose)
        layout, ahead, transpose = self._packing[tensor]
        return layout.to_storage(array, ahead, self.exact, into, transpose)

    @cached_property
    def _packing(self) -> dict[str, tuple[Layout, int, Transposer | None]]:
        """Per array parameter packed so far, what its packing takes (asked on every call): its storage
        layout, the bytes the kernel may read past it, and the target's compiled transposes."""
        return {}

    def _check(self, name: str, array, shape: tuple[int, ...]) -> np.ndarray:
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name} must be a numpy array, got {type(array).__name__}")
        bf16_input = self.op.dtype == BFLOAT16 and name in self.op.inputs
        f16_input = self.op.dtype == FLOAT16 and name in self.op.inputs
        if array.dtype != np.float32 and not (bf16_input and is_bf16_array(array)) and \
                not (f16_input and array.dtype == np.float16):
            allowed = ("float32 or ml_dtypes.bfloat16" if bf16_input else "float32 or float16" if f16_input
                       else "float32")
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
        return self.bind(self._values(*arrays))

    def _values(self, *arrays: np.ndarray) -> dict[str, Any]:
        """``prepare``'s buffers (and a quantized kernel's scalars) by C parameter name, before binding."""
        given = self._given(arrays)
        for tensor, array in zip(self.generated.arguments[:-1], given):
            self._check(tensor, array, self.op.tensor(self._tensor_of(tensor)).shape)
        check_memory(f"the buffers of {self.op!r}", self.buffer_bytes())
        storage: dict[str, np.ndarray] = {}
        for tensor, array in zip(self.generated.arguments[:-1], given, strict=True):
            is_bias = self.op.bias and tensor == self.op.bias_tensor
            storage[tensor] = self._copy(tensor, array) if is_bias else self._packed(tensor, array)
        out = self.op.output
        storage[out] = self._zeros(out, self.schedule.layout_of(out).storage_shape(self.op.tensor(out).shape),
                                   self._output_dtype)
        return storage

    @property
    def _output_dtype(self) -> np.dtype:
        """The element type of a float op's output buffer: float32, or a 16-bit output's C type's."""
        float32 = self.op.out_dtype == "float32"
        return np.dtype(np.float32) if float32 else self.parameter_dtype(self.op.output)

    def _output_values(self, stored: np.ndarray) -> np.ndarray:
        """The output as a call returns it: as stored, but a 16-bit output's bit patterns (uint16) as
        float16 (a view) or, for bfloat16, their float32 values (numpy has no bfloat16)."""
        if stored.dtype != np.uint16 or self.op.out_dtype == "float32":
            return stored
        return stored.view(np.float16) if self.op.out_dtype == FLOAT16 else bf16_to_float32(stored)

    def with_constants(self, *constants: np.ndarray, per_call: int = 1,
                       **params: Any) -> Callable[..., np.ndarray]:
        """This kernel as a function of its first ``per_call`` inputs only (a model's activations;
        2: both operands of a batched attention matmul): ``constants``, its other inputs (the weights,
        a bias), and the quantization ``params`` are checked, packed and kept now, and so are the
        buffers a run writes and the call's bound arguments. Each call checks and packs its arrays
        (into the buffers of the first call, or no copy when their memory already is the storage
        layout: a previous kernel's output view, a row-major matrix of a plain layout), runs, and
        returns the output in the logical layout, as a view of the kernel's storage where the layout
        allows (``Layout.view``): the next call overwrites it, so a caller that keeps it copies it. A
        kernel that adds a residual (``Schedule.add_residual``) takes it last in each call:
        ``call(x, residual)``, and with ``call(x, residual, over_residual=True)`` writes its output over
        the residual's memory (its packed copy where the residual was not read as it is) and returns a
        view of that: a model's shortcut read by nothing else after it, so the output's stores hit lines
        the residual's loads just brought in and no buffer of the kernel's own is touched; only where
        the kernel stores each output once (``Generated.output_over_residual``), else ValueError.
        ``call.last_call()``: the last call's C function and arguments where
        that call was the C call alone (``plan.Plan`` repeats such calls without Python between them);
        ``call.storage``: the buffer every call writes its output into; ``call.held()`` that buffer and
        the zero bytes readers may read after it, where another step may share its memory (not an exact
        buffer's, nor one with padding that no call writes), and ``call.move(buffer)`` the output's
        buffer from then on (``onnx.arena``)."""
        inputs = self.op.inputs
        if isinstance(per_call, bool) or per_call not in range(1, len(inputs) + 1):
            raise ValueError(f"per_call must be the number of leading inputs each call gives, 1 to "
                             f"{len(inputs)} ({', '.join(inputs)}), got {per_call!r}")
        if per_call > 1 and self.op.quant is not None:
            raise ValueError(f"per_call={per_call} takes float operands; {self.op!r} is quantized "
                             "(its weights are packed with their parameters): use per_call=1")
        out_shape = self.op.tensor(self.op.output).shape
        given = {name: (self.op.tensor(name).shape, np.dtype(np.float32)) for name in inputs[:per_call]}
        given[inputs[0]] = (given[inputs[0]][0], self._activation_dtype)
        if self.schedule.residual:
            given[RESIDUAL] = (out_shape, np.dtype(np.float32))
        placeholders = [np.zeros(shape, dtype) for shape, dtype in given.values()]
        values = self._values(*placeholders[:per_call], *constants, *placeholders[per_call:], **params)
        arguments = list(self._bind(values))
        slots = {p.name: i for i, p in enumerate(self.generated.params)}
        # per array a call gives: the buffer its first packing returned, and that buffer bound
        first = {n: (values[n], arguments[slots[n]]) for n in given}
        stored = values[self._output_name]
        layout = self.schedule.layout_of(self.op.output)
        view = layout.view(stored, out_shape)

        # per array a call gives: the last array object whose memory the kernel read as it is (no copy),
        # and that array's packed view; the address of the last one read in place, and its binding
        read_as_is: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        in_place: dict[str, tuple[int, Any]] = {}

        def place(tensor: str, array: np.ndarray) -> None:
            """``array`` packed for parameter ``tensor`` (into its first buffer where a copy is needed)
            and bound; the packed array is held in ``values`` until the next call places another (a
            bound pointer does not keep its array alive). The array object the last call gave, where
            the kernel read its memory as it is, is bound as it was without a check or a packing: the
            same object has the same memory, shape and strides (a model's plan hands each kernel the
            same view of its producer's storage on every run: 8-12 us saved per call). Another array
            read in place at the address of the last one read in place keeps that binding: a packed
            array of this shape at that address is the same argument. The shape and dtype are checked
            on every call (an array's shape can be set in place)."""
            check(tensor, array, *given[tensor])
            seen = read_as_is.get(tensor)
            if seen is not None and seen[0] is array:
                values[tensor] = seen[1]
                return
            kept, argument = first[tensor]
            packed = self._packed(tensor, array, into=kept)
            if packed is not kept:
                address = packed.__array_interface__["data"][0]
                last = in_place.get(tensor)
                if last is None or last[0] != address:
                    bound = self.driver.bind((self.generated.params[slots[tensor]],), {tensor: packed})[0]
                    in_place[tensor] = (address, bound)
                argument = in_place[tensor][1]
            values[tensor] = packed
            arguments[slots[tensor]] = argument
            if packed is not kept and np.may_share_memory(packed, array):
                read_as_is[tensor] = (array, packed)
            else:
                read_as_is.pop(tensor, None)

        def check(tensor: str, array: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> None:
            if array.shape != shape or array.dtype != dtype:
                wants = "adds one of shape" if tensor == RESIDUAL else "expects"
                raise ValueError(f"{_called(tensor)} has shape {array.shape} and dtype {array.dtype}; "
                                 f"{self.op!r} {wants} {shape} and dtype {dtype}")

        output_slot = slots[self._output_name]
        own_output = arguments[output_slot]

        def call(*arrays: np.ndarray, over_residual: bool = False) -> np.ndarray:
            """The output on this call's arrays (the activations, and the residual when the kernel
            adds one), in the kernel's buffer or, ``over_residual``, in the residual's."""
            if len(arrays) != len(given):
                raise ValueError(f"this kernel takes {len(given)} array(s) per call "
                                 f"({', '.join(map(_called, given))}), got {len(arrays)}")
            if over_residual and not self.generated.output_over_residual:
                raise ValueError(f"over_residual=True needs a kernel that adds a residual and stores each "
                                 f"output once; {self.op!r} with this schedule "
                                 + ("applies its epilogue in a pass over the output after the nest"
                                    if self.schedule.residual else "adds no residual"))
            for tensor, array in zip(given, arrays):
                place(tensor, array)
            arguments[output_slot] = arguments[slots[RESIDUAL]] if over_residual else own_output
            self.run(Buffers(values, tuple(arguments)))
            if over_residual:
                return self._logical(values[RESIDUAL], view=True)
            return self._output_values(layout.from_storage(stored, out_shape) if view is None else view)

        def last_call() -> tuple[Callable[..., None], tuple] | None:
            """The C function and the arguments of the last call, when that call read every array it
            was given in place (no packing: what repeating it needs is the C call alone); else None."""
            if len(read_as_is) < len(given):
                return None
            return self.driver.function(), tuple(arguments)

        tail = max(self._ahead(self._output_name), ALIGNMENT)      # as ``_zeros`` leaves it

        def held() -> tuple[np.ndarray, int] | None:
            return None if self.exact or stored.size != math.prod(out_shape) else (stored, tail)

        def move(buffer: np.ndarray) -> None:
            nonlocal stored, view, own_output
            stored = values[self._output_name] = call.storage = buffer    # type: ignore[attr-defined]
            view = layout.view(stored, out_shape)
            parameter = self.generated.params[output_slot]
            own_output = self.driver.bind((parameter,), {self._output_name: stored})[0]

        call.last_call = last_call    # type: ignore[attr-defined]
        call.storage = stored         # type: ignore[attr-defined]
        call.held, call.move = held, move    # type: ignore[attr-defined]
        return call

    @property
    def _activation_dtype(self) -> np.dtype:
        """The dtype of the first input as a call gives it."""
        return np.dtype(np.float32)

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

    def _packed(self, tensor: str, array: np.ndarray, into: np.ndarray | None = None) -> np.ndarray:
        """``array`` of input ``tensor`` packed for the kernel (the weights prepacked when they are
        the array ``prepack`` was given; ``into``: see ``_pack``)."""
        if tensor == self.op.inputs[1] and self._prepacked(array):
            return self._held[id(array)][1]
        if tensor == self.op.inputs[1] and self.hold_weights:
            self.prepack(array)
            return self._held[id(array)][1]
        return self._pack(tensor, self._element(tensor, array), into)

    def _prepacked(self, weights: np.ndarray) -> bool:
        """Whether ``weights`` is an array ``prepack`` was given (the same object)."""
        return id(weights) in self._held and self._held[id(weights)][0] is weights

    def _element(self, tensor: str, array: np.ndarray) -> np.ndarray:
        """An input array as the kernel stores its elements: float32, or bf16 or half bit patterns
        (rounded to nearest even here, before packing, so a tile layout packs the same bits; halves
        where the C parameter holds them: a kernel that widens them itself, else their float32 values:
        the cuda target's host emulation)."""
        if tensor == RESIDUAL:     # float32 as given
            return array
        halves = any(p.name == tensor and p.ctype == "uint16_t" for p in self.generated.params)
        if self.op.dtype == FLOAT16:
            rounded = np.ascontiguousarray(array.astype(np.float16))
            return rounded.view(np.uint16) if halves else rounded.astype(np.float32)
        if self.op.dtype == BFLOAT16:
            return bf16_bits(array, tensor) if halves else bf16_values(array, tensor)
        return array

    def parameter_dtype(self, name: str) -> np.dtype:
        """The element type of array parameter ``name`` as ``bind`` takes it (its C type's)."""
        return next(CTYPE_DTYPES[p.ctype] for p in self.generated.params if p.name == name)

    def run(self, buffers: Buffers) -> None:
        """Execute the kernel on prepared buffers (the timed part)."""
        self.driver.call(buffers.pointers)

    def _logical(self, stored: np.ndarray, view: bool = False) -> np.ndarray:
        """The output in the op's logical layout: a C-contiguous copy, or with ``view`` a view of
        ``stored`` where the layout allows."""
        out = self.op.output
        layout, shape = self.schedule.layout_of(out), self.op.tensor(out).shape
        logical = layout.view(stored, shape) if view else None
        return self._output_values(layout.from_storage(stored, shape) if logical is None else logical)

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


def _called(tensor: str) -> str:
    """How an error names a call's array: its tensor, or "the residual"."""
    return "the residual" if tensor == RESIDUAL else tensor


CLIP_PARAMS = ("clip_scale", "clip_zero_point")    # a call's quantization of ``Schedule.clip_quantized``
MAP_ENTRIES = 256      # its table: one output per bit pattern of the requantized value


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
        if schedule.requantized_clip is not None and not any(p.name == MAP for p in generated.params):
            raise ScheduleError(f"clip_quantized: the kernel family of {schedule.op!r} requantizes its "
                                "outputs without it; leave clip_quantized out and clip the outputs after the "
                                "kernel")
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
        if name == MAP:
            return MAP_ENTRIES
        if name == "lo_xsum":
            return op.output_positions if self.plan.activation_sums else 1
        if name == op.inputs[1] and self.plan.packed_weights:
            return packed_bytes(super()._elements(name))
        if name == op.inputs[1] and self.plan.wide_weights:
            return wide_elements(super()._elements(name))
        return op.channels if name.startswith("lo_") else super()._elements(name)

    def check_params(self, arrays: tuple, params: dict[str, Any]) -> QuantParams:
        """Validated parameters of one call (ValueError/TypeError naming the bad value;
        ``quant.check_call``)."""
        return check_call(self.op.quant, self.op.channels, repr(self.op), list(arrays), params)

    def _pack(self, tensor: str, array: np.ndarray, into: np.ndarray | None = None) -> np.ndarray:
        """``array`` in ``tensor``'s storage layout; i2_s weights then packed to 2 bits each, s16 ones
        widened to int16 pairs."""
        pack = pack_i2s if self.plan.packed_weights else pack_s16 if self.plan.wide_weights else None
        if tensor != self.op.inputs[1] or pack is None:
            return super()._pack(tensor, array, into)
        return self._copy(tensor, pack(self.schedule.layout_of(tensor).to_storage(array)))

    def _element(self, tensor: str, array: np.ndarray) -> np.ndarray:
        """The logical array of input ``tensor`` as the kernel reads it (before packing)."""
        return stored_weights(self.plan, array) if tensor == self.op.inputs[1] else array

    def prepare(self, *arrays: np.ndarray, **params: Any) -> Buffers:
        """Validate, pack into the schedule's layouts, precompute per-channel terms."""
        return self.bind(self._values(*arrays, **params))

    def _values(self, *arrays: np.ndarray, **params: Any) -> dict[str, Any]:
        op, plan = self.op, self.plan
        clipped = {name: params.pop(name, None) for name in CLIP_PARAMS}
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
        values.update(self._clip_values(qp, **clipped))
        return values

    def _clip_values(self, qp: QuantParams, clip_scale: Any, clip_zero_point: Any) -> dict[str, Any]:
        """The C scalars of ``Schedule.clip_quantized`` from a call's ``clip_scale`` and ``clip_zero_point``
        (none for a kernel without it); TypeError or ValueError naming a missing, extra or bad one."""
        given = [n for n, v in zip(CLIP_PARAMS, (clip_scale, clip_zero_point)) if v is not None]
        if self.schedule.requantized_clip is None:
            if given:
                raise TypeError(f"{', '.join(given)} quantize the outputs of a schedule with "
                                "clip_quantized(); this kernel's schedule has none: call it without them")
            return {}
        if len(given) < len(CLIP_PARAMS):
            raise ValueError(f"{self.op!r} clips its requantized outputs on another scale (clip_quantized): "
                             f"pass clip_scale= (a positive float32) and clip_zero_point= (a "
                             f"{self.op.quant.output} value)")
        scale, zero = np.asarray(clip_scale), np.asarray(clip_zero_point)
        if scale.size != 1 or not np.isfinite(scale).all() or not (scale > 0).all():
            raise ValueError(f"clip_scale must be one positive finite float32, got {clip_scale!r}")
        info = np.iinfo(self.op.quant.output)
        if zero.size != 1 or zero.dtype.kind not in "iu" or not info.min <= int(zero.reshape(())) <= info.max:
            raise ValueError(f"clip_zero_point must be one integer in {info.min}..{info.max} (the "
                             f"{self.op.quant.output} output's range), got {clip_zero_point!r}")
        dtype = np.dtype(self.op.quant.output)
        values = np.arange(MAP_ENTRIES, dtype=np.uint8).view(dtype)
        table = clip_requantized(values, qp.y_scale, qp.y_zero_point, self.schedule.requantized_clip,
                                 scale.reshape(()), zero.reshape(()))
        return {MAP: self._copy(MAP, table.view(np.uint8))}     # the outputs by the requantized value

    @property
    def _activation_dtype(self) -> np.dtype:
        return np.dtype(self.op.quant.activation)

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


def cffi_driver(generated: Generated, flags: tuple[str, ...]) -> CffiDriver:
    """``generated`` compiled with ``flags`` (and OpenMP's where it has a parallel loop) into a cffi
    module of the kernel cache, called in this process."""
    openmp = (OPENMP_FLAG,) if generated.openmp else ()
    module = compile_c(generated.source, generated.cdef, flags + openmp, openmp)
    return CffiDriver(module, KERNEL_NAME, THREADS_NAME if generated.openmp else None)


def wrap(schedule: Schedule, generated: Generated, driver: Driver) -> Kernel:
    """The kernel of an emitted schedule (``codegen.generate``), called through ``driver``."""
    if generated.plan is not None:
        return QuantizedKernel(schedule, generated, driver, generated.plan)
    return Kernel(schedule, generated, driver)
