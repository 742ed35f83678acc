"""ONNX models as another exporter leaves them: an old opset (quantized after the upgrade
per-channel QDQ needs), weights in an external data file, a dynamic width fixed by each
feed, inputs read from the graph, several inputs including a state with its batch on
axis 1 and a 0-d int64 scalar, and a custom metric named in the YAML."""
from __future__ import annotations

import textwrap

import numpy as np
import onnx
import pytest
import torch

import compress
from compress.errors import ModelError
from compress.core.imports import import_callable
from tests.conftest import pipeline_dict, run_cli, write_pipeline

FAST = {"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 1}


def _net(project):
    # The project's own loader: a plain `from model import build` would get whichever
    # model.py an earlier test left in sys.modules.
    net = import_callable("model:build", project, ModelError, "model")()
    net.load_state_dict(torch.load(project / "digits_cnn.pt", weights_only=True))
    return net.eval()


def _export(net, path, opset: int, dynamic_width: bool = False) -> None:
    axes = {"image": {3: "width"}} if dynamic_width else None
    torch.onnx.export(net, (torch.zeros(1, 1, 8, 8),), str(path), input_names=["image"],
                      output_names=["logits"], opset_version=opset, dynamo=False,
                      dynamic_axes=axes)


def _onnx_pipeline(project, onnx_path, **data):
    return pipeline_dict(model={"onnx": onnx_path.name}, targets=["host-cpu"],
                         data={"calibration": "data:calibration",
                               "evaluation": "data:evaluation", **data},
                         stages=[{"type": "quantize", "scheme": "int8-static"}, FAST])


def test_an_opset_11_model_is_upgraded_before_per_channel_qdq(project):
    _export(_net(project), project / "old.onnx", opset=11)
    result = compress.run(write_pipeline(project, _onnx_pipeline(project, project / "old.onnx")))
    int8 = result.artifacts[-1]
    assert int8.meta["opset_upgraded"] == {"from": 11, "to": 13}
    assert int8.meta["per_channel"] and int8.meta["qdq"]["weight_types"]
    bench = {b["artifact"]: b for b in result.benchmarks}
    assert bench["01-quantize"]["metric"]["drop"] <= 0.02
    # inputs came from the graph: the name and shape as exported
    assert bench["00-source"]["metric"]["samples"] == 360


def test_external_data_is_read_and_kept_in_one_file(project):
    _export(_net(project), project / "plain.onnx", opset=17)
    model = onnx.load(str(project / "plain.onnx"))
    onnx.save(model, str(project / "split.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="split.onnx.weights", size_threshold=0)
    result = compress.run(write_pipeline(project, _onnx_pipeline(project, project / "split.onnx")))
    source = result.run_dir / result.artifacts[0].path
    assert not list(source.parent.glob("*.weights")) and onnx.load(str(source)).graph.initializer
    (project / "split.onnx.weights").unlink()
    broken = run_cli("validate", write_pipeline(project, _onnx_pipeline(
        project, project / "split.onnx")), cwd=project)
    assert broken.returncode == 2 and "split.onnx.weights" in broken.stderr
    assert "Traceback" not in broken.stderr


WIDTHS = textwrap.dedent("""\
    import numpy as np
    from data import evaluation

    def wide():
        # digits padded to different widths: one feed per call, each its own width
        images = evaluation()["image"][:24]
        return [{"image": np.pad(images[i:i + 1], ((0, 0), (0, 0), (0, 0), (0, i % 5)))}
                for i in range(len(images))]
    """)


def test_a_dynamic_width_is_fixed_by_each_feed_or_asked_for(project):
    _export(_net(project), project / "wide.onnx", opset=17, dynamic_width=True)
    (project / "widths.py").write_text(WIDTHS)
    data = pipeline_dict(model={"onnx": "wide.onnx"}, targets=["host-cpu"],
                         data={"calibration": "widths:wide", "evaluation": "widths:wide"},
                         stages=[{"type": "quantize", "scheme": "int8-static"}, FAST])
    result = compress.run(write_pipeline(project, data))
    widths = {b["artifact"]: b["metric"]["details"]["cosine"] for b in result.benchmarks}
    assert widths["01-quantize"] > 0.99
    # without data nothing fixes the width: one error asks for it, before any work
    bare = pipeline_dict(model={"onnx": "wide.onnx"}, targets=["host-cpu"], data={},
                         stages=[FAST], name="bare")
    failed = run_cli("run", write_pipeline(project, bare), "--quiet", cwd=project)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    assert "leaves dimensions dynamic ('image' axes [3])" in failed.stderr
    assert "declare them in model.inputs" in failed.stderr
    assert not (project / "runs" / "bare").exists()


class StateStep(torch.nn.Module):
    """A recurrent step: row x, GRU state h [layers, batch, hidden] (batch on axis 1), step
    index t (0-d int64) selecting a learned step offset."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.gru = torch.nn.GRU(8, 16)
        self.steps = torch.nn.Embedding(8, 8)
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x, h, t):
        out, h_next = self.gru((x + self.steps(t))[None], h)
        return self.head(out[0]), h_next


STEP_METRIC = textwrap.dedent("""\
    import numpy as np

    def state_error(predictions, references):
        # lower is better: the largest error of the next state, in the state's own units
        return float(max(np.abs(p["h_next"] - r["h_next"]).max()
                         for p, r in zip(predictions, references)))
    """)


def _step_feeds(model, images) -> list:
    """Real digit rows, and the state the float model reaches before each step."""
    feeds = []
    for image in images:
        h = torch.zeros(1, 1, 16)
        for t in range(8):
            x = torch.from_numpy(image[t:t + 1])
            feeds.append({"x": x.numpy(), "h": h.numpy().copy(), "t": np.array(t)})
            with torch.no_grad():
                _, h = model(x, h, torch.tensor(t))
    return feeds


def test_a_state_with_its_batch_on_axis_1_a_scalar_and_a_custom_metric(project):
    from sklearn.datasets import load_digits
    model = StateStep().eval()
    torch.onnx.export(model, (torch.zeros(1, 8), torch.zeros(1, 1, 16), torch.tensor(0)),
                      str(project / "step.onnx"), input_names=["x", "h", "t"],
                      output_names=["logits", "h_next"], dynamo=False, opset_version=17)
    images = (load_digits().images / 16.0).astype(np.float32)
    np.savez(project / "unused.npz", x=np.zeros(1))
    (project / "stepmetric.py").write_text(STEP_METRIC)
    calibration, evaluation = _step_feeds(model, images[:12]), _step_feeds(model, images[12:20])
    result = compress.run(compress.pipeline(
        name="step", output=str(project / "runs"), targets=["host-cpu"],
        model={"onnx": str(project / "step.onnx")},
        data={"calibration": calibration, "evaluation": evaluation,
              "metric": {"type": "custom", "function": _metric(project),
                         "higher_is_better": False}},
        stages=[{"type": "quantize", "scheme": "int8-static"}, FAST]))
    bench = {b["artifact"]: b for b in result.benchmarks}
    int8 = bench["01-quantize"]["metric"]
    assert int8["name"] == "custom" and int8["baseline"] == 0.0
    assert int8["drop"] == pytest.approx(int8["value"]) and 0 < int8["value"] < 0.5
    per_output = int8["details"]["outputs"]
    assert set(per_output) == {"logits", "h_next"}
    assert per_output["h_next"]["cosine"] > 0.99 and per_output["h_next"]["sqnr_db"] > 20


def _metric(project):
    import importlib.util
    spec = importlib.util.spec_from_file_location("stepmetric", project / "stepmetric.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.state_error


def test_a_custom_metric_named_in_the_yaml(project):
    (project / "mymetric.py").write_text(textwrap.dedent("""\
        import numpy as np

        def top1(predictions, references):
            return float(np.mean([np.argmax(p["output"]) == r["labels"][0]
                                  for p, r in zip(predictions, references)]))
        """))
    data = pipeline_dict(data={"calibration": "data:calibration", "evaluation": "data:evaluation",
                               "metric": {"type": "custom", "function": "mymetric:top1"}})
    result = compress.run(write_pipeline(project, data))
    int8 = next(b for b in result.benchmarks if b["artifact"] == "02-quantize")
    assert int8["metric"]["name"] == "custom" and int8["metric"]["value"] > 0.95
    assert int8["metric"]["details"]["function"] == "mymetric:top1"


def test_an_onnx_the_runtime_cannot_run_is_one_clear_error(project):
    from onnx import TensorProto, helper
    node = helper.make_node("Gelu", ["x"], ["y"], name="gelu_at_17")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(project / "gelu.onnx"))
    failed = run_cli("run", write_pipeline(project, pipeline_dict(
        model={"onnx": "gelu.onnx"}, data={}, stages=[FAST])), "--quiet", cwd=project)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    assert "Gelu" in failed.stderr and "opset" in failed.stderr
    with pytest.raises(ModelError):
        compress.run(write_pipeline(project, pipeline_dict(
            model={"onnx": "gelu.onnx"}, data={}, stages=[FAST], name="again")))
