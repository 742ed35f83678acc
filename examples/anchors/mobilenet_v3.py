"""MobileNetV3-Large (width 1.0, 224x224, 5.5M parameters), the hard-swish network with
depthwise convolutions and squeeze-excitation the int8-static stage's hard-swish
equalization is for (compress/quant/swish/equalize.py). Like mobilenet_v2.py, for timing
only: seeded random weights, BatchNorm statistics from the calibration photos. Its
fidelity says nothing about a trained MobileNetV3's (random weights leave the channels
of a tensor much alike); its time and its ops do: whether the equalized file runs as
fast as by hand's.

    python examples/anchors/stage_time.py --set equalize_hard_swish=true mobilenetv3
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from torch import nn

from mobilenet_v2 import fp32_onnx as _fp32_onnx

# (kernel, expanded, output channels, squeeze-excitation, hard-swish, stride): the
# published MobileNetV3-Large layout
LAYOUT = ((3, 16, 16, False, False, 1), (3, 64, 24, False, False, 2),
          (3, 72, 24, False, False, 1), (5, 72, 40, True, False, 2),
          (5, 120, 40, True, False, 1), (5, 120, 40, True, False, 1),
          (3, 240, 80, False, True, 2), (3, 200, 80, False, True, 1),
          (3, 184, 80, False, True, 1), (3, 184, 80, False, True, 1),
          (3, 480, 112, True, True, 1), (3, 672, 112, True, True, 1),
          (5, 672, 160, True, True, 2), (5, 960, 160, True, True, 1),
          (5, 960, 160, True, True, 1))


def _conv(cin: int, cout: int, kernel: int = 1, stride: int = 1, groups: int = 1,
          act=None) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, *([act()] if act else []))


class _Squeeze(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        squeezed = max(8, (channels // 4 + 4) // 8 * 8)
        self.gate = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(channels, squeezed, 1),
                                  nn.ReLU(), nn.Conv2d(squeezed, channels, 1), nn.Hardsigmoid())

    def forward(self, x):
        return x * self.gate(x)


class _Block(nn.Module):
    def __init__(self, cin: int, settings: tuple):
        super().__init__()
        kernel, hidden, cout, squeeze, hard, stride = settings
        act = nn.Hardswish if hard else nn.ReLU
        expand = [_conv(cin, hidden, act=act)] if hidden != cin else []
        self.body = nn.Sequential(*expand, _conv(hidden, hidden, kernel, stride, hidden, act),
                                  *([_Squeeze(hidden)] if squeeze else []), _conv(hidden, cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


def architecture(classes: int = 1000) -> nn.Module:
    blocks, cin = [_conv(3, 16, 3, 2, act=nn.Hardswish)], 16
    for settings in LAYOUT:
        blocks.append(_Block(cin, settings))
        cin = settings[2]
    blocks.append(_conv(cin, 960, act=nn.Hardswish))
    return nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(960, 1280),
                         nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1280, classes))


def fp32_onnx(images: np.ndarray, output: Path) -> Path:
    return _fp32_onnx(images, output, architecture, "mobilenet-v3")
