"""A benchmark runner that dies is a result, not a bug; readers of run folders trust what
they read (issue 37).

A: the real runner (`python -m runtimes bench`) killed by the kernel: a target's `python:`
is a wrapper that gives it a CPU-time limit (RLIMIT_CPU, soft = hard: at the limit the
kernel sends SIGKILL, as its out-of-memory killer does), or makes it read address 0 (a
real SIGSEGV in the process). No signal is faked: the process really dies of it. The
variant is recorded as failed on that target (it did not fit: every budget there fails,
"did not run: ...") with the signal, the peak memory and the likely cause; the run judges
the others and exits 1, never 3. Over SSH (`-m remote`) the key's forced command sets the
same limit on the device, whose shell reports 137.
B: report.json of other shapes (hypothesis), a FIFO, a link to /dev/zero, JSON nested
100,000 deep, a folder that cannot be read (root drops its capabilities with setpriv to
feel chmod 000): `compress runs` names and skips each, `compress compare` exits 2 naming
the file and the field.
C: a garbage Optuna search.db: exit 2 naming the file and --force, which sets it aside.
D: a trial.json whose parameters no longer make its variant is run again, never taken
for a duplicate of itself.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compress.errors import ConfigError, ModelError
from compress.runner.compare import compare
from compress.runner.history import list_runs, load_report, resolve
from tests.conftest import child_env, pipeline_dict, run_cli

HANG = 60   # seconds: a command past this is taken to hang (a hang check, not a timing)

REPORT = {
    "pipeline": {"name": "r", "config_sha256": "a" * 64,
                 "config": {"stages": [{"type": "quantize", "scheme": "int8-static"}]}},
    "manifest": {"created": "2026-11-29T12:00:00+0000", "packages": {"onnx": "1.17.0"}},
    "benchmarks": [{"artifact": "02-quantize", "target": "host-cpu", "baseline": False,
                    "latency_ms": {"p50": 1.0, "p90": 1.5}, "size_bytes": 4096,
                    "peak_memory_mb": 80.0, "metric": {"name": "accuracy", "value": 0.9,
                                                       "drop": 0.01}}],
    "verdicts": [{"artifact": "02-quantize", "target": "host-cpu", "metric": "latency_p90_ms",
                  "budget": 20.0, "value": 1.5, "status": "pass", "reason": ""}],
    "recommendations": [{"target": "host-cpu", "artifact": "02-quantize", "status": "ship",
                         "summary": "host-cpu: ship 02-quantize"}],
    "gated_targets": ["host-cpu"], "passed": True}


def _paths(value, prefix=()):
    """Every place in a JSON document, as a tuple of keys and indexes."""
    yield prefix
    items = value.items() if isinstance(value, dict) else \
        enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield from _paths(item, prefix + (key,))


PATHS = [p for p in _paths(REPORT) if p]
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) |
                    st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)


def _mutated(path: tuple, value, delete: bool) -> dict:
    report = copy.deepcopy(REPORT)
    part = report
    for key in path[:-1]:
        part = part[key]
    if delete:
        del part[path[-1]]
    else:
        part[path[-1]] = value
    return report


def _write(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(text)
    return folder / "report.json"


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(PATHS), value=JSON, delete=st.booleans())
def test_a_report_of_any_shape_is_listed_compared_or_refused_never_a_crash(
        tmp_path_factory, path, value, delete):
    output = tmp_path_factory.mktemp("runs")
    good = _write(output / "good", json.dumps(REPORT))
    bad = _write(output / "bad", json.dumps(_mutated(path, value, delete)))
    skipped: list = []
    names = [e.name for e in list_runs(output, True, skipped)]
    assert "good" in names and ("bad" in names) != bool(skipped)
    try:
        loaded = load_report(bad)
    except ConfigError as exc:
        assert str(bad) in str(exc) and skipped and skipped[0][0] == bad
        return
    base = load_report(good)
    assert compare(loaded, base) and compare(base, loaded)


def test_runs_names_a_bad_report_and_compare_refuses_it_with_the_field(tmp_path):
    _write(tmp_path / "runs" / "good", json.dumps(REPORT))
    for name, path, value in (("created", ("manifest", "created"), {"a": 1}),
                              ("size", ("benchmarks", 0, "size_bytes"), "4096"),
                              ("recs", ("recommendations",), ["ship it"])):
        _write(tmp_path / "runs" / name, json.dumps(_mutated(path, value, False)))
    no_metric = _mutated(("verdicts", 0, "metric"), None, True)
    _write(tmp_path / "runs" / "verdict", json.dumps(no_metric))
    listed = run_cli("runs", cwd=tmp_path)
    assert listed.returncode == 0 and listed.stdout.startswith("good"), listed.stderr
    for name, field in (("created", "manifest.created"), ("size", "benchmarks.0.size_bytes"),
                        ("recs", "recommendations.0"), ("verdict", "verdicts.0.metric")):
        assert f"skipped {Path('runs') / name / 'report.json'}: field {field}" in listed.stderr
    shown = run_cli("compare", "good", "verdict", cwd=tmp_path)
    assert shown.returncode == 2 and "Traceback" not in shown.stderr
    assert "runs/verdict/report.json" in shown.stderr and "verdicts.0.metric" in shown.stderr


def _hang_checked(*args, cwd: Path, prefix=()) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([*prefix, sys.executable, "-m", "compress", *map(str, args)],
                              cwd=cwd, capture_output=True, text=True, timeout=HANG,
                              env=child_env())
    except subprocess.TimeoutExpired:
        pytest.fail(f"`compress {' '.join(map(str, args))}` hung (over {HANG} s)")


def test_a_fifo_a_link_to_dev_zero_and_deep_json_are_skipped_promptly(tmp_path):
    runs = tmp_path / "runs"
    _write(runs / "good", json.dumps(REPORT))
    (runs / "fifo").mkdir()
    os.mkfifo(runs / "fifo" / "report.json")
    (runs / "zero").mkdir()
    os.symlink("/dev/zero", runs / "zero" / "report.json")
    _write(runs / "deep", "[" * 100_000 + "]" * 100_000)
    listed = _hang_checked("runs", "--all", cwd=tmp_path)
    assert listed.returncode == 0 and listed.stdout.startswith("good"), listed.stderr
    for name in ("fifo", "zero"):
        assert f"skipped runs/{name}/report.json: not a regular file" in listed.stderr
    assert "skipped runs/deep/report.json: Invalid JSON: recursion limit" in listed.stderr
    for name in ("fifo", "zero", "deep"):
        shown = _hang_checked("compare", "good", name, cwd=tmp_path)
        assert shown.returncode == 2 and f"runs/{name}/report.json" in shown.stderr
        assert "Traceback" not in shown.stderr


def test_reports_over_the_size_limit_are_not_read(tmp_path, monkeypatch):
    from compress.runner import report_schema
    monkeypatch.setattr(report_schema, "MAX_REPORT_BYTES", 1024)
    path = _write(tmp_path / "big", json.dumps({**REPORT, "padding": "x" * 2048}))
    with pytest.raises(ConfigError, match="larger than the 1 KiB"):
        load_report(path)


def _as_unprivileged() -> tuple:
    """How to run a command that feels file permissions: as it is, or as root without
    the capabilities that bypass them (setpriv)."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("root without setpriv: file permissions cannot be felt here")
    return ("setpriv", "--bounding-set=-dac_override,-dac_read_search")


