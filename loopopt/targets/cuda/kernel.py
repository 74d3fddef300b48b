"""``CudaKernel``: a built CUDA kernel called on numpy arrays (copied to and from the device) or,
without copies, on device arrays of CuPy, PyTorch or any library with ``__cuda_array_interface__``;
``CudaDriver`` launches it. ``QuantizedCudaKernel``: a quantized op's, called with the quantization
parameters as on the CPU."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...bf16 import bf16_bits
from ...codegen import Generated
from ...kernel import Buffers, Kernel
from ...schedule import Schedule
from . import device, padding_sums, quantized
from .driver import CudaDriver
from .gemv import PackedWeights, packs_weights
from .printer import CudaSource
from .toolchain import Build


class CudaKernel(Kernel):
    """A schedule's CUDA kernel. ``kernel(x, w, b)`` on numpy arrays returns numpy; on device arrays
    (``__cuda_array_interface__`` or DLPack, ``device.on_device``; each in the schedule's storage
    layout, which for the default layouts is the logical one) it returns a CuPy array
    (``torch.as_tensor(out, device="cuda")`` makes a tensor of it without a copy). ``report``: nvcc's
    resource report (registers, spills)."""

    def __init__(self, schedule: Schedule, generated: Generated, printed: CudaSource, build: Build,
                 arch: str):
        super().__init__(schedule, generated, CudaDriver(build, printed))
        self.isa, self.printed, self.build, self.exact = arch, printed, build, False

    @property
    def report(self) -> str:
        return self.build.report

    def _storage_shape(self, tensor: str) -> tuple[int, ...]:
        tensor = self._tensor_of(tensor)
        return self.schedule.layout_of(tensor).storage_shape(self.op.tensor(tensor).shape)

    def prepare(self, *arrays: np.ndarray) -> Buffers:
        """Validate logical-layout numpy inputs, pack them into the storage layouts and copy them to
        the device; the output is allocated there."""
        cp = device.cupy()
        given = self._given(arrays)
        stored: dict[str, Any] = {}
        for tensor, array in zip(self.generated.arguments[:-1], given, strict=True):
            self._check(tensor, array, self.op.tensor(self._tensor_of(tensor)).shape)
            is_bias = self.op.bias and tensor == self.op.bias_tensor
            element = bf16_bits(array, tensor) if self.parameter_dtype(tensor) == np.uint16 else array
            # the bias as given; a tensor in its storage layout (the residual in the output's)
            packed = (element if is_bias
                      else self.schedule.layout_of(self._tensor_of(tensor)).to_storage(element))
            stored[tensor] = cp.asarray(packed.astype(self.parameter_dtype(tensor), copy=False))
        out = self.op.output
        dtype = self.parameter_dtype(out)   # poisoned: NaN (0xffff: a 16-bit float's NaN bits)
        stored[out] = cp.full(self._storage_shape(out), np.nan if dtype.kind == "f" else 0xFFFF, dtype=dtype)
        return self.bind(stored)

    def _shape(self, name: str) -> tuple[int, ...]:
        """The shape of parameter ``name``'s device array: a tensor's (and the residual's) storage shape,
        the bias's logical one, the padding's table's (``padding_sums``), a per-channel array's
        channels."""
        if self.op.bias and name == self.op.bias_tensor:
            return self.op.tensor(name).shape
        if name == padding_sums.TABLE:
            return padding_sums.shape(self.op)
        tensor = self._tensor_of(name)          # the residual's: the output's
        return self._storage_shape(name) if tensor in self.op.tensors else (self.op.channels,)

    def bind(self, values: dict[str, Any]) -> Buffers:
        """Buffers of device arrays by parameter name (``__cuda_array_interface__``), each checked to
        be of its element type (``_dtype``), C-contiguous and of its shape (``_shape``), and the
        scalars."""
        arguments = {}
        for param in self.generated.params:
            arguments[param.name] = (_device_pointer(param.name, values[param.name], self._shape(param.name),
                                                     self.parameter_dtype(param.name)) if param.pointer
                                     else values[param.name])
        return Buffers(values, self._bind(arguments))

    def output(self, buffers: Buffers) -> np.ndarray:
        """The output of the last run, copied to the host, in the op's logical layout."""
        return self._logical(device.cupy().asnumpy(buffers.arrays[self.op.output]))

    def __call__(self, *arrays):
        if _on_device(tuple(a for a in arrays if a is not None)):
            cp = device.cupy()
            given = [device.device_array(a, cp) for a in self._given(arrays)]
            values = dict(zip(self.generated.arguments[:-1], given, strict=True))
            out = cp.empty(self._storage_shape(self.op.output), dtype=self.parameter_dtype(self.op.output))
            buffers = self.bind(values | {self.op.output: out})
            self.run(buffers)
            return out
        return super().__call__(*arrays)


def _device_pointer(name: str, array: Any, shape: tuple[int, ...], dtype: np.dtype) -> int:
    """The device address of ``array`` (``__cuda_array_interface__``, of ``dtype``); TypeError/
    ValueError naming what is wrong with it."""
    interface = getattr(array, "__cuda_array_interface__", None)
    if interface is None:
        raise TypeError(f"{name} must be a device array (CuPy, PyTorch: __cuda_array_interface__), got "
                        f"{type(array).__name__}")
    if np.dtype(interface["typestr"]) != dtype:
        raise TypeError(f"{name} has dtype {np.dtype(interface['typestr'])}; this kernel takes {dtype}")
    if tuple(interface["shape"]) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(interface['shape'])}; the kernel expects {tuple(shape)} "
                         f"(its storage layout)")
    strides = interface.get("strides")
    contiguous = tuple(dtype.itemsize * math.prod(shape[i + 1:]) for i in range(len(shape)))
    if strides is not None and tuple(strides) != contiguous and math.prod(shape) > 1:
        raise ValueError(f"{name} is not C-contiguous (strides {tuple(strides)}); pass a contiguous copy")
    return interface["data"][0]


