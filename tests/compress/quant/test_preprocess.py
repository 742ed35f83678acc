"""quant_pre_process runs its symbolic shape inference only where ONNX's own inference
leaves a tensor's type or rank unknown (the quantizer reads only those)."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from compress.quant.ort_int8 import _needs_symbolic_shapes, preprocess


class _Progress:
    def __init__(self):
        self.notes = []

    def note(self, text):
        self.notes.append(text)


class _Ctx:
    def __init__(self):
        self.progress = _Progress()


def _conv_model(path, batch, custom: bool = False):
    """A Conv + Relu (+ an op of an unknown domain, whose output ONNX cannot type)."""
    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"])]
    if custom:
        nodes.append(helper.make_node("Mystery", ["r"], ["m"], domain="example.custom"))
    out = "m" if custom else "r"
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], [weight])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("example.custom", 1)]
                                              if custom else [])
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))
    return path


def test_static_and_dynamic_cnns_skip_the_symbolic_pass(tmp_path):
    for batch in (1, "batch"):  # ONNX types and ranks every tensor of both
        assert not _needs_symbolic_shapes(_conv_model(tmp_path / f"{batch}.onnx", batch))
    assert _needs_symbolic_shapes(_conv_model(tmp_path / "custom.onnx", 1, custom=True))


def test_preprocessing_without_the_symbolic_pass_keeps_the_graph(tmp_path):
    source = _conv_model(tmp_path / "model.onnx", "batch")
    ctx = _Ctx()
    target = preprocess(source, tmp_path, ctx)  # in a scratch folder: it writes into "."
    assert target == tmp_path / "preprocessed.onnx" and not ctx.progress.notes
    ops = [n.op_type for n in onnx.load(str(target)).graph.node]
    assert ops == ["Conv", "Relu"]


def test_a_failing_symbolic_pass_falls_back_to_the_plain_one_and_says_so(tmp_path):
    """An op of an unknown domain (ONNX cannot type its output: the symbolic pass is
    asked for) after ReduceL2 -> Expand, where the symbolic pass gives up: the model is
    pre-processed without it, and one note says why."""
    nodes = [helper.make_node("ReduceL2", ["x"], ["n"], axes=[1], keepdims=1),
             helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Expand", ["n", "s"], ["e"]),
             helper.make_node("Div", ["x", "e"], ["y"]),
             helper.make_node("Mystery", ["y"], ["m"], domain="example.custom")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("m", TensorProto.FLOAT, None)])
    source = tmp_path / "normalize.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 13), helper.make_opsetid("example.custom", 1)]), str(source))
    assert _needs_symbolic_shapes(source)
    ctx = _Ctx()
    assert preprocess(source, tmp_path, ctx) == tmp_path / "preprocessed.onnx"
    assert (tmp_path / "preprocessed.onnx").is_file()
    assert len(ctx.progress.notes) == 1
    assert ctx.progress.notes[0].startswith("onnxruntime's symbolic shape inference "
                                            "failed (")
    assert ctx.progress.notes[0].endswith("with ONNX's own shape inference")
