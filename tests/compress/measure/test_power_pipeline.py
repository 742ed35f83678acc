"""Power and energy through the whole pipeline: the profile names a meter, the runner
samples it, the verdicts on power_w and energy_mj are real pass/fail."""
from __future__ import annotations

import json

import pytest
import stat
import sys

from tests.conftest import FAST_EXPORT, FAST_INT8, pipeline_dict, run_cli, write_pipeline

STAGES = [FAST_EXPORT, {"type": "quantize", "scheme": "int8-static", **FAST_INT8},
          # windows of ~0.75 s: at a sample every 100 ms, the first one of a window (which
          # also counts the moment before it) weighs little
          {"type": "benchmark", "warmup": 2, "runs": 200, "min_seconds": 1.5, "rounds": 2}]


def _board(folder, power: str, budget: str = "{energy_mj: 1000, power_w: 3}"):
    path = folder / "board.yaml"
    path.write_text(f"name: board\ndevice: {{arch: any}}\nruntime: {{threads: 1}}\n"
                    f"power: {power}\nbudget: {budget}\n")
    return path


# An external meter modelled as a command printing watts. Like a wall meter on a board,
# its reading follows the CPU work of the benchmark: 2 W idle plus 3 W per busy core of the
# runner process (its CPU time since the previous reading, from /proc). Only this test's
# runner counts (its command line names a file in the test's folder, where the state file
# is): another test's benchmark on the other core is not on this board.
FAKE_METER = """#!{python}
import os, sys, time
state = sys.argv[1]
folder = os.path.dirname(state).encode()
pids = [p for p in os.listdir("/proc") if p.isdigit()]
def is_runner(pid):
    try:
        line = open(f"/proc/{{pid}}/cmdline", "rb").read()
    except OSError:
        return False
    return b"runtimes\\0bench" in line and folder in line
busy = 0.0
for pid in filter(is_runner, pids):
    fields = open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()
    busy += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
now = time.monotonic()
try:
    last_busy, last_now = map(float, open(state).read().split())
except (OSError, ValueError):
    last_busy, last_now = busy, now - 1
open(state, "w").write(f"{{busy}} {{now}}")
share = max(0.0, busy - last_busy) / max(now - last_now, 1e-3) if busy >= last_busy else 0.0
print(f"{{2.0 + 3.0 * min(share, 1.0):.3f}} W")
"""


# the meter reads this process's CPU share, which other work on the machine skews: in
# `make test-runs`, not beside the parallel workers of `make test`
@pytest.mark.runs
def test_an_external_meter_gives_real_power_and_energy_verdicts(project):
    meter = project / "read-watts"
    meter.write_text(FAKE_METER.format(python=sys.executable))
    meter.chmod(meter.stat().st_mode | stat.S_IXUSR)
    board = _board(project, f"{{meter: command, command: '{meter} {project / 'state'}', "
                            "interval_ms: 100, idle_seconds: 0.5}", "{energy_mj: 1000, power_w: 2}")
    path = write_pipeline(project, pipeline_dict(targets=[str(board)], stages=STAGES))
    child = run_cli("run", path, cwd=project)
    assert child.returncode == 1, child.stderr  # more than the 2 W budget while running
    report = json.loads((project / "runs" / "t" / "report.json").read_text())
    bench = next(b for b in report["benchmarks"] if not b["baseline"])
    power = bench["power"]
    assert power["meter"] == "command" and power["samples"] >= 4
    # the runner works in the window only: 2 W idle, up to 5 W with its core busy (the
    # meter's first reading also counts a moment before, so no exact line between them)
    assert power["idle_w"] < 3.0 and power["mean_w"] > power["idle_w"] + 1.0
    per_inference_mj = power["active_w"] * power["window_s"] / bench["runs"] * 1000
    assert abs(bench["energy_mj"] - per_inference_mj) / per_inference_mj < 0.25
    verdicts = {v["metric"]: v for v in report["verdicts"] if v["artifact"] == bench["artifact"]}
    assert verdicts["power_w"]["status"] == "fail"
    assert verdicts["power_w"]["value"] == power["mean_w"]
    assert verdicts["energy_mj"]["status"] == "pass"
    assert "power meter command" in (project / "runs" / "t" / "report.md").read_text()


def test_a_named_meter_that_is_absent_stops_before_any_work(project):
    board = _board(project, "{meter: rapl}")
    path = write_pipeline(project, pipeline_dict(targets=[str(board)], stages=STAGES))
    child = run_cli("run", path, cwd=project)
    assert child.returncode == 2 and "Traceback" not in child.stderr
    assert "meter 'rapl' named" in child.stderr and "intel-rapl" in child.stderr
    assert not (project / "runs").exists()


@pytest.mark.runs
def test_an_energy_budget_without_a_meter_is_unmeasured_with_the_reason(project):
    board = _board(project, "{meter: none}")
    path = write_pipeline(project, pipeline_dict(targets=[str(board)], stages=STAGES[:1] + [
        {"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 1}]))
    child = run_cli("run", path, cwd=project)
    assert child.returncode == 0, child.stderr
    report = json.loads((project / "runs" / "t" / "report.json").read_text())
    verdicts = {v["metric"]: v for v in report["verdicts"]}
    assert verdicts["energy_mj"]["status"] == "unmeasured"
    assert "turned off" in verdicts["energy_mj"]["reason"]
    assert verdicts["power_w"]["status"] == "unmeasured"
