"""Quality metrics computed from model outputs, with numpy only (runs on the device).

- accuracy: top-1 of the first output against integer labels.
- fidelity: agreement with the original model's outputs when there are no labels:
  top-1 agreement, mean cosine similarity per sample, max absolute error.
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


def evaluate(outputs: np.ndarray, *, metric: str, labels=None, reference=None,
             primary: str = "top1_agreement") -> dict:
    """Return {name, value, details}: `value` is the number budgets are checked on."""
    if metric == "accuracy":
        return {"name": "accuracy", "value": accuracy(outputs, labels), "details": {}}
    details = fidelity(outputs, reference)
    return {"name": primary, "value": details[primary], "details": details}
