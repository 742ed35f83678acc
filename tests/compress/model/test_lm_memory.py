"""The memory check before a language model is exported: its parameters read from the
safetensors headers, its KV cache per token from config.json, 4-bit weights plus the
cache at each profile's context length against the device's memory."""
import json

import numpy as np
import pytest

from compress.errors import ModelError
from compress.model.lm_memory import BITS_AT_4, check_fits, footprint
from profiles import Profile


def _folder(tmp_path, **config):
    from safetensors.numpy import save_file
    save_file({"embed": np.zeros((1000, 64), np.float32),
               "layers.0.q": np.zeros((64, 64), np.float32)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(
        {"num_attention_heads": 8, "hidden_size": 64, "num_hidden_layers": 4, **config}))
    return tmp_path


def _profile(memory_mb, context=2048, name="board"):
    return (name, Profile.model_validate({
        "name": name, "device": {"arch": "any", "memory_mb": memory_mb},
        "language_model": {"context_tokens": context}}))


def test_parameters_come_from_the_headers_and_the_cache_from_the_config(tmp_path):
    found = footprint(_folder(tmp_path, num_key_value_heads=2))
    assert found.parameters == 1000 * 64 + 64 * 64
    assert found.kv_bytes_per_token == 2 * 4 * 2 * 8 * 4   # k+v, layers, kv heads, head, fp32
    assert found.megabytes(100) == pytest.approx(
        (found.parameters * BITS_AT_4 / 8 + found.kv_bytes_per_token * 100) / 2**20)


def test_a_model_no_target_can_hold_fails_before_export_naming_each(tmp_path):
    folder, notes = _folder(tmp_path), []
    with pytest.raises(ModelError, match="cannot fit any target even at 4 bits") as info:
        check_fits(folder, [_profile(1, context=10**6)], notes.append)
    assert "board: about" in str(info.value) and "context_tokens" in str(info.value)


def test_one_target_too_small_is_named_and_the_run_goes_on(tmp_path):
    folder, notes = _folder(tmp_path), []
    check_fits(folder, [_profile(1, context=10**6, name="small"), _profile(4096)],
               notes.append)
    assert len(notes) == 1 and notes[0].startswith("will not fit small:")
    check_fits(folder, [("any", Profile.model_validate(
        {"name": "any", "device": {"arch": "any"}}))], notes.append)   # no memory: no check
    assert len(notes) == 1
