"""`compress ship` and Result.ship / Result.recommendation: the recommended file copied
byte for byte with ship.json into a stable folder, a second ship replacing the first, and
every refusal (a target the run lacks, nothing to ship, a file changed since the run, a
link planted where ship.json goes) exit 2 with nothing written."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compress.cli import main
from compress.errors import ConfigError
from compress.runner.history import load_report
from compress.runner.recommendation import recommendation
from compress.runner.ship import ship, ship_all
from tests.conftest import FAST_EXPORT, pipeline_dict, run_cli, write_pipeline

FEEDING = {"name": "x", "layout": None, "dtype": "float32", "shape": [1, 4],
           "scale": None, "zero_point": None}
SHIP_FIELDS = {"target", "status", "file", "sha256", "files", "artifact", "artifact_sha256",
               "format", "precision", "feeding", "engine", "threads", "latency_p90_ms",
               "model_size_mb", "peak_memory_mb", "metric", "drop", "measured_on_device",
               "off_target_reason", "source_model_sha256", "run_dir", "report",
               "tool_version"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _onnx_model(path: Path, weight: float = 1.0) -> None:
    """A real (tiny) ONNX model: y = x + w."""
    w = numpy_helper.from_array(weight * np.arange(4, dtype=np.float32).reshape(1, 4), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _rec(target: str, artifact: str | None, status: str, path: Path | None) -> dict:
    return {"target": target, "status": status, "artifact": artifact,
            "path": str(path) if path else None, "format": "onnx" if artifact else None,
            "precision": "fp32", "engine": "onnxruntime", "threads": 2,
            "latency_p90_ms": 0.02, "model_size_mb": 0.001, "peak_memory_mb": 60.0,
            "metric": {"name": "accuracy", "value": 0.98}, "drop": 0.0,
            "measured_on_device": status == "ship",
            "off_target_reason": None if status == "ship" else "the host is not a Pi",
            "feeding": FEEDING if artifact else None, "summary": f"{target}: ..."}


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A finished run's folder as `compress run` leaves it: a real ONNX file in its stage
    folder, its sha256 in the artifact list, and one target of each kind: host-cpu
    ships it, pi-like has a candidate, rpi4 nothing fits."""
    run = tmp_path / "runs" / "t"
    model = run / "01-export.onnx" / "model.onnx"
    _onnx_model(model)
    source = "ab" * 32
    miss = {"artifact": "01-export.onnx", "misses": [
        {"budget": "latency_p90_ms", "value": 30.0, "limit": 20.0}]}
    report = {
        "pipeline": {"config_sha256": "0" * 64, "name": "t"},
        "manifest": {"packages": {}, "created": "now", "source_model_sha256": source},
        "passed": False, "gated_targets": ["host-cpu", "pi-like", "rpi4"],
        "artifacts": [{"id": "00-source", "stage": "source", "path": "00-source/model.pt",
                       "sha256": source},
                      {"id": "01-export.onnx", "stage": "export.onnx",
                       "path": "01-export.onnx/model.onnx", "sha256": _sha(model)}],
        "recommendations": [
            _rec("host-cpu", "01-export.onnx", "ship", model),
            _rec("pi-like", "01-export.onnx", "candidate", model),
            {**_rec("rpi4", None, "nothing fits", None), "closest_miss": miss,
             "why": "no variant meets every budget"}]}
    (run / "report.json").write_text(json.dumps(report))
    return run


def _cli(tmp_path: Path, *args: str) -> int:
    return main(["ship", *args, "--output", str(tmp_path / "runs")])


def test_ship_copies_the_file_and_its_manifest(run_dir, tmp_path, capsys):
    to = tmp_path / "deploy"
    assert _cli(tmp_path, "t", "--target", "host-cpu", "--to", str(to)) == 0
    model = run_dir / "01-export.onnx" / "model.onnx"
    assert (to / "model.onnx").read_bytes() == model.read_bytes()
    shipped = json.loads((to / "ship.json").read_text())
    assert SHIP_FIELDS <= set(shipped)
    assert shipped["sha256"] == shipped["artifact_sha256"] == _sha(model)
    assert shipped["feeding"] == FEEDING and shipped["status"] == "ship"
    assert shipped["source_model_sha256"] == "ab" * 32
    assert shipped["report"] == str(run_dir / "report.json")
    assert "shipped" in capsys.readouterr().out
    # nothing but the file and the manifest: no temporary left behind
    assert sorted(p.name for p in to.iterdir()) == ["model.onnx", "ship.json"]


