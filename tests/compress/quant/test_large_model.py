"""Large models, tensor by tensor: the ONNX file is read and written one weight at a time
(byte for byte what onnx itself writes), and the quantize stage's tensor-by-tensor path
(compress/quant/streamed/backends.py, taken from STREAMING_BYTES of weights) makes the same model
as onnxruntime's in-memory quantizers. Forced here on a small model of the same shape as
examples/large_model (Gemm with transB, MatMul + Add, ReLU), by lowering the threshold."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml

import compress
from compress.model.onnx_compat import copy_onnx, load_onnx, save_onnx
from compress.model import onnx_file
from compress.quant.streamed import backends as streamed
from compress.model.onnx_file import read_header, write_model

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "large_model"


@pytest.fixture
def small(tmp_path, monkeypatch) -> Path:
    """examples/large_model's model at 4 layers of 64 x 64, weights in an external file,
    with 8 calibration and 8 evaluation feeds beside it."""
    # loaded by path under a name of its own: other tests' examples have a model.py too
    spec = importlib.util.spec_from_file_location("large_model_example", EXAMPLE / "model.py")
    large = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(large)
    monkeypatch.setattr(large, "HIDDEN", 64)
    monkeypatch.setattr(large, "LAYERS", 4)
    monkeypatch.setattr(large, "TOKENS", 2)
    path = large.build(tmp_path / "small.onnx")
    large.write_data(tmp_path, calibration=8, evaluation=8)
    return path


def test_a_copy_is_byte_for_byte_what_onnx_saves(small, tmp_path):
    save_onnx(load_onnx(small), tmp_path / "saved.onnx")
    copy_onnx(small, tmp_path / "copied.onnx")
    assert (tmp_path / "copied.onnx").read_bytes() == (tmp_path / "saved.onnx").read_bytes()
    header = read_header(tmp_path / "copied.onnx")  # inline now: spans inside the file
    assert all(span.path == header.path for span in header.spans.values())
    assert not any(t.raw_data for t in header.model.graph.initializer if t.name in header.spans)
    for tensor in load_onnx(small).graph.initializer:
        assert np.array_equal(header.array(tensor.name), onnx.numpy_helper.to_array(tensor))
    write_model(header.model, header.spans, tmp_path / "again.onnx")
    assert (tmp_path / "again.onnx").read_bytes() == (tmp_path / "saved.onnx").read_bytes()


@pytest.mark.parametrize("damage, said", [("delete", "which is missing"),
                                          ("outside", "outside the model's folder")])
def test_a_copy_names_external_data_it_cannot_read(small, tmp_path, damage, said):
    from compress.errors import ModelError
    data = small.with_name(small.name + ".data")
    if damage == "delete":
        data.unlink()
    else:  # the model names its data file by a path that leaves its folder
        inner = tmp_path / "inner"
        inner.mkdir()
        model = onnx.load(str(small), load_external_data=False)
        for tensor in model.graph.initializer:
            for entry in tensor.external_data:
                if entry.key == "location":
                    entry.value = f"../{data.name}"
        onnx.save(model, str(inner / "m.onnx"))
        small = inner / "m.onnx"
    with pytest.raises(ModelError, match=said):
        copy_onnx(small, tmp_path / "copy.onnx")
    assert not (tmp_path / "copy.onnx").exists()


def test_over_the_inline_limit_the_weights_go_to_one_data_file(small, tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_file, "INLINE_LIMIT", 1000)  # stands in for 2 GiB
    header = read_header(small)
    write_model(header.model, header.spans, tmp_path / "big.onnx")
    assert (tmp_path / "big.onnx.data").is_file()
    feed = {"h0": np.ones((2, 64), np.float32)}
    run = [ort.InferenceSession(str(p)).run(None, feed)[0] for p in (small, tmp_path / "big.onnx")]
    assert np.array_equal(*run)


def _run(folder: Path, name: str, stage: dict, force: bool = False) -> compress.api.Result:
    pipeline = {"name": name, "model": {"onnx": "small.onnx"},
                "data": {"calibration": "calibration.npz", "evaluation": "evaluation.npz",
                         "metric": {"type": "fidelity", "primary": "cosine"}},
                "stages": [{"type": "quantize", "name": "q", **stage}], "output": "runs"}
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(pipeline))
    return compress.run(str(folder / f"{name}.yaml"), quiet=True, force=force)


def _outputs(path: Path, feeds) -> list:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [session.run(None, {"h0": feed})[0] for feed in feeds]


@pytest.mark.parametrize("stage", [
    {"scheme": "int8-dynamic"},
    # the default bias correction and GPTQ rounding (a float pass over the whole model)
    # are not made tensor by tensor: compared without them
    {"scheme": "int8-static", "bias_correction": False, "weight_rounding": "nearest"},
    {"scheme": "int8-static", "calibration": "percentile", "per_channel": False,
     "bias_correction": False, "weight_rounding": "nearest"},
    {"scheme": "int4-weight-only", "block_size": 16},
], ids=["int8-dynamic", "int8-static", "int8-static-percentile", "int4"])
def test_tensor_by_tensor_makes_what_onnxruntime_makes(small, tmp_path, monkeypatch, stage):
    in_memory = _run(tmp_path, "in-memory", stage)
    monkeypatch.setattr(streamed, "STREAMING_BYTES", 0)  # every model is large now
    # forced: the stage cache shared by every run would otherwise serve the first one's
    by_tensor = _run(tmp_path, "by-tensor", stage, force=True)
    made = [r.artifacts[-1] for r in (in_memory, by_tensor)]
    assert "tensor_by_tensor" not in made[0].meta and "tensor_by_tensor" in made[1].meta
    assert made[0].meta["ops"] == made[1].meta["ops"]
    feeds = list(np.load(tmp_path / "evaluation.npz")["h0"].reshape(8, 2, 64))
    first, second = (_outputs(r.run_dir / a.path, feeds) for r, a in
                     zip((in_memory, by_tensor), made))
    for a, b in zip(first, second):  # onnxruntime's own numerics: the very same numbers
        assert np.array_equal(a, b)
    float_out = _outputs(small, feeds)
    cosine = np.mean([np.sum(a * f) / np.linalg.norm(a) / np.linalg.norm(f)
                      for a, f in zip(second, float_out)])
    assert cosine > 0.98


def test_excluded_layers_stay_float_tensor_by_tensor(small, tmp_path, monkeypatch):
    monkeypatch.setattr(streamed, "STREAMING_BYTES", 0)
    result = _run(tmp_path, "exclude", {"scheme": "int8-dynamic",
                                        "exclude_nodes": ["layer0", "layer1"]})
    graph = onnx.load(str(result.run_dir / result.artifacts[-1].path)).graph
    kept = {n.name: n.op_type for n in graph.node}
    assert kept["layer0"] == "Gemm" and kept["layer1"] == "MatMul"
    assert result.artifacts[-1].meta["matmuls_quantized"] == 2


def test_int4_keeps_excluded_gemms_float_on_both_paths(small, tmp_path, monkeypatch):
    stage = {"scheme": "int4-weight-only", "exclude_nodes": ["layer0", "layer1"]}
    in_memory = _run(tmp_path, "in-memory", stage)
    monkeypatch.setattr(streamed, "STREAMING_BYTES", 0)
    # forced: the stage cache shared by every run would otherwise serve the first one's
    by_tensor = _run(tmp_path, "by-tensor", stage, force=True)
    feeds = list(np.load(tmp_path / "evaluation.npz")["h0"].reshape(8, 2, 64))
    outputs = [_outputs(r.run_dir / r.artifacts[-1].path, feeds) for r in (in_memory, by_tensor)]
    for result in (in_memory, by_tensor):  # the Gemm layer0 became layer0_matmul, kept float
        assert result.artifacts[-1].meta["ops"]["MatMulNBits"] == 2
    assert all(np.array_equal(a, b) for a, b in zip(*outputs))


def test_an_accuracy_aware_search_calibrates_once(small, tmp_path, monkeypatch):
    from compress.quant.streamed import calibration as streamed_calibration
    calls = []
    calibrate = streamed_calibration.calibrate
    monkeypatch.setattr(streamed_calibration, "calibrate",
                        lambda *args: calls.append(args[1]) or calibrate(*args))
    monkeypatch.setattr(streamed, "STREAMING_BYTES", 0)
    result = _run(tmp_path, "aware", {"scheme": "int8-static", "max_drop": 0.0})
    report = result.artifacts[-1].meta["accuracy_aware"]
    assert len(report["sensitivity"]) == 4  # every layer tried alone in float
    assert len(calls) == 1


@pytest.mark.parametrize("settings, reason", [
    ({}, None),  # the defaults: checked bias correction and GPTQ are skipped, not refused
    ({"weight_rounding": "nearest", "bias_correction": False}, None),
    ({"weight_rounding": "gptq"}, "weight_rounding gptq"),
    ({"bias_correction": True}, "bias_correction"),
    ({"equalize": True}, "equalize"),
])
def test_settings_asked_for_that_only_the_in_memory_quantizer_makes(settings, reason):
    """A large model goes tensor by tensor unless a setting set on purpose needs
    onnxruntime's in-memory quantizer; defaults the streamed path cannot make do not."""
    from compress.quant.streamed.backends import _unsupported
    from compress.quant.schemes.int8_static import Int8Static
    assert _unsupported(Int8Static(name="int8", **settings)) == reason
