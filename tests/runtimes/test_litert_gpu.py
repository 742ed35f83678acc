"""LiteRT's GPU accelerator (`delegate: gpu`). The session's own code (tensor buffers,
quantized inputs and outputs, another batch size) is checked through the same CompiledModel
API on the CPU accelerator, which every machine has; the GPU itself is used where LiteRT
finds one, and everywhere else must be 'unavailable' (exit code 3), never a CPU run."""
import json
import subprocess
import sys

import numpy as np
import pytest

from runtimes.errors import ProviderUnavailable, RuntimeInputError
from runtimes.litert_compiled import GPU_LABEL, CompiledSession
from runtimes.metrics import accuracy
from tests.conftest import REPO
from tests.runtimes.test_litert import FP32, INT8, _predict, held_out  # noqa: F401 (fixture)

pytest.importorskip("ai_edge_litert.compiled_model",
                    reason="LiteRT's CompiledModel API needs ai-edge-litert 2.x")


def _gpu_here() -> bool:
    try:
        CompiledSession(str(FP32)).close()
    except ProviderUnavailable:
        return False
    return True


def _bench(*args):
    return subprocess.run([sys.executable, "-m", "runtimes", "bench", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("path", [FP32, INT8], ids=["fp32", "int8-io"])
def test_the_compiled_model_session_matches_the_interpreter(path, held_out):  # noqa: F811
    from runtimes import load
    images, labels = held_out
    with CompiledSession(str(path), threads=2, accelerator="cpu") as compiled, \
            load(str(path), threads=2) as interpreter:
        assert compiled.inputs == interpreter.inputs   # float in, also for int8 inputs
        assert compiled.describe()["quantized_io"] == interpreter.describe()["quantized_io"]
        ours, theirs = _predict(compiled, images[:64]), _predict(interpreter, images[:64])
        assert ours.dtype == np.float32
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
        assert accuracy(_predict(compiled, images), labels) >= 0.97


def test_a_batch_the_model_cannot_take_is_a_clear_error():
    with CompiledSession(str(FP32), accelerator="cpu") as session:
        name = session.inputs[0].name
        with pytest.raises(RuntimeInputError, match=r"shape \(4, 1, 8, 8\).*export it"):
            session.run({name: np.zeros((4, 1, 8, 8), np.float32)})


def test_without_a_gpu_the_accelerator_is_unavailable_not_a_cpu_run():
    if _gpu_here():
        pytest.skip("LiteRT found a GPU here: the accelerator is measured")
    with pytest.raises(ProviderUnavailable, match="LiteRT GPU accelerator cannot compile"):
        CompiledSession(str(FP32))
    child = _bench(FP32, "--delegate", "gpu", "--runs", "3", "--json", "--meter", "none")
    assert child.returncode == 3, child.stderr
    assert "LiteRT GPU accelerator" in child.stderr and "Vulkan" in child.stderr
    assert "Traceback" not in child.stderr and child.stdout == ""


def test_where_there_is_a_gpu_it_runs_the_model_and_says_what_it_took():
    if not _gpu_here():
        pytest.skip("no GPU that LiteRT's WebGPU accelerator accepts on this machine")
    child = _bench(FP32, "--delegate", "gpu", "--runs", "20", "--json", "--meter", "none",
                   "--placement")
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
    assert result["runtime"]["delegate"] == "gpu"
    placement = result["placement"]
    assert placement["providers_requested"] == [GPU_LABEL]
    assert placement["fully_accelerated"] is result["runtime"]["fully_accelerated"]


def test_gpu_options_are_checked_before_anything_runs():
    child = _bench(FP32, "--delegate", "gpu", "--delegate-option", "enforce_fp32=true",
                   "--runs", "3", "--meter", "none")
    assert child.returncode == 2
    assert "no option 'enforce_fp32'" in child.stderr and "enforce_f32" in child.stderr
    child = _bench(FP32, "--delegate", "gpu", "--delegate-option", "enforce_f32=maybe",
                   "--runs", "3", "--meter", "none")
    assert child.returncode == 2 and "give true or false" in child.stderr
    child = _bench(FP32, "--delegate-option", "device=usb:0", "--runs", "3", "--meter", "none")
    assert child.returncode == 2 and "needs a --delegate" in child.stderr


@pytest.mark.parametrize("full", [True, False], ids=["whole-model", "split"])
def test_gpu_placement_reports_what_litert_says_and_no_more(full):
    """Given the compiled model's is_fully_accelerated (as the benchmark passes it on):
    all nodes on the GPU, or a split LiteRT does not report, never a guessed one."""
    from runtimes.placement import describe, litert_gpu_placement
    result = litert_gpu_placement(str(FP32), fully_accelerated=full)
    assert result["nodes"] == 7 and result["fully_accelerated"] is full
    (where, group), = result["by_provider"].items()
    assert group["nodes"] == 7 and group["flops_share"] == 1.0
    if full:
        assert where == GPU_LABEL and result["fallback"]["nodes"] == 0
        assert describe(result).endswith("no fallback (FLOPs estimated)")
    else:
        assert where != GPU_LABEL and result["fallback"] is None
        assert "which ones is not reported" in describe(result)


def test_the_profile_checks_the_options_this_litert_has():
    """profiles/ keeps its own list (a profile loads without LiteRT installed): it must be
    the installed GpuOptions' fields."""
    from profiles.providers import LITERT_GPU_OPTIONS
    from runtimes.litert_compiled import gpu_option_names
    assert set(LITERT_GPU_OPTIONS) == set(gpu_option_names())
