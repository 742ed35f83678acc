"""The accuracy-aware search on a modelled quantizer: each layer quantized costs a known
amount of the metric, so the right answer is known."""
from pathlib import Path

import pytest

from compress.quant.accuracy_aware import Budget, search

COSTS = {"conv1": 0.030, "conv2": 0.001, "fc": 0.010}


def _modelled(floor: float = 0.0):
    """quantize() records which layers it kept in float; evaluate() returns 0.9 minus
    the cost of the layers it quantized (and `floor`, a loss nothing can recover)."""
    made = {}

    def quantize(excluded, path: Path) -> dict:
        path.write_text("model")
        made[path] = set(excluded)
        return {"excluded": list(excluded)}

    def evaluate(path: Path) -> float:
        return 0.9 - floor - sum(c for layer, c in COSTS.items() if layer not in made[path])
    return quantize, evaluate


def test_keeps_the_fewest_costly_layers_in_float(tmp_path):
    quantize, evaluate = _modelled()
    best, report = search(quantize, evaluate, Budget(0.9, 0.015), list(COSTS), tmp_path)
    assert best.excluded == ("conv1",) and report["budget_met"]
    assert best.drop == pytest.approx(0.011)
    assert [row["layer"] for row in sorted(report["sensitivity"], key=lambda r: -r["recovered"])] \
        == ["conv1", "fc", "conv2"]
    assert [p.name for p in tmp_path.iterdir()] == [best.path.name]  # the rest deleted


def test_needs_two_layers_when_one_is_not_enough(tmp_path):
    quantize, evaluate = _modelled()
    best, report = search(quantize, evaluate, Budget(0.9, 0.005), list(COSTS), tmp_path)
    assert set(best.excluded) == {"conv1", "fc"} and report["budget_met"]


def test_within_budget_at_once_tries_nothing_else(tmp_path):
    quantize, evaluate = _modelled()
    best, report = search(quantize, evaluate, Budget(0.9, 0.05), list(COSTS), tmp_path)
    assert best.excluded == () and report["attempts"] == 1 and report["sensitivity"] == []


def test_an_unreachable_budget_still_keeps_the_best_model(tmp_path):
    quantize, evaluate = _modelled(floor=0.005)
    best, report = search(quantize, evaluate, Budget(0.9, 0.001), list(COSTS), tmp_path)
    assert not report["budget_met"]
    assert set(best.excluded) == set(COSTS) and best.drop == pytest.approx(0.005)
    assert best.path.is_file()
