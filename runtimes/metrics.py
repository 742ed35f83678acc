"""Quality metrics computed from model outputs, with numpy only (runs on the device).

Outputs arrive per feed (one model call): a list with, for each feed, the model's
outputs in order. Rows are the first axis of an output (the samples of a batch where the
model has its batch there; a 0-d output is one row).

- accuracy: top-1 of the first output's rows against integer labels.
- fidelity, for any model, against the original model's outputs: per output and overall
  (the worst output) the mean cosine similarity of rows, the SQNR in dB, the mean and the
  max absolute error; top-1 agreement of the first output's rows; for paired data (rows
  2i and 2i+1, e.g. sentence pairs for an embedding model), whether the pairs keep their
  similarity order (Spearman correlation of the pair similarities); the number budgets
  are checked on is, by default, each output's own judge (top-1 agreement for class
  scores, cosine for the rest: output_kinds.py), the worst of them.

Outputs that are all zeros never give NaN: two zero rows are identical (cosine 1), a zero
row against a non-zero one is orthogonal (cosine 0), and SQNR is clamped to +-SQNR_CAP_DB.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from runtimes.output_kinds import judges

FIDELITY_KEYS = ("top1_agreement", "cosine", "sqnr_db", "mean_abs_error", "max_abs_error",
                 "non_finite_values")
# Higher is better for these; the drop a budget checks is baseline - value.
PRIMARY_KEYS = ("top1_agreement", "cosine", "pair_spearman")
# `auto`, the default: each output judged by the figure that fits it (output_kinds.py), the
# worst of them the number budgets are checked on
PRIMARY_CHOICES = ("auto", *PRIMARY_KEYS)
SQNR_CAP_DB = 200.0   # identical outputs; float32 round-off alone stays far below it


def _rows(array) -> np.ndarray:
    a = np.asarray(array, dtype=np.float64)
    return a.reshape(1, -1) if a.ndim == 0 else a.reshape(a.shape[0], -1)


def _row_cosines(out: np.ndarray, ref: np.ndarray) -> np.ndarray:
    norm_out, norm_ref = np.linalg.norm(out, axis=1), np.linalg.norm(ref, axis=1)
    both = (norm_out > 0) & (norm_ref > 0)
    dots = (out * ref).sum(axis=1)
    cosine = np.where(both, dots / np.where(both, norm_out * norm_ref, 1.0), 0.0)
    return np.where((norm_out == 0) & (norm_ref == 0), 1.0, np.clip(cosine, -1.0, 1.0))


def _sqnr_db(signal: float, noise: float) -> float:
    if noise == 0:
        return SQNR_CAP_DB
    if signal == 0:
        return -SQNR_CAP_DB
    return float(np.clip(10 * np.log10(signal / noise), -SQNR_CAP_DB, SQNR_CAP_DB))


def accuracy(outputs: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 of `outputs`' rows against integer `labels` (one per row)."""
    predicted = _rows(outputs).argmax(axis=1)
    return float((predicted == np.asarray(labels).reshape(-1)).mean())


def fidelity(outputs: np.ndarray, reference: np.ndarray) -> dict:
    """The fidelity of one output (rows on the first axis) to its reference."""
    return output_fidelity([outputs], [reference])


def output_fidelity(outputs: Sequence, references: Sequence) -> dict:
    """One output over all feeds: the arrays of each feed, and their references."""
    cosines, agree, rows = [], 0, 0
    signal = noise = abs_sum = 0.0
    count, largest, broken = 0, 0.0, 0
    for out, ref in zip(outputs, references):
        if np.shape(out) != np.shape(ref):
            raise ValueError(f"an output has shape {np.shape(out)} where the reference has "
                             f"{np.shape(ref)}")
        out, ref = _rows(out), _rows(ref)
        # NaN or infinity (fp16 overflow, a broken kernel) is counted and scored as 0: the
        # figures stay numbers, and the count says they are not to be trusted
        broken += int(out.size - np.isfinite(out).sum())
        out = np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0)
        cosines.append(_row_cosines(out, ref))
        if out.shape[1]:
            agree += int((out.argmax(axis=1) == ref.argmax(axis=1)).sum())
        rows += len(out)
        error = np.abs(out - ref)
        signal, noise = signal + float((ref * ref).sum()), noise + float((error * error).sum())
        abs_sum, count = abs_sum + float(error.sum()), count + error.size
        largest = max(largest, float(error.max())) if error.size else largest
    return {"top1_agreement": agree / rows if rows else 1.0,
            "cosine": float(np.concatenate(cosines).mean()) if cosines else 1.0,
            "sqnr_db": _sqnr_db(signal, noise),
            "mean_abs_error": abs_sum / count if count else 0.0, "max_abs_error": largest,
            "non_finite_values": broken}


