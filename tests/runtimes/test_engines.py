"""The engine registry (runtimes/engines/) and the OpenVINO engine, on the quickstart CNN
trained on the digits data: the same outputs as onnxruntime, an explicit f32 precision,
int8 layers of a QDQ model running in int8, and the runner's --engine and --engine auto."""
from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np
import pytest

from runtimes import engines
from runtimes.bench import main as bench_main
from runtimes.errors import RuntimeInputError
from runtimes.loader import load


def test_every_engine_is_registered_and_a_suffix_has_one_default():
    assert engines.names()[:3] == ("onnxruntime", "litert", "openvino")
    assert engines.default_for("m.onnx").name == "onnxruntime"
    assert engines.default_for("m.TFLITE").name == "litert"
    assert engines.default_for("m.xml").name == "openvino"
    assert [e.name for e in engines.for_path("m.onnx")] == ["onnxruntime", "openvino"]
    assert [e.name for e in engines.for_format("onnx")] == ["onnxruntime", "openvino"]


def test_unknown_engines_and_suffixes_are_named_with_what_is_known():
    with pytest.raises(RuntimeInputError, match="unknown engine 'tensorrt'; known: "
                                                "onnxruntime, litert, openvino"):
        engines.get("tensorrt")
    with pytest.raises(RuntimeInputError, match="suffix must be one of .onnx, .tflite, .xml"):
        engines.default_for("model.pt")
    with pytest.raises(RuntimeInputError, match="engine litert does not open 'm.onnx'"):
        engines.chosen("m.onnx", "litert")


@pytest.mark.parametrize("settings", [
    engines.Settings(),
    engines.Settings(providers=(("CUDAExecutionProvider", {"device_id": "1"}),),
                     xnnpack=False, delegate="gpu", delegate_options={"enforce_f32": "1"},
                     precision="bf16", device="GPU"),
])
def test_each_engines_flags_parse_back_to_its_settings(settings):
    """What the pipeline writes on the runner's command line is what the runner reads."""
    parser = argparse.ArgumentParser()
    engines.add_arguments(parser)
    flags = [f for e in (engines.get(n) for n in engines.names()) for f in e.flags(settings)]
    assert engines.settings_from(parser.parse_args(flags), settings.threads) == settings


def test_an_engine_not_installed_here_is_unavailable_not_bad_input(quickstart_onnx, monkeypatch,
                                                                   capsys):
    """Exit 3, so the pipeline says 'unmeasured' for that engine and goes on."""
    absent = dataclasses.replace(engines.get("openvino"), modules=("no_such_engine_module",))
    monkeypatch.setitem(engines._REGISTRY, "openvino", absent)
    assert bench_main([str(quickstart_onnx), "--engine", "openvino", "--runs", "1"]) == 3
    assert "openvino is not installed here (pip install openvino)" in capsys.readouterr().err


openvino = pytest.importorskip("openvino")


def _digits(count: int = 32) -> np.ndarray:
    from sklearn.datasets import load_digits
    images = load_digits().images[:count].astype(np.float32) / 16.0
    return images[:, None]


def test_openvino_runs_the_model_as_onnxruntime_does_in_true_fp32(quickstart_onnx):
    path = str(quickstart_onnx)
    with load(path) as ort_session, load(path, "openvino", threads=2) as ov_session:
        assert [s.name for s in ov_session.inputs] == ["image"]
        assert ov_session.inputs[0].shape == (1, 1, 8, 8)
        for image in _digits(16):
            feed = {"image": image[None]}
            np.testing.assert_allclose(ov_session.run(feed)[0], ort_session.run(feed)[0],
                                       rtol=1e-4, atol=1e-4)
        described = ov_session.describe()
    # f32 asked for and granted, whatever this CPU's own default (bf16 on AMX / AVX-512 BF16)
    assert described["precision"] == "f32" and described["inference_precision_hint"] == "f32"
    assert described["threads"] == 2 and described["execution_devices"] == ["CPU"]


def test_a_named_precision_is_what_the_session_says_it_ran(quickstart_onnx):
    with load(str(quickstart_onnx), "openvino", precision="f16") as session:
        assert session.describe()["precision"] == "f16"
    with pytest.raises(RuntimeInputError, match="precision 'int4': use one of f32, bf16, f16"):
        load(str(quickstart_onnx), "openvino", precision="int4")


def test_a_device_that_is_not_here_is_unavailable_not_bad_input(quickstart_onnx):
    from runtimes.errors import ProviderUnavailable
    with pytest.raises(ProviderUnavailable, match="OpenVINO device NPU is not on this machine"):
        load(str(quickstart_onnx), "openvino", device="NPU")


