"""Run history: a re-run keeps the last run's reports, `compress runs` lists them,
`compress compare` says what changed, --name/--output move a run, and a run under another
name reuses every stage through the shared stage cache."""
import json

import pytest

from tests.conftest import pipeline_dict, run_cli, write_pipeline

pytestmark = pytest.mark.runs   # `make test-runs`: six pipeline runs in subprocesses


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, digits_checkpoint):
    from tests.conftest import fill_project
    folder = fill_project(tmp_path_factory.mktemp("history"), digits_checkpoint)
    data = pipeline_dict(name="h")
    data["stages"][-1].update(warmup=2, runs=10, rounds=1)
    first = run_cli("run", write_pipeline(folder, data), "--quiet", cwd=folder)
    data["stages"][1]["calibration"] = "percentile"
    second = run_cli("run", write_pipeline(folder, data), "--quiet", cwd=folder)
    moved = run_cli("run", write_pipeline(folder, data), "--name", "other", "--output",
                    "elsewhere", cwd=folder)
    return folder, first, second, moved


def test_a_rerun_keeps_the_last_runs_reports_in_its_history(two_runs):
    folder, first, second, _ = two_runs
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    history = sorted((folder / "runs" / "h" / "history").iterdir())
    assert len(history) == 2
    configs = [json.loads((h / "report.json").read_text())["pipeline"]["config"]
               for h in history]
    assert [c["stages"][1]["calibration"] for c in configs] == ["minmax", "percentile"]
    listed = run_cli("runs", "--all", cwd=folder)
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()
            if not line.startswith(" ")] == ["h", "h~0", "h~1"]


def test_compare_says_what_changed(two_runs):
    folder = two_runs[0]
    shown = run_cli("compare", "h~1", "h", cwd=folder)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "calibration: minmax -> percentile" in out
    assert "package versions:\n  unchanged" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("host-cpu 02-quantize:"))
    oldest = sorted((folder / "runs/h/history").iterdir())[0]   # named by UTC time
    before = json.loads((oldest / "report.json").read_text())
    p90 = next(b["latency_ms"]["p90"] for b in before["benchmarks"]
               if b["artifact"] == "02-quantize")
    assert f"p90 ms {p90:.4g} -> " in line
    (folder / "not-a-report.json").write_text("[1]")
    bad = run_cli("compare", "not-a-report.json", "h", cwd=folder)
    assert bad.returncode == 2 and "is not a report.json written by" in bad.stderr
    missing = run_cli("compare", "h", "nope", cwd=folder)
    assert missing.returncode == 2 and "no finished run 'nope'" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_name_and_output_move_the_run_and_the_stage_cache_serves_it(two_runs):
    folder, _, _, moved = two_runs
    assert moved.returncode == 0, moved.stderr
    assert (folder / "elsewhere" / "other" / "report.json").is_file()
    # another output folder has its own cache: the stages were made there, once
    assert "reused from the stage cache" not in moved.stderr
    again = run_cli("run", folder / "pipeline.yaml", "--name", "third", "--output",
                    "elsewhere", cwd=folder)
    assert again.returncode == 0, again.stderr
    for stage in ("01-export.onnx", "02-quantize"):
        assert f"{stage}: reused from the stage cache" in again.stderr
    assert "done in" not in again.stderr.replace("00-source: done", "")


def test_a_bad_name_is_refused_before_anything_runs(two_runs):
    folder = two_runs[0]
    bad = run_cli("run", folder / "pipeline.yaml", "--name", "../up", cwd=folder)
    assert bad.returncode == 2 and "--name '../up'" in bad.stderr
    assert not (folder / "up").exists()
