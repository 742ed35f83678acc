"""Torch artifact round trip after a shape change, model statistics, the training loop."""
import numpy as np
import pytest
import torch

from compress.data.feeds import Samples
from compress.errors import DataError, ModelError
from compress.model.stats import model_stats
from compress.model.torch_artifacts import load_torch_model, save_torch_model
from compress.model.training import Objective, TrainSettings, check_labels, train
from tests.conftest import QUICKSTART


def _build():
    import importlib.util
    spec = importlib.util.spec_from_file_location("qs_model", QUICKSTART / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build()


def _shrink_first_conv(model, keep: int):
    """Remove output channels of the first conv (and the BN and conv that follow it)."""
    conv, bn, nxt = model.features[0], model.features[1], model.features[3]
    conv.weight = torch.nn.Parameter(conv.weight[:keep].clone())
    conv.bias = torch.nn.Parameter(conv.bias[:keep].clone())
    conv.out_channels = keep
    bn.weight = torch.nn.Parameter(bn.weight[:keep].clone())
    bn.bias = torch.nn.Parameter(bn.bias[:keep].clone())
    bn.running_mean, bn.running_var = bn.running_mean[:keep].clone(), bn.running_var[:keep].clone()
    bn.num_features = keep
    nxt.weight = torch.nn.Parameter(nxt.weight[:, :keep].clone())
    nxt.in_channels = keep
    return model


def test_a_resized_model_reloads_on_its_factory(tmp_path, digits_checkpoint):
    model = _build()
    model.load_state_dict(torch.load(digits_checkpoint, weights_only=True))
    small = _shrink_first_conv(model.eval(), keep=8)
    x = torch.randn(4, 1, 8, 8)
    path = tmp_path / "small.pt"
    save_torch_model(small, path)
    again = load_torch_model(path, _build)
    assert again.features[0].out_channels == 8
    assert torch.allclose(again(x), small(x))
    assert model_stats(again, [x[:1]])["parameters"] < model_stats(_build(), [x[:1]])["parameters"]


def test_a_plain_state_dict_of_another_shape_is_refused(tmp_path):
    path = tmp_path / "wrong.pt"
    torch.save(_build().state_dict() | {"classifier.weight": torch.zeros(3, 3)}, path)
    with pytest.raises(ModelError, match="does not fit"):
        load_torch_model(path, _build)


def test_model_stats_counts_macs_and_sparsity():
    linear = torch.nn.Linear(10, 4)
    with torch.no_grad():
        linear.weight[:2] = 0
    stats = model_stats(linear, [torch.zeros(1, 10)])
    assert stats == {"parameters": 44, "macs": 40, "sparsity": 0.5}


def _digits():
    from sklearn.datasets import load_digits
    d = load_digits()
    return {"image": (d.images / 16.0).astype(np.float32)[:, None]}, d.target.astype(np.int64)


def test_training_keeps_the_best_epoch_and_stops_early():
    inputs, labels = _digits()
    model = _build()
    scores = iter([0.1, 0.9, 0.5, 0.4, 0.3])

    def loss_fn(m, xs, y):
        return torch.nn.functional.cross_entropy(m(*xs), y)
    result = train(model, Objective(loss_fn, lambda m: next(scores)), Samples(inputs, labels),
                   TrainSettings(epochs=6, patience=2))
    assert result.best_epoch == 1 and result.best_metric == 0.9
    assert result.epochs_run == 3  # two epochs without improvement after epoch 1


def test_diverging_training_stops_with_a_clear_error():
    inputs, labels = _digits()
    with pytest.raises(ModelError, match="training diverged"):
        train(_build(), Objective(lambda m, xs, y: m(*xs).sum() * float("nan")),
              Samples(inputs, labels), TrainSettings(epochs=1))


def test_labels_out_of_range_are_refused():
    with pytest.raises(DataError, match=r"labels must be in \[0, 9\]"):
        check_labels(np.array([0, 3, 10]), 10)