def test_a_second_ship_replaces_the_first(run_dir, tmp_path):
    to = tmp_path / "deploy"
    first = ship(load_report(run_dir / "report.json"), run_dir / "report.json", to,
                 "host-cpu")
    (to / "older.tflite").write_bytes(b"old")
    manifest = json.loads((to / "ship.json").read_text())
    manifest["files"].append({"name": "older.tflite"})   # what an earlier ship wrote
    (to / "ship.json").write_text(json.dumps(manifest))
    inode = os.stat(to / "ship.json").st_ino
    again = ship(load_report(run_dir / "report.json"), run_dir / "report.json", to,
                 "host-cpu")
    assert again == first and os.stat(to / "ship.json").st_ino != inode   # renamed in
    assert sorted(p.name for p in to.iterdir()) == ["model.onnx", "ship.json"]


def test_a_candidate_ships_with_a_warning_and_strict_refuses_it(run_dir, tmp_path, capsys):
    assert _cli(tmp_path, "t", "--target", "pi-like", "--to", str(tmp_path / "c")) == 0
    assert "candidate" in capsys.readouterr().err
    assert json.loads((tmp_path / "c" / "ship.json").read_text())["status"] == "candidate"
    assert _cli(tmp_path, "t", "--target", "pi-like", "--to", str(tmp_path / "s"),
                "--strict") == 2
    assert "--strict" in capsys.readouterr().err and not (tmp_path / "s").exists()


@pytest.mark.parametrize("target, said", [
    ("jetson", "'jetson' is not a target of the run"),
    ("rpi4", "the closest miss: 01-export.onnx (latency_p90_ms 30 (limit 20))"),
    (None, "has 3 targets (host-cpu, pi-like, rpi4)")])
def test_a_target_without_a_file_is_refused(run_dir, tmp_path, capsys, target, said):
    args = ["--target", target] if target else []
    assert _cli(tmp_path, "t", *args, "--to", str(tmp_path / "d")) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and not (tmp_path / "d").exists()


def test_a_file_changed_since_the_run_is_refused(run_dir, tmp_path, capsys):
    model = run_dir / "01-export.onnx" / "model.onnx"
    model.unlink()
    _onnx_model(model, weight=2.0)   # another valid model in its place: its hash differs
    assert _cli(tmp_path, str(run_dir), "--target", "host-cpu", "--to",
                str(tmp_path / "d")) == 2
    assert "not the" in capsys.readouterr().err   # "has sha256 ..., not the ... measured"
    assert list((tmp_path / "d").iterdir()) == []   # the copy checked, then dropped
    model.write_bytes(model.read_bytes() + b"\xff")   # no longer an ONNX file at all
    assert _cli(tmp_path, str(run_dir), "--target", "host-cpu", "--to",
                str(tmp_path / "d")) == 2
    assert "the run folder changed since its run" in capsys.readouterr().err
    model.unlink()
    assert _cli(tmp_path, str(run_dir / "report.json"), "--target", "host-cpu", "--to",
                str(tmp_path / "d")) == 2
    assert "is gone" in capsys.readouterr().err


