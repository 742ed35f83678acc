"""`compress preflight MODEL --profile P`: op listing (ONNX, TFLite), the op tables'
checks (Edge TPU: int8 only, one subgraph, 3 innermost dimensions; NPUs: static shapes),
and the CLI's exit codes 0 / 1 / 2 with their messages."""
from __future__ import annotations

import json

import pytest

from compress.cli import main as cli_main
from export.op_support import ModelOps, Node, Tensor, check, list_ops
from export.op_tables import EDGETPU, QNN_HTP, table_for_delegate, table_for_provider
from tests.conftest import REPO, run_cli
from tests.runtimes.test_placement import FP32, INT8, PARTIAL, tiny_cnn_onnx


@pytest.fixture(scope="module")
def onnx_models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("preflight")
    return {"static": tiny_cnn_onnx(folder / "static.onnx"),
            "dynamic_erf": tiny_cnn_onnx(folder / "dynamic_erf.onnx", batch="N", erf=True)}


def _cli(capsys, *args) -> tuple[int, str, str]:
    code = cli_main(["preflight", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


# --- op listing --------------------------------------------------------------------------

def test_onnx_ops_with_shapes_and_flops(onnx_models):
    ops = list_ops(onnx_models["static"])
    assert ops.format == "onnx" and ops.inputs == ["x"]
    assert [n.op for n in ops.nodes] == ["Conv", "Relu", "MaxPool", "Conv",
                                         "GlobalAveragePool", "Flatten", "Gemm"]
    assert ops.tensors["w2"] == Tensor((16, 8, 3, 3), "float32", constant=True)
    assert ops.tensors["p1"].shape == (1, 8, 4, 4)          # from shape inference
    flops = [ops.flops(n) for n in ops.nodes]
    assert flops == [9216, 512, 128, 36864, 16, 16, 320]
    assert ops.dynamic_inputs() == {}
    assert list_ops(onnx_models["dynamic_erf"]).dynamic_inputs() == {"x": ("N", 1, 8, 8)}


def test_tflite_ops_from_the_flatbuffer():
    ops = list_ops(str(INT8))
    assert ops.format == "tflite"
    assert [n.op for n in ops.nodes] == ["RESHAPE", "DEPTHWISE_CONV_2D", "CONV_2D",
                                         "MAX_POOL_2D", "CONV_2D", "MEAN", "FULLY_CONNECTED"]
    conv = ops.nodes[2]
    weights, activations = ops.tensors[conv.inputs[1]], ops.tensors[conv.inputs[0]]
    assert weights == Tensor((32, 3, 3, 16), "int8", constant=True)
    assert activations == Tensor((1, 8, 8, 16), "int8", constant=False)
    assert ops.flops(conv) == 2 * 2048 * 144
    assert [n.op for n in list_ops(str(PARTIAL)).nodes].count("CUMSUM") == 1


# --- checks ------------------------------------------------------------------------------

def test_edgetpu_takes_the_int8_model_and_refuses_the_float_one():
    support = check(list_ops(str(INT8)), EDGETPU)
    assert all(c.on_accelerator for c in support.checks)
    assert support.fallback() == {"nodes": 0, "op_types": {}, "flops_share": 0.0}
    floats = check(list_ops(str(FP32)), EDGETPU)
    assert not any(c.on_accelerator for c in floats.checks)
    assert {c.reason for c in floats.checks} == {"float tensors (Edge TPU runs int8 only)"}
    assert floats.fallback()["flops_share"] == 1.0


def _int8(shape=(1, 8, 8, 4), constant=False) -> Tensor:
    return Tensor(shape, "int8", constant)


def test_edgetpu_maps_one_subgraph():
    """QUANTIZE(float in) CONV TRANSPOSE CONV DEQUANTIZE: the leading QUANTIZE stays on the
    CPU but feeds the Edge TPU; the CONV after the unsupported TRANSPOSE stays on the CPU."""
    tensors = {"in": Tensor((1, 8, 8, 4), "float32"), "q": _int8(), "w": _int8((4, 3, 3, 4), True),
               "c1": _int8(), "t": _int8(), "c2": _int8(), "out": Tensor((1, 8, 8, 4), "float32")}
    layers = [("QUANTIZE", ["in"], "q"), ("CONV_2D", ["q", "w"], "c1"),
              ("TRANSPOSE", ["c1"], "t"), ("CONV_2D", ["t", "w"], "c2"),
              ("DEQUANTIZE", ["c2"], "out")]
    nodes = [Node(i, f"{op}:{i}", op, tuple(ins), (out,))
             for i, (op, ins, out) in enumerate(layers)]
    support = check(ModelOps("m.tflite", "tflite", nodes, tensors, ["in"]), EDGETPU)
    placed = [(c.node.op, c.on_accelerator, c.reason) for c in support.checks]
    assert placed == [
        ("QUANTIZE", False, "float tensors (Edge TPU runs int8 only)"),
        ("CONV_2D", True, ""),
        ("TRANSPOSE", False, "not supported by Edge TPU"),
        ("CONV_2D", False, "fed by an op on the CPU (the compiler maps one subgraph)"),
        ("DEQUANTIZE", False, "not supported by Edge TPU")]


def test_edgetpu_three_innermost_dimensions():
    tensors = {"a": _int8((2, 1, 8, 8)), "b": _int8((2, 1, 8, 8))}
    nodes = [Node(0, "RELU:0", "RELU", ("a",), ("b",))]
    support = check(ModelOps("m.tflite", "tflite", nodes, tensors, ["a"]), EDGETPU)
    assert "3 innermost dimensions" in support.checks[0].reason


def test_static_shapes_and_unsupported_ops_for_the_htp(onnx_models):
    support = check(list_ops(onnx_models["dynamic_erf"]), QNN_HTP)
    assert {c.reason for c in support.checks} == {
        "dynamic shape (Qualcomm HTP (QNN) needs static shapes)",
        "not supported by Qualcomm HTP (QNN)"}
    assert [c.node.op for c in support.checks if "not supported" in c.reason] == ["Erf"]
    assert "dynamic input dimensions (x ('N', 1, 8, 8))" in support.warnings[0]


def test_tables_follow_the_provider_and_its_options():
    assert table_for_provider("QNNExecutionProvider", {"backend_type": "htp"}) is QNN_HTP
    assert table_for_provider("QNNExecutionProvider", {"backend_type": "cpu"}) is None
    assert table_for_provider("OpenVINOExecutionProvider", {"device_type": "NPU"}).name == \
        "openvino-npu"
    assert table_for_provider("OpenVINOExecutionProvider", {"device_type": "GPU"}) is None
    assert table_for_provider("TensorrtExecutionProvider").name == "tensorrt"
    assert table_for_provider("CUDAExecutionProvider") is None
    assert table_for_delegate("/usr/lib/libedgetpu.so.1") is EDGETPU


# --- the command -------------------------------------------------------------------------

def test_all_ops_on_the_edge_tpu_exits_0(capsys):
    code, out, _ = _cli(capsys, INT8, "--profile", "coral-edgetpu")
    assert code == 0
    assert "verdict: all 7 ops on the Edge TPU" in out
    assert "FULLY_CONNECTED" in out and "libedgetpu.so.1" in out   # not loadable here


def test_float_model_on_the_edge_tpu_exits_1(capsys):
    code, out, _ = _cli(capsys, FP32, "--profile", "coral-edgetpu", "--json")
    assert code == 1
    report = json.loads(out)
    assert report["fallback"]["nodes"] == 7 and report["fallback"]["flops_share"] == 1.0
    assert report["verdict"].startswith("7 of 7 ops (RESHAPE, DEPTHWISE_CONV_2D, CONV_2D")
    assert report["verdict"].endswith("would fall back to the CPU, ~100.0% of FLOPs (estimate)")
    assert {row["reason"] for row in report["ops"]} == {"float tensors (Edge TPU runs int8 only)"}


def test_unsupported_op_on_the_htp_exits_1(capsys, onnx_models):
    code, out, _ = _cli(capsys, onnx_models["dynamic_erf"], "--profile", "qcs6490")
    assert code == 1
    assert "Erf" in out and "not supported by Qualcomm HTP (QNN)" in out
    assert "warning: dynamic input dimensions" in out
    assert "not available here: QNNExecutionProvider is not available" in out
    code, out, _ = _cli(capsys, onnx_models["static"], "--profile", "qcs6490")
    assert code == 0 and "verdict: all 7 ops on the Qualcomm HTP (QNN)" in out


@pytest.mark.parametrize("model,profile", [("static", "host-cpu"), (INT8, "rpi4")])
def test_cpu_only_profiles_exit_0(capsys, onnx_models, model, profile):
    code, out, _ = _cli(capsys, onnx_models.get(model, model), "--profile", profile)
    assert code == 0
    assert f"verdict: everything runs on the CPU ({profile} has no accelerator)" in out


def test_bad_input_exits_2_with_one_message(capsys, tmp_path, onnx_models):
    garbage_onnx, garbage_tflite = tmp_path / "bad.onnx", tmp_path / "bad.tflite"
    garbage_onnx.write_bytes(b"\x0a\xff\xff\xff not a model")
    garbage_tflite.write_bytes(b"not a flatbuffer at all")
    (tmp_path / "model.pt").write_bytes(b"torch")
    cases = [((tmp_path / "missing.onnx", "--profile", "host-cpu"), "model file not found"),
             ((garbage_onnx, "--profile", "host-cpu"), "is not a valid ONNX model"),
             ((garbage_tflite, "--profile", "coral-edgetpu"), "is not a readable TFLite model"),
             ((tmp_path / "model.pt", "--profile", "host-cpu"), "must be an .onnx or a .tflite"),
             ((onnx_models["static"], "--profile", "no-such-board"), "unknown profile"),
             ((onnx_models["static"], "--profile", "coral-edgetpu"),
              "profile 'coral-edgetpu' runs litert only (runtime.engines): give it a .tflite")]
    for args, message in cases:
        code, out, err = _cli(capsys, *args)
        assert code == 2, (args, out, err)
        assert err.startswith("error: ") and message in err and "Traceback" not in err
        assert err.count("\n") == 1


def test_a_measured_fallback_joins_the_verdict(monkeypatch, onnx_models):
    """Where the provider is installed, the placement it really makes counts too."""
    import onnxruntime

    from compress.measure.preflight import preflight
    from runtimes import placement

    monkeypatch.setattr(onnxruntime, "get_available_providers",
                        lambda: ["QNNExecutionProvider", "CPUExecutionProvider"])
    measured = {"fallback": {"nodes": 2, "op_types": {"Flatten": 1, "Gemm": 1}}}
    monkeypatch.setattr(placement, "onnx_placement", lambda *args, **kwargs: measured)
    report = preflight(onnx_models["static"], "qcs6490")
    assert report["placement"] is measured and report["exit_code"] == 1
    assert report["verdict"] == ("all 7 ops on the Qualcomm HTP (QNN); measured here, 2 "
                                 "node(s) ran elsewhere (Flatten, Gemm)")


def test_the_litert_gpu_accelerator_is_compiled_not_guessed(capsys, tmp_path):
    """No op table for LiteRT's GPU (its own compatibility check passes anything); the
    compile says it where a GPU is, and without one the report says why there is nothing."""
    from tests.runtimes.test_litert_gpu import _gpu_here
    profile = tmp_path / "litert-gpu.yaml"
    profile.write_text("name: litert-gpu\ndevice: {arch: any}\nruntime:\n  delegate: gpu\n")
    code, out, _ = _cli(capsys, FP32, "--profile", profile, "--json")
    report = json.loads(out)
    assert report["table"] is None and "GPU compatibility check" in report["notes"][0]
    if _gpu_here():
        assert report["placement"]["providers_requested"] == ["LiteRT GPU"]
    else:
        assert report["placement"] is None and code == 0
        assert "LiteRT GPU accelerator cannot compile" in report["placement_note"]


def test_the_installed_command(tmp_path):
    done = run_cli("preflight", FP32, "--profile", "coral-edgetpu")
    assert done.returncode == 1, done.stderr
    assert "would fall back to the CPU" in done.stdout
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\x00" * 64)
    done = run_cli("preflight", bad, "--profile", "coral-edgetpu")
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_the_htp_table_predicts_what_qnn_really_places(tmp_path):
    """On the QNN HTP simulator (onnxruntime-qnn, `make qnn-env`): the Erf the table does
    not list is the one node left on the CPU, in two partitions around it."""
    import subprocess

    from tests.compress.measure.test_provider_environments import _python_with
    python = _python_with("QNNExecutionProvider")
    model = tiny_cnn_onnx(tmp_path / "erf.onnx", erf=True)
    child = subprocess.run(
        [python, "-m", "runtimes", "bench", model, "--provider", "QNNExecutionProvider",
         "--provider-option", "QNNExecutionProvider:backend_type=htp", "--runs", "3",
         "--warmup", "1", "--meter", "none", "--placement", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    # the QNN libraries write a line of their own to stdout: the result is the last line
    measured = json.loads(child.stdout.strip().splitlines()[-1])["placement"]
    assert measured["partitions"] == {"QNNExecutionProvider": 2}
    assert measured["fallback"]["op_types"] == {"Erf": 1}
    predicted = check(list_ops(model), QNN_HTP).fallback()
    assert predicted["op_types"] == {"Erf": 1}
    # both estimates, over slightly different graphs (onnxruntime's is optimized)
    assert predicted["flops_share"] == pytest.approx(measured["fallback"]["flops_share"],
                                                     abs=0.002)


def test_preflight_measures_with_the_environment_that_has_the_provider(capsys, tmp_path):
    """`--python`: the QNN provider lives in .venv-qnn, so the placement comes from there."""
    from tests.compress.measure.test_provider_environments import _python_with
    python = _python_with("QNNExecutionProvider")
    model = tiny_cnn_onnx(tmp_path / "erf.onnx", erf=True)
    code, out, _ = _cli(capsys, model, "--profile", "qcs6490", "--python", python, "--json")
    report = json.loads(out)
    assert code == 1 and report["placement"]["partitions"] == {"QNNExecutionProvider": 2}
    assert report["placement"]["fallback"]["op_types"] == {"Erf": 1}
    assert report["verdict"].endswith("measured here, 1 node(s) ran elsewhere (Erf)")


def test_a_python_that_cannot_run_is_bad_input(capsys, onnx_models, tmp_path):
    code, _, err = _cli(capsys, onnx_models["static"], "--profile", "qcs6490",
                        "--python", tmp_path / "no-such-python")
    assert code == 2 and "--python" in err and "Traceback" not in err
