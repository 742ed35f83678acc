"""MLflow tracking: a real quickstart run logged to a real sqlite-backed MLflow store (no
server), read back with MlflowClient and compared with the run's own report.json."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import compress
from compress.config.pipeline import parse_pipeline
from compress.config.tracking import TrackingSpec
from compress.errors import ConfigError, MissingDependency
from compress.runner.tracking.mlflow import TrialRecord, check, log_search, track_result
from compress.runner.tracking.items import key
from tests.conftest import REPO, fill_project, pipeline_dict, run_cli, write_pipeline


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch):
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")  # tests never touch the network


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, digits_checkpoint):
    """One quickstart run with `tracking:`, started from an empty working directory; the
    database's folder does not exist before the run."""
    from mlflow.tracking import MlflowClient
    folder = fill_project(tmp_path_factory.mktemp("tracked"), digits_checkpoint)
    cwd = tmp_path_factory.mktemp("cwd")
    db = folder / "store" / "mlflow.db"
    spec = {"mlflow": {"uri": f"sqlite:///{db}", "experiment": "t"}}
    path = write_pipeline(folder, pipeline_dict(tracking=spec))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        patch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        result = compress.run(path)
    client = MlflowClient(f"sqlite:///{db}")
    experiment = client.get_experiment_by_name("t")
    runs = client.search_runs([experiment.experiment_id])
    report = json.loads((result.run_dir / "report.json").read_text())
    return SimpleNamespace(folder=folder, cwd=cwd, db=db, client=client, result=result,
                           experiment=experiment, runs=runs, report=report,
                           spec=TrackingSpec.model_validate(spec))


def test_the_run_is_logged_under_the_experiment(tracked):
    assert [(r.info.run_name, r.info.status) for r in tracked.runs] == [("t", "FINISHED")]
    assert "mlflow.parentRunId" not in tracked.runs[0].data.tags


def test_params_hold_every_stage_setting(tracked):
    params = tracked.runs[0].data.params
    stage = json.loads((tracked.result.run_dir / "02-quantize" / "stage.json").read_text())
    assert stage["config"]["scheme"] == "int8-static"
    for name, value in stage["config"].items():
        expected = value if isinstance(value, str) else json.dumps(value)
        assert params[f"stages.02-quantize.{name}"] == expected
    assert params["stages.03-benchmark.runs"] == "20"
    assert params["seed"] == "0"


def test_metrics_are_the_reports_numbers(tracked):
    metrics = tracked.runs[0].data.metrics
    expected = {}
    for bench in tracked.report["benchmarks"]:
        at = f"{bench['target']}.{bench['artifact']}"
        expected.update({f"{at}.latency_{p}_ms": bench["latency_ms"][p]
                         for p in ("p50", "p90", "p99", "mean")})
        expected.update({f"{at}.{n}": bench[n] for n in
                         ("peak_memory_mb", "model_memory_mb", "throughput_per_s", "energy_mj")
                         if bench[n] is not None})
        expected[f"{at}.model_size_mb"] = bench["size_bytes"] / 2**20
        expected[f"{at}.accuracy"] = bench["metric"]["value"]
        expected[f"{at}.accuracy_drop"] = bench["metric"]["drop"]
    assert len(tracked.report["benchmarks"]) >= 2
    assert metrics == expected  # nothing more: no number the report does not hold


def test_verdicts_and_recommendations_are_tags(tracked):
    tags = tracked.runs[0].data.tags
    verdicts = {f"verdict.{v['target']}.{v['artifact']}.{v['metric']}": v["status"]
                for v in tracked.report["verdicts"]}
    assert {k: v for k, v in tags.items() if k.startswith("verdict.")} == verdicts
    assert "pass" in verdicts.values()
    assert tags["passed"] == str(tracked.report["passed"]).lower()
    recommended = {f"recommend.{r['target']}": f"{r['artifact'] or 'none'} ({r['status']})"
                   for r in tracked.report.get("recommendations", [])}
    assert {k: v for k, v in tags.items() if k.startswith("recommend.")} == recommended


def test_reports_and_recommended_files_are_artifacts(tracked, tmp_path):
    run_id = tracked.runs[0].info.run_id
    logged = {a.path for a in tracked.client.list_artifacts(run_id)}
    assert {"report.json", "report.md"} <= logged
    copy = tracked.client.download_artifacts(run_id, "report.json", str(tmp_path))
    assert Path(copy).read_bytes() == (tracked.result.run_dir / "report.json").read_bytes()
    for rec in tracked.report.get("recommendations", []):
        if rec["path"]:
            folder = f"recommended/{rec['target']}"
            names = {Path(a.path).name for a in tracked.client.list_artifacts(run_id, folder)}
            assert Path(rec["path"]).name in names


def test_nothing_is_written_in_the_working_directory(tracked):
    assert list(tracked.cwd.iterdir()) == []
    assert (tracked.db.parent / "mlruns").is_dir()  # the files sit beside the database
    assert tracked.experiment.artifact_location == (tracked.db.parent / "mlruns").as_uri()


