"""Fixing dynamic dimensions to the declared shapes, on small graphs built in place."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from export.static_shapes import ShapeConflict, dynamic_tensors, fix_file, fix_shapes


def _model(inputs, outputs, nodes, initializers=(), value_info=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers),
                              value_info=list(value_info))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _conv_model():
    """[batch, 3, ?, 8] -> Conv -> Relu -> [batch, 4, ?, 8], with a value_info carrying a
    derived symbol the way exporters write them."""
    weight = numpy_helper.from_array(np.ones((4, 3, 1, 1), np.float32), "w")
    return _model(
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, None, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, "h", 8])],
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
         helper.make_node("Relu", ["c"], ["y"], name="relu")],
        [weight], [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["2*batch", 4, "h", 8])])


def test_every_dimension_is_fixed_and_the_model_still_runs(tmp_path):
    source, target = tmp_path / "dynamic.onnx", tmp_path / "static.onnx"
    onnx.save(_conv_model(), str(source))
    report = fix_file(source, target, {"x": [2, 3, 5, 8]})
    assert report == {"dim_params": {"batch": 2}, "inputs": {"x": "[batch, 3, ?, 8]"},
                      "already_static": False}
    model = onnx.load(str(target))
    assert dynamic_tensors(model) == {}
    onnx.checker.check_model(model)
    assert [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == [2, 4, 5, 8]
    assert {v.name for v in model.graph.value_info} == {"c"}  # re-inferred, fixed
    session = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    assert session.run(None, {"x": np.ones((2, 3, 5, 8), np.float32)})[0].shape == (2, 4, 5, 8)


def test_a_static_model_is_left_as_it_is(tmp_path):
    model = _conv_model()
    fix_shapes(model, {"x": [1, 3, 5, 8]})
    target = tmp_path / "untouched.onnx"
    onnx.save(model, str(tmp_path / "static.onnx"))
    assert fix_file(tmp_path / "static.onnx", target, {"x": [1, 3, 5, 8]})["already_static"]
    assert not target.exists()
    with pytest.raises(ShapeConflict, match="fixes dimension 0 to 1"):
        fix_shapes(model, {"x": [2, 3, 5, 8]})  # static, but not what was declared


@pytest.mark.parametrize("shapes, message", [
    ({"x": [1, 4, 5, 8]}, r"input x: the model fixes dimension 1 to 3 but model.inputs "
                          r"declares \[1, 4, 5, 8\]; declare the shape the model takes "
                          r"\(\[batch, 3, \?, 8\]\)"),
    ({"x": [1, 3, 8]}, r"input x has 4 dimensions in the model .* declares \[1, 3, 8\]"),
    ({}, r"no shape declared for the model's input x"),
    ({"x": [1, 3, 5, 8], "mask": [1, 5]}, r"shapes given for mask, which the model does not take"),
])
def test_contradictions_with_the_declared_shapes_are_named(shapes, message):
    with pytest.raises(ShapeConflict, match=message):
        fix_shapes(_conv_model(), shapes)


def test_one_symbol_with_two_declared_sizes_is_a_conflict():
    model = _model([helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 4])
                    for n in "ab"],
                   [helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", 4])],
                   [helper.make_node("Add", ["a", "b"], ["s"])])
    with pytest.raises(ShapeConflict, match="dimension 'batch' is shared by inputs a and b, but "
                       "model.inputs gives it 1 and 2"):
        fix_shapes(model, {"a": [1, 4], "b": [2, 4]})


def test_a_data_dependent_output_cannot_be_made_static():
    model = _model([helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                   [helper.make_tensor_value_info("idx", TensorProto.INT64, [1, "k"])],
                   [helper.make_node("NonZero", ["x"], ["idx"])])
    with pytest.raises(ShapeConflict, match=r"outputs idx \[1, k\] stay dynamic"):
        fix_shapes(model, {"x": [6]})
