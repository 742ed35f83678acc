"""The device runner on an (emulated) Raspberry Pi, reached the way a remote target
reaches a real one: system OpenSSH, key auth, strict host key checking, models copied
with scp, `python -m runtimes bench` run by the device's venv python (no torch there)."""
from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.emulated]

FIXTURES = REPO / "tests" / "fixtures"
MODELS = ("mlp.onnx", "digits_cnn_fp32.tflite", "digits_cnn_int8.tflite")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny ONNX model exported on the host, and the TFLite fixtures."""
    torch = pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("pi-models")
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    torch.onnx.export(model.eval(), (torch.randn(1, 6),), str(folder / "mlp.onnx"),
                      input_names=["x"], dynamo=False)
    return [folder / "mlp.onnx", FIXTURES / "digits_cnn_fp32.tflite",
            FIXTURES / "digits_cnn_int8.tflite"]


@pytest.fixture(scope="module")
def remote_models(emulated_pi, models) -> str:
    made = emulated_pi.ssh("mktemp -d /tmp/models.XXXXXX")
    assert made.returncode == 0, made.stderr
    remote_dir = made.stdout.strip()
    copied = emulated_pi.copy_to(models, remote_dir)
    assert copied.returncode == 0, copied.stderr
    return remote_dir


def test_the_emulated_pi_is_aarch64_without_torch_and_checks_its_host_key(emulated_pi, tmp_path):
    probe = emulated_pi.ssh(f"uname -m; {emulated_pi.python} -c 'import torch'")
    assert probe.stdout.split() == ["aarch64"]
    assert probe.returncode != 0 and "No module named 'torch'" in probe.stderr
    # strict host key checking: a known_hosts without this host's key refuses to connect
    stranger = tmp_path / "known_hosts"
    stranger.write_text("")
    options = [o.replace(str(emulated_pi.known_hosts), str(stranger))
               for o in emulated_pi.ssh_options()]
    refused = subprocess.run(["ssh", *options, "-p", str(emulated_pi.port),
                              f"{emulated_pi.user}@{emulated_pi.host}", "true"],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 255
    assert "Host key verification failed" in refused.stderr


@pytest.mark.parametrize("name", MODELS)
def test_bench_runs_on_the_emulated_pi(emulated_pi, remote_models, name):
    command = (f"cd / && {emulated_pi.python} -m runtimes bench "
               f"{shlex.quote(remote_models + '/' + name)} --json --runs 5")
    done = emulated_pi.ssh(command)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["measured_on"]["arch"] == "aarch64"
    assert result["torch_loaded"] is False
    assert result["runs"] >= 5
    assert result["latency_ms"]["p50"] > 0


def test_the_xnnpack_weight_cache_on_a_pi_4_is_unmeasured_not_a_crash(emulated_pi, remote_models):
    """ai-edge-litert 2.3's CompiledModel runtime (the only way to XNNPACK's weight cache)
    is built with the ARMv8.1 LSE atomics, which the Pi 4's Cortex-A72 lacks: run there, it
    killed the process with SIGILL (exit 132). The runner now says why and exits 3
    (unmeasured), while the same model without the cache is measured."""
    model = shlex.quote(remote_models + "/digits_cnn_int8.tflite")
    cache = shlex.quote(remote_models + "/xnnpack-cache")
    bench = f"cd / && {emulated_pi.python} -m runtimes bench {model} --json --runs 3"
    refused = emulated_pi.ssh(f"{bench} --xnnpack-weight-cache {cache}")
    assert refused.returncode == 3, refused.stderr
    assert "LSE atomics" in refused.stderr and "Traceback" not in refused.stderr
    measured = emulated_pi.ssh(bench)
    assert measured.returncode == 0 and json.loads(measured.stdout)["runtime"]["xnnpack_applied"]
