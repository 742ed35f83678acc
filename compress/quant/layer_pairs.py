"""The quantized Conv / Gemm layers of a QDQ model that int8-static's passes on the
quantized layers rewrite (float_pass.py, passes/fast_correction/onnx.py, passes/gptq_rounding/onnx.py), each read from the
QDQ graph (its dequantized weight, the bias to rewrite, its input's quantization) and
paired with its node in the float model, whose inputs the float pass reads.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compress.quant.qdq_nodes import array, attr, dequantize

CORRECTABLE = ("Conv", "Gemm")


@dataclass(frozen=True)
class Layer:
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


def _layer(node, producer: dict, inits: dict) -> Layer | None:
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
    return Layer(node, dequantize(weight, inits), bias, bias_scale,
                 _input_quantization(node.input[0], producer, inits))


def float_layers(float_model) -> list:
    """The float model's Conv / Gemm nodes with a constant weight, in graph order: the
    layers a pass can pair with quantized ones. A layer's place here seeds its H's draws,
    so both ways of making the pass draw the same rows."""
    weights = {i.name for i in float_model.graph.initializer}
    return [n for n in float_model.graph.node
            if n.op_type in CORRECTABLE and len(n.input) > 1 and n.input[1] in weights]


def matched_layers(float_model, qdq, inits: dict) -> tuple[list, int]:
    """[(correctable QDQ layer, its float node)] and how many quantized Conv/Gemm were
    left out. Nodes are matched by name, which quantize_static keeps (a fused Relu
    renames the output); by output name where a node has none."""
    producer = {o: n for n in qdq.graph.node for o in n.output}
    candidates = float_layers(float_model)
    by_name = {n.name: n for n in candidates if n.name}
    by_output = {n.output[0]: n for n in candidates}
    pairs, seen = [], 0
    for node in (n for n in qdq.graph.node if n.op_type in CORRECTABLE):
        seen += 1
        layer = _layer(node, producer, inits)
        twin = by_name.get(node.name) if node.name else by_output.get(node.output[0])
        if layer and twin and twin.op_type == node.op_type:
            pairs.append((layer, twin))
    return pairs, seen - len(pairs)
