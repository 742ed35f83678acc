"""The tensors an If / Loop / Scan body reads from the graph around it (outer scope: by
name, listed by no input of the node that holds the body), kept right through the graph
surgery of int8-static.

onnxruntime's quantize_static rewires only the main graph's readers of a tensor it
quantizes onto the DequantizeLinear. Where it folds a ReLU into the QuantizeLinear after
a Conv, it drops the Relu and gives its output's name to the Conv's output, so a body
that reads that name reads the Conv's output before the ReLU. Silero VAD's opset-15 model
(examples/conformance/voice_activity.py), whose LSTM branch reads the encoder's last
ReLU, scored 1.2 dB at the outputs as quantized and still 1.1 dB with every activation
back in float; with its bodies reading what the main graph reads, 9.5 dB. quantize_static
also writes the main graph out of order (a Q/DQ pair after the If that reads its output),
which onnx.checker refuses and recovery surgery then trips on.
"""
from __future__ import annotations

import heapq


def inner_nodes(graph):
    """The nodes of the bodies under `graph`'s nodes, at any depth."""
    for node in graph.node:
        for body in bodies(node):
            yield from body.node
            yield from inner_nodes(body)


def bodies(node) -> list:
    """The subgraphs a node holds (If's branches, Loop's and Scan's body)."""
    return [sub for attr in node.attribute
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)]


def rewire(model) -> list[str]:
    """Each body node that reads a tensor a main-graph QuantizeLinear quantizes reads, in
    its place, that pair's DequantizeLinear output, as the main graph's readers do; then
    the main graph in an order where every tensor is made before a node or a body reads
    it. The tensors rewired, sorted."""
    graph = model.graph
    keys = {n.input[0]: n.output[0] for n in graph.node if n.op_type == "QuantizeLinear"}
    first_read = {}
    for node in graph.node:
        if node.op_type == "DequantizeLinear":
            first_read.setdefault(node.input[0], node.output[0])
    read = {tensor: first_read[key] for tensor, key in keys.items() if key in first_read}
    done = set()
    for node in inner_nodes(graph):
        for k, name in enumerate(node.input):
            if name in read:
                node.input[k] = read[name]
                done.add(name)
    sort(graph)
    return sorted(done)


def _needs(node, made) -> set:
    """The main graph's tensors `node` waits for: its inputs, and those its bodies read."""
    needed = set(node.input)
    for body in bodies(node):
        needed |= {name for inner in [*body.node, *inner_nodes(body)] for name in inner.input}
    return needed & made


def sort(graph) -> None:
    """The main graph's nodes in an order where each comes after the makers of the
    tensors it and its bodies read; nodes already in order keep it (a stable sort), so a
    graph in order is left as it is."""
    nodes = list(graph.node)
    maker = {out: k for k, node in enumerate(nodes) for out in node.output if out}
    waits = [{maker[name] for name in _needs(node, maker.keys())} - {k}
             for k, node in enumerate(nodes)]
    readers: dict[int, list[int]] = {}
    for k, needed in enumerate(waits):
        for m in needed:
            readers.setdefault(m, []).append(k)
    ready = [k for k, needed in enumerate(waits) if not needed]
    heapq.heapify(ready)
    order = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for reader in readers.get(k, []):
            waits[reader].discard(k)
            if not waits[reader]:
                heapq.heappush(ready, reader)
    if len(order) < len(nodes):   # a cycle: not ours to break, left as it was
        return
    del graph.node[:]
    graph.node.extend(nodes[k] for k in order)


def repair(path, progress) -> list[str]:
    """quantize_static's file at `path`, where it holds bodies, with them rewired and its
    graph in order (rewire), written back; a note names what was rewired. The tensors
    rewired ([] where no body reads a quantized tensor)."""
    import onnx
    model = onnx.load(str(path), load_external_data=False)   # the graph is all it changes
    if not any(bodies(node) for node in model.graph.node):
        return []
    rewired = rewire(model)
    onnx.save(model, str(path))
    if rewired:
        progress.note(f"int8-static: {len(rewired)} quantized tensor(s) also used inside "
                      f"If/Loop/Scan subgraphs ({', '.join(rewired[:3])}): these now read "
                      "them dequantized, as the main graph does (onnxruntime's quantizer "
                      "rewires the main graph only)")
    return rewired
