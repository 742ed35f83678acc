"""compress.model.onnx_compat on real onnxruntime: what opset quantize_static's QDQ output needs,
upgrading models from other exporters before quantizing (ddddocr's opset-12 OCR model),
control flow, external data, and the messages for models onnxruntime refuses."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compress.model import onnx_compat
from compress.errors import ModelError
from compress.model.onnx_compat import load_onnx, needed_opset, opset_of, save_onnx, upgrade_opset
from compress.model.onnx_errors import check_runs
from runtimes.onnx_session import session_options

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

FLOAT = TensorProto.FLOAT
QUANTIZED = "stage 2 (quantize) made a model that onnxruntime cannot load"


def _info(name, shape, kind=FLOAT):
    return helper.make_tensor_value_info(name, kind, shape)


def _weight(name, *shape, seed=0):
    rng = np.random.default_rng(seed + len(name) + sum(shape))
    return numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)


def _model(nodes, inits=(), inputs=None, outputs=None, opset=13, ir=7, extra=()):
    graph = helper.make_graph(nodes, "g", inputs or [_info("x", [1, 3, 6, 6])],
                              outputs or [_info("y", None)], list(inits))
    return helper.make_model(graph, ir_version=ir,
                             opset_imports=[helper.make_opsetid("", opset), *extra])


def _conv_net(opset: int):
    """Conv + Relu + Flatten + Gemm + MatMul with initializers, valid from opset 7 on."""
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flat", axis=1),
             helper.make_node("Gemm", ["f", "G", "GB"], ["g"], name="gemm"),
             helper.make_node("MatMul", ["g", "M"], ["y"], name="matmul")]
    inits = [_weight("W", 4, 3, 3, 3), _weight("B", 4), _weight("G", 144, 8),
             _weight("GB", 8), _weight("M", 8, 3)]
    return _model(nodes, inits, outputs=[_info("y", [1, 3])], opset=opset)


def _feeds(shape=(1, 3, 6, 6), count=8, name="x"):
    rng = np.random.default_rng(1)
    return [{name: rng.normal(size=shape).astype(np.float32)} for _ in range(count)]


class _Reader:
    def __init__(self, feeds):
        self._feeds = iter(feeds)

    def get_next(self):
        return next(self._feeds, None)


def _quantize(source: Path, target: Path, feeds, per_channel=True, activations="QUInt8",
              extra=None) -> onnx.ModelProto:
    """quantize_static as the quantize stage calls it: QDQ, int8 weights."""
    quantization.quantize_static(
        str(source), str(target), _Reader(feeds), quant_format=quantization.QuantFormat.QDQ,
        per_channel=per_channel, activation_type=quantization.QuantType[activations],
        weight_type=quantization.QuantType.QInt8, extra_options=extra or {})
    return onnx.load(str(target))


def _run(path, feed):
    return ort.InferenceSession(str(path), session_options(),
                                providers=["CPUExecutionProvider"]).run(None, feed)


def _close(quantized, floating, feed, share=0.05):
    """The quantized model's outputs within `share` of the float outputs' largest value."""
    for q, f in zip(_run(quantized, feed), _run(floating, feed)):
        assert np.abs(q - f).max() <= share * np.abs(f).max() + 1e-3


def _per_channel_dqs(model) -> int:
    return sum(1 for n in model.graph.node if n.op_type == "DequantizeLinear"
               and any(a.name == "axis" for a in n.attribute))


# --- what quantize_static needs ---------------------------------------------------------

def test_needed_opset():
    assert needed_opset(per_channel=False) == 11
    assert needed_opset(per_channel=True) == 13
    assert needed_opset(per_channel=False, activations="uint16") == 21
    assert needed_opset(per_channel=True, activations="int16", weights="int16") == 21
    with pytest.raises(ValueError):
        needed_opset(per_channel=True, weights="int4")


# (float model's opset, per channel, activation type, extra options) -> the opset of
# quantize_static's output; each of these loads and runs. The numbers behind needed_opset.
@pytest.mark.parametrize("opset, per_channel, activations, extra, result", [
    (10, False, "QUInt8", {}, 10),    # per tensor: Q/DQ from opset 10 suffice
    (7, False, "QUInt8", {}, 11),     # < 10: quantize_static lifts it to 11 itself
    (13, True, "QUInt8", {}, 13),     # per channel: 13, not lifted (see the next test)
    (13, False, "QUInt16", {}, 21),   # 16-bit: lifted to 21 (Q/DQ take uint16 from 21)
    (12, True, "QUInt16", {"UseQDQContribOps": True}, 21),  # still lifted, Q/DQ com.microsoft
])
def test_what_quantize_static_does_with_the_opset(tmp_path, opset, per_channel, activations,
                                                  extra, result):
    onnx.save(_conv_net(opset), tmp_path / "float.onnx")
    feeds = _feeds()
    quantized = _quantize(tmp_path / "float.onnx", tmp_path / "q.onnx", feeds, per_channel,
                          activations, extra)
    assert opset_of(quantized) == result
    domains = {n.domain for n in quantized.graph.node if n.op_type.endswith("QuantizeLinear")}
    assert domains == ({"com.microsoft"} if extra else {""})
    check_runs(tmp_path / "q.onnx", feeds, QUANTIZED)


def test_per_channel_below_opset_13_is_refused_with_a_clear_message(tmp_path):
    onnx.save(_conv_net(12), tmp_path / "float.onnx")
    quantized = _quantize(tmp_path / "float.onnx", tmp_path / "q.onnx", _feeds())
    assert opset_of(quantized) == 12 and _per_channel_dqs(quantized)  # not lifted
    with pytest.raises(ModelError) as caught:
        check_runs(tmp_path / "q.onnx", _feeds(), QUANTIZED)
    message = str(caught.value)
    # onnxruntime 1.32 says: [ONNXRuntimeError] : 10 : INVALID_GRAPH : Load model from q.onnx
    # failed:This is an invalid model. In Node, ("B_DequantizeLinear", DequantizeLinear, "",
    # -1) : (...) -> ("B",) , Error Unrecognized attribute: axis for operator DequantizeLinear
    assert message.startswith(QUANTIZED + ": ")
    assert "node 'B_DequantizeLinear' (DequantizeLinear) has attribute 'axis'" in message
    assert "(opset 12)" in message and "from opset 13" in message
    assert "upgrade_opset" in message and "truncated" not in message


@pytest.mark.parametrize("opset", [7, 9, 11, 12])
def test_upgrade_then_per_channel_quantize_runs_close_to_float(tmp_path, opset):
    model, record = upgrade_opset(_conv_net(opset), needed_opset(per_channel=True))
    assert record == {"from": opset, "to": 13} and opset_of(model) == 13
    assert model.ir_version >= 7
    save_onnx(model, tmp_path / "float13.onnx")
    feeds = _feeds()
    quantized = _quantize(tmp_path / "float13.onnx", tmp_path / "q.onnx", feeds)
    assert opset_of(quantized) == 13 and _per_channel_dqs(quantized) >= 3  # Conv, Gemm, MatMul
    check_runs(tmp_path / "q.onnx", feeds, QUANTIZED)
    onnx.save(_conv_net(opset), tmp_path / "float.onnx")
    _close(tmp_path / "q.onnx", tmp_path / "float.onnx", feeds[0])


# --- upgrade_opset ------------------------------------------------------------------------

def test_upgrade_leaves_a_new_enough_model_alone():
    model = _conv_net(13)
    assert upgrade_opset(model, 13) == (model, None)
    model.opset_import[0].domain = "ai.onnx"  # the other spelling of the default domain
    assert opset_of(model) == 13 and upgrade_opset(model, 11)[1] is None


def test_upgrade_keeps_large_weights_and_other_domains(tmp_path):
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="matmul"),
             helper.make_node("Gelu", ["h"], ["y"], name="gelu", domain="com.microsoft")]
    original = _model(nodes, [_weight("W", 256, 256)], [_info("x", [1, 256])],
                      [_info("y", [1, 256])], opset=12,
                      extra=[helper.make_opsetid("com.microsoft", 1)])
    weight = original.graph.initializer[0].raw_data
    model, record = upgrade_opset(original, 13)
    assert record == {"from": 12, "to": 13}
    # 256 KiB: it leaves the model while the converter runs, and comes back unchanged
    assert model.graph.initializer[0].raw_data == weight
    assert original.graph.initializer[0].raw_data == weight  # the caller's model is intact
    assert {(o.domain, o.version) for o in model.opset_import} == {("", 13), ("com.microsoft", 1)}
    assert model.graph.node[1].domain == "com.microsoft"
    save_onnx(model, tmp_path / "m.onnx")
    check_runs(tmp_path / "m.onnx", _feeds((1, 256)), "upgrade")


@pytest.mark.parametrize("opset, nodes, inputs, op, node", [
    # an experimental op ONNX dropped: no schema, so no conversion rule
    (7, [helper.make_node("ImageScaler", ["x"], ["y"], name="scale", scale=2.0)],
     [_info("x", [1, 3, 6, 6])], "ImageScaler", None),
    # opset-6 broadcasting needs static shapes to convert; the batch is symbolic here
    (6, [helper.make_node("Add", ["a", "b"], ["y"], name="add", broadcast=1, axis=1)],
     [_info("a", ["batch", 3, 4]), _info("b", [3])], "Add", "add"),
    # Gemm-6 on a 3-D input has no Gemm-7 equivalent
    (6, [helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="gemm", broadcast=1)],
     [_info("a", [1, 2, 3]), _info("b", [3, 4]), _info("c", [4])], "Gemm", "gemm"),
])
def test_upgrade_failure_names_the_op_and_both_opsets(opset, nodes, inputs, op, node):
    with pytest.raises(ModelError) as caught:
        upgrade_opset(_model(nodes, inputs=inputs, opset=opset, ir=3), 13)
    message = str(caught.value)
    assert f"from opset {opset} to 13" in message and op in message
    assert node is None or f"node '{node}'" in message
    assert "re-export the model at opset 13 or newer" in message
    assert "Assertion" not in message and "/project/" not in message  # the C++ noise is gone


# --- control flow at the top level --------------------------------------------------------

def _front():
    """Conv + Relu + Flatten + MatMul outside the control flow, giving z [1, 8]."""
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "M"], ["z"], name="matmul")]
    return nodes, [_weight("W", 4, 3, 3, 3), _weight("B", 4), _weight("M", 144, 8)]


def _with_if():
    nodes, inits = _front()
    then = helper.make_graph([helper.make_node("MatMul", ["z", "K"], ["t"], name="mm_then")],
                             "then", [], [_info("t", [1, 8])], [_weight("K", 8, 8)])
    other = helper.make_graph([helper.make_node("Relu", ["z"], ["e"], name="relu_else")],
                              "else", [], [_info("e", [1, 8])])
    nodes += [helper.make_node("ReduceSum", ["z"], ["s"], name="sum", keepdims=0, axes=[0, 1]),
              helper.make_node("Greater", ["s", "zero"], ["cond"], name="positive"),
              helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then,
                               else_branch=other)]
    return nodes, inits + [numpy_helper.from_array(np.array(0, np.float32), "zero")]


def _with_loop():
    nodes, inits = _front()
    body = helper.make_graph(
        [helper.make_node("MatMul", ["v_in", "K"], ["v"], name="mm_body"),
         helper.make_node("Relu", ["v"], ["v_out"], name="relu_body"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going")],
        "body", [_info("i", [], TensorProto.INT64), _info("cond_in", [], TensorProto.BOOL),
                 _info("v_in", [1, 8])],
        [_info("cond_out", [], TensorProto.BOOL), _info("v_out", [1, 8])], [_weight("K", 8, 8)])
    nodes += [helper.make_node("Loop", ["trips", "", "z"], ["y"], name="loop", body=body)]
    return nodes, inits + [numpy_helper.from_array(np.array(3, np.int64), "trips")]


def _with_scan():
    nodes, inits = _front()
    # a running sum over z's four rows of two: state [1, 2] += row @ K; Unsqueeze takes its
    # axes as an attribute at opset 11, as an input at 13: the converter must rewrite the body
    body = helper.make_graph(
        [helper.make_node("Unsqueeze", ["row"], ["row2"], name="unsqueeze", axes=[0]),
         helper.make_node("MatMul", ["row2", "K"], ["p"], name="mm_scan"),
         helper.make_node("Add", ["state_in", "p"], ["state_out"], name="add_scan"),
         helper.make_node("Identity", ["state_out"], ["each"], name="each")],
        "body", [_info("state_in", [1, 2]), _info("row", [2])],
        [_info("state_out", [1, 2]), _info("each", [1, 2])], [_weight("K", 2, 2)])
    nodes += [helper.make_node("Reshape", ["z", "rows"], ["zr"], name="rows"),
              helper.make_node("Scan", ["start", "zr"], ["y", "ys"], name="scan", body=body,
                               num_scan_inputs=1)]
    return nodes, inits + [numpy_helper.from_array(np.array([4, 2], np.int64), "rows"),
                           numpy_helper.from_array(np.zeros((1, 2), np.float32), "start")]


def _subgraph_ops(model) -> list[str]:
    return [n.op_type for g in list(onnx_compat._graphs(model.graph))[1:] for n in g.node]


# What quantize_static (onnxruntime 1.32, QDQ, per channel) does with them: it quantizes the
# top-level Conv and MatMul, leaves every node inside If/Loop/Scan bodies float (no Q/DQ
# there; EnableSubgraph only applies to the QOperator format), and the result loads and
# runs close to float: all six cases run, none fails.
@pytest.mark.parametrize("extra", [{}, {"EnableSubgraph": True}], ids=["default", "subgraphs"])
@pytest.mark.parametrize("build", [_with_if, _with_loop, _with_scan],
                         ids=["if", "loop", "scan"])
def test_control_flow_at_the_top_level(tmp_path, build, extra):
    nodes, inits = build()
    outputs = [_info("y", None)] + ([_info("ys", None)] if build is _with_scan else [])
    model, record = upgrade_opset(_model(nodes, inits, outputs=outputs, opset=11), 13)
    assert record == {"from": 11, "to": 13}
    assert "Unsqueeze" not in _subgraph_ops(model) or any(  # axes moved to an input
        len(n.input) == 2 for g in onnx_compat._graphs(model.graph) for n in g.node
        if n.op_type == "Unsqueeze")
    save_onnx(model, tmp_path / "float.onnx")
    feeds = _feeds()
    quantized = _quantize(tmp_path / "float.onnx", tmp_path / "q.onnx", feeds, extra=extra)
    assert _per_channel_dqs(quantized) >= 2  # the Conv and MatMul outside
    assert not [op for op in _subgraph_ops(quantized) if op.endswith("QuantizeLinear")]
    try:
        check_runs(tmp_path / "q.onnx", feeds, QUANTIZED)
    except ModelError as error:  # not seen with onnxruntime 1.32; clear if it happens
        assert str(error).startswith(QUANTIZED) and "node '" in str(error)
    else:
        # the Scan sums four products of quantized values, whose errors add up
        _close(tmp_path / "q.onnx", tmp_path / "float.onnx", feeds[0], share=0.15)


# --- external data ------------------------------------------------------------------------

def _external_model(folder: Path) -> Path:
    model = _model([helper.make_node("MatMul", ["x", "W"], ["y"], name="matmul")],
                   [_weight("W", 64, 64)], [_info("x", [1, 64])], [_info("y", [1, 64])])
    folder.mkdir(exist_ok=True)
    onnx.save(model, folder / "m.onnx", save_as_external_data=True, location="weights.bin",
              size_threshold=0)
    return folder / "m.onnx"


def test_external_data_is_read_and_written_back_as_one_file(tmp_path):
    path = _external_model(tmp_path / "in")
    model = load_onnx(path)
    assert np.array_equal(numpy_helper.to_array(model.graph.initializer[0]),
                          numpy_helper.to_array(_weight("W", 64, 64)))
    save_onnx(model, tmp_path / "one.onnx")
    assert sorted(os.listdir(tmp_path)) == ["in", "one.onnx"]
    header = onnx.load(str(tmp_path / "one.onnx"), load_external_data=False)
    assert not any(t.data_location == TensorProto.EXTERNAL for t in header.graph.initializer)
    feed = _feeds((1, 64), 1)[0]
    check_runs(tmp_path / "one.onnx", [feed], "save")
    np.testing.assert_allclose(_run(tmp_path / "one.onnx", feed)[0], _run(path, feed)[0])


@pytest.mark.parametrize("damage, said", [("delete", "which is missing"),
                                          ("shorten", "is shorter than the model says")])
def test_missing_or_short_external_data_names_the_file(tmp_path, damage, said):
    path = _external_model(tmp_path)
    data = tmp_path / "weights.bin"
    if damage == "delete":
        data.unlink()
    else:
        data.write_bytes(data.read_bytes()[:1000])
    for call in (lambda: load_onnx(path), lambda: check_runs(path, [], "stage 1 (export)")):
        with pytest.raises(ModelError) as caught:
            call()
        assert str(data) in str(caught.value) and said in str(caught.value)
    assert "not a valid ONNX model" not in str(caught.value)  # the .onnx itself is fine


def test_save_above_the_limit_writes_one_data_file(tmp_path, monkeypatch):
    model = load_onnx(_external_model(tmp_path / "in"))
    weight = model.graph.initializer[0].raw_data
    monkeypatch.setattr(onnx_compat, "INLINE_LIMIT", 1000)  # stands in for 2 GiB
    save_onnx(model, tmp_path / "big.onnx")
    assert sorted(os.listdir(tmp_path)) == ["big.onnx", "big.onnx.data", "in"]
    assert model.graph.initializer[0].raw_data == weight  # still in memory
    assert load_onnx(tmp_path / "big.onnx").graph.initializer[0].raw_data == weight
    check_runs(tmp_path / "big.onnx", _feeds((1, 64), 1), "save")
    monkeypatch.undo()
    save_onnx(model, tmp_path / "big.onnx")  # small again: one file, the stale data gone
    assert sorted(os.listdir(tmp_path)) == ["big.onnx", "in"]


def test_save_failure_leaves_nothing(tmp_path):
    with pytest.raises(ModelError, match="cannot write the ONNX model"):
        save_onnx(_conv_net(13), tmp_path / "missing-folder" / "m.onnx")
    assert os.listdir(tmp_path) == []


# --- check_runs' messages -------------------------------------------------------------------

def _relu(opset=13, kind=FLOAT, **attrs):
    return _model([helper.make_node("Relu", ["x"], ["y"], name="relu", **attrs)],
                  inputs=[_info("x", [2], kind)], outputs=[_info("y", [2], kind)], opset=opset)


def _dequantize_uint16():
    return _model([helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq")],
                  [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
                   numpy_helper.from_array(np.array(0, np.uint16), "z")],
                  [_info("q", [2], TensorProto.UINT16)], opset=13)


def _reshape_to_21():
    return _model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
                  [numpy_helper.from_array(np.array([3, 7], np.int64), "shape")],
                  [_info("x", ["n", 2])])


# (model, feed, what the message must say); onnxruntime 1.32's own words in the comments
@pytest.mark.parametrize("build, feed, says", [
    # In Node, ("relu", Relu, "", -1) : ... , Error Unrecognized attribute: alpha for operator Relu
    (lambda: _relu(alpha=1.0), {"x": np.ones(2, np.float32)},
     ["node 'relu' (Relu) has attribute 'alpha'", "(opset 13)"]),
    # ... Error No Op registered for Gelu with domain_version of 13
    (lambda: _model([helper.make_node("Gelu", ["x"], ["y"], name="gelu")]), None,
     ["node 'gelu' (Gelu)", "exists only from opset 20", "(opset 13)"]),
    # ONNX Runtime only *guarantees* support for models stamped with official released onnx
    # opset versions. Opset 40 is under development ... is till opset 28.
    (lambda: _relu(opset=40), None, ["(opset 40)", "newer than this onnxruntime supports"]),
    # Could not find an implementation for Relu(13) node with name 'relu'
    (lambda: _relu(kind=TensorProto.BFLOAT16), None,
     ["node 'relu' (Relu, version 13 of the op)", "no kernel"]),
    # Type Error: Type 'tensor(uint16)' of input parameter (q) of operator (DequantizeLinear)
    # in node (dq) is invalid.
    (_dequantize_uint16, None, ["node 'dq' (DequantizeLinear)", "tensor(uint16)",
                                "takes only from opset 21"]),
    # Fatal error: my.domain:Foo(-1) is not a registered function/op
    (lambda: _model([helper.make_node("Foo", ["x"], ["y"], name="foo", domain="my.domain")],
                    extra=[helper.make_opsetid("my.domain", 1)]), None,
     ["Foo (domain 'my.domain')", "custom-op library"]),
    # Node (cat) Op (Concat) [ShapeInferenceError] All inputs to Concat must have same rank...
    (lambda: _model([helper.make_node("Concat", ["a", "b"], ["y"], name="cat", axis=0)],
                    inputs=[_info("a", [2, 3]), _info("b", [2, 3, 4])]), None,
     ["node 'cat' (Concat): ShapeInferenceError"]),
    # Non-zero status code returned while running Reshape node. Name:'reshape' Status
    # Message: ... The input tensor cannot be reshaped to the requested shape.
    (_reshape_to_21, {"x": np.ones((3, 2), np.float32)},
     ["node 'reshape' (Reshape) fails on the first input", "cannot be reshaped"]),
], ids=["attribute", "op-newer-than-opset", "opset-too-new", "no-kernel", "type",
        "custom-op", "shapes", "at-run-time"])
def test_check_runs_names_the_op_node_and_opset(tmp_path, build, feed, says):
    onnx.save(build(), tmp_path / "m.onnx")
    with pytest.raises(ModelError) as caught:
        check_runs(tmp_path / "m.onnx", [feed] if feed else [], QUANTIZED)
    message = str(caught.value)
    assert message.startswith(f"{QUANTIZED}: {tmp_path / 'm.onnx'}")
    for part in says:
        assert part in message
    assert "Fix: " in message and "truncated" not in message
    assert "/onnxruntime_src/" not in message and "[ONNXRuntimeError]" not in message


def test_a_lead_ending_in_that_says_load_or_run(tmp_path):
    onnx.save(_relu(alpha=1.0), tmp_path / "bad.onnx")
    onnx.save(_reshape_to_21(), tmp_path / "fails.onnx")
    lead = "stage 2 (quantize) made a model that"
    with pytest.raises(ModelError, match=r"^stage 2 \(quantize\) made a model that "
                                         r"onnxruntime cannot load: .*bad\.onnx \(opset 13\)"):
        check_runs(tmp_path / "bad.onnx", [], lead)
    with pytest.raises(ModelError, match=r"^stage 2 \(quantize\) made a model that "
                                         r"onnxruntime cannot run: .*node 'reshape'"):
        check_runs(tmp_path / "fails.onnx", [{"x": np.ones((3, 2), np.float32)}], lead)


def test_only_a_truncated_file_is_called_truncated(tmp_path):
    model = _conv_net(13)
    onnx.save(model, tmp_path / "whole.onnx")
    (tmp_path / "cut.onnx").write_bytes((tmp_path / "whole.onnx").read_bytes()[:300])
    for call in (lambda: check_runs(tmp_path / "cut.onnx", [], QUANTIZED),
                 lambda: load_onnx(tmp_path / "cut.onnx")):
        with pytest.raises(ModelError, match="not a valid ONNX model: it does not parse .*truncated"):
            call()
    with pytest.raises(ModelError, match="does not exist"):
        check_runs(tmp_path / "nowhere.onnx", [], QUANTIZED)


# --- a model from another exporter: ddddocr's OCR recognizer (opset 12, LSTM) -------------

@pytest.fixture(scope="module")
def ocr(tmp_path_factory):
    """ddddocr's common.onnx (opset 12, input1 [1, 1, 64, width]), three calibration crops
    of skimage's text image scaled to height 64, and three printed words to read."""
    spec = importlib.util.find_spec("ddddocr")  # not imported: its __init__ wants OpenCV
    if spec is None:
        pytest.skip("ddddocr (optional) is not installed")
    data = pytest.importorskip("skimage.data")
    pytest.importorskip("PIL", minversion="10.1")  # for ImageFont.load_default(size=...)
    from PIL import Image, ImageDraw, ImageFont
    text = data.text()  # 172 x 448, handwriting on paper
    calibration = []
    for start, width in ((0, 200), (100, 300), (48, 400)):
        crop = Image.fromarray(text[:, start:start + width])
        crop = crop.resize((round(width * 64 / text.shape[0]), 64))
        calibration.append({"input1": (np.asarray(crop, np.float32) / 255)[None, None]})
    words = []
    for word in ("quant42", "8xK2m7", "A3B9"):
        image = Image.new("L", (28 * len(word) + 20, 64), 255)
        ImageDraw.Draw(image).text((10, 6), word, fill=0, font=ImageFont.load_default(size=44))
        words.append({"input1": (np.asarray(image, np.float32) / 255)[None, None]})
    folder = Path(spec.submodule_search_locations[0])
    return folder, calibration, words, tmp_path_factory.mktemp("ocr")


