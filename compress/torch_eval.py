"""The pipeline's metric for a model (torch module, ONNX or TFLite file), computed in this
process the way the benchmark computes it on the device."""
from __future__ import annotations

from runtimes.metrics import evaluate


def torch_metric(model, ctx) -> dict | None:
    """{name, value, details} on data.evaluation, or None without evaluation data."""
    from compress.model_source import run_model

    data = ctx.dataset("evaluation")
    if data is None:
        return None
    metric = ctx.metric()
    outputs = run_model(model, ctx.pipeline, data.inputs)
    labels = data.labels if metric.type == "accuracy" else None
    reference = ctx.reference_outputs() if metric.type == "fidelity" else None
    return evaluate(outputs, metric=metric.type, labels=labels, reference=reference,
                    primary=metric.primary, pairs=metric.pairs)
