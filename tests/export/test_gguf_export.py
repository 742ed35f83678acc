"""export/gguf.py: a GGUF file written again in float32 for llama.cpp's quantizer: every
tensor the `gguf` package's dequantization of it, every metadata field copied, the file
type F32. On a small GGUF written here with real Q8_0 and Q4_1 blocks (the SmolLM2 file
goes through it in tests/compress/model/test_smollm2_routes.py, with llama.cpp)."""
import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from export.gguf import GGUFExportError, float_gguf  # noqa: E402

T = gguf.GGMLQuantizationType


def _small_gguf(path):
    rng = np.random.default_rng(0)
    weights = {"token_embd.weight": (rng.standard_normal((8, 64)), T.Q8_0),
               "blk.0.ffn_down.weight": (rng.standard_normal((64, 32)), T.Q4_1),
               "blk.0.attn_norm.weight": (rng.standard_normal(64), T.F32)}
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    writer.add_token_list(["<s>", "a", "b"])
    writer.add_token_scores([0.0, -1.0, -2.0])
    for name, (value, kind) in weights.items():
        value = value.astype(np.float32)
        data = value if kind == T.F32 else gguf.quants.quantize(value, kind)
        writer.add_tensor(name, data, raw_dtype=None if kind == T.F32 else kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_every_tensor_is_its_dequantized_float_and_the_metadata_is_kept(tmp_path):
    source = gguf.GGUFReader(str(_small_gguf(tmp_path / "q.gguf")))
    out = gguf.GGUFReader(str(float_gguf(tmp_path / "q.gguf", tmp_path / "f32.gguf")))
    assert {t.name: t.tensor_type for t in out.tensors} == {
        t.name: T.F32 for t in source.tensors}
    for before, after in zip(source.tensors, out.tensors):
        expected = gguf.quants.dequantize(before.data, before.tensor_type)
        assert np.array_equal(np.asarray(after.data).reshape(expected.shape), expected)
    assert out.fields["general.file_type"].contents() == gguf.LlamaFileType.ALL_F32
    for name in ("general.architecture", "llama.block_count", "llama.context_length",
                 "tokenizer.ggml.tokens", "tokenizer.ggml.scores"):
        assert out.fields[name].contents() == source.fields[name].contents(), name
    assert not list(tmp_path.glob("*.partial"))


def test_a_source_that_is_not_a_gguf_file_is_refused_and_nothing_is_written(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    with pytest.raises(GGUFExportError, match="convert_hf_to_gguf"):
        float_gguf(tmp_path / "hf", tmp_path / "f32.gguf")
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 20)
    with pytest.raises(GGUFExportError, match="cannot be read as a GGUF file"):
        float_gguf(broken, tmp_path / "f32.gguf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.gguf", "hf"]
