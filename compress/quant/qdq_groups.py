"""The activation groups of a QDQ model, and what int8-static's recovery
(passes/fidelity_floor/) does with one. A group is one activation QuantizeLinear with the
DequantizeLinear nodes that read it: the quantization of one tensor, which
quantize_static writes once and shares among the tensor's readers. Three things can be
done to it, in place on a ModelProto:

    widen(model, key)    16 bits over the same range: the steps 257 times finer (256 for
                         a symmetric int8 pair, whose zero point stays 0); the int32 bias
                         of a Conv / Gemm reading it moved onto the new input scale
    bypass(model, keys)  the pair left out: the tensor stays float, clipped to the
                         pair's range (a Clip): quantize_static drops a ReLU or ReLU6
                         after a Conv whose QuantizeLinear clips as they did
    (nothing)            as quantize_static wrote it

and alone(float_model, ...) quantizes one tensor of the float model as a group does (the
error that group adds on its own). Weights are never touched: they are as the check
kept them (GPTQ-rounded, corrected).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compress.quant.outer_scope import inner_nodes
from compress.quant.qdq_nodes import array

WIDER = {np.dtype(np.uint8): np.dtype(np.uint16), np.dtype(np.int8): np.dtype(np.int16)}
# 16-bit QuantizeLinear is in the default domain from opset 21; below it onnxruntime's
# contrib ops (com.microsoft) run it, as quantize_static's UseQDQContribOps writes them
NATIVE_16_BIT_OPSET = 21
CONTRIB = "com.microsoft"


@dataclass(frozen=True)
class Group:
    """One activation's quantization: `key` (the QuantizeLinear's output, unique in the
    graph) names it; `tensor` is the float tensor it quantizes, made by node `producer`
    of type `op` ('' and 'input' for a graph input); `bits` its integer width."""
    key: str
    tensor: str
    producer: str
    op: str
    bits: int
    read_as: str          # what its (first) DequantizeLinear makes: the float model's
                          # name of a graph output, which quantize_static renames

    def float_name(self, names: set) -> str | None:
        """The float model's tensor this group quantizes, of the float model's `names`."""
        return next((n for n in (self.tensor, self.read_as) if n in names), None)

    def words(self) -> str:
        """'the output of /0/Conv (Conv)' for the record and the report."""
        if self.op == "input":
            return f"model input {self.tensor}"
        return f"the output of {self.producer or self.tensor} ({self.op})"


def _zero_point(node, inits: dict) -> np.ndarray:
    has = len(node.input) > 2 and node.input[2] in inits
    return array(inits, node.input[2]) if has else np.zeros((), np.uint8)


def groups(model) -> list[Group]:
    """Every activation group of `model`, in graph order: a QuantizeLinear of a tensor
    that is not a constant, read only by DequantizeLinear nodes of the main graph (a pair
    this module can widen or leave out: a body that reads it would be left behind)."""
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    readers: dict[str, list] = {}
    for node in (*graph.node, *inner_nodes(graph)):
        for name in node.input:
            readers.setdefault(name, []).append(node)
    made = {o: n for n in graph.node for o in n.output}
    found = []
    for node in graph.node:
        users = readers.get(node.output[0], []) if node.op_type == "QuantizeLinear" else []
        if not users or node.input[0] in inits \
                or any(u.op_type != "DequantizeLinear" for u in users):
            continue
        maker = made.get(node.input[0])
        found.append(Group(node.output[0], node.input[0], maker.name if maker else "",
                           maker.op_type if maker else "input",
                           8 * _zero_point(node, inits).dtype.itemsize, users[0].output[0]))
    return found


def pair(model, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(scale, zero point) of group `key`."""
    inits = {i.name: i for i in model.graph.initializer}
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.output[0] == key)
    return array(inits, q.input[1]), _zero_point(q, inits)


def span(scale: np.ndarray, zero: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The float range a pair covers: its type's lowest and highest integer, dequantized."""
    info = np.iinfo(zero.dtype)
    return ((info.min - zero.astype(np.float64)) * scale).astype(scale.dtype), \
        ((info.max - zero.astype(np.float64)) * scale).astype(scale.dtype)


def bypass(model, keys) -> None:
    """Leave the groups `keys` out: each DequantizeLinear becomes a Clip of the float
    tensor to the pair's range (in its place, so the graph stays in topological order)."""
    from onnx import helper
    graph, keys = model.graph, set(keys)
    inits = {i.name: i for i in graph.initializer}
    source = {n.output[0]: n for n in graph.node if n.op_type == "QuantizeLinear"}
    kept = []
    for node in graph.node:
        if node.op_type == "QuantizeLinear" and node.output[0] in keys:
            continue
        if node.op_type == "DequantizeLinear" and node.input[0] in keys:
            q = source[node.input[0]]
            low, high = span(array(inits, q.input[1]), _zero_point(q, inits))
            bounds = [_add(graph, inits, value.reshape(()), f"{q.input[0]}_{end}")
                      for value, end in ((low, "low"), (high, "high"))]
            node = helper.make_node("Clip", [q.input[0], *bounds], [node.output[0]],
                                    name=f"{node.name}_float")
        kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)


