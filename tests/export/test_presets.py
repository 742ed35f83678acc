"""Export presets: the data, how a stage or a target profile picks one, and what each one
produces on the trained digits CNN (exported with a dynamic batch, so fixing shapes shows)."""
from __future__ import annotations

import re
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import compress
from compress.config.pipeline import parse_pipeline
from compress.errors import ConfigError
from compress.runner.targets import apply_target_defaults
from export import presets
from profiles import load_profile
from profiles.schema import Profile
from runtimes.onnx_session import session_options
from tests.conftest import fill_project, pipeline_dict, run_cli, write_pipeline

SAMPLES = 64  # calibration samples: enough for the digits CNN, fast


def _board(preset: str, engines=("onnxruntime",)) -> tuple[str, Profile]:
    return ("board", Profile.model_validate({"name": "board", "device": {"arch": "any"},
                                             "runtime": {"engines": list(engines)},
                                             "export": {"preset": preset}}))


def _stage(stage: dict, targets: list):
    # quantize (onnxruntime) takes an ONNX model; export.tflite the torch one
    onnx = stage["type"] == "quantize" and stage.get("backend") != "neural-compressor"
    model = {"onnx": "model.onnx", "inputs": [{"name": "image", "shape": [1, 1, 8, 8]}]}
    pipeline = parse_pipeline(pipeline_dict(stages=[stage], **({"model": model} if onnx else {})))
    return apply_target_defaults(pipeline, targets).stages[0]


# --- the data -------------------------------------------------------------------------


def test_every_preset_loads_and_comments_every_setting():
    assert set(presets.names()) >= {"x86-vnni", "x86-avx2", "arm64", "jetson-gpu",
                                    "qualcomm-htp", "intel-npu", "edgetpu"}
    for name in presets.names():
        preset = presets.get(name)
        assert preset.description and preset.covers() != "nothing", name
        lines = (presets.FOLDER / f"{name}.yaml").read_text().splitlines()
        for index, line in enumerate(lines):
            setting = re.match(r"\s*(\w+): \S", line)
            if setting and setting.group(1) not in ("description", "name"):
                above = next(prev for prev in reversed(lines[:index]) if prev.strip())
                # why: a comment on the line or just above it
                assert "#" in line or above.strip().startswith("#"), \
                    f"{name}.yaml line {index + 1} has no comment saying why: {line.strip()}"


def test_preset_providers_are_ones_the_profiles_know():
    providers = pytest.importorskip("profiles.providers")
    for name in presets.names():
        for provider in presets.get(name).runtime.providers:
            providers.check_options(provider.name, provider.options)


# --- how a stage gets a preset --------------------------------------------------------


def test_a_stage_preset_fills_what_the_stage_leaves_unset():
    stage = _stage({"type": "quantize", "scheme": "int8-static", "preset": "arm64",
                    "activations": "uint8"}, [])
    assert stage.activations == "uint8"  # set on the stage: wins over the preset's int8
    assert (stage.symmetric_weights, stage.per_channel, stage.preset) == (True, True, "arm64")
    fp16 = _stage({"type": "quantize", "scheme": "fp16", "preset": "jetson-gpu"}, [])
    assert fp16.static_shapes and fp16.keep_io_types


def test_a_profile_preset_applies_where_its_engines_run_the_stage():
    targets = [(n, load_profile(n)) for n in ("host-cpu", "rpi4", "jetson-orin-nano")]
    quantize = _stage({"type": "quantize", "scheme": "int8-static"}, targets)
    # jetson-orin-nano runs onnxruntime (jetson-gpu); rpi4 runs LiteRT only, so its arm64
    # preset does not touch ONNX quantization
    assert quantize.preset == "jetson-gpu" and quantize.symmetric_activations
    assert not quantize.quantize_bias and quantize.static_shapes
    tflite = _stage({"type": "export.tflite"}, targets)
    assert (tflite.preset, tflite.mode, tflite.io_type, tflite.channels_last) == \
        ("arm64", "int8", "int8", True)
    # only host-cpu (no preset): nothing changes
    plain = _stage({"type": "quantize", "scheme": "int8-static"}, targets[:1])
    assert plain.preset is None and plain.activations == "uint8" and not plain.static_shapes
    # a mode other than the preset's: its TFLite settings are for int8, so none apply
    fp16 = _stage({"type": "export.tflite", "mode": "fp16"}, targets)
    assert fp16.preset is None and not fp16.channels_last


