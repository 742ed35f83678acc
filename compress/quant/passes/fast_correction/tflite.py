"""Bias correction of a full-int8 .tflite file from one pass of the float .tflite file:
compress/quant/passes/fast_correction/onnx.py's correction, for TFLite's layouts.

For each int8 CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED with an integer bias (int32;
int64 for the int16x8 layers of a mixed file, whose inputs are int16), the
expected shift of its pre-activation output, per output channel, is

    shift = mean over positions of conv(W_q, Q(x)) - conv(W, x)

with x the layer's input in the FLOAT model, Q(x) that input on the int8 layer's own
input grid (clip(round(x / s) + z) - z) * s, and W_q the dequantized int8 weight (per
output channel scales). The shift is subtracted from the bias. One run of the
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
    sequential correction (passes/sequential_correction/tflite.py) measures the activated output
    over the elements neither model clipped;
  - every layer is corrected from float inputs, independently: the errors of the
    int8 layers before it (and their corrections) are not seen; requantization of the
    int32 accumulator to the int8 output is not modelled.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from compress.quant.tflite.graph import (Layer, bias_views, builtin_code, integer_bounds,
                                         interpreter, invoke, schema)

DEPTHWISE = 4    # builtin operator code of DEPTHWISE_CONV_2D
SAME = 0         # Padding enum (schema.fbs): SAME 0, VALID 1


class Backend:
    def title(self, settings) -> str:
        return "bias correction"

    def apply(self, work) -> dict:
        """Shift the int32 biases of tflite_candidates.TfliteLayers `work` in its bytes."""
        return corrected(work.model, work.plans, work.sums, work.weights) if work.plans else {}


@dataclass(frozen=True)
class _Taps:
    """Which input positions each kernel tap reads, per spatial axis (height, width)."""
    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pad: tuple[int, int]          # padding before the first row / column
    out: tuple[int, int]          # output height, width
    pad_after: tuple[int, int] = (0, 0)   # padding after the last row / column


@dataclass(frozen=True)
class _Plan:
    layer: Layer
    depthwise: bool
    input: int                    # the layer's input tensor in the float model
    weight: int                   # its weight tensor in the float model
    integers: np.ndarray          # the int8 weight, in the op's layout
    grid: tuple[np.ndarray, np.ndarray]  # its scale and zero point, shaped to broadcast
    weight_buffer: int            # where `integers` live in the int8 file
    input_q: tuple                # scale, zero point, lowest and highest integer of the
                                  # quantized layer's input (int8, or int16 in int16x8)
    taps: _Taps
    fully_connected: bool
    input_shape: tuple[int, int, int]  # the input's height, width, channels (NHWC)

    @property
    def weight_q(self) -> np.ndarray:
        """The int8 weight, dequantized, in the op's layout."""
        scale, zero = self.grid
        return (self.integers.astype(np.float64) - zero) * scale


def _padding(size: int, out: int, kernel: int, stride: int, dilation: int,
             padding: int) -> tuple[int, int]:
    """Rows (or columns) of padding before and after the input, as TFLite computes them."""
    if padding != SAME:
        return 0, 0
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _taps(options, x_shape, w_shape, out_shape) -> _Taps:
    """Conv geometry, NHWC input and output; OHWI (conv) or 1HWC (depthwise) weight."""
    kernel = (int(w_shape[1]), int(w_shape[2]))
    stride = (options.strideH, options.strideW)
    dilation = (options.dilationHFactor, options.dilationWFactor)
    out = (int(out_shape[1]), int(out_shape[2]))
    before, after = zip(*(_padding(int(x_shape[1 + a]), out[a], kernel[a], stride[a],
                                   dilation[a], options.padding) for a in (0, 1)))
    return _Taps(kernel, stride, dilation, before, out, after)


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


def _plan(layer: Layer, qmodel, op, float_op, integers: np.ndarray) -> _Plan:
    """`layer` (the int8 `op`, its twin `float_op` in the float model) made ready."""
    graph = qmodel.subgraphs[0]
    x, w, out = (graph.tensors[i] for i in (op.inputs[0], op.inputs[1], op.outputs[0]))
    depthwise = builtin_code(qmodel, op) == DEPTHWISE
    fully_connected = len(w.shape) == 2
    axis = w.quantization.quantizedDimension
    shape = [1] * integers.ndim
    shape[axis] = -1  # per output channel: dimension 0 (OHWI, [out, in]), 3 (1HWC)
    scale = np.asarray(w.quantization.scale, np.float64).reshape(shape)
    zero = np.asarray(w.quantization.zeroPoint, np.float64).reshape(shape)
    if fully_connected:
        rows = int(np.prod(x.shape[:-1]))
        taps, size = _Taps((1, 1), (1, 1), (1, 1), (0, 0), (rows, 1)), (rows, 1)
    else:
        taps = _taps(op.builtinOptions, x.shape, w.shape, out.shape)
        size = (int(x.shape[1]), int(x.shape[2]))
    size = (*size, int(x.shape[-1]))
    return _Plan(layer, depthwise, int(float_op.inputs[0]), int(float_op.inputs[1]),
                 integers.copy(), (scale, zero), w.buffer,
                 (float(x.quantization.scale[0]), int(x.quantization.zeroPoint[0]),
                  *integer_bounds(x.type)),
                 taps, fully_connected, size)


