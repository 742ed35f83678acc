"""A library failing inside itself on the user's model is exit 2, named (compress/core/
library_errors.py); our own bug stays exit 3. Real failures of the real libraries, on
small models they run but cannot quantize or convert:

    onnxruntime        a MatMul with an empty (4 x 0) weight: quantize_dynamic and
                       quantize_static fail computing its scale (onnxruntime runs it)
    OpenVINO           a Det node: onnxruntime runs it, OpenVINO has no conversion rule
    ai-edge-quantizer  two tensors of one name in a .tflite file (LiteRT runs it; the
                       quantizer assumes names are unique)
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compress import cli
from compress.core.library_errors import blame_library, raised_inside, said, where
from compress.errors import ModelError
from tests.compress.runner.test_bad_input_inprocess import check_clean_failure, check_run_dir
from tests.conftest import pipeline_dict, write_pipeline


def _empty_weight_model():
    from onnx import TensorProto, helper, numpy_helper
    weight = numpy_helper.from_array(np.ones((4, 0), np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="fc")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 0))], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _det_model():
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("Det", ["x"], ["y"], name="det")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 3))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1,))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _save_onnx(make):
    def save(project: Path) -> dict:
        import onnx
        onnx.save(make(), str(project / "given.onnx"))
        return {"onnx": "given.onnx"}
    return save


def _duplicate_names(project: Path) -> dict:
    """The digits CNN as a .tflite file whose first two activations share one name."""
    from tests.fixtures.tflite_forms import read, write
    model = read()
    tensors = model.subgraphs[0].tensors
    tensors[12].name = tensors[13].name = b"features/relu"
    write(model, project / "given.tflite")
    return {"tflite": "given.tflite"}


def _calibration(project: Path) -> dict:
    np.savez(project / "cal.npz", x=np.random.default_rng(0).random((8, 4), np.float32))
    return {"calibration": "cal.npz"}


# (id, the model, its data, the stage, the library's module, what the message names)
CASES = [
    ("onnxruntime-quantize-dynamic", _save_onnx(_empty_weight_model), None,
     {"type": "quantize", "scheme": "int8-dynamic"}, "onnxruntime",
     ("stage 1 (quantize): onnxruntime ", "(quantize_dynamic) at node 'fc' (MatMul)",
      "tensor 'W'", "ValueError", "exclude_nodes", "github.com/microsoft/onnxruntime")),
    ("onnxruntime-quantize-static", _save_onnx(_empty_weight_model), _calibration,
     {"type": "quantize", "scheme": "int8-static"}, "onnxruntime",
     ("(quantize_static) at node 'fc' (MatMul)", "scheme: int8-dynamic")),
    ("openvino-convert", _save_onnx(_det_model), None, {"type": "export.openvino"},
     "openvino", ("stage 1 (export.openvino): OpenVINO ", "(openvino.convert_model) at op Det-17",
                  "No conversion rule found", "leave out export.openvino")),
    ("ai-edge-quantizer-duplicate-names", _duplicate_names, None,
     {"type": "quantize", "scheme": "int8-dynamic"}, "ai_edge_quantizer",
     ("ai-edge-quantizer ", "at tensor 'features/relu'", "is not unique", "fp16")),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_library_failing_on_the_model_is_bad_input(tmp_path, case, capsys, monkeypatch):
    _, model, data, stage, module, expects = case
    pytest.importorskip(module)
    monkeypatch.chdir(tmp_path)
    from compress.runner import crash
    monkeypatch.setattr(crash, "_run_dir", None)
    pipeline = write_pipeline(tmp_path, pipeline_dict(
        model=model(tmp_path), data=data(tmp_path) if data else {}, targets=[], stages=[stage]))
    capsys.readouterr()
    code = cli.main(["run", str(pipeline), "--quiet"])
    out, err = capsys.readouterr()
    check_clean_failure(code, out, err, list(expects), absent=("crash-",))
    assert err.count("\n") == 1, err   # one paragraph
    check_run_dir(tmp_path, ("00-source",))


def test_the_seam_names_the_library_its_version_and_the_node(tmp_path):
    import onnx
    import onnxruntime
    from onnxruntime.quantization import quantize_dynamic
    onnx.save(_empty_weight_model(), str(tmp_path / "m.onnx"))
    with pytest.raises(ModelError) as raised:
        with blame_library("onnxruntime", what="quantize_dynamic", hint="try this"):
            quantize_dynamic(str(tmp_path / "m.onnx"), str(tmp_path / "q.onnx"), per_channel=True)
    text = str(raised.value)
    assert text.startswith(f"onnxruntime {onnxruntime.__version__} failed on this model "
                           "(quantize_dynamic) at node 'fc' (MatMul), tensor 'W': ValueError")
    assert "Try: try this; simplify or re-export" in text
    assert isinstance(raised.value.__cause__, ValueError)


def test_our_own_bug_in_a_callback_the_library_calls_stays_a_bug(tmp_path):
    """onnxruntime's calibration calls our data reader; an exception raised there is ours,
    though onnxruntime's frames are above it: not turned into bad input."""
    import onnx
    from onnxruntime.quantization import quantize_static
    from compress.quant.ort_int8 import _Reader
    onnx.save(_empty_weight_model(), str(tmp_path / "m.onnx"))
    broken = _Reader([{"x": np.ones((1, 4), np.float32)}], advance=None)  # not callable
    with pytest.raises(TypeError, match="not callable"):
        with blame_library("onnxruntime", what="quantize_static"):
            quantize_static(str(tmp_path / "m.onnx"), str(tmp_path / "q.onnx"), broken)


def test_exceptions_of_no_library_named_are_left_alone():
    def ours():
        raise ValueError("a bug")
    with pytest.raises(ValueError, match="a bug"):
        with blame_library("onnxruntime", what="anything"):
            ours()
    with pytest.raises(ImportError):   # a broken install, not the model
        with blame_library("onnxruntime", what="anything"):
            import onnxruntime.no_such_module  # noqa: F401
    try:
        np.concatenate([])               # numpy's, called by us: not onnxruntime's
    except ValueError as exc:
        assert raised_inside(exc, ["onnxruntime"]) is None


@pytest.mark.parametrize("message, expected", [
    ("[ONNXRuntimeError] : 1 : FAIL : Node (conv_3) Op (Conv) [ShapeInferenceError] bad",
     "node 'conv_3' (Conv)"),
    ("While validating ONNX node '<Node(MatMul): y>': Check failed", "node 'y' (MatMul)"),
    ("Summary:\n-- No conversion rule found for operations: Det-17, Foo-1",
     "op Det-17, Foo-1"),
    ("Tensor name features/relu is not unique in the model", "tensor 'features/relu'"),
    ("something else entirely", ""),
])
def test_where_reads_the_node_op_or_tensor_from_the_message(message, expected):
    assert where(message) == expected


def test_said_keeps_the_library_s_words_without_its_cpp_locations():
    exc = RuntimeError("Check 'false' failed at src/frontends/x/report.cpp:151:\n"
                       "FrontEnd API failed with OpConversionFailure:\n"
                       "Model wasn't fully converted.\n")
    assert said(exc) == "RuntimeError: Model wasn't fully converted"