def feed_fidelity(outputs: Sequence[Sequence], references: Sequence[Sequence],
                  names: Sequence[str] | None = None) -> dict:
    """Fidelity per output and overall (the worst output) over per-feed outputs."""
    if len(outputs) != len(references):
        raise ValueError(f"{len(outputs)} feeds of outputs but {len(references)} of references")
    count = min(len(f) for f in (*outputs, *references)) if outputs else 0
    names = list(names or [])[:count] + [f"output_{i}" for i in range(len(names or []), count)]
    per_output = {name: output_fidelity([f[k] for f in outputs], [f[k] for f in references])
                  for k, name in enumerate(names)}
    worst = list(per_output.values())
    overall = {"top1_agreement": worst[0]["top1_agreement"] if worst else 1.0,
               "cosine": min((w["cosine"] for w in worst), default=1.0),
               "sqnr_db": min((w["sqnr_db"] for w in worst), default=SQNR_CAP_DB),
               "mean_abs_error": max((w["mean_abs_error"] for w in worst), default=0.0),
               "max_abs_error": max((w["max_abs_error"] for w in worst), default=0.0),
               "non_finite_values": sum(w["non_finite_values"] for w in worst)}
    return {**overall, "outputs": per_output}


def _pair_similarities(x: np.ndarray) -> np.ndarray:
    x = x.reshape(x.shape[0], -1).astype(np.float64)
    first, second = x[0:len(x) - 1:2], x[1::2]
    return _row_cosines(first, second)


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


def _first_rows(outputs: Sequence[Sequence]) -> np.ndarray:
    return np.concatenate([_rows(feed[0]) for feed in outputs])


@dataclass(frozen=True)
class Scoring:
    """How fidelity is scored: `primary`, the figure budgets are checked on (one of
    PRIMARY_CHOICES; auto: per output, the figure that fits it); `pairs`, rows 2i and 2i+1 are pairs (pair_spearman is reported)."""
    primary: str = "auto"
    pairs: bool = False


def evaluate(outputs, *, metric: str, labels=None, reference=None,
             names: Sequence[str] | None = None, scoring: Scoring = Scoring()) -> dict:
    """Return {name, value, details}: `value` is the number budgets are checked on; the
    details hold the fidelity to `reference` wherever it is given (accuracy too).
    `outputs` and `reference`: per feed, the list of the model's outputs (an array alone
    stands for one feed with one output); `labels`: per feed, an integer array."""
    outputs, reference = _per_feed(outputs), _per_feed(reference)
    if metric == "accuracy":
        labels = np.concatenate([np.asarray(l).reshape(-1) for l in _as_list(labels)])
        rows = _first_rows(outputs)
        if len(rows) != len(labels):
            raise ValueError(f"the first output has {len(rows)} rows over the feeds but there "
                             f"are {len(labels)} labels: give one label per row")
        details = feed_fidelity(outputs, reference, names) if reference is not None else {}
        return {"name": "accuracy", "value": accuracy(rows, labels), "details": details}
    details = feed_fidelity(outputs, reference, names)
    if scoring.pairs:
        details["pair_spearman"] = pair_spearman(_first_rows(outputs), _first_rows(reference))
    if scoring.primary == "auto":
        return _judged(details, reference)
    return {"name": scoring.primary, "value": details[scoring.primary], "details": details}


def _judged(details: dict, reference) -> dict:
    """Each output by its own judge; the value is the worst of the judged figures, named
    after the judge when every output has the same one."""
    per_output = details["outputs"]
    chosen = judges(reference, list(per_output))
    details["judges"] = {j.output: j.as_dict() for j in chosen}
    values = [per_output[j.output][j.metric] for j in chosen]
    kinds = {j.metric for j in chosen}
    name = kinds.pop() if len(kinds) == 1 else "worst_output"
    return {"name": name, "value": min(values, default=1.0), "details": details}


def _as_list(value) -> list:
    return [value] if isinstance(value, np.ndarray) else list(value)


def _per_feed(value):
    if value is None or not isinstance(value, np.ndarray):
        return value
    return [[value]]
