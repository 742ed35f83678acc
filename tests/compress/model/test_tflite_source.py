"""A float .tflite model as the source: quantized by ai-edge-quantizer (full int8 with
calibration, dynamic-range int8, fp16) and benchmarked beside the original, with parity
and the metric through LiteRT. The model is the trained digits CNN converted by
tests/fixtures/make_tflite_fixtures.py; its inputs are read from the file."""
from __future__ import annotations

import shutil

import pytest

import compress
from tests.conftest import REPO, pipeline_dict, write_pipeline

pytest.importorskip("ai_edge_quantizer", reason="ai-edge-quantizer is not installed")
FP32 = REPO / "tests" / "fixtures" / "digits_cnn_fp32.tflite"


@pytest.fixture(scope="module")
def finished(tmp_path_factory, digits_checkpoint):
    from tests.conftest import fill_project
    folder = fill_project(tmp_path_factory.mktemp("tflite_source"), digits_checkpoint)
    shutil.copy(FP32, folder / "digits.tflite")
    stages = [{"type": "quantize", "scheme": "int8-static", "name": "int8"},
              {"type": "quantize", "scheme": "int8-dynamic", "input": "source",
               "name": "dynamic"},
              {"type": "quantize", "scheme": "fp16", "input": "source", "name": "fp16"},
              {"type": "benchmark", "warmup": 2, "runs": 20, "rounds": 1}]
    path = write_pipeline(folder, pipeline_dict(model={"tflite": "digits.tflite"},
                                                stages=stages, targets=["host-cpu"]))
    return compress.run(path)


def test_each_scheme_makes_the_tflite_it_promises(finished):
    by_id = {a.id: a for a in finished.artifacts}
    assert by_id["00-source"].format == "tflite" and by_id["00-source"].precision == "fp32"
    assert [by_id[n].precision for n in ("int8", "dynamic", "fp16")] == ["int8", "int8",
                                                                        "fp16"]
    assert not by_id["int8"].meta["tensors"]["float32_tensors"]   # full integer
    assert by_id["int8"].meta["bias_correction"]["layers_corrected"] > 0
    assert by_id["fp16"].meta["tensors"]["dtypes"].get("float16")
    for name in ("int8", "dynamic", "fp16"):
        assert by_id[name].size_bytes < by_id["00-source"].size_bytes
        assert by_id[name].meta["parity"]["worst"]["cosine"] > 0.99


def test_benchmarked_beside_the_original_with_the_metric_through_litert(finished):
    rows = {b["artifact"]: b for b in finished.benchmarks}
    assert set(rows) == {"00-source", "int8", "dynamic", "fp16"}
    assert rows["00-source"]["baseline"] and rows["00-source"]["runtime"]["engine"] == "litert"
    for name in ("int8", "dynamic", "fp16"):
        metric = rows[name]["metric"]
        assert metric["name"] == "accuracy" and metric["drop"] <= 0.02, metric
        assert metric["baseline"] == pytest.approx(rows["00-source"]["metric"]["value"])
    gains = {g["artifact"]: g["baseline"] for g in finished.report["gains"]}
    assert gains == {"int8": "00-source", "dynamic": "00-source", "fp16": "00-source"}


@pytest.mark.parametrize("setting, ranges", [
    ({}, "auto"), ({"calibration": "minmax"}, "minmax"),
    ({"calibration": "mean_minmax"}, "average")])
def test_the_calibration_setting_picks_the_tflite_ranges(setting, ranges):
    from compress.quant.tflite.quantize import _ranges
    from compress.quant.schemes.int8_static import Int8Static
    assert _ranges(Int8Static(scheme="int8-static", **setting)) == ranges


def test_a_calibration_tflite_cannot_take_is_named():
    from compress.errors import ConfigError
    from compress.quant.tflite.quantize import _ranges
    from compress.quant.schemes.int8_static import Int8Static
    with pytest.raises(ConfigError, match="calibration: entropy is for ONNX models; a TFLite "
                                          "model takes minmax or mean_minmax"):
        _ranges(Int8Static(scheme="int8-static", calibration="entropy"))
