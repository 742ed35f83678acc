"""The Python API as documented, and smaller paths of bad input: every stage class built
from Python refuses a wrong setting with the YAML's ConfigError (never pydantic's
ValidationError or a TypeError); a custom metric's value is one finite real number or a
DataError; a meter command that hangs is killed with all it started; `compress runs`
with a file for --output; a FIFO or a device as the model; an output folder the system
will not make."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import compress
from compress.data.metric import call_custom
from compress.errors import CompressError, ConfigError, DataError, ModelError
from compress.quant.schemes import SCHEMES
from compress.stagebase import STAGES
from runtimes.errors import RuntimeInputError
from runtimes.power import command as command_meter
from runtimes.power.base import MeterAbsent
from tests.conftest import child_env, pipeline_dict, run_cli, write_pipeline

STAGE_CLASSES = ("Benchmark", "Distill", "ExportGenai", "ExportGguf", "ExportOnnx",
                 "ExportOpenVino", "ExportOVGenai", "ExportTflite", "Prune", "Quantize")
# one valid setting each, as the YAML would give it
VALID = {"Benchmark": {"runs": 7}, "Distill": {"temperature": 2.0},
         "ExportGenai": {"precision": "fp32"}, "ExportGguf": {"generated_tokens": 4},
         "ExportOnnx": {"opset": 17}, "ExportOpenVino": {"weights": "fp32"},
         "ExportOVGenai": {"weights": "int4", "group_size": 32},
         "ExportTflite": {"mode": "int8"}, "Prune": {"method": "magnitude", "sparsity": 0.5},
         "Quantize": {"scheme": "int8-static", "calibration": "entropy"}}
# a value out of range for a setting each: (settings, the field the error names)
INVALID = {"Benchmark": ({"runs": 0}, "runs"), "Distill": ({"temperature": -1}, "temperature"),
           "ExportGenai": ({"precision": "int3"}, "precision"),
           "ExportGguf": ({"generated_tokens": "many"}, "generated_tokens"),
           "ExportOnnx": ({"opset": 10**400}, "opset"),
           "ExportOpenVino": ({"weights": True}, "weights"),
           "ExportOVGenai": ({"ratio": 1.5}, "ratio"),
           "ExportTflite": ({"mode": "int2"}, "mode"),
           "Prune": ({"method": "magnitude", "sparsity": float("nan")}, "sparsity"),
           "Quantize": ({"scheme": "int8-static", "percentile": 100,
                         "calibration": "percentile"}, "percentile")}


# ---- the stage classes -----------------------------------------------------------------

def test_every_name_in_all_is_there_and_every_stage_type_has_its_class():
    for name in compress.__all__:
        assert getattr(compress, name) is not None
    assert set(STAGE_CLASSES) <= set(compress.__all__)
    types = {getattr(compress, name)(**VALID[name]).type for name in STAGE_CLASSES}
    assert types == set(STAGES)


@pytest.mark.parametrize("name", STAGE_CLASSES)
def test_a_stage_class_builds_the_yaml_stage_and_refuses_a_wrong_value_by_its_field(name):
    cls = getattr(compress, name)
    stage = cls(**VALID[name])
    assert isinstance(stage, cls)
    assert stage.model_dump(include=set(VALID[name])) == VALID[name]
    settings_, field = INVALID[name]
    with pytest.raises(ConfigError) as caught:
        cls(**settings_)
    assert caught.value.field == field
    assert str(caught.value).startswith(name) and f": {field}: " in str(caught.value)
    with pytest.raises(ConfigError, match="bogus: unknown key"):
        cls(**{**VALID[name], "bogus": 1})
    with pytest.raises(ConfigError, match="takes its settings by name"):
        cls(1)


def test_quantize_dispatches_on_the_scheme_to_its_settings_class():
    for scheme, spec in SCHEMES.items():
        stage = compress.Quantize(scheme=scheme)
        assert type(stage) is spec.config_cls and stage.type == "quantize"
        assert isinstance(stage, compress.Quantize)
        assert issubclass(spec.config_cls, compress.Quantize)
    assert not isinstance(compress.ExportOnnx(), compress.Quantize)
    known = ", ".join(SCHEMES)
    for wrong in ("int9", None, 8, ["int8-static"], {"a": 1}):
        with pytest.raises(ConfigError) as caught:
            compress.Quantize(scheme=wrong) if wrong is not None else compress.Quantize()
        assert caught.value.field == "scheme" and known in str(caught.value)
    with pytest.raises(ConfigError, match="calibration: a setting of int8-static, not of "
                                          "int8-dynamic"):
        compress.Quantize(scheme="int8-dynamic", calibration="entropy")


def test_the_documented_example_builds_the_pipeline_the_yaml_does(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # only validated: nothing is imported or read
    built = compress.pipeline(
        **{**pipeline_dict(), "stages": [compress.ExportOnnx(exporter="legacy"),
                                         compress.Quantize(scheme="int8-static"),
                                         compress.Benchmark(runs=20)]})
    from_dicts = compress.pipeline(
        **{**pipeline_dict(), "stages": [{"type": "export.onnx", "exporter": "legacy"},
                                         {"type": "quantize", "scheme": "int8-static"},
                                         {"type": "benchmark", "runs": 20}]})
    assert built.stages == from_dicts.stages
    from compress.stages.quantize import Quantize   # the docs' import
    assert Quantize is compress.Quantize


def _fields(name: str) -> list[str]:
    if name == "Quantize":
        return sorted({f for spec in SCHEMES.values() for f in spec.config_cls.model_fields})
    return sorted(getattr(compress, name).model_fields)


LEAF = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.just(10**400),
                 st.just(-10**400), st.floats(), st.text(max_size=8), st.binary(max_size=4),
                 st.sampled_from([*SCHEMES, "minmax", "entropy", "legacy", "fp32", "int8",
                                  "magnitude", "targets", "a:b", "../x", "auto", "none"]))
VALUES = st.recursive(LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.tuples(inner),
    st.dictionaries(st.text(max_size=5), inner, max_size=3)), max_leaves=5)
CALLS = st.sampled_from(STAGE_CLASSES).flatmap(lambda name: st.tuples(
    st.just(name),
    st.dictionaries(st.sampled_from([*_fields(name), "scheme", "bogus", "cls", "self"]),
                    VALUES, max_size=4)))


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(CALLS)
def test_any_settings_give_a_stage_or_a_config_error(call):
    name, settings_ = call
    try:
        stage = getattr(compress, name)(**settings_)
    except ConfigError as exc:
        assert str(exc).startswith((name, "Quantize")) and "(top level)" not in str(exc)
    else:
        assert isinstance(stage, getattr(compress, name))


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(SCHEMES)).flatmap(lambda scheme: st.tuples(
    st.just(scheme), st.dictionaries(
        st.sampled_from(sorted(set(SCHEMES[scheme].config_cls.model_fields) - {"scheme"})),
        VALUES, max_size=5))))
def test_any_settings_of_a_scheme_give_its_class_or_a_config_error(call):
    scheme, settings_ = call
    try:
        stage = compress.Quantize(scheme=scheme, **settings_)
    except ConfigError as exc:
        assert str(exc).startswith("Quantize") and "(top level)" not in str(exc)
    else:
        assert type(stage) is SCHEMES[scheme].config_cls


# ---- a custom metric's value -----------------------------------------------------------

def _huge(predictions, references):
    return 10**400


@pytest.mark.parametrize("value, words", [
    (10**400, "too large for a float"), (-10**400, "too large for a float"),
    (float("nan"), "returned nan"), (float("-inf"), "returned -inf"), ("abc", "'abc'"),
    ("0.5", "'0.5'"), (np.float64("inf"), "inf"), (np.float32("nan"), "nan"),
    (True, "returned True"), (np.bool_(True), "True"), (1 + 0j, "(1+0j)"),
    (np.ones(1), "an array of shape (1,)"), (None, "None"), ([0.5], "[0.5]")])
def test_a_metric_value_that_is_not_one_finite_number_is_a_data_error(value, words):
    with pytest.raises(DataError) as caught:
        call_custom(lambda p, r: value, "mymetric:score", [], [])
    message = str(caught.value)
    assert message.startswith("data.metric.function mymetric:score returned ")
    assert words in message and "one finite number" in message
    assert len(message) < 400   # 10**400 is not printed in full


@pytest.mark.parametrize("value", [0, 3, 0.25, np.float32(0.5), np.int64(2), np.array(0.75),
                                   2**1000])
def test_a_finite_real_number_of_any_common_type_is_taken(value):
    assert call_custom(lambda p, r: value, "m:f", [], []) == float(value)


@pytest.mark.runs
def test_a_python_metric_function_is_named_when_its_value_is_refused(project, monkeypatch):
    monkeypatch.chdir(project)
    data = pipeline_dict()
    data["data"]["metric"] = {"type": "custom", "function": _huge}
    with pytest.raises(DataError, match=r"_huge \(a Python function\) returned 1000.*too "
                                        r"large for a float"):
        compress.run(compress.pipeline(**data))


# ---- a meter command that never ends ---------------------------------------------------

def _group_alive(pgid: int) -> list[int]:
    """The processes of a process group still running (a zombie has ended)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(entry.name))
    return alive


