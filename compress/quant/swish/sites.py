"""Where hard-swish equalization (swish_equalize.py) applies, read from the graphs
alone: every producer Conv -> hard-swish -> depthwise Conv(s) of a QDQ model that can be
equalized, in both of hard-swish's forms (find_sites), and the same chains in the float
model, whose tensors the calibrating run takes per channel before quantize_static runs
(float_tensors). What is done at a site, and by how much, is swish_equalize.py's.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compress.quant.qdq_nodes import array, attr
from compress.quant.swish.forms import decomposed


@dataclass(frozen=True)
class Site:
    """One chain to equalize: the nodes equalize() rewrites and the two tensors, x and
    the product y, whose per-channel ranges set its scales."""
    producer: object      # the Conv whose output is x
    x_q: object           # its QuantizeLinear
    x_dq: object          # the DequantizeLinear the product reads x' from
    gate: object | None   # the HardSigmoid of x * HardSigmoid(x); None for a HardSwish op
    act: object           # the Mul, or the HardSwish op
    y_q: object           # the product's QuantizeLinear
    depthwise: tuple      # the depthwise Convs reading the product
    chain: tuple = ()     # x * Clip(x + 3, 0, 6) / 6: its nodes before `act`, which
                          # the rewrite removes (swish_forms.py); () for the other forms

    @property
    def x(self) -> str:
        return self.producer.output[0]

    @property
    def y(self) -> str:
        return self.act.output[0]


class Graph:
    """A QDQ graph's nodes by the tensors they make and read, and its initializers: the
    sites are found in it, and equalize() adds the initializers it rewrites to it."""

    def __init__(self, model):
        self.graph = model.graph
        self.inits = {i.name: i for i in self.graph.initializer}
        self.producer = {o: n for n in self.graph.node for o in n.output}
        self.users: dict[str, list] = {}
        for node in self.graph.node:
            for name in node.input:
                self.users.setdefault(name, []).append(node)

    def made_by(self, name: str, op: str):
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op else None

    def value(self, name: str) -> np.ndarray:
        return array(self.inits, name)

    def add(self, value: np.ndarray, base: str) -> str:
        from onnx import numpy_helper
        name, k = base, 0
        while name in self.inits:
            k += 1
            name = f"{base}_{k}"
        tensor = numpy_helper.from_array(value, name)
        self.graph.initializer.append(tensor)
        self.inits[name] = tensor
        return name


def const_dq(g: Graph, name: str):
    node = g.made_by(name, "DequantizeLinear")
    return node if node is not None and node.input[0] in g.inits else None


def _per_channel_conv(g: Graph, node, channels: int) -> bool:
    """A Conv whose weight is int8 with one scale per output channel."""
    weight = const_dq(g, node.input[1]) if len(node.input) > 1 else None
    return (weight is not None and g.value(weight.input[1]).size == channels
            and attr(weight, "axis", 1) == 0)


def _depthwise(g: Graph, node, channels: int) -> bool:
    weight = const_dq(g, node.input[1]) if len(node.input) > 1 else None
    return (node.op_type == "Conv" and attr(node, "group", 1) == channels
            and weight is not None and g.value(weight.input[0]).shape[:2] == (channels, 1)
            and _per_channel_conv(g, node, channels))


def _activation(g: Graph, y_q):
    """(gate, act, x_dq, chain) of the hard-swish producing y_q's input, or None."""
    act = g.producer.get(y_q.input[0])
    if act is None or len(g.users.get(act.output[0], [])) != 1:
        return None
    if act.op_type == "HardSwish":
        x_dq = g.made_by(act.input[0], "DequantizeLinear")
        return (None, act, x_dq, ()) if x_dq is not None else None
    found = decomposed(g, act) if act.op_type in ("Mul", "Div") else None
    if found is not None:
        x_dq = g.made_by(found.x, "DequantizeLinear")
        return (None, act, x_dq, found.nodes) if x_dq is not None else None
    if act.op_type != "Mul":
        return None
    for i in (0, 1):
        g_dq = g.made_by(act.input[i], "DequantizeLinear")
        g_q = g_dq and g.made_by(g_dq.input[0], "QuantizeLinear")
        gate = g_q and g.made_by(g_q.input[0], "HardSigmoid")
        x_dq = g.made_by(act.input[1 - i], "DequantizeLinear")
        gate_in = gate and g.made_by(gate.input[0], "DequantizeLinear")
        if gate_in is not None and x_dq is not None and gate_in.input[0] == x_dq.input[0]:
            return gate, act, x_dq, ()
    return None


