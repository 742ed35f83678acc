"""A pipeline file and a profile are code (factories, loaders, metric functions, meter
commands run with the user's rights): `compress validate` must never import or run any
of it, and nothing a command line carries (a token) is copied into the reports."""
from __future__ import annotations

import json
import stat
import sys

import pytest

from tests.compress.measure.test_power_pipeline import FAKE_METER
from tests.compress.runner.test_validate_and_cli import TRAP
from tests.conftest import pipeline_dict, run_cli, write_pipeline


def test_validate_never_imports_or_runs_user_code(project):
    (project / "trap.py").write_text(TRAP)
    meter = project / "meter.sh"
    meter.write_text(f"#!/bin/sh\ntouch {project}/RAN-meter\necho 1 W\n")
    meter.chmod(meter.stat().st_mode | stat.S_IXUSR)
    (project / "board.yaml").write_text(
        f"name: board\ndevice: {{arch: any}}\npower: {{meter: command, command: '{meter}'}}\n"
        "budget: {latency_p90_ms: 10}\n")
    data = pipeline_dict(
        model={"torch": {"factory": "trap:build"},
               "inputs": [{"name": "image", "shape": [1, 1, 8, 8]}]},
        data={"calibration": "trap:load", "evaluation": "trap:load",
              "metric": {"type": "custom", "function": "trap:score"}},
        targets=["board.yaml"])
    checked = run_cli("validate", write_pipeline(project, data), cwd=project)
    assert checked.returncode == 0, checked.stderr
    assert sorted(p.name for p in project.glob("RAN-*")) == []


@pytest.mark.runs  # a whole CLI run with a metered board: `make test-runs`
def test_a_meter_commands_arguments_stay_out_of_the_reports(project):
    meter = project / "read-watts"
    meter.write_text(FAKE_METER.format(python=sys.executable))
    meter.chmod(meter.stat().st_mode | stat.S_IXUSR)
    (project / "board.yaml").write_text(
        "name: board\ndevice: {arch: any}\nruntime: {threads: 1}\n"
        f"power: {{meter: command, command: '{meter} {project / 'state'} --token=s3cr3t-t0k3n',"
        " interval_ms: 100, idle_seconds: 0.2}\nbudget: {energy_mj: 1000}\n")
    stages = [{"type": "export.onnx"}, {"type": "benchmark", "warmup": 1, "runs": 50,
                                        "min_seconds": 0.5, "rounds": 1}]
    done = run_cli("run", write_pipeline(project, pipeline_dict(
        targets=["board.yaml"], stages=stages)), cwd=project)
    assert done.returncode in (0, 1), done.stderr
    run_dir = project / "runs" / "t"
    report = json.loads((run_dir / "report.json").read_text())
    assert report["benchmarks"][0]["power"]["detail"].startswith("command `read-watts`")
    for name in ("report.json", "report.md", "manifest.json"):
        assert "s3cr3t" not in (run_dir / name).read_text(), name
