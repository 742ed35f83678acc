"""Targets whose accelerator (an execution provider, a LiteRT delegate) is not on the
measuring machine: 'unmeasured' with the reason, never a CPU run reported as the
accelerator. The CPU targets beside them are measured as usual."""
from __future__ import annotations

import json

import pytest

from tests.conftest import pipeline_dict, run_cli, write_pipeline

STAGES = [{"type": "export.onnx"}, {"type": "quantize", "scheme": "int8-static"},
          {"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 1}]


def _report(project) -> dict:
    return json.loads((project / "runs" / "t" / "report.json").read_text())


def test_a_gpu_target_without_its_provider_is_unmeasured(project):
    import onnxruntime
    if "TensorrtExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("TensorRT is installed here: the target would be measured")
    path = write_pipeline(project, pipeline_dict(targets=["host-cpu", "jetson-orin-nano"],
                                                 stages=STAGES))
    child = run_cli("run", path, cwd=project)
    assert child.returncode == 0, child.stderr  # unmeasured does not fail a run...
    report = _report(project)
    assert {b["target"] for b in report["benchmarks"]} == {"host-cpu"}  # no CPU stand-in
    jetson = [v for v in report["verdicts"] if v["target"] == "jetson-orin-nano"]
    assert jetson, "the jetson target still gets verdicts"
    for verdict in jetson:
        if verdict["metric"] == "model_size_mb":
            assert verdict["status"] == "pass"  # a file's size is the same everywhere
        else:
            assert verdict["status"] == "unmeasured"
            assert "TensorrtExecutionProvider" in verdict["reason"]
    fits = [f for f in report["fits"] if f["target"] == "jetson-orin-nano"]
    assert fits and all(f["fits"].startswith("unknown, unmeasured:") for f in fits)
    strict = run_cli("run", path, "--strict", cwd=project)
    assert strict.returncode == 1  # ...but --strict counts it as a failure


def test_an_edge_tpu_target_without_its_delegate_is_unmeasured(project):
    stages = [{"type": "export.tflite"}, {"type": "benchmark", "warmup": 1, "runs": 5,
                                          "rounds": 1}]
    path = write_pipeline(project, pipeline_dict(targets=["coral-edgetpu"], stages=stages))
    child = run_cli("run", path, cwd=project)
    if "libedgetpu" in child.stderr and child.returncode == 0 and _report(project)["benchmarks"]:
        pytest.skip("libedgetpu is installed here: the Edge TPU target was measured")
    assert child.returncode == 0, child.stderr
    report = _report(project)
    assert report["benchmarks"] == []
    reasons = {v["reason"] for v in report["verdicts"] if v["status"] == "unmeasured"}
    assert any("libedgetpu.so.1" in reason for reason in reasons)
