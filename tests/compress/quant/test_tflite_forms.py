"""TFLite files in the forms real apps ship them (issue 36): a custom op LiteRT provides
through XNNPACK, no SignatureDef, op codes in the deprecated field, fp16 weights behind
DEQUANTIZE ops, PRELU ops ai-edge-quantizer leaves float, and all of them at once. Each is
made from the trained digits CNN (tests/fixtures/tflite_forms.py), quantized int8-static
by the pipeline as a TFLite model source, then opened in LiteRT with its default op
resolver (as apps open files) and compared with the float file it came from."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import compress
from tests.conftest import QUICKSTART, pipeline_dict, write_pipeline
from tests.fixtures import tflite_forms

pytest.importorskip("ai_edge_quantizer", reason="ai-edge-quantizer is not installed")

# one range estimator, neither rounding nor correction: the forms, not the refinements,
# are under test here ("app" runs the stage's defaults, passes and check included)
FAST = {"bias_correction": False, "weight_rounding": "nearest", "calibration": "minmax"}
REPLACED = {"Convolution2DTransposeBias -> TRANSPOSE_CONV": 1}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tflite_forms")
    shutil.copy(QUICKSTART / "data.py", folder / "data.py")
    for form in tflite_forms.FORMS:
        tflite_forms.make(form, folder)
    return folder


@pytest.fixture(scope="module")
def images():
    """64 held-out digits, one [1, 1, 8, 8] image each."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("quickstart_data", QUICKSTART / "data.py")
    data = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(data)
    pictures = data.evaluation()["image"][:64]
    return [pictures[i:i + 1] for i in range(len(pictures))]


@pytest.fixture(scope="module")
def quantized(folder):
    """form -> (the int8-static artifact of the pipeline run on folder/<form>.tflite, its
    file); each run once, when a test first asks for it."""
    done = {}

    def run(form: str, settings: dict | None = None):
        if form not in done:
            stage = {"type": "quantize", "scheme": "int8-static", "name": "int8",
                     "samples": 64, **(FAST if settings is None else settings)}
            data = pipeline_dict(name=form, model={"tflite": f"{form}.tflite"},
                                 stages=[stage], targets=["host-cpu"])
            data["data"] = {"calibration": "data:calibration"}
            result = compress.run(write_pipeline(folder, data, f"{form}.yaml"))
            artifact = {a.id: a for a in result.artifacts}["int8"]
            done[form] = artifact, result.run_dir / artifact.path
        return done[form]
    return run


def outputs(path, images) -> np.ndarray:
    """The file's logits for `images`, run as apps run it: LiteRT's default op resolver
    and its delegates (XNNPACK), int8 inputs and outputs through their scales."""
    from ai_edge_litert.interpreter import Interpreter
    from runtimes.litert_session import dequantized, to_native
    model = Interpreter(model_path=str(path))
    model.allocate_tensors()
    (given,), (logits,) = model.get_input_details(), model.get_output_details()
    rows = []
    for image in images:
        model.set_tensor(given["index"], to_native(given, image))
        model.invoke()
        rows.append(dequantized(logits, model.get_tensor(logits["index"])))
    return np.concatenate(rows)


def assert_close(quantized_file, float_file, images) -> None:
    """Per image cosine over 0.99 and the same top-1 on nearly every image."""
    got, want = outputs(quantized_file, images), outputs(float_file, images)
    cosine = np.sum(got * want, 1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cosine.min() > 0.99, cosine.min()
    assert np.mean(got.argmax(1) == want.argmax(1)) >= 0.95


def assert_int8(artifact, float_ops: dict) -> None:
    meta = artifact.meta
    assert artifact.precision == "int8" and meta["tensors"]["dtypes"].get("int8")
    assert meta["float_ops"] == float_ops
    assert not meta["tensors"]["dtypes"].get("float16")
    assert bool(meta["tensors"]["float32_tensors"]) == bool(float_ops)


def test_a_custom_op_litert_provides_is_accepted_and_quantized(folder, quantized, images):
    from compress.model.source import check_tflite_file
    custom = folder / "custom_op.tflite"
    check_tflite_file(custom)  # refused before: "check that the file is a complete .tflite"
    # the custom op (XNNPACK's kernel) computes what the builtin TRANSPOSE_CONV does
    np.testing.assert_allclose(outputs(custom, images),
                               outputs(folder / "transpose_conv.tflite", images), atol=1e-4)
    artifact, path = quantized("custom_op")
    assert artifact.meta["normalised"] == {"custom_ops_replaced": REPLACED}
    assert_int8(artifact, {})
    assert_close(path, custom, images)


def test_a_file_without_a_signature_is_quantized(folder, quantized, images):
    from export.tflite import signature
    bare = folder / "no_signature.tflite"
    assert signature(bare) == (None, ["serving_default_args_0"])  # the subgraph's input
    artifact, path = quantized("no_signature")  # was: exit 3, KeyError: 'serving_default'
    assert artifact.meta["normalised"] == {"signature_added": True}
    assert_int8(artifact, {})
    assert_close(path, bare, images)


def test_op_codes_in_the_deprecated_field_are_quantized_as_their_ops(folder, quantized,
                                                                       images):
    from compress.quant.tflite.graph import op_name, schema
    artifact, path = quantized("deprecated")
    assert artifact.meta["normalised"] == {"op_codes_moved": 6}
    assert_int8(artifact, {})
    # every op quantized as what it is (ai-edge-quantizer took each for an ADD before)
    model = schema().ModelT.InitFromObj(schema().Model.GetRootAs(path.read_bytes(), 0))
    ops = {op_name(model, op) for op in model.subgraphs[0].operators}
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "MEAN"} <= ops
    assert "ADD" not in ops
    assert_close(path, folder / "deprecated.tflite", images)


