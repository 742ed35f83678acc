"""compress.run() takes the objects the YAML names: a torch module or a factory function,
an onnx.ModelProto, data as arrays, feed lists, generators or DataLoaders, a metric
function; cached by content (weights, graph, data), never by id()."""
from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pytest
import torch

import compress
from compress.errors import ConfigError, DataError
from tests.conftest import FAST_EXPORT, FAST_INT8, QUICKSTART

INPUTS = [{"name": "image", "shape": [1, 1, 8, 8], "dtype": "float32"}]
FAST = {"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 1}


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"qs_{name}", QUICKSTART / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def trained(digits_checkpoint):
    net = _module("model").build()
    net.load_state_dict(torch.load(digits_checkpoint, weights_only=True))
    return net.eval()


@pytest.fixture(scope="module")
def digits():
    data = _module("data")
    return data.calibration(64), data.evaluation()


def _mtimes(run_dir) -> dict:
    return {p.parent.name: p.stat().st_mtime_ns for p in run_dir.rglob("stage.json")}


def agreement(predictions, references) -> float:
    """A custom metric: top-1 of the variant against the labels, as a user writes one."""
    hits = [int(np.argmax(p["output"]) == r["labels"][0]) for p, r in zip(predictions, references)]
    return float(np.mean(hits))


def test_a_module_arrays_a_generator_and_a_metric_function(tmp_path, trained, digits):
    calibration, evaluation = digits
    feeds = lambda: ({"image": evaluation["image"][i:i + 1],  # noqa: E731
                      "labels": evaluation["labels"][i:i + 1]} for i in range(120))

    def build(net, data_feeds):
        return compress.pipeline(
            name="objects", output=str(tmp_path / "runs"), targets=["host-cpu"],
            model={"torch": net, "inputs": INPUTS},
            data={"calibration": calibration, "evaluation": data_feeds,
                  "metric": {"type": "custom", "function": agreement}},
            stages=[FAST_EXPORT,
                    {"type": "quantize", "scheme": "int8-static", **FAST_INT8}, FAST])
    result = compress.run(build(trained, feeds()))
    int8 = next(b for b in result.benchmarks if b["artifact"] == "02-quantize")
    assert int8["metric"]["name"] == "custom" and int8["metric"]["value"] > 0.9
    assert int8["metric"]["baseline"] == pytest.approx(
        agreement([{"output": trained(torch.from_numpy(f["image"])).detach().numpy()}
                   for f in feeds()], [{"labels": f["labels"]} for f in feeds()]))
    first = _mtimes(result.run_dir)

    # the same weights and data in new objects: every stage is reused
    again = _module("model").build()
    again.load_state_dict(trained.state_dict())
    assert _mtimes(compress.run(build(again.eval(), feeds())).run_dir) == first
    # other weights: the source and everything after it are redone
    with torch.no_grad():
        again.classifier.bias += 0.5
    redone = _mtimes(compress.run(build(again, feeds())).run_dir)
    assert redone["00-source"] != first["00-source"]
    assert redone["01-export.onnx"] != first["01-export.onnx"]


def test_a_factory_function_and_a_dataloader(tmp_path, trained, digits):
    _, evaluation = digits
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
        torch.from_numpy(evaluation["image"][:64]), torch.from_numpy(evaluation["labels"][:64])),
        batch_size=1)
    state = trained.state_dict()

    def factory():
        net = _module("model").build()
        net.load_state_dict(state)
        return net
    result = compress.run({
        "name": "factory", "output": str(tmp_path / "runs"), "targets": ["host-cpu"],
        "model": {"torch": factory, "inputs": INPUTS},
        "data": {"evaluation": loader}, "stages": [FAST_EXPORT, FAST]})
    bench = result.benchmarks[0]
    assert bench["metric"]["name"] == "accuracy" and bench["metric"]["samples"] == 64
    assert bench["metric"]["value"] > 0.9


def test_an_onnx_model_proto_with_its_inputs_read_from_the_graph(tmp_path, trained, digits):
    calibration, evaluation = digits
    path = tmp_path / "digits.onnx"
    torch.onnx.export(trained, (torch.zeros(1, 1, 8, 8),), str(path), input_names=["image"],
                      output_names=["logits"], dynamo=False)
    proto = onnx.load(str(path))
    result = compress.run(compress.pipeline(
        name="proto", output=str(tmp_path / "runs"), targets=["host-cpu"],
        model={"onnx": proto},            # no inputs: read from the graph
        data={"calibration": calibration, "evaluation": evaluation},
        stages=[{"type": "quantize", "scheme": "int8-static", **FAST_INT8}, FAST]))
    assert {b["artifact"] for b in result.benchmarks} == {"00-source", "01-quantize"}
    assert all(b["metric"]["value"] > 0.9 for b in result.benchmarks)


def test_mistakes_in_objects_are_config_and_data_errors(tmp_path, trained):
    with pytest.raises(ConfigError, match="model.torch.*torch.nn.Module"):
        compress.pipeline(name="x", model={"torch": {"module": 3}, "inputs": INPUTS},
                          stages=[FAST])
    with pytest.raises(ConfigError, match="model.onnx must be a path or an onnx.ModelProto"):
        compress.pipeline(name="x", model={"onnx": [1, 2]}, stages=[FAST])

    def broken(predictions, references):
        return "high"
    with pytest.raises(DataError, match="returned 'high'; it must return one finite number"):
        compress.run(compress.pipeline(
            name="metric", output=str(tmp_path / "runs"), targets=["host-cpu"],
            model={"torch": trained, "inputs": INPUTS},
            data={"evaluation": {"image": np.zeros((4, 1, 8, 8), np.float32)},
                  "metric": {"type": "custom", "function": broken}},
            stages=[FAST_EXPORT, FAST]))
