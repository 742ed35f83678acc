"""model.causal_lm, data.text, export.genai and the lm-weight-only scheme as pipeline.yaml
states them: what validation refuses (with the field and the fix), what it accepts and the
formats its stage graph gives; and, at run time, what a causal_lm path may hold
(compress.model.causal_lm.check_pipeline_source). No model, no builder: config only."""
from __future__ import annotations

import copy
import json

import pytest
import yaml

from compress.config.pipeline import parse_pipeline
from compress.config.stage_graph import check_graph
from compress.errors import ConfigError, ModelError
from compress.model.causal_lm import check_pipeline_source
from tests.conftest import run_cli

BENCH = {"type": "benchmark", "rounds": 1}
LM_PIPELINE = {
    "name": "lm",
    "model": {"causal_lm": "models/smollm2-135m.gguf"},   # validate wants it to exist
    "data": {"text": {"python_docs": True, "evaluation_tokens": 256}},
    "stages": [{"type": "export.genai", "name": "float"},
               {"type": "quantize", "scheme": "lm-weight-only", "bits": 4, "name": "int4"},
               BENCH],
    "targets": ["host-cpu"],
}


def lm_dict(**overrides) -> dict:
    data = copy.deepcopy(LM_PIPELINE)
    data.update(overrides)
    return data


def with_quantize(**settings) -> dict:
    """The LM pipeline whose quantize stage has these lm-weight-only settings."""
    return lm_dict(stages=[{"type": "export.genai"},
                           {"type": "quantize", "scheme": "lm-weight-only", **settings}, BENCH])


def refused(data: dict) -> str:
    with pytest.raises(ConfigError) as info:
        parse_pipeline(data)
    return str(info.value)


# --- model and data ----------------------------------------------------------------


def test_a_causal_lm_with_inputs_is_refused_saying_to_leave_them_out():
    message = refused(lm_dict(model={"causal_lm": "m.gguf",
                                     "inputs": [{"name": "ids", "shape": [1, 8]}]}))
    assert message.startswith("model:")
    assert "data.text" in message and "leave out inputs" in message


def test_a_causal_lm_with_dynamic_batch_is_refused():
    message = refused(lm_dict(model={"causal_lm": "m.gguf", "dynamic_batch": True}))
    assert "leave out inputs and dynamic_batch" in message


def test_a_causal_lm_without_data_text_names_the_three_sources():
    message = refused(lm_dict(data={}))
    assert "a causal_lm needs data.text" in message
    for source in ("python_docs: true", "file: corpus.txt", "loader: module:function"):
        assert source in message


def test_data_text_without_a_causal_lm_is_refused():
    data = lm_dict(model={"onnx": "m.onnx"}, stages=[BENCH])
    message = refused(data)
    assert "data.text is for a causal language model (model.causal_lm)" in message


@pytest.mark.parametrize("text", [
    {"python_docs": True, "file": "corpus.txt"},
    {"file": "corpus.txt", "loader": "texts:load"},
    {},
    {"python_docs": False},
], ids=["docs+file", "file+loader", "none", "docs-false"])
def test_data_text_needs_exactly_one_source(text):
    message = refused(lm_dict(data={"text": text}))
    assert message.startswith("data.text:")
    assert "exactly one of `file: PATH`, `loader: module:function` or `python_docs: true`" \
        in message


@pytest.mark.parametrize("role, value", [("calibration", "data:calibration"),
                                         ("evaluation", "data:evaluation"),
                                         ("train", "data:train"),
                                         ("metric", {"type": "fidelity"})])
def test_tensor_data_beside_a_causal_lm_is_refused_naming_it(role, value):
    message = refused(lm_dict(data={"text": {"python_docs": True}, role: value}))
    assert f"not data.{role}: remove it" in message and "data.text" in message


def test_two_model_sources_are_refused():
    message = refused(lm_dict(model={"causal_lm": "m.gguf", "onnx": "m.onnx"}))
    assert message.startswith("model:")
    assert "exactly one model source" in message and "causal_lm: PATH" in message


def test_an_unknown_text_setting_is_refused():
    message = refused(lm_dict(data={"text": {"python_docs": True, "tokens": 10}}))
    assert "data.text.tokens" in message


# --- the stage graph -----------------------------------------------------------------


