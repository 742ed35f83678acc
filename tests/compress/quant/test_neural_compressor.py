"""neural-compressor as the quantization back end for torch models, on the digits CNN."""
from collections import Counter

import onnx
import pytest

import compress
from compress.errors import MissingDependency, StageError
from tests.conftest import assert_only_finished_stages, pipeline_dict, write_pipeline

pytest.importorskip("neural_compressor.torch.quantization", reason="the inc extra is not installed")


def _ops(path) -> Counter:
    return Counter(n.op_type for n in onnx.load(str(path)).graph.node)


@pytest.mark.runs  # whole pipelines through neural-compressor, ~50 s with the next: `make test-runs`
def test_int8_static_and_int4_rtn_beside_onnxruntime(project):
    stages = [{"type": "export.onnx", "name": "fp32"},
              {"type": "quantize", "name": "ort", "scheme": "int8-static", "samples": 64},
              {"type": "quantize", "name": "inc", "backend": "neural-compressor",
               "scheme": "int8-static", "input": "source", "samples": 64},
              {"type": "quantize", "name": "inc4", "backend": "neural-compressor",
               "scheme": "int4-weight-only", "input": "source", "block_size": 16},
              {"type": "benchmark", "warmup": 2, "runs": 10, "rounds": 1}]
    result = compress.run(write_pipeline(project, pipeline_dict(stages=stages)))
    artifacts = {a.id: a for a in result.artifacts}
    fp32 = artifacts["fp32"]
    inc = artifacts["inc"]
    assert inc.format == "onnx" and inc.precision == "int8" and inc.parent == "00-source"
    ops = _ops(result.run_dir / inc.path)
    assert ops["QuantizeLinear"] and ops["DequantizeLinear"]
    assert inc.size_bytes < 0.5 * fp32.size_bytes  # weight quantization folded into int8
    int4 = artifacts["inc4"]
    assert _ops(result.run_dir / int4.path)["MatMulNBits"] == 1  # the classifier
    assert int4.meta["matmuls_packed"] == 1
    assert int4.meta["weights"]["float_share"] > 0.9  # the convolutions stay float
    for bench in result.benchmarks:
        assert bench["metric"]["drop"] <= 0.01, bench["artifact"]


@pytest.mark.runs
def test_autotune_reports_its_trials_and_keeps_its_best_model(project):
    # max_drop 0 on cosine: no INT8 configuration can reach it, every one is tried
    stages = [{"type": "quantize", "backend": "neural-compressor", "scheme": "int8-static",
               "max_drop": 0.0, "samples": 32}]
    data = pipeline_dict(stages=stages, targets=[],
                         data={"calibration": "data:calibration", "evaluation": "data:evaluation",
                               "metric": {"type": "fidelity", "primary": "cosine"}})
    result = compress.run(write_pipeline(project, data))
    tuned = result.artifacts[-1].meta["autotune"]
    assert tuned["trials"] == len(tuned["trial_metrics"]) >= 2
    assert not tuned["budget_met"] and tuned["final_drop"] > 0
    assert tuned["final_metric"] >= max(tuned["trial_metrics"]) - 1e-4  # the best one kept
    assert (result.run_dir / result.artifacts[-1].path).is_file()
    assert "neural-compressor autotune" in (result.run_dir / "report.md").read_text()


def test_a_missing_backend_names_the_packages(project, monkeypatch):
    import compress.core.lazy as lazy
    real = lazy.importlib.import_module

    def without_inc(name, *args):
        if name.startswith("neural_compressor"):
            raise ImportError("No module named 'neural_compressor'")
        return real(name, *args)
    monkeypatch.setattr(lazy.importlib, "import_module", without_inc)
    stages = [{"type": "quantize", "backend": "neural-compressor", "scheme": "int8-static"}]
    with pytest.raises(StageError, match="pip install -c constraints.txt neural-compressor==3.10"):
        compress.run(write_pipeline(project, pipeline_dict(stages=stages, targets=[])))
    assert_only_finished_stages(project / "runs", ["00-source"])
