"""The forms data may take (see compress.data.feeds), turned into checked feeds."""
from __future__ import annotations

import itertools
import sys

import numpy as np

from compress.errors import DataError

LABELS = "labels"
# A generator that never ends must not eat the machine's memory.
MAX_FEEDS = 100_000


def _is_array(value) -> bool:
    return isinstance(value, np.ndarray) or hasattr(value, "detach")


def _array(value, where: str) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise DataError(f"{where}: cannot make an array of it ({exc})") from None
    if array.dtype.kind not in "biuf":
        raise DataError(f"{where}: holds {type(value).__name__} of dtype {array.dtype}; "
                        "give numbers (float, int or bool arrays)")
    return array


def _label(value, where: str):
    if isinstance(value, dict):
        return {key: _array(v, f"{where}['{key}']") for key, v in value.items()}
    return _array(value, where)


def _dims_fit(shape: tuple, declared: tuple, free_first: bool) -> bool:
    return len(shape) == len(declared) and all(
        want is None or have == want or (axis == 0 and free_first)
        for axis, (have, want) in enumerate(zip(shape, declared)))


def _shape_text(shape) -> str:
    return "(" + ", ".join("null" if s is None else str(s) for s in shape) + \
        ("," if len(shape) == 1 else "") + ")"


def check_feed(feed: dict, decls, dynamic_batch: bool, where: str) -> dict:
    """The feed with each array in the declared dtype; DataError naming the input and
    both shapes when it does not fit the model."""
    names = [d.name for d in decls]
    missing = [n for n in names if n not in feed]
    extra = sorted(set(feed) - set(names))
    if missing or extra:
        what = f"lacks input(s) {missing}" if missing else f"has key(s) {extra} that are not inputs"
        raise DataError(f"{where} {what}; the model's inputs are {names} (labels go under "
                        f"'{LABELS}')")
    checked = {}
    for decl in decls:
        array = _array(feed[decl.name], f"{where}, input '{decl.name}'")
        if not _dims_fit(array.shape, decl.shape, dynamic_batch):
            raise DataError(f"{where}, input '{decl.name}' has shape {_shape_text(array.shape)}"
                            f"; the model takes {_shape_text(decl.shape)} in one call "
                            "(null: any size)")
        checked[decl.name] = _converted(array, decl, where)
    return checked


def _converted(array: np.ndarray, decl, where: str) -> np.ndarray:
    target = np.dtype(decl.dtype)
    if array.dtype != target:
        if array.dtype.kind != target.kind:
            raise DataError(f"{where}, input '{decl.name}' has dtype {array.dtype}; the model "
                            f"takes {decl.dtype}. Convert it with .astype('{decl.dtype}')")
        with np.errstate(over="ignore"):  # said below, in the data's own terms
            converted = array.astype(target)  # e.g. float64 -> float32: same kind
        if target.kind == "f" and np.isfinite(array).all() and not np.isfinite(converted).all():
            raise DataError(f"{where}, input '{decl.name}' holds values beyond {decl.dtype}'s "
                            f"range (largest magnitude {np.abs(array).max():.3g}, {decl.dtype} "
                            f"ends at {np.finfo(target).max:.3g}): scale the data as the "
                            "model expects it")
        array = converted
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise DataError(f"{where}, input '{decl.name}' holds NaN or infinity; clean the data "
                        "(a model's output on it means nothing)")
    return np.require(array, requirements="C")  # ascontiguousarray makes 0-d arrays 1-d


def _feed_batch(decl) -> int:
    return (decl.shape[0] or 1) if decl.shape else 1


