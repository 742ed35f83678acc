"""Load calibration / evaluation data and check it against the model's declared inputs.

A loader (`module:function`) or an `.npz` gives, for each declared input, an array with a
leading sample axis, plus optional `labels`. Accepted loader results: a dict
{input name: array, "labels": array}, an array (one-input models), a tuple
(inputs, labels), or an iterable of any of these as batches (concatenated).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Optional

import numpy as np

from compress.config import DataSource, Pipeline
from compress.errors import DataError
from compress.imports import import_callable
from runtimes.errors import RuntimeInputError
from runtimes.feeds import read_npz

LABELS = "labels"


@dataclass(frozen=True)
class Dataset:
    inputs: dict  # input name -> array (N, ...)
    labels: Optional[np.ndarray]
    digest: str

    def __len__(self) -> int:
        return len(next(iter(self.inputs.values())))

    def head(self, count: int) -> dict:
        return {name: array[:count] for name, array in self.inputs.items()}


def _as_dict(result, input_names: list[str], where: str) -> dict:
    if isinstance(result, dict):
        return dict(result)
    if isinstance(result, np.ndarray):
        return {input_names[0]: result}
    if isinstance(result, tuple) and len(result) == 2 and len(input_names) == 1:
        return {input_names[0]: result[0], LABELS: result[1]}
    if hasattr(result, "__iter__"):
        batches = [_as_dict(item, input_names, where) for item in result]
        if not batches:
            raise DataError(f"{where}: the loader returned no data")
        return {key: np.concatenate([np.asarray(b[key]) for b in batches]) for key in batches[0]}
    raise DataError(f"{where}: the loader returned {type(result).__name__}; return a dict "
                    f"{{input name: array}}, an array, a tuple (inputs, labels) or batches of these")


def _read(source: DataSource, pipeline: Pipeline, input_names: list[str], where: str) -> dict:
    if source.npz:
        try:
            return read_npz(str(pipeline.resolve(source.npz)))
        except RuntimeInputError as exc:
            raise DataError(f"{where}: {exc}") from None
    function = import_callable(source.loader, pipeline.base_dir, DataError, where)
    try:
        result = function(**source.kwargs)
    except Exception as exc:  # user code: report it as bad data, with its own message
        raise DataError(f"{where}: the loader '{source.loader}' raised "
                        f"{type(exc).__name__}: {exc}") from exc
    return _as_dict(result, input_names, where)


def _check_input(name: str, array, decl, where: str) -> np.ndarray:
    array = np.asarray(array)
    expected = tuple(decl.shape[1:])
    if array.ndim != len(decl.shape) or tuple(array.shape[1:]) != expected:
        raise DataError(
            f"{where}: input '{name}' has shape {tuple(array.shape)}; the model declares "
            f"{tuple(decl.shape)}, so each sample must be {expected} (samples on the first axis)")
    target = np.dtype(decl.dtype)
    if array.dtype != target:
        if array.dtype.kind != target.kind:
            raise DataError(f"{where}: input '{name}' has dtype {array.dtype}; the model "
                            f"declares {decl.dtype}. Convert it with .astype('{decl.dtype}')")
        array = array.astype(target)  # e.g. float64 -> float32: same kind, no surprise
    return np.ascontiguousarray(array)


def _digest(inputs: dict, labels) -> str:
    h = hashlib.sha256()
    for key in sorted(inputs):
        h.update(f"{key}{inputs[key].shape}{inputs[key].dtype}".encode())
        h.update(inputs[key].tobytes())
    if labels is not None:
        h.update(labels.tobytes())
    return h.hexdigest()


def load_dataset(pipeline: Pipeline, role: str) -> Optional[Dataset]:
    """Load `data.<role>` (calibration, evaluation, ...), or None when it is not given."""
    source = getattr(pipeline.data, role)
    if source is None:
        return None
    where = f"data.{role}"
    decls = {d.name: d for d in pipeline.model.inputs}
    raw = _read(source, pipeline, list(decls), where)
    missing = [name for name in decls if name not in raw]
    if missing:
        raise DataError(f"{where}: no array for model input(s) {missing}; got keys {sorted(raw)}")
    inputs = {name: _check_input(name, raw[name], decl, where) for name, decl in decls.items()}
    counts = {name: len(a) for name, a in inputs.items()}
    if len(set(counts.values())) != 1 or 0 in counts.values():
        raise DataError(f"{where}: every input needs the same, non-zero number of samples; got {counts}")
    labels = raw.get(LABELS)
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)
        if len(labels) != next(iter(counts.values())) or labels.dtype.kind not in "iu":
            raise DataError(f"{where}: labels must be one integer class per sample "
                            f"({next(iter(counts.values()))}); got shape {labels.shape}, dtype {labels.dtype}")
        labels = labels.astype(np.int64)
    return Dataset(inputs, labels, _digest(inputs, labels))
