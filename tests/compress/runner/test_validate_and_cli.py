"""`compress validate` checks what it can without running any work or any of the user's
code (a factory, loader or metric function is found and read, never imported; the files a
pipeline names exist), says "did you mean" for a misspelt name, and numbers a list's
items from 1 as the stage folders are; and what a CLI is expected to have: `--version`,
`run --json` (one JSON document on stdout, every human line on stderr)."""
from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from compress.cli import main
from compress.config.pipeline import parse_pipeline
from compress.core.find_code import check_named
from compress.errors import ConfigError
from runtimes.suggest import closest
from tests.conftest import pipeline_dict, run_cli, write_pipeline

# a module that leaves a file behind when it is imported, and one more for each function
# called: validate must leave none (test_security.py names its functions too)
TRAP = textwrap.dedent("""\
    import pathlib
    pathlib.Path(__file__).with_name("RAN-" + __name__).write_text("imported")

    def build():
        pathlib.Path(__file__).with_name("RAN-build").write_text("called")

    def calibration():
        pathlib.Path(__file__).with_name("RAN-calibration").write_text("called")

    def load():
        pathlib.Path(__file__).with_name("RAN-load").write_text("called")

    def score(predictions, references):
        return 1.0
    """)


@pytest.fixture
def folder(tmp_path) -> Path:
    """A pipeline's folder: trap modules for the model and the data, a checkpoint file
    (never read by validate, so any bytes do)."""
    (tmp_path / "model.py").write_text(TRAP)
    (tmp_path / "data.py").write_text(TRAP)
    (tmp_path / "digits_cnn.pt").write_bytes(b"not read")
    return tmp_path


def _pipeline(folder: Path, **overrides) -> Path:
    data = {"calibration": "data:calibration", "evaluation": "data:calibration"}
    return write_pipeline(folder, pipeline_dict(**{"data": data, **overrides}))


def _with_factory(folder: Path, factory: str, **torch) -> Path:
    model = pipeline_dict()["model"]
    model["torch"] = {"factory": factory, "checkpoint": "digits_cnn.pt", **torch}
    return _pipeline(folder, model=model)


