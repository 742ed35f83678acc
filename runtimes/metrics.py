"""Quality metrics computed from model outputs, with numpy only (runs on the device).

- accuracy: top-1 of the first output against integer labels.
- fidelity: agreement with the original model's outputs when there are no labels:
  top-1 agreement, mean cosine similarity per sample, max absolute error; for paired
  data (rows 2i and 2i+1, e.g. sentence pairs for an embedding model), also whether
  the pairs keep their similarity order (Spearman correlation of the pair similarities).
"""
from __future__ import annotations

import numpy as np

FIDELITY_KEYS = ("top1_agreement", "cosine", "max_abs_error")


def accuracy(outputs: np.ndarray, labels: np.ndarray) -> float:
    predicted = outputs.reshape(outputs.shape[0], -1).argmax(axis=1)
    return float((predicted == labels.reshape(-1)).mean())


def fidelity(outputs: np.ndarray, reference: np.ndarray) -> dict:
    out = outputs.reshape(outputs.shape[0], -1).astype(np.float64)
    ref = reference.reshape(reference.shape[0], -1).astype(np.float64)
    norms = np.linalg.norm(out, axis=1) * np.linalg.norm(ref, axis=1)
    cosine = np.where(norms > 0, (out * ref).sum(axis=1) / np.maximum(norms, 1e-300), 1.0)
    return {
        "top1_agreement": float((out.argmax(axis=1) == ref.argmax(axis=1)).mean()),
        "cosine": float(cosine.mean()),
        "max_abs_error": float(np.abs(out - ref).max()),
    }


def _pair_similarities(x: np.ndarray) -> np.ndarray:
    x = x.reshape(x.shape[0], -1).astype(np.float64)
    first, second = x[0:len(x) - 1:2], x[1::2]
    norms = np.linalg.norm(first, axis=1) * np.linalg.norm(second, axis=1)
    return (first * second).sum(axis=1) / np.maximum(norms, 1e-300)


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 0, tied values sharing the mean of their positions."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return ((ends - counts + ends - 1) / 2.0)[inverse]


def pair_spearman(outputs: np.ndarray, reference: np.ndarray) -> float:
    """Spearman correlation between the cosine similarities of pairs (rows 2i, 2i+1)
    under the model and under the original: 1.0 = the pairs keep their order."""
    model, original = _pair_similarities(outputs), _pair_similarities(reference)
    if len(model) < 2:
        raise ValueError("pair_spearman needs at least two pairs (four rows)")
    a, b = _average_ranks(model), _average_ranks(original)
    a, b = a - a.mean(), b - b.mean()
    denominator = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / denominator) if denominator > 0 else 1.0


def evaluate(outputs: np.ndarray, *, metric: str, labels=None, reference=None,
             primary: str = "top1_agreement", pairs: bool = False) -> dict:
    """Return {name, value, details}: `value` is the number budgets are checked on."""
    if metric == "accuracy":
        return {"name": "accuracy", "value": accuracy(outputs, labels), "details": {}}
    details = fidelity(outputs, reference)
    if pairs:
        details["pair_spearman"] = pair_spearman(outputs, reference)
    return {"name": primary, "value": details[primary], "details": details}
