"""What export stages compare against torch: which inputs, and torch's outputs on them."""
from __future__ import annotations

import numpy as np


def parity_inputs(ctx, count: int) -> tuple[dict, str]:
    """Up to `count` samples of calibration (else evaluation) data, else random inputs;
    with a description of where they came from, for error messages."""
    for role in ("calibration", "evaluation"):
        data = ctx.dataset(role)
        if data is not None:
            return data.head(count), f"data.{role}"
    rng = np.random.default_rng(ctx.pipeline.seed)
    return ({d.name: rng.standard_normal((count, *d.shape[1:])).astype(d.dtype)
             for d in ctx.pipeline.model.inputs}, "random inputs (no data given)")


def torch_outputs(model, names, inputs, torch) -> list[np.ndarray]:
    """Every output of `model` on `inputs` (arrays keyed by input name), as numpy."""
    with torch.no_grad():
        out = model(*[torch.from_numpy(inputs[n]) for n in names])
    out = out if isinstance(out, (tuple, list)) else (out,)
    return [o.detach().numpy() for o in out]
