"""pair_spearman: do sentence pairs keep their similarity order (numpy only)."""
import numpy as np
import pytest

from runtimes.metrics import Scoring, _average_ranks, evaluate, pair_spearman


def _pairs(similarities):
    """Rows 2i, 2i+1 with the given cosine similarity: unit vectors at that angle."""
    rows = []
    for s in similarities:
        rows += [[1.0, 0.0], [s, np.sqrt(1 - s * s)]]
    return np.array(rows)


def test_same_order_is_one_and_reversed_order_is_minus_one():
    reference = _pairs([0.9, 0.5, 0.1, -0.3])
    assert pair_spearman(_pairs([0.8, 0.6, 0.2, 0.0]), reference) == pytest.approx(1.0)
    assert pair_spearman(_pairs([-0.3, 0.1, 0.5, 0.9]), reference) == pytest.approx(-1.0)
    swapped = pair_spearman(_pairs([0.5, 0.9, 0.1, -0.3]), reference)  # one swap of four
    assert swapped == pytest.approx(0.8)


def test_ties_share_their_rank():
    assert _average_ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [2.5, 0.0, 2.5, 1.0]


def test_evaluate_reports_it_beside_cosine_for_paired_data():
    reference = _pairs([0.9, 0.5, 0.1])
    result = evaluate(reference * 2.0, metric="fidelity", reference=reference,
                      scoring=Scoring("pair_spearman", pairs=True))
    assert result["value"] == pytest.approx(1.0)
    assert result["details"]["cosine"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least two pairs"):
        pair_spearman(reference[:2], reference[:2])