def _split(inputs: dict, labels, decls, where: str) -> tuple[list, list | None, str | None]:
    """Arrays with samples on the first axis -> feeds of the declared batch."""
    counts, note = {}, None
    for decl in decls:
        array = _array(inputs[decl.name], f"{where}, input '{decl.name}'")
        rank = max(len(decl.shape), 1)
        if array.ndim != rank or not _dims_fit(array.shape[1:], decl.shape[1:], False):
            raise DataError(
                f"{where}: input '{decl.name}' has shape {_shape_text(array.shape)}; the model "
                f"takes {_shape_text(decl.shape)} per call, so with samples on the first axis "
                f"each sample must be {_shape_text(decl.shape[1:])}. For inputs laid out "
                "otherwise (a state with its batch on axis 1, a 0-d scalar), give a list "
                "of feeds, one dict per model call")
        inputs[decl.name], batch = array, _feed_batch(decl)
        counts[decl.name] = len(array) // batch
        if len(array) % batch:
            note = f"{where}: the last {len(array) % batch} samples do not fill a batch of {batch}"
    if len(set(counts.values())) != 1:
        raise DataError(f"{where}: every input needs the same number of samples; got {counts}")
    count = next(iter(counts.values()))

    def cut(array, decl, i):
        batch = _feed_batch(decl)
        return array[i] if not decl.shape else array[i * batch:(i + 1) * batch]
    feeds = [{d.name: cut(inputs[d.name], d, i) for d in decls} for i in range(count)]
    if labels is None:
        return feeds, None, note
    labels, batch = _array(labels, f"{where}, labels"), _feed_batch(decls[0])
    if labels.ndim == 0:
        raise DataError(f"{where}: labels is one number ({labels.item()}) beside "
                        f"{len(inputs[decls[0].name])} samples: give one label per sample")
    if len(labels) != len(inputs[decls[0].name]):
        raise DataError(f"{where}: {len(labels)} labels for {len(inputs[decls[0].name])} "
                        "samples: give one label per sample")
    return feeds, [labels[i * batch:(i + 1) * batch] for i in range(count)], note


def _renamed(arrays: dict, names: list[str]) -> dict:
    """A one-input model takes its one array under any name (a TFLite converter names
    inputs `serving_default_args_0`, the data says `image`)."""
    keys = [k for k in arrays if k != LABELS]
    if len(names) == 1 and len(keys) == 1 and keys[0] != names[0]:
        arrays = {names[0] if k == keys[0] else k: v for k, v in arrays.items()}
    return arrays


def _stacked_parts(raw, decls, where: str) -> tuple[dict, object]:
    names = [d.name for d in decls]
    if isinstance(raw, dict):
        raw = _renamed(raw, names)
        missing = [n for n in names if n not in raw]
        if missing:
            raise DataError(f"{where}: no array for model input(s) {missing}; got keys "
                            f"{sorted(raw)}")
        return {n: raw[n] for n in names}, raw.get(LABELS)
    if isinstance(raw, tuple):
        inputs, labels = raw
        return _stacked_parts(inputs, decls, where)[0], labels
    if len(names) != 1:
        raise DataError(f"{where}: one array for a model with inputs {names}; give a dict "
                        "{input name: array}")
    return {names[0]: raw}, None


def _is_stacked(raw) -> bool:
    return isinstance(raw, dict) or _is_array(raw) or (
        isinstance(raw, tuple) and len(raw) == 2 and (isinstance(raw[0], dict)
                                                      or _is_array(raw[0])))


def _item(item, names: list[str], where: str) -> tuple[dict, object]:
    """One item of an iterable -> (arrays by input name, labels or None)."""
    if isinstance(item, dict):
        item = _renamed(item, names)
        return {k: v for k, v in item.items() if k != LABELS}, item.get(LABELS)
    if _is_array(item) or np.isscalar(item):
        if len(names) != 1:
            raise DataError(f"{where} is one array for a model with inputs {names}; give a "
                            "dict {input name: array}")
        return {names[0]: item}, None
    if isinstance(item, (tuple, list)):
        if len(item) == 2 and isinstance(item[0], dict):
            return dict(item[0]), item[1]
        if len(item) in (len(names), len(names) + 1):
            labels = item[len(names)] if len(item) > len(names) else None
            return dict(zip(names, item)), labels
    raise DataError(f"{where} is {type(item).__name__}; give a dict {{input name: array}} "
                    "(with an optional 'labels'), an array, or a tuple (inputs..., labels)")


def _with_batch_axis(arrays: dict, labels, decls) -> tuple[dict, object]:
    """A torch Dataset's sample: add the batch axis the model takes."""
    ranks = {d.name: len(d.shape) for d in decls}
    arrays = {k: (np.expand_dims(np.asarray(_array(v, k)), 0)
                  if np.ndim(_array(v, k)) + 1 == ranks.get(k) else v) for k, v in arrays.items()}
    if labels is not None and not isinstance(labels, dict):
        labels = np.asarray(_array(labels, LABELS)).reshape(1, *np.shape(labels))
    return arrays, labels