def test_an_unreadable_run_folder_is_skipped_and_an_unreadable_output_refused(tmp_path):
    prefix = _as_unprivileged()
    runs = tmp_path / "runs"
    _write(runs / "good", json.dumps(REPORT))
    _write(runs / "locked", json.dumps(REPORT))
    (runs / "locked").chmod(0)
    try:
        listed = _hang_checked("runs", "--all", cwd=tmp_path, prefix=prefix)
        assert listed.returncode == 0 and listed.stdout.startswith("good"), listed.stderr
        assert "skipped runs/locked/report.json: Permission denied" in listed.stderr
        shown = _hang_checked("compare", "good", "locked", cwd=tmp_path, prefix=prefix)
        assert shown.returncode == 2 and "runs/locked" in shown.stderr
        assert "Permission denied" in shown.stderr and "Traceback" not in shown.stderr
        runs.chmod(0)
        refused = _hang_checked("runs", cwd=tmp_path, prefix=prefix)
        assert refused.returncode == 2 and "cannot list the runs in runs" in refused.stderr
    finally:
        runs.chmod(0o755)
        (runs / "locked").chmod(0o755)


def test_a_reference_to_history_with_odd_digits_is_no_run(tmp_path):
    _write(tmp_path / "h", json.dumps(REPORT))
    for ref in ("h~²", "h~" + "9" * 5000, "h~-1"):
        with pytest.raises(ConfigError, match="no finished run"):
            resolve(ref, tmp_path)


# --- C: the Optuna study -----------------------------------------------------------

