"""Where a QDQ file quantizes its activations: how many activation QuantizeLinear nodes,
how many of them per channel, and the ops their values feed (through the paired
DequantizeLinear), depthwise convolutions told apart. Two tools' files of one model side
by side show where their layouts differ (docs/rounding.md, "Where NNCF is more faithful").
Run `make anchors` first for the tools' files.

    python examples/anchors/quantizers.py runs/anchors/text-orientation-classifier/{by_hand,nncf}.onnx
"""
from __future__ import annotations

import argparse
from collections import Counter

import numpy as np
import onnx
from onnx import numpy_helper


def _kind(node, weights: dict) -> str:
    """The op a quantized value feeds, with depthwise convolutions named as such."""
    if node.op_type != "Conv":
        return node.op_type
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    weight = weights.get(node.input[1])
    depthwise = group > 1 and weight is not None and weight.shape[1] == 1
    return "Conv (depthwise)" if depthwise else "Conv"


def _dequantized_weights(graph, inits: dict) -> dict:
    """{tensor a DequantizeLinear makes from an initializer: that initializer's array}."""
    return {node.output[0]: inits[node.input[0]] for node in graph.node
            if node.op_type == "DequantizeLinear" and node.input[0] in inits}


def describe(path: str) -> str:
    graph = onnx.load(path, load_external_data=False).graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    weights = {**inits, **_dequantized_weights(graph, inits)}
    users: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node)
    quantizers = [n for n in graph.node
                  if n.op_type == "QuantizeLinear" and n.input[0] not in inits]
    per_channel, feeds = 0, Counter()
    for q in quantizers:
        channelwise = np.asarray(inits.get(q.input[1], 0)).size > 1
        per_channel += channelwise
        for dq in users.get(q.output[0], []):
            for node in users.get(dq.output[0], []):
                feeds[(_kind(node, weights), channelwise)] += 1
    listed = ", ".join(f"{op}{' per channel' if channelwise else ''} {count}"
                       for (op, channelwise), count in sorted(feeds.items()))
    return f"| {path} | {len(quantizers)} | {per_channel} | {listed} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="QDQ ONNX files")
    args = parser.parse_args()
    print("| file | activation quantizers | per channel | the ops they feed |\n|---|---:|---:|---|")
    for path in args.files:
        print(describe(path))


if __name__ == "__main__":
    main()
