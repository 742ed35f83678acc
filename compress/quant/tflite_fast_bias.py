"""Bias correction of a full-int8 .tflite file from one pass of the float .tflite file:
compress/quant/fast_bias.py's correction, for TFLite's layouts.

For each int8 CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED with an int32 bias, the
expected shift of its pre-activation output, per output channel, is

    shift = mean over positions of conv(W_q, Q(x)) - conv(W, x)

with x the layer's input in the FLOAT model, Q(x) that input on the int8 layer's own
input grid (clip(round(x / s) + z) - z) * s, and W_q the dequantized int8 weight (per
output channel scales). The shift is subtracted from the int32 bias. One run of the
float model over the feeds, with every intermediate tensor kept, gives all layers'
inputs; the int8 model is never run.

The mean is taken over every output position, zero padding included: each kernel tap
is weighted by the sum of the input over the positions that tap reads (a strided
window of the input; the positions falling on SAME padding read zeros in both models).
That makes the shift exact for the layer's linear part given float inputs, where a
per-channel mean of the input times the summed kernel is off at the borders, and by a
lot on CREPE's 64-tap kernels over 8 to 64 rows.

What it leaves out, the price of the single pass:
  - fused ReLU / ReLU6: the shift is of the pre-activation output, while the
    sequential correction (tflite_bias_correction.py) measures the activated output
    over the elements neither model clipped;
  - every layer is corrected from float inputs, independently: the errors of the
    int8 layers before it (and their corrections) are not seen; requantization of the
    int32 accumulator to the int8 output is not modelled.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from compress.quant.tflite_bias_correction import (Layer, _builtin_code, _interpreter, _invoke,
                                                   _schema, bias_views, correctable_layers)

DEPTHWISE = 4    # builtin operator code of DEPTHWISE_CONV_2D
SAME = 0         # Padding enum (schema.fbs): SAME 0, VALID 1


@dataclass(frozen=True)
class _Taps:
    """Which input positions each kernel tap reads, per spatial axis (height, width)."""
    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pad: tuple[int, int]          # padding before the first row / column
    out: tuple[int, int]          # output height, width


@dataclass(frozen=True)
class _Plan:
    layer: Layer
    depthwise: bool
    input: int                    # the layer's input tensor in the float model
    weight: int                   # its weight tensor in the float model
    weight_q: np.ndarray          # int8 weight, dequantized, in the op's layout
    input_q: tuple[float, int]    # scale and zero point of the int8 layer's input
    taps: _Taps
    fully_connected: bool


def _padding_before(size: int, out: int, kernel: int, stride: int, dilation: int,
                    padding: int) -> int:
    """Rows (or columns) of padding before the input, as TFLite computes them."""
    if padding != SAME:
        return 0
    total = (out - 1) * stride + (kernel - 1) * dilation + 1 - size
    return max(total, 0) // 2


def _taps(options, x_shape, w_shape, out_shape) -> _Taps:
    """Conv geometry, NHWC input and output; OHWI (conv) or 1HWC (depthwise) weight."""
    kernel = (int(w_shape[1]), int(w_shape[2]))
    stride = (options.strideH, options.strideW)
    dilation = (options.dilationHFactor, options.dilationWFactor)
    out = (int(out_shape[1]), int(out_shape[2]))
    pad = tuple(_padding_before(int(x_shape[1 + a]), out[a], kernel[a], stride[a], dilation[a],
                                options.padding) for a in (0, 1))
    return _Taps(kernel, stride, dilation, pad, out)


def _window_sums(a: np.ndarray, taps: _Taps, axis: int) -> np.ndarray:
    """[kernel, ...]: for each kernel tap along spatial `axis`, the sum of `a` over its
    first dimension (that axis) at the positions the tap reads, over all outputs. Those
    positions are a strided run, so each sum is a difference of cumulative sums taken
    within its residue class: one pass over `a` whatever the kernel (CREPE's first
    layer has 512 taps)."""
    size, stride = a.shape[0], taps.stride[axis]
    offset = np.arange(taps.kernel[axis]) * taps.dilation[axis] - taps.pad[axis]
    first = np.maximum(0, -(offset // stride))  # the first output reading inside the input
    last = np.minimum(taps.out[axis] - 1, (size - 1 - offset) // stride)
    count = np.maximum(last - first + 1, 0)
    start = np.where(count > 0, first * stride + offset, 0)
    rows = -(-size // stride)
    padded = np.zeros((rows * stride, *a.shape[1:]))
    padded[:size] = a
    cumulative = np.zeros((rows + 1, stride, *a.shape[1:]))
    # row by row: numpy's cumsum along a first axis is ~40x slower on these shapes
    for i, row in enumerate(padded.reshape(rows, stride, *a.shape[1:])):
        np.add(cumulative[i], row, out=cumulative[i + 1])
    return cumulative[start // stride + count, start % stride] - cumulative[start // stride,
                                                                           start % stride]


def _tap_sums(x: np.ndarray, taps: _Taps) -> np.ndarray:
    """[kh, kw, channels]: the sum of NHWC `x` over the positions each tap reads."""
    total = x.sum(axis=0, dtype=np.float64)                               # H, W, C
    by_column = _window_sums(total.transpose(1, 0, 2), taps, axis=1)     # kw, H, C
    return _window_sums(by_column.transpose(1, 0, 2), taps, axis=0)      # kh, kw, C


def _response(plan: _Plan, weight: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """Sum over all output positions of the layer's output per channel, bias aside."""
    if plan.depthwise:  # [1, kh, kw, C*M]: output channel o reads input channel o // M
        multiplier = weight.shape[3] // sums.shape[2]
        return (weight[0] * np.repeat(sums, multiplier, axis=2)).sum(axis=(0, 1))
    if plan.fully_connected:  # [out, in]
        weight = weight[:, None, None, :]
    groups = sums.shape[2] // weight.shape[3]  # grouped CONV_2D: input channels / I
    grouped = weight.reshape(groups, -1, *weight.shape[1:])
    per_group = sums.reshape(*sums.shape[:2], groups, -1)
    return np.einsum("gohwi,hwgi->go", grouped, per_group).reshape(-1)


