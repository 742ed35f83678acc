"""data.text read as one string (compress.data.text.read_text): CPython's own docs, a UTF-8
file beside the pipeline, a loader's string or strings; every mistake a DataError naming
data.text.file or data.text.loader."""
from __future__ import annotations

import pytest

from compress.config.data import TextData
from compress.data.text import read_text, text_sha256
from compress.errors import DataError


def test_python_docs_is_long_english_text_the_same_each_time(tmp_path):
    spec = TextData(python_docs=True)
    first = read_text(spec, tmp_path)
    assert len(first) > 100_000 and "the" in first.split()
    assert read_text(spec, tmp_path / "elsewhere") == first
    assert text_sha256(first) == text_sha256(read_text(spec, tmp_path))


def test_a_relative_file_is_read_from_the_pipelines_folder(tmp_path):
    (tmp_path / "corpus.txt").write_text("héllo wörld — ünïcode\n", encoding="utf-8")
    assert read_text(TextData(file="corpus.txt"), tmp_path) == "héllo wörld — ünïcode\n"


def test_an_absolute_file_ignores_the_pipelines_folder(tmp_path):
    (tmp_path / "corpus.txt").write_text("text", encoding="utf-8")
    spec = TextData(file=str(tmp_path / "corpus.txt"))
    assert read_text(spec, tmp_path / "other") == "text"


def test_a_missing_file_is_a_data_error_naming_data_text_file(tmp_path):
    with pytest.raises(DataError) as info:
        read_text(TextData(file="nowhere.txt"), tmp_path)
    message = str(info.value)
    assert message.startswith("data.text.file") and "nowhere.txt" in message


def test_a_file_that_is_not_utf8_is_a_data_error_naming_data_text_file(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    with pytest.raises(DataError) as info:
        read_text(TextData(file="latin1.txt"), tmp_path)
    message = str(info.value)
    assert message.startswith("data.text.file") and "UTF-8" in message
    assert "Traceback" not in message and "\n" not in message


def test_a_loader_from_python_returning_a_string(tmp_path):
    assert read_text(TextData(loader=lambda: "one text"), tmp_path) == "one text"


def test_a_loader_returning_strings_joins_them_by_blank_lines(tmp_path):
    spec = TextData(loader=lambda: ["first", "second", "third"])
    assert read_text(spec, tmp_path) == "first\n\nsecond\n\nthird"


@pytest.mark.parametrize("made", [42, ["a", 1], [], {"text": "a"}, None],
                         ids=["int", "mixed-list", "empty-list", "dict", "none"])
def test_a_loader_returning_anything_else_is_a_data_error_naming_the_loader(tmp_path, made):
    with pytest.raises(DataError) as info:
        read_text(TextData(loader=lambda: made), tmp_path)
    message = str(info.value)
    assert message.startswith("data.text.loader returned")
    assert "a string or a non-empty list of strings" in message


def test_a_loader_named_in_yaml_is_imported_from_the_pipelines_folder(tmp_path):
    (tmp_path / "my_texts.py").write_text("def load():\n    return ['a', 'b']\n")
    assert read_text(TextData(loader="my_texts:load"), tmp_path) == "a\n\nb"


def test_a_loader_that_cannot_be_imported_is_a_data_error_naming_it(tmp_path):
    with pytest.raises(DataError, match="data.text.loader: cannot import module 'no_such_mod'"):
        read_text(TextData(loader="no_such_mod:load"), tmp_path)


def test_a_loader_that_raises_is_a_data_error_naming_the_loader(tmp_path):
    # a user's loader failing is bad input (exit 2), as it is for data.calibration's
    # loaders (compress/data/feeds.py), not an internal error with a traceback (exit 3)
    def broken():
        raise ValueError("the corpus server said no")
    with pytest.raises(DataError) as info:
        read_text(TextData(loader=broken), tmp_path)
    message = str(info.value)
    assert "data.text.loader" in message and "the corpus server said no" in message