def _hanging_meter(folder: Path) -> tuple[str, Path]:
    pids = folder / "pids"
    return f"echo $$ > {pids}; sleep 60 & echo $! >> {pids}; sleep 60; echo 5", pids


def _assert_group_gone(pids: Path) -> None:
    shell, child = (int(word) for word in pids.read_text().split())
    deadline = time.monotonic() + 5
    while _group_alive(shell) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _group_alive(shell), "a process of the meter command's group is left"
    for pid in (shell, child):
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().rpartition(")")[2].split()[0] == "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_meter_command_past_its_timeout_is_killed_with_all_it_started(tmp_path):
    command, pids = _hanging_meter(tmp_path)
    started = time.monotonic()
    with pytest.raises(MeterAbsent, match=r"`echo` took over 0.5 s"):
        command_meter.CommandMeter(command=command, timeout=0.5)
    assert time.monotonic() - started < 5   # not the 60 s its child holds the pipe for
    _assert_group_gone(pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_meter_timeout_is_a_module_constant_detect_uses(tmp_path, monkeypatch):
    from runtimes.power import detect
    monkeypatch.setattr(command_meter, "TIMEOUT_S", 0.3)
    command, pids = _hanging_meter(tmp_path)
    started = time.monotonic()
    with pytest.raises(RuntimeInputError, match="took over 0.3 s"):
        detect("command", command=command, idle_seconds=0)
    assert time.monotonic() - started < 5
    _assert_group_gone(pids)


def test_a_quick_meter_command_still_reads(tmp_path):
    meter = command_meter.CommandMeter(command="echo 'power 2.5 W'", timeout=5)
    assert meter.read() == 2.5


# ---- compress runs --output FILE ---------------------------------------------------------

def test_runs_with_a_file_or_nothing_for_output_says_error_and_exits_2(tmp_path):
    afile = tmp_path / "report.json"
    afile.write_text("{}")
    for output, words in ((afile, "is not a folder"), (tmp_path / "nowhere", "does not exist")):
        done = run_cli("runs", "--output", output)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("error: no runs: ") and words in done.stderr
        assert "Traceback" not in done.stderr and not done.stdout


# ---- a FIFO or a device as the model -------------------------------------------------------

def _run_quickly(folder: Path, pipeline: Path) -> subprocess.CompletedProcess:
    """`compress run`, which must end soon: reading a FIFO would block it for ever."""
    return subprocess.run([sys.executable, "-m", "compress", "run", str(pipeline)], cwd=folder,
                          capture_output=True, text=True, timeout=60, env=child_env())


ONNX_STAGES = [{"type": "quantize", "scheme": "int8-dynamic"},
               {"type": "benchmark", "warmup": 0, "runs": 2, "rounds": 1}]


@pytest.mark.parametrize("fmt, kind, words", [
    ("onnx", "fifo", "is a FIFO (named pipe), not a regular file: give the model file"),
    ("onnx", "zero", "(a link to /dev/zero) is a character device, not a regular file"),
    ("tflite", "fifo", "is a FIFO (named pipe), not a regular file: give the model file"),
    ("tflite", "zero", "(a link to /dev/zero) is a character device, not a regular file")])
def test_a_fifo_or_a_device_given_as_the_model_is_named_for_what_it_is(tmp_path, fmt, kind,
                                                                      words):
    model = tmp_path / f"model.{fmt}"
    if kind == "fifo":
        os.mkfifo(model)
    else:
        model.symlink_to("/dev/zero")
    data = pipeline_dict(model={fmt: model.name}, data={}, stages=ONNX_STAGES)
    done = _run_quickly(tmp_path, write_pipeline(tmp_path, data))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: model.{fmt}: {model} ")
    assert words in done.stderr and "file not found" not in done.stderr
    assert not (tmp_path / "runs").exists()


def test_validate_says_it_too_without_waiting_on_the_fifo(tmp_path):
    os.mkfifo(tmp_path / "model.onnx")
    data = pipeline_dict(model={"onnx": "model.onnx"}, data={}, stages=ONNX_STAGES)
    done = subprocess.run([sys.executable, "-m", "compress", "validate",
                           str(write_pipeline(tmp_path, data))], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env=child_env())
    assert done.returncode == 2, done.stderr
    assert "model.onnx: " in done.stderr and "is a FIFO (named pipe)" in done.stderr


def test_a_fifo_given_as_the_checkpoint_is_refused_without_opening_it(tmp_path):
    from compress.model.source import load_checkpoint
    checkpoint = tmp_path / "weights.pt"
    os.mkfifo(checkpoint)
    # torch is not reached: the path is refused before anything would open it
    with pytest.raises(ModelError, match=r"model.torch.checkpoint: .*weights.pt is a FIFO"):
        load_checkpoint(None, checkpoint, torch=None)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(ModelError, match=r"cannot read .*loop \(a link to .*loop\)"):
        load_checkpoint(None, tmp_path / "loop", torch=None)


@pytest.mark.runs
def test_a_fifo_checkpoint_in_a_run_is_exit_2(project):
    os.mkfifo(project / "fifo.pt")
    data = pipeline_dict()
    data["model"]["torch"]["checkpoint"] = "fifo.pt"
    done = _run_quickly(project, write_pipeline(project, data))
    assert done.returncode == 2, done.stderr
    assert "fifo.pt is a FIFO (named pipe), not a regular file" in done.stderr


# ---- an output folder the system will not make ---------------------------------------------

@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_a_run_folder_the_system_will_not_make_is_a_config_error(tmp_path):
    from compress.runner.run import _make_run_dir
    with pytest.raises(ConfigError) as caught:
        _make_run_dir(Path("/proc/compress-test-output/t"))
    assert caught.value.field == "output"
    assert "cannot create the run folder /proc/compress-test-output/t" in str(caught.value)
    assert "No such file or directory" in str(caught.value)
    afile = tmp_path / "afile"
    afile.write_text("")
    for under_a_file in (afile / "t", afile / "deeper" / "t"):
        with pytest.raises(CompressError, match=str(afile)):
            _make_run_dir(under_a_file)


@pytest.mark.runs
@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_an_output_under_proc_is_exit_2_naming_the_folder(project):
    data = pipeline_dict(output="/proc/compress-test-output")
    done = run_cli("run", write_pipeline(project, data), cwd=project)
    assert done.returncode == 2, done.stderr
    assert "error: output: cannot create the run folder /proc/compress-test-output/t" in \
        done.stderr
    assert "Traceback" not in done.stderr
