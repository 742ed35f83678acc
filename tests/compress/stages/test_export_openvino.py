"""`export.openvino` on the quickstart CNN trained on the digits data: the FP32 ONNX file
and the quantize stage's INT8 QDQ file to OpenVINO IR, checked against onnxruntime, and
measured by host-cpu with OpenVINO (its priority list: ONNX on onnxruntime, IR on
OpenVINO) beside the onnxruntime baseline."""
from __future__ import annotations

import importlib.util

import pytest

import compress
from compress.core.artifacts import artifact_files
from tests.conftest import FAST_INT8, QUICKSTART, pipeline_dict, run_cli, write_pipeline

pytest.importorskip("openvino")

FAST = {"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 1}


def _digits():
    spec = importlib.util.spec_from_file_location("qs_data", QUICKSTART / "data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"calibration": module.calibration(64), "evaluation": module.evaluation()}


def test_ir_variants_are_exported_checked_and_measured_on_openvino(tmp_path, quickstart_onnx):
    result = compress.run(compress.pipeline(
        name="ir", output=str(tmp_path / "runs"), targets=["host-cpu"],
        model={"onnx": str(quickstart_onnx)}, data=_digits(),
        stages=[{"type": "export.openvino", "name": "ir-fp16", "input": "source",
                 "weights": "fp16", "inference_precision": "bf16"},
                {"type": "quantize", "scheme": "int8-static", "name": "int8", "input": "source",
                 **FAST_INT8},
                {"type": "export.openvino", "name": "ir-int8"}, FAST]), quiet=True)
    made = {a.id: a for a in result.artifacts}
    fp16, int8 = made["ir-fp16"], made["ir-int8"]
    assert (fp16.format, fp16.precision, int8.format, int8.precision) == \
        ("openvino", "fp16", "openvino", "int8")
    for artifact in (fp16, int8):
        files = artifact_files(result.run_dir / artifact.path)
        assert [f.suffix for f in files] == [".xml", ".bin"]
        assert artifact.meta["parity"]["samples"] == 16
    assert fp16.meta["ir_weights"] == "fp16" and fp16.meta["inference_precision"] == "bf16"
    assert fp16.meta["parity"]["worst"]["max_abs_error"] < 0.05 * fp16.meta["parity"][
        "worst"]["max_abs_reference"]
    measured = {b["artifact"]: b for b in result.benchmarks}
    assert measured["00-source"]["engine"] == "onnxruntime"
    assert measured["ir-int8"]["engine"] == "openvino"
    assert measured["ir-fp16"]["runtime"]["precision"] == "bf16"     # the named variant
    assert measured["ir-int8"]["runtime"]["precision"] == "f32"
    assert measured["ir-int8"]["metric"]["value"] > 0.9              # accuracy on the digits
    gains = {g["artifact"]: g for g in result.report["gains"]}
    assert gains["ir-int8"]["baseline"] == "00-source"               # onnxruntime FP32


def test_a_torch_model_must_be_exported_to_onnx_first(project):
    path = write_pipeline(project, pipeline_dict(stages=[{"type": "export.openvino"}]))
    result = run_cli("validate", path, cwd=project)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "export the model to ONNX first (export.onnx)" in result.stderr, result.stderr


def test_a_profile_with_engines_auto_measures_each_file_with_the_engine_its_probe_chose(
        tmp_path, quickstart_onnx):
    board = tmp_path / "board.yaml"
    board.write_text("name: board\ndevice: {arch: any}\nruntime: {engines: auto, threads: 2}\n")
    result = compress.run(compress.pipeline(
        name="auto", output=str(tmp_path / "runs"), targets=[str(board)],
        model={"onnx": str(quickstart_onnx)}, data=_digits(),
        stages=[{"type": "quantize", "scheme": "int8-static", **FAST_INT8}, {**FAST, "rounds": 2}]),
        quiet=True)
    base, int8 = result.benchmarks
    # the baseline on onnxruntime, not a probe's choice: the reference is the same everywhere
    assert base["baseline"] and base["engine"] == "onnxruntime" and not base["engine_choice"]
    choice = int8["engine_choice"]
    assert {p["engine"] for p in choice["probes"]} == {"onnxruntime", "openvino"}
    assert int8["engine"] == choice["chosen"] == int8["runtime"]["engine"]
    for bench in (base, int8):
        assert bench["runs"] == 6 and bench["metric"]["value"] > 0.9   # both rounds pooled
    # ... and, timed only, on the other engine that runs it
    [other] = result.report["engine_baselines"]
    assert (other["artifact"], other["engine"], other["runs"]) == ("00-source", "openvino", 6)
    assert other["comparison"] and other["metric"] is None
    [gain] = result.report["gains"]
    base_on = {"onnxruntime": base, "openvino": other}
    assert (gain["baseline"], gain["engine"]) == ("00-source", "onnxruntime")
    same = gain["same_engine"]
    assert same["engine"] == int8["engine"]
    assert same["speedup_p50"] == pytest.approx(
        base_on[int8["engine"]]["latency_ms"]["p50"] / int8["latency_ms"]["p50"])
    report_md = (result.run_dir / "report.md").read_text()
    assert "FP32 baselines on each engine of a target" in report_md
    assert "| board | 00-source | openvino |" in report_md


def test_a_model_quantized_by_nncf_is_converted_to_ir_as_it_is(tmp_path):
    """tests/fixtures/digits_cnn_nncf_int8.onnx: the quickstart CNN quantized by NNCF 3.4
    (make_nncf_fixture.py), given as the source: its int8 layers stay int8 on OpenVINO."""
    from tests.conftest import REPO
    nncf_file = REPO / "tests" / "fixtures" / "digits_cnn_nncf_int8.onnx"
    result = compress.run(compress.pipeline(
        name="nncf-ir", output=str(tmp_path / "runs"), targets=["host-cpu"],
        model={"onnx": str(nncf_file)}, data=_digits(),
        stages=[{"type": "export.openvino", "name": "ir", "input": "source"}, FAST]),
        quiet=True)
    ir = next(a for a in result.artifacts if a.id == "ir")
    assert (ir.format, ir.precision) == ("openvino", "int8")
    assert ir.meta["parity"]["samples"] == 16
    bench = next(b for b in result.benchmarks if b["artifact"] == "ir")
    assert bench["engine"] == "openvino" and bench["metric"]["value"] > 0.9
    convs = {where: group["op_types"].get("Convolution", 0)
             for where, group in bench["placement"]["by_provider"].items()}
    assert sum(n for where, n in convs.items() if where in ("CPU u8", "CPU i8")) >= 2, convs