def _as_nhwc(x: np.ndarray, plan: _Plan) -> np.ndarray:
    """FULLY_CONNECTED reads its input as rows of `in` values: one row of 1x1 'pixels'."""
    return x.reshape(1, -1, 1, x.shape[-1]) if plan.fully_connected else x


def _plan(layer: Layer, qmodel, op, float_op, weight_q: np.ndarray) -> _Plan:
    """`layer` (the int8 `op`, its twin `float_op` in the float model) made ready."""
    graph = qmodel.subgraphs[0]
    x, w, out = (graph.tensors[i] for i in (op.inputs[0], op.inputs[1], op.outputs[0]))
    depthwise = _builtin_code(qmodel, op) == DEPTHWISE
    fully_connected = len(w.shape) == 2
    axis = w.quantization.quantizedDimension
    shape = [1] * weight_q.ndim
    shape[axis] = -1  # per output channel: dimension 0 (OHWI, [out, in]), 3 (1HWC)
    scale = np.asarray(w.quantization.scale, np.float64).reshape(shape)
    zero = np.asarray(w.quantization.zeroPoint, np.float64).reshape(shape)
    if fully_connected:
        rows = int(np.prod(x.shape[:-1]))
        taps = _Taps((1, 1), (1, 1), (1, 1), (0, 0), (rows, 1))
    else:
        taps = _taps(op.builtinOptions, x.shape, w.shape, out.shape)
    return _Plan(layer, depthwise, int(float_op.inputs[0]), int(float_op.inputs[1]),
                 (weight_q.astype(np.float64) - zero) * scale,
                 (float(x.quantization.scale[0]), int(x.quantization.zeroPoint[0])),
                 taps, fully_connected)


