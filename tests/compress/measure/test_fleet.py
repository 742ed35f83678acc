"""A device fleet: one target measured on two boards (two loopback sshd servers standing
for two Raspberry Pis of one profile). The measurements are split between them, each
record keeps the board that timed it, the report shows the spread; a board that dies
mid-run is named and its measurement is retried on the other."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.conftest import FAST_EXPORT, FAST_INT8, child_env, pipeline_dict, write_pipeline
from tests.sshd_server import pull_the_plug, runner_under, start_fleet

# loopback SSH runs (~1 minute): `make test-remote`
pytestmark = pytest.mark.remote


@pytest.fixture(scope="module")
def boards(tmp_path_factory):
    """Two sshd servers that accept one key and are both in one known_hosts file."""
    fleet = start_fleet(tmp_path_factory.mktemp("fleet"))
    if isinstance(fleet, str):
        pytest.skip(f"no OpenSSH server for the fleet tests: {fleet}")
    yield fleet
    for server in fleet[0]:
        server.stop()


def _fleet_pipeline(project, boards, stages, hosts_file=False) -> str:
    (a, b), known = boards
    workdir = project / "boards-tmp"   # both boards' temporary folders: empty afterwards
    workdir.mkdir(exist_ok=True)
    target = {"profile": "host-cpu", "name": "boards", "identity": str(a.identity),
              "known_hosts": str(known), "python": sys.executable, "workdir": str(workdir),
              "connect_timeout_s": 5}
    if hosts_file:
        (project / "boards.txt").write_text(f"# the bench's two boards\n{a.address}\n"
                                            f"{b.address}  # the second one\n")
        target["hosts_file"] = "boards.txt"
    else:
        target["ssh"] = [a.address, b.address]
    return write_pipeline(project, pipeline_dict(targets=[target], stages=stages))


def test_a_fleet_splits_the_measurements_and_reports_the_spread(project, boards):
    stages = [FAST_EXPORT, {"type": "quantize", "scheme": "int8-static", **FAST_INT8},
              {"type": "benchmark", "warmup": 2, "runs": 20, "rounds": 2}]
    path = _fleet_pipeline(project, boards, stages, hosts_file=True)
    child = subprocess.run([sys.executable, "-m", "compress", "run", str(path)], cwd=project,
                           capture_output=True, text=True, timeout=600, env=child_env())
    assert child.returncode in (0, 1), child.stderr
    report = json.loads((project / "runs" / "t" / "report.json").read_text())
    addresses = [s.address for s in boards[0]]
    assert report["fleets"]["boards"] == {"devices": addresses, "dropped": []}
    used = set()
    for bench in report["benchmarks"]:
        # each variant's two rounds rotate over the two boards
        assert sorted(row["device"] for row in bench["devices"]) == sorted(addresses)
        assert all(row["rounds"] == 1 for row in bench["devices"])
        assert bench["device_spread"] is not None and bench["device_spread"] >= 0
        used |= {row["device"] for row in bench["devices"]}
    assert used == set(addresses)
    page = (project / "runs" / "t" / "report.md").read_text()
    assert "## Device fleets" in page and "spread" in page
    assert list((project / "boards-tmp").iterdir()) == []     # both boards cleaned up


def test_a_board_that_dies_mid_run_is_named_and_its_work_goes_to_the_other(project, boards):
    (a, b), _ = boards
    stages = [FAST_EXPORT, {"type": "quantize", "scheme": "int8-static", **FAST_INT8},
              {"type": "benchmark", "warmup": 2, "runs": 10, "min_seconds": 6, "rounds": 2}]
    path = _fleet_pipeline(project, boards, stages)
    child = subprocess.Popen([sys.executable, "-m", "compress", "run", str(path)], cwd=project,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=child_env())
    deadline = time.monotonic() + 240
    while not runner_under(b) and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.1)
    assert runner_under(b), "the second board never measured"
    pull_the_plug(b)
    out, err = child.communicate(timeout=600)
    assert child.returncode in (0, 1), err
    assert f"{b.address} dropped out" in err
    report = json.loads((project / "runs" / "t" / "report.json").read_text())
    fleet = report["fleets"]["boards"]
    assert fleet["devices"] == [a.address]
    assert [d["device"] for d in fleet["dropped"]] == [b.address]
    assert [b["artifact"] for b in report["benchmarks"]] == ["01-export.onnx", "02-quantize"]
    for bench in report["benchmarks"]:   # every round was timed, the lost one again on a
        assert sum(row["rounds"] for row in bench["devices"]) == 2
    assert "dropped out" in (project / "runs" / "t" / "report.md").read_text()
