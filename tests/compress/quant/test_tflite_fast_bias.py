"""The one-pass TFLite bias correction, on the committed digits CNN fixtures: it must
shrink the first layer's per-channel mean error, touch nothing but the int32 biases,
and keep the accuracy."""
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed")

from compress.quant.passes.tflite_candidates import correct_biases_fast  # noqa: E402
from compress.quant.passes.fast_correction.tflite import _Taps, _tap_sums  # noqa: E402
from compress.quant.tflite.graph import bias_views, correctable_layers  # noqa: E402
from tests.compress.quant.test_tflite_bias_correction import (_accuracy, _digits,  # noqa: E402
                                                        _layer_errors)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FLOAT = FIXTURES / "digits_cnn_fp32.tflite"


def _without_biases(content: bytes, layers) -> bytearray:
    model = bytearray(content)
    for view in bias_views(model, layers):
        view[:] = 0
    return model


def test_fast_correction_moves_the_first_layer_mean_and_only_the_biases(tmp_path):
    calibration, evaluation = _digits()
    feeds = [{"image": calibration["image"][i:i + 1]} for i in range(0, 256, 4)]
    quantized = tmp_path / "int8.tflite"
    shutil.copy(FIXTURES / "digits_cnn_int8.tflite", quantized)
    original = quantized.read_bytes()
    layers = correctable_layers(FLOAT.read_bytes(), original)

    before = _layer_errors(FLOAT, quantized, feeds)
    accuracy_before = _accuracy(quantized, evaluation["image"], evaluation["labels"])
    summary = correct_biases_fast(FLOAT, quantized, feeds, threads=2)
    corrected = quantized.read_bytes()

    assert summary["method"] == "fast" and summary["layers_corrected"] == len(layers) == 4
    assert corrected != original
    assert _without_biases(corrected, layers) == _without_biases(original, layers)
    after = _layer_errors(FLOAT, quantized, feeds)
    # the first layer reads the model's input: no upstream error, only its own. Its fused
    # ReLU leaves part of the shift (the error is measured where neither model clipped;
    # the shift is the pre-activation one, over all positions)
    assert after[0] < 0.8 * before[0]
    assert sum(after) < 0.7 * sum(before)
    assert _accuracy(quantized, evaluation["image"], evaluation["labels"]) >= accuracy_before


def test_tap_sums_count_each_input_position_once_per_output_that_reads_it():
    """Strided, dilated, padded: against the positions listed one output at a time."""
    x = np.random.default_rng(0).standard_normal((2, 9, 7, 3))
    taps = _Taps(kernel=(3, 2), stride=(2, 3), dilation=(2, 1), pad=(2, 1), out=(5, 3))
    expected = np.zeros((3, 2, 3))
    for oh in range(5):
        for ow in range(3):
            for kh in range(3):
                for kw in range(2):
                    h, w = oh * 2 + kh * 2 - 2, ow * 3 + kw - 1
                    if 0 <= h < 9 and 0 <= w < 7:  # outside: padding, zeros
                        expected[kh, kw] += x[:, h, w].sum(axis=0)
    np.testing.assert_allclose(_tap_sums(x, taps), expected, rtol=1e-12, atol=1e-12)


def test_a_model_without_int32_biases_is_left_alone(tmp_path):
    copy = tmp_path / "fp32.tflite"
    shutil.copy(FLOAT, copy)
    summary = correct_biases_fast(FLOAT, copy, [{"image": np.zeros((1, 1, 8, 8), np.float32)}])
    assert summary == {"layers_corrected": 0, "samples": 1, "method": "fast"}
    assert copy.read_bytes() == FLOAT.read_bytes()
