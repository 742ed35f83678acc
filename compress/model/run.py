"""Run a model (a torch module, an ONNX or a TFLite file) over feeds, in this process."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from compress.errors import ModelError
from compress.core.lazy import require


def _flatten(out) -> list:
    """A torch model's outputs in the order its export lists them (tuples, lists and
    dicts flattened, as torch.onnx does)."""
    if isinstance(out, dict):
        return [leaf for value in out.values() for leaf in _flatten(value)]
    if isinstance(out, (tuple, list)):
        return [leaf for value in out for leaf in _flatten(value)]
    return [out]


def torch_call(model, decls, feed: dict, torch) -> list[np.ndarray]:
    """One call of a torch module with a feed (inputs passed in declared order)."""
    args = [torch.from_numpy(np.require(feed[d.name], requirements="C")) for d in decls]
    outputs = _flatten(model(*args))
    for output in outputs:
        if not isinstance(output, torch.Tensor):  # nothing an exporter can make an output of
            from compress.errors import ModelError
            raise ModelError(f"the model's forward() returns {type(output).__name__} where "
                             "the pipeline needs tensors (a tensor, or a tuple, list or dict "
                             "of tensors)")
    return [o.detach().cpu().numpy() for o in outputs]


def run_feeds(model_or_path, decls, feeds: list[dict], nhwc: bool = False,
              engine: str | None = None, **settings) -> list[list]:
    """Every output of every feed: [[output arrays of feed 0], ...]. `nhwc`: the file
    takes 4-D inputs channels-last while the feeds are laid out NCHW. A file runs on
    `engine` (default: its suffix's) with `settings` (runtimes.engines.Settings fields).
    A feed the model fails on is a ModelError naming it."""
    if isinstance(model_or_path, (str, Path)):
        from runtimes.feeds import select_inputs
        from runtimes.loader import load
        with load(str(model_or_path), engine, **settings) as session:
            return [_named_failure(index, feed, lambda f: session.run(
                select_inputs(_layout(f, nhwc), session.inputs)), Path(model_or_path).name)
                for index, feed in enumerate(feeds)]
    torch = require("torch", "a torch model source")
    with torch.no_grad():
        return [_named_failure(index, feed, lambda f: torch_call(model_or_path, decls, f, torch),
                               "the torch model") for index, feed in enumerate(feeds)]


def _named_failure(index: int, feed: dict, call, what: str) -> list:
    try:
        return call(feed)
    except Exception as exc:  # noqa: BLE001 - torch, onnxruntime and LiteRT raise their own
        shapes = {name: list(np.shape(array)) for name, array in feed.items()}
        raise ModelError(f"{what} fails on feed {index} {shapes}: {type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:300]}") from None


def output_names(model_or_path, count: int) -> list[str]:
    """The outputs' names where the model has them (files), else output_0, output_1, ..."""
    if isinstance(model_or_path, (str, Path)):
        from runtimes.loader import load
        with load(str(model_or_path)) as session:
            return list(session.outputs)
    return ["output"] if count == 1 else [f"output_{i}" for i in range(count)]


def _layout(feed: dict, nhwc: bool) -> dict:
    if not nhwc:
        return feed
    return {k: (v.transpose(0, 2, 3, 1) if v.ndim == 4 else v) for k, v in feed.items()}
