"""onnxruntime execution providers in the runner: an accelerator that is not on the
machine is 'unavailable' (exit code 3), never a silent run on the CPU."""
import json
import subprocess
import sys

import pytest

from runtimes.errors import ProviderUnavailable
from runtimes.onnx_session import OnnxRuntimeSession, _provider_lists, check_available
from tests.conftest import REPO


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory):
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU())
    path = tmp_path_factory.mktemp("providers") / "mlp.onnx"
    torch.onnx.export(model.eval(), (torch.randn(1, 6),), str(path), input_names=["x"],
                      dynamo=False)
    return path


def _bench(*args):
    return subprocess.run([sys.executable, "-m", "runtimes", "bench", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def test_provider_options_become_strings_and_the_cpu_provider_comes_last(tmp_path):
    names, options = _provider_lists([
        ("TensorrtExecutionProvider", {"trt_fp16_enable": True, "trt_max_workspace_size": 2**30,
                                       "trt_engine_cache_path": "~/trt-cache"}),
        "CUDAExecutionProvider"])
    assert names == ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert options[0]["trt_fp16_enable"] == "1"
    assert options[0]["trt_max_workspace_size"] == str(2**30)
    assert not options[0]["trt_engine_cache_path"].startswith("~")
    assert options[1:] == [{}, {}]


def test_a_missing_provider_is_unavailable_not_a_cpu_run(tiny_onnx):
    with pytest.raises(ProviderUnavailable, match="CUDAExecutionProvider is not available"):
        check_available(["CUDAExecutionProvider", "CPUExecutionProvider"],
                        ["CPUExecutionProvider"])
    import onnxruntime
    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has CUDA: nothing is missing here")
    with pytest.raises(ProviderUnavailable):
        OnnxRuntimeSession(str(tiny_onnx), providers=["CUDAExecutionProvider"])
    child = _bench(tiny_onnx, "--provider", "CUDAExecutionProvider", "--runs", "3", "--json")
    assert child.returncode == 3, child.stderr
    assert "CUDAExecutionProvider is not available" in child.stderr
    assert "Traceback" not in child.stderr and child.stdout == ""
    # a GPU's meter is missing where the GPU is: the provider is the reason, not the meter
    child = _bench(tiny_onnx, "--provider", "CUDAExecutionProvider", "--meter", "nvml",
                   "--runs", "3")
    assert child.returncode == 3 and "CUDAExecutionProvider is not available" in child.stderr


def test_the_cpu_provider_named_explicitly_runs(tiny_onnx):
    child = _bench(tiny_onnx, "--provider", "CPUExecutionProvider", "--runs", "3", "--json",
                   "--meter", "none")
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout)["runtime"]["providers"] == ["CPUExecutionProvider"]


def test_a_malformed_provider_option_is_refused(tiny_onnx):
    child = _bench(tiny_onnx, "--provider", "CUDAExecutionProvider", "--provider-option",
                   "device_id=0")
    assert child.returncode == 2
    assert "write NAME:KEY=VALUE" in child.stderr


def test_cuda_provider_measures_where_a_gpu_exists(tiny_onnx):
    import onnxruntime
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        pytest.skip("no CUDA execution provider here (needs onnxruntime-gpu and an NVIDIA GPU)")
    child = _bench(tiny_onnx, "--provider", "CUDAExecutionProvider", "--runs", "20", "--json",
                   "--meter", "none")
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
    assert result["runtime"]["providers"][0] == "CUDAExecutionProvider"
