"""Reading and checking model inputs for the runtime layer (numpy only).

An inputs file is an `.npz` in one of two layouts:
- feeds (what the pipeline writes): a list of feeds, each one complete model call in the
  model's own layout (a state with its batch on axis 1, a 0-d scalar, ...). The key
  `__feeds__` holds the input names in order; `x.<feed>.<input>` the arrays;
  `y.<feed>` integer labels and `r.<feed>.<output>` the original model's outputs, for
  the metric. Written by `write_feeds`.
- stacked (convenient by hand): one array per input name with a leading sample axis,
  split into feeds of the model's batch size. Two reserved keys carry what the metric
  needs: `__labels__` (integer class per sample) or `__reference__` (the original
  model's first output).
"""
from __future__ import annotations

import os
import re
import zipfile
import zlib
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from runtimes.errors import RuntimeInputError
from runtimes.input_bounds import array_bytes, check_fits, check_npz
from runtimes.session import TensorSpec

LABELS_KEY = "__labels__"
REFERENCE_KEY = "__reference__"
RESERVED = (LABELS_KEY, REFERENCE_KEY)
FEEDS_KEY = "__feeds__"
# An .npz is a zip archive: a local file header first, or only the end record when empty.
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
NPY_MAGIC = b"\x93NUMPY"
# the feeds layout's keys after their prefix: <feed> or <feed>.<position>
_INDEX = re.compile(r"(\d+)(?:\.(\d+))?", re.ASCII)


@dataclass
class FeedFile:
    """What an inputs file holds, as feeds (one model call each)."""
    feeds: list            # dicts {input name: array}
    labels: list | None    # per feed: integer labels
    references: list | None  # per feed: the original model's outputs, in order


def write_feeds(path: str, feeds: Sequence[dict], names: Sequence[str], labels=None,
                references=None) -> None:
    """Save feeds (and labels / reference outputs per feed) in the feeds layout."""
    arrays = {FEEDS_KEY: np.array(list(names), dtype=str)}
    for i, feed in enumerate(feeds):
        arrays.update({f"x.{i}.{k}": np.asarray(feed[name]) for k, name in enumerate(names)})
        if labels is not None:
            arrays[f"y.{i}"] = np.asarray(labels[i])
        for k, output in enumerate(references[i] if references is not None else ()):
            arrays[f"r.{i}.{k}"] = np.asarray(output)
    np.savez(path, **arrays)


def _indexed(data: dict, prefix: str) -> dict:
    """{(feed, position): array} of the keys `prefix.<feed>[.<position>]`."""
    found = {}
    for key, array in data.items():
        head, _, rest = key.partition(".")
        if head != prefix:
            continue
        index = _INDEX.fullmatch(rest)
        if index is None:
            raise RuntimeInputError(
                f"the inputs file has an array named '{key}': in the feeds layout (a file "
                f"with {FEEDS_KEY}) arrays are named NAME.FEED.PART with whole numbers, e.g. "
                f"x.0.1 for feed 0's second input (y.FEED for labels)")
        found[(int(index[1]), int(index[2] or 0))] = array
    return found


def _ordered(found: dict, feeds: int) -> list | None:
    if not found:
        return None
    positions = 1 + max(k for _, k in found)
    return [[found[(i, k)] for k in range(positions) if (i, k) in found] for i in range(feeds)]


def _from_feeds_layout(data: dict) -> FeedFile:
    names = [str(n) for n in np.atleast_1d(data[FEEDS_KEY])]
    inputs = _indexed(data, "x")
    count = 1 + max((i for i, _ in inputs), default=-1)
    try:
        feeds = [{name: inputs[(i, k)] for k, name in enumerate(names)} for i in range(count)]
    except KeyError as exc:
        raise RuntimeInputError(f"the inputs file lacks array x.{exc.args[0][0]}."
                                f"{exc.args[0][1]}: it is not a complete feeds file") from None
    labels = _ordered(_indexed(data, "y"), count)
    return FeedFile(feeds, [l[0] for l in labels] if labels else None,
                    _ordered(_indexed(data, "r"), count))


def _from_stacked(data: dict, specs: Sequence[TensorSpec], dynamic_batch: int) -> FeedFile:
    """Samples on the first axis, cut into feeds of the model's batch size (`dynamic_batch`
    where it is dynamic); a last partial batch of a fixed-batch model is left out."""
    inputs = select_inputs(data, specs)
    batch = batch_size_for(specs, dynamic_batch)
    total = min((sample_count(name, array) for name, array in inputs.items()), default=0)
    starts = range(0, total - batch + 1 if specs and not specs[0].batch_dim_is_dynamic()
                   else total, batch)
    feeds = [{k: v[s:s + batch] for k, v in inputs.items()} for s in starts]
    labels, reference = data.get(LABELS_KEY), data.get(REFERENCE_KEY)
    return FeedFile(feeds, [labels[s:s + batch] for s in starts] if labels is not None else None,
                    [[reference[s:s + batch]] for s in starts] if reference is not None else None)


def sample_count(name: str, array: np.ndarray) -> int:
    """The samples of an array of the stacked layout: its length on axis 0."""
    if array.ndim == 0:
        what = f"array '{name}'" if name in RESERVED else f"input '{name}'"
        raise RuntimeInputError(
            f"{what} in the inputs file is 0-d (a single value): samples are on axis 0, so "
            f"give it shape (N, ...), e.g. np.array([value]) for one sample")
    return len(array)