def test_export_onnx_given_a_causal_lm_says_what_it_takes():
    message = refused(lm_dict(stages=[{"type": "export.onnx"}, BENCH]))
    assert message.startswith("stages[1].input:")
    assert ("stage 1 (export.onnx) takes a torch model, but its input is a causal language "
            "model") in message


def test_lm_weight_only_on_the_source_points_at_export_genai():
    message = refused(lm_dict(stages=[{"type": "quantize", "scheme": "lm-weight-only"}, BENCH]))
    assert message.startswith("stages[1].input:")
    assert "takes an onnxruntime-genai model folder" in message
    assert "Fix: lm-weight-only takes the export.genai stage's float model" in message


def test_export_genai_given_its_own_output_is_refused_with_input_source():
    stages = [{"type": "export.genai", "name": "float"}, {"type": "export.genai"}, BENCH]
    message = refused(lm_dict(stages=stages))
    assert "stage 2 (export.genai) takes a causal language model" in message
    assert "`input: source`" in message


def test_a_valid_language_model_pipeline_connects_causal_lm_genai_genai():
    pipeline = parse_pipeline(lm_dict())
    assert pipeline.model.format == "causal_lm"
    assert check_graph(pipeline) == {"source": "causal_lm", "float": "genai", "int4": "genai"}


def test_a_benchmark_may_name_a_genai_artifact_but_not_the_source():
    parse_pipeline(lm_dict(stages=[{"type": "export.genai", "name": "float"},
                                   {**BENCH, "artifacts": ["float"]}]))
    message = refused(lm_dict(stages=[{"type": "export.genai", "name": "float"},
                                      {**BENCH, "artifacts": ["source"]}]))
    assert "'source' is not a deployable artifact" in message and "float" in message


# --- lm-weight-only settings ------------------------------------------------------------


def test_a_mix_at_8_bits_is_refused_saying_set_bits_4():
    message = refused(with_quantize(bits=8, mix={"kl": 0.1}))
    assert message.startswith("stages[2] (quantize):") and "set bits: 4" in message


def test_a_mix_with_k_quant_mixed_is_refused_naming_the_methods_to_use():
    message = refused(with_quantize(method="k_quant_mixed", mix={"kl": 0.1}))
    assert "k_quant_mixed" in message and "use method default, rtn or k_quant" in message


@pytest.mark.parametrize("method", ["k_quant_mixed", "gptq"])
def test_a_4_bit_method_at_8_bits_is_refused(method):
    message = refused(with_quantize(bits=8, method=method))
    assert f"method {method} makes 4-bit weights: set bits: 4" in message


def test_gptq_with_a_mix_is_refused():
    message = refused(with_quantize(method="gptq", mix={"kl": 0.1}))
    assert "gptq makes one width: leave mix out" in message


def test_a_block_size_outside_the_builders_is_refused_listing_them():
    message = refused(with_quantize(block_size=48))
    assert "stages[2] (quantize).block_size" in message
    assert "16, 32, 64, 128 or 256" in message


def test_bits_other_than_4_or_8_are_refused():
    assert "stages[2] (quantize).bits" in refused(with_quantize(bits=2))


def test_the_valid_lm_weight_only_settings_are_kept():
    pipeline = parse_pipeline(with_quantize(bits=4, method="k_quant", block_size=128,
                                            mix={"kl": 0.1}))
    stage = pipeline.stages[1]
    assert (stage.scheme, stage.bits, stage.method, stage.block_size) == \
        ("lm-weight-only", 4, "k_quant", 128)
    assert stage.mix.kl == 0.1 and stage.mix.granularity == "layer"


def test_a_tensor_scheme_setting_on_lm_weight_only_is_refused():
    message = refused(with_quantize(calibration="percentile"))
    assert "stages[2] (quantize).calibration" in message and "not of lm-weight-only" in message


# --- through the CLI ----------------------------------------------------------------


def validate(tmp_path, data: dict):
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return run_cli("validate", path, cwd=tmp_path)


def test_validate_accepts_the_language_model_pipeline_and_wants_its_model_file(tmp_path):
    missing = validate(tmp_path, lm_dict())
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "model.causal_lm" in missing.stderr and "does not exist" in missing.stderr
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "smollm2-135m.gguf").write_bytes(b"")   # found, never read
    done = validate(tmp_path, lm_dict())
    assert done.returncode == 0, done.stderr
    assert "valid pipeline 'lm' with 3 stages" in done.stdout


