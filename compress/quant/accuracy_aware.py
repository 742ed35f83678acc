"""Accuracy-aware quantization: quantize, evaluate, and keep the layers that cost the most
in float until the metric drop fits the budget, with as few float layers as possible.

1. Quantize everything. Within budget: done.
2. Sensitivity: for each quantizable layer, quantize everything but that layer and
   measure how much of the metric comes back ("recovered").
3. Keep the most sensitive layers in float, one more at a time, until the drop fits.
   The attempt with the smallest drop (then the fewest float layers) is kept even when
   no attempt fits, so a tight budget still leaves the best model found, with the
   numbers that say how far it is.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Attempt:
    excluded: tuple[str, ...]
    metric: float
    drop: float
    path: Path
    meta: dict


@dataclass(frozen=True)
class Budget:
    """What the search must keep: the float model's metric, and how much of it the
    quantized model may lose (a drop is always measured from this baseline)."""
    baseline: float
    max_drop: float


def search(quantize: Callable[[tuple[str, ...], Path], dict], evaluate: Callable[[Path], float],
           budget: Budget, layers: list[str], work_dir: Path,
           note: Callable[[str], None] = lambda text: None) -> tuple[Attempt, dict]:
    """`quantize(excluded, path) -> meta` writes a model keeping `excluded` in float;
    `evaluate(path) -> metric` (higher is better). Returns the kept attempt and a report."""
    baseline, max_drop = budget.baseline, budget.max_drop
    made, kept = [], None

    def attempt(excluded: tuple[str, ...]) -> Attempt:
        path = work_dir / f"attempt-{len(made)}.onnx"
        meta = quantize(excluded, path)
        value = evaluate(path)
        made.append(Attempt(excluded, value, baseline - value, path, meta))
        return made[-1]

    try:
        full = attempt(())
        report = {"max_drop": max_drop, "baseline": baseline, "all_quantized_drop": full.drop,
                  "sensitivity": [], "tried": [{"float_layers": 0, "drop": full.drop}]}
        best = full
        if full.drop > max_drop and layers:
            note(f"accuracy drop {full.drop:.4f} is over max_drop {max_drop}: trying each of "
                 f"{len(layers)} layers in float to find the ones that cost most")
            for layer in layers:
                one = attempt((layer,))
                report["sensitivity"].append({"layer": layer, "metric_without_it": one.metric,
                                              "recovered": one.metric - full.metric})
                best = _better(best, one)
            ranked = [row["layer"] for row in
                      sorted(report["sensitivity"], key=lambda row: -row["recovered"])]
            for count in range(1, len(ranked) + 1):
                if best.drop <= max_drop and len(best.excluded) <= count:
                    break  # a single-layer attempt already fits
                tried = attempt(tuple(ranked[:count]))
                report["tried"].append({"float_layers": count, "drop": tried.drop})
                best = _better(best, tried)
                if tried.drop <= max_drop:
                    break
        report.update(budget_met=best.drop <= max_drop, kept_in_float=list(best.excluded),
                      final_drop=best.drop, final_metric=best.metric, attempts=len(made))
        kept = best
        return best, report
    finally:  # only the kept model's file survives, also when something failed
        for other in made:
            if other is not kept:
                other.path.unlink(missing_ok=True)


def _better(current: Attempt, candidate: Attempt) -> Attempt:
    """Smaller drop wins; at an equal drop, fewer float layers."""
    if candidate.drop < current.drop - 1e-12:
        return candidate
    if abs(candidate.drop - current.drop) <= 1e-12 and len(candidate.excluded) < len(current.excluded):
        return candidate
    return current


def keep(best: Attempt, target: Path) -> None:
    shutil.move(str(best.path), str(target))
