"""Channel equalization through hard-swish into a depthwise convolution, in onnxruntime's
integer layout (every op still fuses: QLinearConv, QLinearMul).

Why: in MobileNetV3-style networks a pointwise convolution feeds hard-swish, whose
output feeds a depthwise convolution. That output's channels span very different ranges
(the orientation classifier: 10-60x between a tensor's widest and narrowest channels),
and one uint8 scale per tensor leaves the narrow ones a few levels. NNCF quantizes the
depthwise inputs per channel, which QLinearConv cannot take: none of its convolutions
fuse and its file runs at a quarter of FP32's speed (docs/rounding.md). Cross-layer
equalization cannot help either: hard-swish does not commute with a scale.

Here the scale goes around it. With s > 0 per channel:

    x' = s * x          the producer's output channels scaled: its weights' per-channel
                        scales and its bias scale times s (the same integers)
    g  = clip(a/s * x' + b, 0, 1) = hardsigmoid(x)
                        a depthwise 1x1 convolution on x' (one weight per channel, so
                        int8 per channel holds a/s exactly: 127 times its scale)
    y' = x' * g = s * hardswish(x)
    depthwise convolution with weights / s (its per-channel scales; the bias integers
    times s, the same real bias)

s is as large as the producer's output range and the depthwise input's high end allow
for the channel's calibration extremes, divided by HEADROOM. The producer's quantizer
keeps its range; the product's low end is widened to s times the channels' lows
(hard-swish's negative dip, down to -0.375, would otherwise be clipped: the orientation
classifier's output SQNR fell to 10.3 dB that way). The narrow channels get up to s times
finer steps at the depthwise input and at x'.

Every form of hard-swish is taken: x * HardSigmoid(x) (quantize_static leaves the
HardSigmoid in float between a DequantizeLinear and a QuantizeLinear), the HardSwish
op (in float between the two: it becomes the gate and a Mul here, quantized), and
x * Clip(x + 3, 0, 6) / 6 as exporters decompose it (swish_forms.py: its Add, Mul and
their pairs become the gate and a Mul, as the op does).
"""
from __future__ import annotations

import numpy as np

from compress.quant.qdq_groups import drop_unused
from compress.quant.qdq_nodes import attr
from compress.quant.swish.sites import Graph, Site, const_dq, find_sites

# A channel's calibration extremes are scaled to at most 1/HEADROOM of the tensor's
# range: values past them on other inputs are clipped. On the orientation classifier
# (the corpus' one model with these sites; 288 evaluation feeds, docs/rounding.md) the
# logits' SQNR was 32.4, 32.8, 31.8, 31.0, 30.4 and 29.2 dB with 1, 1.5, 2, 3, 4 and 8
# (by hand's 25.3, NNCF's 29.6): 2 leaves twice the calibration extremes' room for 1 dB.
HEADROOM = 2.0
MAX_SCALE = 64.0          # past this the narrowest channels are noise anyway
_INT32 = 2 ** 31 - 1


def _bounds(g: Graph, q) -> tuple[float, float]:
    """The real range a QuantizeLinear (per tensor) can hold."""
    zero = g.value(q.input[2]) if len(q.input) > 2 and q.input[2] else np.uint8(0)
    info, scale = np.iinfo(zero.dtype), float(g.value(q.input[1]))
    return (info.min - int(zero)) * scale, (info.max - int(zero)) * scale


def _gate_fits(g: Graph, site: Site) -> bool:
    """The gate's quantizer saturates at 0 and at most 1: it stands for hard-sigmoid's
    clip, which the 1x1 convolution leaves out (a float Clip would stop the fusion)."""
    if site.gate is None:
        return True  # its quantizer is made here, over [0, 1]
    low, high = _bounds(g, g.users[site.gate.output[0]][0])
    return abs(low) < 1e-9 and high <= 1.0 + 1e-6


