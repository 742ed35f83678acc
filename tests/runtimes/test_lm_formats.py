"""runtimes/lm/formats.py: a language model's format is recognized from its path, and a
path that is none of them gets one message naming every format the runner opens."""
import pytest

from runtimes.errors import RuntimeInputError
from runtimes.lm.formats import FORMATS, format_of


def test_each_format_is_recognized_by_its_path(tmp_path):
    folder = tmp_path / "genai"
    folder.mkdir()
    (folder / "genai_config.json").write_text("{}")
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert format_of(folder).engine == "onnxruntime-genai"
    assert format_of(tmp_path / "m.gguf").engine == "llama.cpp"


@pytest.mark.parametrize("name", ["model.onnx", "missing.gguf", "folder"])
def test_a_path_of_no_format_names_them_all(tmp_path, name):
    if name == "folder":
        (tmp_path / name).mkdir()
    elif name != "missing.gguf":
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(RuntimeInputError) as caught:
        format_of(tmp_path / name)
    assert "is not a language model this runner opens" in str(caught.value)
    assert all(f.what in str(caught.value) for f in FORMATS)
