"""runtimes/lm/provider.py: a profile's accelerator reaches the language-model engines,
and an engine that cannot run there says so (ProviderUnavailable: exit 3, the pipeline's
"unmeasured"), never measures the CPU in its place."""
import json
import subprocess
import sys

import pytest

from profiles import load_profile
from runtimes.errors import ProviderUnavailable
from runtimes.lm.provider import LMProvider, parse_option
from tests.conftest import REPO, child_env


def test_a_profiles_accelerator_is_the_one_a_language_model_engine_runs_on():
    gpu = LMProvider.of_profile(load_profile("nvidia-gpu").runtime.providers)
    assert gpu.name == "CUDAExecutionProvider" and ("device_id", "0") in gpu.options
    # a Jetson lists TensorRT first, then CUDA: onnxruntime-genai runs on CUDA
    jetson = LMProvider.of_profile(load_profile("jetson-orin-nano").runtime.providers)
    assert jetson.name == "CUDAExecutionProvider"
    assert LMProvider.of_profile(load_profile("rpi5").runtime.providers) is None
    assert gpu.flags()[:2] == ["--provider", "CUDAExecutionProvider"]
    assert "--provider-option" in gpu.flags() and "device_id=0" in gpu.flags()


def test_an_option_is_key_equals_value():
    assert parse_option("device_id=1") == ("device_id", "1")
    with pytest.raises(ValueError, match="key=value"):
        parse_option("device_id")


def _config_only_folder(tmp_path):
    """What onnxruntime-genai reads before it loads weights: the builder's config."""
    folder = tmp_path / "genai"
    folder.mkdir()
    decoder = {"session_options": {"provider_options": []}, "filename": "model.onnx",
               "head_size": 16, "hidden_size": 64, "num_attention_heads": 4,
               "num_hidden_layers": 1, "num_key_value_heads": 2,
               "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                          "past_key_names": "past_key_values.%d.key",
                          "past_value_names": "past_key_values.%d.value"},
               "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                           "present_value_names": "present.%d.value"}}
    (folder / "genai_config.json").write_text(json.dumps(
        {"model": {"type": "llama", "context_length": 128, "vocab_size": 32,
                   "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2,
                   "decoder": decoder},
         "search": {"max_length": 128}}))
    return folder


def test_onnxruntime_genai_names_what_it_cannot_run_on(tmp_path):
    og = pytest.importorskip("onnxruntime_genai")
    from runtimes.lm.genai import GenaiModel
    folder = _config_only_folder(tmp_path)
    with pytest.raises(ProviderUnavailable, match="not on QNNExecutionProvider"):
        GenaiModel(folder, 1, LMProvider("QNNExecutionProvider"))
    if og.is_cuda_available():
        pytest.skip("this onnxruntime-genai is a CUDA build")
    with pytest.raises(ProviderUnavailable, match="CPU build.*onnxruntime-genai-cuda"):
        GenaiModel(folder, 1, LMProvider("CUDAExecutionProvider"))


def test_lm_bench_exits_3_when_the_accelerator_is_not_here(tmp_path):
    og = pytest.importorskip("onnxruntime_genai")
    if og.is_cuda_available():
        pytest.skip("this onnxruntime-genai is a CUDA build")
    done = subprocess.run(
        [sys.executable, "-m", "runtimes", "lm-bench", str(_config_only_folder(tmp_path)),
         "--provider", "CUDAExecutionProvider", "--provider-option", "device_id=0"],
        capture_output=True, text=True, cwd=REPO, env=child_env())
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("error: this onnxruntime-genai is the CPU build")
    assert "Traceback" not in done.stderr and done.stdout == ""
