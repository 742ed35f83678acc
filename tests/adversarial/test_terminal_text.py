"""Hostile text never reaches the terminal or the logs as it is, and a URL's password is
never shown.

Text from outside (a profile's fields, a model's op types, a report read back, an MLflow
experiment's name, a library's message) may hold terminal control codes: an OSC sequence
sets the terminal's title (ESC ] 0 ; title BEL), a CSI sequence clears the screen, a C1
byte is an escape of its own. One sanitizer (runtimes/safe_text.py) shows each as its
escape; it is applied where text is printed (the errors' constructors, the progress
notes, the CLI's lines, preflight's table, compare's lines). A tracking URI's password
is masked wherever the URI is shown; a sqlite URI naming a file that is no database is
refused before any work.
"""
from __future__ import annotations

import importlib.util
import io
import json
import os
import sqlite3
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from compress.errors import ConfigError, ModelError, StageError
from runtimes.errors import RuntimeInputError
from runtimes.safe_text import mask_credentials, safe_text
from tests.conftest import pipeline_dict, run_cli, write_pipeline

TITLE = "\x1b]0;pwned\x07"                 # sets the terminal's title
TITLE_ST = "\x1b]2;pwned\x1b\\"            # the same, ended by ST
CLEAR = "\x1b[2J\x1b[H"                    # clears the screen
HOSTILE = f"x{TITLE}{TITLE_ST}{CLEAR}\x9b31m\r\x08\x7f\u202eevil"
SECRET = "S3cr3tPassw0rd"
CONTROLS = [chr(c) for c in (*range(0x20), *range(0x7f, 0xa0))] + [
    "\u202a", "\u202e", "\u2066", "\u2069", TITLE, TITLE_ST, CLEAR]
TEXT = st.lists(st.characters() | st.sampled_from(CONTROLS), max_size=40).map("".join)
PROPERTY = settings(max_examples=400, deadline=None, derandomize=True)


def _unsafe(text: str, multiline: bool = True) -> list[str]:
    """The characters of `text` that drive a terminal (or break a line, for one line)."""
    allowed = "\n\t" if multiline else ""
    return [c for c in text if (ord(c) < 0x20 and c not in allowed) or 0x7f <= ord(c) <= 0x9f
            or 0x202a <= ord(c) <= 0x202e or 0x2066 <= ord(c) <= 0x2069]


def _assert_clean(*outputs: str) -> None:
    for text in outputs:
        assert not _unsafe(text), repr(text[:400])
        assert "\x1b" not in text and SECRET not in text


# --- the sanitizer ---------------------------------------------------------------------

@PROPERTY
@given(text=TEXT)
@example(text=HOSTILE)
def test_sanitized_text_holds_no_control_code_and_a_second_pass_changes_nothing(text):
    shown, line = safe_text(text), safe_text(text, multiline=False)
    assert not _unsafe(shown) and not _unsafe(line, multiline=False)
    assert "\n" not in line and "\x1b" not in shown
    assert safe_text(shown) == shown and safe_text(line, multiline=False) == line


@PROPERTY
@given(text=TEXT)
def test_every_control_character_is_shown_as_its_escape(text):
    if "://" in text:
        return   # a URL's password is masked: the length changes otherwise
    escaped = _unsafe(text)
    wide = sum(ord(c) > 0xff for c in escaped)
    # \x1b (4 characters for 1), \u202e (6 for 1): nothing else added, nothing dropped
    assert len(safe_text(text)) == len(text) + 3 * (len(escaped) - wide) + 5 * wide
    assert safe_text("a\x1b]0;t\x07b") == "a\\x1b]0;t\\x07b"


@PROPERTY
@given(text=st.lists(st.characters(blacklist_categories=("Cc", "Cs", "Cf", "Zl", "Zp"))
                     | st.sampled_from(["\n", "\t", "\\", "C:\\Users\\x"]),
                     max_size=40).map("".join))
def test_printable_text_comes_back_unchanged(text):
    if "://" not in text:
        assert safe_text(text) == text