def _guarded(items, where: str):
    """The user's iterator, its failures (a generator's body, a Dataset's __getitem__)
    turned into a DataError naming the item."""
    index = 0
    while True:
        try:
            item = next(items)
        except StopIteration:
            return
        except (Exception, SystemExit) as exc:  # user code
            raise DataError(f"{where}: reading item {index} raised {type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:300]}") from None
        yield item
        index += 1


def _items(raw, where: str):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(raw, torch.utils.data.Dataset) \
            and not isinstance(raw, torch.utils.data.IterableDataset) and hasattr(raw, "__len__"):
        return _guarded((raw[i] for i in range(len(raw))), where), True
    if isinstance(raw, (str, bytes)) or not hasattr(raw, "__iter__"):
        raise DataError(f"{where}: the data is {type(raw).__name__}; give arrays with samples "
                        "on the first axis, a list or iterable of feeds (dicts {input name: "
                        "array}), or a torch Dataset / DataLoader")
    try:
        return _guarded(iter(raw), where), False
    except (Exception, SystemExit) as exc:  # an __iter__ of the user's that fails
        raise DataError(f"{where}: iterating the data raised {type(exc).__name__}: "
                        f"{' '.join(str(exc).split())[:300]}") from None


def to_feeds(raw, decls, dynamic_batch: bool, where: str) -> tuple[list, list | None, str | None]:
    """(feeds, labels per feed or None, a note on what was left out)."""
    if _is_stacked(raw):
        inputs, labels = _stacked_parts(raw, decls, where)
        feeds, labels, note = _split(dict(inputs), labels, decls, where)
        return [check_feed(f, decls, dynamic_batch, f"{where}: feed {i}")
                for i, f in enumerate(feeds)], labels, note
    items, samples = _items(raw, where)
    names, feeds, labels = [d.name for d in decls], [], []
    for index, item in enumerate(itertools.islice(items, MAX_FEEDS + 1)):
        if index == MAX_FEEDS:
            raise DataError(f"{where}: more than {MAX_FEEDS} feeds; give fewer (is it an "
                            "endless generator?)")
        arrays, label = _item(item, names, f"{where}: item {index}")
        if samples:
            arrays, label = _with_batch_axis(arrays, label, decls)
        added, their_labels = _add(arrays, label, decls, dynamic_batch,
                                   f"{where}: feed {len(feeds)}")
        feeds += added
        labels += their_labels
    if any(label is None for label in labels) and any(l is not None for l in labels):
        raise DataError(f"{where}: some feeds have labels and others not; give labels with "
                        "every feed or with none")
    return feeds, (labels if labels and labels[0] is not None else None), None


def _shape_of(value) -> tuple | None:
    """The shape, or None for what is no array (a ragged list, mixed text and bytes):
    check_feed then says what is wrong with it."""
    try:
        return np.shape(value)
    except (ValueError, TypeError):  # UnicodeDecodeError is a ValueError
        return None


def _add(arrays: dict, label, decls, dynamic_batch: bool, where: str) -> tuple[list, list]:
    """One item's feeds and their labels: a feed as it is, or (the older iterable of
    batches) a batch of samples cut into feeds when it is not one call but fits as samples."""
    shapes = {name: _shape_of(value) for name, value in arrays.items()}
    fits = all(shapes.get(d.name) is not None and _dims_fit(shapes[d.name], d.shape, dynamic_batch)
               for d in decls)
    if not fits and set(arrays) == {d.name for d in decls} and all(shapes.values()):
        try:
            parts, part_labels, _ = _split(dict(arrays), label, decls, where)
        except DataError:
            parts = None
        if parts and len(parts) > 1:  # one "sample" is a feed of the wrong shape: say so
            return ([check_feed(p, decls, dynamic_batch, where) for p in parts],
                    list(part_labels or [None] * len(parts)))
    return ([check_feed(arrays, decls, dynamic_batch, where)],
            [_label(label, f"{where}, labels") if label is not None else None])
