"""Hard-swish as exporters decompose it, recognised in a float graph and in
quantize_static's QDQ graph alike (a QuantizeLinear / DequantizeLinear pair between two
of its ops is looked through):

    x * Clip(x + 3, 0, 6) / 6      Paddle2ONNX (PP-PicoDet's layout detector), torch's
                                   x * relu6(x + 3) / 6 or x * clamp(x + 3, 0, 6) / 6
    x * (Clip(x + 3, 0, 6) / 6)    the gate divided first

where / 6 may be * (1/6), and the Clip may be gone: quantize_static folds it into the
Add's QuantizeLinear, whose range then does the clipping. The HardSwish op and
x * HardSigmoid(x) are swish_sites.py's own. Hard-swish equalization (swish_sites.py,
swish_equalize.py) rewrites such a chain as it does the HardSwish op: the nodes from
the Add to the op writing the product make way for its gate and product.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compress.quant.qdq_nodes import array, attr, dequantize

# How near a constant must be to 3, 6 or 1/6: quantize_static quantizes the Add's 3 to
# uint8 (its DequantizeLinear gives it back to float round-off), and an exporter's 1/6
# is a float32
RELATIVE = 1e-3


@dataclass(frozen=True)
class Decomposed:
    """One decomposed hard-swish: `x` as its Mul reads it (a DequantizeLinear's output in
    a QDQ graph), `source` the tensor before any pair (the producer's output), `nodes`
    every node from the Add up to, not including, the op writing the product."""
    x: str
    source: str
    nodes: tuple


def _constant(g, name: str):
    """A constant's value where it is one number (an initializer, a Constant node, or a
    DequantizeLinear of initializers), else None."""
    node = g.producer.get(name)
    if name in g.inits:
        value = array(g.inits, name)
    elif node is not None and node.op_type == "Constant":
        from onnx import numpy_helper
        value = numpy_helper.to_array(attr(node, "value", None))
    elif node is not None and node.op_type == "DequantizeLinear" \
            and all(n in g.inits for n in node.input if n):
        value = dequantize(node, g.inits)
    else:
        return None
    value = np.asarray(value, np.float64).ravel()
    return float(value[0]) if value.size and np.all(value == value[0]) else None


def _near(value, want: float) -> bool:
    return value is not None and abs(value - want) <= RELATIVE * abs(want)


def _unpaired(g, name: str) -> tuple[str, list]:
    """`name` as it was before a QuantizeLinear / DequantizeLinear pair, and the pair's
    nodes ([] where no pair makes it)."""
    dq = g.producer.get(name)
    q = g.producer.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" \
        else None
    if q is None or q.op_type != "QuantizeLinear":
        return name, []
    return q.input[0], [dq, q]


def _other(g, node, want: float):
    """The input of a two-input `node` that is not the constant `want`, or None."""
    for i in (0, 1):
        if len(node.input) == 2 and _near(_constant(g, node.input[i]), want):
            return node.input[1 - i]
    return None


def _divided(g, node):
    """What `node` divides by 6 (a Div by 6, a Mul by 1/6), or None."""
    if node is not None and node.op_type == "Div" and _near(_constant(g, node.input[1]), 6):
        return node.input[0]
    return _other(g, node, 1 / 6) if node is not None and node.op_type == "Mul" else None


def _saturates_0_6(g, pair: list) -> bool:
    """A pair's QuantizeLinear holds no more than [0, 6]: it clips as Clip(0, 6) did
    (quantize_static folds the Clip into it where its range allows)."""
    q = pair[1]
    if len(q.input) < 3 or q.input[1] not in g.inits or q.input[2] not in g.inits:
        return False
    scale, zero = array(g.inits, q.input[1]).ravel(), array(g.inits, q.input[2]).ravel()
    if scale.size != 1:
        return False
    info, point = np.iinfo(zero.dtype), float(zero[0])
    low, high = (info.min - point) * float(scale[0]), (info.max - point) * float(scale[0])
    return abs(low) < 1e-9 and high <= 6 * (1 + RELATIVE)


def _clips_0_6(g, node) -> bool:
    """A Clip to [0, 6], its bounds as inputs (opset 11 on) or attributes."""
    bounds = [attr(node, "min", None), attr(node, "max", None)]
    for k, name in enumerate(node.input[1:3]):
        bounds[k] = _constant(g, name) if name else bounds[k]
    return None not in bounds and abs(bounds[0]) < 1e-9 and _near(bounds[1], 6)


def _relu6_of_plus_3(g, name: str):
    """(x as the Add reads it, the nodes) where `name` is Clip(x + 3, 0, 6), or None."""
    name, nodes = _unpaired(g, name)
    node = g.producer.get(name)
    if node is not None and node.op_type == "Clip":
        if not _clips_0_6(g, node):
            return None
        name, pair = _unpaired(g, node.input[0])
        nodes, node = nodes + [node, *pair], g.producer.get(name)
    elif not nodes or not _saturates_0_6(g, nodes):   # no clip at all: not hard-swish
        return None
    x = _other(g, node, 3) if node is not None and node.op_type == "Add" else None
    return (x, nodes + [node]) if x is not None else None


def _gate(g, name: str, divided: bool):
    """(x as the Add reads it, the nodes) where `name` is Clip(x + 3, 0, 6), divided by 6
    unless `divided` (the product is divided after the Mul)."""
    if divided:
        return _relu6_of_plus_3(g, name)
    name, pair = _unpaired(g, name)
    inner = _divided(g, g.producer.get(name))
    found = _relu6_of_plus_3(g, inner) if inner is not None else None
    return (found[0], [*pair, g.producer[name], *found[1]]) if found else None


def _of_mul(g, mul, nodes: list, divided: bool):
    """The Decomposed whose Mul is `mul` (x times the gate), or None."""
    for i in (0, 1):
        found = _gate(g, mul.input[1 - i], divided)
        if found is None:
            continue
        x, source = mul.input[i], _unpaired(g, mul.input[i])[0]
        added, pair = _unpaired(g, found[0])
        if added != source:
            continue
        extra = [pair[0]] if pair and pair[0].output[0] != x else []   # the Add's own DQ
        return Decomposed(x, source, tuple(nodes + found[1] + extra))
    return None


def decomposed(g, act):
    """The decomposed hard-swish whose product `act` writes, or None; `g` has the graph's
    `producer` and `users` by tensor and its `inits` (swish_sites.Graph). Its nodes are
    read by nothing outside it (they make way for the rewrite)."""
    inner = _divided(g, act)
    found = None
    if inner is not None:                      # (x * relu6(x + 3)) / 6
        name, pair = _unpaired(g, inner)
        mul = g.producer.get(name)
        found = _of_mul(g, mul, [*pair, mul], True) if mul is not None \
            and mul.op_type == "Mul" else None
    if found is None and act.op_type == "Mul":  # x * (relu6(x + 3) / 6)
        found = _of_mul(g, act, [], False)
    if found is None:
        return None
    inside = {id(n) for n in (*found.nodes, act)}
    if any(id(user) not in inside for n in found.nodes for out in n.output
           for user in g.users.get(out, [])):
        return None
    return found
