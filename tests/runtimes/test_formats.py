"""runtimes/formats.py and runtimes/lm/engines.py: a model's format is recognized from
its path, with the engine that opens it; a path that is none of them gets one message
naming every format the runner opens; the engines a format names exist."""
import pytest

from runtimes import engines, formats
from runtimes.errors import RuntimeInputError
from runtimes.lm import engines as lm_engines
from runtimes.lm.engines import for_path


def test_each_language_format_is_recognized_by_its_path(tmp_path):
    folder = tmp_path / "genai"
    folder.mkdir()
    (folder / "genai_config.json").write_text("{}")
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert [part.name for part in for_path(folder)] == ["genai", "onnxruntime-genai"]
    assert [part.name for part in for_path(tmp_path / "m.gguf")] == ["gguf", "llama.cpp"]
    ov = tmp_path / "ov"
    ov.mkdir()
    for name in ("openvino_model.xml", "openvino_model.bin", "openvino_tokenizer.xml"):
        (ov / name).write_bytes(b"12")
    assert [part.name for part in for_path(ov)] == ["ovgenai", "openvino-genai"]
    assert for_path(ov)[0].size(ov) == 4           # the model's IR and weights, no tokenizer


def test_an_openvino_genai_folder_runs_on_the_cpu_only(tmp_path):
    from runtimes.errors import ProviderUnavailable
    from runtimes.lm.ovgenai import OVGenaiModel, kv_cache_bytes
    from runtimes.lm.provider import LMProvider
    (tmp_path / "config.json").write_text('{"num_hidden_layers": 2, "hidden_size": 64, '
                                          '"num_attention_heads": 4, "num_key_value_heads": 2}')
    assert kv_cache_bytes(tmp_path, 10) == 2 * 2 * 2 * 16 * 10 * 4
    with pytest.raises(RuntimeInputError, match="not an OpenVINO GenAI model folder"):
        OVGenaiModel(tmp_path)
    for name in ("openvino_model.xml", "openvino_tokenizer.xml"):
        (tmp_path / name).write_text("x")
    with pytest.raises(ProviderUnavailable, match="on the CPU here"):
        OVGenaiModel(tmp_path, provider=LMProvider("CUDAExecutionProvider", ()))


def test_a_tensor_file_is_recognized_by_its_suffix(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"x")
    (tmp_path / "m.xml").write_bytes(b"x")
    (tmp_path / "m.bin").write_bytes(b"123")
    assert formats.of_path(tmp_path / "m.onnx").name == "onnx"
    assert formats.of_path(tmp_path / "m.xml").size(tmp_path / "m.xml") == 4  # with its .bin


@pytest.mark.parametrize("name", ["model.onnx", "missing.gguf", "folder"])
def test_a_path_of_no_language_format_names_them_all(tmp_path, name):
    if name == "folder":
        (tmp_path / name).mkdir()
    elif name != "missing.gguf":
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(RuntimeInputError) as caught:
        for_path(tmp_path / name)
    assert "is not a language model this runner opens" in str(caught.value)
    assert all(formats.get(n).noun in str(caught.value)
               for n in formats.names(formats.LANGUAGE, deployable=True))


@pytest.mark.parametrize("row", [r for r in formats.FORMATS if r.deployable],
                         ids=lambda row: row.name)
def test_every_engine_a_format_names_is_registered(row):
    known = engines.names() if row.kind == formats.TENSOR else \
        tuple(e.name for e in lm_engines.all_engines())
    assert set(row.engines) <= set(known)


def test_an_unknown_format_is_named_with_the_known_ones():
    with pytest.raises(RuntimeInputError, match="unknown model format 'tflte'; known: torch"):
        formats.get("tflte")
    assert engines.for_format("tflte") == ()