def test_targets_asking_for_different_presets_are_an_error_unless_the_stage_picks():
    targets = [("jetson-orin-nano", load_profile("jetson-orin-nano")), _board("intel-npu")]
    with pytest.raises(ConfigError, match=r"stages\[1\] \(quantize\): the targets ask for different export "
                       r"presets \(jetson-orin-nano wants jetson-gpu, board wants intel-npu\)"):
        _stage({"type": "quantize", "scheme": "int8-static"}, targets)
    assert _stage({"type": "quantize", "scheme": "int8-static", "preset": "none"},
                  targets).activations == "uint8"
    assert _stage({"type": "quantize", "scheme": "int8-static", "preset": "x86-avx2"},
                  targets).reduce_range


def test_unknown_or_unfitting_presets_are_named():
    with pytest.raises(ConfigError, match="unknown preset 'tpu'; known presets: arm64, edgetpu"):
        _stage({"type": "quantize", "scheme": "int8-static", "preset": "tpu"}, [])
    with pytest.raises(ConfigError, match=r"stages\[1\] \(export.tflite\): target board: export.preset: unknown "
                       "preset 'x86'; known presets:"):
        _stage({"type": "export.tflite"}, [_board("x86")])  # engines: onnxruntime only
    with pytest.raises(ConfigError, match="preset edgetpu has no settings for quantize "
                       "int8-static .it has settings for export.tflite mode int8."):
        _stage({"type": "quantize", "scheme": "int8-static", "preset": "edgetpu"}, [])
    with pytest.raises(ConfigError, match="preset edgetpu: mode int8 quantizes the inputs"):
        _stage({"type": "export.tflite", "io": "float", "preset": "edgetpu"}, [])
    with pytest.raises(ConfigError, match="preset arm64 has no settings for export.tflite "
                       "mode fp16"):
        _stage({"type": "export.tflite", "mode": "fp16", "preset": "arm64"}, [])


# --- what each preset produces ---------------------------------------------------------


STAGES = [{"type": "export.onnx", "name": "fp32"},
          *({"type": "quantize", "scheme": "int8-static", "name": name, "preset": name,
             "input": "fp32", "samples": SAMPLES,
             # the float-bias path of the correction (TensorRT keeps biases float)
             **({"bias_correction": True} if name == "jetson-gpu" else {})}
            for name in ("x86-vnni", "x86-avx2", "arm64", "jetson-gpu", "qualcomm-htp",
                         "intel-npu")),
          {"type": "quantize", "scheme": "fp16", "name": "jetson-gpu-fp16",
           "preset": "jetson-gpu", "input": "fp32"},
          {"type": "export.tflite", "name": "edgetpu", "preset": "edgetpu", "input": "source",
           "samples": SAMPLES, "bias_correction": False}]


@pytest.fixture(scope="module")
def produced(tmp_path_factory, digits_checkpoint):
    folder = fill_project(tmp_path_factory.mktemp("presets"), digits_checkpoint)
    data = pipeline_dict(stages=STAGES, targets=[])
    data["model"]["dynamic_batch"] = True
    result = compress.run(write_pipeline(folder, data))
    return result, {a.id: a for a in result.artifacts}


def _graph(result, artifact):
    return onnx.load(str(result.run_dir / artifact.path)).graph


