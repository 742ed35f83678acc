"""Issue 38 §2: a run passes when every gated target has something to ship. A variant
that misses a budget is information (said, with the budget and by how much), not a
failure; a gated target with nothing that fits fails the run (exit 1)."""
from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import FAST_EXPORT, FAST_INT8, REPO, pipeline_dict, run_cli, write_pipeline


def _profile(folder, name: str, size_mb: float) -> str:
    """host-cpu's profile under another name, with a model-size budget of `size_mb`."""
    data = yaml.safe_load((REPO / "profiles" / "host-cpu.yaml").read_text())
    data["name"], data["budget"]["model_size_mb"] = name, size_mb
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(data))
    return f"{name}.yaml"


@pytest.mark.runs   # two whole CLI runs: `make test-runs`
def test_a_missed_budget_is_information_and_no_fit_fails_the_run(project):
    # FP32 files (ONNX ~0.09 MB, TFLite ~0.1 MB) over 0.07 MB; the INT8 ONNX file (~0.04) under
    stages = [FAST_EXPORT, {"type": "quantize", "scheme": "int8-static", **FAST_INT8},
              {"type": "export.tflite", "input": "source", "mode": "fp32"},
              {"type": "benchmark", "warmup": 2, "runs": 20, "rounds": 1}]
    targets = [{"profile": _profile(project, "small-cpu", 0.07)},
               {"profile": _profile(project, "tiny-cpu", 0.01), "gate": False}]
    path = write_pipeline(project, pipeline_dict(stages=stages, targets=targets))
    done = run_cli("run", path, "--strict", cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "small-cpu: 03-export.tflite misses model_size_mb 0.0965 MB (over 0.07 MB)" in lines
    assert any(line.startswith("small-cpu: shippable 02-quantize (onnx int8), p90 ")
               for line in lines), lines
    assert any(line.startswith("tiny-cpu: none (no variant meets every budget; closest: ")
               for line in lines), lines
    assert lines[-1].startswith("PASSED: something to ship on every gated target; report: ")
    report = json.loads(next(project.glob("runs/*/report.json")).read_text())
    assert report["passed"] is True
    assert [v["artifact"] for v in report["verdicts"]
            if v["target"] == "small-cpu" and v["status"] == "fail"] == \
        ["01-export.onnx", "baseline-tflite", "03-export.tflite"]

    targets[1]["gate"] = True   # now a gated target has nothing to ship
    path = write_pipeline(project, pipeline_dict(stages=stages, targets=targets))
    done = run_cli("run", path, cwd=project)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert done.stdout.splitlines()[-1].startswith("FAILED: nothing to ship on tiny-cpu (none)")