@PROPERTY
@given(user=st.text("abcXYZ019_.-%", max_size=12),
       password=st.text(st.characters(blacklist_characters="/?#",
                                      blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp")),
                        min_size=1, max_size=24))
def test_a_urls_password_is_masked_whatever_it_holds(user, password):
    for scheme in ("http", "https", "postgresql+psycopg2"):
        uri = f"{scheme}://{user}:{password}@db.example:5432/mlflow"
        assert mask_credentials(f"cannot reach {uri}.") == \
            f"cannot reach {scheme}://{user}:***@db.example:5432/mlflow."
    assert mask_credentials("http://host:5000/x and sqlite:///a.db") == \
        "http://host:5000/x and sqlite:///a.db"


def test_the_error_types_make_their_messages_safe_to_print():
    said = [str(ConfigError(f"bad {HOSTILE} at http://u:{SECRET}@h", field="x")),
            str(ModelError(HOSTILE)), str(StageError(2, "quantize", HOSTILE)),
            str(RuntimeInputError(f"{HOSTILE} http://u:{SECRET}@h"))]
    _assert_clean(*said)
    assert "\\x1b]0;pwned\\x07" in said[1] and "u:***@h" in said[0]
    # a library's colour codes are dropped, not shown: "\x1b[31mred\x1b[0m" reads "red"
    assert str(ModelError("\x1b[31mred\x1b[0m")) == "red"


# --- the seams -------------------------------------------------------------------------

class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [False, True])
def test_progress_notes_are_safe_and_never_read_as_markup(tty, monkeypatch, capsys):
    from compress.runner.progress import Progress
    stream = _Terminal() if tty else sys.stderr
    monkeypatch.setattr(sys, "stderr", stream)
    with Progress() as progress:
        progress.note(f"warning: {HOSTILE} [/bold] http://u:{SECRET}@h")
        with progress.task(f"benchmark {TITLE}[/x]", 3) as advance:
            advance()
    said = stream.getvalue() if tty else capsys.readouterr().err
    assert "pwned" in said and "[/bold]" in said and "u:***@h" in said
    assert TITLE not in said and TITLE_ST not in said and SECRET not in said


def test_an_off_target_verdict_with_a_hostile_arch_prints_escaped(tmp_path, capsys):
    """A profile's device.arch reaches the verdict line of `compress run`."""
    from compress.cli import _print_summary
    from profiles import load_profile
    from profiles.check import on_target
    board = tmp_path / "board.yaml"
    board.write_text(yaml_profile(f"arm{TITLE}\nPASSED: forged"))
    profile = load_profile(str(board))
    _, reason = on_target(profile, {"arch": "x86_64", "cpu": "some cpu"})
    assert TITLE in reason   # the verdict keeps the profile's text: the printing is safe
    verdict = {"artifact": "int8", "target": "board", "metric": "energy_mj", "budget": 5}
    report = {"fits": [{"target": "board", "artifact": "int8", "baseline": False,
                        "fits": f"not measured: {reason}"}],
              "verdicts": [{**verdict, "value": None, "status": "unmeasured", "reason": reason},
                           {**verdict, "value": None, "status": "fail",
                            "reason": f"did not run: {reason}"}],
              "recommendations": [{"target": "board", "status": "nothing fits",
                                   "why": reason, "closest_miss": {"artifact": reason}}],
              "gated_targets": ["board"], "benchmarks": []}
    _print_summary(SimpleNamespace(report=report, passed=True, run_dir=tmp_path))
    out = capsys.readouterr().out
    _assert_clean(out)
    assert "\\x1b]0;pwned\\x07" in out
    assert [line for line in out.splitlines() if line.startswith("PASSED")] == [
        out.splitlines()[-1]]   # the profile's newline started no line of its own


def yaml_profile(arch: str) -> str:
    return json.dumps({"name": "board", "device": {"arch": arch},
                       "budget": {"latency_p90_ms": 10, "energy_mj": 5}})


