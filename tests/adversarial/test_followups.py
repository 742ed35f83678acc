"""Issue 37's leftovers: the reports a person prints, `validate`'s tracking check, the
ONNX read behind `preflight`, lm-bench's --threads and the search report's trial reads.

- report.md and report.html hold no terminal control code from a report's data (a
  profile's device.arch, an op type, a model's input name, an experiment name): each is
  shown as its escape, and the page stays well-formed HTML.
- `compress validate` refuses a tracking URI as `compress run` does before any work.
- `compress preflight` on a large file that is not ONNX refuses it at its first bad byte,
  in a few MB, instead of reading the whole file into memory first.
- `python -m runtimes lm-bench --threads` has the runner's bound.
- a search's report leaves out a trial whose report.json is a FIFO, garbage or the wrong
  shape, saying why, instead of blocking or crashing.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pytest

from runtimes.bench.options import max_threads
# _unsafe: the characters that drive a terminal (C0 but newline and tab, DEL, C1, bidi)
from tests.adversarial.test_terminal_text import CLEAR, TITLE, _unsafe
from tests.conftest import child_env, run_cli, write_pipeline

HOSTILE = f"{TITLE}{CLEAR}\x9b31m\r\x00\x08\x7f\x85\u202e"


# --- 1. report.md and report.html ---------------------------------------------------------

def _bench(artifact: str, baseline: bool, p90: float) -> dict:
    lat = {"p50": p90 * 0.8, "p90": p90, "p99": p90 * 1.2, "mean": p90 * 0.9, "std": 0.01,
           "min": p90 * 0.7, "max": p90 * 1.3}
    machine = {"hostname": "vm", "arch": "x86_64", "system": "Linux", "cpu": "AMD EPYC",
               "cpu_flags": ["avx2"], "cores": 2, "memory_mb": 1024, "device_model": None}
    return {"artifact": artifact, "format": "onnx", "target": "board", "baseline": baseline,
            "comparison": False, "engine": "onnxruntime", "measured_on": machine,
            "runtime": {"engine": "onnxruntime", "version": "1.0", "threads": 2},
            "latency_ms": lat, "throughput_per_s": 1000 / p90, "runs": 20, "batch_size": 1,
            "peak_memory_mb": 60.0, "idle_memory_mb": 50.0, "model_memory_mb": 10.0,
            "size_bytes": 4096, "energy_mj": None, "energy_note": "no power meter",
            "load_ms": 3.0, "first_run_ms": 0.5, "power": None, "noisy": "p99 spread",
            "remote": {"host": "pi@board", "connect_s": 0.1, "copied_bytes": 4096,
                       "copy_s": 0.01, "run_s_median": 0.2, "runs": 3, "cleanup_s": 0.01},
            "emulated": "qemu",
            "conditions": {"before": {"governors": ["schedutil"], "nvpmodel": {"mode": "MAXN"},
                                      "thermal": {"cpu": {"temp_c": 40.0}}},
                           "after": {"thermal": {"cpu": {"temp_c": 41.0}}},
                           "cpu_affinity": [0, 1], "warnings": ["throttled"]},
            "placement": {"by_provider": {"QNNExecutionProvider": {"nodes": 3,
                                                                    "flops_share": 0.9}},
                          "fallback": {"nodes": 1, "op_types": ["Erf"], "flops_share": 0.1}},
            "metric": {"name": "accuracy", "value": 0.97, "baseline": 0.98, "drop": 0.01,
                       "details": {"judges": {"logits": {"metric": "cosine",
                                                         "why": "a float output"}}}}}


def _artifact(ident: str, parent: str | None, meta: dict) -> dict:
    return {"id": ident, "format": "onnx", "precision": "int8" if parent else "fp32",
            "stage": "quantize" if parent else "source", "parent": parent,
            "path": f"{ident}/model.onnx", "size_bytes": 4096, "sha256": ident * 64,
            "meta": meta}


QUANTIZED_META = {
    "ops": {"Relu": 1}, "preset": {"name": "qnn"},
    "float_layers": [{"op": "Erf", "node": "erf_0", "time_share": 0.1, "why": "no int8 kernel"}],
    "normalised": {"custom_ops_replaced": {"MyOp": 1}}, "float_ops": {"GELU": 1},
    "fidelity_floor": {"floor_db": 20.0, "sqnr_db": 10.0, "sqnr_db_after": 21.0,
                       "check_feeds": 8, "held": True, "recovered": True,
                       "steps": [{"layer": "conv1", "to": "int16", "reason": "did not run"}],
                       "layers": [{"layer": "conv1", "precision": "int16",
                                   "alone_sqnr_db": 12.0}]},
    "accuracy_aware": {"budget_met": True, "kept_in_float": ["conv1"], "max_drop": 0.01,
                       "all_quantized_drop": 0.02, "final_drop": 0.005, "attempts": 3,
                       "sensitivity": [{"layer": "conv1", "module": "features.0",
                                        "metric_without_it": 0.97, "recovered": 0.01}]},
}


def _verdict(artifact: str, metric: str, status: str, reason: str = "") -> dict:
    return {"artifact": artifact, "target": "board", "metric": metric, "budget": 10.0,
            "value": None if status != "pass" else 1.0, "status": status, "reason": reason}


def _recommendation() -> dict:
    return {"target": "board", "status": "nothing fits", "artifact": "q", "baseline": False,
            "path": "/runs/q/model.onnx", "engine": "onnxruntime", "format": "onnx",
            "precision": "int8", "why": "the closest", "latency_p90_ms": 12.0,
            "peak_memory_mb": 60.0, "model_size_mb": 0.004, "drop": 0.01,
            "metric": {"name": "accuracy", "value": 0.97}, "measured_on_device": False,
            "off_target_reason": "measured on x86_64, the profile is arm", "unmeasured": ["energy_mj"],
            "feeding": {"name": "image", "layout": "NCHW", "dtype": "uint8", "shape": [1, 3],
                        "scale": 0.5, "zero_point": 3},
            "closest_miss": {"artifact": "q", "misses": [
                {"budget": "latency_p90_ms", "value": 12.0, "limit": 10.0, "over_by": 2.0,
                 "over_by_ratio": 0.2}]},
            "summary": "board: nothing fits; closest q"}


def _report() -> dict:
    """A report.json of every section report.md and report.html draw, as a run writes it
    (compress/report/build.py with decide's and a search's additions)."""
    verdicts = [_verdict(a, m, s, r) for a in ("src", "q") for m, s, r in (
        ("latency_p90_ms", "pass", ""), ("energy_mj", "unmeasured", "no meter on the board"),
        ("peak_memory_mb", "off-target", "measured off the device"))]
    return {
        "pipeline": {"name": "pipe", "config_sha256": "cd" * 32},
        "manifest": {"packages": {"onnx": "1.0"}, "seed": 0, "threads": {"board": 2},
                     "host": {"hostname": "vm", "arch": "x86_64", "cpu": "AMD EPYC",
                              "cores": 2, "cpu_flags": ["avx2"]},
                     "config_sha256": "cd" * 32, "source_model_sha256": "ef" * 32},
        "artifacts": [_artifact("src", None, {}), _artifact("q", "src", QUANTIZED_META)],
        "models": [{"artifact": a, "format": "onnx", "precision": p, "parameters": 100,
                    "macs": 1000, "sparsity": 0.1, "metric": 0.97, "metric_name": "accuracy",
                    "measured_with": "onnxruntime", "size_bytes": 4096}
                   for a, p in (("src", "fp32"), ("q", "int8"))],
        "benchmarks": [_bench("src", True, 10.0), _bench("q", False, 12.0)],
        "engine_baselines": [{"artifact": "src", "target": "board", "baseline": True,
                              "engine": "openvino", "unmeasured": "cannot load it",
                              "left_out": True}],
        "gains": [{"artifact": "q", "target": "board", "engine": "onnxruntime",
                   "baseline": "src", "speedup_p50": 0.8, "size_ratio": 0.5,
                   "same_engine": None, "peak_memory_ratio": 1.0}],
        "verdicts": verdicts,
        "fits": [{"artifact": a, "target": "board", "baseline": a == "src",
                  "fits": "unknown, unmeasured"} for a in ("src", "q")],
        "gated_targets": ["board"], "strict": True, "passed": False,
        "cleanup_warnings": ["left a file on the device"],
        "budgets": {"board": {"latency_p90_ms": 10.0, "peak_memory_mb": 100.0}},
        "recommendations": [_recommendation()], "pareto": {"board": ["src", "q"]},
        "fleets": {"board": {"devices": ["pi-1"], "dropped": [{"device": "pi-2",
                                                               "reason": "unreachable"}]}},
        "search": {"strategy": "grid", "resumed": 1, "space": {"stages.quantize.scheme":
                                                               ["int8-static"]},
                   "trials": [{"id": "t001", "params": {"stages.quantize.scheme": "int8"},
                               "state": "failed", "error": "it broke", "seconds": 1.0,
                               "artifacts": ["q"]}]},
    }


# keys whose value the renderers look up (a status, a budget name, a precision in a
# table of formats): the hostile text goes everywhere else, keys of name maps included
_LOOKED_UP = {"status", "metric", "budget", "format", "baseline"}
_NAME_MAPS = {"ops", "packages", "threads", "by_provider", "float_ops", "custom_ops_replaced",
              "judges", "space", "params", "budgets", "pareto", "fleets"}


def _poisoned(value, key: str = ""):
    """`value` with the hostile text in every string a user, a profile, a model or a
    library gives (and in the names of its name maps)."""
    if isinstance(value, dict):
        named = key in _NAME_MAPS
        return {(k + HOSTILE if named else k): _poisoned(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_poisoned(v, key) for v in value]
    if isinstance(value, str) and key not in _LOOKED_UP:
        return value + HOSTILE
    return value


class _Checked(HTMLParser):
    """Fails on markup the page did not make: every start tag is one of the page's own."""
    OWN = {"html", "head", "meta", "title", "style", "script", "body", "h1", "h2", "h3",
           "span", "p", "code", "div", "dl", "dt", "dd", "table", "thead", "tbody", "tr",
           "th", "td", "figure", "figcaption", "details", "summary", "br"}

    def __init__(self):
        super().__init__()
        self.tags, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        assert tag in self.OWN, tag

    def handle_data(self, data):
        self.text.append(data)