def _qdq(graph) -> dict:
    """Read from the file: zero points of the activation QuantizeLinear nodes, the quantized
    weights behind a DequantizeLinear and their zero points, and the int32 biases."""
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    acts = [inits[n.input[2]] for n in graph.node if n.op_type == "QuantizeLinear"]
    dequant = [n for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits
               and inits[n.input[0]].dtype != np.int32]
    weights = [inits[n.input[0]] for n in dequant]
    return {"act": {str(z.dtype) for z in acts}, "act_zero": {int(v) for z in acts for v in z.flat},
            "weight": {str(w.dtype) for w in weights},
            "weight_max": max(int(np.abs(w.astype(np.int64)).max()) for w in weights),
            "weight_zero": {int(v) for n in dequant for v in inits[n.input[2]].flat},
            "int32_biases": sum(v.dtype == np.int32 for v in inits.values())}


def _dynamic(graph) -> list[str]:
    values = [*graph.input, *graph.output, *graph.value_info]
    return [v.name for v in values for d in v.type.tensor_type.shape.dim
            if d.dim_param or not d.HasField("dim_value")]


def test_x86_presets_are_u8s8_and_avx2_reduces_the_weight_range(produced):
    result, artifacts = produced
    vnni, avx2 = (_qdq(_graph(result, artifacts[n])) for n in ("x86-vnni", "x86-avx2"))
    for qdq in (vnni, avx2):
        assert qdq["act"] == {"uint8"} and qdq["weight"] == {"int8"}
    assert vnni["weight_max"] == 127 and avx2["weight_max"] <= 64  # 7-bit weights
    assert artifacts["x86-avx2"].meta["qdq"]["weight_range"][1] <= 64
    # no static shapes for a CPU: the dynamic batch stays
    assert "image" in _dynamic(_graph(result, artifacts["x86-vnni"]))


def test_arm64_is_s8s8_with_symmetric_per_channel_weights(produced):
    result, artifacts = produced
    qdq = _qdq(_graph(result, artifacts["arm64"]))
    assert qdq["act"] == {"int8"} and qdq["weight"] == {"int8"} and qdq["weight_zero"] == {0}
    meta = artifacts["arm64"].meta["preset"]
    assert meta["name"] == "arm64" and meta["sets"]["activations"] == "int8"
    assert meta["overridden"] == {}


def test_jetson_gpu_int8_is_symmetric_int8_with_float_biases_and_static(produced):
    result, artifacts = produced
    graph = _graph(result, artifacts["jetson-gpu"])
    qdq = _qdq(graph)
    assert qdq["act"] == {"int8"} and qdq["act_zero"] == {0}  # TensorRT: zero point 0
    assert qdq["weight"] == {"int8"} and qdq["weight_zero"] == {0}
    assert qdq["int32_biases"] == 0  # biases stay float
    assert artifacts["jetson-gpu"].meta["bias_correction"]["layers_corrected"] == 4
    assert _dynamic(graph) == []
    providers = artifacts["jetson-gpu"].meta["preset"]["runtime"]["providers"]
    assert providers[0]["options"]["trt_engine_cache_path"] == "trt_engines"


def test_jetson_gpu_fp16_is_a_static_fp16_graph_with_float32_io(produced):
    result, artifacts = produced
    fp16 = artifacts["jetson-gpu-fp16"]
    graph = _graph(result, fp16)
    assert fp16.precision == "fp16" and _dynamic(graph) == []
    kinds = Counter(i.data_type for i in graph.initializer)
    assert kinds[onnx.TensorProto.FLOAT16] >= 8 and not kinds[onnx.TensorProto.FLOAT]
    assert {v.type.tensor_type.elem_type for v in [*graph.input, *graph.output]} == \
        {onnx.TensorProto.FLOAT}
    assert [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim] == [1, 1, 8, 8]


def test_qualcomm_htp_is_uint16_activations_through_the_qnn_config(produced):
    result, artifacts = produced
    graph = _graph(result, artifacts["qualcomm-htp"])
    qdq = _qdq(graph)
    assert qdq["act"] == {"uint16"} and qdq["weight"] == {"int8"} and qdq["weight_zero"] == {0}
    assert _dynamic(graph) == []
    meta = artifacts["qualcomm-htp"].meta
    assert meta["static_shapes"]["dim_params"] == {"batch": 1}
    assert meta["preset"]["sets"]["qnn"] is True


