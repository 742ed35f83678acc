"""Sequential empirical bias correction for full-int8 TFLite models.

The same method as onnx.py applies to ONNX QDQ models (Nagel et al.,
"Data-Free Quantization", 2019): quantization shifts the mean of every convolution's
output a little, the shifts add up through a deep network and flip near-tied top-1
classes. We measure each layer's per-channel output mean in the float .tflite model and
in the int8 one on calibration inputs, and move the layer's int32 bias by the difference,
layer after layer, each with its predecessors already corrected.

What differs from ONNX:
- TFLite fuses ReLU/ReLU6 into the convolution, so only the activated output can be
  read. Where an activation clips, the error is invisible (or cut in half), so the mean
  error is taken over the elements that neither model clipped: where the float value
  and the int8 value both lie strictly inside the activation's and the int8 output's
  range. Without that mask EfficientNet-Lite0 gained less than half as much.
- The biases live in buffers of the flatbuffer. ai-edge-quantizer stores them after the
  flatbuffer proper (offset and size), older writers inline; either way the bytes are
  patched in place, and the interpreter is rebuilt from the patched bytes for each layer.
- Intermediate tensors are only readable with TFLite's built-in kernels and
  `experimental_preserve_all_tensors` (XNNPACK keeps them inside its own graph).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from compress.quant.passes.check import spread
from compress.quant.passes.sequential_correction.in_turn import corrected
from compress.quant.tflite.graph import Layer, bias_views, correctable_layers, interpreter, invoke

REFERENCE_BUDGET_BYTES = 256 * 2**20  # float activations kept in memory at once


class Backend:
    record = "bias_correction"

    def apply(self, run) -> dict:
        report = corrected(run, run.fp32, spread(run.calibration, run.settings.samples), correct_biases)
        return {**report, "method": "sequential"}


def _groups(layers: list[Layer], reference, samples: int) -> list[list[int]]:
    """Consecutive layers whose float references for all samples fit the memory budget."""
    groups, current, used = [], [], 0
    for index, layer in enumerate(layers):
        size = int(np.prod(reference.get_tensor(layer.reference).shape)) * 4 * samples
        if current and used + size > REFERENCE_BUDGET_BYTES:
            groups.append(current)
            current, used = [], 0
        current.append(index)
        used += size
    return groups + ([current] if current else [])


def _mean_error(model, layer: Layer, references: list[np.ndarray], feeds: list[dict]):
    """Per-channel mean of (int8 - float) over the elements neither model clipped."""
    error = count = 0
    for feed, reference in zip(feeds, references):
        invoke(model, feed)
        raw = model.get_tensor(layer.output).astype(np.float32)
        value = (raw - layer.output_zero_point) * np.float32(layer.output_scale)
        inside = ((reference > layer.low) & (reference < layer.high)
                  & (value > layer.low) & (value < layer.high))
        axes = tuple(range(reference.ndim - 1))  # channels last
        error = error + np.where(inside, value - reference, 0).sum(axis=axes, dtype=np.float64)
        count = count + inside.sum(axis=axes)
    return np.where(count > 0, error / np.maximum(count, 1), 0.0)


def correct_biases(float_path: Path, quantized_path: Path, feeds: list[dict], *, threads: int = 2,
                   advance: Callable[[int], None] = lambda n: None) -> dict:
    """Rewrite the int32 biases of the int8 model at `quantized_path` in place."""
    model = bytearray(quantized_path.read_bytes())
    float_bytes = float_path.read_bytes()
    layers = correctable_layers(float_bytes, bytes(model))
    if not layers:
        return {"layers_corrected": 0, "samples": len(feeds)}
    biases = bias_views(model, layers)
    reference_model = interpreter(float_bytes, threads)
    invoke(reference_model, feeds[0])
    largest_shift = 0.0
    for group in _groups(layers, reference_model, len(feeds)):
        references = {i: [] for i in group}
        for feed in feeds:
            invoke(reference_model, feed)
            for i in group:
                references[i].append(reference_model.get_tensor(layers[i].reference).copy())
        for i in group:
            layer = layers[i]
            shift = _mean_error(interpreter(model, threads), layer, references.pop(i), feeds)
            steps = np.round(shift / layer.bias_scale).astype(np.int64)
            info = np.iinfo(biases[i].dtype)   # int32, or int64 in an int16x8 layer
            biases[i][:] = np.clip(biases[i] - steps, info.min, info.max).astype(info.dtype)
            largest_shift = max(largest_shift, float(np.abs(shift).max()))
            advance(1)
    quantized_path.write_bytes(bytes(model))
    return {"layers_corrected": len(layers), "samples": len(feeds),
            "largest_mean_shift": largest_shift}
