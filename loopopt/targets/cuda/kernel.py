"""``CudaKernel``: a built CUDA kernel called on numpy arrays (copied to and from the device) or,
without copies, on device arrays of CuPy, PyTorch or any library with ``__cuda_array_interface__``;
``CudaDriver`` launches it."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...codegen import Generated
from ...kernel import Buffers, Kernel
from ...schedule import Schedule
from . import device
from .driver import CudaDriver
from .printer import CudaSource
from .toolchain import Build


class CudaKernel(Kernel):
    """A schedule's CUDA kernel. ``kernel(x, w, b)`` on numpy arrays returns numpy; on device arrays
    (``__cuda_array_interface__``, each in the schedule's storage layout, which for the default
    layouts is the logical one) it returns a CuPy array (``torch.as_tensor(out, device="cuda")``
    makes a tensor of it without a copy). ``report``: nvcc's resource report (registers, spills)."""

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
            packed = array if is_bias else self.schedule.layout_of(self._tensor_of(tensor)).to_storage(array)
            stored[tensor] = cp.asarray(packed.astype(self._dtype(tensor), copy=False))
        out = self.op.output
        stored[out] = cp.full(self._storage_shape(out), np.nan, dtype=np.float32)   # poisoned
        return self.bind(stored)

    def _dtype(self, tensor: str) -> np.dtype:
        """The element type of ``tensor`` on the device: float16 for a float16 op's inputs, else float32."""
        return np.dtype(np.float16 if self.op.dtype == "float16" and tensor in self.op.inputs else np.float32)

    def bind(self, values: dict[str, Any]) -> Buffers:
        """Buffers of device arrays by parameter name (``__cuda_array_interface__``), each checked to
        be of its element type (``_dtype``), C-contiguous and of its storage shape (the bias: its
        logical shape)."""
        addresses = {}
        for param in self.generated.params:
            shape = (self.op.tensor(param.name).shape if self.op.bias and param.name == self.op.bias_tensor
                     else self._storage_shape(param.name))
            addresses[param.name] = _device_pointer(param.name, values[param.name], shape,
                                                    self._dtype(param.name))
        return Buffers(values, self._bind(addresses))

    def output(self, buffers: Buffers) -> np.ndarray:
        """The output of the last run, copied to the host, in the op's logical layout."""
        return self._logical(device.cupy().asnumpy(buffers.arrays[self.op.output]))

    def __call__(self, *arrays):
        if arrays and all(hasattr(a, "__cuda_array_interface__") for a in arrays if a is not None):
            given = self._given(arrays)
            values = dict(zip(self.generated.arguments[:-1], given, strict=True))
            out = device.cupy().empty(self._storage_shape(self.op.output), dtype=np.float32)
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
