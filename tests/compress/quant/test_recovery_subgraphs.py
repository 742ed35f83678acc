"""int8-static and its recovery on a model whose If reads main-graph tensors by name (outer
scope), as Silero VAD's opset-15 model does (compress/quant/outer_scope.py,
qdq_groups.py). The test's digits CNN (test_recovery.py: a stem conv whose output
channels span 0.08..45 into a depthwise conv) with its depthwise conv and ReLU moved
into an If's then-branch: the branch reads the stem's ReLU output, which the recovery
widens, and the depthwise conv's weights, main-graph initializers no main-graph node
reads. Before outer_scope.py, quantize_static's file left the branch reading the stem
conv's output without its ReLU (-0.01 dB as quantized, every activation in float or
not), and every recovery move dropped the weights the branch reads (onnxruntime: "input
'2.weight' ... is not output of any previous nodes"), each step's score a silent null."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import compress
from compress.quant import outer_scope, qdq_groups
from compress.quant.passes.fidelity_floor import mixed_precision
from profiles.schema import FLOOR_DB
from tests.compress.quant.test_int8_techniques import train_on_digits
from tests.compress.quant.test_recovery import _net, _spread

STEM = "/1/Relu_output_0"   # the stem conv's output, its ReLU folded in by quantize_static


def _branched(model):
    """The exported network with its depthwise conv and ReLU in the then-branch of an If
    on min(image) > -1 (always true for images in [0, 1], but only known at run time);
    the else-branch passes the stem output on. Both read the stem output by name."""
    graph, nodes = model.graph, list(model.graph.node)
    at = next(k for k, n in enumerate(nodes) if n.name == "/2/Conv")
    conv, relu = nodes[at], nodes[at + 1]
    out = relu.output[0]
    relu.output[0] = f"{out}_then"

    def typed(name):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
    then = helper.make_graph([conv, relu], "then", [], [typed(f"{out}_then")])
    other = helper.make_graph([helper.make_node("Identity", [STEM], [f"{out}_else"])], "else",
                              [], [typed(f"{out}_else")])
    graph.initializer.append(numpy_helper.from_array(np.array(-1, np.float32), "/if/below"))
    cond = [helper.make_node("ReduceMin", ["image"], ["/if/lowest"], keepdims=0, name="/if/Min"),
            helper.make_node("Greater", ["/if/lowest", "/if/below"], ["/if/cond"], name="/if/Gt"),
            ]
    branch = helper.make_node("If", ["/if/cond"], [out], name="/if/If", then_branch=then,
                              else_branch=other)
    del graph.node[:]
    graph.node.extend([*cond, *nodes[:at], branch, *nodes[at + 2:]])
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def branched(tmp_path_factory):
    import torch
    model, images = train_on_digits(_net, epochs=2)
    folded = _spread(model, torch.from_numpy(images[1400:]))
    path = tmp_path_factory.mktemp("branched") / "branched.onnx"
    torch.onnx.export(folded, (torch.zeros(1, 1, 8, 8),), str(path), input_names=["image"],
                      output_names=["logits"], opset_version=17, dynamo=False)
    onnx.save(_branched(onnx.load(str(path))), str(path))
    return {"path": path, "calibration": images[1400:1700],
            "evaluation": [{"image": images[i:i + 1]} for i in range(1700, 1797)]}


def _stage(branched, folder, **settings):
    pipeline = compress.pipeline(
        name="branched", output=str(folder), model={"onnx": str(branched["path"])},
        data={"calibration": lambda: {"image": branched["calibration"]}},
        stages=[{"type": "quantize", "scheme": "int8-static", **settings}])
    result = compress.run(pipeline, quiet=True)
    return result.artifacts[-1].meta, result.run_dir / result.artifacts[-1].path


def _evaluated(branched, path) -> float:
    feeds = branched["evaluation"]
    reference = mixed_precision.float_outputs(branched["path"].read_bytes(), feeds, 2)
    return mixed_precision.sqnr(path.read_bytes(), feeds, reference, 2)


@pytest.fixture(scope="module")
def quantized(branched, tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs")
    return {"recovered": _stage(branched, folder / "on"),
            "not": _stage(branched, folder / "off", recover=False)}


def _body_reads(model) -> set:
    return {name for node in outer_scope.inner_nodes(model.graph) for name in node.input}


def test_the_branch_reads_the_stem_output_as_the_main_graph_does(branched, quantized):
    """quantize_static gave the ReLU's name to the conv's output; the branch now reads
    the DequantizeLinear, as the main graph would: the model is as ruined as the plain
    spread model (3.7 dB on the evaluation digits, not -0.01), and it is the stem
    output's quantization that ruins it, which the recovery can mend."""
    meta, path = quantized["not"]
    assert meta["outer_scope_rewired"] == [STEM]
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    dequantized = {n.output[0]: n for n in model.graph.node if n.op_type == "DequantizeLinear"}
    read = _body_reads(model)
    assert STEM not in read and any(dequantized.get(name) for name in read)
    assert 1 < _evaluated(branched, path) < 6 and meta["fidelity_floor"]["sqnr_db"] < 6


