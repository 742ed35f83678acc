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
    return result.artifacts[-1].meta, (result.run_dir / "report.md").read_text()


def test_int8_static_names_the_lstm_it_leaves_float_and_its_time(lstm_project):
    meta, said = _run(lstm_project, "int8-static")
    [lstm] = [layer for layer in meta["float_layers"] if layer["op"] == "LSTM"]
    assert "no int8 LSTM" in lstm["why"] and 0 < lstm["time_share"] < 1
    assert "layers that stayed float" in said
    assert f"{lstm['time_share']:.0%} of the file's time" in said


def test_int8_dynamic_quantizes_the_lstm(lstm_project):
    meta, _ = _run(lstm_project, "int8-dynamic")
    assert meta["ops"].get("DynamicQuantizeLSTM") == 1
    assert not [layer for layer in meta.get("float_layers", []) if layer["op"] == "LSTM"]
