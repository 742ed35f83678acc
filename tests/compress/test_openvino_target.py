"""onnxruntime's OpenVINO execution provider on this CPU, as a target measured by its own
Python environment (onnxruntime-openvino ships the same `onnxruntime` module, so it
cannot share one with onnxruntime). `make openvino-env` makes that environment; CI does;
the tests skip with the reason where it is missing."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import REPO, pipeline_dict, run_cli, write_pipeline

OPENVINO_PYTHON = os.environ.get("EDGE_COMPRESS_OPENVINO_PYTHON",
                                 str(REPO / ".venv-openvino" / "bin" / "python"))


@pytest.fixture(scope="module")
def openvino_python() -> str:
    if not os.path.exists(OPENVINO_PYTHON):
        pytest.skip(f"no OpenVINO environment at {OPENVINO_PYTHON} (make openvino-env)")
    probe = subprocess.run([OPENVINO_PYTHON, "-c", "import onnxruntime as o; "
                            "print('OpenVINOExecutionProvider' in o.get_available_providers())"],
                           capture_output=True, text=True)
    if probe.stdout.strip() != "True":
        pytest.skip(f"{OPENVINO_PYTHON} has no OpenVINO execution provider: {probe.stderr[-300:]}")
    return OPENVINO_PYTHON


def test_the_openvino_provider_measures_on_this_cpu(project, openvino_python):
    board = project / "openvino-cpu.yaml"
    board.write_text("name: openvino-cpu\ndevice: {arch: any}\n"
                     "runtime:\n  engines: [onnxruntime]\n  threads: 2\n  providers:\n"
                     "    - {name: OpenVINOExecutionProvider, options: {device_type: CPU}}\n"
                     "budget: {accuracy_drop: 0.02}\n")
    targets = ["host-cpu", {"profile": str(board), "python": openvino_python}]
    stages = [{"type": "export.onnx"}, {"type": "quantize", "scheme": "int8-static"},
              {"type": "benchmark", "warmup": 2, "runs": 20, "rounds": 1}]
    path = write_pipeline(project, pipeline_dict(targets=targets, stages=stages))
    child = run_cli("run", path, cwd=project)
    assert child.returncode == 0, child.stderr
    report = json.loads((project / "runs" / "t" / "report.json").read_text())
    by_target = {}
    for bench in report["benchmarks"]:
        by_target.setdefault(bench["target"], {})[bench["artifact"]] = bench
    assert set(by_target) == {"host-cpu", "openvino-cpu"}
    for artifact, bench in by_target["openvino-cpu"].items():
        assert bench["runtime"]["providers"][0] == "OpenVINOExecutionProvider"
        reference = by_target["host-cpu"][artifact]["metric"]["value"]
        assert abs(bench["metric"]["value"] - reference) <= 0.02  # same model, same answers
