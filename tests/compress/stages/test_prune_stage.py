"""The prune stage on the digits CNN (16/32/64 channels): channel pruning that really
shrinks the model and still exports, magnitude and 2:4 sparsity, iterative schedules,
fine-tuning, and the inputs it must refuse."""
import importlib.util

import numpy as np
import onnxruntime as ort
import pytest
import torch

import compress
from compress.config.pipeline import parse_pipeline
from compress.errors import ConfigError, DataError
from compress.model.torch_artifacts import load_torch_model
from tests.conftest import FAST_EXPORT, pipeline_dict, run_cli, write_pipeline

DATA = {"calibration": "data:calibration", "evaluation": "data:evaluation",
        "train": "data:train", "metric": {"type": "accuracy"}}
CONVS = ("features.0", "features.3", "features.7")


def _pipeline(project, stages, data=DATA):
    return write_pipeline(project, pipeline_dict(data=data, stages=stages))


def _load(project, result, artifact_id):
    spec = importlib.util.spec_from_file_location("prune_test_model", project / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    artifact = next(a for a in result.artifacts if a.id == artifact_id)
    return load_torch_model(result.run_dir / artifact.path, module.build), artifact.meta


def _digits(project, split="evaluation"):
    spec = importlib.util.spec_from_file_location("prune_test_data", project / "data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, split)()


def test_channel_pruning_removes_channels_exports_and_fine_tunes(project):
    stages = [{"type": "prune", "name": "pruned", "method": "channel", "sparsity": 0.5,
               "round_to": 4, "train": {"epochs": 3, "lr": 0.003}},
              FAST_EXPORT]
    result = compress.run(_pipeline(project, stages))
    model, meta = _load(project, result, "pruned")
    assert meta["parameters_before"] >= 2.5 * meta["parameters_after"]
    assert meta["macs_after"] < meta["macs_before"] / 2.5
    assert {n: meta["layers"][n]["after"] for n in (*CONVS, "classifier")} == {
        "features.0": 8, "features.3": 16, "features.7": 32, "classifier": 10}
    assert model.classifier.in_features == 32 and meta["factory"] == "model:build"
    tuned = meta["fine_tune"][0]
    assert tuned["best_metric"] >= 0.9 and tuned["best_metric"] > tuned["metric_pruned"]
    assert meta["metric_after"] == pytest.approx(tuned["best_metric"])
    digits = _digits(project)
    onnx_path = result.run_dir / result.artifacts[-1].path
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    predictions = [session.run(None, {"image": x[None]})[0].argmax() for x in digits["image"]]
    assert np.mean(np.array(predictions) == digits["labels"]) == pytest.approx(meta["metric_after"])


def test_scopes_importances_and_an_iterative_schedule(project):
    base = {"type": "prune", "method": "channel", "sparsity": 0.5, "round_to": 4,
            "input": "source"}
    stages = [{**base, "name": "global-l1", "scope": "global", "importance": "l1"},
              {**base, "name": "bn", "importance": "bn_scale"},
              {**base, "name": "taylor", "scope": "global", "importance": "taylor"},
              {**base, "name": "steps", "schedule": "iterative", "steps": 2,
               "train": {"epochs": 1}}]
    result = compress.run(_pipeline(project, stages))
    for name in ("global-l1", "bn", "taylor", "steps"):
        model, meta = _load(project, result, name)
        kept = [meta["layers"][n]["after"] for n in CONVS]
        assert all(k % 4 == 0 and k >= 4 for k in kept), (name, kept)
        assert meta["parameters_after"] < meta["parameters_before"]
        assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
        if name in ("global-l1", "taylor"):  # 112 channels ranked together, rounded up
            assert 112 - 56 <= sum(kept) <= 112 - 56 + 3 * 3, (name, kept)
        else:
            assert kept == [8, 16, 32]
    _, steps = _load(project, result, "steps")
    assert [s["step"] for s in steps["fine_tune"]] == [1, 2]
    assert steps["metric_after"] >= 0.8


def test_without_labels_taylor_and_fine_tuning_follow_the_unpruned_model(project):
    images = _digits(project, "train")["image"]
    np.savez(project / "unlabelled.npz", image=images)  # no labels: KL to the original
    stages = [{"type": "prune", "name": "taylor", "method": "channel", "sparsity": 0.5,
               "importance": "taylor", "round_to": 4, "train": {"epochs": 2}}]
    result = compress.run(_pipeline(project, stages, data={**DATA, "train": "unlabelled.npz"}))
    _, meta = _load(project, result, "taylor")
    assert [meta["layers"][n]["after"] for n in CONVS] == [8, 16, 32]
    assert meta["fine_tune"][0]["epochs_run"] == 2 and meta["metric_after"] >= 0.85


def test_magnitude_reaches_the_asked_weight_sparsity_and_fine_tuning_keeps_it(project):
    base = {"type": "prune", "method": "magnitude", "sparsity": 0.6, "input": "source"}
    stages = [{**base, "name": "global", "scope": "global", "train": {"epochs": 1}},
              {**base, "name": "layer"}]
    result = compress.run(_pipeline(project, stages))
    for name in ("global", "layer"):
        model, meta = _load(project, result, name)
        weights = [dict(model.named_modules())[n].weight for n in CONVS]
        zeros = [int((w == 0).sum()) for w in weights]
        sizes = [w.numel() for w in weights]
        if name == "global":
            assert sum(zeros) == round(0.6 * sum(sizes))
            assert meta["fine_tune"][0]["epochs_run"] == 1
        else:
            assert zeros == [round(0.6 * s) for s in sizes]
        assert int((model.classifier.weight == 0).sum()) == 0  # the output layer is kept
        assert meta["parameters_after"] == meta["parameters_before"]
        assert "latency" in meta["note"] and meta["weight_sparsity"] > 0.55


def test_two_four_keeps_exactly_two_of_every_four_weights(project):
    stages = [{"type": "prune", "name": "sparse", "method": "n:m", "schedule": "iterative",
               "steps": 2, "train": {"epochs": 1}}]
    result = compress.run(_pipeline(project, stages))
    model, meta = _load(project, result, "sparse")
    assert meta["skipped_layers"] == ["features.0"]  # one input channel: no group of 4
    assert meta["sparsity"] == 0.5 and len(meta["fine_tune"]) == 2
    for name in ("features.3", "features.7"):
        groups = dict(model.named_modules())[name].weight.movedim(1, -1).reshape(-1, 4)
        assert ((groups != 0).sum(1) == 2).all(), name


@pytest.mark.parametrize("stage, message", [
    ({"method": "channel", "sparsity": 1.0}, "less than 1"),
    ({"method": "n:m", "n": 4, "m": 4}, "n < m"),
    ({"method": "magnitude"}, "needs `sparsity`"),
])
def test_impossible_settings_are_rejected_at_validation(stage, message):
    data = pipeline_dict(stages=[{"type": "prune", **stage}])
    with pytest.raises(ConfigError, match=message):
        parse_pipeline(data)


@pytest.mark.runs  # bad input as a CLI run, as tests/compress/runner/test_bad_input.py
def test_an_unknown_ignore_name_is_refused_with_the_layers_it_has(project):
    path = _pipeline(project, [{"type": "prune", "method": "channel", "sparsity": 0.5,
                                "ignore": ["features.99"]}])
    child = run_cli("run", path, "--quiet", cwd=project)
    assert child.returncode == 2, child.stderr
    assert "features.99" in child.stderr and "features.3" in child.stderr
    assert "Traceback" not in child.stderr


def test_fine_tuning_without_training_data_fails_before_anything_runs(project):
    data = {k: v for k, v in DATA.items() if k != "train"}
    path = _pipeline(project, [{"type": "prune", "method": "channel", "sparsity": 0.5,
                                "train": {"epochs": 1}}], data=data)
    with pytest.raises(DataError, match="data.train"):
        compress.run(path)
    assert not (project / "runs").exists()
