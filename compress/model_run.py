"""Run a model (a torch module, an ONNX or a TFLite file) over feeds, in this process."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from compress.lazy import require


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
    return [o.detach().cpu().numpy() if hasattr(o, "detach") else np.asarray(o)
            for o in _flatten(model(*args))]


def run_feeds(model_or_path, decls, feeds: list[dict], nhwc: bool = False) -> list[list]:
    """Every output of every feed: [[output arrays of feed 0], ...]. `nhwc`: the file
    takes 4-D inputs channels-last while the feeds are laid out NCHW."""
    if isinstance(model_or_path, (str, Path)):
        from runtimes.feeds import select_inputs
        from runtimes.loader import load
        with load(str(model_or_path)) as session:
            return [session.run(select_inputs(_layout(feed, nhwc), session.inputs))
                    for feed in feeds]
    torch = require("torch", "a torch model source")
    with torch.no_grad():
        return [torch_call(model_or_path, decls, feed, torch) for feed in feeds]


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
