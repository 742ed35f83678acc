"""Reading and checking model inputs for the runtime layer (numpy only).

An inputs file is an `.npz` whose keys are the model's input names, each an array with a
leading sample axis. Two reserved keys carry what the metric needs: `__labels__`
(integer class per sample) or `__reference__` (the original model's first output).
"""
from __future__ import annotations

import os
from typing import Iterator, Sequence

import numpy as np

from runtimes.errors import RuntimeInputError
from runtimes.session import TensorSpec

LABELS_KEY = "__labels__"
REFERENCE_KEY = "__reference__"
RESERVED = (LABELS_KEY, REFERENCE_KEY)


def read_npz(path: str) -> dict[str, np.ndarray]:
    if not os.path.isfile(path):
        raise RuntimeInputError(f"inputs file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (ValueError, OSError, EOFError) as exc:
        raise RuntimeInputError(f"cannot read inputs file {path}: {exc}") from None


def _dims_match(expected: Sequence, actual: Sequence) -> bool:
    return len(expected) == len(actual) and all(
        e is None or not isinstance(e, int) or e == a for e, a in zip(expected, actual))


def check_feeds(feeds: dict[str, np.ndarray], specs: Sequence[TensorSpec]) -> None:
    """Raise a clear error when feeds do not fit the model's declared inputs."""
    expected = {s.name for s in specs}
    missing, extra = expected - set(feeds), set(feeds) - expected
    if missing or extra:
        raise RuntimeInputError(
            f"the inputs do not match the model: model expects {sorted(expected)}, "
            f"got {sorted(feeds)}")
    for spec in specs:
        array = feeds[spec.name]
        if not _dims_match(spec.shape, array.shape):
            raise RuntimeInputError(
                f"input '{spec.name}' has shape {tuple(array.shape)} but the model expects "
                f"{tuple(spec.shape)} (None = any size)")
        if spec.dtype != str(array.dtype):
            raise RuntimeInputError(
                f"input '{spec.name}' has dtype {array.dtype} but the model expects {spec.dtype}")


def select_inputs(data: dict[str, np.ndarray], specs: Sequence[TensorSpec]) -> dict:
    """The arrays for the model's inputs: by name, or in file order when the names differ
    but the counts agree (a TFLite model's inputs are named by its converter, e.g.
    `serving_default_args_0:0`, not as the torch model's were)."""
    names = [spec.name for spec in specs]
    if all(name in data for name in names):
        return {name: data[name] for name in names}
    arrays = [key for key in data if key not in RESERVED]
    if len(arrays) == len(names):
        return {name: data[key] for name, key in zip(names, arrays)}
    raise RuntimeInputError(f"the inputs file has arrays {arrays}, the model's inputs are "
                            f"{names}: give one array per input, named like them or in order")


def batch_size_for(specs: Sequence[TensorSpec], dynamic_default: int) -> int:
    first = specs[0].shape[0] if specs and specs[0].shape else None
    return first if isinstance(first, int) else dynamic_default


def iter_batches(inputs: dict[str, np.ndarray], batch: int) -> Iterator[tuple[dict, int]]:
    """Yield (feeds, real_count): the last batch is padded by repeating its final sample
    when the model's batch size is fixed; callers drop the padded outputs."""
    total = len(next(iter(inputs.values())))
    for start in range(0, total, batch):
        chunk = {k: v[start:start + batch] for k, v in inputs.items()}
        real = len(next(iter(chunk.values())))
        if real < batch:
            chunk = {k: np.concatenate([v, np.repeat(v[-1:], batch - real, axis=0)])
                     for k, v in chunk.items()}
        yield chunk, real


def synthetic_feeds(specs: Sequence[TensorSpec], seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for a latency-only run (no inputs file given); dynamic dims -> 1."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in specs:
        shape = tuple(d if isinstance(d, int) else 1 for d in spec.shape)
        if np.issubdtype(np.dtype(spec.dtype), np.integer):
            feeds[spec.name] = rng.integers(0, 2, size=shape).astype(spec.dtype)
        else:
            feeds[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
    return feeds
