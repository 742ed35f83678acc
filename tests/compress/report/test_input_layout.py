""""What to ship" says the input's layout as the file has it: NHWC, NCHW, or (not a 4-D
image input) its shape."""
from __future__ import annotations

from pathlib import Path

import pytest

from compress import cli
from compress.report import decide
from compress.report.recommend import input_layout
from tests.conftest import pipeline_dict, write_pipeline


@pytest.mark.parametrize("shape, channels_last, expected", [
    ([1, 3, 224, 224], None, "NCHW"),
    ([1, 224, 224, 3], None, "NHWC"),
    ([1, 8, 8, 1], None, "NHWC"),
    ([1, 1, 8, 8], None, "NCHW"),
    ([None, 3, None, None], None, "NCHW"),     # dynamic batch and size
    ([1, 64, 40], None, None),                 # a spectrogram: no image layout
    ([1, 3, 8, 3], None, None),                # both axes could be channels: not said
    ([1, 16, 16, 16], None, None),             # a feature map: neither is
    ([1, 3, 8, 3], True, "NHWC"),              # the stage that made it knows
    ([1, 8, 8, 1], False, "NCHW"),
    ([1, 64, 40], True, None),                 # channels_last turns 4-D inputs only
])
def test_the_layout_is_read_from_the_shape_unless_the_artifact_says(shape, channels_last,
                                                                    expected):
    assert input_layout(shape, channels_last) == expected


def test_an_input_without_an_image_layout_is_given_by_its_shape():
    rec = {"feeding": {"name": "mel", "layout": None, "dtype": "float32",
                       "shape": [None, 64, 40], "scale": None, "zero_point": None}}
    assert decide._feeding_text(rec["feeding"]) == "[?, 64, 40] float32 input"


def _nhwc_tflite(path: Path) -> Path:
    """The digits CNN as a TFLite file that takes NHWC images ([1, 8, 8, 1]), as a
    TensorFlow-converted model does: litert-torch's reshape from NCHW at its input removed."""
    from tests.fixtures.tflite_forms import read, write
    model = read()
    graph = model.subgraphs[0]
    reshape = graph.operators.pop(0)
    graph.inputs = [reshape.outputs[0]]
    model.signatureDefs[0].inputs[0].tensorIndex = int(reshape.outputs[0])
    return write(model, path)


def test_what_to_ship_says_nhwc_for_an_nhwc_tflite_model(tmp_path, capsys, monkeypatch):
    pytest.importorskip("ai_edge_litert")
    monkeypatch.chdir(tmp_path)
    _nhwc_tflite(tmp_path / "nhwc.tflite")
    pipeline = write_pipeline(tmp_path, pipeline_dict(
        model={"tflite": "nhwc.tflite"}, data={}, targets=["host-cpu"],
        stages=[{"type": "benchmark", "warmup": 1, "runs": 3, "rounds": 1}]))
    assert cli.main(["run", str(pipeline), "--quiet"]) == 0, capsys.readouterr().err
    report = (tmp_path / "runs" / pipeline_dict()["name"] / "report.md").read_text()
    ship = report.split("## What to ship", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in ship.splitlines() if line.startswith("| host-cpu |"))
    assert "(tflite fp32, on litert)" in row, row
    [fed] = [line for line in ship.splitlines() if "input" in line and line.startswith("- ")]
    assert fed.endswith("(host-cpu): NHWC float32 input"), fed
