"""What onnxruntime-genai's builder (0.18) writes but onnxruntime cannot load, refused
before the builder runs, with the setting to use instead: the output layer at INT8 under
its default method, and asymmetric INT4 under its default method, when the embeddings
are tied to the output layer."""
import json

import pytest

from compress.quant.lm.genai_route import LM_HEAD, GenaiRoute


@pytest.fixture
def tied(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    return GenaiRoute(folder, tmp_path / "float")


def test_the_output_layer_at_int8_under_the_default_method_is_refused(tied, tmp_path):
    with pytest.raises(ValueError, match="use method k_quant or rtn"):
        tied.build("int4", tmp_path / "out", high_nodes=(LM_HEAD,))


def test_asymmetric_int4_under_the_default_method_is_refused(tied, tmp_path):
    with pytest.raises(ValueError, match="use method k_quant .* or symmetric: true"):
        tied.build("int4", tmp_path / "out", extra_options={"is_symmetric": False})
