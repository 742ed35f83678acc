"""The check: of the candidates the fitted passes make, keep the one whose outputs are
closest to the float model's (SQNR) on CHECK_FEEDS calibration feeds, by one rule for
both formats (`keep`): the highest score, a candidate that holds a fitted pass less the
format's margin (onnx_backend.FIT_MARGIN_DB, tflite_backend.FIT_MARGIN_DB), the first
of equal ones. Measured on the conformance corpus: docs/rounding.md, "The check"."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

CHECK_FEEDS = 32  # calibration feeds each candidate of the check is run on


def spread(feeds: list, count: int) -> list:
    """At most `count` of `feeds`, evenly spread over them (in order)."""
    picks = np.unique(np.linspace(0, len(feeds) - 1, min(count, len(feeds))).astype(int))
    return [feeds[i] for i in picks]


def refining(titles: list[str], checked: bool, samples: int, more: str = "") -> str:
    """The progress line of the passes on the quantized layers, in the settings' words:
    which run in what order, on how many calibration samples, and whether the check keeps
    each only where it brings the outputs closer to the float model's."""
    kept = f", {'each ' * (len(titles) > 1)}kept if it lowers the error" if checked else ""
    return f"refining the int8 weights: {', then '.join(titles)}{kept} ({samples} samples{more})"


def keep(scores: dict, fitted: set, margin: float):
    """The candidate kept: the highest of `scores`, those in `fitted` less `margin`."""
    return max(scores, key=lambda name: scores[name] - (name in fitted) * margin)


@dataclass(frozen=True)
class Checked:
    """What the check found: the candidate it kept and every candidate's score."""
    kept: str
    scores: dict

    def kept_score(self) -> Optional[float]:
        return self.scores.get(self.kept)
