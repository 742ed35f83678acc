"""The layers of an INT8 ONNX file that still compute in float, named with why and with
their share of the file's time, measured (runtimes/op_time.py): an LSTM that int8-static
leaves float can be most of an "INT8" model's time, and the user should read that, not
guess it from a 1.00x speed-up.

A node computes in float when its op has no int8 kernel in onnxruntime's QDQ execution
(LSTM, GRU, RNN: int8-static leaves them float whatever surrounds them), or when it is
one of the ops int8 exists for but its data input is not dequantized from int8 (the
quantizer left it out: excluded, an unsupported input, a dynamic-int8 MatMul of two
activations)."""
from __future__ import annotations

from pathlib import Path

# why each kind of node stays float: knowledge about onnxruntime's quantizers, as data
NO_INT8_KERNEL = {
    "LSTM": "onnxruntime has no int8 LSTM under static (QDQ) quantization; int8-dynamic "
            "quantizes its weights (DynamicQuantizeLSTM): score that variant",
    "GRU": "onnxruntime has no int8 GRU kernel, static or dynamic",
    "RNN": "onnxruntime has no int8 RNN kernel, static or dynamic",
}
LEFT_FLOAT = {
    "Conv": "its input is not quantized (excluded, or the quantizer left it out)",
    "ConvTranspose": "its input is not quantized (excluded, or the quantizer left it out)",
    "Gemm": "its input is not quantized (excluded, or the quantizer left it out)",
    "MatMul": "its input is not quantized (excluded, or both inputs are activations, "
              "which int8-dynamic does not quantize)",
    "PRelu": "its input is not quantized (the quantizer has no int8 PRelu here)",
}
PROFILE_RUNS = 10
# ops whose presence says that something of the model runs in int8
INT8_MARKS = ("DequantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger",
              "ConvInteger", "DynamicQuantizeLinear", "DynamicQuantizeLSTM")
SUBGRAPH_OPS = ("If", "Loop", "Scan")


COMPUTE_OPS = (*NO_INT8_KERNEL, *LEFT_FLOAT)


def _compute_nodes(graph, nested: bool) -> int:
    """How many of `graph`'s nodes carry arithmetic (COMPUTE_OPS): its own, or (`nested`)
    those in its If/Loop/Scan bodies, at any depth."""
    if not nested:
        return sum(node.op_type in COMPUTE_OPS for node in graph.node)
    bodies = [body for node in graph.node for attribute in node.attribute
              for body in ([attribute.g] if attribute.HasField("g") else [])
              + list(attribute.graphs)]
    return sum(_compute_nodes(body, False) + _compute_nodes(body, True) for body in bodies)


def quantized_nothing(model) -> str | None:
    """Why an "INT8" file holds no int8 op at all (None: it holds some)."""
    if any(node.op_type in INT8_MARKS for node in model.graph.node):
        return None
    inside = _compute_nodes(model.graph, nested=True)
    if inside and not _compute_nodes(model.graph, nested=False):
        return (f"nothing was quantized: the model's {inside} layers (convolutions, matrix "
                f"products, recurrent cells) are inside {'/'.join(SUBGRAPH_OPS)} subgraphs, "
                "which onnxruntime's quantizers do not enter; the file computes in float as "
                "the source does")
    return ("nothing was quantized: the quantizer found no op it quantizes; the file "
            "computes in float as the source does")


def _float_nodes(model) -> list[tuple]:
    """(node, why) for each node that computes in float."""
    dequantized = {out for node in model.graph.node if node.op_type == "DequantizeLinear"
                   for out in node.output}
    found = []
    for node in model.graph.node:
        if node.op_type in NO_INT8_KERNEL:
            found.append((node, NO_INT8_KERNEL[node.op_type]))
        elif node.op_type in LEFT_FLOAT and node.input and node.input[0] not in dequantized:
            found.append((node, LEFT_FLOAT[node.op_type]))
    return found


def float_layers(path: Path, model, feed: dict | None, threads: int = 1) -> list[dict]:
    """[{node, op, why, time_share}] of the INT8 file at `path` (`model`, its graph, read
    once by the caller); time_share is measured on
    `feed` (one model call) when there is one, else None, as it is for a node that
    onnxruntime fused away."""
    found = _float_nodes(model)
    if not found:
        return []
    shares = {}
    if feed is not None:
        from runtimes.op_time import node_time_shares
        shares = node_time_shares(str(path), feed, PROFILE_RUNS, threads)
    return [{"node": node.name, "op": node.op_type, "why": why,
             "time_share": shares.get(node.name)} for node, why in found]
