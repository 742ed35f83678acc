"""Bias correction from one pass of the float model (the fast variant of Nagel et al.'s
empirical bias correction, as NNCF's FastBiasCorrection does it).

Quantization moves the mean of every quantized Conv / Gemm output: its weights are
rounded (W_q instead of W) and, with `activations=True`, its input is too (Q(x): the
layer's own QuantizeLinear scale, zero point and clipping). For a layer that is linear
in its input, the expected output shift is

    shift = W_q . E[Q(x)] - W . E[x]        (activations=False: (W_q - W) . E[x])

with E[.] the per-input-channel mean over the feeds and the spatial positions of the
layer's input in the FLOAT model. Subtracting the shift from the bias (the int32 bias
behind its DequantizeLinear, rounded to its scale, or a float bias) puts the quantized
layer's output mean back on the float one. One run of the float model gives every
layer's input mean; no quantized model is run.

Measured (64 calibration feeds, minmax ranges, U8S8 per-channel): EfficientNet-Lite0
top-1 agreement 0.924 -> 0.971 and output SQNR +4.5 dB in 1.3 s (the sequential version:
0.952, +4.3 dB, 7.8 s with 16 feeds); YOLOv8n +2.1 dB on the anchors it detects with;
ddddocr's detector -1.5 dB. Leaving out the input term lost 2-4 dB on YOLOv8n.

Approximations, each the price of the single pass:
  - zero padding: outputs at the border see zeros where the formula assumes E[x], so
    the shift there is off by the kernel taps that fall on the padding (a small
    fraction of the positions, except on tiny feature maps);
  - every layer is corrected from float inputs, independently; the sequential version
    (compress/quant/bias_correction.py) measures each layer's input in the already
    quantized and corrected network, at one run of the quantized model per layer.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from compress.quant.qdq_nodes import array, attr, dequantize

CORRECTABLE = ("Conv", "Gemm")


@dataclass(frozen=True)
class BiasReport:
    layers_corrected: int
    layers_skipped: int    # quantized Conv/Gemm without a bias or a float counterpart
    feeds: int
    largest_shift: float   # the largest per-channel output mean shift removed
    seconds: float


@dataclass(frozen=True)
class _Layer:
    node: object                       # the Conv / Gemm of the QDQ model
    weight_q: np.ndarray               # its dequantized weight, W_q
    bias: str                          # the bias initializer to rewrite
    bias_scale: np.ndarray | None      # int32 bias scale; None for a float bias
    input_q: tuple | None              # (scale, zero point) of its input's quantization


def _const_dq(name: str, producer: dict, inits: dict):
    """The DequantizeLinear producing `name` from initializers only, or None."""
    node = producer.get(name)
    if node is None or node.op_type != "DequantizeLinear":
        return None
    return node if all(n in inits for n in node.input if n) else None


def _input_quantization(name: str, producer: dict, inits: dict) -> tuple | None:
    """(scale, zero point) of the DequantizeLinear feeding a layer, or None."""
    node = producer.get(name)
    if node is None or node.op_type != "DequantizeLinear" or node.input[1] not in inits \
            or array(inits, node.input[1]).size != 1:  # activations: one scale per tensor
        return None
    zero = (array(inits, node.input[2]) if len(node.input) > 2 and node.input[2]
            else np.uint8(0))  # onnxruntime's default zero point type
    return array(inits, node.input[1]), zero


def _layer(node, producer: dict, inits: dict) -> _Layer | None:
    """The correctable quantized layer at `node`, or None."""
    if (node.op_type not in CORRECTABLE or len(node.input) < 3 or not node.input[2]
            or attr(node, "transA", 0)):
        return None
    weight, bias_dq = (_const_dq(n, producer, inits) for n in node.input[1:3])
    if weight is None:
        return None  # a layer kept in float
    if bias_dq is not None:
        bias, bias_scale = bias_dq.input[0], array(inits, bias_dq.input[1]).astype(np.float64)
    elif node.input[2] in inits:
        bias, bias_scale = node.input[2], None
    else:
        return None
    return _Layer(node, dequantize(weight, inits), bias, bias_scale,
                  _input_quantization(node.input[0], producer, inits))


def _channel_mean(x: np.ndarray) -> np.ndarray:
    """Per-channel (axis 1) mean in float64, the positions summed in x's float32 first:
    numpy's pairwise summation along the contiguous axis keeps the float32 rounding error
    growing with log n (far below an int8 step), and runs twice as fast as a float64
    reduction over every axis but one."""
    sums = x.reshape(x.shape[0], x.shape[1], -1).sum(axis=2).astype(np.float64).sum(axis=0)
    return sums / (x.size // x.shape[1])


def _quantized_mean(x: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """The per-channel mean of x after its QuantizeLinear / DequantizeLinear pair, in x's
    own precision as the runtime computes it (x / scale, rounded half to even): the
    integers less the zero point, clipped to the type's range less it (the same
    integers as adding it, clipping and taking it off again, in one pass fewer), their
    mean dequantized once. In place: this runs on every layer input of every feed."""
    info, offset = np.iinfo(zero.dtype), zero.item()
    q = np.divide(x, scale.astype(x.dtype))
    np.rint(q, out=q)
    np.clip(q, info.min - offset, info.max - offset, out=q)
    return _channel_mean(q) * scale.item()  # one scale per tensor


@dataclass
class LayerPass:
    """What one pass of the float model gives every matched layer: its input mean per
    channel, plain and as its QuantizeLinear sees it, and (when asked) the second
    moments weight rounding needs (hessian.Hessian); the float outputs when asked."""
    pairs: list             # [(_Layer of the QDQ model, its float node)]
    skipped: int            # quantized Conv/Gemm left out
    plain: list
    quantized: list
    hessians: list          # hessian.Hessian | None per pair (all None when not asked)
    outputs: list | None    # per feed, the float model's outputs (run_feeds' layout)
    # per pair, the first pair with the same float input and input quantization: its
    # means serve both (a tensor several layers read is reduced once per feed)
    first: list = field(init=False)

    def __post_init__(self) -> None:
        def key(layer: _Layer, twin) -> tuple:
            q = layer.input_q
            return twin.input[0], None if q is None else (q[0].item(), q[1].item(),
                                                          q[1].dtype.str)
        firsts: dict = {}
        self.first = [firsts.setdefault(key(*pair), i) for i, pair in enumerate(self.pairs)]

    def take(self, i: int, x: np.ndarray, feeds: int, taken: dict) -> None:
        """Add pair i's input `x` of one of `feeds` feeds; `taken` holds this feed's
        means by the pair that first took them."""
        layer, hessian, first = self.pairs[i][0], self.hessians[i], self.first[i]
        if first not in taken:
            mean = _channel_mean(x)
            taken[first] = mean, (_quantized_mean(x, *layer.input_q) if layer.input_q else mean)
        mean, mean_q = taken[first]
        self.plain[i] = self.plain[i] + mean / feeds
        self.quantized[i] = self.quantized[i] + mean_q / feeds
        if hessian is not None:
            hessian.add(x)


def layer_pass(float_model, qdq, feeds: list[dict], threads: int | None = None, *,
               hessians: bool = False, outputs: bool = False) -> LayerPass:
    """One run of the float model over `feeds` with every matched layer's input a graph
    output; one feed's tensors at a time."""
    from compress.quant.float_probe import tensor_values
    from compress.quant.hessian import hessians as accumulators

    inits = {i.name: i for i in qdq.graph.initializer}
    pairs, skipped = _matched_layers(float_model, qdq, inits)
    inputs = [twin.input[0] for _, twin in pairs]
    names = [o.name for o in float_model.graph.output] if outputs else []
    seen = LayerPass(pairs, skipped, [0.0] * len(pairs), [0.0] * len(pairs),
                     accumulators(float_model, [t for _, t in pairs], len(feeds))
                     if hessians else [None] * len(pairs), [] if outputs else None)
    for values in tensor_values(float_model, [*inputs, *names], feeds, threads):
        if outputs:
            seen.outputs.append([values[name] for name in names])
        taken = {}
        for i, name in enumerate(inputs):
            seen.take(i, values[name], len(feeds), taken)
    return seen


