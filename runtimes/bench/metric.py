"""The metric of `python -m runtimes bench`: the model run on every evaluation feed, scored
against the labels or the reference outputs the inputs file holds (runtimes.metrics)."""
from __future__ import annotations

from runtimes import feeds as feeds_mod
from runtimes.bench.options import BenchOptions
from runtimes.errors import RuntimeInputError
from runtimes.metrics import Scoring, evaluate


def _run_feeds(session, feeds: list) -> list:
    """The outputs of every feed, run one model call each; a feed the model refuses is
    named (the runtimes raise their own untyped errors)."""
    outputs = []
    for index, feed in enumerate(feeds):
        try:
            outputs.append(session.run(feeds_mod.select_inputs(feed, session.inputs)))
        except RuntimeInputError:
            raise
        except Exception as exc:  # noqa: BLE001 - onnxruntime and LiteRT errors
            shapes = {k: list(v.shape) for k, v in feed.items()}
            raise RuntimeInputError(f"evaluation feed {index} {shapes}: the model fails on "
                                    f"it: {' '.join(str(exc).split())[:300]}") from None
    return outputs


def evaluate_feeds(session, data: feeds_mod.FeedFile, opts: BenchOptions) -> dict | None:
    """The metric over the evaluation feeds (None without labels, references or a
    --metric), the outputs written where --save-outputs says."""
    metric = opts.metric or ("accuracy" if data.labels is not None else
                             "fidelity" if data.references is not None else None)
    if metric is None and not opts.save_outputs:
        return None
    if metric == "accuracy" and data.labels is None or \
            metric == "fidelity" and data.references is None:
        need = (f"labels: an array {feeds_mod.LABELS_KEY}, one integer class per sample"
                if metric == "accuracy" else f"reference outputs: an array "
                f"{feeds_mod.REFERENCE_KEY}, the original model's first output per sample")
        raise RuntimeInputError(f"metric '{metric}' needs {need}, in the inputs file "
                                f"(--eval, else --inputs)")
    outputs = _run_feeds(session, data.feeds)
    if opts.save_outputs:
        feeds_mod.write_outputs(opts.save_outputs, outputs, session.outputs)
    if metric is None:
        return None
    try:
        result = evaluate(outputs, metric=metric, labels=data.labels, reference=data.references,
                          names=list(session.outputs),
                          scoring=Scoring(opts.primary,
                                          opts.pairs or opts.primary == "pair_spearman"))
    except ValueError as exc:
        raise RuntimeInputError(f"metric '{metric}': {exc}") from None
    result["samples"] = len(data.feeds)
    return result


def layout(data: feeds_mod.FeedFile, opts: BenchOptions) -> feeds_mod.FeedFile:
    """The feeds in the layout the model takes (--nhwc: NCHW arrays made NHWC)."""
    if not opts.nhwc:
        return data
    data.feeds = [{k: (v.transpose(0, 2, 3, 1) if v.ndim == 4 else v) for k, v in feed.items()}
                  for feed in data.feeds]
    return data