def _validate(path: Path, capsys) -> tuple[int, str, str]:
    code = main(["validate", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


def _refused(path: Path, capsys, *words: str) -> str:
    code, out, err = _validate(path, capsys)
    assert code == 2 and out == "", (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for word in words:
        assert word in err, (word, err)
    assert not list(path.parent.glob("RAN-*")), "validate ran the user's code"
    return err


# --- A: the code and files a pipeline names, found without running them -----------------


def test_a_valid_pipeline_is_valid_and_its_code_never_runs(folder, capsys):
    code, out, err = _validate(_pipeline(folder), capsys)
    assert code == 0, err
    assert "valid pipeline 't' with 3 stages and 1 target" in out
    assert not list(folder.glob("RAN-*"))


def test_a_misspelt_factory_is_named_with_its_file_and_the_closest_name(folder, capsys):
    _refused(_with_factory(folder, "model:buld"), capsys, "model.torch.factory",
             str(folder / "model.py"), "has no top-level 'buld'", "did you mean 'build'?")


def test_a_module_that_cannot_be_found_says_where_it_looked(folder, capsys):
    _refused(_with_factory(folder, "modle:build"), capsys, "model.torch.factory",
             "no module 'modle'", "did you mean 'model'?", str(folder), "Python path")
    _refused(_with_factory(folder, "model.sub:build"), capsys, "no module 'model.sub'")


def test_a_missing_checkpoint_and_missing_data_files_are_named(folder, capsys):
    (folder / "digits_cnn.pt").unlink()
    _refused(_pipeline(folder), capsys, "model.torch.checkpoint: file not found",
             str(folder / "digits_cnn.pt"))
    (folder / "digits_cnn.pt").write_bytes(b"")
    data = {"calibration": "data:calibration", "evaluation": "held-out.npz"}
    _refused(write_pipeline(folder, pipeline_dict(data=data)), capsys,
             "data.evaluation.npz: file not found", "held-out.npz")
    os.mkfifo(folder / "fifo.npz")   # never opened: reading it would wait for a writer
    data["evaluation"] = "fifo.npz"
    _refused(write_pipeline(folder, pipeline_dict(data=data)), capsys, "data.evaluation.npz",
             "FIFO")


def test_loaders_and_metric_functions_are_checked_like_the_factory(folder, capsys):
    data = {"calibration": "data:calibraton", "evaluation": "data:calibration"}
    _refused(write_pipeline(folder, pipeline_dict(data=data)), capsys,
             "data.calibration.loader", "did you mean 'calibration'?")
    data = {"calibration": "data:calibration", "evaluation": "data:calibration",
            "metric": {"type": "custom", "function": "data:scor"}}
    _refused(write_pipeline(folder, pipeline_dict(data=data)), capsys,
             "data.metric.function", "did you mean 'score'?")


def test_a_stages_own_models_are_checked(folder, capsys):
    stages = [{"type": "distill", "teacher": {"factory": "model:biuld",
                                              "checkpoint": "digits_cnn.pt"}},
              {"type": "export.onnx"}, {"type": "benchmark"}]
    data = {"calibration": "data:calibration", "evaluation": "data:calibration",
            "train": "data:calibration"}
    _refused(write_pipeline(folder, pipeline_dict(data=data, stages=stages)), capsys,
             "stages[1] (distill).teacher.factory", "did you mean 'build'?")
    stages[0] = {"type": "distill", "student": {"factory": "model:build",
                                                "checkpoint": "student.pt"}}
    _refused(write_pipeline(folder, pipeline_dict(data=data, stages=stages)), capsys,
             "stages[1] (distill).student.checkpoint: file not found")


def test_a_targets_own_python_must_be_an_executable(folder, capsys):
    targets = [{"profile": "host-cpu", "python": "venv/bin/python"}]
    _refused(_pipeline(folder, targets=targets), capsys, "targets[1]",
             "not an executable Python")


@pytest.mark.parametrize("source, valid, words", [
    ("from helpers import build\n", True, ()),           # imported from elsewhere: present
    ("try:\n    from fast import build\nexcept ImportError:\n    def build():\n        pass\n",
     True, ()),
    ("from torchvision.models import *\n", True, ()),    # a star import may bring it
    ("def __getattr__(name):\n    return print\n", True, ()),
    ("globals()['build'] = print\n", True, ()),
    ("build = None\ndef load():\n    global build\n    build = print\n", True, ()),
    ("for build in [print]:\n    pass\n", True, ()),
    ("with open(__file__) as build:\n    pass\n", True, ()),
    ("build = make_builder()\n", True, ()),
    ("build = 3\n", False, ("a value written in the file",)),
    ("import build\n", False, ("a module it imports",)),
    ("build: object\n", False, ("has no top-level 'build'",)),   # annotated, never bound
    ("def build(:\n", False, ("syntax error", "line 1")),
    ("def helper():\n    build = 1\n", False, ("has no top-level 'build'",)),
], ids=["imported", "try-except", "star", "module-getattr", "globals", "global-rebound",
        "loop", "with", "call", "literal", "module", "annotation", "syntax", "local"])
def test_what_counts_as_a_top_level_name(tmp_path, source, valid, words):
    (tmp_path / "net.py").write_text(source)
    if valid:
        check_named("net:build", tmp_path, "model.torch.factory")
        return
    with pytest.raises(ConfigError) as info:
        check_named("net:build", tmp_path, "model.torch.factory")
    assert str(info.value).startswith("model.torch.factory: ")
    for word in words:
        assert word in str(info.value)


def test_a_package_beside_the_pipeline_is_found_without_importing_its_parents(folder, capsys):
    (folder / "nets").mkdir()
    (folder / "nets" / "__init__.py").write_text(TRAP)
    (folder / "nets" / "small.py").write_text(TRAP)
    code, out, err = _validate(_with_factory(folder, "nets.small:build"), capsys)
    assert code == 0, err
    _refused(_with_factory(folder, "nets.small:buil"), capsys, "did you mean 'build'?",
             str(folder / "nets" / "small.py"))


def test_installed_modules_are_read_too_never_imported(folder, capsys):
    # the standard library's csv.py: found on the Python path, read, not imported
    code, out, err = _validate(_with_factory(folder, "csv:DictReader"), capsys)
    assert code == 0, err
    _refused(_with_factory(folder, "csv:DictRaeder"), capsys, "csv.py",
             "did you mean 'DictReader'?")
    code, out, err = _validate(_with_factory(folder, "os.path:join"), capsys)  # os's alias
    assert code == 0, err


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.from_regex(r"[a-z_.]{0,7}:[a-z_.]{0,7}", fullmatch=True))
def test_any_factory_name_is_valid_or_a_clear_error_never_a_crash(folder, capsys, name):
    code, out, err = _validate(_with_factory(folder, name), capsys)
    assert code in (0, 2), err
    assert code == 0 or (err.startswith("error: ") and len(err.strip().splitlines()) == 1)
    assert not list(folder.glob("RAN-*"))


def test_a_module_that_would_shadow_an_installed_one_is_refused(folder, capsys):
    (folder / "json.py").write_text(TRAP)
    _refused(_with_factory(folder, "json:build"), capsys, "model.torch.factory",
             "standard library's module 'json'", "Rename the file")


def test_validate_never_imports_any_of_it_as_a_user_runs_it(folder):
    """The same, in a process of its own: nothing of the pipeline's code is imported."""
    bad = run_cli("validate", _with_factory(folder, "model:buld"), cwd=folder)
    assert bad.returncode == 2 and "did you mean 'build'?" in bad.stderr
    good = run_cli("validate", _pipeline(folder), cwd=folder)
    assert good.returncode == 0, good.stderr
    assert sorted(p.name for p in folder.glob("RAN-*")) == []


# --- did you mean, for every list of valid names -----------------------------------------


@pytest.mark.parametrize("change, words", [
    ({"targets": ["rpi-4"]}, ("targets[1]: unknown profile 'rpi-4' (did you mean 'rpi4'?)",)),
    ({"stages": [{"type": "export.onnx"}, {"type": "quantise"}, {"type": "benchmark"}]},
     ("stages[2].type: unknown stage type 'quantise' (did you mean 'quantize'?)",)),
    ({"stages": [{"type": "export.onnx"}, {"type": "quantize", "scheme": "int8-statc"},
                 {"type": "benchmark"}]},
     ("stages[2] (quantize).scheme: unknown scheme 'int8-statc' (did you mean "
      "'int8-static'?)",)),
    ({"stages": [{"type": "export.onnx"},
                 {"type": "quantize", "scheme": "int8-static", "calibraton": "minmax"},
                 {"type": "benchmark"}]},
     ("stages[2] (quantize).calibraton: unknown key", "did you mean 'calibration'?")),
    ({"stages": [{"type": "export.onnx"},
                 {"type": "quantize", "scheme": "int8-static", "calibration": "minmx"},
                 {"type": "benchmark"}]},
     ("stages[2] (quantize).calibration", "did you mean 'minmax'?")),
    ({"model": {"torch": {"factory": "model:build", "checkpont": "x.pt"},
                "inputs": [{"name": "image", "shape": [1, 1, 8, 8]}]}},
     ("model.torch.checkpont", "did you mean 'checkpoint'?")),
    ({"data": {"calibration": {"lodaer": "data:calibration"}}},
     ("data.calibration", "did you mean 'loader'?")),
    ({"targets": [{"profile": "host-cpu", "thraeds": 2}]},
     ("targets[1].thraeds", "did you mean 'threads'?")),
], ids=["profile", "stage-type", "scheme", "stage-option", "choice", "model-key",
        "data-key", "target-key"])
def test_a_misspelt_name_gets_the_closest_valid_one(folder, capsys, change, words):
    _refused(_pipeline(folder, **change), capsys, *words)


def test_a_stage_class_from_python_says_it_too():
    from compress import ExportOnnx
    with pytest.raises(ConfigError, match="opsett: unknown key .*did you mean 'opset'"):
        ExportOnnx(opsett=17)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-.", max_size=12),
       st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-", min_size=1, max_size=12),
                max_size=8))
