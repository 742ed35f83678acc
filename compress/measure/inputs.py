"""What the benchmark hands the device runner: the feed it times, the evaluation feeds
with labels or the original model's outputs, and, for a custom metric, where the runner
writes every evaluation output for this side to score."""
from __future__ import annotations

from pathlib import Path


def write_inputs(ctx, folder: Path) -> tuple[Path | None, Path | None, dict | None]:
    """batch.npz (the one feed that is timed), eval.npz (feeds + labels/reference) and
    the metric: {name, baseline, primary, pairs, custom}."""
    from runtimes.feeds import write_feeds

    data = ctx.dataset("evaluation") or ctx.dataset("calibration")
    if data is None:
        return None, None, None
    names = [d.name for d in ctx.inputs]
    write_feeds(str(folder / "batch.npz"), data.take(1), names)
    evaluation = ctx.dataset("evaluation")
    if evaluation is None:
        return folder / "batch.npz", None, None
    metric = ctx.metric()
    write_feeds(str(folder / "eval.npz"), evaluation.feeds, names,
                labels=list(evaluation.labels) if metric.type == "accuracy" else None,
                # the source's outputs for every metric: fidelity is reported beside it
                references=ctx.reference_outputs())
    fidelity = metric.type == "fidelity"
    return folder / "batch.npz", folder / "eval.npz", {
        "name": metric.type, "baseline": ctx.metric_baseline(), "custom": metric.type == "custom",
        "primary": metric.primary if fidelity else None, "pairs": fidelity and metric.pairs}


def custom_score(ctx, place, path: str) -> dict:
    """Score the outputs the runner wrote with the user's metric function (fetched from
    the device first when it measured elsewhere)."""
    import os
    from compress.measure.places import read_local
    from compress.data.metric import score_outputs
    from runtimes.feeds import read_outputs
    local = read_local(place, path)
    try:
        return score_outputs(ctx, read_outputs(local)[1])
    finally:
        if local != path:
            os.unlink(local)
