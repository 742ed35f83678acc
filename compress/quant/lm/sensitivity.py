"""How much each unit of a language model costs when its weights alone go to the low
width: measured, not assumed. Each probe is the float model with one unit's MatMuls
quantized (nbits.py), scored against the float model's logits on calibration text
(mean KL divergence per token, the perplexity change, top-1 agreement). The units are
then ranked by KL per weight: the first give the most quality back per byte.

The caller's `probe` writes that model: for onnxruntime-genai at the ONNX level
(onnxruntime's MatMulNBits quantizer, the builder's own, the embeddings left float); for
llama.cpp with its quantizer (the unit's tensors at the low type, every other at Q8_0).
It ranks the units. The mixes made from the ranking are built and judged whole (mix.py).
"""
from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from compress.quant.lm.units import Unit

Score = Callable[[Path], object]         # a model folder -> its TextQuality vs float
Probe = Callable[[Unit, Path], Path]     # (unit, where) -> the model with it alone low


@dataclass(frozen=True)
class UnitCost:
    """One unit at the low width, every other weight float, against the float model."""
    unit: str
    parameters: int
    kl_mean: float
    perplexity_increase: float
    top1_agreement: float

    def as_dict(self) -> dict:
        return asdict(self)


def measure_sensitivity(units: list[Unit], probe: Probe, score: Score, low: str,
                        progress: Callable[[str], None] = lambda _: None) -> list[UnitCost]:
    """Each unit's cost at the `low` width (named in the progress lines), in the units'
    order (rank() orders them). The probes are written one at a time in a temporary
    folder (a model's size each)."""
    costs = []
    with tempfile.TemporaryDirectory(prefix="lm-probe-") as scratch:
        for n, unit in enumerate(units, 1):
            against = score(probe(unit, Path(scratch) / "probe")).against
            costs.append(UnitCost(unit.name, unit.parameters, against["kl_mean"],
                                  against["perplexity_increase"], against["top1_agreement"]))
            progress(f"sensitivity {n}/{len(units)}: {unit.name} at {low} alone: KL "
                     f"{against['kl_mean']:.4f}, perplexity {against['perplexity_increase']:+.2%}")
    return costs


def rank(costs: list[UnitCost]) -> list[UnitCost]:
    """Most KL per weight first: what a greedy knapsack promotes first, the most quality
    back per byte (the high width adds the same bytes per weight to every unit)."""
    return sorted(costs, key=lambda c: -c.kl_mean / max(c.parameters, 1))