def test_recovery_widens_the_tensor_the_branch_reads_and_every_move_scores(branched,
                                                                          quantized):
    meta, path = quantized["recovered"]
    floor = meta["fidelity_floor"]
    assert floor["held"] is True and floor["sqnr_db_after"] >= 30 > FLOOR_DB > floor["sqnr_db"]
    assert [(layer["tensor"], layer["precision"]) for layer in floor["layers"]] == [
        (STEM, "16-bit")]
    assert all(step["sqnr_db_after"] is not None and "reason" not in step
               for step in floor["steps"])
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    # the branch's weights, read by no main-graph node, are still there
    assert {"2.weight", "2.bias"} <= {i.name for i in model.graph.initializer}
    assert meta["qdq"]["activation_types"] == {"uint8": 6, "uint16": 1}
    assert _evaluated(branched, path) >= FLOOR_DB + 5


def test_each_move_of_the_stem_output_makes_a_model_onnxruntime_runs(branched, quantized):
    """16 bits and float (a Clip in the DequantizeLinear's place, whose output the
    branch reads): the branch's outer reads all still made before it."""
    from compress.quant.float_probe import session
    meta, path = quantized["not"]
    kept, float_model = path.read_bytes(), onnx.load(str(branched["path"]))
    stem = next(g for g in qdq_groups.groups(onnx.load_model_from_string(kept))
                if g.tensor == STEM)
    feed = branched["evaluation"][0]
    for level in (mixed_precision.SIXTEEN_BIT, mixed_precision.FLOAT):
        model = mixed_precision.assigned(kept, {stem: level}, float_model, None)
        onnx.checker.check_model(onnx.load_model_from_string(model))
        assert session(model, 1).run(None, feed)[0].shape == (1, 10)
    # the float model with the stem output alone quantized: the branch reads the pair
    scale, zero = qdq_groups.pair(onnx.load_model_from_string(kept), stem.key)
    alone = qdq_groups.alone(float_model, STEM, scale, zero)
    onnx.checker.check_model(alone)
    assert session(alone.SerializeToString(), 1).run(None, feed)[0].shape == (1, 10)


def test_a_move_that_cannot_be_scored_says_why(branched, quantized):
    """A move whose model onnxruntime refuses (here: the branch's weights dropped, as
    the surgery did before) is recorded with onnxruntime's reason, not a bare null, and
    report.md says so."""
    from compress.quant.float_probe import session
    from compress.report.md_floor import floor_details
    meta, path = quantized["not"]
    kept = path.read_bytes()
    stem = next(g for g in qdq_groups.groups(onnx.load_model_from_string(kept))
                if g.tensor == STEM)

    def dropped(levels: dict) -> bytes:
        model = onnx.load_model_from_string(kept)
        weights = [i for i in model.graph.initializer if i.name != "2.weight"]
        del model.graph.initializer[:]
        model.graph.initializer.extend(weights)
        return model.SerializeToString()

    def score(model: bytes) -> float:
        return float(session(model, 1).run(None, branched["evaluation"][0])[0].sum())
    search = mixed_precision.recover((kept, 1.0), [(stem, 0.0)], dropped, score,
                                     mixed_precision.Greedy(FLOOR_DB, 0.5, 4))
    step = search.steps[0].record()
    assert step["sqnr_db_after"] is None and step["kept"] is False
    assert "2.weight" in step["reason"] and step["reason"].startswith("InvalidGraph")
    floor = {**meta["fidelity_floor"], "recovered": True, "layers": [],
             "sqnr_db_after": 1.0, "steps": [step]}
    text = "\n".join(floor_details({"artifacts": [{"id": "int8", "meta": {
        "fidelity_floor": floor}}]}))
    assert "1 move(s) made a model that could not be scored" in text and "2.weight" in text


def test_sort_puts_the_makers_of_a_branch_s_outer_reads_first(branched):
    """quantize_static can write a pair after the If that reads its output (Silero VAD's
    file did, which onnx.checker refuses): sort orders the main graph by what nodes and
    their bodies read, and leaves a graph in order as it is."""
    model = onnx.load(str(branched["path"]))
    order = [n.name for n in model.graph.node]
    outer_scope.sort(model.graph)
    assert [n.name for n in model.graph.node] == order
    nodes = list(model.graph.node)
    stem = [n for n in nodes if n.name in ("/0/Conv", "/1/Relu")]
    del model.graph.node[:]
    model.graph.node.extend([n for n in nodes if n not in stem] + stem)
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model)
    outer_scope.sort(model.graph)
    onnx.checker.check_model(model)
    names = [n.name for n in model.graph.node]
    assert names.index("/1/Relu") < names.index("/if/If")