@pytest.fixture(scope="module")
def hostile_report() -> dict:
    report = _poisoned(_report())
    # the fields named in the issue, whatever the generic pass did
    for bench in report["benchmarks"]:
        bench["measured_on"]["arch"] = f"arm{HOSTILE}"
        bench["placement"]["fallback"]["op_types"] = [f"Evil{HOSTILE}"]
    report["recommendations"][0]["feeding"]["name"] = f"input{HOSTILE}"
    report["pipeline"]["name"] = f"experiment{HOSTILE}"
    return json.loads(json.dumps(report))   # as report.json holds it


def test_report_md_holds_no_control_code_from_the_reports_data(hostile_report):
    from compress.report.md import render_markdown
    text = render_markdown(hostile_report)
    assert not _unsafe(text) and "\x1b" not in text and "\r" not in text
    assert "arm\\\\x1b\\]0;pwned\\\\x07" in text   # shown, Markdown's own escapes kept
    assert "Evil\\\\x1b" in text
    # render_markdown's own table rows stay rows: a carriage return or NEL broke none
    assert all(line.count("|") >= 2 for line in text.splitlines() if line.startswith("| "))


def test_report_html_holds_no_control_code_and_stays_well_formed(hostile_report):
    pytest.importorskip("plotly")
    from compress.report.html import render_html
    page = render_html(hostile_report)
    assert not _unsafe(page) and "\x1b" not in page
    parser = _Checked()
    parser.feed(page)
    parser.close()
    shown = "".join(parser.text)
    assert "arm\\x1b]0;pwned\\x07\\x1b[2J\\x1b[H\\x9b31m\\x0d\\x00" in shown   # visible
    for field in ("experiment", "Evil", "input"):   # the page's title, an op type, the feeding
        assert f"{field}\\x1b]0;pwned\\x07" in shown, field