def _hostile_onnx(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Relu", ["x"], ["y"], name=f"relu{TITLE}"),
             helper.make_node(f"Evil{TITLE}{CLEAR}\x9b", ["y"], ["z"], domain="com.evil",
                              name=f"n{TITLE_ST}")]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("com.evil", 1)]),
              path)
    return path


def test_preflight_shows_a_hostile_op_type_escaped(tmp_path):
    model = _hostile_onnx(tmp_path / "evil.onnx")
    table = run_cli("preflight", model, "--profile", "qcs6490", cwd=tmp_path)
    assert table.returncode == 1, table.stderr   # the op would fall back: its answer stands
    _assert_clean(table.stdout, table.stderr)
    assert "Evil\\x1b]0;pwned\\x07" in table.stdout
    as_json = run_cli("preflight", model, "--profile", "qcs6490", "--json", cwd=tmp_path)
    _assert_clean(as_json.stdout)   # JSON writes every control character as \\u00XX
    assert json.loads(as_json.stdout)["ops"][1]["op"] == f"Evil{TITLE}{CLEAR}\x9b"


def _report(summary: str, package: str) -> dict:
    return {"pipeline": {"name": "t", "config_sha256": "ab" * 32, "config": {"seed": summary}},
            "manifest": {"created": f"2026-01-01{TITLE}", "packages": {"onnx": package}},
            "passed": True, "recommendations": [{"target": f"t{TITLE}", "summary": summary,
                                                 "artifact": "a", "status": "ship"}],
            "verdicts": [], "benchmarks": []}


def test_runs_and_compare_show_a_tampered_report_escaped(tmp_path):
    """report.json is a file anyone may edit: what `runs` and `compare` print of it."""
    for name, package in (("a", f"1.0{CLEAR}"), ("b", f"2.0{TITLE_ST}")):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "report.json").write_text(
            json.dumps(_report(f"ship {HOSTILE}\nPASSED: forged", package)))
    listed = run_cli("runs", cwd=tmp_path)
    compared = run_cli("compare", "a", "b", cwd=tmp_path)
    for done in (listed, compared):
        assert done.returncode == 0, done.stderr
        _assert_clean(done.stdout, done.stderr)
        assert "pwned" in done.stdout
        assert not any(line.startswith("PASSED: forged") for line in done.stdout.splitlines())


@pytest.mark.skipif(not all(importlib.util.find_spec(m)
                            for m in ("mlflow", "sqlalchemy", "alembic")),
                    reason="the tracking extra is not installed")
def test_a_hostile_experiment_name_is_logged_and_shown_escaped(tmp_path, capsys):
    from compress.config.tracking import TrackingSpec
    from compress.runner.progress import Progress
    from compress.runner.tracking.mlflow import track_result
    spec = TrackingSpec.model_validate(
        {"mlflow": {"uri": "sqlite:///mlflow.db", "experiment": f"exp{TITLE}\x9b"}})
    pipeline = SimpleNamespace(tracking=spec, base_dir=tmp_path, name=f"run{TITLE_ST}")
    with Progress() as progress:
        run_id = track_result(pipeline, SimpleNamespace(report={"passed": True},
                                                        run_dir=tmp_path), progress.note)
    said = capsys.readouterr().err
    assert run_id and "logged to MLflow: experiment 'exp\\x1b]0;pwned\\x07\\x9b'" in said
    _assert_clean(said)


# --- tracking URIs ---------------------------------------------------------------------

def _database(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (x)")


@pytest.mark.parametrize("planted, said", [
    (lambda p: p.write_text("these are notes, not a database\n"), "is not an SQLite database"),
    (lambda p: p.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200), "is not an SQLite database"),
    (lambda p: p.mkdir(), "is a folder"),
    (os.mkfifo, "is not a regular file"),
    (lambda p: (_database(p.with_name("real.db")),
                p.write_bytes(p.with_name("real.db").read_bytes()[:120])),
     "is not an SQLite database"),
])
def test_a_sqlite_uri_naming_no_database_is_refused_up_front(tmp_path, planted, said):
    from compress.runner.tracking.uri import resolve_store
    planted(tmp_path / "mlflow.db")
    with pytest.raises(ConfigError) as raised:
        resolve_store("sqlite:///mlflow.db", tmp_path)
    assert said in str(raised.value) and str(tmp_path / "mlflow.db") in str(raised.value)
    assert str(raised.value).startswith("tracking.mlflow.uri: ")


