"""Calibration, evaluation and training data as feeds: one feed is one complete model call.

A loader (`module:function`), an `.npz`, or from Python the data itself gives either
- arrays with samples on the first axis: a dict {input name: array, "labels": array},
  an array (one-input models) or a tuple (inputs, labels). They are cut into feeds of
  the declared batch (the first dimension of each declared shape; a 0-d input takes
  one element per feed); or
- feeds: a list or any iterable (generators included) of dicts {input name: array
  shaped exactly as the model takes it in one call}, each with an optional `labels`
  entry (an array, or a dict of arrays for a custom metric). Arrays keep the model's own
  layout: a state with its batch on axis 1, a 0-d scalar, int64 and bool inputs. An item
  that is not one call but a batch of samples (the older "iterable of batches") is cut
  into feeds as above; or
- a torch Dataset (samples: a batch axis is added) or DataLoader (batches) yielding
  tensors, tuples (inputs..., labels) or dicts.
Every feed is checked against model.inputs (names, shapes, dtype kinds, finite values)
before any work, and errors name the feed, the input and both shapes.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Optional

import numpy as np

from compress.data.forms import LABELS, to_feeds
from compress.errors import DataError
from compress.core.imports import import_callable
from runtimes.errors import RuntimeInputError
from runtimes.feeds import read_npz


@dataclass(frozen=True)
class Samples:
    """Data with samples on the first axis, as training loops take it."""
    inputs: dict                  # input name -> array (N, ...)
    labels: Optional[np.ndarray]  # (N,) integer classes, or None

    def __len__(self) -> int:
        return len(next(iter(self.inputs.values())))


@dataclass(frozen=True)
class Dataset:
    role: str
    feeds: tuple                  # dicts {input name: array}, one model call each
    labels: Optional[tuple]       # per feed: an array, or a dict of arrays
    digest: str
    note: Optional[str] = None    # what was left out, for the progress display

    def __len__(self) -> int:
        return len(self.feeds)

    def take(self, count: int) -> list[dict]:
        return list(self.feeds[:count])

    def spread(self, count: int) -> list[int]:
        """Indices of `count` feeds spread evenly over the data."""
        return sorted(set(np.linspace(0, len(self) - 1, min(count, len(self))).astype(int)))

    def class_labels(self) -> Optional[np.ndarray]:
        """Every feed's labels as one integer array (None without array labels)."""
        if self.labels is None or isinstance(self.labels[0], dict):
            return None
        return np.concatenate([np.asarray(label).reshape(-1) for label in self.labels])

    def samples(self, purpose: str) -> Samples:
        """The feeds joined on the first axis (samples there), for training."""
        scalars = [name for name, array in self.feeds[0].items() if np.ndim(array) == 0]
        if scalars:
            raise DataError(f"data.{self.role}: {purpose} takes samples on the first axis, "
                            f"but input(s) {', '.join(scalars)} are 0-d scalars")
        inputs = {name: np.concatenate([feed[name] for feed in self.feeds])
                  for name in self.feeds[0]}
        return Samples(inputs, self.class_labels())


def _read(source, pipeline, where: str):
    if source.npz:
        try:
            return read_npz(str(pipeline.resolve(source.npz)))
        except RuntimeInputError as exc:
            raise DataError(f"{where}: {exc}") from None
    if source.value is not None:
        return source.value
    function = source.loader
    if isinstance(function, str):
        function = import_callable(function, pipeline.base_dir, DataError, where)
    try:
        return function(**source.kwargs)
    except (Exception, SystemExit) as exc:  # user code, sys.exit too: bad data, in its words
        raise DataError(f"{where}: the loader '{source.label}' raised "
                        f"{type(exc).__name__}: {exc}") from exc


def _digest(feeds: list, labels) -> str:
    h = hashlib.sha256()
    for index, feed in enumerate(feeds):
        for name in sorted(feed):
            array = feed[name]
            h.update(f"{index}{name}{array.shape}{array.dtype}".encode())
            h.update(np.ascontiguousarray(array).tobytes())
    for label in labels or ():
        for key, array in sorted(label.items() if isinstance(label, dict) else [("", label)]):
            h.update(f"{key}{np.shape(array)}".encode())
            h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()


def load_dataset(pipeline, role: str, decls) -> Optional[Dataset]:
    """Load `data.<role>` (calibration, evaluation, train) as feeds checked against the
    model's inputs `decls`, or None when it is not given."""
    source = getattr(pipeline.data, role)
    if source is None:
        return None
    where = f"data.{role}"
    feeds, labels, note = to_feeds(_read(source, pipeline, where), decls,
                                   pipeline.model.dynamic_batch, where)
    if not feeds:
        raise DataError(f"{where}: the data holds no feeds (a generator can be read only "
                        "once: give a list, or a function that makes the data)")
    return Dataset(role, tuple(feeds), tuple(labels) if labels is not None else None,
                   _digest(feeds, labels), note)


__all__ = ["Dataset", "LABELS", "Samples", "load_dataset"]
