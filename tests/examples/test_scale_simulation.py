"""examples/scale/simulate.py: fake trials through the search's own Ray scheduling
(cluster_for, Flight, drive), figures written as JSON.

With no work and no measurement the ideal wall time is 0, so the overhead per trial is
the wall time over the trials and cannot be negative."""
import json
import math
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytest.importorskip("ray")
pytestmark = pytest.mark.runs


def test_twenty_fake_trials_report_their_figures(tmp_path):
    out = tmp_path / "scale.json"
    done = subprocess.run([sys.executable, str(REPO / "examples" / "scale" / "simulate.py"),
                           "--trials", "20", "--cpus", "2", "--json", str(out)],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    measured, computed = record["measured"], record["computed"]
    assert record["trials"] == 20 and record["window"] == 2 and record["measured_here"] is True
    assert computed["ideal_s"] == 0
    assert measured["ray_start_s"] > 0 and measured["wall_s"] >= computed["ideal_s"]
    overhead = computed["overhead_ms_per_trial"]
    assert math.isfinite(overhead) and overhead >= 0
    # wall_s is rounded to 1 ms, so over 20 trials the two agree within 0.025 ms
    assert overhead == pytest.approx(measured["wall_s"] * 1e3 / 20, abs=0.03)
    trip = measured["round_trip_ms"]
    assert 0 < trip["median"] <= trip["p90"]
    assert measured["task_worker_processes"] >= 1
    assert "measured  wall" in done.stdout and "computed  overhead per trial" in done.stdout