def plans(float_bytes: bytes, quantized: bytes, layers: list[Layer], threads: int) -> list:
    """Each layer with what its shift needs, found through both flatbuffers."""
    graphs = schema()
    qmodel = graphs.ModelT.InitFromObj(graphs.Model.GetRootAs(quantized, 0))
    fmodel = graphs.ModelT.InitFromObj(graphs.Model.GetRootAs(float_bytes, 0))
    ops = {op.outputs[0]: op for op in qmodel.subgraphs[0].operators}
    float_ops = {op.outputs[0]: op for op in fmodel.subgraphs[0].operators}
    # the interpreter reads the int8 weights wherever the writer stored them
    weights = interpreter(quantized, threads)
    found = []
    for layer in layers:
        op, twin = ops[layer.output], float_ops.get(layer.reference)
        weight_q = weights.get_tensor(op.inputs[1])
        # a same-named output from another op (or kernel) would give a wrong shift
        if twin is None or builtin_code(fmodel, twin) != builtin_code(qmodel, op) or \
                list(fmodel.subgraphs[0].tensors[twin.inputs[1]].shape) != list(weight_q.shape):
            continue
        found.append(_plan(layer, qmodel, op, twin, weight_q))
    return found


def _fake_quantize(x: np.ndarray, scale: float, zero: int, low: int = -128,
                   high: int = 127) -> np.ndarray:
    """`x` as the quantized layer sees it: on its input's grid, clipped to its integers."""
    q = np.clip(np.round(x / np.float32(scale)) + zero, low, high)
    return (q - zero) * np.float32(scale)


@dataclass
class _Sums:
    """One layer's sums over the pass: its float input and that input on the int8
    grid, per kernel tap (_tap_sums), and the output positions they cover."""
    plain: object = 0.0
    quantized: object = 0.0
    positions: int = 0

    def shift(self, plan: _Plan, weight: np.ndarray) -> np.ndarray:
        """The mean per output channel of (int8 layer - float layer), bias aside."""
        return (_response(plan, plan.weight_q, self.quantized)
                - _response(plan, weight, self.plain)) / self.positions


def float_pass(float_bytes: bytes, files: dict[str, list[_Plan]], feeds: list[dict],
               threads: int, advance: Callable[[int], None], hessians: dict) -> tuple:
    """Each file's layers' _Sums over the feeds (`files`: each file's plans), their inputs
    given to the Hessians (by float weight tensor), and the float weights (by tensor). One
    run of the float model serves every file: a tap sum two files' layers share (the same
    input, or the same input on the same grid) is taken once."""
    from compress.quant.passes.gptq_rounding.tflite import as_rows_input
    model = interpreter(float_bytes, threads)
    sums = {name: [_Sums() for _ in layer_plans] for name, layer_plans in files.items()}
    every = [(plan, total) for name, layer_plans in files.items()
             for plan, total in zip(layer_plans, sums[name])]
    for feed in feeds:
        invoke(model, feed)
        taken, fed = {}, set()
        for plan, total in every:
            x = model.get_tensor(plan.input)
            if plan.weight in hessians and plan.weight not in fed:
                hessians[plan.weight].add(as_rows_input(x, plan))
                fed.add(plan.weight)
            x, plain, grid = _as_nhwc(x, plan), (plan.input, plan.taps), (plan.input, plan.taps,
                                                                           plan.input_q)
            if plain not in taken:
                taken[plain] = _tap_sums(x, plan.taps)
            if grid not in taken:
                taken[grid] = _tap_sums(_fake_quantize(x, *plan.input_q), plan.taps)
            total.plain = total.plain + taken[plain]
            total.quantized = total.quantized + taken[grid]
            total.positions += x.shape[0] * plan.taps.out[0] * plan.taps.out[1]
        advance(1)
    return sums, {plan.weight: model.get_tensor(plan.weight).astype(np.float64)
                  for plan, _ in every}


def corrected(model: bytearray, plans: list[_Plan], sums: list[_Sums], weights: dict) -> dict:
    """Each layer's bias (int32, int64) moved by its shift, in `model`'s bytes."""
    layers = [plan.layer for plan in plans]
    shifts = [total.shift(plan, weights[plan.weight]) for plan, total in zip(plans, sums)]
    for bias, layer, shift in zip(bias_views(model, layers), layers, shifts):
        steps = np.round(shift / layer.bias_scale).astype(np.int64)
        info = np.iinfo(bias.dtype)
        bias[:] = np.clip(bias - steps, info.min, info.max).astype(bias.dtype)
    return {"layers_corrected": len(plans), "method": "fast",
            "largest_mean_shift": max(float(np.abs(s).max()) for s in shifts)}
