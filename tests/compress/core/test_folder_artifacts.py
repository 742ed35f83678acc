"""A folder as an artifact (a language model's onnxruntime-genai folder): its files in a
stable order, one sha256 over names and contents, its size the sum of its files, and a
committed stage whose folder was altered is not trusted again (compress.core.artifacts)."""
from __future__ import annotations

import os
from pathlib import Path

from compress.core.artifacts import (STAGE_RECORD, Output, StageDir, artifact_files,
                                     sha256_artifact)

KEY = "k" * 64


def write_folder(folder: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def commit_model(run_dir: Path, shared: Path | None = None) -> tuple[StageDir, list]:
    """A stage that wrote the folder `model` (two files, one nested) and committed it."""
    stage = StageDir(run_dir, "01-x", shared=shared)
    tmp = stage.begin()
    write_folder(tmp / "model", {"model.onnx": b"graph" * 10,
                                 "data/model.onnx.data": b"\1" * 300})
    artifacts = stage.commit(KEY, [Output(tmp / "model", "genai", "fp32", {})], "export.genai",
                             None, {})
    return stage, artifacts


def test_the_digest_of_a_folder_follows_a_files_content(tmp_path):
    folder = write_folder(tmp_path / "m", {"model.onnx": b"abc", "genai_config.json": b"{}"})
    before = sha256_artifact(folder)
    assert sha256_artifact(folder) == before
    (folder / "model.onnx").write_bytes(b"abd")
    assert sha256_artifact(folder) != before


def test_the_digest_of_a_folder_follows_a_files_name(tmp_path):
    folder = write_folder(tmp_path / "m", {"model.onnx": b"abc", "genai_config.json": b"{}"})
    before = sha256_artifact(folder)
    (folder / "model.onnx").rename(folder / "other.onnx")   # the same bytes, renamed
    assert sha256_artifact(folder) != before


def test_the_digest_of_a_folder_follows_a_file_moved_into_a_subfolder(tmp_path):
    folder = write_folder(tmp_path / "m", {"model.onnx": b"abc"})
    before = sha256_artifact(folder)
    (folder / "sub").mkdir()
    (folder / "model.onnx").rename(folder / "sub" / "model.onnx")
    assert sha256_artifact(folder) != before


def test_the_digest_of_a_folder_does_not_depend_on_where_it_is(tmp_path):
    files = {"model.onnx": b"abc", "tokenizer/vocab.json": b"[]"}
    assert sha256_artifact(write_folder(tmp_path / "one", files)) == \
        sha256_artifact(write_folder(tmp_path / "two", files))


def test_the_digest_of_a_folder_tells_file_boundaries_apart(tmp_path):
    # one file "a" holding b"b\0X", against an empty "a" beside "b" holding b"X": other
    # contents, which must not hash alike (the digest frames each file's bytes)
    joined = write_folder(tmp_path / "joined", {"a": b"b\0X"})
    split = write_folder(tmp_path / "split", {"a": b"", "b": b"X"})
    assert sha256_artifact(joined) != sha256_artifact(split)


def test_artifact_files_lists_nested_files_sorted_without_folders(tmp_path):
    folder = write_folder(tmp_path / "m", {"z.json": b"1", "m/n/o.onnx": b"2",
                                           "a/b.bin": b"3", "genai_config.json": b"4"})
    (folder / "empty").mkdir()
    expected = [folder / "a/b.bin", folder / "genai_config.json", folder / "m/n/o.onnx",
                folder / "z.json"]
    assert artifact_files(folder) == expected
    assert artifact_files(str(folder)) == expected


def test_a_committed_folder_is_one_artifact_sized_as_its_files(tmp_path):
    stage, artifacts = commit_model(tmp_path)
    [artifact] = artifacts
    assert (artifact.id, artifact.format, artifact.precision, artifact.stage) == \
        ("01-x", "genai", "fp32", "export.genai")
    assert artifact.path == os.path.join("01-x", "model")
    assert artifact.size_bytes == 50 + 300
    assert artifact.sha256 == sha256_artifact(tmp_path / "01-x" / "model")
    assert (tmp_path / "01-x" / STAGE_RECORD).is_file() and not stage.tmp.exists()


def test_a_committed_folder_is_found_again_by_its_key(tmp_path):
    stage, artifacts = commit_model(tmp_path)
    assert stage.cached(KEY) == artifacts
    assert StageDir(tmp_path, "01-x").cached(KEY) == artifacts
    assert stage.cached("another key") is None


def test_an_altered_file_in_a_committed_folder_is_not_trusted(tmp_path):
    stage, _ = commit_model(tmp_path)
    (tmp_path / "01-x" / "model" / "data" / "model.onnx.data").write_bytes(b"\2" * 300)
    assert stage.cached(KEY) is None


def test_a_file_added_to_a_committed_folder_is_not_trusted(tmp_path):
    stage, _ = commit_model(tmp_path)
    (tmp_path / "01-x" / "model" / "extra.onnx").write_bytes(b"")
    assert stage.cached(KEY) is None


def test_a_file_removed_from_a_committed_folder_is_not_trusted(tmp_path):
    stage, _ = commit_model(tmp_path)
    (tmp_path / "01-x" / "model" / "model.onnx").unlink()
    assert stage.cached(KEY) is None


def test_a_shared_folder_artifact_is_linked_into_another_run(tmp_path):
    shared = tmp_path / "runs" / ".stages"
    _, [made] = commit_model(tmp_path / "runs" / "first", shared)
    other = StageDir(tmp_path / "runs" / "second", "01-x", shared=shared)
    [found] = other.from_shared(KEY)
    assert (found.sha256, found.size_bytes, found.path) == (made.sha256, made.size_bytes,
                                                            made.path)
    assert (tmp_path / "runs" / "second" / "01-x" / "model" / "data" / "model.onnx.data"
            ).read_bytes() == b"\1" * 300
    assert other.cached(KEY) == [found]