@pytest.mark.parametrize("overrides, expected", [
    ({"model": {"causal_lm": "m.gguf", "inputs": [{"name": "ids", "shape": [1, 8]}]}},
     "leave out inputs"),
    ({"data": {}}, "a causal_lm needs data.text"),
    ({"stages": [{"type": "quantize", "scheme": "lm-weight-only"}, BENCH]},
     "lm-weight-only takes the export.genai stage's float model"),
], ids=["inputs", "no-text", "quantize-on-source"])
def test_validate_refuses_with_one_line_and_exit_2(tmp_path, overrides, expected):
    done = validate(tmp_path, lm_dict(**overrides))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0]
    assert "pipeline.yaml" in lines[0]


def test_the_schema_lists_export_genai_and_lm_weight_only():
    done = run_cli("schema")
    assert done.returncode == 0
    text = json.dumps(json.loads(done.stdout))
    assert '"export.genai"' in text and '"lm-weight-only"' in text
    assert "causal_lm" in json.loads(done.stdout)["$defs"]["ModelSpec"]["properties"]
    assert {"python_docs", "file", "loader"} <= set(
        json.loads(done.stdout)["$defs"]["TextData"]["properties"])


# --- what a causal_lm path holds (checked at run time) ----------------------------------


def test_a_missing_causal_lm_path_is_a_model_error_naming_it(tmp_path):
    with pytest.raises(ModelError, match=r"model\.causal_lm .*missing.* does not exist"):
        check_pipeline_source(tmp_path / "missing")


def test_a_folder_without_a_config_names_what_it_may_be(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"\0")
    with pytest.raises(ModelError) as info:
        check_pipeline_source(tmp_path)
    message = str(info.value)
    assert "config.json" in message and ".gguf" in message and "genai_config.json" in message


def test_an_onnxruntime_genai_folder_is_refused_pointing_at_lm_bench(tmp_path):
    (tmp_path / "genai_config.json").write_text("{}")
    (tmp_path / "config.json").write_text("{}")   # a genai folder may hold both
    with pytest.raises(ModelError) as info:
        check_pipeline_source(tmp_path)
    message = str(info.value)
    assert "onnxruntime-genai folder" in message and "python -m runtimes lm-bench" in message
    assert "Hugging Face folder or a .gguf file" in message


def test_a_hugging_face_folder_is_hf(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert check_pipeline_source(tmp_path) == "hf"


def test_an_existing_gguf_file_is_gguf(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"")
    assert check_pipeline_source(tmp_path / "m.gguf") == "gguf"


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelError, match="neither a Hugging Face folder"):
        check_pipeline_source(tmp_path / "model.safetensors")


def test_a_language_model_without_export_genai_is_refused_before_any_work():
    message = refused(lm_dict(stages=[{"type": "benchmark"}]))
    assert "export.genai" in message


def test_a_mix_needs_a_limit_and_takes_the_tightest_of_the_targets():
    from profiles import load_profile
    assert "mix needs a limit" in refused(with_quantize(mix={"granularity": "layer"}))
    assert "not both" in refused(with_quantize(mix={"targets": True, "kl": 0.1}))
    stage = parse_pipeline(with_quantize(mix="targets")).stages[1]
    filled = stage.for_targets([("rpi5", load_profile("rpi5")),
                                ("host-cpu", load_profile("host-cpu"))])
    assert filled.mix.limits() == {"kl_mean": 0.1, "perplexity_increase": 0.05,
                                   "megabytes": 512}
    with pytest.raises(ValueError, match="language_model.kl_mean"):
        stage.for_targets([("rpi4", load_profile("rpi4"))])


def test_the_gguf_route_connects_export_gguf_to_llama_cpps_types():
    from compress.config.stage_graph import check_graph
    data = lm_dict(stages=[{"type": "export.gguf", "name": "f32"},
                           {"type": "quantize", "scheme": "gguf", "gguf_type": "Q4_K_M"},
                           BENCH])
    formats = check_graph(parse_pipeline(data))
    assert formats["f32"] == "gguf" and formats["02-quantize"] == "gguf"
    wrong = lm_dict(stages=[{"type": "export.genai"}, {"type": "quantize", "scheme": "gguf"},
                            BENCH])
    assert "export.gguf" in refused(wrong)
    assert "gguf_type" in refused(lm_dict(stages=[
        {"type": "export.gguf"}, {"type": "quantize", "scheme": "gguf", "gguf_type": "Q4 K"},
        BENCH]))