def _response(node, weight: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """The layer's output per channel (bias aside) for an input constant per channel."""
    if node.op_type == "Gemm":
        matrix = weight.T if attr(node, "transB", 0) else weight
        return attr(node, "alpha", 1.0) * (mean @ matrix)
    groups = attr(node, "group", 1)
    summed = weight.reshape(weight.shape[0], weight.shape[1], -1).sum(axis=2)
    per_output = np.repeat(mean.reshape(groups, -1), weight.shape[0] // groups, axis=0)
    return (summed * per_output).sum(axis=1)


def _shift_bias(layer: _Layer, shift: np.ndarray, inits: dict) -> None:
    from onnx import numpy_helper
    if layer.node.op_type == "Gemm":
        shift = shift / attr(layer.node, "beta", 1.0)  # Gemm adds beta * C
    bias = array(inits, layer.bias)
    if layer.bias_scale is None:
        corrected = (bias - shift.reshape(bias.shape[-1:])).astype(bias.dtype)
    else:
        steps = np.round(shift / layer.bias_scale).astype(np.int64)
        corrected = np.clip(bias.astype(np.int64) - steps, -2**31, 2**31 - 1).astype(np.int32)
    inits[layer.bias].CopyFrom(numpy_helper.from_array(corrected, layer.bias))


def _matched_layers(float_model, qdq, inits: dict) -> tuple[list, int]:
    """[(correctable QDQ layer, its float node)] and how many quantized Conv/Gemm were
    left out. Nodes are matched by name, which quantize_static keeps (a fused Relu
    renames the output); by output name where a node has none."""
    producer = {o: n for n in qdq.graph.node for o in n.output}
    by_name = {n.name: n for n in float_model.graph.node if n.name}
    by_output = {n.output[0]: n for n in float_model.graph.node if n.output}
    float_weights = {i.name for i in float_model.graph.initializer}
    pairs, seen = [], 0
    for node in (n for n in qdq.graph.node if n.op_type in CORRECTABLE):
        seen += 1
        layer = _layer(node, producer, inits)
        twin = by_name.get(node.name) if node.name else by_output.get(node.output[0])
        if layer and twin and twin.op_type == node.op_type and twin.input[1] in float_weights:
            pairs.append((layer, twin))
    return pairs, seen - len(pairs)


def shift_biases(seen: LayerPass, qdq, float_model, activations: bool = True) -> float:
    """Take every matched layer's output mean shift off its bias (in `qdq`, in memory);
    the largest shift."""
    inits = {i.name: i for i in qdq.graph.initializer}
    float_weights = {i.name: i for i in float_model.graph.initializer}
    largest = 0.0
    for (layer, twin), mean, mean_q in zip(seen.pairs, seen.plain, seen.quantized):
        weight = array(float_weights, twin.input[1]).astype(np.float64)
        shift = (_response(layer.node, layer.weight_q, mean_q if activations else mean)
                 - _response(twin, weight, mean))
        _shift_bias(layer, shift, inits)
        largest = max(largest, float(np.abs(shift).max()))
    return largest


def correct_biases_fast(float_model_path: Path, qdq_model_path: Path, feeds: list[dict], *,
                        out_path: Path | None = None, activations: bool = True,
                        threads: int | None = None) -> BiasReport:
    """Correct the biases of the QDQ model at `qdq_model_path` (written back there, or
    to `out_path`) against the float model it was quantized from (the very file given
    to quantize_static, whose node names the QDQ model keeps)."""
    import onnx

    started = time.perf_counter()
    float_model, qdq = onnx.load(str(float_model_path)), onnx.load(str(qdq_model_path))
    seen = layer_pass(float_model, qdq, feeds, threads)
    largest = shift_biases(seen, qdq, float_model, activations)
    onnx.save(qdq, str(out_path or qdq_model_path))
    return BiasReport(len(seen.pairs), seen.skipped, len(feeds), largest,
                      time.perf_counter() - started)
