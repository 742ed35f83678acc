"""An engine that cannot open a model is left out with its reason, everywhere, and
`engines: auto` weighs the budget beside speed (issue 36). The model: a logistic
regression fitted to scikit-learn's digits, as an ONNX graph whose first node is
ai.onnx.ml's Scaler: onnxruntime runs it, OpenVINO's frontend has no rule for it."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("openvino")


@pytest.fixture(scope="module")
def scaler_model(tmp_path_factory):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32)
    classifier = LogisticRegression(max_iter=2000).fit(x[:1200] / 16, y[:1200])
    nodes = [helper.make_node("Scaler", ["x"], ["scaled"], domain="ai.onnx.ml",
                              offset=[0.0] * 64, scale=[1 / 16] * 64),
             helper.make_node("MatMul", ["scaled", "W"], ["z"]),
             helper.make_node("Add", ["z", "B"], ["logits"])]
    weights = [numpy_helper.from_array(classifier.coef_.T.astype(np.float32), "W"),
               numpy_helper.from_array(classifier.intercept_.astype(np.float32), "B")]
    graph = helper.make_graph(nodes, "digits", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 64])], [helper.make_tensor_value_info(
            "logits", TensorProto.FLOAT, [1, 10])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    folder = tmp_path_factory.mktemp("scaler")
    onnx.save(model, folder / "model.onnx")
    np.savez(folder / "calib.npz", x=x[:200])
    np.savez(folder / "eval.npz", x=x[1200:1500], labels=y[1200:1500])
    return folder


def test_openvino_is_left_out_and_the_run_goes_on(scaler_model):
    from tests.conftest import write_pipeline
    import compress
    stages = [{"type": "quantize", "scheme": "int8-static"},
              {"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 1}]
    path = write_pipeline(scaler_model, {
        "name": "left-out", "model": {"onnx": "model.onnx"}, "stages": stages,
        "data": {"calibration": "calib.npz", "evaluation": "eval.npz"},
        "targets": ["host-cpu"], "output": "runs"})
    result = compress.run(path)
    [left_out] = [b for b in result.report["engine_baselines"] if b["engine"] == "openvino"]
    assert left_out["left_out"] and "ai.onnx.ml.Scaler" in left_out["unmeasured"]
    variant = next(b for b in result.benchmarks if not b["baseline"])
    assert variant["engine"] == "onnxruntime" and variant["metric"]["value"] > 0.9
    probes = {p["engine"]: p for p in variant["engine_choice"]["probes"]}
    assert "Scaler" in probes["openvino"]["error"]
    markdown = (result.run_dir / "report.md").read_text()
    assert markdown.count("left out (it cannot open the model)") == 1


def _bench_auto(model, inputs, *extra) -> dict:
    child = subprocess.run([sys.executable, "-m", "runtimes", "bench", str(model), "--json",
                            "--engine", "auto", "--runs", "5", "--warmup", "1", "--meter",
                            "none", "--eval", str(inputs), "--metric", "fidelity", *extra],
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout.strip().splitlines()[-1])


def test_auto_measures_the_next_engine_while_the_metric_misses_the_floor(quickstart_onnx,
                                                                        tmp_path):
    import onnxruntime as ort
    x = np.random.default_rng(0).random((16, 1, 8, 8), dtype=np.float32)
    session = ort.InferenceSession(str(quickstart_onnx))
    reference = np.concatenate([session.run(None, {"image": row[None]})[0] for row in x])
    np.savez(tmp_path / "eval.npz", image=x, __reference__=reference)
    # a floor no engine reaches: every engine is measured, fastest first, the fastest kept
    missed = _bench_auto(quickstart_onnx, tmp_path / "eval.npz", "--min-metric", "1.5")
    choice = missed["engine_choice"]
    order = [p["engine"] for p in choice["probes"] if "p50_ms" in p]
    assert [c["engine"] for c in choice["budget"]["checked"]] == order and len(order) == 2
    assert choice["chosen"] == order[0]
    # a floor the fastest meets: only it is measured
    met = _bench_auto(quickstart_onnx, tmp_path / "eval.npz", "--min-metric", "0.5")
    assert len(met["engine_choice"]["budget"]["checked"]) == 1