def alone(float_model, tensor: str, scale: np.ndarray, zero: np.ndarray):
    """A copy of `float_model` with `tensor` alone quantized (a QuantizeLinear /
    DequantizeLinear pair with `scale` and `zero`), every reader reading the pair."""
    from onnx import helper
    model = type(float_model)()
    model.CopyFrom(float_model)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    names = [_add(graph, inits, scale, f"{tensor}_alone_scale"),
             _add(graph, inits, zero, f"{tensor}_alone_zero_point")]
    raw = f"{tensor}_alone_float"
    maker = next((i for i, n in enumerate(graph.node) if tensor in n.output), None)
    if maker is None:   # a graph input: its readers, in bodies too, read the pair instead
        _rename([*graph.node, *inner_nodes(graph)], tensor, raw)
        raw, tensor = tensor, raw
    else:   # its maker writes `raw`; the pair writes the name readers know (bodies'
            # too, as outer_scope.rewire has them read the QDQ model's pair)
        _rename([graph.node[maker]], tensor, raw, outputs=True)
    domain = _domain(model, zero)
    pair_nodes = [helper.make_node("QuantizeLinear", [raw, *names], [f"{tensor}_alone_q"],
                                   domain=domain),
                  helper.make_node("DequantizeLinear", [f"{tensor}_alone_q", *names], [tensor],
                                   domain=domain)]
    nodes = list(graph.node)
    at = 0 if maker is None else maker + 1   # right after its maker: still in graph order
    nodes[at:at] = pair_nodes
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def _rename(nodes, old: str, new: str, outputs: bool = False) -> None:
    """`old` read (or, with `outputs`, written) as `new` by each of `nodes`."""
    for node in nodes:
        names = node.output if outputs else node.input
        names[:] = [new if name == old else name for name in names]


def _add(graph, inits: dict, value: np.ndarray, base: str) -> str:
    from onnx import numpy_helper
    name, k = base, 0
    while name in inits:
        k += 1
        name = f"{base}_{k}"
    inits[name] = numpy_helper.from_array(value, name)
    graph.initializer.append(inits[name])
    return name


def sixteen_bit(scale: np.ndarray, zero: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The 16-bit scale and zero point covering the 8-bit pair's range, and the factor
    its scale shrank by: 257 maps 0..255 onto 0..65535 exactly; a symmetric int8 pair
    keeps zero point 0 with 256 (-128..127 onto -32768..32767)."""
    wide = WIDER[zero.dtype]
    if zero.dtype == np.int8 and not zero.any():
        return (scale / 256).astype(scale.dtype), np.zeros(zero.shape, wide), 256
    low, wide_low = np.iinfo(zero.dtype).min, np.iinfo(wide).min
    points = (zero.astype(np.int64) - low) * 257 + wide_low
    return (scale / 257).astype(scale.dtype), points.astype(wide), 257


def widen(model, key: str) -> bool:
    """Group `key` at 16 bits over the same range; False (nothing changed) where its pair
    is not a per-tensor uint8 or int8 one."""
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    q = next(n for n in graph.node if n.op_type == "QuantizeLinear" and n.output[0] == key)
    dqs = [n for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0] == key]
    scale, zero = array(inits, q.input[1]), _zero_point(q, inits)
    if zero.dtype not in WIDER or scale.size != 1:
        return False
    new_scale, new_zero, factor = sixteen_bit(scale, zero)
    names = (_add(graph, inits, new_scale, f"{q.input[0]}_scale16"),
             _add(graph, inits, new_zero, f"{q.input[0]}_zero_point16"))
    domain = _domain(model, new_zero)
    for node in (q, *dqs):
        del node.input[1:]
        node.input.extend(names)
        node.domain = domain if node.domain in ("", "ai.onnx") else node.domain
    _rescale_biases(graph, inits, {dq.output[0] for dq in dqs}, factor)
    return True


def _domain(model, zero: np.ndarray) -> str:
    """The domain of a QuantizeLinear / DequantizeLinear of `zero`'s type in `model`:
    onnxruntime's contrib ops for 16 bits below opset 21 (their opset imported)."""
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                default=0)
    if zero.dtype.itemsize == 1 or opset >= NATIVE_16_BIT_OPSET:
        return ""
    if not any(o.domain == CONTRIB for o in model.opset_import):
        from onnx import helper
        model.opset_import.append(helper.make_opsetid(CONTRIB, 1))
    return CONTRIB


def _rescale_biases(graph, inits: dict, inputs: set, factor: int) -> None:
    """The int32 bias of a Conv / Gemm reading a widened tensor, on the scale an integer
    kernel expects (input scale x weight scale, now `factor` times finer): the same float
    values, as an A16W8 back end (Qualcomm's HTP) reads them. A bias that would overflow
    int32 there stays as it is: onnxruntime's CPU runs the 16-bit layer in float, where
    the bias is its dequantized value either way."""
    made = {o: n for n in graph.node for o in n.output}
    for node in graph.node:
        if node.op_type not in ("Conv", "Gemm", "ConvTranspose") or len(node.input) < 3 \
                or node.input[0] not in inputs:
            continue
        dq = made.get(node.input[2])
        if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in inits \
                or array(inits, dq.input[0]).dtype != np.int32:
            continue
        values = array(inits, dq.input[0]).astype(np.int64) * factor
        if np.abs(values).max(initial=0) > np.iinfo(np.int32).max:
            continue
        scale = array(inits, dq.input[1])
        dq.input[0] = _add(graph, inits, values.astype(np.int32), f"{dq.input[0]}16")
        dq.input[1] = _add(graph, inits, (scale / factor).astype(scale.dtype), f"{dq.input[1]}16")


def drop_unused(model) -> None:
    """Initializers no node reads any more (the scales and zero points of pairs left
    out or widened), removed: onnxruntime warns of each at load. The nodes of If / Loop /
    Scan bodies count: they read the main graph's constants by name (Silero VAD's LSTM
    branch reads /Constant_1_output_0, which onnxruntime then found nowhere)."""
    graph = model.graph
    used = {name for node in (*graph.node, *inner_nodes(graph)) for name in node.input}
    used |= {o.name for o in model.graph.output}
    kept = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
