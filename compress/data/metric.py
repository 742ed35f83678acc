"""The pipeline's metric on a model's outputs over the evaluation feeds: accuracy,
fidelity (runtimes.metrics, the same code the device runs) or the user's own function.

A custom metric `fn(predictions, references) -> float` gets, per evaluation feed, the
variant's outputs as {output name: array} (named as the source model names its outputs,
matched by position) and the references: the feed's labels where the data has them (a
dict; an array label as {"labels": array}), else the original model's outputs.
"""
from __future__ import annotations

import math
import numbers

from compress.errors import DataError
from compress.core.imports import import_callable
from runtimes.metrics import Scoring, evaluate


def _labelled(label) -> dict:
    return dict(label) if isinstance(label, dict) else {"labels": label}


def custom_function(metric, pipeline):
    function = metric.function
    if isinstance(function, str):
        function = import_callable(function, pipeline.base_dir, DataError, "data.metric.function")
    return function


def call_custom(function, label: str, predictions: list, references: list) -> float:
    """The user's metric, with what it returns checked: one finite number."""
    try:
        value = function(predictions, references)
    except (Exception, SystemExit) as exc:  # user code (sys.exit too)
        raise DataError(f"data.metric.function {label} raised {type(exc).__name__}: "
                        f"{' '.join(str(exc).split())[:300]}") from exc
    number, why = real_number(value)
    if number is None:
        shown = repr(value)
        shown = shown if len(shown) <= 80 else f"{shown[:60]}...({len(shown)} characters)"
        raise DataError(f"data.metric.function {label} returned {shown}{why}; it must return "
                        "one finite number (e.g. a float)")
    return number


def real_number(value) -> tuple[float | None, str]:
    """(the value as a float, "") when it is one finite real number: an int or a float
    (not a bool), or a numpy or torch scalar (0-d) of an integer or floating type; else
    (None, why not where the value alone does not say it). A string of digits is text,
    not a number; a complex number, an array of several or one element, neither."""
    dtype = getattr(value, "dtype", None)
    if dtype is not None:   # numpy scalars and 0-d arrays, torch tensors
        if getattr(value, "ndim", None) != 0:
            return None, (f" (an array of shape {tuple(getattr(value, 'shape', ()))}: "
                          "return one number, e.g. its .item())")
        kind = getattr(dtype, "kind", None)   # numpy's; torch's dtypes say it by name
        numeric = (kind in ("i", "u", "f") if kind is not None
                   else not any(word in str(dtype) for word in ("bool", "complex")))
        if not numeric:
            return None, ""
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None, ""
    try:
        number = float(value)
    except OverflowError:
        return None, " (too large for a float)"
    except (TypeError, ValueError):
        return None, ""
    return (number, "") if math.isfinite(number) else (None, "")


def score_outputs(ctx, outputs: list[list]) -> dict:
    """{name, value, details} of per-feed `outputs` on the evaluation data."""
    metric, data = ctx.metric(), ctx.require_dataset("evaluation", "the metric")
    names = ctx.reference_names()
    if metric.type == "custom":
        label = (metric.function if isinstance(metric.function, str) else
                 f"{getattr(metric.function, '__qualname__', '')} (a Python function)".lstrip())
        predictions = [dict(zip(names, feed)) for feed in outputs]
        references = ([_labelled(label_) for label_ in data.labels] if data.labels is not None
                      else [dict(zip(names, feed)) for feed in ctx.reference_outputs()])
        value = call_custom(custom_function(metric, ctx.pipeline), label, predictions,
                            references)
        return {"name": "custom", "value": value, "details": {"function": label}}
    try:
        if metric.type == "accuracy":
            return evaluate(outputs, metric="accuracy", labels=list(data.labels),
                            reference=ctx.reference_outputs(), names=names)
        return evaluate(outputs, metric="fidelity", reference=ctx.reference_outputs(),
                        names=names, scoring=Scoring(metric.primary, metric.pairs))
    except ValueError as exc:
        raise DataError(f"data.evaluation: the {metric.type} metric: {exc}") from None