def test_a_suggestion_is_always_one_of_the_choices_and_never_the_name_given(given_, choices):
    found = closest(given_, choices)
    assert found is None or (found in choices and found != given_)


# --- error paths numbered like the folders -----------------------------------------------


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.integers(1, 6).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))),
       st.sampled_from(["opset", "exporter", "parity_samples"]), st.data())
def test_a_stages_number_in_an_error_is_its_folders_number(layout, key, data):
    count, bad = layout
    cut = data.draw(st.integers(0, len(key) - 1))
    typo = key[:cut] + key[cut + 1:]   # one letter dropped
    stages = [{"type": "export.onnx", "input": "source", "name": f"s{i}"} for i in range(count)]
    stages[bad] = {**stages[bad], typo: 1}
    with pytest.raises(ConfigError) as info:
        parse_pipeline(pipeline_dict(stages=[*stages, {"type": "benchmark"}]))
    message = str(info.value)
    assert message.startswith(f"stages[{bad + 1}] (export.onnx).{typo}: unknown key")
    assert f"did you mean '{key}'?" in message
    unnamed = [{"type": "export.onnx", "input": "source"} for _ in range(count)]
    folders = parse_pipeline(pipeline_dict(stages=[*unnamed, {"type": "benchmark"}]))
    assert folders.stage_names()[bad].startswith(f"{bad + 1:02d}-")