def test_intel_npu_is_u8s8_and_static(produced):
    result, artifacts = produced
    graph = _graph(result, artifacts["intel-npu"])
    qdq = _qdq(graph)
    assert qdq["act"] == {"uint8"} and qdq["weight"] == {"int8"} and qdq["weight_zero"] == {0}
    assert _dynamic(graph) == []


def test_every_onnx_preset_model_still_classifies_like_fp32(produced):
    import onnxruntime as ort
    from sklearn.datasets import load_digits

    result, artifacts = produced
    digits = load_digits()
    images = (digits.images[-40:] / 16.0).astype(np.float32)[:, None]
    answers = {}
    for name, artifact in artifacts.items():
        if artifact.format != "onnx":
            continue
        session = ort.InferenceSession(str(result.run_dir / artifact.path), session_options(),
                                       providers=["CPUExecutionProvider"])
        answers[name] = [int(session.run(None, {"image": x[None]})[0].argmax()) for x in images]
    for name, answer in answers.items():
        agreement = np.mean(np.array(answer) == np.array(answers["fp32"]))
        assert agreement >= 0.95, name


def test_edgetpu_tflite_is_full_int8_with_int8_io_and_nhwc(produced):
    from ai_edge_litert.interpreter import Interpreter

    result, artifacts = produced
    tpu = artifacts["edgetpu"]
    assert tpu.meta["io"] == "int8" and tpu.meta["channels_last"]
    assert tpu.meta["tensors"]["float32_tensors"] == []
    assert tpu.meta["preset"]["op_check"] == "edgetpu"
    interpreter = Interpreter(model_path=str(result.run_dir / tpu.path))
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    assert inp["dtype"] == np.int8 and out["dtype"] == np.int8
    assert list(inp["shape"]) == [1, 8, 8, 1]


# --- bad input through the CLI ---------------------------------------------------------


def test_unknown_preset_exits_2_listing_the_known_ones(project):
    stages = [{"type": "export.onnx"},
              {"type": "quantize", "scheme": "int8-static", "preset": "hexagon"}]
    child = run_cli("validate", write_pipeline(project, pipeline_dict(stages=stages)))
    assert child.returncode == 2 and "Traceback" not in child.stderr
    assert "unknown preset 'hexagon'; known presets: arm64, edgetpu" in child.stderr


def test_int8_io_preset_without_calibration_data_exits_2(project):
    stages = [{"type": "export.tflite", "preset": "edgetpu"}]
    data = pipeline_dict(stages=stages, targets=[],
                         data={"evaluation": "data:evaluation", "metric": {"type": "accuracy"}})
    child = run_cli("run", write_pipeline(project, data), "--quiet", cwd=project)
    assert child.returncode == 2 and "Traceback" not in child.stderr
    assert "(export.tflite, int8, preset edgetpu) needs data.calibration" in child.stderr


def test_static_shapes_contradicting_the_declared_shape_exit_2(project):
    from onnx import TensorProto, helper
    weight = numpy_helper.from_array(np.ones((64, 10), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["pixels", "w"], ["logits"], name="fc")], "mlp",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              str(project / "mlp.onnx"))
    np.savez(project / "calib.npz", pixels=np.zeros((8, 32), np.float32))
    model = {"onnx": "mlp.onnx", "inputs": [{"name": "pixels", "shape": [1, 32]}]}
    data = pipeline_dict(model=model, data={"calibration": "calib.npz"}, targets=[],
                         stages=[{"type": "quantize", "scheme": "int8-static",
                                  "preset": "qualcomm-htp"}])
    child = run_cli("run", write_pipeline(project, data), "--quiet", cwd=project)
    assert child.returncode == 2 and "Traceback" not in child.stderr
    # found before any work, where model.inputs is checked against the graph
    assert ("model.inputs declares input 'pixels' with shape [1, 32] but mlp.onnx takes "
            "[None, 64]") in child.stderr
    assert not list((project / "runs").rglob("stage.json"))
