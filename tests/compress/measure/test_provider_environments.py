"""Execution providers that ship their own `onnxruntime` module, measured on this CPU as
targets with a Python of their own (`python:` on the target):
- OpenVINO (onnxruntime-openvino, device_type CPU),
- Qualcomm QNN (onnxruntime-qnn) with its HTP backend, which on x86-64 is Qualcomm's
  simulator: real placement and numerics, timings labelled as simulation.
`make accelerator-envs` makes the environments (.venv-openvino, .venv-qnn); CI does; each
test skips with the reason where its environment is missing."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import FAST_EXPORT, FAST_INT8, REPO, pipeline_dict, run_cli, write_pipeline

ENVIRONMENTS = {
    "OpenVINOExecutionProvider": ("openvino", "onnxruntime", "device_type: CPU"),
    "QNNExecutionProvider": ("qnn", "onnxruntime_qnn", "backend_type: htp"),
}


def _python_with(provider: str) -> str:
    name, module, _ = ENVIRONMENTS[provider]
    python = os.environ.get(f"EDGE_COMPRESS_{name.upper()}_PYTHON",
                            str(REPO / f".venv-{name}" / "bin" / "python"))
    if not os.path.exists(python):
        pytest.skip(f"no {name} environment at {python} (make {name}-env)")
    probe = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"{python} cannot import {module}: {probe.stderr[-300:]}")
    return python


@pytest.mark.runs  # a whole pipeline measured from another environment: `make test-runs`
@pytest.mark.parametrize("provider", list(ENVIRONMENTS))
def test_a_provider_from_its_own_environment_measures_beside_the_cpu(project, provider):
    python = _python_with(provider)
    option = ENVIRONMENTS[provider][2]
    board = project / "accelerated.yaml"
    board.write_text("name: accelerated\ndevice: {arch: any}\n"
                     "runtime:\n  engines: [onnxruntime]\n  threads: 2\n  providers:\n"
                     f"    - {{name: {provider}, options: {{{option}}}}}\n"
                     "budget: {latency_p90_ms: 1000, accuracy_drop: 0.02}\n")
    targets = ["host-cpu", {"profile": str(board), "python": python}]
    stages = [FAST_EXPORT, {"type": "quantize", "scheme": "int8-static", **FAST_INT8},
              {"type": "benchmark", "warmup": 2, "runs": 20, "rounds": 1}]
    path = write_pipeline(project, pipeline_dict(targets=targets, stages=stages))
    child = run_cli("run", path, cwd=project)
    assert child.returncode == 0, child.stderr
    report = json.loads((project / "runs" / "t" / "report.json").read_text())
    refused = [reason for reason in report["unmeasured_reasons"].get("accelerated", {}).values()
               if "could not compile" in reason]
    if refused:  # measured on AMD EPYC: QNN's HTP simulator cannot finalize this graph
        pytest.skip(f"{provider} cannot compile the model on this CPU: {refused[0][:300]}")
    by_target = {}
    for bench in report["benchmarks"]:
        by_target.setdefault(bench["target"], {})[bench["artifact"]] = bench
    assert set(by_target) == {"host-cpu", "accelerated"}
    for artifact, bench in by_target["accelerated"].items():
        assert bench["runtime"]["providers"][0] == provider
        reference = by_target["host-cpu"][artifact]["metric"]["value"]
        assert abs(bench["metric"]["value"] - reference) <= 0.02  # same model, same answers
    latency = {v["artifact"]: v for v in report["verdicts"]
               if v["target"] == "accelerated" and v["metric"] == "latency_p90_ms"}
    if provider == "QNNExecutionProvider":  # the HTP simulator's timing is no device's
        assert all(v["status"] == "off-target" and "simulated" in v["reason"]
                   for v in latency.values())
    else:
        assert all(v["status"] == "pass" for v in latency.values())


def test_onnxruntime_gpu_runs_on_the_gpu_or_says_it_did_not_start(tmp_path):
    """The real onnxruntime-gpu (.venv-gpu, `make gpu-env`; EDGE_COMPRESS_GPU_PYTHON):
    with CUDA's pip libraries preloaded, on a machine without an NVIDIA driver the CUDA
    provider fails at libcuda and the runner says so (exit 3) instead of timing the CPU;
    with a GPU it measures on it."""
    python = os.environ.get("EDGE_COMPRESS_GPU_PYTHON", str(REPO / ".venv-gpu" / "bin" / "python"))
    if not os.path.exists(python):
        pytest.skip(f"no onnxruntime-gpu environment at {python} (make gpu-env)")
    from tests.runtimes.test_placement import tiny_cnn_onnx
    model = tiny_cnn_onnx(tmp_path / "cnn.onnx")
    child = subprocess.run(
        [python, "-m", "runtimes", "bench", model, "--provider", "CUDAExecutionProvider",
         "--runs", "3", "--warmup", "1", "--meter", "none", "--placement", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    if child.returncode == 0:
        result = json.loads(child.stdout.strip().splitlines()[-1])
        assert result["runtime"]["providers"][0] == "CUDAExecutionProvider"
        assert "CUDAExecutionProvider" in result["placement"]["by_provider"]
        return
    assert child.returncode == 3, child.stderr[-2000:]
    assert "CUDAExecutionProvider is installed but did not start" in child.stderr
    assert "libcuda.so" in child.stderr      # every library but the driver's was found
    assert child.stdout == ""
