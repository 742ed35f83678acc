"""quant_pre_process runs its symbolic shape inference only where ONNX's own inference
leaves a tensor's type or rank unknown (the quantizer reads only those)."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from compress.quant.ort_int8 import _needs_symbolic_shapes, _preprocess


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
    target = _preprocess(source, tmp_path / "pre.onnx", ctx)
    assert target == tmp_path / "pre.onnx" and not ctx.progress.notes
    ops = [n.op_type for n in onnx.load(str(target)).graph.node]
    assert ops == ["Conv", "Relu"]
