import json
import shutil

import pytest

from compress.config.pipeline import Pipeline, load_pipeline, parse_pipeline
from compress.errors import ConfigError
from compress.quant.schemes.int8_static import Int8Static
from compress.stages.export_onnx import ExportOnnx
from tests.conftest import FAST_EXPORT, FAST_INT8, QUICKSTART, pipeline_dict, run_cli


def test_quickstart_pipeline_is_valid():
    pipeline = load_pipeline(QUICKSTART / "pipeline.yaml")
    assert [s.type for s in pipeline.stages] == ["export.onnx", "quantize", "export.tflite",
                                                "benchmark"]
    assert pipeline.model.torch.factory == "model:build"
    assert pipeline.resolve("digits_cnn.pt") == QUICKSTART.resolve() / "digits_cnn.pt"


def test_python_objects_are_the_yaml_objects():
    from_yaml = parse_pipeline(pipeline_dict())
    built = Pipeline(**{**pipeline_dict(), "stages": [
        ExportOnnx(**FAST_EXPORT), Int8Static(**FAST_INT8),
        {"type": "benchmark", "warmup": 2, "runs": 20, "rounds": 1}]})
    assert built.model_dump() == from_yaml.model_dump()


def test_shorthands_for_data_and_targets():
    pipeline = parse_pipeline(pipeline_dict())
    assert pipeline.data.calibration.loader == "data:calibration"
    assert pipeline.targets[0].profile == "host-cpu" and pipeline.targets[0].gate


def test_error_names_file_line_and_field(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("name: t\nmodel:\n  onnx: m.onnx\n  inputs: [{name: x, shape: [1, 3]}]\n"
                    "stages:\n  - type: export.onnx\n  - type: quantize\n    scheme: int4\n")
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    message = str(info.value)
    assert f"{path}:8" in message and "stages[2] (quantize).scheme" in message
    assert "int8-static" in message  # what was expected


def test_unknown_stage_type_lists_the_known_ones():
    with pytest.raises(ConfigError, match="unknown stage type 'prune-it'.*benchmark, .*export.onnx, .*quantize"):
        parse_pipeline(pipeline_dict(stages=[{"type": "prune-it"}]))


def test_frozen_and_strict():
    pipeline = parse_pipeline(pipeline_dict())
    with pytest.raises(Exception):
        pipeline.name = "other"
    with pytest.raises(ConfigError, match="unknown key"):
        parse_pipeline(pipeline_dict(extra_thing=1))


def test_benchmark_must_be_last():
    with pytest.raises(ConfigError, match="must be the last stage"):
        parse_pipeline(pipeline_dict(stages=[{"type": "benchmark"}, {"type": "export.onnx"}]))


def test_stage_inputs_must_name_earlier_stages():
    ok = parse_pipeline(pipeline_dict(stages=[
        {"type": "export.onnx", "name": "fp32"},
        {"type": "quantize", "scheme": "int8-static"},
        {"type": "quantize", "scheme": "int8-static", "calibration": "percentile", "input": "fp32"}]))
    assert ok.stage_names() == ["fp32", "02-quantize", "03-quantize"]
    with pytest.raises(ConfigError, match="not an earlier stage"):
        parse_pipeline(pipeline_dict(stages=[{"type": "export.onnx", "input": "later"}]))


def test_schema_command_prints_json_schema():
    child = run_cli("schema")
    assert child.returncode == 0
    schema = json.loads(child.stdout)
    assert "stages" in schema["properties"]
    assert "quantize" in json.dumps(schema)


def test_validate_command(tmp_path):
    # the quickstart's checkpoint is made by its train.py: validate wants it there
    for name in ("pipeline.yaml", "model.py", "data.py"):
        shutil.copy(QUICKSTART / name, tmp_path / name)
    untrained = run_cli("validate", tmp_path / "pipeline.yaml")
    assert untrained.returncode == 2 and "model.torch.checkpoint: file not found" in \
        untrained.stderr
    (tmp_path / "digits_cnn.pt").write_bytes(b"")   # found, never read by validate
    assert run_cli("validate", tmp_path / "pipeline.yaml").returncode == 0
    assert run_cli("profiles").returncode == 0


def test_every_scheme_is_registered_with_a_back_end():
    from compress.quant.schemes import SCHEMES
    from compress.quant.schemes import SCHEME_CONFIGS
    assert set(SCHEMES) == {cls.model_fields["scheme"].default for cls in SCHEME_CONFIGS}
    for spec in SCHEMES.values():
        assert spec.onnx or spec.torch or spec.lm, spec.name
        assert spec.precision in ("int8", "int4", "fp16")


@pytest.mark.parametrize("setting, value, scheme, says", [
    ("calibration", "entropy", "int8-dynamic", "a setting of int8-static, not of int8-dynamic"),
    ("block_size", 64, "int8-static", "a setting of int4-weight-only or lm-weight-only, not of int8-static"),
    ("train", {"epochs": 1}, "fp16", "a setting of int8-qat, not of fp16"),
    ("keep_io_types", False, "int8-qat", "a setting of fp16, not of int8-qat")])
def test_a_setting_of_another_scheme_names_the_schemes_that_have_it(setting, value, scheme, says):
    stages = [{"type": "quantize", "scheme": scheme, setting: value}]
    with pytest.raises(ConfigError, match=rf"stages\[1\] \(quantize\).{setting}: {says}"):
        parse_pipeline({"name": "t", "model": {"onnx": "m.onnx"}, "stages": stages})