def _search(tmp_path: Path, strategy: str = "optuna"):
    from compress.config.pipeline import parse_pipeline
    from compress.runner.targets import resolve_targets
    from compress.search.space import axes
    from compress.search.trials import Search
    data = pipeline_dict(name="s")
    data["search"] = {"strategy": strategy, "space": {
        "quantize.calibration": ["minmax", "percentile"],
        "quantize.scheme": ["int8-static", "fp16"]}}
    pipeline = parse_pipeline(data)
    targets = resolve_targets(pipeline)
    notes: list[str] = []
    search = Search(pipeline, axes(pipeline, targets), tmp_path,
                    {"note": notes.append, "force": False, "strict": False, "quiet": True},
                    targets=targets)
    return search, notes


@pytest.mark.parametrize("content", [bytes(range(256)) * 16,
                                     b"SQLite format 3\x00" + b"\x01" * 200])
def test_a_garbage_study_is_refused_naming_it_and_force_sets_it_aside(tmp_path, content):
    pytest.importorskip("optuna")
    from compress.search import resume
    from compress.search.optuna_study import optuna_proposals
    search, notes = _search(tmp_path)
    resume.prepare(tmp_path, "trials", "search.db", notes.append, "c" * 64, False)
    (tmp_path / "search.db").write_bytes(content)
    with pytest.raises(ConfigError) as refused:
        next(optuna_proposals(search, 2, tmp_path / "search.db", "s"))
    said = str(refused.value)
    assert said.startswith(f"{tmp_path / 'search.db'}: ") and "--force" in said
    resume.prepare(tmp_path, "trials", "search.db", notes.append, "c" * 64, True)
    assert not (tmp_path / "search.db").exists() and (tmp_path / "search-cccccccc.db").exists()


def test_a_study_left_without_its_trials_is_set_aside(tmp_path):
    from compress.search import resume
    (tmp_path / "search.db").write_bytes(b"not a database")
    notes: list[str] = []
    resume.prepare(tmp_path, "trials", "search.db", notes.append, "d" * 64, False)
    assert (tmp_path / "search-unknown0.db").exists() and "set aside" in notes[-1]


@pytest.mark.parametrize("fingerprint", ['{"fingerprint": 7}', "[" * 100_000, "{}"])
def test_an_odd_fingerprint_is_not_trusted(tmp_path, fingerprint):
    from compress.search import resume
    (tmp_path / "trials").mkdir()
    (tmp_path / "trials" / "search.json").write_text(fingerprint)
    resume.prepare(tmp_path, "trials", "search.db", lambda _: None, "e" * 64, False)
    assert (tmp_path / "trials-unknown0").is_dir()


# --- D: a trial's record that no longer matches ------------------------------------

def _record(search, index: int, made_from: dict, **change) -> Path:
    """trials/tNNN/trial.json as a finished trial of `made_from` writes it, with `change`."""
    from compress.search.space import variant_key
    from compress.search.trials import Trial, variant_of
    trial_id = f"t{index:03d}"
    key = variant_key(variant_of(search, made_from, trial_id)[0])
    record = {**asdict(Trial(trial_id, made_from, "complete", None, 1.0, key,
                             objectives=[0.5, 0.0], constraints=[-0.1])), **change}
    folder = search.out / "trials" / trial_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trial.json").write_text(json.dumps(record))
    return folder / "trial.json"


def test_a_record_whose_parameters_changed_is_run_again_not_a_duplicate_of_itself(tmp_path):
    from compress.search import resume
    from compress.search.space import combinations
    from compress.search.trials import Prepared, Proposal, prepare_trial
    search, notes = _search(tmp_path, "exhaustive")
    every = list(combinations(search.space))
    _record(search, 0, every[0])
    edited = _record(search, 1, every[1], params=every[0])   # its key is every[1]'s
    garbled = _record(search, 2, every[2], objectives="fast")
    misplaced = _record(search, 3, every[3], id="t000")
    resume.load(search)
    assert sorted(search.resumable) == ["t000"]
    for path in (edited, garbled, misplaced):
        assert any(str(path) in note and "run again" in note for note in notes), notes
    assert isinstance(prepare_trial(search, Proposal(every[1], "t001")), Prepared)