def check_has_samples(data: dict, path: str) -> None:
    """Refuse an inputs file with nothing to run: random inputs timed in its place would
    pass for a measurement of the file's data."""
    if FEEDS_KEY in data:
        if not any(key.startswith("x.") for key in data):
            raise RuntimeInputError(f"inputs file {path} holds no feeds (no x.FEED.PART "
                                    f"arrays beside {FEEDS_KEY})")
        return
    arrays = {key: array for key, array in data.items() if key not in RESERVED}
    if not arrays:
        raise RuntimeInputError(f"inputs file {path} holds no input arrays "
                                f"({sorted(data) or 'nothing'}): save one array per model "
                                f"input, samples on axis 0, e.g. np.savez(path, x=samples)")
    for key, array in data.items():  # labels too: a 0-d one is refused here
        if sample_count(key, array) == 0 and key in arrays:
            raise RuntimeInputError(f"inputs file {path} holds 0 samples: array '{key}' has "
                                    f"shape {tuple(array.shape)}; give at least one sample "
                                    f"on axis 0")


def holds_metric_data(data: dict) -> bool:
    """Whether an inputs file's arrays include labels or reference outputs."""
    return any(key in RESERVED or key.startswith(("y.", "r.")) for key in data)


def read_feeds(source: str | dict, specs: Sequence[TensorSpec],
               dynamic_batch: int = 1) -> FeedFile:
    """The feeds of an inputs file (a path, or what read_npz returned) in either layout
    (see the module docstring)."""
    data = read_npz(source) if isinstance(source, str) else source
    if FEEDS_KEY in data:
        return _from_feeds_layout(data)
    return _from_stacked(data, specs, dynamic_batch)


def read_npz(path: str) -> dict[str, np.ndarray]:
    if not os.path.isfile(path):
        raise RuntimeInputError(f"inputs file not found: {path}")
    try:
        _check_npz_magic(path)
        check_npz(path)   # from the headers, before numpy allocates what they declare
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (zipfile.BadZipFile, zlib.error) as exc:
        raise RuntimeInputError(f"cannot read inputs file {path}: it is a damaged or cut "
                                f"short .npz ({exc}); write it again") from None
    except (ValueError, OSError, EOFError) as exc:
        raise RuntimeInputError(f"cannot read inputs file {path}: {exc}") from None


def _check_npz_magic(path: str) -> None:
    """Refuse what is not a zip archive before numpy reads it: numpy takes any other file
    for a pickle, and refusing that says 'pickled data' of a text file."""
    with open(path, "rb") as file:
        head = file.read(len(NPY_MAGIC))
    if head.startswith(ZIP_MAGIC):
        return
    what = ("empty" if not head else "a single .npy array (np.save), not an .npz"
            if head.startswith(NPY_MAGIC) else "not an .npz file")
    raise RuntimeInputError(f"cannot read inputs file {path}: it is {what}; an inputs file "
                            f"is an .npz (a zip of arrays) as np.savez(path, x=samples, ...) "
                            f"writes it")


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
        if str(array.dtype) not in (spec.dtype, spec.native_dtype):
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
        dtype = _numeric_dtype(spec)
        # drawn as 64-bit values, then converted: both arrays live at once
        check_fits(f"input '{spec.name}' of shape {shape} {dtype}: random values for it",
                   array_bytes(shape, np.int64) + array_bytes(shape, dtype),
                   "check the model's input shape, or give inputs with --inputs FILE.npz")
        if np.issubdtype(dtype, np.integer):
            feeds[spec.name] = rng.integers(0, 2, size=shape).astype(dtype)
        else:
            feeds[spec.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _numeric_dtype(spec: TensorSpec) -> np.dtype:
    """The numpy type of an input random values can be drawn for (numbers, booleans)."""
    try:
        dtype = np.dtype(spec.dtype)
    except TypeError:  # a runtime's own name numpy lacks, e.g. onnxruntime's tensor(string)
        dtype = None
    if dtype is not None and dtype.kind in "biuf":
        return dtype
    is_text = "string" in spec.dtype or dtype is not None and dtype.kind in "SUO"
    raise RuntimeInputError(
        f"input '{spec.name}' is {'a string' if is_text else f'of type {spec.dtype}'}: random "
        f"inputs cannot be made for it; give its values in an inputs file (--inputs FILE.npz)")


OUTPUTS_KEY = "__outputs__"


def write_outputs(path: str, outputs: Sequence[Sequence], names: Sequence[str]) -> None:
    """Every feed's outputs (a list per feed), for a metric computed by the caller."""
    arrays = {OUTPUTS_KEY: np.array(list(names), dtype=str)}
    for i, feed in enumerate(outputs):
        arrays.update({f"o.{i}.{k}": np.asarray(value) for k, value in enumerate(feed)})
    np.savez(path, **arrays)


def read_outputs(path: str) -> tuple[list[str], list[list]]:
    """(output names, per feed the outputs in order) from write_outputs' file."""
    data = read_npz(path)
    if OUTPUTS_KEY not in data:
        raise RuntimeInputError(f"{path} is not an outputs file (no {OUTPUTS_KEY})")
    found = _indexed(data, "o")
    count = 1 + max((i for i, _ in found), default=-1)
    return [str(n) for n in data[OUTPUTS_KEY]], _ordered(found, count) or []
