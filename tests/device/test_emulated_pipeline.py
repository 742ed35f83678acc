"""The whole pipeline with an (emulated) Raspberry Pi as its SSH target: compress on this
machine, copy to the arm64 device, measure there with the device's own Python (no torch,
only the device extra), fetch the JSON, clean up. The timings are emulation: they are
labelled so and never pass a budget."""
from __future__ import annotations

import json

import pytest

from tests.conftest import pipeline_dict, run_cli, write_pipeline

pytestmark = [pytest.mark.slow, pytest.mark.emulated]

STAGES = [{"type": "export.onnx"}, {"type": "quantize", "scheme": "int8-static"},
          {"type": "export.tflite", "input": "source"},
          {"type": "benchmark", "warmup": 2, "runs": 10, "rounds": 1}]


def test_pipeline_measures_on_the_emulated_pi(project, emulated_pi):
    workdir = "/var/tmp"
    target = {"profile": "rpi4", "name": "pi", "ssh": emulated_pi.address,
              "identity": str(emulated_pi.identity),
              "known_hosts": str(emulated_pi.known_hosts), "python": emulated_pi.python,
              "workdir": workdir, "connect_timeout_s": 60}
    path = write_pipeline(project, pipeline_dict(targets=[target], stages=STAGES))
    child = run_cli("run", path, cwd=project)
    assert child.returncode == 0, child.stderr + child.stdout
    report = json.loads((project / "runs" / "t" / "report.json").read_text())
    benches = report["benchmarks"]
    # rpi4 runs LiteRT only: the full-int8 TFLite export (its profile's mode), beside its
    # baseline, the source's FP32 TFLite export
    assert [(b["artifact"], b["format"]) for b in benches] == [("baseline-tflite", "tflite"),
                                                               ("03-export.tflite", "tflite")]
    for bench in benches:
        assert bench["measured_on"]["arch"] == "aarch64"
        assert bench["emulated"]  # an Arm userland on this x86 CPU
        assert bench["torch_loaded"] is False
        assert bench["remote"]["host"] == emulated_pi.address
        assert bench["metric"]["value"] > 0.9
        # LiteRT's settings hold on arm64: the threads asked for (the profile's 4, capped at
        # the device's cores), XNNPACK on, and XNNPACK taking every node, the int8 file's
        # on its int8 paths
        runtime, placement = bench["runtime"], bench["placement"]
        assert runtime["threads"] == min(4, bench["measured_on"]["cores"])
        assert runtime["xnnpack"] and runtime["xnnpack_applied"]
        assert placement["fallback"]["nodes"] == 0
        assert placement["by_provider"]["XNNPACK"]["nodes"] == placement["nodes"]
    int8 = benches[1]["placement"]
    assert int8["int8_nodes"] == {"XNNPACK": int8["nodes"]}
    assert benches[0]["placement"]["int8_nodes"] == {}
    # the file's size and its fidelity floor are the same on any machine: judged here too
    same_everywhere = ("model_size_mb", "output_sqnr_db")
    assert all(v["status"] == "pass" for v in report["verdicts"]
               if v["metric"] == "output_sqnr_db")
    device_verdicts = [v for v in report["verdicts"] if v["metric"] not in same_everywhere]
    assert device_verdicts and all(v["status"] in ("off-target", "unmeasured")
                                   for v in device_verdicts)
    assert any("emulation" in v["reason"] for v in device_verdicts)
    text = (project / "runs" / "t" / "report.md").read_text()
    assert "Emulated" in text and "never checked against its budget" in text
    leftover = emulated_pi.ssh(f"ls {workdir} | grep -c edge-compress- || true")
    assert leftover.stdout.strip() == "0"  # the device keeps nothing
