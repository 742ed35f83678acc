"""Running a model over feeds in the pipeline's own process: outputs flattened in export
order, and a feed the model fails on named in a ModelError, never a traceback."""
import numpy as np
import pytest
import torch

from compress.model.spec import TensorDecl
from compress.errors import ModelError
from compress.model.run import run_feeds


class TwoHeads(torch.nn.Module):
    def forward(self, x):
        if x.shape[-1] != 4:
            raise ValueError(f"expected 4 features, got {x.shape[-1]}")
        return {"sum": x.sum(-1), "pair": (x * 2, x[..., :1])}


def test_outputs_are_flattened_and_a_failing_feed_is_named():
    decls = (TensorDecl(name="x", shape=(1, 4)),)
    feeds = [{"x": np.ones((1, 4), np.float32)}, {"x": np.ones((1, 5), np.float32)}]
    first = run_feeds(TwoHeads(), decls, feeds[:1])[0]
    assert [o.shape for o in first] == [(1,), (1, 4), (1, 1)]
    with pytest.raises(ModelError, match=r"fails on feed 1 \{'x': \[1, 5\]\}: ValueError: "
                                         "expected 4 features"):
        run_feeds(TwoHeads(), decls, feeds)
