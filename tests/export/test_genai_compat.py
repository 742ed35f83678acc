"""A Gemma 3 model through onnxruntime-genai's builder: transformers 5 keeps its RoPE
settings per attention type, which the builder 0.18 does not read (KeyError 'rope_type');
export/genai_compat.py hands them over in the form it reads. A small Gemma 3 with random
weights (2 layers, one with a 16-token sliding window) is exported and its logits
compared with torch's on 24 ids; its greedy picks too (a sliding-window cache needs room for a
whole window, runtimes/lm/genai.py). The real Gemma 3 270M: make slm-parity
SLM_ARGS="--model gemma3-270m" (docs/language_models.md)."""
import json

import numpy as np
import pytest

pytest.importorskip("onnxruntime_genai")
transformers = pytest.importorskip("transformers")

from export.genai_compat import flattened, per_attention_type  # noqa: E402


def _config(**extra):
    return transformers.Gemma3TextConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, sliding_window=16,
        layer_types=["sliding_attention", "full_attention"], max_position_embeddings=256,
        **extra)


def test_per_attention_type_rope_settings_are_flattened_with_the_same_numbers():
    config = _config()
    assert per_attention_type(config.rope_parameters)
    thetas = {kind: config.rope_parameters[kind]["rope_theta"]
              for kind in ("full_attention", "sliding_attention")}
    flat = flattened(config)
    assert flat.rope_theta == thetas["full_attention"]
    assert flat.rope_local_base_freq == thetas["sliding_attention"]
    assert flat.rope_parameters["rope_type"] == "default"
    assert not per_attention_type({"rope_type": "default", "rope_theta": 1e4})


@pytest.mark.runs
def test_a_gemma3_model_exports_with_the_logits_of_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from tokenizers import Tokenizer, models
    from export.genai import build_genai
    from runtimes.lm.genai import GenaiModel
    torch.manual_seed(0)
    config = _config(architectures=["Gemma3ForCausalLM"], bos_token_id=1, eos_token_id=2,
                     pad_token_id=0)
    model = transformers.Gemma3ForCausalLM(config).eval()
    hf = tmp_path / "hf"
    model.save_pretrained(hf)
    vocab = {f"t{i}": i for i in range(config.vocab_size)}   # the builder copies a tokenizer
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0"))).save_pretrained(hf)
    assert per_attention_type(json.loads((hf / "config.json").read_text())["rope_parameters"])
    folder = build_genai(hf, tmp_path / "fp32")
    _not_stamped_with_the_checkouts_commit(folder / "model.onnx")
    ids = [int(i) for i in np.random.default_rng(0).integers(3, config.vocab_size, 24)]
    export = GenaiModel(folder, threads=1)
    with torch.no_grad():
        expected = model(torch.tensor([ids])).logits[0].numpy()
    np.testing.assert_allclose(export.logits(ids), expected, atol=1e-3, rtol=1e-3)
    # 4 + 6 tokens, less than a window: the cache still gets a window's room
    with torch.no_grad():
        picked = model.generate(torch.tensor([ids[:4]]), max_new_tokens=6, do_sample=False,
                                min_new_tokens=6)[0, 4:].tolist()
    assert export.greedy(ids[:4], 6) == picked


def _not_stamped_with_the_checkouts_commit(path):
    """The builder's version stamp names its own commit, not this checkout's (which it
    finds with git run five folders above its module: inside the checkout, when the
    environment is): the same model built at two commits is the same file."""
    import subprocess
    import onnx
    import onnxruntime_genai
    from tests.conftest import REPO
    head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=REPO,
                          capture_output=True, text=True).stdout.strip()
    stamp = onnx.load(str(path), load_external_data=False).producer_version
    assert stamp.startswith(onnxruntime_genai.__version__) and not (head and head in stamp), stamp
