"""The pipeline's metric for a torch module, computed in this process the way the
benchmark computes it on the device for exported files."""
from __future__ import annotations


def torch_metric(model, ctx) -> dict | None:
    """{name, value, details} on data.evaluation, or None without evaluation data."""
    from compress.data.metric import score_outputs
    from compress.model.run import run_feeds

    data = ctx.dataset("evaluation")
    if data is None:
        return None
    return score_outputs(ctx, run_feeds(model, ctx.inputs, list(data.feeds)))
