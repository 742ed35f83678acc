"""`executor: ray`: a search's trials compress as Ray tasks on a local Ray instance (two
CPUs, started by the run) and make exactly what the serial search makes: the same
variants, the same files (sha256), the same trial outcomes."""
import json
import subprocess
import sys

import pytest

from tests.conftest import pipeline_dict, write_pipeline

pytest.importorskip("ray")
# two whole searches in subprocesses (~1 minute): `make test-runs`
pytestmark = pytest.mark.runs

SPACE = {"quantize.scheme": ["int8-static", "fp16"],
         "quantize.calibration": ["minmax", "percentile"]}


def _search(project, output: str, *flags) -> tuple[subprocess.CompletedProcess, dict]:
    data = pipeline_dict(name="s")
    data["stages"][-1].update(warmup=2, runs=10, rounds=1)
    data["search"] = {"space": SPACE}
    data["executor"] = {"type": "ray", "num_cpus": 2}   # used only with --executor ray
    # the files are the subject: one engine measures (auto would also time OpenVINO on
    # every variant and each engine's FP32 baseline)
    data["targets"] = [{"profile": "host-cpu", "engines": ["onnxruntime"]}]
    path = write_pipeline(project, data)
    child = subprocess.run([sys.executable, "-m", "compress", "run", str(path), "--output",
                            output, *flags], cwd=project, capture_output=True, text=True,
                           timeout=600)
    report = project / output / "s" / "report.json"
    return child, json.loads(report.read_text()) if report.exists() else {}


def test_a_search_on_ray_makes_the_same_files_as_the_serial_search(project):
    serial, by_hand = _search(project, "serial", "--executor", "local")
    assert serial.returncode in (0, 1), serial.stderr
    assert "Ray" not in serial.stderr
    on_ray, distributed = _search(project, "ray")
    assert on_ray.returncode in (0, 1), on_ray.stderr
    assert "trials compress on a Ray instance started here, 2 CPUs, 2 at once" in on_ray.stderr
    assert "differ from what the executor made" not in on_ray.stderr

    def files(report):
        return {a["id"]: a["sha256"] for a in report["artifacts"]}
    assert files(distributed) == files(by_hand)
    assert len(files(by_hand)) >= 4    # the source, its export, three distinct variants
    states = [{t["id"]: t["state"] for t in r["search"]["trials"]} for r in (by_hand, distributed)]
    assert states[0] == states[1] == {"t000": "complete", "t001": "complete",
                                      "t002": "complete", "t003": "duplicate"}


def test_an_executor_that_is_not_known_is_refused(project):
    data = pipeline_dict(name="s")
    data["executor"] = {"type": "slurm"}
    child = subprocess.run([sys.executable, "-m", "compress", "validate",
                            str(write_pipeline(project, data))], cwd=project,
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 2 and "Traceback" not in child.stderr
    assert "unknown executor 'slurm'. Known executors: local, ray" in child.stderr


def test_a_task_lost_with_its_worker_is_a_failed_trial_not_a_crash():
    import logging

    import ray

    from compress.search.ray_trials import Flight
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR)
    try:
        # sent by value (this test module is not importable on a worker); exiting takes
        # the worker process with it, as when a node is lost or the task is OOM-killed
        dies = lambda code: __import__("os")._exit(code) if code else {"artifacts": {}}  # noqa: E731
        task = ray.remote(dies).options(max_retries=0)
        flight = Flight(ray)
        flight.add(task.remote(0), "kept")
        flight.add(task.remote(1), "lost")
        answers = dict(flight.next() for _ in range(2))
    finally:
        ray.shutdown()
    assert answers["kept"] == {"artifacts": {}}
    assert answers["lost"]["stage_error"] and "its Ray task was lost" in answers["lost"]["message"]
