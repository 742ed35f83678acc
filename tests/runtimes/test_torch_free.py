"""The device runner must import and run where torch does not exist."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.conftest import REPO

# Make `import torch` fail inside the child, as on a Raspberry Pi with only the device extra.
BLOCK_TORCH = textwrap.dedent("""
    import sys
    class _NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError("torch is not installed on this device")
    sys.meta_path.insert(0, _NoTorch())
""")


def _run_child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_TORCH + code], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_runtimes_imports_without_torch():
    child = _run_child("import runtimes, runtimes.bench, runtimes.meters; "
                       "print('torch' in sys.modules)")
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "False"


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory):
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    path = tmp_path_factory.mktemp("onnx") / "mlp.onnx"
    torch.onnx.export(model.eval(), (torch.randn(1, 6),), str(path), input_names=["x"],
                      dynamo=False)
    x = np.random.default_rng(0).standard_normal((20, 6)).astype(np.float32)
    with torch.no_grad():
        reference = model(torch.from_numpy(x)).numpy()
    inputs = path.parent / "inputs.npz"
    np.savez(inputs, x=x, __reference__=reference)
    return path, inputs


def test_bench_cli_measures_and_evaluates_without_torch(tiny_onnx):
    model, inputs = tiny_onnx
    child = _run_child(f"from runtimes.bench import main; sys.exit(main(["
                       f"'{model}', '--inputs', '{inputs}', '--runs', '15', '--json', "
                       f"'--meter', 'none']))")
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
    assert result["torch_loaded"] is False
    assert result["runs"] == 15 and result["latency_ms"]["p50"] > 0
    # three outputs of an untrained layer are no class scores: cosine judges them
    assert result["metric"]["name"] == "cosine"
    assert [j["metric"] for j in result["metric"]["details"]["judges"].values()] == ["cosine"]
    assert result["metric"]["details"]["max_abs_error"] < 1e-4
    assert result["metric"]["samples"] == 20
    assert result["energy_mj"] is None and "turned off" in result["energy_note"]


def test_bench_cli_rejects_a_wrong_input_shape(tiny_onnx, tmp_path):
    model, _ = tiny_onnx
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros((1, 7), np.float32))
    child = subprocess.run([sys.executable, "-m", "runtimes", "bench", str(model),
                            "--inputs", str(bad)], cwd=REPO, capture_output=True, text=True)
    assert child.returncode == 2
    assert "input 'x' has shape (1, 7)" in child.stderr and "Traceback" not in child.stderr


def test_bench_cli_rejects_a_corrupt_model(tmp_path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"\x08\x07garbage")
    child = subprocess.run([sys.executable, "-m", "runtimes", "bench", str(broken)],
                           cwd=REPO, capture_output=True, text=True)
    assert child.returncode == 2
    assert "cannot load" in child.stderr and "Traceback" not in child.stderr


@pytest.mark.parametrize("library", ["libedgetpu.so.1", "/etc/hostname"])
def test_bench_cli_names_a_delegate_that_cannot_be_loaded(library):
    pytest.importorskip("ai_edge_litert")
    model = REPO / "tests" / "fixtures" / "digits_cnn_int8.tflite"
    child = subprocess.run([sys.executable, "-m", "runtimes", "bench", str(model),
                            "--delegate", library], cwd=REPO, capture_output=True, text=True)
    assert child.returncode == 3, child.stderr  # unavailable here: never a CPU run instead
    assert f"the LiteRT delegate '{library}' cannot be loaded" in child.stderr
    assert "Traceback" not in child.stderr
