"""examples/search/ray.yaml on a local Ray instance and serially: the same files for a
real model (EfficientNet-Lite0) where thread counts could change the bytes (int8-static's
refinements, the TFLite converter). Its own module, so it runs beside the other Ray tests
(a whole search twice: `make test-runs`)."""
import json
import subprocess
import sys

import pytest

pytest.importorskip("ray")
pytestmark = pytest.mark.runs


def test_the_search_example_on_ray_makes_the_serial_files(tmp_path):
    """examples/search/ray.yaml reduced to one trial (int8-static ONNX and int8 TFLite)
    and 32 calibration samples: the refinements and the converter still run whole."""
    import yaml

    from tests.conftest import REPO
    example = REPO / "examples" / "search"
    data = yaml.safe_load((example / "ray.yaml").read_text())
    data["search"]["space"] = {"prune": [False], "quantize.scheme": ["int8-static"],
                               "quantize.calibration": ["minmax"], "tflite.mode": ["int8"]}
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
    assert files["ray"] == files["local"] and len(files["local"]) == 5
