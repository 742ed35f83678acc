"""`distill`: a smaller student learns from the trained digits CNN, on real digits data."""
import textwrap

import numpy as np
import onnxruntime as ort
import pytest
import torch

import compress
from compress.config.pipeline import parse_pipeline
from compress.errors import ConfigError, DataError, ModelError, StageError
from compress.core.imports import import_callable
from compress.model.torch_artifacts import load_torch_model
from tests.conftest import (FAST_EXPORT, QUICKSTART, fill_project, pipeline_dict, run_cli, write_pipeline)

DATA = {"calibration": "data:calibration", "evaluation": "data:evaluation",
        "train": "data:train", "metric": {"type": "accuracy"}}
SMALL = {"factory": "model:build", "kwargs": {"width": 8}}

# Loaders and models a user could write next to the pipeline.
EXTRA = textwrap.dedent("""\
    import torch
    import data
    from model import build

    def unlabelled():
        return {"image": data.train()["image"]}

    def bad_labels():
        train = data.train()
        return {"image": train["image"], "labels": train["labels"] + 5}

    def five_outputs():
        model = build()
        model.classifier = torch.nn.Linear(64, 5)
        return model
    """)


def _distill_pipeline(folder, name, *, data=None, **distill):
    stage = {"type": "distill", "train": {"epochs": 1, "lr": 0.01}, **distill}
    return write_pipeline(folder, pipeline_dict(
        name=name, data=data or DATA, stages=[stage], targets=[]), f"{name}.yaml")


def _evaluation():
    import sys
    sys.path.insert(0, str(QUICKSTART))
    try:
        from data import evaluation
        return evaluation()
    finally:
        sys.path.remove(str(QUICKSTART))


def _accuracy(predict) -> float:
    data = _evaluation()
    return float(np.mean(predict(data["image"]).argmax(1) == data["labels"]))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # The digits models are too small to gain from a second thread, and on a busy machine
    # two threads wait on each other: one thread trains these students several times faster.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def distilled(tmp_path_factory, digits_checkpoint):
    """distill (width 16 -> width 8) then export.onnx, run once for several tests."""
    folder = fill_project(tmp_path_factory.mktemp("distill"), digits_checkpoint)
    stages = [{"type": "distill", "student": SMALL, "train": {"epochs": 4, "lr": 0.01}},
              FAST_EXPORT]
    path = write_pipeline(folder, pipeline_dict(data=DATA, stages=stages, targets=[]))
    return folder, compress.run(path)


def test_a_smaller_student_gets_close_to_the_teacher(distilled):
    folder, result = distilled
    student = result.artifacts[1]
    meta = student.meta
    teacher = import_callable("model:build", folder, ModelError, "test")()
    teacher.load_state_dict(torch.load(folder / "digits_cnn.pt", weights_only=True))
    with torch.no_grad():
        teacher_accuracy = _accuracy(lambda x: teacher.eval()(torch.from_numpy(x)).numpy())
    assert meta["metric_teacher"] == pytest.approx(teacher_accuracy)
    assert meta["metric_after"] >= teacher_accuracy - 0.03
    assert meta["metric_after"] > meta["metric_before"] + 0.5  # untrained: about chance
    assert meta["alpha"] == 0.7 and meta["temperature"] == 4.0
    assert meta["teacher"]["source"] and meta["features"] == []
    assert 1 <= meta["best_epoch"] <= meta["epochs_run"] == len(meta["history"]) == 4

    factory = import_callable(meta["factory"], folder, ModelError, "test")
    reloaded = load_torch_model(result.run_dir / student.path,
                                lambda: factory(**meta["kwargs"]))
    assert meta["kwargs"] == {"width": 8} and reloaded.features[0].out_channels == 8
    with torch.no_grad():
        reloaded_accuracy = _accuracy(lambda x: reloaded(torch.from_numpy(x)).numpy())
    assert reloaded_accuracy == pytest.approx(meta["metric_after"])


