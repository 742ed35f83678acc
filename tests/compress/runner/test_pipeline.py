"""End to end: the digits CNN -> ONNX -> INT8 and -> TFLite -> benchmark -> verdicts -> report."""
import json

import pytest

import compress
from compress.core.artifacts import sha256_file
from tests.conftest import pipeline_dict, run_cli, write_pipeline

REPORT_KEYS = {"pipeline", "manifest", "artifacts", "benchmarks", "verdicts", "passed"}


@pytest.fixture(scope="module")
def finished(quickstart_run):
    return quickstart_run


def test_report_has_every_section(finished):
    folder, _, result = finished
    report = json.loads((result.run_dir / "report.json").read_text())
    assert REPORT_KEYS <= set(report)
    assert report["pipeline"]["name"] == "t" and len(report["pipeline"]["config_sha256"]) == 64
    assert report["manifest"]["packages"]["onnxruntime"]
    # the source, its FP32 TFLite export (the baseline for LiteRT; stage 1 is the ONNX
    # one), then the stages
    assert [a["id"] for a in report["artifacts"]] == [
        "00-source", "baseline-tflite", "01-export.onnx", "02-quantize", "03-export.tflite"]
    assert [a["format"] for a in report["artifacts"]] == ["torch", "tflite", "onnx", "onnx",
                                                         "tflite"]
    # the TFLite stage sets no mode: rpi4's profile asks for full int8
    assert [a["precision"] for a in report["artifacts"]] == ["fp32", "fp32", "fp32", "int8",
                                                            "int8"]
    for artifact in report["artifacts"]:
        assert sha256_file(result.run_dir / artifact["path"]) == artifact["sha256"]
    bench = report["benchmarks"][0]
    assert {"p50", "p90", "p99", "mean"} <= set(bench["latency_ms"])
    assert bench["energy_mj"] is None and bench["energy_note"]
    assert {"name", "value", "baseline", "drop"} <= set(bench["metric"])
    assert bench["load_ms"] > 0 and bench["first_run_ms"] > 0   # the runner's, pooled
    assert "Which variant fits which device" in (result.run_dir / "report.md").read_text()


def test_each_target_measures_the_engines_its_profile_runs(finished):
    _, _, result = finished
    pairs = {(b["artifact"], b["target"], b["baseline"]) for b in result.benchmarks}
    # host-cpu runs both engines; rpi4 runs LiteRT only; each engine's baseline is the
    # source's FP32 export
    assert pairs == {("01-export.onnx", "host-cpu", True), ("02-quantize", "host-cpu", False),
                     ("baseline-tflite", "host-cpu", True), ("baseline-tflite", "rpi4", True),
                     ("03-export.tflite", "host-cpu", False), ("03-export.tflite", "rpi4", False)}
    # against onnxruntime FP32 where the target has it, and FP32 on the variant's engine
    gains = {(g["artifact"], g["target"]): (g["baseline"], g["same_engine"]["baseline"])
             for g in result.report["gains"]}
    assert gains == {("02-quantize", "host-cpu"): ("01-export.onnx", "01-export.onnx"),
                     ("03-export.tflite", "host-cpu"): ("01-export.onnx", "baseline-tflite"),
                     ("03-export.tflite", "rpi4"): ("baseline-tflite", "baseline-tflite")}
    assert not any(b["torch_loaded"] for b in result.benchmarks)
    tflite = next(b for b in result.benchmarks if b["artifact"] == "03-export.tflite")
    assert tflite["runtime"]["engine"] == "litert" and tflite["runtime"]["xnnpack"]
    left_out = {(f["artifact"], f["target"]): f["fits"] for f in result.report["fits"]}
    assert left_out[("02-quantize", "rpi4")].startswith("not measured: rpi4 runs litert only")


def test_int8_keeps_accuracy_on_held_out_digits(finished):
    _, _, result = finished
    int8 = next(b for b in result.benchmarks if b["artifact"] == "02-quantize")
    fp32 = next(b for b in result.benchmarks if b["artifact"] == "01-export.onnx")
    assert int8["metric"]["samples"] == 360
    assert fp32["metric"]["value"] == pytest.approx(int8["metric"]["baseline"])
    assert int8["metric"]["drop"] <= 0.01
    assert int8["size_bytes"] < 0.5 * fp32["size_bytes"]


def test_rpi4_verdicts_are_off_target_on_this_host(finished):
    _, _, result = finished
    rpi4 = {v.metric: v.status for v in result.verdicts
            if v.target == "rpi4" and v.artifact == "03-export.tflite"}
    assert rpi4["latency_p90_ms"] == "off-target"
    assert rpi4["model_size_mb"] == "pass"
    assert result.passed  # off-target does not fail without --strict


@pytest.mark.runs  # a whole pipeline run again: make test-runs
def test_rerun_reuses_finished_stages_and_force_redoes_them(finished):
    _, path, result = finished
    record = result.run_dir / "02-quantize" / "stage.json"
    before = record.stat().st_mtime_ns
    compress.run(path)
    assert record.stat().st_mtime_ns == before
    compress.run(path, force=True)
    assert record.stat().st_mtime_ns != before


@pytest.mark.runs  # a whole pipeline run again: make test-runs
def test_tampered_or_partial_stage_output_is_not_trusted(finished):
    _, path, result = finished
    model = result.run_dir / "02-quantize" / "model.onnx"
    with open(model, "ab") as fh:
        fh.write(b"corrupted")  # as if a killed run had left a half-written file
    stale = result.run_dir / ".02-quantize.partial"
    stale.mkdir()
    again = compress.run(path)
    assert not stale.exists()
    int8 = next(a for a in again.artifacts if a.id == "02-quantize")
    assert sha256_file(model) == int8.sha256


@pytest.mark.runs  # two whole CLI runs: `make test-runs`
def test_exit_code_1_when_a_target_has_nothing_to_ship(project):
    (project / "tight.yaml").write_text(
        "name: tight\ndevice: {arch: any}\nruntime: {threads: 1}\nbudget: {latency_p90_ms: 0.000001}\n")
    path = write_pipeline(project, pipeline_dict(targets=["tight.yaml"]))
    child = run_cli("run", path, "--quiet", cwd=project)
    assert child.returncode == 1, child.stderr
    assert "01-export.onnx (baseline) misses latency_p90_ms " in child.stdout
    assert child.stdout.splitlines()[-1].startswith("FAILED: nothing to ship on tight (none)")
    report = json.loads((project / "runs" / "t" / "report.json").read_text())
    assert report["passed"] is False

    ungated = write_pipeline(project, pipeline_dict(targets=[{"profile": "tight.yaml", "gate": False}]))
    assert run_cli("run", ungated, "--quiet", cwd=project).returncode == 0
    # --strict with and without a meter: tests/compress/report/test_report_details.py
