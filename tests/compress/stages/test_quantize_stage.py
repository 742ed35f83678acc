"""Quantization schemes and calibration methods on real models trained on digits."""
from collections import Counter

import numpy as np
import onnx
import pytest

import compress
from tests.conftest import FAST_EXPORT, FAST_INT8, pipeline_dict, write_pipeline


def _ops(path) -> Counter:
    return Counter(n.op_type for n in onnx.load(str(path)).graph.node)


def test_calibration_methods_each_give_a_working_int8_model(project):
    stages = [{**FAST_EXPORT, "name": "fp32"}]
    for method in ("minmax", "entropy", "percentile"):
        stages.append({"type": "quantize", "scheme": "int8-static", "calibration": method,
                       "name": method, "input": "fp32", "samples": 64, **FAST_INT8})
    stages.append({"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 1})
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
                {"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 1}])
    result = compress.run(write_pipeline(project, data))
    quantized = result.artifacts[-1]
    assert _ops(result.run_dir / quantized.path)["MatMulInteger"] >= 1
    int8 = next(b for b in result.benchmarks if b["artifact"] == quantized.id)
    # no labels: the trained classifier's scores are judged by top-1 agreement, and the
    # report says so and why
    [judged] = int8["metric"]["details"]["judges"].values()
    assert int8["metric"]["name"] == "top1_agreement", judged
    [judged] = int8["metric"]["details"]["judges"].values()
    assert judged["metric"] == "top1_agreement" and "stands out" in judged["why"]
    assert "top-1 agreement, as its top entry stands out" in \
        (result.run_dir / "report.md").read_text()
    assert "Which figure judged each output" in (result.run_dir / "report.html").read_text()
    assert int8["metric"]["details"]["cosine"] > 0.99
    assert int8["metric"]["value"] >= 0.95
    baseline = next(b for b in result.benchmarks if b["baseline"])
    assert baseline["artifact"] == "00-source"  # the ONNX model as given is the baseline
    assert baseline["metric"]["value"] == 1.0


def test_int4_weight_only_on_a_matmul_model(project, mlp_onnx):
    stages = [{"type": "quantize", "scheme": "int4-weight-only", "name": "rtn"},
              {"type": "quantize", "scheme": "int4-weight-only", "name": "hqq",
               "algorithm": "hqq", "input": "source"},
              {"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 1}]
    data = pipeline_dict(model={"onnx": "mlp.onnx", "inputs": [{"name": "pixels", "shape": [1, 64]}]},
                         data={"evaluation": "eval.npz"}, stages=stages)
    result = compress.run(write_pipeline(project, data))
    source = result.artifacts[0]
    for artifact in result.artifacts[1:]:
        assert artifact.precision == "int4"
        # the legacy exporter writes Linear as Gemm: rewritten to MatMul, then quantized
        assert _ops(result.run_dir / artifact.path)["MatMulNBits"] == 3
        weights = artifact.meta["weights"]
        assert 4.0 < weights["effective_bits_per_weight"] < 6.5  # 4-bit blocks + scales
        assert weights["float_share"] < 0.02  # only the biases stay float
        assert artifact.size_bytes < 0.25 * source.size_bytes
    for bench in result.benchmarks:
        if not bench["baseline"]:
            assert bench["metric"]["details"]["cosine"] > 0.99
            assert bench["metric"]["value"] >= 0.95


def test_fp16_keeps_float32_inputs_and_outputs(project, mlp_onnx):
    stages = [{"type": "quantize", "scheme": "fp16"},
              {"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 1}]
    data = pipeline_dict(model={"onnx": "mlp.onnx", "inputs": [{"name": "pixels", "shape": [1, 64]}]},
                         data={"evaluation": "eval.npz"}, stages=stages)
    result = compress.run(write_pipeline(project, data))
    fp16 = result.artifacts[-1]
    graph = onnx.load(str(result.run_dir / fp16.path)).graph
    assert fp16.precision == "fp16"
    assert {i.type.tensor_type.elem_type for i in [*graph.input, *graph.output]} == {onnx.TensorProto.FLOAT}
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in graph.initializer)
    assert fp16.size_bytes < 0.6 * result.artifacts[0].size_bytes
    bench = next(b for b in result.benchmarks if b["artifact"] == fp16.id)
    assert bench["metric"]["details"]["cosine"] > 0.999


def test_accuracy_aware_search_keeps_the_best_model_and_reports_it(project):
    # max_drop 0 on cosine cannot be met while anything is quantized: the search must
    # measure every layer, try keeping them in float, and keep the best model anyway.
    stages = [{"type": "export.onnx"},  # the dynamo exporter names nodes after modules
              {"type": "quantize", "scheme": "int8-static", "samples": 64, "max_drop": 0.0,
               **FAST_INT8}]
    data = pipeline_dict(stages=stages, targets=[],
                         data={"calibration": "data:calibration", "evaluation": "data:evaluation",
                               "metric": {"type": "fidelity", "primary": "cosine"}})
    result = compress.run(write_pipeline(project, data))
    quantized = result.artifacts[-1]
    search = quantized.meta["accuracy_aware"]
    assert {row["layer"] for row in search["sensitivity"]} == {
        n.name for n in onnx.load(str(result.run_dir / result.artifacts[1].path)).graph.node
        if n.op_type in ("Conv", "Gemm")}
    assert search["final_drop"] <= search["all_quantized_drop"]
    modules = {row["module"] for row in search["sensitivity"]}
    assert "classifier" in modules  # the Gemm, traced back to its torch module
    assert search["budget_met"] == (search["final_drop"] <= 0.0)
    assert 1 + len(search["sensitivity"]) <= search["attempts"] <= 1 + 2 * len(search["sensitivity"])
    graph = onnx.load(str(result.run_dir / quantized.path)).graph
    producers = {o: n.op_type for n in graph.node for o in n.output}
    for node in graph.node:  # layers kept in float read float weights
        if node.name in search["kept_in_float"]:
            assert producers.get(node.input[1]) != "DequantizeLinear"
    stage_dir = (result.run_dir / quantized.path).parent
    assert sorted(p.name for p in stage_dir.iterdir()) == ["model.onnx", "stage.json"]
    assert "accuracy-aware, max_drop 0" in (result.run_dir / "report.md").read_text()


@pytest.mark.runs  # a minute of quantization-aware training: `make test-runs`
def test_int8_qat_trains_and_exports_a_qdq_model(project):
    stages = [{"type": "quantize", "scheme": "int8-qat", "train": {"epochs": 1, "lr": 1e-4}},
              {"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 1}]
    data = pipeline_dict(stages=stages, data={"train": "data:train", "evaluation": "data:evaluation",
                                              "metric": {"type": "accuracy"}})
    result = compress.run(write_pipeline(project, data))
    qat = result.artifacts[-1]
    assert qat.format == "onnx" and qat.precision == "int8"
    ops = _ops(result.run_dir / qat.path)
    assert ops["QuantizeLinear"] and ops["DequantizeLinear"] and ops["Conv"] == 3
    assert qat.meta["qat"]["epochs_run"] == 1 and len(qat.meta["qat"]["history"]) == 1
    assert qat.size_bytes < 0.5 * result.artifacts[0].size_bytes  # int8 weights, folded
    bench = next(b for b in result.benchmarks if b["artifact"] == qat.id)
    assert bench["metric"]["drop"] <= 0.01


def test_int8_dynamic_can_quantize_attention_style_matmuls_too(project):
    import torch

    class Attention(torch.nn.Module):  # scores = (x W)(x W)^T: one MatMul has no weight
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(16, 16, bias=False)

        def forward(self, x):
            h = self.proj(x)
            return torch.matmul(h, h.transpose(1, 2))
    torch.onnx.export(Attention().eval(), (torch.randn(1, 8, 16),), str(project / "attn.onnx"),
                      input_names=["x"], dynamo=False)
    stages = [{"type": "quantize", "name": "weights", "scheme": "int8-dynamic"},
              {"type": "quantize", "name": "all", "scheme": "int8-dynamic", "input": "source",
               "activation_matmuls": True}]
    model = {"onnx": "attn.onnx", "inputs": [{"name": "x", "shape": [1, 8, 16]}]}
    result = compress.run(write_pipeline(project, pipeline_dict(model=model, data={},
                                                                stages=stages, targets=[])))
    ops = {a.id: _ops(result.run_dir / a.path) for a in result.artifacts[1:]}
    assert ops["weights"]["MatMulInteger"] == 1 and ops["weights"]["MatMul"] == 1
    assert ops["all"]["MatMulInteger"] == 2 and ops["all"]["MatMul"] == 0