def test_write_reports_writes_both_files_without_a_control_byte(tmp_path, hostile_report):
    pytest.importorskip("plotly")
    from compress.report.build import write_reports
    write_reports(tmp_path, copy.deepcopy(hostile_report))
    for name in ("report.md", "report.html"):
        data = (tmp_path / name).read_bytes()
        assert not [b for b in data if b < 0x20 and b not in b"\n\t\r"], name
        assert not _unsafe(data.decode()), name
    # report.json keeps the data as it is: JSON writes each control code as \u00XX
    assert json.loads((tmp_path / "report.json").read_text()) == hostile_report


def test_md_and_the_html_escape_show_a_control_code_and_change_printable_text_not():
    from compress.report.html_parts import escape
    from compress.report.mdtext import md
    assert md(f"a{TITLE}b") == "a\\\\x1b\\]0;pwned\\\\x07b"
    assert escape(f"<a>{TITLE}") == "&lt;a&gt;\\x1b]0;pwned\\x07"
    assert md("C:\\models") == "C:\\\\models" and escape("C:\\models") == "C:\\models"


# --- 2. validate checks the tracking URI ----------------------------------------------------

def _onnx_pipeline(folder: Path, uri: str) -> Path:
    import onnx
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              folder / "model.onnx")
    return write_pipeline(folder, {"name": "v", "model": {"onnx": "model.onnx"},
                                   "stages": [{"type": "benchmark", "runs": 5}],
                                   "targets": ["host-cpu"],
                                   "tracking": {"mlflow": {"uri": uri}}})


