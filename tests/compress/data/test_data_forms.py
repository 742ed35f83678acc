"""Every form data may take becomes checked feeds (one model call each): arrays with
samples on the first axis, lists and generators of feeds in the model's own layout (a
state with its batch on axis 1, a 0-d int64 scalar, bool inputs), torch Datasets and
DataLoaders; and every mistake is one DataError naming the feed, the input and shapes."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from compress.model.spec import TensorDecl
from compress.data.forms import MAX_FEEDS, to_feeds
from compress.errors import DataError

DIGITS = load_digits()
IMAGES = (DIGITS.images[:40] / 16.0).astype(np.float32)[:, None]   # 40 real scans, N,1,8,8
LABELS = DIGITS.target[:40].astype(np.int64)
IMAGE = (TensorDecl(name="image", shape=(1, 1, 8, 8)),)
# a streaming model's step: a row, a GRU state with its batch on axis 1, a 0-d step index
STEP = (TensorDecl(name="x", shape=(1, 8)), TensorDecl(name="h", shape=(1, 1, 16)),
        TensorDecl(name="t", shape=(), dtype="int64"), TensorDecl(name="mask", shape=(1, 8),
                                                                 dtype="bool"))


def _step_feeds(count: int = 8) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"x": IMAGES[i, 0, i % 8][None], "h": rng.standard_normal((1, 1, 16)).astype("f4"),
             "t": np.array(i % 8, dtype=np.int64), "mask": IMAGES[i, 0, i % 8][None] > 0,
             "labels": LABELS[i:i + 1]} for i in range(count)]


def test_arrays_with_samples_on_the_first_axis_become_one_feed_per_sample():
    feeds, labels, note = to_feeds({"image": IMAGES, "labels": LABELS}, IMAGE, False, "data")
    assert len(feeds) == 40 and feeds[3]["image"].shape == (1, 1, 8, 8) and note is None
    assert np.array_equal(feeds[3]["image"][0], IMAGES[3]) and labels[3].tolist() == [LABELS[3]]
    # a bare array and a tuple (inputs, labels) are the same data
    assert len(to_feeds(IMAGES, IMAGE, False, "data")[0]) == 40
    assert to_feeds((IMAGES, LABELS), IMAGE, False, "data")[1][5].tolist() == [LABELS[5]]


def test_a_declared_batch_cuts_feeds_of_that_batch_and_says_what_is_left_out():
    decl = (TensorDecl(name="image", shape=(8, 1, 8, 8)),)
    feeds, labels, note = to_feeds({"image": IMAGES[:20], "labels": LABELS[:20]}, decl, False, "d")
    assert [f["image"].shape[0] for f in feeds] == [8, 8] and labels[1].shape == (8,)
    assert "the last 4 samples do not fill a batch of 8" in note


def test_feeds_keep_the_models_own_layout():
    feeds, labels, _ = to_feeds(_step_feeds(), STEP, False, "data.calibration")
    assert len(feeds) == 8 and feeds[2]["h"].shape == (1, 1, 16)
    assert feeds[2]["t"].shape == () and feeds[2]["t"].dtype == np.int64
    assert feeds[2]["mask"].dtype == np.bool_ and labels[2].tolist() == [LABELS[2]]


def test_a_generator_of_feeds_is_read_once():
    feeds, _, _ = to_feeds((feed for feed in _step_feeds(5)), STEP, False, "data")
    assert len(feeds) == 5


def test_float64_and_int32_become_the_declared_dtype_of_the_same_kind():
    feed = {**_step_feeds(1)[0], "x": IMAGES[0, 0, :1].astype(np.float64),
            "t": np.array(3, dtype=np.int32)}
    checked = to_feeds([feed], STEP, False, "data")[0][0]
    assert checked["x"].dtype == np.float32 and checked["t"].dtype == np.int64


def test_an_iterable_of_batches_is_cut_into_feeds():
    batches = [{"image": IMAGES[i:i + 10], "labels": LABELS[i:i + 10]} for i in (0, 10, 20)]
    feeds, labels, _ = to_feeds(batches, IMAGE, False, "data")
    assert len(feeds) == 30 and labels[29].tolist() == [LABELS[29]]


def test_with_a_dynamic_batch_a_feed_may_hold_any_batch():
    decl = (TensorDecl(name="image", shape=(1, 1, 8, 8)),)
    feeds, _, _ = to_feeds([{"image": IMAGES[:4]}], decl, True, "data")
    assert feeds[0]["image"].shape == (4, 1, 8, 8)


def test_torch_dataset_and_dataloader():
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(IMAGES[:, 0:1, :, :][:, 0]),
                                             torch.from_numpy(LABELS))
    # a Dataset yields samples (1, 8, 8): the batch axis is added
    decl = (TensorDecl(name="image", shape=(1, 1, 8, 8)),)
    feeds, labels, _ = to_feeds(torch.utils.data.TensorDataset(
        torch.from_numpy(IMAGES), torch.from_numpy(LABELS)), decl, False, "data")
    assert len(feeds) == 40 and feeds[0]["image"].shape == (1, 1, 8, 8)
    assert labels[7].tolist() == [LABELS[7]]
    # a DataLoader yields batches: one feed each at batch size 1, cut into samples otherwise
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
        torch.from_numpy(IMAGES), torch.from_numpy(LABELS)), batch_size=1)
    assert len(to_feeds(loader, decl, False, "data")[0]) == 40
    batched = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
        torch.from_numpy(IMAGES)), batch_size=16)
    assert len(to_feeds(batched, decl, False, "data")[0]) == 40
    dicts = torch.utils.data.DataLoader([{"image": torch.from_numpy(IMAGES[i])}
                                         for i in range(6)], batch_size=1)
    assert len(to_feeds(dicts, decl, False, "data")[0]) == 6
    assert dataset  # a dataset of samples of another rank is not the model's input


@pytest.mark.parametrize("change, expected", [
    ({"h": np.zeros((1, 16, 1), dtype="f4")},
     "data.calibration: feed 0, input 'h' has shape (1, 16, 1); the model takes (1, 1, 16)"),
    ({"t": np.array([1], dtype=np.int64)},
     "feed 0, input 't' has shape (1,); the model takes () in one call"),
    ({"x": np.zeros((1, 8), dtype=np.int64)}, "input 'x' has dtype int64; the model takes float32"),
    ({"x": np.full((1, 8), np.nan, dtype="f4")}, "input 'x' holds NaN or infinity"),
    ({"extra": np.zeros(3)}, "has key(s) ['extra'] that are not inputs"),
    ({"x": "hello"}, "input 'x': holds str"),
])
def test_a_feed_that_does_not_fit_is_named(change, expected):
    feed = {**_step_feeds(1)[0], **change}
    with pytest.raises(DataError) as error:
        to_feeds([feed], STEP, False, "data.calibration")
    assert expected in str(error.value)


def test_a_missing_input_and_mixed_labels_are_named():
    first, second = _step_feeds(2)
    del second["t"]
    with pytest.raises(DataError, match=r"feed 1 lacks input\(s\) \['t'\]"):
        to_feeds([first, second], STEP, False, "data")
    first, second = _step_feeds(2)
    del second["labels"]
    with pytest.raises(DataError, match="some feeds have labels and others not"):
        to_feeds([first, second], STEP, False, "data")


def test_an_endless_generator_is_refused_not_read_forever():
    def endless():
        while True:
            yield {"image": IMAGES[:1]}
    with pytest.raises(DataError, match=f"more than {MAX_FEEDS} feeds"):
        to_feeds(endless(), IMAGE, False, "data")


def test_what_is_not_data_is_named():
    with pytest.raises(DataError, match="the data is int"):
        to_feeds(42, IMAGE, False, "data")
    with pytest.raises(DataError, match=r"item 0 is set"):
        to_feeds([{1, 2}], IMAGE, False, "data")
