"""The smallest mix of widths that keeps a language model within its quality budget,
found by measurement: units ranked by their measured cost (sensitivity.py) go to the high
width first, and the number promoted is searched by building and judging whole files.

With k units at the high width (the k most costly), quality improves as k grows (more
weights kept precise; not strictly guaranteed, so every file judged is reported) and the
size grows with k: a binary search over k finds the smallest k whose file meets the
budget in about log2(units) builds. The budget is on the relative perplexity increase or
on the mean KL divergence from the float model (MEASURES): on Gemma 3 perplexity fell
while KL rose (docs/language_models.md), so KL is the steadier of the two. Each candidate is built by the caller's `build`
(onnxruntime-genai's builder with a weight type per node, or llama.cpp's quantizer with a
type per tensor), which says its size on disk, and judged by its `score` on evaluation
text, apart from the calibration text that ranked the units. A candidate is a folder or
a file: its name keeps `out`'s suffix (`mix.k3.gguf`).
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from compress.quant.lm.sensitivity import UnitCost

Build = Callable[[tuple, Path], int]   # (units at the high width, path) -> writes it: bytes
# what a budget may hold a candidate's quality to (the keys of TextQuality.as_dict), and
# its size: quality grows with the units kept high, size too, so a size budget is met by
# the fewest and a quality budget by the most
SIZE = "megabytes"
MEASURES = ("perplexity_increase", "kl_mean", SIZE)


@dataclass(frozen=True)
class Candidate:
    """A file judged: the units it keeps at the high width, its size, its quality."""
    high: tuple[str, ...]
    bytes: int
    quality: dict

    def meets(self, budgets: tuple["QualityBudget", ...]) -> bool:
        return all(self.value(b.measure) <= b.limit for b in budgets)

    def value(self, measure: str) -> float:
        return self.bytes / 2**20 if measure == SIZE else self.quality[measure]


@dataclass(frozen=True)
class QualityBudget:
    """At most `limit` of `measure` (one of MEASURES) against the float model."""
    limit: float
    measure: str = "perplexity_increase"

    def __post_init__(self):
        if self.measure not in MEASURES:
            raise ValueError(f"a budget is on one of {', '.join(MEASURES)}, not "
                             f"{self.measure!r}")


@dataclass
class Mix:
    """What the search judged and what it chose (None: not even every unit at the high
    width meets the budget; the last candidate says how close that came)."""
    budgets: tuple[QualityBudget, ...]    # every one must hold
    ranking: list[UnitCost]
    candidates: list[Candidate] = field(default_factory=list)
    chosen: Optional[Candidate] = None
    folder: Optional[Path] = None

    def as_dict(self) -> dict:
        first = self.budgets[0]
        return {"budget": first.limit, "measure": first.measure,
                "budgets": [vars(b) for b in self.budgets],
                "ranking": [c.as_dict() for c in self.ranking],
                "candidates": [vars(c) for c in self.candidates],
                "chosen": vars(self.chosen) if self.chosen else None,
                "folder": str(self.folder) if self.folder else None}


def choose_mix(ranking: list[UnitCost], build: Build, score,
               budget: QualityBudget | tuple[QualityBudget, ...], out: Path,
               progress: Callable[[str], None] = lambda _: None) -> Mix:
    """The smallest k whose file (the k most costly units high) meets `budget` (every
    one of several); the chosen file ends in `out`, the others are removed."""
    budget = budget if isinstance(budget, tuple) else (budget,)
    order, mix = [c.unit for c in ranking], Mix(budget, ranking)
    judged: dict[int, Candidate] = {}

    def folder(k: int) -> Path:
        return out.with_name(f"{out.stem}.k{k}{out.suffix}")

    def judge(k: int) -> Candidate:
        if k not in judged:
            size = build(tuple(order[:k]), folder(k))
            quality = score(folder(k)).as_dict()
            judged[k] = Candidate(tuple(order[:k]), size, quality)
            mix.candidates.append(judged[k])
            progress(f"mix with {k} of {len(order)} units at the high width: "
                     f"{judged[k].bytes / 2**20:.1f} MiB, perplexity "
                     f"{quality['perplexity_increase']:+.2%}, KL {quality['kl_mean']:.4f}")
        return judged[k]

    quality = tuple(b for b in budget if b.measure != SIZE)
    if quality:   # the fewest units high that meet the quality budgets
        best = _first(lambda k: judge(k).meets(quality), 0, len(order))
    else:         # only a size: the most units high that fit it (j fewer than all)
        n = len(order)
        best = n - _first(lambda j: judge(n - j).meets(budget), 0, n)
    if judge(best).meets(budget):
        mix.chosen = judge(best)
        _remove(out)
        folder(best).rename(out)
        mix.folder = out
    for k in judged:   # the chosen one is already `out`
        _remove(folder(k))
    return mix


def _first(ok: Callable[[int], bool], low: int, high: int) -> int:
    """The smallest k in [low, high] with ok(k), ok growing with k (high if none is)."""
    if ok(low) or not ok(high):
        return low if ok(low) else high
    while high - low > 1:    # ok(low) is false, ok(high) true
        middle = (low + high) // 2
        low, high = (low, middle) if ok(middle) else (middle, high)
    return high


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
