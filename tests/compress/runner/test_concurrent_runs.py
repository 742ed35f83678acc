"""Two runs of one pipeline into one folder at the same time: the second waits for the
first (saying so) and reuses what it made; neither deletes the other's files, and the
report lists only files that exist, identical to a single run's."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from compress.core.artifacts import sha256_file
from tests.conftest import FAST_INT8, child_env, pipeline_dict, write_pipeline

STAGES = [{"type": "export.onnx"}, {"type": "quantize", "scheme": "int8-static", **FAST_INT8},
          {"type": "export.tflite", "input": "source", "mode": "fp16"},
          {"type": "benchmark", "warmup": 2, "runs": 30, "rounds": 2}]


def _start(path, cwd):
    return subprocess.Popen([sys.executable, "-m", "compress", "run", str(path)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env())


# three whole pipelines in subprocesses (~40 s on 2 cores): in `make test-runs`
@pytest.mark.runs
def test_two_concurrent_runs_into_one_folder(project):
    path = write_pipeline(project, pipeline_dict(stages=STAGES, targets=["host-cpu"]))
    first, second = _start(path, project), _start(path, project)
    outs = [proc.communicate(timeout=600) for proc in (first, second)]
    for proc, (out, err) in zip((first, second), outs):
        assert proc.returncode == 0, err
        assert "Traceback" not in err
    said = "".join(err for _, err in outs)
    assert "waiting: another run" in said   # one of them waited for the other
    assert "reused (inputs and settings unchanged)" in said
    run_dir = project / "runs" / "t"
    report = json.loads((run_dir / "report.json").read_text())
    for artifact in report["artifacts"]:
        assert sha256_file(run_dir / artifact["path"]) == artifact["sha256"]
    assert not list(run_dir.glob(".*.partial")) and not list(run_dir.glob(".*.tmp*"))
    # the same artifacts as a run alone
    alone = write_pipeline(project, pipeline_dict(stages=STAGES, targets=["host-cpu"],
                                                  name="alone"), name="alone.yaml")
    assert subprocess.run([sys.executable, "-m", "compress", "run", str(alone), "--quiet"],
                          cwd=project, capture_output=True, env=child_env()).returncode == 0
    single = json.loads((project / "runs" / "alone" / "report.json").read_text())
    assert [a["sha256"] for a in single["artifacts"]] == \
        [a["sha256"] for a in report["artifacts"]]
