"""The stage graph is checked before any work (`compress validate` too), and a run that
fails in stage N keeps stages 1..N-1 committed: the re-run resumes from N."""
from __future__ import annotations

import pytest

from compress.config.pipeline import parse_pipeline
from compress.errors import ConfigError
from tests.conftest import pipeline_dict, run_cli, write_pipeline

FAST = {"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 1}


@pytest.mark.parametrize("stages, expected", [
    ([{"type": "export.onnx"}, {"type": "export.tflite"}, FAST],
     ["stages[2].input: stage 2 (export.tflite) takes a torch model, but its input is an ONNX "
      "model (made by stage 1 (export.onnx))", "Fix: `input: source` (the model as given)"]),
    ([{"type": "quantize", "scheme": "int8-static"}, FAST],
     ["stage 1 (quantize) takes an ONNX model or a TFLite model, but its input is a torch "
      "model (the model as given)", "put an `export.onnx`", "backend: neural-compressor"]),
    ([{"type": "export.tflite"}, {"type": "quantize", "scheme": "int4-weight-only"}, FAST],
     ["stage 2 (quantize) takes an ONNX model, but its input is a TFLite model",
      "a TFLite model takes schemes int8-static, int8-dynamic, fp16"]),
    ([{"type": "export.onnx"}, {"type": "prune", "method": "magnitude", "sparsity": 0.5}, FAST],
     ["stage 2 (prune) takes a torch model", "`input: source`", "put it before any export"]),
    ([{"type": "export.onnx"}, {**FAST, "artifacts": ["00-source"]}],
     ["benchmark.artifacts: '00-source' is not a deployable artifact"]),
])
def test_stages_that_cannot_connect_are_refused_before_any_work(project, stages, expected):
    data = pipeline_dict(stages=stages)
    with pytest.raises(ConfigError) as error:
        parse_pipeline(data)
    for text in expected:
        assert text in str(error.value)
    path = write_pipeline(project, data)
    checked = run_cli("validate", path, cwd=project)
    assert checked.returncode == 2 and "Traceback" not in checked.stderr
    assert expected[0] in checked.stderr
    assert run_cli("run", path, "--quiet", cwd=project).returncode == 2
    assert not (project / "runs").exists()


def test_a_tflite_source_connects_to_quantize_and_not_to_export(project):
    model = {"tflite": "m.tflite"}
    parse_pipeline(pipeline_dict(model=model, stages=[
        {"type": "quantize", "scheme": "int8-dynamic"}, FAST]))
    with pytest.raises(ConfigError, match=r"stage 1 \(export.tflite\) takes a torch model, "
                       "but its input is a TFLite model"):
        parse_pipeline(pipeline_dict(model=model, stages=[{"type": "export.tflite"}, FAST]))


@pytest.mark.runs  # a whole pipeline run again: make test-runs
def test_a_failed_stage_keeps_the_finished_ones_and_the_rerun_resumes(project):
    # int8-dynamic on a CNN stops at stage 2 (ConvInteger is slow): export.onnx is done
    stages = [{"type": "export.onnx"}, {"type": "quantize", "scheme": "int8-dynamic"}, FAST]
    path = write_pipeline(project, pipeline_dict(stages=stages))
    failed = run_cli("run", path, "--quiet", cwd=project)
    assert failed.returncode == 2 and "stage 2 (quantize)" in failed.stderr
    run_dir = project / "runs" / "t"
    kept = sorted(p.name for p in run_dir.iterdir() if not p.name.startswith("."))
    assert kept == ["00-source", "01-export.onnx"]
    exported = (run_dir / "01-export.onnx" / "model.onnx").stat().st_mtime_ns

    stages[1]["force"] = True   # the fix
    path = write_pipeline(project, pipeline_dict(stages=stages))
    done = run_cli("run", path, cwd=project)
    assert done.returncode in (0, 1), done.stderr
    assert "01-export.onnx: reused" in done.stdout + done.stderr
    assert (run_dir / "01-export.onnx" / "model.onnx").stat().st_mtime_ns == exported
    assert (run_dir / "02-quantize" / "model.onnx").is_file()