def test_a_search_is_a_parent_run_with_one_child_per_trial(tracked):
    run_dir, report = tracked.result.run_dir, tracked.report
    trials = [TrialRecord("t001", {"quantize.calibration": "minmax"}, "complete", None, report,
                          run_dir),
              TrialRecord("t002", {"quantize.calibration": "entropy"}, "complete", None, report,
                          run_dir),
              TrialRecord("t003", {"quantize.calibration": "percentile"}, "failed",
                          "stage 2 (quantize): out of memory", None, None)]
    parent_id = log_search(tracked.spec, {**report, "pareto": {"host-cpu": ["02-quantize"]}},
                           run_dir, trials, base_dir=tracked.folder, run_name="t-search")
    client = tracked.client
    children = {r.info.run_name: r for r in client.search_runs(
        [tracked.experiment.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'")}
    assert sorted(children) == ["t001", "t002", "t003"]
    done = children["t002"]
    assert done.data.params["quantize.calibration"] == "entropy"
    assert done.data.params["stages.02-quantize.scheme"] == "int8-static"
    assert done.data.metrics == tracked.runs[0].data.metrics
    assert done.data.tags["trial.state"] == "complete"
    failed = children["t003"]
    assert failed.info.status == "FAILED" and failed.data.metrics == {}
    assert failed.data.tags["trial.state"] == "failed"
    assert failed.data.tags["trial.error"] == "stage 2 (quantize): out of memory"
    assert failed.data.params == {"quantize.calibration": "percentile"}
    parent = client.get_run(parent_id)
    assert parent.data.tags["search.trials"] == "3"
    logged = {a.path for a in client.list_artifacts(parent_id)}
    assert {"report.json", "pareto.json"} <= logged
    pareto = client.download_artifacts(parent_id, "pareto.json", str(tracked.folder))
    assert json.loads(Path(pareto).read_text()) == {"host-cpu": ["02-quantize"]}


def test_mlflow_down_is_one_warning_line(tracked, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    down = {"mlflow": {"uri": f"http://127.0.0.1:{port}"}}
    pipeline = parse_pipeline(pipeline_dict(tracking=down), base_dir=tracked.folder)
    notes = []
    assert track_result(pipeline, tracked.result, notes.append) is None
    assert len(notes) == 1 and notes[0].startswith("warning: not logged to MLflow: ")
    assert "Connection refused" in notes[0] and "\n" not in notes[0]


@pytest.mark.parametrize("uri, says", [
    (None, "tracking.mlflow.uri"),
    ("mlflow.example.com:5000", "not a tracking URI MLflow takes"),
    ("sqlite:///notes.txt/mlflow.db", "is a file, so the folder"),
])
def test_a_bad_uri_exits_2_before_any_stage_runs(project, uri, says):
    (project / "notes.txt").write_text("a file where the database's folder would be\n")
    spec = {"experiment": "t"} if uri is None else {"uri": uri}
    path = write_pipeline(project, pipeline_dict(tracking={"mlflow": spec}))
    done = run_cli("run", path, "--quiet")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and says in done.stderr
    assert "tracking.mlflow.uri" in done.stderr and "Traceback" not in done.stderr
    assert not (project / "runs").exists()


def test_check_resolves_against_the_pipeline_folder(tmp_path):
    spec = TrackingSpec.model_validate({"mlflow": {"uri": "sqlite:///new/mlflow.db"}})
    check(spec, tmp_path)  # a folder that can be made is fine, and is not made yet
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "new").write_text("")
    with pytest.raises(ConfigError, match=str(tmp_path / "new")):
        check(spec, tmp_path)
    folder = TrackingSpec.model_validate({"mlflow": {"uri": "file:./mlruns"}})
    with pytest.raises(ConfigError, match="sqlite:///mlflow.db"):
        check(folder, tmp_path)  # MLflow 3 refuses its folder store unless allowed


def test_missing_mlflow_names_the_pip_command(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` raises ImportError
    spec = TrackingSpec.model_validate({"mlflow": {"uri": "sqlite:///mlflow.db"}})
    with pytest.raises(MissingDependency, match="mlflow-skinny sqlalchemy alembic"):
        check(spec, tmp_path)


def test_keys_keep_only_what_mlflow_takes():
    assert key("rpi4", "t003/02-quantize", "p90") == "rpi4.t003/02-quantize.p90"
    assert key("my target:1", "a//b", "x") == "my target_1.a/_/b.x"
    assert key("a/../b") == "a/_/b" and key("/abs/") == "_/abs/_"  # no path tricks
    assert len(key("x" * 300)) == 250


def test_importing_the_runner_does_not_import_mlflow():
    done = subprocess.run([sys.executable, "-c", "import sys, compress.runner.run; "
                           "print('mlflow' in sys.modules)"], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert done.stdout.strip() == "False", done.stderr