def scales(g: Graph, site: Site, ranges: dict) -> np.ndarray:
    """s per channel: the channel's calibration extremes scaled to at most 1/HEADROOM of
    both quantizers' ranges (x' and the product), between 1 and MAX_SCALE, and small
    enough that the depthwise biases' integers stay int32."""
    (x_low, x_high), (_, y_high) = _bounds(g, site.x_q), _bounds(g, site.y_q)
    # the product's low end is widened to take s times the channels' lows (_widen)
    low, high = (np.asarray(v, np.float64) for v in ranges[site.x])
    product = np.asarray(ranges[site.y][1], np.float64)
    limit = np.full(low.shape, np.inf)
    for room, extreme in ((x_high, high), (x_low, low), (y_high, product)):
        np.minimum(limit, np.divide(room, extreme, out=np.full(low.shape, np.inf),
                                    where=extreme * room > 0), out=limit)
    s = np.clip(limit / HEADROOM, 1.0, MAX_SCALE)
    for conv in site.depthwise:
        bias = const_dq(g, conv.input[2]) if len(conv.input) > 2 else None
        if bias is not None:
            largest = np.abs(g.value(bias.input[0]).astype(np.float64))
            np.minimum(s, (_INT32 // 2) / np.maximum(largest, 1.0), out=s)
    return np.maximum(s, 1.0)


def _rescale(g: Graph, conv, factor: np.ndarray) -> None:
    """Scale a Conv's output channels by `factor`: its weights' per-channel scales and
    its bias (an int32 bias keeps its integers: their scale, input scale x weight scale,
    follows the weights')."""
    weight = const_dq(g, conv.input[1])
    scale = g.value(weight.input[1]).astype(np.float64)
    weight.input[1] = g.add((scale * factor).astype(np.float32), weight.input[1] + "_eq")
    if len(conv.input) < 3 or not conv.input[2]:
        return
    bias = const_dq(g, conv.input[2])
    if bias is not None:  # the int32 bias's scale is input scale x weight scale
        old = g.value(bias.input[1]).astype(np.float64)
        bias.input[1] = g.add((old * factor).astype(np.float32), bias.input[1] + "_eq")
    elif conv.input[2] in g.inits:
        b = g.value(conv.input[2]).astype(np.float64)
        conv.input[2] = g.add((b * factor).astype(np.float32), conv.input[2] + "_eq")


def _divide_inputs(g: Graph, conv, s: np.ndarray, widened: float) -> None:
    """A depthwise Conv reading s times its input, quantized with a scale `widened`
    times the old one: weights / s, the same real bias (int32, its scale following the
    input's and the weights')."""
    weight = const_dq(g, conv.input[1])
    scale = g.value(weight.input[1]).astype(np.float64)
    weight.input[1] = g.add((scale / s).astype(np.float32), weight.input[1] + "_eq")
    bias = const_dq(g, conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
    if bias is not None:
        old = g.value(bias.input[1]).astype(np.float64)
        new = (old / s * widened).astype(np.float32)
        real = g.value(bias.input[0]).astype(np.float64) * old
        bias.input[0] = g.add(np.rint(real / new).astype(np.int32), bias.input[0] + "_eq")
        bias.input[1] = g.add(new, bias.input[1] + "_eq")


def _widen(g: Graph, site: Site, low: float) -> float:
    """The product's quantizer (and its DequantizeLinears) over [low, its old high],
    as onnxruntime computes scale and zero point; the new scale over the old."""
    old_low, high = _bounds(g, site.y_q)
    if low >= old_low:
        return 1.0
    zero_type, old_scale = g.value(site.y_q.input[2]).dtype, float(g.value(site.y_q.input[1]))
    info = np.iinfo(zero_type)
    scale = (high - low) / (info.max - info.min)
    point = np.array(np.rint(info.min - low / scale), zero_type)
    names = (g.add(np.array(scale, np.float32), site.y_q.input[1] + "_eq"),
             g.add(point, site.y_q.input[2] + "_eq"))
    for node in [site.y_q, *g.users[site.y_q.output[0]]]:
        node.input[1], node.input[2] = names
    return scale / old_scale


def _gate(g: Graph, site: Site, s: np.ndarray, out: str) -> list:
    """hard-sigmoid(x) = clip(alpha/s * x' + beta, 0, 1) as a quantized depthwise 1x1
    Conv on x' writing `out` (the clip is the gate quantizer's saturation)."""
    from onnx import helper
    alpha, beta = ((attr(site.gate, "alpha", 0.2), attr(site.gate, "beta", 0.5))
                   if site.gate is not None else (1 / 6, 0.5))
    channels, base = len(s), out + "_gate"
    w_scale = (alpha / s / 127.0).astype(np.float32)  # one weight a channel: 127 x scale
    x_scale = float(g.value(site.x_dq.input[1]))
    b_scale = (x_scale * w_scale.astype(np.float64)).astype(np.float32)
    weight = helper.make_node("DequantizeLinear", [
        g.add(np.full((channels, 1, 1, 1), 127, np.int8), base + "_w_int8"),
        g.add(w_scale, base + "_w_scale"), g.add(np.zeros(channels, np.int8), base + "_w_zero")],
        [base + "_w"], name=base + "_w_dq", axis=0)
    bias = helper.make_node("DequantizeLinear", [
        g.add(np.rint(beta / b_scale.astype(np.float64)).astype(np.int32), base + "_b_int32"),
        g.add(b_scale, base + "_b_scale"), g.add(np.zeros(channels, np.int32), base + "_b_zero")],
        [base + "_b"], name=base + "_b_dq", axis=0)
    conv = helper.make_node("Conv", [site.x_dq.output[0], weight.output[0], bias.output[0]],
                            [out], name=base, group=channels, kernel_shape=[1, 1])
    return [weight, bias, conv]


def _product(g: Graph, site: Site, gate: str) -> list:
    """For a HardSwish op: the gate's quantizer over [0, 1] and x' times the gate,
    writing the op's output."""
    from onnx import helper
    zero = g.value(site.x_q.input[2]) if len(site.x_q.input) > 2 and site.x_q.input[2] \
        else np.uint8(0)
    info, base = np.iinfo(zero.dtype), site.y + "_gate"
    scale = g.add(np.array(1.0 / (info.max - info.min), np.float32), base + "_scale")
    point = g.add(np.array(info.min, zero.dtype), base + "_zero")
    return [helper.make_node("QuantizeLinear", [gate, scale, point], [base + "_q"],
                             name=base + "_q"),
            helper.make_node("DequantizeLinear", [base + "_q", scale, point], [base + "_dq"],
                             name=base + "_dq"),
            helper.make_node("Mul", [site.x_dq.output[0], base + "_dq"], [site.y],
                             name=site.act.name or base + "_mul")]


def _equalize_site(g: Graph, site: Site, s: np.ndarray, product_low: np.ndarray) -> None:
    _rescale(g, site.producer, s)
    widened = _widen(g, site, float(np.min(s * np.minimum(product_low, 0.0))))
    for conv in site.depthwise:
        _divide_inputs(g, conv, s, widened)
    old = site.gate if site.gate is not None else site.act
    reader = g.producer[old.input[0]]  # the gate's own DequantizeLinear, if not x_dq
    if site.chain:   # x * Clip(x + 3, 0, 6) / 6: its Add, Mul and their pairs go too
        for node in site.chain:
            g.graph.node.remove(node)
    elif reader is not site.x_dq and len(g.users[reader.output[0]]) == 1:
        g.graph.node.remove(reader)
    at = list(g.graph.node).index(old)
    gate_out = site.gate.output[0] if site.gate is not None else site.y + "_gate_float"
    new = _gate(g, site, s, gate_out) + ([] if site.gate is not None else _product(g, site, gate_out))
    g.graph.node.remove(old)
    for offset, node in enumerate(new):
        g.graph.node.insert(at + offset, node)


def equalize(model, ranges: dict) -> dict:
    """Equalize every site of `model` (a QDQ ModelProto, rewritten in place) whose
    x and product have per-channel (low, high) in `ranges`; a summary."""
    g = Graph(model)
    sites = [site for site in find_sites(model) if _gate_fits(g, site)
             and site.x in ranges and site.y in ranges]
    applied = []
    for site in sites:
        s = scales(g, site, ranges)
        _equalize_site(g, site, s, np.asarray(ranges[site.y][0], np.float64))
        applied.append(s)
    if not applied:   # found, but none could be rewritten: say which check stopped them
        return {"sites": 0, "scale_median": None, "scale_max": None,
                "said": f"found {len(find_sites(model))} hard-swish site(s) into a "
                        "depthwise convolution, none with its gate quantized over [0, 1] "
                        "and per-channel ranges for x and the product"}
    # the rewritten pairs' scales and zero points: onnxruntime warns of each at load
    drop_unused(model)
    return {"sites": len(applied),
            "scale_median": round(float(np.median(np.concatenate(applied))), 3),
            "scale_max": round(float(max(a.max() for a in applied)), 3)}