def test_an_optuna_record_that_disagrees_with_its_study_is_asked_again(tmp_path):
    optuna = pytest.importorskip("optuna")
    from compress.search import resume
    from compress.search.optuna_study import _resume, _study
    search, notes = _search(tmp_path)
    _, study = _study(tmp_path / "search.db", "s", 0)
    distributions = {a.key: optuna.distributions.CategoricalDistribution([0, 1])
                     for a in search.space}
    for _ in range(2):
        trial = study.ask(distributions)
        study.tell(trial, [1.0, 0.0])
    decoded = [{a.key: a.choices[t.params[a.key]] for a in search.space}
               for t in study.get_trials()]
    other = next(p for p in ({"quantize.calibration": c, "quantize.scheme": s}
                             for c in ("minmax", "percentile") for s in ("int8-static", "fp16"))
                 if p not in decoded)
    _record(search, 0, other)                                 # trusted, but not the study's
    _record(search, 1, decoded[1], params=decoded[1] | {"quantize.scheme": "int4"})   # stale
    resume.load(search)
    _resume(optuna, study, search)
    asked = [study.ask(distributions).params for _ in range(2)]   # the next ones asked
    assert asked == [t.params for t in study.get_trials()[:2]]
    assert search.trials == [] and not search.finished
    assert any("other parameters than the study's trial 0" in note for note in notes)


# --- A: the runner killed by a real signal -----------------------------------------

@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory) -> Path:
    import onnx
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("tiny") / "tiny.onnx"
    onnx.save(model, path)
    return path


def _wrapper(folder: Path, kind: str, only: str = "") -> Path:
    """A `python:` for a target: the real runner, with a real fault for models whose path
    holds `only` (all when empty), made to time for a minute so that the fault comes first.
    cpu: RLIMIT_CPU of 1 s, soft = hard, so the kernel sends SIGKILL at the limit; segv: a
    thread of the runner reads address 0 half a second in."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import ctypes, threading\n"
        "threading.Timer(0.5, ctypes.string_at, (0,)).start()\n")
    fault = ("ulimit -t 1" if kind == "cpu" else
             f'PYTHONPATH="{folder}:$PYTHONPATH"; export PYTHONPATH')
    script = folder / "python"
    script.write_text(f"""#!/bin/sh
ulimit -c 0   # no core file from the crash
case "$*" in
  *"{only}"*) {fault}; exec "{sys.executable}" "$@" --seconds 60 ;;