@pytest.mark.parametrize("uri, planted, said", [
    ("sqlite:///notes.txt", lambda p: (p / "notes.txt").write_text("notes\n"),
     "is not an SQLite database"),
    ("sqlite:///fifo.db", lambda p: os.mkfifo(p / "fifo.db"), "is not a regular file"),
    ("sqlite:///", lambda p: None, "names no database file"),
    ("gopher://host/x", lambda p: None, "is not a tracking URI MLflow takes"),
    ("http://alice:S3cret@", lambda p: None, "names no host"),
])
def test_validate_refuses_a_tracking_uri_as_run_does(tmp_path, uri, planted, said):
    planted(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    done = run_cli("validate", _onnx_pipeline(tmp_path, uri), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr and "tracking.mlflow.uri" in done.stderr
    assert "Traceback" not in done.stderr and "S3cret" not in done.stderr
    assert "valid pipeline" not in done.stdout
    # nothing made: no database, no folder
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before + ["model.onnx",
                                                                          "pipeline.yaml"])


def test_validate_takes_a_new_database_without_making_it(tmp_path):
    done = run_cli("validate", _onnx_pipeline(tmp_path, "sqlite:///new/mlflow.db"),
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "valid pipeline 'v'" in done.stdout and not (tmp_path / "new").exists()


# --- 3. preflight on a large file that is not ONNX ------------------------------------------

GIB = 2**30


def _sparse(path: Path, size: int, head: bytes = b"") -> Path:
    with open(path, "wb") as file:
        file.write(head)
        file.truncate(size)
    if os.stat(path).st_blocks * 512 > 64 * 2**20:
        pytest.skip("this file system does not keep sparse files")
    return path


# A small Python starts the command and reports its peak RSS: a child forked straight
# from a pytest worker would count the worker's own memory (copied at fork) as its peak.
_MEASURED = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                      text=True, timeout=60)
sys.stderr.write(done.stderr)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


def _preflight_rss(model: Path, profile: str, cwd: Path) -> tuple[int, int, str]:
    """(exit code, the command's peak RSS in bytes, stderr) of `compress preflight`;
    killed after 60 s (a hang is a failure, not a stuck suite)."""
    done = subprocess.run([sys.executable, "-c", _MEASURED, sys.executable, "-m", "compress",
                           "preflight", str(model), "--profile", profile], cwd=cwd,
                          env=child_env(), capture_output=True, text=True, timeout=90)
    code, rss = (int(x) for x in done.stdout.split())
    return code, rss, done.stderr


ONNX_REFUSED, TFLITE_REFUSED = "is not a valid ONNX model", "is not a readable TFLite model"


@pytest.mark.parametrize("name, head, profile, said", [
    ("big.onnx", b"", "host-cpu", ONNX_REFUSED),     # zeros: field number 0 at byte 0
    # ModelProto.graph claiming ~3 GiB, then zeros inside it
    ("big.onnx", b"\x3a\xf0\xff\xff\xff\x0b", "qcs6490", ONNX_REFUSED),
    # ir_version, then a graph running past the file's end
    ("big.onnx", b"\x08\x07\x3a\x80\x80\x80\x80\x0c\x0a\x00", "host-cpu", ONNX_REFUSED),
    # producer_name claiming ~3 GiB, zeros after it: walked past, never copied
    ("big.onnx", b"\x12\xf0\xff\xff\xff\x0b", "host-cpu", ONNX_REFUSED),
    ("big.tflite", b"", "coral-edgetpu", TFLITE_REFUSED),   # no TFL3 identifier
])
def test_preflight_refuses_a_3_gib_file_that_is_no_model_without_reading_it(
        tmp_path, name, head, profile, said):
    model = _sparse(tmp_path / name, 3 * GIB, head)
    code, rss, stderr = _preflight_rss(model, profile, tmp_path)
    assert code == 2, stderr
    assert said in stderr and "Traceback" not in stderr
    assert rss < 600 * 2**20, rss   # onnx.load read all 3 GiB


def test_preflight_still_reads_a_real_models_ops_from_the_walked_header(tmp_path):
    from compress.measure.preflight import preflight
    _onnx_pipeline(tmp_path, "sqlite:///x.db")
    report = preflight(str(tmp_path / "model.onnx"), "qcs6490", measure=False)
    assert report["format"] == "onnx" and report["nodes"] == 1
    assert [row["op"] for row in report["ops"]] == ["Relu"]


# --- 4. lm-bench --threads --------------------------------------------------------------------

@pytest.mark.parametrize("threads, said", [
    ("0", "must be 1 or more"), ("-3", "must be 1 or more"), ("x", "invalid int value"),
    (str(10**5), f"must be at most {max_threads()}"), (str(max_threads() + 1), "must be at most"),
])
def test_lm_bench_threads_are_bounded_as_the_runners(tmp_path, threads, said):
    done = subprocess.run([sys.executable, "-m", "runtimes", "lm-bench", str(tmp_path),
                           "--threads", threads], capture_output=True, text=True,
                          timeout=60, env=child_env())
    assert done.returncode == 2 and f"argument --threads: {said}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_lm_bench_takes_the_largest_thread_count_the_runner_takes():
    from runtimes.lm.bench import main
    with pytest.raises(SystemExit) as refused:
        main(["/nonexistent", "--threads", str(max_threads() + 1)])
    assert refused.value.code == 2
    # at the bound the options pass; the missing folder is what stops it (not argparse)
    assert main(["/nonexistent", "--threads", str(max_threads())]) == 2


# --- 5. a search's report reads each trial's report.json bounded ------------------------------

def _trial_report() -> dict:
    report = _report()
    report["artifacts"] = [{**a, "meta": {}} for a in report["artifacts"]]
    del report["search"], report["recommendations"]
    return report


def _plant(folder: Path, how) -> None:
    folder.mkdir(parents=True)
    how(folder / "report.json")


PLANTED = {
    "t001": lambda p: p.write_text(json.dumps(_trial_report())),      # whole: merged
    "t002": os.mkfifo,                                                 # would block
    "t003": lambda p: p.write_bytes(b"\x00\xffgarbage{{"),            # not JSON
    "t004": lambda p: p.write_text("[" * 100_000 + "]" * 100_000),    # nested past any parser
    "t005": lambda p: p.write_text(json.dumps({**_trial_report(), "artifacts": []})),
    "t006": lambda p: p.write_text(json.dumps({**_trial_report(), "models": [{"artifact": "zz"}]})),
    "t007": lambda p: p.write_text(json.dumps(
        {**_trial_report(), "artifacts": [{**_trial_report()["artifacts"][0], "extra": 1}]})),
    "t008": lambda p: p.symlink_to("/dev/zero"),                      # endless
    "t009": lambda p: None,                                            # gone
    "t010": lambda p: (p.touch(), os.truncate(p, 65 * 2**20)),         # past the size cap
    "t011": lambda p: p.write_text(json.dumps(                         # Verdict(**row) fails
        {**_trial_report(), "verdicts": [{**_trial_report()["verdicts"][0], "extra": 1}]})),
}


def test_a_bad_trial_report_is_a_skipped_trial_with_its_reason(tmp_path):
    from compress.search.report import _Merged, _trial_rows
    from compress.search.trials import Trial
    for trial_id, how in PLANTED.items():
        _plant(tmp_path / "trials" / trial_id, how)
    search = SimpleNamespace(out=tmp_path, trials=[
        Trial(t, {"targets.threads": 1}, "complete") for t in PLANTED])
    merged = _Merged()
    started = time.monotonic()
    rows = {row["id"]: row for row in _trial_rows(search, merged)}
    assert time.monotonic() - started < 10          # a FIFO or /dev/zero blocked nothing
    assert rows["t001"]["state"] == "complete" and rows["t001"]["artifacts"] == ["t001/q"]
    assert [a.id for a in merged.artifacts] == ["src", "t001/q"]   # nothing of the others
    said = {t: rows[t]["error"] for t in PLANTED if t != "t001"}
    assert all(rows[t]["state"] == "skipped" and rows[t]["artifacts"] == [] for t in said)
    assert "not a regular file" in said["t002"] and "not a regular file" in said["t008"]
    assert "larger than the 64 MiB" in said["t010"] and "Invalid JSON" in said["t003"]
    assert "recursion limit" in said["t004"]
    assert "field artifacts" in said["t005"] and "'zz'" in said["t006"]
    assert "field artifacts.0.extra" in said["t007"]
    assert "field verdicts.0.extra" in said["t011"]
    assert "No such file" in said["t009"]
    for trial_id, error in said.items():
        assert str(tmp_path / "trials" / trial_id / "report.json") in error
        assert f"delete {tmp_path / 'trials' / trial_id}" in error


def test_the_trial_schema_has_every_field_of_the_records_it_is_read_back_as():
    from compress.core.artifacts import Artifact
    from compress.search.trial_report import _ArtifactRow, _VerdictRow
    from profiles import Verdict
    # each row is checked as the dataclass the merge rebuilds it as, derived from it
    for row, record in ((_ArtifactRow, Artifact), (_VerdictRow, Verdict)):
        assert issubclass(row, record)
        assert [f.name for f in dataclasses.fields(row)] == \
            [f.name for f in dataclasses.fields(record)]