@pytest.mark.parametrize("planted", [None, lambda p: p.write_bytes(b""), _database])
def test_a_sqlite_uri_naming_a_database_or_a_new_file_is_taken(tmp_path, planted):
    from compress.runner.tracking.uri import resolve_store
    if planted:
        planted(tmp_path / "mlflow.db")
    assert resolve_store("sqlite:///mlflow.db", tmp_path).kind == "sqlite"
    assert resolve_store("sqlite:///new/folder/mlflow.db", tmp_path).kind == "sqlite"


def _tracked(project: Path, uri: str) -> Path:
    return write_pipeline(project, pipeline_dict(tracking={"mlflow": {"uri": uri}}))


def test_a_run_tracking_into_a_file_that_is_no_database_exits_2_before_any_work(project):
    (project / "notes.txt").write_text("not a database\n")
    done = run_cli("run", _tracked(project, "sqlite:///notes.txt"), "--quiet", cwd=project)
    assert done.returncode == 2, done.stderr
    assert f"{project / 'notes.txt'} is not an SQLite database" in done.stderr
    assert "Traceback" not in done.stderr and not (project / "runs").exists()
    assert (project / "notes.txt").read_text() == "not a database\n"


def test_a_tracking_uris_password_is_never_printed(project):
    for uri in (f"ftp://alice:{SECRET}@tracking.example", f"http://alice:{SECRET}@"):
        done = run_cli("run", _tracked(project, uri), "--quiet", cwd=project)
        assert done.returncode == 2, done.stderr
        assert "alice:***@" in done.stderr
        _assert_clean(done.stdout, done.stderr)


@pytest.mark.runs  # a whole CLI run: `make test-runs`
def test_a_whole_run_with_hostile_profile_and_tracking_prints_nothing_raw(project):
    """device.arch with a title sequence: the off-target verdict line; a tracking server
    behind a password that is down: the warning line; nothing of either raw, anywhere."""
    (project / "board.yaml").write_text(yaml_profile(f"arm{TITLE}"))
    data = pipeline_dict(targets=["board.yaml"], tracking={"mlflow": {
        "uri": f"http://alice:{SECRET}@127.0.0.1:9", "experiment": f"exp{TITLE}"}})
    done = run_cli("run", write_pipeline(project, data), cwd=project)
    assert done.returncode == 0, done.stderr
    _assert_clean(done.stdout, done.stderr)
    assert "\\x1b]0;pwned\\x07" in done.stdout          # the verdict line, escaped
    assert "not logged to MLflow" in done.stderr and "alice:***@" in done.stderr
    written = [p for p in (project / "runs").rglob("*") if p.is_file()]
    assert written and not [p for p in written if SECRET.encode() in p.read_bytes()]
    # report.json writes the code as \u001b (report.md and report.html keep the profile's
    # text as their own escaping leaves it)
    assert not [p for p in written if p.suffix == ".json" and b"\x1b" in p.read_bytes()]


def test_a_librarys_warnings_and_log_lines_pass_the_sanitizer_under_the_cli():
    import subprocess
    code = ("import logging, warnings\nfrom compress.cli import _safe_library_warnings\n"
            "_safe_library_warnings()\n"
            f"warnings.warn({HOSTILE!r} + ' http://u:{SECRET}@h')\n"
            f"logging.getLogger('some.library').warning({TITLE!r})\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    _assert_clean(done.stderr)
    assert "UserWarning: x\\x1b]0;pwned" in done.stderr and "u:***@h" in done.stderr