def _plans(float_bytes: bytes, quantized: bytes, layers: list[Layer], threads: int) -> list:
    """Each layer with what its shift needs, found through both flatbuffers."""
    schema = _schema()
    qmodel = schema.ModelT.InitFromObj(schema.Model.GetRootAs(quantized, 0))
    fmodel = schema.ModelT.InitFromObj(schema.Model.GetRootAs(float_bytes, 0))
    ops = {op.outputs[0]: op for op in qmodel.subgraphs[0].operators}
    float_ops = {op.outputs[0]: op for op in fmodel.subgraphs[0].operators}
    # the interpreter reads the int8 weights wherever the writer stored them
    weights = _interpreter(quantized, threads)
    plans = []
    for layer in layers:
        op, twin = ops[layer.output], float_ops.get(layer.reference)
        weight_q = weights.get_tensor(op.inputs[1])
        # a same-named output from another op (or kernel) would give a wrong shift
        if twin is None or _builtin_code(fmodel, twin) != _builtin_code(qmodel, op) or \
                list(fmodel.subgraphs[0].tensors[twin.inputs[1]].shape) != list(weight_q.shape):
            continue
        plans.append(_plan(layer, qmodel, op, twin, weight_q))
    return plans


def _fake_quantize(x: np.ndarray, scale: float, zero: int) -> np.ndarray:
    """`x` as the int8 layer sees it: on its input's grid, clipped to int8."""
    q = np.clip(np.round(x / np.float32(scale)) + zero, -128, 127)
    return (q - zero) * np.float32(scale)


def _shifts(float_bytes: bytes, plans: list[_Plan], feeds: list[dict], threads: int,
            advance: Callable[[int], None]) -> list[np.ndarray]:
    """Per layer: the mean per output channel of (int8 layer - float layer), bias aside,
    over the feeds and all output positions."""
    model = _interpreter(float_bytes, threads)
    plain = [0.0] * len(plans)
    quantized = [0.0] * len(plans)
    positions = [0] * len(plans)
    for feed in feeds:
        _invoke(model, feed)
        for i, plan in enumerate(plans):
            x = _as_nhwc(model.get_tensor(plan.input), plan)
            plain[i] = plain[i] + _tap_sums(x, plan.taps)
            quantized[i] = quantized[i] + _tap_sums(_fake_quantize(x, *plan.input_q), plan.taps)
            positions[i] += x.shape[0] * plan.taps.out[0] * plan.taps.out[1]
        advance(1)
    return [(_response(plan, plan.weight_q, q)
             - _response(plan, model.get_tensor(plan.weight).astype(np.float64), p)) / n
            for plan, p, q, n in zip(plans, plain, quantized, positions)]


def correct_biases_fast(float_path: Path, quantized_path: Path, feeds: list[dict], *,
                        threads: int = 2, advance: Callable[[int], None] = lambda n: None
                        ) -> dict:
    """Rewrite the int32 biases of the int8 model at `quantized_path` in place, from one
    run of the float model at `float_path` over `feeds` (`advance(1)` after each)."""
    started = time.perf_counter()
    model = bytearray(quantized_path.read_bytes())
    float_bytes = float_path.read_bytes()
    plans = _plans(float_bytes, bytes(model), correctable_layers(float_bytes, bytes(model)),
                   threads)
    if not plans:
        return {"layers_corrected": 0, "samples": len(feeds), "method": "fast"}
    layers = [plan.layer for plan in plans]
    shifts = _shifts(float_bytes, plans, feeds, threads, advance)
    for bias, layer, shift in zip(bias_views(model, layers), layers, shifts):
        steps = np.round(shift / layer.bias_scale).astype(np.int64)
        bias[:] = np.clip(bias - steps, -2**31, 2**31 - 1).astype(np.int32)
    quantized_path.write_bytes(bytes(model))
    return {"layers_corrected": len(plans), "samples": len(feeds),
            "largest_mean_shift": max(float(np.abs(s).max()) for s in shifts),
            "method": "fast", "seconds": round(time.perf_counter() - started, 3)}
