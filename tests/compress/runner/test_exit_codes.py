"""Exit codes a CI gate can trust: 0 budgets hold, 1 a budget is missed (nothing else), 2
bad input, 3 an internal error, with one line on screen and the traceback in a crash log
(in the run directory once it exists)."""
from __future__ import annotations

import compress.api
import compress.runner.produce
from compress import cli
from tests.conftest import pipeline_dict, run_cli, write_pipeline


def _crash(*args, **kwargs):
    raise ZeroDivisionError("a bug planted by the test")


def test_a_bug_before_the_run_exits_3_with_a_crash_log(project, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(compress.api, "run_pipeline", _crash)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    code = cli.main(["run", str(write_pipeline(project, pipeline_dict()))])
    err = capsys.readouterr().err
    assert code == 3
    assert err.count("\n") == 1 and err.startswith("internal error (a bug in edge-compress")
    assert "ZeroDivisionError: a bug planted by the test" in err and "Traceback" not in err
    logs = list(tmp_path.glob("crash-*.log"))
    assert len(logs) == 1 and "Traceback" in logs[0].read_text()
    assert "ZeroDivisionError" in logs[0].read_text()


def test_a_bug_during_the_run_logs_into_the_run_directory(project, monkeypatch, capsys):
    monkeypatch.setattr(compress.runner.produce, "_baselines", _crash)  # after the stages ran
    code = cli.main(["run", str(write_pipeline(project, pipeline_dict())), "--quiet"])
    assert code == 3
    logs = list((project / "runs" / "t").glob("crash-*.log"))
    assert len(logs) == 1 and str(logs[0]) in capsys.readouterr().err


def test_help_lists_the_exit_codes():
    done = run_cli("--help")
    assert done.returncode == 0
    for line in ("0    every gated budget holds", "1    a budget is missed",
                 "2    bad input", "3    an internal error (a bug)"):
        assert line in done.stdout