def test_a_link_planted_at_ship_json_is_not_followed(run_dir, tmp_path):
    to, victim = tmp_path / "d", tmp_path / "victim"
    victim.write_text("keep")
    to.mkdir()
    (to / "ship.json").symlink_to(victim)
    done = run_cli("ship", "t", "--target", "host-cpu", "--to", to, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "is a symbolic link" in done.stderr and "Traceback" not in done.stderr
    assert victim.read_text() == "keep" and sorted(p.name for p in to.iterdir()) == \
        ["ship.json"]


def test_the_recommendation_is_typed(run_dir):
    report = load_report(run_dir / "report.json")
    rec = recommendation(report, run_dir, "host-cpu")
    assert rec.path == run_dir / "01-export.onnx" / "model.onnx" and rec.path.is_absolute()
    assert (rec.status, rec.threads, rec.latency_p90_ms, rec.measured_on_device) == \
        ("ship", 2, 0.02, True)
    assert recommendation(report, run_dir, "rpi4").path is None
    with pytest.raises(ConfigError, match="its targets: host-cpu, pi-like, rpi4"):
        recommendation(report, run_dir, "nope")


def test_the_recommendation_reads_only_keys_the_decision_writes():
    import dataclasses
    from compress.report.decide import _empty
    from compress.runner.recommendation import Recommendation
    written = {"target", "status", "why", "closest_miss", *_empty()}
    assert {f.name for f in dataclasses.fields(Recommendation)} <= written


def test_ship_all_puts_each_gated_target_in_its_folder(run_dir, tmp_path):
    said: list[str] = []
    shipped = ship_all(load_report(run_dir / "report.json"), run_dir / "report.json",
                       tmp_path / "out", False, said.append)
    assert sorted(shipped) == ["host-cpu", "pi-like"]
    assert (tmp_path / "out" / "host-cpu" / "ship.json").is_file()
    assert any("rpi4: nothing to ship" in line for line in said)


@pytest.mark.runs
def test_a_pipeline_run_ships_and_python_reaches_it(project):
    import compress
    data = pipeline_dict(stages=[FAST_EXPORT, {"type": "benchmark", "warmup": 1, "runs": 5,
                                               "rounds": 1}], ship={"to": "deploy"})
    result = compress.run(write_pipeline(project, data))
    rec = result.recommendation("host-cpu")
    assert rec.status == "ship" and rec.path.is_file()
    shipped = json.loads((project / "deploy" / "host-cpu" / "ship.json").read_text())
    assert shipped["artifact"] == rec.artifact and shipped["sha256"] == _sha(rec.path)
    path = result.ship(project / "mine")
    assert path.read_bytes() == rec.path.read_bytes()
    done = run_cli("ship", "t", "--to", "cli", cwd=project)
    assert done.returncode == 0, done.stderr
    assert (project / "cli" / rec.path.name).read_bytes() == rec.path.read_bytes()
    with pytest.raises(ConfigError, match="not a target"):
        result.recommendation("rpi4")


def _external_onnx(folder: Path) -> Path:
    model = folder / "model.onnx"
    _onnx_model(model)
    onnx.save(onnx.load(model), model, save_as_external_data=True,
              location="model.onnx.data", size_threshold=0)
    return model


def _openvino_ir(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.xml").write_text("<net name='tiny'/>")   # its weights: model.bin
    (folder / "model.bin").write_bytes(bytes(range(64)))
    return folder / "model.xml"


@pytest.mark.parametrize("make, fmt, names", [
    (_external_onnx, "onnx", ["model.onnx", "model.onnx.data", "ship.json"]),
    (_openvino_ir, "openvino", ["model.bin", "model.xml", "ship.json"])])
def test_a_model_with_its_weights_apart_ships_both(run_dir, tmp_path, make, fmt, names):
    from compress.core.artifacts import sha256_artifact
    model = make(run_dir / "02-other")
    report = load_report(run_dir / "report.json")
    report["artifacts"].append({"id": "02-other", "path": f"02-other/{model.name}",
                                "sha256": sha256_artifact(model)})
    report["recommendations"][0].update(artifact="02-other", path=str(model), format=fmt)
    shipped = ship(report, run_dir / "report.json", tmp_path / "d", "host-cpu")
    assert shipped == tmp_path / "d" / model.name
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == names
    for part in names[:-1]:
        assert (tmp_path / "d" / part).read_bytes() == (model.parent / part).read_bytes()
    files = json.loads((tmp_path / "d" / "ship.json").read_text())["files"]
    assert [f["name"] for f in files][0] == model.name


@pytest.mark.parametrize("ship_field, said", [
    ({"to": "deploy", "too": 1}, "ship.too"), ({}, "ship.to"), ({"to": ""}, "ship.to")])
def test_the_ship_field_is_checked_like_the_rest(ship_field, said):
    from compress.config.pipeline import parse_pipeline
    with pytest.raises(ConfigError) as caught:
        parse_pipeline(pipeline_dict(ship=ship_field))
    assert said in str(caught.value)


def test_a_file_named_as_the_folder_or_a_link_at_the_model_is_refused(run_dir, tmp_path,
                                                                     capsys):
    (tmp_path / "afile").write_text("x")
    assert _cli(tmp_path, "t", "--target", "host-cpu", "--to", str(tmp_path / "afile")) == 2
    assert "is not a folder" in capsys.readouterr().err
    to, victim = tmp_path / "d", tmp_path / "victim"
    victim.write_text("keep")
    to.mkdir()
    (to / "model.onnx").symlink_to(victim)
    assert _cli(tmp_path, "t", "--target", "host-cpu", "--to", str(to)) == 2
    assert "is a symbolic link" in capsys.readouterr().err
    assert victim.read_text() == "keep" and sorted(p.name for p in to.iterdir()) == \
        ["model.onnx"]
