"""Which figure judges an output without labels (runtimes/output_kinds.py), on the
outputs of real models fitted to scikit-learn's digits scans: a classifier's logits,
probabilities and log-probabilities are class scores; PCA embeddings, pixel values, a
fixed outlier dimension and short or many-vector outputs are not."""
import numpy as np
import pytest

from runtimes.metrics import Scoring, evaluate
from runtimes.output_kinds import judge


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LogisticRegression
    x, y = load_digits(return_X_y=True)
    train, test = slice(0, 1200), slice(1200, None)
    classifier = LogisticRegression(max_iter=2000).fit(x[train] / 16, y[train])
    # embeddings as encoders give them: whitened components, each row L2-normalised
    embeddings = PCA(32, whiten=True, random_state=0).fit(x[train]).transform(x[test])
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    return {"logits": classifier.decision_function(x[test] / 16),
            "probabilities": classifier.predict_proba(x[test] / 16),
            "embeddings": embeddings, "pixels": x[test]}


def _feeds(rows, per_feed=1):
    return [rows[i:i + per_feed] for i in range(0, len(rows), per_feed)]


@pytest.mark.parametrize("kind", ["logits", "probabilities"])
def test_class_scores_are_judged_by_top1(digits, kind):
    verdict = judge("scores", _feeds(digits[kind]))
    assert verdict.metric == "top1_agreement", verdict.why


def test_log_probabilities_are_class_scores(digits):
    verdict = judge("log_probs", _feeds(np.log(digits["probabilities"]), per_feed=16))
    assert verdict.metric == "top1_agreement" and "log-probabilities" in verdict.why


@pytest.mark.parametrize("kind, reason", [("embeddings", "does not stand out"),
                                          ("pixels", "does not stand out"),
                                          ("energies", "non-negative")])
def test_other_vectors_are_judged_by_cosine(digits, kind, reason):
    # energies: the embeddings squared, heavy-tailed and non-negative as a power spectrum
    rows = (4 * digits["embeddings"]) ** 2 if kind == "energies" else digits[kind]
    verdict = judge("out", _feeds(rows))
    assert verdict.metric == "cosine" and reason in verdict.why, verdict.why


def test_a_fixed_outlier_dimension_is_no_class(digits):
    embeddings = digits["embeddings"].copy()
    embeddings[:, 5] = 40 * np.abs(embeddings).max()
    verdict = judge("hidden", _feeds(embeddings))
    assert verdict.metric == "cosine" and "same one in all" in verdict.why


@pytest.mark.parametrize("shape", [(1, 4), (1, 25, 4), (1, 3, 8, 8)])
def test_shapes_other_than_one_long_vector_are_judged_by_cosine(shape):
    rng = np.random.default_rng(0)
    verdict = judge("boxes", [rng.standard_normal(shape) for _ in range(10)])
    assert verdict.metric == "cosine" and "not one vector" in verdict.why


def test_auto_judges_each_output_and_checks_the_worst(digits):
    reference = [[l[None], e[None]] for l, e in zip(digits["logits"], digits["embeddings"])]
    rng = np.random.default_rng(1)
    noisy = [[l, e + 0.3 * np.abs(e).mean() * rng.standard_normal(e.shape)]
             for l, e in reference]
    result = evaluate(noisy, metric="fidelity", reference=reference,
                      names=["logits", "embedding"], scoring=Scoring())
    outputs, judged = result["details"]["outputs"], result["details"]["judges"]
    assert judged["logits"]["metric"] == "top1_agreement"
    assert judged["embedding"]["metric"] == "cosine"
    assert result["name"] == "worst_output"
    assert result["value"] == min(outputs["logits"]["top1_agreement"],
                                  outputs["embedding"]["cosine"]) < 1.0


def test_a_named_primary_still_decides(digits):
    reference = [[row[None]] for row in digits["embeddings"]]
    result = evaluate(reference, metric="fidelity", reference=reference,
                      scoring=Scoring("top1_agreement"))
    assert result["name"] == "top1_agreement" and "judges" not in result["details"]
