"""The effect of each stage on the model: parameters, MACs, sparsity and the metric.

Torch artifacts are measured directly (the metric computed with torch on the evaluation
data); ONNX artifacts keep the architecture of the torch model they came from, so they
inherit its parameter and MAC counts and take their metric from the benchmark.
"""
from __future__ import annotations

import numpy as np

from compress.model.stats import model_stats
from compress.model.torch_eval import torch_metric


def _example_inputs(ctx):
    import torch
    feed = ctx.sample_feeds(1)[0][0]
    return [torch.from_numpy(feed[d.name]) for d in ctx.inputs]


def _torch_row(ctx, artifact) -> dict:
    model = ctx.torch_model(artifact)
    model.eval()
    stats = model_stats(model, _example_inputs(ctx))
    metric = torch_metric(model, ctx)
    return {**stats, "metric": metric["value"] if metric else None,
            "metric_name": metric["name"] if metric else None, "measured_with": "torch"}


def model_rows(ctx, artifacts, benchmarks: list[dict]) -> list[dict]:
    """One row per artifact, in pipeline order."""
    rows, by_id = [], {}
    for artifact in artifacts:
        if artifact.format == "torch":
            row = _torch_row(ctx, artifact)
        else:
            parent = by_id.get(artifact.parent, {})
            bench = next((b for b in benchmarks if b["artifact"] == artifact.id), None)
            metric = (bench or {}).get("metric") or {}
            row = {"parameters": parent.get("parameters"), "macs": parent.get("macs"),
                   "sparsity": parent.get("sparsity"), "metric": metric.get("value"),
                   "metric_name": metric.get("name"),
                   "measured_with": bench["runtime"]["engine"] if bench else None}
        row.update(artifact=artifact.id, format=artifact.format, precision=artifact.precision,
                   size_bytes=artifact.size_bytes)
        by_id[artifact.id] = row
        rows.append(row)
    return rows


def format_count(value) -> str:
    if value is None:
        return "—"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f}{unit}"
    return str(int(np.round(value)))