def test_other_lists_count_from_1_too(folder, capsys):
    model = {"torch": {"factory": "model:build"},
             "inputs": [{"name": "image", "shape": [1, 0, 8, 8]}]}
    _refused(_pipeline(folder, model=model), capsys, "model.inputs[1].shape[2]: Input should "
             "be greater than 0")
    _refused(_pipeline(folder, targets=["host-cpu", "host-cpu"]), capsys,
             "targets[2]: target 'host-cpu' is listed twice")


# --- B: what a CLI is expected to have ---------------------------------------------------


def test_version_is_the_installed_packages():
    from importlib import metadata
    done = run_cli("--version")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.strip() == f"compress {metadata.version('edge-compress')}"


def test_json_human_lines_go_to_stderr_even_a_native_libraries(capfd):
    from compress.runner.summary import human_text_to_stderr
    with human_text_to_stderr():
        print("a line for a person")
        os.write(1, b"a native library's line\n")   # past sys.stdout, on descriptor 1
    print("the document")
    out, err = capfd.readouterr()
    assert out == "the document\n"
    assert "a line for a person" in err and "a native library's line" in err


def _result(tmp_path, passed: bool) -> SimpleNamespace:
    report = {"recommendations": [
        {"target": "host-cpu", "status": "ship", "artifact": "02-quantize", "path": "x.onnx",
         "latency_p90_ms": 0.02, "model_size_mb": 0.03, "drop": 0.0, "summary": "s"}],
        "verdicts": [{"status": "pass"}, {"status": "pass"}, {"status": "fail"}],
        "gated_targets": ["host-cpu"]}
    return SimpleNamespace(report=report, passed=passed, exit_code=0 if passed else 1,
                           run_dir=tmp_path)


def test_run_as_json_prints_one_document(tmp_path, capfd):
    from compress.runner.summary import run_as_json

    def run():
        print("PASSED: something to ship on every gated target; report: ...")
        return _result(tmp_path, True)
    assert run_as_json(run) == 0
    out, err = capfd.readouterr()
    document = json.loads(out)
    assert document == {
        "passed": True, "exit_code": 0, "run_dir": str(tmp_path.resolve()),
        "report": str(tmp_path.resolve() / "report.json"),
        "recommendations": [{"answer": "shippable", "gated": True,
                             "target": "host-cpu", "status": "ship", "artifact": "02-quantize",
                             "path": "x.onnx", "latency_p90_ms": 0.02, "model_size_mb": 0.03,
                             "drop": 0.0}],
        "verdicts": {"fail": 1, "pass": 2}}
    assert "PASSED" in err


def test_run_json_on_bad_input_is_still_one_document_and_exit_2(tmp_path):
    done = run_cli("run", tmp_path / "nope.yaml", "--json", cwd=tmp_path)
    assert done.returncode == 2
    document = json.loads(done.stdout)
    assert document["exit_code"] == 2 and document["passed"] is False
    assert "file not found" in document["error"]
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr


@pytest.mark.runs  # a whole CLI run: `make test-runs`
def test_run_json_summarizes_a_real_run(project):
    done = run_cli("run", write_pipeline(project, pipeline_dict()), "--json", cwd=project)
    assert done.returncode in (0, 1), done.stderr
    document = json.loads(done.stdout)   # the whole of stdout: one document
    assert document["exit_code"] == done.returncode
    assert document["passed"] == (done.returncode == 0)
    run_dir = Path(document["run_dir"])
    assert run_dir == (project / "runs" / "t").resolve() and Path(document["report"]).is_file()
    [rec] = document["recommendations"]
    assert rec["target"] == "host-cpu" and rec["gated"] is True and set(rec) == {
        "answer", "gated", "target", "status", "artifact", "path", "latency_p90_ms",
        "model_size_mb", "drop"}
    assert rec["answer"] == "shippable" and document["passed"] is True
    if rec["path"]:
        assert (run_dir / rec["path"]).exists() or Path(rec["path"]).exists()
    assert sum(document["verdicts"].values()) == \
        len(json.loads(Path(document["report"]).read_text())["verdicts"])
    assert "report: " in done.stderr   # the human summary, on stderr