def test_the_distilled_student_exports_to_a_working_onnx_model(distilled):
    _, result = distilled
    onnx_artifact = result.artifacts[2]
    assert onnx_artifact.format == "onnx" and onnx_artifact.parent == result.artifacts[1].id
    session = ort.InferenceSession(str(result.run_dir / onnx_artifact.path),
                                   providers=["CPUExecutionProvider"])
    accuracy = _accuracy(lambda x: np.concatenate(
        [session.run(None, {"image": x[i:i + 1]})[0] for i in range(len(x))]))
    assert accuracy == pytest.approx(result.artifacts[1].meta["metric_after"], abs=0.01)


def test_unlabelled_training_data_distills_on_soft_targets_alone(project):
    (project / "extra.py").write_text(EXTRA)
    path = _distill_pipeline(project, "unlabelled", student=SMALL,
                             data={**DATA, "train": "extra:unlabelled"},
                             train={"epochs": 3, "lr": 0.01})
    meta = compress.run(path).artifacts[-1].meta
    assert meta["alpha"] == 1.0
    assert meta["metric_before"] < 0.2 and meta["metric_after"] > 0.85  # labels never seen


def test_feature_distillation_projects_the_student_width(project):
    # A teacher given by checkpoint alone is built with the pipeline's factory.
    path = _distill_pipeline(project, "features", student=SMALL,
                             teacher={"checkpoint": "digits_cnn.pt"},
                             features=[{"student": "features.3", "teacher": "features.3"}])
    result = compress.run(path)
    meta = result.artifacts[-1].meta
    assert meta["teacher"] == {"source": False, "factory": "model:build", "kwargs": {},
                               "checkpoint": "digits_cnn.pt"}
    assert meta["features"] == [{"student": "features.3", "teacher": "features.3",
                                 "projection": "conv1x1 16->32"}]
    saved = torch.load(result.run_dir / result.artifacts[-1].path, weights_only=True)
    assert set(saved["state_dict"]) == set(import_callable(
        "model:build", project, ModelError, "test")(width=8).state_dict())


@pytest.mark.parametrize("pair, message", [
    ({"student": "features.99", "teacher": "features.3"}, "no module 'features.99'; some "
     "of its modules: features, features.0"),
    ({"student": "features.3", "teacher": "features.8"}, "spatial size"),
])
def test_bad_feature_pairs_are_refused(project, pair, message):
    path = _distill_pipeline(project, "badpair", student=SMALL, features=[pair])
    with pytest.raises(StageError, match=message):
        compress.run(path)


def test_a_teacher_without_weights_is_a_config_error():
    data = pipeline_dict(data=DATA, targets=[],
                         stages=[{"type": "distill", "teacher": {"kwargs": {"width": 32}}}])
    with pytest.raises(ConfigError, match="give the teacher's `checkpoint`"):
        parse_pipeline(data)


def test_distill_without_training_data_fails_before_anything_runs(project):
    data = {k: v for k, v in DATA.items() if k != "train"}
    path = _distill_pipeline(project, "notrain", data=data)
    with pytest.raises(DataError, match="needs data.train"):
        compress.run(path)
    assert not (project / "runs").exists()


@pytest.mark.runs  # bad input as CLI runs, as tests/compress/runner/test_bad_input.py
def test_a_teacher_with_other_outputs_or_bad_labels_end_with_exit_code_2(project):
    (project / "extra.py").write_text(EXTRA)
    teacher = _distill_pipeline(project, "teacher5", teacher={"factory": "extra:five_outputs"})
    done = run_cli("run", teacher, "--quiet", cwd=project)
    assert done.returncode == 2, done.stderr
    assert "teacher's output has shape (8, 5)" in done.stderr
    assert "student's has shape (8, 10)" in done.stderr and "Traceback" not in done.stderr

    labels = _distill_pipeline(project, "labels", data={**DATA, "train": "extra:bad_labels"})
    done = run_cli("run", labels, "--quiet", cwd=project)
    assert done.returncode == 2, done.stderr
    assert "labels must be in [0, 9]" in done.stderr and "found 5..14" in done.stderr
    # distill failed: only the source, complete, stays for a re-run to resume from
    kept = sorted(p.parent.name for p in (project / "runs").rglob("stage.json"))
    assert kept == ["00-source", "00-source"]
    assert not [p for p in (project / "runs").rglob("*") if ".partial" in p.name]
