"""MobileNetV2 (width 1.0, 224x224, 3.5M parameters): the shape of CNN the compression-time
target is stated for. No package here ships its ImageNet weights, so this one is for timing
only: seeded random weights, its BatchNorm statistics then taken from the calibration photos
(train-mode forward passes), so every layer's output is normalised per channel on real
inputs rather than growing or vanishing through the depth. The time is a real one; its
fidelity numbers say nothing about a trained MobileNetV2's.

    python examples/anchors/stage_time.py mobilenetv2
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

# (expansion, output channels, blocks, first stride): the published MobileNetV2 layout
LAYOUT = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
          (6, 160, 3, 2), (6, 320, 1, 1))


def _conv(cin: int, cout: int, kernel: int = 1, stride: int = 1, groups: int = 1,
          relu: bool = True) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU6(inplace=True)) if relu else nn.Sequential(*layers)


class _Inverted(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expansion: int):
        super().__init__()
        hidden = cin * expansion
        expand = [_conv(cin, hidden)] if expansion != 1 else []
        self.body = nn.Sequential(*expand, _conv(hidden, hidden, 3, stride, groups=hidden),
                                  _conv(hidden, cout, relu=False))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


def architecture(classes: int = 1000) -> nn.Module:
    blocks, cin = [_conv(3, 32, 3, 2)], 32
    for expansion, cout, count, stride in LAYOUT:
        for i in range(count):
            blocks.append(_Inverted(cin, cout, stride if i == 0 else 1, expansion))
            cin = cout
    blocks.append(_conv(cin, 1280))
    return nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                         nn.Linear(1280, classes))


def build(images: np.ndarray, seed: int = 0, make=architecture) -> nn.Module:
    """`make()`'s network (this one by default) with seeded weights; BatchNorm running
    statistics from `images` (N, 3, 224, 224)."""
    torch.manual_seed(seed)
    model = make()
    for module in model.modules():  # the published initialisation
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out")
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, 0, 0.01)
            nn.init.zeros_(module.bias)
    for module in model.modules():  # a cumulative average over the batches below
        if isinstance(module, nn.BatchNorm2d):
            module.momentum = None
    model.train()
    with torch.no_grad():
        for batch in torch.from_numpy(images).split(32):
            model(batch)
    return model.eval()


def fp32_onnx(images: np.ndarray, output: Path, make=architecture,
              name: str = "mobilenet-v2") -> Path:
    """The FP32 ONNX file, exported by the pipeline's own export.onnx stage (defaults) into
    `output`; the same seed and photos give the same file, so a second call reuses it."""
    import compress

    pipeline = compress.pipeline(
        name=name, output=str(output),
        model={"torch": lambda: build(images, make=make), "inputs": [{"name": "images",
                                                           "shape": [1, 3, 224, 224]}]},
        stages=[{"type": "export.onnx", "name": "fp32"}])
    result = compress.run(pipeline, quiet=True)
    return result.run_dir / result.artifacts[-1].path
