"""The measured mix as a quantize stage runs it, for any route (onnxruntime-genai's
builder, llama.cpp's quantizer): each unit alone at the low width scored on the
calibration ids, ranked by cost per weight, then the smallest set at the high width that
meets every limit on the evaluation ids (mix.py). The route says how a probe and a mix are
written and how a file is scored; this says what is recorded: each unit's width and cost
and every file judged."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from compress.errors import ModelError
from compress.quant.lm.units import Unit


@dataclass(frozen=True)
class MixPlan:
    units: list[Unit]
    probe: Callable[[Unit, Path], Path]        # (unit, where) -> the model, that unit low
    build: Callable[[tuple, Path], int]        # (units high, path) -> the mix's bytes
    reference: Callable[[list[int], int], object]   # (ids, window) -> a quality.Reference
    score: Callable[[Path, object], object]    # (path, reference) -> TextQuality
    widths: tuple[str, str]                    # the low and the high width, as named


def _no_mix(budgets, judged: list, high: str) -> ModelError:
    """Why no mix was chosen: the candidates judged, against every limit."""
    return ModelError("no mix meets " + ", ".join(
        f"{b.measure} at most {b.limit:g}" for b in budgets) + f" (units at {high}: "
        + "; ".join(f"{len(c.high)}: " + ", ".join(f"{b.measure} {c.value(b.measure):.4g}"
                                                   for b in budgets) for c in judged)
        + "): raise a limit")


def measured_mix(plan: MixPlan, limits: dict[str, float], ctx, out: Path) -> dict:
    """The chosen mix written at `out`; its record (MixPlan's widths, each unit's)."""
    from compress.quant.lm.mix import QualityBudget, choose_mix
    from compress.quant.lm.sensitivity import measure_sensitivity, rank
    text, say, (low, high) = ctx.lm_text(), ctx.progress.note, plan.widths
    started = time.perf_counter()
    calibration = plan.reference(list(text.calibration), len(text.calibration) - 1)
    costs = measure_sensitivity(plan.units, plan.probe,
                                lambda path: plan.score(path, calibration), low, say)
    del calibration   # the float model's logits: a window's worth of vocabulary each
    evaluation = plan.reference(list(text.evaluation), text.window)
    budgets = tuple(QualityBudget(limit, measure) for measure, limit in limits.items())
    mix = choose_mix(rank(costs), plan.build, lambda path: plan.score(path, evaluation),
                     budgets, out, say)
    if mix.chosen is None:
        raise _no_mix(budgets, mix.candidates, high)
    record = mix.as_dict()
    record.pop("folder")
    record.update(low=low, high=high, seconds=round(time.perf_counter() - started, 1),
                  bits={u.name: high if u.name in mix.chosen.high else low
                        for u in plan.units})
    return record
