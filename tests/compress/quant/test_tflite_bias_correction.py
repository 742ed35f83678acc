"""TFLite bias correction must shrink the per-channel mean error it targets, and keep the
model's accuracy, on the committed digits CNN fixtures (no conversion needed)."""
import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed")

from compress.quant.passes.sequential_correction.tflite import _mean_error, correct_biases  # noqa: E402
from compress.quant.tflite.graph import correctable_layers  # noqa: E402
from compress.quant.tflite.graph import interpreter as _interpreter  # noqa: E402
from compress.quant.tflite.graph import invoke as _invoke  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
QUICKSTART = Path(__file__).resolve().parents[3] / "examples" / "quickstart"


def _digits():
    spec = importlib.util.spec_from_file_location("quickstart_data", QUICKSTART / "data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.calibration(256), module.evaluation()


def _layer_errors(float_path: Path, quantized_path: Path, feeds: list[dict]) -> list[float]:
    float_bytes, quantized = float_path.read_bytes(), quantized_path.read_bytes()
    reference, model = _interpreter(float_bytes, 2), _interpreter(quantized, 2)
    errors = []
    for layer in correctable_layers(float_bytes, quantized):
        references = []
        for feed in feeds:
            _invoke(reference, feed)
            references.append(reference.get_tensor(layer.reference).copy())
        errors.append(float(np.abs(_mean_error(model, layer, references, feeds)).mean()))
    return errors


def _accuracy(path: Path, images: np.ndarray, labels: np.ndarray) -> float:
    model = _interpreter(path.read_bytes(), 2)
    out = model.get_output_details()[0]
    scale, zero = out["quantization"]
    hits = 0
    for image, label in zip(images, labels):
        _invoke(model, {"image": image[None]})
        logits = (model.get_tensor(out["index"]).astype(np.float32) - zero) * scale
        hits += int(logits.argmax() == label)
    return hits / len(labels)


def test_correction_moves_int8_layer_means_onto_the_float_ones(tmp_path):
    calibration, evaluation = _digits()
    feeds = [{"image": calibration["image"][i:i + 1]} for i in range(0, 256, 4)]
    float_path = FIXTURES / "digits_cnn_fp32.tflite"
    quantized = tmp_path / "int8.tflite"
    shutil.copy(FIXTURES / "digits_cnn_int8.tflite", quantized)

    before = _layer_errors(float_path, quantized, feeds)
    accuracy_before = _accuracy(quantized, evaluation["image"], evaluation["labels"])
    summary = correct_biases(float_path, quantized, feeds, threads=2)
    after = _layer_errors(float_path, quantized, feeds)

    assert summary["layers_corrected"] == len(before) == 4  # 3 conv + the classifier
    assert sum(after) < 0.5 * sum(before)
    assert all(a <= b + 1e-3 for a, b in zip(after, before))
    assert _accuracy(quantized, evaluation["image"], evaluation["labels"]) >= accuracy_before - 0.01


def test_a_model_without_int32_biases_is_left_alone(tmp_path):
    float_path = FIXTURES / "digits_cnn_fp32.tflite"
    copy = tmp_path / "fp32.tflite"
    shutil.copy(float_path, copy)
    assert correct_biases(float_path, copy, [{"image": np.zeros((1, 1, 8, 8), np.float32)}]) == \
        {"layers_corrected": 0, "samples": 1}
    assert copy.read_bytes() == float_path.read_bytes()
