"""`python -m runtimes bench` end to end with a power meter, run conditions and --cpus."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from runtimes.cpus import available_cpus, format_cpus
from tests.conftest import REPO
from tests.runtimes import power_fakes as fakes


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory):
    """x[1, 6] @ W[6, 3]: a model small enough to build without torch."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    weights = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(weights, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    onnx.save(model, str(path))
    return path


def _bench(*args, env=None):
    return subprocess.run([sys.executable, "-m", "runtimes", "bench", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_bench_reports_power_energy_and_conditions_of_a_jetson(tiny_onnx, tmp_path):
    bin_dir = tmp_path / "bin"
    fakes.install_tegrastats(bin_dir)
    fakes.install(bin_dir, "nvpmodel", fakes.NVPMODEL)
    root = fakes.copy_tree("jetson-orin-nano", tmp_path / "root", kind=fakes.CONDITIONS)
    # tegrastats starts three times: the probe, the idle baseline (3 W), the window (7 W)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "EDGE_COMPRESS_SYSFS_ROOT": str(root), "FAKE_TEGRASTATS_IDLE_STARTS": "2"}
    child = _bench(tiny_onnx, "--meter", "tegrastats", "--meter-interval-ms", 20,
                   "--idle-seconds", 0.3, "--runs", 5, "--seconds", 0.5, "--json", env=env)
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
    power = result["power"]
    assert power["meter"] == "tegrastats" and power["detail"].startswith("tegrastats rail VDD_IN")
    assert power["idle_w"] == pytest.approx(3.0) and power["mean_w"] == pytest.approx(7.0)
    assert power["samples"] >= 2 and power["sample_rate_hz"] > 0
    inferences = result["runs"] * result["batch_size"]
    assert result["energy_mj"] == pytest.approx(
        power["active_w"] * power["window_s"] / inferences * 1000)
    assert result["energy_note"] is None
    assert power["window_s"] >= result["window_s"]  # the meter's window holds the timed one
    conditions = result["conditions"]
    assert conditions["before"]["nvpmodel"] == {"mode": "MAXN", "id": 0}
    assert conditions["after"]["jetson_clocks"]["on"] is True
    assert conditions["warnings"] == []
    assert conditions["cpu_affinity"] == available_cpus()


def test_bench_prints_the_meter_for_a_person(tiny_onnx, tmp_path):
    bin_dir = tmp_path / "bin"
    script = fakes.install_watts(bin_dir)
    child = _bench(tiny_onnx, "--meter-command", script, "--meter-interval-ms", 20,
                   "--idle-seconds", 0, "--runs", 5, "--seconds", 0.2,
                   env={"EDGE_COMPRESS_SYSFS_ROOT": str(tmp_path / "empty")})
    assert child.returncode == 0, child.stderr
    assert "mJ/inference (net of idle)" in child.stdout
    assert "power       mean 2.000 W  idle 0.000 W  active 2.000 W" in child.stdout
    assert "meter       command: command `usb-meter`" in child.stdout and "samples/s" in child.stdout
    assert "no idle baseline (idle seconds 0)" in child.stdout


def test_bench_without_a_meter_keeps_the_reason(tiny_onnx, tmp_path):
    child = _bench(tiny_onnx, "--meter", "none", "--runs", 3, "--json")
    result = json.loads(child.stdout)
    assert result["energy_mj"] is None and result["power"] is None
    assert result["energy_note"] == "power metering turned off"


def test_bench_names_a_missing_meter_without_a_traceback(tiny_onnx, tmp_path):
    child = _bench(tiny_onnx, "--meter", "rapl", env={"EDGE_COMPRESS_SYSFS_ROOT": str(tmp_path)})
    assert child.returncode == 2
    assert "meter 'rapl' named but /sys/class/powercap/intel-rapl:* does not exist" in child.stderr
    assert "Traceback" not in child.stderr


def test_bench_pins_the_process_to_the_cpus_given(tiny_onnx):
    cpu = available_cpus()[-1]
    child = _bench(tiny_onnx, "--cpus", cpu, "--meter", "none", "--runs", 3, "--json")
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout)["conditions"]["cpu_affinity"] == [cpu]
    missing = max(available_cpus()) + 64
    child = _bench(tiny_onnx, "--cpus", f"0,{missing}", "--meter", "none")
    assert child.returncode == 2
    assert f"CPU {missing}, which this host does not have" in child.stderr
    assert f"the CPUs available are {format_cpus(available_cpus())}" in child.stderr
    assert "Traceback" not in child.stderr