class QuantizedCudaKernel(CudaKernel):
    """A quantized op's CUDA kernel: ``kernel(xq, wq, b, x_zero_point=..., ...)`` on numpy arrays, as a
    CPU ``QuantizedKernel`` is called; the per-channel values (``quantized.call_values``) are computed
    on the host and copied with the arrays, outside the timed ``run``. On device arrays ``xq`` and
    ``wq`` (``__cuda_array_interface__`` or DLPack: CuPy, PyTorch, JAX; in their storage layouts) nothing
    is copied: the weights' sums are taken on the device (``quantized.device_call_values``) and the
    output is a CuPy array in its storage layout."""

    def prepare(self, *arrays: Any, **params: Any) -> Buffers:
        cp = device.cupy()
        if _on_device(arrays[:2]):
            return self.bind(quantized.device_call_values(self, arrays, params, cp))
        values = self.call_values(arrays, params)
        return self.bind({n: cp.asarray(v) if isinstance(v, np.ndarray) else v for n, v in values.items()})

    def call_values(self, arrays: tuple, params: dict[str, Any]) -> dict[str, Any]:
        """The host values of one call by parameter name (``quantized.call_values``)."""
        return quantized.call_values(self, arrays, params)

    def __call__(self, *arrays: Any, **params: Any) -> Any:
        buffers = self.prepare(*arrays, **params)
        self.run(buffers)
        return buffers.arrays[self.op.output] if _on_device(arrays[:2]) else self.output(buffers)


class GemvQuantizedCudaKernel(PackedWeights, QuantizedCudaKernel):
    """A quantized op's kernel of the GEMV family (``gemv.py``): its weights i2_s-packed where the
    schedule says so (packed on the host: such a kernel takes numpy arrays only)."""

    def prepare(self, *arrays: Any, **params: Any) -> Buffers:
        if _on_device(arrays[:2]) and packs_weights(self.schedule):
            raise TypeError(f"{self.op!r}'s kernel takes its weights i2_s-packed, which loopopt packs on "
                            f"the host: pass numpy arrays, or build it with weight_format('int8') for device "
                            f"arrays")
        return super().prepare(*arrays, **params)


def _on_device(arrays: tuple) -> bool:
    """Whether ``arrays`` are all device arrays (``device.on_device``)."""
    return bool(arrays) and all(device.on_device(a) for a in arrays)
