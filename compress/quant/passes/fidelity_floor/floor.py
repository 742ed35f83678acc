"""The fidelity floor's one rule, for both formats' backends: the model as kept scored as
the check scores it; at or above `floor_db` nothing more is done, below it the format's
recovery runs (with `recover`, the default) and every step is recorded."""
from __future__ import annotations

import time


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


def _say_unscored(run, steps: list, label: str) -> None:
    """A note where moves' models could not be made or scored (each step's record has its
    reason): a recovery that tried nothing it could measure must not pass for one that
    found nothing to gain."""
    failed = [step for step in steps if getattr(step, "reason", None)]
    if failed:
        run.ctx.progress.note(f"{label}: {len(failed)} of {len(steps)} recovery steps (a "
                              "layer to higher precision) could not be scored, e.g. "
                              f"{failed[0].group.words()} to {failed[0].to}: {failed[0].reason}")
