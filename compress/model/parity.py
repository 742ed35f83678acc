"""What export stages compare against torch: which feeds, and torch's outputs on them."""
from __future__ import annotations

import numpy as np


def parity_inputs(ctx, count: int) -> tuple[list[dict], str]:
    """Up to `count` feeds of calibration (else evaluation) data, else random inputs;
    with a description of where they came from, for error messages."""
    return ctx.sample_feeds(count)


def torch_outputs(model, decls, feeds: list[dict], torch) -> list[list[np.ndarray]]:
    """Every output of `model` on every feed, as numpy."""
    from compress.model.run import torch_call
    with torch.no_grad():
        return [torch_call(model, decls, feed, torch) for feed in feeds]
