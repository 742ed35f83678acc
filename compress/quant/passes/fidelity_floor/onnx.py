"""The fidelity floor's ONNX backend: the activation groups of a QDQ model ranked by what
each costs the outputs alone, then given more bits one at a time, costliest first
(mixed_precision.py), until the floor holds or MAX_STEPS groups were moved; then each
move taken back where the floor holds without it."""
from __future__ import annotations

from compress.quant.passes.check import spread
from compress.quant.passes.fidelity_floor.floor import held

# Where the floor is out of reach, a move is taken back unless the outputs lose at least
# this much without it (the check's own margin): a 16-bit group runs in float on
# onnxruntime's CPU provider (no integer kernel takes 16-bit activations), a cost that
# must show in the outputs
MIN_GAIN_DB = 0.5
# The groups moved at most: each move costs a scoring of the whole model on the check's
# feeds, and taking it back another. The test's model needed one, openWakeWord's log-mel
# front end five (both halves of its power spectrum, the mel sum...), PP-PicoDet fifteen
# (its hard-swish is x * relu6(x + 3) / 6: a Mul and a Div quantized one after the
# other, each holding the outputs down until both are widened; docs/int8.md)
MAX_STEPS = 24
# The feeds each group's cost alone is measured on (spread over the check's): one run of
# the float model per group and feed is the most of a recovery's time on a large model
# (PP-PicoDet: 430 groups at 800x608, most of 158 s), and the costs only order the moves
RANK_FEEDS = 2


class Backend:
    record = "fidelity_floor"

    def apply(self, run) -> dict:
        return held(run, "int8-static", _recover)


def _corrected(run) -> bool:
    """Whether the kept model's biases were corrected for their inputs' quantization:
    the correction asked for, or the check kept a candidate with it."""
    method = run.settings.bias_method()
    checked = run.checked is not None and "bias" in run.checked.kept.split("+")
    return method in ("fast", "sequential") or checked


def _rescaled(run, float_model) -> list[str]:
    """The tensors hard-swish equalization scaled per channel in the kept model, where it
    was kept: their float twins hold other values, so their cost alone is not measured
    (they are tried last) and no bias correction is moved for them."""
    from compress.quant.swish.sites import float_tensors
    kept = (run.meta.get("hard_swish_equalization") or {}).get("kept")
    return float_tensors(float_model) if kept else []


def _spread(run, count: int) -> tuple[list, list]:
    """`count` of the check's feeds, spread over them, and the float outputs on them."""
    feeds, reference = run.check_feeds()
    picks = spread(list(range(len(feeds))), count)
    return [feeds[i] for i in picks], [reference[i] for i in picks]


def _recover(run, kept: bytes, score: float):
    """The groups ranked on RANK_FEEDS of the check's feeds, then the recovery scored on
    all of them."""
    import onnx

    from compress.quant.passes.fidelity_floor import mixed_precision as mp
    float_model, qdq = onnx.load(str(run.source)), onnx.load_model_from_string(kept)
    names = mp.float_names(float_model, _rescaled(run, float_model))
    costs = mp.ranked(float_model, qdq, *_spread(run, RANK_FEEDS), names)
    candidates = [group for group, _ in costs[:MAX_STEPS]]
    means = (mp.Means.of(float_model, qdq, candidates, run.chosen_feeds(), names)
             if _corrected(run) else None)

    def build(levels: dict) -> bytes:
        return mp.assigned(kept, levels, float_model, means)
    aim = mp.Greedy(run.settings.floor_db, MIN_GAIN_DB, MAX_STEPS)
    return mp.recover((kept, score), costs, build, run.score_of, aim)
