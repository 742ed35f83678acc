"""Quantization schemes and calibration methods on real models trained on digits."""
from collections import Counter

import numpy as np
import onnx
import pytest

import compress
from tests.conftest import pipeline_dict, write_pipeline


def _ops(path) -> Counter:
    return Counter(n.op_type for n in onnx.load(str(path)).graph.node)


def test_calibration_methods_each_give_a_working_int8_model(project):
    stages = [{"type": "export.onnx", "name": "fp32"}]
    for method in ("minmax", "entropy", "percentile"):
        stages.append({"type": "quantize", "scheme": "int8-static", "calibration": method,
                       "name": method, "input": "fp32", "samples": 64})
    stages.append({"type": "benchmark", "warmup": 1, "runs": 5})
    result = compress.run(write_pipeline(project, pipeline_dict(stages=stages)))
    int8 = {a.id: a for a in result.artifacts if a.precision == "int8"}
    assert len({a.sha256 for a in int8.values()}) == 3  # the methods chose different ranges
    for artifact in int8.values():
        ops = _ops(result.run_dir / artifact.path)
        assert ops["QuantizeLinear"] and ops["DequantizeLinear"]
        assert artifact.meta["calibration_samples"] == 64
    drops = {b["artifact"]: b["metric"]["drop"] for b in result.benchmarks if not b["baseline"]}
    assert len(drops) == 3 and max(drops.values()) <= 0.02


@pytest.fixture
def mlp_onnx(project):
    """An MLP trained on the digits for a second, exported to ONNX: a MatMul model."""
    import torch
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    path = project / "mlp.onnx"
    torch.onnx.export(model.eval(), (x[:1],), str(path), input_names=["pixels"], dynamo=False,
                      dynamic_axes={"pixels": {0: "batch"}})
    np.savez(project / "eval.npz", pixels=x[-200:].numpy())  # no labels: fidelity
    return path


def test_dynamic_int8_on_an_onnx_matmul_model_with_fidelity(project, mlp_onnx):
    data = pipeline_dict(
        model={"onnx": "mlp.onnx", "inputs": [{"name": "pixels", "shape": [1, 64]}]},
        data={"evaluation": "eval.npz"},
        stages=[{"type": "quantize", "scheme": "int8-dynamic"},
                {"type": "benchmark", "warmup": 1, "runs": 5}])
    result = compress.run(write_pipeline(project, data))
    quantized = result.artifacts[-1]
    assert _ops(result.run_dir / quantized.path)["MatMulInteger"] >= 1
    int8 = next(b for b in result.benchmarks if b["artifact"] == quantized.id)
    assert int8["metric"]["name"] == "top1_agreement"
    assert int8["metric"]["details"]["cosine"] > 0.99
    assert int8["metric"]["value"] >= 0.95
    baseline = next(b for b in result.benchmarks if b["baseline"])
    assert baseline["artifact"] == "00-source"  # the ONNX model as given is the baseline
    assert baseline["metric"]["value"] == 1.0