def _quantized(source, target) -> str:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    class Reader:
        def __init__(self):
            self.feeds = iter({"image": image[None]} for image in _digits(32))

        def get_next(self):
            return next(self.feeds, None)

    quantize_static(str(source), str(target), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    return str(target)


def test_placement_says_the_int8_layers_of_a_qdq_model_run_in_int8(quickstart_onnx, tmp_path):
    path = _quantized(quickstart_onnx, tmp_path / "int8.onnx")
    placed = engines.get("openvino").placement(path, engines.Settings(threads=2), {})
    convs = {where: group["op_types"].get("Convolution", 0)
             for where, group in placed["by_provider"].items()}
    assert placed["engine"] == "openvino" and placed["nodes"] > 0
    assert sum(n for where, n in convs.items() if where in ("CPU u8", "CPU i8")) >= 2, placed
    shares = [g["flops_share"] for g in placed["by_provider"].values()]
    assert sum(shares) == pytest.approx(1.0, abs=1e-3)


def _bench(capsys, *args) -> tuple[int, dict | str]:
    code = bench_main([*args, "--runs", "5", "--warmup", "1", "--meter", "none", "--json",
                       "--threads", "2"])
    out, err = capsys.readouterr()
    return code, (json.loads(out.strip().splitlines()[-1]) if code == 0 else err)


def test_the_runner_measures_with_the_engine_named(quickstart_onnx, capsys):
    code, result = _bench(capsys, str(quickstart_onnx), "--engine", "openvino",
                          "--precision", "bf16")
    assert code == 0 and result["runtime"]["engine"] == "openvino"
    assert result["runtime"]["precision"] == "bf16"
    code, said = _bench(capsys, str(quickstart_onnx), "--engine", "litert")
    assert code == 2 and "engine litert does not open" in said


def test_engine_auto_probes_every_engine_and_measures_with_the_fastest(quickstart_onnx, capsys):
    code, result = _bench(capsys, str(quickstart_onnx), "--engine", "auto")
    assert code == 0
    choice = result["engine_choice"]
    probes = {p["engine"]: p for p in choice["probes"]}
    assert set(probes) == {"onnxruntime", "openvino"}
    assert all(p["runs"] == 30 and p["p50_ms"] > 0 for p in probes.values())
    fastest = min(probes.values(), key=lambda p: p["p50_ms"])["engine"]
    assert choice["chosen"] == fastest == result["runtime"]["engine"]
    assert result["runs"] == 5   # the measurement itself, with the chosen engine


def _pairs_model(path) -> str:
    """x [1, n] -> Reshape [-1, 2]: runs for an even n only, so random inputs (dynamic
    dimensions set to 1) fail where the timed inputs run."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    shape = numpy_helper.from_array(np.array([-1, 2], dtype=np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])], "pairs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])], [shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def test_placement_runs_on_the_timed_inputs(tmp_path, capsys):
    model = _pairs_model(tmp_path / "pairs.onnx")
    np.savez(tmp_path / "x.npz", x=np.ones((1, 8), np.float32))
    code, result = _bench(capsys, model, "--inputs", str(tmp_path / "x.npz"),
                          "--engine", "onnxruntime", "--placement")
    assert code == 0 and result["latency_ms"]["p50"] > 0
    assert result["placement"]["by_provider"]["CPUExecutionProvider"]["op_types"] == {
        "Reshape": 1}
    # auto: placement only where the chosen engine makes it worth reporting
    code, result = _bench(capsys, model, "--inputs", str(tmp_path / "x.npz"),
                          "--engine", "auto", "--placement")
    assert code == 0
    chosen = result["engine_choice"]["chosen"]
    assert ("placement" in result) == engines.get(chosen).accelerated(engines.Settings())


def test_a_placement_that_fails_is_said_and_the_timing_stands(quickstart_onnx, monkeypatch,
                                                              capsys):
    """An engine's own error type while reporting placement (onnxruntime's Fail is no
    RuntimeError) never costs the measurement."""
    def failing(*args):
        from onnxruntime.capi.onnxruntime_pybind11_state import Fail
        raise Fail("profiling failed")
    broken = dataclasses.replace(engines.get("onnxruntime"), placement=failing)
    monkeypatch.setitem(engines._REGISTRY, "onnxruntime", broken)
    code, result = _bench(capsys, str(quickstart_onnx), "--engine", "onnxruntime",
                          "--placement")
    assert code == 0 and result["latency_ms"]["p50"] > 0
    assert result["placement"] == {"engine": "onnxruntime",
                                   "error": "not reported: profiling failed"}
