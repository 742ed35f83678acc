"""Layers that stay float in an INT8 file are named with why and their measured share of
the file's time (compress/quant/float_layers.py): an LSTM reading the digits' rows, as
int8-static leaves it (float) and int8-dynamic quantizes it."""
from __future__ import annotations

import numpy as np
import pytest

import compress
from tests.conftest import pipeline_dict, write_pipeline


@pytest.fixture(scope="module")
def lstm_project(tmp_path_factory):
    """An LSTM over the 8 rows of each digits scan, trained for a few seconds, as ONNX."""
    import torch
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    rows = torch.tensor(x.reshape(-1, 8, 8) / 16.0, dtype=torch.float32)

    class Reader(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(8, 48, batch_first=True)
            self.head = torch.nn.Linear(48, 10)

        def forward(self, scan):
            return self.head(self.lstm(scan)[0][:, -1])

    torch.manual_seed(0)
    model = Reader()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(80):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(rows[:1400]), torch.tensor(y[:1400])).backward()
        optimizer.step()
    folder = tmp_path_factory.mktemp("lstm")
    torch.onnx.export(model.eval(), (rows[:1],), str(folder / "reader.onnx"), dynamo=False,
                      input_names=["scan"], output_names=["logits"])
    np.savez(folder / "calib.npz", scan=rows[:128].numpy())
    np.savez(folder / "eval.npz", scan=rows[1400:1600].numpy(), labels=y[1400:1600])
    return folder


def _run(folder, scheme: str):
    stages = [{"type": "quantize", "scheme": scheme}]
    data = pipeline_dict(name=scheme, model={"onnx": "reader.onnx"}, stages=stages,
                         data={"calibration": "calib.npz", "evaluation": "eval.npz"})
    result = compress.run(write_pipeline(folder, data, f"{scheme}.yaml"))
    html = (result.run_dir / "report.html").read_text()
    return result.artifacts[-1].meta, (result.run_dir / "report.md").read_text() + html


def test_int8_static_names_the_lstm_it_leaves_float_and_its_time(lstm_project):
    meta, said = _run(lstm_project, "int8-static")
    [lstm] = [layer for layer in meta["float_layers"] if layer["op"] == "LSTM"]
    assert "no int8 LSTM" in lstm["why"] and 0 < lstm["time_share"] < 1
    assert "layers that stayed float" in said and "share of the file&#x27;s time" in said
    assert f"{lstm['time_share']:.0%} of the file's time" in said


def test_int8_dynamic_quantizes_the_lstm(lstm_project):
    meta, _ = _run(lstm_project, "int8-dynamic")
    assert meta["ops"].get("DynamicQuantizeLSTM") == 1
    assert not [layer for layer in meta.get("float_layers", []) if layer["op"] == "LSTM"]


@pytest.fixture(scope="module")
def if_project(tmp_path_factory):
    """A logistic regression fitted to the digits, its layers inside an If on a rate input
    (as a speech model branches on its sample rate): onnxruntime's quantizers do not enter
    subgraphs, so its "INT8" file holds no int8 op."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    x, y = load_digits(return_X_y=True)
    x = (x / 16).astype(np.float32)
    fitted = LogisticRegression(max_iter=2000).fit(x[:1200], y[:1200])
    weights = [numpy_helper.from_array(fitted.coef_.T.astype(np.float32), "W"),
               numpy_helper.from_array(fitted.intercept_.astype(np.float32), "B")]
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])

    def branch(name):
        nodes = [helper.make_node("MatMul", ["x", "W"], [f"{name}_z"]),
                 helper.make_node("Add", [f"{name}_z", "B"], ["logits"])]
        return helper.make_graph(nodes, name, [], [logits])
    rate = numpy_helper.from_array(np.array(16000, np.int64), "rate16k")
    nodes = [helper.make_node("Equal", ["sr", "rate16k"], ["is16k"]),
             helper.make_node("If", ["is16k"], ["logits"], then_branch=branch("then"),
                              else_branch=branch("other"))]
    graph = helper.make_graph(nodes, "reader", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64]),
        helper.make_tensor_value_info("sr", TensorProto.INT64, [])], [logits], [rate, *weights])
    folder = tmp_path_factory.mktemp("if")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              folder / "reader.onnx")
    np.savez(folder / "calib.npz", x=x[:64], sr=np.full(64, 16000, np.int64))
    return folder


def test_an_int8_file_with_nothing_quantized_says_so(if_project):
    stages = [{"type": "quantize", "scheme": "int8-static"}]
    data = pipeline_dict(name="if", model={"onnx": "reader.onnx"}, stages=stages,
                         data={"calibration": "calib.npz"})
    result = compress.run(write_pipeline(if_project, data, "if.yaml"))
    said = result.artifacts[-1].meta["quantized_nothing"]
    assert said.startswith("nothing was quantized") and "If/Loop/Scan subgraphs" in said
    assert "nothing quantized" in (result.run_dir / "report.md").read_text()
    from compress.report.recommend import _files
    [made] = [a for a in result.artifacts if a.id != "00-source"]
    assert _files([made], result.run_dir, set())[made.id]["precision"] == \
        "fp32 (nothing was quantized)"
