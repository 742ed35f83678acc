"""Where nodes run: onnxruntime session profiling on a real ONNX model (CPU provider),
LiteRT delegation on the real TFLite fixtures (the trained digits CNN, fp32 and int8, and
a conv -> CUMSUM -> conv model XNNPACK takes only in part), and the bench runner's
--placement. Accelerated providers are not installed here: their arithmetic (compiled
partitions, fallback shares) is checked on profiles shaped like onnxruntime's."""
from __future__ import annotations

import json

import numpy as np
import pytest

from runtimes import placement as pl
from runtimes.bench import main as bench_main
from tests.conftest import REPO

FIXTURES = REPO / "tests" / "fixtures"
FP32, INT8 = FIXTURES / "digits_cnn_fp32.tflite", FIXTURES / "digits_cnn_int8.tflite"
PARTIAL = FIXTURES / "conv_cumsum_conv.tflite"   # tests/fixtures/make_placement_fixture.py


def tiny_cnn_onnx(path, batch=1, erf=False) -> str:
    """Conv(1->8) Relu MaxPool Conv(8->16) [Erf] GlobalAveragePool Flatten Gemm(16->10) on
    1x8x8 images, random weights; `batch` may be a name (a dynamic dimension)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def weight(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    body = [("Conv", ["x", "w1", "b1"], "c1", {"pads": [1, 1, 1, 1]}),
            ("Relu", ["c1"], "r1", {}),
            ("MaxPool", ["r1"], "p1", {"kernel_shape": [2, 2], "strides": [2, 2]}),
            ("Conv", ["p1", "w2", "b2"], "c2", {"pads": [1, 1, 1, 1]})]
    if erf:
        body.append(("Erf", ["c2"], "e2", {}))
    body += [("GlobalAveragePool", [body[-1][2]], "g", {}), ("Flatten", ["g"], "f", {}),
             ("Gemm", ["f", "w3", "b3"], "y", {"transB": 1})]
    nodes = [helper.make_node(op, ins, [out], name=f"{op.lower()}_{i}", **attrs)
             for i, (op, ins, out, attrs) in enumerate(body)]
    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
        [weight("w1", 8, 1, 3, 3), weight("b1", 8), weight("w2", 16, 8, 3, 3),
         weight("b2", 16), weight("w3", 10, 16), weight("b3", 10)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


@pytest.fixture(scope="module")
def cnn_onnx(tmp_path_factory) -> str:
    return tiny_cnn_onnx(tmp_path_factory.mktemp("onnx") / "cnn.onnx")


def _shares_sum_to_one(result: dict) -> None:
    shares = [g["flops_share"] for g in result["by_provider"].values()]
    assert sum(shares) == pytest.approx(1.0, abs=1e-5)
    assert sum(g["nodes"] for g in result["by_provider"].values()) == result["nodes"]


def test_node_flops_estimates():
    # 8 output channels of 8x8 from 1 input channel, 3x3: 2 * 512 outputs * 9 MACs
    assert pl.node_flops("Conv", [(1, 1, 8, 8), (8, 1, 3, 3)], [(1, 8, 8, 8)]) == 9216
    assert pl.node_flops("Conv", [(1, 8, 4, 4), (8, 1, 3, 3)], [(1, 8, 4, 4)]) == 2 * 128 * 9
    assert pl.node_flops("CONV_2D", [(1, 8, 8, 16), (32, 3, 3, 16)], [(1, 8, 8, 32)]) == \
        2 * 2048 * 144
    assert pl.node_flops("DEPTHWISE_CONV_2D", [(1, 8, 8, 16), (1, 3, 3, 16)],
                         [(1, 8, 8, 16)]) == 2 * 1024 * 9
    assert pl.node_flops("Gemm", [(4, 16), (10, 16)], [(4, 10)]) == 2 * 40 * 16
    assert pl.node_flops("Gemm", [(16, 4)], [(4, 10)]) == 2 * 40 * 16       # transA
    assert pl.node_flops("MatMul", [(2, 3, 5, 7), (7, 9)], [(2, 3, 5, 9)]) == 2 * 270 * 7
    assert pl.node_flops("FULLY_CONNECTED", [(1, 64), (10, 64)], [(1, 10)]) == 1280
    assert pl.node_flops("ConvTranspose", [(1, 4, 5, 5), (4, 2, 3, 3)], [(1, 2, 7, 7)]) == \
        2 * 100 * 18
    assert pl.node_flops("Relu", [(1, 8, 4, 4)], [(1, 8, 4, 4)]) == 128   # one per element
    assert pl.node_flops("Gemm", [("batch", 16)], [("batch", 10)]) == 320  # symbolic = 1
    assert pl.node_flops("Relu", [None], [None]) is None


def test_cpu_provider_runs_every_node_and_nothing_falls_back(cnn_onnx):
    result = pl.onnx_placement(cnn_onnx)
    assert result["engine"] == "onnxruntime"
    assert result["providers_requested"] == ["CPUExecutionProvider"]
    assert list(result["by_provider"]) == ["CPUExecutionProvider"]
    cpu = result["by_provider"]["CPUExecutionProvider"]
    assert cpu["nodes"] == result["nodes"] >= 5
    assert {"Conv", "Gemm", "MaxPool"} <= set(cpu["op_types"]) or "FusedConv" in cpu["op_types"]
    assert result["fallback"] is None and result["partitions"] == {}
    # the two convolutions and the Gemm alone: 2 * (512*9 + 256*72 + 10*16)
    assert result["flops_total"] >= 2 * (512 * 9 + 256 * 72 + 160)
    _shares_sum_to_one(result)
    line = pl.describe(result)
    assert "CPUExecutionProvider" in line and "no accelerator requested" in line


def _event(name, op, provider, inputs, outputs):
    return {"name": name, "op": op, "where": provider, "inputs": inputs, "outputs": outputs}


def test_compiled_partitions_get_the_rest_of_the_flops(monkeypatch, cnn_onnx):
    """A TensorRT-like profile: one compiled partition plus a Conv left on the CPU."""
    conv = ([(1, 8, 4, 4), (16, 8, 3, 3)], [(1, 16, 4, 4)])          # 36864 FLOPs
    accelerated = [_event("TRTKernel_graph_0", "TRTKernel_graph_main_123_0",
                          "TensorrtExecutionProvider", [(1, 1, 8, 8)], [(1, 8, 4, 4)]),
                   _event("MemcpyToHost", "MemcpyToHost", "CPUExecutionProvider", [], []),
                   _event("conv2", "Conv", "CPUExecutionProvider", *conv)]
    reference = [_event("conv1", "Conv", "CPUExecutionProvider",
                        [(1, 1, 8, 8), (8, 1, 3, 3)], [(1, 8, 8, 8)]),          # 9216
                 _event("conv2", "Conv", "CPUExecutionProvider", *conv)]
    calls = []

    def fake_profile(path, providers, threads, runs, feeds):
        calls.append(providers)
        return (accelerated, ["TensorrtExecutionProvider", "CPUExecutionProvider"]) \
            if len(calls) == 1 else (reference, ["CPUExecutionProvider"])

    monkeypatch.setattr(pl, "_profile", fake_profile)
    trt = ("TensorrtExecutionProvider", {"trt_fp16_enable": True})
    result = pl.onnx_placement(cnn_onnx, [trt])
    assert calls == [[trt], []]          # the accelerated session, then the CPU reference
    assert result["copies"] == 1 and result["nodes"] == 2
    assert result["partitions"] == {"TensorrtExecutionProvider": 1}
    assert result["fallback"]["op_types"] == {"Conv": 1}
    assert result["fallback"]["flops_share"] == pytest.approx(36864 / (9216 + 36864), abs=1e-6)
    assert result["by_provider"]["TensorrtExecutionProvider"]["flops"] == 9216
    _shares_sum_to_one(result)
    line = pl.describe(result)
    assert "TensorrtExecutionProvider 1 partition" in line and "fallback 1 node (Conv)" in line


def test_missing_provider_is_reported_before_any_run(cnn_onnx):
    from runtimes.errors import ProviderUnavailable
    with pytest.raises(ProviderUnavailable, match="QNNExecutionProvider"):
        pl.onnx_placement(cnn_onnx, ["QNNExecutionProvider"])


@pytest.mark.parametrize("path", [FP32, INT8], ids=["fp32", "int8"])
def test_xnnpack_takes_the_whole_digits_cnn(path):
    result = pl.litert_placement(str(path))
    assert result["providers_requested"] == ["XNNPACK"]
    assert result["partitions"] == {"XNNPACK": 1}
    assert result["by_provider"]["XNNPACK"]["op_types"] == {
        "CONV_2D": 2, "RESHAPE": 1, "DEPTHWISE_CONV_2D": 1, "MAX_POOL_2D": 1, "MEAN": 1,
        "FULLY_CONNECTED": 1}
    assert result["fallback"] == {"nodes": 0, "op_types": {}, "flops": 0, "flops_share": 0.0}
    # DW 2*1024*9 + conv 2*2048*144 + conv 2*1024*288 + FC 2*10*64, plus 640 element ops
    assert result["flops_total"] == 18432 + 589824 + 589824 + 1280 + 640
    # the int8 file's ops run on XNNPACK's int8 paths, not the built-in int8 kernels
    assert result["int8_nodes"] == ({"XNNPACK": 7} if path == INT8 else {})


def test_int8_ops_on_the_builtin_kernels_are_counted_there():
    assert pl.litert_placement(str(INT8), xnnpack=False)["int8_nodes"] == {"builtin": 7}


def test_builtin_kernels_without_xnnpack():
    result = pl.litert_placement(str(INT8), xnnpack=False)
    assert result["providers_requested"] == [] and result["partitions"] == {}
    assert result["by_provider"]["builtin"]["nodes"] == result["nodes"] == 7
    assert result["fallback"] is None
    assert "built-in CPU kernels 7 nodes" in pl.describe(result)


def test_xnnpack_leaves_cumsum_to_the_builtin_kernels():
    result = pl.litert_placement(str(PARTIAL))
    assert result["partitions"] == {"XNNPACK": 2}    # one before CUMSUM, one after
    assert result["by_provider"]["builtin"]["op_types"] == {"CUMSUM": 1}
    assert result["by_provider"]["XNNPACK"]["nodes"] == 4
    assert result["fallback"]["op_types"] == {"CUMSUM": 1}
    assert 0 < result["fallback"]["flops_share"] < 0.05
    _shares_sum_to_one(result)
    assert "fallback 1 node (CUMSUM)" in pl.describe(result)


def test_delegate_nodes_present_before_allocation_belong_to_the_external_delegate():
    """A -> B -> C: an external delegate (applied when the interpreter is built) took A and
    B, XNNPACK (applied at allocate_tensors) took C."""
    ops = [{"index": 0, "op_name": "CONV_2D", "inputs": [0, 10], "outputs": [1]},
           {"index": 1, "op_name": "ADD", "inputs": [1, 11], "outputs": [2]},
           {"index": 2, "op_name": "CUMSUM", "inputs": [2, 12], "outputs": [3]},
           {"index": 3, "op_name": "DELEGATE", "inputs": [0, 10, 11], "outputs": [2]},
           {"index": 4, "op_name": "DELEGATE", "inputs": [2, 12], "outputs": [3]}]
    owner = pl._delegated(ops, external_until=4, external="libedgetpu.so.1")
    assert owner == {0: "libedgetpu.so.1", 1: "libedgetpu.so.1", 2: "XNNPACK"}


def test_bench_placement_json_and_line(capsys, cnn_onnx):
    code = bench_main([str(PARTIAL), "--runs", "3", "--warmup", "1", "--meter", "none",
                       "--placement", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["placement"]["fallback"]["op_types"] == {"CUMSUM": 1}
    assert result["runs"] == 3

    assert bench_main([cnn_onnx, "--runs", "3", "--warmup", "1", "--meter", "none"]) == 0
    assert "placement" not in capsys.readouterr().out
    assert bench_main([cnn_onnx, "--runs", "3", "--warmup", "1", "--meter", "none",
                       "--placement"]) == 0
    assert "placement   CPUExecutionProvider" in capsys.readouterr().out
