"""Fidelity for any model, per output and overall, with numpy only: cosine of rows, SQNR,
mean and max absolute error; outputs that are all zeros never give NaN."""
import math

import numpy as np
import pytest
from sklearn.datasets import load_digits

from runtimes.metrics import SQNR_CAP_DB, evaluate, feed_fidelity

ROWS = (load_digits().images[:24].reshape(24, -1) / 16.0).astype(np.float32)  # real data


def _feeds(arrays):
    return [[a] for a in arrays]


def test_identical_outputs_are_perfect_and_the_worst_output_is_overall():
    state = ROWS[:, :16]
    noisy = state + np.random.default_rng(0).normal(0, 0.05, state.shape).astype(np.float32)
    reference = [[ROWS[i:i + 1], state[i:i + 1]] for i in range(24)]
    outputs = [[ROWS[i:i + 1], noisy[i:i + 1]] for i in range(24)]
    result = feed_fidelity(outputs, reference, ["logits", "h_next"])
    assert result["outputs"]["logits"]["cosine"] == pytest.approx(1.0)
    assert result["outputs"]["logits"]["sqnr_db"] == SQNR_CAP_DB
    assert result["cosine"] == result["outputs"]["h_next"]["cosine"] < 1.0
    expected = 10 * math.log10((state.astype(np.float64) ** 2).sum()
                               / ((noisy - state).astype(np.float64) ** 2).sum())
    assert result["sqnr_db"] == pytest.approx(expected, rel=1e-6)
    assert result["max_abs_error"] == pytest.approx(float(np.abs(noisy - state).max()))


def test_all_zero_outputs_never_give_nan():
    zeros = np.zeros((4, 10), np.float32)
    for out, ref in ((zeros, zeros), (zeros, ROWS[:4, :10]), (ROWS[:4, :10], zeros)):
        result = feed_fidelity(_feeds(out[:, None]), _feeds(ref[:, None]))
        assert not any(math.isnan(v) for k, v in result.items() if k != "outputs"), result
    assert feed_fidelity(_feeds(zeros[:, None]), _feeds(zeros[:, None]))["cosine"] == 1.0
    assert feed_fidelity(_feeds(zeros[:, None]), _feeds(ROWS[:4, None, :10]))["cosine"] == 0.0


def test_outputs_of_other_sizes_per_feed_and_scalars():
    # a dynamic-width model: each feed's output has its own width; a 0-d output is one row
    reference = [[ROWS[i:i + 1, :8 + i]] for i in range(6)] + [[np.array(2.0)]]
    result = feed_fidelity(reference, reference)
    assert result["cosine"] == pytest.approx(1.0) and result["max_abs_error"] == 0.0


def test_accuracy_reports_fidelity_beside_it():
    logits = np.eye(10, dtype=np.float32)[[3, 1, 4]]
    result = evaluate(_feeds(logits[:, None]), metric="accuracy",
                      labels=[np.array([3]), np.array([1]), np.array([5])],
                      reference=_feeds(logits[:, None]))
    assert result["value"] == pytest.approx(2 / 3) and result["details"]["cosine"] == 1.0
    with pytest.raises(ValueError, match="one label per row"):
        evaluate(_feeds(logits[:, None]), metric="accuracy", labels=[np.array([3])])