def test_fp16_weights_are_dequantized_first(folder, quantized, images):
    artifact, path = quantized("fp16_weights")  # was: AttributeError inside ai-edge-quantizer
    assert artifact.meta["normalised"] == {"fp16_weights_dequantized": 8}
    assert_int8(artifact, {})
    assert_close(path, folder / "fp16_weights.tflite", images)


def test_ops_the_quantizer_cannot_take_stay_float_in_a_mixed_file(folder, quantized, images):
    artifact, path = quantized("prelu")  # was: "full int8 was promised, but 9 tensors stayed ..."
    assert "normalised" not in artifact.meta
    assert_int8(artifact, {"PRELU": 3})
    assert_close(path, folder / "prelu.tflite", images)


def test_an_app_file_with_every_form_at_once_takes_the_stage_defaults(folder, quantized,
                                                                        images):
    artifact, path = quantized("app", {})  # GPTQ, bias correction and the check, on a mixed file
    assert artifact.meta["normalised"] == {
        "signature_added": True, "op_codes_moved": 9, "fp16_weights_dequantized": 13,
        "custom_ops_replaced": REPLACED}
    assert_int8(artifact, {"PRELU": 3})
    assert artifact.meta["check"]["kept"] in artifact.meta["check"]["calibration_sqnr_db"]
    assert_close(path, folder / "app.tflite", images)
    said = (folder / "runs" / "app" / "report.md").read_text()
    assert "a `serving_default` signature added" in said and "PRELU x3" in said


@pytest.mark.parametrize("form", ["custom_op", "no_signature", "deprecated", "fp16_weights",
                                  "app"])
def test_the_normalised_copy_computes_what_the_file_does(folder, images, tmp_path, form):
    """Without delegates too (ai-edge-quantizer calibrates so), in the form the quantizer
    reads: a signature, real op codes, no float16 tensor, no custom op."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    from compress.quant.tflite.normalise import normalise
    source = folder / f"{form}.tflite"
    done = normalise(source, tmp_path / "copy.tflite")
    assert done.path == tmp_path / "copy.tflite" and done.record.changed()
    np.testing.assert_allclose(outputs(done.path, images), outputs(source, images), atol=1e-4)
    plain = Interpreter(model_path=str(done.path), experimental_op_resolver_type=(
        OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    plain.allocate_tensors()
    assert list(plain.get_signature_list()) == ["serving_default"]
    assert not any(t["dtype"] == np.float16 for t in plain.get_tensor_details())
    model = tflite_forms.read(done.path)
    assert all(code.builtinCode == code.deprecatedBuiltinCode and code.builtinCode != 32
               for code in model.operatorCodes)  # 32: CUSTOM


def test_a_file_in_the_quantizer_s_form_is_not_copied(tmp_path):
    from compress.quant.tflite.normalise import normalise
    done = normalise(tflite_forms.DIGITS, tmp_path / "copy.tflite")
    assert done.path == tflite_forms.DIGITS and not done.record.changed()
    assert done.record.as_meta() == {} and not (tmp_path / "copy.tflite").exists()


def test_buffers_stored_after_the_flatbuffer_are_kept(tmp_path, images):
    """Files whose weights sit after the flatbuffer (offset and size) are rewritten with
    their weights."""
    from compress.quant.tflite.normalise import normalise
    model = tflite_forms.deprecated(tflite_forms.read())
    source = tflite_forms.write_external(model, tmp_path / "external.tflite")
    root = tflite_forms._schema().Model.GetRootAs(source.read_bytes(), 0)
    assert sum(root.Buffers(i).Offset() > 1 for i in range(root.BuffersLength())) >= 8
    done = normalise(source, tmp_path / "copy.tflite")
    assert done.record.as_meta() == {"op_codes_moved": 6}
    np.testing.assert_array_equal(outputs(done.path, images),
                                  outputs(tflite_forms.DIGITS, images))


def test_a_custom_op_no_builtin_replaces_is_named_before_full_int8(folder, tmp_path):
    from compress.errors import ModelError
    from compress.quant.tflite.quantize import _normalised
    model = tflite_forms.read(folder / "custom_op.tflite")
    for code in model.operatorCodes:
        if code.customCode:
            code.customCode = b"AppSpecificOp"
    other = tflite_forms.write(model, tmp_path / "other.tflite")
    assert _normalised(other, tmp_path / "copy.tflite", "dynamic-int8").record.custom_ops_kept \
        == ("AppSpecificOp",)
    with pytest.raises(ModelError, match="AppSpecificOp run only inside a LiteRT delegate"):
        _normalised(other, tmp_path / "copy.tflite", "int8")