esac
exec "{sys.executable}" "$@"
""")
    script.chmod(0o755)
    return script


BENCH = ["--json", "--runs", "1000000", "--warmup", "0", "--meter", "none", "--threads", "1"]


@pytest.mark.parametrize("kind, signal_name, words", [
    ("cpu", "SIGKILL", "killed by SIGKILL: most likely the out-of-memory killer"),
    ("segv", "SIGSEGV", "crashed in the runtime (SIGSEGV")])
def test_a_runner_killed_by_a_signal_is_a_recorded_failure(tmp_path, tiny_onnx, kind,
                                                         signal_name, words):
    from compress.measure.exits import RunnerDied, Unavailable
    from compress.measure.places import LocalPlace
    place = LocalPlace(str(_wrapper(tmp_path / kind, kind)))
    with pytest.raises(RunnerDied) as died:
        place.measure([str(tiny_onnx), *BENCH], 120, lambda **_: None)
    exc = died.value
    assert isinstance(exc, Unavailable) and isinstance(exc, ModelError)   # recorded, else 2
    assert exc.signal == signal_name and words in str(exc)
    assert exc.peak_memory_mb and 5 < exc.peak_memory_mb < 4096     # the runner's own peak
    assert f"peak memory {exc.peak_memory_mb:.0f} MB when it died" in str(exc)


@pytest.mark.parametrize("status, said", [
    (137, "killed by SIGKILL: most likely the out-of-memory killer (check `dmesg` on the "
          "device), else the benchmark timeout's last resort"),
    (139, "crashed in the runtime (SIGSEGV)"), (134, "aborted in the runtime (SIGABRT")])
def test_a_device_reports_a_signal_with_the_same_rule(status, said):
    from compress.measure.client import _raise_for_remote_status
    from compress.measure.exits import RunnerDied
    host = SimpleNamespace(name="rpi4", spec=SimpleNamespace(ssh=SimpleNamespace(
        address="pi@board")))
    with pytest.raises(RunnerDied, match="target rpi4 \\(pi@board\\): the runner ") as died:
        _raise_for_remote_status(status, f"@exit {status}", host, 60)
    assert said in str(died.value) and died.value.peak_memory_mb is None


def test_a_runner_that_ends_without_its_answer_is_a_model_error(tmp_path):
    from compress.measure.client import measure_in_subprocess
    for code in ("pass", "print('not json')"):
        with pytest.raises(ModelError, match="ended without its result"):
            measure_in_subprocess([sys.executable, "-c", code], 60, lambda **_: None)


@pytest.mark.runs
def test_a_run_whose_variant_is_killed_judges_the_rest_and_says_why(tmp_path,
                                                                    digits_checkpoint):
    """The whole pipeline: the INT8 variant's runner is killed by the kernel (its
    baseline measures normally); the variant failed on that target (every budget: "did
    not run", the signal and the cause, in report.json, report.md and the summary), the
    baseline is judged and fits: there is something to ship, so the run passes (a
    variant that does not fit is information, issue 38)."""
    from tests.conftest import fill_project, write_pipeline
    folder = fill_project(tmp_path, digits_checkpoint)
    python = _wrapper(tmp_path / "killer", "cpu", only="quantize")
    data = pipeline_dict(name="k", targets=[{"profile": "host-cpu", "python": str(python)}])
    ran = run_cli("run", write_pipeline(folder, data), cwd=folder)
    assert ran.returncode == 0, ran.stderr
    report = json.loads((folder / "runs" / "k" / "report.json").read_text())
    mine = [v for v in report["verdicts"] if v["artifact"] == "02-quantize"]
    assert mine and all(v["status"] == "fail" and v["value"] is None for v in mine)
    assert all(v["reason"].startswith("did not run: the runner was killed by SIGKILL: most "
                                      "likely the out-of-memory killer (peak memory ")
               for v in mine)
    assert report["passed"] is True and "02-quantize" not in json.dumps(
        report["unmeasured_reasons"])
    assert any(b["baseline"] for b in report["benchmarks"])   # the rest was judged
    fit = next(r for r in report["fits"] if r["artifact"] == "02-quantize")
    assert fit["fits"].startswith("no: did not run: the runner was killed by SIGKILL")
    assert "host-cpu: 02-quantize did not run: the runner was killed by SIGKILL" in ran.stdout
    assert "SIGKILL" in (folder / "runs/k/report.md").read_text()
    assert [r["artifact"] for r in report["recommendations"]] == ["01-export.onnx"]


@pytest.mark.remote
def test_a_runner_killed_on_an_ssh_device_is_recorded_by_the_same_rule(tmp_path,
                                                                       digits_checkpoint):
    """Over SSH (a real sshd on 127.0.0.1, tests/sshd_server.py): the key's forced
    command gives the INT8 variant's runner a CPU-time limit of 1 s (the kernel's SIGKILL,
    as above); the device's shell reports 137 and the variant is recorded by the same rule,
    the device named, while its baseline is measured (and ships: the run passes)."""
    from tests.conftest import fill_project, write_pipeline
    from tests.sshd_server import start_sshd
    server = start_sshd(tmp_path / "sshd")
    if isinstance(server, str):
        pytest.skip(f"no OpenSSH server: {server}")
    keys = tmp_path / "sshd" / "authorized_keys"
    keys.write_text('command="case \\"$SSH_ORIGINAL_COMMAND\\" in *02-quantize*) ulimit -t 1 ;; '
                    'esac; eval \\"$SSH_ORIGINAL_COMMAND\\"" ' + keys.read_text())
    (tmp_path / "project").mkdir()
    folder = fill_project(tmp_path / "project", digits_checkpoint)
    target = {"profile": "host-cpu", "name": "board", "ssh": server.address,
              "identity": str(server.identity), "known_hosts": str(server.known_hosts),
              "python": sys.executable, "workdir": str(tmp_path), "connect_timeout_s": 5}
    data = pipeline_dict(name="k", targets=[target])
    data["stages"][-1].update(min_seconds=4)   # the variant's runner: past 1 s of CPU
    try:
        ran = run_cli("run", write_pipeline(folder, data), cwd=folder)
    finally:
        server.stop()
    assert ran.returncode == 0, ran.stderr   # the baseline fits: something to ship
    report = json.loads((folder / "runs" / "k" / "report.json").read_text())
    assert [r["artifact"] for r in report["recommendations"]] == ["01-export.onnx"]
    reason = next(v["reason"] for v in report["verdicts"] if v["target"] == "board"
                  and v["artifact"] == "02-quantize" and v["metric"] == "latency_p90_ms")
    assert reason.startswith(f"did not run: target board ({server.address}): the runner was "
                             "killed by SIGKILL: most likely the out-of-memory killer (check "
                             "`dmesg` on the device)"), reason
    assert [b["artifact"] for b in report["benchmarks"]] == ["01-export.onnx"]
