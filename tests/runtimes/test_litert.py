"""LiteRT adapter on real TFLite models: the trained digits CNN, fp32 and full-int8
(made by tests/fixtures/make_tflite_fixtures.py)."""
import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from runtimes import load
from runtimes.errors import RuntimeInputError
from runtimes.metrics import accuracy, fidelity
from tests.conftest import QUICKSTART, REPO
from tests.runtimes.test_torch_free import BLOCK_TORCH

pytest.importorskip("ai_edge_litert", reason="the LiteRT runtime (ai-edge-litert) is not installed")

FIXTURES = REPO / "tests" / "fixtures"
FP32, INT8 = FIXTURES / "digits_cnn_fp32.tflite", FIXTURES / "digits_cnn_int8.tflite"


@pytest.fixture(scope="module")
def held_out():
    spec = importlib.util.spec_from_file_location("qs_data", QUICKSTART / "data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    data = module.evaluation()
    return data["image"], data["labels"]


def _predict(session, images):
    name = session.inputs[0].name
    return np.concatenate([session.run({name: images[i:i + 1]})[0] for i in range(len(images))])


@pytest.mark.parametrize("path", [FP32, INT8], ids=["fp32", "int8"])
def test_trained_digits_model_keeps_its_accuracy(path, held_out):
    images, labels = held_out
    with load(str(path), threads=2) as session:
        assert session.engine == "litert"
        assert session.inputs[0].shape == (1, 1, 8, 8) and session.inputs[0].dtype == "float32"
        assert accuracy(_predict(session, images), labels) >= 0.97


def test_int8_io_is_quantized_with_scale_and_zero_point(held_out):
    images, _ = held_out
    with load(str(INT8)) as quantized, load(str(FP32)) as reference:
        info = quantized.describe()
        assert info["quantized_io"] is True and info["xnnpack"] is True
        assert info["xnnpack_applied"] is True and info["threads"] == 1   # LiteRT's default
        out_q, out_f = _predict(quantized, images[:50]), _predict(reference, images[:50])
    assert out_q.dtype == np.float32  # dequantized for the caller
    agreement = fidelity(out_q, out_f)
    assert agreement["top1_agreement"] >= 0.96 and agreement["cosine"] >= 0.99


def test_xnnpack_can_be_switched_off(held_out):
    images, _ = held_out
    with load(str(FP32), xnnpack=False) as plain, load(str(FP32)) as delegated:
        assert plain.describe()["xnnpack"] is False
        assert plain.describe()["xnnpack_applied"] is False
        assert delegated.describe()["xnnpack_applied"] is True
        np.testing.assert_allclose(_predict(plain, images[:20]), _predict(delegated, images[:20]),
                                   atol=1e-4)


def test_bench_cli_on_tflite_without_torch(held_out, tmp_path):
    images, labels = held_out
    inputs = tmp_path / "eval.npz"
    np.savez(inputs, image=images, __labels__=labels)  # matched to the model's input in order
    code = (f"from runtimes.bench import main; sys.exit(main(['{INT8}', '--inputs', '{inputs}', "
            "'--runs', '20', '--threads', '2', '--json']))")
    child = subprocess.run([sys.executable, "-c", BLOCK_TORCH + code], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
    assert result["torch_loaded"] is False and result["runtime"]["engine"] == "litert"
    assert result["metric"]["name"] == "accuracy" and result["metric"]["value"] >= 0.97
    assert result["metric"]["samples"] == len(labels)


def test_corrupt_tflite_is_a_clear_error(tmp_path):
    broken = tmp_path / "broken.tflite"
    broken.write_bytes(INT8.read_bytes()[:500])
    with pytest.raises(RuntimeInputError, match="LiteRT cannot load"):
        load(str(broken))


def test_int8_inputs_are_converted_once_before_timing(held_out):
    images, _ = held_out
    with load(str(INT8), threads=2) as session:
        name = session.inputs[0].name
        native = session.native_feeds({name: images[:1]})
        assert native[name].dtype == np.int8  # what measure() times with
        np.testing.assert_array_equal(session.run(native)[0], session.run({name: images[:1]})[0])
    with load(str(FP32), threads=2) as session:
        name = session.inputs[0].name
        assert session.native_feeds({name: images[:1]})[name].dtype == np.float32
