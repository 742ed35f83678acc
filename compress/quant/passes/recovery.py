"""The fidelity floor as an INT8 pass: on the quantized graph, after every other pass,
the model as kept is scored as the check scores (output SQNR of the worst output against
the float model on the check's feeds; the check's own score where it made one). At or
above `floor_db`, nothing more is done. Below it, with `recover` (the default), the
activation groups are ranked by what each costs the outputs alone, then given more
bits one at a time, costliest first: 16 bits over the same range, float (clipped to its
range) where 16 bits were not enough, re-scored after each, until the floor holds or
MAX_STEPS groups were moved; then each move is taken back where the floor holds without
it (compress/quant/mixed_precision.py). Every step is recorded under the artifact's
`fidelity_floor`, with the precision each group ended at. ONNX only: the TFLite file's
int8 types are ai-edge-quantizer's recipe's. docs/int8.md, "The fidelity floor and
recovery".
"""
from __future__ import annotations

import time

from compress.quant.passes.base import GRAPH, Int8Pass, register_pass
from compress.quant.passes.check import spread

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


def held(run, label: str, recover) -> dict:
    """The floor's record for the file the run kept, recovered by `recover(run, kept,
    score)` where it falls below (one rule for both formats; `label` names the scheme in
    the notes): the floor, what it scored, and after recovery every step and layer."""
    floor = run.settings.floor_db
    kept = run.target.read_bytes()
    score = run.score_of(kept)
    meta = {"floor_db": floor, "sqnr_db": score, "check_feeds": len(run.check_feeds()[0])}
    if score >= floor:
        return {**meta, "held": True}
    below = f"{label}: output SQNR {{}} dB against the float model (calibration data)"
    if not run.settings.recover:
        run.ctx.progress.note(below.format(f"{score:.1f}") + f", below floor_db {floor:g} "
                              "(recover: false: left as is)")
        return {**meta, "held": False, "recovered": False}
    started = time.perf_counter()
    with run.ctx.progress.task(f"recover: output SQNR {score:.1f} dB is below floor_db "
                               f"{floor:g}, moving the costliest layers to higher precision",
                               None):
        search = recover(run, kept, score)
    run.target.write_bytes(search.model)
    _say_unscored(run, search.steps, label)
    if search.now < floor:
        run.ctx.progress.note(below.format(f"{search.now:.1f}") + f" after recovery (from "
                              f"{score:.1f} dB), still below floor_db {floor:g}")
    layers = [{"layer": group.words(), "tensor": group.tensor, "node": group.producer,
               "op": group.op, "precision": level, "alone_sqnr_db": search.costs[group]}
              for group, level in search.levels.items()]
    return {**meta, "held": search.now >= floor, "recovered": True,
            "sqnr_db_after": search.now, "layers": layers,
            "steps": [step.record() for step in search.steps],
            "seconds": round(time.perf_counter() - started, 2)}


class _Onnx:
    record = "fidelity_floor"

    def apply(self, run) -> dict:
        return held(run, "int8-static", _recover)


def _say_unscored(run, steps: list, label: str) -> None:
    """A note where moves' models could not be made or scored (each step's record has its
    reason): a recovery that tried nothing it could measure must not pass for one that
    found nothing to gain."""
    failed = [step for step in steps if getattr(step, "reason", None)]
    if failed:
        run.ctx.progress.note(f"{label}: {len(failed)} of {len(steps)} recovery steps (a "
                              "layer to higher precision) could not be scored, e.g. "
                              f"{failed[0].group.words()} to {failed[0].to}: {failed[0].reason}")


def _spread(run, count: int) -> tuple[list, list]:
    """`count` of the check's feeds, spread over them, and the float outputs on them."""
    feeds, reference = run.check_feeds()
    picks = spread(list(range(len(feeds))), count)
    return [feeds[i] for i in picks], [reference[i] for i in picks]


def _recover(run, kept: bytes, score: float):
    """The groups ranked on RANK_FEEDS of the check's feeds, then the recovery scored on
    all of them."""
    import onnx

    from compress.quant import mixed_precision as mp
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


RECOVERY = register_pass(Int8Pass(
    name="recovery", when=GRAPH, after=("sequential_correction", "hard_swish"),
    on=lambda settings: settings.floor_db is not None, backends={"onnx": _Onnx()}))
# Never refuses the tensor-by-tensor path (`asked` unset): that path is for models too
# large to hold several times, which the recovery's copies would be.
