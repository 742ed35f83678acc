"""runtimes/lm/quality.py: perplexity, KL and top-1 agreement from logits, on windows that
predict every token after the first exactly once."""
import math

import numpy as np
import pytest

from runtimes.lm.quality import Tally, log_softmax, score_text, windows


def test_windows_predict_every_token_after_the_first_once():
    ids = list(range(11))
    cut = windows(ids, 4)
    assert cut == [[0, 1, 2, 3, 4], [4, 5, 6, 7, 8], [8, 9, 10]]
    assert [t for chunk in cut for t in chunk[1:]] == ids[1:]
    with pytest.raises(ValueError):
        windows(ids, 0)


def test_uniform_logits_have_the_vocabularys_perplexity():
    tally = Tally()
    tally.add(np.zeros((5, 32), np.float32), [1, 2, 3, 4, 5])
    assert tally.result().perplexity == pytest.approx(32)


def test_perplexity_is_the_exponent_of_the_mean_negative_log_likelihood():
    rng = np.random.default_rng(0)
    logits, targets = rng.normal(size=(7, 10)).astype(np.float32), [3, 1, 4, 1, 5, 9, 2]
    tally = Tally()
    tally.add(logits[:4], targets[:4])
    tally.add(logits[4:], targets[4:])
    logp = log_softmax(logits)
    expected = math.exp(-np.mean([logp[i, t] for i, t in enumerate(targets)]))
    assert tally.result().perplexity == pytest.approx(expected)
    assert tally.result().tokens == 7


def test_a_model_against_itself_has_no_kl_and_agrees_everywhere():
    logits = np.random.default_rng(1).normal(size=(6, 50))
    tally = Tally()
    tally.add(logits, [0] * 6, reference=logits)
    against = tally.result().against
    assert against["kl_mean"] == pytest.approx(0, abs=1e-12)
    assert against["top1_agreement"] == 1 and against["perplexity_increase"] == pytest.approx(0)


def test_kl_is_of_the_reference_to_the_model_and_agreement_counts_argmax():
    reference = np.log(np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]]))
    model = np.log(np.array([[0.2, 0.7, 0.1], [0.1, 0.1, 0.8]]))
    tally = Tally()
    tally.add(model, [0, 2], reference=reference)
    against = tally.result().against
    kl = 0.7 * math.log(0.7 / 0.2) + 0.2 * math.log(0.2 / 0.7)
    assert against["kl_mean"] == pytest.approx(kl / 2)
    assert against["top1_agreement"] == 0.5


def test_score_text_calls_each_window_once_and_compares_on_the_same_ids():
    seen = []

    def logits_of(ids):
        seen.append(list(ids))
        return np.zeros((len(ids), 16))
    quality = score_text(logits_of, list(range(9)), 4, reference_of=logits_of)
    assert seen == [[0, 1, 2, 3], [0, 1, 2, 3], [4, 5, 6, 7], [4, 5, 6, 7]]
    assert quality.tokens == 8 and quality.perplexity == pytest.approx(16)
    assert quality.as_dict()["top1_agreement"] == 1


def test_text_too_short_to_score_is_refused():
    with pytest.raises(ValueError, match="shorter than two tokens"):
        Tally().result()


def test_a_reference_scores_as_score_text_does():
    """Reference keeps the float model's logits once; its score is score_text's."""
    from runtimes.lm.quality import Reference
    rng = np.random.default_rng(1)
    table = rng.normal(size=(20, 12)).astype(np.float32)
    noisy = table + rng.normal(scale=0.3, size=table.shape).astype(np.float32)
    ids = [int(i) for i in rng.integers(0, 12, size=19)]
    float_of = lambda chunk: table[np.asarray(chunk)]   # noqa: E731 - logits from each id
    quantized_of = lambda chunk: noisy[np.asarray(chunk)]   # noqa: E731
    direct = score_text(quantized_of, ids, 5, reference_of=float_of)
    kept = Reference(float_of, ids, 5).score(quantized_of)
    assert kept.as_dict() == pytest.approx(direct.as_dict())
    assert kept.against["kl_mean"] > 0
