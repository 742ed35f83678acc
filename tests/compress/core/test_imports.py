import pytest

from compress.errors import ModelError
from compress.core.imports import import_callable


def test_same_module_name_in_two_pipeline_folders(tmp_path):
    for name, value in (("a", 1), ("b", 2)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.py").write_text(f"def build():\n    return {value}\n")
    first = import_callable("model:build", tmp_path / "a", ModelError, "model")
    second = import_callable("model:build", tmp_path / "b", ModelError, "model")
    assert (first(), second()) == (1, 2)
    assert import_callable("model:build", tmp_path / "a", ModelError, "model")() == 1


def test_missing_attribute_and_module(tmp_path):
    (tmp_path / "model.py").write_text("x = 1\n")
    with pytest.raises(ModelError, match="has no attribute 'build'"):
        import_callable("model:build", tmp_path, ModelError, "model.torch.factory")
    with pytest.raises(ModelError, match="cannot import module 'nothere'"):
        import_callable("nothere:build", tmp_path, ModelError, "model.torch.factory")
