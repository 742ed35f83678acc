"""Which figure judges an output when the user named none: top-1 agreement for outputs
that are class scores, cosine similarity for everything else (boxes, landmarks,
embeddings, masks, audio features), decided from the original model's outputs on the
evaluation feeds, with numpy only (the device runs it too).

An output is class scores when, over its rows (the first axis, all feeds together):

1. each row is one vector of at least MIN_CLASSES entries (every axis after the first
   but one has length 1): [batch, 1000] and [1, 1, 1000] are; [1, 100, 4] boxes, a
   [1, 3, 64, 64] mask and 4 orientation scores are not;
2. and the rows are probabilities (non-negative, summing to 1: a softmax) or
   log-probabilities (at most 0, their exponentials summing to 1), or they are logits:
   - the top entry stands out: its distance above the row's mean, in standard
     deviations of the row, exceeds the top of as many normally distributed values
     (median over the rows) by STAND_OUT, and by CLEARLY or else the row's softmax puts
     at least CONFIDENT of its mass on it (median over the rows). Measured: ImageNet
     logits of EfficientNet-Lite0 on photo crops stand out by 4.5 (softmax 0.40); a
     digits CNN's 10 logits by 0.9, a digits MLP's by 0.38 (softmax 1.00); embeddings
     of all-MiniLM-L6-v2 by 0.01, Laplace-distributed values by 0.78 (softmax 0.16),
     uniform coordinates by -1.6;
   - the entries take both signs or lie in [0, 1] (sigmoid scores): non-negative
     features (ReLU, pixel coordinates, power spectra) are heavy-tailed enough to stand
     out without being class scores;
   - the top entry's index differs between rows (given MIN_ROWS rows or more): a fixed
     outlier dimension of an embedding stands out in every row, a class does not.
"""
from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np

MIN_CLASSES = 10
STAND_OUT = 0.25
CLEARLY = 1.0
CONFIDENT = 0.5
MIN_ROWS = 8
SUM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Judge:
    """The figure that judges one output, and why (said in the report)."""
    output: str
    metric: str   # "top1_agreement" or "cosine"
    why: str

    def as_dict(self) -> dict:
        return {"metric": self.metric, "why": self.why}


def _normal_top(count: int) -> float:
    """The expected largest of `count` standard normal values (Blom's approximation)."""
    return NormalDist().inv_cdf((count - 0.375) / (count + 0.25))


def _vectors(arrays: Sequence) -> np.ndarray | None:
    """The rows of one output over the feeds, when each row is a single vector."""
    shapes = {np.shape(a)[1:] for a in arrays}
    if len(shapes) != 1 or not arrays:
        return None
    rest = shapes.pop()
    if not rest or sum(1 for size in rest if size > 1) > 1:
        return None
    rows = np.concatenate([np.asarray(a, np.float64).reshape(len(a), -1) for a in arrays])
    return rows if np.isfinite(rows).all() else None


def _probabilities(rows: np.ndarray) -> str | None:
    sums = rows.sum(axis=1)
    if (rows >= 0).all() and np.allclose(sums, 1.0, atol=SUM_TOLERANCE):
        return "its rows are probabilities (non-negative, summing to 1)"
    if (rows <= 0).all() and np.allclose(np.exp(rows).sum(axis=1), 1.0, atol=SUM_TOLERANCE):
        return "its rows are log-probabilities"
    return None


def _stand_out(rows: np.ndarray) -> float:
    spread = rows.std(axis=1)
    tops = (rows.max(axis=1) - rows.mean(axis=1)) / np.where(spread > 0, spread, 1.0)
    return float(np.median(tops)) - _normal_top(rows.shape[1])


def _softmax_top(rows: np.ndarray) -> float:
    shifted = np.exp(rows - rows.max(axis=1, keepdims=True))
    return float(np.median(1.0 / shifted.sum(axis=1)))


def _logits(rows: np.ndarray) -> tuple[bool, str]:
    entries = rows.shape[1]
    excess, mass = _stand_out(rows), _softmax_top(rows)
    if excess < STAND_OUT or (excess < CLEARLY and mass < CONFIDENT):
        return False, (f"its top entry does not stand out ({excess:+.2f} sd beyond the top "
                       f"of {entries} normal values, softmax {mass:.2f}; class scores need "
                       f"{STAND_OUT:+.2f} and {CLEARLY:+.1f} or softmax {CONFIDENT})")
    signed = (rows < 0).any(axis=1).mean() > 0.5 and (rows > 0).any(axis=1).mean() > 0.5
    if not signed and not ((rows >= 0).all() and (rows <= 1).all()):
        return False, ("its entries are non-negative and not in [0, 1]: features or "
                       "coordinates, not logits")
    places = len(np.unique(rows.argmax(axis=1)))
    if len(rows) >= MIN_ROWS and places < 2:
        return False, f"its top entry is the same one in all {len(rows)} rows"
    return True, (f"its top entry stands out ({excess:+.2f} sd beyond the top of {entries} "
                  f"normal values, softmax {mass:.2f}) at {places} different places over "
                  f"{len(rows)} rows")


def judge(name: str, arrays: Sequence) -> Judge:
    """The judge of output `name`, from the original model's arrays of it (per feed)."""
    rows = _vectors(arrays)
    if rows is None or rows.shape[1] < MIN_CLASSES:
        shape = "x".join(str(s) for s in np.shape(arrays[0])) if len(arrays) else "?"
        return Judge(name, "cosine", f"shape {shape} is not one vector of at least "
                                     f"{MIN_CLASSES} scores per row")
    why = _probabilities(rows)
    if why:
        return Judge(name, "top1_agreement", why)
    scores, why = _logits(rows)
    return Judge(name, "top1_agreement" if scores else "cosine", why)


def judges(references: Sequence[Sequence], names: Sequence[str]) -> list[Judge]:
    """A judge per output, from per-feed reference outputs (in the order of `names`)."""
    count = min(len(feed) for feed in references) if references else 0
    return [judge(names[k], [feed[k] for feed in references]) for k in range(count)]
