"""model.causal_lm: what a path holds is named or refused plainly; the builder refuses
what it cannot build before it starts. (The real model: test_smollm2_routes.py.)"""
import pytest

from compress.errors import ModelError
from compress.model.causal_lm import kind_of, open_causal_lm, tokenizer_sha256


def test_each_kind_is_told_by_its_files(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    (tmp_path / "genai").mkdir()
    (tmp_path / "genai" / "genai_config.json").write_text("{}")
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert [kind_of(tmp_path / n) for n in ("hf", "genai", "m.gguf")] == ["hf", "genai", "gguf"]


def test_anything_else_is_refused_with_the_three_it_may_be(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ModelError, match="neither a Hugging Face folder"):
        kind_of(tmp_path / "weights.bin")
    with pytest.raises(ModelError, match="does not exist"):
        open_causal_lm(tmp_path / "missing", tmp_path)


def test_the_tokenizer_hash_follows_its_files(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"a": 1}')
    first = tokenizer_sha256(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"a": 2}')
    assert tokenizer_sha256(tmp_path) != first


def test_the_builder_refuses_a_folder_without_a_config_and_an_unknown_precision(tmp_path):
    from export.genai import BuildFailed, build_genai
    with pytest.raises(BuildFailed, match="no config.json"):
        build_genai(tmp_path, tmp_path / "out")
    with pytest.raises(BuildFailed, match="precision 'int2'"):
        build_genai(tmp_path, tmp_path / "out", precision="int2")
    assert not (tmp_path / "out").exists()
