"""examples/search/ray.yaml on a local Ray instance and serially: the same files for a
real model (EfficientNet-Lite0) where thread counts could change the bytes: a Ray task's
OMP_NUM_THREADS is Ray's own unless the executor sets it, and numpy's BLAS and torch sum
in an order that follows it (int8-static's refinements). The TFLite stage is left out:
its converter calibrates with os.cpu_count() threads wherever it runs (export/tflite.py),
and its two conversions (the INT8 file and the FP32 baseline the benchmark adds) were
two thirds of the test's time. Its own module, so it runs beside the other Ray tests (a
whole search twice: `make test-runs`)."""
import json
import subprocess
import sys

import pytest

pytest.importorskip("ray")
pytestmark = pytest.mark.runs


def test_the_search_example_on_ray_makes_the_serial_files(tmp_path):
    """examples/search/ray.yaml reduced to one trial (int8-static ONNX) and 32
    calibration samples: the refinements still run whole."""
    import yaml

    from tests.conftest import REPO
    example = REPO / "examples" / "search"
    data = yaml.safe_load((example / "ray.yaml").read_text())
    data["search"]["space"] = {"prune": [False], "quantize.scheme": ["int8-static"],
                               "quantize.calibration": ["minmax"]}
    data["stages"] = [s for s in data["stages"] if s["type"] != "export.tflite"]
    for stage in data["stages"]:
        if "samples" in stage:
            stage["samples"] = 32
    data["stages"][-1].update(warmup=1, runs=3, rounds=1)
    data["executor"]["num_cpus"] = 2
    path = example / f".ray-test-{tmp_path.name}.yaml"   # beside its model and data code
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    files = {}
    try:
        for executor in ("local", "ray"):
            child = subprocess.run([sys.executable, "-m", "compress", "run", str(path),
                                    "--output", str(tmp_path / executor), "--executor",
                                    executor, "--quiet"], capture_output=True, text=True,
                                   timeout=600)
            assert child.returncode in (0, 1), child.stderr[-3000:]
            report = json.loads(next((tmp_path / executor).glob("*/report.json")).read_text())
            files[executor] = {a["id"]: a["sha256"] for a in report["artifacts"]}
    finally:
        path.unlink()
    # the source, its ONNX export and the INT8 file (prune: False leaves that stage out)
    assert files["ray"] == files["local"] and len(files["local"]) == 3, files["local"]
