"""SSH targets against a real OpenSSH server on 127.0.0.1 (tests/sshd_server.py).

The "device" is this machine reached over SSH with a throwaway key, so everything the
pipeline does remotely is real: host key checking, copying, running the runner with the
device's Python, fetching its JSON and removing the temporary directory.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

# ~100 s of loopback SSH runs: `make test-remote`, which CI runs after `make test`
pytestmark = pytest.mark.remote

from compress.report.mdtext import md
from tests.conftest import FAST_EXPORT, FAST_INT8, pipeline_dict, run_cli, write_pipeline
from tests.sshd_server import free_port, known_hosts_line, make_keypair, start_sshd


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    if isinstance(server, str):
        pytest.skip(f"no OpenSSH server for the remote tests: {server}")
    yield server
    server.stop()


@pytest.fixture
def workdir(tmp_path):
    """The device-side parent of the temporary directory: empty again after every run."""
    folder = tmp_path / "device-tmp"
    folder.mkdir()
    return folder


def remote_target(server, workdir, **overrides) -> dict:
    target = {"profile": "host-cpu", "name": "loopback", "ssh": server.address,
              "identity": str(server.identity), "known_hosts": str(server.known_hosts),
              "python": sys.executable, "workdir": str(workdir), "connect_timeout_s": 5}
    target.update(overrides)
    return target


def run_remote(project, target: dict, stages=None):
    stages = stages or [FAST_EXPORT,
                        {"type": "quantize", "scheme": "int8-static", **FAST_INT8},
                        {"type": "benchmark", "warmup": 2, "runs": 12, "rounds": 2}]
    path = write_pipeline(project, pipeline_dict(targets=[target], stages=stages))
    return run_cli("run", path, cwd=project)


def test_pipeline_measures_on_the_ssh_target_and_cleans_up(project, sshd, workdir):
    child = run_remote(project, remote_target(sshd, workdir))
    assert child.returncode == 0, child.stderr + child.stdout
    report = json.loads((project / "runs" / "t" / "report.json").read_text())
    benches = report["benchmarks"]
    assert {b["artifact"] for b in benches} == {"01-export.onnx", "02-quantize"}
    for bench in benches:
        assert bench["target"] == "loopback"
        remote = bench["remote"]
        assert remote["host"] == sshd.address
        assert remote["copied_bytes"] > 0 and remote["connect_s"] > 0
        # 2 artifacts and the baseline's run on OpenVINO (a comparison), 2 rounds each
        assert remote["runs"] == 6
        assert bench["runs"] == 12 and bench["latency_ms"]["p50"] > 0
        assert bench["metric"]["value"] > 0.9
        assert bench["torch_loaded"] is False
    [other] = report["engine_baselines"]
    assert (other["engine"], other["remote"]["host"], other["runs"]) == (
        "openvino", sshd.address, 12)
    # the device keeps nothing: the temporary directory is gone
    assert list(workdir.iterdir()) == []
    text = (project / "runs" / "t" / "report.md").read_text()
    assert f"over SSH ({md(sshd.address)})" in text   # as report.md escapes names


def _assert_clean_failure(child, workdir, *phrases):
    assert child.returncode == 2, child.stderr + child.stdout
    assert "Traceback" not in child.stderr
    for phrase in phrases:
        assert phrase in child.stderr, child.stderr
    assert list(workdir.iterdir()) == []


def test_a_closed_port_fails_fast_with_the_fix(project, sshd, workdir):
    target = remote_target(sshd, workdir, ssh=f"{sshd.user}@127.0.0.1:{free_port()}")
    started = time.monotonic()
    child = run_remote(project, target)
    _assert_clean_failure(child, workdir, "refused the connection", "sshd runs")
    assert not (project / "runs" / "t").exists()  # failed in preflight: nothing written
    assert time.monotonic() - started < 60


def test_a_host_that_never_answers_fails_within_the_connect_timeout(project, sshd, workdir):
    # A listener that accepts TCP but never speaks SSH: ssh waits for the banner.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held = []
    thread = threading.Thread(target=lambda: held.append(listener.accept()), daemon=True)
    thread.start()
    try:
        target = remote_target(sshd, workdir, ssh=f"root@127.0.0.1:{listener.getsockname()[1]}",
                               connect_timeout_s=2)
        child = run_remote(project, target)
    finally:
        listener.close()
    _assert_clean_failure(child, workdir, "did not answer within 2 s")


def test_a_refused_key_names_the_key_and_the_fix(project, sshd, workdir, tmp_path):
    stranger = make_keypair(tmp_path / "stranger")
    child = run_remote(project, remote_target(sshd, workdir, identity=str(stranger)))
    _assert_clean_failure(child, workdir, "refused the key", str(stranger), "ssh-copy-id")


def test_a_changed_host_key_is_refused(project, sshd, workdir, tmp_path):
    impostor = make_keypair(tmp_path / "impostor")
    known = tmp_path / "known_hosts"
    known.write_text(known_hosts_line(sshd.port, impostor.with_suffix(".pub")))
    child = run_remote(project, remote_target(sshd, workdir, known_hosts=str(known)))
    _assert_clean_failure(child, workdir, "does not match", "ssh-keygen -R")


def test_an_unknown_host_key_is_refused_unless_trusted_on_first_use(project, sshd, workdir,
                                                                   tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    child = run_remote(project, remote_target(sshd, workdir, known_hosts=str(known)))
    _assert_clean_failure(child, workdir, "is not in", "accept_new_host_key")
    stages = [FAST_EXPORT, {"type": "benchmark", "warmup": 1, "runs": 3, "rounds": 1}]
    child = run_remote(project, remote_target(sshd, workdir, known_hosts=str(known),
                                              accept_new_host_key=True), stages)
    assert child.returncode == 0, child.stderr
    # recorded for next time (the host name may be hashed: HashKnownHosts)
    assert sshd.host_key.with_suffix(".pub").read_text().split()[1] in known.read_text()


def test_a_device_without_the_runtime_gets_the_pip_command(project, sshd, workdir):
    bare = "/usr/bin/python3"
    probe = subprocess.run([bare, "-c", "import onnxruntime"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"{bare} has onnxruntime; no bare Python to play a fresh device")
    child = run_remote(project, remote_target(sshd, workdir, python=bare))
    _assert_clean_failure(child, workdir, "cannot import", f"{bare} -m pip install",
                          "onnxruntime")


def test_a_device_without_python_is_named(project, sshd, workdir):
    child = run_remote(project, remote_target(sshd, workdir, python="/opt/no/python3"))
    _assert_clean_failure(child, workdir, "'/opt/no/python3' is not on", "`python:`")


def test_a_failure_on_the_device_leaves_nothing_behind(project, sshd, workdir):
    # The runner is killed on the device by the benchmark timeout mid-run.
    stages = [FAST_EXPORT,
              {"type": "benchmark", "warmup": 1, "runs": 10**9, "rounds": 1,
               "timeout_s": 3}]
    child = run_remote(project, remote_target(sshd, workdir), stages)
    _assert_clean_failure(child, workdir, "did not finish within 3 s")
    # no runner left running there either
    leftover = subprocess.run(["pgrep", "-f", f"{workdir}/edge-compress-"], capture_output=True)
    assert leftover.stdout == b""


def test_a_full_disk_is_reported_before_copying(project, sshd, tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root) to play a full disk")
    try:
        child = run_remote(project, remote_target(sshd, small))
        _assert_clean_failure(child, small, "MiB free in", "`workdir:`")
    finally:
        subprocess.run(["umount", str(small)], capture_output=True)


def test_a_meter_the_device_lacks_is_named_and_nothing_is_left(project, sshd, workdir):
    board = project / "board.yaml"
    board.write_text("name: board\ndevice: {arch: any}\npower: {meter: rapl}\n")
    stages = [FAST_EXPORT, {"type": "benchmark", "warmup": 1, "runs": 3, "rounds": 1}]
    child = run_remote(project, remote_target(sshd, workdir, profile=str(board)), stages)
    _assert_clean_failure(child, workdir, "target loopback", "meter 'rapl' named",
                          "intel-rapl")


def test_a_relative_workdir_is_taken_from_the_login_directory(project, sshd, workdir):
    # As a user writes `workdir: bench-tmp`: relative to the login directory there.
    home = subprocess.run(["ssh", "-i", str(sshd.identity), "-o", "BatchMode=yes", "-o",
                           f"UserKnownHostsFile={sshd.known_hosts}", "-p", str(sshd.port),
                           f"{sshd.user}@{sshd.host}", "pwd"], capture_output=True, text=True)
    relative = os.path.relpath(workdir, home.stdout.strip())
    stages = [FAST_EXPORT, {"type": "benchmark", "warmup": 1, "runs": 3, "rounds": 1}]
    child = run_remote(project, remote_target(sshd, relative), stages)
    assert child.returncode == 0, child.stderr
    assert list(workdir.iterdir()) == []


def test_a_second_connect_keeps_the_one_master(sshd):
    from compress.measure.remote.ssh import SshConnection, SshSettings, parse_address
    connection = SshConnection(SshSettings(parse_address(sshd.address), identity=sshd.identity,
                                           known_hosts=sshd.known_hosts))
    try:
        connection.open()
        connection.open()  # as stage() does after a long compression
        masters = subprocess.run(["pgrep", "-f", f"ControlPath={connection._control_path}"],
                                 capture_output=True, text=True).stdout.split()
        assert len(masters) == 1
    finally:
        connection.close()
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", f"ControlPath={connection._control_path}"],
                          capture_output=True, text=True).stdout.split()
    assert left == []


def _runner_pids(workdir) -> list[int]:
    pids = []
    for pid_file in workdir.glob("edge-compress-*/.pid"):
        try:
            pids.append(int(pid_file.read_text()))
        except ValueError:
            pass
    return pids


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_a_run_killed_during_the_benchmark_is_cleaned_by_the_next(project, sshd, workdir):
    """kill -9 while the device measures: the device keeps the folder and the runner, until
    the next run to that device removes both (once the folder is stale: 1 s here)."""
    slow = [FAST_EXPORT,
            {"type": "benchmark", "warmup": 2, "runs": 10**6, "min_seconds": 120, "rounds": 1}]
    path = write_pipeline(project, pipeline_dict(targets=[remote_target(sshd, workdir)],
                                                 stages=slow))
    killed = subprocess.Popen([sys.executable, "-m", "compress", "run", str(path), "--quiet"],
                              cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not _runner_pids(workdir) and time.monotonic() < deadline:
        time.sleep(0.2)
    runners = _runner_pids(workdir)
    assert runners, "the runner never started on the device"
    killed.kill()
    killed.wait()
    left = [p.name for p in workdir.iterdir()]
    assert left and _alive(runners[0])  # what the killed run could not clean up
    time.sleep(1.5)
    env = {**os.environ, "EDGE_COMPRESS_REMOTE_STALE_S": "1"}
    fast = [FAST_EXPORT, {"type": "benchmark", "warmup": 1, "runs": 4, "rounds": 1}]
    path = write_pipeline(project, pipeline_dict(targets=[remote_target(sshd, workdir)],
                                                 stages=fast, name="next"))
    child = subprocess.run([sys.executable, "-m", "compress", "run", str(path)], cwd=project,
                           capture_output=True, text=True, env=env, timeout=300)
    assert child.returncode == 0, child.stderr
    assert "removed 1 folder(s) that killed runs left there" in child.stderr + child.stdout
    assert list(workdir.iterdir()) == []   # the old folder and this run's own
    deadline = time.monotonic() + 10
    while _alive(runners[0]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(runners[0])