def _quantize_ocr(source: Path, folder: Path, feeds) -> Path:
    """quant_pre_process, then per-channel QDQ U8S8, as the quantize stage does."""
    from onnxruntime.quantization.shape_inference import quant_pre_process
    quant_pre_process(str(source), str(folder / "pre.onnx"))
    _quantize(folder / "pre.onnx", folder / "q.onnx", feeds)
    return folder / "q.onnx"


def _read(model: Path, feed) -> list[int]:
    """The model's CTC reading: the best class per time step, repeats and blanks (0) out."""
    best = _run(model, feed)[0].argmax(-1).ravel()
    return [int(c) for i, c in enumerate(best) if c and (i == 0 or best[i - 1] != c)]


def _charset(folder: Path) -> list[str] | None:
    """ddddocr's character list for common.onnx, read without importing the package."""
    spec = importlib.util.spec_from_file_location("ddddocr_charsets", folder / "charsets.py")
    if spec is None or not (folder / "charsets.py").is_file():
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, "CHARSET_BETA", None)


def test_ddddocr_per_channel_needs_opset_13_and_runs_after_the_upgrade(ocr):
    folder, calibration, words, work = ocr
    source = folder / "common.onnx"
    assert opset_of(onnx.load(str(source), load_external_data=False)) == 12
    (work / "as-is").mkdir()
    with pytest.raises(ModelError) as caught:
        check_runs(_quantize_ocr(source, work / "as-is", calibration), calibration, QUANTIZED)
    # onnxruntime 1.32: [ONNXRuntimeError] : 10 : INVALID_GRAPH : Load model from .../q.onnx
    # failed:This is an invalid model. In Node, ("135_DequantizeLinear", DequantizeLinear, "",
    # -1) : ("135_quantized": tensor(int8),"135_scale": tensor(float),"135_zero_point":
    # tensor(int8),) -> ("135_DequantizeLinear_Output",) , Error Unrecognized attribute: axis
    # for operator DequantizeLinear
    message = str(caught.value)
    assert "Unrecognized attribute: axis for operator DequantizeLinear" in message
    assert "(DequantizeLinear) has attribute 'axis'" in message and "(opset 12)" in message
    assert "from opset 13" in message and "truncated" not in message

    model, record = upgrade_opset(load_onnx(source), needed_opset(per_channel=True))
    assert record == {"from": 12, "to": 13}
    (work / "upgraded").mkdir()
    save_onnx(model, work / "upgraded" / "float13.onnx")
    quantized = _quantize_ocr(work / "upgraded" / "float13.onnx", work / "upgraded", calibration)
    check_runs(quantized, calibration, QUANTIZED)
    graph = onnx.load(str(quantized)).graph
    # the LSTM stays float: QDQ has no LSTM rule, so its weights W, R, B are float
    # initializers; only its input X comes through a DequantizeLinear
    lstm = next(n for n in graph.node if n.op_type == "LSTM")
    floats = {i.name for i in graph.initializer if i.data_type == TensorProto.FLOAT}
    assert set(lstm.input[1:4]) <= floats
    assert lstm.input[0].endswith("_DequantizeLinear_Output")
    # calibrated on handwriting, the int8 model reads printed words as the float one does
    readings = [_read(source, word) for word in words]
    assert all(readings) and readings == [_read(quantized, word) for word in words]
    charset = _charset(folder)
    if charset is not None and len(charset) == 8210:
        assert "".join(charset[c] for c in readings[0]) == "quant42"
