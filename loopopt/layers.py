"""A catalog of real convolution layers: ResNet-50, MobileNetV1/V2 and VGG-16 (224x224 inputs).

Names are ``<network>.<layer>``; ``resnet50.conv2_x`` is the 3x3 convolution of ResNet-50's
second stage (C=K=64 at 56x56, padding 1) and its other convolutions are
``resnet50.conv2_x.reduce`` (1x1 in), ``.expand`` (1x1 out), ``.downsample`` (1x1 shortcut)
and, from conv3_x on, ``.stride2`` (the strided 3x3 of the first block, torchvision v1.5).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Optional

from .ops import Conv2d
from .quant import QuantSpec


@dataclass(frozen=True)
class LayerSpec:
    """The shape of one layer (batch is chosen when it is instantiated)."""

    name: str
    in_channels: int
    out_channels: int
    kernel_size: int
    size: int                 # input height = width
    stride: int = 1
    padding: int = 0
    groups: int = 1

    def conv(self, batch: int = 1, quant: Optional[QuantSpec] = None, dtype: str = "float32") -> Conv2d:
        return Conv2d(self.in_channels, self.out_channels, self.kernel_size, stride=self.stride,
                      padding=self.padding, groups=self.groups, batch=batch, height=self.size,
                      width=self.size, dtype=dtype, quant=quant)

    @property
    def kind(self) -> str:
        if self.groups > 1:
            return "depthwise" if self.groups == self.in_channels else "grouped"
        return "pointwise" if self.kernel_size == 1 else f"{self.kernel_size}x{self.kernel_size}"


def _resnet50() -> list[LayerSpec]:
    specs = [LayerSpec("resnet50.conv1", 3, 64, 7, 224, 2, 3)]
    size, width, inputs = 56, 64, 64
    for stage in range(2, 6):
        name, out = f"resnet50.conv{stage}_x", 4 * width
        specs += [LayerSpec(name, width, width, 3, size, 1, 1),
                  LayerSpec(f"{name}.reduce", out, width, 1, size),
                  LayerSpec(f"{name}.expand", width, out, 1, size)]
        if stage == 2:
            specs.append(LayerSpec(f"{name}.downsample", inputs, out, 1, size))
        else:
            specs += [LayerSpec(f"{name}.stride2", width, width, 3, 2 * size, 2, 1),
                      LayerSpec(f"{name}.downsample", inputs, out, 1, 2 * size, 2)]
        size, width, inputs = size // 2, 2 * width, out
    return specs


MOBILENET_V1_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                       (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))


def _mobilenet_v1() -> list[LayerSpec]:
    """Depthwise-separable blocks: depthwise 3x3 (stride of the block) then pointwise 1x1."""
    specs = [LayerSpec("mobilenetv1.conv1", 3, 32, 3, 224, 2, 1)]
    size, inputs = 112, 32
    for number, (out, stride) in enumerate(MOBILENET_V1_BLOCKS, 1):
        name = f"mobilenetv1.block{number}"
        specs.append(LayerSpec(f"{name}.depthwise", inputs, inputs, 3, size, stride, 1, groups=inputs))
        size //= stride
        specs.append(LayerSpec(f"{name}.pointwise", inputs, out, 1, size))
        inputs = out
    return specs


MOBILENET_V2_BLOCKS = ((1, 16, 1), (6, 24, 2), (6, 32, 2), (6, 64, 2), (6, 96, 1), (6, 160, 2), (6, 320, 1))


def _mobilenet_v2() -> list[LayerSpec]:
    """The first inverted-residual block of each stage: expand 1x1, depthwise 3x3, project 1x1."""
    specs = [LayerSpec("mobilenetv2.conv1", 3, 32, 3, 224, 2, 1)]
    size, inputs = 112, 32
    for number, (expansion, out, stride) in enumerate(MOBILENET_V2_BLOCKS, 1):
        name, hidden = f"mobilenetv2.block{number}", inputs * expansion
        if expansion > 1:
            specs.append(LayerSpec(f"{name}.expand", inputs, hidden, 1, size))
        specs.append(LayerSpec(f"{name}.depthwise", hidden, hidden, 3, size, stride, 1, groups=hidden))
        size //= stride
        specs.append(LayerSpec(f"{name}.project", hidden, out, 1, size))
        inputs = out
    return specs + [LayerSpec("mobilenetv2.conv_last", 320, 1280, 1, 7)]


VGG16_STAGES = ((224, 64, 2), (112, 128, 2), (56, 256, 3), (28, 512, 3), (14, 512, 3))


def _vgg16() -> list[LayerSpec]:
    specs, inputs = [], 3
    for stage, (size, width, count) in enumerate(VGG16_STAGES, 1):
        for index in range(1, count + 1):
            specs.append(LayerSpec(f"vgg16.conv{stage}_{index}", inputs, width, 3, size, 1, 1))
            inputs = width
    return specs


LAYERS: dict[str, LayerSpec] = {spec.name: spec for spec in
                             _resnet50() + _mobilenet_v1() + _mobilenet_v2() + _vgg16()}


def list_layers() -> list[str]:
    """All layer names, network by network."""
    return list(LAYERS)


def layer_spec(name: str) -> LayerSpec:
    """The spec of layer ``name``; an unknown name suggests the closest."""
    if name not in LAYERS:
        close = difflib.get_close_matches(name, LAYERS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown layer {name!r}{hint} (see `loopopt layers`)")
    return LAYERS[name]


def get_layer(name: str, batch: int = 1, quant: Optional[QuantSpec] = None, dtype: str = "float32") -> Conv2d:
    """The Conv2d of layer ``name`` with ``batch`` images (quantized as ``quant`` describes, if given;
    ``dtype``: of a float layer's inputs, ``float32`` or ``bfloat16``)."""
    return layer_spec(name).conv(batch, quant, dtype)
