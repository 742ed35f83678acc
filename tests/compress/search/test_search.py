"""`search:` on the quickstart CNN: every combination tried once (the same variant never
twice), stages shared through the stage cache, one recommendation per target, and a
search killed with SIGKILL resumes without redoing its finished trials."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from compress.config.pipeline import parse_pipeline
from compress.errors import ConfigError
from compress.search.space import axes, combinations, variant, variant_key
from compress.runner.targets import resolve_targets
from tests.conftest import child_env, pipeline_dict, write_pipeline

SPACE = {"quantize.scheme": ["int8-static", "fp16"],
         "quantize.calibration": ["minmax", "percentile"]}


def _axes(pipeline):
    return axes(pipeline, resolve_targets(pipeline))


def _search_pipeline(**search):
    data = pipeline_dict(name="s")
    data["stages"][-1].update(warmup=2, runs=10, rounds=1)
    data["search"] = {"space": SPACE, **search}
    return data


def test_a_choice_the_scheme_lacks_is_left_out_and_equal_variants_share_a_key():
    pipeline = parse_pipeline(_search_pipeline())
    space = _axes(pipeline)
    made = [variant(pipeline, space, params, name="t")[0] for params in combinations(space)]
    assert [m.stages[1].scheme for m in made] == ["int8-static", "int8-static", "fp16", "fp16"]
    assert not hasattr(made[2].stages[1], "calibration")
    keys = [variant_key(m) for m in made]
    assert keys[0] != keys[1] and keys[2] == keys[3]


def test_a_stage_can_be_searched_with_and_without_it():
    data = _search_pipeline()
    data["stages"].insert(0, {"type": "prune", "name": "prune", "method": "magnitude",
                              "sparsity": 0.3})
    data["stages"].insert(3, {"type": "export.tflite", "input": "prune"})
    data["search"]["space"] = {"prune": [True, False]}
    pipeline = parse_pipeline(data)
    without = variant(pipeline, _axes(pipeline), {"prune": False}, name="t")[0]
    assert [s.type for s in without.stages] == ["export.onnx", "quantize", "export.tflite",
                                                "benchmark"]
    assert without.stages[2].input == "source"    # it took the pruned model: now the source
    with_it = variant(pipeline, _axes(pipeline), {"prune": True}, name="t")[0]
    assert with_it.stages == pipeline.stages


@pytest.mark.parametrize("key, fix", [("quantise.scheme", "no stage is named or typed"),
                                      ("quantize.calibraton", "not a setting of stage 2"),
                                      ("benchmark", "never the benchmark")])
def test_a_key_that_names_nothing_is_refused_with_the_stages_listed(key, fix):
    data = _search_pipeline()
    data["search"]["space"] = {key: [True, False] if "." not in key else ["a", "b"]}
    with pytest.raises(ConfigError, match=fix):
        _axes(parse_pipeline(data))


ENV = {**child_env(), "MLFLOW_DISABLE_TELEMETRY": "true"}   # tests never touch the network


def _start(path, cwd):
    return subprocess.Popen([sys.executable, "-m", "compress", "run", str(path)], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=ENV)


def _killed_after_first_trial(path, folder, run_dir) -> dict:
    """Start the search, SIGKILL it as soon as a trial has finished; the trial records."""
    child = _start(path, folder)
    deadline = time.monotonic() + 240
    while not _trial_records(run_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    return _trial_records(run_dir)


def _trial_records(run_dir):
    return {p.parent.name: (p.stat().st_mtime_ns, p.read_text())
            for p in (run_dir / "trials").glob("*/trial.json")}


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory, digits_checkpoint):
    """An exhaustive search killed (SIGKILL) once its first trial finished, then run again."""
    from tests.conftest import fill_project
    folder = fill_project(tmp_path_factory.mktemp("search"), digits_checkpoint)
    data = _search_pipeline()
    data["tracking"] = {"mlflow": {"uri": "sqlite:///mlflow/store.db", "experiment": "s"}}
    path = write_pipeline(folder, data)
    run_dir = folder / "runs" / "s"
    before = _killed_after_first_trial(path, folder, run_dir)
    resumed = subprocess.run([sys.executable, "-m", "compress", "run", str(path)], cwd=folder,
                             capture_output=True, text=True, timeout=600, env=ENV)
    return before, _trial_records(run_dir), resumed, run_dir


@pytest.mark.runs
def test_a_killed_search_resumes_without_redoing_finished_trials(killed_and_resumed):
    before, after, resumed, run_dir = killed_and_resumed
    assert before, "the search was killed before any trial finished"
    assert resumed.returncode in (0, 1), resumed.stderr
    for trial, record in before.items():     # untouched: not run again
        assert after[trial] == record
    report = json.loads((run_dir / "report.json").read_text())
    states = {t["id"]: t["state"] for t in report["search"]["trials"]}
    assert states == {"t000": "complete", "t001": "complete", "t002": "complete",
                      "t003": "duplicate"}
    assert report["search"]["resumed"] == len(before)
    for trial in before:
        assert f"trial {trial} (" not in resumed.stderr
    assert "trial t002 (combination 3 of 4" in resumed.stderr or "t002" in before


@pytest.mark.runs
def test_the_search_report_recommends_per_target_from_every_trial(killed_and_resumed):
    run_dir = killed_and_resumed[3]
    report = json.loads((run_dir / "report.json").read_text())
    (rec,) = report["recommendations"]
    measured = [b for b in report["benchmarks"] if b["target"] == "host-cpu"]
    assert {b["artifact"] for b in measured} >= {"t000/02-quantize", "t001/02-quantize",
                                                 "t002/02-quantize"}
    feasible = [b for b in measured if not any(
        v["status"] == "fail" for v in report["verdicts"]
        if v["artifact"] == b["artifact"] and v["target"] == "host-cpu")]
    fastest = min(b["latency_ms"]["p90"] for b in feasible)
    assert rec["latency_p90_ms"] <= fastest * 1.03 + 1e-12
    assert os.path.isfile(rec["path"]) and rec["path"].startswith(str(run_dir / "trials"))
    assert set(report["pareto"]["host-cpu"]) <= {b["artifact"] for b in measured}
    assert rec["artifact"] in report["pareto"]["host-cpu"] or rec["baseline"]
    assert "What to ship" in (run_dir / "report.md").read_text()


@pytest.mark.runs
def test_trials_share_stages_through_the_cache(killed_and_resumed):
    run_dir = killed_and_resumed[3]
    exports = {json.loads(p.read_text())["key"]
               for p in (run_dir / "trials").glob("*/01-export.onnx/stage.json")}
    assert len(exports) == 1      # one export, however many trials used it
    shared = run_dir.parent / ".stages"
    keys = {p.name for p in shared.glob("*/*") if not p.name.startswith(".")}
    assert exports <= keys


@pytest.mark.runs
def test_the_search_and_each_trial_are_logged_to_mlflow(killed_and_resumed, monkeypatch):
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.tracking import MlflowClient
    run_dir = killed_and_resumed[3]
    client = MlflowClient(f"sqlite:///{run_dir.parent.parent / 'mlflow' / 'store.db'}")
    experiment = client.get_experiment_by_name("s")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    (parent,) = parents      # the killed session logged nothing: it never concluded
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    report = json.loads((run_dir / "report.json").read_text())
    ran = {t["id"] for t in report["search"]["trials"] if t["state"] == "complete"}
    assert len(children) == len(ran) == 3
    rec = report["recommendations"][0]
    assert parent.data.tags["recommend.host-cpu"].startswith(rec["artifact"])


def test_a_targets_threads_and_engines_can_be_searched():
    data = _search_pipeline()
    data["search"]["space"] = {"targets.host-cpu.threads": [1, 2]}
    pipeline = parse_pipeline(data)
    space = _axes(pipeline)
    made = [variant(pipeline, space, p, name="t")[0] for p in combinations(space)]
    assert [m.targets[0].threads for m in made] == [1, 2]
    assert variant_key(made[0]) != variant_key(made[1])
    assert resolve_targets(made[0]).pairs[0][1].runtime.threads == 1
    data["search"]["space"] = {"targets.host-cpu.threads": [0, 2]}
    with pytest.raises(ConfigError, match="search.space.targets.host-cpu.threads: 0"):
        _axes(parse_pipeline(data))
    data["search"]["space"] = {"targets.rpi9.threads": [1]}
    with pytest.raises(ConfigError, match="no target is named 'rpi9'; targets: host-cpu"):
        _axes(parse_pipeline(data))


@pytest.mark.runs
def test_an_optuna_search_killed_mid_trial_resumes_from_its_study(tmp_path, digits_checkpoint):
    """The study in sqlite: the trial the kill left running is failed and asked again,
    the finished one is not run again."""
    from tests.conftest import fill_project
    folder = fill_project(tmp_path, digits_checkpoint)
    data = _search_pipeline(strategy="optuna", max_trials=2)
    data["search"]["space"] = {"quantize.calibration": ["minmax", "percentile"]}
    path = write_pipeline(folder, data)
    run_dir = folder / "runs" / "s"
    before = _killed_after_first_trial(path, folder, run_dir)   # most often in the second
    assert (run_dir / "search.db").is_file() and before
    resumed = subprocess.run([sys.executable, "-m", "compress", "run", str(path)], cwd=folder,
                             capture_output=True, text=True, timeout=600, env=ENV)
    assert resumed.returncode in (0, 1), resumed.stderr
    after = _trial_records(run_dir)
    for trial, record in before.items():
        assert after[trial] == record
    report = json.loads((run_dir / "report.json").read_text())
    complete = [t for t in report["search"]["trials"] if t["state"] == "complete"]
    assert len(complete) == 2 and report["search"]["resumed"] == len(before)
    assert {t["params"]["quantize.calibration"] for t in complete} == {"minmax", "percentile"}
    if "a kill interrupted are run again" not in resumed.stderr:   # killed between trials
        assert len(after) == 2


def test_a_changed_search_or_force_sets_the_old_trials_aside(tmp_path):
    from compress.search import resume as search_resume
    notes = []
    (tmp_path / "trials" / "t000").mkdir(parents=True)
    (tmp_path / "search.db").write_text("study")
    search_resume.prepare(tmp_path, "trials", "search.db", notes.append, "a" * 64, False)
    assert (tmp_path / "trials-unknown0").is_dir()    # no fingerprint: not trusted
    (tmp_path / "trials" / "t000").mkdir()
    search_resume.prepare(tmp_path, "trials", "search.db", notes.append, "a" * 64, False)
    assert (tmp_path / "trials" / "t000").is_dir() and len(notes) == 1   # the same search
    search_resume.prepare(tmp_path, "trials", "search.db", notes.append, "b" * 64, False)
    assert (tmp_path / "trials-aaaaaaaa" / "t000").is_dir()
    assert not (tmp_path / "trials" / "t000").exists() and "changed" in notes[-1]
    search_resume.prepare(tmp_path, "trials", "search.db", notes.append, "b" * 64, True)
    assert (tmp_path / "trials-bbbbbbbb").is_dir() and notes[-1].startswith("search: --force")


@pytest.mark.runs
def test_the_merged_report_holds_each_file_once(killed_and_resumed):
    run_dir = killed_and_resumed[3]
    report = json.loads((run_dir / "report.json").read_text())
    shas = [a["sha256"] for a in report["artifacts"]]
    assert len(shas) == len(set(shas))
    assert len({(b["artifact"], b["target"]) for b in report["benchmarks"]}) == \
        len(report["benchmarks"])
    assert "## Search: 4 trials (exhaustive" in (run_dir / "report.md").read_text()