def find_sites(model) -> list[Site]:
    """Every producer Conv -> hard-swish -> depthwise Conv(s) that can be equalized:
    x and the product used nowhere else, per-channel int8 weights on both convolutions."""
    g, sites = Graph(model), []
    for y_q in (n for n in g.graph.node if n.op_type == "QuantizeLinear"):
        found = _activation(g, y_q)
        if found is None:
            continue
        gate, act, x_dq, chain = found
        x_q = g.made_by(x_dq.input[0], "QuantizeLinear")
        producer = x_q and g.made_by(x_q.input[0], "Conv")
        if producer is None or len(g.users.get(producer.output[0], [])) != 1:
            continue
        channels = g.value(const_dq(g, producer.input[1]).input[0]).shape[0] \
            if const_dq(g, producer.input[1]) is not None else 0
        readers = [n for dq in g.users.get(y_q.output[0], []) for n in g.users.get(dq.output[0], [])]
        x_readers = {id(n) for dq in g.users.get(x_q.output[0], [])
                     for n in g.users.get(dq.output[0], [])}
        if (channels and _per_channel_conv(g, producer, channels)
                and all(len(q.input) > 2 and q.input[2] in g.inits and q.input[1] in g.inits
                        and g.value(q.input[1]).size == 1 for q in (x_q, y_q))
                and x_readers <= {id(act), id(gate), *map(id, chain)}
                and all(dq.op_type == "DequantizeLinear" for dq in g.users[y_q.output[0]])
                and readers and all(_depthwise(g, n, channels) for n in readers)):
            sites.append(Site(producer, x_q, x_dq, gate, act, y_q, tuple(readers), chain))
    return sites


def _product(g: Graph, x: str):
    """The tensor hard-swish of `x` writes in a float graph, where `x`'s readers are its
    ops alone (HardSwish; HardSigmoid and Mul; the Add and Mul of the decomposed form,
    swish_forms.py), else None."""
    readers = g.users.get(x, [])
    ops = sorted(n.op_type for n in readers)
    if ops == ["HardSwish"]:
        return readers[0].output[0]
    mul = next((n for n in readers if n.op_type == "Mul"), None)
    if ops == ["HardSigmoid", "Mul"]:
        return mul.output[0]
    if ops != ["Add", "Mul"]:
        return None
    # (x * relu6(x + 3)) / 6 ends at the Mul's one reader; x * (relu6(x + 3) / 6) at the Mul
    ends = [*g.users.get(mul.output[0], [])[:1], mul]
    return next((act.output[0] for act in ends
                 if (found := decomposed(g, act)) is not None and found.source == x), None)


def float_tensors(float_model) -> list[str]:
    """x and the product of every Conv -> hard-swish -> depthwise Conv(s) of the float
    model: the tensors whose per-channel ranges find_sites' sites will ask for, known
    before quantize_static runs (the calibrating run takes them: passes/hard_swish.py)."""
    g = Graph(float_model)
    shapes = {name: tuple(i.dims) for name, i in g.inits.items()}

    def depthwise(node) -> bool:
        return (node.op_type == "Conv" and len(node.input) > 1 and node.input[1] in g.inits
                and shapes[node.input[1]][1:2] == (1,) and attr(node, "group", 1) > 1)

    found = []
    for conv in (n for n in float_model.graph.node if n.op_type == "Conv"):
        y = _product(g, conv.output[0])
        if y is not None and g.users.get(y) and all(depthwise(n) for n in g.users[y]):
            found += [conv.output[0], y]
    return found


def hard_swishes(float_model) -> int:
    """How many Conv outputs of the float model go through a hard-swish, in any form,
    whatever reads it: what a pass that found nothing to do names."""
    g = Graph(float_model)
    return sum(_product(g, n.output[0]) is not None for n in float_model.graph.node
               if n.op_type == "Conv")
