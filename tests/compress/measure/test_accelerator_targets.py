"""Targets whose accelerator (an execution provider, a LiteRT delegate) is not on the
measuring machine: 'unmeasured' with the reason, never a CPU run reported as the
accelerator. The CPU targets beside them are measured as usual. Such a target has nothing
known to ship: gated, it fails the run (exit 1, saying why); `gate: false` reports it."""
from __future__ import annotations

import json

import pytest

from tests.conftest import FAST_EXPORT, FAST_INT8, pipeline_dict, run_cli, write_pipeline

STAGES = [FAST_EXPORT, {"type": "quantize", "scheme": "int8-static", **FAST_INT8},
          {"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 1}]


# a whole pipeline per accelerator target (~55 s together): make test-runs
pytestmark = pytest.mark.runs


def _report(project) -> dict:
    return json.loads((project / "runs" / "t" / "report.json").read_text())


def test_a_gpu_target_without_its_provider_is_unmeasured(project):
    import onnxruntime
    if "TensorrtExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("TensorRT is installed here: the target would be measured")
    path = write_pipeline(project, pipeline_dict(targets=["host-cpu", "jetson-orin-nano"],
                                                 stages=STAGES))
    child = run_cli("run", path, cwd=project)
    assert child.returncode == 1, child.stderr  # nothing known to ship there...
    assert child.stdout.splitlines()[-1].startswith(
        "FAILED: nothing to ship on jetson-orin-nano (none)")
    assert "jetson-orin-nano: none (no variant was measured on this target: " in child.stdout
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
    assert fits and all(f["fits"] == "unknown, unmeasured" for f in fits)
    # the reason, once per target and budget
    assert "TensorrtExecutionProvider" in \
        report["unmeasured_reasons"]["jetson-orin-nano"]["latency_p90_ms"]
    path = write_pipeline(project, pipeline_dict(
        targets=["host-cpu", {"profile": "jetson-orin-nano", "gate": False}], stages=STAGES))
    reported = run_cli("run", path, cwd=project)
    assert reported.returncode == 0, reported.stderr  # ...reported only: host-cpu decides


def test_an_edge_tpu_target_without_its_delegate_is_unmeasured(project):
    stages = [{"type": "export.tflite"}, {"type": "benchmark", "warmup": 1, "runs": 5,
                                          "rounds": 1}]
    path = write_pipeline(project, pipeline_dict(targets=["coral-edgetpu"], stages=stages))
    child = run_cli("run", path, cwd=project)
    if "libedgetpu" in child.stderr and child.returncode == 0 and _report(project)["benchmarks"]:
        pytest.skip("libedgetpu is installed here: the Edge TPU target was measured")
    assert child.returncode == 1, child.stderr   # nothing known to ship on the Edge TPU
    report = _report(project)
    assert report["benchmarks"] == []
    reasons = {v["reason"] for v in report["verdicts"] if v["status"] == "unmeasured"}
    assert any("libedgetpu.so.1" in reason for reason in reasons)


def test_the_report_says_where_each_op_ran_on_an_accelerated_target(project):
    # LiteRT with XNNPACK is the accelerated path every machine has: its placement is real.
    stages = [{"type": "export.tflite", "mode": "fp32"},
              {"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 2}]
    path = write_pipeline(project, pipeline_dict(targets=["rpi4"], stages=stages))
    child = run_cli("run", path, cwd=project)
    assert child.returncode == 0, child.stderr
    bench = _report(project)["benchmarks"][0]
    placement = bench["placement"]
    assert placement["engine"] == "litert"
    assert placement["by_provider"]["XNNPACK"]["nodes"] >= 1
    shares = sum(part["flops_share"] for part in placement["by_provider"].values())
    assert abs(shares - 1) < 1e-6
    text = (project / "runs" / "t" / "report.md").read_text()
    assert "## Where each op ran" in text and "XNNPACK" in text


def test_a_litert_gpu_target_without_a_gpu_is_unmeasured(project):
    from tests.runtimes.test_litert_gpu import _gpu_here
    if _gpu_here():
        pytest.skip("LiteRT found a GPU here: the target would be measured")
    profile = project / "litert-gpu.yaml"
    profile.write_text("name: litert-gpu\ndevice: {arch: any}\nruntime:\n  engines: [litert]\n"
                       "  delegate: gpu\n  delegate_options: {enforce_f32: true}\n"
                       "budget: {latency_p90_ms: 50, model_size_mb: 5}\n")
    stages = [{"type": "export.tflite", "mode": "fp32"},
              {"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 1}]
    path = write_pipeline(project, pipeline_dict(
        targets=["host-cpu", {"profile": str(profile), "gate": False}], stages=stages))
    child = run_cli("run", path, cwd=project)
    assert child.returncode == 0, child.stderr
    report = _report(project)
    assert {b["target"] for b in report["benchmarks"]} == {"host-cpu"}
    gpu = [v for v in report["verdicts"] if v["target"] == "litert-gpu"]
    latency = next(v for v in gpu if v["metric"] == "latency_p90_ms")
    assert latency["status"] == "unmeasured"
    assert "LiteRT GPU accelerator cannot compile" in latency["reason"]
